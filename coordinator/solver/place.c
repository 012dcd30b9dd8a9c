/* SPDX-License-Identifier: Apache-2.0 */
/* Placement, the loop: batches of identical pods (a shape at a relaxation level) are taken from
 * a queue and go first-fit onto existing and already planned nodes (zones.c), then preempt
 * lower-priority pods (preempt.c), then open new nodes (open.c); what stays unplaced is
 * diagnosed here. A new node keeps the bitset of instance types that can still hold everything
 * on it (room.c); every change is logged for undo (undo.c). */

#include <stdio.h>

#include "grow.h"
#include "macro.h"
#include "solver-internal.h"

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

int solver_heap_push(Solver *s, const Batch *b) {
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

void solver_zero_host_min(Variant *v) {
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
                uint32_t A = solver_allowed_domains(s, v, TOPO_CT, _SOLVER_CAPACITY_MAX, v->eligible_cts, quota);
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
                        got = v->zone_mode ? solver_place_zone(s, v, pods + placed, want) : solver_place_plain(s, v, pods + placed, want);
                        s->ct_pin = -1;
                        if (got < 0)
                                return got;
                }
                if (got == 0)
                        break;
                placed += got;
        }
        if (!v->eligible_cts)
                solver_fail(s, SOLVER_REASON_REQUIREMENTS, "no capacity type can run it");
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
                         : v->zone_mode ? solver_place_zone(s, v, b->pods, b->n)
                                        : solver_place_plain(s, v, b->pods, b->n);
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
                return solver_heap_push(s, &nb);
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
                q = solver_undo_push(s, U_REMOVED, (uint32_t) ni, 0, n->removed);
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
                        q = solver_account(s, &s->shapes[s->pod_shape[bp]], NULL, (uint32_t) ni, -1, true);
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
        q = solver_requeue(s, rq, n_rq);
        if (q < 0)
                goto out;
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                Shape *sh = &s->shapes[i];
                if (sh->n_pods == 0)
                        continue;
                if (sh->headroom ? o->no_headroom : o->skip_pending)
                        continue;
                Batch b = { .shape = i, .pods = sh->pods, .n = sh->n_pods, .priority = sh->pod->priority };
                q = solver_heap_push(s, &b);
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
                                q = solver_heap_push(s, &s->retry[i]);
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
