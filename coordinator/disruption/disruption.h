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

#include <stdint.h>

#include "strbuf.h"

typedef struct Provisioner Provisioner;
typedef struct Disruption Disruption;
typedef struct NodeEntry NodeEntry;
typedef struct cJSON cJSON;

int disruption_new(Disruption **ret);
Disruption *disruption_free(Disruption *d);

/* One pass (from the housekeeping timer). 0 when it decided (or had nothing to decide, or was
 * not its turn); -errno when it stopped on a failure, which it has logged once and counted in
 * nodesmith_disruption_pass_failures_total. */
int disruption_pass(Provisioner *p);
/* An instance launched: if nodes are being replaced, it is their replacement, and the churn
 * guard keeps consolidation off it for a while. */
void disruption_launched(Provisioner *p, const char *instance_id);
/* Pending pods were planned onto this existing node: it is no consolidation candidate for a
 * while. */
void disruption_nominated(Provisioner *p, const char *node);
/* The labels a node is launched with so that drift can be told later: nodesmith.io/nodepool-hash
 * (the NodePool's spec.template but its requirements, expireAfter and terminationGracePeriod) and
 * nodesmith.io/nodeclass-hash (the EC2NodeClass's spec but its subnet selector). NULL objects
 * give no label (*ret NULL). */
#define DISRUPTION_LABEL_POOL_HASH "nodesmith.io/nodepool-hash"
#define DISRUPTION_LABEL_CLASS_HASH "nodesmith.io/nodeclass-hash"
#define DISRUPTION_LABEL_IMAGE "nodesmith.io/image-id"
void disruption_pool_hash(const cJSON *nodepool, char out[17]);
void disruption_class_hash(const cJSON *nodeclass, char out[17]);

void disruption_metrics(Provisioner *p, StrBuf *b);
