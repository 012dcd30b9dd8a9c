/* SPDX-License-Identifier: Apache-2.0 */
/* Provisioning: one scenario per constraint kind, with expectations worked out by hand from
 * the small catalog below (which type, how many nodes, which pods cannot go and why). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/solver/solver.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (1024 * MI)

/* ---- fixture -------------------------------------------------------------------------------- */

typedef struct Fx {
        SolverArena *a;
        SolverInstanceType types[16];
        size_t n_types;
        SolverNodePool pools[4];
        size_t n_pools;
        SolverNode nodes[16];
        size_t n_nodes;
        SolverPod pods[64];
        size_t n_pods;
        SolverPod ds[4];
        size_t n_ds;
        SolverSnapshot snap; /* must outlive the solver */
        Solver *solver;
        SolverResult *res;
} Fx;

static Fx *F;

#define APPEND(arr, n, ...)                                                                       \
        do {                                                                                      \
                __typeof__(*(arr)) el_ = __VA_ARGS__;                                             \
                void *na_ = solver_arena_realloc(F->a, (void *) (arr), (n) * sizeof(el_),        \
                                                 ((n) + 1) * sizeof(el_));                        \
                assert_non_null(na_);                                                             \
                memcpy((char *) na_ + (n) * sizeof(el_), &el_, sizeof(el_));                      \
                (arr) = na_;                                                                      \
                (n)++;                                                                            \
        } while (0)

static const char *const ZONES[] = { "zone-a", "zone-b", "zone-c" };

static const char **strs1(const char *v) {
        const char **a = solver_arena_alloc(F->a, sizeof(char *));
        a[0] = solver_arena_strdup(F->a, v);
        return a;
}

/* A type offered on-demand in every zone given ("abc"), and as spot in a and b when spot > 0. */
static SolverInstanceType *add_type(const char *name, const char *family, const char *arch, int cpu, int mem_gi,
                                    int gpus, double od, double spot, const char *zones) {
        SolverInstanceType *t = &F->types[F->n_types++];
        *t = (SolverInstanceType) { .name = name };
        SolverLabel *l = NULL;
        size_t nl = 0;
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, name });
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_ARCH, arch });
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_OS, "linux" });
        APPEND(l, nl, (SolverLabel) { "nodesmith.io/instance-family", family });
        APPEND(l, nl, (SolverLabel) { "nodesmith.io/instance-cpu", solver_arena_printf(F->a, "%d", cpu) });
        APPEND(l, nl, (SolverLabel) { "nodesmith.io/instance-gpu-count", solver_arena_printf(F->a, "%d", gpus) });
        t->labels = l;
        t->n_labels = nl;
        t->capacity.v[SOLVER_RES_CPU] = cpu * 1000;
        t->capacity.v[SOLVER_RES_MEMORY] = mem_gi * GI;
        t->capacity.v[SOLVER_RES_PODS] = 58;
        t->capacity.v[SOLVER_RES_NVIDIA_GPU] = gpus;
        t->allocatable = t->capacity;
        SolverOffering *o = NULL;
        size_t no = 0;
        for (const char *z = zones; *z; z++) {
                const char *zone = ZONES[*z - 'a'];
                if (od > 0)
                        APPEND(o, no, (SolverOffering) { zone, SOLVER_CAPACITY_ON_DEMAND, od, true });
                if (spot > 0 && *z != 'c')
                        APPEND(o, no, (SolverOffering) { zone, SOLVER_CAPACITY_SPOT, spot, true });
        }
        t->offerings = o;
        t->n_offerings = no;
        return t;
}

static SolverNodePool *add_pool(const char *name, int weight) {
        SolverNodePool *p = &F->pools[F->n_pools++];
        *p = (SolverNodePool) { .name = name, .weight = weight };
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                p->limits.v[r] = -1;
        return p;
}

static void pool_req(SolverNodePool *p, const char *key, SolverOperator op, const char *v, int min_values) {
        SolverRequirement *r = (SolverRequirement *) p->requirements;
        APPEND(r, p->n_requirements, (SolverRequirement) { key, op, v ? strs1(v) : NULL, v ? 1 : 0, min_values });
        p->requirements = r;
}

static SolverPod *add_pod(const char *name, int cpu_m, int mem_mi) {
        SolverPod *p = &F->pods[F->n_pods++];
        *p = (SolverPod) { .name = name, .namespace_ = "default" };
        p->requests.v[SOLVER_RES_CPU] = cpu_m;
        p->requests.v[SOLVER_RES_MEMORY] = mem_mi * MI;
        p->requests.v[SOLVER_RES_PODS] = 1;
        return p;
}

static SolverPod *add_pods(const char *prefix, int n, int cpu_m, int mem_mi) {
        SolverPod *first = NULL;
        for (int i = 0; i < n; i++) {
                SolverPod *p = add_pod(solver_arena_printf(F->a, "%s-%d", prefix, i), cpu_m, mem_mi);
                if (!first)
                        first = p;
        }
        return first;
}

static void pod_label(SolverPod *p, const char *k, const char *v) {
        SolverLabel *l = (SolverLabel *) p->labels;
        APPEND(l, p->n_labels, (SolverLabel) { k, v });
        p->labels = l;
}

static void pod_selector(SolverPod *p, const char *k, const char *v) {
        SolverLabel *l = (SolverLabel *) p->node_selector;
        APPEND(l, p->n_node_selector, (SolverLabel) { k, v });
        p->node_selector = l;
}

static SolverLabelSelector app_selector(const char *app) {
        SolverLabel *l = solver_arena_alloc(F->a, sizeof(SolverLabel));
        *l = (SolverLabel) { "app", app };
        return (SolverLabelSelector) { .match_labels = l, .n_match_labels = 1 };
}

/* Same constraints for pods [from, to) (they share arrays, as pods of one Deployment do). */
static void copy_constraints(size_t from, size_t to) {
        for (size_t i = from + 1; i < to; i++) {
                SolverPod keep = F->pods[i];
                F->pods[i] = F->pods[from];
                F->pods[i].name = keep.name;
        }
}

static SolverNode *add_node(const char *name, const char *pool, const char *type, const char *zone, int cpu,
                            int mem_gi) {
        SolverNode *n = &F->nodes[F->n_nodes++];
        *n = (SolverNode) { .name = name, .nodepool = pool, .instance_type = type, .zone = zone,
                            .capacity_type = SOLVER_CAPACITY_ON_DEMAND };
        n->allocatable.v[SOLVER_RES_CPU] = cpu * 1000;
        n->allocatable.v[SOLVER_RES_MEMORY] = mem_gi * GI;
        n->allocatable.v[SOLVER_RES_PODS] = 58;
        SolverLabel *l = NULL;
        size_t nl = 0;
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_ZONE, zone });
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_HOSTNAME, name });
        APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_ARCH, "amd64" });
        if (type)
                APPEND(l, nl, (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, type });
        n->labels = l;
        n->n_labels = nl;
        return n;
}

/* The catalog every test starts from (on-demand prices per hour; spot in zones a and b):
 *   c.large    2 cpu  4Gi  0.085 / spot 0.030
 *   c.xlarge   4 cpu  8Gi  0.170 / spot 0.060
 *   c.2xlarge  8 cpu 16Gi  0.340 / spot 0.120
 *   m.xlarge   4 cpu 16Gi  0.192 / spot 0.070
 *   a.xlarge   4 cpu  8Gi  0.136 / spot 0.050   arm64
 *   g.xlarge   4 cpu 16Gi  1 GPU 0.526, on-demand in zone-a only
 * and a pool "default" that only launches on-demand (so that prices are easy to follow). */
static int setup(void **state) {
        F = calloc(1, sizeof(Fx));
        assert_int_equal(solver_arena_new(&F->a), 0);
        add_type("c.large", "c", "amd64", 2, 4, 0, 0.085, 0.030, "abc");
        add_type("c.xlarge", "c", "amd64", 4, 8, 0, 0.170, 0.060, "abc");
        add_type("c.2xlarge", "c", "amd64", 8, 16, 0, 0.340, 0.120, "abc");
        add_type("m.xlarge", "m", "amd64", 4, 16, 0, 0.192, 0.070, "abc");
        add_type("a.xlarge", "a", "arm64", 4, 8, 0, 0.136, 0.050, "abc");
        add_type("g.xlarge", "g", "amd64", 4, 16, 1, 0.526, 0, "a");
        SolverNodePool *p = add_pool("default", 0);
        pool_req(p, SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, "on-demand", 0);
        *state = F;
        return 0;
}

static int teardown(void **state) {
        solver_result_free(F->res);
        solver_free(F->solver);
        solver_arena_free(F->a);
        free(F);
        F = NULL;
        return 0;
}

static const SolverResult *solve_opts(const SolverOptions *o) {
        solver_result_free(F->res);
        F->res = NULL;
        if (!F->solver) {
                F->snap = (SolverSnapshot) { F->types, F->n_types, F->pools, F->n_pools, F->nodes, F->n_nodes,
                                             F->pods,  F->n_pods,  F->ds,    F->n_ds };
                char *err = NULL;
                int r = solver_new(&F->snap, &F->solver, &err);
                if (r < 0)
                        fprintf(stderr, "solver_new: %s\n", err);
                free(err);
                assert_int_equal(r, 0);
        }
        assert_int_equal(solver_provision(F->solver, o, &F->res), 0);
        return F->res;
}

static const SolverResult *solve(void) {
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        return solve_opts(&o);
}

static size_t pod_index(const char *name) {
        for (size_t i = 0; i < F->n_pods; i++)
                if (strcmp(F->pods[i].name, name) == 0)
                        return i;
        fail_msg("no pod %s", name);
        return 0;
}

static const SolverDecision *decision(const char *pod) {
        return &F->res->decisions[pod_index(pod)];
}

static const char *launch_type(size_t i) {
        return F->types[F->res->launches[i].type].name;
}

static const char *launch_zone_of(const char *pod) {
        const SolverDecision *d = decision(pod);
        assert_int_equal(d->kind, SOLVER_DECISION_LAUNCH);
        const SolverLaunch *l = &F->res->launches[d->target];
        return l->zone ? l->zone : l->offerings[0].zone;
}

