/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's HTTP endpoints on NNG's HTTP server. NNG calls handlers on its own threads;
 * they only queue the request and wake the loop through an eventfd, so every answer is built on
 * the loop thread, from state that only the loop touches. */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/eventfd.h>

#include "apiauth.h"
#include "coordinator.h"
#include "link-guard.h"
#include "link.h"
#include "log.h"
#include "macro.h"

#define HTTP_QUEUE_MAX 256

typedef struct Pending {
        nng_aio *aio;
        struct Pending *next;
} Pending;

struct HttpServer {
        Coordinator *coord;
        nng_http_server *server;
        nng_url *url;
        nng_http_handler *handlers[8];
        size_t n_handlers;
        int efd;
        sd_event_source *io;
        pthread_mutex_t lock;
        Pending *head, *tail;
        size_t queued;
        bool stopping;
        unsigned roles;               /* HTTP_SERVE_* */
        ApiAuth *auth;                /* borrowed; NULL: /api/v1 open */
        LinkGuard *conns;             /* connection caps and lifetime (HTTP_CONN_*) */
        sd_event_source *sweep;
};

/* Every HTTP connection lives HTTP_CONN_USEC at most, finished headers or not (a client with
 * keep-alive reconnects), and at most HTTP_CONN_MAX are open, HTTP_CONN_PER_SOURCE from one address:
 * the header and idle timeout NNG's HTTP server lacks (link-guard.h's handshake sweep, with no
 * connection ever counting as authenticated). */
#define HTTP_CONN_USEC (30 * USEC_PER_SEC)
#define HTTP_CONN_MAX 128
#define HTTP_CONN_PER_SOURCE 32

typedef struct AuthWait {
        HttpServer *server;
        nng_aio *aio;
} AuthWait;

static void respond(nng_aio *aio, uint16_t status, const char *ctype, const char *body, size_t len) {
        nng_http_res *res = NULL;
        int r = nng_http_res_alloc(&res);
        if (r == 0)
                r = nng_http_res_set_status(res, status);
        if (r == 0 && ctype)
                r = nng_http_res_set_header(res, "Content-Type", ctype);
        if (r == 0)
                r = nng_http_res_set_header(res, "Cache-Control", "no-store");
        if (r == 0 && body)
                r = nng_http_res_copy_data(res, body, len);
        if (r != 0) {
                if (res)
                        nng_http_res_free(res);
                nng_aio_finish(aio, r);
                return;
        }
        nng_aio_set_output(aio, 0, res);
        nng_aio_finish(aio, 0);
}

static void respond_unauthorized(nng_aio *aio) {
        nng_http_res *res = NULL;
        static const char body[] = "a bearer token allowed to get this path is required (TokenReview, SubjectAccessReview)\n";
        if (nng_http_res_alloc(&res) != 0 || nng_http_res_set_status(res, 401) != 0 ||
            nng_http_res_set_header(res, "WWW-Authenticate", "Bearer realm=\"nodesmith\"") != 0 ||
            nng_http_res_set_header(res, "Content-Type", "text/plain") != 0 ||
            nng_http_res_copy_data(res, body, sizeof body - 1) != 0) {
                if (res)
                        nng_http_res_free(res);
                nng_aio_finish(aio, NNG_ENOMEM);
                return;
        }
        nng_aio_set_output(aio, 0, res);
        nng_aio_finish(aio, 0);
}

/* NNG thread */
static void on_request(nng_aio *aio) {
        nng_http_handler *h = nng_aio_get_input(aio, 1);
        HttpServer *s = nng_http_handler_get_data(h);
        Pending *p = malloc(sizeof *p);

        pthread_mutex_lock(&s->lock);
        if (!p || s->stopping || s->queued >= HTTP_QUEUE_MAX) {
                pthread_mutex_unlock(&s->lock);
                free(p);
                respond(aio, 503, "text/plain", "busy\n", 5);
                return;
        }
        p->aio = aio;
        p->next = NULL;
        if (s->tail)
                s->tail->next = p;
        else
                s->head = p;
        s->tail = p;
        s->queued++;
        pthread_mutex_unlock(&s->lock);

        uint64_t one = 1;
        (void) !write(s->efd, &one, sizeof one);
}

