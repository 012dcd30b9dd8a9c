/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's HTTP endpoints on NNG's HTTP server. NNG calls handlers on its own threads;
 * they only queue the request and wake the loop through an eventfd, so every answer is built on
 * the loop thread, from state that only the loop touches. */
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include "coordinator.h"
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
};

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

static void serve(HttpServer *s, nng_aio *aio) {
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
                serve(s, p->aio);
                free(p);
        }
        return 0;
}

int http_server_new(Coordinator *c, const char *url, HttpServer **ret) {
        static const char *const paths[] = { "/healthz", "/readyz", "/metrics", "/api/v1/nodes",
                                             "/api/v1/provisioning", "/api/v1/disruption" };
        HttpServer *s;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->coord = c;
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
        free(s);
        return NULL;
}
