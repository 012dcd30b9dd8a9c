/* SPDX-License-Identifier: Apache-2.0 */
/* lib/http.h on libcurl's multi interface: the coordinator's and nodesmithctl's backend
 * (SigV4 for AWS APIs; docs/http.md). */
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "macro.h"
#include "strbuf.h"

#define HTTP_DEFAULT_MAX_BODY (8u * 1024 * 1024)

struct HttpClient {
        sd_event *event;
        CURLM *multi;
        sd_event_source *timer;
        HttpRequest *requests; /* started, in flight (doubly linked) */
        size_t n;
};

struct HttpRequest {
        HttpClient *client;
        CURL *easy;
        struct curl_slist *headers;
        struct curl_slist *connect_to;
        char *url;
        char *body;
        size_t body_len;
        char *userpwd;
        StrBuf response;
        size_t max_body;
        bool too_big;
        int stream_error;
        http_done_t done;
        http_chunk_t chunk;
        void *userdata;
        bool started;
        HttpRequest *prev, *next;
};

static int http_curl_errno(int code) {
        switch ((CURLcode) code) {
        case CURLE_OK:
                return 0;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return -EHOSTUNREACH;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_WRITE_ERROR:
                return -EFBIG; /* our write callback refused: body over its cap, or aborted */
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
                return -ECONNRESET;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_ISSUER_ERROR:
                return -EKEYREJECTED;
        case CURLE_URL_MALFORMAT:
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_BAD_FUNCTION_ARGUMENT:
                return -EINVAL;
        case CURLE_ABORTED_BY_CALLBACK:
                return -ECANCELED;
        default:
                return -EIO;
        }
}

/* ---- the loop glue -------------------------------------------------------------------- */

static void check_done(HttpClient *c);

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        HttpClient *c = userdata;
        int action = 0, running;
        if (revents & EPOLLIN)
                action |= CURL_CSELECT_IN;
        if (revents & EPOLLOUT)
                action |= CURL_CSELECT_OUT;
        if (revents & (EPOLLERR | EPOLLHUP))
                action |= CURL_CSELECT_ERR;
        (void) curl_multi_socket_action(c->multi, fd, action, &running);
        check_done(c);
        return 0;
}

static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userdata, void *socketp) {
        HttpClient *c = userdata;
        sd_event_source *s = socketp;
        uint32_t events = 0;

        if (what == CURL_POLL_REMOVE) {
                if (s) {
                        sd_event_source_disable_unref(s);
                        curl_multi_assign(c->multi, fd, NULL);
                }
                return 0;
        }
        if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
                events |= EPOLLIN;
        if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
                events |= EPOLLOUT;
        if (s) {
                if (sd_event_source_set_io_events(s, events) < 0)
                        return -1;
                return 0;
        }
        if (sd_event_add_io(c->event, &s, fd, events, on_io, c) < 0)
                return -1;
        (void) sd_event_source_set_description(s, "curl-io");
        curl_multi_assign(c->multi, fd, s);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        HttpClient *c = userdata;
        int running;
        (void) curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
        check_done(c);
        return 0;
}

static int on_timer_change(CURLM *multi, long timeout_ms, void *userdata) {
        HttpClient *c = userdata;
        uint64_t now;
        if (timeout_ms < 0)
                return sd_event_source_set_enabled(c->timer, SD_EVENT_OFF) < 0 ? -1 : 0;
        if (sd_event_now(c->event, CLOCK_MONOTONIC, &now) < 0)
                return -1;
        /* timeout 0: act on the next loop iteration, not recursively from inside curl */
        if (sd_event_source_set_time(c->timer, now + (uint64_t) timeout_ms * USEC_PER_MSEC) < 0)
                return -1;
        return sd_event_source_set_enabled(c->timer, SD_EVENT_ONESHOT) < 0 ? -1 : 0;
}

static void request_unlink(HttpRequest *r) {
        HttpClient *c = r->client;
        if (!r->started)
                return;
        if (r->prev)
                r->prev->next = r->next;
        else
                c->requests = r->next;
        if (r->next)
                r->next->prev = r->prev;
        r->prev = r->next = NULL;
        c->n--;
        curl_multi_remove_handle(c->multi, r->easy);
        r->started = false;
}

static void check_done(HttpClient *c) {
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c->multi, &left))) {
                if (m->msg != CURLMSG_DONE)
                        continue;
                HttpRequest *r = NULL;
                curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **) &r);
                if (!r)
                        continue;
                CURLcode code = m->data.result;
                long status = 0;
                int error = 0;
                if (code == CURLE_OK)
                        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
                else if (r->stream_error < 0)
                        error = r->stream_error;
                else if (r->too_big)
                        error = -EFBIG;
                else
                        error = http_curl_errno(code);
                /* CURLMSG_DONE: the easy handle is ours again */
                request_unlink(r);
                if (r->done)
                        r->done(r, error, status, r->response.data ? r->response.data : "",
                                r->response.len, r->userdata);
                http_request_free(r);
        }
}

