/* SPDX-License-Identifier: Apache-2.0 */
/* EC2NodeClasses: what a launch of the class needs, with the kubelet's settings. */
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

/* An eviction threshold: a quantity, or a percentage of the resource's capacity. */
static int eviction_threshold(Ctx *c, const cJSON *v, SolverResource res, const char *path, bool *ret_set,
                              int64_t *ret, bool *ret_pct_set, double *ret_pct) {
        if (!model_present(v))
                return 0;
        if (cJSON_IsString(v) && strchr(v->valuestring, '%')) {
                double pct;
                if (quantity_parse_percent(v->valuestring, &pct) < 0 || pct < 0 || pct > 100)
                        return model_fail(c, path, "\"%s\" is not a percentage", v->valuestring);
                *ret_pct_set = true;
                *ret_pct = pct;
                return 0;
        }
        int r = model_parse_quantity(c, v, res, path, ret);
        if (r >= 0)
                *ret_set = true;
        return r;
}

int nodepool_parse_nodeclass(SolverArena *a, const cJSON *j, NodeClass *nc, char **ret_error) {
        char what[300], path[512];
        const cJSON *n = json_get(json_get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "EC2NodeClass %s", cJSON_IsString(n) ? n->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *nc = (NodeClass) { .http_tokens_required = true, .http_put_hop_limit = 1 };
        int r = model_parse_meta(&c, j, "", &nc->name, NULL, NULL, NULL, true);
        if (r < 0)
                return r;
        const cJSON *spec = json_get(j, "spec");
        if (!cJSON_IsObject(spec))
                return model_fail(&c, "spec", "is required");
        r = nodeclass_check(spec, what, ret_error);
        if (r < 0)
                return r;
        r = model_get_str(&c, spec, "amiFamily", "spec.amiFamily", &nc->ami_family);
        if (r < 0)
                return r;
        static const char *const families[] = { "AL2023", "AL2", "Bottlerocket", "Windows2019", "Windows2022", "Custom" };
        bool ok = !nc->ami_family;
        for (size_t i = 0; i < ELEMENTSOF(families) && !ok; i++)
                ok = streq(nc->ami_family, families[i]);
        if (!ok)
                return model_fail(&c, "spec.amiFamily", "\"%s\" is not AL2023, AL2, Bottlerocket, Windows2019, Windows2022 or Custom",
                            nc->ami_family);
        nc->ami_family = nodeclass_ami_family(spec);  /* unset: the alias's family */
        static const char *const term_lists[] = { "amiSelectorTerms", "subnetSelectorTerms", "securityGroupSelectorTerms" };
        for (size_t i = 0; i < ELEMENTSOF(term_lists); i++) {
                const cJSON *tl = json_get(spec, term_lists[i]);
                P(path, "spec.%s", term_lists[i]);
                r = model_want(&c, tl, true, path);
                if (r < 0)
                        return r;
                bool needed = i > 0 || streq(nc->ami_family, "Custom");
                if ((r == 0 || cJSON_GetArraySize(tl) == 0) && needed)
                        return model_fail(&c, path, "needs at least one term");
                size_t k = 0;
                const cJSON *t;
                cJSON_ArrayForEach(t, tl) {
                        char p2[600];
                        if (!cJSON_IsObject(t) || cJSON_GetArraySize(t) == 0)
                                return model_fail(&c, P(p2, "%s[%zu]", path, k), "must be a non-empty object (tags, id, name, alias...)");
                        k++;
                }
        }
        r = model_get_str(&c, spec, "role", "spec.role", &nc->role);
        if (r >= 0)
                r = model_get_str(&c, spec, "instanceProfile", "spec.instanceProfile", &nc->instance_profile);
        if (r >= 0)
                r = model_get_str(&c, spec, "userData", "spec.userData", &nc->user_data);
        if (r < 0)
                return r;
        if (!nc->role == !nc->instance_profile)
                return model_fail(&c, "spec.role", "exactly one of role and instanceProfile must be set");
        const cJSON *tags = json_get(spec, "tags");
        SolverLabel *tl;
        size_t ntl;
        r = model_parse_string_map(&c, tags, "spec.tags", &tl, &ntl);
        if (r < 0)
                return r;
        for (size_t i = 0; i < ntl; i++)
                if (strncmp(tl[i].key, "kubernetes.io/cluster/", 22) == 0 || streq(tl[i].key, "nodesmith.io/nodepool") ||
                    streq(tl[i].key, "nodesmith.io/cluster") || streq(tl[i].key, "karpenter.sh/nodepool"))
                        return model_fail(&c, P(path, "spec.tags.%s", tl[i].key), "is reserved");
        /* block devices: the root volume size is ephemeral-storage capacity */
        const cJSON *bdm = json_get(spec, "blockDeviceMappings");
        r = model_want(&c, bdm, true, "spec.blockDeviceMappings");
        if (r < 0)
                return r;
        size_t k = 0;
        const cJSON *d;
        /* the kubelet's volume: the one marked rootVolume, else the family's root device
         * (Bottlerocket keeps it on its data volume /dev/xvdb) */
        bool marked = false;
        cJSON_ArrayForEach(d, bdm)
                marked = marked || cJSON_IsTrue(json_get(d, "rootVolume"));
        const char *root_dev = streq(nc->ami_family, "Bottlerocket") ? "/dev/xvdb" : "/dev/xvda";
        cJSON_ArrayForEach(d, bdm) {
                const cJSON *ebs = json_get(d, "ebs");
                const cJSON *size = json_get(ebs, "volumeSize");
                const cJSON *dev = json_get(d, "deviceName");
                bool is_root = marked ? cJSON_IsTrue(json_get(d, "rootVolume"))
                                      : cJSON_IsString(dev) && streq(dev->valuestring, root_dev);
                if (model_present(size) && is_root) {
                        int64_t v;
                        r = model_parse_quantity(&c, size, SOLVER_RES_EPHEMERAL,
                                           P(path, "spec.blockDeviceMappings[%zu].ebs.volumeSize", k), &v);
                        if (r < 0)
                                return r;
                        nc->root_volume_bytes = v;
                }
                k++;
        }
        const cJSON *md = json_get(spec, "metadataOptions");
        r = model_want(&c, md, false, "spec.metadataOptions");
        if (r < 0)
                return r;
        const char *tokens;
        r = model_get_str(&c, md, "httpTokens", "spec.metadataOptions.httpTokens", &tokens);
        if (r < 0)
                return r;
        if (tokens && !streq(tokens, "required") && !streq(tokens, "optional"))
                return model_fail(&c, "spec.metadataOptions.httpTokens", "must be required or optional");
        nc->http_tokens_required = !tokens || streq(tokens, "required");
        bool set;
        int64_t hop;
        r = model_get_int(&c, md, "httpPutResponseHopLimit", "spec.metadataOptions.httpPutResponseHopLimit", 1, 64, &set, &hop);
        if (r < 0)
                return r;
        if (set)
                nc->http_put_hop_limit = (int32_t) hop;
        /* kubelet */
        const cJSON *kl = json_get(spec, "kubelet");
        r = model_want(&c, kl, false, "spec.kubelet");
        if (r < 0)
                return r;
        if (r > 0) {
                SolverKubelet *kb = &nc->kubelet;
                nc->has_kubelet = true;
                int64_t v;
                r = model_get_int(&c, kl, "maxPods", "spec.kubelet.maxPods", 1, 10000, &set, &v);
                if (r < 0)
                        return r;
                if (set)
                        kb->max_pods = (int32_t) v;
                r = model_get_int(&c, kl, "podsPerCore", "spec.kubelet.podsPerCore", 1, 1000, &set, &v);
                if (r < 0)
                        return r;
                if (set)
                        kb->pods_per_core = (int32_t) v;
                SolverResources res = {};
                bool rs[_SOLVER_RES_MAX];
                r = model_parse_resource_map(&c, json_get(kl, "kubeReserved"), "spec.kubelet.kubeReserved", &res, rs);
                if (r < 0)
                        return r;
                kb->has_kube_reserved_cpu = rs[SOLVER_RES_CPU];
                kb->kube_reserved_cpu = res.v[SOLVER_RES_CPU];
                kb->has_kube_reserved_memory = rs[SOLVER_RES_MEMORY];
                kb->kube_reserved_memory = res.v[SOLVER_RES_MEMORY];
                kb->has_kube_reserved_ephemeral = rs[SOLVER_RES_EPHEMERAL];
                kb->kube_reserved_ephemeral = res.v[SOLVER_RES_EPHEMERAL];
                res = (SolverResources) {};
                r = model_parse_resource_map(&c, json_get(kl, "systemReserved"), "spec.kubelet.systemReserved", &res, rs);
                if (r < 0)
                        return r;
                kb->has_system_reserved_cpu = rs[SOLVER_RES_CPU];
                kb->system_reserved_cpu = res.v[SOLVER_RES_CPU];
                kb->has_system_reserved_memory = rs[SOLVER_RES_MEMORY];
                kb->system_reserved_memory = res.v[SOLVER_RES_MEMORY];
                kb->has_system_reserved_ephemeral = rs[SOLVER_RES_EPHEMERAL];
                kb->system_reserved_ephemeral = res.v[SOLVER_RES_EPHEMERAL];
                /* hard thresholds shape allocatable; soft ones only make the kubelet evict sooner */
                const cJSON *ev = json_get(kl, "evictionHard");
                r = model_want(&c, ev, false, "spec.kubelet.evictionHard");
                if (r < 0)
                        return r;
                r = eviction_threshold(&c, json_get(ev, "memory.available"), SOLVER_RES_MEMORY,
                                       "spec.kubelet.evictionHard[\"memory.available\"]", &kb->has_eviction_memory,
                                       &kb->eviction_memory, &kb->has_eviction_memory_pct, &kb->eviction_memory_pct);
                if (r < 0)
                        return r;
                r = eviction_threshold(&c, json_get(ev, "nodefs.available"), SOLVER_RES_EPHEMERAL,
                                       "spec.kubelet.evictionHard[\"nodefs.available\"]", &kb->has_eviction_nodefs,
                                       &kb->eviction_nodefs, &kb->has_eviction_nodefs_pct, &kb->eviction_nodefs_pct);
                if (r < 0)
                        return r;
        }
        if (streq_ptr(json_str(spec, "instanceStorePolicy"), "RAID0")) {
                nc->has_kubelet = true;
                nc->kubelet.instance_store_raid0 = true;
        }
        nc->spec = cJSON_Duplicate(spec, true);
        return nc->spec ? 0 : -ENOMEM;
}
