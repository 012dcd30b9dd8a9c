/* SPDX-License-Identifier: Apache-2.0 */
/* Limits on link peers before and after they authenticate: counts per source, time-outs. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "grow.h"
#include "hash.h"
#include "link-guard.h"

#define BUCKETS 4096 /* pipes, by id */
#define SOURCES 4096 /* source addresses, by hash */
/* Bytes arriving on an authenticated connection keep it from being closed as idle for at most
 * this many idle timeouts after its last request was received (a peer trickling bytes that never
 * make a request is still closed). */
#define IDLE_ARRIVAL_MAX 5

typedef struct Source Source;
struct Source {
        Source *next;
        uint8_t addr[17]; /* family, then up to 16 bytes */
        size_t pipes, unauthenticated;
};

typedef struct Pipe Pipe;
/* A peer: family, address, port (network order), comparable with memcmp. */
typedef struct Peer {
        uint8_t b[19];
} Peer;

/* A connection to the listening port that is not a pipe yet. */
typedef struct Handshake {
        Peer peer;
        uint64_t first_usec;
} Handshake;

struct Pipe {
        Pipe *next;
        uint32_t id;
        int fd;          /* its descriptor, once a sweep found it (-1: not yet) */
        Peer peer;
        Source *source;
        uint64_t added_usec, seen_usec;
        uint64_t arrived_usec; /* the kernel's last data on its descriptor, when a sweep asked */
        bool authenticated;
        bool closing;
};

struct LinkGuard {
        pthread_mutex_t lock;
        LinkLimits limits;
        Pipe *pipes[BUCKETS];
        Source *sources[SOURCES];
        LinkGuardStats stats;
        uint16_t port;                /* network order; 0: no handshake sweep */
        Handshake *handshakes;        /* sorted by peer, from the last sweep */
        size_t n_handshakes;
};

/* Descriptors a sweep found to be a pipe's, of any guard in the process (a bit per descriptor):
 * every guard's sweep skips them without a system call until their pipe goes, so the agents'
 * link and the HTTP servers do not look at each other's connections every second. Taken after
 * a guard's own lock, never before. */
static struct {
        pthread_mutex_t lock;
        uint64_t *bits;
        size_t n;     /* in bits */
        size_t users; /* guards alive: the last one frees the bits */
} pipe_fds = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void pipe_fds_clear(int fd) {
        pthread_mutex_lock(&pipe_fds.lock);
        if ((size_t) fd < pipe_fds.n)
                pipe_fds.bits[fd / 64] &= ~(UINT64_C(1) << (fd % 64));
        pthread_mutex_unlock(&pipe_fds.lock);
}

static bool pipe_fds_set(int fd) {
        bool ok = true;
        pthread_mutex_lock(&pipe_fds.lock);
        if ((size_t) fd >= pipe_fds.n) {
                size_t bits = MAX((size_t) fd + 1, 2 * pipe_fds.n);
                bits = (bits + 63) / 64 * 64;
                uint64_t *b = realloc(pipe_fds.bits, bits / 8);
                if (b) {
                        memset(b + pipe_fds.n / 64, 0, (bits - pipe_fds.n) / 8);
                        pipe_fds.bits = b;
                        pipe_fds.n = bits;
                }
                ok = b != NULL;
        }
        if (ok)
                pipe_fds.bits[fd / 64] |= UINT64_C(1) << (fd % 64);
        pthread_mutex_unlock(&pipe_fds.lock);
        return ok;
}

