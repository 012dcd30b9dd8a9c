/* SPDX-License-Identifier: Apache-2.0 */
/* NodePools as solver node pools, and Kubernetes durations. */
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
        int r = model_get_str(c, o, k, path, &s);
        if (r < 0)
                return r;
        *ret = dflt;
        if (!s)
                return 0;
        if (nodepool_parse_duration(s, ret) < 0)
                return model_fail(c, path, "\"%s\" is not a duration (like 720h, 30m, 10s or Never)", s);
        return 0;
}

bool model_api_group_is(const cJSON *obj, const char *group) {
        const cJSON *v = json_get(obj, "apiVersion");
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
                        o = json_get(o, part);
                const cJSON *k, *obj = cJSON_IsObject(o) ? o : NULL;
                cJSON_ArrayForEach(k, obj) {
                        bool ok = false;
                        for (const char *const *n = levels[i].known; *n && !ok; n++)
                                ok = streq(*n, k->string);
                        snprintf(p, sizeof p, "%s.%s", levels[i].path, k->string);
                        if (!ok)
                                return model_fail(c, p, "is not a field of Karpenter v1's NodePool");
                }
        }
        for (const PoolRefusal *r = pool_refused; r->path; r++) {
                const cJSON *o = j;
                char path[128], *save = NULL;
                snprintf(path, sizeof path, "%s", r->path);
                for (char *part = strtok_r(path, ".", &save); part && o; part = strtok_r(NULL, ".", &save))
                        o = json_get(o, part);
                if (model_present(o))
                        return model_fail(c, r->path, "is not supported: %s", r->why);
        }
        return 0;
}

/* spec.replicas: a static NodePool, with Karpenter's rules (no weight, no limits but nodes);
 * its consolidation policy is ignored as in Karpenter (its nodes are never consolidated), and
 * nodesmith's own consolidation and headroom fields have no meaning there: refused. */
static int parse_static(Ctx *c, const cJSON *spec, SolverNodePool *p) {
        bool set;
        int64_t n;
        int r = model_get_int(c, spec, "replicas", "spec.replicas", 0, NODEPOOL_MAX_REPLICAS, &set, &n);
        if (r < 0 || !set)
                return r;
        p->is_static = true;
        p->replicas = (uint32_t) n;
        if (json_get(spec, "weight"))
                return model_fail(c, "spec.weight", "is not supported on static NodePools (spec.replicas), as in Karpenter");
        const cJSON *k, *limits = json_get(spec, "limits");
        for (k = cJSON_IsObject(limits) ? limits->child : NULL; k; k = k->next)
                if (!streq(k->string, "nodes")) {
                        char path[300];
                        snprintf(path, sizeof path, "spec.limits.%s", k->string);
                        return model_fail(c, path, "only limits.nodes is supported on static NodePools (spec.replicas), "
                                                   "as in Karpenter");
                }
        const cJSON *dis = json_get(spec, "disruption");
        const struct {
                const char *path;
                const cJSON *v;
        } dynamic_only[] = {
                { "spec.headroom", json_get(spec, "headroom") },
                { "spec.disruption.consolidationThreshold", json_get(dis, "consolidationThreshold") },
                { "spec.disruption.churnGuard", json_get(dis, "churnGuard") },
        };
        for (size_t i = 0; i < ELEMENTSOF(dynamic_only); i++)
                if (model_present(dynamic_only[i].v))
                        return model_fail(c, dynamic_only[i].path, "has no meaning on a static NodePool (spec.replicas): "
                                                                   "its nodes are never consolidated and it launches for no pod");
        return 0;
}

/* spec.limits: resources, and `nodes` (Karpenter's well-known key for the number of nodes). */
static int parse_limits(Ctx *c, const cJSON *limits, SolverNodePool *p) {
        cJSON *rest = NULL; /* the limits without nodes */
        const cJSON *nodes = cJSON_IsObject(limits) ? json_get(limits, "nodes") : NULL;
        if (nodes) {
                int64_t n;
                int r = model_parse_quantity(c, nodes, SOLVER_RES_PODS, "spec.limits.nodes", &n);
                if (r < 0)
                        return r;
                p->has_node_limit = true;
                p->node_limit = n;
                rest = cJSON_Duplicate(limits, true);
                if (!rest)
                        return -ENOMEM;
                cJSON_DeleteItemFromObjectCaseSensitive(rest, "nodes");
                limits = rest;
        }
        SolverResources lim = {};
        bool set[_SOLVER_RES_MAX];
        int r = model_parse_resource_map(c, limits, "spec.limits", &lim, set);
        cJSON_Delete(rest);
        if (r < 0)
                return r;
        for (int i = 0; i < _SOLVER_RES_MAX; i++)
                if (set[i])
                        p->limits.v[i] = lim.v[i];
        return 0;
}

