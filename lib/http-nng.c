/* SPDX-License-Identifier: Apache-2.0 */
/* lib/http.h on NNG's HTTP client: the agent's backend (docs/http.md). The agent already carries
 * NNG and its mbedTLS for the link; with this backend it maps neither libcurl nor OpenSSL.
 *
 * Requests are HTTP/1.1 with keep-alive: up to 4 idle connections per origin are kept for the
 * next requests (a stale one is noticed on use and the request goes once more on a new
 * connection, as libcurl does; over TLS, one the server ended is found through the kernel before
 * use, see socks_find()). Every request is driven step by step from the loop: NNG's aio callbacks, which run on NNG's threads, only queue the request and
 * wake the loop through an eventfd; the loop reads the step's result and starts the next one.
 * A plain request is one nng_http_conn_transact() (Content-Length or chunked bodies, both
 * decoded by NNG). A streamed request (watches) is sent as HTTP/1.0, so that the server sends
 * the body as it comes, unchunked, and closes the connection at its end (RFC 9112 §6.1: a
 * server must not send chunked to an HTTP/1.0 client); the loop hands every read to the chunk
 * callback and reads on only after it returned, so nothing piles up. */
#include <dirent.h>
#include <errno.h>
#include <mbedtls/pk.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <mbedtls/x509_crt.h>
#include <nng/nng.h>
#include <nng/supplemental/http/http.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "http.h"
#include "log.h"
#include "macro.h"

#define HTTP_DEFAULT_MAX_BODY (8u * 1024 * 1024)
#define HTTP_STREAM_READ 16384
#define HTTP_PEM_MAX (1u * 1024 * 1024)
#define HTTP_MAX_ORIGINS 8
#define HTTP_IDLE_MAX_USEC (30 * USEC_PER_SEC) /* below the usual servers' idle time-outs */
#define HTTP_IDLE_PER_ORIGIN 4 /* the IMDS watcher asks for a few paths at once */
#define HTTP_SOCKS_MAX 32       /* sockets that may be a TLS connection's own (socks_find()) */

/* System trust stores, for https:// without a CA of its own (Debian, then Amazon Linux). */
static const char *const system_cas[] = { "/etc/ssl/certs/ca-certificates.crt",
                                          "/etc/pki/tls/certs/ca-bundle.crt" };

typedef enum {
        STEP_CONNECT,
        STEP_TRANSACT, /* plain: request written, response and body read by NNG */
        STEP_SEND,     /* streamed: request written */
        STEP_HEADERS,  /* streamed: status line and headers read */
        STEP_STREAM,   /* streamed: a piece of body read */
} Step;

/* The TCP sockets that may carry a TLS connection: NNG 1.5.2 does not say which is its own, so
 * every established one to the server's port when it connected (see socks_find()). */
typedef struct Socks {
        int fd[HTTP_SOCKS_MAX];
        ino_t ino[HTTP_SOCKS_MAX];
        unsigned n;
} Socks;

/* One nng_http_client (a dialer and its TLS configuration) per origin and TLS settings, and
 * the connection its last request left open. */
typedef struct Origin {
        char *key;
        nng_http_client *client;
        nng_tls_config *tls;
        struct {
                nng_http_conn *conn;
                uint64_t since;
                Socks socks;
        } idle[HTTP_IDLE_PER_ORIGIN]; /* oldest first */
        size_t n_idle;
        unsigned users; /* requests started on it and not yet freed */
} Origin;

typedef struct Tls {
        char *ca_file, *ca_pem, *cert_file, *key_file, *server_name;
        size_t ca_pem_len;
        bool skip_verify, set;
} Tls;

struct HttpClient {
        sd_event *event;
        sd_event_source *wake;
        int efd;
        pthread_mutex_t lock;
        HttpRequest *ready, *ready_tail; /* steps finished on NNG's threads, under lock */
        HttpRequest *requests;           /* started, in flight (doubly linked) */
        size_t n;
        Origin *origins[HTTP_MAX_ORIGINS];
        size_t n_origins;
};