/* A copy of the bits (NULL and 0 when there are none or on failure). */
static uint64_t *pipe_fds_copy(size_t *ret_n) {
        uint64_t *copy = NULL;
        pthread_mutex_lock(&pipe_fds.lock);
        if (pipe_fds.n > 0 && (copy = malloc(pipe_fds.n / 8)))
                memcpy(copy, pipe_fds.bits, pipe_fds.n / 8);
        *ret_n = copy ? pipe_fds.n : 0;
        pthread_mutex_unlock(&pipe_fds.lock);
        return copy;
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

int link_guard_new(const LinkLimits *limits, LinkGuard **ret) {
        LinkGuard *g = calloc(1, sizeof *g);
        if (!g)
                return -ENOMEM;
        pthread_mutex_init(&g->lock, NULL);
        g->limits = *limits;
        pthread_mutex_lock(&pipe_fds.lock);
        pipe_fds.users++;
        pthread_mutex_unlock(&pipe_fds.lock);
        *ret = g;
        return 0;
}

LinkGuard *link_guard_free(LinkGuard *g) {
        if (!g)
                return NULL;
        for (size_t i = 0; i < BUCKETS; i++)
                while (g->pipes[i]) {
                        Pipe *p = g->pipes[i];
                        g->pipes[i] = p->next;
                        free(p);
                }
        for (size_t i = 0; i < SOURCES; i++)
                while (g->sources[i]) {
                        Source *s = g->sources[i];
                        g->sources[i] = s->next;
                        free(s);
                }
        pthread_mutex_destroy(&g->lock);
        free(g->handshakes);
        free(g);
        pthread_mutex_lock(&pipe_fds.lock);
        if (--pipe_fds.users == 0) {
                free(pipe_fds.bits);
                pipe_fds.bits = NULL;
                pipe_fds.n = 0;
        }
        pthread_mutex_unlock(&pipe_fds.lock);
        return NULL;
}

static void source_key(nng_pipe p, uint8_t key[17], Peer *peer) {
        nng_sockaddr sa;
        memset(key, 0, 17);
        memset(peer, 0, sizeof *peer);
        if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
                return; /* unknown: all such pipes share one source */
        key[0] = (uint8_t) sa.s_family;
        if (sa.s_family == NNG_AF_INET) {
                memcpy(key + 1, &sa.s_in.sa_addr, sizeof sa.s_in.sa_addr);
                memcpy(peer->b + 17, &sa.s_in.sa_port, 2);
        } else if (sa.s_family == NNG_AF_INET6) {
                memcpy(key + 1, sa.s_in6.sa_addr, sizeof sa.s_in6.sa_addr);
                memcpy(peer->b + 17, &sa.s_in6.sa_port, 2);
        }
        memcpy(peer->b, key, 17);
}

static Source **source_slot(LinkGuard *g, const uint8_t key[17]) {
        Source **s = &g->sources[hash_bytes(key, 17) % SOURCES];
        while (*s && memcmp((*s)->addr, key, 17) != 0)
                s = &(*s)->next;
        return s;
}

static Pipe **pipe_slot(LinkGuard *g, uint32_t id) {
        Pipe **p = &g->pipes[id % BUCKETS];
        while (*p && (*p)->id != id)
                p = &(*p)->next;
        return p;
}

/* NNG's thread, before the pipe joins the socket: admit it or close it. */
static void on_add(LinkGuard *g, nng_pipe pipe) {
        uint8_t key[17];
        Peer peer;
        const LinkLimits *l = &g->limits;
        bool refuse = false;

        source_key(pipe, key, &peer);
        pthread_mutex_lock(&g->lock);
        Source **ss = source_slot(g, key);
        if (l->max_pipes && g->stats.pipes >= l->max_pipes) {
                g->stats.refused_total++;
                refuse = true;
        } else if (l->max_pipes_per_source && *ss && (*ss)->pipes >= l->max_pipes_per_source) {
                g->stats.refused_per_source++;
                refuse = true;
        } else if (l->max_unauthenticated && g->stats.unauthenticated >= l->max_unauthenticated) {
                g->stats.refused_unauthenticated++;
                refuse = true;
        } else if (l->max_unauthenticated_per_source && *ss &&
                   (*ss)->unauthenticated >= l->max_unauthenticated_per_source) {
                g->stats.refused_unauthenticated_per_source++;
                refuse = true;
        }
        Pipe *p = refuse ? NULL : calloc(1, sizeof *p);
        if (p && !*ss && !(*ss = calloc(1, sizeof **ss))) {
                free(p);
                p = NULL;
        }
        if (p) {
                memcpy((*ss)->addr, key, sizeof key);
                (*ss)->pipes++;
                (*ss)->unauthenticated++;
                p->id = nng_pipe_id(pipe);
                p->fd = -1;
                p->peer = peer;
                p->source = *ss;
                p->added_usec = p->seen_usec = now_usec();
                Pipe **slot = pipe_slot(g, p->id);
                p->next = *slot;
                *slot = p;
                g->stats.pipes++;
                g->stats.unauthenticated++;
        }
        pthread_mutex_unlock(&g->lock);
        if (!p)
                nng_pipe_close(pipe);
}

static void on_remove(LinkGuard *g, nng_pipe pipe) {
        pthread_mutex_lock(&g->lock);
        Pipe **slot = pipe_slot(g, nng_pipe_id(pipe));
        Pipe *p = *slot;
        if (p) {
                *slot = p->next;
                if (p->fd >= 0) /* the descriptor may be closed and reused: look at it again */
                        pipe_fds_clear(p->fd);
                g->stats.pipes--;
                if (!p->authenticated) {
                        g->stats.unauthenticated--;
                        p->source->unauthenticated--;
                }
                if (--p->source->pipes == 0) {
                        Source **ss = source_slot(g, p->source->addr);
                        Source *s = *ss;
                        *ss = s->next;
                        free(s);
                }
                free(p);
        }
        pthread_mutex_unlock(&g->lock);
}

static void on_pipe_event(nng_pipe pipe, nng_pipe_ev ev, void *userdata) {
        if (ev == NNG_PIPE_EV_ADD_PRE)
                on_add(userdata, pipe);
        else if (ev == NNG_PIPE_EV_REM_POST)
                on_remove(userdata, pipe);
}

int link_guard_attach(LinkGuard *g, nng_socket sock) {
        int r = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, on_pipe_event, g);
        if (r == 0)
                r = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, on_pipe_event, g);
        return r == 0 ? 0 : -EIO;
}

