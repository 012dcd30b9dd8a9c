/* SPDX-License-Identifier: Apache-2.0 */
/* Running a placement and turning planned nodes into launches with ranked offerings. */

#include "macro.h"
#include "solver-internal.h"

static const char *const reason_names[] = {
        [SOLVER_REASON_NONE] = "none",
        [SOLVER_REASON_NO_NODEPOOL] = "NoNodePool",
        [SOLVER_REASON_REQUIREMENTS] = "Requirements",
        [SOLVER_REASON_TAINTS] = "Taints",
        [SOLVER_REASON_RESOURCES] = "Resources",
        [SOLVER_REASON_LIMITS] = "Limits",
        [SOLVER_REASON_TOPOLOGY] = "Topology",
        [SOLVER_REASON_HOST_PORTS] = "HostPorts",
        [SOLVER_REASON_VOLUME_ZONE] = "VolumeZone",
        [SOLVER_REASON_MAX_NEW_NODES] = "MaxNewNodes",
        [SOLVER_REASON_UNSUPPORTED] = "Unsupported",
};

const char *solver_reason_to_name(SolverReason r) {
        if ((unsigned) r >= ELEMENTSOF(reason_names))
                return "?";
        return reason_names[r];
}

/* Types sorted by their cheapest offering of one capacity type within a slot mask. */
typedef struct RankCache {
        uint64_t slots;
        int ct;
        uint32_t *order;
        double *best;   /* [T] */
        uint32_t n;
} RankCache;

typedef struct RankCtx {
        RankCache *c;
        size_t n, cap;
} RankCtx;

