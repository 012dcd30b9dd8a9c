/* SPDX-License-Identifier: Apache-2.0 */
/* What a new node may cost: its price budget, the cost model (budget.c is the time budget).
 *
 * A node left to grow takes pods until no instance type can hold more, and then costs the
 * cheapest type that holds that pile: often a 48xlarge of a family that is not the cheapest per
 * unit of what the pods need, with a third of it idle. Instead, each run prices the demand: per
 * NodePool, the LP "cover the run's cpu and memory demand with the pool's types at their
 * cheapest offering" is solved through its dual (two resources: the best dual is at an axis or
 * at the crossing of two types' constraints), giving a unit price for cpu and for memory. When a
 * node is opened, every type it may become is valued at those unit prices for the part of its
 * room that the pods still to be placed can fill together: their demand, bucketed by its
 * memory:cpu ratio, can make every mix between two boundaries, and a type whose corner lies
 * outside them is valued at the best mix that fits it (an m6g is worth its cpu and half its
 * memory to pods of 1 vCPU / 2 GiB alone, and all of it beside memory-heavy ones); the node's
 * budget is the price of
 * the type with the lowest price per value (ties within BUDGET_TIE: the larger, so fewer nodes),
 * counting only the shapes whose own best-value type the node may become (a pod that would be
 * cheaper elsewhere does not size it), and where hostname rules force N more nodes each expects
 * 1/N of what is left,
 * and the node takes no pods that only a type costing more could hold. Pods then fill it
 * first-fit decreasing as before, and the launch is the cheapest type that holds what it got
 * (its offerings still list every type that holds it). */

#include <math.h>
#include <string.h>

#include "grow.h"
#include "macro.h"
#include "solver-internal.h"

#define BUDGET_TIE 0.02 /* price per value within 2 % of the best: take the larger type */

static void room_of(const Solver *s, const Pool *p, uint32_t t, double *ret) {
        const int64_t *a = p->fit->alloc + (size_t) t * R_MAX;
        ret[0] = (double) (a[SOLVER_RES_CPU] - p->ds.v[SOLVER_RES_CPU]);
        ret[1] = (double) (a[SOLVER_RES_MEMORY] - p->ds.v[SOLVER_RES_MEMORY]);
        (void) s;
}

typedef struct PerDollar {
        double x, y; /* cpu and memory room per USD/hour */
} PerDollar;

static int cmp_per_dollar(const void *a, const void *b) {
        const PerDollar *u = a, *v = b;
        if (u->x != v->x)
                return u->x > v->x ? -1 : 1;
        return u->y > v->y ? -1 : u->y < v->y;
}

/* Unit prices (y_cpu, y_mem) maximizing y.D subject to y.room_t <= price_t for every type. */
static int pool_unit_prices(const Solver *s, const Pool *p, const double *price, const double *demand, double *ret) {
        ret[0] = ret[1] = 0;
        if (demand[0] <= 0 && demand[1] <= 0)
                return 0;
        PerDollar *pts = malloc((s->T + 1) * sizeof(PerDollar));
        if (!pts)
                return -ENOMEM;
        size_t n = 0;
        for (uint32_t i = 0; i < p->n_price_order; i++) {
                uint32_t t = p->price_order[i];
                double pr = price[t], room[2];
                room_of(s, p, t, room);
                if (pr <= 0 || room[0] <= 0 || room[1] <= 0)
                        continue;
                pts[n++] = (PerDollar) { room[0] / pr, room[1] / pr };
        }
        if (n == 0) {
                free(pts);
                return 0;
        }
        /* the Pareto frontier: more cpu per dollar first, keeping only more memory per dollar */
        qsort(pts, n, sizeof(PerDollar), cmp_per_dollar);
        size_t f = 0;
        for (size_t i = 0; i < n; i++)
                if (f == 0 || pts[i].y > pts[f - 1].y)
                        pts[f++] = pts[i];
        double best = -1, by[2] = {};
        /* axes: only one resource priced */
        double cand[2][2] = { { 1.0 / pts[0].x, 0 }, { 0, 1.0 / pts[f - 1].y } };
        for (int c = 0; c < 2; c++) {
                double v = cand[c][0] * demand[0] + cand[c][1] * demand[1];
                bool ok = true;
                for (size_t k = 0; k < f && ok; k++)
                        ok = cand[c][0] * pts[k].x + cand[c][1] * pts[k].y <= 1 + 1e-9;
                if (ok && v > best) {
                        best = v;
                        by[0] = cand[c][0];
                        by[1] = cand[c][1];
                }
        }
        /* crossings of two types' constraints */
        for (size_t i = 0; i < f; i++)
                for (size_t j = i + 1; j < f; j++) {
                        double det = pts[i].x * pts[j].y - pts[j].x * pts[i].y;
                        if (fabs(det) < 1e-30)
                                continue;
                        double a = (pts[j].y - pts[i].y) / det, b = (pts[i].x - pts[j].x) / det;
                        if (a < 0 || b < 0)
                                continue;
                        double v = a * demand[0] + b * demand[1];
                        if (v <= best)
                                continue;
                        bool ok = true;
                        for (size_t k = 0; k < f && ok; k++)
                                ok = a * pts[k].x + b * pts[k].y <= 1 + 1e-9;
                        if (ok) {
                                best = v;
                                by[0] = a;
                                by[1] = b;
                        }
                }
        free(pts);
        ret[0] = by[0];
        ret[1] = by[1];
        return 0;
}