void link_guard_seen(LinkGuard *g, nng_pipe pipe, bool authenticated, uint64_t now) {
        pthread_mutex_lock(&g->lock);
        Pipe *p = *pipe_slot(g, nng_pipe_id(pipe));
        if (p) {
                p->seen_usec = MAX(p->seen_usec, now);
                if (authenticated && !p->authenticated) {
                        p->authenticated = true;
                        g->stats.unauthenticated--;
                        p->source->unauthenticated--;
                }
        }
        pthread_mutex_unlock(&g->lock);
}

static void sweep_handshakes(LinkGuard *g, uint64_t now);

/* TCP_INFO of fd: how much of it the kernel filled (0: not a TCP socket, or no answer). */
static socklen_t fd_tcp_info(int fd, struct tcp_info *ti) {
        socklen_t len = sizeof *ti;
        return getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) < 0 ? 0 : len;
}
#define TCP_INFO_HAS(len, field) ((len) >= offsetof(struct tcp_info, field) + sizeof(((struct tcp_info *) NULL)->field))

/* When the kernel last received data on fd, a TCP socket (false: not one, or no answer). The
 * kernel's clock (jiffies) and ours differ by less than a few milliseconds. */
static bool fd_last_arrival(int fd, uint64_t now, uint64_t *ret) {
        struct tcp_info ti;
        if (!TCP_INFO_HAS(fd_tcp_info(fd, &ti), tcpi_last_data_recv))
                return false;
        uint64_t ago = (uint64_t) ti.tcpi_last_data_recv * 1000;
        *ret = now > ago ? now - ago : 0;
        return true;
}

/* How long ago t was; 0 for a time after now (a request stamped by one of NNG's threads between
 * the sweep's reading of the clock and its taking the lock is fresh, not 584 000 years old). */
static uint64_t age(uint64_t now, uint64_t t) {
        return now > t ? now - t : 0;
}

/* An authenticated pipe past its idle timeout to look at again outside the lock. */
typedef struct IdleCheck {
        uint32_t id;
        int fd;
        uint64_t arrived_usec; /* 0: nothing arrived in time, close it */
} IdleCheck;

