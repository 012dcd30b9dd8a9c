/* SPDX-License-Identifier: Apache-2.0 */
/* The undo log of placement: every change to node usage and topology counts is recorded so
 * that a trial placement can be rolled back. */

#include "macro.h"
#include "solver-internal.h"

/* ---- undo log ------------------------------------------------------------------------------- */

int solver_undo_push(Solver *s, UndoKind k, uint32_t a, uint32_t b, int64_t v) {
        if (s->n_undo == s->cap_undo) {
                size_t nc = s->cap_undo ? s->cap_undo * 2 : 1024;
                Undo *nu = realloc(s->undo, nc * sizeof(Undo));
                if (!nu)
                        return -ENOMEM;
                s->undo = nu;
                s->cap_undo = nc;
        }
        s->undo[s->n_undo++] = (Undo) { .kind = (uint8_t) k, .a = a, .b = b, .v = v };
        return 0;
}

void solver_undo_all(Solver *s) {
        for (size_t i = s->n_undo; i-- > 0;) {
                const Undo *u = &s->undo[i];
                switch ((UndoKind) u->kind) {
                case U_USED:
                        s->nodes[u->a].used[u->b] = u->v;
                        break;
                case U_NPODS:
                        s->nodes[u->a].n_pods = (uint32_t) u->v;
                        break;
                case U_REMOVED:
                        s->nodes[u->a].removed = u->v;
                        break;
                case U_NPORTS:
                        s->nodes[u->a].n_ports = (uint32_t) u->v;
                        break;
                case U_TOTAL:
                        s->groups[u->a].total = u->v;
                        break;
                case U_ZCOUNT:
                        s->groups[u->a].zcount[u->b] = (int32_t) u->v;
                        break;
                case U_ZOWNERS:
                        s->groups[u->a].zowners[u->b] = (int32_t) u->v;
                        break;
                case U_HCOUNT:
                        s->groups[u->a].hcount[u->b] = (int32_t) u->v;
                        break;
                case U_HOWNERS:
                        s->groups[u->a].howners[u->b] = (int32_t) u->v;
                        break;
                case U_PREEMPTED:
                        s->preempted[u->a] = (uint8_t) u->v;
                        break;
                }
        }
        s->n_undo = 0;
        /* new nodes go away; their host counts return to zero */
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                if (gr->key != TOPO_HOST || s->n_nodes <= s->n_existing)
                        continue;
                memset(gr->hcount + s->n_existing, 0, (s->n_nodes - s->n_existing) * sizeof(int32_t));
                memset(gr->howners + s->n_existing, 0, (s->n_nodes - s->n_existing) * sizeof(int32_t));
        }
        for (uint32_t i = s->n_existing; i < s->n_nodes; i++)
                free(s->nodes[i].ports);
        s->n_nodes = s->n_existing;
}

/* Changes to base state (existing nodes, groups) are logged; new nodes are thrown away. */
int solver_set_used(Solver *s, uint32_t ni, int r, int64_t v) {
        Node *n = &s->nodes[ni];
        if (n->kind == NODE_EXISTING) {
                int q = solver_undo_push(s, U_USED, ni, (uint32_t) r, n->used[r]);
                if (q < 0)
                        return q;
        }
        n->used[r] = v;
        return 0;
}

int solver_set_npods(Solver *s, uint32_t ni, uint32_t v) {
        Node *n = &s->nodes[ni];
        if (n->kind == NODE_EXISTING) {
                int q = solver_undo_push(s, U_NPODS, ni, 0, n->n_pods);
                if (q < 0)
                        return q;
        }
        n->n_pods = v;
        return 0;
}

/* The capacity type of node ni: a planned node has one once its offerings are all of one type
 * (-1 before: its pods count in no capacity-type domain, as in Karpenter). */
static int node_ct(const Solver *s, uint32_t ni) {
        if (ni < s->n_existing)
                return snap_ct(s, ni);
        uint64_t sl = s->nodes[ni].slots;
        if (!(sl & slots_of_ct(SOLVER_CAPACITY_SPOT)))
                return SOLVER_CAPACITY_ON_DEMAND;
        if (!(sl & slots_of_ct(SOLVER_CAPACITY_ON_DEMAND)))
                return SOLVER_CAPACITY_SPOT;
        return -1;
}

static int count_add(Solver *s, uint32_t g, int32_t zone, uint32_t ni, bool owners, int64_t d) {
        Group *gr = &s->groups[g];
        int q;
        if (!owners) {
                q = solver_undo_push(s, U_TOTAL, g, 0, gr->total);
                if (q < 0)
                        return q;
                gr->total += d;
        }
        if (gr->key == TOPO_CT)
                zone = node_ct(s, ni); /* its domains live where a zone group's do */
        if ((gr->key == TOPO_ZONE || gr->key == TOPO_CT) && zone >= 0) {
                int32_t *a = owners ? gr->zowners : gr->zcount;
                q = solver_undo_push(s, owners ? U_ZOWNERS : U_ZCOUNT, g, (uint32_t) zone, a[zone]);
                if (q < 0)
                        return q;
                a[zone] += (int32_t) d;
        } else if (gr->key == TOPO_HOST) {
                int32_t *a = owners ? gr->howners : gr->hcount;
                if (ni < s->n_existing) {
                        q = solver_undo_push(s, owners ? U_HOWNERS : U_HCOUNT, g, ni, a[ni]);
                        if (q < 0)
                                return q;
                }
                a[ni] += (int32_t) d;
        }
        return 0;
}

/* Counts of a pod's shape when it arrives on (d = +m) or leaves (d = -m) node ni. */
int solver_account(Solver *s, const Shape *sh, const Variant *v, uint32_t ni, int64_t d,
                   bool bound_anti) {
        const Node *n = &s->nodes[ni];
        int q;
        for (uint32_t m = 0; m < sh->n_matches; m++) {
                q = count_add(s, sh->matches[m], n->zone, ni, false, d);
                if (q < 0)
                        return q;
        }
        if (v) {
                for (uint32_t c = 0; c < v->n_cons; c++)
                        if (v->cons[c].kind == CON_ANTI && v->cons[c].required) {
                                q = count_add(s, v->cons[c].group, n->zone, ni, true, d);
                                if (q < 0)
                                        return q;
                        }
        } else if (bound_anti) {
                for (size_t k = 0; k < sh->pod->n_anti_affinity; k++) {
                        q = count_add(s, sh->anti_g[k], n->zone, ni, true, d);
                        if (q < 0)
                                return q;
                }
        }
        return 0;
}
