/* SPDX-License-Identifier: Apache-2.0 */
/* bench/scheduling's check of a plan, outside the solver (nothing of it is used here but the
 * snapshot and the result): every pod on a new node whose instance type holds what is put on it,
 * and the pods' topology rules as kube-scheduler applies them and Karpenter's scheduler models
 * them:
 *
 *  - a label selector matches the pods of the owner's namespace that carry all its matchLabels,
 *    whatever group made them; a pod counts in a zone only on a node whose zone is fixed;
 *  - required anti-affinity: no other matching pod in the pod's domain (the rule is symmetric,
 *    so no order of binding does better);
 *  - required affinity: the domain holds a matching pod that needs no such affinity itself, or
 *    it holds every matching pod there is (the first of them went first, anywhere);
 *  - topology spread (DoNotSchedule) is checked by kube-scheduler when each pod is bound: the
 *    matching pods in its domain, plus one if it matches its own selector, less the least count
 *    over the domains (0 for hostname: a new node can always be made, as Karpenter assumes) is
 *    at most maxSkew. Hostname spreads are checked exactly: each node's pods must have an order in
 *    which each meets them (verify_host_spreads). Zonal ones by what holds in any order
 *    (verify_zone_spreads).
 * Selectors with matchExpressions are not part of the benchmark's pods and are refused. */
#pragma once

#include <stdarg.h>

#include "lib/macro.h"

#define VERIFY_MAX_SELECTORS 64
#define N_ZONES (sizeof(zones) / sizeof(zones[0]))

typedef struct VerifySel {
        const char *ns;
        const SolverLabelSelector *sel;
} VerifySel;

typedef struct Verify {
        const SolverPod *pods;
        size_t n, n_nodes;
        const SolverResult *res;
        VerifySel sels[VERIFY_MAX_SELECTORS];
        size_t n_sels;
        uint64_t *matches;      /* [n]: selectors matching pod i */
        uint64_t *owns_aff;     /* [n]: selectors pod i has a required affinity term on */
        int *zone;              /* [n_nodes]: index in zones[] or -1 */
        int32_t *hcount, *zcount; /* final: [sel * n_nodes + node], [sel * N_ZONES + z] */
        int32_t *hfree, *zfree; /* final, matching pods that own no affinity term on the selector */
        int32_t *total;         /* [sel] */
} Verify;

static void verify_print_pod(const SolverPod *p) {
        fprintf(stderr, "  %s (%s):", p->name, p->owner ? p->owner : "");
        for (size_t l = 0; l < p->n_labels; l++)
                fprintf(stderr, " %s=%s", p->labels[l].key, p->labels[l].value);
        for (size_t k = 0; k < p->n_spreads; k++)
                for (size_t l = 0; l < p->spreads[k].selector.n_match_labels; l++)
                        fprintf(stderr, "; spread on %s of %s=%s", p->spreads[k].topology_key,
                                p->spreads[k].selector.match_labels[l].key, p->spreads[k].selector.match_labels[l].value);
        fputc('\n', stderr);
}

/* Says what is wrong with pod i, lists the pods of its node (at most 40), and exits. */
static _Noreturn __attribute__((format(printf, 3, 4))) void verify_fail(const Verify *v, size_t i, const char *fmt,
                                                                          ...) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "%s: verify: pod %s: ", BENCH_NAME, v->pods[i].name);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        if (v->res->decisions[i].kind == SOLVER_DECISION_LAUNCH) {
                const SolverLaunch *l = &v->res->launches[v->res->decisions[i].target];
                fprintf(stderr, "\nits node (%s) holds:\n", l->zone ? l->zone : "zone open");
                for (size_t k = 0; k < l->n_pods && k < 40; k++)
                        verify_print_pod(&v->pods[l->pods[k]]);
        } else
                fputc('\n', stderr);
        exit(1);
}

static bool verify_sel_same(const SolverLabelSelector *a, const SolverLabelSelector *b) {
        if (a->n_match_labels != b->n_match_labels)
                return false;
        for (size_t i = 0; i < a->n_match_labels; i++) {
                size_t j = 0;
                while (j < b->n_match_labels && (strcmp(a->match_labels[i].key, b->match_labels[j].key) != 0 ||
                                                 strcmp(a->match_labels[i].value, b->match_labels[j].value) != 0))
                        j++;
                if (j == b->n_match_labels)
                        return false;
        }
        return true;
}