size_t link_guard_sweep(LinkGuard *g, uint64_t now) {
        const LinkLimits *l = &g->limits;
        uint32_t close_ids[256];
        IdleCheck checks[256];
        size_t n = 0, n_checks = 0, deferred = 0;

        pthread_mutex_lock(&g->lock);
        for (size_t i = 0; i < BUCKETS && n < ELEMENTSOF(close_ids); i++)
                for (Pipe *p = g->pipes[i]; p && n < ELEMENTSOF(close_ids); p = p->next) {
                        if (p->closing)
                                continue;
                        if (!p->authenticated && l->auth_timeout_usec && age(now, p->added_usec) > l->auth_timeout_usec)
                                g->stats.closed_auth_timeout++;
                        else if (p->authenticated && l->idle_timeout_usec &&
                                 age(now, MAX(p->seen_usec, p->arrived_usec)) > l->idle_timeout_usec) {
                                /* Silent since its last request, or its requests wait unread on
                                 * our side (NNG's threads busy with a crowd's TLS handshakes)?
                                 * The kernel knows when data last arrived. */
                                if (p->fd >= 0 && age(now, p->seen_usec) <= IDLE_ARRIVAL_MAX * l->idle_timeout_usec) {
                                        if (n_checks < ELEMENTSOF(checks))
                                                checks[n_checks++] = (IdleCheck) { p->id, p->fd, 0 };
                                        continue;
                                }
                                g->stats.closed_idle++;
                        } else
                                continue;
                        p->closing = true;
                        close_ids[n++] = p->id;
                }
        pthread_mutex_unlock(&g->lock);

        /* outside the lock: one system call per pipe past its idle timeout */
        for (size_t i = 0; i < n_checks; i++) {
                uint64_t arrived;
                if (fd_last_arrival(checks[i].fd, now, &arrived) && age(now, arrived) <= l->idle_timeout_usec)
                        checks[i].arrived_usec = MAX(arrived, 1u);
        }
        pthread_mutex_lock(&g->lock);
        for (size_t i = 0; i < n_checks; i++) {
                Pipe *p = *pipe_slot(g, checks[i].id);
                if (!p || p->closing || p->fd != checks[i].fd)
                        continue; /* gone meanwhile, or its descriptor forgotten */
                if (checks[i].arrived_usec) {
                        p->arrived_usec = checks[i].arrived_usec;
                        deferred++;
                } else if (n < ELEMENTSOF(close_ids)) {
                        g->stats.closed_idle++;
                        p->closing = true;
                        close_ids[n++] = p->id;
                }
        }
        g->stats.idle_deferred += deferred;
        pthread_mutex_unlock(&g->lock);

        /* outside the lock: closing calls on_remove() */
        for (size_t i = 0; i < n; i++)
                nng_pipe_close((nng_pipe) { .id = close_ids[i] });
        sweep_handshakes(g, now);
        return n;
}

size_t link_guard_close_all(LinkGuard *g) {
        uint32_t close_ids[256];
        size_t n, total = 0;

        do {
                n = 0;
                pthread_mutex_lock(&g->lock);
                for (size_t i = 0; i < BUCKETS && n < ELEMENTSOF(close_ids); i++)
                        for (Pipe *p = g->pipes[i]; p && n < ELEMENTSOF(close_ids); p = p->next)
                                if (!p->closing) {
                                        p->closing = true;
                                        close_ids[n++] = p->id;
                                }
                pthread_mutex_unlock(&g->lock);
                for (size_t i = 0; i < n; i++)
                        nng_pipe_close((nng_pipe) { .id = close_ids[i] });
                total += n;
        } while (n == ELEMENTSOF(close_ids));
        return total;
}

void link_guard_set_port(LinkGuard *g, uint16_t port) {
        pthread_mutex_lock(&g->lock);
        g->port = port;
        pthread_mutex_unlock(&g->lock);
}

/* qsort and bsearch over arrays that may be empty and unallocated (NULL with no elements, which
 * the C library's declarations do not allow). */
static void sort_n(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
        if (n > 1)
                qsort(base, n, size, cmp);
}

static void *find_n(const void *key, const void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
        return n > 0 ? bsearch(key, base, n, size, cmp) : NULL;
}

static int peer_cmp(const void *a, const void *b) {
        return memcmp(a, b, sizeof(Peer));
}

