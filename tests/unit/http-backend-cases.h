/* SPDX-License-Identifier: Apache-2.0 */
/* The behaviour both HTTP backends (lib/http-curl.c, lib/http-nng.c) promise in lib/http.h,
 * checked against a small server on 127.0.0.1 that reads one request per connection and answers
 * canned bytes. Included by test-lib-http-curl.c and test-lib-http-nng.c, each linked with its
 * backend. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "macro.h"

#define CANNED_MAX 8
#define REQ_MAX 8192
#define LOOP_LIMIT_USEC (30 * 1000000ULL)

/* One answer of the server: written in pieces with pause_ms between them; silent: read the
 * request and never answer (until the test ends). */
typedef struct Canned {
        const char *pieces[4];
        unsigned pause_ms;
        bool silent;
} Canned;

typedef struct Server {
        int listen_fd;
        int stop_fd[2];
        uint16_t port;
        pthread_t thread;
        Canned canned[CANNED_MAX];
        unsigned n_canned, served;
        char last_request[REQ_MAX];
        size_t last_request_len;
} Server;

typedef struct Result {
        sd_event *event;
        int error;
        long status;
        char body[REQ_MAX];
        size_t len;
        char content_type[64];
        size_t streamed;
        char stream[REQ_MAX];
        int stream_error; /* what the chunk callback returns once past stop_after */
        size_t stop_after;
        bool done;
} Result;

/* The request's head and (by Content-Length) body, or until the peer stops sending. */
static size_t server_read_request(int fd, char *buf, size_t size) {
        size_t len = 0;
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 5000) <= 0)
                        break;
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n <= 0)
                        break;
                len += (size_t) n;
                buf[len] = 0;
                const char *end = strstr(buf, "\r\n\r\n");
                if (!end)
                        continue;
                const char *cl = strcasestr(buf, "\r\nContent-Length:");
                size_t want = (size_t) (end + 4 - buf) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
                if (len >= want || len >= size - 1)
                        break;
        }
        return len;
}

static void *server_main(void *userdata) {
        Server *s = userdata;
        for (;;) {
                struct pollfd p[2] = { { .fd = s->listen_fd, .events = POLLIN },
                                       { .fd = s->stop_fd[0], .events = POLLIN } };
                if (poll(p, 2, -1) < 0 || p[1].revents)
                        return NULL;
                int fd = accept(s->listen_fd, NULL, NULL);
                if (fd < 0)
                        continue;
                s->last_request_len = server_read_request(fd, s->last_request, sizeof s->last_request);
                const Canned *c = &s->canned[MIN(s->served, s->n_canned - 1)];
                s->served++;
                if (c->silent) { /* hold the connection until the test stops the server */
                        struct pollfd q = { .fd = s->stop_fd[0], .events = POLLIN };
                        (void) poll(&q, 1, 20000);
                        close(fd);
                        return NULL;
                }
                for (unsigned i = 0; i < ELEMENTSOF(c->pieces) && c->pieces[i]; i++) {
                        if (i > 0 && c->pause_ms)
                                usleep(c->pause_ms * 1000);
                        (void) !write(fd, c->pieces[i], strlen(c->pieces[i]));
                }
                shutdown(fd, SHUT_WR);
                close(fd);
        }
}

static Server *server_start(const Canned *canned, unsigned n) {
        Server *s = calloc(1, sizeof *s);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof a;

        assert_non_null(s);
        assert_true(n > 0 && n <= CANNED_MAX);
        memcpy(s->canned, canned, n * sizeof *canned);
        s->n_canned = n;
        s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(s->listen_fd >= 0);
        assert_int_equal(bind(s->listen_fd, (struct sockaddr *) &a, sizeof a), 0);
        assert_int_equal(listen(s->listen_fd, 8), 0);
        assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *) &a, &alen), 0);
        s->port = ntohs(a.sin_port);
        assert_int_equal(pipe(s->stop_fd), 0);
        assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
        return s;
}

static void server_stop(Server *s) {
        (void) !write(s->stop_fd[1], "x", 1);
        pthread_join(s->thread, NULL);
        close(s->listen_fd);
        close(s->stop_fd[0]);
        close(s->stop_fd[1]);
        free(s);
}

