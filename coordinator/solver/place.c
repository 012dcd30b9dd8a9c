/* SPDX-License-Identifier: Apache-2.0 */
/* Placement: batches of identical pods (a shape at a relaxation level) go first-fit onto
 * existing and already planned nodes, then preempt lower-priority pods, then open new nodes.
 * A new node keeps the bitset of instance types that can still hold everything on it. */

#include <stdio.h>

#include "grow.h"
#include "macro.h"
#include "solver-internal.h"

/* ---- undo log ------------------------------------------------------------------------------- */

static int undo_push(Solver *s, UndoKind k, uint32_t a, uint32_t b, int64_t v) {
        if (s->n_undo == s->cap_undo) {
                size_t nc = s->cap_undo ? s->cap_undo * 2 : 1024;
                Undo *nu = realloc(s->undo, nc * sizeof(Undo));
                if (!nu)
                        return -ENOMEM;
                s->undo = nu;
                s->cap_undo = nc;
        }
        s->undo[s->n_undo++] = (Undo) { .kind = (uint8_t) k, .a = a, .b = b, .v = v };
        return 0;
}

void solver_undo_all(Solver *s) {
        for (size_t i = s->n_undo; i-- > 0;) {
                const Undo *u = &s->undo[i];
                switch ((UndoKind) u->kind) {
                case U_USED:
                        s->nodes[u->a].used[u->b] = u->v;
                        break;
                case U_NPODS:
                        s->nodes[u->a].n_pods = (uint32_t) u->v;
                        break;
                case U_REMOVED:
                        s->nodes[u->a].removed = u->v;
                        break;
                case U_NPORTS:
                        s->nodes[u->a].n_ports = (uint32_t) u->v;
                        break;
                case U_TOTAL:
                        s->groups[u->a].total = u->v;
                        break;
                case U_ZCOUNT:
                        s->groups[u->a].zcount[u->b] = (int32_t) u->v;
                        break;
                case U_ZOWNERS:
                        s->groups[u->a].zowners[u->b] = (int32_t) u->v;
                        break;
                case U_HCOUNT:
                        s->groups[u->a].hcount[u->b] = (int32_t) u->v;
                        break;
                case U_HOWNERS:
                        s->groups[u->a].howners[u->b] = (int32_t) u->v;
                        break;
                case U_PREEMPTED:
                        s->preempted[u->a] = (uint8_t) u->v;
                        break;
                }
        }
        s->n_undo = 0;
        /* new nodes go away; their host counts return to zero */
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                if (gr->key != TOPO_HOST || s->n_nodes <= s->n_existing)
                        continue;
                memset(gr->hcount + s->n_existing, 0, (s->n_nodes - s->n_existing) * sizeof(int32_t));
                memset(gr->howners + s->n_existing, 0, (s->n_nodes - s->n_existing) * sizeof(int32_t));
        }
        for (uint32_t i = s->n_existing; i < s->n_nodes; i++)
                free(s->nodes[i].ports);
        s->n_nodes = s->n_existing;
}

/* Changes to base state (existing nodes, groups) are logged; new nodes are thrown away. */
static int set_used(Solver *s, uint32_t ni, int r, int64_t v) {
        Node *n = &s->nodes[ni];
        if (n->kind == NODE_EXISTING) {
                int q = undo_push(s, U_USED, ni, (uint32_t) r, n->used[r]);
                if (q < 0)
                        return q;
        }
        n->used[r] = v;
        return 0;
}

static int set_npods(Solver *s, uint32_t ni, uint32_t v) {
        Node *n = &s->nodes[ni];
        if (n->kind == NODE_EXISTING) {
                int q = undo_push(s, U_NPODS, ni, 0, n->n_pods);
                if (q < 0)
                        return q;
        }
        n->n_pods = v;
        return 0;
}

/* The capacity type of node ni: a planned node has one once its offerings are all of one type
 * (-1 before: its pods count in no capacity-type domain, as in Karpenter). */
static int node_ct(const Solver *s, uint32_t ni) {
        if (ni < s->n_existing)
                return snap_ct(s, ni);
        uint64_t sl = s->nodes[ni].slots;
        if (!(sl & slots_of_ct(SOLVER_CAPACITY_SPOT)))
                return SOLVER_CAPACITY_ON_DEMAND;
        if (!(sl & slots_of_ct(SOLVER_CAPACITY_ON_DEMAND)))
                return SOLVER_CAPACITY_SPOT;
        return -1;
}

static int count_add(Solver *s, uint32_t g, int32_t zone, uint32_t ni, bool owners, int64_t d) {
        Group *gr = &s->groups[g];
        int q;
        if (!owners) {
                q = undo_push(s, U_TOTAL, g, 0, gr->total);
                if (q < 0)
                        return q;
                gr->total += d;
        }
        if (gr->key == TOPO_CT)
                zone = node_ct(s, ni); /* its domains live where a zone group's do */
        if ((gr->key == TOPO_ZONE || gr->key == TOPO_CT) && zone >= 0) {
                int32_t *a = owners ? gr->zowners : gr->zcount;
                q = undo_push(s, owners ? U_ZOWNERS : U_ZCOUNT, g, (uint32_t) zone, a[zone]);
                if (q < 0)
                        return q;
                a[zone] += (int32_t) d;
        } else if (gr->key == TOPO_HOST) {
                int32_t *a = owners ? gr->howners : gr->hcount;
                if (ni < s->n_existing) {
                        q = undo_push(s, owners ? U_HOWNERS : U_HCOUNT, g, ni, a[ni]);
                        if (q < 0)
                                return q;
                }
                a[ni] += (int32_t) d;
        }
        return 0;
}

/* Counts of a pod's shape when it arrives on (d = +m) or leaves (d = -m) node ni. */
static int account(Solver *s, const Shape *sh, const Variant *v, uint32_t ni, int64_t d,
                   bool bound_anti) {
        const Node *n = &s->nodes[ni];
        int q;
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                q = count_add(s, sh->matches[m], n->zone, ni, false, d);
                if (q < 0)
                        return q;
        }
        if (v) {
                for (uint32_t c = 0; c < v->n_cons; c++)
                        if (v->cons[c].kind == CON_ANTI && v->cons[c].required) {
                                q = count_add(s, v->cons[c].group, n->zone, ni, true, d);
                                if (q < 0)
                                        return q;
                        }
        } else if (bound_anti) {
                for (size_t k = 0; k < sh->pod->n_anti_affinity; k++) {
                        q = count_add(s, sh->anti_g[k], n->zone, ni, true, d);
                        if (q < 0)
                                return q;
                }
        }
        return 0;
}

/* ---- batches -------------------------------------------------------------------------------- */

static bool batch_before(const Solver *s, const Batch *a, const Batch *b) {
        if (a->priority != b->priority)
                return a->priority > b->priority;
        const Shape *x = &s->shapes[a->shape], *y = &s->shapes[b->shape];
        if (x->anchor != y->anchor)
                return x->anchor;
        if (x->size_key[0] != y->size_key[0])
                return x->size_key[0] > y->size_key[0];
        if (x->size_key[1] != y->size_key[1])
                return x->size_key[1] > y->size_key[1];
        if (x->has_constraints != y->has_constraints)
                return x->has_constraints;
        if (a->shape != b->shape)
                return a->shape < b->shape;
        return a->seq < b->seq;
}

static int heap_push(Solver *s, const Batch *b) {
        if (s->n_heap == s->cap_heap) {
                size_t nc = s->cap_heap ? s->cap_heap * 2 : 64;
                Batch *nh = realloc(s->heap, nc * sizeof(Batch));
                if (!nh)
                        return -ENOMEM;
                s->heap = nh;
                s->cap_heap = nc;
        }
        size_t i = s->n_heap++;
        s->heap[i] = *b;
        s->heap[i].seq = s->seq++;
        while (i > 0) {
                size_t p = (i - 1) / 2;
                if (!batch_before(s, &s->heap[i], &s->heap[p]))
                        break;
                Batch t = s->heap[i];
                s->heap[i] = s->heap[p];
                s->heap[p] = t;
                i = p;
        }
        return 0;
}

