/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "macro.h"
#include "nodesmith.pb-c.h"
#include "pbarena.h"

/* The coordinator's model of the nodes that report to it, keyed by instance id. Rebuilt from the
 * next round of reports after a restart; nothing here is state of record. */

typedef struct NodeEntry {
        char *instance_id;
        Nodesmith__V1__AgentReport *report;   /* latest accepted report, unpacked into arena */
        PbArena *arena;                       /* owns report */
        uint64_t first_seen_usec;             /* CLOCK_MONOTONIC */
        uint64_t last_seen_usec;
        uint64_t reports;
        /* desired state handed back with every reply */
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
} Registry;

int registry_init(Registry *r, size_t max_nodes);
void registry_done(Registry *r);

NodeEntry *registry_get(const Registry *r, const char *instance_id);

/* Record a report unpacked into arena (takes ownership of both on success). A report from the same boot with a
 * sequence not newer than the last one is a duplicate: -EALREADY, nothing changes. A new node
 * beyond max_nodes: -ENOSPC. *ret_new tells whether the node was unknown. */
int registry_update(Registry *r, Nodesmith__V1__AgentReport *report, PbArena *arena,
                    uint64_t now_usec, NodeEntry **ret, bool *ret_new);

int registry_remove(Registry *r, const char *instance_id);

/* Iterate: for (size_t i = 0; i < r->capacity; i++) if (r->slots[i]) ... */
#define REGISTRY_FOREACH(e, reg)                                         \
        for (size_t _i = 0; _i < (reg)->capacity; _i++)                 \
                if (((e) = (reg)->slots[_i]))