struct HttpRequest {
        HttpClient *client;
        Origin *origin;
        bool reused; /* on a kept connection: a failure before any answer is retried once */
        char *url;
        nng_url *nurl;
        nng_http_req *req;
        nng_http_res *res;
        nng_http_conn *conn;
        Socks socks; /* over TLS: the sockets that may be conn's own */
        bool unsettled; /* an operation on conn may still wait in NNG's TLS layer (conn_close()) */
        nng_aio *aio;
        Step step;
        Tls tls;
        uint64_t connect_ms, total_ms, deadline_usec;
        size_t max_body, streamed;
        int fail; /* set up failed (TLS files, keys): reported through done, as curl does */
        int64_t content_length; /* streamed: -1 when the body ends with the connection */
        char *buf;
        http_done_t done;
        http_chunk_t chunk;
        void *userdata;
        bool started, queued;
        HttpRequest *prev, *next, *ready_next;
};

static int nng_to_errno(int rv) {
        switch (rv) {
        case 0:
                return 0;
        case NNG_ETIMEDOUT:
                return -ETIMEDOUT;
        case NNG_ECONNREFUSED:
                return -ECONNREFUSED;
        case NNG_EUNREACHABLE:
                return -EHOSTUNREACH;
        case NNG_ENOMEM:
                return -ENOMEM;
        case NNG_ECLOSED:
        case NNG_ECONNSHUT:
        case NNG_ECONNRESET:
        case NNG_ECONNABORTED:
                return -ECONNRESET;
        case NNG_EPEERAUTH:
        case NNG_ECRYPTO:
                return -EKEYREJECTED;
        case NNG_EADDRINVAL:
        case NNG_EINVAL:
        case NNG_ENOTSUP:
                return -EINVAL;
        case NNG_EPROTO:
        case NNG_EMSGSIZE:
                return -EPROTO;
        case NNG_ECANCELED:
                return -ECANCELED;
        case NNG_ENOENT:
                return -ENOENT;
        default:
                return -EIO;
        }
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

/* ---- kept TLS connections the server ended ------------------------------------------- */

/* NNG 1.5.2's TLS layer (with mbedTLS) keeps a TCP read pending on an idle connection. When the
 * server ends the connection without close_notify (a bare FIN: a killed or crashed process, some
 * middleboxes), that read fails with no request to tell, and the TLS layer shuts its TCP stream
 * down without marking itself closed: a later read on it is queued and never completes, not even
 * on cancellation (NNG aborts the TCP read, which is no longer there), and nng_http_conn_close()
 * then waits for it for ever (nni_http_conn_fini() stops the connection's read before it closes
 * the stream). The HTTP connection never learns of it; the kernel does. So before a kept TLS
 * connection is reused, its socket must still be ESTABLISHED (a FIN from the server makes it
 * CLOSE_WAIT, NNG's shutdown then LAST_ACK or CLOSE). NNG does not tell which socket is a
 * connection's own: right after it connected, every established TCP socket of this process to
 * the server's port is noted (its own among them), and the connection is reused only while each
 * of those that still exists (same descriptor, same inode) is ESTABLISHED. Another connection to
 * the same port closing at that moment costs only a new connection. */

static int sock_state(int fd, uint16_t port, ino_t *ret_ino) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        struct tcp_info ti;
        socklen_t tlen = sizeof ti;
        struct stat st;
        uint16_t p;

        if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) || getpeername(fd, (struct sockaddr *) &sa, &len) < 0)
                return -1;
        if (sa.ss_family == AF_INET)
                p = ntohs(((struct sockaddr_in *) &sa)->sin_port);
        else if (sa.ss_family == AF_INET6)
                p = ntohs(((struct sockaddr_in6 *) &sa)->sin6_port);
        else
                return -1;
        if (p != port || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tlen) < 0)
                return -1;
        *ret_ino = st.st_ino;
        return ti.tcpi_state;
}

/* Every established TCP socket to port, right after a TLS connection to it was made; none
 * (too many, or /proc unreadable) means the connection is not kept. */
static void socks_find(uint16_t port, Socks *ret) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        Socks s = { 0 };
        bool over = false;

        if (!d) {
                *ret = s;
                return;
        }
        while ((de = readdir(d))) {
                char *end;
                long fd = strtol(de->d_name, &end, 10);
                ino_t ino;
                if (*end || end == de->d_name || fd == dirfd(d) ||
                    sock_state((int) fd, port, &ino) != TCP_ESTABLISHED)
                        continue;
                if (s.n == HTTP_SOCKS_MAX) {
                        over = true;
                        break;
                }
                s.fd[s.n] = (int) fd;
                s.ino[s.n++] = ino;
        }
        closedir(d);
        *ret = over ? (Socks) { 0 } : s;
}