static Batch heap_pop(Solver *s) {
        Batch top = s->heap[0];
        s->heap[0] = s->heap[--s->n_heap];
        size_t i = 0;
        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, m = i;
                if (l < s->n_heap && batch_before(s, &s->heap[l], &s->heap[m]))
                        m = l;
                if (r < s->n_heap && batch_before(s, &s->heap[r], &s->heap[m]))
                        m = r;
                if (m == i)
                        break;
                Batch t = s->heap[i];
                s->heap[i] = s->heap[m];
                s->heap[m] = t;
                i = m;
        }
        return top;
}

/* ---- node-local checks ---------------------------------------------------------------------- */

/* How many more pods of the variant the node may take by hostname-keyed constraints. */
static int64_t host_cap(const Solver *s, const Variant *v, uint32_t ni) {
        int64_t cap = INT64_MAX;
        for (uint32_t c = 0; c < v->n_cons; c++) {
                const Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (g->key != TOPO_HOST)
                        continue;
                int32_t cnt = g->hcount[ni];
                switch (k->kind) {
                case CON_SPREAD:
                        if (k->self)
                                cap = MIN(cap, (int64_t) k->max_skew + k->host_min - cnt);
                        else if (cnt - k->host_min > k->max_skew)
                                return 0;
                        break;
                case CON_AFFINITY:
                        if (cnt > 0)
                                break;
                        if (g->total == 0 && k->self)
                                break;
                        return 0;
                case CON_ANTI:
                        if (cnt > 0)
                                return 0;
                        if (k->self)
                                cap = MIN(cap, 1);
                        break;
                }
                if (cap <= 0)
                        return 0;
        }
        const Shape *sh = &s->shapes[v->shape];
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                const Group *g = &s->groups[sh->matches[m]];
                if (g->key == TOPO_HOST && g->has_anti_owners && g->howners[ni] > 0)
                        return 0;
        }
        return cap;
}

static bool ports_conflict(const Node *n, const SolverPod *p) {
        for (size_t i = 0; i < p->n_host_ports; i++)
                for (uint32_t j = 0; j < n->n_ports; j++)
                        if (n->ports[j].port == p->host_ports[i].port &&
                            n->ports[j].protocol == p->host_ports[i].protocol)
                                return true;
        return false;
}

static void node_recompute_cap(Solver *s, Node *n) {
        const FitTable *f = s->pools[n->pool].fit;
        int64_t cap[R_MAX] = {};
        BS_FOREACH(t, n->types, s->W) {
                if (n->has_budget && !bs_test(n->budget, t))
                        continue;
                const int64_t *a = f->alloc + t * R_MAX;
                for (int r = 0; r < R_MAX; r++)
                        if (a[r] > cap[r])
                                cap[r] = a[r];
        }
        memcpy(n->cap, cap, sizeof(cap));
}

/* Room left in the cheapest type the node can still become. */
static void node_update_slack(Solver *s, Node *n) {
        const Pool *p = &s->pools[n->pool];
        for (uint32_t i = 0; i < p->n_price_order; i++) {
                uint32_t t = p->price_order[i];
                if (!bs_test(n->types, t))
                        continue;
                const int64_t *a = p->fit->alloc + (size_t) t * R_MAX;
                for (int r = 0; r < R_MAX; r++)
                        n->slack[r] = a[r] - n->used[r];
                return;
        }
        memset(n->slack, 0, sizeof(n->slack));
}

static bool test_fit(Solver *s, const Pool *p, const Shape *sh, const Node *n, const uint64_t *base,
                     int64_t m, uint64_t *out) {
        int64_t d[R_MAX];
        memcpy(d, n->used, sizeof(d));
        for (uint8_t i = 0; i < sh->n_active; i++)
                d[sh->active[i]] += m * sh->req.v[sh->active[i]];
        solver_fit_set(s, p->fit, d, out);
        if (!bs_and_any(out, out, base, s->W))
                return false;
        if (p->has_min_values && !solver_pool_min_values_ok(s, p, out))
                return false;
        if (n->has_budget) {
                uint64_t acc = 0;
                for (size_t i = 0; i < s->W; i++)
                        acc |= out[i] & n->budget[i];
                return acc != 0;
        }
        return true;
}

/* Slots a new node would have after taking the variant in zone z (NO_ZONE: any), on the
 * capacity type the placement is pinned to, if any. */
static uint64_t new_node_slots(const Solver *s, const Node *n, const PoolCompat *pc, int z) {
        uint64_t sl = n->slots & pc->slots;
        if (z >= 0)
                sl &= slots_of_zone(z);
        if (s->ct_pin >= 0)
                sl &= slots_of_ct(s->ct_pin);
        return sl;
}

/* A pod retried for its required hostname affinity may make the planned node of the pods it
 * needs bigger than that node's price budget (price.c) allows: the budget is a cost heuristic,
 * the affinity a rule, and that node is the only place the pod may go. */
static bool affinity_lifts_budget(const Solver *s, const Variant *v, uint32_t ni) {
        const Node *n = &s->nodes[ni];
        if (!s->retrying || n->kind != NODE_NEW || !n->has_budget)
                return false;
        for (uint32_t c = 0; c < v->n_cons; c++) {
                const Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (k->kind == CON_AFFINITY && k->required && g->key == TOPO_HOST && g->hcount[ni] > 0)
                        return true;
        }
        return false;
}

static void node_set_budget(Solver *s, Node *n, bool on) {
        n->has_budget = on;
        node_recompute_cap(s, n);
}

static int64_t fit_count(Solver *s, Variant *v, uint32_t ni, int64_t want, int z);

/* The largest m <= want such that the node can take m more pods of the variant (in zone z). */
int64_t solver_place_fit_count(Solver *s, Variant *v, uint32_t ni, int64_t want, int z) {
        if (!affinity_lifts_budget(s, v, ni))
                return fit_count(s, v, ni, want, z);
        node_set_budget(s, &s->nodes[ni], false);
        int64_t m = fit_count(s, v, ni, want, z);
        node_set_budget(s, &s->nodes[ni], true);
        return m;
}

static int64_t fit_count(Solver *s, Variant *v, uint32_t ni, int64_t want, int z) {
        Node *n = &s->nodes[ni];
        if (n->removed || n->closed || want <= 0)
                return 0;
        const Shape *sh = &s->shapes[v->shape];
        if (z >= 0 && n->zone >= 0 && n->zone != z)
                return 0;
        int64_t m = want;
        for (uint8_t i = 0; i < sh->n_active; i++) {
                int r = sh->active[i];
                int64_t room = n->cap[r] - n->used[r];
                if (room < sh->req.v[r])
                        return 0;
                m = MIN(m, room / sh->req.v[r]);
        }
        if (v->n_cons || sh->n_matches) {
                m = MIN(m, host_cap(s, v, ni));
                if (m <= 0)
                        return 0;
        }
        if (sh->pod->n_host_ports) {
                if (ports_conflict(n, sh->pod))
                        return 0;
                m = MIN(m, 1);
        }
        if (n->kind == NODE_EXISTING) {
                if (z >= 0 && n->zone != z)
                        return 0;
                if (s->ct_pin >= 0 && snap_ct(s, ni) != s->ct_pin)
                        return 0;
                if (!solver_existing_ok(s, v, ni))
                        return 0;
                return m;
        }
        PoolCompat *pc = solver_pool_compat(s, v, n->pool);
        if (!pc->ok)
                return 0;
        if (v->custom.n > 0 && (n->custom != &s->pools[n->pool].custom || pc->custom_changed)) {
                const VSetList *nl;
                int q = solver_vsetlist_narrow(s, s->rarena, n->custom, &v->custom, &nl, NULL);
                if (q <= 0)
                        return 0;
        }
        uint64_t sl = new_node_slots(s, n, pc, z);
        if (!sl)
                return 0;
        const Pool *p = &s->pools[n->pool];
        uint64_t *base = s->scratch, *tmp = s->scratch + s->W;
        if (!bs_and_any(base, n->types, pc->types, s->W))
                return 0;
        if (sl != n->slots) {
                solver_offer_set(s, sl, tmp);
                if (!bs_and_any(base, base, tmp, s->W))
                        return 0;
        }
        if (test_fit(s, p, sh, n, base, m, tmp))
                return m;
        /* The cached capacity was too optimistic: tighten it, then search. */
        node_recompute_cap(s, n);
        if (!test_fit(s, p, sh, n, base, 1, tmp))
                return 0;
        int64_t lo = 1, hi = m;
        for (uint8_t i = 0; i < sh->n_active; i++) {
                int r = sh->active[i];
                hi = MIN(hi, (n->cap[r] - n->used[r]) / sh->req.v[r] + 1);
        }
        hi = MAX(hi, lo + 1);
        while (hi - lo > 1) {
                int64_t mid = lo + (hi - lo) / 2;
                if (test_fit(s, p, sh, n, base, mid, tmp))
                        lo = mid;
                else
                        hi = mid;
        }
        return lo;
}

