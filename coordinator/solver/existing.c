/* SPDX-License-Identifier: Apache-2.0 */
/* Compiling what already runs: existing nodes, the pods bound to them, DaemonSet overhead per
 * pool and the headroom kept free. */

#include <inttypes.h>

#include "macro.h"
#include "solver-internal.h"

/* ---- existing nodes ------------------------------------------------------------------------- */

int solver_grow_nodes(Solver *s, size_t need) {
        if (need <= s->cap_nodes)
                return 0;
        size_t nc = MAX(need, s->cap_nodes * 2);
        nc = MAX(nc, (size_t) 64);
        Node *nn = realloc(s->nodes, nc * sizeof(Node));
        if (!nn)
                return -ENOMEM;
        s->nodes = nn;
        /* per node: the types it may become, the types within its budget, and the types its
         * pods allow whatever they weigh (repair.c widens a node from it) */
        uint64_t *nt = realloc(s->node_types, nc * 3 * s->W * sizeof(uint64_t));
        if (!nt)
                return -ENOMEM;
        s->node_types = nt;
        /* node_types moved: re-point new nodes */
        for (uint32_t i = 0; i < s->n_nodes; i++)
                if (s->nodes[i].kind == NODE_NEW) {
                        s->nodes[i].types = s->node_types + (size_t) i * 3 * s->W;
                        s->nodes[i].budget = s->nodes[i].types + s->W;
                        s->nodes[i].base = s->nodes[i].types + 2 * s->W;
                }
        for (uint32_t g = 0; g < s->n_groups; g++) {
                Group *gr = &s->groups[g];
                if (gr->key != TOPO_HOST)
                        continue;
                int32_t *a = realloc(gr->hcount, nc * sizeof(int32_t));
                if (!a)
                        return -ENOMEM;
                gr->hcount = a;
                int32_t *o = realloc(gr->howners, nc * sizeof(int32_t));
                if (!o)
                        return -ENOMEM;
                gr->howners = o;
                memset(gr->hcount + s->cap_nodes, 0, (nc - s->cap_nodes) * sizeof(int32_t));
                memset(gr->howners + s->cap_nodes, 0, (nc - s->cap_nodes) * sizeof(int32_t));
        }
        s->cap_nodes = nc;
        return 0;
}

int solver_port_add(Node *n, const SolverHostPort *p) {
        if (n->n_ports == n->cap_ports) {
                uint32_t nc = n->cap_ports ? n->cap_ports * 2 : 4;
                SolverHostPort *np = realloc(n->ports, nc * sizeof(SolverHostPort));
                if (!np)
                        return -ENOMEM;
                n->ports = np;
                n->cap_ports = nc;
        }
        n->ports[n->n_ports++] = *p;
        return 0;
}

static int pool_by_name(const Solver *s, const char *name) {
        if (isempty(name))
                return -1;
        for (uint32_t i = 0; i < s->n_pools; i++)
                if (streq(s->pools[i].np->name, name))
                        return (int) i;
        return -1;
}

int solver_compile_nodes(Solver *s, Intern *names) {
        const SolverSnapshot *snap = s->snap;
        int q = solver_grow_nodes(s, snap->n_nodes + 16);
        if (q < 0)
                return q;
        s->n_existing = s->n_nodes = (uint32_t) snap->n_nodes;
        for (uint32_t i = 0; i < snap->n_nodes; i++) {
                const SolverNode *sn = &snap->nodes[i];
                Node *n = &s->nodes[i];
                *n = (Node) { .kind = NODE_EXISTING, .min_priority = INT32_MAX };
                n->zone = solver_zone_index(s, solver_node_zone_name(sn), false);
                int pi = pool_by_name(s, sn->nodepool);
                n->pool = pi < 0 ? NONE32 : (uint32_t) pi;
                n->closed = sn->unschedulable || sn->deleting;
                for (int r = 0; r < R_MAX; r++)
                        n->cap[r] = sn->allocatable.v[r];
                if (sn->in_flight && pi >= 0)
                        for (int r = 0; r < R_MAX; r++)
                                n->used[r] += s->pools[pi].ds.v[r];
                if (pi >= 0 && s->pools[pi].nodes_left != INT64_MAX)
                        s->pools[pi].nodes_left--;
                /* limits: the pool's capacity in use */
                if (pi >= 0 && s->pools[pi].has_limits) {
                        const SolverResources *capv = &sn->allocatable;
                        for (uint32_t t = 0; sn->instance_type && t < s->T; t++)
                                if (streq(snap->types[t].name, sn->instance_type)) {
                                        capv = &snap->types[t].capacity;
                                        break;
                                }
                        for (int r = 0; r < R_MAX; r++)
                                if (s->pools[pi].remaining.v[r] >= 0)
                                        s->pools[pi].remaining.v[r] -= capv->v[r];
                }
                for (size_t t = 0; t < sn->n_taints; t++)
                        if (sn->taints[t].effect == SOLVER_EFFECT_PREFER_NO_SCHEDULE)
                                s->any_prefer_no_schedule = true;
        }
        (void) names;
        return 0;
}

