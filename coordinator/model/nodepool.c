/* SPDX-License-Identifier: Apache-2.0 */

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "disruption-policy.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "quantity.h"
#include "log.h"
#include "macro.h"

/* ---- error context -------------------------------------------------------------------------- */

typedef struct Ctx {
        SolverArena *a;
        const char *what; /* "Pod default/web-0" */
        char **err;
} Ctx;

static int fail(Ctx *c, const char *path, const char *fmt, ...) _printf_(3, 4);
static int fail(Ctx *c, const char *path, const char *fmt, ...) {
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
static char *pathf(char *buf, size_t n, const char *fmt, ...) _printf_(3, 4);
static char *pathf(char *buf, size_t n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, n, fmt, ap);
        va_end(ap);
        return buf;
}
#define P(buf, ...) pathf((buf), sizeof(buf), __VA_ARGS__)

static const cJSON *get(const cJSON *o, const char *k) {
        return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *jstr_(const cJSON *o, const char *k) {
        const cJSON *v = get(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool present(const cJSON *v) {
        return v && !cJSON_IsNull(v);
}

/* String field: absent or null gives NULL; anything but a string is an error. */
static int get_str(Ctx *c, const cJSON *o, const char *k, const char *path, const char **ret) {
        const cJSON *v = get(o, k);
        *ret = NULL;
        if (!present(v))
                return 0;
        if (!cJSON_IsString(v))
                return fail(c, path, "must be a string");
        if (strlen(v->valuestring) > 65536)
                return fail(c, path, "is too long");
        *ret = solver_arena_strdup(c->a, v->valuestring);
        return *ret ? 0 : -ENOMEM;
}

static int get_int(Ctx *c, const cJSON *o, const char *k, const char *path, int64_t min, int64_t max,
                   bool *ret_set, int64_t *ret) {
        const cJSON *v = get(o, k);
        *ret_set = false;
        if (!present(v))
                return 0;
        double d;
        if (cJSON_IsNumber(v))
                d = v->valuedouble;
        else if (cJSON_IsString(v)) {
                char *end;
                d = strtod(v->valuestring, &end);
                if (*end || end == v->valuestring)
                        return fail(c, path, "\"%s\" is not an integer", v->valuestring);
        } else
                return fail(c, path, "must be an integer");
        if (d != (double) (int64_t) d)
                return fail(c, path, "must be an integer");
        if (d < (double) min || d > (double) max)
                return fail(c, path, "must be between %" PRId64 " and %" PRId64, min, max);
        *ret = (int64_t) d;
        *ret_set = true;
        return 0;
}

static int want(Ctx *c, const cJSON *v, bool array, const char *path) {
        if (!present(v))
                return 0;
        if (array ? !cJSON_IsArray(v) : !cJSON_IsObject(v))
                return fail(c, path, array ? "must be a list" : "must be an object");
        return 1;
}

/* ---- small structures ----------------------------------------------------------------------- */

static int parse_string_map(Ctx *c, const cJSON *m, const char *path, SolverLabel **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, m, false, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(m);
        if (n > 1000)
                return fail(c, path, "has more than 1000 entries");
        SolverLabel *l = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverLabel));
        if (!l)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                char p[512];
                if (!cJSON_IsString(e))
                        return fail(c, P(p, "%s.%s", path, e->string), "must be a string");
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

static int parse_quantity(Ctx *c, const cJSON *v, SolverResource res, const char *path, int64_t *ret) {
        char buf[64];
        const char *s;
        if (cJSON_IsString(v))
                s = v->valuestring;
        else if (cJSON_IsNumber(v)) {
                snprintf(buf, sizeof(buf), "%.17g", v->valuedouble);
                s = buf;
        } else
                return fail(c, path, "must be a quantity");
        int r = solver_parse_quantity(s, res, ret);
        if (r == -ERANGE)
                return fail(c, path, "\"%s\" is out of range", s);
        if (r < 0)
                return fail(c, path, "\"%s\" is not a quantity", s);
        return 0;
}

/* A map of resource names to quantities; unknown extended resources land in "other". */
static int parse_resource_map(Ctx *c, const cJSON *m, const char *path, SolverResources *ret, bool *ret_set) {
        int r = want(c, m, false, path);
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
                        return fail(c, p, "unknown resource (cpu, memory, pods, ephemeral-storage, or a domain-prefixed extended resource)");
                int64_t v;
                r = parse_quantity(c, e, (SolverResource) res, p, &v);
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

static int parse_string_list(Ctx *c, const cJSON *a, const char *path, const char ***ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 10000)
                return fail(c, path, "has more than 10000 entries");
        const char **l = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(char *));
        if (!l)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                if (!cJSON_IsString(e))
                        return fail(c, P(p, "%s[%zu]", path, k), "must be a string");
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
                return fail(c, path, "must be an object");
        const char *key, *opname;
        int r = get_str(c, j, "key", P(p, "%s.key", path), &key);
        if (r < 0)
                return r;
        if (isempty(key))
                return fail(c, P(p, "%s.key", path), "is required");
        r = get_str(c, j, "operator", P(p, "%s.operator", path), &opname);
        if (r < 0)
                return r;
        if (!opname)
                return fail(c, P(p, "%s.operator", path), "is required");
        /* Karpenter v1's NodePools add Gte and Lte (integers): Gte N is Gt N-1, Lte N is Lt N+1 */
        bool inclusive = min_values && (streq(opname, "Gte") || streq(opname, "Lte"));
        int op = inclusive ? (streq(opname, "Gte") ? SOLVER_OP_GT : SOLVER_OP_LT) : solver_operator_from_name(opname);
        if (op < 0 || (label_selector && (op == SOLVER_OP_GT || op == SOLVER_OP_LT)))
                return fail(c, P(p, "%s.operator", path), "\"%s\" is not one of In, NotIn, Exists, DoesNotExist%s",
                            opname, label_selector ? "" : min_values ? ", Gt, Lt, Gte, Lte" : ", Gt, Lt");
        *ret = (SolverRequirement) { .key = key, .op = (SolverOperator) op };
        const char **vals;
        r = parse_string_list(c, get(j, "values"), P(p, "%s.values", path), &vals, &ret->n_values);
        if (r < 0)
                return r;
        ret->values = vals;
        switch (op) {
        case SOLVER_OP_IN:
        case SOLVER_OP_NOT_IN:
                if (ret->n_values == 0)
                        return fail(c, P(p, "%s.values", path), "%s needs at least one value", opname);
                break;
        case SOLVER_OP_EXISTS:
        case SOLVER_OP_DOES_NOT_EXIST:
                if (ret->n_values != 0)
                        return fail(c, P(p, "%s.values", path), "must be empty with %s", opname);
                break;
        case SOLVER_OP_GT:
        case SOLVER_OP_LT: {
                char *end = NULL;
                long long v = ret->n_values == 1 ? strtoll(ret->values[0], &end, 10) : 0;
                if (ret->n_values != 1 || *end || !*ret->values[0])
                        return fail(c, P(p, "%s.values", path), "%s needs exactly one integer value", opname);
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
                r = get_int(c, j, "minValues", P(p, "%s.minValues", path), 1, 50, &set, &mv);
                if (r < 0)
                        return r;
                if (set) {
                        if (op == SOLVER_OP_IN && (size_t) mv > ret->n_values)
                                return fail(c, P(p, "%s.minValues", path), "is larger than the number of values");
                        ret->min_values = (int32_t) mv;
                }
        } else if (get(j, "minValues"))
                return fail(c, P(p, "%s.minValues", path), "is only allowed in NodePool requirements");
        return 0;
}

static int parse_requirements(Ctx *c, const cJSON *a, const char *path, bool label_selector, bool min_values,
                              SolverRequirement **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return fail(c, path, "has more than 100 entries");
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
static int parse_term(Ctx *c, const cJSON *j, const char *path, SolverTerm *ret) {
        char p[512];
        if (!cJSON_IsObject(j))
                return fail(c, path, "must be an object");
        SolverRequirement *exprs, *fields;
        size_t ne, nf;
        int r = parse_requirements(c, get(j, "matchExpressions"), P(p, "%s.matchExpressions", path), false, false,
                                   &exprs, &ne);
        if (r < 0)
                return r;
        r = parse_requirements(c, get(j, "matchFields"), P(p, "%s.matchFields", path), false, false, &fields, &nf);
        if (r < 0)
                return r;
        for (size_t i = 0; i < nf; i++) {
                if (!streq(fields[i].key, "metadata.name"))
                        return fail(c, P(p, "%s.matchFields[%zu].key", path, i), "only metadata.name is supported");
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

static int parse_label_selector(Ctx *c, const cJSON *j, const char *path, SolverLabelSelector *ret) {
        char p[512];
        *ret = (SolverLabelSelector) {};
        int r = want(c, j, false, path);
        if (r <= 0)
                return r;
        SolverLabel *ml;
        r = parse_string_map(c, get(j, "matchLabels"), P(p, "%s.matchLabels", path), &ml, &ret->n_match_labels);
        if (r < 0)
                return r;
        ret->match_labels = ml;
        SolverRequirement *ex;
        r = parse_requirements(c, get(j, "matchExpressions"), P(p, "%s.matchExpressions", path), true, false, &ex,
                               &ret->n_exprs);
        ret->exprs = ex;
        return r;
}

static int parse_effect(Ctx *c, const cJSON *j, const char *path, bool allow_empty, SolverTaintEffect *ret) {
        const char *e;
        int r = get_str(c, j, "effect", path, &e);
        if (r < 0)
                return r;
        if (isempty(e)) {
                if (!allow_empty)
                        return fail(c, path, "is required (NoSchedule, PreferNoSchedule or NoExecute)");
                *ret = SOLVER_EFFECT_ANY;
        } else if (streq(e, "NoSchedule"))
                *ret = SOLVER_EFFECT_NO_SCHEDULE;
        else if (streq(e, "PreferNoSchedule"))
                *ret = SOLVER_EFFECT_PREFER_NO_SCHEDULE;
        else if (streq(e, "NoExecute"))
                *ret = SOLVER_EFFECT_NO_EXECUTE;
        else
                return fail(c, path, "\"%s\" is not NoSchedule, PreferNoSchedule or NoExecute", e);
        return 0;
}

static int parse_taints(Ctx *c, const cJSON *a, const char *path, SolverTaint **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return fail(c, path, "has more than 100 entries");
        SolverTaint *t = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverTaint));
        if (!t)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                if (!cJSON_IsObject(e))
                        return fail(c, P(p, "%s[%zu]", path, k), "must be an object");
                r = get_str(c, e, "key", P(p, "%s[%zu].key", path, k), &t[k].key);
                if (r < 0)
                        return r;
                if (isempty(t[k].key))
                        return fail(c, p, "is required");
                r = get_str(c, e, "value", P(p, "%s[%zu].value", path, k), &t[k].value);
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

static int parse_tolerations(Ctx *c, const cJSON *a, const char *path, SolverToleration **ret, size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return fail(c, path, "has more than 100 entries");
        SolverToleration *t = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverToleration));
        if (!t)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512];
                const char *op;
                if (!cJSON_IsObject(e))
                        return fail(c, P(p, "%s[%zu]", path, k), "must be an object");
                r = get_str(c, e, "key", P(p, "%s[%zu].key", path, k), &t[k].key);
                if (r >= 0)
                        r = get_str(c, e, "value", P(p, "%s[%zu].value", path, k), &t[k].value);
                if (r >= 0)
                        r = get_str(c, e, "operator", P(p, "%s[%zu].operator", path, k), &op);
                if (r < 0)
                        return r;
                if (!op || streq(op, "Equal"))
                        t[k].exists = false;
                else if (streq(op, "Exists"))
                        t[k].exists = true;
                else
                        return fail(c, p, "\"%s\" is not Equal or Exists", op);
                if (isempty(t[k].key) && !t[k].exists)
                        return fail(c, P(p, "%s[%zu].operator", path, k), "must be Exists when the key is empty");
                r = parse_effect(c, e, P(p, "%s[%zu].effect", path, k), true, &t[k].effect);
                if (r < 0)
                        return r;
                k++;
        }
        *ret = t;
        *ret_n = k;
        return 0;
}

/* ---- pods ----------------------------------------------------------------------------------- */

static void res_max(SolverResources *a, const SolverResources *b) {
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                a->v[r] = MAX(a->v[r], b->v[r]);
}

static void res_add(SolverResources *a, const SolverResources *b) {
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                a->v[r] += b->v[r];
}

/* A container's requests; a resource with only a limit requests its limit. */
static int container_requests(Ctx *c, const cJSON *ct, const char *path, SolverResources *ret) {
        char p[512];
        *ret = (SolverResources) {};
        const cJSON *res = get(ct, "resources");
        int r = want(c, res, false, P(p, "%s.resources", path));
        if (r <= 0)
                return r;
        SolverResources req = {}, lim = {};
        bool req_set[_SOLVER_RES_MAX], lim_set[_SOLVER_RES_MAX];
        r = parse_resource_map(c, get(res, "requests"), P(p, "%s.resources.requests", path), &req, req_set);
        if (r < 0)
                return r;
        r = parse_resource_map(c, get(res, "limits"), P(p, "%s.resources.limits", path), &lim, lim_set);
        if (r < 0)
                return r;
        for (int i = 0; i < _SOLVER_RES_MAX; i++)
                ret->v[i] = req_set[i] ? req.v[i] : lim_set[i] ? lim.v[i] : 0;
        return 0;
}

static int add_port(Ctx *c, const cJSON *port, const char *path, SolverHostPort **ports, size_t *n, size_t *cap) {
        char p[512];
        bool set;
        int64_t hp;
        int r = get_int(c, port, "hostPort", P(p, "%s.hostPort", path), 0, 65535, &set, &hp);
        if (r < 0 || !set || hp == 0)
                return r;
        const char *proto;
        r = get_str(c, port, "protocol", P(p, "%s.protocol", path), &proto);
        if (r < 0)
                return r;
        uint8_t pr = 0;
        if (!proto || streq(proto, "TCP"))
                pr = 0;
        else if (streq(proto, "UDP"))
                pr = 1;
        else if (streq(proto, "SCTP"))
                pr = 2;
        else
                return fail(c, p, "\"%s\" is not TCP, UDP or SCTP", proto);
        if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 4;
                SolverHostPort *np = solver_arena_realloc(c->a, *ports, *cap * sizeof(**ports), nc * sizeof(**ports));
                if (!np)
                        return -ENOMEM;
                *ports = np;
                *cap = nc;
        }
        (*ports)[(*n)++] = (SolverHostPort) { (uint16_t) hp, pr };
        return 0;
}

