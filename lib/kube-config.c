/* SPDX-License-Identifier: Apache-2.0 */
/* Where the Kubernetes client connects and with which credentials: a URL, the in-cluster service
 * account, or a kubeconfig. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base64.h"
#include "fileio.h"
#include "kube-exec.h"
#include "kube-internal.h"
#include "log.h"
#include "yaml-json.h"

static int dup_str(char **dst, const char *s);

KubeConfig *kube_config_free(KubeConfig *c) {
        if (!c)
                return NULL;
        free(c->server);
        if (c->token) {
                explicit_bzero(c->token, strlen(c->token));
                free(c->token);
        }
        free(c->token_file);
        free(c->ca_file);
        free(c->tls_server_name);
        free(c->ca_data);
        free(c->cert_file);
        free(c->key_file);
        free(c->cert_data);
        if (c->key_data) {
                explicit_bzero(c->key_data, c->key_data_len);
                free(c->key_data);
        }
        free(c->namespace);
        kube_exec_free(c->exec);
        free(c);
        return NULL;
}

static int check_server(const char *s) {
        if (isempty(s))
                return -EINVAL;
        if (strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)
                return -EINVAL;
        if (strpbrk(s, " \t\r\n?#"))
                return -EINVAL;
        return 0;
}

int kube_config_new(const char *server, KubeConfig **ret) {
        int r = check_server(server);
        if (r < 0)
                return r;
        _cleanup_(kube_config_freep) KubeConfig *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->server = strdup(server);
        if (!c->server)
                return -ENOMEM;
        size_t n = strlen(c->server);
        while (n > 0 && c->server[n - 1] == '/')
                c->server[--n] = 0;
        *ret = TAKE_PTR(c);
        return 0;
}

int kube_config_in_cluster(const char *sa_dir, KubeConfig **ret) {
        const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
        _cleanup_free_ char *server = NULL;
        _cleanup_(kube_config_freep) KubeConfig *c = NULL;
        int r;

        if (isempty(host) || isempty(port))
                return -ENXIO;
        if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 || strpbrk(host, "/ @?#"))
                return -EINVAL;
        if (!sa_dir)
                sa_dir = KUBE_SA_DIR;
        /* an IPv6 address needs brackets in a URL */
        if (asprintf(&server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port) < 0)
                return -ENOMEM;
        r = kube_config_new(server, &c);
        if (r < 0)
                return r;
        if (asprintf(&c->token_file, "%s/token", sa_dir) < 0) {
                c->token_file = NULL;
                return -ENOMEM;
        }
        if (access(c->token_file, R_OK) < 0)
                return log_debug_errno(errno, "Service account token %s: %m", c->token_file);
        if (asprintf(&c->ca_file, "%s/ca.crt", sa_dir) < 0) {
                c->ca_file = NULL;
                return -ENOMEM;
        }
        if (access(c->ca_file, R_OK) < 0)
                return log_debug_errno(errno, "Service account CA %s: %m", c->ca_file);
        c->tls_server_name = strdup("kubernetes.default.svc");
        if (!c->tls_server_name)
                return -ENOMEM;
        _cleanup_free_ char *nsf = NULL;
        if (asprintf(&nsf, "%s/namespace", sa_dir) < 0)
                return -ENOMEM;
        r = read_file_trimmed(nsf, 253, &c->namespace);
        if (r < 0 && r != -ENOENT)
                return r;
        if (c->namespace && !*c->namespace) {
                free(c->namespace);
                c->namespace = NULL;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

/* ---- kubeconfig ---------------------------------------------------------------------------- */

static const cJSON *named(const cJSON *list, const char *name, const char *field) {
        const cJSON *e;
        cJSON_ArrayForEach(e, list) {
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
                if (cJSON_IsString(n) && streq(n->valuestring, name))
                        return cJSON_GetObjectItemCaseSensitive(e, field);
        }
        return NULL;
}

static const char *str(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) && *v->valuestring ? v->valuestring : NULL;
}