static void on_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                    void *userdata) {
        Result *res = userdata;
        const char *ct = error >= 0 ? http_request_header(req, "Content-Type") : NULL;
        res->error = error;
        res->status = status;
        res->len = len;
        if (body)
                snprintf(res->body, sizeof res->body, "%.*s", (int) len, body);
        if (ct)
                snprintf(res->content_type, sizeof res->content_type, "%s", ct);
        res->done = true;
}

static int on_chunk(HttpRequest *req, const char *data, size_t len, void *userdata) {
        Result *res = userdata;
        size_t room = sizeof res->stream - 1 - res->streamed;
        memcpy(res->stream + res->streamed, data, MIN(len, room));
        res->streamed += MIN(len, room);
        res->stream[res->streamed] = 0;
        if (res->stop_after && res->streamed >= res->stop_after)
                return res->stream_error;
        return 0;
}

/* Runs one request to path on the server until its callback, with the test's overall limit. */
static void run(Result *res, HttpRequest *req) {
        struct timespec t0, t;
        res->done = false;
        assert_int_equal(http_request_start(req, on_done, res), 0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
                assert_true(sd_event_run(res->event, 100 * 1000) >= 0);
                clock_gettime(CLOCK_MONOTONIC, &t);
        } while (!res->done && (uint64_t) (t.tv_sec - t0.tv_sec) * 1000000ULL < LOOP_LIMIT_USEC);
        assert_true(res->done);
}

typedef struct Fixture {
        sd_event *event;
        HttpClient *client;
        Result res;
} Fixture;

static int fixture_setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(http_client_new(f->event, &f->client), 0);
        f->res.event = f->event;
        *state = f;
        return 0;
}

static int fixture_teardown(void **state) {
        Fixture *f = *state;
        http_client_free(f->client);
        sd_event_unref(f->event);
        free(f);
        return 0;
}

static HttpRequest *request(Fixture *f, const char *method, const Server *s, const char *path) {
        char url[128];
        HttpRequest *req = NULL;
        snprintf(url, sizeof url, "http://127.0.0.1:%u%s", s ? s->port : 1u, path);
        assert_int_equal(http_request_new(f->client, method, url, &req), 0);
        http_request_set_timeouts(req, 2000, 5000);
        return req;
}

static void test_get(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pieces = {
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
                "Connection: close\r\n\r\n{\"ok\":true}" } }, 1);
        HttpRequest *req = request(f, "GET", s, "/latest/meta-data/instance-id");
        assert_int_equal(http_request_add_header(req, "X-Test", "yes"), 0);
        run(&f->res, req);
        assert_int_equal(f->res.error, 0);
        assert_int_equal(f->res.status, 200);
        assert_string_equal(f->res.body, "{\"ok\":true}");
        assert_int_equal(f->res.len, 11);
        assert_string_equal(f->res.content_type, "application/json");
        assert_non_null(strstr(s->last_request, "GET /latest/meta-data/instance-id HTTP/1."));
        assert_non_null(strcasestr(s->last_request, "\r\nX-Test: yes\r\n"));
        assert_int_equal(http_client_in_flight(f->client), 0);
        server_stop(s);
}

static void test_post_body_and_error_status(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pieces = {
                "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 8\r\nConnection: close\r\n\r\n"
                "slowdown" } }, 1);
        HttpRequest *req = request(f, "POST", s, "/api/v1/namespaces/d/pods/p/eviction");
        const char body[] = "{\"kind\":\"Eviction\"}";
        assert_int_equal(http_request_add_header(req, "Content-Type", "application/json"), 0);
        assert_int_equal(http_request_set_body(req, body, strlen(body)), 0);
        run(&f->res, req);
        /* an HTTP error is an answer, not a transport failure */
        assert_int_equal(f->res.error, 0);
        assert_int_equal(f->res.status, 429);
        assert_string_equal(f->res.body, "slowdown");
        assert_non_null(strstr(s->last_request, "POST /api/v1/namespaces/d/pods/p/eviction HTTP/1."));
        assert_non_null(strstr(s->last_request, "\r\n\r\n{\"kind\":\"Eviction\"}"));
        server_stop(s);
}

static void test_body_over_cap(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pieces = {
                "HTTP/1.1 200 OK\r\nContent-Length: 64\r\nConnection: close\r\n\r\n"
                "0123456789012345678901234567890123456789012345678901234567890123" } }, 1);
        HttpRequest *req = request(f, "GET", s, "/big");
        http_request_set_max_body(req, 16);
        run(&f->res, req);
        assert_int_equal(f->res.error, -EFBIG);
        assert_int_equal(f->res.status, 0);
        server_stop(s);
}

