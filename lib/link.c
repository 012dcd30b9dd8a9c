/* SPDX-License-Identifier: Apache-2.0 */
/* The agent <-> coordinator link: NNG REQ/REP on the sd-event loop, TLS, a fast path. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fileio.h"
#include "link.h"
#include "log.h"
#include "macro.h"

#define LINK_REPLY_MAX 4096
#define LINK_PEM_MAX (256 * 1024)

int link_errno(int e) {
        switch (e) {
        case 0:
                return 0;
        case NNG_EINTR:
                return -EINTR;
        case NNG_ENOMEM:
                return -ENOMEM;
        case NNG_EINVAL:
                return -EINVAL;
        case NNG_EBUSY:
                return -EBUSY;
        case NNG_ETIMEDOUT:
                return -ETIMEDOUT;
        case NNG_ECONNREFUSED:
                return -ECONNREFUSED;
        case NNG_ECLOSED:
                return -EBADF;
        case NNG_EAGAIN:
                return -EAGAIN;
        case NNG_ENOTSUP:
                return -EOPNOTSUPP;
        case NNG_EADDRINUSE:
                return -EADDRINUSE;
        case NNG_ESTATE:
                return -EPROTO;
        case NNG_ENOENT:
                return -ENOENT;
        case NNG_EPROTO:
                return -EPROTO;
        case NNG_EUNREACHABLE:
                return -EHOSTUNREACH;
        case NNG_EADDRINVAL:
                return -EADDRNOTAVAIL;
        case NNG_EPERM:
                return -EPERM;
        case NNG_EMSGSIZE:
                return -EMSGSIZE;
        case NNG_ECONNABORTED:
                return -ECONNABORTED;
        case NNG_ECONNRESET:
                return -ECONNRESET;
        case NNG_ECANCELED:
                return -ECANCELED;
        case NNG_ENOFILES:
                return -EMFILE;
        case NNG_ENOSPC:
                return -ENOSPC;
        case NNG_EEXIST:
                return -EEXIST;
        case NNG_EREADONLY:
        case NNG_EWRITEONLY:
                return -EACCES;
        case NNG_ECRYPTO:
        case NNG_EPEERAUTH:
                return -EKEYREJECTED;
        case NNG_ENOARG:
        case NNG_EAMBIGUOUS:
        case NNG_EBADTYPE:
                return -EINVAL;
        case NNG_ECONNSHUT:
                return -ESHUTDOWN;
        default:
                return -EIO;
        }
}

int link_url_check(const char *url, bool insecure, const char **ret_why) {
        const char *why = NULL;
        if (isempty(url))
                why = "no address given";
        else if (strncmp(url, "tls+tcp://", 10) == 0 || strncmp(url, "tls+tcp4://", 11) == 0 ||
                 strncmp(url, "tls+tcp6://", 11) == 0)
                return 0;
        else if (strncmp(url, "tcp://", 6) == 0 || strncmp(url, "tcp4://", 7) == 0 ||
                 strncmp(url, "tcp6://", 7) == 0 || strncmp(url, "ipc://", 6) == 0) {
                if (insecure)
                        return 0;
                why = "plain tcp:// and ipc:// need the explicit insecure setting; use tls+tcp://";
        } else
                why = "unsupported transport (use tls+tcp://HOST:PORT)";
        if (ret_why)
                *ret_why = why;
        return -EPERM;
}

static bool url_is_tls(const char *url) {
        return strncmp(url, "tls+", 4) == 0;
}

static void tls_config_freep(nng_tls_config **c) {
        if (*c)
                nng_tls_config_free(*c);
}

/* Build the TLS configuration; the caller sets it on a dialer/listener and frees its reference
 * (the endpoint holds its own). */
