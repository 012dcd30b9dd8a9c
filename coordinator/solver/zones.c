/* SPDX-License-Identifier: Apache-2.0 */
/* Choosing nodes for a batch of one variant: by topology domain (zones, capacity types) when
 * constraints count per domain, else first-fit or by growth onto existing and planned nodes
 * before opening new ones. */

#include "grow.h"
#include "macro.h"
#include "solver-internal.h"

/* How much a new node would have to grow to take one more pod, in millicore equivalents: only
 * the cpu and memory the pod requests count (pods, GPUs...: the cpu/memory step decides the
 * price). Every batch of a zonal shape asks it of every node. */
static inline int64_t growth(const Solver *s, const Shape *sh, const Node *n) {
        int64_t g = 0, c = sh->req.v[SOLVER_RES_CPU], m = sh->req.v[SOLVER_RES_MEMORY];
        if (c > 0 && c > n->slack[SOLVER_RES_CPU])
                g = c - n->slack[SOLVER_RES_CPU];
        if (m > 0 && m > n->slack[SOLVER_RES_MEMORY])
                g = MAX(g, (int64_t) ((double) (m - n->slack[SOLVER_RES_MEMORY]) * s->mem_weight));
        return g;
}

typedef struct GrowCand {
        int64_t g;
        uint32_t node;
} GrowCand;
static int cmp_grow(const void *a, const void *b);

/* ---- zones ---------------------------------------------------------------------------------- */

/* Domains of a topology key (zones, or capacity types: n_dom of them, E those the pod could
 * use) where the next pod of the variant may go by its constraints and the anti-affinity of
 * other pods, and how many pods each may take before the answer has to be computed again. */
uint32_t solver_allowed_domains(Solver *s, const Variant *v, TopoKey key, uint32_t n_dom, uint32_t E,
                                int64_t *quota) {
        const Shape *sh = &s->shapes[v->shape];
        const char *what = key == TOPO_ZONE ? "zone" : "capacity type";
        uint32_t A = E;
        for (uint32_t z = 0; z < n_dom; z++)
                quota[z] = INT64_MAX;
        for (uint32_t c = 0; c < v->n_cons; c++) {
                const Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (g->key != key)
                        continue;
                uint32_t before = A;
                switch (k->kind) {
                case CON_SPREAD: {
                        int32_t min = INT32_MAX;
                        for (uint32_t z = 0; z < n_dom; z++)
                                if (E & (1u << z))
                                        min = MIN(min, g->zcount[z]);
                        if (min == INT32_MAX || __builtin_popcount(E) < k->min_domains)
                                min = 0;
                        for (uint32_t z = 0; z < n_dom; z++) {
                                if (!(A & (1u << z)))
                                        continue;
                                int64_t lim = (int64_t) min + k->max_skew - g->zcount[z];
                                if (k->self) {
                                        if (lim <= 0)
                                                A &= ~(1u << z);
                                        else
                                                quota[z] = MIN(quota[z], lim);
                                } else if (g->zcount[z] - min > k->max_skew)
                                        A &= ~(1u << z);
                        }
                        if (!A && before)
                                solver_fail(s, SOLVER_REASON_TOPOLOGY,
                                     solver_arena_printf(s->rarena, "topology spread on %s (maxSkew %d) cannot be satisfied",
                                                         g->description, k->max_skew));
                        break;
                }
                case CON_AFFINITY: {
                        int64_t tot = 0;
                        for (uint32_t z = 0; z < n_dom; z++)
                                tot += g->zcount[z];
                        if (tot > 0) {
                                uint32_t m = 0;
                                for (uint32_t z = 0; z < n_dom; z++)
                                        if (g->zcount[z] > 0)
                                                m |= 1u << z;
                                A &= m;
                        } else if (!k->self)
                                A = 0;
                        if (!A && before)
                                solver_fail(s, SOLVER_REASON_TOPOLOGY,
                                     tot ? solver_arena_printf(s->rarena, "no %s with the pods of its required pod affinity (%s) can take it",
                                                               what, g->description)
                                         : solver_arena_printf(s->rarena, "no pod matches its required pod affinity (%s)",
                                                               g->description));
                        break;
                }
                case CON_ANTI:
                        for (uint32_t z = 0; z < n_dom; z++) {
                                if (g->zcount[z] > 0)
                                        A &= ~(1u << z);
                                else if (k->self)
                                        quota[z] = MIN(quota[z], 1);
                        }
                        if (!A && before)
                                solver_fail(s, SOLVER_REASON_TOPOLOGY,
                                     solver_arena_printf(s->rarena, "pod anti-affinity on %s excludes every %s", g->description, what));
                        break;
                }
        }
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                const Group *g = &s->groups[sh->matches[m]];
                if (g->key != key || !g->has_anti_owners)
                        continue;
                uint32_t before = A;
                for (uint32_t z = 0; z < n_dom; z++)
                        if (g->zowners[z] > 0)
                                A &= ~(1u << z);
                if (!A && before)
                        solver_fail(s, SOLVER_REASON_TOPOLOGY,
                             solver_arena_printf(s->rarena, "the anti-affinity of other pods excludes every %s", what));
        }
        return A;
}