/* Bound pods: usage, ports, topology counts. Needs shapes and groups. */
int solver_account_bound(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        uint32_t E = s->n_existing;
        uint32_t *count = calloc(E + 1, sizeof(uint32_t));
        if (!count)
                return -ENOMEM;
        for (uint32_t i = 0; i < snap->n_pods; i++)
                if (s->pod_node[i] >= 0)
                        count[s->pod_node[i]]++;
        uint32_t off = 0;
        for (uint32_t n = 0; n < E; n++) {
                s->nodes[n].first_bound = off;
                off += count[n];
                count[n] = s->nodes[n].first_bound;
        }
        s->n_bound = off;
        s->bound = solver_arena_alloc_nozero(s->arena, (off + 1) * sizeof(uint32_t));
        if (!s->bound) {
                free(count);
                return -ENOMEM;
        }
        for (uint32_t i = 0; i < snap->n_pods; i++) {
                int32_t nn = s->pod_node[i];
                if (nn < 0)
                        continue;
                s->bound[count[nn]++] = i;
                Node *n = &s->nodes[nn];
                n->n_bound++;
                const SolverPod *p = &snap->pods[i];
                const Shape *sh = &s->shapes[s->pod_shape[i]];
                for (int r = 0; r < R_MAX; r++)
                        n->used[r] += sh->req.v[r];
                n->n_pods++;
                if (!p->daemonset && p->priority < n->min_priority)
                        n->min_priority = p->priority;
                for (size_t k = 0; k < p->n_host_ports; k++) {
                        int q = solver_port_add(n, &p->host_ports[k]);
                        if (q < 0) {
                                free(count);
                                return q;
                        }
                }
                for (uint32_t m = 0; m < sh->n_matches; m++) {
                        Group *g = &s->groups[sh->matches[m]];
                        g->total++;
                        if (g->key == TOPO_ZONE && n->zone >= 0)
                                g->zcount[n->zone]++;
                        else if (g->key == TOPO_HOST)
                                g->hcount[nn]++;
                        else if (g->key == TOPO_CT)
                                g->zcount[snap_ct(s, (uint32_t) nn)]++;
                }
                for (size_t k = 0; k < p->n_anti_affinity; k++) {
                        Group *g = &s->groups[sh->anti_g[k]];
                        if (g->key == TOPO_ZONE && n->zone >= 0)
                                g->zowners[n->zone]++;
                        else if (g->key == TOPO_HOST)
                                g->howners[nn]++;
                        else if (g->key == TOPO_CT)
                                g->zowners[snap_ct(s, (uint32_t) nn)]++;
                }
        }
        free(count);
        return 0;
}

/* ---- DaemonSets ----------------------------------------------------------------------------- */

