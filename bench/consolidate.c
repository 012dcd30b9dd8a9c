/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench/consolidate: consolidation over a large, under-used cluster, with nodesmith's solver.
 *
 *   The catalog of bench/scheduling (400 types, i+1 vCPU, 2(i+1) GiB, $0.1 per vCPU and per
 *   GiB). 1 000 nodes of 16 vCPU / 32 GiB ($4.80/h) hold 10 000 pods (bench/scheduling's
 *   plain, zone-spread and zone-affinity groups, bound round-robin: about 40 % of the CPU).
 *
 * A pass is what the coordinator does each consolidation interval: compile the snapshot
 * (solver_new) and find the consolidation to make (solver_consolidate: multi-node first, the
 * largest prefix of the 100 cheapest-to-disrupt candidates by binary search, else single node,
 * delete or replace with one cheaper node; threshold 15 %). It prints the median time of the
 * first pass. Then it acts on each decision (the pods go where the placement put them, the new
 * node joins) and passes again until nothing is worth doing, and prints the passes, the nodes
 * and the cost at the end against a lower bound on the cost of any capacity for the pods.
 *
 *   consolidate [--nodes N] [--pods N] [--runs N] [--seed N] [--max-passes N]
 */

#include <getopt.h>
#include <sys/resource.h>

#define BENCH_NAME "consolidate"
#include "solver-bench.h"

#define NODE_TYPE 15 /* 16 vCPU, 32 GiB */

typedef struct Cluster {
        SolverNode *nodes;
        size_t n_nodes;
        SolverPod *pods;
        size_t n_pods;
} Cluster;

static Cluster make_cluster(Bench *b, size_t n_nodes, size_t n_pods, uint64_t seed) {
        Cluster c = { .n_nodes = n_nodes, .n_pods = n_pods };
        c.nodes = solver_arena_alloc(b->arena, (n_nodes + 1) * sizeof(SolverNode));
        c.pods = make_pods(b, n_pods, seed);
        if (!c.nodes)
                die("out of memory");
        const SolverInstanceType *t = &b->types[NODE_TYPE];
        for (size_t i = 0; i < n_nodes; i++)
                c.nodes[i] = (SolverNode) { .name = solver_arena_printf(b->arena, "node-%zu", i), .nodepool = "default",
                                            .instance_type = t->name, .zone = zones[i % 3],
                                            .capacity_type = SOLVER_CAPACITY_ON_DEMAND, .allocatable = t->allocatable,
                                            .price = t->offerings[0].price };
        /* hostname spread and anti-affinity pods become plain ones: bound round-robin they would
         * pin every node, which is not what a scaled-in cluster looks like */
        for (size_t i = 0; i < n_pods; i++) {
                SolverPod *p = &c.pods[i];
                p->node_name = c.nodes[i % n_nodes].name;
                if (p->n_anti_affinity || (p->n_spreads && strcmp(p->spreads[0].topology_key, SOLVER_LABEL_HOSTNAME) == 0)) {
                        p->anti_affinity = NULL;
                        p->n_anti_affinity = 0;
                        p->spreads = NULL;
                        p->n_spreads = 0;
                }
        }
        return c;
}

static double cluster_cost(const Cluster *c) {
        double s = 0;
        for (size_t i = 0; i < c->n_nodes; i++)
                s += c->nodes[i].price;
        return s;
}

static SolverSnapshot snapshot(Bench *b, const Cluster *c) {
        return (SolverSnapshot) { .types = b->types, .n_types = N_TYPES, .nodepools = &b->pool, .n_nodepools = 1,
                                  .nodes = c->nodes, .n_nodes = c->n_nodes, .pods = c->pods, .n_pods = c->n_pods };
}

/* One pass: compile and decide. */
static SolverConsolidation *pass(Bench *b, const Cluster *c, Solver **ret_solver, double *ret_seconds) {
        SolverSnapshot *snap = solver_arena_alloc(b->arena, sizeof *snap);
        size_t *cand = solver_arena_alloc(b->arena, (c->n_nodes + 1) * sizeof(size_t));
        if (!snap || !cand)
                die("out of memory");
        *snap = snapshot(b, c);
        for (size_t i = 0; i < c->n_nodes; i++)
                cand[i] = i;
        double t0 = now_s();
        Solver *s = NULL;
        char *err = NULL;
        if (solver_new(snap, &s, &err) < 0)
                die(err ? err : "solver_new failed");
        SolverConsolidateOptions o = { .candidates = cand, .n_candidates = c->n_nodes, .threshold = 0.15 };
        SolverConsolidation *res = NULL;
        if (solver_consolidate(s, &o, &res) < 0)
                die("solver_consolidate failed");
        *ret_seconds = now_s() - t0;
        *ret_solver = s;
        return res;
}

/* Acts on a decision: the removed nodes go, a replacement joins, every moved pod goes where the
 * placement put it. */
