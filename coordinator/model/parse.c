/* SPDX-License-Identifier: Apache-2.0 */
/* Field readers with error paths, and structures every object shares: maps, quantities, requirements, selectors, taints, tolerations. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "disruption-policy.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "parse-internal.h"
#include "quantity.h"

/* ---- error context -------------------------------------------------------------------------- */


int model_fail(Ctx *c, const char *path, const char *fmt, ...) _printf_(3, 4);
int model_fail(Ctx *c, const char *path, const char *fmt, ...) {
        if (c->err && !*c->err) {
                char msg[512];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(msg, sizeof(msg), fmt, ap);
                va_end(ap);
                if (asprintf(c->err, "%s%s%s: %s", c->what ? c->what : "object", path ? ": " : "", path ? path : "",
                             msg) < 0)
                        *c->err = NULL;
        }
        return -EINVAL;
}

/* Field paths for messages; truncation of a long path is harmless. */
char *model_pathf(char *buf, size_t n, const char *fmt, ...) _printf_(3, 4);
char *model_pathf(char *buf, size_t n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, n, fmt, ap);
        va_end(ap);
        return buf;
}

bool model_present(const cJSON *v) {
        return v && !cJSON_IsNull(v);
}

/* String field: absent or null gives NULL; anything but a string is an error. */
int model_get_str(Ctx *c, const cJSON *o, const char *k, const char *path, const char **ret) {
        const cJSON *v = json_get(o, k);
        *ret = NULL;
        if (!model_present(v))
                return 0;
        if (!cJSON_IsString(v))
                return model_fail(c, path, "must be a string");
        if (strlen(v->valuestring) > 65536)
                return model_fail(c, path, "is too long");
        *ret = solver_arena_strdup(c->a, v->valuestring);
        return *ret ? 0 : -ENOMEM;
}

int model_get_int(Ctx *c, const cJSON *o, const char *k, const char *path, int64_t min, int64_t max,
                   bool *ret_set, int64_t *ret) {
        const cJSON *v = json_get(o, k);
        *ret_set = false;
        if (!model_present(v))
                return 0;
        double d;
        if (cJSON_IsNumber(v))
                d = v->valuedouble;
        else if (cJSON_IsString(v)) {
                char *end;
                d = strtod(v->valuestring, &end);
                if (*end || end == v->valuestring)
                        return model_fail(c, path, "\"%s\" is not an integer", v->valuestring);
        } else
                return model_fail(c, path, "must be an integer");
        if (d != (double) (int64_t) d)
                return model_fail(c, path, "must be an integer");
        if (d < (double) min || d > (double) max)
                return model_fail(c, path, "must be between %" PRId64 " and %" PRId64, min, max);
        *ret = (int64_t) d;
        *ret_set = true;
        return 0;
}

int model_want(Ctx *c, const cJSON *v, bool array, const char *path) {
        if (!model_present(v))
                return 0;
        if (array ? !cJSON_IsArray(v) : !cJSON_IsObject(v))
                return model_fail(c, path, array ? "must be a list" : "must be an object");
        return 1;
}

/* ---- small structures ----------------------------------------------------------------------- */

int model_parse_string_map(Ctx *c, const cJSON *m, const char *path, SolverLabel **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = model_want(c, m, false, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(m);
        if (n > 1000)
                return model_fail(c, path, "has more than 1000 entries");
        SolverLabel *l = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverLabel));
        if (!l)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                char p[512];
                if (!cJSON_IsString(e))
                        return model_fail(c, P(p, "%s.%s", path, e->string), "must be a string");
                l[k].key = solver_arena_strdup(c->a, e->string);
                l[k].value = solver_arena_strdup(c->a, e->valuestring);
                if (!l[k].key || !l[k].value)
                        return -ENOMEM;
                k++;
        }
        *ret = l;
        *ret_n = k;
        return 0;
}