/* Zones where the next pod of the variant may go, and how many pods each may take before the
 * answer has to be computed again. */
static uint32_t allowed_zones(Solver *s, const Variant *v, const SolverPod *pod, int64_t *quota) {
        uint32_t A = solver_allowed_domains(s, v, TOPO_ZONE, s->n_zones, v->eligible_zones, quota);
        for (size_t i = 0; i < pod->n_wffc_claims; i++) {
                int64_t id = solver_intern_lookup(&s->claims, pod->wffc_claims[i]);
                if (id < 0 || (size_t) id >= s->claim_cap || s->claim_zone[id] == INT32_MIN || s->claim_zone[id] < 0)
                        continue;
                uint32_t before = A;
                A &= 1u << s->claim_zone[id];
                if (!A && before)
                        solver_fail(s, SOLVER_REASON_VOLUME_ZONE, "its volume claim is bound to another zone by an earlier pod");
        }
        if (!v->eligible_zones)
                solver_fail(s, SOLVER_REASON_REQUIREMENTS, "no zone can run it");
        return A;
}

/* Candidate nodes of a batch, per zone (and unpinned new nodes): "good" ones in order of how
 * much they would grow (free room first), and all of them in node order as a fallback. A batch
 * is often a few pods among thousands of nodes, so neither is filtered by fit up front (a node
 * that cannot take a pod at the start of the batch cannot later in it: it is skipped where it
 * is reached) and the good ones come out of a heap, in order, only as far as they are walked. */
typedef struct List {
        uint32_t *v;
        uint32_t n, cap;
} List;

/* Candidates not yet walked. A batch often needs only the first (the least, tracked as they
 * are pushed), so the heap is made only when a second one is asked for. */
typedef struct Heap {
        GrowCand *v;
        size_t n, cap;
        size_t min;                         /* index of the least until the first is taken */
        bool first_taken, made;             /* made only after the first was taken */
} Heap;

/* Kept by the solver from batch to batch (Solver.zone_lists), only emptied: a plan has a batch
 * per shape and each walked every node, so allocating them anew was a cost of its own. */
typedef struct ZoneLists {
        List good[SOLVER_MAX_ZONES], all[SOLVER_MAX_ZONES], ugood, uall;
        Heap goodh[SOLVER_MAX_ZONES], ugoodh; /* what is not yet in good / ugood */
        uint32_t gc[SOLVER_MAX_ZONES], ac[SOLVER_MAX_ZONES], ugc[SOLVER_MAX_ZONES], uac[SOLVER_MAX_ZONES];
} ZoneLists;

