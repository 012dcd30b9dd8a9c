/* SPDX-License-Identifier: Apache-2.0 */
/* AL2023 user data: a MIME multipart of nodeadm's NodeConfig and the agent's configuration. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "macro.h"
#include "strbuf.h"
#include "userdata.h"

#define BOUNDARY "==NODESMITH-BOUNDARY=="

/* Graceful shutdown belongs to nodesmith-agent, which drains through the Eviction API with
 * PodDisruptionBudgets honoured: the kubelet's own shutdown manager (which kills pods without
 * evictions) is off, and logind lets the agent's delay lock hold the shutdown for 150 s, as the
 * kubelet would have raised InhibitDelayMaxSec for its 150 s (docs/drain.md). */
#define LOGIND_DROPIN "/etc/systemd/logind.conf.d/50-nodesmith-shutdown.conf"

static bool safe_value(const char *s) {
        return s && !strpbrk(s, "\r\n#");
}

static int taint_json(const char *t, cJSON *arr) {
        /* key[=value]:Effect */
        const char *colon = strrchr(t, ':');
        if (!colon || colon == t)
                return -EINVAL;
        const char *eff = colon + 1;
        if (!streq(eff, "NoSchedule") && !streq(eff, "PreferNoSchedule") && !streq(eff, "NoExecute"))
                return -EINVAL;
        const char *eq = memchr(t, '=', (size_t) (colon - t));
        _cleanup_free_ char *key = strndup(t, (size_t) ((eq ? eq : colon) - t));
        _cleanup_free_ char *value = eq ? strndup(eq + 1, (size_t) (colon - eq - 1)) : strdup("");
        if (!key || !value)
                return -ENOMEM;
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;
        cJSON_AddStringToObject(o, "key", key);
        cJSON_AddStringToObject(o, "value", value);
        cJSON_AddStringToObject(o, "effect", eff);
        cJSON_AddItemToArray(arr, o);
        return 0;
}

static char *nodeconfig(const UserDataSpec *s) {
        cJSON *root = cJSON_CreateObject(), *spec, *cluster, *kubelet = NULL, *config = NULL, *flags = NULL;
        if (!root)
                return NULL;
        cJSON_AddStringToObject(root, "apiVersion", "node.eks.aws/v1alpha1");
        cJSON_AddStringToObject(root, "kind", "NodeConfig");
        spec = cJSON_AddObjectToObject(root, "spec");
        cluster = cJSON_AddObjectToObject(spec, "cluster");
        cJSON_AddStringToObject(cluster, "name", strempty(s->cluster_name));
        cJSON_AddStringToObject(cluster, "apiServerEndpoint", strempty(s->api_server_endpoint));
        cJSON_AddStringToObject(cluster, "certificateAuthority", strempty(s->certificate_authority));
        cJSON_AddStringToObject(cluster, "cidr", strempty(s->cidr));
        if (s->raid0) {
                cJSON *inst = cJSON_AddObjectToObject(spec, "instance");
                cJSON *ls = cJSON_AddObjectToObject(inst, "localStorage");
                cJSON_AddStringToObject(ls, "strategy", "RAID0");
        }
        kubelet = cJSON_AddObjectToObject(spec, "kubelet");
        config = cJSON_AddObjectToObject(kubelet, "config");
        if (s->max_pods > 0)
                cJSON_AddNumberToObject(config, "maxPods", s->max_pods);
        /* the class's kubelet settings carry KubeletConfiguration's own names */
        const cJSON *k;
        cJSON_ArrayForEach(k, s->kubelet) {
                cJSON_DeleteItemFromObjectCaseSensitive(config, k->string);
                cJSON_AddItemToObject(config, k->string, cJSON_Duplicate(k, true));
        }
        /* the kubelet's graceful node shutdown off (EKS AL2023 sets 150s/30s from 1.34): the agent
         * drains at a shutdown, within logind's delay that the cloud-config part sets */
        cJSON_AddStringToObject(config, "shutdownGracePeriod", "0s");
        cJSON_AddStringToObject(config, "shutdownGracePeriodCriticalPods", "0s");
        if (s->taints && s->taints[0]) {
                cJSON *arr = cJSON_AddArrayToObject(config, "registerWithTaints");
                for (size_t i = 0; s->taints[i]; i++)
                        if (taint_json(s->taints[i], arr) < 0) {
                                cJSON_Delete(root);
                                return NULL;
                        }
        }
        if (s->labels && s->labels[0]) {
                StrBuf b;
                strbuf_init(&b, 8192);
                strbuf_printf(&b, "--node-labels=");
                for (size_t i = 0; s->labels[i]; i++)
                        strbuf_printf(&b, "%s%s", i ? "," : "", s->labels[i]);
                flags = cJSON_AddArrayToObject(kubelet, "flags");
                cJSON_AddItemToArray(flags, cJSON_CreateString(b.error ? "" : b.data));
                strbuf_done(&b);
        }
        char *out = cJSON_Print(root);
        cJSON_Delete(root);
        return out;
}

