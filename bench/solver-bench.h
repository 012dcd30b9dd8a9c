/* SPDX-License-Identifier: Apache-2.0 */
/* What bench/scheduling and bench/consolidate share: the shape of Karpenter's scheduling
 * benchmark (400 instance types, five pod groups), a seeded generator, a lower bound on cost.
 * Included by exactly one translation unit per program; BENCH_NAME names the program. */
#pragma once

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/solver/solver.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (MI * 1024)
#define N_TYPES 400

static const char *const zones[] = { "test-zone-a", "test-zone-b", "test-zone-c" };

typedef struct Bench {
        SolverArena *arena;
        SolverInstanceType types[N_TYPES];
        SolverNodePool pool;
} Bench;

static uint64_t rng_state;
static uint32_t rng(void) {
        /* xorshift64* */
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        return (uint32_t) ((rng_state * 2685821657736338717ULL) >> 32);
}

/* CPU time of this process: on a shared machine, what the load does not inflate. */
__attribute__((unused)) static double cpu_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void die(const char *what) {
        fprintf(stderr, "%s: %s\n", BENCH_NAME, what);
        exit(1);
}

static void make_catalog(Bench *b) {
        for (int i = 0; i < N_TYPES; i++) {
                SolverInstanceType *t = &b->types[i];
                int64_t vcpu = i + 1, gib = 2 * (i + 1);
                t->name = solver_arena_printf(b->arena, "fake-it-%d", i);
                SolverLabel *l = solver_arena_alloc(b->arena, 3 * sizeof(SolverLabel));
                l[0] = (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, t->name };
                l[1] = (SolverLabel) { SOLVER_LABEL_ARCH, "amd64" };
                l[2] = (SolverLabel) { SOLVER_LABEL_OS, "linux" };
                t->labels = l;
                t->n_labels = 3;
                t->capacity.v[SOLVER_RES_CPU] = vcpu * 1000;
                t->capacity.v[SOLVER_RES_MEMORY] = gib * GI;
                t->capacity.v[SOLVER_RES_PODS] = 10 * (i + 1);
                t->allocatable = t->capacity;
                t->allocatable.v[SOLVER_RES_CPU] -= 100;
                t->allocatable.v[SOLVER_RES_MEMORY] -= 10 * MI;
                double price = 0.1 * (double) vcpu + 0.1 * (double) gib;
                SolverOffering *o = solver_arena_alloc(b->arena, 5 * sizeof(SolverOffering));
                size_t n = 0;
                for (int z = 0; z < 2; z++)
                        o[n++] = (SolverOffering) { zones[z], SOLVER_CAPACITY_SPOT, price, true };
                for (int z = 0; z < 3; z++)
                        o[n++] = (SolverOffering) { zones[z], SOLVER_CAPACITY_ON_DEMAND, price, true };
                t->offerings = o;
                t->n_offerings = n;
        }
        b->pool = (SolverNodePool) { .name = "default" };
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                b->pool.limits.v[r] = -1;
}

enum { G_PLAIN, G_SPREAD_ZONE, G_SPREAD_HOST, G_AFFINITY_ZONE, G_ANTI_HOST, N_GROUPS };
static const char *const group_app[] = { "plain", "spread-zone", "spread-host", "affinity-zone", "anti-host" };

