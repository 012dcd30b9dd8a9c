/* SPDX-License-Identifier: Apache-2.0 */
/* The link's fast path: unchanged reports answered without the loop. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"

/* Unchanged reports answered in NNG's threads (link_fast_t), without the loop.
 *
 * The loop remembers, for each node whose last report it accepted, what makes the next one
 * unchanged (boot, state bytes, sequence) and the directive it answered. A report from the same
 * boot with a newer sequence and the same state bytes, soon enough after the last, is then
 * answered from that copy by whichever NNG thread received it. Everything else goes to the loop
 * as before. What the fast answers saw (sequence, time, count) the loop takes back at every sync
 * (every 50 ms, and before it handles a report of the same node) into the registry and the
 * metrics. A sync looks only at the nodes answered since the last one (its cost follows the
 * reports, not the fleet) and drops the copy of those that are gone, shutting down or no longer
 * attested; a node whose directive changes, or that leaves the registry, has its copy dropped at
 * once (fast_path_forget, through the registry's forget hook), so its next report goes to the loop. */

typedef struct FastPath FastPath;

/* token is borrowed and must outlive the FastPath (the coordinator's). A report that comes
 * fresh_usec or more after the last one of its node goes to the loop. */
int fast_path_new(const char *token, uint32_t report_interval_ms, uint64_t fresh_usec, FastPath **ret);
FastPath *fast_path_free(FastPath *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(FastPath *, fast_path_free);

/* NNG's threads (a link_fast_t without its userdata): > 0 with the reply packed into reply. */
int fast_path_answer(FastPath *f, const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                     size_t *ret_len);

/* The loop: e's report (boot, sequence) was just accepted with its directive, at now. */
void fast_path_remember(FastPath *f, const NodeEntry *e, const char *boot_id, bool attested, uint64_t now);

/* The loop: each node answered here since the last sync; keep() returns false to drop it, after
 * applying what the fast answers saw (n > 0 of them, the last with sequence at seen_usec). */
typedef bool (*fast_path_sync_t)(const char *instance_id, const char *boot_id, uint64_t n, uint64_t sequence,
                                 uint64_t seen_usec, int action, const char *reason, int64_t deadline_unix_ms,
                                 bool force, void *userdata);
void fast_path_sync(FastPath *f, fast_path_sync_t keep, void *userdata);
/* The same for one node, before the loop handles its report. */
void fast_path_sync_one(FastPath *f, const char *instance_id, fast_path_sync_t keep, void *userdata);
/* The loop: hands what the fast answers saw of the node to keep(), then drops its copy whatever
 * keep() says (its directive changed, or it leaves the registry). */
void fast_path_forget(FastPath *f, const char *instance_id, fast_path_sync_t keep, void *userdata);
size_t fast_path_size(FastPath *f);
