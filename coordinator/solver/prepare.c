/* SPDX-License-Identifier: Apache-2.0 */
/* Compiling a snapshot: interned labels, instance-type bitsets, pools, shapes, topology groups,
 * existing nodes. Everything here is computed once per Solver (variants lazily). */

#include <inttypes.h>
#include <stdio.h>

#include "macro.h"
#include "solver-internal.h"

/* ---- small helpers -------------------------------------------------------------------------- */

static int key_id(Solver *s, const char *key, uint32_t *ret) {
        return solver_intern_get(&s->keys, solver_canonical_label_key(key), ret);
}

static const char *type_label(const Solver *s, uint32_t row, uint32_t t) {
        uint32_t v = s->type_vals[(size_t) row * s->T + t];
        return v == NONE32 ? NULL : s->vals.strs[v];
}

/* Row of a type key in type_vals, or NONE32. */
static uint32_t type_row(const Solver *s, uint32_t key) {
        if (key >= s->n_type_keys_cap || !s->type_key[key])
                return NONE32;
        return key;
}

void solver_fit_set(const Solver *s, const FitTable *f, const int64_t *demand, uint64_t *out) {
        bs_copy(out, s->all_types, s->W);
        for (int r = 0; r < R_MAX; r++) {
                int64_t d = demand[r];
                if (d <= 0)
                        continue;
                uint32_t lo = 0, hi = f->nvals[r];
                const int64_t *v = f->vals[r];
                while (lo < hi) {
                        uint32_t mid = (lo + hi) / 2;
                        if (v[mid] < d)
                                lo = mid + 1;
                        else
                                hi = mid;
                }
                if (lo == f->nvals[r]) {
                        memset(out, 0, s->W * sizeof(uint64_t));
                        return;
                }
                bs_and(out, f->ge[r] + (size_t) lo * s->W, s->W);
        }
}

uint64_t *solver_offer_set(const Solver *s, uint64_t slots, uint64_t *out) {
        memset(out, 0, s->W * sizeof(uint64_t));
        for (uint64_t b = slots; b; b &= b - 1) {
                const uint64_t *o = s->offer_bits + (size_t) __builtin_ctzll(b) * s->W;
                for (uint32_t i = 0; i < s->W; i++)
                        out[i] |= o[i];
        }
        return out;
}

static int cmp_i64(const void *a, const void *b) {
        int64_t x = *(const int64_t *) a, y = *(const int64_t *) b;
        return x < y ? -1 : x > y;
}

static int fit_table_get(Solver *s, const SolverResources *alloc, size_t stride, FitTable **ret) {
        for (uint32_t i = 0; i < s->n_fits; i++)
                if (s->fits[i]->alloc_of == alloc && s->fits[i]->stride == stride) {
                        *ret = s->fits[i];
                        return 0;
                }
        FitTable *f = solver_arena_alloc(s->arena, sizeof(FitTable));
        FitTable **nf = solver_arena_realloc(s->arena, s->fits, s->n_fits * sizeof(FitTable *),
                                             (s->n_fits + 1) * sizeof(FitTable *));
        if (!f || !nf)
                return -ENOMEM;
        s->fits = nf;
        s->fits[s->n_fits++] = f;
        f->alloc_of = alloc;
        f->stride = stride;
        size_t T = s->T, W = s->W;
        f->alloc = solver_arena_alloc(s->arena, T * R_MAX * sizeof(int64_t) + 8);
        int64_t *tmp = malloc((T + 1) * sizeof(int64_t));
        if (!f->alloc || !tmp) {
                free(tmp);
                return -ENOMEM;
        }
        for (size_t t = 0; t < T; t++) {
                const SolverResources *a = (const SolverResources *) ((const char *) alloc + t * stride);
                for (int r = 0; r < R_MAX; r++)
                        f->alloc[t * R_MAX + r] = MAX(a->v[r], 0);
        }
        for (int r = 0; r < R_MAX; r++) {
                for (size_t t = 0; t < T; t++)
                        tmp[t] = f->alloc[t * R_MAX + r];
                qsort(tmp, T, sizeof(int64_t), cmp_i64);
                uint32_t n = 0;
                for (size_t t = 0; t < T; t++)
                        if (n == 0 || tmp[n - 1] != tmp[t])
                                tmp[n++] = tmp[t];
                f->nvals[r] = n;
                f->vals[r] = solver_arena_alloc(s->arena, (n + 1) * sizeof(int64_t));
                f->ge[r] = solver_arena_alloc(s->arena, ((size_t) n * W + 1) * sizeof(uint64_t));
                if (!f->vals[r] || !f->ge[r]) {
                        free(tmp);
                        return -ENOMEM;
                }
                memcpy(f->vals[r], tmp, n * sizeof(int64_t));
                /* ge[k] = types with alloc >= vals[k]: set bit t in ge[0..rank(t)]. */
                for (size_t t = 0; t < T; t++) {
                        int64_t a = f->alloc[t * R_MAX + r];
                        uint32_t lo = 0, hi = n;
                        while (lo < hi) {
                                uint32_t mid = (lo + hi) / 2;
                                if (tmp[mid] < a)
                                        lo = mid + 1;
                                else
                                        hi = mid;
                        }
                        /* tmp[lo] == a */
                        bs_set(f->ge[r] + (size_t) lo * W, t);
                }
                for (uint32_t k = n; k-- > 1;)
                        for (size_t i = 0; i < W; i++)
                                f->ge[r][(size_t) (k - 1) * W + i] |= f->ge[r][(size_t) k * W + i];
        }
        free(tmp);
        *ret = f;
        return 0;
}

/* ---- requirements --------------------------------------------------------------------------- */

typedef struct CReqs {
        uint64_t *types;
        uint64_t slots;
        bool new_nodes_ok;
        bool custom_empty;
        VSetList custom;
        const SolverRequirement **pool_reqs;
        uint32_t n_pool_reqs;
        const SolverRequirement *empty_by; /* requirement that emptied types or slots */
} CReqs;

static int compile_reqs(Solver *s, const SolverRequirement *const *reqs, size_t n, CReqs *c) {
        *c = (CReqs) { .slots = ~(uint64_t) 0, .new_nodes_ok = true };
        c->types = solver_arena_alloc_nozero(s->arena, s->W * sizeof(uint64_t));
        if (!c->types)
                return -ENOMEM;
        bs_copy(c->types, s->all_types, s->W);
        if (n > 0) {
                c->pool_reqs = solver_arena_alloc(s->arena, n * sizeof(void *));
                if (!c->pool_reqs)
                        return -ENOMEM;
        }
        /* restrict slots to known zones */
        uint32_t zall = s->n_zones >= 32 ? 0xffffffffu : ((1u << s->n_zones) - 1);
        c->slots = slots_of_zones(zall);

        for (size_t i = 0; i < n; i++) {
                const SolverRequirement *r = reqs[i];
                uint32_t k;
                int q = key_id(s, r->key, &k);
                if (q < 0)
                        return q;
                if (k == s->k_zone) {
                        uint32_t m = 0;
                        for (uint32_t z = 0; z < s->n_zones; z++)
                                if (solver_req_value_matches(r, s->zones[z]))
                                        m |= 1u << z;
                        c->slots &= slots_of_zones(m);
                } else if (k == s->k_ct) {
                        uint64_t m = 0;
                        for (int ct = 0; ct < NCT; ct++)
                                if (solver_req_value_matches(r, solver_capacity_type_to_name(ct)))
                                        m |= slots_of_ct(ct);
                        c->slots &= m;
                } else if (k == s->k_host) {
                        if (r->op != SOLVER_OP_NOT_IN && r->op != SOLVER_OP_EXISTS)
                                c->new_nodes_ok = false;
                        continue;
                } else if (k == s->k_pool) {
                        c->pool_reqs[c->n_pool_reqs++] = r;
                        continue;
                } else if (type_row(s, k) != NONE32) {
                        uint32_t row = type_row(s, k);
                        for (uint32_t t = 0; t < s->T; t++)
                                if (bs_test(c->types, t) && !solver_req_value_matches(r, type_label(s, row, t)))
                                        c->types[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                        if (!bs_any(c->types, s->W) && !c->empty_by)
                                c->empty_by = r;
                        continue;
                } else {
                        VSet v;
                        q = solver_vset_from_requirement(s, r, k, &v);
                        if (q < 0)
                                return q;
                        q = solver_vsetlist_add(s, &c->custom, &v);
                        if (q == -ENOENT)
                                c->custom_empty = true;
                        else if (q < 0)
                                return q;
                        continue;
                }
                if (c->slots == 0 && !c->empty_by)
                        c->empty_by = r;
        }
        return 0;
}

static const char *describe_req(SolverArena *a, const SolverRequirement *r) {
        char buf[512];
        size_t o = (size_t) snprintf(buf, sizeof(buf), "%s %s", r->key, solver_operator_to_name(r->op));
        if (r->n_values > 0 && o < sizeof(buf)) {
                o += (size_t) snprintf(buf + o, sizeof(buf) - o, " [");
                for (size_t i = 0; i < r->n_values && o < sizeof(buf) - 8; i++)
                        o += (size_t) snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? "," : "",
                                               r->values[i]);
                if (o < sizeof(buf) - 2)
                        snprintf(buf + o, sizeof(buf) - o, "]");
        }
        return solver_arena_strdup(a, buf);
}

/* ---- catalog -------------------------------------------------------------------------------- */

