/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "balanced.h"
#include "macro.h"

double balanced_score(double savings, double disruption, double total_cost, double total_disruption) {
        if (total_cost <= 0 || total_disruption <= 0)
                return -1;
        if (disruption <= 0)
                return savings > 0 ? 1e9 : 0;
        return (savings / total_cost) / (disruption / total_disruption);
}

static int pool_of(const SolverSnapshot *sn, const char *name) {
        for (size_t k = 0; name && k < sn->n_nodepools; k++)
                if (streq(sn->nodepools[k].name, name))
                        return (int) k;
        return -1;
}

bool balanced_approves(const SolverSnapshot *sn, const NodePoolExtra *extra, const size_t *nodes, size_t n,
                       double old_price, double new_price, char *why, size_t size) {
        if (size)
                why[0] = 0;
        for (size_t a = 0; a < n; a++) {
                int k = pool_of(sn, sn->nodes[nodes[a]].nodepool);
                if (k < 0 || extra[k].balanced_k <= 0)
                        continue;
                bool seen = false; /* each Balanced pool once */
                for (size_t b = 0; b < a && !seen; b++)
                        seen = pool_of(sn, sn->nodes[nodes[b]].nodepool) == k;
                if (seen)
                        continue;
                /* the pool's totals, and its share of the move: the saving split by what its
                 * nodes in the move cost, as Karpenter splits a command across pools */
                double total_cost = 0, total_disruption = 0, cost = 0, disruption = 0;
                for (size_t i = 0; i < sn->n_nodes; i++) {
                        if (pool_of(sn, sn->nodes[i].nodepool) != k)
                                continue;
                        double d = BALANCED_NODE_COST + solver_disruption_cost(sn, i);
                        total_cost += sn->nodes[i].price;
                        total_disruption += d;
                        for (size_t c = 0; c < n; c++)
                                if (nodes[c] == i) {
                                        cost += sn->nodes[i].price;
                                        disruption += d;
                                }
                }
                double savings = old_price > 0 ? (old_price - new_price) * cost / old_price : 0;
                double score = balanced_score(savings, disruption, total_cost, total_disruption);
                double need = 1.0 / extra[k].balanced_k;
                snprintf(why, size, "Balanced NodePool %s: saves %.1f%% of its cost for %.1f%% of its disruption cost, "
                         "score %.2f %s 1/%d", sn->nodepools[k].name, total_cost > 0 ? 100 * savings / total_cost : 0,
                         total_disruption > 0 ? 100 * disruption / total_disruption : 0, score,
                         score >= need ? ">=" : "<", extra[k].balanced_k);
                if (score < need)
                        return false;
        }
        return true;
}
