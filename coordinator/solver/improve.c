/* SPDX-License-Identifier: Apache-2.0 */
/* Improvement: a bounded local search over the planned nodes once every pod has a place.
 *
 * Placement fills one node at a time, shape after shape (first-fit decreasing), so a node often
 * ends up full in one resource and half idle in the other, or holding 60 % of a type twice the
 * size it needs. Two moves, each kept only when the plan's cost drops:
 *
 * - empty: a planned node gives every pod to other planned nodes of its NodePool (weights stay
 *   honoured) that have room for it in what they already cost (the least used nodes are tried
 *   first); the node is not launched.
 * - split: a planned node becomes a cheaper type, and the pods that no longer fit go to a fresh
 *   node beside it (same pool, zone and offerings); kept when the two cost less than the one
 *   by more than SPLIT_MARGIN. Within an EC2 family the price per vCPU is flat, so this trims
 *   the rounding up to the next size: a 16-vCPU node holding 10 vCPU of pods becomes 8 + 2 or
 *   8 + 4 vCPU.
 *
 * Every move is checked like any placement (requirements, taints, resources, hostname and zone
 * rules; a pod whose variant pins a zone stays in its node's zone) or undone. Pods with host
 * ports or WaitForFirstConsumer claims, nodes holding headroom, pools with limits or minValues
 * stay as they are, and nothing is split when new nodes are capped (max_new_nodes, as in a
 * consolidation's replacement) or when the caller asked for few big nodes (target_nodes).
 * Node count breaks ties the way the budgets do: a split must save more than SPLIT_MARGIN.
 * Bounded: at most IMPROVE_WORK receiving-node checks per run, skipped beyond
 * IMPROVE_MAX_NODES planned nodes, and the run's time budget stops it. Deterministic: nodes in
 * a fixed order, pods in index order. */

#include "macro.h"
#include "solver-internal.h"

#define IMPROVE_MAX_NODES 4096 /* beyond this many planned nodes the pass is skipped */
#define IMPROVE_WORK 400000    /* receiving-node checks per run, at most */
#define SPLIT_MARGIN 0.02      /* a split saves more than 2 % of the node's price */
#define SPLIT_TRIES 4          /* cheaper types tried per node */

static double node_price(const Solver *s, const Node *n) {
        return solver_node_type_price(s, n, solver_place_cheapest_type(s, n));
}

static bool node_eligible(const Solver *s, const Node *n) {
        const Pool *p = &s->pools[n->pool];
        return n->kind == NODE_NEW && n->n_pods > 0 && n->headroom == 0 && !p->has_limits && !p->has_min_values;
}

/* Every pod planned on node a that is still there, or false when one may not move. */
static int pods_of(const Solver *s, const PodOn *on, uint32_t a, uint32_t *buf, size_t cap, size_t *ret_n) {
        size_t k = 0;
        for (uint32_t i = on->start[a]; i < on->start[a + 1]; i++) {
                uint32_t pi = on->pods[i];
                if (s->decisions[pi].kind != SOLVER_DECISION_LAUNCH || s->decisions[pi].target != a)
                        continue;
                if (!solver_pod_movable(s, pi) || k == cap)
                        return 0;
                buf[k++] = pi;
        }
        *ret_n = k;
        return 1;
}

static int cmp_pod_size(const void *x, const void *y, void *userdata) {
        const Solver *s = userdata;
        uint32_t u = *(const uint32_t *) x, v = *(const uint32_t *) y;
        const int64_t *a = s->shapes[s->pod_shape[u]].size_key, *b = s->shapes[s->pod_shape[v]].size_key;
        for (int i = 0; i < 2; i++)
                if (a[i] != b[i])
                        return a[i] < b[i] ? -1 : 1;
        return u < v ? -1 : u > v;
}

static int undo_moves(Solver *s, const uint32_t *pods, const uint32_t *to, size_t n, uint32_t back) {
        while (n-- > 0) {
                int q = solver_repair_move_back(s, pods[n], to[n], back);
                if (q < 0)
                        return q;
        }
        return 0;
}

/* Gives every pod of node a to other planned nodes within what they cost: 1 done, 0 undone. */
static int try_empty(Solver *s, PodOn *on, uint32_t a, uint32_t *pods, uint32_t *to, size_t cap) {
        size_t n;
        if (!pods_of(s, on, a, pods, cap, &n) || n == 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                int q = solver_repair_move_pod(s, on, pods[i], a, true, &to[i]);
                if (q < 0)
                        return q;
                if (q == 0) {
                        q = undo_moves(s, pods, to, i, a);
                        return q < 0 ? q : 0;
                }
        }
        return 1;
}