/* The peer of fd when it is a TCP connection to our port; false otherwise. */
static bool fd_peer(int fd, uint16_t port, Peer *ret) {
        struct sockaddr_storage local, remote;
        socklen_t ll = sizeof local, rl = sizeof remote;
        memset(ret, 0, sizeof *ret);
        if (getsockname(fd, (struct sockaddr *) &local, &ll) < 0 || getpeername(fd, (struct sockaddr *) &remote, &rl) < 0)
                return false;
        if (local.ss_family == AF_INET && remote.ss_family == AF_INET) {
                const struct sockaddr_in *lo = (const void *) &local, *re = (const void *) &remote;
                if (lo->sin_port != port)
                        return false;
                ret->b[0] = NNG_AF_INET;
                memcpy(ret->b + 1, &re->sin_addr, 4);
                memcpy(ret->b + 17, &re->sin_port, 2);
                return true;
        }
        if (local.ss_family == AF_INET6 && remote.ss_family == AF_INET6) {
                const struct sockaddr_in6 *lo = (const void *) &local, *re = (const void *) &remote;
                if (lo->sin6_port != port)
                        return false;
                ret->b[0] = NNG_AF_INET6;
                memcpy(ret->b + 1, &re->sin6_addr, 16);
                memcpy(ret->b + 17, &re->sin6_port, 2);
                return true;
        }
        return false;
}

/* Whether a connection can still become a pipe: neither side has shut it down. One that a
 * sweep shut down (or whose peer closed its side) waits for NNG to close its descriptor, which
 * NNG 1.5 does only when it next reads it, and that can take long (seen: FIN-WAIT-2 for more
 * than 20 s with 110 KB unread, after peers had filled their send window with a report;
 * docs/security.md). Counted among the handshakes, such descriptors took the caps' places for
 * good, and every new connection, an agent's too, was shut down as beyond the caps. */
static bool fd_open_both_ways(int fd) {
        struct tcp_info ti;
        if (!TCP_INFO_HAS(fd_tcp_info(fd, &ti), tcpi_state))
                return true; /* not known: counted, as before */
        return ti.tcpi_state == TCP_ESTABLISHED || ti.tcpi_state == TCP_SYN_RECV;
}

typedef struct Found {
        Handshake h;
        int fd;
} Found;

static int found_by_age(const void *a, const void *b) {
        const Found *x = a, *y = b;
        return x->h.first_usec < y->h.first_usec ? -1 : x->h.first_usec > y->h.first_usec;
}

/* How many kept handshakes each source has so far: open addressing over a table of 2^k slots. */
typedef struct SourceCount {
        uint8_t addr[17];
        bool used;
        size_t n;
} SourceCount;

static size_t *source_count(SourceCount *t, size_t mask, const uint8_t addr[17]) {
        size_t i = hash_bytes(addr, 17) & mask;
        while (t[i].used && memcmp(t[i].addr, addr, 17) != 0)
                i = (i + 1) & mask;
        if (!t[i].used) {
                t[i].used = true;
                memcpy(t[i].addr, addr, 17);
        }
        return &t[i].n;
}

/* A pipe whose descriptor the sweep has not found yet. */
typedef struct Unplaced {
        Peer peer;
        uint32_t id;
} Unplaced;

typedef struct Placed {
        int fd;
        uint32_t id;
} Placed;

static bool fd_known(const uint64_t *bits, size_t n_bits, int fd) {
        return (size_t) fd < n_bits && (bits[fd / 64] >> (fd % 64) & 1);
}

/* Under the lock: pipe id's descriptor is fd, skipped from now on. */
static void pipe_fd_place(LinkGuard *g, uint32_t id, int fd) {
        Pipe *p = *pipe_slot(g, id);
        if (p && p->fd < 0 && pipe_fds_set(fd)) /* else gone meanwhile, or looked at again next time */
                p->fd = fd;
}

/* Connections to our port that are not pipes: shut down what is too old or beyond the caps
 * (the youngest first). Runs on the loop, outside the lock but for the snapshots. The system
 * calls go to descriptors not known as pipes' yet (new connections, and the handshakes): a
 * descriptor found to be a pipe's is skipped until that pipe goes, so a steady fleet costs one
 * read of /proc/self/fd per sweep, not two calls per connection. */