static int zone_index(Solver *s, const char *zone, bool add) {
        if (isempty(zone))
                return NO_ZONE;
        for (uint32_t z = 0; z < s->n_zones; z++)
                if (streq(s->zones[z], zone))
                        return (int) z;
        if (!add)
                return NO_ZONE;
        if (s->n_zones >= SOLVER_MAX_ZONES)
                return -E2BIG;
        s->zones[s->n_zones] = solver_arena_strdup(s->arena, zone);
        if (!s->zones[s->n_zones])
                return -ENOMEM;
        int q = solver_intern_get(&s->vals, zone, &s->zone_ids[s->n_zones]);
        if (q < 0)
                return q;
        return (int) s->n_zones++;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static const char *node_zone_name(const SolverNode *n) {
        if (!isempty(n->zone))
                return n->zone;
        for (size_t i = 0; i < n->n_labels; i++)
                if (streq(solver_canonical_label_key(n->labels[i].key), SOLVER_LABEL_ZONE))
                        return n->labels[i].value;
        return NULL;
}

static int compile_catalog(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        int q;

        /* Zones, sorted by name so that indices do not depend on input order. */
        size_t nz = 0, capz = 64;
        const char **zs = malloc(capz * sizeof(char *));
        if (!zs)
                return -ENOMEM;
        for (size_t t = 0; t < snap->n_types; t++)
                for (size_t o = 0; o < snap->types[t].n_offerings; o++) {
                        if (nz == capz) {
                                capz *= 2;
                                const char **n = realloc(zs, capz * sizeof(char *));
                                if (!n) {
                                        free(zs);
                                        return -ENOMEM;
                                }
                                zs = n;
                        }
                        if (!isempty(snap->types[t].offerings[o].zone))
                                zs[nz++] = snap->types[t].offerings[o].zone;
                }
        for (size_t i = 0; i < snap->n_nodes; i++) {
                if (nz == capz) {
                        capz *= 2;
                        const char **n = realloc(zs, capz * sizeof(char *));
                        if (!n) {
                                free(zs);
                                return -ENOMEM;
                        }
                        zs = n;
                }
                const char *z = node_zone_name(&snap->nodes[i]);
                if (!isempty(z))
                        zs[nz++] = z;
        }
        qsort(zs, nz, sizeof(char *), cmp_str);
        for (size_t i = 0; i < nz; i++) {
                if (i > 0 && streq(zs[i], zs[i - 1]))
                        continue;
                q = zone_index(s, zs[i], true);
                if (q < 0) {
                        free(zs);
                        return q;
                }
        }
        free(zs);

        s->T = (uint32_t) snap->n_types;
        s->W = (s->T + 63) / 64;
        if (s->W == 0)
                s->W = 1;
        size_t W = s->W, T = s->T;
        s->all_types = solver_arena_alloc(s->arena, W * sizeof(uint64_t));
        s->offer_bits = solver_arena_alloc(s->arena, 64 * W * sizeof(uint64_t));
        s->price = solver_arena_alloc_nozero(s->arena, (T * 64 + 1) * sizeof(double));
        s->type_slots = solver_arena_alloc(s->arena, (T + 1) * sizeof(uint64_t));
        if (!s->all_types || !s->offer_bits || !s->price || !s->type_slots)
                return -ENOMEM;
        bs_fill(s->all_types, W, T);
        if (T == 0)
                s->all_types[0] = 0;
        for (size_t i = 0; i < T * 64; i++)
                s->price[i] = -1;

        /* Type keys: every label key any type defines, plus the instance-type key. */
        for (size_t t = 0; t < T; t++) {
                const SolverInstanceType *it = &snap->types[t];
                if (isempty(it->name))
                        return -EINVAL;
                for (size_t l = 0; l < it->n_labels; l++) {
                        uint32_t k;
                        q = key_id(s, it->labels[l].key, &k);
                        if (q < 0)
                                return q;
                }
        }
        s->n_type_keys_cap = (uint32_t) s->keys.n;
        s->type_key = solver_arena_alloc(s->arena, s->n_type_keys_cap + 1);
        s->type_vals = solver_arena_alloc_nozero(s->arena, ((size_t) s->n_type_keys_cap * T + 1) * sizeof(uint32_t));
        if (!s->type_key || !s->type_vals)
                return -ENOMEM;
        memset(s->type_vals, 0xff, (size_t) s->n_type_keys_cap * T * sizeof(uint32_t));
        for (size_t t = 0; t < T; t++) {
                const SolverInstanceType *it = &snap->types[t];
                uint32_t v;
                q = solver_intern_get(&s->vals, it->name, &v);
                if (q < 0)
                        return q;
                s->type_key[s->k_type] = true;
                s->type_vals[(size_t) s->k_type * T + t] = v;
                for (size_t l = 0; l < it->n_labels; l++) {
                        uint32_t k;
                        q = key_id(s, it->labels[l].key, &k);
                        if (q < 0)
                                return q;
                        if (k == s->k_zone || k == s->k_ct || k == s->k_host || k == s->k_pool)
                                continue;
                        q = solver_intern_get(&s->vals, it->labels[l].value ? it->labels[l].value : "", &v);
                        if (q < 0)
                                return q;
                        s->type_key[k] = true;
                        s->type_vals[(size_t) k * T + t] = v;
                }
                for (size_t o = 0; o < it->n_offerings; o++) {
                        const SolverOffering *of = &it->offerings[o];
                        int z = zone_index(s, of->zone, false);
                        if (z < 0 || (unsigned) of->capacity_type >= NCT || !of->available)
                                continue;
                        if (of->price < 0)
                                return -EINVAL;
                        unsigned slot = (unsigned) of->capacity_type * 32 + (unsigned) z;
                        double *p = &s->price[t * 64 + slot];
                        if (*p < 0 || of->price < *p)
                                *p = of->price;
                        s->type_slots[t] |= ((uint64_t) 1) << slot;
                        bs_set(s->offer_bits + (size_t) slot * W, t);
                }
        }
        double cpu = 0, mem = 0;
        for (size_t t = 0; t < T; t++) {
                cpu += (double) MAX(snap->types[t].allocatable.v[SOLVER_RES_CPU], 0);
                mem += (double) MAX(snap->types[t].allocatable.v[SOLVER_RES_MEMORY], 0);
        }
        s->mem_weight = mem > 0 && cpu > 0 ? cpu / mem : 1.0 / (2.0 * 1024 * 1024); /* 1 vCPU : 2 GiB */
        return 0;
}

/* ---- pools ---------------------------------------------------------------------------------- */

static int pool_reqs_ok(const Solver *s, const SolverRequirement *const *reqs, uint32_t n, const char *pool) {
        for (uint32_t i = 0; i < n; i++)
                if (!solver_req_value_matches(reqs[i], pool))
                        return false;
        return true;
}

static int cmp_pool_order(const void *a, const void *b, void *u) {
        const Solver *s = u;
        const SolverNodePool *x = &s->snap->nodepools[*(const uint32_t *) a];
        const SolverNodePool *y = &s->snap->nodepools[*(const uint32_t *) b];
        if (x->weight != y->weight)
                return x->weight > y->weight ? -1 : 1;
        return strcmp(x->name, y->name);
}

static int cmp_price_order(const void *a, const void *b, void *u) {
        const double *best = u;
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        if (best[x] != best[y])
                return best[x] < best[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

/* Types of the pool by their cheapest offering: the first one a node can still become is what
 * it costs now. */
static int pool_price_order(Solver *s, Pool *p) {
        double *best = solver_arena_alloc_nozero(s->arena, (s->T + 1) * sizeof(double));
        p->price_order = solver_arena_alloc_nozero(s->arena, (s->T + 1) * sizeof(uint32_t));
        if (!best || !p->price_order)
                return -ENOMEM;
        p->tprice = best;
        p->odprice = solver_arena_alloc_nozero(s->arena, (s->T + 1) * sizeof(double));
        if (!p->odprice)
                return -ENOMEM;
        for (uint32_t t = 0; t < s->T; t++) {
                best[t] = -1;
                for (uint64_t b = p->slots & s->type_slots[t]; b; b &= b - 1) {
                        double pr = s->price[(size_t) t * 64 + (unsigned) __builtin_ctzll(b)];
                        if (pr >= 0 && (best[t] < 0 || pr < best[t]))
                                best[t] = pr;
                }
                p->odprice[t] = -1;
                for (uint64_t b = p->slots & s->type_slots[t] & slots_of_ct(SOLVER_CAPACITY_ON_DEMAND); b; b &= b - 1) {
                        double pr = s->price[(size_t) t * 64 + (unsigned) __builtin_ctzll(b)];
                        if (pr >= 0 && (p->odprice[t] < 0 || pr < p->odprice[t]))
                                p->odprice[t] = pr;
                }
                if (best[t] >= 0 && bs_test(p->types, t))
                        p->price_order[p->n_price_order++] = t;
        }
        qsort_r(p->price_order, p->n_price_order, sizeof(uint32_t), cmp_price_order, best);
        return 0;
}

static int compile_pools(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        s->n_pools = (uint32_t) snap->n_nodepools;
        s->pools = solver_arena_alloc(s->arena, (s->n_pools + 1) * sizeof(Pool));
        s->pool_order = solver_arena_alloc(s->arena, (s->n_pools + 1) * sizeof(uint32_t));
        if (!s->pools || !s->pool_order)
                return -ENOMEM;
        int q;
        for (uint32_t i = 0; i < s->n_pools; i++) {
                const SolverNodePool *np = &snap->nodepools[i];
                Pool *p = &s->pools[i];
                p->np = np;
                p->index = i;
                s->pool_order[i] = i;
                if (isempty(np->name))
                        return -EINVAL;
                for (uint32_t j = 0; j < i; j++)
                        if (streq(snap->nodepools[j].name, np->name))
                                return -EEXIST;
                const SolverRequirement **rl = solver_arena_alloc(s->arena, (np->n_requirements + 1) * sizeof(void *));
                if (!rl)
                        return -ENOMEM;
                for (size_t r = 0; r < np->n_requirements; r++)
                        rl[r] = &np->requirements[r];
                CReqs c;
                q = compile_reqs(s, rl, np->n_requirements, &c);
                if (q < 0)
                        return q;
                p->types = c.types;
                p->slots = c.slots;
                p->custom = c.custom;
                if (c.custom_empty)
                        p->slots = 0; /* contradictory requirements: the pool can launch nothing */
                /* labels become single-valued custom sets */
                for (size_t l = 0; l < np->n_labels; l++) {
                        uint32_t k;
                        q = key_id(s, np->labels[l].key, &k);
                        if (q < 0)
                                return q;
                        if (k == s->k_zone || k == s->k_ct || k == s->k_host || k == s->k_pool ||
                            type_row(s, k) != NONE32)
                                continue;
                        SolverRequirement lr = { .key = np->labels[l].key, .op = SOLVER_OP_IN,
                                                 .values = &np->labels[l].value, .n_values = 1 };
                        VSet v;
                        q = solver_vset_from_requirement(s, &lr, k, &v);
                        if (q < 0)
                                return q;
                        q = solver_vsetlist_add(s, &p->custom, &v);
                        if (q == -ENOENT)
                                p->slots = 0;
                        else if (q < 0)
                                return q;
                }
                if (!isempty(np->node_class)) {
                        uint32_t k;
                        q = key_id(s, "nodesmith.io/ec2nodeclass", &k);
                        if (q < 0)
                                return q;
                        SolverRequirement lr = { .key = "nodesmith.io/ec2nodeclass", .op = SOLVER_OP_IN,
                                                 .values = &np->node_class, .n_values = 1 };
                        VSet v;
                        q = solver_vset_from_requirement(s, &lr, k, &v);
                        if (q < 0)
                                return q;
                        q = solver_vsetlist_add(s, &p->custom, &v);
                        if (q < 0 && q != -ENOENT)
                                return q;
                }
                if (c.n_pool_reqs > 0 && !pool_reqs_ok(s, c.pool_reqs, c.n_pool_reqs, np->name))
                        p->slots = 0;
                if (s->T > 0) {
                        q = fit_table_get(s, np->allocatable ? np->allocatable : &snap->types[0].allocatable,
                                          np->allocatable ? sizeof(SolverResources) : sizeof(SolverInstanceType),
                                          &p->fit);
                        if (q < 0)
                                return q;
                }
                for (int r = 0; r < R_MAX; r++)
                        if (np->limits.v[r] >= 0 && r != SOLVER_RES_OTHER)
                                p->has_limits = true;
                p->remaining = np->limits;
                p->nodes_left = np->has_node_limit ? np->node_limit : INT64_MAX;
                /* minValues on type keys */
                for (size_t r = 0; r < np->n_requirements; r++) {
                        uint32_t k;
                        q = key_id(s, np->requirements[r].key, &k);
                        if (q < 0)
                                return q;
                        if (np->requirements[r].min_values > 0 && type_row(s, k) != NONE32)
                                p->n_minv++;
                }
                if (p->n_minv > 0) {
                        p->has_min_values = true;
                        p->minv = solver_arena_alloc(s->arena, p->n_minv * sizeof(void *));
                        p->minv_key = solver_arena_alloc(s->arena, p->n_minv * sizeof(uint32_t));
                        if (!p->minv || !p->minv_key)
                                return -ENOMEM;
                        uint32_t m = 0;
                        for (size_t r = 0; r < np->n_requirements; r++) {
                                uint32_t k;
                                q = key_id(s, np->requirements[r].key, &k);
                                if (q < 0)
                                        return q;
                                if (np->requirements[r].min_values > 0 && type_row(s, k) != NONE32) {
                                        p->minv[m] = &np->requirements[r];
                                        p->minv_key[m++] = k;
                                }
                        }
                }
                for (size_t t = 0; t < np->n_taints; t++)
                        if (np->taints[t].effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE)
                                s->any_prefer_no_schedule = true;
                q = pool_price_order(s, p);
                if (q < 0)
                        return q;
        }
        qsort_r(s->pool_order, s->n_pools, sizeof(uint32_t), cmp_pool_order, s);
        return 0;
}

/* Number of distinct values of the pool's minValues keys among types: all must reach their
 * minimum. */
bool solver_pool_min_values_ok(Solver *s, const Pool *p, const uint64_t *types) {
        for (uint32_t m = 0; m < p->n_minv; m++) {
                int32_t need = p->minv[m]->min_values;
                uint32_t row = p->minv_key[m];
                if (++s->stamp_gen == 0) {
                        memset(s->stamp, 0, s->stamp_cap * sizeof(uint32_t));
                        s->stamp_gen = 1;
                }
                int32_t have = 0;
                BS_FOREACH(t, types, s->W) {
                        uint32_t v = s->type_vals[(size_t) row * s->T + t];
                        if (v == NONE32 || v >= s->stamp_cap)
                                continue;
                        if (s->stamp[v] != s->stamp_gen) {
                                s->stamp[v] = s->stamp_gen;
                                if (++have >= need)
                                        break;
                        }
                }
                if (have < need)
                        return false;
        }
        return true;
}

/* ---- shapes --------------------------------------------------------------------------------- */

typedef struct Buf {
        char *p;
        size_t n, cap;
        bool oom;
} Buf;

static void buf_add(Buf *b, const void *d, size_t n) {
        if (b->oom)
                return;
        if (b->n + n + 1 > b->cap) {
                size_t nc = MAX(b->cap * 2, b->n + n + 256);
                char *np = realloc(b->p, nc);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = nc;
        }
        memcpy(b->p + b->n, d, n);
        b->n += n;
        b->p[b->n] = 0;
}

static void buf_str(Buf *b, const char *s) {
        /* strings cannot contain \x01; use it as a terminator, and \x02 for NULL */
        if (!s)
                buf_add(b, "\x02", 1);
        else {
                buf_add(b, s, strlen(s));
                buf_add(b, "\x01", 1);
        }
}

static void buf_i64(Buf *b, int64_t v) {
        char t[24];
        int n = snprintf(t, sizeof(t), "%" PRId64 ",", v);
        buf_add(b, t, (size_t) n);
}

static int cmp_label_ptr(const void *a, const void *b) {
        const SolverLabel *x = *(const SolverLabel *const *) a, *y = *(const SolverLabel *const *) b;
        int c = strcmp(x->key ? x->key : "", y->key ? y->key : "");
        return c ? c : strcmp(x->value ? x->value : "", y->value ? y->value : "");
}

static void buf_labels(Buf *b, const SolverLabel *l, size_t n) {
        const SolverLabel *stack[16];
        const SolverLabel **p = n <= 16 ? stack : malloc(n * sizeof(void *));
        if (!p) {
                b->oom = true;
                return;
        }
        for (size_t i = 0; i < n; i++)
                p[i] = &l[i];
        qsort(p, n, sizeof(void *), cmp_label_ptr);
        buf_i64(b, (int64_t) n);
        for (size_t i = 0; i < n; i++) {
                buf_str(b, p[i]->key);
                buf_str(b, p[i]->value);
        }
        if (p != stack)
                free(p);
}

static void buf_req(Buf *b, const SolverRequirement *r) {
        buf_str(b, r->key);
        buf_i64(b, r->op);
        buf_i64(b, r->min_values);
        buf_i64(b, (int64_t) r->n_values);
        for (size_t i = 0; i < r->n_values; i++)
                buf_str(b, r->values[i]);
}

static void buf_term(Buf *b, const SolverTerm *t) {
        buf_i64(b, (int64_t) t->n_reqs);
        for (size_t i = 0; i < t->n_reqs; i++)
                buf_req(b, &t->reqs[i]);
}

static void buf_selector(Buf *b, const SolverLabelSelector *s) {
        buf_labels(b, s->match_labels, s->n_match_labels);
        buf_i64(b, (int64_t) s->n_exprs);
        for (size_t i = 0; i < s->n_exprs; i++)
                buf_req(b, &s->exprs[i]);
}

static void buf_affinity(Buf *b, const SolverPodAffinityTerm *t, size_t n) {
        buf_i64(b, (int64_t) n);
        for (size_t i = 0; i < n; i++) {
                buf_str(b, t[i].topology_key);
                buf_selector(b, &t[i].selector);
                buf_i64(b, (int64_t) t[i].n_namespaces);
                for (size_t j = 0; j < t[i].n_namespaces; j++)
                        buf_str(b, t[i].namespaces[j]);
                buf_i64(b, t[i].all_namespaces);
                buf_i64(b, t[i].weight);
        }
}

static void pod_signature(Buf *b, const SolverPod *p) {
        b->n = 0;
        buf_str(b, p->namespace_ ? p->namespace_ : "default");
        buf_labels(b, p->labels, p->n_labels);
        for (int r = 0; r < R_MAX; r++)
                if (r != SOLVER_RES_PODS)
                        buf_i64(b, p->requests.v[r]);
        buf_i64(b, p->priority);
        buf_i64(b, p->preempt_never);
        buf_labels(b, p->node_selector, p->n_node_selector);
        buf_i64(b, (int64_t) p->n_required_terms);
        for (size_t i = 0; i < p->n_required_terms; i++)
                buf_term(b, &p->required_terms[i]);
        buf_i64(b, (int64_t) p->n_preferred_terms);
        for (size_t i = 0; i < p->n_preferred_terms; i++) {
                buf_i64(b, p->preferred_terms[i].weight);
                buf_term(b, &p->preferred_terms[i].term);
        }
        buf_i64(b, (int64_t) p->n_tolerations);
        for (size_t i = 0; i < p->n_tolerations; i++) {
                buf_str(b, p->tolerations[i].key);
                buf_i64(b, p->tolerations[i].exists);
                buf_str(b, p->tolerations[i].value);
                buf_i64(b, p->tolerations[i].effect);
        }
        buf_i64(b, (int64_t) p->n_spreads);
        for (size_t i = 0; i < p->n_spreads; i++) {
                buf_str(b, p->spreads[i].topology_key);
                buf_i64(b, p->spreads[i].max_skew);
                buf_i64(b, p->spreads[i].schedule_anyway);
                buf_i64(b, p->spreads[i].min_domains);
                buf_selector(b, &p->spreads[i].selector);
        }
        buf_affinity(b, p->affinity, p->n_affinity);
        buf_affinity(b, p->anti_affinity, p->n_anti_affinity);
        buf_affinity(b, p->pref_affinity, p->n_pref_affinity);
        buf_affinity(b, p->pref_anti_affinity, p->n_pref_anti_affinity);
        buf_i64(b, (int64_t) p->n_host_ports);
        for (size_t i = 0; i < p->n_host_ports; i++)
                buf_i64(b, p->host_ports[i].port * 4 + p->host_ports[i].protocol);
        buf_i64(b, (int64_t) p->n_volume_zones);
        for (size_t i = 0; i < p->n_volume_zones; i++)
                buf_str(b, p->volume_zones[i]);
        buf_i64(b, (int64_t) p->n_wffc_claims);
        for (size_t i = 0; i < p->n_wffc_claims; i++)
                buf_str(b, p->wffc_claims[i]);
}

static TopoKey topo_key_of(const char *key) {
        if (!key)
                return TOPO_OTHER;
        key = solver_canonical_label_key(key);
        if (streq(key, SOLVER_LABEL_ZONE))
                return TOPO_ZONE;
        if (streq(key, SOLVER_LABEL_HOSTNAME))
                return TOPO_HOST;
        if (streq(key, SOLVER_LABEL_CAPACITY_TYPE))
                return TOPO_CT;
        return TOPO_OTHER;
}

/* Finds or creates the counting group for (key, scope, selector). */
static int group_get(Solver *s, Intern *gsig, Buf *b, const char *topology_key, const char *pod_ns,
                     const SolverLabelSelector *sel, const char *const *nss, size_t n_nss, bool all_ns,
                     uint32_t *ret) {
        TopoKey tk = topo_key_of(topology_key);
        b->n = 0;
        buf_i64(b, tk);
        buf_str(b, tk == TOPO_OTHER ? topology_key : "");
        buf_i64(b, all_ns);
        const char *const *scope = nss;
        size_t n_scope = n_nss;
        if (!all_ns && n_nss == 0) {
                scope = &pod_ns;
                n_scope = 1;
        }
        if (!all_ns) {
                buf_i64(b, (int64_t) n_scope);
                for (size_t i = 0; i < n_scope; i++)
                        buf_str(b, scope[i]);
        }
        buf_selector(b, sel);
        if (b->oom)
                return -ENOMEM;
        size_t before = gsig->n;
        uint32_t id;
        int q = solver_intern_get(gsig, b->p, &id);
        if (q < 0)
                return q;
        if (gsig->n == before) {
                *ret = id;
                return 0;
        }
        Group *ng = solver_arena_realloc(s->arena, s->groups, s->n_groups * sizeof(Group),
                                         (s->n_groups + 1) * sizeof(Group));
        if (!ng)
                return -ENOMEM;
        s->groups = ng;
        Group *g = &s->groups[s->n_groups];
        *g = (Group) { .key = tk, .selector = sel, .all_namespaces = all_ns };
        if (!all_ns) {
                const char **copy = solver_arena_alloc(s->arena, n_scope * sizeof(char *));
                if (!copy)
                        return -ENOMEM;
                for (size_t i = 0; i < n_scope; i++)
                        copy[i] = scope[i] ? scope[i] : "default";
                g->namespaces = copy;
                g->n_namespaces = n_scope;
        }
        g->description = solver_arena_printf(s->arena, "%s", topology_key ? topology_key : "?");
        if (!g->description)
                return -ENOMEM;
        *ret = s->n_groups++;
        return 0;
}

static bool group_matches(const Group *g, const SolverPod *p) {
        if (!g->all_namespaces) {
                const char *ns = p->namespace_ ? p->namespace_ : "default";
                bool in = false;
                for (size_t i = 0; i < g->n_namespaces && !in; i++)
                        in = streq(g->namespaces[i], ns);
                if (!in)
                        return false;
        }
        return solver_selector_matches(g->selector, p->labels, p->n_labels);
}

static bool group_matches(const Group *g, const SolverPod *p);

static int cmp_weight_desc(const void *a, const void *b, void *u) {
        const int32_t *w = u;
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        if (w[x] != w[y])
                return w[x] > w[y] ? -1 : 1;
        return x < y ? -1 : x > y;
}

static int order_by_weight(Solver *s, size_t n, const int32_t *weights, uint32_t **ret) {
        uint32_t *o = solver_arena_alloc(s->arena, (n + 1) * sizeof(uint32_t));
        if (!o)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                o[i] = (uint32_t) i;
        qsort_r(o, n, sizeof(uint32_t), cmp_weight_desc, (void *) weights);
        *ret = o;
        return 0;
}

static int shape_init(Solver *s, Shape *sh, Intern *gsig, Buf *b) {
        const SolverPod *p = sh->pod;
        const char *ns = p->namespace_ ? p->namespace_ : "default";
        int q;
        sh->req = p->requests;
        sh->req.v[SOLVER_RES_PODS] = 1;
        for (int r = 0; r < R_MAX; r++) {
                if (sh->req.v[r] < 0)
                        sh->req.v[r] = 0;
                if (sh->req.v[r] > 0)
                        sh->active[sh->n_active++] = (uint8_t) r;
        }
        /* first-fit decreasing by the dominant resource, memory weighed by the catalog's
         * cpu:memory ratio */
        int64_t memw = (int64_t) ((double) sh->req.v[SOLVER_RES_MEMORY] * s->mem_weight);
        sh->size_key[0] = MAX(sh->req.v[SOLVER_RES_CPU], memw);
        sh->size_key[1] = sh->req.v[SOLVER_RES_CPU] + memw;

#define GROUPS(field, n, arr, body)                                                             \
        do {                                                                                    \
                if ((n) > 0) {                                                                  \
                        sh->field = solver_arena_alloc(s->arena, (n) * sizeof(uint32_t));       \
                        if (!sh->field)                                                         \
                                return -ENOMEM;                                                 \
                }                                                                               \
                for (size_t i = 0; i < (n); i++) {                                              \
                        body;                                                                   \
                }                                                                               \
        } while (0)

        GROUPS(spread_g, p->n_spreads, p->spreads, {
                q = group_get(s, gsig, b, p->spreads[i].topology_key, ns, &p->spreads[i].selector,
                              NULL, 0, false, &sh->spread_g[i]);
                if (q < 0)
                        return q;
        });
        const struct {
                const SolverPodAffinityTerm *t;
                size_t n;
                uint32_t **out;
        } aff[] = {
                { p->affinity, p->n_affinity, &sh->aff_g },
                { p->anti_affinity, p->n_anti_affinity, &sh->anti_g },
                { p->pref_affinity, p->n_pref_affinity, &sh->paff_g },
                { p->pref_anti_affinity, p->n_pref_anti_affinity, &sh->panti_g },
        };
        for (size_t a = 0; a < ELEMENTSOF(aff); a++) {
                if (aff[a].n == 0)
                        continue;
                *aff[a].out = solver_arena_alloc(s->arena, aff[a].n * sizeof(uint32_t));
                if (!*aff[a].out)
                        return -ENOMEM;
                for (size_t i = 0; i < aff[a].n; i++) {
                        const SolverPodAffinityTerm *t = &aff[a].t[i];
                        q = group_get(s, gsig, b, t->topology_key, ns, &t->selector, t->namespaces,
                                      t->n_namespaces, t->all_namespaces, &(*aff[a].out)[i]);
                        if (q < 0)
                                return q;
                }
        }
#undef GROUPS

        /* Relaxation steps, in Karpenter's order. */
        int32_t *w = malloc((MAX(MAX(p->n_pref_affinity, p->n_pref_anti_affinity), p->n_preferred_terms) + 1) * sizeof(int32_t));
        if (!w)
                return -ENOMEM;
        for (size_t i = 0; i < p->n_pref_affinity; i++)
                w[i] = p->pref_affinity[i].weight;
        q = order_by_weight(s, p->n_pref_affinity, w, &sh->paff_order);
        for (size_t i = 0; q >= 0 && i < p->n_pref_anti_affinity; i++)
                w[i] = p->pref_anti_affinity[i].weight;
        if (q >= 0)
                q = order_by_weight(s, p->n_pref_anti_affinity, w, &sh->panti_order);
        for (size_t i = 0; q >= 0 && i < p->n_preferred_terms; i++)
                w[i] = p->preferred_terms[i].weight;
        if (q >= 0)
                q = order_by_weight(s, p->n_preferred_terms, w, &sh->pnode_order);
        free(w);
        if (q < 0)
                return q;

        size_t n_sa = 0;
        for (size_t i = 0; i < p->n_spreads; i++)
                n_sa += p->spreads[i].schedule_anyway;
        bool tol_pns = false;
        if (s->any_prefer_no_schedule) {
                SolverTaint probe = { .key = "nodesmith.io/probe", .effect = SOLVER_EFFECT_PREFER_NO_SCHEDULE };
                tol_pns = true;
                for (size_t i = 0; i < p->n_tolerations && tol_pns; i++)
                        if (solver_toleration_tolerates(&p->tolerations[i], &probe))
                                tol_pns = false;
        }
        size_t n = (p->n_required_terms > 1 ? p->n_required_terms - 1 : 0) + p->n_pref_affinity +
                   p->n_pref_anti_affinity + p->n_preferred_terms + n_sa + tol_pns;
        sh->n_relax = (uint32_t) n;
        sh->relax = solver_arena_alloc(s->arena, (n + 1) * sizeof(RelaxKind));
        sh->variants = solver_arena_alloc(s->arena, (n + 1) * sizeof(Variant *));
        if (!sh->relax || !sh->variants)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 1; i < p->n_required_terms; i++)
                sh->relax[k++] = RELAX_REQUIRED_TERM;
        for (size_t i = 0; i < p->n_pref_affinity; i++)
                sh->relax[k++] = RELAX_PREF_AFFINITY;
        for (size_t i = 0; i < p->n_pref_anti_affinity; i++)
                sh->relax[k++] = RELAX_PREF_ANTI;
        for (size_t i = 0; i < p->n_preferred_terms; i++)
                sh->relax[k++] = RELAX_PREF_NODE;
        for (size_t i = 0; i < n_sa; i++)
                sh->relax[k++] = RELAX_SCHEDULE_ANYWAY;
        if (tol_pns)
                sh->relax[k++] = RELAX_PREFER_NO_SCHEDULE;

        for (size_t i = 0; i < p->n_anti_affinity; i++)
                if (topo_key_of(p->anti_affinity[i].topology_key) == TOPO_HOST &&
                    group_matches(&s->groups[sh->anti_g[i]], p))
                        sh->anchor = true;
        for (size_t i = 0; i < p->n_spreads; i++)
                if (!p->spreads[i].schedule_anyway && topo_key_of(p->spreads[i].topology_key) == TOPO_HOST &&
                    group_matches(&s->groups[sh->spread_g[i]], p))
                        sh->anchor = true;
        sh->has_constraints = p->n_spreads || p->n_affinity || p->n_anti_affinity || p->n_pref_affinity ||
                              p->n_pref_anti_affinity || p->n_host_ports;
        sh->has_wffc = p->n_wffc_claims > 0;
        return 0;
}

static int compile_shapes(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        int q = 0;
        Intern sig, gsig;
        solver_intern_init(&sig, s->arena);
        solver_intern_init(&gsig, s->arena);
        Buf b = {}, gb = {};
        uint32_t n_all = s->n_pods_all;
        s->pod_shape = solver_arena_alloc_nozero(s->arena, (n_all + 1) * sizeof(uint32_t));
        if (!s->pod_shape) {
                q = -ENOMEM;
                goto out;
        }
        size_t cap_shapes = 0;
        for (uint32_t i = 0; i < n_all; i++) {
                const SolverPod *p = pod_at(s, i);
                pod_signature(&b, p);
                if (i >= snap->n_pods)
                        buf_i64(&b, -1 - (int64_t) i); /* headroom units of different pools differ */
                if (b.oom) {
                        q = -ENOMEM;
                        goto out;
                }
                size_t before = sig.n;
                uint32_t id;
                q = solver_intern_get(&sig, b.p, &id);
                if (q < 0)
                        goto out;
                if (sig.n != before) {
                        if (s->n_shapes == cap_shapes) {
                                size_t nc = cap_shapes ? cap_shapes * 2 : 64;
                                Shape *ns = realloc(s->shapes, nc * sizeof(Shape));
                                if (!ns) {
                                        q = -ENOMEM;
                                        goto out;
                                }
                                s->shapes = ns;
                                cap_shapes = nc;
                        }
                        s->shapes[s->n_shapes] = (Shape) { .pod = p, .headroom = i >= snap->n_pods };
                        s->n_shapes++;
                }
                s->pod_shape[i] = id;
        }
        /* headroom pods share one shape per pool: merge by pool (signature includes index) */
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                q = shape_init(s, &s->shapes[i], &gsig, &gb);
                if (q < 0)
                        goto out;
        }
        /* Which groups match which shape. */
        for (uint32_t i = 0; i < s->n_shapes; i++) {
                Shape *sh = &s->shapes[i];
                uint32_t m = 0;
                for (uint32_t g = 0; g < s->n_groups; g++)
                        m += group_matches(&s->groups[g], sh->pod);
                if (m == 0 || sh->headroom)
                        continue;
                sh->matches = solver_arena_alloc(s->arena, m * sizeof(uint32_t));
                if (!sh->matches) {
                        q = -ENOMEM;
                        goto out;
                }
                for (uint32_t g = 0; g < s->n_groups; g++)
                        if (group_matches(&s->groups[g], sh->pod))
                                sh->matches[sh->n_matches++] = g;
        }
        /* Pending pods per shape. */
        for (uint32_t i = 0; i < n_all; i++) {
                const SolverPod *p = pod_at(s, i);
                if (i < snap->n_pods && s->pod_node[i] >= 0)
                        continue;
                if (i < snap->n_pods && !isempty(p->node_name))
                        continue; /* bound to an unknown node: leave it alone */
                Shape *sh = &s->shapes[s->pod_shape[i]];
                if (sh->n_pods == sh->cap_pods) {
                        uint32_t nc = sh->cap_pods ? sh->cap_pods * 2 : 4;
                        uint32_t *np = solver_arena_realloc(s->arena, sh->pods, sh->cap_pods * sizeof(uint32_t),
                                                            nc * sizeof(uint32_t));
                        if (!np) {
                                q = -ENOMEM;
                                goto out;
                        }
                        sh->pods = np;
                        sh->cap_pods = nc;
                }
                sh->pods[sh->n_pods++] = i;
        }
        /* Anti-affinity owners (bound or not: the flag enables the inverse check). */
        for (uint32_t i = 0; i < s->n_shapes; i++)
                for (size_t t = 0; t < s->shapes[i].pod->n_anti_affinity; t++)
                        s->groups[s->shapes[i].anti_g[t]].has_anti_owners = true;
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                gr->zcount = solver_arena_alloc(s->arena, SOLVER_MAX_ZONES * sizeof(int32_t));
                gr->zowners = solver_arena_alloc(s->arena, SOLVER_MAX_ZONES * sizeof(int32_t));
                if (!gr->zcount || !gr->zowners) {
                        q = -ENOMEM;
                        goto out;
                }
        }
out:
        free(b.p);
        free(gb.p);
        solver_intern_done(&sig);
        solver_intern_done(&gsig);
        return q;
}