static inline int list_push(List *l, uint32_t v) {
        if (l->n == l->cap) {
                uint32_t nc = l->cap ? l->cap * 2 : 16;
                uint32_t *na = realloc(l->v, nc * sizeof(uint32_t));
                if (!na)
                        return -ENOMEM;
                l->v = na;
                l->cap = nc;
        }
        l->v[l->n++] = v;
        return 0;
}

static int heap_push(Heap *h, GrowCand c) {
        if (h->n == h->cap) {
                int q = GROW(h->v, h->cap, h->n + 1, SIZE_MAX / sizeof(GrowCand));
                if (q < 0)
                        return q;
        }
        if (h->n > 0 && cmp_grow(&c, &h->v[h->min]) < 0)
                h->min = h->n;
        h->v[h->n++] = c;
        return 0;
}

static void heap_down(Heap *h, size_t i) {
        for (;;) {
                size_t m = i, a = 2 * i + 1, b = 2 * i + 2;
                if (a < h->n && cmp_grow(&h->v[a], &h->v[m]) < 0)
                        m = a;
                if (b < h->n && cmp_grow(&h->v[b], &h->v[m]) < 0)
                        m = b;
                if (m == i)
                        return;
                GrowCand t = h->v[i];
                h->v[i] = h->v[m];
                h->v[m] = t;
                i = m;
        }
}

static void heap_make(Heap *h) {
        for (size_t i = h->n / 2; i-- > 0;)
                heap_down(h, i);
}

/* Moves the least-growing candidate left in the heap to the end of the list: the list stays in
 * the order a full sort by (growth, node) would give (cmp_grow is a total order). False when
 * the heap is empty. */
static bool heap_next(Heap *h, List *l, int *q) {
        if (h->n == 0 || *q < 0)
                return false;
        if (!h->first_taken) {
                *q = list_push(l, h->v[h->min].node);
                if (*q < 0)
                        return false;
                h->v[h->min] = h->v[--h->n];
                h->first_taken = true;
                return true;
        }
        if (!h->made) {
                heap_make(h);
                h->made = true;
        }
        *q = list_push(l, h->v[0].node);
        if (*q < 0)
                return false;
        h->v[0] = h->v[--h->n];
        heap_down(h, 0);
        return true;
}

static void zl_reset(ZoneLists *l) {
        for (int z = 0; z < SOLVER_MAX_ZONES; z++) {
                l->good[z].n = l->all[z].n = 0;
                l->goodh[z].n = l->goodh[z].min = 0;
                l->goodh[z].made = l->goodh[z].first_taken = false;
                l->gc[z] = l->ac[z] = l->ugc[z] = l->uac[z] = 0;
        }
        l->ugood.n = l->uall.n = 0;
        l->ugoodh.n = l->ugoodh.min = 0;
        l->ugoodh.made = l->ugoodh.first_taken = false;
}

void solver_zone_lists_free(Solver *s) {
        ZoneLists *l = s->zone_lists;
        if (!l)
                return;
        for (int z = 0; z < SOLVER_MAX_ZONES; z++) {
                free(l->good[z].v);
                free(l->all[z].v);
                free(l->goodh[z].v);
        }
        free(l->ugood.v);
        free(l->uall.v);
        free(l->ugoodh.v);
        free(l);
        s->zone_lists = NULL;
}

static int64_t node_growth(const Solver *s, const Shape *sh, const Node *n) {
        if (n->kind == NODE_EXISTING)
                return 0; /* it fits (checked by the caller) and costs nothing more */
        return growth(s, sh, n);
}

enum { FOUND_GOOD, FOUND_UGOOD, FOUND_ANY };

