/* SPDX-License-Identifier: Apache-2.0 */
/* Compiling a snapshot's pods into shapes (identical pods grouped by signature) and the
 * topology groups they count in (spread, affinity, anti-affinity). */

#include <inttypes.h>
#include <stdio.h>

#include "macro.h"
#include "solver-internal.h"

/* ---- shapes --------------------------------------------------------------------------------- */

typedef struct Buf {
        char *p;
        size_t n, cap;
        bool oom;
} Buf;

static void buf_add(Buf *b, const void *d, size_t n) {
        if (b->oom)
                return;
        if (b->n + n + 1 > b->cap) {
                size_t nc = MAX(b->cap * 2, b->n + n + 256);
                char *np = realloc(b->p, nc);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = nc;
        }
        memcpy(b->p + b->n, d, n);
        b->n += n;
        b->p[b->n] = 0;
}

static void buf_str(Buf *b, const char *s) {
        /* strings cannot contain \x01; use it as a terminator, and \x02 for NULL */
        if (!s)
                buf_add(b, "\x02", 1);
        else {
                buf_add(b, s, strlen(s));
                buf_add(b, "\x01", 1);
        }
}

/* v in decimal and a comma, as "%" PRId64 "," prints it: the signatures of every pod's fields
 * are built with it, and snprintf was about 5 % of planning Karpenter's 20 000 pods in perf */
static void buf_i64(Buf *b, int64_t v) {
        char t[24], *e = t + sizeof(t);
        uint64_t u = v < 0 ? -(uint64_t) v : (uint64_t) v;
        *--e = ',';
        do
                *--e = (char) ('0' + u % 10);
        while (u /= 10);
        if (v < 0)
                *--e = '-';
        buf_add(b, e, (size_t) (t + sizeof(t) - e));
}

