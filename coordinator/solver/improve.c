/* SPDX-License-Identifier: Apache-2.0 */
/* Improvement: a bounded local search over the planned nodes once every pod has a place.
 *
 * Placement fills one node at a time, shape after shape (first-fit decreasing), so a node often
 * ends up full in one resource and half idle in the other, or holding 60 % of a type twice the
 * size it needs. The moves below (empty, rebalance, absorb, split, regroup), each kept only when
 * the plan's cost drops, run in rounds (at most IMPROVE_ROUNDS) while a round lowers it:
 *
 * - empty: a planned node gives every pod to other planned nodes of its NodePool (weights stay
 *   honoured) that have room for it in what they already cost (the least used nodes are tried
 *   first); the node is not launched.
 * - split: a planned node becomes a cheaper type, and the pods that no longer fit go to a fresh
 *   node beside it (same pool, zone and offerings); kept when the two cost less than the one
 *   by more than SPLIT_MARGIN. Within an EC2 family the price per vCPU is flat, so this trims
 *   the rounding up to the next size: a 16-vCPU node holding 10 vCPU of pods becomes 8 + 2 or
 *   8 + 4 vCPU.
 * - regroup: like rebalance (below), but each emptied node of the group first takes the type
 *   that buys what is left of the group's pods at the least cost (a c6g where the mix is
 *   cpu-heavy, an m6g where it is even), the last one whatever holds the rest: first-fit's
 *   16xlarge of cpu-heavy pods beside one of memory-heavy pods becomes two nodes of the type
 *   their mix suits. A wide regroup does the same from the few least used nodes with up to
 *   REGROUP_WIDE nodes of their pool and zone at once: where first-fit left memory-heavy pods
 *   on r6g at 40 % cpu and cpu-heavy ones on c6g at 25 % memory across dozens of nodes, no
 *   group of four holds enough of both to mix them into m6g.
 *
 * Every move is checked like any placement (requirements, taints, resources, hostname and zone
 * rules; a pod whose variant pins a zone stays in its node's zone) or undone. Pods with host
 * ports or WaitForFirstConsumer claims, nodes holding headroom, pools with limits or minValues
 * stay as they are, and nothing is split when new nodes are capped (max_new_nodes, as in a
 * consolidation's replacement) or when the caller asked for few big nodes (target_nodes).
 * Node count breaks ties the way the budgets do: a split must save more than SPLIT_MARGIN.
 * Bounded: at most IMPROVE_WORK receiving-node checks and IMPROVE_SCANS pods looked at while
 * refilling groups (a wide regroup's refill is quadratic in its pods) per run, skipped beyond
 * IMPROVE_MAX_NODES planned nodes, and the run's time budget stops it. Deterministic: nodes in
 * a fixed order, pods in index order. */

#include <math.h>

#include "macro.h"
#include "solver-internal.h"

#define IMPROVE_MAX_NODES 4096 /* beyond this many planned nodes the pass is skipped */
#define IMPROVE_WORK 200000    /* node checks per run, at most */
#define IMPROVE_SCANS 20000000 /* pods looked at to refill rebalanced and regrouped nodes, per run */
#define SPLIT_MARGIN 0.02      /* a split saves more than 2 % of the node's price */
#define SPLIT_TRIES 4          /* cheaper types tried per node */
#define REBALANCE_TRIES 64     /* nodes (the least used) whose group is rebalanced, at most */
#define IMPROVE_ROUNDS 4       /* rounds, while one lowers the plan's cost */

static double node_price(const Solver *s, const Node *n) {
        return solver_node_type_price(s, n, solver_place_cheapest_type(s, n));
}

static bool node_eligible(const Solver *s, const Node *n) {
        const Pool *p = &s->pools[n->pool];
        return n->kind == NODE_NEW && n->n_pods > 0 && n->headroom == 0 && !p->has_limits && !p->has_min_values;
}

