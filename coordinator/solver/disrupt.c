/* SPDX-License-Identifier: Apache-2.0 */
/* Consolidation: which nodes can go, and whether one cheaper node should take their place.
 *
 * Every question is one placement (solver_provision with the nodes removed, at most one new
 * node, nothing pending): the pods of the removed nodes must all find a place, and so must the
 * NodePools' headroom. No new node: a delete. One new node: a replace, worth it only when the
 * new node costs at most (1 - threshold) x what it replaces. */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "solver-internal.h"

#define DEFAULT_MIN_SPOT_TYPES 15
#define DEFAULT_MAX_MULTI 100

static const char *const kind_names[] = {
        [SOLVER_CONSOLIDATE_NONE] = "none",
        [SOLVER_CONSOLIDATE_DELETE] = "delete",
        [SOLVER_CONSOLIDATE_REPLACE] = "replace",
};

const char *solver_consolidation_kind_to_name(SolverConsolidationKind k) {
        if ((unsigned) k >= ELEMENTSOF(kind_names))
                return "?";
        return kind_names[k];
}

static double clampd(double v, double lo, double hi) {
        return v < lo ? lo : v > hi ? hi : v;
}

/* Karpenter's eviction cost of one pod. */
static double pod_cost(const SolverPod *p) {
        double c = 1.0 + (double) p->deletion_cost / 134217728.0 /* 2^27 */ +
                   (double) p->priority / 33554432.0 /* 2^25 */;
        return clampd(c, -10.0, 10.0);
}

double solver_disruption_cost(const SolverSnapshot *snap, size_t node) {
        double c = 0;
        if (!snap || node >= snap->n_nodes)
                return 0;
        const char *name = snap->nodes[node].name;
        for (size_t i = 0; i < snap->n_pods; i++) {
                const SolverPod *p = &snap->pods[i];
                if (p->node_name && !p->daemonset && streq_ptr(p->node_name, name))
                        c += pod_cost(p);
        }
        return c;
}

/* The same from the compiled snapshot: the node's bound pods are grouped already. */
static double node_cost(const Solver *s, size_t ni, size_t *ret_pods) {
        double c = 0;
        size_t n = 0;
        if (ni < s->n_existing) {
                const Node *nd = &s->nodes[ni];
                for (uint32_t k = 0; k < nd->n_bound; k++) {
                        const SolverPod *p = &s->snap->pods[s->bound[nd->first_bound + k]];
                        if (p->daemonset)
                                continue;
                        c += pod_cost(p);
                        n++;
                }
        }
        if (ret_pods)
                *ret_pods = n;
        return c;
}

SolverConsolidation *solver_consolidation_free(SolverConsolidation *c) {
        if (c) {
                solver_result_free(c->result);
                free(c->nodes);
                free(c);
        }
        return NULL;
}

static int pool_of(const Solver *s, size_t ni) {
        const char *pool = s->snap->nodes[ni].nodepool;
        for (size_t k = 0; pool && k < s->snap->n_nodepools; k++)
                if (streq(pool, s->snap->nodepools[k].name))
                        return (int) k;
        return -1;
}

/* Cuts the replacement's offerings to those it may be: cheap enough, of an allowed capacity
 * type; then to the capacity type of the cheapest of them. Returns how many remain. */
static size_t cut_offerings(SolverLaunch *l, double limit, bool allow_spot, size_t min_spot_types, char *why,
                            size_t why_size) {
        size_t n = 0, spot_types = 0;
        bool any_spot = false;
        for (size_t i = 0; i < l->n_offerings; i++) {
                const SolverLaunchOffering *of = &l->offerings[i];
                if (!(of->price < limit) || (of->capacity_type == SOLVER_CAPACITY_SPOT && !allow_spot))
                        continue;
                l->offerings[n++] = *of;
                if (of->capacity_type == SOLVER_CAPACITY_SPOT)
                        any_spot = true;
        }
        /* spot for spot: only with enough cheaper types left that the spot market choice stays
         * healthy (price-capacity-optimized needs room to choose) */
        if (any_spot && min_spot_types > 0) {
                for (size_t i = 0; i < n; i++) {
                        if (l->offerings[i].capacity_type != SOLVER_CAPACITY_SPOT)
                                continue;
                        bool seen = false;
                        for (size_t j = 0; j < i && !seen; j++)
                                seen = l->offerings[j].capacity_type == SOLVER_CAPACITY_SPOT &&
                                       l->offerings[j].type == l->offerings[i].type;
                        if (!seen)
                                spot_types++;
                }
                if (spot_types < min_spot_types) {
                        size_t k = 0;
                        for (size_t i = 0; i < n; i++)
                                if (l->offerings[i].capacity_type != SOLVER_CAPACITY_SPOT)
                                        l->offerings[k++] = l->offerings[i];
                        n = k;
                        if (n == 0)
                                snprintf(why, why_size,
                                         "only %zu cheaper spot instance type(s), fewer than the %zu a spot-to-spot "
                                         "replacement needs", spot_types, min_spot_types);
                }
        }
        if (n == 0) {
                l->n_offerings = 0;
                return 0;
        }
        SolverCapacityType ct = l->offerings[0].capacity_type;
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (l->offerings[i].capacity_type == ct)
                        l->offerings[k++] = l->offerings[i];
        l->n_offerings = k;
        l->capacity_type = ct;
        l->price = l->offerings[0].price;
        l->type = l->offerings[0].type;
        size_t types = 0;
        for (size_t i = 0; i < k; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = l->offerings[j].type == l->offerings[i].type;
                types += !seen;
        }
        l->n_types = types;
        return k;
}