/* ---- resources ------------------------------------------------------------------------------ */

static void test_cheapest_type_holds_all(void **state) {
        /* 3 x 1 cpu: 4-cpu types are c.xlarge 0.17, m.xlarge 0.192, a.xlarge 0.136 -> a.xlarge */
        add_pods("web", 3, 1000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(launch_type(0), "a.xlarge");
        assert_int_equal(r->launches[0].n_pods, 3);
        assert_true(r->launches[0].price == 0.136);
        assert_int_equal(r->launches[0].capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        assert_int_equal(r->n_placed_new, 3);
        /* ranked offerings: cheapest first, every zone of a.xlarge, then c.xlarge ... */
        const SolverLaunch *l = &r->launches[0];
        assert_true(l->n_offerings >= 3);
        for (size_t i = 1; i < l->n_offerings; i++)
                assert_true(l->offerings[i - 1].price <= l->offerings[i].price);
        assert_int_equal(l->n_types, 5); /* all but c.large (2 cpu) */
        assert_true(r->total_price == 0.136);
}

static void test_budget_buys_by_cost_not_by_pile(void **state) {
        /* 12 x 1 cpu: growing one node until nothing bigger exists would buy c.2xlarge + a.xlarge
         * (0.476); priced per unit, a.xlarge (0.034/cpu) is the best value: 3 of them, 0.408 */
        add_pods("web", 12, 1000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(r->n_placed_new, 12);
        assert_int_equal(r->n_launches, 3);
        for (size_t i = 0; i < r->n_launches; i++)
                assert_string_equal(launch_type(i), "a.xlarge");
        assert_true(r->total_price < 0.409);
        /* the launch still offers every type that holds the node (CreateFleet fallbacks) */
        assert_true(r->launches[0].n_types > 1);

        /* fewer, bigger nodes on request: two nodes hold it (c.2xlarge takes 8, a.xlarge 4) */
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.target_nodes = 2;
        r = solve_opts(&o);
        assert_int_equal(r->n_placed_new, 12);
        assert_int_equal(r->n_launches, 2);
        assert_true(r->total_price > 0.409);
}

/* 20 amd64 pods of 1 cpu / 2.5 GiB. Priced per unit, c (2 GiB per cpu, 0.0425 per cpu) looks
 * the better value, but these pods fill a c node's memory with a fifth of its cpu idle: a
 * c.2xlarge holds 6 of them. Valued for what the pods can fill together, m (4 GiB per cpu) is
 * the better buy: an m.4xlarge for 16 and an m.xlarge for 4 (0.96), where c nodes cost 1.19. */
static void test_budget_values_what_the_pods_fill(void **state) {
        add_type("m.4xlarge", "m", "amd64", 16, 64, 0, 0.768, 0.280, "abc");
        size_t f = F->n_pods;
        add_pods("jvm", 20, 1000, 2560);
        for (size_t i = f; i < F->n_pods; i++)
                pod_selector(&F->pods[i], SOLVER_LABEL_ARCH, "amd64");
        const SolverResult *r = solve();
        assert_int_equal(r->n_placed_new, 20);
        assert_int_equal(r->n_launches, 2);
        for (size_t i = 0; i < r->n_launches; i++)
                assert_true(launch_type(i)[0] == 'm');
        assert_true(r->total_price > 0.9599 && r->total_price < 0.9601);
}

static void test_too_big_is_unschedulable(void **state) {
        add_pod("huge", 16000, 1024);
        add_pod("fine", 500, 512);
        const SolverResult *r = solve();
        assert_int_equal(decision("huge")->kind, SOLVER_DECISION_UNSCHEDULABLE);
        assert_int_equal(decision("huge")->reason, SOLVER_REASON_RESOURCES);
        assert_non_null(strstr(decision("huge")->message, "cpu=16"));
        assert_int_equal(decision("fine")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(r->n_unschedulable, 1);
        assert_string_equal(launch_type(0), "c.large");
}

static void test_daemonset_overhead(void **state) {
        /* 2 x 900m = 1.8 cpu fits c.large (2 cpu) alone, not with a 500m DaemonSet: 2.3 cpu ->
         * a.xlarge (0.136 < 0.17) */
        add_pods("app", 2, 900, 256);
        F->ds[F->n_ds++] = (SolverPod) { .name = "logging", .requests.v = { [SOLVER_RES_CPU] = 500,
                                                                           [SOLVER_RES_MEMORY] = 256 * MI } };
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(launch_type(0), "a.xlarge");
        assert_int_equal(r->launches[0].requests.v[SOLVER_RES_CPU], 2300);
        assert_int_equal(r->launches[0].requests.v[SOLVER_RES_PODS], 3);
}

static void test_daemonset_not_tolerating_pool_taint_adds_nothing(void **state) {
        SolverNodePool *p = &F->pools[0];
        SolverTaint *t = solver_arena_alloc(F->a, sizeof(SolverTaint));
        *t = (SolverTaint) { "dedicated", "batch", SOLVER_EFFECT_NO_SCHEDULE };
        p->taints = t;
        p->n_taints = 1;
        SolverPod *pod = add_pods("app", 2, 900, 256);
        SolverToleration *tol = solver_arena_alloc(F->a, sizeof(SolverToleration));
        *tol = (SolverToleration) { "dedicated", false, "batch", SOLVER_EFFECT_NO_SCHEDULE };
        pod->tolerations = tol;
        pod->n_tolerations = 1;
        copy_constraints(0, 2);
        F->ds[F->n_ds++] = (SolverPod) { .name = "logging", .requests.v = { [SOLVER_RES_CPU] = 500 } };
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(launch_type(0), "c.large"); /* 1.8 cpu, no DaemonSet */
}

static void test_gpu_request(void **state) {
        SolverPod *p = add_pod("train", 1000, 1024);
        p->requests.v[SOLVER_RES_NVIDIA_GPU] = 1;
        solve();
        assert_string_equal(launch_type(0), "g.xlarge");
        assert_string_equal(launch_zone_of("train"), "zone-a");
}

/* ---- node selection ------------------------------------------------------------------------- */

static void test_node_selector(void **state) {
        /* amd64 only: c.xlarge (0.17) instead of a.xlarge */
        SolverPod *p = add_pods("web", 3, 1000, 1024);
        pod_selector(p, SOLVER_LABEL_ARCH, "amd64");
        copy_constraints(0, 3);
        solve();
        assert_int_equal(F->res->n_launches, 1);
        assert_string_equal(launch_type(0), "c.xlarge");
}

static void test_karpenter_keys_in_selectors(void **state) {
        /* a pod written for Karpenter: karpenter.k8s.aws/instance-family=m */
        SolverPod *p = add_pod("db", 1000, 1024);
        pod_selector(p, "karpenter.k8s.aws/instance-family", "m");
        solve();
        assert_string_equal(launch_type(0), "m.xlarge");
}

static void test_required_affinity_gt(void **state) {
        /* instance-cpu Gt 4 leaves only c.2xlarge */
        SolverPod *p = add_pod("batch", 500, 512);
        SolverRequirement *r = solver_arena_alloc(F->a, sizeof(SolverRequirement));
        *r = (SolverRequirement) { "karpenter.k8s.aws/instance-cpu", SOLVER_OP_GT, strs1("4"), 1 };
        SolverTerm *t = solver_arena_alloc(F->a, sizeof(SolverTerm));
        *t = (SolverTerm) { r, 1 };
        p->required_terms = t;
        p->n_required_terms = 1;
        solve();
        assert_string_equal(launch_type(0), "c.2xlarge");
}

static void test_required_terms_are_ored(void **state) {
        /* first term impossible (family x), the second (family m) works: Karpenter drops the
         * first term and retries */
        SolverPod *p = add_pod("svc", 500, 512);
        SolverRequirement *r = solver_arena_alloc(F->a, 2 * sizeof(SolverRequirement));
        r[0] = (SolverRequirement) { "nodesmith.io/instance-family", SOLVER_OP_IN, strs1("x"), 1 };
        r[1] = (SolverRequirement) { "nodesmith.io/instance-family", SOLVER_OP_IN, strs1("m"), 1 };
        SolverTerm *t = solver_arena_alloc(F->a, 2 * sizeof(SolverTerm));
        t[0] = (SolverTerm) { &r[0], 1 };
        t[1] = (SolverTerm) { &r[1], 1 };
        p->required_terms = t;
        p->n_required_terms = 2;
        solve();
        assert_string_equal(launch_type(0), "m.xlarge");
        assert_int_equal(decision("svc")->relaxed, 1);
}

static void test_preferred_affinity_honoured_then_relaxed(void **state) {
        /* prefers zone-b: honoured */
        SolverPod *p = add_pod("pref", 500, 512);
        SolverRequirement *r = solver_arena_alloc(F->a, sizeof(SolverRequirement));
        *r = (SolverRequirement) { SOLVER_LABEL_ZONE, SOLVER_OP_IN, strs1("zone-b"), 1 };
        SolverPreferredTerm *pt = solver_arena_alloc(F->a, sizeof(SolverPreferredTerm));
        *pt = (SolverPreferredTerm) { 10, { r, 1 } };
        p->preferred_terms = pt;
        p->n_preferred_terms = 1;
        /* prefers a GPU family, which cannot hold 8 cpu: relaxed to any type */
        SolverPod *q = add_pod("relax", 8000, 512);
        SolverRequirement *r2 = solver_arena_alloc(F->a, sizeof(SolverRequirement));
        *r2 = (SolverRequirement) { "nodesmith.io/instance-family", SOLVER_OP_IN, strs1("g"), 1 };
        SolverPreferredTerm *pt2 = solver_arena_alloc(F->a, sizeof(SolverPreferredTerm));
        *pt2 = (SolverPreferredTerm) { 50, { r2, 1 } };
        q->preferred_terms = pt2;
        q->n_preferred_terms = 1;
        solve();
        assert_string_equal(launch_zone_of("pref"), "zone-b");
        assert_int_equal(decision("pref")->relaxed, 0);
        assert_int_equal(decision("relax")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("relax")->relaxed, 1);
        assert_string_equal(F->types[F->res->launches[decision("relax")->target].type].name, "c.2xlarge");
}

static void test_custom_labels(void **state) {
        /* pool labels team=a: a pod asking for team=b cannot use it, team=a can */
        SolverNodePool *p = &F->pools[0];
        SolverLabel *l = solver_arena_alloc(F->a, sizeof(SolverLabel));
        *l = (SolverLabel) { "team", "a" };
        p->labels = l;
        p->n_labels = 1;
        SolverPod *ok = add_pod("ok", 500, 512);
        pod_selector(ok, "team", "a");
        SolverPod *no = add_pod("no", 500, 512);
        pod_selector(no, "team", "b");
        SolverPod *undefined = add_pod("undef", 500, 512);
        pod_selector(undefined, "tier", "gold");
        solve();
        assert_int_equal(decision("ok")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("no")->reason, SOLVER_REASON_REQUIREMENTS);
        assert_non_null(strstr(decision("no")->message, "team"));
        assert_int_equal(decision("undef")->reason, SOLVER_REASON_REQUIREMENTS);
        assert_non_null(strstr(decision("undef")->message, "not defined"));
}

static void test_multi_valued_pool_label_narrows_per_node(void **state) {
        /* pool requirement team In [a, b]: a team=a pod and a team=b pod cannot share a node */
        SolverNodePool *p = &F->pools[0];
        SolverRequirement *r = solver_arena_realloc(F->a, (void *) p->requirements, p->n_requirements * sizeof(*r),
                                                    (p->n_requirements + 1) * sizeof(*r));
        const char **ab = solver_arena_alloc(F->a, 2 * sizeof(char *));
        ab[0] = "a";
        ab[1] = "b";
        r[p->n_requirements++] = (SolverRequirement) { "team", SOLVER_OP_IN, ab, 2 };
        p->requirements = r;
        pod_selector(add_pod("pa", 500, 512), "team", "a");
        pod_selector(add_pod("pb", 500, 512), "team", "b");
        pod_selector(add_pod("pa2", 500, 512), "team", "a");
        const SolverResult *res = solve();
        assert_int_equal(res->n_launches, 2);
        assert_int_equal(decision("pa")->target, decision("pa2")->target);
        assert_int_not_equal(decision("pa")->target, decision("pb")->target);
        const SolverLaunch *lb = &res->launches[decision("pb")->target];
        bool found = false;
        for (size_t i = 0; i < lb->n_labels; i++)
                if (strcmp(lb->labels[i].key, "team") == 0) {
                        assert_string_equal(lb->labels[i].value, "b");
                        found = true;
                }
        assert_true(found);
}

/* ---- taints, pools, limits ------------------------------------------------------------------ */

static void test_taints_and_weights(void **state) {
        /* "gpu" pool (weight 10) is tainted; untolerating pods fall back to "default" */
        SolverNodePool *g = add_pool("gpu", 10);
        SolverTaint *t = solver_arena_alloc(F->a, sizeof(SolverTaint));
        *t = (SolverTaint) { "nvidia.com/gpu", NULL, SOLVER_EFFECT_NO_SCHEDULE };
        g->taints = t;
        g->n_taints = 1;
        SolverPod *tol = add_pod("tol", 500, 512);
        SolverToleration *to = solver_arena_alloc(F->a, sizeof(SolverToleration));
        *to = (SolverToleration) { "nvidia.com/gpu", true, NULL, SOLVER_EFFECT_ANY };
        tol->tolerations = to;
        tol->n_tolerations = 1;
        add_pod("plain", 500, 512);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 2);
        assert_string_equal(F->pools[r->launches[decision("tol")->target].nodepool].name, "gpu");
        assert_string_equal(F->pools[r->launches[decision("plain")->target].nodepool].name, "default");
        /* the gpu pool (no capacity-type requirement) launches spot: c.large spot 0.03 */
        assert_int_equal(r->launches[decision("tol")->target].capacity_type, SOLVER_CAPACITY_SPOT);
        assert_true(r->launches[decision("tol")->target].price == 0.030);
}

static void test_taint_not_tolerated_anywhere(void **state) {
        SolverTaint *t = solver_arena_alloc(F->a, sizeof(SolverTaint));
        *t = (SolverTaint) { "dedicated", "infra", SOLVER_EFFECT_NO_SCHEDULE };
        F->pools[0].taints = t;
        F->pools[0].n_taints = 1;
        add_pod("p", 500, 512);
        solve();
        assert_int_equal(decision("p")->kind, SOLVER_DECISION_UNSCHEDULABLE);
        assert_int_equal(decision("p")->reason, SOLVER_REASON_TAINTS);
        assert_non_null(strstr(decision("p")->message, "dedicated=infra:NoSchedule"));
}

static void test_prefer_no_schedule_relaxed(void **state) {
        SolverTaint *t = solver_arena_alloc(F->a, sizeof(SolverTaint));
        *t = (SolverTaint) { "spot", NULL, SOLVER_EFFECT_PREFER_NO_SCHEDULE };
        F->pools[0].taints = t;
        F->pools[0].n_taints = 1;
        add_pod("p", 500, 512);
        solve();
        assert_int_equal(decision("p")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("p")->relaxed, 1);
}

static void test_limits(void **state) {
        /* limit 8 cpu; pods of 3 cpu with anti-affinity need one node each (c.xlarge, 4 cpu):
         * two fit the limit, the third does not */
        F->pools[0].limits.v[SOLVER_RES_CPU] = 8000;
        SolverPod *p = add_pods("w", 3, 3000, 1024);
        for (int i = 0; i < 3; i++)
                pod_label(&F->pods[i], "app", "w");
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = app_selector("w") };
        p->anti_affinity = t;
        p->n_anti_affinity = 1;
        copy_constraints(0, 3);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 2);
        assert_int_equal(r->n_unschedulable, 1);
        assert_int_equal(decision("w-2")->reason, SOLVER_REASON_LIMITS);
        for (size_t i = 0; i < r->n_launches; i++)
                assert_true(F->types[r->launches[i].type].capacity.v[SOLVER_RES_CPU] <= 4000);
}

static void test_limits_count_existing_nodes(void **state) {
        F->pools[0].limits.v[SOLVER_RES_CPU] = 6000;
        add_node("n1", "default", "c.xlarge", "zone-a", 4, 8); /* uses 4 of the 6 */
        add_pod("big", 3000, 1024);                           /* fits n1 */
        add_pod("more", 3000, 1024);                          /* needs a new 4-cpu node: over */
        const SolverResult *r = solve();
        assert_int_equal(decision("big")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(decision("more")->reason, SOLVER_REASON_LIMITS);
        assert_int_equal(r->n_launches, 0);
}

static void test_min_values(void **state) {
        /* instance-family with minValues 3: a 2-cpu pod leaves c, m, a (3 families): fine;
         * a 6-cpu pod leaves only c.2xlarge: one family, unschedulable */
        pool_req(&F->pools[0], "nodesmith.io/instance-family", SOLVER_OP_EXISTS, NULL, 3);
        add_pod("two", 2000, 1024);
        add_pod("six", 6000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(decision("two")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("six")->reason, SOLVER_REASON_RESOURCES);
        /* the launch keeps at least three families among its offerings */
        const SolverLaunch *l = &r->launches[decision("two")->target];
        bool fam[26] = {};
        size_t n = 0;
        for (size_t i = 0; i < l->n_offerings; i++) {
                char f = F->types[l->offerings[i].type].name[0];
                if (!fam[f - 'a']) {
                        fam[f - 'a'] = true;
                        n++;
                }
        }
        assert_true(n >= 3);
}

/* ---- topology ------------------------------------------------------------------------------- */

static void spread(SolverPod *p, const char *key, int skew, bool anyway, const char *app) {
        SolverSpread *s = solver_arena_alloc(F->a, sizeof(SolverSpread));
        *s = (SolverSpread) { key, skew, anyway, 0, app_selector(app) };
        p->spreads = s;
        p->n_spreads = 1;
}

static size_t labelled(const char *prefix, int n, int cpu, int mem, const char *app) {
        size_t first = F->n_pods;
        add_pods(prefix, n, cpu, mem);
        for (size_t i = first; i < F->n_pods; i++)
                pod_label(&F->pods[i], "app", app);
        return first;
}

/* ---- improvement after placement ------------------------------------------------------------ */

/* Three ingress pods (1 cpu, one per node) and seven app pods (0.5 cpu, spread over the three
 * zones: 3/2/2). Placement gives zone-a a c.xlarge (0.170) for ingress + 3 app = 2.5 cpu; the
 * improvement pass splits it into a c.large (the 3 app pods) and a c.medium (the ingress pod)
 * beside it in zone-a: 0.340 -> 0.2975, every rule still held. With no fourth node allowed it
 * stays as placed. */
static void improve_split_pods(void) {
        add_type("c.medium", "c", "amd64", 1, 2, 0, 0.0425, 0.015, "abc");
        size_t f = labelled("ing", 3, 1000, 1024, "ing");
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = app_selector("ing") };
        F->pods[f].anti_affinity = t;
        F->pods[f].n_anti_affinity = 1;
        pod_selector(&F->pods[f], SOLVER_LABEL_ARCH, "amd64");
        copy_constraints(f, f + 3);
        size_t g = labelled("app", 7, 500, 1024, "app");
        spread(&F->pods[g], SOLVER_LABEL_ZONE, 1, false, "app");
        pod_selector(&F->pods[g], SOLVER_LABEL_ARCH, "amd64");
        copy_constraints(g, g + 7);
}

static void test_improve_split(void **state) {
        improve_split_pods();
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 4);
        assert_true(r->total_price < 0.2976 && r->total_price > 0.2974);
        for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++)
                        assert_int_not_equal(decision(solver_arena_printf(F->a, "ing-%d", i))->target,
                                             decision(solver_arena_printf(F->a, "ing-%d", j))->target);
        int per[3] = {};
        for (int i = 0; i < 7; i++)
                per[launch_zone_of(solver_arena_printf(F->a, "app-%d", i))[5] - 'a']++;
        assert_int_equal(per[0] + per[1] + per[2], 7);
        for (int z = 0; z < 3; z++)
                assert_true(per[z] >= 2 && per[z] <= 3);
        size_t medium = 0;
        for (size_t i = 0; i < r->n_launches; i++)
                if (strcmp(launch_type(i), "c.medium") == 0) {
                        medium++;
                        assert_string_equal(r->launches[i].zone, "zone-a");
                }
        assert_int_equal(medium, 1);
        /* deterministic */
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        double before = r->total_price;
        r = solve_opts(&o);
        assert_true(r->total_price == before);
}