/* A pod counted by capacity-type rules stays on the capacity type it was counted on. */
static bool ct_bound(Solver *s, uint32_t pi) {
        Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
        if (!v || v->ct_mode)
                return true;
        const Shape *sh = &s->shapes[v->shape];
        for (uint32_t m = 0; m < sh->n_matches; m++)
                if (s->groups[sh->matches[m]].key == TOPO_CT)
                        return true;
        return false;
}

/* Every pod planned on node a that is still there, or false when one may not move. */
static int pods_of(Solver *s, const PodOn *on, uint32_t a, uint32_t *buf, size_t cap, size_t *ret_n) {
        size_t k = 0;
        for (uint32_t i = on->start[a]; i < on->start[a + 1]; i++) {
                uint32_t pi = on->pods[i];
                if (s->decisions[pi].kind != SOLVER_DECISION_LAUNCH || s->decisions[pi].target != a)
                        continue;
                if (!solver_pod_movable(s, pi) || ct_bound(s, pi) || k == cap)
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

/* What a commit may narrow on a planned node, to put back exactly when a trial is undone. */
typedef struct Saved {
        uint64_t slots;
        int32_t zone;
        const VSetList *custom;
        uint64_t *types, *base; /* W words each */
} Saved;

#define REBALANCE_NODES 3 /* a rebalanced group, at most */
#define REGROUP_NODES 4   /* a regrouped group, at most */
#define REGROUP_WIDE 128   /* a wide regroup: the least used nodes' whole pool and zone, at most */
#define REGROUP_WIDE_TRIES 4

typedef struct SplitCand {
        double est;
        uint32_t type;
} SplitCand;

/* The pass's state and scratch. */
typedef struct Improve {
        PodOn on;
        uint32_t *pods, *to;    /* [cap]: one node's pods, where each went */
        size_t cap;
        uint32_t *group, *orig; /* [gcap]: a rebalanced group's pods, the node each was on */
        size_t gcap;
        SplitCand *cand;        /* [T] */
        double *slack;          /* [2 x planned nodes]: cpu and memory room left in what each costs */
        Saved sv, gsv[REGROUP_WIDE];
        uint32_t gnode[REGROUP_WIDE];   /* a group's nodes */
        double gscore[REGROUP_WIDE], gprice[REGROUP_WIDE];
        const int64_t *gal[REGROUP_WIDE];
        size_t scans;           /* pods looked at while refilling groups */
} Improve;

static void node_save(const Solver *s, const Node *n, Saved *sv) {
        sv->slots = n->slots;
        sv->zone = n->zone;
        sv->custom = n->custom;
        bs_copy(sv->types, n->types, s->W);
        bs_copy(sv->base, n->base, s->W);
}

static void node_restore(const Solver *s, Node *n, const Saved *sv) {
        n->slots = sv->slots;
        n->zone = sv->zone;
        n->custom = sv->custom;
        bs_copy(n->types, sv->types, s->W);
        bs_copy(n->base, sv->base, s->W);
}

/* Whether node n, after taking a pod, may still be every type it could be before that holds what
 * it now holds: a pod's own size drops from its base the types too small for it alone, which
 * narrows nothing the node could still be. */
static bool same_base(Solver *s, const Node *n, const Saved *sv) {
        if (bs_eq(n->base, sv->base, s->W))
                return true;
        uint64_t *fit = s->scratch + 6 * s->W, *was = s->scratch + 7 * s->W;
        solver_fit_set(s, s->pools[n->pool].fit, n->used, fit);
        bs_copy(was, sv->base, s->W);
        bs_and(was, fit, s->W);
        bs_and(fit, n->base, s->W);
        return bs_eq(was, fit, s->W);
}

/* Commits pod pi onto planned node b only if that narrows nothing on b (offerings, zone, labels,
 * the types its pods allow) and b's price stays at most max_price; 1 done, 0 not (b as it was). */
static int trial_commit(Solver *s, Variant *v, uint32_t b, uint32_t pi, int z, double max_price, Saved *sv) {
        node_save(s, &s->nodes[b], sv);
        int q = solver_place_commit(s, v, b, &pi, 1, z);
        if (q < 0)
                return q;
        const Node *n = &s->nodes[b];
        if (n->slots == sv->slots && n->zone == sv->zone && n->custom == sv->custom && same_base(s, n, sv) &&
            node_price(s, n) <= max_price * (1 + 1e-9))
                return 1;
        q = solver_place_uncommit(s, v, b);
        if (q < 0)
                return q;
        node_restore(s, &s->nodes[b], sv);
        return 0;
}

/* Moves pod pi off node a onto another planned node of a's pool with room for it in what that
 * node already costs: 1 moved (*ret_to), 0 nowhere (pi stays on a). */
static int move_to_room(Solver *s, Improve *c, uint32_t pi, uint32_t a, uint32_t *ret_to) {
        PodOn *on = &c->on;
        Variant *v;
        int z, q = solver_pod_variant_on(s, pi, a, &v, &z);
        if (q <= 0)
                return q;
        const Shape *sh = &s->shapes[v->shape];
        /* off a while looking: a hostname rule on a may be what keeps b from taking it */
        q = solver_place_uncommit(s, v, a);
        if (q < 0)
                return q;
        for (uint32_t b = s->n_existing; b < s->n_nodes && on->work < IMPROVE_WORK; b++) {
                const Node *n = &s->nodes[b];
                on->work++;
                if (b == a || n->n_pods == 0 || n->pool != s->nodes[a].pool || s->pools[n->pool].has_limits ||
                    (v->zone_mode && n->zone != z) || solver_place_free_room(s, sh, n) < 1 ||
                    solver_place_fit_count(s, v, b, 1, z) <= 0)
                        continue;
                q = trial_commit(s, v, b, pi, z, node_price(s, n), &c->sv);
                if (q < 0)
                        return q;
                if (q > 0) {
                        *ret_to = b;
                        return 1;
                }
        }
        q = solver_place_commit(s, v, a, &pi, 1, z);
        return q < 0 ? q : 0;
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
static int try_empty(Solver *s, Improve *c, uint32_t a) {
        uint32_t *pods = c->pods, *to = c->to;
        size_t n;
        if (!pods_of(s, &c->on, a, pods, c->cap, &n) || n == 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                int q = move_to_room(s, c, pods[i], a, &to[i]);
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
static int try_split_to(Solver *s, Improve *c, uint32_t a, uint32_t t, double price, bool smallest_first) {
        PodOn *on = &c->on;
        uint32_t *pods = c->pods, *to = c->to;
        size_t n;
        if (!pods_of(s, on, a, pods, c->cap, &n) || n < 2)
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
                Variant *v;
                int z;
                if ((q = solver_pod_variant_on(s, pi, a, &v, &z)) < 0)
                        return q;
                if (q == 0)
                        continue;
                /* room other nodes already pay for first, then the fresh node */
                uint32_t dest;
                q = move_to_room(s, c, pi, a, &dest);
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

static int try_split(Solver *s, Improve *c, uint32_t a) {
        PodOn *on = &c->on;
        SplitCand *cand = c->cand;
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
                int q = try_split_to(s, c, a, cand[i / 2].type, price, i % 2);
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

/* Rebalance: node d and up to two nodes of its pool and zone with the most room where d is full
 * (idle memory beside a memory-bound d, idle cpu beside a cpu-bound one) give up their pods, which are placed again node by node (the dearest first), each
 * time the pod that keeps the node's cpu and memory use most even, within what the node cost
 * before; kept when the nodes then cost less (d, or another, ends empty or smaller). First-fit
 * puts pods of one shape together, leaving memory-bound nodes with idle cpu beside cpu-bound
 * ones with idle memory; this mixes them. With retype (regroup), up to three partners, and each
 * node's target is target_type()'s instead of its own type and price. 1 kept, 0 undone. */
static void slack_share(const Solver *s, const Node *n, double *ret) {
        uint32_t t = solver_place_cheapest_type(s, n);
        ret[0] = ret[1] = 0;
        if (t == NONE32)
                return;
        const int64_t *al = s->pools[n->pool].fit->alloc + (size_t) t * R_MAX;
        for (int r = SOLVER_RES_CPU; r <= SOLVER_RES_MEMORY; r++)
                if (al[r] > 0)
                        ret[r - SOLVER_RES_CPU] = (double) MAX(al[r] - n->used[r], (int64_t) 0) / (double) al[r];
}

static int recommit(Solver *s, uint32_t pi, uint32_t from, uint32_t to) {
        Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
        if (!v)
                return -ENOMEM;
        int z = v->zone_mode ? s->nodes[to].zone : NO_ZONE;
        int q = from == NONE32 ? 0 : solver_place_uncommit(s, v, from);
        return q < 0 ? q : solver_place_commit(s, v, to, &pi, 1, z);
}

/* For an emptied node of a regroup: among the types it may be, the one that buys what pods[0..n)
 * need at the least cost, counting a fraction of a node as a fraction of its price and at least
 * one node; NONE32 when none holds one of them. */
static uint32_t target_type(const Solver *s, const Node *nd, const uint32_t *pods, size_t n) {
        const Pool *p = &s->pools[nd->pool];
        int64_t d[R_MAX] = {};
        for (size_t i = 0; i < n; i++)
                for (int r = 0; r < R_MAX; r++)
                        d[r] += s->shapes[s->pod_shape[pods[i]]].req.v[r];
        d[SOLVER_RES_PODS] = MAX(d[SOLVER_RES_PODS], (int64_t) n);
        uint32_t best = NONE32;
        double best_cost = INFINITY;
        BS_FOREACH(t, nd->types, s->W) {
                const int64_t *al = p->fit->alloc + t * R_MAX;
                double pt = solver_node_type_price(s, nd, (uint32_t) t), cover = 1;
                bool ok = pt > 0;
                for (int r = 0; r < R_MAX && ok; r++) {
                        if (d[r] == 0)
                                continue;
                        int64_t room = al[r] - p->ds.v[r];
                        ok = room > 0;
                        if (ok)
                                cover = MAX(cover, (double) d[r] / (double) room);
                }
                if (ok && pt * cover < best_cost * (1 - 1e-9)) {
                        best = (uint32_t) t;
                        best_cost = pt * cover;
                }
        }
        return best;
}

static int try_rebalance(Solver *s, Improve *c, uint32_t d, bool retype, uint32_t kmax) {
        PodOn *on = &c->on;
        uint32_t *pods = c->group, *orig = c->orig;
        size_t cap = c->gcap;
        const Node *nd = &s->nodes[d];
        uint32_t *g = c->gnode, k = 1;
        double *gs = c->gscore;
        g[0] = d, gs[0] = 0;
        for (uint32_t b = s->n_existing; b < on->n_nodes && on->work < IMPROVE_WORK; b++) {
                const Node *n = &s->nodes[b];
                on->work++;
                if (b == d || n->pool != nd->pool || n->zone != nd->zone || !node_eligible(s, n))
                        continue;
                /* room where d is full: what d gives up has somewhere to go */
                const double *sb = c->slack + 2 * (b - s->n_existing), *sd = c->slack + 2 * (d - s->n_existing);
                double x = sb[0] * (1 - sd[0]) + sb[1] * (1 - sd[1]);
                uint32_t at = k;
                while (at > 1 && x > gs[at - 1])
                        at--;
                if (at >= kmax || x <= 0)
                        continue;
                for (uint32_t j = MIN(k, kmax - 1); j > at; j--)
                        g[j] = g[j - 1], gs[j] = gs[j - 1];
                g[at] = b, gs[at] = x;
                k = MIN(k + 1, kmax);
        }
        if (k < 2)
                return 0;
        /* the pods, each with the node it was on */
        size_t n = 0;
        double before = 0, *price = c->gprice;
        const int64_t **al0 = c->gal;
        for (uint32_t j = 0; j < k; j++) {
                size_t m;
                const Node *x = &s->nodes[g[j]];
                if (!pods_of(s, on, g[j], pods + n, cap - n, &m))
                        return 0;
                for (size_t i = n; i < n + m; i++)
                        orig[i] = g[j];
                n += m;
                price[j] = node_price(s, x);
                before += price[j];
                node_save(s, x, &c->gsv[j]);
                al0[j] = s->pools[x->pool].fit->alloc + (size_t) solver_place_cheapest_type(s, x) * R_MAX;
        }
        int q;
        for (size_t i = 0; i < n; i++)
                if ((q = solver_place_uncommit(s, solver_variant(s, s->pod_shape[pods[i]], s->decisions[pods[i]].relaxed),
                                               orig[i])) < 0)
                        return q;
        /* placed again: the dearest node first; pods[0..placed) are placed */
        size_t placed = 0;
        for (uint32_t round = 0; round < k && placed < n; round++) {
                uint32_t j = 0;
                for (uint32_t x = 1; x < k; x++)
                        if (price[x] > price[j] || (price[x] == price[j] && g[x] < g[j]))
                                j = x;
                double pj = price[j];
                price[j] = -1; /* done after this round */
                uint32_t b = g[j];
                if (retype) {
                        /* the type that serves what is left best, the last node whatever holds it */
                        uint32_t t = target_type(s, &s->nodes[b], pods + placed, n - placed);
                        if (t == NONE32)
                                break;
                        al0[j] = s->pools[s->nodes[b].pool].fit->alloc + (size_t) t * R_MAX;
                        pj = round + 1 == k ? INFINITY : solver_node_type_price(s, &s->nodes[b], t);
                }
                for (;;) {
                        size_t best = SIZE_MAX;
                        double best_score = INFINITY;
                        for (size_t i = placed; i < n && on->work < IMPROVE_WORK && c->scans < IMPROVE_SCANS; i++) {
                                c->scans++;
                                if (i > placed && s->pod_shape[pods[i]] == s->pod_shape[pods[i - 1]] &&
                                    s->decisions[pods[i]].relaxed == s->decisions[pods[i - 1]].relaxed)
                                        continue; /* one of each shape is enough to judge */
                                const SolverResources *rq = &s->shapes[s->pod_shape[pods[i]]].req;
                                double score = 0;
                                for (int r = SOLVER_RES_CPU; r <= SOLVER_RES_MEMORY; r++)
                                        if (al0[j][r] > 0)
                                                score = MAX(score, (double) (s->nodes[b].used[r] + rq->v[r]) / (double) al0[j][r]);
                                if (score >= best_score)
                                        continue;
                                Variant *v = solver_variant(s, s->pod_shape[pods[i]], s->decisions[pods[i]].relaxed);
                                if (!v)
                                        return -ENOMEM;
                                on->work++;
                                if (solver_place_fit_count(s, v, b, 1, v->zone_mode ? s->nodes[b].zone : NO_ZONE) <= 0)
                                        continue;
                                best = i, best_score = score;
                        }
                        if (best == SIZE_MAX)
                                break;
                        uint32_t pi = pods[best];
                        node_save(s, &s->nodes[b], &c->sv);
                        if ((q = recommit(s, pi, NONE32, b)) < 0)
                                return q;
                        if (node_price(s, &s->nodes[b]) > pj * (1 + 1e-9)) {
                                Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
                                if ((q = solver_place_uncommit(s, v, b)) < 0)
                                        return q;
                                node_restore(s, &s->nodes[b], &c->sv);
                                break; /* the node would cost more than before: the next one */
                        }
                        /* keep pods[0..placed) placed, pods of a shape together */
                        memmove(pods + placed + 1, pods + placed, (best - placed) * sizeof(uint32_t));
                        uint32_t o = orig[best];
                        memmove(orig + placed + 1, orig + placed, (best - placed) * sizeof(uint32_t));
                        pods[placed] = pi, orig[placed] = o;
                        placed++;
                }
        }
        double after = 0;
        for (uint32_t j = 0; j < k; j++)
                after += s->nodes[g[j]].n_pods ? node_price(s, &s->nodes[g[j]]) : 0;
        if (placed == n && after < before * (1 - SPLIT_MARGIN)) {
                for (uint32_t j = 0; j < k; j++)
                        slack_share(s, &s->nodes[g[j]], c->slack + 2 * (g[j] - s->n_existing));
                return 1;
        }
        /* undone: every pod back where it was */
        for (size_t i = 0; i < placed; i++)
                if ((q = solver_place_uncommit(s, solver_variant(s, s->pod_shape[pods[i]], s->decisions[pods[i]].relaxed),
                                               s->decisions[pods[i]].target)) < 0)
                        return q;
        for (size_t i = 0; i < n; i++)
                if ((q = recommit(s, pods[i], NONE32, orig[i])) < 0)
                        return q;
        for (uint32_t j = 0; j < k; j++)
                node_restore(s, &s->nodes[g[j]], &c->gsv[j]);
        return 0;
}

/* Absorb: node a takes every pod of other nodes of its pool and zone, the dearest first, growing
 * into a larger type (its price budget set aside) as long as they fit; kept, for the number of
 * nodes that saves most, when that saves more than SPLIT_MARGIN of what they cost. Four GPU
 * pods on four 1-GPU nodes cost more than one 4-GPU node; three small nodes of a few pods each
 * more than one node twice their size. 1 kept, 0 undone. */
#define ABSORB_NODES 8

/* Puts back on node b its pods that are on node a. */
static int unabsorb_node(Solver *s, Improve *c, uint32_t a, uint32_t b) {
        for (uint32_t j = c->on.start[b]; j < c->on.start[b + 1]; j++) {
                uint32_t pi = c->on.pods[j];
                if (s->decisions[pi].kind == SOLVER_DECISION_LAUNCH && s->decisions[pi].target == a) {
                        int q = solver_repair_move_back(s, pi, a, b);
                        if (q < 0)
                                return q;
                }
        }
        return 0;
}

/* Moves every pod of node b onto node a: 1, or 0 (nothing moved) when one does not fit or b
 * would not end empty. */
static int absorb_node(Solver *s, Improve *c, uint32_t a, uint32_t b) {
        const Node *na = &s->nodes[a], *nb = &s->nodes[b];
        const SolverResources *ds = &s->pools[nb->pool].ds;
        for (int r = 0; r < R_MAX; r++) /* b's pods fit no type a may become */
                if (nb->used[r] - ds->v[r] > 0 && na->used[r] + nb->used[r] - ds->v[r] > na->cap[r])
                        return 0;
        size_t n;
        if (!pods_of(s, &c->on, b, c->pods, c->cap, &n) || n == 0 || n != s->nodes[b].n_pods)
                return 0;
        /* pods a hostname rule limits per node first: they are the ones likely not to fit */
        for (size_t i = 0, k = 0; i < n; i++)
                if (s->shapes[s->pod_shape[c->pods[i]]].anchor) {
                        uint32_t x = c->pods[i];
                        memmove(c->pods + k + 1, c->pods + k, (i - k) * sizeof(uint32_t));
                        c->pods[k++] = x;
                }
        for (size_t i = 0; i < n; i++) {
                Variant *v;
                int z, q = solver_pod_variant_on(s, c->pods[i], b, &v, &z);
                if (q < 0)
                        return q;
                c->on.work++;
                bool fits = q > 0;
                if (fits && (q = solver_place_uncommit(s, v, b)) < 0)
                        return q;
                if (fits) {
                        fits = solver_place_fit_count(s, v, a, 1, z) > 0;
                        q = solver_place_commit(s, v, fits ? a : b, &c->pods[i], 1, z);
                        if (q < 0)
                                return q;
                }
                if (!fits) {
                        q = unabsorb_node(s, c, a, b);
                        return q < 0 ? q : 0;
                }
        }
        return 1;
}

static int try_absorb(Solver *s, Improve *c, uint32_t a, const ByUse *order, uint32_t nn) {
        Node *na = &s->nodes[a];
        uint32_t taken[ABSORB_NODES], k = 0, best_k = 0;
        double before = node_price(s, na), saved = 0, best = 0, best_total = 0;
        bool had_budget = na->has_budget;
        node_save(s, na, &c->gsv[0]);
        solver_place_use_budget(s, a, false); /* it may grow: what it absorbs pays for it */
        /* a trial absorbing greedily (the most used nodes first), remembering the best count */
        for (uint32_t i = nn; i-- > 0 && k < ABSORB_NODES && c->on.work < IMPROVE_WORK;) {
                uint32_t b = order[i].node;
                const Node *nb = &s->nodes[b];
                if (b == a || nb->pool != na->pool || nb->zone != na->zone || nb->slots != na->slots ||
                    !node_eligible(s, nb))
                        continue;
                double pb = node_price(s, nb);
                int q = absorb_node(s, c, a, b);
                if (q < 0)
                        return q;
                if (q == 0)
                        continue;
                taken[k++] = b;
                saved += pb;
                double gain = before + saved - node_price(s, &s->nodes[a]);
                if (gain > best) {
                        best = gain;
                        best_k = k;
                        best_total = before + saved;
                }
        }
        /* undone, then done again for the best count only */
        while (k > 0) {
                int q = unabsorb_node(s, c, a, taken[--k]);
                if (q < 0)
                        return q;
        }
        node_restore(s, &s->nodes[a], &c->gsv[0]);
        if (best_k == 0 || best <= SPLIT_MARGIN * best_total) {
                solver_place_use_budget(s, a, had_budget);
                return 0;
        }
        for (k = 0; k < best_k; k++) {
                int q = absorb_node(s, c, a, taken[k]);
                if (q <= 0) { /* cannot happen: the same moves from the same state */
                        while (q == 0 && k > 0)
                                if ((q = unabsorb_node(s, c, a, taken[--k])) < 0)
                                        return q;
                        node_restore(s, &s->nodes[a], &c->gsv[0]);
                        solver_place_use_budget(s, a, had_budget);
                        return q;
                }
        }
        return 1;
}

static void improve_done(Improve *c) {
        solver_pod_on_done(&c->on);
        free(c->pods);
        free(c->to);
        free(c->group);
        free(c->orig);
        free(c->cand);
        free(c->slack);
        free(c->sv.types);
        for (size_t j = 0; j < REGROUP_WIDE; j++)
                free(c->gsv[j].types);
}

static int improve_init(Solver *s, Improve *c) {
        *c = (Improve) {};
        int q = solver_pod_on_build(s, &c->on);
        if (q < 0)
                return q;
        for (uint32_t a = s->n_existing; a < c->on.n_nodes; a++)
                c->cap = MAX(c->cap, (size_t) (c->on.start[a + 1] - c->on.start[a]));
        c->gcap = REGROUP_WIDE * c->cap + 1;
        c->pods = malloc((c->cap + 1) * sizeof(uint32_t));
        c->to = malloc((c->cap + 1) * sizeof(uint32_t));
        c->group = malloc(c->gcap * sizeof(uint32_t));
        c->orig = malloc(c->gcap * sizeof(uint32_t));
        c->cand = malloc(((size_t) s->T + 1) * sizeof(SplitCand));
        c->slack = malloc(2 * ((size_t) c->on.n_nodes - s->n_existing + 1) * sizeof(double));
        bool ok = c->pods && c->to && c->group && c->orig && c->cand && c->slack;
        for (size_t j = 0; j <= REGROUP_WIDE && ok; j++) {
                Saved *x = j == 0 ? &c->sv : &c->gsv[j - 1];
                x->types = malloc(2 * (size_t) s->W * sizeof(uint64_t) + 1);
                x->base = x->types ? x->types + s->W : NULL;
                ok = x->types;
        }
        if (!ok) {
                improve_done(c);
                return -ENOMEM;
        }
        return 0;
}

static double plan_price(const Solver *s) {
        double sum = 0;
        for (uint32_t a = s->n_existing; a < s->n_nodes; a++)
                if (s->nodes[a].kind == NODE_NEW && s->nodes[a].n_pods > 0)
                        sum += node_price(s, &s->nodes[a]);
        return sum;
}

typedef enum Step {
        STEP_REBALANCE,
        STEP_ABSORB,
        STEP_REGROUP,
        STEP_REGROUP_WIDE,
} Step;

/* Runs a step from each of the least used eligible nodes, at most `tries` of them. */
static int least_used_do(Solver *s, Improve *c, const ByUse *order, uint32_t nn, Step step, uint32_t tries) {
        for (uint32_t i = 0, done = 0; i < nn && done < tries && c->on.work < IMPROVE_WORK && !solver_out_of_time(s); i++) {
                uint32_t a = order[i].node;
                if (!node_eligible(s, &s->nodes[a]))
                        continue;
                done++;
                int q = step == STEP_ABSORB ? try_absorb(s, c, a, order, nn) :
                        try_rebalance(s, c, a, step != STEP_REBALANCE,
                                      step == STEP_REBALANCE ? REBALANCE_NODES :
                                      step == STEP_REGROUP   ? REGROUP_NODES : REGROUP_WIDE);
                if (q < 0)
                        return q;
        }
        return 0;
}

/* One round of the steps over the nodes planned when it starts. */
static int improve_round(Solver *s, Improve *c) {
        uint32_t first = s->n_existing, nn = c->on.n_nodes - s->n_existing;
        _cleanup_free_ ByUse *order = malloc((size_t) nn * sizeof(ByUse));
        if (!order)
                return -ENOMEM;
        int q;
        /* the least used nodes first */
        for (uint32_t i = 0; i < nn; i++)
                order[i] = (ByUse) { node_use(s, &s->nodes[first + i]), first + i };
        qsort(order, nn, sizeof(ByUse), cmp_use);
        for (uint32_t i = 0; i < nn && c->on.work < IMPROVE_WORK && !solver_out_of_time(s); i++)
                if (node_eligible(s, &s->nodes[order[i].node]) && (q = try_empty(s, c, order[i].node)) < 0)
                        return q;
        for (uint32_t i = 0; i < nn; i++)
                slack_share(s, &s->nodes[first + i], c->slack + 2 * i);
        if ((q = least_used_do(s, c, order, nn, STEP_REBALANCE, REBALANCE_TRIES)) < 0 ||
            (q = least_used_do(s, c, order, nn, STEP_ABSORB, REBALANCE_TRIES)) < 0)
                return q;
        bool may_split = s->opts->target_nodes == 0;
        for (uint32_t a = first; may_split && a < c->on.n_nodes && c->on.work < IMPROVE_WORK && !solver_out_of_time(s); a++)
                if (node_eligible(s, &s->nodes[a]) && (q = try_split(s, c, a)) < 0)
                        return q;
        if ((q = least_used_do(s, c, order, nn, STEP_REGROUP, REBALANCE_TRIES)) < 0 ||
            (q = least_used_do(s, c, order, nn, STEP_REGROUP_WIDE, REGROUP_WIDE_TRIES)) < 0)
                return q;
        return 0;
}

int solver_improve(Solver *s) {
        uint32_t nn = s->n_nodes - s->n_existing;
        if (nn == 0 || nn > IMPROVE_MAX_NODES)
                return 0;
        double before = plan_price(s);
        size_t work = 0, scans = 0;
        for (unsigned round = 0; round < IMPROVE_ROUNDS && work < IMPROVE_WORK && !solver_out_of_time(s); round++) {
                /* nodes a round opened (splits) are for the next one to see: rebuilt each time */
                Improve c;
                int q = improve_init(s, &c);
                if (q < 0)
                        return q;
                c.on.work = work;
                c.scans = scans;
                q = improve_round(s, &c);
                work = c.on.work;
                scans = c.scans;
                improve_done(&c);
                if (q < 0)
                        return q;
                double after = plan_price(s);
                if (after >= before * (1 - 1e-9))
                        break;
                before = after;
        }
        return 0;
}
