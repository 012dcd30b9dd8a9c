/* SPDX-License-Identifier: Apache-2.0 */
/* The agent <-> coordinator link. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* The agent <-> coordinator link: NNG REQ/REP driven by sd-event; every socket sets
 * NNG_OPT_RECVMAXSZ. The client polls its socket's NNG_OPT_RECVFD (no nng_ctx on it); the server
 * receives and sends through REP contexts and handles every request on the loop, unless the
 * optional fast handler answers it in NNG's thread (link.c). */
#include "link-guard.h"
#include "macro.h"

typedef struct LinkTls {
        const char *ca_file;     /* client: verify the server against it (required for tls+tcp) */
        const char *cert_file;   /* server: its certificate (PEM) */
        const char *key_file;    /* server: its private key (PEM) */
        const char *server_name; /* client: name to verify; default: the URL's host */
} LinkTls;

/* NNG's positive NNG_E* codes to -errno. */
int link_errno(int nng_error);

/* Checks a URL against the transport policy: tls+tcp:// always, tcp:// and ipc:// only when
 * insecure is set. Returns -EPERM with a message in ret_why. */
int link_url_check(const char *url, bool insecure, const char **ret_why);

/* ---- server (coordinator) ---- */
typedef struct LinkServer LinkServer;

/* Handle one request; write the reply into reply[0..reply_size) and its length into *ret_len.
 * Returning < 0 sends no reply (the peer's request times out); 0 replies; > 0 replies and marks
 * the connection authenticated (link-guard.h: it leaves the unauthenticated pool and is held to
 * the idle timeout from then on). */
typedef int (*link_handler_t)(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                              size_t *ret_len, void *userdata);

/* Optional: answer a request at once, in one of NNG's threads, without waking the loop. Returns
 * > 0 with the reply written, 0 to hand the request to the handler on the loop. Called
 * concurrently from several threads, with the server's userdata. */
typedef int (*link_fast_t)(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                           size_t *ret_len, void *userdata);

/* limits: NULL for none (link-guard.h). */
int link_server_new(sd_event *e, const char *url, const LinkTls *tls, size_t max_msg,
                    const LinkLimits *limits, link_handler_t handler, void *userdata, LinkServer **ret);
LinkServer *link_server_free(LinkServer *s);
void link_server_set_fast(LinkServer *s, link_fast_t fast);
DEFINE_TRIVIAL_CLEANUP_FUNC(LinkServer *, link_server_free);
/* Messages received; replies that could not be sent (the peer's request times out). */
uint64_t link_server_handled(const LinkServer *s);
/* Closes every peer's connection (they dial again, through the Service to a ready replica):
 * how many, or -EOPNOTSUPP for a server made without limits (its pipes are not tracked). */
int link_server_close_peers(LinkServer *s);
uint64_t link_server_dropped(const LinkServer *s);
/* Connections now and what the limits refused or closed (all zero without limits). */
void link_server_guard_stats(LinkServer *s, LinkGuardStats *ret);

/* ---- client (agent) ---- */
typedef struct LinkClient LinkClient;

/* error: 0 with the reply, -ETIMEDOUT when no reply came in time, other -errno on failure. The
 * reply buffer is valid only during the call. */
typedef void (*link_reply_t)(LinkClient *c, int error, const uint8_t *reply, size_t len,
                             void *userdata);

/* reconnect_max_ms caps NNG's redial back-off, so an agent finds a restarted coordinator within
 * about one report interval. */
int link_client_new(sd_event *e, const char *url, const LinkTls *tls, size_t max_msg,
                    uint64_t reconnect_max_ms, link_reply_t cb, void *userdata, LinkClient **ret);
LinkClient *link_client_free(LinkClient *c);
/* Send a request; a request still in flight is abandoned (REQ semantics: its reply, if any, is
 * discarded). The reply, a timeout or an error arrives through the callback. */
int link_client_send(LinkClient *c, const void *buf, size_t len, uint64_t timeout_usec);
bool link_client_in_flight(const LinkClient *c);