static void serve(HttpServer *s, nng_aio *aio, bool authorized);

static uint64_t now_usec(Coordinator *c) {
        return coordinator_now(c);
}

static void on_auth(int status, void *userdata) {
        AuthWait *w = userdata;
        if (status == 200)
                serve(w->server, w->aio, true);
        else if (status == 401)
                respond_unauthorized(w->aio);
        else if (status == 403)
                respond(w->aio, 403, "text/plain", "forbidden\n", 10);
        else
                respond(w->aio, 503, "text/plain", "cannot check the credentials now\n", 33);
        free(w);
}

static void serve(HttpServer *s, nng_aio *aio, bool authorized) {
        Coordinator *c = s->coord;
        nng_http_req *req = nng_aio_get_input(aio, 0);
        const char *uri = nng_http_req_get_uri(req);
        const char *method = nng_http_req_get_method(req);
        _cleanup_free_ char *body = NULL;
        size_t len = 0;
        int r;

        c->metrics.http_requests_total++;
        if (!streq(method, "GET") && !streq(method, "HEAD")) {
                respond(aio, 405, "text/plain", "method not allowed\n", 19);
                return;
        }
        size_t pl = strcspn(uri, "?");
        bool api = strncmp(uri, "/api/", 5) == 0;
        if (!(s->roles & (api ? HTTP_SERVE_API : HTTP_SERVE_HEALTH))) {
                respond(aio, 404, "text/plain", "not found\n", 10);
                return;
        }
        if (api && s->auth && !authorized) {
                AuthWait *w = malloc(sizeof *w);
                if (!w) {
                        respond(aio, 503, "text/plain", "busy\n", 5);
                        return;
                }
                *w = (AuthWait) { s, aio };
                /* through the API server's service proxy, which drops Authorization, nodesmithctl
                 * sends the token in X-Nodesmith-Authorization */
                const char *authz = nng_http_req_get_header(req, "Authorization");
                if (!authz)
                        authz = nng_http_req_get_header(req, "X-Nodesmith-Authorization");
                api_auth_check(s->auth, authz, uri, now_usec(c), on_auth, w);
                return;
        }
        if (pl == 8 && strncmp(uri, "/healthz", 8) == 0) {
                respond(aio, 200, "text/plain", "ok\n", 3);
        } else if (pl == 7 && strncmp(uri, "/readyz", 7) == 0) {
                /* a standby serves metrics but is not ready: agents and the Service go to the leader */
                bool ready = c->link != NULL && (!c->provisioner || c->leading);
                respond(aio, ready ? 200 : 503, "text/plain", ready ? "ok\n" : "not ready\n",
                        ready ? 3 : 10);
        } else if (pl == 8 && strncmp(uri, "/metrics", 8) == 0) {
                r = metrics_render(c, &body, &len);
                if (r < 0)
                        respond(aio, 500, "text/plain", "error\n", 6);
                else
                        respond(aio, 200, "text/plain; version=0.0.4; charset=utf-8", body, len);
        } else if (pl == 13 && strncmp(uri, "/api/v1/nodes", 13) == 0) {
                r = api_nodes_render(c, &body, &len);
                if (r < 0)
                        respond(aio, 500, "text/plain", "error\n", 6);
                else
                        respond(aio, 200, "application/json", body, len);
        } else if (pl == 20 && strncmp(uri, "/api/v1/provisioning", 20) == 0) {
                r = api_provisioning_render(c, &body, &len);
                if (r < 0)
                        respond(aio, 500, "text/plain", "error\n", 6);
                else
                        respond(aio, 200, "application/json", body, len);
        } else if (pl == 18 && strncmp(uri, "/api/v1/disruption", 18) == 0) {
                r = api_disruption_render(c, &body, &len);
                if (r < 0)
                        respond(aio, 500, "text/plain", "error\n", 6);
                else
                        respond(aio, 200, "application/json", body, len);
        } else
                respond(aio, 404, "text/plain", "not found\n", 10);
}

