/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "strbuf.h"

/* Provisioning: pending pods become EC2 instances.
 *
 * Watches unscheduled pods, NodePools, EC2NodeClasses, DaemonSets and Nodes. Pods that the
 * scheduler marked Unschedulable open a batch (1 s idle, 10 s at most); the batch builds a
 * snapshot (the catalog, NodePools, Nodes with the pods their agents report, instances launched
 * but not yet registered) and asks the solver where the pods go. Each new node of the plan is
 * launched with CreateFleet (instant): ranked overrides over instance types and subnets, a
 * ClientToken derived from the plan, so a retry never doubles capacity. Offerings that report
 * insufficient capacity are left out for 3 minutes and the batch is solved again. Instances
 * that never register are terminated. Only the leader acts; a new leader first learns the
 * instances already launched (EC2 tag nodesmith.io/cluster) and counts them as in flight. */

typedef struct Coordinator Coordinator;
typedef struct Provisioner Provisioner;

int provisioner_new(Coordinator *c, Provisioner **ret);
Provisioner *provisioner_free(Provisioner *p);
void provisioner_set_leading(Provisioner *p, bool leading);
typedef struct NodeEntry NodeEntry;
/* A node was told to drain (a notice, a disruption decision): plan replacement capacity for
 * its pods now; a spot interruption also takes that spot offering out for a while. */
void provisioner_node_leaving(Provisioner *p, const NodeEntry *e);
struct cJSON;
/* The Node whose spec.providerID (aws:///ZONE/ID) names the instance, from the Node watch:
 * -EAGAIN until the watch has listed the Nodes, -ENOENT when there is none. */
/* The Node watch (NULL without provisioning), for binding reports to their Node (nodebind.h). */
struct KubeWatch;
const struct KubeWatch *provisioner_nodes(Provisioner *p);
int provisioner_find_node(Provisioner *p, const char *instance_id, const struct cJSON **ret);
/* An instance launched but not registered yet is going away (a spot interruption, a state
 * change to stopping or terminated): it no longer counts as capacity on the way and its pods
 * are planned again at once; a spot one takes its offering out for a while (EC2 took the
 * capacity back, and a new plan gets a new ClientToken). false: the instance is not in flight. */
bool provisioner_instance_leaving(Provisioner *p, const char *instance_id);
/* Prometheus lines. */
void provisioner_metrics(Provisioner *p, StrBuf *b);
/* {"inFlight": [...], "pending": N, ...} for /api/v1/provisioning. */
char *provisioner_api(Provisioner *p);
/* The last disruption pass explained, for /api/v1/disruption. */
char *provisioner_disruption_api(Provisioner *p);
