/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "coordinator.h"
#include "provision/provisioner-internal.h"

/* Events a person reads with kubectl describe (docs/observability.md), posted by the leader:
 *  - on a pending pod nodesmith cannot place: FailedScheduling, with the solver's reason in
 *    words (posted again only when the reason changes);
 *  - on a Node: interruption notices recorded and withdrawn, and the drain they call for.
 * (Nominations, launches, disruption decisions and drain steps are posted where they happen:
 * provision/, disruption/, agents/proxydrain.c, node/drain.c.) */

/* After a provisioning round's solve. */
void events_pod_decisions(Coordinator *c, const Round *rd);
/* A notice recorded (added) or withdrawn on a node. */
void events_notice(Coordinator *c, const NodeEntry *e, const char *kind, const char *event_id, int64_t deadline_in_ms,
                   bool added);
/* The directive of a node changed because of its notices. */
void events_notice_drain(Coordinator *c, const NodeEntry *e, bool drain);
/* The pod's uid from a round's "namespace/uid" key. */
const char *events_pod_uid(const char *key);
