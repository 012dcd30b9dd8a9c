/* SPDX-License-Identifier: Apache-2.0 */
/* Bottlerocket user data: TOML settings, the class's userData merged as Karpenter merges it
 * (pkg/providers/amifamily/bootstrap/bottlerocket.go): the user's settings are kept, except
 * those Karpenter owns: cluster-name, api-server and cluster-certificate are overwritten, the
 * node labels merged (the pool's win), the node taints replaced by the pool's, the class's
 * kubelet settings written over theirs, autoscaling.should-wait turned off, and RAID0's
 * bootstrap command added. nodesmith adds its agent as the superpowered host container
 * settings.host-containers.nodesmith (docs/bootstrap-bottlerocket.md, the same layout as
 * bootstrap/userdata/bottlerocket-userdata.py). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "macro.h"
#include "strbuf.h"
#include "toml.h"
#include "userdata.h"

#define HOST_ROOT "/.bottlerocket/rootfs"

/* The member k of o, an object made when absent (or replacing a non-object). */
static cJSON *object_at(cJSON *o, const char *k) {
        cJSON *c = cJSON_GetObjectItemCaseSensitive(o, k);
        if (cJSON_IsObject(c))
                return c;
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
        return cJSON_AddObjectToObject(o, k);
}

static void set(cJSON *o, const char *k, cJSON *v) {
        if (!v)
                return;
        cJSON_DeleteItemFromObjectCaseSensitive(o, k);
        cJSON_AddItemToObject(o, k, v);
}

/* The class's kubelet settings (KubeletConfiguration names) under Bottlerocket's names. */
static void kubelet_settings(const cJSON *kubelet, int max_pods, cJSON *k) {
        static const struct {
                const char *from, *to;
        } same[] = {
                { "systemReserved", "system-reserved" },
                { "kubeReserved", "kube-reserved" },
                { "evictionHard", "eviction-hard" },
                { "evictionSoft", "eviction-soft" },
                { "evictionSoftGracePeriod", "eviction-soft-grace-period" },
                { "evictionMaxPodGracePeriod", "eviction-max-pod-grace-period" },
                { "cpuCFSQuota", "cpu-cfs-quota-enforced" },
                { "maxPods", "max-pods" },
        };
        for (size_t i = 0; i < ELEMENTSOF(same); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(kubelet, same[i].from);
                if (v)
                        set(k, same[i].to, cJSON_Duplicate(v, true));
        }
        if (max_pods > 0)
                set(k, "max-pods", cJSON_CreateNumber(max_pods));
        const cJSON *dns = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(kubelet, "clusterDNS"), 0);
        if (cJSON_IsString(dns))
                set(k, "cluster-dns-ip", cJSON_CreateString(dns->valuestring));
        /* Bottlerocket takes the image GC thresholds as strings */
        static const char *const gc[][2] = { { "imageGCHighThresholdPercent", "image-gc-high-threshold-percent" },
                                             { "imageGCLowThresholdPercent", "image-gc-low-threshold-percent" } };
        for (size_t i = 0; i < ELEMENTSOF(gc); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(kubelet, gc[i][0]);
                char buf[32];
                if (cJSON_IsNumber(v)) {
                        snprintf(buf, sizeof buf, "%d", v->valueint);
                        set(k, gc[i][1], cJSON_CreateString(buf));
                }
        }
}

/* "key=value" labels over the user's; "key[=value]:Effect" taints instead of the user's. */
static int labels_and_taints(const UserDataSpec *s, cJSON *k) {
        cJSON *labels = object_at(k, "node-labels");
        for (size_t i = 0; labels && s->labels && s->labels[i]; i++) {
                const char *eq = strchr(s->labels[i], '=');
                _cleanup_free_ char *key = eq ? strndup(s->labels[i], (size_t) (eq - s->labels[i])) : NULL;
                if (!key)
                        return -EINVAL;
                set(labels, key, cJSON_CreateString(eq + 1));
        }
        cJSON_DeleteItemFromObjectCaseSensitive(k, "node-taints");
        cJSON *taints = (s->taints && s->taints[0]) ? cJSON_AddObjectToObject(k, "node-taints") : NULL;
        for (size_t i = 0; taints && s->taints[i]; i++) {
                const char *t = s->taints[i], *colon = strrchr(t, ':');
                if (!colon || colon == t)
                        return -EINVAL;
                const char *eq = memchr(t, '=', (size_t) (colon - t));
                _cleanup_free_ char *key = strndup(t, (size_t) ((eq ? eq : colon) - t));
                char value[512];
                snprintf(value, sizeof value, "%.*s:%s", eq ? (int) (colon - eq - 1) : 0, eq ? eq + 1 : "", colon + 1);
                cJSON *arr = key ? cJSON_GetObjectItemCaseSensitive(taints, key) : NULL;
                if (!key || (!arr && !(arr = cJSON_AddArrayToObject(taints, key))))
                        return -ENOMEM;
                cJSON_AddItemToArray(arr, cJSON_CreateString(value));
        }
        return 0;
}

