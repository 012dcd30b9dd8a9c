/* SPDX-License-Identifier: Apache-2.0 */
/* Drift: whether a node no longer matches what its NodePool and EC2NodeClass ask for now (the
 * template's hash, the class's hash, its image, its subnet and security groups, the pool's
 * requirements). */
#include <stdio.h>
#include <string.h>

#include "drift.h"
#include "kube.h"
#include "macro.h"
#include "model/disruption-policy.h"

static const char *label_of(const SolverNode *n, const char *key) {
        for (size_t i = 0; i < n->n_labels; i++)
                if (streq(n->labels[i].key, key))
                        return n->labels[i].value;
        return NULL;
}

static bool has_key(const SolverLabel *l, size_t n, const char *key) {
        const char *k = solver_canonical_label_key(key);
        for (size_t i = 0; i < n; i++)
                if (streq(solver_canonical_label_key(l[i].key), k))
                        return true;
        return false;
}

bool disruption_drifted(Provisioner *p, const SolverSnapshot *sn, const NodepoolObjects *o, SolverArena *a, size_t i,
                        int k, const char *instance_id, char *why, size_t size) {
        const SolverNode *n = &sn->nodes[i];
        const SolverNodePool *pool = &sn->nodepools[k];
        char h[DISRUPTION_CLASS_HASH_SIZE];
        const char *have = label_of(n, DISRUPTION_LABEL_POOL_HASH);
        disruption_pool_hash(kube_watch_get(provisioner_watch(p, PROVISIONER_WATCH_NODEPOOLS), NULL, pool->name), h);
        if (have && h[0] && !streq(have, h)) {
                snprintf(why, size, "NodePool %s's template changed (hash %s, node has %s)", pool->name, h, have);
                return true;
        }
        const char *nc = o->extra[k].node_class;
        have = label_of(n, DISRUPTION_LABEL_CLASS_HASH);
        if (nc && disruption_class_hash_current(have)) {
                const cJSON *obj = kube_watch_get(provisioner_watch(p, PROVISIONER_WATCH_NODECLASSES), NULL, nc);
                disruption_class_hash(obj, h);
                if (obj && h[0] && !streq(have, h)) {
                        snprintf(why, size, "EC2NodeClass %s changed (hash %s, node has %s)", nc, h, have);
                        return true;
                }
        }
        /* the image behind the class's alias, as looked up last (images.c) */
        const char *img = label_of(n, DISRUPTION_LABEL_IMAGE);
        ProvisionerClass res;
        int arch = streq_ptr(label_of(n, SOLVER_LABEL_ARCH), "arm64") ? 1 : 0;
        if (nc && img && provisioner_class(p, nc, &res) >= 0 && res.ami[arch] && !streq(res.ami[arch], img)) {
                snprintf(why, size, "EC2NodeClass %s's image is now %s (node has %s)", nc, res.ami[arch], img);
                return true;
        }
        /* its instance's subnet and security groups against what the class's terms match now */
        if (nc && provisioner_network_drifted(p, nc, instance_id, why, size))
                return true;
        /* its capacity reservation, against those the class's terms select now */
        if (nc && provisioner_reservation_drifted(p, nc, instance_id, why, size))
                return true;
        /* requirements, against the node's labels and its instance type's */
        size_t nl = n->n_labels, nt = 0;
        const Catalog *cat = provisioner_catalog(p);
        const SolverInstanceType *types = catalog_types(cat, &nt);
        int t = n->instance_type ? catalog_find(cat, n->instance_type) : -1;
        size_t tl = t >= 0 ? types[t].n_labels : 0;
        SolverLabel *all = solver_arena_alloc(a, (nl + tl + 2) * sizeof *all);
        if (!all)
                return false;
        memcpy(all, n->labels, nl * sizeof *all);
        if (tl)
                memcpy(all + nl, types[t].labels, tl * sizeof *all);
        size_t na = nl + tl;
        if (n->zone && !has_key(all, na, SOLVER_LABEL_ZONE))
                all[na++] = (SolverLabel) { SOLVER_LABEL_ZONE, n->zone };
        if (!has_key(all, na, SOLVER_LABEL_CAPACITY_TYPE))
                all[na++] = (SolverLabel) { SOLVER_LABEL_CAPACITY_TYPE, solver_capacity_type_to_name(n->capacity_type) };
        for (size_t r = 0; r < pool->n_requirements; r++) {
                const SolverRequirement *req = &pool->requirements[r];
                /* a key the node has no value for says nothing (but DoesNotExist) */
                if (!has_key(all, na, req->key))
                        continue;
                if (!solver_requirement_matches_labels(req, all, na)) {
                        snprintf(why, size, "it no longer meets NodePool %s's requirement on %s", pool->name, req->key);
                        return true;
                }
        }
        return false;
}
