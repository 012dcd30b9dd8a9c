/* SPDX-License-Identifier: Apache-2.0 */
/* Static NodePools (Karpenter's spec.replicas): a pool that keeps exactly `replicas` nodes,
 * whatever the pods. place.c opens no node of such a pool for pending pods; after the pods are
 * placed, each static pool short of nodes gets empty ones: the pool's types that hold its
 * DaemonSets, offered in one of its zones, the zone with the fewest of the pool's nodes first
 * (Karpenter spreads static nodes over the zones the requirements allow). The launch then takes
 * the cheapest offering, as any other. */
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "solver-internal.h"

size_t solver_static_missing(const SolverSnapshot *snap, size_t k) {
        if (!snap || k >= snap->n_nodepools || !snap->nodepools[k].is_static)
                return 0;
        const SolverNodePool *np = &snap->nodepools[k];
        size_t have = 0, all = 0;
        for (size_t i = 0; i < snap->n_nodes; i++)
                if (streq_ptr(snap->nodes[i].nodepool, np->name)) {
                        all++;
                        have += !snap->nodes[i].deleting;
                }
        size_t missing = have < np->replicas ? np->replicas - have : 0;
        /* limits.nodes counts every node of the pool, leaving ones too (Karpenter: set it above
         * replicas to let a drifted node's replacement come up before it goes) */
        if (np->has_node_limit)
                missing = MIN(missing, np->node_limit > (int64_t) all ? (size_t) (np->node_limit - (int64_t) all) : 0);
        return missing;
}

/* The pool's types offered in slots sl that hold its DaemonSets, into out; false: none. */
static bool static_types(Solver *s, const Pool *p, uint64_t sl, uint64_t *out) {
        solver_offer_set(s, sl, out);
        bool any = false;
        for (uint32_t w = 0; w < s->W; w++)
                out[w] &= p->types[w];
        BS_FOREACH(t, out, s->W) {
                const int64_t *a = p->fit->alloc + (size_t) t * R_MAX;
                bool fits = true;
                for (int r = 0; r < R_MAX && fits; r++)
                        fits = a[r] >= p->ds.v[r];
                if (!fits)
                        out[t / 64] &= ~(((uint64_t) 1) << (t % 64));
                else
                        any = true;
        }
        return any;
}

static int open_static(Solver *s, uint32_t pi, int z, uint64_t sl, const uint64_t *types) {
        const Pool *p = &s->pools[pi];
        int q = solver_grow_nodes(s, s->n_nodes + 1);
        if (q < 0)
                return q;
        uint32_t ni = s->n_nodes++;
        Node *n = &s->nodes[ni];
        *n = (Node) { .kind = NODE_NEW, .zone = z, .pool = pi, .slots = sl, .is_static = true,
                      .types = s->node_types + (size_t) ni * 3 * s->W, .custom = &p->custom };
        n->budget = n->types + s->W;
        n->base = n->types + 2 * s->W;
        memcpy(n->types, types, s->W * sizeof(uint64_t));
        memcpy(n->base, types, s->W * sizeof(uint64_t));
        for (int r = 0; r < R_MAX; r++)
                n->used[r] = p->ds.v[r];
        s->new_nodes++;
        return 0;
}

int solver_static_open(Solver *s) {
        uint32_t nz = s->n_zones;
        _cleanup_free_ uint64_t *bits = calloc((size_t) (nz + 1) * s->W + 1, sizeof(uint64_t));
        _cleanup_free_ uint32_t *count = calloc(nz + 1, sizeof(uint32_t));
        if (!bits || !count)
                return -ENOMEM;
        for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                const Pool *p = &s->pools[pi];
                size_t missing = solver_static_missing(s->snap, p->index);
                if (missing == 0)
                        continue;
                uint64_t all = p->slots;
                if (s->opts->on_demand_only)
                        all &= slots_of_ct(SOLVER_CAPACITY_ON_DEMAND);
                /* the pool's nodes by zone; which zones offer a type that holds its DaemonSets */
                memset(count, 0, (nz + 1) * sizeof(uint32_t));
                for (uint32_t i = 0; i < s->n_existing; i++)
                        if (s->nodes[i].pool == pi && !s->snap->nodes[i].deleting && s->nodes[i].zone >= 0 &&
                            (uint32_t) s->nodes[i].zone < nz)
                                count[s->nodes[i].zone]++;
                uint32_t usable = 0;
                for (uint32_t z = 0; z < nz; z++)
                        if ((all & slots_of_zone((int) z)) &&
                            static_types(s, p, all & slots_of_zone((int) z), bits + (size_t) z * s->W))
                                usable |= 1u << z;
                for (size_t k = 0; k < missing && usable; k++) {
                        uint32_t best = NONE32;
                        for (uint32_t z = 0; z < nz; z++)
                                if ((usable & (1u << z)) && (best == NONE32 || count[z] < count[best]))
                                        best = z;
                        int q = open_static(s, pi, (int) best, all & slots_of_zone((int) best),
                                            bits + (size_t) best * s->W);
                        if (q < 0)
                                return q;
                        count[best]++;
                }
        }
        return 0;
}
