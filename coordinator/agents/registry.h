/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's model of the nodes that report to it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "nodesmith.pb-c.h"
#include "pbarena.h"

/* The coordinator's model of the nodes that report to it, keyed by instance id. Rebuilt from the
 * next round of reports after a restart; nothing here is state of record. */

/* Who told of a notice: the node's agent, the interruption queue (EventBridge through SQS), or
 * both. The same kind on the same instance from both is one notice. */
#define NOTICE_FROM_AGENT 1u
#define NOTICE_FROM_QUEUE 2u

/* A notice as the coordinator recorded it: when it first saw it (the agent's first_seen is the
 * agent's own clock), so notice latency can be measured end to end. */
typedef struct NoticeRecord {
        char *event_id;                       /* the agent's id; the queue's when only it told */
        int kind;                             /* Nodesmith__V1__Notice__Kind */
        int64_t deadline_unix_ms;
        int64_t recorded_unix_ms;
        unsigned sources;                     /* NOTICE_FROM_* */
} NoticeRecord;

/* A state's packed bytes are kept as their SHA-256 only: "unchanged" compares digests (a node
 * could only make a colliding state look like one it already sent). */
#define REGISTRY_DIGEST_SIZE 32

typedef struct NodeEntry {
        char *instance_id;
        uint64_t sequence;                    /* of the last accepted report */
        Nodesmith__V1__NodeState *state;      /* latest state, unpacked into arena */
        PbArena *arena;                       /* owns state */
        uint8_t state_digest[REGISTRY_DIGEST_SIZE]; /* of the state as received, to spot unchanged ones */
        size_t state_len;                     /* its packed size (0: no state received) */
        uint64_t first_seen_usec;             /* CLOCK_MONOTONIC */
        uint64_t last_seen_usec;
        uint64_t heard_usec;                  /* any report, duplicates and unchanged ones included */
        uint64_t pods_changed_usec;           /* when its set of pods last changed */
        uint64_t reports;                     /* 0: no agent has reported (see registry_put_unreported) */
        NoticeRecord *notices;
        size_t n_notices;
        uint64_t terminate_sent_usec;         /* TerminateInstances asked (0: not yet) */
        uint64_t drain_decided_usec;          /* when it was first seen leaving */
        bool finalizer_removed;
        /* being replaced (consolidation, drift): its pods are planned elsewhere, a replacement
         * is launched, and only then is it told to drain */
        uint64_t replace_started_usec;        /* 0: not being replaced */
        uint64_t replace_round;               /* provisioning rounds when it started */
        char replace_reason[32];
        bool replace_on_demand;               /* the consolidation found an on-demand replacement */
        double replace_price_cap;             /* USD/h: its replacement must cost less (0: no cap;
                                               * nodes of one consolidation share it and
                                               * replace_started_usec) */
        /* desired state handed back with every reply */
        /* the per-boot secret (proto: NodeDirective.boot_secret) and the boot it was issued to */
        char *secret_boot;
        uint8_t boot_secret[32];
        bool secret_confirmed;                /* the agent has presented it: from now on it must */
        Nodesmith__V1__NodeDirective__Action action;
        char *reason;
        int64_t deadline_unix_ms;
        bool force;
} NodeEntry;

typedef struct Registry {
        NodeEntry **slots;   /* open addressing, linear probing; NULL = empty */
        size_t capacity;     /* power of two */
        size_t n;
        size_t max_nodes;
        size_t state_memory;     /* bytes of the stored states (their arenas) */
        size_t max_state_memory; /* 0: no budget; a state beyond it is refused with -ENOBUFS */
        char *gone[256];     /* instances terminated lately: their late reports are refused */
        size_t gone_next;
        /* Told of an entry whose directive changed (registry_directive_changed) or that goes
         * (before it is freed): what keeps a copy of it drops that (the fast path, fastpath.h). */
        void (*forget)(void *userdata, const char *instance_id);
        void *forget_userdata;
} Registry;

int registry_init(Registry *r, size_t max_nodes);
void registry_done(Registry *r);

NodeEntry *registry_get(const Registry *r, const char *instance_id);

/* A report from the same boot whose sequence is not newer than the last one. */
bool registry_is_duplicate(const NodeEntry *e, const char *boot_id, uint64_t sequence);
/* The digest of packed state bytes. */
void registry_state_digest(const uint8_t *state, size_t len, uint8_t ret[static REGISTRY_DIGEST_SIZE]);
/* The state bytes are those of the last accepted report: nothing to re-read. */
bool registry_state_unchanged(const NodeEntry *e, const uint8_t *state, size_t len);
/* Record a report whose state is unchanged. */
void registry_touch(NodeEntry *e, uint64_t sequence, uint64_t now_usec);
/* Record a new state, unpacked into arena from bytes (takes ownership of state and arena on
 * success; keeps the digest of bytes). A new node beyond max_nodes: -ENOSPC, nothing taken. */
int registry_put(Registry *r, const char *instance_id, uint64_t sequence,
                 Nodesmith__V1__NodeState *state, PbArena *arena, const uint8_t *bytes, size_t len,
                 uint64_t now_usec, NodeEntry **ret, bool *ret_new);

/* An entry for an instance whose agent has not reported (a notice from the interruption queue
 * for a Node the registry does not know): the state is made up from the Node; no report is
 * counted and the agent counts as never seen. The agent's first report replaces the state and
 * counts as the node's registration. Takes ownership of state and arena on success. */
int registry_put_unreported(Registry *r, const char *instance_id, Nodesmith__V1__NodeState *state,
                            PbArena *arena, const uint8_t *bytes, size_t len, uint64_t now_usec,
                            NodeEntry **ret);

int registry_remove(Registry *r, const char *instance_id);
/* e's directive (action, reason, deadline, force) was just changed: say so to r->forget. */
void registry_directive_changed(Registry *r, const NodeEntry *e);
/* Forget an instance that was terminated, and refuse it from now on. */
void registry_bury(Registry *r, const char *instance_id);
bool registry_is_buried(const Registry *r, const char *instance_id);

/* Bring e's agent notices in line with its latest state. Calls cb for each notice that is new
 * (added = true) or withdrawn (added = false). An agent notice of a kind the queue already told
 * of joins that record (not new); a record the queue told of is never withdrawn by the agent. */
typedef void (*notice_change_t)(const NodeEntry *e, const NoticeRecord *n, bool added, void *userdata);
int registry_sync_notices(NodeEntry *e, int64_t now_unix_ms, notice_change_t cb, void *userdata);
const NoticeRecord *registry_find_notice(const NodeEntry *e, const char *event_id);
/* A notice from another source than the agent's reports (NOTICE_FROM_QUEUE): joins the record
 * of the same kind if there is one (the record keeps its deadline, or takes this one if it had
 * none) and returns 0, else adds a record and returns 1. *ret: the record (valid until the
 * next change). */
int registry_add_notice(NodeEntry *e, int kind, const char *event_id, int64_t deadline_unix_ms,
                        int64_t now_unix_ms, unsigned source, const NoticeRecord **ret);

/* Iterate: for (size_t i = 0; i < r->capacity; i++) if (r->slots[i]) ... */
#define REGISTRY_FOREACH(e, reg)                                         \
        for (size_t _i = 0; _i < (reg)->capacity; _i++)                 \
                if (((e) = (reg)->slots[_i]))