/* ---- existing nodes ------------------------------------------------------------------------- */

int solver_grow_nodes(Solver *s, size_t need) {
        if (need <= s->cap_nodes)
                return 0;
        size_t nc = MAX(need, s->cap_nodes * 2);
        nc = MAX(nc, (size_t) 64);
        Node *nn = realloc(s->nodes, nc * sizeof(Node));
        if (!nn)
                return -ENOMEM;
        s->nodes = nn;
        /* per node: the types it may become, the types within its budget, and the types its
         * pods allow whatever they weigh (repair.c widens a node from it) */
        uint64_t *nt = realloc(s->node_types, nc * 3 * s->W * sizeof(uint64_t));
        if (!nt)
                return -ENOMEM;
        s->node_types = nt;
        /* node_types moved: re-point new nodes */
        for (uint32_t i = 0; i < s->n_nodes; i++)
                if (s->nodes[i].kind == NODE_NEW) {
                        s->nodes[i].types = s->node_types + (size_t) i * 3 * s->W;
                        s->nodes[i].budget = s->nodes[i].types + s->W;
                        s->nodes[i].base = s->nodes[i].types + 2 * s->W;
                }
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                if (gr->key != TOPO_HOST)
                        continue;
                int32_t *a = realloc(gr->hcount, nc * sizeof(int32_t));
                if (!a)
                        return -ENOMEM;
                gr->hcount = a;
                int32_t *o = realloc(gr->howners, nc * sizeof(int32_t));
                if (!o)
                        return -ENOMEM;
                gr->howners = o;
                memset(gr->hcount + s->cap_nodes, 0, (nc - s->cap_nodes) * sizeof(int32_t));
                memset(gr->howners + s->cap_nodes, 0, (nc - s->cap_nodes) * sizeof(int32_t));
        }
        s->cap_nodes = nc;
        return 0;
}

