/* SPDX-License-Identifier: Apache-2.0 */
/* Repair: after placement, a planned node whose pods just overflow a cheaper instance type
 * (16.5 vCPU on a 32-vCPU type because 16 would not do) gives a few pods to other planned
 * nodes that have room for them in what they already cost, and becomes the cheaper type.
 *
 * A move is made only when every rule still holds: the receiving node is checked like any
 * placement (requirements, taints, resources, hostname and zone rules, the same zone for a pod
 * whose variant pins zones), and costs no more after it (the pod fits the room left in its
 * cheapest type). Pods with host ports or WaitForFirstConsumer claims, virtual headroom pods and
 * pools with limits stay where they are. Deterministic: nodes and pods in index order. */

#include "macro.h"
#include "solver-internal.h"

#define REPAIR_MAX_NODES 4096  /* beyond this many planned nodes the pass is skipped */
#define REPAIR_TRIES 4         /* cheaper types tried per node */
#define REPAIR_SHARE 4         /* ... that need at most a quarter of what its pods use moved */
#define REPAIR_WORK 200000     /* receiving nodes examined per run, at most: a bounded pass */

typedef struct PodOn {
        uint32_t *start;  /* [n_nodes + 1] */
        uint32_t *pods;
        size_t work;
} PodOn;

static bool movable(const Solver *s, uint32_t pi) {
        if (pi >= s->snap->n_pods)
                return false;
        const SolverDecision *d = &s->decisions[pi];
        if (d->kind != SOLVER_DECISION_LAUNCH)
                return false;
        const Shape *sh = &s->shapes[s->pod_shape[pi]];
        return !sh->pod->n_host_ports && !sh->has_wffc && !sh->headroom;
}

/* What the node pays for type t: on-demand when it may not use spot. */
static double type_price(const Solver *s, const Node *n, uint32_t t) {
        const Pool *p = &s->pools[n->pool];
        if (t == NONE32)
                return 0;
        return (n->slots & slots_of_ct(SOLVER_CAPACITY_SPOT)) ? p->tprice[t] : p->odprice[t];
}

/* Moves pod pi from node a to another planned node with room it already pays for. */
static int move_pod(Solver *s, PodOn *on, uint32_t pi, uint32_t a, uint32_t *ret_to) {
        Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
        if (!v)
                return -ENOMEM;
        const Shape *sh = &s->shapes[v->shape];
        int z = v->zone_mode ? s->nodes[a].zone : NO_ZONE;
        if (v->zone_mode && z < 0)
                return 0;
        /* capacity-type rules: the pod stays on the type it was counted on */
        if (v->ct_mode)
                return 0;
        for (uint32_t m = 0; m < sh->n_matches; m++)
                if (s->groups[sh->matches[m]].key == TOPO_CT)
                        return 0;
        for (uint32_t b = s->n_existing; b < s->n_nodes && on->work < REPAIR_WORK; b++) {
                on->work++;
                if (b == a || s->nodes[b].n_pods == 0 || s->pools[s->nodes[b].pool].has_limits)
                        continue;
                if (v->zone_mode && s->nodes[b].zone != z)
                        continue;
                if (solver_place_free_room(s, sh, &s->nodes[b]) < 1)
                        continue;
                /* off a first: a hostname rule on a may be what keeps b from taking it */
                int q = solver_place_uncommit(s, v, a);
                if (q < 0)
                        return q;
                if (solver_place_fit_count(s, v, b, 1, z) > 0) {
                        q = solver_place_commit(s, v, b, &pi, 1, z);
                        if (q < 0)
                                return q;
                        *ret_to = b;
                        return 1;
                }
                q = solver_place_commit(s, v, a, &pi, 1, z);
                if (q < 0)
                        return q;
        }
        return 0;
}

