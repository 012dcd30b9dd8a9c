/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Disruption: what the coordinator removes, one decision per pass, in Karpenter's order:
 *   1. expiration  (expireAfter reached: drain now, replacement planned at once; no budget)
 *   2. drift       (NodePool template or EC2NodeClass changed, or the node no longer meets the
 *                   NodePool's requirements; a NodePool gone): replace, then drain, within the
 *                   Drifted budget
 *   3. emptiness   (no pods but DaemonSet pods for consolidateAfter): delete, Empty budget
 *   4. multi-node consolidation, 5. single-node consolidation (coordinator/solver/disrupt.c):
 *                   delete, or replace with one cheaper node, Underutilized budget
 * Consolidation decisions wait --consolidation-validation-delay and are made again on fresh
 * reports before they act. A replace launches the new node first (the old node's pods are
 * planned as if it were gone) and drains the old one once nothing is in flight any more.
 * Interruption notices are acted on as they arrive (server.c, policy.c), not here. */

#include <stdbool.h>
#include <stdint.h>

#include "strbuf.h"

typedef struct Provisioner Provisioner;
typedef struct Registry Registry;

typedef struct DisruptionConfig {
        uint64_t consolidation_validation_ms; /* a consolidation is made again after this, then acts */
        bool spot_to_spot;                    /* spot may be replaced by cheaper spot */
        uint64_t report_interval_ms;          /* what agents are asked: a node's pods have settled
                                               * two intervals after they changed, and a new leader
                                               * waits as long before its first pass */
} DisruptionConfig;
typedef struct Disruption Disruption;
typedef struct NodeEntry NodeEntry;
typedef struct cJSON cJSON;

/* p: the provisioner whose snapshot it decides on and whose launches replace nodes (through
 * provisioner.h only); registry: the nodes that report, told to drain or to be replaced (both
 * the caller's, outliving the Disruption). */
int disruption_new(Provisioner *p, Registry *registry, const DisruptionConfig *cfg, Disruption **ret);
Disruption *disruption_free(Disruption *d);

/* One pass (the provisioner's housekeeping asks for it every consolidation-interval). 0 when it
 * decided (or had nothing to decide, or was not its turn); -errno when it stopped on a failure,
 * which it has logged once and counted in nodesmith_disruption_pass_failures_total. */
int disruption_pass(Disruption *d);
/* An instance launched: if nodes are being replaced, it is their replacement, and the churn
 * guard keeps consolidation off it for a while. */
void disruption_launched(Disruption *d, const char *instance_id);
/* Pending pods were planned onto this existing node: it is no consolidation candidate for a
 * while. */
void disruption_nominated(Disruption *d, const char *node);
void disruption_metrics(const Disruption *d, StrBuf *b);
/* The last pass explained, for /api/v1/disruption (malloc'ed JSON). */
char *disruption_api(const Disruption *d);