static bool over(const Node *n, const int64_t *al) {
        for (int r = 0; r < R_MAX; r++)
                if (n->used[r] > al[r])
                        return true;
        return false;
}

/* Makes node a fit type t by moving pods to a fresh node beside it; keeps it when the two cost
 * less than `price` by the margin. 1 kept, 0 undone. */
static int try_split_to(Solver *s, PodOn *on, uint32_t a, uint32_t t, double price, bool smallest_first,
                        uint32_t *pods, uint32_t *to, size_t cap) {
        size_t n;
        if (!pods_of(s, on, a, pods, cap, &n) || n < 2)
                return 0;
        /* in the snapshot's order, or the smallest first: the node
         * then sheds no more than it must */
        if (smallest_first)
                qsort_r(pods, n, sizeof(uint32_t), cmp_pod_size, s);
        uint32_t b;
        int q = solver_place_open_beside(s, a, &b);
        if (q <= 0)
                return q;
        const int64_t *al = s->pools[s->nodes[a].pool].fit->alloc + (size_t) t * R_MAX;
        size_t moved = 0;
        for (size_t i = 0; i < n && over(&s->nodes[a], al) && on->work < IMPROVE_WORK; i++) {
                uint32_t pi = pods[i];
                const SolverResources *rq = &s->shapes[s->pod_shape[pi]].req;
                bool helps = false;
                for (int r = 0; r < R_MAX; r++)
                        helps |= r != SOLVER_RES_PODS && rq->v[r] > 0 && s->nodes[a].used[r] > al[r];
                if (!helps)
                        continue;
                Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
                if (!v)
                        return -ENOMEM;
                int z = v->zone_mode ? s->nodes[a].zone : NO_ZONE;
                if (v->zone_mode && z < 0)
                        continue;
                /* room other nodes already pay for first, then the fresh node */
                uint32_t dest;
                q = solver_repair_move_pod(s, on, pi, a, true, &dest);
                if (q < 0)
                        return q;
                if (q > 0) {
                        pods[moved] = pi;
                        to[moved++] = dest;
                        continue;
                }
                on->work++;
                q = solver_place_uncommit(s, v, a);
                if (q < 0)
                        return q;
                if (solver_place_fit_count(s, v, b, 1, z) > 0) {
                        q = solver_place_commit(s, v, b, &pi, 1, z);
                        pods[moved] = pi;
                        to[moved++] = b;
                } else
                        q = solver_place_commit(s, v, a, &pi, 1, z);
                if (q < 0)
                        return q;
        }
        if (!over(&s->nodes[a], al) &&
            node_price(s, &s->nodes[a]) + (s->nodes[b].n_pods ? node_price(s, &s->nodes[b]) : 0) <
                    price * (1 - SPLIT_MARGIN)) {
                solver_place_discard_node(s, b); /* when the others took it all */
                return 1;
        }
        q = undo_moves(s, pods, to, moved, a);
        if (q < 0)
                return q;
        solver_place_discard_node(s, b);
        return 0;
}

typedef struct SplitCand {
        double est;
        uint32_t type;
} SplitCand;

static int cmp_cand(const void *x, const void *y) {
        const SplitCand *u = x, *v = y;
        if (u->est != v->est)
                return u->est < v->est ? -1 : 1;
        return u->type < v->type ? -1 : u->type > v->type;
}

/* The price of the cheapest type offered where the node is that holds demand d, or 0: an
 * estimate of what a node for some of its pods costs (their own requirements are checked when
 * they move). */
static double cheapest_for(Solver *s, const Node *n, const uint64_t *offered, const int64_t *d) {
        const Pool *p = &s->pools[n->pool];
        uint64_t *set = s->scratch + 6 * s->W;
        solver_fit_set(s, p->fit, d, set);
        if (!bs_and_any(set, set, offered, s->W))
                return 0;
        for (uint32_t i = 0; i < p->n_price_order; i++)
                if (bs_test(set, p->price_order[i]))
                        return solver_node_type_price(s, n, p->price_order[i]);
        return 0;
}