/* The boundary of a MIME multipart document ("boundary=X" or "boundary=\"X\"" in its
 * Content-Type), copied into buf; false when text is not one. */
static bool mime_boundary(const char *text, char *buf, size_t size) {
        const char *hdr_end = strstr(text, "\n\n");
        if (strncasecmp(text, "MIME-Version:", 13) != 0 && strncasecmp(text, "Content-Type:", 13) != 0)
                return false;
        const char *b = strcasestr(text, "boundary=");
        if (!b || (hdr_end && b > hdr_end))
                return false;
        b += 9;
        bool quoted = *b == '"';
        b += quoted;
        size_t n = quoted ? strcspn(b, "\"\r\n") : strcspn(b, "; \t\r\n");
        if (n == 0 || n >= size)
                return false;
        memcpy(buf, b, n);
        buf[n] = 0;
        return true;
}

/* The user's parts, each under nodesmith's boundary. A MIME document gives its parts as they
 * are; anything else is one part, typed by its first line: a script (#!), a cloud-config, or a
 * NodeConfig. */
static int user_parts(const char *ud, StrBuf *b) {
        char boundary[128], delim[132];
        if (!mime_boundary(ud, boundary, sizeof boundary)) {
                const char *type = strncmp(ud, "#!", 2) == 0             ? "text/x-shellscript"
                                   : strncmp(ud, "#cloud-config", 13) == 0 ? "text/cloud-config"
                                                                          : "application/node.eks.aws";
                return strbuf_printf(b, "--%s\nContent-Type: %s\nMIME-Version: 1.0\n\n%s\n\n", BOUNDARY, type, ud);
        }
        snprintf(delim, sizeof delim, "--%s", boundary);
        size_t dl = strlen(delim), parts = 0;
        const char *p = strstr(ud, delim);
        while (p) {
                p += dl;
                if (strncmp(p, "--", 2) == 0 || !p[strspn(p, " \t\r\n")])
                        break; /* the closing delimiter, or a last one left unclosed as Karpenter's examples do */
                p += strspn(p, " \t");
                if (*p == '\r')
                        p++;
                if (*p != '\n')
                        return -EINVAL;
                p++;
                const char *end = strstr(p, delim);
                if (!end)
                        return -EINVAL; /* not closed */
                size_t n = (size_t) (end - p);
                while (n > 0 && (p[n - 1] == '\n' || p[n - 1] == '\r'))
                        n--;
                int r = strbuf_printf(b, "--%s\n%.*s\n\n", BOUNDARY, (int) n, p);
                if (r < 0)
                        return r;
                parts++;
                p = end;
        }
        return parts > 0 ? 0 : -EINVAL;
}

static int add_file(cJSON *files, const char *path, const char *text) {
        _cleanup_free_ char *b64 = NULL;
        cJSON *f = cJSON_CreateObject();
        if (base64_encode(text, strlen(text), 0, &b64) < 0 || !f) {
                cJSON_Delete(f);
                return -ENOMEM;
        }
        cJSON_AddStringToObject(f, "path", path);
        cJSON_AddStringToObject(f, "owner", "root:root");
        cJSON_AddStringToObject(f, "permissions", "0600");
        cJSON_AddStringToObject(f, "encoding", "b64");
        cJSON_AddStringToObject(f, "content", b64);
        cJSON_AddItemToArray(files, f);
        return 0;
}