/* Four 1-GPU pods: placement opens a g.xlarge (1 GPU, 0.526) for each; the improvement pass has
 * one node take the others' pods and become a g.4xlarge (4 GPUs, 1.50 < 4 x 0.526). */
static void test_improve_absorb(void **state) {
        add_type("g.4xlarge", "g", "amd64", 16, 64, 4, 1.50, 0, "a");
        for (size_t i = labelled("gpu", 4, 1000, 2048, "gpu"); i < F->n_pods; i++)
                F->pods[i].requests.v[SOLVER_RES_NVIDIA_GPU] = 1;
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(launch_type(0), "g.4xlarge");
        assert_int_equal(r->launches[0].n_pods, 4);
        assert_true(r->total_price > 1.4999 && r->total_price < 1.5001);
        /* with no g.4xlarge offered, four g.xlarge as before */
        solver_result_free(F->res);
        solver_free(F->solver);
        F->res = NULL;
        F->solver = NULL;
        F->types[F->n_types - 1].n_offerings = 0;
        r = solve();
        assert_int_equal(r->n_launches, 4);
}

static void test_improve_no_split_when_nodes_capped(void **state) {
        improve_split_pods();
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.max_new_nodes = 3;
        const SolverResult *r = solve_opts(&o);
        assert_int_equal(r->n_launches, 3);
        assert_true(r->total_price > 0.3399 && r->total_price < 0.3401);
}