uint32_t solver_variant_max_per_node(const Solver *s, const Variant *v, bool *ret_relaxed) {
        const Shape *sh = &s->shapes[v->shape];
        int64_t cap = INT64_MAX;
        bool relaxed = sh->n_relax > 0;
        for (uint32_t c = 0; c < v->n_cons; c++) {
                const Constraint *k = &v->cons[c];
                const Group *g = &s->groups[k->group];
                if (g->key != TOPO_HOST)
                        relaxed = true;
                else if (k->kind == CON_ANTI && k->self)
                        cap = MIN(cap, 1);
                else if (k->kind == CON_SPREAD && k->self && k->required)
                        cap = MIN(cap, (int64_t) MAX(k->max_skew, 1));
                else
                        relaxed = true;
        }
        if (sh->pod->n_host_ports)
                cap = MIN(cap, 1);
        if (ret_relaxed)
                *ret_relaxed = relaxed;
        return cap == INT64_MAX ? 0 : (uint32_t) cap;
}

/* Budget classes: nodes that may use spot (priced at the pool's cheapest offering) and nodes
 * held to on-demand (priced at on-demand), so that pods that must run on-demand are not sized
 * with spot prices, nor spot-capable pods counted into on-demand nodes. */
static int class_of_slots(uint64_t slots) {
        return (slots & slots_of_ct(SOLVER_CAPACITY_SPOT)) ? 0 : 1;
}

static const double *class_price(const Pool *p, int cls) {
        return cls ? p->odprice : p->tprice;
}

static int mix_bucket(double cpu, double mem);

/* Adds n pods of shape i (n < 0: takes them away) to the demand of each pool and class it is
 * counted in, under its best-value type there (node_demand). */
static int demand_add(Solver *s, uint32_t i, int64_t n) {
        if (n == 0 || !s->shape_var[i])
                return 0;
        const Shape *sh = &s->shapes[i];
        int b = s->shape_bucket[i];
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                uint32_t bt = s->shape_best[(size_t) i * s->n_pools + pi];
                if (bt == NONE32)
                        continue;
                size_t k = (size_t) pi * 2 + (size_t) class_of_slots(s->shape_var[i]->pools[pi].slots);
                uint32_t *at = &s->demand_at[k * s->T + bt];
                if (*at == NONE32) {
                        int q = GROW(s->demand, s->cap_demand, s->n_demand + 1, UINT32_MAX - 1);
                        if (q < 0)
                                return q;
                        s->demand[s->n_demand] = (DemandSum) { .type = bt, .next = s->demand_head[k] };
                        s->demand_head[k] = *at = (uint32_t) s->n_demand++;
                }
                DemandSum *d = &s->demand[*at];
                d->by[b][0] += n * sh->req.v[SOLVER_RES_CPU];
                d->by[b][1] += n * sh->req.v[SOLVER_RES_MEMORY];
        }
        return 0;
}