int solver_ds_overhead(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        for (size_t d = 0; d < snap->n_daemonsets; d++) {
                const SolverPod *ds = &snap->daemonsets[d];
                size_t n = ds->n_node_selector + (ds->n_required_terms > 0 ? ds->required_terms[0].n_reqs : 0);
                const SolverRequirement **rl = solver_arena_alloc(s->arena, (n + 1) * sizeof(void *));
                SolverRequirement *sel = solver_arena_alloc(s->arena, (ds->n_node_selector + 1) * sizeof(SolverRequirement));
                if (!rl || !sel)
                        return -ENOMEM;
                size_t k = 0;
                for (size_t i = 0; i < ds->n_node_selector; i++) {
                        sel[i] = (SolverRequirement) { .key = ds->node_selector[i].key, .op = SOLVER_OP_IN,
                                                       .values = &ds->node_selector[i].value, .n_values = 1 };
                        rl[k++] = &sel[i];
                }
                for (size_t i = 0; ds->n_required_terms > 0 && i < ds->required_terms[0].n_reqs; i++)
                        rl[k++] = &ds->required_terms[0].reqs[i];
                CReqs c;
                int q = solver_compile_reqs(s, rl, k, &c);
                if (q < 0)
                        return q;
                for (uint32_t pi = 0; pi < s->n_pools; pi++) {
                        Pool *p = &s->pools[pi];
                        if (!solver_tolerates_all(ds->tolerations, ds->n_tolerations, p->np->taints,
                                                  p->np->n_taints, true))
                                continue;
                        if (c.custom_empty || !(c.slots & p->slots))
                                continue;
                        uint64_t tmp[SOLVER_MAX_TYPES / 64];
                        if (s->T > 0 && !bs_and_any(tmp, c.types, p->types, s->W))
                                continue;
                        if (c.n_pool_reqs && !solver_pool_reqs_ok(s, c.pool_reqs, c.n_pool_reqs, p->np->name))
                                continue;
                        const VSetList *nl;
                        q = solver_vsetlist_narrow(s, s->arena, &p->custom, &c.custom, &nl, NULL);
                        if (q < 0)
                                return q;
                        if (q == 0)
                                continue;
                        for (int r = 0; r < R_MAX; r++)
                                if (r != SOLVER_RES_PODS)
                                        p->ds.v[r] += MAX(ds->requests.v[r], 0);
                        p->ds.v[SOLVER_RES_PODS]++;
                        if (ds->n_host_ports > 0) {
                                SolverHostPort *np = solver_arena_realloc(
                                        s->arena, p->ds_ports, p->n_ds_ports * sizeof(SolverHostPort),
                                        (p->n_ds_ports + ds->n_host_ports) * sizeof(SolverHostPort));
                                if (!np)
                                        return -ENOMEM;
                                memcpy(np + p->n_ds_ports, ds->host_ports, ds->n_host_ports * sizeof(SolverHostPort));
                                p->ds_ports = np;
                                p->n_ds_ports += (uint32_t) ds->n_host_ports;
                        }
                }
        }
        return 0;
}

/* ---- headroom ------------------------------------------------------------------------------- */

static const SolverToleration tolerate_all = { .exists = true, .effect = SOLVER_EFFECT_ANY };

int solver_make_headroom(Solver *s) {
        const SolverSnapshot *snap = s->snap;
        uint32_t total = 0;
        for (uint32_t i = 0; i < s->n_pools; i++) {
                const SolverResources *h = &s->pools[i].np->headroom;
                if (h->v[SOLVER_RES_CPU] <= 0 && h->v[SOLVER_RES_MEMORY] <= 0 && h->v[SOLVER_RES_PODS] <= 0)
                        continue;
                int64_t units = MAX(h->v[SOLVER_RES_PODS], (int64_t) 1);
                if (units > 10000)
                        return -E2BIG;
                total += (uint32_t) units;
        }
        s->n_pods_all = (uint32_t) snap->n_pods + total;
        if (total == 0)
                return 0;
        s->vpods = solver_arena_alloc(s->arena, total * sizeof(SolverPod));
        if (!s->vpods)
                return -ENOMEM;
        uint32_t k = 0;
        for (uint32_t i = 0; i < s->n_pools; i++) {
                const SolverNodePool *np = s->pools[i].np;
                const SolverResources *h = &np->headroom;
                if (h->v[SOLVER_RES_CPU] <= 0 && h->v[SOLVER_RES_MEMORY] <= 0 && h->v[SOLVER_RES_PODS] <= 0)
                        continue;
                int64_t units = MAX(h->v[SOLVER_RES_PODS], (int64_t) 1);
                SolverLabel *sel = solver_arena_alloc(s->arena, sizeof(SolverLabel));
                if (!sel)
                        return -ENOMEM;
                sel->key = SOLVER_LABEL_NODEPOOL;
                sel->value = np->name;
                for (int64_t u = 0; u < units; u++) {
                        SolverPod *p = &s->vpods[k++];
                        p->name = solver_arena_printf(s->arena, "headroom/%s/%" PRId64, np->name, u);
                        p->namespace_ = "";
                        p->priority = INT32_MIN;
                        p->preempt_never = true;
                        for (int r = 0; r < R_MAX; r++)
                                if (r != SOLVER_RES_PODS)
                                        p->requests.v[r] = (h->v[r] + units - 1) / units;
                        p->node_selector = sel;
                        p->n_node_selector = 1;
                        p->tolerations = &tolerate_all;
                        p->n_tolerations = 1;
                }
        }
        return 0;
}