static Cluster apply(Bench *b, const Cluster *c, const SolverConsolidation *d, size_t pass_no) {
        Cluster n = { .pods = solver_arena_alloc(b->arena, (c->n_pods + 1) * sizeof(SolverPod)),
                      .nodes = solver_arena_alloc(b->arena, (c->n_nodes + 2) * sizeof(SolverNode)),
                      .n_pods = c->n_pods };
        if (!n.pods || !n.nodes)
                die("out of memory");
        bool *gone = calloc(c->n_nodes + 1, 1);
        for (size_t i = 0; i < d->n_nodes; i++)
                gone[d->nodes[i]] = true;
        for (size_t i = 0; i < c->n_nodes; i++)
                if (!gone[i])
                        n.nodes[n.n_nodes++] = c->nodes[i];
        const char *repl = NULL;
        if (d->kind == SOLVER_CONSOLIDATE_REPLACE) {
                const SolverLaunch *l = d->replacement;
                const SolverInstanceType *t = &b->types[l->type];
                repl = solver_arena_printf(b->arena, "replacement-%zu", pass_no);
                n.nodes[n.n_nodes++] = (SolverNode) { .name = repl, .nodepool = "default", .instance_type = t->name,
                                                      .zone = l->zone ? l->zone : l->offerings[0].zone,
                                                      .capacity_type = l->capacity_type, .allocatable = t->allocatable,
                                                      .price = l->price };
        }
        memcpy(n.pods, c->pods, c->n_pods * sizeof(SolverPod));
        const SolverResult *r = d->result;
        for (size_t i = 0; i < c->n_pods; i++) {
                const SolverDecision *x = &r->decisions[i];
                if (x->kind == SOLVER_DECISION_EXISTING)
                        n.pods[i].node_name = c->nodes[x->target].name;
                else if (x->kind == SOLVER_DECISION_LAUNCH)
                        n.pods[i].node_name = repl;
                else if (x->kind != SOLVER_DECISION_NONE)
                        die("a moved pod found no place");
        }
        free(gone);
        return n;
}

int main(int argc, char **argv) {
        size_t n_nodes = 1000, n_pods = 10000, max_passes = 1000;
        int runs = 5;
        uint64_t seed = 7;
        static const struct option longopts[] = {
                { "nodes", required_argument, NULL, 'n' },  { "pods", required_argument, NULL, 'p' },
                { "runs", required_argument, NULL, 'r' },   { "seed", required_argument, NULL, 's' },
                { "max-passes", required_argument, NULL, 'm' }, { "help", no_argument, NULL, 'h' },
                {},
        };
        int c;
        while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0)
                switch (c) {
                case 'n':
                        n_nodes = strtoul(optarg, NULL, 10);
                        break;
                case 'p':
                        n_pods = strtoul(optarg, NULL, 10);
                        break;
                case 'r':
                        runs = atoi(optarg);
                        break;
                case 's':
                        seed = strtoull(optarg, NULL, 10);
                        break;
                case 'm':
                        max_passes = strtoul(optarg, NULL, 10);
                        break;
                default:
                        printf("usage: %s [--nodes N] [--pods N] [--runs N] [--seed N] [--max-passes N]\n", argv[0]);
                        return c == 'h' ? 0 : 2;
                }
        if (n_nodes == 0 || runs < 1)
                die("--nodes and --runs must be positive");
        Bench b = {};
        if (solver_arena_new(&b.arena) < 0)
                die("out of memory");
        make_catalog(&b);
        Cluster cl = make_cluster(&b, n_nodes, n_pods, seed);
        double lb = lower_bound(&b, cl.pods, cl.n_pods);
        printf("nodesmith consolidation: %zu nodes (%s), %zu pods, %d instance types, threshold 15%%, one thread\n",
               n_nodes, b.types[NODE_TYPE].name, n_pods, N_TYPES);
        printf("before: $%.2f/h; lower bound for the pods $%.2f/h (ratio %.2f)\n\n", cluster_cost(&cl), lb,
               cluster_cost(&cl) / lb);

        /* the first pass, timed */
        double *t = calloc((size_t) runs, sizeof(double));
        SolverConsolidation *first = NULL;
        for (int r = 0; r < runs; r++) {
                Solver *s = NULL;
                SolverConsolidation *d = pass(&b, &cl, &s, &t[r]);
                if (r == 0)
                        first = d;
                else
                        solver_consolidation_free(d);
                solver_free(s);
        }
        qsort(t, (size_t) runs, sizeof(double), cmp_double);
        printf("one pass (solver_new + solver_consolidate): %.3f s median of %d (min %.3f, max %.3f); "
               "%zu placements tried; decision: %s%s of %zu node(s), $%.2f/h -> $%.2f/h\n",
               t[runs / 2], runs, t[0], t[runs - 1], first->evaluations,
               first->multi ? "multi-node " : "single-node ", solver_consolidation_kind_to_name(first->kind),
               first->n_nodes, first->old_price, first->new_price);
        solver_consolidation_free(first);

        /* act and pass again until nothing is worth it */
        size_t passes = 0, deletes = 0, replaces = 0, removed = 0;
        double total = 0, slowest = 0;
        for (; passes < max_passes; passes++) {
                Solver *s = NULL;
                double secs;
                SolverConsolidation *d = pass(&b, &cl, &s, &secs);
                total += secs;
                slowest = secs > slowest ? secs : slowest;
                if (d->kind == SOLVER_CONSOLIDATE_NONE) {
                        solver_consolidation_free(d);
                        solver_free(s);
                        break;
                }
                deletes += d->kind == SOLVER_CONSOLIDATE_DELETE;
                replaces += d->kind == SOLVER_CONSOLIDATE_REPLACE;
                removed += d->n_nodes;
                cl = apply(&b, &cl, d, passes);
                solver_consolidation_free(d);
                solver_free(s);
        }
        double cost = cluster_cost(&cl);
        printf("until nothing is worth it: %zu pass(es) in %.2f s (slowest %.3f s): %zu delete(s), %zu replace(s), "
               "%zu node(s) removed\n", passes, total, slowest, deletes, replaces, removed);
        printf("after: %zu nodes, $%.2f/h; lower bound $%.2f/h; ratio %.2f\n", cl.n_nodes, cost, lb, cost / lb);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("peak RSS: %.1f MiB\n", (double) ru.ru_maxrss / 1024.0);
        free(t);
        solver_arena_free(b.arena);
        return 0;
}