int solver_budget_prepare(Solver *s) {
        solver_budget_done(s);
        size_t n = (size_t) s->n_pools * 2;
        s->unit_price = calloc(2 * n + 1, sizeof(double));
        s->to_place = calloc(2 * n + 1, sizeof(double));
        s->forced = calloc(n + 1, sizeof(int64_t));
        s->shape_left = calloc((size_t) s->n_shapes + 1, sizeof(int64_t));
        s->shape_var = calloc((size_t) s->n_shapes + 1, sizeof(Variant *));
        s->shape_best = calloc((size_t) s->n_shapes * s->n_pools + 1, sizeof(uint32_t));
        s->type_value = calloc((size_t) s->T + 1, sizeof(double));
        s->shape_bucket = calloc((size_t) s->n_shapes + 1, sizeof(uint8_t));
        s->demand_at = malloc((n * s->T + 1) * sizeof(uint32_t));
        s->demand_head = malloc((n + 1) * sizeof(uint32_t));
        if (!s->unit_price || !s->to_place || !s->forced || !s->shape_left || !s->shape_var || !s->shape_best ||
            !s->type_value || !s->shape_bucket || !s->demand_at || !s->demand_head)
                return -ENOMEM;
        memset(s->demand_at, 0xff, (n * s->T + 1) * sizeof(uint32_t));
        memset(s->demand_head, 0xff, (n + 1) * sizeof(uint32_t));
        for (size_t i = 0; i < s->n_heap; i++) {
                const Batch *b = &s->heap[i];
                const Shape *sh = &s->shapes[b->shape];
                Variant *v = solver_variant(s, b->shape, b->level);
                if (!v)
                        return -ENOMEM;
                if (v->unsupported)
                        continue;
                s->shape_left[b->shape] += b->n;
                if (!s->shape_var[b->shape])
                        s->shape_var[b->shape] = v;
                uint32_t per_node = solver_variant_max_per_node(s, v, NULL);
                for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                        PoolCompat *pc = solver_pool_compat(s, v, pi);
                        if (!pc->ok)
                                continue;
                        size_t k = (size_t) pi * 2 + (size_t) class_of_slots(pc->slots);
                        if (per_node > 0)
                                s->forced[k] = MAX(s->forced[k], ((int64_t) b->n + per_node - 1) / per_node);
                        s->to_place[2 * k] += (double) b->n * (double) sh->req.v[SOLVER_RES_CPU];
                        s->to_place[2 * k + 1] += (double) b->n * (double) sh->req.v[SOLVER_RES_MEMORY];
                }
        }
        for (size_t k = 0; k < n; k++) {
                const Pool *p = &s->pools[k / 2];
                int q = pool_unit_prices(s, p, class_price(p, (int) (k % 2)), s->to_place + 2 * k, s->unit_price + 2 * k);
                if (q < 0)
                        return q;
        }
        /* each shape's best-value type per pool: a node's budget counts the demand of the shapes
         * whose best type it may become (pods that would rather be elsewhere do not size it) */
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                if (s->shape_left[i] == 0)
                        continue;
                const Shape *sh = &s->shapes[i];
                s->shape_bucket[i] = (uint8_t) mix_bucket((double) sh->req.v[SOLVER_RES_CPU],
                                                          (double) sh->req.v[SOLVER_RES_MEMORY]);
                for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                        PoolCompat *pc = solver_pool_compat(s, s->shape_var[i], pi);
                        uint32_t *best_t = &s->shape_best[(size_t) i * s->n_pools + pi];
                        *best_t = NONE32;
                        if (!pc->ok)
                                continue;
                        const Pool *p = &s->pools[pi];
                        int cls = class_of_slots(pc->slots);
                        const double *price = class_price(p, cls), *y = s->unit_price + 2 * ((size_t) pi * 2 + (size_t) cls);
                        double best = INFINITY;
                        BS_FOREACH(t, pc->types, s->W) {
                                double room[2];
                                room_of(s, p, (uint32_t) t, room);
                                double value = y[0] * MAX(room[0], 0.0) + y[1] * MAX(room[1], 0.0);
                                if (price[t] <= 0 || value <= 0)
                                        continue;
                                double e = price[t] / value;
                                if (e < best * (1 - BUDGET_TIE) ||
                                    (e <= best * (1 + BUDGET_TIE) && price[t] > price[*best_t])) {
                                        best = MIN(best, e);
                                        *best_t = (uint32_t) t;
                                }
                        }
                }
                int q = demand_add(s, i, s->shape_left[i]);
                if (q < 0)
                        return q;
        }
        return 0;
}