/* Whether a kept connection's socket is still ESTABLISHED (see above). */
static bool socks_open(const Socks *s, uint16_t port) {
        bool any = false;
        for (unsigned i = 0; i < s->n; i++) {
                ino_t ino;
                int state = sock_state(s->fd[i], port, &ino);
                if (state < 0 || ino != s->ino[i])
                        continue; /* gone, or another socket now: not the connection's own */
                if (state != TCP_ESTABLISHED)
                        return false;
                any = true;
        }
        return any; /* its own socket is among them, open as long as the connection */
}

static void *conn_close_thread(void *arg) {
        nng_http_conn_close(arg);
        return NULL;
}

/* Closes (and frees) a request's connection. Over TLS, after a time-out or a cancellation, a
 * read may still wait in NNG's TLS layer for ever (above) and nng_http_conn_close() with it: that
 * close goes to a thread of its own, so that the loop never waits for it; if the read is stuck,
 * that thread and the connection stay, and nothing else does. */
static void conn_close(HttpRequest *r) {
        nng_http_conn *conn = TAKE_PTR(r->conn);
        pthread_attr_t attr;
        pthread_t t;

        if (!conn)
                return;
        if (!r->unsettled || !r->origin || !r->origin->tls) {
                nng_http_conn_close(conn);
                return;
        }
        if (pthread_attr_init(&attr) != 0)
                return; /* left as it is rather than waited for */
        (void) pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        (void) pthread_attr_setstacksize(&attr, 64 * 1024);
        if (pthread_create(&t, &attr, conn_close_thread, conn) != 0)
                log_debug("%s: connection left open: no thread to close it", r->url);
        pthread_attr_destroy(&attr);
}

static uint16_t url_port(const nng_url *u) {
        return (uint16_t) strtoul(u->u_port, NULL, 10);
}

/* ---- the loop glue -------------------------------------------------------------------- */

/* On an NNG thread: hand the request to the loop. */
static void on_aio(void *arg) {
        HttpRequest *r = arg;
        HttpClient *c = r->client;
        uint64_t one = 1;

        pthread_mutex_lock(&c->lock);
        r->queued = true;
        r->ready_next = NULL;
        if (c->ready_tail)
                c->ready_tail->ready_next = r;
        else
                c->ready = r;
        c->ready_tail = r;
        pthread_mutex_unlock(&c->lock);
        (void) !write(c->efd, &one, sizeof one);
}

static HttpRequest *ready_pop(HttpClient *c) {
        pthread_mutex_lock(&c->lock);
        HttpRequest *r = c->ready;
        if (r) {
                c->ready = r->ready_next;
                if (!c->ready)
                        c->ready_tail = NULL;
                r->queued = false;
                r->ready_next = NULL;
        }
        pthread_mutex_unlock(&c->lock);
        return r;
}

static void ready_remove(HttpClient *c, HttpRequest *r) {
        pthread_mutex_lock(&c->lock);
        if (r->queued) {
                HttpRequest **p = &c->ready, *prev = NULL;
                while (*p && *p != r) {
                        prev = *p;
                        p = &(*p)->ready_next;
                }
                if (*p) {
                        *p = r->ready_next;
                        if (c->ready_tail == r)
                                c->ready_tail = prev;
                }
                r->queued = false;
                r->ready_next = NULL;
        }
        pthread_mutex_unlock(&c->lock);
}

static void request_unlink(HttpRequest *r) {
        HttpClient *c = r->client;
        if (!r->started)
                return;
        /* waits for a callback running on NNG's threads; after it, none is queued or to come */
        nng_aio_stop(r->aio);
        ready_remove(c, r);
        if (r->prev)
                r->prev->next = r->next;
        else
                c->requests = r->next;
        if (r->next)
                r->next->prev = r->prev;
        r->prev = r->next = NULL;
        c->n--;
        r->started = false;
}