/* The index of (namespace, selector) in the table, added when new. */
static size_t verify_sel(Verify *v, size_t owner, const SolverLabelSelector *sel) {
        const char *ns = v->pods[owner].namespace_;
        if (sel->n_exprs)
                verify_fail(v, owner, "a selector with matchExpressions (not checked here)");
        for (size_t s = 0; s < v->n_sels; s++)
                if (strcmp(v->sels[s].ns, ns) == 0 && verify_sel_same(v->sels[s].sel, sel))
                        return s;
        if (v->n_sels == VERIFY_MAX_SELECTORS)
                verify_fail(v, owner, "more than %d distinct selectors", VERIFY_MAX_SELECTORS);
        v->sels[v->n_sels] = (VerifySel) { ns, sel };
        return v->n_sels++;
}

static bool verify_matches(const VerifySel *s, const SolverPod *p) {
        if (strcmp(s->ns, p->namespace_) != 0)
                return false;
        for (size_t i = 0; i < s->sel->n_match_labels; i++) {
                size_t j = 0;
                while (j < p->n_labels && (strcmp(p->labels[j].key, s->sel->match_labels[i].key) != 0 ||
                                           strcmp(p->labels[j].value, s->sel->match_labels[i].value) != 0))
                        j++;
                if (j == p->n_labels)
                        return false;
        }
        return true;
}

static uint32_t verify_node(const Verify *v, size_t i) {
        return v->res->decisions[i].target;
}

static bool verify_is_zone(const char *key) {
        return strcmp(key, SOLVER_LABEL_ZONE) == 0;
}

/* The pod's domain for a key: node index, or zone index (-1: the node's zone is open). */
static int64_t verify_domain(const Verify *v, size_t i, const char *key) {
        return verify_is_zone(key) ? v->zone[verify_node(v, i)] : (int64_t) verify_node(v, i);
}

static void verify_count(const Verify *v, size_t i, int32_t *hc, int32_t *zc, uint64_t only_free) {
        uint32_t node = verify_node(v, i);
        for (size_t s = 0; s < v->n_sels; s++) {
                if (!(v->matches[i] & (1ULL << s)) || (only_free & v->owns_aff[i] & (1ULL << s)))
                        continue;
                hc[s * v->n_nodes + node]++;
                if (v->zone[node] >= 0)
                        zc[s * N_ZONES + (size_t) v->zone[node]]++;
        }
}

static int32_t verify_get(const Verify *v, const int32_t *hc, const int32_t *zc, size_t s, const char *key,
                          int64_t dom) {
        return verify_is_zone(key) ? zc[s * N_ZONES + (size_t) dom] : hc[s * v->n_nodes + (size_t) dom];
}

/* Resources: independent sums of the pods on each node against its type's allocatable. */
static void verify_resources(const Bench *b, Verify *v) {
        SolverResources *sum = calloc(v->n_nodes + 1, sizeof(SolverResources));
        if (!sum)
                die("out of memory");
        for (size_t i = 0; i < v->n; i++)
                for (int r = 0; r < _SOLVER_RES_MAX; r++)
                        sum[verify_node(v, i)].v[r] += r == SOLVER_RES_PODS ? 1 : v->pods[i].requests.v[r];
        for (size_t l = 0; l < v->n_nodes; l++) {
                const SolverInstanceType *t = &b->types[v->res->launches[l].type];
                for (int r = 0; r < _SOLVER_RES_MAX; r++)
                        if (sum[l].v[r] > t->allocatable.v[r])
                                die(solver_arena_printf(b->arena, "verify: node %zu (%s) holds more %s than it has",
                                                        l, t->name, solver_resource_to_name(r)));
        }
        free(sum);
}