static void test_zone_spread(void **state) {
        /* 6 pods, maxSkew 1 over zones a, b, c: exactly 2 per zone */
        size_t f = labelled("s", 6, 1000, 1024, "s");
        spread(&F->pods[f], SOLVER_LABEL_ZONE, 1, false, "s");
        copy_constraints(f, f + 6);
        solve();
        int per[3] = {};
        for (int i = 0; i < 6; i++) {
                const char *z = launch_zone_of(F->pods[f + (size_t) i].name);
                per[z[5] - 'a']++;
        }
        assert_int_equal(per[0], 2);
        assert_int_equal(per[1], 2);
        assert_int_equal(per[2], 2);
}

static void test_zone_spread_counts_existing_pods(void **state) {
        /* two matching pods already run in zone-a: 4 new pods go b, c, b, c (skew 1) */
        add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        size_t f0 = labelled("old", 2, 100, 100, "s");
        F->pods[f0].node_name = "n1";
        F->pods[f0 + 1].node_name = "n1";
        size_t f = labelled("s", 4, 1000, 1024, "s");
        spread(&F->pods[f], SOLVER_LABEL_ZONE, 1, false, "s");
        copy_constraints(f, f + 4);
        /* n1 is full for these pods */
        F->nodes[0].allocatable.v[SOLVER_RES_CPU] = 300;
        solve();
        int per[3] = {};
        for (int i = 0; i < 4; i++)
                per[launch_zone_of(F->pods[f + (size_t) i].name)[5] - 'a']++;
        assert_int_equal(per[0], 0);
        assert_int_equal(per[1], 2);
        assert_int_equal(per[2], 2);
}

static void test_zone_spread_unsatisfiable_and_schedule_anyway(void **state) {
        /* pods allowed in zone-a only, spread over the 3 zones of the pool... the eligible domains
         * honour the pod's node affinity, so only zone-a counts: all 3 go there */
        size_t f = labelled("s", 3, 500, 512, "s");
        spread(&F->pods[f], SOLVER_LABEL_ZONE, 1, false, "s");
        pod_selector(&F->pods[f], SOLVER_LABEL_ZONE, "zone-a");
        copy_constraints(f, f + 3);
        /* GPU pods (zone-a only) spreading with ScheduleAnyway: 2 of them skew-1 would need b */
        size_t g = labelled("g", 2, 500, 512, "g");
        F->pods[g].requests.v[SOLVER_RES_NVIDIA_GPU] = 1;
        spread(&F->pods[g], SOLVER_LABEL_ZONE, 1, true, "g");
        copy_constraints(g, g + 2);
        const SolverResult *r = solve();
        for (int i = 0; i < 3; i++)
                assert_string_equal(launch_zone_of(F->pods[f + (size_t) i].name), "zone-a");
        assert_int_equal(r->n_unschedulable, 0);
        assert_string_equal(launch_zone_of("g-0"), "zone-a");
        assert_string_equal(launch_zone_of("g-1"), "zone-a");
}

static void test_schedule_anyway_relaxed_when_limits_bind(void **state) {
        /* limit 4 cpu: after nodes in zone-a and zone-b (c.large, 2 cpu each, once the first
         * node gives up its larger types), zone-c cannot get one. The third pod of a
         * ScheduleAnyway spread then drops the constraint and joins zone-a's node; with
         * DoNotSchedule it cannot go anywhere. */
        F->pools[0].limits.v[SOLVER_RES_CPU] = 4000;
        size_t f = labelled("soft", 3, 1000, 512, "soft");
        spread(&F->pods[f], SOLVER_LABEL_ZONE, 1, true, "soft");
        copy_constraints(f, f + 3);
        const SolverResult *r = solve();
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(r->n_launches, 2);
        assert_string_equal(launch_zone_of("soft-0"), "zone-a");
        assert_string_equal(launch_zone_of("soft-1"), "zone-b");
        assert_int_equal(decision("soft-0")->relaxed, 0);
        assert_int_equal(decision("soft-2")->relaxed, 1);
        assert_int_equal(decision("soft-2")->target, decision("soft-0")->target);
        for (size_t i = 0; i < r->n_launches; i++)
                assert_string_equal(launch_type(i), "c.large");
        /* the same with DoNotSchedule */
        solver_result_free(F->res);
        F->res = NULL;
        solver_free(F->solver);
        F->solver = NULL;
        ((SolverSpread *) F->pods[f].spreads)->schedule_anyway = false;
        r = solve();
        assert_int_equal(r->n_unschedulable, 1);
        assert_int_equal(decision("soft-2")->kind, SOLVER_DECISION_UNSCHEDULABLE);
        assert_int_equal(decision("soft-2")->reason, SOLVER_REASON_LIMITS);
}

static void test_hostname_spread(void **state) {
        /* 4 pods, maxSkew 1 per hostname: 4 nodes; maxSkew 2: 2 nodes */
        size_t f = labelled("h", 4, 500, 512, "h");
        spread(&F->pods[f], SOLVER_LABEL_HOSTNAME, 1, false, "h");
        copy_constraints(f, f + 4);
        size_t g = labelled("k", 4, 500, 512, "k");
        spread(&F->pods[g], SOLVER_LABEL_HOSTNAME, 2, false, "k");
        copy_constraints(g, g + 4);
        const SolverResult *r = solve();
        for (int i = 0; i < 4; i++)
                for (int j = i + 1; j < 4; j++)
                        assert_int_not_equal(decision(F->pods[f + (size_t) i].name)->target,
                                             decision(F->pods[f + (size_t) j].name)->target);
        /* the k pods share nodes two by two (they may use the h nodes) */
        size_t per[64] = {};
        for (int i = 0; i < 4; i++)
                per[decision(F->pods[g + (size_t) i].name)->target]++;
        for (size_t i = 0; i < r->n_launches; i++)
                assert_true(per[i] <= 2);
        assert_int_equal(r->n_launches, 4);
}

static void test_zone_affinity(void **state) {
        /* the cache runs in zone-b; web pods with required zone affinity to it follow */
        add_node("n1", "default", "c.large", "zone-b", 2, 4);
        size_t c = labelled("cache", 1, 1900, 512, "cache");
        F->pods[c].node_name = "n1";
        size_t f = labelled("web", 3, 1000, 1024, "web");
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_ZONE, .selector = app_selector("cache") };
        F->pods[f].affinity = t;
        F->pods[f].n_affinity = 1;
        copy_constraints(f, f + 3);
        /* self-affinity on zone: all in one zone */
        size_t g = labelled("grp", 3, 3000, 1024, "grp");
        SolverPodAffinityTerm *t2 = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t2 = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_ZONE, .selector = app_selector("grp") };
        F->pods[g].affinity = t2;
        F->pods[g].n_affinity = 1;
        copy_constraints(g, g + 3);
        /* affinity to something that does not exist */
        size_t o = labelled("orphan", 1, 100, 100, "orphan");
        SolverPodAffinityTerm *t3 = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t3 = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_ZONE, .selector = app_selector("nothing") };
        F->pods[o].affinity = t3;
        F->pods[o].n_affinity = 1;
        solve();
        for (int i = 0; i < 3; i++)
                assert_string_equal(launch_zone_of(F->pods[f + (size_t) i].name), "zone-b");
        const char *z = launch_zone_of("grp-0");
        assert_string_equal(launch_zone_of("grp-1"), z);
        assert_string_equal(launch_zone_of("grp-2"), z);
        assert_int_equal(decision("orphan-0")->reason, SOLVER_REASON_TOPOLOGY);
}

static void test_hostname_affinity(void **state) {
        /* two pods with hostname self-affinity share one node */
        size_t f = labelled("pair", 2, 1000, 1024, "pair");
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = app_selector("pair") };
        F->pods[f].affinity = t;
        F->pods[f].n_affinity = 1;
        copy_constraints(f, f + 2);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(decision("pair-0")->target, decision("pair-1")->target);
}

