/* SPDX-License-Identifier: Apache-2.0 */
/* kubeprobe: lib/kube.h from the command line, for tests and for poking at an API server.
 *
 *   kubeprobe [CONNECTION] [OPTIONS] COMMAND ARGS...
 * CONNECTION: --server URL [--token T] [--token-file F] [--ca F] [--insecure] [--tls-server-name N]
 *             | --kubeconfig F [--context C] | --in-cluster [SA-DIR]
 * OPTIONS:    --max-attempts N --deadline SEC --timeout SEC --backoff-base MS --backoff-max MS
 *             --max-body BYTES --max-event BYTES --max-items N
 *             -l SELECTOR --field-selector SELECTOR --limit N (list, watch)
 *             --grace SEC --uid UID --rv RV (delete, evict) --event-type Normal|Warning
 *             --for SEC (watch: stop after this long) --verbose
 * COMMANDS:   get PATH | list PATH | create PATH JSON | replace PATH JSON
 *             | patch PATH strategic|merge|json BODY | cordon NODE | uncordon NODE
 *             | unfinalize PATH FINALIZER | delete PATH | evict NS NAME
 *             | event NS KIND NAME REASON MESSAGE | watch PATH
 *
 * One-shot commands print one JSON line: {"error": -errno, "errno": "ENOENT", "http": 404,
 * "attempts": N, "reason", "message", "cause", "retryAfter", "result" (evict), "elapsedMs",
 * "object"} and exit 0 on success, 1 on an API error, 2 on bad usage.
 * watch prints one line per event: "SYNCED n=N", "ADDED ns/name rv=RV",
 * "MODIFIED ns/name rv=RV old=RV", "DELETED ns/name", "ERROR errno message", and at the end
 * "STATS {json}". */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube.h"
#include "log.h"

static struct {
        const char *command;
        char **args;
        int n_args;
        KubeListOptions list;
        KubeDeleteOptions del;
        const char *event_type;
        double watch_for;
        int exit_code;
        uint64_t started;
        sd_event *event;
        KubeClient *client;
        char *unfinalizer; /* unfinalize: the finalizer */
} P = { .del = KUBE_DELETE_OPTIONS_INIT, .exit_code = 1 };

static uint64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static const char *errno_name(int e) {
        const char *n = strerrorname_np(e < 0 ? -e : e);
        return n ? n : "?";
}

static void print_result(KubeResponse *resp, const char *evict_result) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "error", resp->error);
        cJSON_AddStringToObject(o, "errno", resp->error < 0 ? errno_name(resp->error) : "");
        cJSON_AddNumberToObject(o, "http", (double) resp->http_status);
        cJSON_AddNumberToObject(o, "attempts", resp->attempts);
        cJSON_AddStringToObject(o, "reason", resp->status.reason);
        cJSON_AddStringToObject(o, "message", resp->status.message);
        cJSON_AddStringToObject(o, "cause", resp->status.cause);
        cJSON_AddNumberToObject(o, "retryAfter", resp->status.retry_after);
        cJSON_AddNumberToObject(o, "elapsedMs", (double) (mono_ms() - P.started));
        if (evict_result)
                cJSON_AddStringToObject(o, "result", evict_result);
        if (resp->object)
                cJSON_AddItemToObject(o, "object", TAKE_PTR(resp->object));
        char *s = cJSON_PrintUnformatted(o);
        printf("%s\n", s);
        fflush(stdout);
        free(s);
        cJSON_Delete(o);
        P.exit_code = resp->error < 0 ? 1 : 0;
}

static void on_done(KubeResponse *resp, void *userdata) {
        print_result(resp, NULL);
        sd_event_exit(P.event, 0);
}

static void on_evict(KubeEvictResult result, KubeResponse *resp, void *userdata) {
        print_result(resp, kube_evict_result_to_string(result));
        sd_event_exit(P.event, 0);
}

/* unfinalize: the object arrived; remove the finalizer with a guarded JSON patch */
static void on_unfinalize_get(KubeResponse *resp, void *userdata) {
        _cleanup_free_ char *patch = NULL;
        if (resp->error < 0) {
                on_done(resp, NULL);
                return;
        }
        int r = kube_finalizer_remove_patch(resp->object, P.unfinalizer, &patch);
        if (r >= 0)
                r = kube_patch(P.client, P.args[0], KUBE_PATCH_JSON, patch, on_done, NULL, NULL);
        if (r < 0) {
                KubeResponse fail = { .error = r };
                on_done(&fail, NULL);
        }
}