static int port_add(Node *n, const SolverHostPort *p) {
        if (n->n_ports == n->cap_ports) {
                uint32_t nc = n->cap_ports ? n->cap_ports * 2 : 4;
                SolverHostPort *np = realloc(n->ports, nc * sizeof(SolverHostPort));
                if (!np)
                        return -ENOMEM;
                n->ports = np;
                n->cap_ports = nc;
        }
        n->ports[n->n_ports++] = *p;
        return 0;
}

static int pool_by_name(const Solver *s, const char *name) {
        if (isempty(name))
                return -1;
        for (uint32_t i = 0; i < s->n_pools; i++)
                if (streq(s->pools[i].np->name, name))
                        return (int) i;
        return -1;
}

static int compile_nodes(Solver *s, Intern *names) {
        const SolverSnapshot *snap = s->snap;
        int q = solver_grow_nodes(s, snap->n_nodes + 16);
        if (q < 0)
                return q;
        s->n_existing = s->n_nodes = (uint32_t) snap->n_nodes;
        for (uint32_t i = 0; i < snap->n_nodes; i++) {
                const SolverNode *sn = &snap->nodes[i];
                Node *n = &s->nodes[i];
                *n = (Node) { .kind = NODE_EXISTING, .min_priority = INT32_MAX };
                n->zone = zone_index(s, node_zone_name(sn), false);
                int pi = pool_by_name(s, sn->nodepool);
                n->pool = pi < 0 ? NONE32 : (uint32_t) pi;
                n->closed = sn->unschedulable || sn->deleting;
                for (int r = 0; r < R_MAX; r++)
                        n->cap[r] = sn->allocatable.v[r];
                if (sn->in_flight && pi >= 0)
                        for (int r = 0; r < R_MAX; r++)
                                n->used[r] += s->pools[pi].ds.v[r];
                if (pi >= 0 && s->pools[pi].nodes_left != INT64_MAX)
                        s->pools[pi].nodes_left--;
                /* limits: the pool's capacity in use */
                if (pi >= 0 && s->pools[pi].has_limits) {
                        const SolverResources *capv = &sn->allocatable;
                        for (uint32_t t = 0; sn->instance_type && t < s->T; t++)
                                if (streq(snap->types[t].name, sn->instance_type)) {
                                        capv = &snap->types[t].capacity;
                                        break;
                                }
                        for (int r = 0; r < R_MAX; r++)
                                if (s->pools[pi].remaining.v[r] >= 0)
                                        s->pools[pi].remaining.v[r] -= capv->v[r];
                }
                for (size_t t = 0; t < sn->n_taints; t++)
                        if (sn->taints[t].effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE)
                                s->any_prefer_no_schedule = true;
        }
        (void) names;
        return 0;
}