/* ---- committing ----------------------------------------------------------------------------- */

static int claim_set_zone(Solver *s, const SolverPod *p, int32_t zone) {
        for (size_t i = 0; i < p->n_wffc_claims; i++) {
                uint32_t id;
                int q = solver_intern_get(&s->claims, p->wffc_claims[i], &id);
                if (q < 0)
                        return q;
                if (id >= s->claim_cap) {
                        size_t nc = MAX((size_t) id + 1, s->claim_cap * 2);
                        int32_t *nz = realloc(s->claim_zone, nc * sizeof(int32_t));
                        if (!nz)
                                return -ENOMEM;
                        for (size_t k = s->claim_cap; k < nc; k++)
                                nz[k] = INT32_MIN;
                        s->claim_zone = nz;
                        s->claim_cap = nc;
                }
                if (s->claim_zone[id] == INT32_MIN)
                        s->claim_zone[id] = zone;
        }
        return 0;
}

static void limits_reserve(Solver *s, Node *n, bool release_only) {
        const Pool *p = &s->pools[n->pool];
        if (!p->has_limits)
                return;
        int64_t cap[R_MAX] = {};
        BS_FOREACH(t, n->types, s->W) {
                const SolverResources *c = &s->snap->types[t].capacity;
                for (int r = 0; r < R_MAX; r++)
                        cap[r] = MAX(cap[r], c->v[r]);
        }
        SolverResources *rem = &s->remaining[n->pool];
        for (int r = 0; r < R_MAX; r++) {
                if (p->np->limits.v[r] < 0)
                        continue;
                if (release_only && cap[r] > n->reserved[r])
                        continue;
                rem->v[r] += n->reserved[r] - cap[r];
                n->reserved[r] = cap[r];
        }
}

int solver_place_commit(Solver *s, Variant *v, uint32_t ni, const uint32_t *pods, int64_t m, int z) {
        Node *n = &s->nodes[ni];
        const Shape *sh = &s->shapes[v->shape];
        int q;
        s->budget_progress |= m > 0; /* the time budget never ends a run before its first placement */
        if (affinity_lifts_budget(s, v, ni))
                node_set_budget(s, n, false);
        if (n->kind == NODE_NEW) {
                PoolCompat *pc = solver_pool_compat(s, v, n->pool);
                const Pool *p = &s->pools[n->pool];
                if (v->custom.n > 0 && (n->custom != &p->custom || pc->custom_changed)) {
                        const VSetList *nl;
                        q = solver_vsetlist_narrow(s, s->rarena, n->custom, &v->custom, &nl, NULL);
                        if (q < 0)
                                return q;
                        if (nl)
                                n->custom = nl;
                } else if (pc->custom_changed)
                        n->custom = pc->custom;
                uint64_t sl = new_node_slots(s, n, pc, z);
                uint64_t *base = s->scratch + 2 * s->W, *tmp = s->scratch + 3 * s->W;
                bs_and_any(base, n->types, pc->types, s->W);
                bs_and(n->base, pc->types, s->W);
                if (sl != n->slots) {
                        solver_offer_set(s, sl, tmp);
                        bs_and(base, tmp, s->W);
                        bs_and(n->base, tmp, s->W);
                }
                int64_t d[R_MAX];
                memcpy(d, n->used, sizeof(d));
                for (uint8_t i = 0; i < sh->n_active; i++)
                        d[sh->active[i]] += m * sh->req.v[sh->active[i]];
                solver_fit_set(s, p->fit, d, tmp);
                bs_and(base, tmp, s->W);
                bool changed = !bs_eq(base, n->types, s->W);
                bs_copy(n->types, base, s->W);
                n->slots = sl;
                if (z >= 0)
                        n->zone = z;
                else if (n->zone < 0) {
                        uint32_t zm = zones_of_slots(sl);
                        if (zm && !(zm & (zm - 1)))
                                n->zone = __builtin_ctz(zm);
                }
                if (changed && p->has_limits)
                        limits_reserve(s, n, true);
        }
        if (n->kind == NODE_NEW)
                for (int r = 0; r < R_MAX; r++)
                        n->slack[r] -= m * sh->req.v[r];
        for (int r = 0; r < R_MAX; r++)
                if (sh->req.v[r]) {
                        q = set_used(s, ni, r, n->used[r] + m * sh->req.v[r]);
                        if (q < 0)
                                return q;
                }
        q = set_npods(s, ni, n->n_pods + (uint32_t) m);
        if (q < 0)
                return q;
        if (n->kind == NODE_NEW) {
                bool neg = false;
                for (uint8_t i = 0; i < sh->n_active; i++)
                        neg |= n->slack[sh->active[i]] < 0;
                if (neg)
                        node_update_slack(s, n);
        }
        if (sh->pod->n_host_ports) {
                if (n->kind == NODE_EXISTING) {
                        q = undo_push(s, U_NPORTS, ni, 0, n->n_ports);
                        if (q < 0)
                                return q;
                }
                for (size_t i = 0; i < sh->pod->n_host_ports; i++) {
                        if (n->n_ports == n->cap_ports) {
                                uint32_t nc = n->cap_ports ? n->cap_ports * 2 : 4;
                                SolverHostPort *np = realloc(n->ports, nc * sizeof(SolverHostPort));
                                if (!np)
                                        return -ENOMEM;
                                n->ports = np;
                                n->cap_ports = nc;
                        }
                        n->ports[n->n_ports++] = sh->pod->host_ports[i];
                }
        }
        q = account(s, sh, v, ni, m, false);
        if (q < 0)
                return q;
        solver_budget_consume(s, v, m);
        uint32_t np = (uint32_t) s->snap->n_pods;
        for (int64_t i = 0; i < m; i++) {
                uint32_t pi = pods[i];
                if (pi >= np) {
                        n->headroom++;
                        continue;
                }
                SolverDecision *d = &s->decisions[pi];
                d->kind = n->kind == NODE_EXISTING ? SOLVER_DECISION_EXISTING : SOLVER_DECISION_LAUNCH;
                d->target = ni;
                d->relaxed = v->level;
                d->reason = SOLVER_REASON_NONE;
                d->message = NULL;
                if (sh->has_wffc) {
                        q = claim_set_zone(s, &s->snap->pods[pi], n->zone);
                        if (q < 0)
                                return q;
                }
        }
        return 0;
}

int solver_place_uncommit(Solver *s, Variant *v, uint32_t ni) {
        Node *n = &s->nodes[ni];
        const Shape *sh = &s->shapes[v->shape];
        if (n->kind != NODE_NEW || n->n_pods == 0 || sh->pod->n_host_ports || sh->has_wffc)
                return -EINVAL;
        for (int r = 0; r < R_MAX; r++)
                n->used[r] -= sh->req.v[r];
        n->n_pods--;
        int q = account(s, sh, v, ni, -1, false);
        if (q < 0)
                return q;
        /* lighter: every type its pods allow that holds what is left */
        uint64_t *tmp = s->scratch + 3 * s->W;
        solver_fit_set(s, s->pools[n->pool].fit, n->used, tmp);
        bs_and_any(n->types, n->base, tmp, s->W);
        node_recompute_cap(s, n);
        node_update_slack(s, n);
        return 0;
}