static void on_watch(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        _cleanup_free_ char *key = NULL;
        if (ev->object)
                (void) kube_object_key(ev->object, &key);
        switch (ev->type) {
        case KUBE_WATCH_ADDED:
                printf("ADDED %s rv=%s\n", strempty(key), strempty(kube_object_meta(ev->object, "resourceVersion")));
                break;
        case KUBE_WATCH_MODIFIED:
                printf("MODIFIED %s rv=%s old=%s\n", strempty(key),
                       strempty(kube_object_meta(ev->object, "resourceVersion")),
                       strempty(kube_object_meta(ev->old, "resourceVersion")));
                break;
        case KUBE_WATCH_DELETED:
                printf("DELETED %s\n", strempty(key));
                break;
        case KUBE_WATCH_SYNCED:
                printf("SYNCED n=%zu\n", kube_watch_size(w));
                break;
        case KUBE_WATCH_ERROR:
                printf("ERROR %s %s\n", errno_name(ev->error), ev->status ? ev->status->message : "");
                break;
        }
        fflush(stdout);
}

static int on_stop(sd_event_source *s, uint64_t usec, void *userdata) {
        sd_event_exit(P.event, 0);
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        sd_event_exit(P.event, 0);
        return 0;
}

static int usage(void) {
        fprintf(stderr, "usage: kubeprobe [--server URL|--kubeconfig F|--in-cluster [DIR]] [options] "
                        "get|list|create|replace|patch|cordon|uncordon|unfinalize|delete|evict|event|watch ARGS...\n");
        return 2;
}

static int need(int n) {
        if (P.n_args != n) {
                fprintf(stderr, "kubeprobe: %s takes %d argument(s)\n", P.command, n);
                return -EINVAL;
        }
        return 0;
}

static int run_command(KubeWatch **ret_watch) {
        KubeClient *c = P.client;
        char **a = P.args;
        const char *cmd = P.command;
        int r;

        if (streq(cmd, "get"))
                return need(1) ?: kube_get(c, a[0], on_done, NULL, NULL);
        if (streq(cmd, "list"))
                return need(1) ?: kube_list(c, a[0], &P.list, on_done, NULL, NULL);
        if (streq(cmd, "create") || streq(cmd, "replace")) {
                if ((r = need(2)) < 0)
                        return r;
                cJSON *body = cJSON_Parse(a[1]);
                if (!body)
                        return -EINVAL;
                r = streq(cmd, "create") ? kube_create(c, a[0], body, on_done, NULL, NULL)
                                         : kube_replace(c, a[0], body, on_done, NULL, NULL);
                cJSON_Delete(body);
                return r;
        }
        if (streq(cmd, "patch")) {
                if ((r = need(3)) < 0)
                        return r;
                KubePatchType t = streq(a[1], "strategic") ? KUBE_PATCH_STRATEGIC
                                  : streq(a[1], "merge")   ? KUBE_PATCH_MERGE
                                  : streq(a[1], "json")    ? KUBE_PATCH_JSON
                                                           : (KubePatchType) -1;
                return kube_patch(c, a[0], t, a[2], on_done, NULL, NULL);
        }
        if (streq(cmd, "cordon") || streq(cmd, "uncordon"))
                return need(1) ?: kube_cordon(c, a[0], streq(cmd, "cordon"), on_done, NULL, NULL);
        if (streq(cmd, "unfinalize")) {
                if ((r = need(2)) < 0)
                        return r;
                P.unfinalizer = a[1];
                return kube_get(c, a[0], on_unfinalize_get, NULL, NULL);
        }
        if (streq(cmd, "delete"))
                return need(1) ?: kube_delete(c, a[0], &P.del, on_done, NULL, NULL);
        if (streq(cmd, "evict"))
                return need(2) ?: kube_evict(c, a[0], a[1], &P.del, on_evict, NULL, NULL);
        if (streq(cmd, "event")) {
                if ((r = need(5)) < 0)
                        return r;
                KubeEventInfo ev = { .object_namespace = *a[0] ? a[0] : NULL, .api_version = "v1",
                                     .kind = a[1], .name = a[2], .reason = a[3], .message = a[4],
                                     .type = P.event_type, .component = "kubeprobe", .host = "probe-host",
                                     .uid = P.del.uid };
                return kube_event_create(c, &ev, on_done, NULL, NULL);
        }
        if (streq(cmd, "watch")) {
                if ((r = need(1)) < 0)
                        return r;
                return kube_watch_new(c, a[0], &P.list, on_watch, NULL, ret_watch);
        }
        fprintf(stderr, "kubeprobe: unknown command %s\n", cmd);
        return -EINVAL;
}