/* Bound pods: usage, ports, topology counts. Needs shapes and groups. */
static int account_bound(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        uint32_t E = s->n_existing;
        uint32_t *count = calloc(E + 1, sizeof(uint32_t));
        if (!count)
                return -ENOMEM;
        for (uint32_t i = 0; i < snap->n_pods; i++)
                if (s->pod_node[i] >= 0)
                        count[s->pod_node[i]]++;
        uint32_t off = 0;
        for (uint32_t n = 0; n < E; n++) {
                s->nodes[n].first_bound = off;
                off += count[n];
                count[n] = s->nodes[n].first_bound;
        }
        s->n_bound = off;
        s->bound = solver_arena_alloc_nozero(s->arena, (off + 1) * sizeof(uint32_t));
        if (!s->bound) {
                free(count);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < snap->n_pods; i++) {
                int32_t nn = s->pod_node[i];
                if (nn < 0)
                        continue;
                s->bound[count[nn]++] = i;
                Node *n = &s->nodes[nn];
                n->n_bound++;
                const SolverPod *p = &snap->pods[i];
                const Shape *sh = &s->shapes[s->pod_shape[i]];
                for (int r = 0; r < R_MAX; r++)
                        n->used[r] += sh->req.v[r];
                n->n_pods++;
                if (!p->daemonset && p->priority < n->min_priority)
                        n->min_priority = p->priority;
                for (size_t k = 0; k < p->n_host_ports; k++) {
                        int q = port_add(n, &p->host_ports[k]);
                        if (q < 0) {
                                free(count);
                                return q;
                        }
                }
                for (uint32_t m = 0; m < sh->n_matches; m++) {
                        Group *g = &s->groups[sh->matches[m]];
                        g->total++;
                        if (g->key == TOPO_ZONE && n->zone >= 0)
                                g->zcount[n->zone]++;
                        else if (g->key == TOPO_HOST)
                                g->hcount[nn]++;
                        else if (g->key == TOPO_CT)
                                g->zcount[snap_ct(s, (uint32_t) nn)]++;
                }
                for (size_t k = 0; k < p->n_anti_affinity; k++) {
                        Group *g = &s->groups[sh->anti_g[k]];
                        if (g->key == TOPO_ZONE && n->zone >= 0)
                                g->zowners[n->zone]++;
                        else if (g->key == TOPO_HOST)
                                g->howners[nn]++;
                        else if (g->key == TOPO_CT)
                                g->zowners[snap_ct(s, (uint32_t) nn)]++;
                }
        }
        free(count);
        return 0;
}