static int64_t find_in_zone(Solver *s, Variant *v, ZoneLists *l, int z, int *ret_kind, int64_t *ret_g, int *q) {
        const Shape *sh = &s->shapes[v->shape];
        int64_t size = MAX(sh->size_key[0], (int64_t) 1);
        while (l->gc[z] < l->good[z].n || heap_next(&l->goodh[z], &l->good[z], q)) {
                uint32_t ni = l->good[z].v[l->gc[z]];
                int64_t g = node_growth(s, sh, &s->nodes[ni]);
                if (g < size && solver_place_fit_count(s, v, ni, 1, z) > 0) {
                        *ret_kind = FOUND_GOOD;
                        *ret_g = g;
                        return ni;
                }
                l->gc[z]++;
        }
        while (l->ugc[z] < l->ugood.n || heap_next(&l->ugoodh, &l->ugood, q)) {
                uint32_t ni = l->ugood.v[l->ugc[z]];
                if (s->nodes[ni].zone < 0) {
                        int64_t g = node_growth(s, sh, &s->nodes[ni]);
                        if (g < size && solver_place_fit_count(s, v, ni, 1, z) > 0) {
                                *ret_kind = FOUND_UGOOD;
                                *ret_g = g;
                                return ni;
                        }
                }
                l->ugc[z]++;
        }
        while (l->ac[z] < l->all[z].n) {
                uint32_t ni = l->all[z].v[l->ac[z]];
                if (solver_place_fit_count(s, v, ni, 1, z) > 0) {
                        *ret_kind = FOUND_ANY;
                        *ret_g = size;
                        return ni;
                }
                l->ac[z]++;
        }
        while (l->uac[z] < l->uall.n) {
                uint32_t ni = l->uall.v[l->uac[z]];
                if (s->nodes[ni].zone < 0 && solver_place_fit_count(s, v, ni, 1, z) > 0) {
                        *ret_kind = FOUND_ANY;
                        *ret_g = size;
                        return ni;
                }
                l->uac[z]++;
        }
        return -1;
}