int main(int argc, char **argv) {
        enum {
                O_SERVER = 0x100, O_KUBECONFIG, O_CONTEXT, O_IN_CLUSTER, O_TOKEN, O_TOKEN_FILE, O_CA,
                O_INSECURE, O_TLS_SERVER_NAME, O_MAX_ATTEMPTS, O_DEADLINE, O_TIMEOUT, O_BACKOFF_BASE, O_BACKOFF_MAX,
                O_MAX_BODY, O_MAX_EVENT, O_MAX_ITEMS, O_FIELD, O_LIMIT, O_GRACE, O_UID, O_RV,
                O_EVENT_TYPE, O_FOR, O_VERBOSE,
        };
        static const struct option opts[] = {
                { "server", required_argument, NULL, O_SERVER },
                { "kubeconfig", required_argument, NULL, O_KUBECONFIG },
                { "context", required_argument, NULL, O_CONTEXT },
                { "in-cluster", optional_argument, NULL, O_IN_CLUSTER },
                { "token", required_argument, NULL, O_TOKEN },
                { "token-file", required_argument, NULL, O_TOKEN_FILE },
                { "ca", required_argument, NULL, O_CA },
                { "insecure", no_argument, NULL, O_INSECURE },
                { "tls-server-name", required_argument, NULL, O_TLS_SERVER_NAME },
                { "max-attempts", required_argument, NULL, O_MAX_ATTEMPTS },
                { "deadline", required_argument, NULL, O_DEADLINE },
                { "timeout", required_argument, NULL, O_TIMEOUT },
                { "backoff-base", required_argument, NULL, O_BACKOFF_BASE },
                { "backoff-max", required_argument, NULL, O_BACKOFF_MAX },
                { "max-body", required_argument, NULL, O_MAX_BODY },
                { "max-event", required_argument, NULL, O_MAX_EVENT },
                { "max-items", required_argument, NULL, O_MAX_ITEMS },
                { "selector", required_argument, NULL, 'l' },
                { "field-selector", required_argument, NULL, O_FIELD },
                { "limit", required_argument, NULL, O_LIMIT },
                { "grace", required_argument, NULL, O_GRACE },
                { "uid", required_argument, NULL, O_UID },
                { "rv", required_argument, NULL, O_RV },
                { "event-type", required_argument, NULL, O_EVENT_TYPE },
                { "for", required_argument, NULL, O_FOR },
                { "verbose", no_argument, NULL, O_VERBOSE },
                {}
        };
        const char *server = NULL, *kubeconfig = NULL, *context = NULL, *sa_dir = NULL;
        const char *token = NULL, *token_file = NULL, *ca = NULL;
        bool in_cluster = false, insecure = false;
        const char *server_name = NULL;
        KubeConfig limits = {};
        _cleanup_(kube_config_freep) KubeConfig *cfg = NULL;
        _cleanup_(kube_watch_freep) KubeWatch *watch = NULL;
        sigset_t ss;
        int c, r;

        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigprocmask(SIG_BLOCK, &ss, NULL);
        log_set_ident("kubeprobe");
        log_set_max_level(LOG_WARNING);

        while ((c = getopt_long(argc, argv, "+l:", opts, NULL)) >= 0)
                switch (c) {
                case O_SERVER: server = optarg; break;
                case O_KUBECONFIG: kubeconfig = optarg; break;
                case O_CONTEXT: context = optarg; break;
                case O_IN_CLUSTER: in_cluster = true; sa_dir = optarg; break;
                case O_TOKEN: token = optarg; break;
                case O_TOKEN_FILE: token_file = optarg; break;
                case O_CA: ca = optarg; break;
                case O_INSECURE: insecure = true; break;
                case O_TLS_SERVER_NAME: server_name = optarg; break;
                case O_MAX_ATTEMPTS: limits.max_attempts = (unsigned) atoi(optarg); break;
                case O_DEADLINE: limits.deadline_usec = (uint64_t) (atof(optarg) * USEC_PER_SEC); break;
                case O_TIMEOUT: limits.timeout_usec = (uint64_t) (atof(optarg) * USEC_PER_SEC); break;
                case O_BACKOFF_BASE: limits.backoff_base_usec = (uint64_t) atoll(optarg) * USEC_PER_MSEC; break;
                case O_BACKOFF_MAX: limits.backoff_max_usec = (uint64_t) atoll(optarg) * USEC_PER_MSEC; break;
                case O_MAX_BODY: limits.max_body = (size_t) atoll(optarg); break;
                case O_MAX_EVENT: limits.max_event = (size_t) atoll(optarg); break;
                case O_MAX_ITEMS: limits.max_items = (size_t) atoll(optarg); break;
                case 'l': P.list.label_selector = optarg; break;
                case O_FIELD: P.list.field_selector = optarg; break;
                case O_LIMIT: P.list.limit = (unsigned) atoi(optarg); break;
                case O_GRACE: P.del.grace_seconds = atoll(optarg); break;
                case O_UID: P.del.uid = optarg; break;
                case O_RV: P.del.resource_version = optarg; break;
                case O_EVENT_TYPE: P.event_type = optarg; break;
                case O_FOR: P.watch_for = atof(optarg); break;
                case O_VERBOSE: log_set_max_level(LOG_DEBUG); break;
                default: return usage();
                }
        if (optind >= argc || (!!server + !!kubeconfig + in_cluster) != 1)
                return usage();
        P.command = argv[optind];
        P.args = argv + optind + 1;
        P.n_args = argc - optind - 1;

        if (server)
                r = kube_config_new(server, &cfg);
        else if (kubeconfig)
                r = kube_config_from_kubeconfig(kubeconfig, context, &cfg);
        else
                r = kube_config_in_cluster(sa_dir, &cfg);
        if (r < 0) {
                fprintf(stderr, "kubeprobe: configuration: %s\n", strerror(-r));
                return 2;
        }
        if ((token && free_and_strdup(&cfg->token, token) < 0) ||
            (token_file && free_and_strdup(&cfg->token_file, token_file) < 0) ||
            (ca && free_and_strdup(&cfg->ca_file, ca) < 0) ||
            (server_name && free_and_strdup(&cfg->tls_server_name, server_name) < 0))
                return 2;
        cfg->insecure_skip_verify |= insecure;
        cfg->max_attempts = limits.max_attempts;
        cfg->deadline_usec = limits.deadline_usec;
        cfg->timeout_usec = limits.timeout_usec;
        cfg->backoff_base_usec = limits.backoff_base_usec;
        cfg->backoff_max_usec = limits.backoff_max_usec;
        cfg->max_body = limits.max_body;
        cfg->max_event = limits.max_event;
        cfg->max_items = limits.max_items;

        r = sd_event_default(&P.event);
        if (r < 0)
                return 2;
        (void) sd_event_add_signal(P.event, NULL, SIGTERM, on_signal, NULL);
        (void) sd_event_add_signal(P.event, NULL, SIGINT, on_signal, NULL);
        r = kube_client_new(P.event, cfg, &P.client);
        if (r < 0) {
                fprintf(stderr, "kubeprobe: client: %s\n", strerror(-r));
                sd_event_unref(P.event);
                return 2;
        }
        P.started = mono_ms();
        r = run_command(&watch);
        if (r < 0) {
                fprintf(stderr, "kubeprobe: %s: %s\n", P.command, strerror(-r));
                P.exit_code = 2;
        } else {
                if (watch && P.watch_for > 0)
                        (void) sd_event_add_time_relative(P.event, NULL, CLOCK_MONOTONIC,
                                                          (uint64_t) (P.watch_for * USEC_PER_SEC), 0,
                                                          on_stop, NULL);
                r = sd_event_loop(P.event);
                if (watch) {
                        KubeWatchStats st;
                        kube_watch_stats(watch, &st);
                        printf("STATS {\"lists\":%u,\"relists\":%u,\"watches\":%u,\"events\":%u,"
                               "\"bookmarks\":%u,\"errors\":%u,\"size\":%zu,\"resourceVersion\":\"%s\"}\n",
                               st.lists, st.relists, st.watches, st.events, st.bookmarks, st.errors,
                               kube_watch_size(watch), st.resource_version);
                        fflush(stdout);
                        P.exit_code = 0;
                }
        }
        watch = kube_watch_free(watch);
        P.client = kube_client_free(P.client);
        P.event = sd_event_unref(P.event);
        return P.exit_code;
}