static int tls_config_build(const LinkTls *tls, bool server, const char *url, nng_tls_config **ret) {
        _cleanup_(tls_config_freep) nng_tls_config *cfg = NULL;
        int r;

        if (!tls)
                return -EINVAL;
        r = nng_tls_config_alloc(&cfg, server ? NNG_TLS_MODE_SERVER : NNG_TLS_MODE_CLIENT);
        if (r != 0)
                return link_errno(r);

        if (server) {
                if (isempty(tls->cert_file) || isempty(tls->key_file))
                        return -ENOKEY;
                _cleanup_free_ char *cert = NULL, *key = NULL;
                r = read_file_bounded(tls->cert_file, LINK_PEM_MAX, &cert, NULL);
                if (r < 0)
                        return r;
                r = read_secret_file(tls->key_file, LINK_PEM_MAX, &key, NULL); /* -EPERM: others may read it */
                if (r < 0)
                        return r;
                r = nng_tls_config_own_cert(cfg, cert, key, NULL);
                explicit_bzero(key, strlen(key));
                if (r != 0)
                        return link_errno(r);
                r = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_NONE);
                if (r != 0)
                        return link_errno(r);
        } else {
                if (isempty(tls->ca_file))
                        return -ENOKEY;
                r = nng_tls_config_ca_file(cfg, tls->ca_file);
                if (r != 0)
                        return link_errno(r);
                r = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED);
                if (r != 0)
                        return link_errno(r);
                char host[256];
                const char *name = tls->server_name;
                if (isempty(name)) {
                        /* the URL's host: tls+tcp://HOST:PORT */
                        const char *h = strstr(url, "://");
                        h = h ? h + 3 : url;
                        size_t l = strcspn(h, ":/");
                        if (*h == '[') { /* [v6]:port */
                                h++;
                                l = strcspn(h, "]");
                        }
                        if (l == 0 || l >= sizeof host)
                                return -EINVAL;
                        memcpy(host, h, l);
                        host[l] = 0;
                        name = host;
                }
                r = nng_tls_config_server_name(cfg, name);
                if (r != 0)
                        return link_errno(r);
        }
        *ret = TAKE_PTR(cfg);
        return 0;
}

/* ---- server ---------------------------------------------------------------------------- */

/* The REP socket is served through LINK_SERVER_CONTEXTS contexts, each with its own aio. NNG's
 * threads receive (into a context) and send (from it). A request goes first to the optional fast
 * handler, in the NNG thread that received it (the coordinator answers unchanged reports there);
 * otherwise it is queued for the handler on the sd-event loop, which is woken through an eventfd
 * only when the queue was empty, so one wake-up carries every request that arrived meanwhile.
 * Unlike a polled NNG_OPT_RECVFD, no aio is allocated per nng_recvmsg()/nng_sendmsg(), and a
 * context's send waits for the pipe to finish the previous reply instead of being refused. */
#define LINK_SERVER_CONTEXTS 256
#define LINK_SERVER_BATCH 256
#define LINK_SEND_TIMEOUT_MS 5000

typedef struct LinkCtx LinkCtx;
struct LinkCtx {
        LinkServer *server;
        nng_ctx ctx;
        nng_aio *aio;
        bool sending;
        nng_msg *msg; /* a received request, while queued */
        uint64_t received_usec; /* when it was received: the peer's activity, not our handling */
        LinkCtx *next;
};

struct LinkServer {
        nng_socket sock;
        bool open;
        sd_event_source *io;
        int wake_fd;
        link_handler_t handler;
        _Atomic(link_fast_t) fast;
        void *userdata;
        uint64_t handled;
        _Atomic uint64_t fast_handled;
        _Atomic uint64_t dropped;
        pthread_mutex_t lock; /* guards queue and closing */
        LinkCtx *queue, **queue_tail;
        bool closing;
        LinkGuard *guard;             /* NULL: no limits */
        sd_event_source *sweep;
        LinkCtx ctxs[LINK_SERVER_CONTEXTS];
};

uint64_t link_server_dropped(const LinkServer *s) {
        return s ? atomic_load(&((LinkServer *) s)->dropped) : 0;
}

int link_server_close_peers(LinkServer *s) {
        if (!s || !s->guard)
                return -EOPNOTSUPP;
        size_t n = link_guard_close_all(s->guard);
        return (int) MIN(n, (size_t) INT32_MAX);
}

uint64_t link_server_handled(const LinkServer *s) {
        return s ? s->handled + atomic_load(&((LinkServer *) s)->fast_handled) : 0;
}

void link_server_guard_stats(LinkServer *s, LinkGuardStats *ret) {
        *ret = (LinkGuardStats) {};
        if (s && s->guard)
                link_guard_stats(s->guard, ret);
}

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void request_seen(LinkServer *s, nng_msg *msg, bool authenticated, uint64_t received_usec) {
        if (s->guard)
                link_guard_seen(s->guard, nng_msg_get_pipe(msg), authenticated, received_usec);
}

void link_server_set_fast(LinkServer *s, link_fast_t fast) {
        atomic_store(&s->fast, fast);
}

static void ctx_recv(LinkCtx *x) {
        x->sending = false;
        nng_aio_set_timeout(x->aio, NNG_DURATION_INFINITE);
        nng_ctx_recv(x->ctx, x->aio);
}

