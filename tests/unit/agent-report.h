/* SPDX-License-Identifier: Apache-2.0 */
/* An agent's report put into a Registry as the link server would (the state packed and
 * unpacked into the entry's own arena), for unit tests of what reads the registry. */
#pragma once

#include <cmocka.h>

#include "agents/registry.h"
#include "nodesmith.pb-c.h"
#include "pbarena.h"

/* A pod in an agent's report: uid, name (namespace "default"), CPU requested (millicores). */
typedef struct AgentReportPod {
        const char *uid, *name;
        int64_t cpu_millis;
} AgentReportPod;

/* Instance id reports for Node node (NULL: none named) at now_usec, running pods[0..n_pods);
 * drained: its agent says the drain is done. */
static _unused_ NodeEntry *agent_report_put_pods(Registry *reg, const char *id, const char *node, bool drained,
                                                 const AgentReportPod *pods, size_t n_pods, uint64_t now_usec);
static _unused_ NodeEntry *agent_report_put(Registry *reg, const char *id, const char *node, bool drained,
                                            uint64_t now_usec) {
        return agent_report_put_pods(reg, id, node, drained, NULL, 0, now_usec);
}

static NodeEntry *agent_report_put_pods(Registry *reg, const char *id, const char *node, bool drained,
                                        const AgentReportPod *pods, size_t n_pods, uint64_t now_usec) {
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
        Nodesmith__V1__Pod pb[8], *pp[8];
        Nodesmith__V1__Resources req[8];
        assert_true(n_pods <= ELEMENTSOF(pb));
        for (size_t i = 0; i < n_pods; i++) {
                nodesmith__v1__pod__init(&pb[i]);
                nodesmith__v1__resources__init(&req[i]);
                req[i].cpu_millis = pods[i].cpu_millis;
                req[i].memory_bytes = 512 << 20;
                pb[i].uid = (char *) pods[i].uid;
                pb[i].name = (char *) pods[i].name;
                pb[i].namespace_ = (char *) "default";
                pb[i].phase = (char *) "Running";
                pb[i].requests = &req[i];
                pp[i] = &pb[i];
        }
        s.n_pods = n_pods;
        s.pods = n_pods ? pp : NULL;
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
