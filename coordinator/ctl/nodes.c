/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl nodes: the coordinator's node table. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <time.h>

#include "ctl.h"
#include "macro.h"
#include "strbuf.h"

#define API_BODY_MAX (64u * 1024 * 1024)

static size_t on_data(char *p, size_t size, size_t n, void *userdata) {
        StrBuf *b = userdata;
        return strbuf_append(b, p, size * n) < 0 ? 0 : size * n;
}

int ctl_http_get(const char *base, const char *path, char **ret) {
        char url[2048];
        StrBuf b;
        long status = 0;

        struct curl_slist *headers = NULL;
        snprintf(url, sizeof url, "%s%s", base, path);
        strbuf_init(&b, API_BODY_MAX);
        CURL *h = curl_easy_init();
        if (!h)
                return -ENOMEM;
        if (ctl_target_apply(h, &headers) < 0) {
                curl_easy_cleanup(h);
                curl_slist_free_all(headers);
                return -EINVAL;
        }
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 15000L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        CURLcode cc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
        if (cc != CURLE_OK) {
                fprintf(stderr, "nodesmithctl: %s: %s\n", url, curl_easy_strerror(cc));
                strbuf_done(&b);
                return -ECONNREFUSED;
        }
        if (status != 200) {
                fprintf(stderr, "nodesmithctl: %s: HTTP %ld%s\n", url, status,
                        status == 503 || status == 404 ? " (is the coordinator running, and its Service there?)" :
                        status == 401 || status == 403 ? " (the kubeconfig's user needs get on services/proxy)" : "");
                strbuf_done(&b);
                return -EIO;
        }
        if (!b.data && strbuf_append(&b, "", 0) < 0)
                return -ENOMEM;
        *ret = b.data;
        return 0;
}

double ctl_num(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

const char *ctl_str(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) && *v->valuestring ? v->valuestring : "-";
}


static void fmt_resources(const cJSON *r, char *buf, size_t size) {
        snprintf(buf, size, "%.0fm/%.0fMi/%.0f", ctl_num(r, "cpuMillis"), ctl_num(r, "memoryBytes") / 1048576.0,
                 ctl_num(r, "pods"));
}

static int compare_name(const void *a, const void *b) {
        const cJSON *x = *(const cJSON *const *) a, *y = *(const cJSON *const *) b;
        int c = strcmp(ctl_str(x, "name"), ctl_str(y, "name"));
        return c ? c : strcmp(ctl_str(x, "instanceId"), ctl_str(y, "instanceId"));
}

static void help(void) {
        printf("Usage: nodesmithctl nodes [--coordinator URL] [-o table|json]\n\n"
               "Lists the nodes whose agents report to the coordinator: name, instance type, zone,\n"
               "capacity type, allocatable and requested (CPU/memory/pods), notices, and the age of\n"
               "the last report.\n"
               "  --coordinator URL  the coordinator's HTTP endpoint [$NODESMITH_COORDINATOR_HTTP or\n"
               "                     http://127.0.0.1:8081]; a bearer token from $NODESMITH_API_TOKEN\n%s", CTL_KUBE_OPTIONS_HELP);
}

bool ctl_kubectl_plugin;

