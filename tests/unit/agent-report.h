/* SPDX-License-Identifier: Apache-2.0 */
/* An agent's report put into a Registry as the link server would (the state packed and
 * unpacked into the entry's own arena), for unit tests of what reads the registry. */
#pragma once

#include <cmocka.h>

#include "agents/registry.h"
#include "nodesmith.pb-c.h"
#include "pbarena.h"

/* Instance id reports for Node node (NULL: none named) at now_usec; drained: its agent says the
 * drain is done. */
static NodeEntry *agent_report_put(Registry *reg, const char *id, const char *node, bool drained, uint64_t now_usec) {
        Nodesmith__V1__NodeState s = NODESMITH__V1__NODE_STATE__INIT;
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__DrainStatus drain = NODESMITH__V1__DRAIN_STATUS__INIT;
        ident.instance_id = (char *) id;
        ident.node_name = (char *) node;
        ident.instance_type = (char *) "t3.medium";
        ident.zone = (char *) "us-east-1a";
        s.identity = &ident;
        if (drained) {
                drain.phase = NODESMITH__V1__DRAIN_STATUS__PHASE__PHASE_DRAINED;
                s.drain = &drain;
        }
        uint8_t buf[4096];
        size_t len = nodesmith__v1__node_state__get_packed_size(&s);
        assert_true(len <= sizeof buf);
        len = nodesmith__v1__node_state__pack(&s, buf);
        PbArena *arena = pb_arena_new(1024);
        assert_non_null(arena);
        Nodesmith__V1__NodeState *st = nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), len, buf);
        assert_non_null(st);
        NodeEntry *e = NULL;
        NodeEntry *old = registry_get(reg, id);
        assert_int_equal(registry_put(reg, id, old ? old->sequence + 1 : 1, st, arena, buf, len, now_usec, &e, NULL), 0);
        return e;
}