/* The agent's configuration and the coordinator's CA: the host container's user-data. */
static int host_container(const UserDataSpec *s, cJSON *settings) {
        StrBuf conf;
        strbuf_init(&conf, USER_DATA_MAX);
        strbuf_printf(&conf, "# Written by nodesmith's node bootstrap (user data).\ncoordinator = %s\n", s->coordinator);
        if (s->tls_server_name)
                strbuf_printf(&conf, "tls-server-name = %s\n", s->tls_server_name);
        /* the host container's user-data is private to it and to the Bottlerocket API */
        strbuf_printf(&conf, "token = %s\n", s->token);
        if (s->nodepool)
                strbuf_printf(&conf, "nodepool = %s\n", s->nodepool);
        strbuf_printf(&conf, "root = %s\nkubelet-config = /etc/kubernetes/kubelet/config\n", HOST_ROOT);
        if (s->extra_settings)
                strbuf_printf(&conf, "%s", s->extra_settings);
        strbuf_printf(&conf, "%s", s->coordinator_ca_pem);
        _cleanup_free_ char *b64 = NULL;
        int r = conf.error < 0 ? -E2BIG : base64_encode(conf.data, conf.len, 0, &b64);
        if (conf.data)
                explicit_bzero(conf.data, conf.len);
        strbuf_done(&conf);
        if (r < 0)
                return r;
        cJSON *hc = object_at(object_at(settings, "host-containers"), "nodesmith");
        if (!hc)
                return -ENOMEM;
        set(hc, "source", cJSON_CreateString(s->agent_image));
        set(hc, "enabled", cJSON_CreateTrue());
        set(hc, "superpowered", cJSON_CreateTrue());
        set(hc, "user-data", cJSON_CreateString(b64));
        explicit_bzero(b64, strlen(b64));
        return 0;
}

static void raid0(cJSON *settings) {
        cJSON *cmd = object_at(object_at(settings, "bootstrap-commands"), "000-mount-instance-storage");
        cJSON *cmds = cJSON_CreateArray(), *init = cJSON_CreateArray(), *bind = cJSON_CreateArray();
        static const char *const init_v[] = { "apiclient", "ephemeral-storage", "init" };
        static const char *const bind_v[] = { "apiclient",          "ephemeral-storage", "bind",         "--dirs",
                                              "/var/lib/containerd", "/var/lib/kubelet",  "/var/log/pods" };
        for (size_t i = 0; init && i < ELEMENTSOF(init_v); i++)
                cJSON_AddItemToArray(init, cJSON_CreateString(init_v[i]));
        for (size_t i = 0; bind && i < ELEMENTSOF(bind_v); i++)
                cJSON_AddItemToArray(bind, cJSON_CreateString(bind_v[i]));
        cJSON_AddItemToArray(cmds, init);
        cJSON_AddItemToArray(cmds, bind);
        set(cmd, "commands", cmds);
        set(cmd, "essential", cJSON_CreateTrue());
        set(cmd, "mode", cJSON_CreateString("always"));
}

int userdata_render_bottlerocket(const UserDataSpec *s, char **ret) {
        if (!userdata_spec_safe(s) || !s->agent_image || strpbrk(s->agent_image, "\r\n\"") ||
            !s->api_server_endpoint || !s->certificate_authority)
                return -EINVAL;
        cJSON *root = NULL;
        int r = s->user_data ? toml_parse_json(s->user_data, &root, NULL) : 0;
        if (r < 0)
                return r;
        if (!root && !(root = cJSON_CreateObject()))
                return -ENOMEM;
        cJSON *settings = object_at(root, "settings"), *k = object_at(settings, "kubernetes");
        if (!k) {
                cJSON_Delete(root);
                return -ENOMEM;
        }
        set(k, "cluster-name", cJSON_CreateString(s->cluster_name));
        set(k, "api-server", cJSON_CreateString(s->api_server_endpoint));
        set(k, "cluster-certificate", cJSON_CreateString(s->certificate_authority));
        kubelet_settings(s->kubelet, s->max_pods, k);
        r = labels_and_taints(s, k);
        /* the agent drains at a shutdown; the kubelet's own graceful shutdown as EKS has it,
         * unless the user's settings say otherwise */
        if (!cJSON_GetObjectItemCaseSensitive(k, "shutdown-grace-period")) {
                set(k, "shutdown-grace-period", cJSON_CreateString("150s"));
                set(k, "shutdown-grace-period-for-critical-pods", cJSON_CreateString("30s"));
        }
        cJSON *as = cJSON_GetObjectItemCaseSensitive(settings, "autoscaling");
        if (cJSON_GetObjectItemCaseSensitive(as, "should-wait"))
                set(as, "should-wait", cJSON_CreateFalse()); /* nodes join no Auto Scaling group */
        if (s->raid0)
                raid0(settings);
        if (r >= 0)
                r = host_container(s, settings);
        _cleanup_free_ char *text = NULL;
        if (r >= 0)
                r = toml_format_json(root, &text);
        cJSON_Delete(root);
        if (r < 0)
                return r;
        if (strlen(text) > USER_DATA_MAX) {
                explicit_bzero(text, strlen(text));
                return -E2BIG;
        }
        *ret = TAKE_PTR(text);
        return 0;
}