int model_parse_quantity(Ctx *c, const cJSON *v, SolverResource res, const char *path, int64_t *ret) {
        char buf[64];
        const char *s;
        if (cJSON_IsString(v))
                s = v->valuestring;
        else if (cJSON_IsNumber(v)) {
                snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
                s = buf;
        } else
                return model_fail(c, path, "must be a quantity");
        int r = solver_parse_quantity(s, res, ret);
        if (r == -ERANGE)
                return model_fail(c, path, "\"%s\" is out of range", s);
        if (r < 0)
                return model_fail(c, path, "\"%s\" is not a quantity", s);
        return 0;
}

/* A map of resource names to quantities; unknown extended resources land in "other". */
int model_parse_resource_map(Ctx *c, const cJSON *m, const char *path, SolverResources *ret, bool *ret_set) {
        int r = model_want(c, m, false, path);
        if (ret_set)
                memset(ret_set, 0, _SOLVER_RES_MAX * sizeof(bool));
        if (r <= 0)
                return r;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                char p[512];
                P(p, "%s.%s", path, e->string);
                int res = solver_resource_from_name(e->string);
                if (res < 0)
                        return model_fail(c, p, "unknown resource (cpu, memory, pods, ephemeral-storage, or a domain-prefixed extended resource)");
                int64_t v;
                r = model_parse_quantity(c, e, (SolverResource) res, p, &v);
                if (r < 0)
                        return r;
                if (res == SOLVER_RES_OTHER)
                        ret->v[res] += v;
                else
                        ret->v[res] = v;
                if (ret_set)
                        ret_set[res] = true;
        }
        return 0;
}

int model_parse_string_list(Ctx *c, const cJSON *a, const char *path, const char ***ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = model_want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 10000)
                return model_fail(c, path, "has more than 10000 entries");
        const char **l = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(char *));
        if (!l)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                if (!cJSON_IsString(e))
                        return model_fail(c, P(p, "%s[%zu]", path, k), "must be a string");
                l[k] = solver_arena_strdup(c->a, e->valuestring);
                if (!l[k])
                        return -ENOMEM;
                k++;
        }
        *ret = l;
        *ret_n = k;
        return 0;
}

/* {key, operator, values[, minValues]}: node selector requirement or label selector expression. */
static int parse_requirement(Ctx *c, const cJSON *j, const char *path, bool label_selector, bool min_values,
                             SolverRequirement *ret) {
        char p[512];
        if (!cJSON_IsObject(j))
                return model_fail(c, path, "must be an object");
        const char *key, *opname;
        int r = model_get_str(c, j, "key", P(p, "%s.key", path), &key);
        if (r < 0)
                return r;
        if (isempty(key))
                return model_fail(c, P(p, "%s.key", path), "is required");
        r = model_get_str(c, j, "operator", P(p, "%s.operator", path), &opname);
        if (r < 0)
                return r;
        if (!opname)
                return model_fail(c, P(p, "%s.operator", path), "is required");
        /* Karpenter v1's NodePools add Gte and Lte (integers): Gte N is Gt N-1, Lte N is Lt N+1 */
        bool inclusive = min_values && (streq(opname, "Gte") || streq(opname, "Lte"));
        int op = inclusive ? (streq(opname, "Gte") ? SOLVER_OP_GT : SOLVER_OP_LT) : solver_operator_from_name(opname);
        if (op < 0 || (label_selector && (op == SOLVER_OP_GT || op == SOLVER_OP_LT)))
                return model_fail(c, P(p, "%s.operator", path), "\"%s\" is not one of In, NotIn, Exists, DoesNotExist%s",
                            opname, label_selector ? "" : min_values ? ", Gt, Lt, Gte, Lte" : ", Gt, Lt");
        *ret = (SolverRequirement) { .key = key, .op = (SolverOperator) op };
        const char **vals;
        r = model_parse_string_list(c, json_get(j, "values"), P(p, "%s.values", path), &vals, &ret->n_values);
        if (r < 0)
                return r;
        ret->values = vals;
        switch (op) {
        case SOLVER_OP_IN:
        case SOLVER_OP_NOT_IN:
                if (ret->n_values == 0)
                        return model_fail(c, P(p, "%s.values", path), "%s needs at least one value", opname);
                break;
        case SOLVER_OP_EXISTS:
        case SOLVER_OP_DOES_NOT_EXIST:
                if (ret->n_values != 0)
                        return model_fail(c, P(p, "%s.values", path), "must be empty with %s", opname);
                break;
        case SOLVER_OP_GT:
        case SOLVER_OP_LT: {
                char *end = NULL;
                long long v = ret->n_values == 1 ? strtoll(ret->values[0], &end, 10) : 0;
                if (ret->n_values != 1 || *end || !*ret->values[0])
                        return model_fail(c, P(p, "%s.values", path), "%s needs exactly one integer value", opname);
                if (inclusive) {
                        const char **nv = solver_arena_alloc(c->a, sizeof *nv);
                        if (!nv || !(nv[0] = solver_arena_printf(c->a, "%lld", op == SOLVER_OP_GT ? v - 1 : v + 1)))
                                return -ENOMEM;
                        ret->values = nv;
                }
                break;
        }
        }
        if (min_values) {
                bool set;
                int64_t mv;
                r = model_get_int(c, j, "minValues", P(p, "%s.minValues", path), 1, 50, &set, &mv);
                if (r < 0)
                        return r;
                if (set) {
                        if (op == SOLVER_OP_IN && (size_t) mv > ret->n_values)
                                return model_fail(c, P(p, "%s.minValues", path), "is larger than the number of values");
                        ret->min_values = (int32_t) mv;
                }
        } else if (json_get(j, "minValues"))
                return model_fail(c, P(p, "%s.minValues", path), "is only allowed in NodePool requirements");
        return 0;
}

