/* SPDX-License-Identifier: Apache-2.0 */
/* Pods (and pod templates) as solver pods: requests, ports, affinities, spread, volumes. */
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
        const cJSON *res = json_get(ct, "resources");
        int r = model_want(c, res, false, P(p, "%s.resources", path));
        if (r <= 0)
                return r;
        SolverResources req = {}, lim = {};
        bool req_set[_SOLVER_RES_MAX], lim_set[_SOLVER_RES_MAX];
        r = model_parse_resource_map(c, json_get(res, "requests"), P(p, "%s.resources.requests", path), &req, req_set);
        if (r < 0)
                return r;
        r = model_parse_resource_map(c, json_get(res, "limits"), P(p, "%s.resources.limits", path), &lim, lim_set);
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
        int r = model_get_int(c, port, "hostPort", P(p, "%s.hostPort", path), 0, 65535, &set, &hp);
        if (r < 0 || !set || hp == 0)
                return r;
        const char *proto;
        r = model_get_str(c, port, "protocol", P(p, "%s.protocol", path), &proto);
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
                return model_fail(c, p, "\"%s\" is not TCP, UDP or SCTP", proto);
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
        int r = model_want(c, a, true, path);
        if (r <= 0)
                return r;
        int n = cJSON_GetArraySize(a);
        if (n > 100)
                return model_fail(c, path, "has more than 100 entries");
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
                        return model_fail(c, base, "must be an object");
                if (weighted) {
                        bool set;
                        int64_t w;
                        r = model_get_int(c, e, "weight", P(p, "%s.weight", base), 1, 100, &set, &w);
                        if (r < 0)
                                return r;
                        if (!set)
                                return model_fail(c, p, "is required");
                        t[k].weight = (int32_t) w;
                        term = json_get(e, "podAffinityTerm");
                        P(base, "%s[%zu].podAffinityTerm", path, k);
                        if (!cJSON_IsObject(term))
                                return model_fail(c, base, "is required");
                }
                r = model_get_str(c, term, "topologyKey", P(p, "%s.topologyKey", base), &t[k].topology_key);
                if (r < 0)
                        return r;
                if (isempty(t[k].topology_key))
                        return model_fail(c, p, "is required");
                r = model_parse_label_selector(c, json_get(term, "labelSelector"), P(p, "%s.labelSelector", base), &t[k].selector);
                if (r < 0)
                        return r;
                const char **ns;
                r = model_parse_string_list(c, json_get(term, "namespaces"), P(p, "%s.namespaces", base), &ns, &t[k].n_namespaces);
                if (r < 0)
                        return r;
                t[k].namespaces = ns;
                const cJSON *nss = json_get(term, "namespaceSelector");
                if (cJSON_IsObject(nss)) {
                        if (cJSON_GetArraySize(nss) == 0 ||
                            (cJSON_GetArraySize(json_get(nss, "matchLabels")) == 0 &&
                             cJSON_GetArraySize(json_get(nss, "matchExpressions")) == 0))
                                t[k].all_namespaces = true;
                        else
                                return model_fail(c, P(p, "%s.namespaceSelector", base),
                                            "only the empty selector (all namespaces) is supported");
                }
                k++;
        }
        *ret = t;
        *ret_n = k;
        return 0;
}


