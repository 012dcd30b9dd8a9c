/* SPDX-License-Identifier: Apache-2.0 */
/* Opening new nodes for a variant: pool choice, NodePool limits, squeezing a pool's types,
 * and discarding a node that could not be used. */

#include "macro.h"
#include "solver-internal.h"

/* ---- opening nodes -------------------------------------------------------------------------- */

void solver_fail(Solver *s, SolverReason r, const char *msg) {
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
                        solver_fail(s, SOLVER_REASON_TOPOLOGY,
                             g->total == 0 ? solver_arena_printf(s->rarena, "no pod matches its required pod affinity (%s)", g->description)
                                           : solver_arena_printf(s->rarena, "the nodes of the pods it has affinity to (%s) have no room", g->description));
                        return false;
                }
        }
        return true;
}


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
                solver_limits_reserve(s, n, true);
                solver_node_recompute_cap(s, n);
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
        solver_node_recompute_cap(s, n);
        solver_node_update_slack(s, n);
        s->n_nodes++;
        s->new_nodes++;
        *ret = ni;
        return 0;
}

int solver_open_node(Solver *s, Variant *v, int z, uint32_t *ret) {
        if (!v->new_nodes_ok)
                return 0;
        if (s->new_nodes >= s->opts->max_new_nodes) {
                solver_fail(s, SOLVER_REASON_MAX_NEW_NODES, "no new node may be launched");
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
                        solver_fail(s, SOLVER_REASON_LIMITS,
                             solver_arena_printf(s->rarena, "NodePool %s is static: it keeps %u node(s) and launches none "
                                                 "for pods", p->np->name, p->np->replicas));
                        continue;
                }
                if (p->nodes_left_run <= 0) {
                        solver_fail(s, SOLVER_REASON_LIMITS,
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
                                solver_fail(s, SOLVER_REASON_LIMITS,
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
                solver_node_recompute_cap(s, n);
                if (p->has_limits)
                        solver_limits_reserve(s, n, false);
                if (p->nodes_left_run != INT64_MAX)
                        s->pools[pi].nodes_left_run--;
                solver_zero_host_min(v);
                *ret = ni;
                return 1;
        }
        return 0;
}

/* Why a node opened for the variant could not take it after all. */
void solver_fresh_node_failed(Solver *s, const Variant *v, uint32_t ni) {
        const SolverPod *p = s->shapes[v->shape].pod;
        if (p->n_host_ports && solver_ports_conflict(&s->nodes[ni], p))
                solver_fail(s, SOLVER_REASON_HOST_PORTS,
                     solver_arena_printf(s->rarena, "host port %u is taken by a DaemonSet on every new node",
                                         p->host_ports[0].port));
        else
                solver_fail(s, SOLVER_REASON_TOPOLOGY, "a new node could not take it");
}

void solver_discard_last_node(Solver *s, uint32_t ni) {
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
        solver_node_recompute_cap(s, n);
}

void solver_place_discard_node(Solver *s, uint32_t ni) {
        solver_discard_last_node(s, ni);
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