static int parse_affinity_terms(Ctx *c, const cJSON *a, const char *path, bool weighted, SolverPodAffinityTerm **ret,
                                size_t *ret_n) {
        *ret = NULL;
        *ret_n = 0;
        int r = want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return fail(c, path, "has more than 100 entries");
        SolverPodAffinityTerm *t = solver_arena_alloc(c->a, ((size_t) n + 1) * sizeof(SolverPodAffinityTerm));
        if (!t)
                return -ENOMEM;
        size_t k = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char p[512], base[512];
                const cJSON *term = e;
                P(base, "%s[%zu]", path, k);
                if (!cJSON_IsObject(e))
                        return fail(c, base, "must be an object");
                if (weighted) {
                        bool set;
                        int64_t w;
                        r = get_int(c, e, "weight", P(p, "%s.weight", base), 1, 100, &set, &w);
                        if (r < 0)
                                return r;
                        if (!set)
                                return fail(c, p, "is required");
                        t[k].weight = (int32_t) w;
                        term = get(e, "podAffinityTerm");
                        P(base, "%s[%zu].podAffinityTerm", path, k);
                        if (!cJSON_IsObject(term))
                                return fail(c, base, "is required");
                }
                r = get_str(c, term, "topologyKey", P(p, "%s.topologyKey", base), &t[k].topology_key);
                if (r < 0)
                        return r;
                if (isempty(t[k].topology_key))
                        return fail(c, p, "is required");
                r = parse_label_selector(c, get(term, "labelSelector"), P(p, "%s.labelSelector", base), &t[k].selector);
                if (r < 0)
                        return r;
                const char **ns;
                r = parse_string_list(c, get(term, "namespaces"), P(p, "%s.namespaces", base), &ns, &t[k].n_namespaces);
                if (r < 0)
                        return r;
                t[k].namespaces = ns;
                const cJSON *nss = get(term, "namespaceSelector");
                if (cJSON_IsObject(nss)) {
                        if (cJSON_GetArraySize(nss) == 0 ||
                            (cJSON_GetArraySize(get(nss, "matchLabels")) == 0 &&
                             cJSON_GetArraySize(get(nss, "matchExpressions")) == 0))
                                t[k].all_namespaces = true;
                        else
                                return fail(c, P(p, "%s.namespaceSelector", base),
                                            "only the empty selector (all namespaces) is supported");
                }
                k++;
        }
        *ret = t;
        *ret_n = k;
        return 0;
}

typedef struct PodExtra {
        const char **claims; /* "ns/name" of persistentVolumeClaim volumes */
        size_t n_claims;
        const char *priority_class;
        bool priority_set;
} PodExtra;

static int parse_pod_spec(Ctx *c, const cJSON *spec, const char *ns, const SolverLabel *labels, size_t n_labels,
                          const char *base, SolverPod *p, PodExtra *x) {
        char path[512], p2[512];
        if (!cJSON_IsObject(spec))
                return fail(c, base, "must be an object");
        int r;
        /* requests */
        const cJSON *containers = get(spec, "containers");
        if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) == 0)
                return fail(c, P(path, "%s.containers", base), "needs at least one container");
        SolverResources sum = {}, one;
        size_t k = 0;
        SolverHostPort *ports = NULL;
        size_t np = 0, capp = 0;
        const cJSON *ct;
        cJSON_ArrayForEach(ct, containers) {
                P(path, "%s.containers[%zu]", base, k);
                if (!cJSON_IsObject(ct))
                        return fail(c, path, "must be an object");
                r = container_requests(c, ct, path, &one);
                if (r < 0)
                        return r;
                res_add(&sum, &one);
                const cJSON *pl = get(ct, "ports");
                r = want(c, pl, true, P(p2, "%s.ports", path));
                if (r < 0)
                        return r;
                size_t pi = 0;
                const cJSON *port;
                cJSON_ArrayForEach(port, pl) {
                        char pp[600];
                        r = add_port(c, port, P(pp, "%s.ports[%zu]", path, pi++), &ports, &np, &capp);
                        if (r < 0)
                                return r;
                }
                k++;
        }
        /* init containers: sidecars (restartPolicy Always) keep running */
        SolverResources init_max = {}, sidecars = {};
        const cJSON *inits = get(spec, "initContainers");
        r = want(c, inits, true, P(path, "%s.initContainers", base));
        if (r < 0)
                return r;
        k = 0;
        cJSON_ArrayForEach(ct, inits) {
                P(path, "%s.initContainers[%zu]", base, k++);
                if (!cJSON_IsObject(ct))
                        return fail(c, path, "must be an object");
                r = container_requests(c, ct, path, &one);
                if (r < 0)
                        return r;
                const cJSON *rp = get(ct, "restartPolicy");
                if (cJSON_IsString(rp) && streq(rp->valuestring, "Always")) {
                        res_add(&sidecars, &one);
                        res_max(&init_max, &sidecars);
                } else {
                        res_add(&one, &sidecars);
                        res_max(&init_max, &one);
                }
        }
        res_add(&sum, &sidecars);
        res_max(&sum, &init_max);
        SolverResources overhead = {};
        r = parse_resource_map(c, get(spec, "overhead"), P(path, "%s.overhead", base), &overhead, NULL);
        if (r < 0)
                return r;
        res_add(&sum, &overhead);
        sum.v[SOLVER_RES_PODS] = 1;
        p->requests = sum;
        p->host_ports = ports;
        p->n_host_ports = np;

        r = get_str(c, spec, "nodeName", P(path, "%s.nodeName", base), &p->node_name);
        if (r < 0)
                return r;
        if (isempty(p->node_name))
                p->node_name = NULL;
        bool set;
        int64_t prio;
        r = get_int(c, spec, "priority", P(path, "%s.priority", base), INT32_MIN, INT32_MAX, &set, &prio);
        if (r < 0)
                return r;
        p->priority = set ? (int32_t) prio : 0;
        x->priority_set = set;
        r = get_str(c, spec, "priorityClassName", P(path, "%s.priorityClassName", base), &x->priority_class);
        if (r < 0)
                return r;
        const char *pp;
        r = get_str(c, spec, "preemptionPolicy", P(path, "%s.preemptionPolicy", base), &pp);
        if (r < 0)
                return r;
        if (pp && !streq(pp, "Never") && !streq(pp, "PreemptLowerPriority"))
                return fail(c, path, "\"%s\" is not Never or PreemptLowerPriority", pp);
        p->preempt_never = pp && streq(pp, "Never");

        SolverLabel *sel;
        r = parse_string_map(c, get(spec, "nodeSelector"), P(path, "%s.nodeSelector", base), &sel, &p->n_node_selector);
        if (r < 0)
                return r;
        p->node_selector = sel;
        SolverToleration *tol;
        r = parse_tolerations(c, get(spec, "tolerations"), P(path, "%s.tolerations", base), &tol, &p->n_tolerations);
        if (r < 0)
                return r;
        p->tolerations = tol;

        const cJSON *aff = get(spec, "affinity");
        r = want(c, aff, false, P(path, "%s.affinity", base));
        if (r < 0)
                return r;
        const cJSON *na = get(aff, "nodeAffinity");
        r = want(c, na, false, P(path, "%s.affinity.nodeAffinity", base));
        if (r < 0)
                return r;
        const cJSON *req = get(na, "requiredDuringSchedulingIgnoredDuringExecution");
        if (present(req)) {
                const cJSON *terms = get(req, "nodeSelectorTerms");
                P(path, "%s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", base);
                if (!cJSON_IsArray(terms) || cJSON_GetArraySize(terms) == 0)
                        return fail(c, path, "needs at least one term");
                size_t n = (size_t) cJSON_GetArraySize(terms);
                SolverTerm *t = solver_arena_alloc(c->a, (n + 1) * sizeof(SolverTerm));
                if (!t)
                        return -ENOMEM;
                k = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, terms) {
                        r = parse_term(c, e, P(p2, "%s[%zu]", path, k), &t[k]);
                        if (r < 0)
                                return r;
                        k++;
                }
                p->required_terms = t;
                p->n_required_terms = k;
        }
        const cJSON *pref = get(na, "preferredDuringSchedulingIgnoredDuringExecution");
        P(path, "%s.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", base);
        r = want(c, pref, true, path);
        if (r < 0)
                return r;
        if (r > 0) {
                size_t n = (size_t) cJSON_GetArraySize(pref);
                SolverPreferredTerm *t = solver_arena_alloc(c->a, (n + 1) * sizeof(SolverPreferredTerm));
                if (!t)
                        return -ENOMEM;
                k = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, pref) {
                        int64_t w;
                        r = get_int(c, e, "weight", P(p2, "%s[%zu].weight", path, k), 1, 100, &set, &w);
                        if (r < 0)
                                return r;
                        if (!set)
                                return fail(c, p2, "is required");
                        t[k].weight = (int32_t) w;
                        r = parse_term(c, get(e, "preference"), P(p2, "%s[%zu].preference", path, k), &t[k].term);
                        if (r < 0)
                                return r;
                        k++;
                }
                p->preferred_terms = t;
                p->n_preferred_terms = k;
        }
        static const struct {
                const char *a, *kind;
                bool weighted;
                size_t off, noff;
        } pa[] = {
                { "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution", false, offsetof(SolverPod, affinity),
                  offsetof(SolverPod, n_affinity) },
                { "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution", false,
                  offsetof(SolverPod, anti_affinity), offsetof(SolverPod, n_anti_affinity) },
                { "podAffinity", "preferredDuringSchedulingIgnoredDuringExecution", true,
                  offsetof(SolverPod, pref_affinity), offsetof(SolverPod, n_pref_affinity) },
                { "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", true,
                  offsetof(SolverPod, pref_anti_affinity), offsetof(SolverPod, n_pref_anti_affinity) },
        };
        for (size_t i = 0; i < ELEMENTSOF(pa); i++) {
                const cJSON *o = get(aff, pa[i].a);
                r = want(c, o, false, P(path, "%s.affinity.%s", base, pa[i].a));
                if (r < 0)
                        return r;
                SolverPodAffinityTerm *t;
                size_t n;
                r = parse_affinity_terms(c, get(o, pa[i].kind), P(path, "%s.affinity.%s.%s", base, pa[i].a, pa[i].kind),
                                         pa[i].weighted, &t, &n);
                if (r < 0)
                        return r;
                *(const SolverPodAffinityTerm **) ((char *) p + pa[i].off) = t;
                *(size_t *) ((char *) p + pa[i].noff) = n;
        }

        /* topology spread */
        const cJSON *tsc = get(spec, "topologySpreadConstraints");
        P(path, "%s.topologySpreadConstraints", base);
        r = want(c, tsc, true, path);
        if (r < 0)
                return r;
        if (r > 0) {
                size_t n = (size_t) cJSON_GetArraySize(tsc);
                SolverSpread *s = solver_arena_alloc(c->a, (n + 1) * sizeof(SolverSpread));
                if (!s)
                        return -ENOMEM;
                k = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, tsc) {
                        int64_t v;
                        const char *wu;
                        P(p2, "%s[%zu]", path, k);
                        if (!cJSON_IsObject(e))
                                return fail(c, p2, "must be an object");
                        char p3[600];
                        r = get_int(c, e, "maxSkew", P(p3, "%s.maxSkew", p2), 1, INT32_MAX, &set, &v);
                        if (r < 0)
                                return r;
                        if (!set)
                                return fail(c, p3, "is required");
                        s[k].max_skew = (int32_t) v;
                        r = get_str(c, e, "topologyKey", P(p3, "%s.topologyKey", p2), &s[k].topology_key);
                        if (r < 0)
                                return r;
                        if (isempty(s[k].topology_key))
                                return fail(c, p3, "is required");
                        r = get_str(c, e, "whenUnsatisfiable", P(p3, "%s.whenUnsatisfiable", p2), &wu);
                        if (r < 0)
                                return r;
                        if (!wu || (!streq(wu, "DoNotSchedule") && !streq(wu, "ScheduleAnyway")))
                                return fail(c, p3, "must be DoNotSchedule or ScheduleAnyway");
                        s[k].schedule_anyway = streq(wu, "ScheduleAnyway");
                        r = get_int(c, e, "minDomains", P(p3, "%s.minDomains", p2), 1, INT32_MAX, &set, &v);
                        if (r < 0)
                                return r;
                        s[k].min_domains = set ? (int32_t) v : 0;
                        r = parse_label_selector(c, get(e, "labelSelector"), P(p3, "%s.labelSelector", p2), &s[k].selector);
                        if (r < 0)
                                return r;
                        /* matchLabelKeys: the pod's own values join the selector */
                        const char **keys;
                        size_t nk;
                        r = parse_string_list(c, get(e, "matchLabelKeys"), P(p3, "%s.matchLabelKeys", p2), &keys, &nk);
                        if (r < 0)
                                return r;
                        if (nk) {
                                SolverLabel *ml = solver_arena_alloc(c->a, (s[k].selector.n_match_labels + nk + 1) *
                                                                                   sizeof(SolverLabel));
                                if (!ml)
                                        return -ENOMEM;
                                size_t m = s[k].selector.n_match_labels;
                                if (m)
                                        memcpy(ml, s[k].selector.match_labels, m * sizeof(SolverLabel));
                                for (size_t i = 0; i < nk; i++)
                                        for (size_t j = 0; j < n_labels; j++)
                                                if (streq(labels[j].key, keys[i]))
                                                        ml[m++] = labels[j];
                                s[k].selector.match_labels = ml;
                                s[k].selector.n_match_labels = m;
                        }
                        k++;
                }
                p->spreads = s;
                p->n_spreads = k;
        }

        /* volumes: claims are resolved to zones once every object is known */
        const cJSON *vols = get(spec, "volumes");
        P(path, "%s.volumes", base);
        r = want(c, vols, true, path);
        if (r < 0)
                return r;
        if (r > 0) {
                size_t n = (size_t) cJSON_GetArraySize(vols);
                x->claims = solver_arena_alloc(c->a, (n + 1) * sizeof(char *));
                if (!x->claims)
                        return -ENOMEM;
                k = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, vols) {
                        const cJSON *pvc = get(e, "persistentVolumeClaim");
                        if (cJSON_IsObject(pvc)) {
                                const char *cn;
                                r = get_str(c, pvc, "claimName", P(p2, "%s[%zu].persistentVolumeClaim.claimName", path, k), &cn);
                                if (r < 0)
                                        return r;
                                if (isempty(cn))
                                        return fail(c, p2, "is required");
                                x->claims[x->n_claims] = solver_arena_printf(c->a, "%s/%s", ns, cn);
                                if (!x->claims[x->n_claims++])
                                        return -ENOMEM;
                        }
                        k++;
                }
        }
        return 0;
}