/* ---- DaemonSets ----------------------------------------------------------------------------- */

static int ds_overhead(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        for (size_t d = 0; d < snap->n_daemonsets; d++) {
                const SolverPod *ds = &snap->daemonsets[d];
                size_t n = ds->n_node_selector + (ds->n_required_terms > 0 ? ds->required_terms[0].n_reqs : 0);
                const SolverRequirement **rl = solver_arena_alloc(s->arena, (n + 1) * sizeof(void *));
                SolverRequirement *sel = solver_arena_alloc(s->arena, (ds->n_node_selector + 1) * sizeof(SolverRequirement));
                if (!rl || !sel)
                        return -ENOMEM;
                size_t k = 0;
                for (size_t i = 0; i < ds->n_node_selector; i++) {
                        sel[i] = (SolverRequirement) { .key = ds->node_selector[i].key, .op = SOLVER_OP_IN,
                                                       .values = &ds->node_selector[i].value, .n_values = 1 };
                        rl[k++] = &sel[i];
                }
                for (size_t i = 0; ds->n_required_terms > 0 && i < ds->required_terms[0].n_reqs; i++)
                        rl[k++] = &ds->required_terms[0].reqs[i];
                CReqs c;
                int q = compile_reqs(s, rl, k, &c);
                if (q < 0)
                        return q;
                for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                        Pool *p = &s->pools[pi];
                        if (!solver_tolerates_all(ds->tolerations, ds->n_tolerations, p->np->taints,
                                                  p->np->n_taints, true))
                                continue;
                        if (c.custom_empty || !(c.slots & p->slots))
                                continue;
                        uint64_t tmp[SOLVER_MAX_TYPES / 64];
                        if (s->T > 0 && !bs_and_any(tmp, c.types, p->types, s->W))
                                continue;
                        if (c.n_pool_reqs && !pool_reqs_ok(s, c.pool_reqs, c.n_pool_reqs, p->np->name))
                                continue;
                        const VSetList *nl;
                        q = solver_vsetlist_narrow(s, s->arena, &p->custom, &c.custom, &nl, NULL);
                        if (q < 0)
                                return q;
                        if (q == 0)
                                continue;
                        for (int r = 0; r < R_MAX; r++)
                                if (r != SOLVER_RES_PODS)
                                        p->ds.v[r] += MAX(ds->requests.v[r], 0);
                        p->ds.v[SOLVER_RES_PODS]++;
                        if (ds->n_host_ports > 0) {
                                SolverHostPort *np = solver_arena_realloc(
                                        s->arena, p->ds_ports, p->n_ds_ports * sizeof(SolverHostPort),
                                        (p->n_ds_ports + ds->n_host_ports) * sizeof(SolverHostPort));
                                if (!np)
                                        return -ENOMEM;
                                memcpy(np + p->n_ds_ports, ds->host_ports, ds->n_host_ports * sizeof(SolverHostPort));
                                p->ds_ports = np;
                                p->n_ds_ports += (uint32_t) ds->n_host_ports;
                        }
                }
        }
        return 0;
}

/* ---- headroom ------------------------------------------------------------------------------- */

static const SolverToleration tolerate_all = { .exists = true, .effect = SOLVER_EFFECT_ANY };

static int make_headroom(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        uint32_t total = 0;
        for (uint32_t i = 0; i < s->n_pools; i++) {
                const SolverResources *h = &s->pools[i].np->headroom;
                if (h->v[SOLVER_RES_CPU] <= 0 && h->v[SOLVER_RES_MEMORY] <= 0 && h->v[SOLVER_RES_PODS] <= 0)
                        continue;
                int64_t units = MAX(h->v[SOLVER_RES_PODS], (int64_t) 1);
                if (units > 10000)
                        return -E2BIG;
                total += (uint32_t) units;
        }
        s->n_pods_all = (uint32_t) snap->n_pods + total;
        if (total == 0)
                return 0;
        s->vpods = solver_arena_alloc(s->arena, total * sizeof(SolverPod));
        if (!s->vpods)
                return -ENOMEM;
        uint32_t k = 0;
        for (uint32_t i = 0; i < s->n_pools; i++) {
                const SolverNodePool *np = s->pools[i].np;
                const SolverResources *h = &np->headroom;
                if (h->v[SOLVER_RES_CPU] <= 0 && h->v[SOLVER_RES_MEMORY] <= 0 && h->v[SOLVER_RES_PODS] <= 0)
                        continue;
                int64_t units = MAX(h->v[SOLVER_RES_PODS], (int64_t) 1);
                SolverLabel *sel = solver_arena_alloc(s->arena, sizeof(SolverLabel));
                if (!sel)
                        return -ENOMEM;
                sel->key = SOLVER_LABEL_NODEPOOL;
                sel->value = np->name;
                for (int64_t u = 0; u < units; u++) {
                        SolverPod *p = &s->vpods[k++];
                        p->name = solver_arena_printf(s->arena, "headroom/%s/%" PRId64, np->name, u);
                        p->namespace_ = "";
                        p->priority = INT32_MIN;
                        p->preempt_never = true;
                        for (int r = 0; r < R_MAX; r++)
                                if (r != SOLVER_RES_PODS)
                                        p->requests.v[r] = (h->v[r] + units - 1) / units;
                        p->node_selector = sel;
                        p->n_node_selector = 1;
                        p->tolerations = &tolerate_all;
                        p->n_tolerations = 1;
                }
        }
        return 0;
}

/* ---- variants ------------------------------------------------------------------------------- */