int ctl_common_options(int argc, char **argv, void (*usage)(void), const char **base, const char **output) {
        enum { OPT_KUBECONFIG = 0x100, OPT_CONTEXT, OPT_SERVICE };
        static const struct option opts[] = {
                { "coordinator", required_argument, NULL, 'c' },
                { "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
                { "context", required_argument, NULL, OPT_CONTEXT },
                { "namespace", required_argument, NULL, 'n' },
                { "service", required_argument, NULL, OPT_SERVICE },
                { "output", required_argument, NULL, 'o' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *kubeconfig = NULL, *context = NULL, *ns = "nodesmith", *service = "nodesmith-coordinator";
        bool explicit = false, url = false;
        int c;
        *base = getenv("NODESMITH_COORDINATOR_HTTP");
        if (!*base)
                *base = "http://127.0.0.1:8081"; /* api-listen */
        optind = 1;
        while ((c = getopt_long(argc, argv, "c:n:o:h", opts, NULL)) >= 0)
                switch (c) {
                case 'c':
                        *base = optarg;
                        url = true;
                        break;
                case OPT_KUBECONFIG:
                        kubeconfig = optarg;
                        explicit = true;
                        break;
                case OPT_CONTEXT:
                        context = optarg;
                        explicit = true;
                        break;
                case 'n':
                        ns = optarg;
                        explicit = true;
                        break;
                case OPT_SERVICE:
                        service = optarg;
                        explicit = true;
                        break;
                case 'o':
                        *output = optarg;
                        break;
                case 'h':
                        usage();
                        return 0;
                default:
                        return 2;
                }
        if (url && explicit) {
                fprintf(stderr, "nodesmithctl: --coordinator and --kubeconfig/--context/--namespace/--service exclude each other\n");
                return 2;
        }
        if ((explicit || ctl_kubectl_plugin) && !url && ctl_target_kube(kubeconfig, context, ns, service, base) < 0)
                return 1;
        return -1;
}

int ctl_nodes_main(int argc, char **argv) {
        const char *base, *output = "table";
        int rc = ctl_common_options(argc, argv, help, &base, &output);
        if (rc >= 0)
                return rc;
        if (!streq(output, "table") && !streq(output, "json")) {
                fprintf(stderr, "nodesmithctl: -o must be table or json\n");
                return 2;
        }

        _cleanup_free_ char *body = NULL;
        if (ctl_http_get(base, "/api/v1/nodes", &body) < 0)
                return 1;
        if (streq(output, "json")) {
                printf("%s\n", body);
                return 0;
        }
        cJSON *root = cJSON_Parse(body);
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(root, "items");
        if (!cJSON_IsArray(items)) {
                fprintf(stderr, "nodesmithctl: unexpected answer from %s\n", base);
                cJSON_Delete(root);
                return 1;
        }
        int n = cJSON_GetArraySize(items);
        const cJSON **v = calloc((size_t) n + 1, sizeof *v);
        if (!v) {
                cJSON_Delete(root);
                return 1;
        }
        int k = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, items) v[k++] = it;
        qsort(v, (size_t) n, sizeof *v, compare_name);

        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double now_ms = (double) ts.tv_sec * 1000.0 + (double) ts.tv_nsec / 1e6;
        printf("%-28s %-20s %-14s %-12s %-10s %-22s %-22s %-24s %s\n", "NAME", "INSTANCE", "TYPE",
               "ZONE", "CAPACITY", "ALLOCATABLE", "REQUESTED", "NOTICES", "LAST-REPORT");
        for (int i = 0; i < n; i++) {
                char alloc[64], req[64], age[32];
                fmt_resources(cJSON_GetObjectItemCaseSensitive(v[i], "allocatable"), alloc, sizeof alloc);
                fmt_resources(cJSON_GetObjectItemCaseSensitive(v[i], "requested"), req, sizeof req);
                snprintf(age, sizeof age, "%.1fs", ctl_num(v[i], "lastReportAgeSeconds"));
                const cJSON *notices = cJSON_GetObjectItemCaseSensitive(v[i], "notices");
                char nb[64] = "-";
                if (cJSON_GetArraySize(notices) > 0) {
                        /* the first notice, with the time it leaves: "spot-interruption(97s)" */
                        const cJSON *first = cJSON_GetArrayItem(notices, 0);
                        const char *kind = ctl_str(first, "kind");
                        char kn[40];
                        if (strncmp(kind, "KIND_", 5) == 0)
                                kind += 5;
                        snprintf(kn, sizeof kn, "%s", kind);
                        for (char *p = kn; *p; p++)
                                *p = *p == '_' ? '-' : (char) tolower((unsigned char) *p);
                        double deadline = ctl_num(first, "deadlineUnixMs");
                        int extra = cJSON_GetArraySize(notices) - 1;
                        if (deadline > 0)
                                snprintf(nb, sizeof nb, "%s(%.0fs)%s", kn, (deadline - now_ms) / 1000.0,
                                         extra > 0 ? "+" : "");
                        else
                                snprintf(nb, sizeof nb, "%s%s", kn, extra > 0 ? "+" : "");
                }
                printf("%-28s %-20s %-14s %-12s %-10s %-22s %-22s %-24s %s\n", ctl_str(v[i], "name"),
                       ctl_str(v[i], "instanceId"), ctl_str(v[i], "instanceType"), ctl_str(v[i], "zone"),
                       ctl_str(v[i], "capacityType"), alloc, req, nb, age);
        }
        free(v);
        cJSON_Delete(root);
        return 0;
}