static int parse_meta(Ctx *c, const cJSON *obj, const char *base, const char **ret_name, const char **ret_ns,
                      SolverLabel **ret_labels, size_t *ret_n, bool name_required) {
        char p[512];
        const cJSON *meta = get(obj, "metadata");
        int r = want(c, meta, false, P(p, "%smetadata", base));
        if (r < 0)
                return r;
        r = get_str(c, meta, "name", P(p, "%smetadata.name", base), ret_name);
        if (r < 0)
                return r;
        if (name_required && isempty(*ret_name))
                return fail(c, p, "is required");
        if (ret_ns) {
                r = get_str(c, meta, "namespace", P(p, "%smetadata.namespace", base), ret_ns);
                if (r < 0)
                        return r;
                if (isempty(*ret_ns))
                        *ret_ns = "default";
        }
        if (ret_labels)
                return parse_string_map(c, get(meta, "labels"), P(p, "%smetadata.labels", base), ret_labels, ret_n);
        return 0;
}

static bool annotation_true(const cJSON *obj, const char *key) {
        const cJSON *v = get(get(get(obj, "metadata"), "annotations"), key);
        return cJSON_IsString(v) && streq(v->valuestring, "true");
}

static int pod_from_json(Ctx *c, const cJSON *j, SolverPod *p, PodExtra *x) {
        const char *name, *ns;
        SolverLabel *labels;
        size_t nl;
        *p = (SolverPod) {};
        *x = (PodExtra) {};
        int r = parse_meta(c, j, "", &name, &ns, &labels, &nl, true);
        if (r < 0)
                return r;
        p->name = name;
        p->namespace_ = ns;
        p->labels = labels;
        p->n_labels = nl;
        p->do_not_disrupt = annotation_true(j, "karpenter.sh/do-not-disrupt") ||
                            annotation_true(j, "nodesmith.io/do-not-disrupt");
        const cJSON *dc = get(get(get(j, "metadata"), "annotations"), "controller.kubernetes.io/pod-deletion-cost");
        if (cJSON_IsString(dc)) {
                char *end;
                errno = 0;
                long long v = strtoll(dc->valuestring, &end, 10);
                if (errno == 0 && end != dc->valuestring && *end == 0 && v >= INT32_MIN && v <= INT32_MAX)
                        p->deletion_cost = v;
        }
        const cJSON *owners = get(get(j, "metadata"), "ownerReferences");
        const cJSON *ow;
        cJSON_ArrayForEach(ow, owners) {
                const cJSON *kind = get(ow, "kind");
                if (cJSON_IsString(kind) && streq(kind->valuestring, "DaemonSet"))
                        p->daemonset = true;
        }
        return parse_pod_spec(c, get(j, "spec"), ns, labels, nl, "spec", p, x);
}

