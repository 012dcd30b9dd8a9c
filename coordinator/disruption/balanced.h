/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Balanced consolidation (Karpenter v1, consolidationPolicy: Balanced): a consolidation is worth
 * its disruption when the share of the NodePool's cost it saves, over the share of the pool's
 * disruption cost it spends, is at least 1/K (K: the pool's integer consolidationThreshold,
 * default 2). A node's disruption cost is 1 plus what its pods cost to evict
 * (solver_disruption_cost); a pool's, the sum over its nodes. Pure: no I/O. */

#include <stdbool.h>
#include <stddef.h>

#include "model/nodepool.h"
#include "solver/solver.h"

#define BALANCED_NODE_COST 1.0

/* The score: (savings / total_cost) / (disruption / total_disruption); -1 when a total is 0. */
double balanced_score(double savings, double disruption, double total_cost, double total_disruption);

/* Whether the consolidation of nodes (snapshot indices) from old_price to new_price passes the
 * Balanced test of every Balanced pool among them; nodes of other pools pass as they are. why
 * says the score either way (empty when no Balanced pool is involved). */
bool balanced_approves(const SolverSnapshot *sn, const NodePoolExtra *extra, const size_t *nodes, size_t n,
                       double old_price, double new_price, char *why, size_t size);
