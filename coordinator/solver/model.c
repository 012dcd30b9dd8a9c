/* SPDX-License-Identifier: Apache-2.0 */
/* The planning model (new-node kinds with their room, pending shapes with the kinds they may
 * use), exported so that a plan can be measured against an optimum computed on exactly the
 * allocatable and prices the solver plans with. */

#include "macro.h"
#include "solver-internal.h"

/* Cheapest available offering of a capacity type among the slots; < 0 when none. */
static double kind_price(const Solver *s, uint32_t t, uint64_t slots, int ct) {
        double best = -1;
        uint64_t m = slots & slots_of_ct(ct) & s->type_slots[t];
        for (uint64_t b = m; b; b &= b - 1) {
                double p = s->price[(size_t) t * 64 + (unsigned) __builtin_ctzll(b)];
                if (p >= 0 && (best < 0 || p < best))
                        best = p;
        }
        return best;
}

int solver_model(Solver *s, SolverModel **ret) {
        if (!s || !ret)
                return -EINVAL;
        SolverArena *a;
        int q = solver_arena_new(&a);
        if (q < 0)
                return q;
        SolverModel *m = solver_arena_alloc(a, sizeof(SolverModel));
        uint32_t *kind_of = calloc((size_t) s->n_pools * s->T * NCT + 1, sizeof(uint32_t));
        if (!m || !kind_of)
                goto oom;
        m->arena = a;
        /* kinds: every (pool, type, capacity type) with an offering in the pool's slots */
        size_t cap = 0;
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                const Pool *p = &s->pools[pi];
                for (uint32_t t = 0; t < s->T; t++) {
                        if (!bs_test(p->types, t))
                                continue;
                        const int64_t *al = p->fit->alloc + (size_t) t * R_MAX;
                        for (int ct = 0; ct < NCT; ct++) {
                                double price = kind_price(s, t, p->slots, ct);
                                if (price < 0)
                                        continue;
                                if (m->n_kinds == cap) {
                                        size_t nc = cap ? cap * 2 : 256;
                                        m->kinds = solver_arena_realloc(a, m->kinds, cap * sizeof(SolverModelKind),
                                                                        nc * sizeof(SolverModelKind));
                                        if (!m->kinds)
                                                goto oom;
                                        cap = nc;
                                }
                                SolverModelKind *k = &m->kinds[m->n_kinds];
                                *k = (SolverModelKind) { .nodepool = p->index, .type = t,
                                                         .capacity_type = ct, .price = price };
                                for (int r = 0; r < R_MAX; r++)
                                        k->room.v[r] = MAX(al[r] - p->ds.v[r], (int64_t) 0);
                                k->zones = zones_of_slots(p->slots & slots_of_ct(ct) & s->type_slots[t]);
                                kind_of[((size_t) pi * s->T + t) * NCT + ct] = (uint32_t) ++m->n_kinds;
                        }
                }
        }
        m->shapes = solver_arena_alloc(a, (s->n_shapes + 1) * sizeof(SolverModelShape));
        if (!m->shapes)
                goto oom;
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                Shape *sh = &s->shapes[i];
                if (sh->headroom || sh->n_pods == 0)
                        continue;
                Variant *v = solver_variant(s, i, 0);
                if (!v)
                        goto oom;
                SolverModelShape *ms = &m->shapes[m->n_shapes++];
                ms->pods = sh->pods;
                ms->n_pods = sh->n_pods;
                ms->requests = sh->req;
                ms->max_per_node = variant_max_per_node(s, v, &ms->constrained);
                ms->zones = v->eligible_zones;
                for (uint32_t c = 0; c < v->n_cons; c++) {
                        const Constraint *k = &v->cons[c];
                        if (k->kind == CON_SPREAD && k->required && k->self && s->groups[k->group].key == TOPO_ZONE)
                                ms->zone_spread = ms->zone_spread ? MIN(ms->zone_spread, k->max_skew) : k->max_skew;
                }
                ms->kinds = solver_arena_alloc(a, (m->n_kinds + 1) * sizeof(uint32_t));
                if (!ms->kinds)
                        goto oom;
                if (v->unsupported)
                        continue;
                for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                        PoolCompat *pc = solver_pool_compat(s, v, pi);
                        if (!pc->ok)
                                continue;
                        BS_FOREACH(t, pc->types, s->W)
                                for (int ct = 0; ct < NCT; ct++) {
                                        uint32_t k = kind_of[((size_t) pi * s->T + t) * NCT + ct];
                                        if (k && (pc->slots & slots_of_ct(ct) & s->type_slots[t]))
                                                ms->kinds[ms->n_kinds++] = k - 1;
                                }
                }
        }
        free(kind_of);
        *ret = m;
        return 0;
oom:
        free(kind_of);
        solver_arena_free(a);
        return -ENOMEM;
}

SolverModel *solver_model_free(SolverModel *m) {
        if (m)
                solver_arena_free(m->arena);
        return NULL;
}
