/* SPDX-License-Identifier: Apache-2.0 */
/* In-flight capacity shown as NodeClaims. */
#pragma once

#include "provision/provisioner.h"
#include "status/status.h"

/* In-flight capacity in kubectl (docs/observability.md): one read-only NodeClaim
 * (nodeclaims.nodesmith.io) per instance nodesmith launched, named NODEPOOL-INSTANCEID without
 * "i-": type, zone, capacity type, the pods it was launched for, the Node it became, and
 * conditions Launched, Registered, Ready; and one per NodePool whose launches fail
 * (Launched=False with EC2's error: the latest failure, kept 10 minutes after it). The leader
 * reconciles them with what it knows (instances in flight, Nodes with the nodesmith.io/nodepool
 * label) every status tick: created, updated, and deleted once the instance is gone. */

/* A launch gave this instance (provision/provisioner.c, after CreateFleet). */
void nodeclaims_launched(StatusWriter *s, const char *instance_id, const char *instance_type, const char *zone,
                         const char *capacity_type, const Round *rd, const SolverLaunch *l);
/* A launch step failed (code and message: EC2's). */
void nodeclaims_launch_failed(StatusWriter *s, const Round *rd, const SolverLaunch *l, const char *step,
                              const char *code, const char *message);
