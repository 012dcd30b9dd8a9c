/* SPDX-License-Identifier: Apache-2.0 */
/* What a link server spends on peers before they authenticate. */
#pragma once

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"

/* What a link server spends on peers before and after they authenticate (docs/security.md).
 *
 * NNG hands a connection (a pipe) to the socket once its TLS handshake and SP header are done,
 * and allocates a message as soon as its length has arrived. The guard admits each new pipe
 * against a total cap, a per-source-address cap and caps, in total and per source, on pipes that
 * have not authenticated yet (their messages are the only memory an anonymous peer can hold: at most
 * max_unauthenticated × the receive limit), and closes a pipe that has not authenticated within
 * auth_timeout or, once authenticated, has been silent for idle_timeout. "Authenticated" is the
 * server handler's verdict on a request that arrived on the pipe. Thread-safe: NNG's threads admit
 * and release pipes and record requests; the loop sweeps.
 *
 * "Silent" is the peer's doing, not ours: a request counts from when NNG received it (not when it
 * was answered), and an authenticated pipe past idle_timeout whose descriptor is known (below) is
 * kept while the kernel has received data on it within idle_timeout (TCP_INFO's
 * tcpi_last_data_recv): requests that wait unread behind a crowd's TLS handshakes on NNG's few
 * threads are not silence. That grace ends 5 idle timeouts after the pipe's last request, so a
 * peer that trickles bytes without ever completing a request is still closed; a peer that sends
 * nothing is closed after idle_timeout as before.
 *
 * A TCP connection still in its TLS handshake (or SP header) is not a pipe yet, and NNG 1.5 holds
 * it forever. For a TCP listener, every sweep also looks at the process's own sockets connected to
 * the listening port: one that has not become a pipe within auth_timeout, or beyond the caps on
 * unauthenticated connections (in total, per source), is shut down (shutdown(2): NNG sees the end
 * of the stream and closes it itself when it next reads it; the descriptor stays NNG's, and such
 * a connection, or one whose peer shut down its side, no longer counts against the caps while it
 * waits to be closed: TCP_INFO's state). A descriptor a sweep has found
 * to be a pipe's (of any guard in the process: the agents' link, the HTTP servers) is skipped
 * without a system call until that pipe is removed, so a sweep costs one read of /proc/self/fd
 * plus two calls per connection that is new or still in its handshake. */

typedef struct LinkLimits {
        size_t max_pipes;              /* 0: no cap */
        size_t max_pipes_per_source;   /* 0: no cap */
        size_t max_unauthenticated;    /* 0: no cap */
        size_t max_unauthenticated_per_source; /* 0: no cap */
        uint64_t auth_timeout_usec;    /* 0: never closed for that */
        uint64_t idle_timeout_usec;    /* 0: never closed for that */
} LinkLimits;

typedef struct LinkGuardStats {
        uint64_t pipes, unauthenticated;                   /* now */
        uint64_t refused_total, refused_per_source, refused_unauthenticated, refused_unauthenticated_per_source;
        uint64_t closed_auth_timeout, closed_idle;
        uint64_t idle_deferred;    /* idle closes put off: data had arrived that we had not read */
        uint64_t handshakes;                               /* connections not yet pipes, at the last sweep */
        uint64_t handshakes_closing;                       /* ... shut down by either side, their descriptors
                                                            * not closed by NNG yet: not counted above */
        uint64_t handshakes_closed_timeout, handshakes_closed_limit;
} LinkGuardStats;

typedef struct LinkGuard LinkGuard;

int link_guard_new(const LinkLimits *limits, LinkGuard **ret);
LinkGuard *link_guard_free(LinkGuard *g);
DEFINE_TRIVIAL_CLEANUP_FUNC(LinkGuard *, link_guard_free);

/* Registers NNG_PIPE_EV_ADD_PRE / REM_POST on sock. */
int link_guard_attach(LinkGuard *g, nng_socket sock);
/* The TCP port the listener is bound to (0: not TCP): enables the handshake sweep. */
void link_guard_set_port(LinkGuard *g, uint16_t port_network_order);
/* A request arrived on pipe at now_usec, when NNG received it (authenticated: the handler
 * accepted its credentials). */
void link_guard_seen(LinkGuard *g, nng_pipe pipe, bool authenticated, uint64_t now_usec);
/* Close what timed out; returns how many pipes were closed. */
size_t link_guard_sweep(LinkGuard *g, uint64_t now_usec);
/* Closes every pipe (the peers dial again); returns how many. */
size_t link_guard_close_all(LinkGuard *g);
void link_guard_stats(LinkGuard *g, LinkGuardStats *ret);