static void verify_affinities(Verify *v) {
        for (size_t i = 0; i < v->n; i++) {
                const SolverPod *p = &v->pods[i];
                for (int anti = 0; anti < 2; anti++)
                        for (size_t k = 0; k < (anti ? p->n_anti_affinity : p->n_affinity); k++) {
                                const SolverPodAffinityTerm *t = anti ? &p->anti_affinity[k] : &p->affinity[k];
                                size_t s = verify_sel(v, i, &t->selector);
                                int64_t d = verify_domain(v, i, t->topology_key);
                                if (d < 0)
                                        verify_fail(v, i, "zonal pod %saffinity on a node whose zone is open",
                                                    anti ? "anti-" : "");
                                int32_t self = (v->matches[i] >> s) & 1;
                                int32_t cnt = verify_get(v, v->hcount, v->zcount, s, t->topology_key, d) - self;
                                if (anti && cnt > 0)
                                        verify_fail(v, i, "anti-affinity broken (%d matching pods in its %s)", cnt,
                                                    t->topology_key);
                                if (!anti && verify_get(v, v->hfree, v->zfree, s, t->topology_key, d) == 0 &&
                                    cnt + self < v->total[s])
                                        verify_fail(v, i, "affinity broken (%d of %d matching pods in its %s)",
                                                    cnt + self, v->total[s], t->topology_key);
                        }
        }
}

/* Hostname spreads concern one node, and there they can be decided exactly: the pod bound last
 * of a set sees all the others before it, so it needs, for each of its hostname spreads, at most
 * maxSkew matching pods in the set (itself included when it matches: it adds one to its own
 * count); taking it away only lowers the others' counts. So an order exists if and only if
 * pods that pass can be taken away, last first, until none is left: pods without a hostname
 * spread always pass (they go last), and which of several passing pods is taken first does not
 * matter. */
static void verify_host_spreads(Verify *v) {
        size_t *first = calloc(v->n_nodes + 2, sizeof(size_t)), *pods = calloc(v->n + 1, sizeof(size_t));
        size_t *fill = calloc(v->n_nodes + 1, sizeof(size_t));
        if (!first || !pods || !fill)
                die("out of memory");
        for (size_t i = 0; i < v->n; i++)
                first[verify_node(v, i) + 1]++;
        for (size_t l = 0; l < v->n_nodes; l++)
                first[l + 1] += first[l];
        for (size_t i = 0; i < v->n; i++) {
                uint32_t node = verify_node(v, i);
                pods[first[node] + fill[node]++] = i;
        }
        for (size_t l = 0; l < v->n_nodes; l++) {
                size_t *set = pods + first[l], n = fill[l];
                int32_t cnt[VERIFY_MAX_SELECTORS] = {};
                for (size_t j = 0; j < n; j++)
                        for (size_t s = 0; s < v->n_sels; s++)
                                cnt[s] += (int32_t) ((v->matches[set[j]] >> s) & 1);
                while (n > 0) {
                        size_t j = 0;
                        for (; j < n; j++) {
                                const SolverPod *p = &v->pods[set[j]];
                                bool last_ok = true;
                                for (size_t k = 0; k < p->n_spreads && last_ok; k++)
                                        last_ok = verify_is_zone(p->spreads[k].topology_key) ||
                                                  cnt[verify_sel(v, set[j], &p->spreads[k].selector)] <=
                                                          p->spreads[k].max_skew;
                                if (last_ok)
                                        break;
                        }
                        if (j == n)
                                verify_fail(v, set[0], "hostname topology spread broken: no order of its node's pods "
                                                       "meets their hostname spreads");
                        for (size_t s = 0; s < v->n_sels; s++)
                                cnt[s] -= (int32_t) ((v->matches[set[j]] >> s) & 1);
                        set[j] = set[--n];
                }
        }
        free(first);
        free(pods);
        free(fill);
}

/* Zonal spreads: a pod counts in a zone when its node's zone is fixed, and a pod with a zonal
 * spread needs one. Which pods a count includes when a pod is bound depends on the order
 * kube-scheduler binds them, which a plan does not fix; what holds in any order is checked: the
 * k-th pod of a zone that selects itself sees at least k - 1 matching pods there, and the least
 * count over the zones never exceeds the plan's own least count, so a zone may hold at most that
 * least count plus maxSkew pods that select themselves. */
