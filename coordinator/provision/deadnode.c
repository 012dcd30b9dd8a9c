/* SPDX-License-Identifier: Apache-2.0 */
/* A dead node: its kubelet stopped posting status (the node lifecycle controller set Ready to
 * Unknown) and its agent is silent, both for dead-node-after. Nothing on it can evict a pod or
 * confirm a deletion, so no drain can finish: the coordinator terminates the instance without one,
 * then deletes the Node (its finalizer removed), and kube-controller-manager's pod garbage
 * collector force-deletes the pods bound to a Node that no longer exists, so that their
 * controllers make new ones. The instance goes first: a node that was only cut off from the API
 * server may still run its pods, and they must be gone before their replacements start. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>

#include "kubenode.h"
#include "log.h"
#include "agents/nodebind.h"
#include "provisioner-internal.h"
#include "timestamp.h"

static int64_t now_unix_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * USEC_PER_SEC + ts.tv_nsec / 1000;
}

/* How long the Node's Ready condition has been Unknown (0: it is not). */
static uint64_t unknown_for_usec(const cJSON *node) {
        const cJSON *c;
        int64_t since;
        cJSON_ArrayForEach(c, jget(jget(node, "status"), "conditions")) {
                if (!streq_ptr(jstr(c, "type"), "Ready"))
                        continue;
                if (!streq_ptr(jstr(c, "status"), "Unknown") ||
                    timestamp_parse_rfc3339(jstr(c, "lastTransitionTime"), 0, &since) < 0)
                        return 0;
                int64_t d = now_unix_usec() - since;
                return d > 0 ? (uint64_t) d : 1;
        }
        return 0;
}

static DeadNode *dead_find(Provisioner *p, const char *instance_id) {
        for (size_t i = 0; i < p->n_dead; i++)
                if (streq(p->dead[i].instance_id, instance_id))
                        return &p->dead[i];
        return NULL;
}

static int scan(const cJSON *node, void *userdata) {
        Provisioner *p = userdata;
        uint64_t after = p->c->cfg.dead_node_after_ms * USEC_PER_MSEC, now = provisioner_now(p);
        const char *name = kube_object_meta(node, "name"), *id = node_provider_instance(node);

        if (!name || !id || !node_has_finalizer(node, NODESMITH_FINALIZER) || dead_find(p, id) ||
            registry_is_buried(&p->c->registry, id))
                return 0;
        uint64_t unknown = unknown_for_usec(node);
        if (unknown < after)
                return 0;
        NodeEntry *e = registry_get(&p->c->registry, id);
        if (e && e->terminate_sent_usec)
                return 0; /* going already */
        /* silent: no report within the window, or none since this replica leads */
        uint64_t heard = e ? MAX(e->last_seen_usec, e->heard_usec) : p->leading_since_usec;
        if (now - heard < after)
                return 0;
        if (p->n_dead >= ELEMENTSOF(p->dead))
                return 0; /* the next pass, once earlier ones are done */
        DeadNode *d = &p->dead[p->n_dead++];
        *d = (DeadNode) { .since_usec = now };
        snprintf(d->instance_id, sizeof d->instance_id, "%s", id);
        snprintf(d->node, sizeof d->node, "%s", name);
        log_warning("Node %s is dead: Ready Unknown for %llus (its kubelet stopped posting) and its agent silent "
                    "for %llus; terminating %s without a drain, then deleting the Node.",
                    name, (unsigned long long) (unknown / USEC_PER_SEC),
                    (unsigned long long) ((now - heard) / USEC_PER_SEC), id);
        if (e)
                e->terminate_sent_usec = now;
        p->dead_nodes++;
        provisioner_terminate_one(p, id);
        return 0;
}

void provisioner_dead_nodes_pass(Provisioner *p) {
        uint64_t now = provisioner_now(p);
        if (!p->c->cfg.dead_node_after_ms || !provisioner_acting(p) || !kube_watch_synced(p->nodes))
                return;
        /* forget the dead that are gone (Node deleted) or whose termination did not go through */
        for (size_t i = p->n_dead; i > 0; i--) {
                DeadNode *d = &p->dead[i - 1];
                bool gone = !kube_watch_get(p->nodes, NULL, d->node);
                if (gone || (!d->terminated && now - d->since_usec > 60 * USEC_PER_SEC)) {
                        NodeEntry *e = gone ? NULL : registry_get(&p->c->registry, d->instance_id);
                        if (e)
                                e->terminate_sent_usec = 0; /* try again */
                        *d = p->dead[--p->n_dead];
                }
        }
        (void) kube_watch_foreach(p->nodes, scan, p);
}

static void on_node_deleted(KubeResponse *resp, void *userdata) {
        char *name = userdata;
        if (resp->error < 0 && resp->error != -ENOENT)
                log_warning("Dead node %s: cannot delete the Node: %s", name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
        else
                log_notice("Dead node %s: Node deleted; pod garbage collection removes its pods.", name);
        free(name);
}

void provisioner_dead_node_terminated(Provisioner *p, const char *instance_id, bool unfinalized) {
        DeadNode *d = dead_find(p, instance_id);
        _cleanup_free_ char *path = NULL;
        if (!d || d->terminated)
                return;
        d->terminated = true;
        if (!unfinalized)
                provisioner_remove_finalizer(p, d->node);
        if (kube_path("v1", NULL, "nodes", d->node, NULL, &path) < 0)
                return (void) log_oom();
        char *name = strdup(d->node);
        if (!name || kube_delete(p->kube, path, NULL, on_node_deleted, name, NULL) < 0)
                free(name);
}