void solver_budget_consume(Solver *s, Variant *v, int64_t m) {
        if (!s->to_place)
                return;
        const Shape *sh = &s->shapes[v->shape];
        int64_t left = MAX(s->shape_left[v->shape] - m, (int64_t) 0);
        (void) demand_add(s, v->shape, left - s->shape_left[v->shape]); /* falls: allocates nothing */
        s->shape_left[v->shape] = left;
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                PoolCompat *pc = solver_pool_compat(s, v, pi);
                if (!pc->ok)
                        continue;
                double *d = s->to_place + 2 * ((size_t) pi * 2 + (size_t) class_of_slots(pc->slots));
                d[0] = MAX(d[0] - (double) m * (double) sh->req.v[SOLVER_RES_CPU], 0.0);
                d[1] = MAX(d[1] - (double) m * (double) sh->req.v[SOLVER_RES_MEMORY], 0.0);
        }
}

/* The demand still to place of a node's shapes, by the ratio of their memory to their cpu: a
 * node of some type can hold only the mixes of them that fit it (600 pods of 1 vCPU / 2 GiB
 * leave half of an m6g's memory idle whatever its price per GiB). */
typedef struct Mix {
        double b[MIX_BUCKETS][2]; /* cpu and memory of the non-empty buckets, by rising memory:cpu */
        int n;
        bool on;
} Mix;

static int mix_bucket(double cpu, double mem) {
        if (cpu <= 0)
                return MIX_BUCKETS - 1;
        if (mem <= 0)
                return 0;
        /* half steps of log2(bytes per millicore) from 2^14 (16 MiB per vCPU) */
        int b = (int) floor(2 * (log2(mem / cpu) - 14));
        return MAX(0, MIN(b, MIX_BUCKETS - 1));
}

/* Where a boundary of the mixes the buckets can make (every bucket in part or whole, those leaning
 * to cpu first: dir 1; to memory first: dir -1) leaves the room: *ret_p, and which edge it
 * crosses (0: cpu, 1: memory, -1: none, the whole demand fits). Both coordinates grow along a
 * boundary, so on it the exit is the best point within the room. */
static int mix_exit(const Mix *mix, int dir, const double *room, double *ret_p) {
        double p[2] = {};
        for (int i = 0; i < mix->n; i++) {
                const double *g = mix->b[dir > 0 ? i : mix->n - 1 - i];
                double f = 1;
                int edge = -1;
                for (int r = 0; r < 2; r++)
                        if (p[r] + g[r] > room[r] && (room[r] - p[r]) / g[r] < f) {
                                f = (room[r] - p[r]) / g[r];
                                edge = r;
                        }
                ret_p[0] = p[0] + f * g[0];
                ret_p[1] = p[1] + f * g[1];
                if (edge >= 0)
                        return edge;
                p[0] = ret_p[0], p[1] = ret_p[1];
        }
        ret_p[0] = p[0], ret_p[1] = p[1];
        return -1;
}

/* The most value at unit prices y that a node with this room gets from the mix's demand. The
 * mixes form a region between a convex lower boundary (cpu-leaning shapes first) and a concave
 * upper one; an LP's best over that region within the room is the room's corner when the
 * corner lies between them (the lower boundary leaves through the cpu edge, the upper through
 * the memory edge: the node can be filled exactly), else the better of the two exits. */
