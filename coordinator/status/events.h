/* SPDX-License-Identifier: Apache-2.0 */
/* Events posted by the leader for kubectl describe. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "provision/provisioner.h"

/* Events a person reads with kubectl describe (docs/observability.md), posted by the leader:
 *  - on a pending pod nodesmith cannot place: FailedScheduling, with the solver's reason in
 *    words (posted again only when the reason changes);
 *  - on a Node: interruption notices recorded and withdrawn, and the drain they call for.
 * (Nominations, launches, disruption decisions and drain steps are posted where they happen:
 * provision/, disruption/, agents/proxydrain.c, node/drain.c.) */

/* After a provisioning round's solve. */
void events_pod_decisions(Provisioner *p, const Round *rd);
/* A notice recorded (added) or withdrawn on a node. */
void events_notice(Provisioner *p, const NodeEntry *e, const char *kind, const char *event_id, int64_t deadline_in_ms,
                   bool added);
/* The directive of a node changed because of its notices. */
void events_notice_drain(Provisioner *p, const NodeEntry *e, bool drain);