static void sweep_handshakes(LinkGuard *g, uint64_t now) {
        const LinkLimits *l = &g->limits;
        _cleanup_free_ Unplaced *unplaced = NULL;
        _cleanup_free_ uint64_t *known = NULL;
        _cleanup_free_ Placed *placed = NULL;
        _cleanup_free_ Found *found = NULL;
        _cleanup_free_ SourceCount *per_source = NULL;
        size_t n_unplaced = 0, n_known = 0, n_placed = 0, unauth_pipes, total, n = 0, alloc = 0, placed_alloc = 0,
               closing = 0;
        uint16_t port;
        bool ok = true;

        pthread_mutex_lock(&g->lock);
        port = g->port;
        unauth_pipes = g->stats.unauthenticated;
        total = g->stats.pipes;
        if (port && total > 0 && (unplaced = malloc(total * sizeof *unplaced)))
                for (size_t i = 0; i < BUCKETS; i++)
                        for (Pipe *p = g->pipes[i]; p; p = p->next)
                                if (p->fd < 0)
                                        unplaced[n_unplaced++] = (Unplaced) { p->peer, p->id };
        ok = total == 0 || unplaced;
        pthread_mutex_unlock(&g->lock);
        if (!port || !ok)
                return;
        known = pipe_fds_copy(&n_known); /* none (or no memory for a copy): every descriptor is looked at */
        sort_n(unplaced, n_unplaced, sizeof *unplaced, peer_cmp);

        DIR *d = opendir("/proc/self/fd");
        struct dirent *de;
        while (d && (de = readdir(d))) {
                int fd = atoi(de->d_name);
                Peer peer;
                if (de->d_name[0] == '.' || fd == dirfd(d) || fd_known(known, n_known, fd) || !fd_peer(fd, port, &peer))
                        continue;
                const Unplaced *u = find_n(&peer, unplaced, n_unplaced, sizeof *unplaced, peer_cmp);
                if (u) {
                        if (GROW(placed, placed_alloc, n_placed + 1, SIZE_MAX / sizeof *placed) < 0)
                                continue; /* found again next time */
                        placed[n_placed++] = (Placed) { fd, u->id };
                        continue;
                }
                if (!fd_open_both_ways(fd)) {
                        closing++;
                        continue;
                }
                if (GROW(found, alloc, n + 1, SIZE_MAX / sizeof *found) < 0)
                        break;
                Handshake *prev = find_n(&peer, g->handshakes, g->n_handshakes, sizeof *g->handshakes, peer_cmp);
                found[n++] = (Found) { { peer, prev ? prev->first_usec : now }, fd };
        }
        if (d)
                closedir(d);

        /* oldest first: they keep their places, the youngest go beyond the caps */
        sort_n(found, n, sizeof *found, found_by_age);
        size_t kept = 0, timed_out = 0, over = 0, mask = 0;
        Handshake *next = n ? malloc(n * sizeof *next) : NULL;
        if (n && l->max_unauthenticated_per_source) {
                size_t slots = 16;
                while (slots < 2 * n)
                        slots *= 2;
                per_source = calloc(slots, sizeof *per_source);
                mask = slots - 1;
        }
        for (size_t i = 0; i < n; i++) {
                size_t *same_source = per_source ? source_count(per_source, mask, found[i].h.peer.b) : NULL;
                bool old = l->auth_timeout_usec && age(now, found[i].h.first_usec) > l->auth_timeout_usec;
                bool beyond = (l->max_unauthenticated && unauth_pipes + kept >= l->max_unauthenticated) ||
                              (l->max_unauthenticated_per_source && (!same_source || *same_source >= l->max_unauthenticated_per_source));
                if (old || beyond || !next) {
                        (void) shutdown(found[i].fd, SHUT_RDWR);
                        old ? timed_out++ : over++;
                        continue;
                }
                if (same_source)
                        (*same_source)++;
                next[kept++] = found[i].h;
        }
        sort_n(next, kept, sizeof *next, peer_cmp);
        pthread_mutex_lock(&g->lock);
        for (size_t i = 0; i < n_placed; i++)
                pipe_fd_place(g, placed[i].id, placed[i].fd);
        free(g->handshakes);
        g->handshakes = next;
        g->n_handshakes = kept;
        g->stats.handshakes = kept;
        g->stats.handshakes_closing = closing;
        g->stats.handshakes_closed_timeout += timed_out;
        g->stats.handshakes_closed_limit += over;
        pthread_mutex_unlock(&g->lock);
}

void link_guard_stats(LinkGuard *g, LinkGuardStats *ret) {
        pthread_mutex_lock(&g->lock);
        *ret = g->stats;
        pthread_mutex_unlock(&g->lock);
}
