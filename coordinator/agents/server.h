/* SPDX-License-Identifier: Apache-2.0 */
/* The agents' side of the link: reports in, directives out, notices applied under drain-on. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attest.h"
#include "kube.h"
#include "fastpath.h"
#include "policy.h"
#include "registry.h"

#define COORDINATOR_VERSION "0.1.0"

typedef enum ReportResult {
        REPORT_OK,
        REPORT_DUPLICATE,
        REPORT_INVALID,
        REPORT_UNAUTHENTICATED,
        REPORT_VERSION_MISMATCH,
        REPORT_OVERLOADED,
        REPORT_PENDING,                /* attestation waits for EC2: the agent sends again */
        REPORT_NODE_MISMATCH,          /* names a Node that is not its instance's (nodebind.h) */
        _REPORT_RESULT_MAX,
} ReportResult;

#define NOTICE_KINDS 6 /* Nodesmith__V1__Notice__Kind values */

/* What the agent server counts, for /metrics. */
typedef struct AgentMetrics {
        uint64_t reports[_REPORT_RESULT_MAX];
        uint64_t reports_unchanged_total;
        uint64_t notices_total[NOTICE_KINDS];
        uint64_t notices_withdrawn_total[NOTICE_KINDS];
        uint64_t nodes_registered_total;
} AgentMetrics;

typedef struct AgentServerConfig {
        const char *token;             /* the bootstrap token (the caller keeps it) */
        uint64_t report_interval_ms;   /* asked of agents */
        uint64_t stale_after_ms;       /* a boot silent this long is no longer bound */
        uint64_t max_pods_per_node;
        uint64_t max_notices_per_node;
        NoticePolicy drain_on;
} AgentServerConfig;

/* What the server asks of the rest of the coordinator. */
typedef struct AgentServerPorts {
        void *userdata;
        uint64_t (*now)(void *userdata);                          /* CLOCK_MONOTONIC, µs */
        /* A node was told to drain: plan replacement capacity now. */
        void (*node_leaving)(void *userdata, const NodeEntry *e);
        /* The node's agent reported (it drains its node itself). */
        void (*agent_reported)(void *userdata, const NodeEntry *e);
        /* The Node watch a report's node_name is checked against (nodebind.h); NULL: none yet. */
        const KubeWatch *(*nodes)(void *userdata);
        /* For people: a notice recorded (added) or withdrawn, and the drain it calls for. */
        void (*notice_event)(void *userdata, const NodeEntry *e, const char *kind, const char *event_id,
                             int64_t deadline_in_ms, bool added);
        void (*drain_event)(void *userdata, const NodeEntry *e, bool drain);
} AgentServerPorts;

typedef struct AgentServer AgentServer;

/* registry: the nodes (the caller's); attest, fast: NULL when off (the caller's). */
int agent_server_new(const AgentServerConfig *cfg, Registry *registry, Attestor *attest, FastPath *fast,
                     const AgentServerPorts *ports, AgentServer **ret);
AgentServer *agent_server_free(AgentServer *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(AgentServer *, agent_server_free);

/* One report in, one directive out (a link_handler_t; userdata is the AgentServer). */
int agent_server_handle_report(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                               size_t *ret_len, void *userdata);
/* In NNG's threads: an unchanged report answered at once (a link_fast_t; fastpath.h). */
int agent_server_fast_answer(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                             size_t *ret_len, void *userdata);
/* On the loop: what the fast answers saw into the registry and the metrics. */
void agent_server_fast_sync(AgentServer *s);
/* On the loop: the node's directive changed or it leaves the registry (Registry.forget): its
 * next report goes to the loop. */
void agent_server_fast_forget(AgentServer *s, const char *instance_id);

/* A notice recorded first (added) or withdrawn: counted and logged once (a notice_change_t;
 * userdata is the AgentServer). */
void agent_server_notice_changed(const NodeEntry *e, const NoticeRecord *n, bool added, void *userdata);
/* The node's notices changed (from its agent or the interruption queue): the directive they call
 * for under drain-on; a new drain plans replacement capacity at once. */
void agent_server_apply_notices(AgentServer *s, NodeEntry *e);

const AgentMetrics *agent_server_metrics(const AgentServer *s);
const char *report_result_to_string(ReportResult r);
/* "spot_interruption", "rebalance", ... */
const char *notice_kind_to_string(int kind);