int model_parse_requirements(Ctx *c, const cJSON *a, const char *path, bool label_selector, bool min_values,
                              SolverRequirement **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = model_want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return model_fail(c, path, "has more than 100 entries");
        SolverRequirement *l = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverRequirement));
        if (!l)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                r = parse_requirement(c, e, P(p, "%s[%zu]", path, k), label_selector, min_values, &l[k]);
                if (r < 0)
                        return r;
                k++;
        }
        *ret = l;
        *ret_n = k;
        return 0;
}

/* A nodeSelectorTerm: matchExpressions, plus matchFields on metadata.name (= hostname). */
int model_parse_term(Ctx *c, const cJSON *j, const char *path, SolverTerm *ret) {
        char p[512];
        if (!cJSON_IsObject(j))
                return model_fail(c, path, "must be an object");
        SolverRequirement *exprs, *fields;
        size_t ne, nf;
        int r = model_parse_requirements(c, json_get(j, "matchExpressions"), P(p, "%s.matchExpressions", path), false, false,
                                   &exprs, &ne);
        if (r < 0)
                return r;
        r = model_parse_requirements(c, json_get(j, "matchFields"), P(p, "%s.matchFields", path), false, false, &fields, &nf);
        if (r < 0)
                return r;
        for (size_t i = 0; i < nf; i++) {
                if (!streq(fields[i].key, "metadata.name"))
                        return model_fail(c, P(p, "%s.matchFields[%zu].key", path, i), "only metadata.name is supported");
                fields[i].key = SOLVER_LABEL_HOSTNAME;
        }
        SolverRequirement *all = solver_arena_alloc(c->a, (ne + nf + 1) * sizeof(SolverRequirement));
        if (!all)
                return -ENOMEM;
        if (ne)
                memcpy(all, exprs, ne * sizeof(*all));
        if (nf)
                memcpy(all + ne, fields, nf * sizeof(*all));
        *ret = (SolverTerm) { all, ne + nf };
        return 0;
}

