/* SPDX-License-Identifier: Apache-2.0 */
/* Drains the coordinator runs itself for nodes whose agent is silent. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "kube.h"
#include "macro.h"
#include "strbuf.h"

/* The coordinator drains a node whose agent is silent.
 *
 * A node must drain when its directive is DRAIN (a notice, a disruption) or its Node is being
 * deleted. Its agent does that; when the agent has not reported for agent-silent-intervals
 * report intervals, the coordinator runs the agent's drain itself (node/drain.c on a Node + pods
 * informer, node/kubenode.c): the same taint, cordon and annotation, evictions through the
 * Eviction API with PDB refusals retried, DaemonSet and mirror pods left, do-not-disrupt pods
 * held unless forced, grace periods capped to the deadline. The deadline is the notice's, capped
 * by the NodePool's terminationGracePeriod (else termination-grace-period) counted from the
 * decision. At most max-proxy-drains at once (two watches each); the others wait their turn.
 *
 * One drainer at a time: the moment the agent reports again, the coordinator stops (no untaint)
 * and the agent resumes from the taint; if the agent falls silent again, the coordinator resumes
 * the same way. Pods already terminating are never evicted again by either.
 *
 * Termination stays with the provisioner: it asks proxy_drains_drained() besides the agent's
 * report, and terminates once drained or once the grace period has passed. */

typedef struct NodeEntry NodeEntry;
typedef struct Registry Registry;
typedef struct ProxyDrains ProxyDrains;

typedef struct ProxyDrainsConfig {
        uint64_t report_interval_ms;
        uint64_t agent_silent_intervals;  /* report intervals without a report: the agent is silent */
        uint64_t termination_grace_ms;    /* a drain's deadline when the NodePool sets none */
        uint64_t max_proxy_drains;        /* at once; 0: never */
        const char *(*acting_as)(void *userdata); /* this replica, for the log (NULL: the only one) */
        void *userdata;
} ProxyDrainsConfig;

/* registry: the nodes that report (the caller's); kube and the watches: the caller's. */
int proxy_drains_new(sd_event *e, const ProxyDrainsConfig *cfg, Registry *registry, KubeClient *kube,
                     KubeWatch *nodes, KubeWatch *nodepools, ProxyDrains **ret);
ProxyDrains *proxy_drains_free(ProxyDrains *pd);
DEFINE_TRIVIAL_CLEANUP_FUNC(ProxyDrains *, proxy_drains_free);

/* Start, update, withdraw or let go of drains (the leader calls it from its housekeeping).
 * leading_since_usec: a Node no agent ever reported to this coordinator counts as silent only
 * once the agents had their intervals to report after the leadership began. */
void proxy_drains_pass(ProxyDrains *pd, uint64_t leading_since_usec);
/* e's agent reported (any report, duplicates included): it takes the drain over at once. */
void proxy_drains_agent_reported(ProxyDrains *pd, const NodeEntry *e);
/* Leadership lost: every drain stops as it is; the next leader resumes from the taint. */
void proxy_drains_release_all(ProxyDrains *pd);

/* The coordinator drained the node: every pod that had to go is gone. */
bool proxy_drains_drained(const ProxyDrains *pd, const char *node);
/* How long a leaving node may take to drain before it is terminated anyway: its NodePool's
 * terminationGracePeriod, else the coordinator's termination-grace-period. */
uint64_t proxy_drains_grace_usec(const ProxyDrains *pd, const char *node);

/* Prometheus lines. */
void proxy_drains_metrics(const ProxyDrains *pd, StrBuf *b);