/* One placement for the set; fills c's result, kind and message. */
static int evaluate_once(Solver *s, const SolverConsolidateOptions *o, SolverConsolidation *c, bool all_spot,
                         bool allow_spot, bool *ret_retry_on_demand) {
        const SolverSnapshot *snap = s->snap;
        SolverOptions po = SOLVER_OPTIONS_DEFAULT;
        po.skip_pending = true;
        po.remove_nodes = c->nodes;
        po.n_remove_nodes = c->n_nodes;
        po.max_new_nodes = o->no_replace ? 0 : 1;
        po.stop_at_first_failure = true;
        po.no_preemption = true;
        po.on_demand_only = !allow_spot;
        c->result = solver_result_free(c->result);
        c->replacement = NULL;
        c->kind = SOLVER_CONSOLIDATE_NONE;
        int q = solver_provision(s, &po, &c->result);
        c->evaluations++;
        if (q < 0)
                return q;
        const SolverResult *res = c->result;
        if (res->n_unschedulable > 0) {
                const char *msg = NULL;
                for (size_t i = 0; i < res->n_decisions && !msg; i++)
                        if (res->decisions[i].kind == SOLVER_DECISION_UNSCHEDULABLE)
                                msg = res->decisions[i].message;
                snprintf(c->message, sizeof c->message, "pods would not fit elsewhere%s%s",
                         msg ? ": " : "", strempty(msg));
                return 0;
        }
        if (res->n_headroom_unplaced > 0) {
                snprintf(c->message, sizeof c->message, "the NodePool headroom would no longer fit");
                return 0;
        }
        if (res->n_launches == 0) {
                c->kind = SOLVER_CONSOLIDATE_DELETE;
                snprintf(c->message, sizeof c->message, "%zu pod(s) fit on the other nodes; saves $%.4f/h",
                         c->n_pods, c->old_price);
                return 0;
        }
        /* one new node: cheap enough? */
        SolverLaunch *l = &c->result->launches[0];
        double threshold = clampd(o->threshold, 0.0, 1.0);
        double limit = c->old_price * (1.0 - threshold);
        size_t min_spot = all_spot ? (o->min_spot_types ? o->min_spot_types : DEFAULT_MIN_SPOT_TYPES) : 0;
        char why[160] = "";
        if (cut_offerings(l, limit, allow_spot, min_spot, why, sizeof why) == 0) {
                if (why[0]) {
                        snprintf(c->message, sizeof c->message, "%s", why);
                        *ret_retry_on_demand = allow_spot;
                } else if (!allow_spot)
                        snprintf(c->message, sizeof c->message,
                                 "no on-demand replacement costs less than $%.4f/h (spot-to-spot %s)", limit,
                                 o->spot_to_spot ? "is for single nodes only" : "is off");
                else
                        snprintf(c->message, sizeof c->message,
                                 "no replacement costs less than $%.4f/h (%.0f%% below $%.4f/h)", limit,
                                 threshold * 100.0, c->old_price);
                return 0;
        }
        c->kind = SOLVER_CONSOLIDATE_REPLACE;
        c->new_price = l->price;
        c->replacement = l;
        snprintf(c->message, sizeof c->message,
                 "%zu pod(s) fit on the other nodes and one %s %s at $%.4f/h; saves $%.4f/h", c->n_pods,
                 solver_capacity_type_to_name(l->capacity_type), snap->types[l->type].name, l->price,
                 c->old_price - l->price);
        return 0;
}

int solver_consolidate_evaluate(Solver *s, const SolverConsolidateOptions *o, const size_t *nodes,
                                size_t n_nodes, SolverConsolidation **ret) {
        if (!s || !o || !ret || (n_nodes > 0 && !nodes))
                return -EINVAL;
        const SolverSnapshot *snap = s->snap;
        SolverConsolidation *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->nodes = malloc((n_nodes + 1) * sizeof(size_t));
        if (!c->nodes) {
                free(c);
                return -ENOMEM;
        }
        bool all_spot = n_nodes > 0;
        for (size_t i = 0; i < n_nodes; i++) {
                if (nodes[i] >= snap->n_nodes || nodes[i] >= s->n_existing) {
                        solver_consolidation_free(c);
                        return -EINVAL;
                }
                size_t np;
                c->nodes[c->n_nodes++] = nodes[i];
                c->old_price += snap->nodes[nodes[i]].price;
                (void) node_cost(s, nodes[i], &np);
                c->n_pods += np;
                if (snap->nodes[nodes[i]].capacity_type != SOLVER_CAPACITY_SPOT)
                        all_spot = false;
        }
        if (n_nodes == 0) {
                snprintf(c->message, sizeof c->message, "no candidates");
                *ret = c;
                return 0;
        }
        /* spot is replaced by spot only when allowed, for one node */
        bool allow_spot = !all_spot || (o->spot_to_spot && n_nodes == 1), retry = false;
        int q = evaluate_once(s, o, c, all_spot, allow_spot, &retry);
        if (q >= 0 && retry)
                q = evaluate_once(s, o, c, all_spot, false, &retry);
        if (q < 0) {
                solver_consolidation_free(c);
                return q;
        }
        *ret = c;
        return 0;
}