static void test_anti_affinity(void **state) {
        /* hostname anti-affinity: 3 pods, 3 nodes (c.large each: 1.5 cpu) */
        size_t f = labelled("db", 3, 1500, 1024, "db");
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = app_selector("db") };
        F->pods[f].anti_affinity = t;
        F->pods[f].n_anti_affinity = 1;
        copy_constraints(f, f + 3);
        /* zone anti-affinity: 4 pods, 3 zones -> one is left out */
        size_t g = labelled("zk", 4, 500, 512, "zk");
        SolverPodAffinityTerm *t2 = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t2 = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_ZONE, .selector = app_selector("zk") };
        F->pods[g].anti_affinity = t2;
        F->pods[g].n_anti_affinity = 1;
        copy_constraints(g, g + 4);
        const SolverResult *r = solve();
        for (int i = 0; i < 3; i++)
                for (int j = i + 1; j < 3; j++)
                        assert_int_not_equal(decision(F->pods[f + (size_t) i].name)->target,
                                             decision(F->pods[f + (size_t) j].name)->target);
        int placed = 0;
        bool zone_used[3] = {};
        for (int i = 0; i < 4; i++) {
                const SolverDecision *d = decision(F->pods[g + (size_t) i].name);
                if (d->kind == SOLVER_DECISION_UNSCHEDULABLE) {
                        assert_int_equal(d->reason, SOLVER_REASON_TOPOLOGY);
                        continue;
                }
                const char *z = launch_zone_of(F->pods[g + (size_t) i].name);
                assert_false(zone_used[z[5] - 'a']);
                zone_used[z[5] - 'a'] = true;
                placed++;
        }
        assert_int_equal(placed, 3);
        assert_int_equal(r->n_unschedulable, 1);
}

static void test_inverse_anti_affinity(void **state) {
        /* a running pod refuses app=web next to it; a web pod that would fit there gets a new
         * node */
        add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        size_t g = labelled("guard", 1, 100, 100, "guard");
        F->pods[g].node_name = "n1";
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = SOLVER_LABEL_HOSTNAME, .selector = app_selector("web") };
        F->pods[g].anti_affinity = t;
        F->pods[g].n_anti_affinity = 1;
        labelled("web", 1, 500, 512, "web");
        labelled("other", 1, 500, 512, "other");
        const SolverResult *r = solve();
        assert_int_equal(decision("web-0")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("other-0")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(r->n_launches, 1);
}

static void add_term(SolverPod *p, bool anti, const char *key, const char *app) {
        SolverPodAffinityTerm *t = solver_arena_alloc(F->a, sizeof(SolverPodAffinityTerm));
        *t = (SolverPodAffinityTerm) { .topology_key = key, .selector = app_selector(app) };
        if (anti) {
                p->anti_affinity = t;
                p->n_anti_affinity = 1;
        } else {
                p->affinity = t;
                p->n_affinity = 1;
        }
}

static void test_limit_nodes(void **state) {
        /* limits.nodes 2 with one node of the pool already there (in flight): one more node may
         * come; 3 pods with hostname anti-affinity get n1 and one new node, the third waits */
        F->pools[0].has_node_limit = true;
        F->pools[0].node_limit = 2;
        SolverNode *n1 = add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        n1->in_flight = true;
        add_node("foreign", NULL, "c.xlarge", "zone-a", 0, 0); /* not the pool's: not counted */
        size_t f = labelled("w", 3, 1000, 1024, "w");
        add_term(&F->pods[f], true, SOLVER_LABEL_HOSTNAME, "w");
        copy_constraints(f, f + 3);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(r->n_unschedulable, 1);
        assert_int_equal(decision("w-2")->reason, SOLVER_REASON_LIMITS);
        assert_non_null(strstr(decision("w-2")->message, "limit of 2 nodes"));
        /* a limit of 0 launches nothing; without the limit all three are placed */
        F->pools[0].node_limit = 0;
        solver_free(F->solver);
        F->solver = NULL;
        r = solve();
        assert_int_equal(r->n_launches, 0);
        assert_int_equal(r->n_unschedulable, 2);
        F->pools[0].has_node_limit = false;
        solver_free(F->solver);
        F->solver = NULL;
        r = solve();
        assert_int_equal(r->n_launches, 2);
        assert_int_equal(r->n_unschedulable, 0);
}

static void test_affinity_to_pod_pending_in_same_batch(void **state) {
        /* web (placed first: it is the larger) needs a node, then a zone, holding a pending db
         * pod; as in Karpenter, it waits for db to be placed and follows it */
        size_t w = labelled("web", 1, 1500, 1024, "web");
        add_term(&F->pods[w], false, SOLVER_LABEL_HOSTNAME, "db");
        labelled("db", 1, 300, 256, "db");
        size_t a = labelled("api", 1, 1500, 1024, "api");
        add_term(&F->pods[a], false, SOLVER_LABEL_ZONE, "cache");
        size_t c = labelled("cache", 1, 300, 256, "cache");
        pod_selector(&F->pods[c], SOLVER_LABEL_ZONE, "zone-c");
        const SolverResult *r = solve();
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(decision("web-0")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("web-0")->target, decision("db-0")->target);
        assert_string_equal(launch_zone_of("cache-0"), "zone-c");
        assert_string_equal(launch_zone_of("api-0"), "zone-c");
}

static void test_affinity_to_pending_pod_that_cannot_go(void **state) {
        /* db cannot be placed (too big): web, waiting for it, stays pending and says why */
        size_t w = labelled("web", 1, 500, 512, "web");
        add_term(&F->pods[w], false, SOLVER_LABEL_HOSTNAME, "db");
        labelled("db", 1, 64000, 256, "db");
        const SolverResult *r = solve();
        assert_int_equal(r->n_unschedulable, 2);
        assert_int_equal(decision("db-0")->reason, SOLVER_REASON_RESOURCES);
        assert_int_equal(decision("web-0")->reason, SOLVER_REASON_TOPOLOGY);
}

static void test_anti_affinity_between_pending_pods(void **state) {
        /* big (placed first) refuses app=small on its node, and other (placed first) refuses
         * app=late on its zone; small and late are pending in the same batch: each keeps away */
        size_t b = labelled("big", 1, 1200, 1024, "big");
        add_term(&F->pods[b], true, SOLVER_LABEL_HOSTNAME, "small");
        labelled("small", 1, 300, 256, "small");
        size_t o = labelled("other", 1, 1200, 1024, "other");
        add_term(&F->pods[o], true, SOLVER_LABEL_ZONE, "late");
        pod_selector(&F->pods[o], SOLVER_LABEL_ZONE, "zone-a");
        labelled("late", 1, 300, 256, "late");
        /* and the other way round: the smaller pod carries the term */
        size_t x = labelled("x", 1, 300, 256, "x");
        add_term(&F->pods[x], true, SOLVER_LABEL_HOSTNAME, "y");
        labelled("y", 1, 1200, 1024, "y");
        const SolverResult *r = solve();
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_not_equal(decision("big-0")->target, decision("small-0")->target);
        assert_int_not_equal(decision("x-0")->target, decision("y-0")->target);
        assert_string_equal(launch_zone_of("other-0"), "zone-a");
        assert_string_not_equal(launch_zone_of("late-0"), "zone-a");
}

static SolverCapacityType launch_ct_of(const char *pod) {
        const SolverDecision *d = decision(pod);
        assert_int_equal(d->kind, SOLVER_DECISION_LAUNCH);
        return F->res->launches[d->target].capacity_type;
}

static void test_capacity_type_topology(void **state) {
        /* a pool with spot and on-demand (tried first: heavier) */
        add_pool("any", 10);
        /* spread over capacity types, maxSkew 1: 4 pods, 2 spot and 2 on-demand */
        size_t f = labelled("s", 4, 1000, 1024, "s");
        spread(&F->pods[f], "karpenter.sh/capacity-type", 1, false, "s");
        copy_constraints(f, f + 4);
        /* anti-affinity on capacity type: one per type, the third cannot go */
        size_t g = labelled("one", 3, 500, 512, "one");
        add_term(&F->pods[g], true, "karpenter.sh/capacity-type", "one");
        copy_constraints(g, g + 3);
        /* affinity on capacity type to a pod on an existing spot node */
        SolverNode *n1 = add_node("n1", "any", "c.large", "zone-a", 2, 4);
        n1->capacity_type = SOLVER_CAPACITY_SPOT;
        size_t c = labelled("cache", 1, 1900, 512, "cache");
        F->pods[c].node_name = "n1";
        size_t w = labelled("near", 1, 1000, 1024, "near");
        add_term(&F->pods[w], false, "karpenter.sh/capacity-type", "cache");
        const SolverResult *r = solve();
        int per[2] = {};
        for (int i = 0; i < 4; i++)
                per[launch_ct_of(F->pods[f + (size_t) i].name)]++;
        assert_int_equal(per[SOLVER_CAPACITY_SPOT], 2);
        assert_int_equal(per[SOLVER_CAPACITY_ON_DEMAND], 2);
        int placed = 0;
        bool used[2] = {};
        for (int i = 0; i < 3; i++) {
                const SolverDecision *d = decision(F->pods[g + (size_t) i].name);
                if (d->kind == SOLVER_DECISION_UNSCHEDULABLE) {
                        assert_int_equal(d->reason, SOLVER_REASON_TOPOLOGY);
                        continue;
                }
                SolverCapacityType ct = launch_ct_of(F->pods[g + (size_t) i].name);
                assert_false(used[ct]);
                used[ct] = true;
                placed++;
        }
        assert_int_equal(placed, 2);
        assert_int_equal(launch_ct_of("near-0"), SOLVER_CAPACITY_SPOT);
        assert_int_equal(r->n_unschedulable, 1);
}

static void test_capacity_type_spread_counts_existing(void **state) {
        /* two matching pods already run on an on-demand node: the next two go to spot */
        SolverNodePool *p = add_pool("any", 10);
        (void) p;
        add_node("n1", "any", "c.xlarge", "zone-a", 4, 8); /* on-demand */
        size_t b = labelled("old", 2, 1900, 512, "s");
        F->pods[b].node_name = "n1";
        F->pods[b + 1].node_name = "n1";
        size_t f = labelled("s", 2, 1000, 1024, "s");
        spread(&F->pods[f], "karpenter.sh/capacity-type", 1, false, "s");
        copy_constraints(f, f + 2);
        solve();
        assert_int_equal(launch_ct_of("s-0"), SOLVER_CAPACITY_SPOT);
        assert_int_equal(launch_ct_of("s-1"), SOLVER_CAPACITY_SPOT);
}