static void finish(HttpRequest *r, int error, long status, const char *body, size_t len) {
        if (error == -ETIMEDOUT || error == -ECANCELED)
                r->unsettled = true;
        request_unlink(r);
        if (r->done)
                r->done(r, error, status, body ? body : "", body ? len : 0, r->userdata);
        http_request_free(r);
}

/* Arm the aio with what is left of the request's time (the connect step: its own limit). */
static bool arm(HttpRequest *r, uint64_t cap_ms) {
        uint64_t now = now_usec();
        if (now >= r->deadline_usec)
                return false;
        uint64_t left_ms = (r->deadline_usec - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC;
        nng_aio_set_timeout(r->aio, (nng_duration) MIN(left_ms, cap_ms));
        return true;
}

static void request_connect(HttpRequest *r) {
        r->step = STEP_CONNECT;
        r->reused = false;
        if (!arm(r, r->connect_ms)) {
                finish(r, -ETIMEDOUT, 0, NULL, 0);
                return;
        }
        nng_http_client_connect(r->origin->client, r->aio);
}

/* After a whole answer: the connection goes back to its origin unless either side ends it. */
static void keep_alive(HttpRequest *r) {
        const char *conn = nng_http_res_get_header(r->res, "Connection");
        const char *ver = nng_http_res_get_version(r->res);
        Origin *o = r->origin;
        if (!r->conn || !o || (conn && strcasestr(conn, "close")) || !ver || !streq(ver, "HTTP/1.1"))
                return;
        if (o->tls && r->socks.n == 0)
                return; /* its socket is unknown: whether the server ended it could not be told */
        if (o->n_idle == HTTP_IDLE_PER_ORIGIN) { /* the oldest goes */
                nng_http_conn_close(o->idle[0].conn);
                memmove(&o->idle[0], &o->idle[1], (HTTP_IDLE_PER_ORIGIN - 1) * sizeof o->idle[0]);
                o->n_idle--;
        }
        o->idle[o->n_idle].conn = TAKE_PTR(r->conn);
        o->idle[o->n_idle].socks = r->socks;
        o->idle[o->n_idle++].since = now_usec();
}

static void stream_read(HttpRequest *r) {
        size_t want = HTTP_STREAM_READ;
        if (r->content_length >= 0) {
                if ((uint64_t) r->content_length <= r->streamed) {
                        finish(r, 0, nng_http_res_get_status(r->res), NULL, 0);
                        return;
                }
                want = MIN(want, (size_t) ((uint64_t) r->content_length - r->streamed));
        }
        nng_iov iov = { .iov_buf = r->buf, .iov_len = want };
        if (!arm(r, UINT64_MAX)) {
                finish(r, -ETIMEDOUT, 0, NULL, 0);
                return;
        }
        if (nng_aio_set_iov(r->aio, 1, &iov) != 0) {
                finish(r, -ENOMEM, 0, NULL, 0);
                return;
        }
        r->step = STEP_STREAM;
        nng_http_conn_read(r->conn, r->aio);
}

static void on_headers(HttpRequest *r) {
        long status = nng_http_res_get_status(r->res);
        const char *te = nng_http_res_get_header(r->res, "Transfer-Encoding");
        const char *cl = nng_http_res_get_header(r->res, "Content-Length");

        if (te && strcasecmp(te, "identity") != 0) {
                /* not allowed in an answer to HTTP/1.0; nothing here decodes it */
                log_debug("%s: Transfer-Encoding %s in an answer to HTTP/1.0", r->url, te);
                finish(r, -EPROTO, 0, NULL, 0);
                return;
        }
        r->content_length = -1;
        if (cl) {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(cl, &end, 10);
                if (errno || end == cl || *end) {
                        finish(r, -EPROTO, 0, NULL, 0);
                        return;
                }
                r->content_length = (int64_t) MIN(v, (unsigned long long) INT64_MAX);
        }
        r->buf = malloc(HTTP_STREAM_READ);
        if (!r->buf) {
                finish(r, -ENOMEM, status, NULL, 0);
                return;
        }
        stream_read(r);
}

static void on_stream(HttpRequest *r, int rv) {
        long status = nng_http_res_get_status(r->res);
        if (rv != 0) {
                /* without a length, the body ends with the connection */
                if (r->content_length < 0 && (rv == NNG_ECLOSED || rv == NNG_ECONNSHUT))
                        finish(r, 0, status, NULL, 0);
                else
                        finish(r, nng_to_errno(rv), 0, NULL, 0);
                return;
        }
        size_t n = nng_aio_count(r->aio);
        if (n == 0) {
                finish(r, r->content_length < 0 ? 0 : -ECONNRESET, status, NULL, 0);
                return;
        }
        r->streamed += n;
        int k = r->chunk(r, r->buf, n, r->userdata);
        if (k < 0) {
                finish(r, k, 0, NULL, 0);
                return;
        }
        stream_read(r);
}

static void on_transact(HttpRequest *r) {
        void *data = NULL;
        size_t len = 0;
        long status = nng_http_res_get_status(r->res);

        nng_http_res_get_data(r->res, &data, &len);
        if (len > r->max_body) {
                finish(r, -EFBIG, 0, NULL, 0);
                return;
        }
        _cleanup_free_ char *body = malloc(len + 1);
        if (!body) {
                finish(r, -ENOMEM, 0, NULL, 0);
                return;
        }
        if (len)
                memcpy(body, data, len);
        body[len] = 0;
        keep_alive(r);
        finish(r, 0, status, body, len);
}

static void advance(HttpRequest *r) {
        if (r->fail < 0) {
                finish(r, r->fail, 0, NULL, 0);
                return;
        }
        int rv = nng_aio_result(r->aio);

        if (r->step == STEP_STREAM) {
                on_stream(r, rv);
                return;
        }
        if (rv != 0) {
                /* a kept connection the server had closed meanwhile: once more, on a new one
                 * (over TLS, NNG reports the server's close_notify as NNG_ECONNREFUSED) */
                if (r->step == STEP_TRANSACT && r->reused &&
                    (rv == NNG_ECLOSED || rv == NNG_ECONNSHUT || rv == NNG_ECONNRESET ||
                     rv == NNG_ECONNREFUSED)) {
                        log_debug("%s: kept connection closed by the server (%s); again on a new one",
                                  r->url, nng_strerror(rv));
                        conn_close(r);
                        request_connect(r);
                        return;
                }
                finish(r, nng_to_errno(rv), 0, NULL, 0);
                return;
        }
        switch (r->step) {
        case STEP_CONNECT:
                r->conn = nng_aio_get_output(r->aio, 0);
                if (r->origin->tls)
                        socks_find(url_port(r->nurl), &r->socks);
                if (!arm(r, UINT64_MAX)) {
                        finish(r, -ETIMEDOUT, 0, NULL, 0);
                        return;
                }
                if (r->chunk) {
                        r->step = STEP_SEND;
                        nng_http_conn_write_req(r->conn, r->req, r->aio);
                } else {
                        r->step = STEP_TRANSACT;
                        nng_http_conn_transact(r->conn, r->req, r->res, r->aio);
                }
                return;
        case STEP_SEND:
                if (!arm(r, UINT64_MAX)) {
                        finish(r, -ETIMEDOUT, 0, NULL, 0);
                        return;
                }
                r->step = STEP_HEADERS;
                nng_http_conn_read_res(r->conn, r->res, r->aio);
                return;
        case STEP_HEADERS:
                on_headers(r);
                return;
        case STEP_TRANSACT:
                on_transact(r);
                return;
        case STEP_STREAM:
                break;
        }
}

static int on_wake(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        HttpClient *c = userdata;
        uint64_t v;
        HttpRequest *r;

        (void) !read(c->efd, &v, sizeof v);
        /* one at a time: a callback may cancel a request that is also queued */
        while ((r = ready_pop(c)))
                advance(r);
        return 0;
}

static void origin_free(Origin *o) {
        if (!o)
                return;
        for (size_t i = 0; i < o->n_idle; i++)
                nng_http_conn_close(o->idle[i].conn);
        if (o->client)
                nng_http_client_free(o->client);
        if (o->tls)
                nng_tls_config_free(o->tls);
        free(o->key);
        free(o);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Origin *, origin_free);

int http_client_new(sd_event *e, HttpClient **ret) {
        HttpClient *c = calloc(1, sizeof *c);
        int r;
        if (!c)
                return -ENOMEM;
        pthread_mutex_init(&c->lock, NULL);
        c->event = sd_event_ref(e);
        c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->efd < 0) {
                r = -errno;
                http_client_free(c);
                return r;
        }
        r = sd_event_add_io(e, &c->wake, c->efd, EPOLLIN, on_wake, c);
        if (r < 0) {
                http_client_free(c);
                return r;
        }
        (void) sd_event_source_set_description(c->wake, "http-nng");
        *ret = c;
        return 0;
}

