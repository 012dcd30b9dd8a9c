/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "macro.h"
#include "nodesmith.pb-c.h"

/* IMDSv2 client on the agent's loop: a session token (PUT /latest/api/token, refreshed at half
 * its granted TTL, renewed once on 401), the instance's identity fetched once at start, and the
 * interruption notices (spot instance-action, rebalance recommendation, scheduled maintenance)
 * polled every interval. One request in flight at a time; every failure backs off with jitter. */

#define IMDS_MAX_NOTICES 32
#define IMDS_MAX_BODY (64 * 1024)

typedef struct ImdsNotice {
        Nodesmith__V1__Notice__Kind kind;
        char event_id[128];
        char action[64];
        int64_t deadline_unix_ms;
        int64_t first_seen_unix_ms;
        int64_t not_after_unix_ms;
        char description[256];
} ImdsNotice;

typedef struct ImdsIdentity {
        char *instance_id;
        char *instance_type;
        char *zone;
        char *region;
        char *life_cycle;        /* spot | on-demand | scheduled */
        char *local_ipv4;
        char *document;          /* dynamic/instance-identity/document, verbatim */
        char *rsa2048;           /* its PKCS7 signature, verbatim base64 */
} ImdsIdentity;

typedef enum ImdsSource {
        IMDS_SOURCE_SPOT,
        IMDS_SOURCE_REBALANCE,
        IMDS_SOURCE_MAINTENANCE,
        IMDS_SOURCE_IDENTITY,
        _IMDS_SOURCE_MAX,
} ImdsSource;

typedef struct ImdsCounters {
        uint64_t requests;
        uint64_t errors;               /* transport failures, 403, 5xx */
        uint64_t throttled;            /* 429 */
        uint64_t unauthorized;         /* 401 answers */
        uint64_t tokens;               /* tokens obtained */
        uint64_t rejected[_IMDS_SOURCE_MAX]; /* malformed, wrong types, absurd dates, too large */
        uint64_t notice_changes;       /* notices added or withdrawn */
} ImdsCounters;

typedef struct ImdsConfig {
        const char *endpoint;          /* http://169.254.169.254 */
        uint64_t poll_interval_ms;
        uint64_t token_ttl_s;          /* requested TTL, 1..21600 */
        uint64_t timeout_ms;           /* connect and total, per request */
} ImdsConfig;

typedef enum ImdsEvent {
        IMDS_EVENT_IDENTITY,           /* identity fetched (once) */
        IMDS_EVENT_NOTICES,            /* a notice appeared or was withdrawn */
} ImdsEvent;

typedef struct ImdsWatcher ImdsWatcher;
typedef void (*imds_event_t)(ImdsWatcher *w, ImdsEvent ev, void *userdata);

int imds_watcher_new(sd_event *e, const ImdsConfig *cfg, imds_event_t cb, void *userdata,
                     ImdsWatcher **ret);
ImdsWatcher *imds_watcher_free(ImdsWatcher *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(ImdsWatcher *, imds_watcher_free);
int imds_watcher_start(ImdsWatcher *w);
/* NULL until the identity has been fetched. */
const ImdsIdentity *imds_watcher_identity(const ImdsWatcher *w);
size_t imds_watcher_notices(const ImdsWatcher *w, const ImdsNotice **ret);
const ImdsCounters *imds_watcher_counters(const ImdsWatcher *w);

/* Parsers (pure; exported for the unit tests). Each returns 0 with the result, or -EBADMSG
 * (not JSON, wrong shape or types), -ERANGE (absurd date), -EFBIG (over IMDS_MAX_BODY). The
 * notices' first_seen_unix_ms is left 0. */
int imds_parse_iso8601(const char *s, int64_t *ret_ms);
int imds_parse_gmt_date(const char *s, int64_t *ret_ms);
int imds_parse_instance_action(const char *body, size_t len, ImdsNotice *ret);
int imds_parse_rebalance(const char *body, size_t len, ImdsNotice *ret);
/* Only active events become notices; *ret_n of at most max. */
int imds_parse_maintenance(const char *body, size_t len, ImdsNotice *ret, size_t max, size_t *ret_n);
/* Merge the current notices of one kind into set (*n entries, capacity IMDS_MAX_NOTICES),
 * keeping first_seen of those already there; returns how many were added, withdrawn or brought
 * forward. A spot or rebalance notice with the same action is the same notice whatever its time:
 * the one first seen stays unless a later answer brings its deadline forward. */
int imds_notices_merge(ImdsNotice *set, size_t *n, Nodesmith__V1__Notice__Kind kind,
                       const ImdsNotice *cur, size_t n_cur, int64_t now_ms);