int model_parse_pod_spec(Ctx *c, const cJSON *spec, const char *ns, const SolverLabel *labels, size_t n_labels,
                          const char *base, SolverPod *p, PodExtra *x) {
        char path[512], p2[512];
        if (!cJSON_IsObject(spec))
                return model_fail(c, base, "must be an object");
        int r;
        /* requests */
        const cJSON *containers = json_get(spec, "containers");
        if (!cJSON_IsArray(containers) || cJSON_GetArraySize(containers) == 0)
                return model_fail(c, P(path, "%s.containers", base), "needs at least one container");
        SolverResources sum = {}, one;
        size_t k = 0;
        SolverHostPort *ports = NULL;
        size_t np = 0, capp = 0;
        const cJSON *ct;
        cJSON_ArrayForEach(ct, containers) {
                P(path, "%s.containers[%zu]", base, k);
                if (!cJSON_IsObject(ct))
                        return model_fail(c, path, "must be an object");
                r = container_requests(c, ct, path, &one);
                if (r < 0)
                        return r;
                res_add(&sum, &one);
                const cJSON *pl = json_get(ct, "ports");
                r = model_want(c, pl, true, P(p2, "%s.ports", path));
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
        const cJSON *inits = json_get(spec, "initContainers");
        r = model_want(c, inits, true, P(path, "%s.initContainers", base));
        if (r < 0)
                return r;
        k = 0;
        cJSON_ArrayForEach(ct, inits) {
                P(path, "%s.initContainers[%zu]", base, k++);
                if (!cJSON_IsObject(ct))
                        return model_fail(c, path, "must be an object");
                r = container_requests(c, ct, path, &one);
                if (r < 0)
                        return r;
                const cJSON *rp = json_get(ct, "restartPolicy");
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
        r = model_parse_resource_map(c, json_get(spec, "overhead"), P(path, "%s.overhead", base), &overhead, NULL);
        if (r < 0)
                return r;
        res_add(&sum, &overhead);
        sum.v[SOLVER_RES_PODS] = 1;
        p->requests = sum;
        p->host_ports = ports;
        p->n_host_ports = np;

        r = model_get_str(c, spec, "nodeName", P(path, "%s.nodeName", base), &p->node_name);
        if (r < 0)
                return r;
        if (isempty(p->node_name))
                p->node_name = NULL;
        bool set;
        int64_t prio;
        r = model_get_int(c, spec, "priority", P(path, "%s.priority", base), INT32_MIN, INT32_MAX, &set, &prio);
        if (r < 0)
                return r;
        p->priority = set ? (int32_t) prio : 0;
        x->priority_set = set;
        r = model_get_str(c, spec, "priorityClassName", P(path, "%s.priorityClassName", base), &x->priority_class);
        if (r < 0)
                return r;
        const char *pp;
        r = model_get_str(c, spec, "preemptionPolicy", P(path, "%s.preemptionPolicy", base), &pp);
        if (r < 0)
                return r;
        if (pp && !streq(pp, "Never") && !streq(pp, "PreemptLowerPriority"))
                return model_fail(c, path, "\"%s\" is not Never or PreemptLowerPriority", pp);
        p->preempt_never = pp && streq(pp, "Never");

        SolverLabel *sel;
        r = model_parse_string_map(c, json_get(spec, "nodeSelector"), P(path, "%s.nodeSelector", base), &sel, &p->n_node_selector);
        if (r < 0)
                return r;
        p->node_selector = sel;
        SolverToleration *tol;
        r = model_parse_tolerations(c, json_get(spec, "tolerations"), P(path, "%s.tolerations", base), &tol, &p->n_tolerations);
        if (r < 0)
                return r;
        p->tolerations = tol;

        const cJSON *aff = json_get(spec, "affinity");
        r = model_want(c, aff, false, P(path, "%s.affinity", base));
        if (r < 0)
                return r;
        const cJSON *na = json_get(aff, "nodeAffinity");
        r = model_want(c, na, false, P(path, "%s.affinity.nodeAffinity", base));
        if (r < 0)
                return r;
        const cJSON *req = json_get(na, "requiredDuringSchedulingIgnoredDuringExecution");
        if (model_present(req)) {
                const cJSON *terms = json_get(req, "nodeSelectorTerms");
                P(path, "%s.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms", base);
                if (!cJSON_IsArray(terms) || cJSON_GetArraySize(terms) == 0)
                        return model_fail(c, path, "needs at least one term");
                size_t n = (size_t) cJSON_GetArraySize(terms);
                SolverTerm *t = solver_arena_alloc(c->a, (n + 1) * sizeof(SolverTerm));
                if (!t)
                        return -ENOMEM;
                k = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, terms) {
                        r = model_parse_term(c, e, P(p2, "%s[%zu]", path, k), &t[k]);
                        if (r < 0)
                                return r;
                        k++;
                }
                p->required_terms = t;
                p->n_required_terms = k;
        }
        const cJSON *pref = json_get(na, "preferredDuringSchedulingIgnoredDuringExecution");
        P(path, "%s.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution", base);
        r = model_want(c, pref, true, path);
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
                        r = model_get_int(c, e, "weight", P(p2, "%s[%zu].weight", path, k), 1, 100, &set, &w);
                        if (r < 0)
                                return r;
                        if (!set)
                                return model_fail(c, p2, "is required");
                        t[k].weight = (int32_t) w;
                        r = model_parse_term(c, json_get(e, "preference"), P(p2, "%s[%zu].preference", path, k), &t[k].term);
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
                const cJSON *o = json_get(aff, pa[i].a);
                r = model_want(c, o, false, P(path, "%s.affinity.%s", base, pa[i].a));
                if (r < 0)
                        return r;
                SolverPodAffinityTerm *t;
                size_t n;
                r = parse_affinity_terms(c, json_get(o, pa[i].kind), P(path, "%s.affinity.%s.%s", base, pa[i].a, pa[i].kind),
                                         pa[i].weighted, &t, &n);
                if (r < 0)
                        return r;
                *(const SolverPodAffinityTerm **) ((char *) p + pa[i].off) = t;
                *(size_t *) ((char *) p + pa[i].noff) = n;
        }

        /* topology spread */
        const cJSON *tsc = json_get(spec, "topologySpreadConstraints");
        P(path, "%s.topologySpreadConstraints", base);
        r = model_want(c, tsc, true, path);
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
                                return model_fail(c, p2, "must be an object");
                        char p3[600];
                        r = model_get_int(c, e, "maxSkew", P(p3, "%s.maxSkew", p2), 1, INT32_MAX, &set, &v);
                        if (r < 0)
                                return r;
                        if (!set)
                                return model_fail(c, p3, "is required");
                        s[k].max_skew = (int32_t) v;
                        r = model_get_str(c, e, "topologyKey", P(p3, "%s.topologyKey", p2), &s[k].topology_key);
                        if (r < 0)
                                return r;
                        if (isempty(s[k].topology_key))
                                return model_fail(c, p3, "is required");
                        r = model_get_str(c, e, "whenUnsatisfiable", P(p3, "%s.whenUnsatisfiable", p2), &wu);
                        if (r < 0)
                                return r;
                        if (!wu || (!streq(wu, "DoNotSchedule") && !streq(wu, "ScheduleAnyway")))
                                return model_fail(c, p3, "must be DoNotSchedule or ScheduleAnyway");
                        s[k].schedule_anyway = streq(wu, "ScheduleAnyway");
                        r = model_get_int(c, e, "minDomains", P(p3, "%s.minDomains", p2), 1, INT32_MAX, &set, &v);
                        if (r < 0)
                                return r;
                        s[k].min_domains = set ? (int32_t) v : 0;
                        r = model_parse_label_selector(c, json_get(e, "labelSelector"), P(p3, "%s.labelSelector", p2), &s[k].selector);
                        if (r < 0)
                                return r;
                        /* matchLabelKeys: the pod's own values join the selector */
                        const char **keys;
                        size_t nk;
                        r = model_parse_string_list(c, json_get(e, "matchLabelKeys"), P(p3, "%s.matchLabelKeys", p2), &keys, &nk);
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
        const cJSON *vols = json_get(spec, "volumes");
        P(path, "%s.volumes", base);
        r = model_want(c, vols, true, path);
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
                        const cJSON *pvc = json_get(e, "persistentVolumeClaim");
                        if (cJSON_IsObject(pvc)) {
                                const char *cn;
                                r = model_get_str(c, pvc, "claimName", P(p2, "%s[%zu].persistentVolumeClaim.claimName", path, k), &cn);
                                if (r < 0)
                                        return r;
                                if (isempty(cn))
                                        return model_fail(c, p2, "is required");
                                x->claims[x->n_claims] = solver_arena_printf(c->a, "%s/%s", ns, cn);
                                if (!x->claims[x->n_claims++])
                                        return -ENOMEM;
                        }
                        k++;
                }
        }
        return 0;
}

