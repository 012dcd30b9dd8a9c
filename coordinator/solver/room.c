/* SPDX-License-Identifier: Apache-2.0 */
/* A node's room for a variant: node-local checks (hostname constraints, ports, capacity,
 * budgets), how many pods fit, and committing or undoing pods on it. */

#include "macro.h"
#include "solver-internal.h"

/* ---- node-local checks ---------------------------------------------------------------------- */

/* How many more pods of the variant the node may take by hostname-keyed constraints. */
int64_t solver_host_cap(const Solver *s, const Variant *v, uint32_t ni) {
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

bool solver_ports_conflict(const Node *n, const SolverPod *p) {
        for (size_t i = 0; i < p->n_host_ports; i++)
                for (uint32_t j = 0; j < n->n_ports; j++)
                        if (n->ports[j].port == p->host_ports[i].port &&
                            n->ports[j].protocol == p->host_ports[i].protocol)
                                return true;
        return false;
}

void solver_node_recompute_cap(Solver *s, Node *n) {
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
void solver_node_update_slack(Solver *s, Node *n) {
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
        solver_node_recompute_cap(s, n);
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
                m = MIN(m, solver_host_cap(s, v, ni));
                if (m <= 0)
                        return 0;
        }
        if (sh->pod->n_host_ports) {
                if (solver_ports_conflict(n, sh->pod))
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
        solver_node_recompute_cap(s, n);
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

void solver_limits_reserve(Solver *s, Node *n, bool release_only) {
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
                        solver_limits_reserve(s, n, true);
        }
        if (n->kind == NODE_NEW)
                for (int r = 0; r < R_MAX; r++)
                        n->slack[r] -= m * sh->req.v[r];
        for (int r = 0; r < R_MAX; r++)
                if (sh->req.v[r]) {
                        q = solver_set_used(s, ni, r, n->used[r] + m * sh->req.v[r]);
                        if (q < 0)
                                return q;
                }
        q = solver_set_npods(s, ni, n->n_pods + (uint32_t) m);
        if (q < 0)
                return q;
        if (n->kind == NODE_NEW) {
                bool neg = false;
                for (uint8_t i = 0; i < sh->n_active; i++)
                        neg |= n->slack[sh->active[i]] < 0;
                if (neg)
                        solver_node_update_slack(s, n);
        }
        if (sh->pod->n_host_ports) {
                if (n->kind == NODE_EXISTING) {
                        q = solver_undo_push(s, U_NPORTS, ni, 0, n->n_ports);
                        if (q < 0)
                                return q;
                }
                for (size_t i = 0; i < sh->pod->n_host_ports; i++) {
                        q = solver_port_add(n, &sh->pod->host_ports[i]);
                        if (q < 0)
                                return q;
                }
        }
        q = solver_account(s, sh, v, ni, m, false);
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
        int q = solver_account(s, sh, v, ni, -1, false);
        if (q < 0)
                return q;
        /* lighter: every type its pods allow that holds what is left */
        uint64_t *tmp = s->scratch + 3 * s->W;
        solver_fit_set(s, s->pools[n->pool].fit, n->used, tmp);
        bs_and_any(n->types, n->base, tmp, s->W);
        solver_node_recompute_cap(s, n);
        solver_node_update_slack(s, n);
        return 0;
}

uint32_t solver_place_cheapest_type(const Solver *s, const Node *n) {
        const Pool *p = &s->pools[n->pool];
        for (uint32_t i = 0; i < p->n_price_order; i++)
                if (bs_test(n->types, p->price_order[i]))
                        return p->price_order[i];
        return NONE32;
}
