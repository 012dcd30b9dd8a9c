/* SPDX-License-Identifier: Apache-2.0 */
/* Where nodesmithctl finds the coordinator's HTTP endpoint: a URL (--coordinator), or, as the
 * kubectl plugin kubectl-nodesmith (or with --kubeconfig / --context / --namespace), through the
 * API server's service proxy, /api/v1/namespaces/NS/services/NAME:PORT/proxy, with the
 * kubeconfig's server, credentials and CA: no port-forward needed. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "fileio.h"
#include "kube.h"
#include "macro.h"

#define TOKEN_MAX 16384

static KubeConfig *kube;      /* set when the service proxy is used */
static char *proxy_base;

static void target_free(void) {
        kube = kube_config_free(kube);
        free(proxy_base);
        proxy_base = NULL;
}

static char *kubeconfig_path(const char *given) {
        const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
        char *p = NULL;
        if (!isempty(given))
                return strdup(given);
        if (!isempty(env))
                return strndup(env, strcspn(env, ":")); /* the first file of the list */
        if (isempty(home) || asprintf(&p, "%s/.kube/config", home) < 0)
                return NULL;
        return p;
}

int ctl_target_kube(const char *kubeconfig, const char *context, const char *ns, const char *service,
                    const char **ret_base) {
        _cleanup_free_ char *path = kubeconfig_path(kubeconfig);
        int r;
        if (!path) {
                fprintf(stderr, "nodesmithctl: no kubeconfig: give --kubeconfig or set KUBECONFIG\n");
                return -ENOENT;
        }
        target_free();
        (void) atexit(target_free);
        r = ctl_kubeconfig_load(path, context, &kube);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl: kubeconfig %s%s%s: %s\n", path, context ? ", context " : "",
                        strempty(context), r == -EOPNOTSUPP ? "auth-provider users are not supported" :
                        strerror(-r));
                return r;
        }
        if (kube->tls_server_name) {
                fprintf(stderr, "nodesmithctl: kubeconfig %s: tls-server-name is not supported; use the "
                                "name the server's certificate carries in the server URL\n", path);
                return -EOPNOTSUPP;
        }
        if (asprintf(&proxy_base, "%s/api/v1/namespaces/%s/services/%s:api/proxy", kube->server, ns, service) < 0)
                return -ENOMEM;
        *ret_base = proxy_base;
        return 0;
}

static int append_bearer(struct curl_slist **headers, const char *name, const char *token) {
        _cleanup_free_ char *hdr = NULL;
        if (asprintf(&hdr, "%s: Bearer %s", name, token) < 0)
                return -ENOMEM;
        struct curl_slist *l = curl_slist_append(*headers, hdr);
        explicit_bzero(hdr, strlen(hdr));
        if (!l)
                return -ENOMEM;
        *headers = l;
        return 0;
}

int ctl_target_apply(CURL *h, struct curl_slist **headers) {
        if (!kube) {
                /* straight to --coordinator: a bearer token for its /api/v1, if one is given */
                const char *env = getenv("NODESMITH_API_TOKEN");
                return isempty(env) ? 0 : append_bearer(headers, "Authorization", env);
        }
        _cleanup_free_ char *token = NULL;
        if (kube->token_file) {
                int r = read_file_trimmed(kube->token_file, TOKEN_MAX, &token);
                if (r < 0) {
                        fprintf(stderr, "nodesmithctl: token file %s: %s\n", kube->token_file, strerror(-r));
                        return r;
                }
        }
        const char *bearer = token ? token : kube->token;
        if (!isempty(bearer)) {
                int r = append_bearer(headers, "Authorization", bearer);
                /* the API server's service proxy drops Authorization: the coordinator's /api/v1 gets
                 * the same token here and checks it with a TokenReview (docs/security.md) */
                if (r >= 0)
                        r = append_bearer(headers, "X-Nodesmith-Authorization", bearer);
                if (r < 0)
                        return r;
        }
        if (kube->ca_file)
                curl_easy_setopt(h, CURLOPT_CAINFO, kube->ca_file);
        if (kube->ca_data) {
                struct curl_blob b = { kube->ca_data, kube->ca_data_len, CURL_BLOB_COPY };
                curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
        }
        if (kube->cert_file)
                curl_easy_setopt(h, CURLOPT_SSLCERT, kube->cert_file);
        if (kube->key_file)
                curl_easy_setopt(h, CURLOPT_SSLKEY, kube->key_file);
        if (kube->cert_data) {
                struct curl_blob b = { kube->cert_data, kube->cert_data_len, CURL_BLOB_COPY };
                curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &b);
                curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
        }
        if (kube->key_data) {
                struct curl_blob b = { kube->key_data, kube->key_data_len, CURL_BLOB_COPY };
                curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &b);
                curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
        }
        if (kube->insecure_skip_verify) {
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
        }
        return 0;
}
