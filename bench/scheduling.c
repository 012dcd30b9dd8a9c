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
 * first plan of each size is checked outside the solver, plan-verify.h), and the peak RSS.
 * Consolidation has its own benchmark, bench/consolidate.
 *
 * --pods-from FILE plans the pods of FILE (pods-file.h) instead, one size: bench_karpenter.py
 * hands it the pods Karpenter's own benchmark generated, so both plan the very same pods.
 *
 *   scheduling [--max N] [--runs N] [--seed N] [--verbose]
 *   scheduling --pods-from FILE [--runs N] [--verbose]
 */

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BENCH_NAME "scheduling"
#include "solver-bench.h"
#include "pods-file.h"
#include "plan-verify.h"

typedef struct Outcome {
        double seconds;
        double cpu_seconds; /* this process's CPU time: what the machine's load does not inflate */
        size_t nodes, unschedulable, placed;
        double cost;
        double util_cpu, util_mem; /* requested / allocatable of the chosen types */
        double round_waste, imbalance; /* vCPU-equivalents: slack in both, slack in one */
        int hist[N_TYPES];
} Outcome;

static Outcome run_once(Bench *b, SolverPod *pods, size_t n, bool check) {
        SolverSnapshot snap = { .types = b->types, .n_types = N_TYPES, .nodepools = &b->pool,
                                .n_nodepools = 1, .pods = pods, .n_pods = n };
        Outcome o = {};
        double t0 = now_s(), c0 = cpu_s();
        Solver *s = NULL;
        char *err = NULL;
        if (solver_new(&snap, &s, &err) < 0)
                die(err ? err : "solver_new failed");
        SolverOptions opts = SOLVER_OPTIONS_DEFAULT;
        SolverResult *res = NULL;
        if (solver_provision(s, &opts, &res) < 0)
                die("solver_provision failed");
        o.seconds = now_s() - t0;
        o.cpu_seconds = cpu_s() - c0;
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

int main(int argc, char **argv) {
        static const size_t sizes[] = { 1, 50, 100, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000 };
        size_t max = 20000;
        int runs = 0;
        uint64_t seed = 42;
        bool verbose = false;
        const char *pods_from = NULL;
        bool generator_opts = false; /* --max or --seed: the bench's own pods only */
        static const struct option longopts[] = {
                { "pods-from", required_argument, NULL, 'p' },
                { "verbose", no_argument, NULL, 'v' },
                { "max", required_argument, NULL, 'm' },
                { "runs", required_argument, NULL, 'r' },
                { "seed", required_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
                switch (c) {
                case 'm':
                        max = strtoul(optarg, NULL, 10);
                        generator_opts = true;
                        break;
                case 'r':
                        runs = atoi(optarg);
                        break;
                case 's':
                        seed = strtoull(optarg, NULL, 10);
                        generator_opts = true;
                        break;
                case 'v':
                        verbose = true;
                        break;
                case 'p':
                        pods_from = optarg;
                        break;
                default:
                        printf("usage: %s [--max N] [--runs N] [--seed N] [--verbose]\n"
                               "       %s --pods-from FILE [--runs N] [--verbose]\n", argv[0], argv[0]);
                        return c == 'h' ? 0 : 2;
                }
        }
        if (optind < argc) {
                fprintf(stderr, "%s: unexpected argument \"%s\"\n", BENCH_NAME, argv[optind]);
                return 2;
        }
        if (pods_from && generator_opts) {
                fprintf(stderr, "%s: --max and --seed choose the bench's own pods; --pods-from takes them from a file\n",
                        BENCH_NAME);
                return 2;
        }
        Bench b = {};
        if (solver_arena_new(&b.arena) < 0)
                die("out of memory");
        make_catalog(&b);

        PodsFile file = {};
        if (pods_from) {
                pods_file_load(&b, pods_from, &file);
                printf("nodesmith solver: %d instance types, %zu pods from %s (%s, seed %" PRId64 "):", N_TYPES, file.n,
                       pods_from, file.source ? file.source : "source not given", file.seed);
                for (size_t k = 0; k < N_POD_KINDS; k++)
                        if (file.per_kind[k])
                                printf(" %s %zu", pod_kinds[k], file.per_kind[k]);
                printf(", one thread\n\n");
        } else
                printf("nodesmith solver: %d instance types, 5 pod groups (plain, zone spread, hostname spread, "
                       "zone affinity, hostname anti-affinity), seed %" PRIu64 ", one thread\n\n",
                       N_TYPES, seed);
        printf("%8s %10s %12s %8s %12s %12s %7s %7s %6s %6s %8s\n", "pods", "time(ms)", "pods/s", "nodes", "cost($/h)",
               "bound($/h)", "ratio", "unsched", "cpu%", "mem%", "cpu(ms)");
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                size_t n = pods_from ? file.n : sizes[i];
                if (pods_from ? i > 0 : n > max)
                        break;
                SolverPod *pods = pods_from ? file.pods : make_pods(&b, n, seed);
                int k = runs > 0 ? runs : n <= 1000 ? 21 : n <= 5000 ? 11 : 7;
                double *t = calloc((size_t) k, sizeof(double)), *ct = calloc((size_t) k, sizeof(double));
                Outcome first = {};
                for (int r = 0; r < k; r++) {
                        Outcome o = run_once(&b, pods, n, r == 0);
                        if (r == 0)
                                first = o;
                        else if (o.nodes != first.nodes || o.cost != first.cost)
                                die("non-deterministic result");
                        t[r] = o.seconds;
                        ct[r] = o.cpu_seconds;
                }
                qsort(t, (size_t) k, sizeof(double), cmp_double);
                qsort(ct, (size_t) k, sizeof(double), cmp_double);
                double med = t[k / 2], cpu_med = ct[k / 2];
                free(ct);
                double lb = lower_bound(&b, pods, n);
                printf("%8zu %10.2f %12.0f %8zu %12.2f %12.2f %7.3f %7zu %6.1f %6.1f %8.2f\n", n, med * 1e3, (double) n / med,
                       first.nodes, first.cost, lb, lb > 0 ? first.cost / lb : 0.0, first.unschedulable,
                       100 * first.util_cpu, 100 * first.util_mem, cpu_med * 1e3);
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

        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("\npeak RSS: %.1f MiB\n", (double) ru.ru_maxrss / 1024.0);
        solver_arena_free(b.arena);
        return 0;
}