int http_client_new(sd_event *e, HttpClient **ret) {
        static bool global_init = false;
        HttpClient *c;
        int r;

        if (!global_init) {
                if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                        return -EIO;
                global_init = true;
        }
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = sd_event_ref(e);
        c->multi = curl_multi_init();
        if (!c->multi) {
                http_client_free(c);
                return -ENOMEM;
        }
        r = sd_event_add_time(e, &c->timer, CLOCK_MONOTONIC, UINT64_MAX, 1, on_timer, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->timer, SD_EVENT_OFF);
        if (r < 0) {
                http_client_free(c);
                return r;
        }
        (void) sd_event_source_set_description(c->timer, "curl-timer");
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
        curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_timer_change);
        curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
        *ret = c;
        return 0;
}

HttpClient *http_client_free(HttpClient *c) {
        if (!c)
                return NULL;
        while (c->requests) {
                HttpRequest *r = c->requests;
                request_unlink(r);
                http_request_free(r);
        }
        if (c->multi)
                curl_multi_cleanup(c->multi);
        sd_event_source_disable_unref(c->timer);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

size_t http_client_in_flight(const HttpClient *c) {
        return c ? c->n : 0;
}

/* ---- requests ------------------------------------------------------------------------- */

static size_t on_write(char *p, size_t size, size_t n, void *userdata) {
        HttpRequest *r = userdata;
        size_t len = size * n;
        if (r->chunk) {
                int k = r->chunk(r, p, len, r->userdata);
                if (k < 0) {
                        r->stream_error = k;
                        return 0;
                }
                return len;
        }
        if (r->response.len + len > r->max_body) {
                r->too_big = true;
                return 0;
        }
        return strbuf_append(&r->response, p, len) < 0 ? 0 : len;
}

int http_request_new(HttpClient *c, const char *method, const char *url, HttpRequest **ret) {
        HttpRequest *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->client = c;
        r->max_body = HTTP_DEFAULT_MAX_BODY;
        r->url = strdup(url);
        r->easy = curl_easy_init();
        if (!r->url || !r->easy) {
                http_request_free(r);
                return -ENOMEM;
        }
        strbuf_init(&r->response, SIZE_MAX);
        curl_easy_setopt(r->easy, CURLOPT_URL, r->url);
        curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
        curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, on_write);
        curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, 3000L);
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, 30000L);
        curl_easy_setopt(r->easy, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(r->easy, CURLOPT_FOLLOWLOCATION, 0L);
        if (streq(method, "GET"))
                ;
        else if (streq(method, "HEAD"))
                curl_easy_setopt(r->easy, CURLOPT_NOBODY, 1L);
        else
                curl_easy_setopt(r->easy, CURLOPT_CUSTOMREQUEST, method);
        *ret = r;
        return 0;
}

HttpRequest *http_request_free(HttpRequest *r) {
        if (!r)
                return NULL;
        if (r->started)
                request_unlink(r);
        if (r->easy)
                curl_easy_cleanup(r->easy);
        curl_slist_free_all(r->headers);
        curl_slist_free_all(r->connect_to);
        free(r->url);
        free(r->body);
        if (r->userpwd) {
                explicit_bzero(r->userpwd, strlen(r->userpwd));
                free(r->userpwd);
        }
        strbuf_done(&r->response);
        free(r);
        return NULL;
}

int http_request_add_header(HttpRequest *r, const char *name, const char *value) {
        _cleanup_free_ char *line = NULL;
        if (asprintf(&line, "%s: %s", name, value) < 0)
                return -ENOMEM;
        struct curl_slist *l = curl_slist_append(r->headers, line);
        if (!l)
                return -ENOMEM;
        r->headers = l;
        return 0;
}

int http_request_set_body(HttpRequest *r, const void *body, size_t len) {
        char *b = malloc(len + 1);
        if (!b)
                return -ENOMEM;
        memcpy(b, body, len);
        b[len] = 0;
        free(r->body);
        r->body = b;
        r->body_len = len;
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDS, r->body);
        curl_easy_setopt(r->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
        return 0;
}

void http_request_set_timeouts(HttpRequest *r, uint64_t connect_ms, uint64_t total_ms) {
        curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, (long) connect_ms);
        curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, (long) total_ms);
}