uint32_t solver_place_cheapest_type(const Solver *s, const Node *n) {
        const Pool *p = &s->pools[n->pool];
        for (uint32_t i = 0; i < p->n_price_order; i++)
                if (bs_test(n->types, p->price_order[i]))
                        return p->price_order[i];
        return NONE32;
}

/* ---- opening nodes -------------------------------------------------------------------------- */

static void fail(Solver *s, SolverReason r, const char *msg) {
        if (s->fail_reason == SOLVER_REASON_NONE || r == SOLVER_REASON_TOPOLOGY) {
                s->fail_reason = r;
                s->fail_msg = msg;
        }
}

/* Can a fresh node (no pods) take this variant by hostname constraints? */
static bool fresh_node_allowed(Solver *s, const Variant *v) {
        for (uint32_t c = 0; c < v->n_cons; c++) {
                const Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (g->key == TOPO_HOST && k->kind == CON_AFFINITY && !(g->total == 0 && k->self)) {
                        fail(s, SOLVER_REASON_TOPOLOGY,
                             g->total == 0 ? solver_arena_printf(s->rarena, "no pod matches its required pod affinity (%s)", g->description)
                                           : solver_arena_printf(s->rarena, "the nodes of the pods it has affinity to (%s) have no room", g->description));
                        return false;
                }
        }
        return true;
}

static void zero_host_min(Variant *v);

/* Limits are tight: planned nodes of the pool give up the larger types they could still become
 * (keeping their cheapest one), so that what they hold back shrinks. */