static int cmp_rank(const void *a, const void *b, void *u) {
        const double *best = u;
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        if (best[x] != best[y])
                return best[x] < best[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

static RankCache *rank_get(Solver *s, RankCtx *ctx, uint64_t slots, int ct) {
        for (size_t i = 0; i < ctx->n; i++)
                if (ctx->c[i].slots == slots && ctx->c[i].ct == ct)
                        return &ctx->c[i];
        if (ctx->n == ctx->cap) {
                size_t nc = ctx->cap ? ctx->cap * 2 : 8;
                RankCache *n = realloc(ctx->c, nc * sizeof(RankCache));
                if (!n)
                        return NULL;
                ctx->c = n;
                ctx->cap = nc;
        }
        RankCache *c = &ctx->c[ctx->n];
        *c = (RankCache) { .slots = slots, .ct = ct };
        c->order = solver_arena_alloc_nozero(s->rarena, (s->T + 1) * sizeof(uint32_t));
        c->best = solver_arena_alloc_nozero(s->rarena, (s->T + 1) * sizeof(double));
        if (!c->order || !c->best)
                return NULL;
        uint64_t sl = slots & slots_of_ct(ct);
        for (uint32_t t = 0; t < s->T; t++) {
                double best = -1;
                for (uint64_t b = sl & s->type_slots[t]; b; b &= b - 1) {
                        double p = s->price[(size_t) t * 64 + (unsigned) __builtin_ctzll(b)];
                        if (p >= 0 && (best < 0 || p < best))
                                best = p;
                }
                c->best[t] = best;
                if (best >= 0)
                        c->order[c->n++] = t;
        }
        qsort_r(c->order, c->n, sizeof(uint32_t), cmp_rank, c->best);
        ctx->n++;
        return c;
}

static int cmp_offering(const void *a, const void *b, void *u) {
        const SolverLaunchOffering *x = a, *y = b;
        const uint32_t *rank = u;
        if (x->price != y->price)
                return x->price < y->price ? -1 : 1;
        if (x->type != y->type)
                return rank[x->type] < rank[y->type] ? -1 : 1;
        return strcmp(x->zone, y->zone);
}

static int build_launch(Solver *s, RankCtx *ctx, const Node *n, SolverLaunch *l, uint32_t *rank_pos) {
        size_t maxt = s->opts->max_types_per_launch ? s->opts->max_types_per_launch : 60;
        const Pool *p = &s->pools[n->pool];
        if (p->has_min_values)
                maxt = SIZE_MAX;
        l->nodepool = n->pool;
        l->n_types = bs_count(n->types, s->W);
        /* cheapest offering decides the capacity type */
        double best = -1;
        int best_ct = SOLVER_CAPACITY_ON_DEMAND;
        for (int ct = NCT - 1; ct >= 0; ct--) {
                RankCache *c = rank_get(s, ctx, n->slots, ct);
                if (!c)
                        return -ENOMEM;
                for (uint32_t i = 0; i < c->n; i++)
                        if (bs_test(n->types, c->order[i])) {
                                double pr = c->best[c->order[i]];
                                if (best < 0 || pr < best) {
                                        best = pr;
                                        best_ct = ct;
                                }
                                break;
                        }
        }
        if (best < 0)
                return -EBADSLT; /* cannot happen: the node was opened with an offering */
        RankCache *c = rank_get(s, ctx, n->slots, best_ct);
        if (!c)
                return -ENOMEM;
        uint32_t *chosen = malloc(MIN(maxt, (size_t) c->n + 1) * sizeof(uint32_t) + sizeof(uint32_t));
        if (!chosen)
                return -ENOMEM;
        size_t nch = 0, noff = 0;
        for (uint32_t i = 0; i < c->n && nch < maxt; i++) {
                uint32_t t = c->order[i];
                if (!bs_test(n->types, t))
                        continue;
                rank_pos[t] = (uint32_t) nch;
                chosen[nch++] = t;
                noff += (size_t) __builtin_popcountll(n->slots & slots_of_ct(best_ct) & s->type_slots[t]);
        }
        l->offerings = solver_arena_alloc_nozero(s->rarena, (noff + 1) * sizeof(SolverLaunchOffering));
        if (!l->offerings) {
                free(chosen);
                return -ENOMEM;
        }
        for (size_t i = 0; i < nch; i++) {
                uint32_t t = chosen[i];
                for (uint64_t b = n->slots & slots_of_ct(best_ct) & s->type_slots[t]; b; b &= b - 1) {
                        unsigned slot = (unsigned) __builtin_ctzll(b);
                        l->offerings[l->n_offerings++] = (SolverLaunchOffering) {
                                .type = t, .zone = s->zones[slot % 32], .capacity_type = best_ct,
                                .price = s->price[(size_t) t * 64 + slot] };
                }
        }
        free(chosen);
        qsort_r(l->offerings, l->n_offerings, sizeof(SolverLaunchOffering), cmp_offering, rank_pos);
        l->price = l->offerings[0].price;
        l->type = l->offerings[0].type;
        l->capacity_type = best_ct;
        l->zone = n->zone >= 0 ? s->zones[n->zone] : NULL;
        for (int r = 0; r < R_MAX; r++)
                l->requests.v[r] = n->used[r];
        l->headroom_units = n->headroom;

        /* labels: the pool, and every custom key with a known value */
        const VSetList *cl = n->custom;
        size_t nl = 1 + (cl ? cl->n : 0);
        l->labels = solver_arena_alloc(s->rarena, nl * sizeof(SolverLabel));
        if (!l->labels)
                return -ENOMEM;
        l->labels[l->n_labels++] = (SolverLabel) { SOLVER_LABEL_NODEPOOL, p->np->name };
        for (uint32_t i = 0; cl && i < cl->n; i++) {
                const VSet *v = &cl->sets[i];
                if (v->absent || v->complement || v->n == 0)
                        continue;
                l->labels[l->n_labels++] = (SolverLabel) { s->keys.strs[v->key], s->vals.strs[v->vals[0]] };
        }
        return 0;
}

int solver_build_result(Solver *s, SolverResult **ret) {
        const SolverSnapshot *snap = s->snap;
        SolverResult *res = solver_arena_alloc(s->rarena, sizeof(SolverResult));
        if (!res)
                return -ENOMEM;
        uint32_t n_new = s->n_nodes - s->n_existing;
        uint32_t *launch_of = calloc(n_new + 1, sizeof(uint32_t));
        uint32_t *npods = calloc(n_new + 1, sizeof(uint32_t));
        uint32_t *rank_pos = calloc(s->T + 1, sizeof(uint32_t));
        RankCtx ctx = {};
        int q = 0;
        if (!launch_of || !npods || !rank_pos) {
                q = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < snap->n_pods; i++)
                if (s->decisions[i].kind == SOLVER_DECISION_LAUNCH)
                        npods[s->decisions[i].target - s->n_existing]++;
        size_t nl = 0;
        for (uint32_t i = 0; i < n_new; i++) {
                const Node *n = &s->nodes[s->n_existing + i];
                launch_of[i] = (npods[i] || n->headroom || n->is_static) ? (uint32_t) nl++ : NONE32;
        }
        res->launches = solver_arena_alloc(s->rarena, (nl + 1) * sizeof(SolverLaunch));
        if (!res->launches) {
                q = -ENOMEM;
                goto out;
        }
        for (uint32_t i = 0; i < n_new; i++) {
                if (launch_of[i] == NONE32)
                        continue;
                SolverLaunch *l = &res->launches[launch_of[i]];
                q = build_launch(s, &ctx, &s->nodes[s->n_existing + i], l, rank_pos);
                if (q < 0)
                        goto out;
                l->pods = solver_arena_alloc_nozero(s->rarena, (npods[i] + 1) * sizeof(uint32_t));
                if (!l->pods) {
                        q = -ENOMEM;
                        goto out;
                }
                res->total_price += l->price;
        }
        res->n_launches = nl;
        res->decisions = solver_arena_alloc_nozero(s->rarena, (snap->n_pods + 1) * sizeof(SolverDecision));
        if (!res->decisions) {
                q = -ENOMEM;
                goto out;
        }
        res->n_decisions = snap->n_pods;
        for (size_t i = 0; i < snap->n_pods; i++) {
                SolverDecision d = s->decisions[i];
                switch (d.kind) {
                case SOLVER_DECISION_LAUNCH: {
                        uint32_t li = launch_of[d.target - s->n_existing];
                        d.target = li;
                        SolverLaunch *l = &res->launches[li];
                        l->pods[l->n_pods++] = (uint32_t) i;
                        res->n_placed_new++;
                        break;
                }
                case SOLVER_DECISION_EXISTING:
                        res->n_placed_existing++;
                        break;
                case SOLVER_DECISION_PREEMPT:
                        res->n_preempting++;
                        break;
                case SOLVER_DECISION_UNSCHEDULABLE:
                        res->n_unschedulable++;
                        break;
                case SOLVER_DECISION_NONE:
                        break;
                }
                res->decisions[i] = d;
        }
        if (s->claims.n > 0) {
                res->claim_zones = solver_arena_alloc(s->rarena, s->claims.n * sizeof(SolverClaimZone));
                if (!res->claim_zones) {
                        q = -ENOMEM;
                        goto out;
                }
                for (size_t i = 0; i < s->claims.n && i < s->claim_cap; i++) {
                        if (s->claim_zone[i] == INT32_MIN)
                                continue;
                        res->claim_zones[res->n_claim_zones++] = (SolverClaimZone) {
                                .claim = solver_arena_strdup(s->rarena, s->claims.strs[i]),
                                .zone = s->claim_zone[i] >= 0 ? s->zones[s->claim_zone[i]] : NULL };
                }
        }
        if (s->n_preempt > 0) {
                res->preempted_pods = solver_arena_alloc_nozero(s->rarena, s->n_preempt * sizeof(uint32_t));
                if (!res->preempted_pods) {
                        q = -ENOMEM;
                        goto out;
                }
                memcpy(res->preempted_pods, s->preempt_list, s->n_preempt * sizeof(uint32_t));
                res->n_preempted_pods = s->n_preempt;
        }
        res->n_headroom_unplaced = s->headroom_unplaced;
        res->budget_exhausted = s->out_of_time;
        res->n_deferred = s->n_deferred;
        *ret = res;
out:
        free(launch_of);
        free(npods);
        free(rank_pos);
        free(ctx.c);
        return q;
}

int solver_provision(Solver *s, const SolverOptions *opts, SolverResult **ret) {
        if (!s || !ret)
                return -EINVAL;
        SolverOptions def = SOLVER_OPTIONS_DEFAULT;
        if (!opts)
                opts = &def;
        s->opts = opts;
        int q = solver_arena_new(&s->rarena);
        if (q < 0)
                return q;
        s->decisions = calloc(s->snap->n_pods + 1, sizeof(SolverDecision));
        s->preempted = calloc(s->snap->n_pods + 1, 1);
        s->remaining = calloc(s->n_pools + 1, sizeof(SolverResources));
        if (!s->decisions || !s->preempted || !s->remaining) {
                q = -ENOMEM;
                goto fail;
        }
        for (uint32_t i = 0; i < s->n_pools; i++) {
                s->remaining[i] = s->pools[i].remaining;
                s->pools[i].nodes_left_run = s->pools[i].nodes_left;
        }
        /* claims are per run */
        solver_intern_done(&s->claims);
        solver_intern_init(&s->claims, s->rarena);
        free(s->claim_zone);
        s->claim_zone = NULL;
        s->claim_cap = 0;

        solver_budget_start(s, opts->time_budget_usec);
        q = solver_place_all(s);
        if (q >= 0 && !s->out_of_time)
                q = solver_static_open(s);
        SolverResult *res = NULL;
        if (q >= 0)
                q = solver_build_result(s, &res);
        solver_undo_all(s);
        if (q < 0)
                goto fail;
        res->arena = s->rarena;
        s->rarena = NULL;
        free(s->decisions);
        free(s->preempted);
        free(s->remaining);
        s->decisions = NULL;
        s->preempted = NULL;
        s->remaining = NULL;
        solver_intern_done(&s->claims);
        solver_intern_init(&s->claims, s->arena);
        *ret = res;
        return 0;
fail:
        solver_undo_all(s);
        free(s->decisions);
        free(s->preempted);
        free(s->remaining);
        s->decisions = NULL;
        s->preempted = NULL;
        s->remaining = NULL;
        solver_intern_done(&s->claims);
        solver_intern_init(&s->claims, s->arena);
        s->rarena = solver_arena_free(s->rarena);
        return q;
}

SolverResult *solver_result_free(SolverResult *r) {
        if (r)
                solver_arena_free(r->arena); /* r itself lives in its arena */
        return NULL;
}