static void test_total_timeout(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .silent = true }, 1);
        HttpRequest *req = request(f, "GET", s, "/never");
        http_request_set_timeouts(req, 1000, 400);
        run(&f->res, req);
        assert_int_equal(f->res.error, -ETIMEDOUT);
        assert_int_equal(f->res.status, 0);
        server_stop(s);
}

static void test_connection_refused(void **state) {
        Fixture *f = *state;
        /* a port that was just free: bind, learn it, close */
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof a;
        assert_int_equal(bind(fd, (struct sockaddr *) &a, sizeof a), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *) &a, &alen), 0);
        close(fd);
        char url[64];
        HttpRequest *req = NULL;
        snprintf(url, sizeof url, "http://127.0.0.1:%u/", ntohs(a.sin_port));
        assert_int_equal(http_request_new(f->client, "GET", url, &req), 0);
        http_request_set_timeouts(req, 2000, 5000);
        run(&f->res, req);
        assert_int_equal(f->res.error, -ECONNREFUSED);
        assert_int_equal(f->res.status, 0);
}

static void test_stream(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pause_ms = 100, .pieces = {
                "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n",
                "{\"type\":\"ADDED\"}\n",
                "{\"type\":\"MODIFIED\"}\n" } }, 1);
        HttpRequest *req = request(f, "GET", s, "/api/v1/pods?watch=1");
        http_request_set_stream(req, on_chunk);
        run(&f->res, req);
        /* every piece went to the chunk callback, in order, and none to done */
        assert_true(f->res.error >= 0);
        assert_string_equal(f->res.stream, "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n");
        assert_int_equal(f->res.len, 0);
        server_stop(s);
}

static void test_stream_aborted_by_callback(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .pause_ms = 100, .pieces = {
                "HTTP/1.0 200 OK\r\n\r\n", "{\"type\":\"ADDED\"}\n", "{\"type\":\"MODIFIED\"}\n" } }, 1);
        HttpRequest *req = request(f, "GET", s, "/api/v1/pods?watch=1");
        http_request_set_stream(req, on_chunk);
        f->res.stop_after = 1;
        f->res.stream_error = -EBADMSG;
        run(&f->res, req);
        /* done carries the callback's own error */
        assert_int_equal(f->res.error, -EBADMSG);
        assert_null(strstr(f->res.stream, "MODIFIED"));
        server_stop(s);
}

static void test_cancel(void **state) {
        Fixture *f = *state;
        Server *s = server_start(&(Canned) { .silent = true }, 1);
        HttpRequest *req = request(f, "GET", s, "/held");
        assert_int_equal(http_request_start(req, on_done, &f->res), 0);
        assert_int_equal(http_client_in_flight(f->client), 1);
        /* let it connect and send, then cancel: its callback is never called */
        for (unsigned i = 0; i < 20; i++)
                (void) sd_event_run(f->event, 10000);
        http_request_cancel(req);
        assert_int_equal(http_client_in_flight(f->client), 0);
        for (unsigned i = 0; i < 10; i++)
                (void) sd_event_run(f->event, 10000);
        assert_false(f->res.done);
        server_stop(s);
}

static void test_escape(void **state) {
        _cleanup_free_ char *e = http_escape("app=web,tier!=db ~a-b_c.");
        assert_string_equal(e, "app%3Dweb%2Ctier%21%3Ddb%20~a-b_c.");
}

#define HTTP_BACKEND_TESTS                                                                  \
        cmocka_unit_test(test_escape),                                                      \
        cmocka_unit_test_setup_teardown(test_get, fixture_setup, fixture_teardown),         \
        cmocka_unit_test_setup_teardown(test_post_body_and_error_status, fixture_setup,     \
                                        fixture_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_body_over_cap, fixture_setup, fixture_teardown), \
        cmocka_unit_test_setup_teardown(test_total_timeout, fixture_setup, fixture_teardown), \
        cmocka_unit_test_setup_teardown(test_connection_refused, fixture_setup,             \
                                        fixture_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_stream, fixture_setup, fixture_teardown),      \
        cmocka_unit_test_setup_teardown(test_stream_aborted_by_callback, fixture_setup,     \
                                        fixture_teardown),                                  \
        cmocka_unit_test_setup_teardown(test_cancel, fixture_setup, fixture_teardown)
