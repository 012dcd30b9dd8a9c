/* SPDX-License-Identifier: Apache-2.0 */
/* Preemption: making room for a pod by evicting lower-priority planned pods, which are
 * requeued. */

#include "macro.h"
#include "solver-internal.h"

/* ---- preemption ----------------------------------------------------------------------------- */

static int cmp_victim(const void *a, const void *b, void *u) {
        const Solver *s = u;
        const SolverPod *x = &s->snap->pods[*(const uint32_t *) a], *y = &s->snap->pods[*(const uint32_t *) b];
        if (x->priority != y->priority)
                return x->priority > y->priority ? -1 : 1;
        uint32_t i = *(const uint32_t *) a, j = *(const uint32_t *) b;
        return i < j ? -1 : i > j;
}


/* kube-scheduler would preempt lower-priority pods on an existing node for this pod: no new
 * node is needed. Victims are the lower-priority pods left after reprieving as many as fit,
 * highest priority first. Returns 1 when planned. */
int solver_try_preempt(Solver *s, Variant *v, uint32_t pod, uint32_t zmask) {
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
                if ((v->n_cons || sh->n_matches) && solver_host_cap(s, v, ni) <= 0)
                        continue;
                if (p->n_host_ports && solver_ports_conflict(n, p))
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
                q = solver_undo_push(s, U_PREEMPTED, bp, 0, s->preempted[bp]);
                if (q < 0)
                        break;
                s->preempted[bp] = 1;
                for (int r = 0; r < R_MAX && q >= 0; r++)
                        if (bs->req.v[r])
                                q = solver_set_used(s, ni, r, n->used[r] - bs->req.v[r]);
                if (q >= 0)
                        q = solver_set_npods(s, ni, n->n_pods - 1);
                if (q >= 0)
                        q = solver_account(s, bs, NULL, ni, -1, true);
                s->decisions[bp].preempted = true;
        }
        if (q >= 0) {
                for (int r = 0; r < R_MAX && q >= 0; r++)
                        if (sh->req.v[r])
                                q = solver_set_used(s, ni, r, n->used[r] + sh->req.v[r]);
                if (q >= 0)
                        q = solver_set_npods(s, ni, n->n_pods + 1);
                if (q >= 0)
                        q = solver_account(s, sh, v, ni, 1, false);
        }
        if (q >= 0) {
                SolverDecision *d = &s->decisions[pod];
                d->kind = SOLVER_DECISION_PREEMPT;
                d->target = ni;
                d->relaxed = v->level;
                q = solver_requeue(s, best_v, n_best_v);
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
int solver_requeue(Solver *s, const uint32_t *pods, size_t n) {
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
                int q = solver_heap_push(s, &b);
                if (q < 0)
                        return q;
                i = j;
        }
        return 0;
}