int model_parse_label_selector(Ctx *c, const cJSON *j, const char *path, SolverLabelSelector *ret) {
        char p[512];
        *ret = (SolverLabelSelector) {};
        int r = model_want(c, j, false, path);
        if (r <= 0)
                return r;
        SolverLabel *ml;
        r = model_parse_string_map(c, json_get(j, "matchLabels"), P(p, "%s.matchLabels", path), &ml, &ret->n_match_labels);
        if (r < 0)
                return r;
        ret->match_labels = ml;
        SolverRequirement *ex;
        r = model_parse_requirements(c, json_get(j, "matchExpressions"), P(p, "%s.matchExpressions", path), true, false, &ex,
                               &ret->n_exprs);
        ret->exprs = ex;
        return r;
}

static int parse_effect(Ctx *c, const cJSON *j, const char *path, bool allow_empty, SolverTaintEffect *ret) {
        const char *e;
        int r = model_get_str(c, j, "effect", path, &e);
        if (r < 0)
                return r;
        if (isempty(e)) {
                if (!allow_empty)
                        return model_fail(c, path, "is required (NoSchedule, PreferNoSchedule or NoExecute)");
                *ret = SOLVER_EFFECT_ANY;
        } else if (streq(e, "NoSchedule"))
                *ret = SOLVER_EFFECT_NO_SCHEDULE;
        else if (streq(e, "PreferNoSchedule"))
                *ret = SOLVER_EFFECT_PREFER_NO_SCHEDULE;
        else if (streq(e, "NoExecute"))
                *ret = SOLVER_EFFECT_NO_EXECUTE;
        else
                return model_fail(c, path, "\"%s\" is not NoSchedule, PreferNoSchedule or NoExecute", e);
        return 0;
}

int model_parse_taints(Ctx *c, const cJSON *a, const char *path, SolverTaint **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = model_want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return model_fail(c, path, "has more than 100 entries");
        SolverTaint *t = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverTaint));
        if (!t)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                if (!cJSON_IsObject(e))
                        return model_fail(c, P(p, "%s[%zu]", path, k), "must be an object");
                r = model_get_str(c, e, "key", P(p, "%s[%zu].key", path, k), &t[k].key);
                if (r < 0)
                        return r;
                if (isempty(t[k].key))
                        return model_fail(c, p, "is required");
                r = model_get_str(c, e, "value", P(p, "%s[%zu].value", path, k), &t[k].value);
                if (r < 0)
                        return r;
                r = parse_effect(c, e, P(p, "%s[%zu].effect", path, k), false, &t[k].effect);
                if (r < 0)
                        return r;
                k++;
        }
        *ret = t;
        *ret_n = k;
        return 0;
}

int model_parse_tolerations(Ctx *c, const cJSON *a, const char *path, SolverToleration **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = model_want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return model_fail(c, path, "has more than 100 entries");
        SolverToleration *t = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverToleration));
        if (!t)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                const char *op;
                if (!cJSON_IsObject(e))
                        return model_fail(c, P(p, "%s[%zu]", path, k), "must be an object");
                r = model_get_str(c, e, "key", P(p, "%s[%zu].key", path, k), &t[k].key);
                if (r >= 0)
                        r = model_get_str(c, e, "value", P(p, "%s[%zu].value", path, k), &t[k].value);
                if (r >= 0)
                        r = model_get_str(c, e, "operator", P(p, "%s[%zu].operator", path, k), &op);
                if (r < 0)
                        return r;
                if (!op || streq(op, "Equal"))
                        t[k].exists = false;
                else if (streq(op, "Exists"))
                        t[k].exists = true;
                else
                        return model_fail(c, p, "\"%s\" is not Equal or Exists", op);
                if (isempty(t[k].key) && !t[k].exists)
                        return model_fail(c, P(p, "%s[%zu].operator", path, k), "must be Exists when the key is empty");
                r = parse_effect(c, e, P(p, "%s[%zu].effect", path, k), true, &t[k].effect);
                if (r < 0)
                        return r;
                k++;
        }
        *ret = t;
        *ret_n = k;
        return 0;
}
