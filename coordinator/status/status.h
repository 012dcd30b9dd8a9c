/* SPDX-License-Identifier: Apache-2.0 */
/* The status of NodePools and EC2NodeClasses, written by the leader. */
#pragma once

#include <systemd/sd-event.h>

#include "strbuf.h"

/* The status of NodePools and EC2NodeClasses, written by the leader through the status
 * subresource (docs/observability.md): conditions (Ready, ValidationSucceeded, NodeClassReady;
 * SubnetsReady, SecurityGroupsReady, AMIsReady, InstanceProfileReady), a NodePool's
 * status.resources (the capacity of its nodes, and their number), an EC2NodeClass's resolved
 * subnets, security groups, AMIs and instance profile. Written only when it changed, as a merge
 * patch carrying the resourceVersion it was computed from: a conflict (409) is retried a second
 * later from the newer object. */
typedef struct StatusWriter StatusWriter;
typedef struct Provisioner Provisioner;
typedef struct Registry Registry;

/* Writes what the provisioner knows, through its client, while it leads, on loop e; registry:
 * the nodes that report (their capacity makes a NodePool's status.resources). */
int status_writer_new(sd_event *e, Provisioner *p, Registry *registry, StatusWriter **ret);
StatusWriter *status_writer_free(StatusWriter *s);
/* Write now (e.g. on becoming the leader) rather than at the next tick. */
void status_writer_poke(StatusWriter *s);
void status_writer_metrics(const StatusWriter *s, StrBuf *b);