/* Send the reply in msg (reusing the request: the context keeps REP's routing back-trace). */
static void ctx_reply(LinkCtx *x, nng_msg *msg, const uint8_t *reply, size_t len) {
        nng_msg_clear(msg);
        int r = nng_msg_append(msg, reply, len);
        if (r != 0) {
                nng_msg_free(msg);
                atomic_fetch_add(&x->server->dropped, 1);
                log_debug("link: reply dropped: %s", nng_strerror(r));
                ctx_recv(x);
                return;
        }
        nng_aio_set_msg(x->aio, msg);
        nng_aio_set_timeout(x->aio, LINK_SEND_TIMEOUT_MS);
        x->sending = true;
        nng_ctx_send(x->ctx, x->aio); /* the callback frees it if the send fails */
}

/* NNG's thread: a request arrived (answered at once by the fast handler, or queued for the
 * loop) or a reply left (receive again). */
static void ctx_on_aio(void *userdata) {
        LinkCtx *x = userdata;
        LinkServer *s = x->server;
        int r = nng_aio_result(x->aio);

        if (x->sending) {
                if (r != 0) {
                        /* the message is still ours after a failed send */
                        nng_msg_free(nng_aio_get_msg(x->aio));
                        atomic_fetch_add(&s->dropped, 1);
                }
                if (r == NNG_ECLOSED || r == NNG_ECANCELED)
                        return;
                ctx_recv(x);
                return;
        }
        if (r == NNG_ECLOSED || r == NNG_ECANCELED)
                return;
        if (r != 0) {
                ctx_recv(x);
                return;
        }
        x->msg = nng_aio_get_msg(x->aio);
        x->received_usec = s->guard ? monotonic_usec() : 0;
        link_fast_t fast = atomic_load(&s->fast);
        if (fast) {
                uint8_t reply[LINK_REPLY_MAX];
                size_t len = 0;
                if (fast(nng_msg_body(x->msg), nng_msg_len(x->msg), reply, sizeof reply, &len,
                         s->userdata) > 0 && len <= sizeof reply) {
                        nng_msg *msg = TAKE_PTR(x->msg);
                        atomic_fetch_add(&s->fast_handled, 1);
                        request_seen(s, msg, true, x->received_usec);
                        ctx_reply(x, msg, reply, len);
                        return;
                }
        }
        x->next = NULL;
        pthread_mutex_lock(&s->lock);
        bool wake = !s->queue && !s->closing;
        *s->queue_tail = x;
        s->queue_tail = &x->next;
        pthread_mutex_unlock(&s->lock);
        if (wake) {
                uint64_t one = 1;
                (void) !write(s->wake_fd, &one, sizeof one);
        }
}

/* The loop: answer what is queued, at most LINK_SERVER_BATCH requests before yielding. */
static int server_on_io(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        LinkServer *s = userdata;
        uint8_t reply[LINK_REPLY_MAX];
        uint64_t n;
        LinkCtx *batch, *rest;

        (void) !read(s->wake_fd, &n, sizeof n);
        pthread_mutex_lock(&s->lock);
        batch = s->queue;
        rest = batch;
        for (unsigned i = 0; rest && i < LINK_SERVER_BATCH; i++)
                rest = rest->next;
        s->queue = rest;
        if (!rest)
                s->queue_tail = &s->queue;
        pthread_mutex_unlock(&s->lock);
        if (rest) { /* more than one batch: come back after the loop's other sources */
                uint64_t one = 1;
                (void) !write(s->wake_fd, &one, sizeof one);
        }

        while (batch != rest) {
                LinkCtx *x = batch;
                nng_msg *msg = x->msg;
                batch = x->next;
                x->msg = NULL;
                s->handled++;
                size_t len = 0;
                int r = s->handler(nng_msg_body(msg), nng_msg_len(msg), reply, sizeof reply, &len,
                                   s->userdata);
                request_seen(s, msg, r > 0, x->received_usec);
                if (r < 0 || len > sizeof reply) {
                        nng_msg_free(msg); /* no reply: the peer's request times out */
                        ctx_recv(x);
                        continue;
                }
                ctx_reply(x, msg, reply, len);
        }
        return 0;
}

#define LINK_SWEEP_USEC (1000 * 1000ULL)