static int cmp_label_ptr(const void *a, const void *b) {
        const SolverLabel *x = *(const SolverLabel *const *) a, *y = *(const SolverLabel *const *) b;
        int c = strcmp(x->key ? x->key : "", y->key ? y->key : "");
        return c ? c : strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

static void buf_labels(Buf *b, const SolverLabel *l, size_t n) {
        const SolverLabel *stack[16];
        const SolverLabel **p = n <= 16 ? stack : malloc(n * sizeof(void *));
        if (!p) {
                b->oom = true;
                return;
        }
        for (size_t i = 0; i < n; i++)
                p[i] = &l[i];
        qsort(p, n, sizeof(void *), cmp_label_ptr);
        buf_i64(b, (int64_t) n);
        for (size_t i = 0; i < n; i++) {
                buf_str(b, p[i]->key);
                buf_str(b, p[i]->value);
        }
        if (p != stack)
                free(p);
}

static void buf_req(Buf *b, const SolverRequirement *r) {
        buf_str(b, r->key);
        buf_i64(b, r->op);
        buf_i64(b, r->min_values);
        buf_i64(b, (int64_t) r->n_values);
        for (size_t i = 0; i < r->n_values; i++)
                buf_str(b, r->values[i]);
}

static void buf_term(Buf *b, const SolverTerm *t) {
        buf_i64(b, (int64_t) t->n_reqs);
        for (size_t i = 0; i < t->n_reqs; i++)
                buf_req(b, &t->reqs[i]);
}

static void buf_selector(Buf *b, const SolverLabelSelector *s) {
        buf_labels(b, s->match_labels, s->n_match_labels);
        buf_i64(b, (int64_t) s->n_exprs);
        for (size_t i = 0; i < s->n_exprs; i++)
                buf_req(b, &s->exprs[i]);
}

static void buf_affinity(Buf *b, const SolverPodAffinityTerm *t, size_t n) {
        buf_i64(b, (int64_t) n);
        for (size_t i = 0; i < n; i++) {
                buf_str(b, t[i].topology_key);
                buf_selector(b, &t[i].selector);
                buf_i64(b, (int64_t) t[i].n_namespaces);
                for (size_t j = 0; j < t[i].n_namespaces; j++)
                        buf_str(b, t[i].namespaces[j]);
                buf_i64(b, t[i].all_namespaces);
                buf_i64(b, t[i].weight);
        }
}

static void pod_signature(Buf *b, const SolverPod *p) {
        b->n = 0;
        buf_str(b, p->namespace_ ? p->namespace_ : "default");
        buf_labels(b, p->labels, p->n_labels);
        for (int r = 0; r < R_MAX; r++)
                if (r != SOLVER_RES_PODS)
                        buf_i64(b, p->requests.v[r]);
        buf_i64(b, p->priority);
        buf_i64(b, p->preempt_never);
        buf_labels(b, p->node_selector, p->n_node_selector);
        buf_i64(b, (int64_t) p->n_required_terms);
        for (size_t i = 0; i < p->n_required_terms; i++)
                buf_term(b, &p->required_terms[i]);
        buf_i64(b, (int64_t) p->n_preferred_terms);
        for (size_t i = 0; i < p->n_preferred_terms; i++) {
                buf_i64(b, p->preferred_terms[i].weight);
                buf_term(b, &p->preferred_terms[i].term);
        }
        buf_i64(b, (int64_t) p->n_tolerations);
        for (size_t i = 0; i < p->n_tolerations; i++) {
                buf_str(b, p->tolerations[i].key);
                buf_i64(b, p->tolerations[i].exists);
                buf_str(b, p->tolerations[i].value);
                buf_i64(b, p->tolerations[i].effect);
        }
        buf_i64(b, (int64_t) p->n_spreads);
        for (size_t i = 0; i < p->n_spreads; i++) {
                buf_str(b, p->spreads[i].topology_key);
                buf_i64(b, p->spreads[i].max_skew);
                buf_i64(b, p->spreads[i].schedule_anyway);
                buf_i64(b, p->spreads[i].min_domains);
                buf_selector(b, &p->spreads[i].selector);
        }
        buf_affinity(b, p->affinity, p->n_affinity);
        buf_affinity(b, p->anti_affinity, p->n_anti_affinity);
        buf_affinity(b, p->pref_affinity, p->n_pref_affinity);
        buf_affinity(b, p->pref_anti_affinity, p->n_pref_anti_affinity);
        buf_i64(b, (int64_t) p->n_host_ports);
        for (size_t i = 0; i < p->n_host_ports; i++)
                buf_i64(b, p->host_ports[i].port * 4 + p->host_ports[i].protocol);
        buf_i64(b, (int64_t) p->n_volume_zones);
        for (size_t i = 0; i < p->n_volume_zones; i++)
                buf_str(b, p->volume_zones[i]);
        buf_i64(b, (int64_t) p->n_wffc_claims);
        for (size_t i = 0; i < p->n_wffc_claims; i++)
                buf_str(b, p->wffc_claims[i]);
}

static TopoKey topo_key_of(const char *key) {
        if (!key)
                return TOPO_OTHER;
        key = solver_canonical_label_key(key);
        if (streq(key, SOLVER_LABEL_ZONE))
                return TOPO_ZONE;
        if (streq(key, SOLVER_LABEL_HOSTNAME))
                return TOPO_HOST;
        if (streq(key, SOLVER_LABEL_CAPACITY_TYPE))
                return TOPO_CT;
        return TOPO_OTHER;
}

/* Finds or creates the counting group for (key, scope, selector). */
static int group_get(Solver *s, Intern *gsig, Buf *b, const char *topology_key, const char *pod_ns,
                     const SolverLabelSelector *sel, const char *const *nss, size_t n_nss, bool all_ns,
                     uint32_t *ret) {
        TopoKey tk = topo_key_of(topology_key);
        b->n = 0;
        buf_i64(b, tk);
        buf_str(b, tk == TOPO_OTHER ? topology_key : "");
        buf_i64(b, all_ns);
        const char *const *scope = nss;
        size_t n_scope = n_nss;
        if (!all_ns && n_nss == 0) {
                scope = &pod_ns;
                n_scope = 1;
        }
        if (!all_ns) {
                buf_i64(b, (int64_t) n_scope);
                for (size_t i = 0; i < n_scope; i++)
                        buf_str(b, scope[i]);
        }
        buf_selector(b, sel);
        if (b->oom)
                return -ENOMEM;
        size_t before = gsig->n;
        uint32_t id;
        int q = solver_intern_get(gsig, b->p, &id);
        if (q < 0)
                return q;
        if (gsig->n == before) {
                *ret = id;
                return 0;
        }
        Group *ng = solver_arena_realloc(s->arena, s->groups, s->n_groups * sizeof(Group),
                                         (s->n_groups + 1) * sizeof(Group));
        if (!ng)
                return -ENOMEM;
        s->groups = ng;
        Group *g = &s->groups[s->n_groups];
        *g = (Group) { .key = tk, .selector = sel, .all_namespaces = all_ns };
        if (!all_ns) {
                const char **copy = solver_arena_alloc(s->arena, n_scope * sizeof(char *));
                if (!copy)
                        return -ENOMEM;
                for (size_t i = 0; i < n_scope; i++)
                        copy[i] = scope[i] ? scope[i] : "default";
                g->namespaces = copy;
                g->n_namespaces = n_scope;
        }
        g->description = solver_arena_printf(s->arena, "%s", topology_key ? topology_key : "?");
        if (!g->description)
                return -ENOMEM;
        *ret = s->n_groups++;
        return 0;
}

static bool group_matches(const Group *g, const SolverPod *p) {
        if (!g->all_namespaces) {
                const char *ns = p->namespace_ ? p->namespace_ : "default";
                bool in = false;
                for (size_t i = 0; i < g->n_namespaces && !in; i++)
                        in = streq(g->namespaces[i], ns);
                if (!in)
                        return false;
        }
        return solver_selector_matches(g->selector, p->labels, p->n_labels);
}

static bool group_matches(const Group *g, const SolverPod *p);

static int cmp_weight_desc(const void *a, const void *b, void *u) {
        const int32_t *w = u;
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        if (w[x] != w[y])
                return w[x] > w[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

static int order_by_weight(Solver *s, size_t n, const int32_t *weights, uint32_t **ret) {
        uint32_t *o = solver_arena_alloc(s->arena, (n + 1) * sizeof(uint32_t));
        if (!o)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                o[i] = (uint32_t) i;
        qsort_r(o, n, sizeof(uint32_t), cmp_weight_desc, (void *) weights);
        *ret = o;
        return 0;
}

static int shape_init(Solver *s, Shape *sh, Intern *gsig, Buf *b) {
        const SolverPod *p = sh->pod;
        const char *ns = p->namespace_ ? p->namespace_ : "default";
        int q;
        sh->req = p->requests;
        sh->req.v[SOLVER_RES_PODS] = 1;
        for (int r = 0; r < R_MAX; r++) {
                if (sh->req.v[r] < 0)
                        sh->req.v[r] = 0;
                if (sh->req.v[r] > 0)
                        sh->active[sh->n_active++] = (uint8_t) r;
        }
        /* first-fit decreasing by the dominant resource, memory weighed by the catalog's
         * cpu:memory ratio */
        int64_t memw = (int64_t) ((double) sh->req.v[SOLVER_RES_MEMORY] * s->mem_weight);
        sh->size_key[0] = MAX(sh->req.v[SOLVER_RES_CPU], memw);
        sh->size_key[1] = sh->req.v[SOLVER_RES_CPU] + memw;

#define GROUPS(field, n, arr, body)                                                             \
        do {                                                                                    \
                if ((n) > 0) {                                                                  \
                        sh->field = solver_arena_alloc(s->arena, (n) * sizeof(uint32_t));       \
                        if (!sh->field)                                                         \
                                return -ENOMEM;                                                 \
                }                                                                               \
                for (size_t i = 0; i < (n); i++) {                                              \
                        body;                                                                   \
                }                                                                               \
        } while (0)

        GROUPS(spread_g, p->n_spreads, p->spreads, {
                q = group_get(s, gsig, b, p->spreads[i].topology_key, ns, &p->spreads[i].selector,
                              NULL, 0, false, &sh->spread_g[i]);
                if (q < 0)
                        return q;
        });
        const struct {
                const SolverPodAffinityTerm *t;
                size_t n;
                uint32_t **out;
        } aff[] = {
                { p->affinity, p->n_affinity, &sh->aff_g },
                { p->anti_affinity, p->n_anti_affinity, &sh->anti_g },
                { p->pref_affinity, p->n_pref_affinity, &sh->paff_g },
                { p->pref_anti_affinity, p->n_pref_anti_affinity, &sh->panti_g },
        };
        for (size_t a = 0; a < ELEMENTSOF(aff); a++) {
                if (aff[a].n == 0)
                        continue;
                *aff[a].out = solver_arena_alloc(s->arena, aff[a].n * sizeof(uint32_t));
                if (!*aff[a].out)
                        return -ENOMEM;
                for (size_t i = 0; i < aff[a].n; i++) {
                        const SolverPodAffinityTerm *t = &aff[a].t[i];
                        q = group_get(s, gsig, b, t->topology_key, ns, &t->selector, t->namespaces,
                                      t->n_namespaces, t->all_namespaces, &(*aff[a].out)[i]);
                        if (q < 0)
                                return q;
                }
        }
#undef GROUPS

        /* Relaxation steps, in Karpenter's order. */
        int32_t *w = malloc((MAX(MAX(p->n_pref_affinity, p->n_pref_anti_affinity), p->n_preferred_terms) + 1) * sizeof(int32_t));
        if (!w)
                return -ENOMEM;
        for (size_t i = 0; i < p->n_pref_affinity; i++)
                w[i] = p->pref_affinity[i].weight;
        q = order_by_weight(s, p->n_pref_affinity, w, &sh->paff_order);
        for (size_t i = 0; q >= 0 && i < p->n_pref_anti_affinity; i++)
                w[i] = p->pref_anti_affinity[i].weight;
        if (q >= 0)
                q = order_by_weight(s, p->n_pref_anti_affinity, w, &sh->panti_order);
        for (size_t i = 0; q >= 0 && i < p->n_preferred_terms; i++)
                w[i] = p->preferred_terms[i].weight;
        if (q >= 0)
                q = order_by_weight(s, p->n_preferred_terms, w, &sh->pnode_order);
        free(w);
        if (q < 0)
                return q;

        size_t n_sa = 0;
        for (size_t i = 0; i < p->n_spreads; i++)
                n_sa += p->spreads[i].schedule_anyway;
        bool tol_pns = false;
        if (s->any_prefer_no_schedule) {
                SolverTaint probe = { .key = "nodesmith.io/probe", .effect = SOLVER_EFFECT_PREFER_NO_SCHEDULE };
                tol_pns = true;
                for (size_t i = 0; i < p->n_tolerations && tol_pns; i++)
                        if (solver_toleration_tolerates(&p->tolerations[i], &probe))
                                tol_pns = false;
        }
        size_t n = (p->n_required_terms > 1 ? p->n_required_terms - 1 : 0) + p->n_pref_affinity +
                   p->n_pref_anti_affinity + p->n_preferred_terms + n_sa + tol_pns;
        sh->n_relax = (uint32_t) n;
        sh->relax = solver_arena_alloc(s->arena, (n + 1) * sizeof(RelaxKind));
        sh->variants = solver_arena_alloc(s->arena, (n + 1) * sizeof(Variant *));
        if (!sh->relax || !sh->variants)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 1; i < p->n_required_terms; i++)
                sh->relax[k++] = RELAX_REQUIRED_TERM;
        for (size_t i = 0; i < p->n_pref_affinity; i++)
                sh->relax[k++] = RELAX_PREF_AFFINITY;
        for (size_t i = 0; i < p->n_pref_anti_affinity; i++)
                sh->relax[k++] = RELAX_PREF_ANTI;
        for (size_t i = 0; i < p->n_preferred_terms; i++)
                sh->relax[k++] = RELAX_PREF_NODE;
        for (size_t i = 0; i < n_sa; i++)
                sh->relax[k++] = RELAX_SCHEDULE_ANYWAY;
        if (tol_pns)
                sh->relax[k++] = RELAX_PREFER_NO_SCHEDULE;

        for (size_t i = 0; i < p->n_anti_affinity; i++)
                if (topo_key_of(p->anti_affinity[i].topology_key) == TOPO_HOST &&
                    group_matches(&s->groups[sh->anti_g[i]], p))
                        sh->anchor = true;
        for (size_t i = 0; i < p->n_spreads; i++)
                if (!p->spreads[i].schedule_anyway && topo_key_of(p->spreads[i].topology_key) == TOPO_HOST &&
                    group_matches(&s->groups[sh->spread_g[i]], p))
                        sh->anchor = true;
        sh->has_constraints = p->n_spreads || p->n_affinity || p->n_anti_affinity || p->n_pref_affinity ||
                              p->n_pref_anti_affinity || p->n_host_ports;
        sh->has_wffc = p->n_wffc_claims > 0;
        return 0;
}

int solver_compile_shapes(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        int q = 0;
        Intern sig, gsig;
        solver_intern_init(&sig, s->arena);
        solver_intern_init(&gsig, s->arena);
        Buf b = {}, gb = {};
        uint32_t n_all = s->n_pods_all;
        s->pod_shape = solver_arena_alloc_nozero(s->arena, (n_all + 1) * sizeof(uint32_t));
        if (!s->pod_shape) {
                q = -ENOMEM;
                goto out;
        }
        size_t cap_shapes = 0;
        for (uint32_t i = 0; i < n_all; i++) {
                const SolverPod *p = pod_at(s, i);
                pod_signature(&b, p);
                if (i >= snap->n_pods)
                        buf_i64(&b, -1 - (int64_t) i); /* headroom units of different pools differ */
                if (b.oom) {
                        q = -ENOMEM;
                        goto out;
                }
                size_t before = sig.n;
                uint32_t id;
                q = solver_intern_get(&sig, b.p, &id);
                if (q < 0)
                        goto out;
                if (sig.n != before) {
                        if (s->n_shapes == cap_shapes) {
                                size_t nc = cap_shapes ? cap_shapes * 2 : 64;
                                Shape *ns = realloc(s->shapes, nc * sizeof(Shape));
                                if (!ns) {
                                        q = -ENOMEM;
                                        goto out;
                                }
                                s->shapes = ns;
                                cap_shapes = nc;
                        }
                        s->shapes[s->n_shapes] = (Shape) { .pod = p, .headroom = i >= snap->n_pods };
                        s->n_shapes++;
                }
                s->pod_shape[i] = id;
        }
        /* headroom pods share one shape per pool: merge by pool (signature includes index) */
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                q = shape_init(s, &s->shapes[i], &gsig, &gb);
                if (q < 0)
                        goto out;
        }
        /* Which groups match which shape. */
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                Shape *sh = &s->shapes[i];
                uint32_t m = 0;
                for (uint32_t g = 0; g < s->n_groups; g++)
                        m += group_matches(&s->groups[g], sh->pod);
                if (m == 0 || sh->headroom)
                        continue;
                sh->matches = solver_arena_alloc(s->arena, m * sizeof(uint32_t));
                if (!sh->matches) {
                        q = -ENOMEM;
                        goto out;
                }
                for (uint32_t g = 0; g < s->n_groups; g++)
                        if (group_matches(&s->groups[g], sh->pod))
                                sh->matches[sh->n_matches++] = g;
        }
        /* Pending pods per shape. */
        for (uint32_t i = 0; i < n_all; i++) {
                const SolverPod *p = pod_at(s, i);
                if (i < snap->n_pods && s->pod_node[i] >= 0)
                        continue;
                if (i < snap->n_pods && !isempty(p->node_name))
                        continue; /* bound to an unknown node: leave it alone */
                Shape *sh = &s->shapes[s->pod_shape[i]];
                if (sh->n_pods == sh->cap_pods) {
                        uint32_t nc = sh->cap_pods ? sh->cap_pods * 2 : 4;
                        uint32_t *np = solver_arena_realloc(s->arena, sh->pods, sh->cap_pods * sizeof(uint32_t),
                                                            nc * sizeof(uint32_t));
                        if (!np) {
                                q = -ENOMEM;
                                goto out;
                        }
                        sh->pods = np;
                        sh->cap_pods = nc;
                }
                sh->pods[sh->n_pods++] = i;
        }
        /* Anti-affinity owners (bound or not: the flag enables the inverse check). */
        for (uint32_t i = 0; i < s->n_shapes; i++)
                for (size_t t = 0; t < s->shapes[i].pod->n_anti_affinity; t++)
                        s->groups[s->shapes[i].anti_g[t]].has_anti_owners = true;
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                gr->zcount = solver_arena_alloc(s->arena, SOLVER_MAX_ZONES * sizeof(int32_t));
                gr->zowners = solver_arena_alloc(s->arena, SOLVER_MAX_ZONES * sizeof(int32_t));
                if (!gr->zcount || !gr->zowners) {
                        q = -ENOMEM;
                        goto out;
                }
        }
out:
        free(b.p);
        free(gb.p);
        solver_intern_done(&sig);
        solver_intern_done(&gsig);
        return q;
}