/* Pods; every group's selector matches its own pods (app=<group>). */
static SolverPod *make_pods(Bench *b, size_t count, uint64_t seed) {
        static const int64_t cpu[] = { 100, 250, 500, 1000, 1500 };
        static const int64_t mem[] = { 100, 256, 512, 1024, 2048, 4096 };
        rng_state = seed * 0x9E3779B97F4A7C15ULL + 1;
        SolverPod *pods = solver_arena_alloc(b->arena, (count + 1) * sizeof(SolverPod));
        SolverLabel *labels = solver_arena_alloc(b->arena, N_GROUPS * sizeof(SolverLabel));
        SolverLabelSelector *sel = solver_arena_alloc(b->arena, N_GROUPS * sizeof(SolverLabelSelector));
        SolverSpread *spread = solver_arena_alloc(b->arena, 2 * sizeof(SolverSpread));
        SolverPodAffinityTerm *aff = solver_arena_alloc(b->arena, 2 * sizeof(SolverPodAffinityTerm));
        if (!pods || !labels || !sel || !spread || !aff)
                die("out of memory");
        for (int g = 0; g < N_GROUPS; g++) {
                labels[g] = (SolverLabel) { "app", group_app[g] };
                sel[g] = (SolverLabelSelector) { .match_labels = &labels[g], .n_match_labels = 1 };
        }
        spread[0] = (SolverSpread) { SOLVER_LABEL_ZONE, 1, false, 0, sel[G_SPREAD_ZONE] };
        spread[1] = (SolverSpread) { SOLVER_LABEL_HOSTNAME, 1, false, 0, sel[G_SPREAD_HOST] };
        aff[0] = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_ZONE, .selector = sel[G_AFFINITY_ZONE] };
        aff[1] = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = sel[G_ANTI_HOST] };

        size_t per = count / N_GROUPS;
        for (size_t i = 0; i < count; i++) {
                int g = (int) (i / (per ? per : 1));
                if (per == 0 || g >= N_GROUPS)
                        g = G_PLAIN; /* remainder: plain pods */
                SolverPod *p = &pods[i];
                p->name = solver_arena_printf(b->arena, "%s-%zu", group_app[g], i);
                p->namespace_ = "default";
                p->labels = &labels[g];
                p->n_labels = 1;
                p->requests.v[SOLVER_RES_CPU] = cpu[rng() % 5];
                p->requests.v[SOLVER_RES_MEMORY] = mem[rng() % 6] * MI;
                p->requests.v[SOLVER_RES_PODS] = 1;
                switch (g) {
                case G_SPREAD_ZONE:
                        p->spreads = &spread[0];
                        p->n_spreads = 1;
                        break;
                case G_SPREAD_HOST:
                        p->spreads = &spread[1];
                        p->n_spreads = 1;
                        break;
                case G_AFFINITY_ZONE:
                        p->affinity = &aff[0];
                        p->n_affinity = 1;
                        break;
                case G_ANTI_HOST:
                        p->anti_affinity = &aff[1];
                        p->n_anti_affinity = 1;
                        break;
                }
        }
        return pods;
}

/* Weighted-volume lower bound on the cost of capacity for the pods: for any weights w >= 0,
 * every plan buys sum_t x_t * (w . alloc_t) >= w . demand, so it costs at least
 * (w . demand) * min_t price_t / (w . alloc_t). The best w on a grid over (cpu, memory, pods)
 * approaches the LP relaxation (the LP dual restricted to these directions). */
static double lower_bound(const Bench *b, const SolverPod *pods, size_t n) {
        double D[3] = {};
        for (size_t i = 0; i < n; i++) {
                D[0] += (double) pods[i].requests.v[SOLVER_RES_CPU];
                D[1] += (double) pods[i].requests.v[SOLVER_RES_MEMORY];
                D[2] += 1;
        }
        double best = 0;
        const int G = 40;
        for (int a = 0; a <= G; a++)
                for (int c = 0; a + c <= G; c++) {
                        double w[3] = { (double) a / G, (double) c / G, (double) (G - a - c) / G };
                        double wd = w[0] + w[1] + w[2]; /* demand normalised to 1 per resource */
                        double m = INFINITY;
                        for (int t = 0; t < N_TYPES; t++) {
                                const SolverInstanceType *it = &b->types[t];
                                double cap = w[0] * (double) it->allocatable.v[SOLVER_RES_CPU] / D[0] +
                                             w[1] * (double) it->allocatable.v[SOLVER_RES_MEMORY] / D[1] +
                                             w[2] * (double) it->allocatable.v[SOLVER_RES_PODS] / D[2];
                                double price = it->offerings[0].price;
                                for (size_t o = 1; o < it->n_offerings; o++)
                                        price = fmin(price, it->offerings[o].price);
                                if (cap > 0)
                                        m = fmin(m, price / cap);
                        }
                        if (isfinite(m))
                                best = fmax(best, wd * m);
                }
        return best;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

