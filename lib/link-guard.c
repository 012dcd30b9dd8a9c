/* SPDX-License-Identifier: Apache-2.0 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "link-guard.h"

#define BUCKETS 4096 /* pipes, by id */
#define SOURCES 4096 /* source addresses, by hash */

typedef struct Source Source;
struct Source {
        Source *next;
        uint8_t addr[17]; /* family, then up to 16 bytes */
        size_t pipes, unauthenticated;
};

typedef struct Pipe Pipe;
struct Pipe {
        Pipe *next;
        uint32_t id;
        Source *source;
        uint64_t added_usec, seen_usec;
        bool authenticated;
        bool closing;
};

struct LinkGuard {
        pthread_mutex_t lock;
        LinkLimits limits;
        Pipe *pipes[BUCKETS];
        Source *sources[SOURCES];
        LinkGuardStats stats;
};

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
        free(g);
        return NULL;
}

static void source_key(nng_pipe p, uint8_t key[17]) {
        nng_sockaddr sa;
        memset(key, 0, 17);
        if (nng_pipe_get_addr(p, NNG_OPT_REMADDR, &sa) != 0)
                return; /* unknown: all such pipes share one source */
        key[0] = (uint8_t) sa.s_family;
        if (sa.s_family == NNG_AF_INET)
                memcpy(key + 1, &sa.s_in.sa_addr, sizeof sa.s_in.sa_addr);
        else if (sa.s_family == NNG_AF_INET6)
                memcpy(key + 1, sa.s_in6.sa_addr, sizeof sa.s_in6.sa_addr);
}

static Source **source_slot(LinkGuard *g, const uint8_t key[17]) {
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (size_t i = 0; i < 17; i++)
                h = (h ^ key[i]) * 1099511628211ULL;
        Source **s = &g->sources[h % SOURCES];
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
        const LinkLimits *l = &g->limits;
        bool refuse = false;

        source_key(pipe, key);
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
                p->seen_usec = now;
                if (authenticated && !p->authenticated) {
                        p->authenticated = true;
                        g->stats.unauthenticated--;
                        p->source->unauthenticated--;
                }
        }
        pthread_mutex_unlock(&g->lock);
}

size_t link_guard_sweep(LinkGuard *g, uint64_t now) {
        const LinkLimits *l = &g->limits;
        uint32_t close_ids[256];
        size_t n = 0;

        pthread_mutex_lock(&g->lock);
        for (size_t i = 0; i < BUCKETS && n < ELEMENTSOF(close_ids); i++)
                for (Pipe *p = g->pipes[i]; p && n < ELEMENTSOF(close_ids); p = p->next) {
                        if (p->closing)
                                continue;
                        if (!p->authenticated && l->auth_timeout_usec && now - p->added_usec > l->auth_timeout_usec)
                                g->stats.closed_auth_timeout++;
                        else if (p->authenticated && l->idle_timeout_usec && now - p->seen_usec > l->idle_timeout_usec)
                                g->stats.closed_idle++;
                        else
                                continue;
                        p->closing = true;
                        close_ids[n++] = p->id;
                }
        pthread_mutex_unlock(&g->lock);
        /* outside the lock: closing calls on_remove() */
        for (size_t i = 0; i < n; i++)
                nng_pipe_close((nng_pipe) { .id = close_ids[i] });
        return n;
}

void link_guard_stats(LinkGuard *g, LinkGuardStats *ret) {
        pthread_mutex_lock(&g->lock);
        *ret = g->stats;
        pthread_mutex_unlock(&g->lock);
}