HttpClient *http_client_free(HttpClient *c) {
        if (!c)
                return NULL;
        while (c->requests) {
                HttpRequest *r = c->requests;
                r->unsettled = true; /* in flight: its connection closes off the loop */
                request_unlink(r);
                http_request_free(r);
        }
        for (size_t i = 0; i < c->n_origins; i++)
                origin_free(c->origins[i]);
        sd_event_source_disable_unref(c->wake);
        if (c->efd >= 0)
                close(c->efd);
        sd_event_unref(c->event);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return NULL;
}

size_t http_client_in_flight(const HttpClient *c) {
        return c ? c->n : 0;
}

/* ---- origins and TLS ------------------------------------------------------------------ */

/* mbedTLS takes a client key without looking at its certificate; OpenSSL refuses a key that
 * does not match, and so does this backend, at once rather than at a server that asks. */
static int check_pair(const char *cert, const char *key) {
        mbedtls_x509_crt crt;
        mbedtls_pk_context pk;
        int k = -EKEYREJECTED;

        mbedtls_x509_crt_init(&crt);
        mbedtls_pk_init(&pk);
        if (mbedtls_x509_crt_parse(&crt, (const unsigned char *) cert, strlen(cert) + 1) == 0 &&
            mbedtls_pk_parse_key(&pk, (const unsigned char *) key, strlen(key) + 1, NULL, 0) == 0 &&
            mbedtls_pk_check_pair(&crt.pk, &pk) == 0)
                k = 0;
        mbedtls_pk_free(&pk);
        mbedtls_x509_crt_free(&crt);
        return k;
}