static int on_wakeup(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        HttpServer *s = userdata;
        uint64_t v;
        (void) !read(s->efd, &v, sizeof v);

        for (;;) {
                pthread_mutex_lock(&s->lock);
                Pending *p = s->head;
                if (p) {
                        s->head = p->next;
                        if (!s->head)
                                s->tail = NULL;
                        s->queued--;
                }
                pthread_mutex_unlock(&s->lock);
                if (!p)
                        break;
                serve(s, p->aio, false);
                free(p);
        }
        return 0;
}

static int on_sweep(sd_event_source *es, uint64_t usec, void *userdata) {
        HttpServer *s = userdata;
        (void) link_guard_sweep(s->conns, usec);
        return sd_event_source_set_time(es, usec + USEC_PER_SEC);
}

int http_server_new(Coordinator *c, const char *url, unsigned roles, ApiAuth *auth, HttpServer **ret) {
        static const char *const paths[] = { "/healthz", "/readyz", "/metrics", "/api/v1/nodes",
                                             "/api/v1/provisioning", "/api/v1/disruption" };
        HttpServer *s;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->coord = c;
        s->roles = roles;
        s->auth = auth;
        s->efd = -EBADF;
        pthread_mutex_init(&s->lock, NULL);

        s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->efd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(c->event, &s->io, s->efd, EPOLLIN, on_wakeup, s);
        if (r < 0)
                goto fail;

        r = link_errno(nng_url_parse(&s->url, url));
        if (r < 0)
                goto fail;
        r = link_errno(nng_http_server_hold(&s->server, s->url));
        if (r < 0)
                goto fail;
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                nng_http_handler *h;
                r = link_errno(nng_http_handler_alloc(&h, paths[i], on_request));
                if (r < 0)
                        goto fail;
                (void) nng_http_handler_set_method(h, NULL); /* any method; we answer 405 */
                (void) nng_http_handler_collect_body(h, true, 0);
                (void) nng_http_handler_set_data(h, s, NULL);
                r = link_errno(nng_http_server_add_handler(s->server, h));
                if (r < 0) {
                        nng_http_handler_free(h);
                        goto fail;
                }
                s->handlers[s->n_handlers++] = h;
        }
        r = link_errno(nng_http_server_start(s->server));
        if (r < 0)
                goto fail;
        LinkLimits limits = { .max_unauthenticated = HTTP_CONN_MAX, .max_unauthenticated_per_source = HTTP_CONN_PER_SOURCE,
                              .auth_timeout_usec = HTTP_CONN_USEC };
        r = link_guard_new(&limits, &s->conns);
        if (r < 0)
                goto fail;
        link_guard_set_port(s->conns, htons((uint16_t) atoi(s->url->u_port)));
        r = sd_event_add_time_relative(c->event, &s->sweep, CLOCK_MONOTONIC, USEC_PER_SEC, 100 * USEC_PER_MSEC,
                                       on_sweep, s);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(s->sweep, SD_EVENT_ON);
        *ret = s;
        return 0;
fail:
        http_server_free(s);
        return r;
}

HttpServer *http_server_free(HttpServer *s) {
        if (!s)
                return NULL;
        /* Answer whatever is queued first: nng_http_server_stop() waits for every connection,
         * and one whose request sits in the queue would wait for this thread (a shutdown that
         * hung when a request came in as the loop ended). Requests that arrive from here on see
         * stopping and are answered at once, on NNG's thread. */
        pthread_mutex_lock(&s->lock);
        s->stopping = true;
        Pending *queued = s->head;
        s->head = s->tail = NULL;
        s->queued = 0;
        pthread_mutex_unlock(&s->lock);
        for (Pending *p = queued, *n; p; p = n) {
                n = p->next;
                respond(p->aio, 503, "text/plain", "stopping\n", 9);
                free(p);
        }
        sd_event_source_disable_unref(s->sweep);
        if (s->server) {
                nng_http_server_stop(s->server);
                nng_http_server_release(s->server);
        }
        if (s->url)
                nng_url_free(s->url);
        sd_event_source_disable_unref(s->io);
        if (s->efd >= 0)
                close(s->efd);
        pthread_mutex_destroy(&s->lock);
        link_guard_free(s->conns);
        free(s);
        return NULL;
}
