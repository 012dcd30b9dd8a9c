/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/scheduling: the shape of Karpenter's scheduling benchmark
 * (pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go), run against
 * nodesmith's solver.
 *
 *   400 instance types; type i has i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, costs
 *   0.1 x vCPU + 0.1 x GiB per hour, kube-reserved 100m and 10 Mi; offered as spot in two zones
 *   and on-demand in three. Pods in five equal groups: plain; zonal topology spread (maxSkew 1);
 *   hostname topology spread (maxSkew 1); zonal self-affinity; hostname self-anti-affinity.
 *   Requests: cpu from {100, 250, 500, 1000, 1500}m, memory from {100, 256, 512, 1024, 2048,
 *   4096}Mi, drawn from a seeded generator.
 *
 * For each size it prints the median wall time of solver_new() + solver_provision() on one
 * thread, pods/s, nodes, hourly cost, a lower bound on cost and the plan's ratio to it (the
 * first plan of each size is checked against the groups' rules outside the solver), then a
 * consolidation pass (1 000 nodes, 10 000 pods, every node removed in turn with at most one
 * replacement) and the peak RSS.
 *
 *   scheduling [--max N] [--runs N] [--seed N] [--no-consolidation] [--verbose]
 */

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void die(const char *what) {
        fprintf(stderr, "scheduling: %s\n", what);
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

typedef struct Outcome {
        double seconds;
        size_t nodes, unschedulable, placed;
        double cost;
        double util_cpu, util_mem; /* requested / allocatable of the chosen types */
        double round_waste, imbalance; /* vCPU-equivalents: slack in both, slack in one */
        int hist[N_TYPES];
} Outcome;

/* Checks the plan against the groups' rules, independently of the solver: every pod placed on
 * a node with room, at most one hostname-spread and one anti-affinity pod per node, zone
 * affinity in one zone, zone spread skew <= 1 over the zones used. */
static void verify(const Bench *b, const SolverPod *pods, size_t n, const SolverResult *res) {
        size_t *per_node[N_GROUPS];
        for (int g = 0; g < N_GROUPS; g++)
                per_node[g] = calloc(res->n_launches + 1, sizeof(size_t));
        size_t zone_count[3] = {};
        const char *aff_zone = NULL;
        for (size_t i = 0; i < n; i++) {
                const SolverDecision *d = &res->decisions[i];
                if (d->kind != SOLVER_DECISION_LAUNCH)
                        die("verify: a pod was not placed on a new node");
                const SolverLaunch *l = &res->launches[d->target];
                int g = 0;
                while (g < N_GROUPS && strcmp(pods[i].labels[0].value, group_app[g]) != 0)
                        g++;
                per_node[g][d->target]++;
                if (g == G_SPREAD_ZONE || g == G_AFFINITY_ZONE) {
                        if (!l->zone)
                                die("verify: a zonal pod's node has no zone");
                        if (g == G_SPREAD_ZONE)
                                zone_count[l->zone[10] - 'a']++;
                        else if (!aff_zone)
                                aff_zone = l->zone;
                        else if (strcmp(aff_zone, l->zone) != 0)
                                die("verify: zone affinity broken");
                }
        }
        for (size_t i = 0; i < res->n_launches; i++) {
                const SolverLaunch *l = &res->launches[i];
                if (per_node[G_SPREAD_HOST][i] > 1 || per_node[G_ANTI_HOST][i] > 1)
                        die("verify: hostname spread or anti-affinity broken");
                const SolverInstanceType *t = &b->types[l->type];
                for (int r = 0; r < _SOLVER_RES_MAX; r++)
                        if (l->requests.v[r] > t->allocatable.v[r])
                                die("verify: a node holds more than its type allows");
        }
        size_t zmin = SIZE_MAX, zmax = 0;
        for (int z = 0; z < 3; z++) {
                zmin = zone_count[z] < zmin ? zone_count[z] : zmin;
                zmax = zone_count[z] > zmax ? zone_count[z] : zmax;
        }
        if (zmax - zmin > 1)
                die("verify: zone spread skew above 1");
        for (int g = 0; g < N_GROUPS; g++)
                free(per_node[g]);
}

static Outcome run_once(Bench *b, SolverPod *pods, size_t n, bool check) {
        SolverSnapshot snap = { .types = b->types, .n_types = N_TYPES, .nodepools = &b->pool,
                                .n_nodepools = 1, .pods = pods, .n_pods = n };
        Outcome o = {};
        double t0 = now_s();
        Solver *s = NULL;
        char *err = NULL;
        if (solver_new(&snap, &s, &err) < 0)
                die(err ? err : "solver_new failed");
        SolverOptions opts = SOLVER_OPTIONS_DEFAULT;
        SolverResult *res = NULL;
        if (solver_provision(s, &opts, &res) < 0)
                die("solver_provision failed");
        o.seconds = now_s() - t0;
        if (check)
                verify(b, pods, n, res);
        o.nodes = res->n_launches;
        o.cost = res->total_price;
        o.unschedulable = res->n_unschedulable;
        o.placed = res->n_placed_new;
        double ac = 0, am = 0, uc = 0, um = 0;
        for (size_t i = 0; i < res->n_launches; i++) {
                const SolverLaunch *l = &res->launches[i];
                const SolverInstanceType *t = &b->types[l->type];
                ac += (double) t->allocatable.v[SOLVER_RES_CPU];
                am += (double) t->allocatable.v[SOLVER_RES_MEMORY];
                uc += (double) l->requests.v[SOLVER_RES_CPU];
                um += (double) l->requests.v[SOLVER_RES_MEMORY];
                o.hist[l->type]++;
                double sc = (double) (t->allocatable.v[SOLVER_RES_CPU] - l->requests.v[SOLVER_RES_CPU]) / 1000.0;
                double sm = (double) (t->allocatable.v[SOLVER_RES_MEMORY] - l->requests.v[SOLVER_RES_MEMORY]) /
                            (2.0 * (double) GI);
                o.round_waste += fmin(sc, sm);
                o.imbalance += fabs(sc - sm);
        }
        o.util_cpu = ac > 0 ? uc / ac : 0;
        o.util_mem = am > 0 ? um / am : 0;
        solver_result_free(res);
        solver_free(s);
        return o;
}

/* Consolidation: a cluster of `nodes` nodes holding `pods` pods; ask, for every node, whether
 * its pods fit on the others plus at most one new node. */
static void consolidation(Bench *b, size_t n_nodes, size_t n_pods, int runs) {
        SolverNode *nodes = solver_arena_alloc(b->arena, n_nodes * sizeof(SolverNode));
        SolverPod *pods = make_pods(b, n_pods, 7);
        const int type = 15; /* 16 vCPU, 32 GiB */
        for (size_t i = 0; i < n_nodes; i++) {
                SolverNode *n = &nodes[i];
                n->name = solver_arena_printf(b->arena, "node-%zu", i);
                n->nodepool = "default";
                n->instance_type = b->types[type].name;
                n->zone = zones[i % 3];
                n->capacity_type = SOLVER_CAPACITY_ON_DEMAND;
                n->allocatable = b->types[type].allocatable;
                n->price = b->types[type].offerings[0].price;
        }
        /* bind pods round-robin, respecting each group's rule loosely: the solver counts what
         * is there, it does not judge it */
        for (size_t i = 0; i < n_pods; i++) {
                pods[i].node_name = nodes[i % n_nodes].name;
                /* no anti-affinity owners on bound pods: they would pin everything */
                pods[i].anti_affinity = NULL;
                pods[i].n_anti_affinity = 0;
        }
        SolverSnapshot snap = { .types = b->types, .n_types = N_TYPES, .nodepools = &b->pool, .n_nodepools = 1,
                                .nodes = nodes, .n_nodes = n_nodes, .pods = pods, .n_pods = n_pods };
        double *t = calloc((size_t) runs, sizeof(double));
        size_t deletable = 0, replaceable = 0;
        for (int r = 0; r < runs; r++) {
                double t0 = now_s();
                Solver *s = NULL;
                char *err = NULL;
                if (solver_new(&snap, &s, &err) < 0)
                        die(err ? err : "solver_new failed");
                deletable = replaceable = 0;
                for (size_t i = 0; i < n_nodes; i++) {
                        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
                        o.remove_nodes = &i;
                        o.n_remove_nodes = 1;
                        o.max_new_nodes = 1;
                        o.skip_pending = true;
                        o.stop_at_first_failure = true;
                        SolverResult *res = NULL;
                        if (solver_provision(s, &o, &res) < 0)
                                die("solver_provision failed");
                        if (res->n_unschedulable == 0) {
                                if (res->n_launches == 0)
                                        deletable++;
                                else if (res->total_price < nodes[i].price)
                                        replaceable++;
                        }
                        solver_result_free(res);
                }
                solver_free(s);
                t[r] = now_s() - t0;
        }
        qsort(t, (size_t) runs, sizeof(double), cmp_double);
        printf("\nconsolidation: %zu nodes, %zu pods, %zu single-node removal simulations "
               "(at most one new node each): %.3f s median of %d (%.1f us per simulation); "
               "%zu deletable, %zu replaceable by a cheaper node\n",
               n_nodes, n_pods, n_nodes, t[runs / 2], runs, t[runs / 2] / (double) n_nodes * 1e6,
               deletable, replaceable);
        free(t);
}

int main(int argc, char **argv) {
        static const size_t sizes[] = { 1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000 };
        size_t max = 20000;
        int runs = 0;
        uint64_t seed = 42;
        bool cons = true, verbose = false;
        static const struct option longopts[] = {
                { "verbose", no_argument, NULL, 'v' },
                { "max", required_argument, NULL, 'm' },
                { "runs", required_argument, NULL, 'r' },
                { "seed", required_argument, NULL, 's' },
                { "no-consolidation", no_argument, NULL, 'C' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
                switch (c) {
                case 'm':
                        max = strtoul(optarg, NULL, 10);
                        break;
                case 'r':
                        runs = atoi(optarg);
                        break;
                case 's':
                        seed = strtoull(optarg, NULL, 10);
                        break;
                case 'C':
                        cons = false;
                        break;
                case 'v':
                        verbose = true;
                        break;
                default:
                        printf("usage: %s [--max N] [--runs N] [--seed N] [--no-consolidation] [--verbose]\n", argv[0]);
                        return c == 'h' ? 0 : 2;
                }
        }
        Bench b = {};
        if (solver_arena_new(&b.arena) < 0)
                die("out of memory");
        make_catalog(&b);

        printf("nodesmith solver: %d instance types, 5 pod groups (plain, zone spread, hostname spread, "
               "zone affinity, hostname anti-affinity), seed %" PRIu64 ", one thread\n\n",
               N_TYPES, seed);
        printf("%8s %10s %12s %8s %12s %12s %7s %7s %6s %6s\n", "pods", "time(ms)", "pods/s", "nodes", "cost($/h)",
               "bound($/h)", "ratio", "unsched", "cpu%", "mem%");
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                size_t n = sizes[i];
                if (n > max)
                        break;
                SolverPod *pods = make_pods(&b, n, seed);
                int k = runs > 0 ? runs : n <= 1000 ? 21 : n <= 5000 ? 11 : 7;
                double *t = calloc((size_t) k, sizeof(double));
                Outcome first = {};
                for (int r = 0; r < k; r++) {
                        Outcome o = run_once(&b, pods, n, r == 0);
                        if (r == 0)
                                first = o;
                        else if (o.nodes != first.nodes || o.cost != first.cost)
                                die("non-deterministic result");
                        t[r] = o.seconds;
                }
                qsort(t, (size_t) k, sizeof(double), cmp_double);
                double med = t[k / 2];
                double lb = lower_bound(&b, pods, n);
                printf("%8zu %10.2f %12.0f %8zu %12.2f %12.2f %7.3f %7zu %6.1f %6.1f\n", n, med * 1e3, (double) n / med,
                       first.nodes, first.cost, lb, lb > 0 ? first.cost / lb : 0.0, first.unschedulable,
                       100 * first.util_cpu, 100 * first.util_mem);
                if (verbose) {
                        printf("         node sizes (vCPU: count):");
                        for (int ty = 0; ty < N_TYPES; ty++)
                                if (first.hist[ty])
                                        printf(" %d:%d", ty + 1, first.hist[ty]);
                        printf("\n         waste (vCPU-eq): rounding %.0f, imbalance %.0f\n", first.round_waste,
                               first.imbalance);
                }
                fflush(stdout);
                free(t);
        }
        if (cons && max >= 10000)
                consolidation(&b, 1000, 10000, runs > 0 ? runs : 3);

        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("\npeak RSS: %.1f MiB\n", (double) ru.ru_maxrss / 1024.0);
        solver_arena_free(b.arena);
        return 0;
}