static int try_split(Solver *s, PodOn *on, uint32_t a, uint32_t *pods, uint32_t *to, size_t cap, SplitCand *cand) {
        const Node *n = &s->nodes[a];
        const Pool *p = &s->pools[n->pool];
        double price = node_price(s, n), limit = price * (1 - SPLIT_MARGIN);
        size_t nc = 0;
        uint64_t *offered = s->scratch + 5 * s->W;
        solver_offer_set(s, n->slots & (n->zone >= 0 ? slots_of_zone(n->zone) : ~(uint64_t) 0), offered);
        bs_and(offered, p->types, s->W);
        /* every cheaper type the node could become, by what it and a node for the rest would cost */
        for (uint32_t i = 0; i < p->n_price_order && on->work < IMPROVE_WORK; i++) {
                uint32_t t = p->price_order[i];
                double pt = solver_node_type_price(s, n, t);
                if (pt >= limit)
                        break;
                if (pt <= 0 || !bs_test(n->base, t))
                        continue;
                on->work++;
                const int64_t *al = p->fit->alloc + (size_t) t * R_MAX;
                int64_t rest[R_MAX];
                bool room = true;
                for (int r = 0; r < R_MAX; r++) {
                        room &= al[r] >= p->ds.v[r];
                        rest[r] = MAX(n->used[r] - al[r], (int64_t) 0) + p->ds.v[r];
                }
                rest[SOLVER_RES_PODS] = MAX(rest[SOLVER_RES_PODS], p->ds.v[SOLVER_RES_PODS] + 1);
                if (!room)
                        continue;
                double pr = cheapest_for(s, n, offered, rest);
                if (pr > 0 && pt + pr < limit)
                        cand[nc++] = (SplitCand) { pt + pr, t };
        }
        if (nc > 1)
                qsort(cand, nc, sizeof(SplitCand), cmp_cand);
        for (size_t i = 0; i < 2 * nc && i < 2 * SPLIT_TRIES && on->work < IMPROVE_WORK; i++) {
                int q = try_split_to(s, on, a, cand[i / 2].type, price, i % 2, pods, to, cap);
                if (q != 0)
                        return q;
        }
        return 0;
}

typedef struct ByUse {
        double use;
        uint32_t node;
} ByUse;

static int cmp_use(const void *x, const void *y) {
        const ByUse *u = x, *v = y;
        if (u->use != v->use)
                return u->use < v->use ? -1 : 1;
        return u->node < v->node ? -1 : u->node > v->node;
}

/* The share of its cheapest type's cpu and memory the node uses, the larger of the two. */
static double node_use(const Solver *s, const Node *n) {
        uint32_t t = solver_place_cheapest_type(s, n);
        if (t == NONE32)
                return 1;
        const int64_t *al = s->pools[n->pool].fit->alloc + (size_t) t * R_MAX;
        double u = 0;
        for (int r = SOLVER_RES_CPU; r <= SOLVER_RES_MEMORY; r++)
                if (al[r] > 0)
                        u = MAX(u, (double) n->used[r] / (double) al[r]);
        return u;
}

int solver_improve(Solver *s) {
        uint32_t first = s->n_existing, nn = s->n_nodes - s->n_existing;
        if (nn == 0 || nn > IMPROVE_MAX_NODES)
                return 0;
        PodOn on;
        int q = solver_pod_on_build(s, &on);
        if (q < 0)
                return q;
        size_t cap = 0;
        for (uint32_t a = first; a < on.n_nodes; a++)
                cap = MAX(cap, (size_t) (on.start[a + 1] - on.start[a]));
        _cleanup_free_ uint32_t *pods = malloc((cap + 1) * sizeof(uint32_t));
        _cleanup_free_ uint32_t *to = malloc((cap + 1) * sizeof(uint32_t));
        _cleanup_free_ ByUse *order = malloc((size_t) nn * sizeof(ByUse));
        _cleanup_free_ SplitCand *cand = malloc(((size_t) s->T + 1) * sizeof(SplitCand));
        if (!pods || !to || !order || !cand) {
                q = -ENOMEM;
                goto out;
        }
        /* empty the least used nodes first */
        for (uint32_t i = 0; i < nn; i++)
                order[i] = (ByUse) { node_use(s, &s->nodes[first + i]), first + i };
        qsort(order, nn, sizeof(ByUse), cmp_use);
        for (uint32_t i = 0; i < nn && on.work < IMPROVE_WORK && !solver_out_of_time(s); i++) {
                uint32_t a = order[i].node;
                if (!node_eligible(s, &s->nodes[a]))
                        continue;
                q = try_empty(s, &on, a, pods, to, cap);
                if (q < 0)
                        goto out;
        }
        bool may_split = s->opts->target_nodes == 0;
        for (uint32_t a = first; may_split && a < on.n_nodes && on.work < IMPROVE_WORK && !solver_out_of_time(s); a++) {
                if (!node_eligible(s, &s->nodes[a]))
                        continue;
                q = try_split(s, &on, a, pods, to, cap, cand);
                if (q < 0)
                        goto out;
        }
        q = 0;
out:
        solver_pod_on_done(&on);
        return q;
}