static int server_on_sweep(sd_event_source *es, uint64_t usec, void *userdata) {
        LinkServer *s = userdata;
        size_t n = link_guard_sweep(s->guard, monotonic_usec());
        if (n > 0)
                log_debug("link: closed %zu connections that did not authenticate in time or fell idle.", n);
        return sd_event_source_set_time(es, usec + LINK_SWEEP_USEC);
}

int link_server_new(sd_event *e, const char *url, const LinkTls *tls, size_t max_msg,
                    const LinkLimits *limits, link_handler_t handler, void *userdata, LinkServer **ret) {
        _cleanup_(link_server_freep) LinkServer *s = NULL;
        nng_listener l;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->handler = handler;
        s->userdata = userdata;
        s->wake_fd = -EBADF;
        s->queue_tail = &s->queue;
        pthread_mutex_init(&s->lock, NULL);
        s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->wake_fd < 0)
                return -errno;

        r = nng_rep0_open(&s->sock);
        if (r != 0)
                return link_errno(r);
        s->open = true;

        if (limits) {
                r = link_guard_new(limits, &s->guard);
                if (r >= 0)
                        r = link_guard_attach(s->guard, s->sock);
                if (r >= 0)
                        r = sd_event_add_time_relative(e, &s->sweep, CLOCK_MONOTONIC, LINK_SWEEP_USEC,
                                                       100 * 1000, server_on_sweep, s);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_enabled(s->sweep, SD_EVENT_ON);
        }
        r = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, max_msg);
        if (r == 0)
                r = nng_listener_create(&l, s->sock, url);
        if (r == 0 && url_is_tls(url)) {
                _cleanup_(tls_config_freep) nng_tls_config *cfg = NULL;
                int k = tls_config_build(tls, true, url, &cfg);
                if (k < 0)
                        return k;
                r = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
        }
        if (r == 0)
                r = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, max_msg);
        for (size_t i = 0; r == 0 && i < LINK_SERVER_CONTEXTS; i++) {
                LinkCtx *x = &s->ctxs[i];
                x->server = s;
                r = nng_ctx_open(&x->ctx, s->sock);
                if (r == 0)
                        r = nng_aio_alloc(&x->aio, ctx_on_aio, x);
        }
        if (r != 0)
                return link_errno(r);
        r = sd_event_add_io(e, &s->io, s->wake_fd, EPOLLIN, server_on_io, s);
        if (r < 0)
                return r;
        (void) sd_event_source_set_description(s->io, "link-server");
        r = nng_listener_start(l, 0);
        if (r != 0)
                return link_errno(r);
        if (s->guard) {
                nng_sockaddr sa;
                if (nng_listener_get_addr(l, NNG_OPT_LOCADDR, &sa) == 0)
                        link_guard_set_port(s->guard, sa.s_family == NNG_AF_INET    ? sa.s_in.sa_port
                                                      : sa.s_family == NNG_AF_INET6 ? sa.s_in6.sa_port
                                                                                    : 0);
        }
        for (size_t i = 0; i < LINK_SERVER_CONTEXTS; i++)
                ctx_recv(&s->ctxs[i]);
        *ret = TAKE_PTR(s);
        return 0;
}

LinkServer *link_server_free(LinkServer *s) {
        if (!s)
                return NULL;
        sd_event_source_disable_unref(s->io);
        sd_event_source_disable_unref(s->sweep);
        pthread_mutex_lock(&s->lock);
        s->closing = true;
        pthread_mutex_unlock(&s->lock);
        if (s->open)
                nng_close(s->sock); /* every context's operation ends with NNG_ECLOSED */
        for (size_t i = 0; i < LINK_SERVER_CONTEXTS; i++)
                if (s->ctxs[i].aio)
                        nng_aio_free(s->ctxs[i].aio); /* waits for its callback */
        for (LinkCtx *x = s->queue; x; x = x->next)
                nng_msg_free(x->msg);
        if (s->wake_fd >= 0)
                close(s->wake_fd);
        pthread_mutex_destroy(&s->lock);
        link_guard_free(s->guard); /* after nng_close(): no pipe callback runs any more */
        free(s);
        return NULL;
}

/* ---- client ---------------------------------------------------------------------------- */

struct LinkClient {
        nng_socket sock;
        bool open;
        sd_event *event;
        sd_event_source *io;
        sd_event_source *timeout;
        bool in_flight;
        link_reply_t cb;
        void *userdata;
};

bool link_client_in_flight(const LinkClient *c) {
        return c && c->in_flight;
}