static int tls_config(const Tls *t, const char *host, nng_tls_config **ret) {
        nng_tls_config *cfg = NULL;
        int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
        if (rv != 0)
                return nng_to_errno(rv);
        rv = nng_tls_config_server_name(cfg, t->server_name ? t->server_name : host);
        if (rv == 0)
                rv = nng_tls_config_auth_mode(cfg, t->skip_verify ? NNG_TLS_AUTH_MODE_NONE
                                                                  : NNG_TLS_AUTH_MODE_REQUIRED);
        if (rv == 0 && !t->skip_verify) {
                if (t->ca_pem) {
                        rv = nng_tls_config_ca_chain(cfg, t->ca_pem, NULL);
                } else if (t->ca_file) {
                        rv = nng_tls_config_ca_file(cfg, t->ca_file);
                } else {
                        rv = NNG_ENOENT;
                        for (size_t i = 0; i < ELEMENTSOF(system_cas) && rv != 0; i++)
                                if (access(system_cas[i], R_OK) == 0)
                                        rv = nng_tls_config_ca_file(cfg, system_cas[i]);
                }
        }
        if (rv == 0 && t->cert_file && t->key_file) {
                _cleanup_free_ char *cert = NULL, *key = NULL;
                int k = read_file_bounded(t->cert_file, HTTP_PEM_MAX, &cert, NULL);
                if (k >= 0)
                        k = read_file_bounded(t->key_file, HTTP_PEM_MAX, &key, NULL);
                if (k >= 0)
                        k = check_pair(cert, key);
                if (k < 0) {
                        if (key)
                                explicit_bzero(key, strlen(key));
                        nng_tls_config_free(cfg);
                        return k;
                }
                rv = nng_tls_config_own_cert(cfg, cert, key, NULL);
                explicit_bzero(key, strlen(key));
        }
        if (rv != 0) {
                nng_tls_config_free(cfg);
                return rv == NNG_ENOENT ? -ENOENT : rv == NNG_EINVAL || rv == NNG_ECRYPTO ? -EKEYREJECTED
                                                                                          : nng_to_errno(rv);
        }
        *ret = cfg;
        return 0;
}