int model_parse_meta(Ctx *c, const cJSON *obj, const char *base, const char **ret_name, const char **ret_ns,
                      SolverLabel **ret_labels, size_t *ret_n, bool name_required) {
        char p[512];
        const cJSON *meta = json_get(obj, "metadata");
        int r = model_want(c, meta, false, P(p, "%smetadata", base));
        if (r < 0)
                return r;
        r = model_get_str(c, meta, "name", P(p, "%smetadata.name", base), ret_name);
        if (r < 0)
                return r;
        if (name_required && isempty(*ret_name))
                return model_fail(c, p, "is required");
        if (ret_ns) {
                r = model_get_str(c, meta, "namespace", P(p, "%smetadata.namespace", base), ret_ns);
                if (r < 0)
                        return r;
                if (isempty(*ret_ns))
                        *ret_ns = "default";
        }
        if (ret_labels)
                return model_parse_string_map(c, json_get(meta, "labels"), P(p, "%smetadata.labels", base), ret_labels, ret_n);
        return 0;
}

bool model_annotation_true(const cJSON *obj, const char *key) {
        const cJSON *v = json_get(json_get(json_get(obj, "metadata"), "annotations"), key);
        return cJSON_IsString(v) && streq(v->valuestring, "true");
}

int model_pod_from_json(Ctx *c, const cJSON *j, SolverPod *p, PodExtra *x) {
        const char *name, *ns;
        SolverLabel *labels;
        size_t nl;
        *p = (SolverPod) {};
        *x = (PodExtra) {};
        int r = model_parse_meta(c, j, "", &name, &ns, &labels, &nl, true);
        if (r < 0)
                return r;
        p->name = name;
        p->namespace_ = ns;
        p->labels = labels;
        p->n_labels = nl;
        p->do_not_disrupt = model_annotation_true(j, "karpenter.sh/do-not-disrupt") ||
                            model_annotation_true(j, "nodesmith.io/do-not-disrupt");
        const cJSON *dc = json_get(json_get(json_get(j, "metadata"), "annotations"), "controller.kubernetes.io/pod-deletion-cost");
        if (cJSON_IsString(dc)) {
                char *end;
                errno = 0;
                long long v = strtoll(dc->valuestring, &end, 10);
                if (errno == 0 && end != dc->valuestring && *end == 0 && v >= INT32_MIN && v <= INT32_MAX)
                        p->deletion_cost = v;
        }
        const cJSON *owners = json_get(json_get(j, "metadata"), "ownerReferences");
        const cJSON *ow;
        cJSON_ArrayForEach(ow, owners) {
                const cJSON *kind = json_get(ow, "kind");
                if (cJSON_IsString(kind) && streq(kind->valuestring, "DaemonSet"))
                        p->daemonset = true;
        }
        return model_parse_pod_spec(c, json_get(j, "spec"), ns, labels, nl, "spec", p, x);
}

int nodepool_parse_pod(SolverArena *a, const cJSON *pod, SolverPod *ret, char **ret_error) {
        char what[300];
        const cJSON *n = json_get(json_get(pod, "metadata"), "name"), *ns = json_get(json_get(pod, "metadata"), "namespace");
        snprintf(what, sizeof(what), "Pod %s/%s", cJSON_IsString(ns) ? ns->valuestring : "default",
                 cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        PodExtra x;
        return model_pod_from_json(&c, pod, ret, &x);
}