static int client_on_io(sd_event_source *es, int fd, uint32_t revents, void *userdata) {
        LinkClient *c = userdata;

        for (unsigned i = 0; i < 16; i++) {
                nng_msg *msg = NULL;
                int r = nng_recvmsg(c->sock, &msg, NNG_FLAG_NONBLOCK);
                if (r == NNG_EAGAIN || r == NNG_ESTATE) /* ESTATE: no request outstanding */
                        break;
                if (r != 0) {
                        log_debug("link: client recv failed: %s", nng_strerror(r));
                        break;
                }
                if (!c->in_flight) { /* a late reply to an abandoned request */
                        nng_msg_free(msg);
                        continue;
                }
                c->in_flight = false;
                (void) sd_event_source_set_enabled(c->timeout, SD_EVENT_OFF);
                c->cb(c, 0, nng_msg_body(msg), nng_msg_len(msg), c->userdata);
                nng_msg_free(msg);
        }
        return 0;
}

static int client_on_timeout(sd_event_source *es, uint64_t usec, void *userdata) {
        LinkClient *c = userdata;
        if (!c->in_flight)
                return 0;
        c->in_flight = false;
        c->cb(c, -ETIMEDOUT, NULL, 0, c->userdata);
        return 0;
}

int link_client_new(sd_event *e, const char *url, const LinkTls *tls, size_t max_msg,
                    uint64_t reconnect_max_ms, link_reply_t cb, void *userdata, LinkClient **ret) {
        _cleanup_free_ LinkClient *c = NULL;
        nng_dialer d;
        int r, fd;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = e;
        c->cb = cb;
        c->userdata = userdata;

        r = nng_req0_open(&c->sock);
        if (r != 0)
                return link_errno(r);
        c->open = true;

        r = nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, max_msg);
        /* Level-triggered: we send a fresh report rather than resend a stale one. */
        if (r == 0)
                r = nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
        if (r == 0)
                r = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 100);
        if (r == 0)
                r = nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT,
                                      (nng_duration) MIN(MAX(reconnect_max_ms, 100u), 60000u));
        if (r == 0)
                r = nng_dialer_create(&d, c->sock, url);
        if (r == 0 && url_is_tls(url)) {
                _cleanup_(tls_config_freep) nng_tls_config *cfg = NULL;
                int k = tls_config_build(tls, false, url, &cfg);
                if (k < 0) {
                        nng_close(c->sock);
                        return k;
                }
                r = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
        }
        if (r == 0)
                r = nng_dialer_set_size(d, NNG_OPT_RECVMAXSZ, max_msg);
        /* Non-blocking: NNG keeps redialling in the background with its back-off. */
        if (r == 0)
                r = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
        if (r == 0)
                r = nng_socket_get_int(c->sock, NNG_OPT_RECVFD, &fd);
        if (r != 0) {
                nng_close(c->sock);
                return link_errno(r);
        }
        r = sd_event_add_io(e, &c->io, fd, EPOLLIN, client_on_io, c);
        if (r >= 0)
                r = sd_event_add_time(e, &c->timeout, CLOCK_MONOTONIC, UINT64_MAX, 1,
                                      client_on_timeout, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->timeout, SD_EVENT_OFF);
        if (r < 0) {
                sd_event_source_disable_unref(c->io);
                sd_event_source_disable_unref(c->timeout);
                nng_close(c->sock);
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int link_client_send(LinkClient *c, const void *buf, size_t len, uint64_t timeout_usec) {
        nng_msg *msg = NULL;
        uint64_t now;
        int r;

        r = nng_msg_alloc(&msg, 0);
        if (r != 0)
                return link_errno(r);
        r = nng_msg_append(msg, buf, len);
        if (r == 0)
                r = nng_sendmsg(c->sock, msg, NNG_FLAG_NONBLOCK);
        if (r != 0) {
                nng_msg_free(msg);
                return link_errno(r);
        }
        c->in_flight = true;
        r = sd_event_now(c->event, CLOCK_MONOTONIC, &now);
        if (r < 0)
                return r;
        r = sd_event_source_set_time(c->timeout, now + timeout_usec);
        if (r < 0)
                return r;
        return sd_event_source_set_enabled(c->timeout, SD_EVENT_ONESHOT);
}

LinkClient *link_client_free(LinkClient *c) {
        if (!c)
                return NULL;
        sd_event_source_disable_unref(c->io);
        sd_event_source_disable_unref(c->timeout);
        if (c->open)
                nng_close(c->sock);
        free(c);
        return NULL;
}
