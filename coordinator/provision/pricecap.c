/* SPDX-License-Identifier: Apache-2.0 */
/* A consolidation's replacement carries a price cap: it must cost less than the node(s) it
 * replaces (NodeEntry.replace_price_cap, set when disruption/ decides the replace).
 *
 * The replacement is the launch of a later provisioning round that places the replaced nodes'
 * pods. A launch holding only pods that come off nodes a consolidation is replacing is capped at
 * the sum of those consolidations' caps (the nodes of one consolidation share the cap and the
 * time it started). Its CreateFleet lists only offerings under the cap, so when the evaluated
 * offering has no capacity EC2 falls back only to cheaper ones; and when no offering under the
 * cap is left (the plan's cheapest one is at or above it, say once capacity errors took the
 * cheap ones away), the replacement is abandoned: the nodes are no longer being replaced, their
 * pods stay where they are, and a later consolidation pass decides again on what is available.
 * A launch that also holds other pods (pending ones, pods of a drifted or draining node) is not
 * a replacement alone and is not capped. */

#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

#define MAX_GROUPS 16 /* consolidations one launch serves, at most (more: no cap) */

/* The entry of a node being replaced under a cap whose agent reports the pod; NULL if none. */
static NodeEntry *capped_source(const Registry *reg, const SolverPod *sp) {
        NodeEntry *e;
        REGISTRY_FOREACH(e, reg) {
                if (!e->replace_started_usec || e->replace_price_cap <= 0 || !e->state)
                        continue;
                for (size_t i = 0; i < e->state->n_pods; i++) {
                        const Nodesmith__V1__Pod *pp = e->state->pods[i];
                        if (!pp->daemonset && streq_ptr(pp->name, sp->name) && streq_ptr(pp->namespace_, sp->namespace_))
                                return e;
                }
        }
        return NULL;
}

double provision_price_cap(const Registry *reg, const SolverSnapshot *snap, const SolverLaunch *l) {
        uint64_t seen[MAX_GROUPS];
        size_t n_seen = 0;
        double cap = 0;
        if (l->n_pods == 0 || l->headroom_units > 0)
                return 0;
        for (size_t i = 0; i < l->n_pods; i++) {
                const SolverPod *sp = &snap->pods[l->pods[i]];
                const NodeEntry *e = sp->node_name ? NULL : capped_source(reg, sp);
                if (!e)
                        return 0;
                bool known = false;
                for (size_t k = 0; k < n_seen && !known; k++)
                        known = seen[k] == e->replace_started_usec;
                if (known)
                        continue;
                if (n_seen == MAX_GROUPS)
                        return 0;
                seen[n_seen++] = e->replace_started_usec;
                cap += e->replace_price_cap;
        }
        return cap;
}

bool provision_price_cap_allows(double cap, double price) {
        return cap <= 0 || price < cap * (1 - 1e-9);
}

size_t provision_price_cap_abandon(Registry *reg, const SolverSnapshot *snap, const SolverLaunch *l) {
        size_t n = 0;
        for (size_t i = 0; i < l->n_pods; i++) {
                NodeEntry *e = capped_source(reg, &snap->pods[l->pods[i]]);
                if (!e)
                        continue;
                uint64_t group = e->replace_started_usec;
                NodeEntry *x;
                REGISTRY_FOREACH(x, reg)
                        if (x->replace_started_usec == group && x->replace_price_cap > 0) {
                                x->replace_started_usec = 0;
                                x->replace_price_cap = 0;
                                n++;
                        }
        }
        return n;
}