int nodepool_parse_pod(SolverArena *a, const cJSON *pod, SolverPod *ret, char **ret_error) {
        char what[300];
        const cJSON *n = get(get(pod, "metadata"), "name"), *ns = get(get(pod, "metadata"), "namespace");
        snprintf(what, sizeof(what), "Pod %s/%s", cJSON_IsString(ns) ? ns->valuestring : "default",
                 cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        PodExtra x;
        return pod_from_json(&c, pod, ret, &x);
}

/* ---- NodePool, EC2NodeClass, Node ----------------------------------------------------------- */

int nodepool_parse_duration(const char *s, int64_t *ret) {
        if (isempty(s))
                return -EINVAL;
        if (streq(s, "Never")) {
                *ret = -1;
                return 0;
        }
        double total = 0;
        const char *p = s;
        while (*p) {
                char *end;
                double v = strtod(p, &end);
                if (end == p || v < 0)
                        return -EINVAL;
                p = end;
                double mul;
                if (strncmp(p, "ns", 2) == 0)
                        mul = 1e-9, p += 2;
                else if (strncmp(p, "us", 2) == 0 || strncmp(p, "µs", 3) == 0)
                        mul = 1e-6, p += (*p == 'u' ? 2 : 3);
                else if (strncmp(p, "ms", 2) == 0)
                        mul = 1e-3, p += 2;
                else if (*p == 's')
                        mul = 1, p++;
                else if (*p == 'm')
                        mul = 60, p++;
                else if (*p == 'h')
                        mul = 3600, p++;
                else
                        return -EINVAL;
                total += v * mul;
                if (total > 1e12)
                        return -ERANGE;
        }
        *ret = (int64_t) total;
        return 0;
}

static int get_duration(Ctx *c, const cJSON *o, const char *k, const char *path, int64_t dflt, int64_t *ret) {
        const char *s;
        int r = get_str(c, o, k, path, &s);
        if (r < 0)
                return r;
        *ret = dflt;
        if (!s)
                return 0;
        if (nodepool_parse_duration(s, ret) < 0)
                return fail(c, path, "\"%s\" is not a duration (like 720h, 30m, 10s or Never)", s);
        return 0;
}

static bool api_group_is(const cJSON *obj, const char *group) {
        const cJSON *v = get(obj, "apiVersion");
        if (!cJSON_IsString(v))
                return false;
        size_t n = strlen(group);
        return strncmp(v->valuestring, group, n) == 0 && v->valuestring[n] == '/';
}

/* Karpenter v1 NodePool fields nodesmith does not carry out, with the reason; and the fields it
 * knows at each level. Anything else is not a v1 field. */
typedef struct PoolField {
        const char *path; /* "spec", "spec.template.spec"... */
        const char *const *known;
} PoolField;

typedef struct PoolRefusal {
        const char *path, *why;
} PoolRefusal;

static const PoolRefusal pool_refused[] = {
        { "spec.replicas", "static NodePools (a fixed number of nodes) are not supported yet: nodesmith launches for "
                           "pending pods only; remove replicas and keep the pool dynamic" },
        { "spec.limits.nodes", "a limit on the number of nodes is not supported yet; limit cpu or memory instead" },
        { "spec.template.spec.kubelet", "belongs to the EC2NodeClass in v1 (spec.kubelet); `nodesmithctl convert` moves it" },
        {}
};

static int pool_fields(Ctx *c, const cJSON *j) {
        static const char *const spec[] = { "template", "disruption", "limits", "weight", "headroom", "replicas", NULL };
        static const char *const tmpl[] = { "metadata", "spec", NULL };
        static const char *const meta[] = { "labels", "annotations", NULL };
        static const char *const tspec[] = { "requirements", "taints", "startupTaints", "nodeClassRef", "expireAfter",
                                             "terminationGracePeriod", "kubelet", NULL };
        static const char *const ref[] = { "group", "kind", "name", NULL };
        static const char *const dis[] = { "consolidationPolicy", "consolidateAfter", "budgets", "consolidationThreshold",
                                           "churnGuard", NULL };
        static const PoolField levels[] = {
                { "spec", spec }, { "spec.template", tmpl }, { "spec.template.metadata", meta },
                { "spec.template.spec", tspec }, { "spec.template.spec.nodeClassRef", ref }, { "spec.disruption", dis },
        };
        char p[300];
        for (size_t i = 0; i < ELEMENTSOF(levels); i++) {
                const cJSON *o = j;
                char path[128], *save = NULL;
                snprintf(path, sizeof path, "%s", levels[i].path);
                for (char *part = strtok_r(path, ".", &save); part && o; part = strtok_r(NULL, ".", &save))
                        o = get(o, part);
                const cJSON *k, *obj = cJSON_IsObject(o) ? o : NULL;
                cJSON_ArrayForEach(k, obj) {
                        bool ok = false;
                        for (const char *const *n = levels[i].known; *n && !ok; n++)
                                ok = streq(*n, k->string);
                        snprintf(p, sizeof p, "%s.%s", levels[i].path, k->string);
                        if (!ok)
                                return fail(c, p, "is not a field of Karpenter v1's NodePool");
                }
        }
        for (const PoolRefusal *r = pool_refused; r->path; r++) {
                const cJSON *o = j;
                char path[128], *save = NULL;
                snprintf(path, sizeof path, "%s", r->path);
                for (char *part = strtok_r(path, ".", &save); part && o; part = strtok_r(NULL, ".", &save))
                        o = get(o, part);
                if (present(o))
                        return fail(c, r->path, "is not supported: %s", r->why);
        }
        return 0;
}

int nodepool_parse_nodepool(SolverArena *a, const cJSON *j, SolverNodePool *p, NodePoolExtra *x, char **ret_error) {
        char what[300], path[512];
        const cJSON *n = get(get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "NodePool %s", cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *p = (SolverNodePool) {};
        *x = (NodePoolExtra) { .expire_after_s = 720 * 3600, .termination_grace_s = -1, .consolidate_after_s = 0 };
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                p->limits.v[r] = -1;
        int r = parse_meta(&c, j, "", &p->name, NULL, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = get(j, "spec");
        if (!cJSON_IsObject(spec))
                return fail(&c, "spec", "is required");
        r = pool_fields(&c, j);
        if (r < 0)
                return r;
        bool set;
        int64_t w;
        r = get_int(&c, spec, "weight", "spec.weight", 1, 100, &set, &w);
        if (r < 0)
                return r;
        p->weight = set ? (int32_t) w : 0;
        const cJSON *tmpl = get(spec, "template");
        if (!cJSON_IsObject(tmpl))
                return fail(&c, "spec.template", "is required");
        const cJSON *tmeta = get(tmpl, "metadata");
        r = want(&c, tmeta, false, "spec.template.metadata");
        if (r < 0)
                return r;
        SolverLabel *labels;
        r = parse_string_map(&c, get(tmeta, "labels"), "spec.template.metadata.labels", &labels, &p->n_labels);
        if (r < 0)
                return r;
        p->labels = labels;
        for (size_t i = 0; i < p->n_labels; i++) {
                const char *k = solver_canonical_label_key(p->labels[i].key);
                if (streq(k, SOLVER_LABEL_HOSTNAME) || streq(k, SOLVER_LABEL_NODEPOOL) || streq(k, SOLVER_LABEL_ZONE) ||
                    streq(k, SOLVER_LABEL_CAPACITY_TYPE) || streq(k, SOLVER_LABEL_INSTANCE_TYPE) ||
                    strncmp(k, SOLVER_LABEL_INSTANCE_PREFIX, strlen(SOLVER_LABEL_INSTANCE_PREFIX)) == 0)
                        return fail(&c, P(path, "spec.template.metadata.labels.%s", p->labels[i].key),
                                    "is a well-known label; use a requirement instead");
        }
        const cJSON *ts = get(tmpl, "spec");
        if (!cJSON_IsObject(ts))
                return fail(&c, "spec.template.spec", "is required");
        SolverRequirement *reqs;
        r = parse_requirements(&c, get(ts, "requirements"), "spec.template.spec.requirements", false, true, &reqs,
                               &p->n_requirements);
        if (r < 0)
                return r;
        p->requirements = reqs;
        SolverTaint *t;
        r = parse_taints(&c, get(ts, "taints"), "spec.template.spec.taints", &t, &p->n_taints);
        if (r < 0)
                return r;
        p->taints = t;
        r = parse_taints(&c, get(ts, "startupTaints"), "spec.template.spec.startupTaints", &t, &p->n_startup_taints);
        if (r < 0)
                return r;
        p->startup_taints = t;
        const cJSON *ref = get(ts, "nodeClassRef");
        r = want(&c, ref, false, "spec.template.spec.nodeClassRef");
        if (r < 0)
                return r;
        r = get_str(&c, ref, "name", "spec.template.spec.nodeClassRef.name", &x->node_class);
        if (r < 0)
                return r;
        p->node_class = x->node_class;
        r = get_duration(&c, ts, "expireAfter", "spec.template.spec.expireAfter", 720 * 3600, &x->expire_after_s);
        if (r < 0)
                return r;
        r = get_duration(&c, ts, "terminationGracePeriod", "spec.template.spec.terminationGracePeriod", -1,
                         &x->termination_grace_s);
        if (r < 0)
                return r;
        const cJSON *dis = get(spec, "disruption");
        r = want(&c, dis, false, "spec.disruption");
        if (r < 0)
                return r;
        r = get_str(&c, dis, "consolidationPolicy", "spec.disruption.consolidationPolicy", &x->consolidation_policy);
        if (r < 0)
                return r;
        if (!x->consolidation_policy)
                x->consolidation_policy = "WhenEmptyOrUnderutilized";
        else if (!streq(x->consolidation_policy, "WhenEmpty") &&
                 !streq(x->consolidation_policy, "WhenEmptyOrUnderutilized") && !streq(x->consolidation_policy, "Balanced"))
                return fail(&c, "spec.disruption.consolidationPolicy",
                            "\"%s\" is not WhenEmpty, WhenEmptyOrUnderutilized or Balanced", x->consolidation_policy);
        r = get_duration(&c, dis, "consolidateAfter", "spec.disruption.consolidateAfter", 0, &x->consolidate_after_s);
        if (r < 0)
                return r;
        const cJSON *budgets = get(dis, "budgets");
        r = want(&c, budgets, true, "spec.disruption.budgets");
        if (r < 0)
                return r;
        size_t bi = 0;
        const cJSON *b;
        cJSON_ArrayForEach(b, budgets) {
                const cJSON *nodes = get(b, "nodes");
                P(path, "spec.disruption.budgets[%zu].nodes", bi++);
                if (!cJSON_IsString(nodes))
                        return fail(&c, path, "is required (a number or a percentage)");
                const char *s = nodes->valuestring;
                char *end;
                long v = strtol(s, &end, 10);
                if (end == s || v < 0 || (*end && !(end[0] == '%' && !end[1] && v <= 100)))
                        return fail(&c, path, "\"%s\" is not a number or a percentage", s);
                const char *sched, *dur;
                int64_t d;
                P(path, "spec.disruption.budgets[%zu].schedule", bi - 1);
                r = get_str(&c, b, "schedule", path, &sched);
                if (r < 0)
                        return r;
                if (sched && disruption_cron_valid(sched) < 0)
                        return fail(&c, path, "\"%s\" is not a cron schedule (five fields, or @daily...)", sched);
                P(path, "spec.disruption.budgets[%zu].duration", bi - 1);
                r = get_str(&c, b, "duration", path, &dur);
                if (r < 0)
                        return r;
                if (!sched != !dur)
                        return fail(&c, path, "schedule and duration go together");
                if (dur && (nodepool_parse_duration(dur, &d) < 0 || d <= 0))
                        return fail(&c, path, "\"%s\" is not a positive duration", dur);
                const cJSON *reasons = get(b, "reasons"), *rs;
                P(path, "spec.disruption.budgets[%zu].reasons", bi - 1);
                r = want(&c, reasons, true, path);
                if (r < 0)
                        return r;
                cJSON_ArrayForEach(rs, reasons)
                        if (!cJSON_IsString(rs) || (!streq(rs->valuestring, "Empty") && !streq(rs->valuestring, "Drifted") &&
                                                    !streq(rs->valuestring, "Underutilized")))
                                return fail(&c, path, "reasons are Empty, Drifted or Underutilized");
        }
        /* Balanced: an integer consolidationThreshold is its K (Karpenter's BalancedK, 2) */
        const cJSON *kth = get(dis, "consolidationThreshold");
        bool balanced = streq(x->consolidation_policy, "Balanced");
        x->balanced_k = balanced ? 2 : 0;
        if (cJSON_IsNumber(kth)) {
                int64_t k;
                r = get_int(&c, dis, "consolidationThreshold", "spec.disruption.consolidationThreshold", 1, 1000, &set, &k);
                if (r < 0)
                        return r;
                if (!balanced)
                        return fail(&c, "spec.disruption.consolidationThreshold",
                                    "an integer goes with consolidationPolicy Balanced (its K); nodesmith's own threshold "
                                    "is a saving such as \"15%%\"");
                x->balanced_k = (int32_t) k;
        }
        /* nodesmith's answers to consolidation churn */
        const char *th = NULL;
        if (!cJSON_IsNumber(kth))
                r = get_str(&c, dis, "consolidationThreshold", "spec.disruption.consolidationThreshold", &th);
        if (r < 0)
                return r;
        x->consolidation_threshold = -1;
        if (th) {
                char *end;
                double v = strtod(th, &end);
                if (end != th && *end == '%' && !end[1])
                        v /= 100.0;
                else if (end == th || *end)
                        v = -1;
                if (!(v >= 0 && v < 1))
                        return fail(&c, "spec.disruption.consolidationThreshold",
                                    "\"%s\" is not a fraction in [0, 1) or a percentage below 100%%", th);
                x->consolidation_threshold = v;
        }
        r = get_duration(&c, dis, "churnGuard", "spec.disruption.churnGuard", -1, &x->churn_guard_s);
        if (r < 0)
                return r;
        x->budgets = budgets ? cJSON_Duplicate(budgets, true) : NULL;
        if (budgets && !x->budgets)
                return -ENOMEM;
        SolverResources lim = {};
        bool lim_set[_SOLVER_RES_MAX];
        r = parse_resource_map(&c, get(spec, "limits"), "spec.limits", &lim, lim_set);
        if (r < 0)
                return r;
        for (int i = 0; i < _SOLVER_RES_MAX; i++)
                if (lim_set[i])
                        p->limits.v[i] = lim.v[i];
        const cJSON *hr = get(spec, "headroom");
        r = parse_resource_map(&c, hr, "spec.headroom", &p->headroom, lim_set);
        if (r < 0)
                return r;
        for (int i = 0; i < _SOLVER_RES_MAX; i++)
                if (lim_set[i] && i != SOLVER_RES_CPU && i != SOLVER_RES_MEMORY && i != SOLVER_RES_PODS)
                        return fail(&c, P(path, "spec.headroom.%s", solver_resource_to_name(i)),
                                    "only cpu, memory and pods may be kept free");
        if (p->headroom.v[SOLVER_RES_PODS] > 1000)
                return fail(&c, "spec.headroom.pods", "must be at most 1000");
        return 0;
}

/* An eviction threshold: a quantity, or a percentage of the resource's capacity. */
static int eviction_threshold(Ctx *c, const cJSON *v, SolverResource res, const char *path, bool *ret_set,
                              int64_t *ret, bool *ret_pct_set, double *ret_pct) {
        if (!present(v))
                return 0;
        if (cJSON_IsString(v) && strchr(v->valuestring, '%')) {
                double pct;
                if (quantity_parse_percent(v->valuestring, &pct) < 0 || pct < 0 || pct > 100)
                        return fail(c, path, "\"%s\" is not a percentage", v->valuestring);
                *ret_pct_set = true;
                *ret_pct = pct;
                return 0;
        }
        int r = parse_quantity(c, v, res, path, ret);
        if (r >= 0)
                *ret_set = true;
        return r;
}

int nodepool_parse_nodeclass(SolverArena *a, const cJSON *j, NodeClass *nc, char **ret_error) {
        char what[300], path[512];
        const cJSON *n = get(get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "EC2NodeClass %s", cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *nc = (NodeClass) { .http_tokens_required = true, .http_put_hop_limit = 1 };
        int r = parse_meta(&c, j, "", &nc->name, NULL, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = get(j, "spec");
        if (!cJSON_IsObject(spec))
                return fail(&c, "spec", "is required");
        r = nodeclass_check(spec, what, ret_error);
        if (r < 0)
                return r;
        r = get_str(&c, spec, "amiFamily", "spec.amiFamily", &nc->ami_family);
        if (r < 0)
                return r;
        static const char *const families[] = { "AL2023", "AL2", "Bottlerocket", "Windows2019", "Windows2022", "Custom" };
        bool ok = !nc->ami_family;
        for (size_t i = 0; i < ELEMENTSOF(families) && !ok; i++)
                ok = streq(nc->ami_family, families[i]);
        if (!ok)
                return fail(&c, "spec.amiFamily", "\"%s\" is not AL2023, AL2, Bottlerocket, Windows2019, Windows2022 or Custom",
                            nc->ami_family);
        if (!nc->ami_family)
                nc->ami_family = "AL2023";
        static const char *const term_lists[] = { "amiSelectorTerms", "subnetSelectorTerms", "securityGroupSelectorTerms" };
        for (size_t i = 0; i < ELEMENTSOF(term_lists); i++) {
                const cJSON *tl = get(spec, term_lists[i]);
                P(path, "spec.%s", term_lists[i]);
                r = want(&c, tl, true, path);
                if (r < 0)
                        return r;
                bool needed = i > 0 || streq(nc->ami_family, "Custom");
                if ((r == 0 || cJSON_GetArraySize(tl) == 0) && needed)
                        return fail(&c, path, "needs at least one term");
                size_t k = 0;
                const cJSON *t;
                cJSON_ArrayForEach(t, tl) {
                        char p2[600];
                        if (!cJSON_IsObject(t) || cJSON_GetArraySize(t) == 0)
                                return fail(&c, P(p2, "%s[%zu]", path, k), "must be a non-empty object (tags, id, name, alias...)");
                        k++;
                }
        }
        r = get_str(&c, spec, "role", "spec.role", &nc->role);
        if (r >= 0)
                r = get_str(&c, spec, "instanceProfile", "spec.instanceProfile", &nc->instance_profile);
        if (r >= 0)
                r = get_str(&c, spec, "userData", "spec.userData", &nc->user_data);
        if (r < 0)
                return r;
        if (!nc->role == !nc->instance_profile)
                return fail(&c, "spec.role", "exactly one of role and instanceProfile must be set");
        const cJSON *tags = get(spec, "tags");
        SolverLabel *tl;
        size_t ntl;
        r = parse_string_map(&c, tags, "spec.tags", &tl, &ntl);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ntl; i++)
                if (strncmp(tl[i].key, "kubernetes.io/cluster/", 22) == 0 || streq(tl[i].key, "nodesmith.io/nodepool") ||
                    streq(tl[i].key, "nodesmith.io/cluster") || streq(tl[i].key, "karpenter.sh/nodepool"))
                        return fail(&c, P(path, "spec.tags.%s", tl[i].key), "is reserved");
        /* block devices: the root volume size is ephemeral-storage capacity */
        const cJSON *bdm = get(spec, "blockDeviceMappings");
        r = want(&c, bdm, true, "spec.blockDeviceMappings");
        if (r < 0)
                return r;
        size_t k = 0;
        const cJSON *d;
        /* the kubelet's volume: the one marked rootVolume, else the family's root device
         * (Bottlerocket keeps it on its data volume /dev/xvdb) */
        bool marked = false;
        cJSON_ArrayForEach(d, bdm)
                marked = marked || cJSON_IsTrue(get(d, "rootVolume"));
        const char *root_dev = streq(nc->ami_family, "Bottlerocket") ? "/dev/xvdb" : "/dev/xvda";
        cJSON_ArrayForEach(d, bdm) {
                const cJSON *ebs = get(d, "ebs");
                const cJSON *size = get(ebs, "volumeSize");
                const cJSON *dev = get(d, "deviceName");
                bool is_root = marked ? cJSON_IsTrue(get(d, "rootVolume"))
                                      : cJSON_IsString(dev) && streq(dev->valuestring, root_dev);
                if (present(size) && is_root) {
                        int64_t v;
                        r = parse_quantity(&c, size, SOLVER_RES_EPHEMERAL,
                                           P(path, "spec.blockDeviceMappings[%zu].ebs.volumeSize", k), &v);
                        if (r < 0)
                                return r;
                        nc->root_volume_bytes = v;
                }
                k++;
        }
        const cJSON *md = get(spec, "metadataOptions");
        r = want(&c, md, false, "spec.metadataOptions");
        if (r < 0)
                return r;
        const char *tokens;
        r = get_str(&c, md, "httpTokens", "spec.metadataOptions.httpTokens", &tokens);
        if (r < 0)
                return r;
        if (tokens && !streq(tokens, "required") && !streq(tokens, "optional"))
                return fail(&c, "spec.metadataOptions.httpTokens", "must be required or optional");
        nc->http_tokens_required = !tokens || streq(tokens, "required");
        bool set;
        int64_t hop;
        r = get_int(&c, md, "httpPutResponseHopLimit", "spec.metadataOptions.httpPutResponseHopLimit", 1, 64, &set, &hop);
        if (r < 0)
                return r;
        if (set)
                nc->http_put_hop_limit = (int32_t) hop;
        /* kubelet */
        const cJSON *kl = get(spec, "kubelet");
        r = want(&c, kl, false, "spec.kubelet");
        if (r < 0)
                return r;
        if (r > 0) {
                SolverKubelet *kb = &nc->kubelet;
                nc->has_kubelet = true;
                int64_t v;
                r = get_int(&c, kl, "maxPods", "spec.kubelet.maxPods", 1, 10000, &set, &v);
                if (r < 0)
                        return r;
                if (set)
                        kb->max_pods = (int32_t) v;
                r = get_int(&c, kl, "podsPerCore", "spec.kubelet.podsPerCore", 1, 1000, &set, &v);
                if (r < 0)
                        return r;
                if (set)
                        kb->pods_per_core = (int32_t) v;
                SolverResources res = {};
                bool rs[_SOLVER_RES_MAX];
                r = parse_resource_map(&c, get(kl, "kubeReserved"), "spec.kubelet.kubeReserved", &res, rs);
                if (r < 0)
                        return r;
                kb->has_kube_reserved_cpu = rs[SOLVER_RES_CPU];
                kb->kube_reserved_cpu = res.v[SOLVER_RES_CPU];
                kb->has_kube_reserved_memory = rs[SOLVER_RES_MEMORY];
                kb->kube_reserved_memory = res.v[SOLVER_RES_MEMORY];
                kb->has_kube_reserved_ephemeral = rs[SOLVER_RES_EPHEMERAL];
                kb->kube_reserved_ephemeral = res.v[SOLVER_RES_EPHEMERAL];
                res = (SolverResources) {};
                r = parse_resource_map(&c, get(kl, "systemReserved"), "spec.kubelet.systemReserved", &res, rs);
                if (r < 0)
                        return r;
                kb->has_system_reserved_cpu = rs[SOLVER_RES_CPU];
                kb->system_reserved_cpu = res.v[SOLVER_RES_CPU];
                kb->has_system_reserved_memory = rs[SOLVER_RES_MEMORY];
                kb->system_reserved_memory = res.v[SOLVER_RES_MEMORY];
                kb->has_system_reserved_ephemeral = rs[SOLVER_RES_EPHEMERAL];
                kb->system_reserved_ephemeral = res.v[SOLVER_RES_EPHEMERAL];
                /* hard thresholds shape allocatable; soft ones only make the kubelet evict sooner */
                const cJSON *ev = get(kl, "evictionHard");
                r = want(&c, ev, false, "spec.kubelet.evictionHard");
                if (r < 0)
                        return r;
                r = eviction_threshold(&c, get(ev, "memory.available"), SOLVER_RES_MEMORY,
                                       "spec.kubelet.evictionHard[\"memory.available\"]", &kb->has_eviction_memory,
                                       &kb->eviction_memory, &kb->has_eviction_memory_pct, &kb->eviction_memory_pct);
                if (r < 0)
                        return r;
                r = eviction_threshold(&c, get(ev, "nodefs.available"), SOLVER_RES_EPHEMERAL,
                                       "spec.kubelet.evictionHard[\"nodefs.available\"]", &kb->has_eviction_nodefs,
                                       &kb->eviction_nodefs, &kb->has_eviction_nodefs_pct, &kb->eviction_nodefs_pct);
                if (r < 0)
                        return r;
        }
        if (streq_ptr(jstr_(spec, "instanceStorePolicy"), "RAID0")) {
                nc->has_kubelet = true;
                nc->kubelet.instance_store_raid0 = true;
        }
        nc->spec = cJSON_Duplicate(spec, true);
        return nc->spec ? 0 : -ENOMEM;
}

int nodepool_parse_node(SolverArena *a, const cJSON *j, SolverNode *n, char **ret_error) {
        char what[300];
        const cJSON *nm = get(get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "Node %s", cJSON_IsString(nm) ? nm->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *n = (SolverNode) { .capacity_type = SOLVER_CAPACITY_ON_DEMAND };
        SolverLabel *labels;
        int r = parse_meta(&c, j, "", &n->name, NULL, &labels, &n->n_labels, true);
        if (r < 0)
                return r;
        n->labels = labels;
        for (size_t i = 0; i < n->n_labels; i++) {
                const char *k = solver_canonical_label_key(labels[i].key);
                if (streq(k, SOLVER_LABEL_NODEPOOL))
                        n->nodepool = labels[i].value;
                else if (streq(k, SOLVER_LABEL_INSTANCE_TYPE))
                        n->instance_type = labels[i].value;
                else if (streq(k, SOLVER_LABEL_ZONE))
                        n->zone = labels[i].value;
                else if (streq(k, SOLVER_LABEL_CAPACITY_TYPE) && streq(labels[i].value, "spot"))
                        n->capacity_type = SOLVER_CAPACITY_SPOT;
        }
        const cJSON *spec = get(j, "spec");
        r = want(&c, spec, false, "spec");
        if (r < 0)
                return r;
        SolverTaint *t;
        r = parse_taints(&c, get(spec, "taints"), "spec.taints", &t, &n->n_taints);
        if (r < 0)
                return r;
        n->taints = t;
        n->unschedulable = cJSON_IsTrue(get(spec, "unschedulable"));
        n->deleting = present(get(get(j, "metadata"), "deletionTimestamp"));
        n->in_flight = annotation_true(j, "nodesmith.io/in-flight");
        const cJSON *status = get(j, "status");
        const cJSON *alloc = get(status, "allocatable");
        const char *which = "status.allocatable";
        if (!present(alloc)) {
                alloc = get(status, "capacity");
                which = "status.capacity";
        }
        if (!present(alloc))
                return fail(&c, "status.allocatable", "is required");
        r = parse_resource_map(&c, alloc, which, &n->allocatable, NULL);
        if (r < 0)
                return r;
        if (n->allocatable.v[SOLVER_RES_PODS] == 0)
                n->allocatable.v[SOLVER_RES_PODS] = 110;
        return 0;
}

/* ---- the object set ------------------------------------------------------------------------- */

typedef struct Claim {
        const char *key;       /* ns/name */
        const char *volume;
        const char *sc;
} Claim;

typedef struct Volume {
        const char *name;
        const char **zones;
        size_t n_zones;
} Volume;

typedef struct StorageClass {
        const char *name;
        bool wffc, is_default;
        const char **zones;
        size_t n_zones;
} StorageClass;

typedef struct Prio {
        const char *name;
        int32_t value;
        bool global_default;
} Prio;

typedef struct Priv {
        PodExtra *pod_extra;   /* parallel to pods */
        PodExtra *ds_extra;
        Claim *claims;
        size_t n_claims;
        Volume *volumes;
        size_t n_volumes;
        StorageClass *scs;
        size_t n_scs;
        Prio *prios;
        size_t n_prios;
} Priv;

int nodepool_objects_new(NodepoolObjects **ret) {
        NodepoolObjects *o = calloc(1, sizeof(NodepoolObjects));
        if (!o)
                return -ENOMEM;
        int r = solver_arena_new(&o->arena);
        o->priv = calloc(1, sizeof(Priv));
        if (r < 0 || !o->priv) {
                nodepool_objects_free(o);
                return r < 0 ? r : -ENOMEM;
        }
        *ret = o;
        return 0;
}

NodepoolObjects *nodepool_objects_free(NodepoolObjects *o) {
        if (!o)
                return NULL;
        for (size_t i = 0; i < o->n_classes; i++)
                cJSON_Delete(o->classes[i].spec);
        for (size_t i = 0; i < o->n_pools; i++)
                cJSON_Delete(o->extra[i].budgets);
        for (size_t i = 0; i < o->n_notes; i++)
                free(o->notes[i]);
        free(o->notes);
        Priv *pv = o->priv;
        if (pv) {
                free(pv->pod_extra);
                free(pv->ds_extra);
                free(pv->claims);
                free(pv->volumes);
                free(pv->scs);
                free(pv->prios);
                free(pv);
        }
        free(o->pods);
        free(o->daemonsets);
        free(o->pools);
        free(o->extra);
        free(o->classes);
        free(o->nodes);
        solver_arena_free(o->arena);
        free(o);
        return NULL;
}

static int note(NodepoolObjects *o, const char *fmt, ...) _printf_(2, 3);
static int note(NodepoolObjects *o, const char *fmt, ...) {
        if (o->n_notes >= 1000)
                return 0;
        char **nn = realloc(o->notes, (o->n_notes + 2) * sizeof(char *));
        if (!nn)
                return -ENOMEM;
        o->notes = nn;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&o->notes[o->n_notes], fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        o->n_notes++;
        o->notes[o->n_notes] = NULL;
        return 0;
}

/* Grows an array and its parallel array together. */
#define GROW(arr, n, cap, extra_arr)                                                                \
        ({                                                                                           \
                int _r = 0;                                                                          \
                if ((n) == (cap)) {                                                                  \
                        size_t _nc = (cap) ? (cap) * 2 : 16;                                         \
                        void *_a = realloc((arr), _nc * sizeof(*(arr)));                             \
                        if (_a)                                                              \
                                (arr) = _a;                                                          \
                        void *_e = realloc((extra_arr), _nc * sizeof(*(extra_arr)));                 \
                        if (_e)                                                              \
                                (extra_arr) = _e;                                                    \
                        if (_a && _e)                                                        \
                                (cap) = _nc;                                                         \
                        else                                                                 \
                                _r = -ENOMEM;                                                        \
                }                                                                                    \
                _r;                                                                                  \
        })

#define GROW1(arr, n, cap)                                                                          \
        ({                                                                                           \
                int _r = 0;                                                                          \
                if ((n) == (cap)) {                                                                  \
                        size_t _nc = (cap) ? (cap) * 2 : 16;                                         \
                        void *_a = realloc((arr), _nc * sizeof(*(arr)));                             \
                        if (!_a)                                                                     \
                                _r = -ENOMEM;                                                        \
                        else {                                                                       \
                                (arr) = _a;                                                          \
                                (cap) = _nc;                                                         \
                        }                                                                            \
                }                                                                                    \
                _r;                                                                                  \
        })

static int ensure_pods(NodepoolObjects *o, size_t more) {
        Priv *pv = o->priv;
        if (o->n_pods + more > NODEPOOL_MAX_PODS)
                return -E2BIG;
        if (o->n_pods + more <= o->cap_pods)
                return 0;
        size_t nc = MAX(o->cap_pods * 2, o->n_pods + more + 16);
        SolverPod *np = realloc(o->pods, nc * sizeof(SolverPod));
        if (!np)
                return -ENOMEM;
        o->pods = np;
        PodExtra *nx = realloc(pv->pod_extra, nc * sizeof(PodExtra));
        if (!nx)
                return -ENOMEM;
        pv->pod_extra = nx;
        o->cap_pods = nc;
        return 0;
}

static const char *kind_of(const cJSON *obj) {
        const cJSON *k = get(obj, "kind");
        return cJSON_IsString(k) ? k->valuestring : NULL;
}

static int add_workload(NodepoolObjects *o, Ctx *c, const cJSON *j, const char *kind) {
        Priv *pv = o->priv;
        const char *name, *ns;
        int r = parse_meta(c, j, "", &name, &ns, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = get(j, "spec");
        if (!cJSON_IsObject(spec))
                return fail(c, "spec", "is required");
        bool set;
        int64_t replicas = 1;
        bool is_ds = streq(kind, "DaemonSet");
        if (streq(kind, "Job")) {
                r = get_int(c, spec, "parallelism", "spec.parallelism", 0, NODEPOOL_MAX_REPLICAS, &set, &replicas);
                if (r < 0)
                        return r;
                if (!set)
                        replicas = 1;
        } else if (!is_ds) {
                r = get_int(c, spec, "replicas", "spec.replicas", 0, NODEPOOL_MAX_REPLICAS, &set, &replicas);
                if (r < 0)
                        return r;
                if (!set)
                        replicas = 1;
        }
        const cJSON *tmpl = get(spec, "template");
        if (!cJSON_IsObject(tmpl))
                return fail(c, "spec.template", "is required");
        SolverLabel *labels;
        size_t nl;
        const char *ignored;
        r = parse_meta(c, tmpl, "spec.template.", &ignored, NULL, &labels, &nl, false);
        if (r < 0)
                return r;
        SolverPod tp = { .namespace_ = ns, .labels = labels, .n_labels = nl };
        PodExtra tx = {};
        tp.do_not_disrupt = annotation_true(tmpl, "karpenter.sh/do-not-disrupt") ||
                            annotation_true(tmpl, "nodesmith.io/do-not-disrupt");
        r = parse_pod_spec(c, get(tmpl, "spec"), ns, labels, nl, "spec.template.spec", &tp, &tx);
        if (r < 0)
                return r;
        tp.owner = solver_arena_printf(o->arena, "%s/%s", kind, name);
        if (is_ds) {
                r = GROW(o->daemonsets, o->n_daemonsets, o->cap_daemonsets, pv->ds_extra);
                if (r < 0)
                        return r;
                tp.name = name;
                o->daemonsets[o->n_daemonsets] = tp;
                pv->ds_extra[o->n_daemonsets++] = tx;
                return 0;
        }
        /* StatefulSet claims: one per replica and template, resolved through storage classes */
        const cJSON *vct = streq(kind, "StatefulSet") ? get(spec, "volumeClaimTemplates") : NULL;
        r = ensure_pods(o, (size_t) replicas);
        if (r == -E2BIG)
                return fail(c, "spec.replicas", "more than %d pods in total", NODEPOOL_MAX_PODS);
        if (r < 0)
                return r;
        for (int64_t i = 0; i < replicas; i++) {
                SolverPod *p = &o->pods[o->n_pods];
                PodExtra *x = &pv->pod_extra[o->n_pods];
                *p = tp;
                *x = tx;
                p->name = solver_arena_printf(o->arena, "%s-%" PRId64, name, i);
                if (!p->name)
                        return -ENOMEM;
                if (cJSON_IsArray(vct) && cJSON_GetArraySize(vct) > 0) {
                        size_t nv = (size_t) cJSON_GetArraySize(vct);
                        const char **cl = solver_arena_alloc(o->arena, (tx.n_claims + nv + 1) * sizeof(char *));
                        if (!cl)
                                return -ENOMEM;
                        if (tx.n_claims)
                                memcpy(cl, tx.claims, tx.n_claims * sizeof(char *));
                        size_t k = tx.n_claims, vi = 0;
                        const cJSON *v;
                        cJSON_ArrayForEach(v, vct) {
                                const cJSON *vn = get(get(v, "metadata"), "name");
                                char p2[128];
                                if (!cJSON_IsString(vn))
                                        return fail(c, P(p2, "spec.volumeClaimTemplates[%zu].metadata.name", vi), "is required");
                                cl[k] = solver_arena_printf(o->arena, "%s/%s-%s-%" PRId64, ns, vn->valuestring, name, i);
                                /* remember the template's storage class for unknown claims */
                                const cJSON *scn = get(get(v, "spec"), "storageClassName");
                                Claim *cn = realloc(pv->claims, (pv->n_claims + 1) * sizeof(Claim));
                                if (!cn || !cl[k])
                                        return -ENOMEM;
                                pv->claims = cn;
                                pv->claims[pv->n_claims++] = (Claim) {
                                        cl[k], NULL,
                                        cJSON_IsString(scn) ? solver_arena_strdup(o->arena, scn->valuestring) : NULL };
                                k++;
                                vi++;
                        }
                        x->claims = cl;
                        x->n_claims = k;
                }
                o->n_pods++;
        }
        return 0;
}

static int add_object(NodepoolObjects *o, const cJSON *j, const char *source, unsigned depth, char **ret_error);

static int add_list(NodepoolObjects *o, const cJSON *items, const char *source, unsigned depth, char **ret_error) {
        const cJSON *e;
        cJSON_ArrayForEach(e, items) {
                int r = add_object(o, e, source, depth + 1, ret_error);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int add_object(NodepoolObjects *o, const cJSON *j, const char *source, unsigned depth, char **ret_error) {
        Priv *pv = o->priv;
        if (depth > 8)
                return -E2BIG;
        if (cJSON_IsArray(j))
                return add_list(o, j, source, depth, ret_error);
        if (cJSON_IsNull(j))
                return 0;
        const char *kind = kind_of(j);
        char what[400];
        const cJSON *nm = get(get(j, "metadata"), "name"), *nsj = get(get(j, "metadata"), "namespace");
        const char *nms = cJSON_IsString(nm) ? nm->valuestring : "?";
        static const char *const cluster_scoped[] = { "NodePool", "EC2NodeClass", "Node", "PersistentVolume",
                                                      "StorageClass", "PriorityClass", "Provisioner", "AWSNodeTemplate" };
        bool namespaced = kind != NULL;
        for (size_t i = 0; kind && i < ELEMENTSOF(cluster_scoped); i++)
                if (streq(kind, cluster_scoped[i]))
                        namespaced = false;
        const char *nsv = cJSON_IsString(nsj) ? nsj->valuestring : namespaced ? "default" : NULL;
        snprintf(what, sizeof(what), "%s%s%s %s%s%s", source ? source : "", source ? ": " : "", kind ? kind : "object",
                 nsv ? nsv : "", nsv ? "/" : "", nms);
        Ctx c = { o->arena, what, ret_error };
        if (!cJSON_IsObject(j))
                return fail(&c, NULL, "is not an object");
        if (!kind)
                return fail(&c, "kind", "is required");
        int r;
        size_t kl = strlen(kind);
        if (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List"))) {
                const cJSON *items = get(j, "items");
                if (!cJSON_IsArray(items))
                        return fail(&c, "items", "must be a list");
                return add_list(o, items, source, depth, ret_error);
        }
        if (streq(kind, "Pod")) {
                r = ensure_pods(o, 1);
                if (r == -E2BIG)
                        return fail(&c, NULL, "more than %d pods in total", NODEPOOL_MAX_PODS);
                if (r < 0)
                        return r;
                r = pod_from_json(&c, j, &o->pods[o->n_pods], &pv->pod_extra[o->n_pods]);
                if (r < 0)
                        return r;
                o->n_pods++;
                return 0;
        }
        if (streq(kind, "Deployment") || streq(kind, "StatefulSet") || streq(kind, "ReplicaSet") ||
            streq(kind, "Job") || streq(kind, "DaemonSet") || streq(kind, "ReplicationController"))
                return add_workload(o, &c, j, kind);
        if (streq(kind, "NodePool") && (api_group_is(j, "nodesmith.io") || api_group_is(j, "karpenter.sh"))) {
                const cJSON *av = get(j, "apiVersion");
                if (!streq(av->valuestring, "nodesmith.io/v1")) {
                        /* a Karpenter object: convert it first */
                        cJSON *conv = NULL;
                        char **notes = NULL;
                        r = nodepool_convert(j, &conv, &notes, ret_error);
                        if (r < 0)
                                return r;
                        for (char **n = notes; n && *n; n++)
                                (void) note(o, "%s", *n);
                        nodepool_notes_free(notes);
                        r = add_list(o, conv, source, depth, ret_error);
                        cJSON_Delete(conv);
                        return r;
                }
                r = GROW(o->pools, o->n_pools, o->cap_pools, o->extra);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_nodepool(o->arena, j, &o->pools[o->n_pools], &o->extra[o->n_pools], &err);
                if (r < 0) {
                        /* a NodePool refused after its budgets were copied must not keep them */
                        cJSON_Delete(o->extra[o->n_pools].budgets);
                        o->extra[o->n_pools].budgets = NULL;
                        if (ret_error && err && asprintf(ret_error, "%s%s%s", source ? source : "", source ? ": " : "", err) < 0)
                                *ret_error = NULL;
                        free(err);
                        return r;
                }
                for (size_t i = 0; i < o->n_pools; i++)
                        if (streq(o->pools[i].name, o->pools[o->n_pools].name)) {
                                cJSON_Delete(o->extra[o->n_pools].budgets);
                                return fail(&c, "metadata.name", "another NodePool has this name");
                        }
                o->n_pools++;
                return 0;
        }
        if ((streq(kind, "EC2NodeClass") && (api_group_is(j, "nodesmith.io") || api_group_is(j, "karpenter.k8s.aws"))) ||
            streq(kind, "Provisioner") || streq(kind, "AWSNodeTemplate")) {
                const cJSON *av = get(j, "apiVersion");
                if (!cJSON_IsString(av) || !streq(av->valuestring, "nodesmith.io/v1")) {
                        cJSON *conv = NULL;
                        char **notes = NULL;
                        r = nodepool_convert(j, &conv, &notes, ret_error);
                        if (r < 0)
                                return r;
                        for (char **n = notes; n && *n; n++)
                                (void) note(o, "%s", *n);
                        nodepool_notes_free(notes);
                        r = add_list(o, conv, source, depth, ret_error);
                        cJSON_Delete(conv);
                        return r;
                }
                r = GROW1(o->classes, o->n_classes, o->cap_classes);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_nodeclass(o->arena, j, &o->classes[o->n_classes], &err);
                if (r < 0) {
                        if (ret_error && err && asprintf(ret_error, "%s%s%s", source ? source : "", source ? ": " : "", err) < 0)
                                *ret_error = NULL;
                        free(err);
                        return r;
                }
                o->n_classes++;
                return 0;
        }
        if (streq(kind, "Node")) {
                r = GROW1(o->nodes, o->n_nodes, o->cap_nodes);
                if (r < 0)
                        return r;
                char *err = NULL;
                r = nodepool_parse_node(o->arena, j, &o->nodes[o->n_nodes], &err);
                if (r < 0) {
                        if (ret_error && err && asprintf(ret_error, "%s%s%s", source ? source : "", source ? ": " : "", err) < 0)
                                *ret_error = NULL;
                        free(err);
                        return r;
                }
                o->n_nodes++;
                return 0;
        }
        if (streq(kind, "PersistentVolumeClaim")) {
                const char *name, *ns, *vol, *sc;
                const cJSON *spec = get(j, "spec");
                r = parse_meta(&c, j, "", &name, &ns, NULL, NULL, true);
                if (r >= 0)
                        r = get_str(&c, spec, "volumeName", "spec.volumeName", &vol);
                if (r >= 0)
                        r = get_str(&c, spec, "storageClassName", "spec.storageClassName", &sc);
                if (r < 0)
                        return r;
                Claim *cn = realloc(pv->claims, (pv->n_claims + 1) * sizeof(Claim));
                if (!cn)
                        return -ENOMEM;
                pv->claims = cn;
                pv->claims[pv->n_claims++] = (Claim) { solver_arena_printf(o->arena, "%s/%s", ns, name), vol, sc };
                return 0;
        }
        if (streq(kind, "PersistentVolume")) {
                const char *name;
                r = parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r < 0)
                        return r;
                /* zones from spec.nodeAffinity (or the zone label) */
                const char **zones = NULL;
                size_t nz = 0;
                const cJSON *terms = get(get(get(get(j, "spec"), "nodeAffinity"), "required"), "nodeSelectorTerms");
                const cJSON *t;
                size_t ti = 0;
                cJSON_ArrayForEach(t, terms) {
                        SolverTerm term;
                        char p[128];
                        r = parse_term(&c, t, P(p, "spec.nodeAffinity.required.nodeSelectorTerms[%zu]", ti++), &term);
                        if (r < 0)
                                return r;
                        for (size_t i = 0; i < term.n_reqs; i++) {
                                const char *k = solver_canonical_label_key(term.reqs[i].key);
                                if ((streq(k, SOLVER_LABEL_ZONE) || streq(k, "topology.ebs.csi.aws.com/zone")) &&
                                    term.reqs[i].op == SOLVER_OP_IN) {
                                        zones = (const char **) term.reqs[i].values;
                                        nz = term.reqs[i].n_values;
                                }
                        }
                }
                const cJSON *zl = get(get(get(j, "metadata"), "labels"), SOLVER_LABEL_ZONE);
                if (!zones && cJSON_IsString(zl)) {
                        zones = solver_arena_alloc(o->arena, sizeof(char *));
                        if (!zones)
                                return -ENOMEM;
                        zones[0] = solver_arena_strdup(o->arena, zl->valuestring);
                        nz = 1;
                }
                Volume *nv = realloc(pv->volumes, (pv->n_volumes + 1) * sizeof(Volume));
                if (!nv)
                        return -ENOMEM;
                pv->volumes = nv;
                pv->volumes[pv->n_volumes++] = (Volume) { name, zones, nz };
                return 0;
        }
        if (streq(kind, "StorageClass")) {
                const char *name, *mode;
                r = parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r >= 0)
                        r = get_str(&c, j, "volumeBindingMode", "volumeBindingMode", &mode);
                if (r < 0)
                        return r;
                StorageClass sc = { .name = name, .wffc = mode && streq(mode, "WaitForFirstConsumer"),
                                    .is_default = annotation_true(j, "storageclass.kubernetes.io/is-default-class") };
                const cJSON *at = get(j, "allowedTopologies"), *t;
                cJSON_ArrayForEach(t, at) {
                        const cJSON *e;
                        cJSON_ArrayForEach(e, get(t, "matchLabelExpressions")) {
                                const cJSON *k = get(e, "key");
                                if (!cJSON_IsString(k))
                                        continue;
                                const char *ck = solver_canonical_label_key(k->valuestring);
                                if (streq(ck, SOLVER_LABEL_ZONE) || streq(ck, "topology.ebs.csi.aws.com/zone")) {
                                        r = parse_string_list(&c, get(e, "values"), "allowedTopologies[].values", &sc.zones,
                                                              &sc.n_zones);
                                        if (r < 0)
                                                return r;
                                }
                        }
                }
                StorageClass *ns = realloc(pv->scs, (pv->n_scs + 1) * sizeof(StorageClass));
                if (!ns)
                        return -ENOMEM;
                pv->scs = ns;
                pv->scs[pv->n_scs++] = sc;
                return 0;
        }
        if (streq(kind, "PriorityClass")) {
                const char *name;
                bool set;
                int64_t v;
                r = parse_meta(&c, j, "", &name, NULL, NULL, NULL, true);
                if (r >= 0)
                        r = get_int(&c, j, "value", "value", INT32_MIN, INT32_MAX, &set, &v);
                if (r < 0)
                        return r;
                if (!set)
                        return fail(&c, "value", "is required");
                Prio *np = realloc(pv->prios, (pv->n_prios + 1) * sizeof(Prio));
                if (!np)
                        return -ENOMEM;
                pv->prios = np;
                pv->prios[pv->n_prios++] = (Prio) { name, (int32_t) v, cJSON_IsTrue(get(j, "globalDefault")) };
                return 0;
        }
        return note(o, "%s: not used (kind %s)", what, kind);
}

static bool is_karpenter(const cJSON *j, unsigned depth) {
        if (depth > 8)
                return false;
        if (cJSON_IsArray(j)) {
                const cJSON *e;
                cJSON_ArrayForEach(e, j)
                        if (is_karpenter(e, depth + 1))
                                return true;
                return false;
        }
        const char *kind = kind_of(j);
        if (!kind)
                return false;
        size_t kl = strlen(kind);
        if (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List")))
                return is_karpenter(get(j, "items"), depth + 1);
        return streq(kind, "Provisioner") || streq(kind, "AWSNodeTemplate") ||
               ((streq(kind, "NodePool") || streq(kind, "EC2NodeClass")) &&
                (api_group_is(j, "karpenter.sh") || api_group_is(j, "karpenter.k8s.aws")));
}

int nodepool_objects_add(NodepoolObjects *o, const cJSON *doc, const char *source, char **ret_error) {
        if (ret_error)
                *ret_error = NULL;
        cJSON *converted = NULL;
        if (is_karpenter(doc, 0)) {
                /* convert the whole document set at once, so that a Provisioner's kubelet
                 * settings can reach the node class converted with it */
                char **notes = NULL;
                int r = nodepool_convert(doc, &converted, &notes, ret_error);
                if (r < 0)
                        return r;
                for (char **n = notes; n && *n; n++)
                        (void) note(o, "%s%s%s", source ? source : "", source ? ": " : "", *n);
                nodepool_notes_free(notes);
                doc = converted;
        }
        int r = add_object(o, doc, source, 0, ret_error);
        cJSON_Delete(converted);
        if (r == -E2BIG && ret_error && !*ret_error &&
            asprintf(ret_error, "%s: lists nested too deeply", source ? source : "input") < 0)
                *ret_error = NULL;
        return r;
}

static const Claim *claim_find(const Priv *pv, const char *key) {
        const Claim *found = NULL;
        for (size_t i = 0; i < pv->n_claims; i++)
                if (streq(pv->claims[i].key, key) && (!found || pv->claims[i].volume || !found->volume))
                        found = &pv->claims[i];
        return found;
}

static const StorageClass *sc_find(const Priv *pv, const char *name) {
        for (size_t i = 0; i < pv->n_scs; i++)
                if (name ? streq(pv->scs[i].name, name) : pv->scs[i].is_default)
                        return &pv->scs[i];
        return NULL;
}

/* allowed = allowed ∩ zones (NULL allowed: no restriction yet) */
static int intersect_zones(SolverArena *a, const char ***allowed, size_t *n, bool *restricted, const char *const *zones,
                           size_t nz) {
        if (!*restricted) {
                const char **c = solver_arena_alloc(a, (nz + 1) * sizeof(char *));
                if (!c)
                        return -ENOMEM;
                if (nz)
                        memcpy(c, zones, nz * sizeof(char *));
                *allowed = c;
                *n = nz;
                *restricted = true;
                return 0;
        }
        size_t k = 0;
        for (size_t i = 0; i < *n; i++)
                for (size_t j = 0; j < nz; j++)
                        if (streq((*allowed)[i], zones[j])) {
                                (*allowed)[k++] = (*allowed)[i];
                                break;
                        }
        *n = k;
        return 0;
}

static int resolve_pod(NodepoolObjects *o, SolverPod *p, const PodExtra *x) {
        Priv *pv = o->priv;
        /* priority class */
        if (!x->priority_set) {
                const char *cls = x->priority_class;
                bool found = false;
                for (size_t i = 0; i < pv->n_prios && !found; i++)
                        if (cls ? streq(pv->prios[i].name, cls) : pv->prios[i].global_default) {
                                p->priority = pv->prios[i].value;
                                found = true;
                        }
                if (!found && cls) {
                        if (streq(cls, "system-node-critical"))
                                p->priority = 2000001000;
                        else if (streq(cls, "system-cluster-critical"))
                                p->priority = 2000000000;
                        else
                                (void) note(o, "Pod %s/%s: PriorityClass %s not given; priority 0 assumed", p->namespace_,
                                            p->name, cls);
                }
        }
        /* volumes */
        const char **zones = NULL, **wffc = NULL;
        size_t nz = 0, nw = 0;
        bool restricted = false;
        for (size_t i = 0; i < x->n_claims; i++) {
                const Claim *cl = claim_find(pv, x->claims[i]);
                if (!cl) {
                        (void) note(o, "Pod %s/%s: PersistentVolumeClaim %s not given; its volume is ignored", p->namespace_,
                                    p->name, x->claims[i]);
                        continue;
                }
                const Volume *v = NULL;
                for (size_t k = 0; cl->volume && k < pv->n_volumes; k++)
                        if (streq(pv->volumes[k].name, cl->volume))
                                v = &pv->volumes[k];
                if (v) {
                        if (v->n_zones && intersect_zones(o->arena, &zones, &nz, &restricted, v->zones, v->n_zones) < 0)
                                return -ENOMEM;
                        continue;
                }
                if (cl->volume) {
                        (void) note(o, "Pod %s/%s: PersistentVolume %s not given; its zone is unknown", p->namespace_, p->name,
                                    cl->volume);
                        continue;
                }
                const StorageClass *sc = sc_find(pv, cl->sc);
                if (sc && sc->n_zones && intersect_zones(o->arena, &zones, &nz, &restricted, sc->zones, sc->n_zones) < 0)
                        return -ENOMEM;
                if (!sc || sc->wffc) {
                        if (!wffc) {
                                wffc = solver_arena_alloc(o->arena, (x->n_claims + 1) * sizeof(char *));
                                if (!wffc)
                                        return -ENOMEM;
                        }
                        wffc[nw++] = cl->key;
                }
        }
        if (restricted) {
                p->volume_zones = zones;
                p->n_volume_zones = nz;
                if (nz == 0)
                        (void) note(o, "Pod %s/%s: its volumes are in different zones", p->namespace_, p->name);
        }
        p->wffc_claims = wffc;
        p->n_wffc_claims = nw;
        return 0;
}

int nodepool_objects_finish(NodepoolObjects *o, Catalog *catalog, char **ret_error) {
        Priv *pv = o->priv;
        int r;
        if (ret_error)
                *ret_error = NULL;
        for (size_t i = 0; i < o->n_pods; i++) {
                r = resolve_pod(o, &o->pods[i], &pv->pod_extra[i]);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < o->n_pods; i++) {
                SolverPod *p = &o->pods[i];
                if (!p->node_name)
                        continue;
                bool known = false;
                for (size_t k = 0; k < o->n_nodes && !known; k++)
                        known = streq(o->nodes[k].name, p->node_name);
                if (!known)
                        (void) note(o, "Pod %s/%s: bound to node %s, which is not given; left out", p->namespace_, p->name,
                                    p->node_name);
        }
        for (size_t i = 0; i < o->n_daemonsets; i++) {
                r = resolve_pod(o, &o->daemonsets[i], &pv->ds_extra[i]);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < o->n_pools; i++) {
                SolverNodePool *p = &o->pools[i];
                const NodeClass *nc = NULL;
                for (size_t k = 0; p->node_class && k < o->n_classes; k++)
                        if (streq(o->classes[k].name, p->node_class))
                                nc = &o->classes[k];
                if (p->node_class && !nc && o->n_classes > 0)
                        (void) note(o, "NodePool %s: EC2NodeClass %s not given; default kubelet settings assumed", p->name,
                                    p->node_class);
                if (nc && catalog && (nc->has_kubelet || nc->root_volume_bytes > 0)) {
                        r = catalog_allocatable_for(catalog, nc->has_kubelet ? &nc->kubelet : NULL, nc->root_volume_bytes,
                                                    &p->allocatable);
                        if (r < 0)
                                return r;
                }
        }
        for (size_t i = 0; catalog && i < o->n_nodes; i++) {
                SolverNode *n = &o->nodes[i];
                int t = catalog_find(catalog, n->instance_type);
                if (t < 0)
                        continue;
                size_t nt;
                const SolverInstanceType *it = &catalog_types(catalog, &nt)[t];
                for (size_t k = 0; k < it->n_offerings; k++)
                        if (it->offerings[k].capacity_type == n->capacity_type &&
                            (!n->zone || streq(it->offerings[k].zone, n->zone)))
                                n->price = it->offerings[k].price;
        }
        return 0;
}

/* ---- Karpenter conversion ------------------------------------------------------------------- */

typedef struct Notes {
        char **v;
        size_t n;
        bool oom;
} Notes;

static void addnote(Notes *n, const char *fmt, ...) _printf_(2, 3);
static void addnote(Notes *n, const char *fmt, ...) {
        char **nv = realloc(n->v, (n->n + 2) * sizeof(char *));
        if (!nv) {
                n->oom = true;
                return;
        }
        n->v = nv;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&n->v[n->n], fmt, ap) < 0)
                n->oom = true;
        else
                n->n++;
        va_end(ap);
        n->v[n->n] = NULL;
}

void nodepool_notes_free(char **notes) {
        for (char **p = notes; p && *p; p++)
                free(*p);
        free(notes);
}

static const char *canon_key(const char *k) {
        /* only Karpenter-specific keys change; well-known Kubernetes keys stay as written */
        if (k && strncmp(k, "karpenter.", 10) == 0)
                return solver_canonical_label_key(k);
        return k;
}

/* Rewrites label keys of requirements (in place). */
static void convert_requirements(cJSON *reqs) {
        cJSON *r;
        cJSON_ArrayForEach(r, reqs) {
                cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "key");
                if (cJSON_IsString(k)) {
                        const char *nk = canon_key(k->valuestring);
                        if (nk != k->valuestring)
                                cJSON_SetValuestring(k, nk);
                }
        }
}

static cJSON *convert_label_map(const cJSON *m) {
        cJSON *out = cJSON_CreateObject();
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
                cJSON *d = cJSON_Duplicate(e, true);
                if (!out || !d) {
                        cJSON_Delete(d);
                        cJSON_Delete(out);
                        return NULL;
                }
                cJSON_AddItemToObject(out, canon_key(e->string), d);
        }
        return out;
}

static char *secs(char *buf, size_t n, double s) {
        long long v = (long long) s;
        if (v > 0 && v % 3600 == 0)
                snprintf(buf, n, "%lldh", v / 3600);
        else if (v > 0 && v % 60 == 0)
                snprintf(buf, n, "%lldm", v / 60);
        else
                snprintf(buf, n, "%llds", v);
        return buf;
}

static int move_item(cJSON *to, const char *to_key, cJSON *from, const char *from_key) {
        cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(from, from_key);
        if (!it)
                return 0;
        cJSON_DeleteItemFromObjectCaseSensitive(to, to_key);
        cJSON_AddItemToObject(to, to_key, it);
        return 1;
}

static const char *objname(const cJSON *o) {
        const cJSON *n = get(get(o, "metadata"), "name");
        return cJSON_IsString(n) ? n->valuestring : "?";
}

static void set_api(cJSON *o, const char *api) {
        cJSON_DeleteItemFromObjectCaseSensitive(o, "apiVersion");
        cJSON *a = cJSON_CreateString(api);
        /* keep apiVersion first, as people write it */
        if (a) {
                a->string = strdup("apiVersion");
                if (!a->string) {
                        cJSON_Delete(a);
                        return;
                }
                a->next = o->child;
                if (o->child) {
                        a->prev = o->child->prev;
                        o->child->prev = a;
                } else
                        a->prev = a;
                o->child = a;
        }
}

static void convert_node_class_ref(cJSON *spec) {
        cJSON *ref = cJSON_GetObjectItemCaseSensitive(spec, "nodeClassRef");
        if (!cJSON_IsObject(ref))
                return;
        cJSON_DeleteItemFromObjectCaseSensitive(ref, "group");
        cJSON_DeleteItemFromObjectCaseSensitive(ref, "apiVersion");
        cJSON_AddStringToObject(ref, "group", "nodesmith.io");
        if (!cJSON_GetObjectItemCaseSensitive(ref, "kind"))
                cJSON_AddStringToObject(ref, "kind", "EC2NodeClass");
}

/* karpenter.sh/v1 or v1beta1 NodePool -> nodesmith.io/v1 NodePool (in place). */
static int convert_nodepool(cJSON *o, Notes *notes, cJSON **ret_kubelet) {
        const char *name = objname(o);
        const cJSON *av = get(o, "apiVersion");
        bool beta = cJSON_IsString(av) && streq(av->valuestring, "karpenter.sh/v1beta1");
        set_api(o, "nodesmith.io/v1");
        cJSON *spec = get((cJSON *) o, "spec") ? cJSON_GetObjectItemCaseSensitive(o, "spec") : NULL;
        if (!cJSON_IsObject(spec))
                return 0;
        cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(spec, "template");
        cJSON *tspec = cJSON_GetObjectItemCaseSensitive(tmpl, "spec");
        cJSON *tmeta = cJSON_GetObjectItemCaseSensitive(tmpl, "metadata");
        if (cJSON_IsObject(tspec)) {
                convert_requirements(cJSON_GetObjectItemCaseSensitive(tspec, "requirements"));
                convert_node_class_ref(tspec);
        }
        cJSON *labels = cJSON_GetObjectItemCaseSensitive(tmeta, "labels");
        if (cJSON_IsObject(labels)) {
                cJSON *nl = convert_label_map(labels);
                if (!nl)
                        return -ENOMEM;
                cJSON_ReplaceItemInObjectCaseSensitive(tmeta, "labels", nl);
        }
        if (beta && cJSON_IsObject(tspec)) {
                cJSON *dis = cJSON_GetObjectItemCaseSensitive(spec, "disruption");
                cJSON *pol = cJSON_GetObjectItemCaseSensitive(dis, "consolidationPolicy");
                if (cJSON_IsString(pol) && streq(pol->valuestring, "WhenUnderutilized"))
                        cJSON_SetValuestring(pol, "WhenEmptyOrUnderutilized");
                if (move_item(tspec, "expireAfter", dis, "expireAfter") > 0)
                        addnote(notes, "NodePool %s: spec.disruption.expireAfter moved to spec.template.spec.expireAfter", name);
                cJSON *kl = cJSON_DetachItemFromObjectCaseSensitive(tspec, "kubelet");
                if (kl) {
                        if (ret_kubelet && !*ret_kubelet)
                                *ret_kubelet = kl;
                        else
                                cJSON_Delete(kl);
                        addnote(notes, "NodePool %s: spec.template.spec.kubelet belongs to the EC2NodeClass in v1; move it there",
                                name);
                }
        }
        return 0;
}

static cJSON *selector_terms(const cJSON *selector, const char *idkey, Notes *notes, const char *what) {
        /* v1alpha1 maps like {"karpenter.sh/discovery": "x"} or {"aws-ids": "a,b"} -> terms */
        cJSON *terms = cJSON_CreateArray();
        if (!terms)
                return NULL;
        cJSON *tags = NULL;
        const cJSON *e;
        cJSON_ArrayForEach(e, selector) {
                /* a map only: the members of an array (or anything else) have no key */
                if (!cJSON_IsString(e) || !e->string)
                        continue;
                if (streq(e->string, "aws-ids") || streq(e->string, "aws::ids")) {
                        char *copy = strdup(e->valuestring), *save = NULL;
                        if (!copy)
                                continue;
                        for (char *id = strtok_r(copy, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
                                while (*id == ' ')
                                        id++;
                                cJSON *t = cJSON_CreateObject();
                                if (t) {
                                        cJSON_AddStringToObject(t, idkey, id);
                                        cJSON_AddItemToArray(terms, t);
                                }
                        }
                        free(copy);
                } else if (streq(e->string, "aws::name")) {
                        cJSON *t = cJSON_CreateObject();
                        if (t) {
                                cJSON_AddStringToObject(t, "name", e->valuestring);
                                cJSON_AddItemToArray(terms, t);
                        }
                } else if (streq(e->string, "aws::owners")) {
                        addnote(notes, "%s: owners \"%s\" must be added to each amiSelectorTerm by hand", what, e->valuestring);
                } else {
                        if (!tags)
                                tags = cJSON_CreateObject();
                        if (tags)
                                cJSON_AddStringToObject(tags, e->string, e->valuestring);
                }
        }
        if (tags) {
                cJSON *t = cJSON_CreateObject();
                if (t) {
                        cJSON_AddItemToObject(t, "tags", tags);
                        cJSON_AddItemToArray(terms, t);
                } else
                        cJSON_Delete(tags);
        }
        return terms;
}

/* AWSNodeTemplate (v1alpha1) or an inline Provisioner provider -> EC2NodeClass spec. */
static cJSON *nodeclass_spec_from_template(const cJSON *t, Notes *notes, const char *what) {
        cJSON *spec = cJSON_CreateObject();
        if (!spec)
                return NULL;
        const cJSON *v;
        if ((v = get(t, "amiFamily")))
                cJSON_AddItemToObject(spec, "amiFamily", cJSON_Duplicate(v, true));
        else
                cJSON_AddStringToObject(spec, "amiFamily", "AL2");
        if ((v = get(t, "amiSelector")))
                cJSON_AddItemToObject(spec, "amiSelectorTerms", selector_terms(v, "id", notes, what));
        if ((v = get(t, "subnetSelector")))
                cJSON_AddItemToObject(spec, "subnetSelectorTerms", selector_terms(v, "id", notes, what));
        else
                addnote(notes, "%s: no subnetSelector; spec.subnetSelectorTerms must be added", what);
        if ((v = get(t, "securityGroupSelector")))
                cJSON_AddItemToObject(spec, "securityGroupSelectorTerms", selector_terms(v, "id", notes, what));
        else
                addnote(notes, "%s: no securityGroupSelector; spec.securityGroupSelectorTerms must be added", what);
        if ((v = get(t, "instanceProfile")))
                cJSON_AddItemToObject(spec, "instanceProfile", cJSON_Duplicate(v, true));
        else
                addnote(notes, "%s: no instanceProfile; set spec.role (or spec.instanceProfile)", what);
        static const char *const same[] = { "tags", "userData", "blockDeviceMappings", "metadataOptions",
                                            "detailedMonitoring", "associatePublicIPAddress" };
        for (size_t i = 0; i < ELEMENTSOF(same); i++)
                if ((v = get(t, same[i])))
                        cJSON_AddItemToObject(spec, same[i], cJSON_Duplicate(v, true));
        static const char *const dropped[] = { "launchTemplate", "context", "apiVersion" };
        for (size_t i = 0; i < ELEMENTSOF(dropped); i++)
                if (get(t, dropped[i]))
                        addnote(notes, "%s: %s cannot be carried over (not supported by EC2NodeClass)", what, dropped[i]);
        return spec;
}

static cJSON *new_object(const char *api, const char *kind, const char *name) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON_AddStringToObject(o, "apiVersion", api);
        cJSON_AddStringToObject(o, "kind", kind);
        cJSON *m = cJSON_AddObjectToObject(o, "metadata");
        if (m)
                cJSON_AddStringToObject(m, "name", name);
        return o;
}

static int kubelet_from_v1alpha5(const cJSON *kc, cJSON **ret, Notes *notes, const char *what) {
        /* kubeletConfiguration has the same field names as EC2NodeClass spec.kubelet */
        *ret = cJSON_Duplicate(kc, true);
        if (!*ret)
                return -ENOMEM;
        static const char *const unknown[] = { "containerRuntime" };
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++)
                if (cJSON_DetachItemFromObjectCaseSensitive(*ret, unknown[i]))
                        addnote(notes, "%s: kubeletConfiguration.%s cannot be carried over", what, unknown[i]);
        return 0;
}

/* Provisioner (karpenter.sh/v1alpha5) -> NodePool (+ EC2NodeClass from an inline provider). */
static int convert_provisioner(const cJSON *p, cJSON *out, Notes *notes) {
        char what[300], buf[64];
        const char *name = objname(p);
        snprintf(what, sizeof(what), "Provisioner %s", name);
        const cJSON *spec = get(p, "spec");
        cJSON *np = new_object("nodesmith.io/v1", "NodePool", name);
        if (!np)
                return -ENOMEM;
        cJSON_AddItemToArray(out, np);
        const cJSON *meta = get(p, "metadata"), *v;
        cJSON *nmeta = cJSON_GetObjectItemCaseSensitive(np, "metadata");
        if ((v = get(meta, "labels")))
                cJSON_AddItemToObject(nmeta, "labels", cJSON_Duplicate(v, true));
        cJSON *nspec = cJSON_AddObjectToObject(np, "spec");
        cJSON *tmpl = cJSON_AddObjectToObject(nspec, "template");
        if (!nspec || !tmpl)
                return -ENOMEM;
        if ((v = get(spec, "labels")) || get(spec, "annotations")) {
                cJSON *tm = cJSON_AddObjectToObject(tmpl, "metadata");
                if (v)
                        cJSON_AddItemToObject(tm, "labels", convert_label_map(v));
                if ((v = get(spec, "annotations")))
                        cJSON_AddItemToObject(tm, "annotations", cJSON_Duplicate(v, true));
        }
        cJSON *ts = cJSON_AddObjectToObject(tmpl, "spec");
        if (!ts)
                return -ENOMEM;
        if ((v = get(spec, "requirements"))) {
                cJSON *reqs = cJSON_Duplicate(v, true);
                convert_requirements(reqs);
                cJSON_AddItemToObject(ts, "requirements", reqs);
        } else
                cJSON_AddItemToObject(ts, "requirements", cJSON_CreateArray());
        if ((v = get(spec, "taints")))
                cJSON_AddItemToObject(ts, "taints", cJSON_Duplicate(v, true));
        if ((v = get(spec, "startupTaints")))
                cJSON_AddItemToObject(ts, "startupTaints", cJSON_Duplicate(v, true));
        /* providerRef -> nodeClassRef; an inline provider becomes an EC2NodeClass */
        cJSON *ref = cJSON_AddObjectToObject(ts, "nodeClassRef");
        cJSON_AddStringToObject(ref, "group", "nodesmith.io");
        cJSON_AddStringToObject(ref, "kind", "EC2NodeClass");
        const cJSON *pref = get(spec, "providerRef"), *prov = get(spec, "provider");
        cJSON *kubelet = NULL;
        if ((v = get(spec, "kubeletConfiguration")) && kubelet_from_v1alpha5(v, &kubelet, notes, what) < 0)
                return -ENOMEM;
        if (cJSON_IsString(get(pref, "name")))
                cJSON_AddStringToObject(ref, "name", get(pref, "name")->valuestring);
        else if (cJSON_IsObject(prov)) {
                cJSON_AddStringToObject(ref, "name", name);
                cJSON *nc = new_object("nodesmith.io/v1", "EC2NodeClass", name);
                if (!nc)
                        return -ENOMEM;
                cJSON *ncs = nodeclass_spec_from_template(prov, notes, what);
                if (!ncs) {
                        cJSON_Delete(nc);
                        return -ENOMEM;
                }
                if (kubelet) {
                        cJSON_AddItemToObject(ncs, "kubelet", kubelet);
                        kubelet = NULL;
                }
                cJSON_AddItemToObject(nc, "spec", ncs);
                cJSON_AddItemToArray(out, nc);
                addnote(notes, "%s: the inline spec.provider became EC2NodeClass %s", what, name);
        } else {
                cJSON_AddStringToObject(ref, "name", "default");
                addnote(notes, "%s: no providerRef; nodeClassRef points to EC2NodeClass \"default\"", what);
        }
        if (kubelet) {
                /* attach to the referenced template's class if it is converted in the same run:
                 * done by the caller; otherwise say so */
                cJSON_AddItemToObject(np, "x-kubelet", kubelet);
        }
        /* ttlSecondsUntilExpired -> expireAfter; without it, nodes never expired */
        if (cJSON_IsNumber(v = get(spec, "ttlSecondsUntilExpired")))
                cJSON_AddStringToObject(ts, "expireAfter", secs(buf, sizeof(buf), v->valuedouble));
        else
                cJSON_AddStringToObject(ts, "expireAfter", "Never");
        /* disruption */
        cJSON *dis = cJSON_AddObjectToObject(nspec, "disruption");
        const cJSON *ttl_empty = get(spec, "ttlSecondsAfterEmpty");
        bool consolidation = cJSON_IsTrue(get(get(spec, "consolidation"), "enabled"));
        if (consolidation) {
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmptyOrUnderutilized");
                cJSON_AddStringToObject(dis, "consolidateAfter", "0s");
                if (cJSON_IsNumber(ttl_empty))
                        addnote(notes, "%s: consolidation.enabled wins over ttlSecondsAfterEmpty (they were exclusive)", what);
        } else if (cJSON_IsNumber(ttl_empty)) {
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmpty");
                cJSON_AddStringToObject(dis, "consolidateAfter", secs(buf, sizeof(buf), ttl_empty->valuedouble));
        } else {
                /* v1alpha5 did nothing to nodes without either field */
                cJSON_AddStringToObject(dis, "consolidationPolicy", "WhenEmpty");
                cJSON_AddStringToObject(dis, "consolidateAfter", "Never");
        }
        if ((v = get(get(spec, "limits"), "resources")))
                cJSON_AddItemToObject(nspec, "limits", cJSON_Duplicate(v, true));
        if ((v = get(spec, "weight")))
                cJSON_AddItemToObject(nspec, "weight", cJSON_Duplicate(v, true));
        static const char *const known[] = { "requirements", "labels", "annotations", "taints", "startupTaints",
                                             "providerRef", "provider", "kubeletConfiguration", "ttlSecondsUntilExpired",
                                             "ttlSecondsAfterEmpty", "consolidation", "limits", "weight" };
        const cJSON *e;
        if (cJSON_IsObject(spec)) /* a spec that is not an object has no fields to carry */
                cJSON_ArrayForEach(e, spec) {
                        bool k = false;
                        for (size_t i = 0; i < ELEMENTSOF(known) && !k; i++)
                                k = streq_ptr(e->string, known[i]);
                        if (!k)
                                addnote(notes, "%s: spec.%s cannot be carried over", what, strempty(e->string));
                }
        return 0;
}

static int convert_one(const cJSON *in, cJSON *out, Notes *notes, char **ret_error) {
        const char *kind = kind_of(in);
        const cJSON *av = get(in, "apiVersion");
        const char *api = cJSON_IsString(av) ? av->valuestring : "";
        if (!kind) {
                if (ret_error && asprintf(ret_error, "object without a kind") < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        if (streq(kind, "NodePool") && (streq(api, "karpenter.sh/v1") || streq(api, "karpenter.sh/v1beta1"))) {
                cJSON *o = cJSON_Duplicate(in, true);
                cJSON *kubelet = NULL;
                if (!o)
                        return -ENOMEM;
                int r = convert_nodepool(o, notes, &kubelet);
                if (r < 0) {
                        cJSON_Delete(o);
                        return r;
                }
                if (kubelet)
                        cJSON_AddItemToObject(o, "x-kubelet", kubelet);
                cJSON_AddItemToArray(out, o);
                return 0;
        }
        if (streq(kind, "EC2NodeClass") && (streq(api, "karpenter.k8s.aws/v1") || streq(api, "karpenter.k8s.aws/v1beta1"))) {
                cJSON *o = cJSON_Duplicate(in, true);
                if (!o)
                        return -ENOMEM;
                set_api(o, "nodesmith.io/v1");
                cJSON *spec = cJSON_GetObjectItemCaseSensitive(o, "spec");
                if (cJSON_IsObject(spec) && !cJSON_GetObjectItemCaseSensitive(spec, "amiSelectorTerms") &&
                    streq(api, "karpenter.k8s.aws/v1beta1")) {
                        addnote(notes, "EC2NodeClass %s: v1 needs spec.amiSelectorTerms (for example an alias like al2023@latest)",
                                objname(in));
                }
                cJSON_AddItemToArray(out, o);
                return 0;
        }
        if (streq(kind, "Provisioner") && strncmp(api, "karpenter.sh/", 13) == 0)
                return convert_provisioner(in, out, notes);
        if (streq(kind, "AWSNodeTemplate")) {
                char what[300];
                snprintf(what, sizeof(what), "AWSNodeTemplate %s", objname(in));
                cJSON *nc = new_object("nodesmith.io/v1", "EC2NodeClass", objname(in));
                if (!nc)
                        return -ENOMEM;
                const cJSON *labels = get(get(in, "metadata"), "labels");
                if (labels)
                        cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(nc, "metadata"), "labels",
                                              cJSON_Duplicate(labels, true));
                cJSON *spec = nodeclass_spec_from_template(get(in, "spec"), notes, what);
                if (!spec) {
                        cJSON_Delete(nc);
                        return -ENOMEM;
                }
                cJSON_AddItemToObject(nc, "spec", spec);
                cJSON_AddItemToArray(out, nc);
                return 0;
        }
        cJSON *copy = cJSON_Duplicate(in, true);
        if (!copy)
                return -ENOMEM;
        if (streq(kind, "NodePool") || streq(kind, "EC2NodeClass")) {
                if (!streq(api, "nodesmith.io/v1"))
                        addnote(notes, "%s %s: apiVersion %s is not known; left unchanged", kind, objname(in), api);
        }
        cJSON_AddItemToArray(out, copy);
        return 0;
}

static int convert_all(const cJSON *doc, cJSON *out, Notes *notes, unsigned depth, char **ret_error) {
        if (depth > 8)
                return -E2BIG;
        if (cJSON_IsArray(doc)) {
                const cJSON *e;
                cJSON_ArrayForEach(e, doc) {
                        int r = convert_all(e, out, notes, depth + 1, ret_error);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        const char *kind = kind_of(doc);
        size_t kl = kind ? strlen(kind) : 0;
        if (kind && (streq(kind, "List") || (kl > 4 && streq(kind + kl - 4, "List"))))
                return convert_all(get(doc, "items"), out, notes, depth + 1, ret_error);
        return convert_one(doc, out, notes, ret_error);
}

int nodepool_convert(const cJSON *doc, cJSON **ret, char ***ret_notes, char **ret_error) {
        Notes notes = {};
        cJSON *out = cJSON_CreateArray();
        if (ret_error)
                *ret_error = NULL;
        if (!out)
                return -ENOMEM;
        int r = convert_all(doc, out, &notes, 0, ret_error);
        /* kubelet settings found on NodePools/Provisioners go to the EC2NodeClass they use */
        cJSON *o;
        cJSON_ArrayForEach(o, out) {
                cJSON *kl = cJSON_DetachItemFromObjectCaseSensitive(o, "x-kubelet");
                if (!kl)
                        continue;
                const cJSON *ref = get(get(get(get(o, "spec"), "template"), "spec"), "nodeClassRef");
                const cJSON *rn = get(ref, "name");
                cJSON *target = NULL, *c;
                cJSON_ArrayForEach(c, out) {
                        const char *k = kind_of(c);
                        if (k && streq(k, "EC2NodeClass") && cJSON_IsString(rn) && streq(objname(c), rn->valuestring))
                                target = c;
                }
                cJSON *tspec = target ? cJSON_GetObjectItemCaseSensitive(target, "spec") : NULL;
                if (cJSON_IsObject(tspec) && !cJSON_GetObjectItemCaseSensitive(tspec, "kubelet")) {
                        cJSON_AddItemToObject(tspec, "kubelet", kl);
                        addnote(&notes, "%s %s: kubelet settings moved to EC2NodeClass %s", kind_of(o), objname(o),
                                objname(target));
                } else {
                        addnote(&notes, "%s %s: kubelet settings could not be carried over (convert its node class in the same run)",
                                kind_of(o), objname(o));
                        cJSON_Delete(kl);
                }
        }
        if (r < 0 || notes.oom) {
                cJSON_Delete(out);
                nodepool_notes_free(notes.v);
                return r < 0 ? r : -ENOMEM;
        }
        if (!notes.v) {
                notes.v = calloc(1, sizeof(char *));
                if (!notes.v) {
                        cJSON_Delete(out);
                        return -ENOMEM;
                }
        }
        *ret = out;
        if (ret_notes)
                *ret_notes = notes.v;
        else
                nodepool_notes_free(notes.v);
        return 0;
}
