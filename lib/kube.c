/* SPDX-License-Identifier: Apache-2.0 */
/* The Kubernetes client: authentication, one call with its retries, lists across pages,
 * patches, evictions, deletions, events. Watches are in kube-watch.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "grow.h"
#include "kube-exec.h"
#include "kube-internal.h"
#include "log.h"
#include "strbuf.h"

#define KUBE_CONNECT_TIMEOUT_USEC (5 * USEC_PER_SEC)
#define KUBE_USER_AGENT "nodesmith (linux) kube-client"
#define KUBE_EXEC_RENEW_USEC (60 * USEC_PER_SEC) /* run the plugin again this long before expiry */
#define KUBE_EXEC_RETRY_USEC (5 * USEC_PER_SEC)  /* after a failed run */

static uint64_t clock_usec(clockid_t id) {
        struct timespec ts;
        clock_gettime(id, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

typedef enum CallKind {
        CALL_PLAIN,
        CALL_LIST,
        CALL_EVICT,
} CallKind;

struct KubeCall {
        KubeClient *client;
        KubeCall *prev, *next;
        CallKind kind;
        const char *method;
        char *path; /* path and query, without the server */
        char *body;
        size_t body_len;
        const char *content_type;

        /* lists */
        KubeListOptions list;
        char *label_selector, *field_selector, *list_rv;
        char *cont;
        cJSON *items;
        char *list_kind;
        char *list_api_version;
        bool restarted;

        HttpRequest *http;
        sd_event_source *timer;
        uint64_t deadline;
        unsigned attempts;       /* of this page */
        unsigned total_attempts; /* of the whole call */
        bool token_retried;
        bool force_token;

        kube_done_t done;
        kube_evict_done_t evict_done;
        void *userdata;
};

struct KubeClient {
        sd_event *event;
        HttpClient *http;
        KubeConfig *cfg;
        char *token;
        struct stat token_st;
        bool token_stat_valid;
        int64_t exec_expiry_usec;  /* wall clock; 0: none given */
        uint64_t exec_failed_usec; /* monotonic, of the last failed run */
        int cert_fd, key_fd;
        char cert_path[64], key_path[64];
        KubeCall *calls;
        size_t n_calls;
        uint64_t rnd;
        KubeWatch **watches;
        size_t n_watches, cap_watches;
};

/* ---- the client --------------------------------------------------------------------------- */

uint32_t kube_client_random(KubeClient *c) {
        /* xorshift64*, seeded from getrandom() */
        c->rnd ^= c->rnd >> 12;
        c->rnd ^= c->rnd << 25;
        c->rnd ^= c->rnd >> 27;
        return (uint32_t) ((c->rnd * 0x2545F4914F6CDD1DULL) >> 32);
}

sd_event *kube_client_event(const KubeClient *c) {
        return c->event;
}

const KubeConfig *kube_client_config(const KubeClient *c) {
        return c->cfg;
}

size_t kube_client_pending(const KubeClient *c) {
        return c ? c->n_calls : 0;
}

static int memfd_with(const char *name, const char *data, size_t len, char *path, size_t path_size) {
        int fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        size_t done = 0;
        while (done < len) {
                ssize_t k = write(fd, data + done, len - done);
                if (k < 0) {
                        int r = -errno;
                        close(fd);
                        return r;
                }
                done += (size_t) k;
        }
        snprintf(path, path_size, "/proc/self/fd/%d", fd);
        return fd;
}

static bool loopback_server(const char *s) {
        const char *h = strstr(s, "://");
        if (!h)
                return false;
        h += 3;
        return strncmp(h, "127.", 4) == 0 || strncmp(h, "localhost", 9) == 0 ||
               strncmp(h, "[::1]", 5) == 0;
}

int kube_client_new(sd_event *e, const KubeConfig *config, KubeClient **ret) {
        _cleanup_(kube_client_freep) KubeClient *c = NULL;
        int r;

        if (!e || !config || isempty(config->server))
                return -EINVAL;
        if (strncmp(config->server, "http://", 7) == 0 &&
            (config->token || config->token_file || config->exec) && !loopback_server(config->server))
                return log_debug_errno(EINVAL, "Refusing to send a bearer token over plain HTTP to %s",
                                       config->server);
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->cert_fd = c->key_fd = -EBADF;
        c->event = sd_event_ref(e);
        r = kube_config_copy(config, &c->cfg);
        if (r < 0)
                return r;
        r = http_client_new(e, &c->http);
        if (r < 0)
                return r;
        if (getrandom(&c->rnd, sizeof c->rnd, GRND_NONBLOCK) != sizeof c->rnd)
                c->rnd = (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
        c->rnd |= 1;
        /* lib/http.h takes client certificates as file names: give it memory-backed files */
        if (c->cfg->cert_data) {
                r = memfd_with("kube-client-cert", c->cfg->cert_data, c->cfg->cert_data_len,
                               c->cert_path, sizeof c->cert_path);
                if (r < 0)
                        return r;
                c->cert_fd = r;
        }
        if (c->cfg->key_data) {
                r = memfd_with("kube-client-key", c->cfg->key_data, c->cfg->key_data_len,
                               c->key_path, sizeof c->key_path);
                if (r < 0)
                        return r;
                c->key_fd = r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

static void call_free(KubeCall *k);

KubeClient *kube_client_free(KubeClient *c) {
        if (!c)
                return NULL;
        while (c->n_watches > 0)
                kube_watch_detach(c->watches[--c->n_watches]);
        free(c->watches);
        while (c->calls)
                call_free(c->calls);
        http_client_free(c->http);
        if (c->cert_fd >= 0)
                close(c->cert_fd);
        if (c->key_fd >= 0)
                close(c->key_fd);
        if (c->token) {
                explicit_bzero(c->token, strlen(c->token));
                free(c->token);
        }
        kube_config_free(c->cfg);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

int kube_client_add_watch(KubeClient *c, KubeWatch *w) {
        int r = GROW(c->watches, c->cap_watches, c->n_watches + 1, (size_t) KUBE_CLIENT_MAX_WATCHES);
        if (r < 0)
                return r;
        c->watches[c->n_watches++] = w;
        return 0;
}

void kube_client_remove_watch(KubeClient *c, KubeWatch *w) {
        for (size_t i = 0; i < c->n_watches; i++)
                if (c->watches[i] == w) {
                        c->watches[i] = c->watches[--c->n_watches];
                        return;
                }
}

static void client_set_token(KubeClient *c, char *t) {
        if (c->token) {
                explicit_bzero(c->token, strlen(c->token));
                free(c->token);
        }
        c->token = t;
}

/* The exec plugin's token: the cached one until KUBE_EXEC_RENEW_USEC before it expires, else
 * (or when forced, after a 401) a new run; a failed run keeps the last token and is not retried
 * for KUBE_EXEC_RETRY_USEC unless forced. */
static const char *exec_token(KubeClient *c, bool force) {
        uint64_t mono = clock_usec(CLOCK_MONOTONIC);
        int64_t wall = (int64_t) clock_usec(CLOCK_REALTIME);
        char *t = NULL;
        int64_t expiry = 0;

        if (!force && c->token && (c->exec_expiry_usec == 0 || wall + (int64_t) KUBE_EXEC_RENEW_USEC < c->exec_expiry_usec))
                return c->token;
        if (!force && c->exec_failed_usec && mono < c->exec_failed_usec + KUBE_EXEC_RETRY_USEC)
                return c->token;
        int r = kube_exec_run(c->cfg->exec, 0, &t, &expiry);
        if (r < 0) {
                log_debug_errno(r, "Exec credential plugin %s: %m; keeping the last token",
                                kube_exec_command(c->cfg->exec));
                c->exec_failed_usec = mono ? mono : 1;
                return c->token;
        }
        c->exec_failed_usec = 0;
        c->exec_expiry_usec = expiry;
        client_set_token(c, t);
        return c->token;
}

/* The bearer token: the token file when it changed (or when forced), else the cached one. */
static const char *client_token(KubeClient *c, bool force) {
        const char *f = c->cfg->token_file;
        struct stat st;

        if (c->cfg->exec)
                return exec_token(c, force);
        if (!f)
                return c->cfg->token;
        if (stat(f, &st) < 0) {
                log_debug_errno(errno, "Token file %s: %m; keeping the last token", f);
                return c->token ? c->token : c->cfg->token;
        }
        if (!force && c->token && c->token_stat_valid && st.st_ino == c->token_st.st_ino &&
            st.st_dev == c->token_st.st_dev && st.st_size == c->token_st.st_size &&
            st.st_mtim.tv_sec == c->token_st.st_mtim.tv_sec &&
            st.st_mtim.tv_nsec == c->token_st.st_mtim.tv_nsec)
                return c->token;
        _cleanup_fclose_ FILE *fp = fopen(f, "re");
        char *buf = fp ? malloc(KUBE_MAX_TOKEN_SIZE + 1) : NULL;
        size_t n = buf ? fread(buf, 1, KUBE_MAX_TOKEN_SIZE + 1, fp) : 0;
        if (!buf || ferror(fp) || n > KUBE_MAX_TOKEN_SIZE) {
                log_debug("Cannot read token file %s; keeping the last token", f);
                free(buf);
                return c->token ? c->token : c->cfg->token;
        }
        while (n > 0 && strchr(" \t\r\n", buf[n - 1]))
                n--;
        buf[n] = 0;
        if (n == 0 || strpbrk(buf, "\r\n")) {
                log_debug("Token file %s is empty or malformed; keeping the last token", f);
                free(buf);
                return c->token ? c->token : c->cfg->token;
        }
        if (c->token && !streq(c->token, buf))
                log_debug("Token file %s changed; using the new token", f);
        client_set_token(c, buf);
        c->token_st = st;
        c->token_stat_valid = true;
        return c->token;
}

int kube_client_http_request(KubeClient *c, const char *method, const char *url, bool force_token,
                             HttpRequest **ret) {
        HttpRequest *h = NULL;
        const KubeConfig *cfg = c->cfg;
        int r;

        r = http_request_new(c->http, method, url, &h);
        if (r < 0)
                return r;
        r = http_request_add_header(h, "Accept", "application/json");
        if (r >= 0)
                r = http_request_add_header(h, "User-Agent", KUBE_USER_AGENT);
        const char *token = client_token(c, force_token);
        if (r >= 0 && !isempty(token)) {
                _cleanup_free_ char *v = NULL;
                if (asprintf(&v, "Bearer %s", token) < 0)
                        r = -ENOMEM;
                else {
                        r = http_request_add_header(h, "Authorization", v);
                        explicit_bzero(v, strlen(v));
                }
        }
        if (r >= 0 && strncmp(cfg->server, "https://", 8) == 0)
                r = http_request_set_tls(h, cfg->ca_file, cfg->ca_data, cfg->ca_data_len,
                                         cfg->cert_data ? c->cert_path : cfg->cert_file,
                                         cfg->key_data ? c->key_path : cfg->key_file,
                                         cfg->insecure_skip_verify);
        if (r >= 0 && strncmp(cfg->server, "https://", 8) == 0 && !isempty(cfg->tls_server_name))
                r = http_request_set_server_name(h, cfg->tls_server_name);
        if (r < 0) {
                http_request_free(h);
                return r;
        }
        http_request_set_timeouts(h, MIN(KUBE_CONNECT_TIMEOUT_USEC, cfg->timeout_usec) / USEC_PER_MSEC,
                                  cfg->timeout_usec / USEC_PER_MSEC);
        http_request_set_max_body(h, cfg->max_body);
        *ret = h;
        return 0;
}

/* ---- responses ---------------------------------------------------------------------------- */

void kube_response_from_http(KubeResponse *resp, int error, long status, const char *body, size_t len) {
        *resp = (KubeResponse) { .http_status = status };
        if (error < 0) {
                resp->error = error;
                return;
        }
        size_t i = 0;
        while (i < len && strchr(" \t\r\n", body[i]))
                i++;
        if (i < len && (body[i] == '{' || body[i] == '[')) {
                resp->object = cJSON_ParseWithLength(body, len);
                if (!resp->object && status >= 200 && status < 300) {
                        resp->error = -EBADMSG;
                        return;
                }
        }
        if (resp->object && kube_status_parse(resp->object, &resp->status) >= 0) {
                resp->has_status = true;
                if (resp->status.code == 0)
                        resp->status.code = (int) status;
        } else if (status >= 300) {
                /* not a Status (a proxy's page?): keep its beginning for the log */
                resp->status.code = (int) status;
                size_t n = MIN(len, sizeof resp->status.message - 1), j;
                for (j = 0; j < n; j++)
                        resp->status.message[j] = (body[j] >= 0x20 && body[j] < 0x7f) ? body[j] : ' ';
                resp->status.message[j] = 0;
        }
        resp->error = kube_http_errno(status, resp->has_status ? &resp->status : NULL);
}

const char *kube_evict_result_to_string(KubeEvictResult r) {
        static const char *const names[] = {
                [KUBE_EVICT_ACCEPTED] = "accepted",
                [KUBE_EVICT_BLOCKED] = "blocked",
                [KUBE_EVICT_MULTIPLE_PDBS] = "multiple-pdbs",
                [KUBE_EVICT_NOT_FOUND] = "not-found",
                [KUBE_EVICT_FAILED] = "failed",
        };
        return (unsigned) r < ELEMENTSOF(names) ? names[r] : "failed";
}

static bool evict_multiple_pdbs(const KubeResponse *resp) {
        return resp->http_status == 500 && resp->has_status &&
               strstr(resp->status.message, "more than one PodDisruptionBudget");
}

static bool evict_blocked(const KubeResponse *resp) {
        return resp->http_status == 429 && resp->has_status && streq(resp->status.cause, "DisruptionBudget");
}

/* ---- calls -------------------------------------------------------------------------------- */

static void call_unlink(KubeCall *k) {
        KubeClient *c = k->client;
        if (!c)
                return;
        if (k->prev)
                k->prev->next = k->next;
        else
                c->calls = k->next;
        if (k->next)
                k->next->prev = k->prev;
        k->prev = k->next = NULL;
        c->n_calls--;
        k->client = NULL;
}

static void call_free(KubeCall *k) {
        if (!k)
                return;
        call_unlink(k);
        if (k->http)
                http_request_cancel(k->http);
        sd_event_source_disable_unref(k->timer);
        free(k->path);
        free(k->body);
        free(k->label_selector);
        free(k->field_selector);
        free(k->list_rv);
        free(k->cont);
        free(k->list_kind);
        free(k->list_api_version);
        cJSON_Delete(k->items);
        free(k);
}

void kube_call_cancel(KubeCall *k) {
        call_free(k);
}

size_t kube_client_cancel(KubeClient *c, void *userdata) {
        size_t n = 0;
        for (KubeCall *k = c->calls, *next; k; k = next) {
                next = k->next;
                if (k->userdata == userdata) {
                        call_free(k);
                        n++;
                }
        }
        return n;
}

static void call_finish(KubeCall *k, KubeResponse *resp) {
        call_unlink(k);
        resp->attempts = k->total_attempts;
        if (resp->error < 0)
                log_debug("%s %s: %s%s%s (HTTP %ld, %u attempts)", k->method, k->path,
                          strerror(-resp->error), resp->status.message[0] ? ": " : "",
                          resp->status.message, resp->http_status, resp->attempts);
        if (k->kind == CALL_EVICT && k->evict_done) {
                KubeEvictResult er = resp->error >= 0           ? KUBE_EVICT_ACCEPTED
                                     : evict_blocked(resp)       ? KUBE_EVICT_BLOCKED
                                     : evict_multiple_pdbs(resp) ? KUBE_EVICT_MULTIPLE_PDBS
                                     : resp->error == -ENOENT    ? KUBE_EVICT_NOT_FOUND
                                                                 : KUBE_EVICT_FAILED;
                k->evict_done(er, resp, k->userdata);
        } else if (k->done)
                k->done(resp, k->userdata);
        cJSON_Delete(resp->object);
        call_free(k);
}

static void call_fail(KubeCall *k, int error) {
        KubeResponse resp = { .error = error };
        call_finish(k, &resp);
}

static int call_send(KubeCall *k);

static int on_retry_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        KubeCall *k = userdata;
        k->timer = sd_event_source_disable_unref(k->timer);
        int r = call_send(k);
        if (r < 0)
                call_fail(k, r);
        return 0;
}

static uint64_t now_usec(KubeCall *k) {
        uint64_t t = 0;
        (void) sd_event_now(k->client->event, CLOCK_MONOTONIC, &t);
        return t;
}

/* Schedule another attempt, or return false when the attempts or the deadline are spent. */
static bool call_retry(KubeCall *k, HttpRequest *req, const KubeResponse *resp) {
        KubeClient *c = k->client;
        const KubeConfig *cfg = c->cfg;
        uint64_t delay, ra = 0;
        bool have_ra = false;

        if (k->attempts >= cfg->max_attempts)
                return false;
        delay = kube_backoff_usec(k->attempts, cfg->backoff_base_usec, cfg->backoff_max_usec,
                                  kube_client_random(c));
        const char *h = req ? http_request_header(req, "Retry-After") : NULL;
        if (h && kube_parse_retry_after(h, (int64_t) time(NULL), &ra) >= 0)
                have_ra = true;
        else if (resp->has_status && resp->status.retry_after > 0) {
                ra = MIN((uint64_t) resp->status.retry_after * USEC_PER_SEC, KUBE_MAX_RETRY_AFTER_USEC);
                have_ra = true;
        }
        if (have_ra) /* the server's word, plus a little jitter so that clients spread out */
                delay = ra + kube_client_random(c) % (ra / 10 + 50 * USEC_PER_MSEC);
        uint64_t now = now_usec(k);
        if (now + delay > k->deadline)
                return false;
        log_debug("%s %s: %s (HTTP %ld); attempt %u in %.2fs", k->method, k->path,
                  resp->error < 0 ? strerror(-resp->error) : "failed", resp->http_status,
                  k->attempts + 1, (double) delay / USEC_PER_SEC);
        int r = sd_event_add_time(c->event, &k->timer, CLOCK_MONOTONIC, now + delay, 0, on_retry_timer, k);
        if (r < 0)
                return false;
        (void) sd_event_source_set_description(k->timer, "kube-retry");
        return true;
}

static bool retryable(const KubeCall *k, const KubeResponse *resp) {
        if (resp->http_status == 0) /* no answer: connection refused, reset, timed out */
                return resp->error != -EFBIG && resp->error != -EINVAL && resp->error != -ENOMEM &&
                       resp->error != -EKEYREJECTED;
        if (k->kind == CALL_EVICT && (evict_blocked(resp) || evict_multiple_pdbs(resp)))
                return false;
        return resp->http_status == 429 || (resp->http_status >= 500 && resp->http_status < 600);
}

static int list_page_done(KubeCall *k, KubeResponse *resp);

static void on_http_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                         void *userdata) {
        KubeCall *k = userdata;
        KubeResponse resp;

        k->http = NULL;
        k->attempts++;
        k->total_attempts++;
        kube_response_from_http(&resp, error, status, body, len);

        if (resp.error >= 0) {
                if (k->kind == CALL_LIST) {
                        int r = list_page_done(k, &resp);
                        if (r > 0) /* another page is on its way */
                                return;
                        if (r < 0) {
                                cJSON_Delete(resp.object);
                                resp = (KubeResponse) { .error = r, .http_status = status };
                        }
                }
                call_finish(k, &resp);
                return;
        }
        if (status == 401 && (k->client->cfg->token_file || k->client->cfg->exec) && !k->token_retried) {
                /* the token may have been rotated under us, or the plugin's expired early */
                k->token_retried = k->force_token = true;
                k->attempts--;
                cJSON_Delete(resp.object);
                int r = call_send(k);
                if (r < 0)
                        call_fail(k, r);
                return;
        }
        if (k->kind == CALL_LIST && status == 410 && k->cont && !k->restarted) {
                /* the continue token expired: start the list again */
                log_debug("GET %s: continue token expired, listing again", k->path);
                k->restarted = true;
                free(k->cont);
                k->cont = NULL;
                cJSON_Delete(k->items);
                k->items = NULL;
                k->attempts = 0;
                cJSON_Delete(resp.object);
                int r = call_send(k);
                if (r < 0)
                        call_fail(k, r);
                return;
        }
        if (retryable(k, &resp) && call_retry(k, req, &resp)) {
                cJSON_Delete(resp.object);
                return;
        }
        call_finish(k, &resp);
}

static int call_send(KubeCall *k) {
        KubeClient *c = k->client;
        _cleanup_free_ char *url = NULL;
        HttpRequest *h = NULL;
        int r;

        if (k->kind == CALL_LIST) {
                KubeQuery q = { .list = &k->list, .cont = k->cont,
                                .resource_version = k->cont ? NULL : k->list.resource_version };
                r = kube_url(c->cfg->server, k->path, &q, &url);
        } else
                r = kube_url(c->cfg->server, k->path, NULL, &url);
        if (r < 0)
                return r;
        r = kube_client_http_request(c, k->method, url, k->force_token, &h);
        if (r < 0)
                return r;
        k->force_token = false;
        if (k->body) {
                r = http_request_set_body(h, k->body, k->body_len);
                if (r >= 0 && k->content_type)
                        r = http_request_add_header(h, "Content-Type", k->content_type);
                if (r < 0) {
                        http_request_free(h);
                        return r;
                }
        }
        r = http_request_start(h, on_http_done, k);
        if (r < 0)
                return r;
        k->http = h;
        return 0;
}

static int call_new(KubeClient *c, CallKind kind, const char *method, const char *path,
                    const char *body, const char *content_type, KubeCall **ret) {
        if (!c || isempty(path) || path[0] != '/')
                return -EINVAL;
        KubeCall *k = calloc(1, sizeof *k);
        if (!k)
                return -ENOMEM;
        k->kind = kind;
        k->method = method;
        k->content_type = content_type;
        k->path = strdup(path);
        if (!k->path || (body && !(k->body = strdup(body)))) {
                call_free(k);
                return -ENOMEM;
        }
        k->body_len = body ? strlen(body) : 0;
        *ret = k;
        return 0;
}

/* Link and start; on failure the call is freed and no callback comes. */
static int call_start(KubeClient *c, KubeCall *k, KubeCall **ret_call) {
        uint64_t now = 0;
        (void) sd_event_now(c->event, CLOCK_MONOTONIC, &now);
        k->deadline = now + c->cfg->deadline_usec;
        k->client = c;
        k->next = c->calls;
        if (c->calls)
                c->calls->prev = k;
        c->calls = k;
        c->n_calls++;
        int r = call_send(k);
        if (r < 0) {
                call_free(k);
                return r;
        }
        if (ret_call)
                *ret_call = k;
        return 0;
}

static int simple(KubeClient *c, CallKind kind, const char *method, const char *path, const char *body,
                  const char *ctype, kube_done_t cb, kube_evict_done_t ecb, void *userdata,
                  KubeCall **ret_call) {
        KubeCall *k = NULL;
        int r = call_new(c, kind, method, path, body, ctype, &k);
        if (r < 0)
                return r;
        k->done = cb;
        k->evict_done = ecb;
        k->userdata = userdata;
        return call_start(c, k, ret_call);
}

/* ---- operations --------------------------------------------------------------------------- */

int kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call) {
        return simple(c, CALL_PLAIN, "GET", path, NULL, NULL, cb, NULL, userdata, ret_call);
}

static int with_json(KubeClient *c, const char *method, const char *path, const cJSON *body,
                     kube_done_t cb, void *userdata, KubeCall **ret_call) {
        if (!body)
                return -EINVAL;
        _cleanup_free_ char *s = cJSON_PrintUnformatted(body);
        if (!s)
                return -ENOMEM;
        return simple(c, CALL_PLAIN, method, path, s, "application/json", cb, NULL, userdata, ret_call);
}

int kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                KubeCall **ret_call) {
        return with_json(c, "POST", path, body, cb, userdata, ret_call);
}

int kube_replace(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb,
                 void *userdata, KubeCall **ret_call) {
        return with_json(c, "PUT", path, body, cb, userdata, ret_call);
}

int kube_patch(KubeClient *c, const char *path, KubePatchType type, const char *body,
               kube_done_t cb, void *userdata, KubeCall **ret_call) {
        static const char *const types[] = {
                [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
                [KUBE_PATCH_MERGE] = "application/merge-patch+json",
                [KUBE_PATCH_JSON] = "application/json-patch+json",
        };
        if ((unsigned) type >= ELEMENTSOF(types) || isempty(body))
                return -EINVAL;
        return simple(c, CALL_PLAIN, "PATCH", path, body, types[type], cb, NULL, userdata, ret_call);
}

int kube_cordon(KubeClient *c, const char *node, bool cordon, kube_done_t cb, void *userdata,
                KubeCall **ret_call) {
        _cleanup_free_ char *path = NULL;
        int r = kube_path("v1", NULL, "nodes", node, NULL, &path);
        if (r < 0)
                return r;
        return kube_patch(c, path, KUBE_PATCH_STRATEGIC,
                          cordon ? "{\"spec\":{\"unschedulable\":true}}" : "{\"spec\":{\"unschedulable\":null}}",
                          cb, userdata, ret_call);
}

/* The DeleteOptions object of opts (apiVersion/kind only when given), added to parent as key or
 * made the root when parent is NULL. */
static cJSON *delete_options_json(const KubeDeleteOptions *opts, cJSON *parent, const char *key) {
        cJSON *o = parent ? cJSON_AddObjectToObject(parent, key) : cJSON_CreateObject(), *pre = NULL;
        bool ok = o != NULL;
        if (ok && !parent)
                ok = cJSON_AddStringToObject(o, "apiVersion", "v1") && cJSON_AddStringToObject(o, "kind", "DeleteOptions");
        if (ok && opts->grace_seconds >= 0)
                ok = cJSON_AddNumberToObject(o, "gracePeriodSeconds", (double) opts->grace_seconds);
        if (ok && (opts->uid || opts->resource_version)) {
                ok = (pre = cJSON_AddObjectToObject(o, "preconditions"));
                if (ok && opts->uid)
                        ok = cJSON_AddStringToObject(pre, "uid", opts->uid);
                if (ok && opts->resource_version)
                        ok = cJSON_AddStringToObject(pre, "resourceVersion", opts->resource_version);
        }
        if (ok && opts->propagation_policy)
                ok = cJSON_AddStringToObject(o, "propagationPolicy", opts->propagation_policy);
        if (!ok && !parent)
                cJSON_Delete(o);
        return ok ? o : NULL;
}

/* The DeleteOptions body of opts; NULL: out of memory. */
static char *delete_options_body(const KubeDeleteOptions *opts) {
        cJSON *o = delete_options_json(opts, NULL, NULL);
        char *s = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        return s;
}

int kube_delete(KubeClient *c, const char *path, const KubeDeleteOptions *opts, kube_done_t cb,
                void *userdata, KubeCall **ret_call) {
        _cleanup_free_ char *s = NULL;
        if (opts && !(s = delete_options_body(opts)))
                return -ENOMEM;
        return simple(c, CALL_PLAIN, "DELETE", path, s, s ? "application/json" : NULL, cb, NULL,
                      userdata, ret_call);
}

#ifdef NODESMITH_BROKEN_DRAIN_DELETES_PODS
#pragma message "NODESMITH_BROKEN_DRAIN_DELETES_PODS: drains delete pods, PodDisruptionBudgets are ignored"
/* A deliberately broken build, for the chaos runner's own test only (make BROKEN_PDB=1, never
 * in a normal build): the "eviction" deletes the pod outright, so no PodDisruptionBudget is
 * checked. The answer is read as an eviction's (200: accepted, 404: gone). */
int kube_evict(KubeClient *c, const char *ns, const char *name, const KubeDeleteOptions *opts,
               kube_evict_done_t cb, void *userdata, KubeCall **ret_call) {
        _cleanup_free_ char *path = NULL, *s = NULL;
        int r = kube_path("v1", ns, "pods", name, NULL, &path);
        if (r < 0)
                return r;
        if (opts && !(s = delete_options_body(opts)))
                return -ENOMEM;
        return simple(c, CALL_EVICT, "DELETE", path, s, s ? "application/json" : NULL, NULL, cb, userdata,
                      ret_call);
}
#else
int kube_evict(KubeClient *c, const char *ns, const char *name, const KubeDeleteOptions *opts,
               kube_evict_done_t cb, void *userdata, KubeCall **ret_call) {
        _cleanup_free_ char *path = NULL, *s = NULL;
        int r = kube_path("v1", ns, "pods", name, "eviction", &path);
        if (r < 0)
                return r;
        cJSON *o = cJSON_CreateObject(), *m = NULL;
        bool ok = o && cJSON_AddStringToObject(o, "apiVersion", "policy/v1") &&
                  cJSON_AddStringToObject(o, "kind", "Eviction") &&
                  (m = cJSON_AddObjectToObject(o, "metadata")) &&
                  cJSON_AddStringToObject(m, "name", name) && cJSON_AddStringToObject(m, "namespace", ns);
        if (ok && opts)
                ok = delete_options_json(opts, o, "deleteOptions") != NULL;
        s = ok ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return -ENOMEM;
        return simple(c, CALL_EVICT, "POST", path, s, "application/json", NULL, cb, userdata, ret_call);
}
#endif

static int rfc3339_now(char *buf, size_t n) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        if (!gmtime_r(&ts.tv_sec, &tm) || strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                return -EINVAL;
        return 0;
}

int kube_event_create(KubeClient *c, const KubeEventInfo *ev, kube_done_t cb, void *userdata,
                      KubeCall **ret_call) {
        _cleanup_free_ char *path = NULL, *name = NULL, *s = NULL;
        char now[64], msg[1025];
        struct timespec ts;

        if (!ev || isempty(ev->kind) || isempty(ev->name) || isempty(ev->reason))
                return -EINVAL;
        const char *ns = ev->namespace ? ev->namespace : ev->object_namespace ? ev->object_namespace : "default";
        int r = kube_path("v1", ns, "events", NULL, NULL, &path);
        if (r < 0)
                return r;
        r = rfc3339_now(now, sizeof now);
        if (r < 0)
                return r;
        clock_gettime(CLOCK_REALTIME, &ts);
        /* as client-go names them: the object's name and a unique hexadecimal suffix */
        if (asprintf(&name, "%.200s.%llx", ev->name,
                     (unsigned long long) ts.tv_sec * 1000000000ULL + (unsigned long long) ts.tv_nsec) < 0)
                return -ENOMEM;
        snprintf(msg, sizeof msg, "%s", strempty(ev->message));

        cJSON *o = cJSON_CreateObject(), *m, *io, *src;
        bool ok = o && cJSON_AddStringToObject(o, "apiVersion", "v1") && cJSON_AddStringToObject(o, "kind", "Event") &&
                  (m = cJSON_AddObjectToObject(o, "metadata")) && cJSON_AddStringToObject(m, "name", name) &&
                  cJSON_AddStringToObject(m, "namespace", ns) &&
                  (io = cJSON_AddObjectToObject(o, "involvedObject")) &&
                  cJSON_AddStringToObject(io, "kind", ev->kind) && cJSON_AddStringToObject(io, "name", ev->name) &&
                  (!ev->api_version || cJSON_AddStringToObject(io, "apiVersion", ev->api_version)) &&
                  (!ev->object_namespace || cJSON_AddStringToObject(io, "namespace", ev->object_namespace)) &&
                  (!ev->uid || cJSON_AddStringToObject(io, "uid", ev->uid)) &&
                  cJSON_AddStringToObject(o, "reason", ev->reason) && cJSON_AddStringToObject(o, "message", msg) &&
                  cJSON_AddStringToObject(o, "type", ev->type ? ev->type : "Normal") &&
                  cJSON_AddStringToObject(o, "firstTimestamp", now) &&
                  cJSON_AddStringToObject(o, "lastTimestamp", now) && cJSON_AddNumberToObject(o, "count", 1) &&
                  (src = cJSON_AddObjectToObject(o, "source")) &&
                  (!ev->component || cJSON_AddStringToObject(src, "component", ev->component)) &&
                  (!ev->host || cJSON_AddStringToObject(src, "host", ev->host)) &&
                  (!ev->component || cJSON_AddStringToObject(o, "reportingComponent", ev->component)) &&
                  (!ev->host || cJSON_AddStringToObject(o, "reportingInstance", ev->host));
        s = ok ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return -ENOMEM;
        return simple(c, CALL_PLAIN, "POST", path, s, "application/json", cb, NULL, userdata, ret_call);
}

/* ---- lists -------------------------------------------------------------------------------- */

static int dup_opt(char **dst, const char *s) {
        return s ? free_and_strdup(dst, s) : 0;
}

int kube_list(KubeClient *c, const char *path, const KubeListOptions *opts, kube_done_t cb,
              void *userdata, KubeCall **ret_call) {
        KubeCall *k = NULL;
        int r;

        if (path && strchr(path, '?'))
                return -EINVAL; /* options go in opts */
        r = call_new(c, CALL_LIST, "GET", path, NULL, NULL, &k);
        if (r < 0)
                return r;
        if (opts && (dup_opt(&k->label_selector, opts->label_selector) < 0 ||
                     dup_opt(&k->field_selector, opts->field_selector) < 0 ||
                     dup_opt(&k->list_rv, opts->resource_version) < 0)) {
                call_free(k);
                return -ENOMEM;
        }
        k->list = (KubeListOptions) {
                .label_selector = k->label_selector,
                .field_selector = k->field_selector,
                .resource_version = k->list_rv,
                .limit = opts && opts->limit ? opts->limit : KUBE_DEFAULT_PAGE_SIZE,
                .trim = opts && opts->trim,
        };
        k->done = cb;
        k->userdata = userdata;
        return call_start(c, k, ret_call);
}

/* A page arrived: keep its items; > 0 when the next page was requested. */
static int list_page_done(KubeCall *k, KubeResponse *resp) {
        cJSON *page = resp->object;
        cJSON *items = cJSON_GetObjectItemCaseSensitive(page, "items");
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(page, "metadata");
        const cJSON *cont = cJSON_GetObjectItemCaseSensitive(meta, "continue");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(meta, "resourceVersion");
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(page, "kind");
        const cJSON *apiv = cJSON_GetObjectItemCaseSensitive(page, "apiVersion");
        int r;

        if (!cJSON_IsObject(page) || !(cJSON_IsArray(items) || cJSON_IsNull(items) || !items))
                return -EBADMSG;
        if (!k->items && !(k->items = cJSON_CreateArray()))
                return -ENOMEM;
        if (cJSON_IsString(kind) && free_and_strdup(&k->list_kind, kind->valuestring) < 0)
                return -ENOMEM;
        if (cJSON_IsString(apiv) && free_and_strdup(&k->list_api_version, apiv->valuestring) < 0)
                return -ENOMEM;
        size_t have = (size_t) cJSON_GetArraySize(k->items);
        if (items) {
                size_t more = (size_t) cJSON_GetArraySize(items);
                if (have + more > k->client->cfg->max_items)
                        return -E2BIG;
                size_t pl = strlen(k->path);
                const char *q = strchr(k->path, '?');
                if (q)
                        pl = (size_t) (q - k->path);
                bool pods = pl >= 5 && strncmp(k->path + pl - 5, "/pods", 5) == 0;
                while (items->child) {
                        cJSON *it = cJSON_DetachItemViaPointer(items, items->child);
                        if (k->list.trim)
                                kube_object_trim(it, pods);
                        cJSON_AddItemToArray(k->items, it);
                }
        }
        if (cJSON_IsString(cont) && *cont->valuestring) {
                if (free_and_strdup(&k->cont, cont->valuestring) < 0)
                        return -ENOMEM;
                cJSON_Delete(resp->object);
                resp->object = NULL;
                k->attempts = 0;
                r = call_send(k);
                return r < 0 ? r : 1;
        }
        /* the last page: build the whole list in place of the page */
        cJSON *out = cJSON_CreateObject(), *m = NULL;
        if (!out || !cJSON_AddStringToObject(out, "kind", k->list_kind ? k->list_kind : "List") ||
            !cJSON_AddStringToObject(out, "apiVersion", k->list_api_version ? k->list_api_version : "v1") ||
            !(m = cJSON_AddObjectToObject(out, "metadata")) ||
            !cJSON_AddStringToObject(m, "resourceVersion", cJSON_IsString(rv) ? rv->valuestring : "")) {
                cJSON_Delete(out);
                return -ENOMEM;
        }
        cJSON_AddItemToObject(out, "items", TAKE_PTR(k->items));
        cJSON_Delete(resp->object);
        resp->object = out;
        return 0;
}