static double mix_value(const Mix *mix, const double *y, const double *room) {
        double lo[2], hi[2];
        int el = mix_exit(mix, 1, room, lo), eh = mix_exit(mix, -1, room, hi);
        if (el == 0 && eh == 1)
                return y[0] * room[0] + y[1] * room[1];
        return MAX(y[0] * lo[0] + y[1] * lo[1], y[0] * hi[0] + y[1] * hi[1]);
}

static double type_value(const Solver *s, const Pool *p, uint32_t t, const double *y, const double *d, const Mix *mix) {
        double room[2];
        room_of(s, p, t, room);
        if (mix->on && room[0] > 0 && room[1] > 0)
                return mix_value(mix, y, room);
        return y[0] * MIN(MAX(room[0], 0.0), MAX(d[0], 1.0)) + y[1] * MIN(MAX(room[1], 0.0), MAX(d[1], 1.0));
}

/* The price of the cheapest type of the set with room for demand d, or < 0. */
static double cheapest_holding(const Solver *s, const Pool *p, const double *price, const uint64_t *types,
                               const double *d) {
        double best = -1;
        BS_FOREACH(t, types, s->W) {
                double room[2];
                if (price[t] <= 0 || (best > 0 && price[t] >= best))
                        continue;
                room_of(s, p, (uint32_t) t, room);
                if (room[0] >= d[0] && room[1] >= d[1])
                        best = price[t];
        }
        return best;
}

/* What is left to place of the shapes whose best-value type the node may become, and of the
 * shape that opens it. The sums are of whole millicores and bytes, exact in any order: they
 * are kept per pool, class and best type as pods are placed, as a walk over every shape for
 * each new node was most of a plan's time with thousands of shapes. */
static void node_demand(Solver *s, uint32_t pi, int cls, const Variant *seed, const uint64_t *types,
                        double *ret, Mix *mix) {
        int64_t by[MIX_BUCKETS][2] = {};
        for (uint32_t e = s->demand_head[(size_t) pi * 2 + (size_t) cls]; e != NONE32; e = s->demand[e].next) {
                const DemandSum *d = &s->demand[e];
                if (!bs_test(types, d->type))
                        continue;
                for (int b = 0; b < MIX_BUCKETS; b++) {
                        by[b][0] += d->by[b][0];
                        by[b][1] += d->by[b][1];
                }
        }
        uint32_t i = seed->shape;
        if (s->shape_left[i] > 0 && s->shape_var[i]) {
                uint32_t bt = s->shape_best[(size_t) i * s->n_pools + pi];
                if (bt == NONE32 || !bs_test(types, bt) || class_of_slots(s->shape_var[i]->pools[pi].slots) != cls) {
                        const Shape *sh = &s->shapes[i];
                        by[s->shape_bucket[i]][0] += s->shape_left[i] * sh->req.v[SOLVER_RES_CPU];
                        by[s->shape_bucket[i]][1] += s->shape_left[i] * sh->req.v[SOLVER_RES_MEMORY];
                }
        }
        ret[0] = ret[1] = 0;
        mix->n = 0;
        for (int b = 0; b < MIX_BUCKETS; b++)
                if (by[b][0] > 0 || by[b][1] > 0) {
                        ret[0] += (double) by[b][0];
                        ret[1] += (double) by[b][1];
                        mix->b[mix->n][0] = (double) by[b][0];
                        mix->b[mix->n++][1] = (double) by[b][1];
                }
}