static void test_unsupported_topology_key(void **state) {
        size_t f = labelled("r", 1, 500, 512, "r");
        spread(&F->pods[f], "topology.kubernetes.io/region", 1, false, "r");
        size_t g = labelled("ok", 1, 500, 512, "ok");
        spread(&F->pods[g], "topology.kubernetes.io/region", 1, true, "ok");
        solve();
        assert_int_equal(decision("r-0")->reason, SOLVER_REASON_UNSUPPORTED);
        assert_int_equal(decision("ok-0")->kind, SOLVER_DECISION_LAUNCH);
}

/* ---- host ports, volumes -------------------------------------------------------------------- */

static void test_host_ports(void **state) {
        add_node("n1", "default", "c.2xlarge", "zone-a", 8, 16);
        size_t e = labelled("exporter", 1, 100, 100, "exporter");
        SolverHostPort *hp = solver_arena_alloc(F->a, sizeof(SolverHostPort));
        *hp = (SolverHostPort) { 9100, 0 };
        F->pods[e].host_ports = hp;
        F->pods[e].n_host_ports = 1;
        F->pods[e].node_name = "n1";
        size_t f = labelled("x", 2, 100, 100, "x");
        F->pods[f].host_ports = hp;
        F->pods[f].n_host_ports = 1;
        copy_constraints(f, f + 2);
        size_t u = labelled("udp", 1, 100, 100, "udp");
        SolverHostPort *hu = solver_arena_alloc(F->a, sizeof(SolverHostPort));
        *hu = (SolverHostPort) { 9100, 1 };
        F->pods[u].host_ports = hu;
        F->pods[u].n_host_ports = 1;
        const SolverResult *r = solve();
        /* 9100/TCP is taken on n1: both x pods need new nodes, one each */
        assert_int_equal(decision("x-0")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("x-1")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_not_equal(decision("x-0")->target, decision("x-1")->target);
        /* 9100/UDP is free on n1 */
        assert_int_equal(decision("udp-0")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(r->n_launches, 2);
}

static void test_daemonset_host_port(void **state) {
        /* node-exporter (a DaemonSet) holds 9100/TCP on every new node: a pod asking for the same
         * host port has nowhere to go, one asking for 9101 does */
        SolverHostPort *hp = solver_arena_alloc(F->a, 2 * sizeof(SolverHostPort));
        hp[0] = (SolverHostPort) { 9100, 0 };
        hp[1] = (SolverHostPort) { 9101, 0 };
        F->ds[F->n_ds++] = (SolverPod) { .name = "node-exporter", .requests.v = { [SOLVER_RES_CPU] = 100 },
                                         .host_ports = &hp[0], .n_host_ports = 1 };
        SolverPod *clash = add_pod("clash", 100, 100);
        clash->host_ports = &hp[0];
        clash->n_host_ports = 1;
        SolverPod *fine = add_pod("fine", 100, 100);
        fine->host_ports = &hp[1];
        fine->n_host_ports = 1;
        solve();
        assert_int_equal(decision("clash")->kind, SOLVER_DECISION_UNSCHEDULABLE);
        assert_int_equal(decision("clash")->reason, SOLVER_REASON_HOST_PORTS);
        assert_non_null(strstr(decision("clash")->message, "9100"));
        assert_int_equal(decision("fine")->kind, SOLVER_DECISION_LAUNCH);
}

static void test_volume_zone_and_wffc(void **state) {
        /* a bound zonal volume in zone-c */
        SolverPod *p = add_pod("pg", 500, 512);
        p->volume_zones = strs1("zone-c");
        p->n_volume_zones = 1;
        /* the GPU type exists only in zone-a: a GPU pod with a zone-c volume cannot run */
        SolverPod *g = add_pod("gpuvol", 500, 512);
        g->requests.v[SOLVER_RES_NVIDIA_GPU] = 1;
        g->volume_zones = strs1("zone-c");
        g->n_volume_zones = 1;
        /* two pods sharing one WaitForFirstConsumer claim end in the same zone */
        SolverPod *w1 = add_pod("w1", 3000, 512);
        w1->wffc_claims = strs1("default/shared");
        w1->n_wffc_claims = 1;
        SolverPod *w2 = add_pod("w2", 3000, 1024);
        w2->wffc_claims = strs1("default/shared");
        w2->n_wffc_claims = 1;
        const SolverResult *r = solve();
        assert_string_equal(launch_zone_of("pg"), "zone-c");
        assert_int_equal(decision("gpuvol")->reason, SOLVER_REASON_VOLUME_ZONE);
        assert_string_equal(launch_zone_of("w1"), launch_zone_of("w2"));
        assert_int_equal(r->n_claim_zones, 1);
        assert_string_equal(r->claim_zones[0].claim, "default/shared");
        assert_string_equal(r->claim_zones[0].zone, launch_zone_of("w1"));
}

/* ---- existing nodes, priority, headroom ----------------------------------------------------- */

static void test_existing_and_in_flight_first(void **state) {
        add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        SolverNode *inflight = add_node("n2", "default", "c.large", "zone-b", 2, 4);
        inflight->in_flight = true;
        F->ds[F->n_ds++] = (SolverPod) { .name = "ds", .requests.v = { [SOLVER_RES_CPU] = 500 } };
        add_pod("a", 3000, 1024);  /* n1 */
        add_pod("b", 1500, 1024);  /* n2 holds 500m of DaemonSet: 1.5 fits exactly */
        add_pod("c", 1000, 1024);  /* n1 has 1000m left */
        add_pod("d", 1000, 1024);  /* nothing left: new node */
        const SolverResult *r = solve();
        assert_int_equal(decision("a")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(decision("a")->target, 0);
        assert_int_equal(decision("b")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(decision("b")->target, 1);
        assert_int_equal(decision("c")->target, 0);
        assert_int_equal(decision("d")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(r->n_placed_existing, 3);
}

static void test_registering_node_taints_are_temporary(void **state) {
        /* a node of the pool that just registered (not-ready, uninitialized) takes the pods it
         * was launched for; a node outside any NodePool with the same taints does not */
        static SolverTaint starting[] = {
                { .key = "node.kubernetes.io/not-ready", .effect = SOLVER_EFFECT_NO_SCHEDULE },
                { .key = "node.cloudprovider.kubernetes.io/uninitialized", .value = "true",
                  .effect = SOLVER_EFFECT_NO_SCHEDULE } };
        SolverNode *n = add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        n->taints = starting;
        n->n_taints = 2;
        add_pod("a", 1000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(decision("a")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(r->n_launches, 0);
}

static void test_foreign_node_taints_are_read(void **state) {
        static SolverTaint starting[] = {
                { .key = "node.kubernetes.io/not-ready", .effect = SOLVER_EFFECT_NO_SCHEDULE } };
        SolverNode *n = add_node("n1", NULL, "c.xlarge", "zone-a", 4, 8);
        n->taints = starting;
        n->n_taints = 1;
        add_pod("a", 1000, 1024);
        solve();
        assert_int_equal(decision("a")->kind, SOLVER_DECISION_LAUNCH);
}

static void test_cordoned_node_is_skipped(void **state) {
        SolverNode *n = add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        n->unschedulable = true;
        add_pod("a", 1000, 1024);
        solve();
        assert_int_equal(decision("a")->kind, SOLVER_DECISION_LAUNCH);
}

static void test_preemption(void **state) {
        /* n1 (2 cpu) is full with a low-priority 1.5-cpu pod; a high-priority 1.5-cpu pod
         * preempts it instead of getting a node; the victim is re-planned on a new node. A
         * pod with preemptionPolicy Never needs a node of its own. */
        add_node("n1", "default", "c.large", "zone-a", 2, 4);
        SolverPod *low = add_pod("low", 1500, 512);
        low->node_name = "n1";
        low->priority = 0;
        SolverPod *high = add_pod("high", 1500, 512);
        high->priority = 1000;
        SolverPod *never = add_pod("never", 1000, 512);
        never->priority = 1000;
        never->preempt_never = true;
        const SolverResult *r = solve();
        assert_int_equal(decision("high")->kind, SOLVER_DECISION_PREEMPT);
        assert_int_equal(decision("high")->target, 0);
        assert_true(decision("low")->preempted);
        assert_int_equal(decision("low")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("never")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(r->n_preempting, 1);
        assert_int_equal(r->n_preempted_pods, 1);
        assert_int_equal(r->preempted_pods[0], pod_index("low"));
        /* without preemption both new pods need capacity and low stays */
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.no_preemption = true;
        r = solve_opts(&o);
        assert_int_equal(decision("high")->kind, SOLVER_DECISION_LAUNCH);
        assert_int_equal(decision("low")->kind, SOLVER_DECISION_NONE);
        assert_false(decision("low")->preempted);
}

static void test_headroom(void **state) {
        /* keep 4 cpu / 8 Gi free in 2 units of 2 cpu / 4 Gi: c.xlarge (4 cpu 8Gi) holds exactly
         * both, but a.xlarge is cheaper (arm64, 4 cpu 8Gi) */
        F->pools[0].headroom.v[SOLVER_RES_CPU] = 4000;
        F->pools[0].headroom.v[SOLVER_RES_MEMORY] = 8 * GI;
        F->pools[0].headroom.v[SOLVER_RES_PODS] = 2;
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(r->launches[0].headroom_units, 2);
        assert_int_equal(r->launches[0].n_pods, 0);
        assert_string_equal(launch_type(0), "a.xlarge");
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.no_headroom = true;
        r = solve_opts(&o);
        assert_int_equal(r->n_launches, 0);
}

static void test_headroom_taken_by_pending_pods(void **state) {
        /* an existing node of the pool has 4 cpu free: that is the headroom... until a pending
         * pod takes 3 cpu of it, then 2 cpu of headroom need a new node */
        add_node("n1", "default", "c.xlarge", "zone-a", 4, 8);
        F->pools[0].headroom.v[SOLVER_RES_CPU] = 2000;
        F->pools[0].headroom.v[SOLVER_RES_MEMORY] = 1 * GI;
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 0);
        solver_result_free(F->res);
        F->res = NULL;
        solver_free(F->solver);
        F->solver = NULL;
        add_pod("p", 3000, 1024);
        r = solve();
        assert_int_equal(decision("p")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(r->launches[0].headroom_units, 1);
        assert_int_equal(r->launches[0].n_pods, 0);
}

/* ---- consolidation API ---------------------------------------------------------------------- */

static void test_remove_nodes_and_state_restored(void **state) {
        /* n1 (2 cpu) holds a (500m); n2 (4 cpu) holds b (1000m) and c (2500m), 500m free */
        add_node("n1", "default", "c.large", "zone-a", 2, 4);
        add_node("n2", "default", "c.xlarge", "zone-a", 4, 8);
        F->nodes[1].price = 0.170;
        SolverPod *a = add_pod("a", 500, 512);
        a->node_name = "n1";
        SolverPod *b = add_pod("b", 1000, 1024);
        b->node_name = "n2";
        SolverPod *c = add_pod("c", 2500, 1024);
        c->node_name = "n2";
        size_t rm1 = 0, rm2 = 1;
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.skip_pending = true;
        o.max_new_nodes = 0;
        o.remove_nodes = &rm1;
        o.n_remove_nodes = 1;
        /* n1 goes: a fills n2 exactly */
        const SolverResult *r = solve_opts(&o);
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(decision("a")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(decision("a")->target, 1);
        assert_int_equal(decision("b")->kind, SOLVER_DECISION_NONE);
        /* n2 goes: 1.5 cpu left on n1 take b, not c */
        o.remove_nodes = &rm2;
        r = solve_opts(&o);
        assert_int_equal(r->n_unschedulable, 1);
        assert_int_equal(decision("b")->target, 0);
        assert_int_equal(decision("c")->reason, SOLVER_REASON_MAX_NEW_NODES);
        /* ...with one new node allowed, c gets a.xlarge (0.136), cheaper than n2 (0.170) */
        o.max_new_nodes = 1;
        r = solve_opts(&o);
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(launch_type(0), "a.xlarge");
        assert_true(r->total_price < F->nodes[1].price);
        /* every run starts from the same state: n1 again */
        o.remove_nodes = &rm1;
        o.max_new_nodes = 0;
        r = solve_opts(&o);
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(decision("a")->target, 1);
        /* and removing both leaves three pods for at most one node: c.xlarge-class holds 4 cpu */
        size_t both[] = { 0, 1 };
        o.remove_nodes = both;
        o.n_remove_nodes = 2;
        o.max_new_nodes = 1;
        r = solve_opts(&o);
        assert_int_equal(r->n_unschedulable, 0);
        assert_int_equal(r->n_launches, 1);
        assert_int_equal(r->launches[0].n_pods, 3);
}

/* The two nodes of test_remove_nodes_and_state_restored, priced, as consolidation candidates:
 * n1 c.large $0.085 holds a (500m); n2 c.xlarge $0.170 holds b (1000m) and c (2500m). */
static void two_nodes(SolverCapacityType ct) {
        add_node("n1", "default", "c.large", "zone-a", 2, 4);
        add_node("n2", "default", "c.xlarge", "zone-a", 4, 8);
        F->nodes[0].price = 0.085;
        F->nodes[1].price = 0.170;
        F->nodes[0].capacity_type = F->nodes[1].capacity_type = ct;
        add_pod("a", 500, 512)->node_name = "n1";
        add_pod("b", 1000, 1024)->node_name = "n2";
        add_pod("c", 2500, 1024)->node_name = "n2";
        F->snap = (SolverSnapshot) { F->types, F->n_types, F->pools, F->n_pools, F->nodes, F->n_nodes,
                                     F->pods,  F->n_pods,  F->ds,    F->n_ds };
        assert_int_equal(solver_new(&F->snap, &F->solver, NULL), 0);
}

static SolverConsolidation *consolidate(const SolverConsolidateOptions *o) {
        SolverConsolidation *c = NULL;
        assert_int_equal(solver_consolidate(F->solver, o, &c), 0);
        assert_non_null(c);
        return c;
}

static void test_disruption_cost(void **state) {
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        assert_true(solver_disruption_cost(&F->snap, 0) == 1.0);
        assert_true(solver_disruption_cost(&F->snap, 1) == 2.0);
        /* priority 2^25 adds one, deletion cost 2^27 one more; both clamp at 10 per pod */
        F->pods[0].priority = 1 << 25;
        F->pods[0].deletion_cost = (int64_t) 1 << 27;
        assert_true(solver_disruption_cost(&F->snap, 0) == 3.0);
        F->pods[0].priority = 2000000000;
        assert_true(solver_disruption_cost(&F->snap, 0) == 10.0);
        F->pods[0].priority = 0;
        F->pods[0].deletion_cost = 0;
}

static void test_consolidate_multi_node_replace(void **state) {
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t cand[] = { 1, 0 };
        SolverConsolidateOptions o = { .candidates = cand, .n_candidates = 2, .threshold = 0.15 };
        SolverConsolidation *c = consolidate(&o);
        /* both nodes ($0.255) go for one a.xlarge ($0.136): 4 cpu holds a, b and c exactly */
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        assert_true(c->multi);
        assert_int_equal(c->n_nodes, 2);
        assert_int_equal(c->n_pods, 3);
        assert_non_null(c->replacement);
        assert_string_equal(F->types[c->replacement->type].name, "a.xlarge");
        assert_true(c->new_price == 0.136);
        for (size_t i = 0; i < c->replacement->n_offerings; i++) {
                assert_true(c->replacement->offerings[i].price < 0.255 * 0.85);
                assert_int_equal(c->replacement->offerings[i].capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        }
        assert_non_null(strstr(c->message, "saves $0.1190/h"));
        solver_consolidation_free(c);

        /* the same pair through evaluate gives the same answer */
        size_t both[] = { 0, 1 };
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, both, 2, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        solver_consolidation_free(c);
}

static void test_consolidate_node_limit(void **state) {
        /* limits.nodes is hard, as in Karpenter: the two nodes fill a limit of 2, so replacing
         * them with one needs a third while they drain: not done; a delete still is */
        F->pools[0].has_node_limit = true;
        F->pools[0].node_limit = 2;
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t cand[] = { 1, 0 };
        SolverConsolidateOptions o = { .candidates = cand, .n_candidates = 2, .threshold = 0.15 };
        SolverConsolidation *c = consolidate(&o);
        assert_int_not_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        assert_null(c->replacement);
        solver_consolidation_free(c);
        /* room for one more: the replacement of test_consolidate_multi_node_replace */
        solver_free(F->solver);
        F->solver = NULL;
        F->pools[0].node_limit = 3;
        F->snap = (SolverSnapshot) { F->types, F->n_types, F->pools, F->n_pools, F->nodes, F->n_nodes,
                                     F->pods,  F->n_pods,  F->ds,    F->n_ds };
        assert_int_equal(solver_new(&F->snap, &F->solver, NULL), 0);
        c = consolidate(&o);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        solver_consolidation_free(c);
}

static void test_consolidate_single_node_delete_first_by_cost(void **state) {
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t cand[] = { 1, 0 };
        SolverConsolidateOptions o = { .candidates = cand, .n_candidates = 2, .threshold = 0.15, .no_multi = true };
        SolverConsolidation *c = consolidate(&o);
        /* n1 holds one pod (cost 1), n2 two: n1 is tried first, and a fits in n2's free 500m */
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_DELETE);
        assert_false(c->multi);
        assert_int_equal(c->n_nodes, 1);
        assert_int_equal(c->nodes[0], 0);
        assert_null(c->replacement);
        assert_true(c->old_price == 0.085);
        solver_consolidation_free(c);

        /* a pod that costs more to disrupt on n1 makes n2 the first candidate: b goes to n1,
         * c to a new a.xlarge ($0.136 < $0.170 x 0.85) */
        F->pods[0].priority = 1 << 26;
        F->solver = solver_free(F->solver);
        assert_int_equal(solver_new(&F->snap, &F->solver, NULL), 0);
        c = consolidate(&o);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        assert_int_equal(c->nodes[0], 1);
        assert_string_equal(F->types[c->replacement->type].name, "a.xlarge");
        solver_consolidation_free(c);
}

static void test_consolidate_threshold(void **state) {
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t n2 = 1;
        SolverConsolidation *c = NULL;
        /* a.xlarge at $0.136 saves 20 % of n2's $0.170: enough at 15 %, not at 25 % */
        SolverConsolidateOptions o = { .threshold = 0.15 };
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        solver_consolidation_free(c);
        o.threshold = 0.25;
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_NONE);
        assert_non_null(strstr(c->message, "no replacement costs less than $0.1275/h"));
        solver_consolidation_free(c);
        /* deletes only: c cannot go anywhere */
        o.threshold = 0;
        o.no_replace = true;
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_NONE);
        assert_non_null(strstr(c->message, "pods would not fit elsewhere"));
        solver_consolidation_free(c);
}

static void test_consolidate_budgets(void **state) {
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t cand[] = { 0, 1 };
        size_t allow = 1;
        SolverConsolidateOptions o = { .candidates = cand, .n_candidates = 2, .threshold = 0.15,
                                       .pool_allowance = &allow };
        /* one node at a time: no multi-node set, the single-node answer */
        SolverConsolidation *c = consolidate(&o);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_DELETE);
        assert_int_equal(c->n_nodes, 1);
        solver_consolidation_free(c);
        allow = 0;
        c = consolidate(&o);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_NONE);
        assert_int_equal(c->evaluations, 0);
        solver_consolidation_free(c);
}

static void test_consolidate_spot(void **state) {
        /* the pool may launch spot too: only on-demand replaces spot unless spot-to-spot is on,
         * and then only with enough cheaper spot types */
        F->pools[0].n_requirements = 0;
        two_nodes(SOLVER_CAPACITY_SPOT);
        size_t n2 = 1;
        SolverConsolidation *c = NULL;
        SolverConsolidateOptions o = { .threshold = 0.15 };
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        assert_int_equal(c->replacement->capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        solver_consolidation_free(c);
        o.spot_to_spot = true; /* 15 cheaper spot types needed, the catalog has fewer */
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->replacement->capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        solver_consolidation_free(c);
        o.min_spot_types = 2;
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_REPLACE);
        assert_int_equal(c->replacement->capacity_type, SOLVER_CAPACITY_SPOT);
        assert_true(c->new_price == 0.050);
        solver_consolidation_free(c);
        o.min_spot_types = 10;
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n2, 1, &c), 0);
        assert_int_equal(c->replacement->capacity_type, SOLVER_CAPACITY_ON_DEMAND);
        solver_consolidation_free(c);
}

static void test_consolidate_keeps_headroom(void **state) {
        /* headroom of 1 cpu: n2's free 500m and n1's 1500m hold it; without n1 it has no room */
        F->pools[0].headroom.v[SOLVER_RES_CPU] = 1000;
        two_nodes(SOLVER_CAPACITY_ON_DEMAND);
        size_t n1 = 0;
        SolverConsolidation *c = NULL;
        SolverConsolidateOptions o = { .threshold = 0.15, .no_replace = true };
        assert_int_equal(solver_consolidate_evaluate(F->solver, &o, &n1, 1, &c), 0);
        assert_int_equal(c->kind, SOLVER_CONSOLIDATE_NONE);
        assert_non_null(strstr(c->message, "headroom"));
        solver_consolidation_free(c);
}

static void test_deterministic(void **state) {
        for (int i = 0; i < 20; i++) {
                SolverPod *p = add_pod(solver_arena_printf(F->a, "p%d", i), 100 * (i % 7 + 1), 128 * (i % 5 + 1));
                pod_label(p, "app", i % 2 ? "odd" : "even");
        }
        const SolverResult *r = solve();
        double price = r->total_price;
        size_t n = r->n_launches;
        uint32_t t0 = r->launches[0].type;
        for (int k = 0; k < 3; k++) {
                solver_result_free(F->res);
                F->res = NULL;
                solver_free(F->solver);
                F->solver = NULL;
                r = solve();
                assert_true(r->total_price == price);
                assert_int_equal(r->n_launches, n);
                assert_int_equal(r->launches[0].type, t0);
        }
}

/* ---- static NodePools (spec.replicas) ------------------------------------------------------- */

static size_t launches_in_zone(const char *zone) {
        size_t n = 0;
        for (size_t i = 0; i < F->res->n_launches; i++) {
                const SolverLaunch *l = &F->res->launches[i];
                n += strcmp(l->zone ? l->zone : l->offerings[0].zone, zone) == 0;
        }
        return n;
}

static void test_static_pool_keeps_replicas(void **state) {
        /* 3 nodes whatever the pods: empty, the cheapest type, spread over the three zones, one
         * zone-a node there already (and a zone-b one leaving, which does not count) */
        F->n_pools = 0;
        SolverNodePool *p = add_pool("fixed", 0);
        pool_req(p, SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, "on-demand", 0);
        pool_req(p, "nodesmith.io/instance-family", SOLVER_OP_IN, "c", 0);
        p->is_static = true;
        p->replicas = 3;
        add_node("s1", "fixed", "c.large", "zone-a", 2, 4);
        add_node("s2", "fixed", "c.large", "zone-b", 2, 4)->deleting = true;
        const SolverResult *r = solve();
        assert_int_equal(solver_static_missing(&F->snap, 0), 2);
        assert_int_equal(r->n_launches, 2);
        for (size_t i = 0; i < r->n_launches; i++) {
                assert_int_equal(r->launches[i].n_pods, 0);
                assert_string_equal(launch_type(i), "c.large");
        }
        assert_int_equal(launches_in_zone("zone-a"), 0);
        assert_int_equal(launches_in_zone("zone-b"), 1);
        assert_int_equal(launches_in_zone("zone-c"), 1);
}

static void test_static_pool_within_node_limit(void **state) {
        /* limits.nodes counts the leaving node too: 3 replicas, at most 2 nodes, one leaving -> 1 */
        F->n_pools = 0;
        SolverNodePool *p = add_pool("fixed", 0);
        pool_req(p, SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, "on-demand", 0);
        p->is_static = true;
        p->replicas = 3;
        p->has_node_limit = true;
        p->node_limit = 2;
        add_node("s1", "fixed", "c.large", "zone-a", 2, 4)->deleting = true;
        const SolverResult *r = solve();
        assert_int_equal(solver_static_missing(&F->snap, 0), 1);
        assert_int_equal(r->n_launches, 1);
}

static void test_static_pool_launches_for_no_pod(void **state) {
        /* a pending pod goes onto a static node with room, never onto a new one: with only the
         * static pool (at its replicas) a pod too big for its node stays pending */
        F->n_pools = 0;
        SolverNodePool *p = add_pool("fixed", 0);
        pool_req(p, SOLVER_LABEL_CAPACITY_TYPE, SOLVER_OP_IN, "on-demand", 0);
        p->is_static = true;
        p->replicas = 1;
        add_node("s1", "fixed", "c.xlarge", "zone-a", 4, 8);
        add_pod("fits", 1000, 1024);
        add_pod("big", 6000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 0);
        assert_int_equal(decision("fits")->kind, SOLVER_DECISION_EXISTING);
        assert_int_equal(decision("big")->kind, SOLVER_DECISION_UNSCHEDULABLE);
        assert_non_null(strstr(decision("big")->message, "NodePool fixed is static"));
}

static void test_static_pool_beside_dynamic(void **state) {
        /* the dynamic pool launches for the pods; the static one (replicas 0) launches nothing */
        SolverNodePool *p = add_pool("fixed", 0);
        p->is_static = true;
        p->replicas = 0;
        add_pods("web", 2, 1000, 1024);
        const SolverResult *r = solve();
        assert_int_equal(r->n_launches, 1);
        assert_string_equal(F->pools[r->launches[0].nodepool].name, "default");
        assert_int_equal(r->launches[0].n_pods, 2);
}

static void test_no_nodepool(void **state) {
        F->n_pools = 0;
        add_pod("p", 100, 100);
        solve();
        assert_int_equal(decision("p")->reason, SOLVER_REASON_NO_NODEPOOL);
}

static void test_bad_snapshot(void **state) {
        add_node("n1", "default", NULL, "zone-a", 1, 1);
        add_node("n1", "default", NULL, "zone-a", 1, 1);
        SolverSnapshot snap = { F->types, F->n_types, F->pools, F->n_pools, F->nodes, F->n_nodes, F->pods, 0, NULL, 0 };
        Solver *s = NULL;
        char *err = NULL;
        assert_int_equal(solver_new(&snap, &s, &err), -EINVAL);
        assert_non_null(strstr(err, "duplicate node n1"));
        free(err);
}

int main(void) {
#define T(x) cmocka_unit_test_setup_teardown(x, setup, teardown)
        const struct CMUnitTest tests[] = {
                T(test_cheapest_type_holds_all),
                T(test_budget_buys_by_cost_not_by_pile),
                T(test_budget_values_what_the_pods_fill),
                T(test_too_big_is_unschedulable),
                T(test_daemonset_overhead),
                T(test_daemonset_not_tolerating_pool_taint_adds_nothing),
                T(test_gpu_request),
                T(test_node_selector),
                T(test_karpenter_keys_in_selectors),
                T(test_required_affinity_gt),
                T(test_required_terms_are_ored),
                T(test_preferred_affinity_honoured_then_relaxed),
                T(test_custom_labels),
                T(test_multi_valued_pool_label_narrows_per_node),
                T(test_improve_split),
                T(test_improve_no_split_when_nodes_capped),
                T(test_improve_absorb),
                T(test_taints_and_weights),
                T(test_taint_not_tolerated_anywhere),
                T(test_prefer_no_schedule_relaxed),
                T(test_limits),
                T(test_limits_count_existing_nodes),
                T(test_limit_nodes),
                T(test_min_values),
                T(test_zone_spread),
                T(test_zone_spread_counts_existing_pods),
                T(test_zone_spread_unsatisfiable_and_schedule_anyway),
                T(test_schedule_anyway_relaxed_when_limits_bind),
                T(test_hostname_spread),
                T(test_zone_affinity),
                T(test_hostname_affinity),
                T(test_anti_affinity),
                T(test_inverse_anti_affinity),
                T(test_affinity_to_pod_pending_in_same_batch),
                T(test_affinity_to_pending_pod_that_cannot_go),
                T(test_anti_affinity_between_pending_pods),
                T(test_capacity_type_topology),
                T(test_capacity_type_spread_counts_existing),
                T(test_unsupported_topology_key),
                T(test_host_ports),
                T(test_daemonset_host_port),
                T(test_volume_zone_and_wffc),
                T(test_existing_and_in_flight_first),
                T(test_registering_node_taints_are_temporary),
                T(test_foreign_node_taints_are_read),
                T(test_cordoned_node_is_skipped),
                T(test_preemption),
                T(test_headroom),
                T(test_headroom_taken_by_pending_pods),
                T(test_remove_nodes_and_state_restored),
                T(test_disruption_cost),
                T(test_consolidate_multi_node_replace),
                T(test_consolidate_node_limit),
                T(test_consolidate_single_node_delete_first_by_cost),
                T(test_consolidate_threshold),
                T(test_consolidate_budgets),
                T(test_consolidate_spot),
                T(test_consolidate_keeps_headroom),
                T(test_deterministic),
                T(test_static_pool_keeps_replicas),
                T(test_static_pool_within_node_limit),
                T(test_static_pool_launches_for_no_pod),
                T(test_static_pool_beside_dynamic),
                T(test_no_nodepool),
                T(test_bad_snapshot),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