static void verify_zone_spreads(Verify *v) {
        int32_t *selfs = calloc(v->n_sels * N_ZONES + 1, sizeof(int32_t));
        if (!selfs)
                die("out of memory");
        for (size_t i = 0; i < v->n; i++) {
                const SolverPod *p = &v->pods[i];
                for (size_t k = 0; k < p->n_spreads; k++) {
                        const SolverSpread *sp = &p->spreads[k];
                        if (!verify_is_zone(sp->topology_key))
                                continue;
                        int z = v->zone[verify_node(v, i)];
                        if (z < 0)
                                verify_fail(v, i, "zonal topology spread on a node whose zone is open");
                        size_t s = verify_sel(v, i, &sp->selector);
                        if (!((v->matches[i] >> s) & 1))
                                continue;
                        int32_t min = INT32_MAX;
                        for (size_t y = 0; y < N_ZONES; y++)
                                min = MIN(min, v->zcount[s * N_ZONES + y]);
                        if (++selfs[s * N_ZONES + (size_t) z] > min + sp->max_skew)
                                verify_fail(v, i,
                                            "zonal topology spread broken: at least %d pods of its zone that select "
                                            "themselves, %d / %d / %d matching pods in the zones (maxSkew %d)",
                                            selfs[s * N_ZONES + (size_t) z], v->zcount[s * N_ZONES],
                                            v->zcount[s * N_ZONES + 1], v->zcount[s * N_ZONES + 2], sp->max_skew);
                }
        }
        free(selfs);
}

static int32_t *verify_counts(size_t n) {
        int32_t *a = calloc(n + 1, sizeof(int32_t));
        if (!a)
                die("out of memory");
        return a;
}

static void verify(const Bench *b, const SolverPod *pods, size_t n, const SolverResult *res) {
        Verify v = { .pods = pods, .n = n, .n_nodes = res->n_launches, .res = res };
        for (size_t i = 0; i < n; i++)
                if (res->decisions[i].kind != SOLVER_DECISION_LAUNCH)
                        verify_fail(&v, i, "not placed on a new node");
        v.matches = calloc(n + 1, sizeof(uint64_t));
        v.owns_aff = calloc(n + 1, sizeof(uint64_t));
        v.zone = calloc(v.n_nodes + 1, sizeof(int));
        if (!v.matches || !v.owns_aff || !v.zone)
                die("out of memory");
        /* every selector first, then which pods each matches */
        for (size_t i = 0; i < n; i++) {
                const SolverPod *p = &pods[i];
                for (size_t k = 0; k < p->n_spreads; k++)
                        verify_sel(&v, i, &p->spreads[k].selector);
                for (size_t k = 0; k < p->n_affinity; k++)
                        v.owns_aff[i] |= 1ULL << verify_sel(&v, i, &p->affinity[k].selector);
                for (size_t k = 0; k < p->n_anti_affinity; k++)
                        verify_sel(&v, i, &p->anti_affinity[k].selector);
        }
        v.total = verify_counts(v.n_sels);
        for (size_t i = 0; i < n; i++)
                for (size_t s = 0; s < v.n_sels; s++)
                        if (verify_matches(&v.sels[s], &pods[i])) {
                                v.matches[i] |= 1ULL << s;
                                v.total[s]++;
                        }
        for (size_t l = 0; l < v.n_nodes; l++) {
                const char *z = res->launches[l].zone;
                v.zone[l] = -1;
                for (size_t k = 0; z && k < N_ZONES; k++)
                        if (strcmp(z, zones[k]) == 0)
                                v.zone[l] = (int) k;
                if (z && v.zone[l] < 0)
                        die("verify: a node in a zone the catalog does not have");
        }
        size_t hn = v.n_sels * v.n_nodes, zn = v.n_sels * N_ZONES;
        v.hcount = verify_counts(hn), v.hfree = verify_counts(hn);
        v.zcount = verify_counts(zn), v.zfree = verify_counts(zn);
        for (size_t i = 0; i < n; i++) {
                verify_count(&v, i, v.hcount, v.zcount, 0);
                verify_count(&v, i, v.hfree, v.zfree, UINT64_MAX);
        }
        verify_resources(b, &v);
        verify_affinities(&v);
        verify_host_spreads(&v);
        verify_zone_spreads(&v);
        free(v.matches);
        free(v.owns_aff);
        free(v.zone);
        free(v.total);
        free(v.hcount);
        free(v.hfree);
        free(v.zcount);
        free(v.zfree);
}