static bool squeeze_pool(Solver *s, uint32_t pi) {
        const Pool *p = &s->pools[pi];
        bool released = false;
        for (uint32_t ni = s->n_existing; ni < s->n_nodes; ni++) {
                Node *n = &s->nodes[ni];
                if (n->kind != NODE_NEW || n->pool != pi)
                        continue;
                uint32_t t0 = NONE32;
                for (uint32_t i = 0; i < p->n_price_order && t0 == NONE32; i++)
                        if (bs_test(n->types, p->price_order[i]))
                                t0 = p->price_order[i];
                if (t0 == NONE32)
                        continue;
                const SolverResources *c0 = &s->snap->types[t0].capacity;
                BS_FOREACH(t, n->types, s->W) {
                        const SolverResources *c = &s->snap->types[t].capacity;
                        for (int r = 0; r < R_MAX; r++)
                                if (p->np->limits.v[r] >= 0 && c->v[r] > c0->v[r]) {
                                        n->types[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                                        n->base[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                                        break;
                                }
                }
                int64_t before[R_MAX];
                memcpy(before, n->reserved, sizeof(before));
                limits_reserve(s, n, true);
                node_recompute_cap(s, n);
                released |= memcmp(before, n->reserved, sizeof(before)) != 0;
        }
        return released;
}

/* A fresh planned node of pool pi: DaemonSets on it, no pods, no budget. */
static int new_node(Solver *s, uint32_t pi, uint64_t sl, int z, const uint64_t *types, const VSetList *custom,
                    uint32_t *ret) {
        const Pool *p = &s->pools[pi];
        int q = solver_grow_nodes(s, s->n_nodes + 1);
        if (q < 0)
                return q;
        uint32_t ni = s->n_nodes;
        Node *n = &s->nodes[ni];
        *n = (Node) { .kind = NODE_NEW, .zone = z, .pool = pi, .slots = sl,
                      .types = s->node_types + (size_t) ni * 3 * s->W, .custom = custom };
        n->budget = n->types + s->W;
        n->base = n->types + 2 * s->W;
        bs_copy(n->types, types, s->W);
        bs_copy(n->base, types, s->W);
        for (int r = 0; r < R_MAX; r++)
                n->used[r] = p->ds.v[r];
        if (p->n_ds_ports > 0) {
                n->ports = malloc(p->n_ds_ports * sizeof(SolverHostPort));
                if (!n->ports)
                        return -ENOMEM;
                memcpy(n->ports, p->ds_ports, p->n_ds_ports * sizeof(SolverHostPort));
                n->n_ports = n->cap_ports = p->n_ds_ports;
        }
        node_recompute_cap(s, n);
        node_update_slack(s, n);
        s->n_nodes++;
        s->new_nodes++;
        *ret = ni;
        return 0;
}

static int open_node(Solver *s, Variant *v, int z, uint32_t *ret) {
        if (!v->new_nodes_ok)
                return 0;
        if (s->new_nodes >= s->opts->max_new_nodes) {
                fail(s, SOLVER_REASON_MAX_NEW_NODES, "no new node may be launched");
                return 0;
        }
        if (!fresh_node_allowed(s, v))
                return 0;
        uint64_t *types = s->scratch + 4 * s->W, *tmp = s->scratch + 5 * s->W;
        for (uint32_t oi = 0; oi < s->n_pools; oi++) {
                uint32_t pi = s->pool_order[oi];
                PoolCompat *pc = solver_pool_compat(s, v, pi);
                if (!pc->ok)
                        continue;
                const Pool *p = &s->pools[pi];
                if (p->np->is_static) { /* its nodes are its replicas (static.c), never opened for pods */
                        fail(s, SOLVER_REASON_LIMITS,
                             solver_arena_printf(s->rarena, "NodePool %s is static: it keeps %u node(s) and launches none "
                                                 "for pods", p->np->name, p->np->replicas));
                        continue;
                }
                if (p->nodes_left_run <= 0) {
                        fail(s, SOLVER_REASON_LIMITS,
                             solver_arena_printf(s->rarena, "NodePool %s has reached its limit of %lld nodes", p->np->name,
                                                 (long long) p->np->node_limit));
                        continue;
                }
                uint64_t sl = pc->slots & (z >= 0 ? slots_of_zone(z) : ~(uint64_t) 0);
                if (s->opts->on_demand_only)
                        sl &= slots_of_ct(SOLVER_CAPACITY_ON_DEMAND);
                if (s->ct_pin >= 0)
                        sl &= slots_of_ct(s->ct_pin);
                if (!sl)
                        continue;
                bs_copy(types, pc->types, s->W);
                if (sl != pc->slots) {
                        solver_offer_set(s, sl, tmp);
                        if (!bs_and_any(types, types, tmp, s->W))
                                continue;
                }
                if (p->has_limits) {
                        const SolverResources *rem = &s->remaining[pi];
                        uint64_t *keep = s->scratch + 6 * s->W;
                        bs_copy(keep, types, s->W);
                retry:
                        BS_FOREACH(t, types, s->W) {
                                const SolverResources *c = &s->snap->types[t].capacity;
                                for (int r = 0; r < R_MAX; r++)
                                        if (p->np->limits.v[r] >= 0 && c->v[r] > rem->v[r]) {
                                                types[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                                                break;
                                        }
                        }
                        if (!bs_any(types, s->W) && squeeze_pool(s, pi)) {
                                bs_copy(types, keep, s->W);
                                goto retry;
                        }
                        if (!bs_any(types, s->W) || (p->has_min_values && !solver_pool_min_values_ok(s, p, types))) {
                                fail(s, SOLVER_REASON_LIMITS,
                                     solver_arena_printf(s->rarena, "NodePool %s has reached its limits", p->np->name));
                                continue;
                        }
                }
                if (z < 0) {
                        uint32_t zm = zones_of_slots(sl);
                        if (zm && !(zm & (zm - 1)))
                                z = __builtin_ctz(zm);
                }
                uint32_t ni;
                int q = new_node(s, pi, sl, z, types, pc->custom, &ni);
                if (q < 0)
                        return q;
                Node *n = &s->nodes[ni];
                /* what the node may cost (price.c); minValues counts on the types it holds */
                n->has_budget = solver_budget_apply(s, pi, v, sl, types, n->budget);
                node_recompute_cap(s, n);
                if (p->has_limits)
                        limits_reserve(s, n, false);
                if (p->nodes_left_run != INT64_MAX)
                        s->pools[pi].nodes_left_run--;
                zero_host_min(v);
                *ret = ni;
                return 1;
        }
        return 0;
}

/* Why a node opened for the variant could not take it after all. */
static void fresh_node_failed(Solver *s, const Variant *v, uint32_t ni) {
        const SolverPod *p = s->shapes[v->shape].pod;
        if (p->n_host_ports && ports_conflict(&s->nodes[ni], p))
                fail(s, SOLVER_REASON_HOST_PORTS,
                     solver_arena_printf(s->rarena, "host port %u is taken by a DaemonSet on every new node",
                                         p->host_ports[0].port));
        else
                fail(s, SOLVER_REASON_TOPOLOGY, "a new node could not take it");
}

static void discard_last_node(Solver *s, uint32_t ni) {
        Node *n = &s->nodes[ni];
        if (ni + 1 != s->n_nodes || n->kind != NODE_NEW || n->n_pods != 0)
                return;
        if (s->pools[n->pool].has_limits)
                for (int r = 0; r < R_MAX; r++)
                        s->remaining[n->pool].v[r] += n->reserved[r];
        if (s->pools[n->pool].nodes_left_run != INT64_MAX)
                s->pools[n->pool].nodes_left_run++;
        free(n->ports);
        s->n_nodes--;
        s->new_nodes--;
}

void solver_place_use_budget(Solver *s, uint32_t ni, bool on) {
        Node *n = &s->nodes[ni];
        n->has_budget = on;
        node_recompute_cap(s, n);
}

void solver_place_discard_node(Solver *s, uint32_t ni) {
        discard_last_node(s, ni);
}

int solver_place_open_beside(Solver *s, uint32_t a, uint32_t *ret) {
        if (s->new_nodes >= s->opts->max_new_nodes)
                return 0;
        const Node *src = &s->nodes[a];
        const Pool *p = &s->pools[src->pool];
        if (src->kind != NODE_NEW || p->has_limits || p->nodes_left_run <= 0)
                return 0;
        uint64_t sl = src->slots & (src->zone >= 0 ? slots_of_zone(src->zone) : ~(uint64_t) 0);
        uint64_t *types = s->scratch + 4 * s->W;
        solver_offer_set(s, sl, types);
        if (!bs_and_any(types, types, p->types, s->W))
                return 0;
        int q = new_node(s, src->pool, sl, src->zone, types, &p->custom, ret);
        if (q < 0)
                return q;
        if (p->nodes_left_run != INT64_MAX)
                s->pools[src->pool].nodes_left_run--;
        return 1;
}

/* ---- preemption ----------------------------------------------------------------------------- */

static int cmp_victim(const void *a, const void *b, void *u) {
        const Solver *s = u;
        const SolverPod *x = &s->snap->pods[*(const uint32_t *) a], *y = &s->snap->pods[*(const uint32_t *) b];
        if (x->priority != y->priority)
                return x->priority > y->priority ? -1 : 1;
        uint32_t i = *(const uint32_t *) a, j = *(const uint32_t *) b;
        return i < j ? -1 : i > j;
}

static int requeue(Solver *s, const uint32_t *pods, size_t n);

/* kube-scheduler would preempt lower-priority pods on an existing node for this pod: no new
 * node is needed. Victims are the lower-priority pods left after reprieving as many as fit,
 * highest priority first. Returns 1 when planned. */
static int try_preempt(Solver *s, Variant *v, uint32_t pod, uint32_t zmask) {
        const Shape *sh = &s->shapes[v->shape];
        if (s->opts->no_preemption || sh->headroom || pod >= s->snap->n_pods)
                return 0;
        const SolverPod *p = &s->snap->pods[pod];
        if (p->preempt_never)
                return 0;
        int best = -1;
        int32_t best_max = INT32_MAX;
        size_t best_n = SIZE_MAX;
        uint32_t *cand = NULL, *best_v = NULL;
        size_t n_best_v = 0;
        int q = 0;
        for (uint32_t ni = 0; ni < s->n_existing; ni++) {
                Node *n = &s->nodes[ni];
                if (n->removed || n->closed || n->min_priority >= p->priority || n->n_bound == 0)
                        continue;
                if (v->zone_mode && (n->zone < 0 || !(zmask & (1u << n->zone))))
                        continue;
                if (s->ct_pin >= 0 && snap_ct(s, ni) != s->ct_pin)
                        continue;
                if (!solver_existing_ok(s, v, ni))
                        continue;
                if ((v->n_cons || sh->n_matches) && host_cap(s, v, ni) <= 0)
                        continue;
                if (p->n_host_ports && ports_conflict(n, p))
                        continue;
                /* free everything lower, then reprieve */
                int64_t avail[R_MAX];
                for (int r = 0; r < R_MAX; r++)
                        avail[r] = n->cap[r] - n->used[r];
                size_t nc = 0;
                free(cand);
                cand = malloc(n->n_bound * sizeof(uint32_t));
                if (!cand)
                        return -ENOMEM;
                for (uint32_t k = 0; k < n->n_bound; k++) {
                        uint32_t bp = s->bound[n->first_bound + k];
                        const SolverPod *b = &s->snap->pods[bp];
                        if (s->preempted[bp] || b->daemonset || b->priority >= p->priority)
                                continue;
                        cand[nc++] = bp;
                        const Shape *bs = &s->shapes[s->pod_shape[bp]];
                        for (int r = 0; r < R_MAX; r++)
                                avail[r] += bs->req.v[r];
                }
                bool fits = true;
                for (int r = 0; r < R_MAX; r++) {
                        avail[r] -= sh->req.v[r];
                        if (avail[r] < 0)
                                fits = false;
                }
                if (!fits || nc == 0)
                        continue;
                qsort_r(cand, nc, sizeof(uint32_t), cmp_victim, s);
                size_t nv = 0;
                int32_t maxp = INT32_MIN;
                for (size_t k = 0; k < nc; k++) {
                        const Shape *bs = &s->shapes[s->pod_shape[cand[k]]];
                        bool keep = true;
                        for (int r = 0; r < R_MAX && keep; r++)
                                keep = bs->req.v[r] <= avail[r];
                        if (keep) {
                                for (int r = 0; r < R_MAX; r++)
                                        avail[r] -= bs->req.v[r];
                        } else {
                                cand[nv++] = cand[k];
                                maxp = MAX(maxp, s->snap->pods[cand[k]].priority);
                        }
                }
                if (nv == 0)
                        continue; /* it fits without preemption: not a preemption case */
                if (maxp < best_max || (maxp == best_max && nv < best_n)) {
                        best = (int) ni;
                        best_max = maxp;
                        best_n = nv;
                        free(best_v);
                        best_v = TAKE_PTR(cand);
                        n_best_v = nv;
                }
        }
        free(cand);
        if (best < 0)
                return 0;
        uint32_t ni = (uint32_t) best;
        Node *n = &s->nodes[ni];
        for (size_t k = 0; k < n_best_v && q >= 0; k++) {
                uint32_t bp = best_v[k];
                const Shape *bs = &s->shapes[s->pod_shape[bp]];
                q = undo_push(s, U_PREEMPTED, bp, 0, s->preempted[bp]);
                if (q < 0)
                        break;
                s->preempted[bp] = 1;
                for (int r = 0; r < R_MAX && q >= 0; r++)
                        if (bs->req.v[r])
                                q = set_used(s, ni, r, n->used[r] - bs->req.v[r]);
                if (q >= 0)
                        q = set_npods(s, ni, n->n_pods - 1);
                if (q >= 0)
                        q = account(s, bs, NULL, ni, -1, true);
                s->decisions[bp].preempted = true;
        }
        if (q >= 0) {
                for (int r = 0; r < R_MAX && q >= 0; r++)
                        if (sh->req.v[r])
                                q = set_used(s, ni, r, n->used[r] + sh->req.v[r]);
                if (q >= 0)
                        q = set_npods(s, ni, n->n_pods + 1);
                if (q >= 0)
                        q = account(s, sh, v, ni, 1, false);
        }
        if (q >= 0) {
                SolverDecision *d = &s->decisions[pod];
                d->kind = SOLVER_DECISION_PREEMPT;
                d->target = ni;
                d->relaxed = v->level;
                q = requeue(s, best_v, n_best_v);
        }
        if (q >= 0 && s->n_preempt + n_best_v > s->cap_preempt) {
                size_t nc = MAX(s->cap_preempt * 2, s->n_preempt + n_best_v + 16);
                uint32_t *np = realloc(s->preempt_list, nc * sizeof(uint32_t));
                if (!np)
                        q = -ENOMEM;
                else {
                        s->preempt_list = np;
                        s->cap_preempt = nc;
                }
        }
        if (q >= 0)
                for (size_t k = 0; k < n_best_v; k++)
                        s->preempt_list[s->n_preempt++] = best_v[k];
        free(best_v);
        return q < 0 ? q : 1;
}

/* Pods to place again (victims, pods of removed nodes), grouped by shape. */
static int requeue(Solver *s, const uint32_t *pods, size_t n) {
        if (n == 0)
                return 0;
        uint32_t *copy = solver_arena_alloc_nozero(s->rarena, n * sizeof(uint32_t));
        if (!copy)
                return -ENOMEM;
        memcpy(copy, pods, n * sizeof(uint32_t));
        /* sort by shape (stable by index) */
        for (size_t i = 1; i < n; i++) {
                uint32_t x = copy[i];
                size_t j = i;
                while (j > 0 && (s->pod_shape[copy[j - 1]] > s->pod_shape[x] ||
                                 (s->pod_shape[copy[j - 1]] == s->pod_shape[x] && copy[j - 1] > x))) {
                        copy[j] = copy[j - 1];
                        j--;
                }
                copy[j] = x;
        }
        for (size_t i = 0; i < n;) {
                size_t j = i;
                while (j < n && s->pod_shape[copy[j]] == s->pod_shape[copy[i]])
                        j++;
                Batch b = { .shape = s->pod_shape[copy[i]], .pods = copy + i, .n = (uint32_t) (j - i),
                            .priority = pod_at(s, copy[i])->priority };
                int q = heap_push(s, &b);
                if (q < 0)
                        return q;
                i = j;
        }
        return 0;
}

static int64_t growth(const Solver *s, const Shape *sh, const Node *n);

typedef struct GrowCand {
        int64_t g;
        uint32_t node;
} GrowCand;
static int cmp_grow(const void *a, const void *b);

/* ---- zones ---------------------------------------------------------------------------------- */

/* Domains of a topology key (zones, or capacity types: n_dom of them, E those the pod could
 * use) where the next pod of the variant may go by its constraints and the anti-affinity of
 * other pods, and how many pods each may take before the answer has to be computed again. */
static uint32_t allowed_domains(Solver *s, const Variant *v, TopoKey key, uint32_t n_dom, uint32_t E,
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
                                fail(s, SOLVER_REASON_TOPOLOGY,
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
                                fail(s, SOLVER_REASON_TOPOLOGY,
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
                                fail(s, SOLVER_REASON_TOPOLOGY,
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
                        fail(s, SOLVER_REASON_TOPOLOGY,
                             solver_arena_printf(s->rarena, "the anti-affinity of other pods excludes every %s", what));
        }
        return A;
}

/* Zones where the next pod of the variant may go, and how many pods each may take before the
 * answer has to be computed again. */
static uint32_t allowed_zones(Solver *s, const Variant *v, const SolverPod *pod, int64_t *quota) {
        uint32_t A = allowed_domains(s, v, TOPO_ZONE, s->n_zones, v->eligible_zones, quota);
        for (size_t i = 0; i < pod->n_wffc_claims; i++) {
                int64_t id = solver_intern_lookup(&s->claims, pod->wffc_claims[i]);
                if (id < 0 || (size_t) id >= s->claim_cap || s->claim_zone[id] == INT32_MIN || s->claim_zone[id] < 0)
                        continue;
                uint32_t before = A;
                A &= 1u << s->claim_zone[id];
                if (!A && before)
                        fail(s, SOLVER_REASON_VOLUME_ZONE, "its volume claim is bound to another zone by an earlier pod");
        }
        if (!v->eligible_zones)
                fail(s, SOLVER_REASON_REQUIREMENTS, "no zone can run it");
        return A;
}

/* Candidate nodes of a batch, per zone (and unpinned new nodes): "good" ones sorted by how
 * much they would grow (free room first), and all of them in node order as a fallback. */
typedef struct List {
        uint32_t *v;
        uint32_t n, cap;
} List;

typedef struct ZoneLists {
        List good[SOLVER_MAX_ZONES], all[SOLVER_MAX_ZONES], ugood, uall;
        uint32_t gc[SOLVER_MAX_ZONES], ac[SOLVER_MAX_ZONES], ugc[SOLVER_MAX_ZONES], uac[SOLVER_MAX_ZONES];
} ZoneLists;

static int list_push(List *l, uint32_t v) {
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

static void zl_free(ZoneLists *l) {
        for (int z = 0; z < SOLVER_MAX_ZONES; z++) {
                free(l->good[z].v);
                free(l->all[z].v);
        }
        free(l->ugood.v);
        free(l->uall.v);
}

static int64_t node_growth(const Solver *s, const Shape *sh, const Node *n) {
        if (n->kind == NODE_EXISTING)
                return 0; /* it fits (checked by the caller) and costs nothing more */
        return growth(s, sh, n);
}

enum { FOUND_GOOD, FOUND_UGOOD, FOUND_ANY };

static int64_t find_in_zone(Solver *s, Variant *v, ZoneLists *l, int z, int *ret_kind, int64_t *ret_g) {
        const Shape *sh = &s->shapes[v->shape];
        int64_t size = MAX(sh->size_key[0], (int64_t) 1);
        while (l->gc[z] < l->good[z].n) {
                uint32_t ni = l->good[z].v[l->gc[z]];
                int64_t g = node_growth(s, sh, &s->nodes[ni]);
                if (g < size && solver_place_fit_count(s, v, ni, 1, z) > 0) {
                        *ret_kind = FOUND_GOOD;
                        *ret_g = g;
                        return ni;
                }
                l->gc[z]++;
        }
        while (l->ugc[z] < l->ugood.n) {
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

static int sort_good(const Solver *s, const Shape *sh, List *l) {
        if (l->n < 2)
                return 0;
        GrowCand *c = malloc(l->n * sizeof(GrowCand));
        if (!c)
                return -ENOMEM;
        for (uint32_t i = 0; i < l->n; i++)
                c[i] = (GrowCand) { node_growth(s, sh, &s->nodes[l->v[i]]), l->v[i] };
        qsort(c, l->n, sizeof(GrowCand), cmp_grow);
        for (uint32_t i = 0; i < l->n; i++)
                l->v[i] = c[i].node;
        free(c);
        return 0;
}

static int64_t place_zone(Solver *s, Variant *v, const uint32_t *pods, int64_t n) {
        ZoneLists l = {};
        int64_t placed = 0;
        int q = 0;
        const Shape *sh = &s->shapes[v->shape];
        int64_t size = MAX(sh->size_key[0], (int64_t) 1);
        for (uint32_t ni = 0; ni < s->n_nodes && q >= 0; ni++) {
                const Node *nd = &s->nodes[ni];
                int32_t z = nd->zone;
                if (z >= 0) {
                        if (!(v->eligible_zones & (1u << z)) || solver_place_fit_count(s, v, ni, 1, z) <= 0)
                                continue;
                        q = list_push(&l.all[z], ni);
                        if (q >= 0 && node_growth(s, sh, nd) < size)
                                q = list_push(&l.good[z], ni);
                } else if (nd->kind == NODE_NEW && solver_place_fit_count(s, v, ni, 1, NO_ZONE) > 0) {
                        q = list_push(&l.uall, ni);
                        if (q >= 0 && node_growth(s, sh, nd) < size)
                                q = list_push(&l.ugood, ni);
                }
        }
        for (uint32_t z = 0; z < s->n_zones && q >= 0; z++)
                q = sort_good(s, sh, &l.good[z]);
        if (q >= 0)
                q = sort_good(s, sh, &l.ugood);
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
                        int64_t ni = find_in_zone(s, v, &l, z, &kind, &g);
                        if (ni < 0 || g >= best_g)
                                continue;
                        best = ni;
                        best_g = g;
                        best_z = z;
                        best_kind = kind;
                        if (order_g)
                                break; /* spreading: the least loaded zone decides */
                }
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
                                        l.gc[z]++;
                                else if (best_g > 0 && best_kind == FOUND_UGOOD)
                                        l.ugc[z]++;
                                if (was_unpinned) {
                                        q = list_push(&l.all[z], ni);
                                        if (q < 0)
                                                break;
                                }
                                continue;
                        }
                }
                q = try_preempt(s, v, pods[placed], A);
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
                        q = open_node(s, v, z, &ni);
                        if (q < 0)
                                break;
                        if (q == 0)
                                continue;
                        int64_t m = MIN(solver_place_fit_count(s, v, ni, n - placed, z), quota[z]);
                        if (m <= 0) {
                                fresh_node_failed(s, v, ni);
                                discard_last_node(s, ni);
                                q = 0;
                                continue;
                        }
                        q = solver_place_commit(s, v, ni, pods + placed, m, z);
                        if (q < 0)
                                break;
                        placed += m;
                        q = list_push(&l.all[z], ni);
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
                                fail(s, SOLVER_REASON_TOPOLOGY,
                                     "no zone allowed by its topology constraints has room or an offering for it");
                        break;
                }
        }
        zl_free(&l);
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

/* How much a new node would have to grow to take one more pod, in millicore equivalents. */
static int64_t growth(const Solver *s, const Shape *sh, const Node *n) {
        int64_t g = 0;
        for (uint8_t i = 0; i < sh->n_active; i++) {
                int r = sh->active[i];
                int64_t d = sh->req.v[r] - n->slack[r];
                if (d <= 0)
                        continue;
                if (r == SOLVER_RES_MEMORY)
                        d = (int64_t) ((double) d * s->mem_weight);
                else if (r != SOLVER_RES_CPU)
                        continue; /* pods, GPUs...: the cpu/memory step decides the price */
                g = MAX(g, d);
        }
        return g;
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

static int64_t place_plain(Solver *s, Variant *v, const uint32_t *pods, int64_t n) {
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
                q = try_preempt(s, v, pods[placed], ~0u);
                if (q < 0)
                        return q;
                if (q == 0)
                        break;
                placed++;
        }
        while (placed < n && !solver_out_of_time(s)) {
                uint32_t ni;
                q = open_node(s, v, NO_ZONE, &ni);
                if (q < 0)
                        return q;
                if (q == 0)
                        break;
                int64_t m = solver_place_fit_count(s, v, ni, n - placed, NO_ZONE);
                if (m <= 0) {
                        fresh_node_failed(s, v, ni);
                        discard_last_node(s, ni);
                        break;
                }
                q = solver_place_commit(s, v, ni, pods + placed, m, NO_ZONE);
                if (q < 0)
                        return q;
                placed += m;
        }
        return placed;
}

/* ---- failures ------------------------------------------------------------------------------- */

static void diagnose(Solver *s, Variant *v, SolverReason *ret_reason, const char **ret_msg) {
        const Shape *sh = &s->shapes[v->shape];
        if (v->unsupported) {
                *ret_reason = SOLVER_REASON_UNSUPPORTED;
                *ret_msg = v->unsupported_msg;
                return;
        }
        if (s->fail_reason != SOLVER_REASON_NONE) {
                *ret_reason = s->fail_reason;
                *ret_msg = s->fail_msg;
                return;
        }
        if (sh->pod->n_host_ports && !v->new_nodes_ok) {
                *ret_reason = SOLVER_REASON_HOST_PORTS;
                *ret_msg = "its host port is taken on the nodes it may use";
                return;
        }
        if (s->n_pools == 0) {
                *ret_reason = SOLVER_REASON_NO_NODEPOOL;
                *ret_msg = v->new_nodes_ok ? "no NodePool exists" : "it needs an existing node that cannot take it";
                return;
        }
        char buf[2048];
        size_t o = 0;
        /* the reason of the pool that came closest: taints are checked first, resources last */
        static const int rank[] = {
                [SOLVER_REASON_TAINTS] = 1, [SOLVER_REASON_REQUIREMENTS] = 2,
                [SOLVER_REASON_VOLUME_ZONE] = 3, [SOLVER_REASON_RESOURCES] = 4,
        };
        SolverReason first = SOLVER_REASON_NONE;
        for (uint32_t i = 0; i < s->n_pools && o < sizeof(buf) - 64; i++) {
                uint32_t pi = s->pool_order[i];
                PoolCompat *pc = solver_pool_compat(s, v, pi);
                if (pc->ok)
                        continue;
                if (first == SOLVER_REASON_NONE ||
                    ((unsigned) pc->reason < ELEMENTSOF(rank) && (unsigned) first < ELEMENTSOF(rank) &&
                     rank[pc->reason] > rank[first]))
                        first = pc->reason;
                int w = snprintf(buf + o, sizeof(buf) - o, "%sNodePool %s: %s", o ? "; " : "",
                                 s->pools[pi].np->name, pc->message ? pc->message : "incompatible");
                if (w < 0)
                        break;
                o = MIN(o + (size_t) w, sizeof(buf) - 1);
        }
        if (first == SOLVER_REASON_NONE) {
                *ret_reason = SOLVER_REASON_RESOURCES;
                *ret_msg = "no capacity could be planned for it";
                return;
        }
        *ret_reason = first;
        *ret_msg = solver_arena_strdup(s->rarena, buf);
}

/* kube-scheduler's minimum for hostname spread: the smallest count over the nodes the pod may
 * use. A planned new node counts 0, so once one exists the minimum is 0. Counts only grow
 * within a batch, so the value at its start is a safe (low) bound. */
static void refresh_host_min(Solver *s, Variant *v) {
        for (uint32_t c = 0; c < v->n_cons; c++) {
                Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (k->kind != CON_SPREAD || g->key != TOPO_HOST)
                        continue;
                int32_t min = INT32_MAX;
                if (s->n_nodes == s->n_existing)
                        for (uint32_t ni = 0; ni < s->n_existing && min > 0; ni++) {
                                const Node *n = &s->nodes[ni];
                                if (n->removed || !solver_existing_ok(s, v, ni))
                                        continue;
                                min = MIN(min, g->hcount[ni]);
                        }
                k->host_min = min == INT32_MAX ? 0 : min;
        }
}

static void zero_host_min(Variant *v) {
        for (uint32_t c = 0; c < v->n_cons; c++)
                v->cons[c].host_min = 0;
}

/* Out of time: the batch's pods from `from` on stay undecided, for a later run. */
static void defer_rest(Solver *s, const Batch *b, uint32_t from) {
        for (uint32_t i = from; i < b->n; i++)
                s->n_deferred += b->pods[i] < s->snap->n_pods;
}

/* Pods with rules keyed on the capacity type (karpenter.sh/capacity-type as a topology key):
 * the capacity type is chosen first, as the counts allow (a spread's least used type first,
 * spot before on-demand on a tie), then the pods go as any others onto nodes of that type; a
 * planned node that takes one is narrowed to the type, as Karpenter narrows a NodeClaim's
 * requirements to one domain. */
static int64_t place_ct(Solver *s, Variant *v, const uint32_t *pods, int64_t n) {
        const Group *order_g = NULL;
        for (uint32_t c = 0; c < v->n_cons && !order_g; c++)
                if (v->cons[c].kind == CON_SPREAD && s->groups[v->cons[c].group].key == TOPO_CT)
                        order_g = &s->groups[v->cons[c].group];
        int64_t placed = 0;
        while (placed < n && !solver_out_of_time(s)) {
                int64_t quota[_SOLVER_CAPACITY_MAX];
                uint32_t A = allowed_domains(s, v, TOPO_CT, _SOLVER_CAPACITY_MAX, v->eligible_cts, quota);
                int order[_SOLVER_CAPACITY_MAX] = { SOLVER_CAPACITY_SPOT, SOLVER_CAPACITY_ON_DEMAND };
                if (order_g && order_g->zcount[SOLVER_CAPACITY_ON_DEMAND] < order_g->zcount[SOLVER_CAPACITY_SPOT]) {
                        order[0] = SOLVER_CAPACITY_ON_DEMAND;
                        order[1] = SOLVER_CAPACITY_SPOT;
                }
                int64_t got = 0;
                for (int i = 0; i < _SOLVER_CAPACITY_MAX && got == 0; i++) {
                        int ct = order[i];
                        if (!(A & (1u << ct)))
                                continue;
                        int64_t want = MIN(n - placed, quota[ct]);
                        s->ct_pin = ct;
                        got = v->zone_mode ? place_zone(s, v, pods + placed, want) : place_plain(s, v, pods + placed, want);
                        s->ct_pin = -1;
                        if (got < 0)
                                return got;
                }
                if (got == 0)
                        break;
                placed += got;
        }
        if (!v->eligible_cts)
                fail(s, SOLVER_REASON_REQUIREMENTS, "no capacity type can run it");
        return placed;
}

/* Rounds of retries for pods that failed on topology while others were still being placed
 * (each round must place something; the last decides what is left). */
#define RETRY_ROUNDS 16

static int place_batch(Solver *s, const Batch *b) {
        Variant *v = solver_variant(s, b->shape, b->level);
        if (!v)
                return -ENOMEM;
        refresh_host_min(s, v);
        s->fail_reason = SOLVER_REASON_NONE;
        s->fail_msg = NULL;
        int64_t placed = 0;
        if (!v->unsupported) {
                placed = v->ct_mode     ? place_ct(s, v, b->pods, b->n)
                         : v->zone_mode ? place_zone(s, v, b->pods, b->n)
                                        : place_plain(s, v, b->pods, b->n);
                if (placed < 0)
                        return (int) placed;
        }
        s->n_placed += (uint64_t) placed;
        if (placed == b->n)
                return 0;
        if (s->out_of_time) {
                defer_rest(s, b, (uint32_t) placed);
                return 0;
        }
        const Shape *sh = &s->shapes[b->shape];
        if (b->level < sh->n_relax && !v->unsupported) {
                Batch nb = *b;
                nb.level++;
                nb.pods = b->pods + placed;
                nb.n = b->n - (uint32_t) placed;
                return heap_push(s, &nb);
        }
        if (s->fail_reason == SOLVER_REASON_TOPOLOGY && !s->retry_final) {
                /* as Karpenter's scheduler queue: tried again once the other pods are placed,
                 * which may be the ones its pod affinity (or spread) waits for */
                Batch nb = *b;
                nb.pods = b->pods + placed;
                nb.n = b->n - (uint32_t) placed;
                int q = GROW(s->retry, s->cap_retry, s->n_retry + 1, s->n_pods_all);
                if (q < 0)
                        return q;
                s->retry[s->n_retry++] = nb;
                return 0;
        }
        SolverReason reason;
        const char *msg;
        diagnose(s, v, &reason, &msg);
        for (uint32_t i = (uint32_t) placed; i < b->n; i++) {
                uint32_t pi = b->pods[i];
                if (pi >= s->snap->n_pods) {
                        s->headroom_unplaced++;
                        continue;
                }
                SolverDecision *d = &s->decisions[pi];
                d->kind = SOLVER_DECISION_UNSCHEDULABLE;
                d->reason = reason;
                d->message = msg;
                d->relaxed = v->level;
        }
        if (s->opts->stop_at_first_failure)
                return 1;
        return 0;
}

int solver_place_all(Solver *s) {
        const SolverOptions *o = s->opts;
        int q;
        s->n_heap = 0;
        s->new_nodes = 0;
        s->ct_pin = -1;
        s->headroom_unplaced = 0;
        s->n_preempt = 0;
        /* removed nodes: their pods must go elsewhere */
        size_t cap_rq = 0, n_rq = 0;
        uint32_t *rq = NULL;
        for (size_t i = 0; i < o->n_remove_nodes; i++) {
                size_t ni = o->remove_nodes[i];
                if (ni >= s->n_existing || s->nodes[ni].removed)
                        continue;
                Node *n = &s->nodes[ni];
                q = undo_push(s, U_REMOVED, (uint32_t) ni, 0, n->removed);
                if (q < 0)
                        goto out;
                n->removed = true;
                if (n->pool != NONE32 && s->pools[n->pool].has_limits) {
                        const SolverNode *sn = &s->snap->nodes[ni];
                        const SolverResources *capv = &sn->allocatable;
                        for (uint32_t t = 0; sn->instance_type && t < s->T; t++)
                                if (streq(s->snap->types[t].name, sn->instance_type)) {
                                        capv = &s->snap->types[t].capacity;
                                        break;
                                }
                        for (int r = 0; r < R_MAX; r++)
                                if (s->pools[n->pool].np->limits.v[r] >= 0)
                                        s->remaining[n->pool].v[r] += capv->v[r];
                }
                for (uint32_t k = 0; k < n->n_bound; k++) {
                        uint32_t bp = s->bound[n->first_bound + k];
                        if (s->preempted[bp])
                                continue;
                        const SolverPod *p = &s->snap->pods[bp];
                        q = account(s, &s->shapes[s->pod_shape[bp]], NULL, (uint32_t) ni, -1, true);
                        if (q < 0)
                                goto out;
                        if (p->daemonset)
                                continue;
                        if (n_rq == cap_rq) {
                                cap_rq = cap_rq ? cap_rq * 2 : 64;
                                uint32_t *nr = realloc(rq, cap_rq * sizeof(uint32_t));
                                if (!nr) {
                                        q = -ENOMEM;
                                        goto out;
                                }
                                rq = nr;
                        }
                        rq[n_rq++] = bp;
                }
        }
        q = requeue(s, rq, n_rq);
        if (q < 0)
                goto out;
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                Shape *sh = &s->shapes[i];
                if (sh->n_pods == 0)
                        continue;
                if (sh->headroom ? o->no_headroom : o->skip_pending)
                        continue;
                Batch b = { .shape = i, .pods = sh->pods, .n = sh->n_pods, .priority = sh->pod->priority };
                q = heap_push(s, &b);
                if (q < 0)
                        goto out;
        }
        q = solver_budget_prepare(s);
        if (q < 0)
                goto out;
        bool stopped = false;
        s->n_retry = 0;
        s->retry_final = false;
        s->retrying = false;
        uint64_t placed_at_round = s->n_placed;
        for (unsigned round = 0;;) {
                if (s->n_heap == 0) {
                        /* pods that failed on topology go round again while others get placed;
                         * a last round without progress (or past the bound) decides them */
                        if (s->n_retry == 0 || s->retry_final || stopped)
                                break;
                        s->retry_final = s->n_placed == placed_at_round || ++round >= RETRY_ROUNDS;
                        s->retrying = true;
                        placed_at_round = s->n_placed;
                        for (size_t i = 0; i < s->n_retry; i++) {
                                q = heap_push(s, &s->retry[i]);
                                if (q < 0)
                                        goto out;
                        }
                        s->n_retry = 0;
                        continue;
                }
                Batch b = heap_pop(s);
                if (solver_out_of_time(s)) {
                        defer_rest(s, &b, 0);
                        continue;
                }
                q = place_batch(s, &b);
                if (q < 0)
                        goto out;
                if (q > 0) {
                        q = 0;
                        stopped = true;
                        break;
                }
        }
        if (!stopped && !s->out_of_time)
                q = solver_repair(s);
        if (q >= 0 && !stopped && !s->out_of_time)
                q = solver_improve(s);
out:
        solver_budget_done(s);
        free(rq);
        return q;
}