static int origin_get(HttpClient *c, HttpRequest *r, Origin **ret) {
        const nng_url *u = r->nurl;
        bool https = streq(u->u_scheme, "https");
        const Tls *t = &r->tls;
        _cleanup_free_ char *key = NULL;

        if (asprintf(&key, "%s://%s:%s\n%s\n%s\n%s\n%s\n%s\n%d", u->u_scheme, u->u_hostname, u->u_port,
                     https ? strempty(t->ca_file) : "", https ? strempty(t->ca_pem) : "",
                     https ? strempty(t->cert_file) : "", https ? strempty(t->key_file) : "",
                     https ? strempty(t->server_name) : "", https && t->skip_verify) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < c->n_origins; i++)
                if (streq(c->origins[i]->key, key)) {
                        *ret = c->origins[i];
                        return 0;
                }
        if (c->n_origins == HTTP_MAX_ORIGINS) {
                /* the oldest unused one makes room */
                size_t i = 0;
                while (i < c->n_origins && c->origins[i]->users)
                        i++;
                if (i == c->n_origins)
                        return -EBUSY;
                origin_free(c->origins[i]);
                memmove(&c->origins[i], &c->origins[i + 1], (c->n_origins - i - 1) * sizeof(Origin *));
                c->n_origins--;
        }
        _cleanup_(origin_freep) Origin *o = calloc(1, sizeof *o);
        if (!o)
                return -ENOMEM;
        int rv = nng_http_client_alloc(&o->client, u);
        if (rv != 0)
                return nng_to_errno(rv);
        if (https) {
                int k = tls_config(t, u->u_hostname, &o->tls);
                if (k >= 0 && (rv = nng_http_client_set_tls(o->client, o->tls)) != 0)
                        k = nng_to_errno(rv);
                if (k < 0)
                        return k;
        }
        o->key = TAKE_PTR(key);
        c->origins[c->n_origins++] = o;
        *ret = TAKE_PTR(o);
        return 0;
}

/* ---- requests ------------------------------------------------------------------------- */

int http_request_new(HttpClient *c, const char *method, const char *url, HttpRequest **ret) {
        HttpRequest *r = calloc(1, sizeof *r);
        int rv;
        if (!r)
                return -ENOMEM;
        r->client = c;
        r->max_body = HTTP_DEFAULT_MAX_BODY;
        r->connect_ms = 3000;
        r->total_ms = 30000;
        r->url = strdup(url);
        if (!r->url) {
                free(r);
                return -ENOMEM;
        }
        if ((rv = nng_url_parse(&r->nurl, url)) != 0 ||
            !(streq(r->nurl->u_scheme, "http") || streq(r->nurl->u_scheme, "https"))) {
                http_request_free(r);
                return -EINVAL;
        }
        if ((rv = nng_http_req_alloc(&r->req, r->nurl)) != 0 || (rv = nng_http_res_alloc(&r->res)) != 0 ||
            (rv = nng_http_req_set_method(r->req, method)) != 0 ||
            (rv = nng_aio_alloc(&r->aio, on_aio, r)) != 0) {
                http_request_free(r);
                return nng_to_errno(rv);
        }
        *ret = r;
        return 0;
}

static void tls_done(Tls *t) {
        free(t->ca_file);
        free(t->ca_pem);
        free(t->cert_file);
        free(t->key_file);
        free(t->server_name);
        *t = (Tls) { 0 };
}

HttpRequest *http_request_free(HttpRequest *r) {
        if (!r)
                return NULL;
        if (r->started) {
                r->unsettled = true; /* cancelled in flight */
                request_unlink(r);
        }
        conn_close(r); /* also frees it */
        if (r->origin)
                r->origin->users--;
        if (r->aio)
                nng_aio_free(r->aio);
        if (r->req)
                nng_http_req_free(r->req);
        if (r->res)
                nng_http_res_free(r->res);
        if (r->nurl)
                nng_url_free(r->nurl);
        tls_done(&r->tls);
        free(r->buf);
        free(r->url);
        free(r);
        return NULL;
}

int http_request_add_header(HttpRequest *r, const char *name, const char *value) {
        return nng_to_errno(nng_http_req_add_header(r->req, name, value));
}