/* Tries to make node a fit type t by moving pods off it; undoes the moves when it cannot. */
static int shrink_to(Solver *s, PodOn *on, uint32_t a, uint32_t t) {
        Node *n = &s->nodes[a];
        const int64_t *al = s->pools[n->pool].fit->alloc + (size_t) t * R_MAX;
        uint32_t moved_pod[64], moved_to[64], n_moved = 0;
        int q = 0;
        for (uint32_t k = on->start[a]; k < on->start[a + 1]; k++) {
                bool over = false;
                for (int r = 0; r < R_MAX; r++)
                        over |= n->used[r] > al[r];
                if (!over)
                        return 1;
                uint32_t pi = on->pods[k];
                if (!movable(s, pi) || s->decisions[pi].target != a || n_moved == ELEMENTSOF(moved_pod))
                        continue;
                const SolverResources *rq = &s->shapes[s->pod_shape[pi]].req;
                bool helps = false;
                for (int r = 0; r < R_MAX; r++)
                        helps |= rq->v[r] > 0 && n->used[r] > al[r] && r != SOLVER_RES_PODS;
                if (!helps)
                        continue;
                uint32_t to;
                q = move_pod(s, on, pi, a, &to);
                if (q < 0)
                        return q;
                if (q > 0) {
                        moved_pod[n_moved] = pi;
                        moved_to[n_moved++] = to;
                }
        }
        bool over = false;
        for (int r = 0; r < R_MAX; r++)
                over |= n->used[r] > al[r];
        if (!over)
                return 1;
        /* not enough: every pod goes back where it was */
        while (n_moved-- > 0) {
                uint32_t pi = moved_pod[n_moved], b = moved_to[n_moved];
                Variant *v = solver_variant(s, s->pod_shape[pi], s->decisions[pi].relaxed);
                int z = v->zone_mode ? s->nodes[a].zone : NO_ZONE;
                q = solver_place_uncommit(s, v, b);
                if (q >= 0)
                        q = solver_place_commit(s, v, a, &pi, 1, z);
                if (q < 0)
                        return q;
        }
        return 0;
}

int solver_repair(Solver *s) {
        uint32_t first = s->n_existing, nn = s->n_nodes - s->n_existing;
        if (nn < 2 || nn > REPAIR_MAX_NODES)
                return 0;
        PodOn on = {};
        on.start = calloc((size_t) s->n_nodes + 2, sizeof(uint32_t));
        size_t np = s->snap->n_pods;
        on.pods = malloc((np + 1) * sizeof(uint32_t));
        int q = 0;
        if (!on.start || !on.pods) {
                q = -ENOMEM;
                goto out;
        }
        for (size_t pi = 0; pi < np; pi++)
                if (s->decisions[pi].kind == SOLVER_DECISION_LAUNCH)
                        on.start[s->decisions[pi].target + 1]++;
        for (uint32_t i = 0; i < s->n_nodes; i++)
                on.start[i + 1] += on.start[i];
        {
                uint32_t *fill = calloc((size_t) s->n_nodes + 1, sizeof(uint32_t));
                if (!fill) {
                        q = -ENOMEM;
                        goto out;
                }
                for (size_t pi = 0; pi < np; pi++)
                        if (s->decisions[pi].kind == SOLVER_DECISION_LAUNCH) {
                                uint32_t t = s->decisions[pi].target;
                                on.pods[on.start[t] + fill[t]++] = (uint32_t) pi;
                        }
                free(fill);
        }
        for (uint32_t a = first; a < s->n_nodes && !solver_out_of_time(s); a++) {
                Node *n = &s->nodes[a];
                if (n->n_pods == 0 || s->pools[n->pool].has_limits || s->pools[n->pool].has_min_values)
                        continue;
                const Pool *p = &s->pools[n->pool];
                uint32_t cur = solver_place_cheapest_type(s, n);
                double price = type_price(s, n, cur);
                uint32_t tries = 0;
                /* the cheapest type first that needs only a few pods moved */
                for (uint32_t i = 0; i < p->n_price_order && tries < REPAIR_TRIES && on.work < REPAIR_WORK; i++) {
                        uint32_t t = p->price_order[i];
                        double pt = type_price(s, n, t);
                        if (pt <= 0 || pt >= price || !bs_test(n->base, t))
                                continue;
                        const int64_t *al = p->fit->alloc + (size_t) t * R_MAX;
                        bool close = true;
                        for (int r = 0; r < R_MAX; r++)
                                close &= al[r] >= p->ds.v[r] &&
                                         (n->used[r] - al[r]) * REPAIR_SHARE <= n->used[r] - p->ds.v[r];
                        if (!close)
                                continue;
                        tries++;
                        q = shrink_to(s, &on, a, t);
                        if (q < 0)
                                goto out;
                        if (q > 0)
                                break;
                }
        }
        q = 0;
out:
        free(on.start);
        free(on.pods);
        return q;
}