bool userdata_spec_safe(const UserDataSpec *s) {
        return safe_value(s->coordinator) && safe_value(s->token) && s->coordinator_ca_pem &&
               (!s->tls_server_name || safe_value(s->tls_server_name)) && (!s->nodepool || safe_value(s->nodepool)) &&
               !isempty(s->cluster_name);
}

int userdata_render(const UserDataSpec *s, char **ret) {
        if (!userdata_spec_safe(s))
                return -EINVAL;

        StrBuf conf;
        strbuf_init(&conf, USER_DATA_MAX);
        strbuf_printf(&conf, "# Written by nodesmith's node bootstrap (user data).\n"
                             "coordinator = %s\ntls-ca = /etc/nodesmith/ca.crt\n"
                             "token-file = /etc/nodesmith/token\n", s->coordinator);
        if (s->tls_server_name)
                strbuf_printf(&conf, "tls-server-name = %s\n", s->tls_server_name);
        if (s->nodepool)
                strbuf_printf(&conf, "nodepool = %s\n", s->nodepool);
        if (s->extra_settings)
                strbuf_printf(&conf, "%s", s->extra_settings);
        if (conf.error < 0) {
                strbuf_done(&conf);
                return -E2BIG;
        }

        _cleanup_free_ char *nc = nodeconfig(s);
        cJSON *cc = cJSON_CreateObject();
        cJSON *files = cc ? cJSON_AddArrayToObject(cc, "write_files") : NULL;
        _cleanup_free_ char *token_line = NULL;
        int r = (nc && files) ? 0 : -ENOMEM;
        if (r >= 0 && asprintf(&token_line, "%s\n", s->token) < 0)
                r = -ENOMEM;
        if (r >= 0)
                r = add_file(files, "/etc/nodesmith/agent.conf", conf.data);
        if (r >= 0)
                r = add_file(files, "/etc/nodesmith/ca.crt", s->coordinator_ca_pem);
        if (r >= 0)
                r = add_file(files, "/etc/nodesmith/token", token_line);
        if (r >= 0)
                r = add_file(files, LOGIND_DROPIN,
                             "# nodesmith-agent drains the node at a shutdown (docs/drain.md)\n"
                             "[Login]\nInhibitDelayMaxSec=150\n");
        /* logind reads its configuration again on SIGHUP (runcmd: after write_files); the agent
         * reads InhibitDelayMaxUSec again when a shutdown begins */
        cJSON *runcmd = r >= 0 ? cJSON_AddArrayToObject(cc, "runcmd") : NULL;
        if (r >= 0 && !(runcmd && cJSON_AddItemToArray(runcmd, cJSON_CreateString(
                                                          "systemctl kill --signal=SIGHUP systemd-logind.service"))))
                r = -ENOMEM;
        strbuf_done(&conf);
        if (token_line)
                explicit_bzero(token_line, strlen(token_line));
        _cleanup_free_ char *ccs = r >= 0 ? cJSON_Print(cc) : NULL;
        cJSON_Delete(cc);
        if (r < 0 || !ccs)
                return r < 0 ? r : -ENOMEM;

        StrBuf b;
        strbuf_init(&b, USER_DATA_MAX);
        strbuf_printf(&b, "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"%s\"\n\n", BOUNDARY);
        r = s->user_data ? user_parts(s->user_data, &b) : 0;
        if (r < 0) {
                strbuf_done(&b);
                explicit_bzero(ccs, strlen(ccs));
                return r;
        }
        strbuf_printf(&b, "--%s\nContent-Type: application/node.eks.aws\nMIME-Version: 1.0\n"
                          "Content-Transfer-Encoding: 7bit\n\n%s\n\n", BOUNDARY, nc);
        strbuf_printf(&b, "--%s\nContent-Type: text/cloud-config; charset=\"us-ascii\"\nMIME-Version: 1.0\n"
                          "Content-Transfer-Encoding: 7bit\n\n#cloud-config\n%s\n\n--%s--\n",
                      BOUNDARY, ccs, BOUNDARY);
        explicit_bzero(ccs, strlen(ccs));
        if (b.error < 0) {
                strbuf_done(&b);
                return -E2BIG;
        }
        *ret = b.data;
        return 0;
}