bool solver_budget_apply(Solver *s, uint32_t pi, const Variant *seed, uint64_t slots, const uint64_t *types,
                  uint64_t *ret_budget) {
        if (!s->unit_price)
                return false;
        const Pool *p = &s->pools[pi];
        int cls = class_of_slots(slots);
        size_t k = (size_t) pi * 2 + (size_t) cls;
        const double *y = s->unit_price + 2 * k, *price = class_price(p, cls);
        if (y[0] <= 0 && y[1] <= 0)
                return false;
        /* hostname rules that force N nodes: each new node expects its share of the demand */
        double share = (double) MAX(s->forced[k]--, (int64_t) 1), d[2];
        Mix mix = {};
        node_demand(s, pi, cls, seed, types, d, &mix);
        d[0] /= share;
        d[1] /= share;
        for (int b = 0; b < mix.n; b++)
                for (int r = 0; r < 2; r++)
                        mix.b[b][r] /= share;
        mix.on = true;
        /* fewer, bigger nodes when asked: each remaining node holds its share of the demand */
        uint64_t *cand = s->scratch + 7 * s->W;
        bs_copy(cand, types, s->W);
        if (s->opts->target_nodes > 0) {
                double left = (double) (s->opts->target_nodes > s->new_nodes ? s->opts->target_nodes - s->new_nodes : 1);
                double need[2] = { s->to_place[2 * k] / left, s->to_place[2 * k + 1] / left }, most = 0;
                BS_FOREACH(t, types, s->W) {
                        double room[2];
                        room_of(s, p, (uint32_t) t, room);
                        if (room[0] < need[0] || room[1] < need[1]) {
                                cand[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                                most = MAX(most, price[t]);
                        }
                }
                if (!bs_any(cand, s->W)) { /* none is that big: the largest may do */
                        bs_copy(ret_budget, types, s->W);
                        return true;
                }
                d[0] = MAX(d[0], need[0]);
                d[1] = MAX(d[1], need[1]);
                mix.on = false; /* sized by the share asked for, not by the mix */
        }
        /* the best price per value, ties to the larger type */
        double best = INFINITY, cap = 0;
        uint32_t tb = NONE32;
        double *val = s->type_value;
        BS_FOREACH(t, cand, s->W) {
                double value = val[t] = price[t] > 0 ? type_value(s, p, (uint32_t) t, y, d, &mix) : 0;
                if (price[t] > 0 && value > 0 && price[t] / value < best)
                        best = price[t] / value;
        }
        if (!isfinite(best))
                return false;
        BS_FOREACH(t, cand, s->W) {
                double value = val[t];
                if (price[t] > 0 && price[t] > cap && value > 0 && price[t] / value <= best * (1 + BUDGET_TIE)) {
                        cap = price[t];
                        tb = (uint32_t) t;
                }
        }
        /* the last nodes: one type holding everything left may cost less than filling nodes
         * of the best-value type and buying the cheapest type that holds the remainder */
        double room[2];
        room_of(s, p, tb, room);
        if (room[0] < d[0] || room[1] < d[1]) {
                double all = cheapest_holding(s, p, price, cand, d);
                if (all > 0) {
                        double n = 1;
                        for (int r = 0; r < 2; r++)
                                if (room[r] > 0)
                                        n = MAX(n, ceil(d[r] / room[r]));
                        double rest[2] = { MAX(d[0] - (n - 1) * room[0], 0.0), MAX(d[1] - (n - 1) * room[1], 0.0) };
                        double last = cheapest_holding(s, p, price, cand, rest);
                        double fill = (n - 1) * cap + (last > 0 ? last : cap);
                        if (all <= fill)
                                cap = all;
                }
        }
        bs_copy(ret_budget, types, s->W);
        BS_FOREACH(t, types, s->W)
                if (price[t] <= 0 || price[t] > cap * (1 + 1e-9))
                        ret_budget[t / 64] &= ~(((uint64_t) 1) << (t % 64));
        return true;
}

void solver_budget_done(Solver *s) {
        free(s->unit_price);
        free(s->to_place);
        free(s->forced);
        free(s->shape_left);
        free(s->shape_var);
        free(s->shape_best);
        free(s->type_value);
        free(s->shape_bucket);
        free(s->demand);
        free(s->demand_at);
        free(s->demand_head);
        s->shape_bucket = NULL;
        s->demand = NULL;
        s->demand_at = s->demand_head = NULL;
        s->n_demand = s->cap_demand = 0;
        s->type_value = NULL;
        s->unit_price = s->to_place = NULL;
        s->forced = s->shape_left = NULL;
        s->shape_var = NULL;
        s->shape_best = NULL;
}
