/* SPDX-License-Identifier: Apache-2.0 */
/* Pods bound to a Node that its agent does not report yet. The coordinator knows a Node's pods
 * from its agent's reports; a pod kube-scheduler has just bound there reaches them a moment later
 * (the agent's watch, its 100 ms of gathering, the link). A round in between would take that room
 * as free and plan pending pods into it, launching nothing for them. Karpenter's cluster state
 * counts a pod against its node as soon as the binding is seen from the API; so does this file:
 * a watch of the pods that are bound and not started yet (spec.nodeName set, phase Pending; a
 * field-selector watch delivers a pod that stops matching as DELETED with its previous content,
 * so the pending pods' watch cannot tell where a pod went) gives each such pod to its Node until
 * the agent's report names its uid. A pod that starts before its agent reports it is missed for
 * that moment; every agent reports its pods within a fraction of a second of their binding. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "log.h"
#include "macro.h"
#include "model/nodepool.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

typedef struct Bound {
        const char *node, *uid;
        const cJSON *obj;
        bool reported;
} Bound;

typedef struct BoundCollect {
        Bound *items;
        size_t n, cap;
} BoundCollect;

static int bound_one(const cJSON *obj, void *userdata) {
        BoundCollect *c = userdata;
        const cJSON *md = jget(obj, "metadata");
        const char *node = jstr(jget(obj, "spec"), "nodeName"), *uid = jstr(md, "uid");
        if (c->n >= c->cap || isempty(node) || isempty(uid))
                return 0;
        if (kube_object_meta(obj, "deletionTimestamp"))
                return 0; /* going: its room comes back */
        c->items[c->n++] = (Bound) { .node = node, .uid = uid, .obj = obj };
        return 0;
}

static int cmp_bound(const void *a, const void *b) {
        const Bound *x = a, *y = b;
        int r = strcmp(x->node, y->node);
        return r != 0 ? r : strcmp(x->uid, y->uid);
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static int cmp_node_index(const void *a, const void *b, void *userdata) {
        const SolverNode *nodes = userdata;
        return strcmp(nodes[*(const size_t *) a].name, nodes[*(const size_t *) b].name);
}

/* The first item bound to node (items sorted by node), or n. */
static size_t first_on(const Bound *items, size_t n, const char *node) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(items[mid].node, node) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* The index into nodes of the node called name (order: nodes' indices sorted by name), or -1. */
static ssize_t node_find(const SolverNode *nodes, const size_t *order, size_t n, const char *name) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(nodes[order[mid]].name, name);
                if (c == 0)
                        return (ssize_t) order[mid];
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -1;
}

int provision_bound_unreported(Provisioner *p, SolverArena *a, const SolverNode *nodes, size_t n_nodes,
                               const char *const *pending_uids, size_t n_pending, SolverPod *out, size_t cap,
                               size_t *ret_n) {
        size_t n_watch = p->bound ? kube_watch_size(p->bound) : 0, added = 0;
        *ret_n = 0;
        if (n_watch == 0 || n_nodes == 0)
                return 0;
        _cleanup_free_ Bound *items = calloc(n_watch, sizeof *items);
        _cleanup_free_ const char **pending = calloc(n_pending + 1, sizeof *pending);
        _cleanup_free_ size_t *order = calloc(n_nodes, sizeof *order);
        if (!items || !pending || !order)
                return -ENOMEM;
        BoundCollect c = { .items = items, .cap = n_watch };
        int r = kube_watch_foreach(p->bound, bound_one, &c);
        if (r < 0)
                return r;
        qsort(items, c.n, sizeof *items, cmp_bound);
        /* a pod read as pending by this snapshot and bound since is pending in it already */
        size_t np = 0;
        for (size_t i = 0; i < n_pending; i++)
                if (pending_uids[i])
                        pending[np++] = pending_uids[i];
        if (np > 0)
                qsort(pending, np, sizeof *pending, cmp_str);
        for (size_t i = 0; i < n_nodes; i++)
                order[i] = i;
        qsort_r(order, n_nodes, sizeof *order, cmp_node_index, (void *) nodes);

        /* what the agents report is theirs to count */
        NodeEntry *e;
        REGISTRY_FOREACH(e, p->registry) {
                const char *node = provisioner_node_name(p, e);
                if (!node || !e->state)
                        continue;
                for (size_t i = first_on(items, c.n, node); i < c.n && streq(items[i].node, node); i++)
                        for (size_t k = 0; k < e->state->n_pods && !items[i].reported; k++)
                                items[i].reported = streq_ptr(e->state->pods[k]->uid, items[i].uid);
        }

        for (size_t i = 0; i < c.n && added < cap; i++) {
                const Bound *b = &items[i];
                if (b->reported || (np > 0 && bsearch(&b->uid, pending, np, sizeof *pending, cmp_str)))
                        continue;
                ssize_t j = node_find(nodes, order, n_nodes, b->node);
                if (j < 0)
                        continue; /* not a Node of the snapshot */
                SolverPod sp = {};
                char *err = NULL;
                r = nodepool_parse_pod(a, b->obj, &sp, &err);
                if (r < 0) {
                        log_debug("Bound pod %s on %s not counted: %s", b->uid, b->node, strempty(err));
                        free(err);
                        if (r == -ENOMEM)
                                return r;
                        continue;
                }
                /* a node counted as in flight carries its DaemonSets' overhead already */
                if (sp.daemonset && nodes[j].in_flight)
                        continue;
                sp.node_name = nodes[j].name;
                sp.requests.v[SOLVER_RES_PODS] = 1;
                out[added++] = sp;
        }
        *ret_n = added;
        return 0;
}