static int set_path(char **dst, const char *base_dir, const char *p) {
        if (!p)
                return 0;
        char *n;
        if (p[0] == '/' || isempty(base_dir))
                n = strdup(p);
        else if (asprintf(&n, "%s/%s", base_dir, p) < 0)
                n = NULL;
        if (!n)
                return -ENOMEM;
        free(*dst);
        *dst = n;
        return 0;
}

static int set_data(char **dst, size_t *dst_len, const char *b64) {
        if (!b64)
                return 0;
        void *d;
        size_t n;
        int r = base64_decode(b64, strlen(b64), 0, &d, &n);
        if (r < 0)
                return r;
        if (n == 0) {
                free(d);
                return -EBADMSG;
        }
        free(*dst);
        *dst = d;
        *dst_len = n;
        return 0;
}

int kube_config_parse_kubeconfig(const char *text, size_t len, const char *base_dir,
                                 const char *context, KubeConfig **ret) {
        _cleanup_(kube_config_freep) KubeConfig *c = NULL;
        cJSON *root = NULL;
        int r;

        r = json_or_yaml_parse(text, len, &root);
        if (r < 0)
                return log_debug_errno(r, "kubeconfig: cannot parse: %m");
        if (!cJSON_IsObject(root)) {
                cJSON_Delete(root);
                return -EBADMSG;
        }
        if (!context)
                context = str(root, "current-context");
        if (!context) {
                cJSON_Delete(root);
                return log_debug_errno(ENOENT, "kubeconfig: no context given and no current-context");
        }
        const cJSON *ctx = named(cJSON_GetObjectItemCaseSensitive(root, "contexts"), context, "context");
        const char *cluster_name = str(ctx, "cluster"), *user_name = str(ctx, "user");
        const cJSON *cluster = cluster_name ? named(cJSON_GetObjectItemCaseSensitive(root, "clusters"),
                                                    cluster_name, "cluster")
                                            : NULL;
        const cJSON *user = user_name ? named(cJSON_GetObjectItemCaseSensitive(root, "users"),
                                              user_name, "user")
                                      : NULL;
        if (!ctx || !cluster || (user_name && !user)) {
                r = log_debug_errno(ENOENT, "kubeconfig: context \"%s\" or its cluster or user is missing",
                                    context);
                goto out;
        }
        r = kube_config_new(str(cluster, "server"), &c);
        if (r < 0) {
                r = log_debug_errno(r, "kubeconfig: bad or missing server in cluster \"%s\"", cluster_name);
                goto out;
        }
        if ((r = set_path(&c->ca_file, base_dir, str(cluster, "certificate-authority"))) < 0 ||
            (r = set_data(&c->ca_data, &c->ca_data_len, str(cluster, "certificate-authority-data"))) < 0 ||
            (r = dup_str(&c->tls_server_name, str(cluster, "tls-server-name"))) < 0)
                goto out;
        c->insecure_skip_verify = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cluster,
                                                                                "insecure-skip-tls-verify"));
        if (user) {
                if (cJSON_GetObjectItemCaseSensitive(user, "auth-provider") || str(user, "username")) {
                        r = log_debug_errno(EOPNOTSUPP, "kubeconfig: user \"%s\": auth-provider and basic "
                                            "authentication are not supported", user_name);
                        goto out;
                }
                const cJSON *exec = cJSON_GetObjectItemCaseSensitive(user, "exec");
                if (exec && !cJSON_IsNull(exec) && (r = kube_exec_from_json(exec, base_dir, &c->exec)) < 0)
                        goto out;
                if (str(user, "token") && !(c->token = strdup(str(user, "token")))) {
                        r = -ENOMEM;
                        goto out;
                }
                if ((r = set_path(&c->token_file, base_dir, str(user, "tokenFile"))) < 0 ||
                    (r = set_path(&c->cert_file, base_dir, str(user, "client-certificate"))) < 0 ||
                    (r = set_path(&c->key_file, base_dir, str(user, "client-key"))) < 0 ||
                    (r = set_data(&c->cert_data, &c->cert_data_len, str(user, "client-certificate-data"))) < 0 ||
                    (r = set_data(&c->key_data, &c->key_data_len, str(user, "client-key-data"))) < 0)
                        goto out;
                if (!!(c->cert_file || c->cert_data) != !!(c->key_file || c->key_data)) {
                        r = log_debug_errno(EINVAL, "kubeconfig: user \"%s\": a client certificate needs its key",
                                            user_name);
                        goto out;
                }
        }
        if (str(ctx, "namespace") && !(c->namespace = strdup(str(ctx, "namespace")))) {
                r = -ENOMEM;
                goto out;
        }
        *ret = TAKE_PTR(c);
        r = 0;
