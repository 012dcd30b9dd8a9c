/* SPDX-License-Identifier: Apache-2.0 */
/* Compiling a snapshot, and solver_new() that runs every stage: here the instance catalog
 * (interned labels, instance-type bitsets, offerings, fit tables), compiled requirements and the
 * pools; shapes and topology groups in shapes.c, existing nodes in existing.c. Everything is
 * computed once per Solver (variants lazily, in variant.c). */

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

int solver_compile_reqs(Solver *s, const SolverRequirement *const *reqs, size_t n, CReqs *c) {
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

const char *solver_describe_req(SolverArena *a, const SolverRequirement *r) {
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

int solver_zone_index(Solver *s, const char *zone, bool add) {
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

const char *solver_node_zone_name(const SolverNode *n) {
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
                const char *z = solver_node_zone_name(&snap->nodes[i]);
                if (!isempty(z))
                        zs[nz++] = z;
        }
        qsort(zs, nz, sizeof(char *), cmp_str);
        for (size_t i = 0; i < nz; i++) {
                if (i > 0 && streq(zs[i], zs[i - 1]))
                        continue;
                q = solver_zone_index(s, zs[i], true);
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
                        int z = solver_zone_index(s, of->zone, false);
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

int solver_pool_reqs_ok(const Solver *s, const SolverRequirement *const *reqs, uint32_t n, const char *pool) {
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
        /* "NAME/…" (a capacity reservation's pool of NodePool NAME) comes just before NAME */
        size_t lx = strcspn(x->name, "/"), ly = strcspn(y->name, "/");
        int c = strncmp(x->name, y->name, MIN(lx, ly));
        if (c != 0 || lx != ly)
                return c != 0 ? c : lx < ly ? -1 : 1;
        if (!x->name[lx] != !y->name[ly])
                return x->name[lx] ? -1 : 1;
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
                q = solver_compile_reqs(s, rl, np->n_requirements, &c);
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
                if (c.n_pool_reqs > 0 && !solver_pool_reqs_ok(s, c.pool_reqs, c.n_pool_reqs, np->name))
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
        q = solver_ds_overhead(s);
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
        q = solver_make_headroom(s);
        if (q >= 0)
                q = solver_compile_nodes(s, &names);
        solver_intern_done(&names);
        if (q < 0)
                return q;
        q = solver_compile_shapes(s);
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
        q = solver_account_bound(s);
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
        solver_zone_lists_free(s);
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