Variant *solver_variant(Solver *s, uint32_t shape, uint32_t level) {
        Shape *sh = &s->shapes[shape];
        if (level > sh->n_relax)
                return NULL;
        if (sh->variants[level])
                return sh->variants[level];
        const SolverPod *p = sh->pod;
        uint32_t drop[RELAX_PREFER_NO_SCHEDULE + 1] = {};
        for (uint32_t i = 0; i < level; i++)
                drop[sh->relax[i]]++;

        Variant *v = solver_arena_alloc(s->arena, sizeof(Variant));
        if (!v)
                return NULL;
        v->shape = shape;
        v->level = level;
        v->tolerate_prefer_no_schedule = drop[RELAX_PREFER_NO_SCHEDULE] > 0 || !s->any_prefer_no_schedule;

        /* requirements */
        size_t nreq = p->n_node_selector + 1;
        if (p->n_required_terms > 0)
                nreq += p->required_terms[MIN(drop[RELAX_REQUIRED_TERM], p->n_required_terms - 1)].n_reqs;
        bool pnode = drop[RELAX_PREF_NODE] < p->n_preferred_terms;
        const SolverTerm *pterm = pnode ? &p->preferred_terms[sh->pnode_order[drop[RELAX_PREF_NODE]]].term : NULL;
        if (pterm)
                nreq += pterm->n_reqs;
        v->reqs = solver_arena_alloc(s->arena, nreq * sizeof(void *));
        SolverRequirement *sel = solver_arena_alloc(s->arena, (p->n_node_selector + 1) * sizeof(SolverRequirement));
        if (!v->reqs || !sel)
                return NULL;
        for (size_t i = 0; i < p->n_node_selector; i++) {
                sel[i] = (SolverRequirement) { .key = p->node_selector[i].key, .op = SOLVER_OP_IN,
                                               .values = &p->node_selector[i].value, .n_values = 1 };
                v->reqs[v->n_reqs++] = &sel[i];
        }
        if (p->n_required_terms > 0) {
                const SolverTerm *t = &p->required_terms[MIN(drop[RELAX_REQUIRED_TERM], p->n_required_terms - 1)];
                for (size_t i = 0; i < t->n_reqs; i++)
                        v->reqs[v->n_reqs++] = &t->reqs[i];
        }
        if (pterm)
                for (size_t i = 0; i < pterm->n_reqs; i++)
                        v->reqs[v->n_reqs++] = &pterm->reqs[i];
        uint32_t n_plain = v->n_reqs;
        if (p->n_volume_zones > 0) {
                SolverRequirement *vz = solver_arena_alloc(s->arena, sizeof(SolverRequirement));
                if (!vz)
                        return NULL;
                *vz = (SolverRequirement) { .key = SOLVER_LABEL_ZONE, .op = SOLVER_OP_IN,
                                            .values = p->volume_zones, .n_values = p->n_volume_zones };
                v->reqs[v->n_reqs++] = vz;
        }
        CReqs c;
        if (compile_reqs(s, v->reqs, n_plain, &c) < 0)
                return NULL;
        v->types = c.types;
        v->slots = c.slots;
        v->slots_novol = c.slots;
        v->new_nodes_ok = c.new_nodes_ok;
        v->custom = c.custom;
        v->pool_reqs = c.pool_reqs;
        v->n_pool_reqs = c.n_pool_reqs;
        if (c.custom_empty) {
                v->slots = 0;
                v->new_nodes_ok = false;
        }
        if (p->n_volume_zones > 0) {
                uint32_t m = 0;
                for (uint32_t z = 0; z < s->n_zones; z++)
                        for (size_t i = 0; i < p->n_volume_zones; i++)
                                if (p->volume_zones[i] && streq(p->volume_zones[i], s->zones[z]))
                                        m |= 1u << z;
                if ((v->slots & slots_of_zones(m)) != v->slots)
                        v->volume_restricted = true;
                v->slots &= slots_of_zones(m);
        }
        if (n_plain > 0) {
                char buf[1024];
                size_t o = 0;
                for (uint32_t i = 0; i < n_plain && o < sizeof(buf) - 64; i++)
                        o += (size_t) snprintf(buf + o, sizeof(buf) - o, "%s%s", i ? ", " : "",
                                               describe_req(s->arena, v->reqs[i]));
                v->req_desc = solver_arena_strdup(s->arena, buf);
        }

        /* topology constraints */
        size_t ncons = p->n_spreads + p->n_affinity + p->n_anti_affinity + p->n_pref_affinity + p->n_pref_anti_affinity;
        v->cons = solver_arena_alloc(s->arena, (ncons + 1) * sizeof(Constraint));
        if (!v->cons)
                return NULL;
        uint32_t sa_seen = 0;
#define ADD_CON(k, g, skew, mind, required_term)                                                   \
        do {                                                                                       \
                Group *gr_ = &s->groups[g];                                                        \
                if (gr_->key == TOPO_OTHER) {                                                      \
                        if (required_term) {                                                       \
                                v->unsupported = true;                                             \
                                v->unsupported_msg = solver_arena_printf(                          \
                                        s->arena, "topology key %s is not supported (zone, hostname and capacity type are)", \
                                        gr_->description);                                         \
                        }                                                                          \
                        break;                                                                     \
                }                                                                                  \
                bool self_ = false;                                                                \
                for (uint32_t m_ = 0; m_ < sh->n_matches; m_++)                                    \
                        if (sh->matches[m_] == (g))                                                \
                                self_ = true;                                                      \
                v->cons[v->n_cons++] = (Constraint) { .kind = (k), .group = (g), .max_skew = (skew), \
                                                      .min_domains = (mind), .self = self_,        \
                                                      .required = (required_term) };               \
                if (gr_->key == TOPO_ZONE)                                                         \
                        v->zone_mode = true;                                                       \
                if (gr_->key == TOPO_CT)                                                           \
                        v->ct_mode = true;                                                         \
        } while (0)

        for (size_t i = 0; i < p->n_spreads; i++) {
                const SolverSpread *sp = &p->spreads[i];
                if (sp->schedule_anyway && sa_seen++ < drop[RELAX_SCHEDULE_ANYWAY])
                        continue;
                ADD_CON(CON_SPREAD, sh->spread_g[i], MAX(sp->max_skew, 1), sp->min_domains, !sp->schedule_anyway);
        }
        for (size_t i = 0; i < p->n_affinity; i++)
                ADD_CON(CON_AFFINITY, sh->aff_g[i], 0, 0, true);
        for (size_t i = 0; i < p->n_anti_affinity; i++)
                ADD_CON(CON_ANTI, sh->anti_g[i], 0, 0, true);
        for (size_t i = drop[RELAX_PREF_AFFINITY]; i < p->n_pref_affinity; i++)
                ADD_CON(CON_AFFINITY, sh->paff_g[sh->paff_order[i]], 0, 0, false);
        for (size_t i = drop[RELAX_PREF_ANTI]; i < p->n_pref_anti_affinity; i++)
                ADD_CON(CON_ANTI, sh->panti_g[sh->panti_order[i]], 0, 0, false);
#undef ADD_CON
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                if (s->groups[sh->matches[m]].key == TOPO_ZONE)
                        v->zone_mode = true;
                if (s->groups[sh->matches[m]].key == TOPO_CT && s->groups[sh->matches[m]].has_anti_owners)
                        v->ct_mode = true;
        }
        if (sh->has_wffc)
                v->zone_mode = true;

        /* zone domains: zones where the pod could run */
        /* and capacity-type domains: those its pools offer it and existing nodes have */
        uint32_t ez = 0, ect = 0;
        uint64_t tmp[SOLVER_MAX_TYPES / 64], tmp2[SOLVER_MAX_TYPES / 64];
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                const Pool *pl = &s->pools[pi];
                if (s->T == 0 || !bs_and_any(tmp, v->types, pl->types, s->W))
                        continue;
                uint64_t sl = v->slots & pl->slots;
                for (uint32_t z = 0; z < s->n_zones; z++) {
                        if (!(sl & slots_of_zone((int) z)) || (ez & (1u << z)))
                                continue;
                        solver_offer_set(s, sl & slots_of_zone((int) z), tmp2);
                        bs_and(tmp2, tmp, s->W);
                        if (bs_any(tmp2, s->W))
                                ez |= 1u << z;
                }
                for (int ct = 0; ct < _SOLVER_CAPACITY_MAX; ct++) {
                        if (!(sl & slots_of_ct(ct)) || (ect & (1u << ct)))
                                continue;
                        solver_offer_set(s, sl & slots_of_ct(ct), tmp2);
                        bs_and(tmp2, tmp, s->W);
                        if (bs_any(tmp2, s->W))
                                ect |= 1u << ct;
                }
        }
        for (uint32_t n = 0; n < s->n_existing; n++) {
                if (s->nodes[n].zone >= 0 && (zones_of_slots(v->slots) & (1u << s->nodes[n].zone)))
                        ez |= 1u << s->nodes[n].zone;
                if (v->slots & slots_of_ct(snap_ct(s, n)))
                        ect |= 1u << snap_ct(s, n);
        }
        v->eligible_zones = ez;
        v->eligible_cts = ect;

        v->pools = solver_arena_alloc(s->arena, (s->n_pools + 1) * sizeof(PoolCompat));
        v->node_ok = solver_arena_alloc(s->arena, s->n_existing + 1);
        if (!v->pools || !v->node_ok)
                return NULL;
        sh->variants[level] = v;
        return v;
}

PoolCompat *solver_pool_compat(Solver *s, Variant *v, uint32_t pi) {
        PoolCompat *pc = &v->pools[pi];
        if (pc->done)
                return pc;
        pc->done = true;
        const Pool *p = &s->pools[pi];
        const Shape *sh = &s->shapes[v->shape];
        const SolverPod *pod = sh->pod;
        SolverArena *a = s->arena;

        for (size_t t = 0; t < p->np->n_taints; t++) {
                const SolverTaint *tt = &p->np->taints[t];
                if (tt->effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE && v->tolerate_prefer_no_schedule)
                        continue;
                if (!solver_tolerates_all(pod->tolerations, pod->n_tolerations, tt, 1, false)) {
                        pc->reason = SOLVER_REASON_TAINTS;
                        pc->message = solver_arena_printf(a, "does not tolerate taint %s%s%s:%s", tt->key,
                                                          tt->value ? "=" : "", tt->value ? tt->value : "",
                                                          tt->effect == SOLVER_EFFECT_NO_SCHEDULE ? "NoSchedule" :
                                                          tt->effect == SOLVER_EFFECT_NO_EXECUTE ? "NoExecute" :
                                                                                                  "PreferNoSchedule");
                        return pc;
                }
        }
        if (!v->new_nodes_ok) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = "the pod asks for a specific existing node (kubernetes.io/hostname) or contradictory labels";
                return pc;
        }
        if (v->n_pool_reqs && !pool_reqs_ok(s, v->pool_reqs, v->n_pool_reqs, p->np->name)) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = solver_arena_printf(a, "the pod requires another NodePool (%s)",
                                                  describe_req(a, v->pool_reqs[0]));
                return pc;
        }
        const char *msg = NULL;
        int q = solver_vsetlist_narrow(s, a, &p->custom, &v->custom, &pc->custom, &msg);
        if (q <= 0) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                pc->message = msg ? msg : "out of memory";
                return pc;
        }
        pc->custom_changed = pc->custom != NULL;
        if (!pc->custom)
                pc->custom = &p->custom;

        uint64_t *types = solver_arena_alloc_nozero(a, s->W * sizeof(uint64_t));
        uint64_t tmp[SOLVER_MAX_TYPES / 64];
        if (!types) {
                pc->reason = SOLVER_REASON_UNSUPPORTED;
                pc->message = "out of memory";
                return pc;
        }
        if (s->T == 0 || !bs_and_any(types, v->types, p->types, s->W)) {
                pc->reason = SOLVER_REASON_REQUIREMENTS;
                /* name the pod requirement that excludes every type of the pool */
                const char *which = v->req_desc ? v->req_desc : "requirements";
                for (uint32_t i = 0; i < v->n_reqs; i++) {
                        CReqs c;
                        if (compile_reqs(s, &v->reqs[i], 1, &c) < 0)
                                break;
                        if (!bs_and_any(tmp, c.types, p->types, s->W)) {
                                which = describe_req(a, v->reqs[i]);
                                break;
                        }
                }
                pc->message = solver_arena_printf(a, "no instance type of the NodePool satisfies %s", which);
                return pc;
        }
        pc->slots = v->slots & p->slots;
        if (!pc->slots) {
                pc->reason = v->volume_restricted ? SOLVER_REASON_VOLUME_ZONE : SOLVER_REASON_REQUIREMENTS;
                pc->message = v->volume_restricted ? "the pod's volume is in a zone the NodePool does not offer"
                                                   : "no zone and capacity type allowed by both the pod and the NodePool";
                return pc;
        }
        solver_offer_set(s, pc->slots, tmp);
        if (!bs_and_any(types, types, tmp, s->W)) {
                pc->reason = v->volume_restricted ? SOLVER_REASON_VOLUME_ZONE : SOLVER_REASON_REQUIREMENTS;
                pc->message = v->volume_restricted
                                      ? "no matching instance type is offered in the zone of the pod's volume"
                                      : "no matching instance type has an available offering in the allowed zones and capacity types";
                return pc;
        }
        int64_t d[R_MAX];
        for (int r = 0; r < R_MAX; r++)
                d[r] = sh->req.v[r] + p->ds.v[r];
        solver_fit_set(s, p->fit, d, tmp);
        uint64_t *fit = solver_arena_alloc_nozero(a, s->W * sizeof(uint64_t));
        if (fit)
                bs_copy(fit, tmp, s->W);
        if (!bs_and_any(types, types, tmp, s->W) || (p->has_min_values && !solver_pool_min_values_ok(s, p, types))) {
                if (v->volume_restricted && fit) {
                        /* would a type with room exist without the volume's zone? */
                        uint64_t other[SOLVER_MAX_TYPES / 64];
                        solver_offer_set(s, v->slots_novol & p->slots, other);
                        bs_and(other, fit, s->W);
                        bs_and(other, v->types, s->W);
                        bs_and(other, p->types, s->W);
                        if (bs_any(other, s->W)) {
                                pc->reason = SOLVER_REASON_VOLUME_ZONE;
                                pc->message = solver_arena_printf(
                                        a, "no instance type with room for %s is offered in the zone of its volume",
                                        solver_format_resources(a, sh->req.v));
                                return pc;
                        }
                }
                pc->reason = SOLVER_REASON_RESOURCES;
                const char *ds = solver_format_resources(a, p->ds.v);
                pc->message = solver_arena_printf(a, "no instance type has room for %s%s%s%s",
                                                  solver_format_resources(a, sh->req.v),
                                                  p->ds.v[SOLVER_RES_PODS] ? " plus DaemonSet overhead " : "",
                                                  p->ds.v[SOLVER_RES_PODS] ? ds : "",
                                                  p->has_min_values ? " (with the NodePool's minValues)" : "");
                return pc;
        }
        pc->types = types;
        pc->ok = true;
        return pc;
}