out:
        cJSON_Delete(root);
        return r;
}

int kube_config_from_kubeconfig(const char *path, const char *context, KubeConfig **ret) {
        _cleanup_free_ char *text = NULL, *dir = NULL;
        int r = read_file_trimmed(path, KUBE_MAX_KUBECONFIG_SIZE, &text);
        if (r < 0)
                return log_debug_errno(r, "kubeconfig %s: %m", path);
        const char *slash = strrchr(path, '/');
        dir = slash ? strndup(path, (size_t) (slash - path)) : strdup(".");
        if (!dir)
                return -ENOMEM;
        if (!*dir && free_and_strdup(&dir, "/") < 0)
                return -ENOMEM;
        return kube_config_parse_kubeconfig(text, strlen(text), dir, context, ret);
}

/* ---- copies for the client ----------------------------------------------------------------- */

static int dup_str(char **dst, const char *s) {
        return free_and_strdup(dst, s);
}

static int dup_mem(char **dst, const char *s, size_t n) {
        if (!s)
                return 0;
        char *d = malloc(n + 1);
        if (!d)
                return -ENOMEM;
        memcpy(d, s, n);
        d[n] = 0;
        *dst = d;
        return 0;
}

int kube_config_copy(const KubeConfig *s, KubeConfig **ret) {
        _cleanup_(kube_config_freep) KubeConfig *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        kube_config_effective(s, c);
        c->insecure_skip_verify = s->insecure_skip_verify;
        c->ca_data_len = s->ca_data_len;
        c->cert_data_len = s->cert_data_len;
        c->key_data_len = s->key_data_len;
        if (dup_str(&c->server, s->server) < 0 || dup_str(&c->token, s->token) < 0 ||
            dup_str(&c->token_file, s->token_file) < 0 || dup_str(&c->ca_file, s->ca_file) < 0 ||
            dup_str(&c->tls_server_name, s->tls_server_name) < 0 ||
            dup_str(&c->cert_file, s->cert_file) < 0 || dup_str(&c->key_file, s->key_file) < 0 ||
            dup_str(&c->namespace, s->namespace) < 0 ||
            dup_mem(&c->ca_data, s->ca_data, s->ca_data_len) < 0 ||
            dup_mem(&c->cert_data, s->cert_data, s->cert_data_len) < 0 ||
            dup_mem(&c->key_data, s->key_data, s->key_data_len) < 0 ||
            (s->exec && kube_exec_copy(s->exec, &c->exec) < 0))
                return -ENOMEM;
        *ret = TAKE_PTR(c);
        return 0;
}

void kube_config_effective(const KubeConfig *s, KubeConfig *c) {
#define DEF(f, d) c->f = s->f ? s->f : (d)
        DEF(max_body, KUBE_DEFAULT_MAX_BODY);
        DEF(max_event, KUBE_DEFAULT_MAX_EVENT);
        DEF(max_items, KUBE_DEFAULT_MAX_ITEMS);
        DEF(max_attempts, KUBE_DEFAULT_MAX_ATTEMPTS);
        DEF(timeout_usec, KUBE_DEFAULT_TIMEOUT_USEC);
        DEF(deadline_usec, KUBE_DEFAULT_DEADLINE_USEC);
        DEF(backoff_base_usec, KUBE_DEFAULT_BACKOFF_BASE_USEC);
        DEF(backoff_max_usec, KUBE_DEFAULT_BACKOFF_MAX_USEC);
#undef DEF
}