typedef struct Cand {
        size_t node;
        double cost;
        double price;
        int pool;
} Cand;

static int cand_cmp(const void *a, const void *b) {
        const Cand *x = a, *y = b;
        if (x->cost != y->cost)
                return x->cost < y->cost ? -1 : 1;
        if (x->price != y->price)
                return x->price > y->price ? -1 : 1; /* the dearer first among equals */
        return x->node < y->node ? -1 : x->node > y->node;
}

int solver_consolidate(Solver *s, const SolverConsolidateOptions *o, SolverConsolidation **ret) {
        if (!s || !o || !ret || (o->n_candidates > 0 && !o->candidates))
                return -EINVAL;
        const SolverSnapshot *snap = s->snap;
        size_t nc = 0, evaluations = 0;
        Cand *cand = calloc(o->n_candidates + 1, sizeof *cand);
        size_t *set = calloc(o->n_candidates + 1, sizeof *set);
        size_t *taken = calloc(snap->n_nodepools + 1, sizeof *taken);
        SolverConsolidation *best = NULL, *c = NULL;
        char first_why[320] = "";
        int q = 0;
        if (!cand || !set || !taken) {
                q = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < o->n_candidates; i++) {
                size_t ni = o->candidates[i];
                if (ni >= snap->n_nodes || ni >= s->n_existing)
                        continue;
                bool dup = false;
                for (size_t j = 0; j < nc && !dup; j++)
                        dup = cand[j].node == ni;
                if (dup)
                        continue;
                cand[nc++] = (Cand) { .node = ni, .cost = node_cost(s, ni, NULL), .price = snap->nodes[ni].price,
                                      .pool = pool_of(s, ni) };
        }
        qsort(cand, nc, sizeof *cand, cand_cmp);

        /* multi-node: the largest prefix (within the budgets) worth taking away at once */
        size_t ns = 0, max_multi = o->max_multi ? o->max_multi : DEFAULT_MAX_MULTI;
        for (size_t i = 0; i < nc && ns < max_multi; i++) {
                int k = cand[i].pool;
                if (o->pool_allowance && k >= 0) {
                        if (taken[k] >= o->pool_allowance[k])
                                continue;
                        taken[k]++;
                }
                set[ns++] = cand[i].node;
        }
        if (!o->no_multi && ns >= 2) {
                size_t lo = 2, hi = ns;
                while (lo <= hi) {
                        size_t mid = lo + (hi - lo) / 2;
                        q = solver_consolidate_evaluate(s, o, set, mid, &c);
                        if (q < 0)
                                goto out;
                        evaluations++;
                        if (c->kind != SOLVER_CONSOLIDATE_NONE) {
                                solver_consolidation_free(best);
                                best = TAKE_PTR(c);
                                best->multi = true;
                                lo = mid + 1;
                        } else {
                                c = solver_consolidation_free(c);
                                hi = mid - 1;
                        }
                }
                if (best)
                        goto out;
        }

        /* single node: the first candidate, cheapest to disrupt first */
        for (size_t i = 0; !o->no_single && i < nc; i++) {
                int k = cand[i].pool;
                if (o->pool_allowance && k >= 0 && o->pool_allowance[k] == 0)
                        continue;
                q = solver_consolidate_evaluate(s, o, &cand[i].node, 1, &c);
                if (q < 0)
                        goto out;
                evaluations++;
                if (c->kind != SOLVER_CONSOLIDATE_NONE) {
                        best = TAKE_PTR(c);
                        goto out;
                }
                if (!first_why[0])
                        snprintf(first_why, sizeof first_why, "%.63s: %.250s", snap->nodes[cand[i].node].name,
                                 c->message);
                c = solver_consolidation_free(c);
        }
out:
        if (q >= 0 && !best) {
                best = calloc(1, sizeof *best);
                if (!best)
                        q = -ENOMEM;
                else
                        snprintf(best->message, sizeof best->message, "%zu candidate(s), none worth disrupting%s%.200s",
                                 nc, first_why[0] ? "; first: " : "", first_why);
        }
        solver_consolidation_free(c);
        free(cand);
        free(set);
        free(taken);
        if (q < 0) {
                solver_consolidation_free(best);
                return q;
        }
        best->evaluations = evaluations;
        *ret = best;
        return 0;
}