static const char *node_label(const Solver *s, const SolverNode *n, const char *ckey) {
        for (size_t i = 0; i < n->n_labels; i++)
                if (streq(solver_canonical_label_key(n->labels[i].key), ckey))
                        return n->labels[i].value ? n->labels[i].value : "";
        if (streq(ckey, SOLVER_LABEL_HOSTNAME))
                return n->name;
        if (streq(ckey, SOLVER_LABEL_ZONE))
                return n->zone;
        if (streq(ckey, SOLVER_LABEL_CAPACITY_TYPE))
                return solver_capacity_type_to_name(n->capacity_type);
        if (streq(ckey, SOLVER_LABEL_NODEPOOL))
                return n->nodepool;
        if (streq(ckey, SOLVER_LABEL_INSTANCE_TYPE))
                return n->instance_type;
        return NULL;
}

/* Taints a node carries only while it starts: the kubelet registers with not-ready (the node
 * lifecycle controller removes it once Ready; unreachable while a lease lapses), an external cloud
 * provider adds uninitialized until its controller initialises the node. On a node a NodePool
 * launched they are temporary, as Karpenter treats them: reading them literally makes every
 * registering node look unusable and launches a second one for the same pods. */
static bool ephemeral_taint(const SolverTaint *t) {
        static const char *const keys[] = { "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                                            "node.cloudprovider.kubernetes.io/uninitialized" };
        if (t->effect != SOLVER_EFFECT_NO_SCHEDULE)
                return false;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (streq(t->key, keys[i]))
                        return true;
        return false;
}

static bool node_tolerated(const SolverPod *pod, const SolverNode *n, bool ignore_prefer) {
        for (size_t i = 0; i < n->n_taints; i++) {
                if (n->nodepool && ephemeral_taint(&n->taints[i]))
                        continue;
                if (!solver_tolerates_all(pod->tolerations, pod->n_tolerations, &n->taints[i], 1, ignore_prefer))
                        return false;
        }
        return true;
}

bool solver_existing_ok(Solver *s, Variant *v, uint32_t ni) {
        uint8_t c = v->node_ok[ni];
        if (c)
                return c == 1;
        const SolverNode *n = &s->snap->nodes[ni];
        const SolverPod *pod = s->shapes[v->shape].pod;
        bool ok = node_tolerated(pod, n, v->tolerate_prefer_no_schedule);
        for (uint32_t i = 0; ok && i < v->n_reqs; i++)
                ok = solver_req_value_matches(v->reqs[i], node_label(s, n, solver_canonical_label_key(v->reqs[i]->key)));
        v->node_ok[ni] = ok ? 1 : 2;
        return ok;
}

/* ---- solver_new ----------------------------------------------------------------------------- */

static int compile(Solver *s, char **ret_error) {
        const SolverSnapshot *snap = s->snap;
        int q;
        if (snap->n_types > SOLVER_MAX_TYPES || snap->n_pods > SOLVER_MAX_PODS ||
            snap->n_nodes > SOLVER_MAX_NODES || snap->n_nodepools > 1000 || snap->n_daemonsets > 10000) {
                *ret_error = strdup("snapshot exceeds the solver's limits");
                return -E2BIG;
        }
        q = solver_intern_get(&s->keys, SOLVER_LABEL_ZONE, &s->k_zone);
        if (q >= 0)
                q = solver_intern_get(&s->keys, SOLVER_LABEL_CAPACITY_TYPE, &s->k_ct);
        if (q >= 0)
                q = solver_intern_get(&s->keys, SOLVER_LABEL_HOSTNAME, &s->k_host);
        if (q >= 0)
                q = solver_intern_get(&s->keys, SOLVER_LABEL_NODEPOOL, &s->k_pool);
        if (q >= 0)
                q = solver_intern_get(&s->keys, SOLVER_LABEL_INSTANCE_TYPE, &s->k_type);
        if (q < 0)
                return q;
        q = compile_catalog(s);
        if (q < 0) {
                *ret_error = strdup(q == -E2BIG ? "more than 32 zones" : "invalid instance catalog");
                return q;
        }
        q = compile_pools(s);
        if (q < 0) {
                *ret_error = strdup(q == -EEXIST ? "duplicate NodePool name" : "invalid NodePool");
                return q;
        }
        q = ds_overhead(s);
        if (q < 0)
                return q;

        /* node names */
        Intern names;
        solver_intern_init(&names, s->arena);
        for (size_t i = 0; i < snap->n_nodes; i++) {
                uint32_t id;
                size_t before = names.n;
                if (isempty(snap->nodes[i].name)) {
                        solver_intern_done(&names);
                        *ret_error = strdup("node without a name");
                        return -EINVAL;
                }
                q = solver_intern_get(&names, snap->nodes[i].name, &id);
                if (q < 0) {
                        solver_intern_done(&names);
                        return q;
                }
                if (names.n == before) {
                        if (asprintf(ret_error, "duplicate node %s", snap->nodes[i].name) < 0)
                                *ret_error = NULL;
                        solver_intern_done(&names);
                        return -EINVAL;
                }
        }
        s->pod_node = solver_arena_alloc_nozero(s->arena, (snap->n_pods + 1) * sizeof(int32_t));
        if (!s->pod_node) {
                solver_intern_done(&names);
                return -ENOMEM;
        }
        for (size_t i = 0; i < snap->n_pods; i++) {
                s->pod_node[i] = -1;
                if (!isempty(snap->pods[i].node_name)) {
                        int64_t id = solver_intern_lookup(&names, snap->pods[i].node_name);
                        s->pod_node[i] = (int32_t) id;
                }
        }
        q = make_headroom(s);
        if (q >= 0)
                q = compile_nodes(s, &names);
        solver_intern_done(&names);
        if (q < 0)
                return q;
        q = compile_shapes(s);
        if (q < 0)
                return q;
        /* host-keyed counts: one slot per node (grown with the node array) */
        for (uint32_t g = 0; g < s->n_groups; g++)
                if (s->groups[g].key == TOPO_HOST) {
                        s->groups[g].hcount = calloc(s->cap_nodes, sizeof(int32_t));
                        s->groups[g].howners = calloc(s->cap_nodes, sizeof(int32_t));
                        if (!s->groups[g].hcount || !s->groups[g].howners)
                                return -ENOMEM;
                }
        q = account_bound(s);
        if (q < 0)
                return q;
        s->stamp_cap = s->vals.n + 1;
        s->stamp = calloc(s->stamp_cap, sizeof(uint32_t));
        s->scratch = malloc(8 * s->W * sizeof(uint64_t));
        if (!s->stamp || !s->scratch)
                return -ENOMEM;
        return 0;
}

int solver_new(const SolverSnapshot *snap, Solver **ret, char **ret_error) {
        if (!snap || !ret)
                return -EINVAL;
        char *err = NULL;
        Solver *s = calloc(1, sizeof(Solver));
        if (!s)
                return -ENOMEM;
        s->snap = snap;
        int q = solver_arena_new(&s->arena);
        if (q < 0) {
                free(s);
                return q;
        }
        solver_intern_init(&s->keys, s->arena);
        solver_intern_init(&s->vals, s->arena);
        solver_intern_init(&s->claims, s->arena);
        q = compile(s, &err);
        if (q < 0) {
                solver_free(s);
                if (ret_error)
                        *ret_error = err ? err : strdup(strerror(-q));
                else
                        free(err);
                return q;
        }
        *ret = s;
        return 0;
}

Solver *solver_free(Solver *s) {
        if (!s)
                return NULL;
        for (uint32_t g = 0; g < s->n_groups; g++) {
                free(s->groups[g].hcount);
                free(s->groups[g].howners);
        }
        for (uint32_t i = 0; i < s->n_nodes; i++)
                free(s->nodes[i].ports);
        free(s->nodes);
        free(s->node_types);
        free(s->shapes);
        free(s->undo);
        free(s->heap);
        free(s->retry);
        free(s->stamp);
        free(s->scratch);
        free(s->claim_zone);
        free(s->claim_zone_set);
        free(s->preempt_list);
        solver_intern_done(&s->keys);
        solver_intern_done(&s->vals);
        solver_intern_done(&s->claims);
        solver_arena_free(s->arena);
        free(s);
        return NULL;
}

void solver_get_stats(const Solver *s, SolverStats *ret) {
        *ret = (SolverStats) { .n_shapes = s->n_shapes, .n_groups = s->n_groups, .n_zones = s->n_zones,
                               .n_types = s->T };
}

const char *solver_zone_name(const Solver *s, uint32_t zone) {
        return zone < s->n_zones ? s->zones[zone] : NULL;
}
