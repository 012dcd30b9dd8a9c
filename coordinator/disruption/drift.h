/* SPDX-License-Identifier: Apache-2.0 */
/* Drift: a node against what its NodePool and EC2NodeClass ask for now. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "provision/provisioner.h"

/* Whether snapshot node i (of NodePool k, instance instance_id) has drifted, in Karpenter's
 * sense: its NodePool's template changed (hash), its EC2NodeClass changed (hash), the image
 * behind the class's alias is another now, its instance's subnet or security groups no longer
 * match the class's terms, or it no longer meets the NodePool's requirements. why says which
 * (size bytes) when true. o: the snapshot's objects; a: its arena (scratch space). */
bool disruption_drifted(Provisioner *p, const SolverSnapshot *sn, const NodepoolObjects *o, SolverArena *a, size_t i,
                        int k, const char *instance_id, char *why, size_t size);