int http_request_set_body(HttpRequest *r, const void *body, size_t len) {
        char cl[32];
        /* NNG allocates a copy; of nothing it cannot (an empty PUT: only the length is sent) */
        int rv = len ? nng_http_req_copy_data(r->req, body, len) : 0;
        if (rv == 0) {
                snprintf(cl, sizeof cl, "%zu", len);
                rv = nng_http_req_set_header(r->req, "Content-Length", cl);
        }
        return nng_to_errno(rv);
}

void http_request_set_timeouts(HttpRequest *r, uint64_t connect_ms, uint64_t total_ms) {
        r->connect_ms = connect_ms;
        r->total_ms = total_ms;
}

void http_request_set_max_body(HttpRequest *r, size_t max) {
        r->max_body = max;
}

int http_request_set_tls(HttpRequest *r, const char *ca_file, const char *ca_pem, size_t ca_pem_len,
                         const char *cert_file, const char *key_file, bool skip_verify) {
        Tls t = { .skip_verify = skip_verify, .set = true, .ca_pem_len = ca_pem_len };
        if ((ca_file && !(t.ca_file = strdup(ca_file))) || (cert_file && !(t.cert_file = strdup(cert_file))) ||
            (key_file && !(t.key_file = strdup(key_file))) || (ca_pem && !(t.ca_pem = strndup(ca_pem, ca_pem_len))) ||
            (r->tls.server_name && !(t.server_name = strdup(r->tls.server_name)))) {
                tls_done(&t);
                return -ENOMEM;
        }
        tls_done(&r->tls);
        r->tls = t;
        return 0;
}

int http_request_set_server_name(HttpRequest *r, const char *name) {
        return free_and_strdup(&r->tls.server_name, name);
}

int http_request_set_sigv4(HttpRequest *r, const char *provider, const char *access_key,
                           const char *secret_key, const char *session_token) {
        /* the agent signs nothing; AWS APIs are the coordinator's (lib/http-curl.c) */
        return -EOPNOTSUPP;
}

void http_request_set_stream(HttpRequest *r, http_chunk_t chunk) {
        r->chunk = chunk;
}

int http_request_start(HttpRequest *r, http_done_t done, void *userdata) {
        HttpClient *c = r->client;
        Origin *o = NULL;
        int k;

        r->done = done;
        r->userdata = userdata;
        k = origin_get(c, r, &o);
        if (k >= 0) {
                r->origin = o;
                o->users++;
                /* a stream as HTTP/1.0, so that its body comes unchunked and ends with the connection */
                if (r->chunk)
                        k = nng_to_errno(nng_http_req_set_version(r->req, "HTTP/1.0"));
        }
        if (k == -ENOMEM) {
                http_request_free(r);
                return k;
        }
        r->deadline_usec = now_usec() + r->total_ms * USEC_PER_MSEC;
        r->started = true;
        r->next = c->requests;
        if (c->requests)
                c->requests->prev = r;
        c->requests = r;
        c->n++;
        if (k < 0) {
                log_debug("%s: %s", r->url, strerror(-k));
                r->fail = k;
                on_aio(r);
                return 0;
        }
        while (!r->chunk && o->n_idle > 0) { /* the newest first */
                o->n_idle--;
                nng_http_conn *idle = o->idle[o->n_idle].conn;
                const Socks *socks = &o->idle[o->n_idle].socks;
                if (now_usec() - o->idle[o->n_idle].since < HTTP_IDLE_MAX_USEC &&
                    (!o->tls || socks_open(socks, url_port(r->nurl)))) {
                        r->conn = idle;
                        r->socks = *socks;
                        r->reused = true;
                        r->step = STEP_TRANSACT;
                        nng_aio_set_timeout(r->aio, (nng_duration) r->total_ms);
                        nng_http_conn_transact(r->conn, r->req, r->res, r->aio);
                        return 0;
                }
                nng_http_conn_close(idle);
        }
        request_connect(r);
        return 0;
}

void http_request_cancel(HttpRequest *r) {
        http_request_free(r);
}

const char *http_request_header(HttpRequest *r, const char *name) {
        return nng_http_res_get_header(r->res, name);
}

const char *http_request_url(const HttpRequest *r) {
        return r->url;
}

void *http_request_userdata(const HttpRequest *r) {
        return r->userdata;
}