static int cmp_zone_order(const void *a, const void *b, void *u) {
        const int64_t *key = u;
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        if (key[x] != key[y])
                return key[x] < key[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

int64_t solver_place_zone(Solver *s, Variant *v, const uint32_t *pods, int64_t n) {
        if (!s->zone_lists && !(s->zone_lists = calloc(1, sizeof(ZoneLists))))
                return -ENOMEM;
        ZoneLists *zl = s->zone_lists;
        zl_reset(zl);
        int64_t placed = 0;
        int q = 0;
        const Shape *sh = &s->shapes[v->shape];
        int64_t size = MAX(sh->size_key[0], (int64_t) 1);
        for (uint32_t ni = 0; ni < s->n_nodes && q >= 0; ni++) {
                const Node *nd = &s->nodes[ni];
                int32_t z = nd->zone;
                if (nd->removed || nd->closed)
                        continue;
                if (z >= 0) {
                        if (!(v->eligible_zones & (1u << z)))
                                continue;
                        q = list_push(&zl->all[z], ni);
                        int64_t g = node_growth(s, sh, nd);
                        if (q >= 0 && g < size)
                                q = heap_push(&zl->goodh[z], (GrowCand) { g, ni });
                } else if (nd->kind == NODE_NEW) {
                        q = list_push(&zl->uall, ni);
                        int64_t g = node_growth(s, sh, nd);
                        if (q >= 0 && g < size)
                                q = heap_push(&zl->ugoodh, (GrowCand) { g, ni });
                }
        }
        /* zone order: the first spread constraint's counts, then zone index */
        const Group *order_g = NULL;
        for (uint32_t c = 0; c < v->n_cons; c++)
                if (v->cons[c].kind == CON_SPREAD && s->groups[v->cons[c].group].key == TOPO_ZONE) {
                        order_g = &s->groups[v->cons[c].group];
                        break;
                }
        while (q >= 0 && placed < n && !solver_out_of_time(s)) {
                int64_t quota[SOLVER_MAX_ZONES];
                uint32_t A = allowed_zones(s, v, pod_at(s, pods[placed]), quota);
                if (!A)
                        break;
                uint32_t order[SOLVER_MAX_ZONES], no = 0;
                int64_t key[SOLVER_MAX_ZONES] = {};
                for (uint32_t z = 0; z < s->n_zones; z++)
                        if (A & (1u << z)) {
                                order[no++] = z;
                                key[z] = order_g ? order_g->zcount[z] : 0;
                        }
                qsort_r(order, no, sizeof(uint32_t), cmp_zone_order, key);
                /* best candidate across the allowed zones, the preferred zone winning ties */
                int64_t best = -1, best_g = INT64_MAX;
                int best_z = -1, best_kind = FOUND_ANY;
                for (uint32_t i = 0; i < no; i++) {
                        int z = (int) order[i], kind;
                        int64_t g;
                        int64_t ni = find_in_zone(s, v, zl, z, &kind, &g, &q);
                        if (q < 0)
                                break;
                        if (ni < 0 || g >= best_g)
                                continue;
                        best = ni;
                        best_g = g;
                        best_z = z;
                        best_kind = kind;
                        if (order_g)
                                break; /* spreading: the least loaded zone decides */
                }
                if (q < 0)
                        break;
                if (best >= 0) {
                        uint32_t ni = (uint32_t) best;
                        int z = best_z;
                        bool was_unpinned = s->nodes[ni].zone < 0;
                        int64_t m = MIN(solver_place_fit_count(s, v, ni, n - placed, z), quota[z]);
                        if (best_g == 0)
                                m = MIN(m, MAX(solver_place_free_room(s, sh, &s->nodes[ni]), (int64_t) 1));
                        else if (best_kind != FOUND_ANY)
                                m = MIN(m, 1);
                        if (m > 0) {
                                q = solver_place_commit(s, v, ni, pods + placed, m, z);
                                if (q < 0)
                                        break;
                                placed += m;
                                if (best_g > 0 && best_kind == FOUND_GOOD)
                                        zl->gc[z]++;
                                else if (best_g > 0 && best_kind == FOUND_UGOOD)
                                        zl->ugc[z]++;
                                if (was_unpinned) {
                                        q = list_push(&zl->all[z], ni);
                                        if (q < 0)
                                                break;
                                }
                                continue;
                        }
                }
                q = solver_try_preempt(s, v, pods[placed], A);
                if (q < 0)
                        break;
                if (q > 0) {
                        placed++;
                        q = 0;
                        continue;
                }
                bool done = false;
                for (uint32_t i = 0; i < no && !done; i++) {
                        int z = (int) order[i];
                        uint32_t ni;
                        q = solver_open_node(s, v, z, &ni);
                        if (q < 0)
                                break;
                        if (q == 0)
                                continue;
                        int64_t m = MIN(solver_place_fit_count(s, v, ni, n - placed, z), quota[z]);
                        if (m <= 0) {
                                solver_fresh_node_failed(s, v, ni);
                                solver_discard_last_node(s, ni);
                                q = 0;
                                continue;
                        }
                        q = solver_place_commit(s, v, ni, pods + placed, m, z);
                        if (q < 0)
                                break;
                        placed += m;
                        q = list_push(&zl->all[z], ni);
                        done = true;
                }
                if (q < 0)
                        break;
                if (!done) {
                        bool any_pool = false;
                        for (uint32_t pi = 0; pi < s->n_pools && !any_pool; pi++)
                                any_pool = solver_pool_compat(s, v, pi)->ok;
                        /* limits or max_new_nodes, when they stopped it, say more */
                        if (any_pool && v->new_nodes_ok && s->fail_reason == SOLVER_REASON_NONE)
                                solver_fail(s, SOLVER_REASON_TOPOLOGY,
                                     "no zone allowed by its topology constraints has room or an offering for it");
                        break;
                }
        }
        return q < 0 ? q : placed;
}

/* Pods that fit in what a node already costs. */
int64_t solver_place_free_room(const Solver *s, const Shape *sh, const Node *n) {
        int64_t m = INT64_MAX;
        if (n->kind == NODE_EXISTING)
                return m;
        for (uint8_t i = 0; i < sh->n_active; i++) {
                int r = sh->active[i];
                if (n->slack[r] < sh->req.v[r])
                        return 0;
                m = MIN(m, n->slack[r] / sh->req.v[r]);
        }
        (void) s;
        return m;
}

static int cmp_grow(const void *a, const void *b) {
        const GrowCand *x = a, *y = b;
        if (x->g != y->g)
                return x->g < y->g ? -1 : 1;
        return x->node < y->node ? -1 : x->node > y->node;
}

/* Second choice after free room: the planned nodes that would grow least, one pod each, as
 * long as growing them costs less than the pod's own size (what fresh capacity costs). */
static int place_grow(Solver *s, Variant *v, const uint32_t *pods, int64_t n, int64_t *placed) {
        const Shape *sh = &s->shapes[v->shape];
        int64_t size = sh->size_key[0];
        if (size <= 0)
                return 0;
        GrowCand *c = NULL;
        size_t nc = 0, cap = 0;
        for (uint32_t ni = s->n_existing; ni < s->n_nodes; ni++) {
                const Node *nd = &s->nodes[ni];
                int64_t g = growth(s, sh, nd);
                if (g <= 0 || g >= size)
                        continue;
                if (nc == cap) {
                        cap = cap ? cap * 2 : 256;
                        GrowCand *nn = realloc(c, cap * sizeof(GrowCand));
                        if (!nn) {
                                free(c);
                                return -ENOMEM;
                        }
                        c = nn;
                }
                c[nc++] = (GrowCand) { g, ni };
        }
        if (nc > 1)
                qsort(c, nc, sizeof(GrowCand), cmp_grow);
        int q = 0;
        for (size_t i = 0; i < nc && *placed < n; i++) {
                if (solver_place_fit_count(s, v, c[i].node, 1, NO_ZONE) <= 0)
                        continue;
                q = solver_place_commit(s, v, c[i].node, pods + *placed, 1, NO_ZONE);
                if (q < 0)
                        break;
                (*placed)++;
        }
        free(c);
        return q;
}

int64_t solver_place_plain(Solver *s, Variant *v, const uint32_t *pods, int64_t n) {
        int64_t placed = 0;
        int q = 0;
        const Shape *sh = &s->shapes[v->shape];
        /* first where it costs nothing more, then anywhere it fits */
        for (uint32_t ni = 0; ni < s->n_nodes && placed < n; ni++) {
                int64_t free = solver_place_free_room(s, sh, &s->nodes[ni]);
                if (free <= 0)
                        continue;
                int64_t m = solver_place_fit_count(s, v, ni, MIN(n - placed, free), NO_ZONE);
                if (m <= 0)
                        continue;
                q = solver_place_commit(s, v, ni, pods + placed, m, NO_ZONE);
                if (q < 0)
                        return q;
                placed += m;
        }
        if (placed < n) {
                q = place_grow(s, v, pods, n, &placed);
                if (q < 0)
                        return q;
        }
        for (uint32_t ni = 0; ni < s->n_nodes && placed < n; ni++) {
                int64_t m = solver_place_fit_count(s, v, ni, n - placed, NO_ZONE);
                if (m <= 0)
                        continue;
                q = solver_place_commit(s, v, ni, pods + placed, m, NO_ZONE);
                if (q < 0)
                        return q;
                placed += m;
        }
        while (placed < n) {
                q = solver_try_preempt(s, v, pods[placed], ~0u);
                if (q < 0)
                        return q;
                if (q == 0)
                        break;
                placed++;
        }
        while (placed < n && !solver_out_of_time(s)) {
                uint32_t ni;
                q = solver_open_node(s, v, NO_ZONE, &ni);
                if (q < 0)
                        return q;
                if (q == 0)
                        break;
                int64_t m = solver_place_fit_count(s, v, ni, n - placed, NO_ZONE);
                if (m <= 0) {
                        solver_fresh_node_failed(s, v, ni);
                        solver_discard_last_node(s, ni);
                        break;
                }
                q = solver_place_commit(s, v, ni, pods + placed, m, NO_ZONE);
                if (q < 0)
                        return q;
                placed += m;
        }
        return placed;
}