void http_request_set_max_body(HttpRequest *r, size_t max) {
        r->max_body = max;
}

int http_request_set_tls(HttpRequest *r, const char *ca_file, const char *ca_pem, size_t ca_pem_len,
                         const char *cert_file, const char *key_file, bool skip_verify) {
        if (ca_file)
                curl_easy_setopt(r->easy, CURLOPT_CAINFO, ca_file);
        if (ca_pem) {
                struct curl_blob blob = { .data = (void *) ca_pem, .len = ca_pem_len,
                                          .flags = CURL_BLOB_COPY };
                if (curl_easy_setopt(r->easy, CURLOPT_CAINFO_BLOB, &blob) != CURLE_OK)
                        return -EOPNOTSUPP;
        }
        if (cert_file)
                curl_easy_setopt(r->easy, CURLOPT_SSLCERT, cert_file);
        if (key_file)
                curl_easy_setopt(r->easy, CURLOPT_SSLKEY, key_file);
        if (skip_verify) {
                curl_easy_setopt(r->easy, CURLOPT_SSL_VERIFYPEER, 0L);
                curl_easy_setopt(r->easy, CURLOPT_SSL_VERIFYHOST, 0L);
        }
        return 0;
}

/* The request goes to the URL with its host replaced by name, connected to the original host
 * (CURLOPT_CONNECT_TO), so that libcurl checks the certificate against name. */
int http_request_set_server_name(HttpRequest *r, const char *name) {
        _cleanup_free_ char *line = NULL;
        char *host = NULL, *url = NULL; /* curl_free() */
        CURLU *u = curl_url();
        int k = -EINVAL;

        if (!u)
                return -ENOMEM;
        if (curl_url_set(u, CURLUPART_URL, r->url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
                if (streq(host, name))
                        k = 0;
                else if (curl_url_set(u, CURLUPART_HOST, name, 0) == CURLUE_OK &&
                         curl_url_get(u, CURLUPART_URL, &url, 0) == CURLUE_OK &&
                         asprintf(&line, "%s::%s:", name, host) >= 0) {
                        struct curl_slist *l = curl_slist_append(r->connect_to, line);
                        k = -ENOMEM;
                        if (l && free_and_strdup(&r->url, url) >= 0) {
                                r->connect_to = l;
                                curl_easy_setopt(r->easy, CURLOPT_URL, r->url);
                                curl_easy_setopt(r->easy, CURLOPT_CONNECT_TO, r->connect_to);
                                k = 0;
                        }
                }
        }
        curl_free(host);
        curl_free(url);
        curl_url_cleanup(u);
        return k;
}

int http_request_set_sigv4(HttpRequest *r, const char *provider, const char *access_key,
                           const char *secret_key, const char *session_token) {
        if (isempty(access_key) || isempty(secret_key))
                return -ENOKEY;
        if (curl_easy_setopt(r->easy, CURLOPT_AWS_SIGV4, provider) != CURLE_OK)
                return -EOPNOTSUPP;
        free(r->userpwd);
        if (asprintf(&r->userpwd, "%s:%s", access_key, secret_key) < 0) {
                r->userpwd = NULL;
                return -ENOMEM;
        }
        curl_easy_setopt(r->easy, CURLOPT_USERPWD, r->userpwd);
        if (!isempty(session_token))
                return http_request_add_header(r, "X-Amz-Security-Token", session_token);
        return 0;
}

void http_request_set_stream(HttpRequest *r, http_chunk_t chunk) {
        r->chunk = chunk;
}

int http_request_start(HttpRequest *r, http_done_t done, void *userdata) {
        HttpClient *c = r->client;
        r->done = done;
        r->userdata = userdata;
        if (r->headers)
                curl_easy_setopt(r->easy, CURLOPT_HTTPHEADER, r->headers);
        CURLMcode mc = curl_multi_add_handle(c->multi, r->easy);
        if (mc != CURLM_OK) {
                http_request_free(r);
                return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        }
        r->started = true;
        r->next = c->requests;
        if (c->requests)
                c->requests->prev = r;
        c->requests = r;
        c->n++;
        return 0;
}

void http_request_cancel(HttpRequest *r) {
        http_request_free(r);
}

const char *http_request_header(HttpRequest *r, const char *name) {
        struct curl_header *h = NULL;
        if (curl_easy_header(r->easy, name, 0, CURLH_HEADER, -1, &h) != CURLHE_OK || !h)
                return NULL;
        return h->value;
}

const char *http_request_url(const HttpRequest *r) {
        return r->url;
}

void *http_request_userdata(const HttpRequest *r) {
        return r->userdata;
}