int nodepool_parse_nodepool(SolverArena *a, const cJSON *j, SolverNodePool *p, NodePoolExtra *x, char **ret_error) {
        char what[300], path[512];
        const cJSON *n = json_get(json_get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "NodePool %s", cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *p = (SolverNodePool) {};
        *x = (NodePoolExtra) { .expire_after_s = 720 * 3600, .termination_grace_s = -1, .consolidate_after_s = 0 };
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                p->limits.v[r] = -1;
        int r = model_parse_meta(&c, j, "", &p->name, NULL, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = json_get(j, "spec");
        if (!cJSON_IsObject(spec))
                return model_fail(&c, "spec", "is required");
        r = pool_fields(&c, j);
        if (r < 0)
                return r;
        bool set;
        int64_t w;
        r = model_get_int(&c, spec, "weight", "spec.weight", 1, 100, &set, &w);
        if (r < 0)
                return r;
        p->weight = set ? (int32_t) w : 0;
        const cJSON *tmpl = json_get(spec, "template");
        if (!cJSON_IsObject(tmpl))
                return model_fail(&c, "spec.template", "is required");
        const cJSON *tmeta = json_get(tmpl, "metadata");
        r = model_want(&c, tmeta, false, "spec.template.metadata");
        if (r < 0)
                return r;
        SolverLabel *labels;
        r = model_parse_string_map(&c, json_get(tmeta, "labels"), "spec.template.metadata.labels", &labels, &p->n_labels);
        if (r < 0)
                return r;
        p->labels = labels;
        for (size_t i = 0; i < p->n_labels; i++) {
                const char *k = solver_canonical_label_key(p->labels[i].key);
                if (streq(k, SOLVER_LABEL_HOSTNAME) || streq(k, SOLVER_LABEL_NODEPOOL) || streq(k, SOLVER_LABEL_ZONE) ||
                    streq(k, SOLVER_LABEL_CAPACITY_TYPE) || streq(k, SOLVER_LABEL_INSTANCE_TYPE) ||
                    strncmp(k, SOLVER_LABEL_INSTANCE_PREFIX, strlen(SOLVER_LABEL_INSTANCE_PREFIX)) == 0)
                        return model_fail(&c, P(path, "spec.template.metadata.labels.%s", p->labels[i].key),
                                    "is a well-known label; use a requirement instead");
        }
        const cJSON *ts = json_get(tmpl, "spec");
        if (!cJSON_IsObject(ts))
                return model_fail(&c, "spec.template.spec", "is required");
        SolverRequirement *reqs;
        r = model_parse_requirements(&c, json_get(ts, "requirements"), "spec.template.spec.requirements", false, true, &reqs,
                               &p->n_requirements);
        if (r < 0)
                return r;
        p->requirements = reqs;
        SolverTaint *t;
        r = model_parse_taints(&c, json_get(ts, "taints"), "spec.template.spec.taints", &t, &p->n_taints);
        if (r < 0)
                return r;
        p->taints = t;
        r = model_parse_taints(&c, json_get(ts, "startupTaints"), "spec.template.spec.startupTaints", &t, &p->n_startup_taints);
        if (r < 0)
                return r;
        p->startup_taints = t;
        const cJSON *ref = json_get(ts, "nodeClassRef");
        r = model_want(&c, ref, false, "spec.template.spec.nodeClassRef");
        if (r < 0)
                return r;
        r = model_get_str(&c, ref, "name", "spec.template.spec.nodeClassRef.name", &x->node_class);
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
        const cJSON *dis = json_get(spec, "disruption");
        r = model_want(&c, dis, false, "spec.disruption");
        if (r < 0)
                return r;
        r = model_get_str(&c, dis, "consolidationPolicy", "spec.disruption.consolidationPolicy", &x->consolidation_policy);
        if (r < 0)
                return r;
        if (!x->consolidation_policy)
                x->consolidation_policy = "WhenEmptyOrUnderutilized";
        else if (!streq(x->consolidation_policy, "WhenEmpty") &&
                 !streq(x->consolidation_policy, "WhenEmptyOrUnderutilized") && !streq(x->consolidation_policy, "Balanced"))
                return model_fail(&c, "spec.disruption.consolidationPolicy",
                                  "\"%s\" is not WhenEmpty, WhenEmptyOrUnderutilized or Balanced", x->consolidation_policy);
        r = get_duration(&c, dis, "consolidateAfter", "spec.disruption.consolidateAfter", 0, &x->consolidate_after_s);
        if (r < 0)
                return r;
        const cJSON *budgets = json_get(dis, "budgets");
        r = model_want(&c, budgets, true, "spec.disruption.budgets");
        if (r < 0)
                return r;
        size_t bi = 0;
        const cJSON *b;
        cJSON_ArrayForEach(b, budgets) {
                const cJSON *nodes = json_get(b, "nodes");
                P(path, "spec.disruption.budgets[%zu].nodes", bi++);
                if (!cJSON_IsString(nodes))
                        return model_fail(&c, path, "is required (a number or a percentage)");
                const char *s = nodes->valuestring;
                char *end;
                long v = strtol(s, &end, 10);
                if (end == s || v < 0 || (*end && !(end[0] == '%' && !end[1] && v <= 100)))
                        return model_fail(&c, path, "\"%s\" is not a number or a percentage", s);
                const char *sched, *dur;
                int64_t d;
                P(path, "spec.disruption.budgets[%zu].schedule", bi - 1);
                r = model_get_str(&c, b, "schedule", path, &sched);
                if (r < 0)
                        return r;
                if (sched && disruption_cron_valid(sched) < 0)
                        return model_fail(&c, path, "\"%s\" is not a cron schedule (five fields, or @daily...)", sched);
                P(path, "spec.disruption.budgets[%zu].duration", bi - 1);
                r = model_get_str(&c, b, "duration", path, &dur);
                if (r < 0)
                        return r;
                if (!sched != !dur)
                        return model_fail(&c, path, "schedule and duration go together");
                if (dur && (nodepool_parse_duration(dur, &d) < 0 || d <= 0))
                        return model_fail(&c, path, "\"%s\" is not a positive duration", dur);
                const cJSON *reasons = json_get(b, "reasons"), *rs;
                P(path, "spec.disruption.budgets[%zu].reasons", bi - 1);
                r = model_want(&c, reasons, true, path);
                if (r < 0)
                        return r;
                cJSON_ArrayForEach(rs, reasons)
                        if (!cJSON_IsString(rs) || (!streq(rs->valuestring, "Empty") && !streq(rs->valuestring, "Drifted") &&
                                                    !streq(rs->valuestring, "Underutilized")))
                                return model_fail(&c, path, "reasons are Empty, Drifted or Underutilized");
        }
        /* Balanced: an integer consolidationThreshold is its K (Karpenter's BalancedK, 2) */
        const cJSON *kth = json_get(dis, "consolidationThreshold");
        bool balanced = streq(x->consolidation_policy, "Balanced");
        x->balanced_k = balanced ? 2 : 0;
        if (cJSON_IsNumber(kth)) {
                int64_t k;
                r = model_get_int(&c, dis, "consolidationThreshold", "spec.disruption.consolidationThreshold", 1, 1000,
                                  &set, &k);
                if (r < 0)
                        return r;
                if (!balanced)
                        return model_fail(&c, "spec.disruption.consolidationThreshold",
                                          "an integer goes with consolidationPolicy Balanced (its K); nodesmith's own threshold "
                                          "is a saving such as \"15%%\"");
                x->balanced_k = (int32_t) k;
        }
        /* nodesmith's answers to consolidation churn */
        const char *th = NULL;
        if (!cJSON_IsNumber(kth))
                r = model_get_str(&c, dis, "consolidationThreshold", "spec.disruption.consolidationThreshold", &th);
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
                        return model_fail(&c, "spec.disruption.consolidationThreshold",
                                    "\"%s\" is not a fraction in [0, 1) or a percentage below 100%%", th);
                x->consolidation_threshold = v;
        }
        r = get_duration(&c, dis, "churnGuard", "spec.disruption.churnGuard", -1, &x->churn_guard_s);
        if (r < 0)
                return r;
        x->budgets = budgets ? cJSON_Duplicate(budgets, true) : NULL;
        if (budgets && !x->budgets)
                return -ENOMEM;
        r = parse_limits(&c, json_get(spec, "limits"), p);
        if (r < 0)
                return r;
        bool lim_set[_SOLVER_RES_MAX];
        const cJSON *hr = json_get(spec, "headroom");
        r = model_parse_resource_map(&c, hr, "spec.headroom", &p->headroom, lim_set);
        if (r < 0)
                return r;
        for (int i = 0; i < _SOLVER_RES_MAX; i++)
                if (lim_set[i] && i != SOLVER_RES_CPU && i != SOLVER_RES_MEMORY && i != SOLVER_RES_PODS)
                        return model_fail(&c, P(path, "spec.headroom.%s", solver_resource_to_name(i)),
                                    "only cpu, memory and pods may be kept free");
        if (p->headroom.v[SOLVER_RES_PODS] > 1000)
                return model_fail(&c, "spec.headroom.pods", "must be at most 1000");
        return parse_static(&c, spec, p);
}
