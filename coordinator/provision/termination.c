/* SPDX-License-Identifier: Apache-2.0 */
/* Nodes going away: replacement capacity at once, termination once drained, the finalizer removed. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "aws/instanceprofile.h"
#include "catalog-ec2.h"
#include "fileio.h"
#include "http.h"
#include "kube.h"
#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* ---- nodes going away: replacement and termination --------------------------------------- */

void provisioner_node_leaving(Provisioner *p, const NodeEntry *e) {
        if (!p || !e || !e->state || !e->state->identity)
                return;
        const Nodesmith__V1__Identity *id = e->state->identity;
        if (streq_ptr(e->reason, "spot-interruption") &&
            id->capacity_type == NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT && !isempty(id->instance_type))
                provision_ice_mark(p, id->instance_type, id->zone, SOLVER_CAPACITY_SPOT);
        provisioner_poke(p);
}

const char *provisioner_node_name(Provisioner *p, const NodeEntry *e) {
        return node_bound_name(p ? p->nodes : NULL, e);
}

const KubeWatch *provisioner_nodes(Provisioner *p) {
        return p ? p->nodes : NULL;
}

static bool has_finalizer(const cJSON *node) {
        const cJSON *f;
        cJSON_ArrayForEach(f, jget(jget(node, "metadata"), "finalizers"))
                if (cJSON_IsString(f) && streq(f->valuestring, NODESMITH_FINALIZER))
                        return true;
        return false;
}

static void on_finalizer_removed(KubeResponse *resp, void *userdata) {
        char *name = userdata;
        if (resp->error < 0 && resp->error != -ENOENT)
                log_warning("Node %s: cannot remove the termination finalizer: %s", name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
        else
                log_notice("Node %s: instance gone, termination finalizer removed.", name);
        free(name);
}

void provisioner_remove_finalizer(Provisioner *p, const char *node_name) {
        const cJSON *node = node_name ? kube_watch_get(p->nodes, NULL, node_name) : NULL;
        _cleanup_free_ char *patch = NULL, *path = NULL;
        if (!node || !has_finalizer(node))
                return;
        if (kube_finalizer_remove_patch(node, NODESMITH_FINALIZER, &patch) < 0 ||
            kube_path("v1", NULL, "nodes", node_name, NULL, &path) < 0)
                return;
        char *name = strdup(node_name);
        if (!name || kube_patch(p->kube, path, KUBE_PATCH_JSON, patch, on_finalizer_removed, name, NULL) < 0)
                free(name);
}

static void on_node_terminated(Ec2Client *ec2, const Ec2Error *err, Ec2TerminateResult *res, void *userdata) {
        Provisioner *p = userdata;
        if (err) {
                log_warning("TerminateInstances failed: %s %s", err->code, err->message);
                ec2_terminate_result_free(res);
                return;
        }
        for (char **id = res ? res->terminated : NULL; id && *id; id++) {
                NodeEntry *e = registry_get(p->registry, *id);
                const char *node = e ? provisioner_node_name(p, e) : NULL;
                log_notice("Terminated %s%s%s%s.", *id, node ? " (Node " : "", node ? node : "", node ? ")" : "");
                p->terminated++;
                provision_reservation_released(p, *id);
                InFlight *f = provision_inflight_find(p, *id); /* it never initialized: it will not now */
                if (f)
                        provision_inflight_remove(p, (size_t) (f - p->inflight));
                bool unfinalized = node;
                if (node)
                        provisioner_remove_finalizer(p, node);
                /* a Node without an agent report: found by its providerID */
                for (size_t k = 0; !node && k < p->n_orphans; k++)
                        if (streq(p->orphans[k].instance_id, *id)) {
                                provisioner_remove_finalizer(p, p->orphans[k].node);
                                unfinalized = true;
                        }
                provisioner_dead_node_terminated(p, *id, unfinalized);
                registry_bury(p->registry, *id);
        }
        for (char **id = res ? res->refused : NULL; id && *id; id++)
                log_warning("Refused to terminate %s: it lacks this cluster's tag.", *id);
        ec2_terminate_result_free(res);
}

void provisioner_terminate_one(Provisioner *p, const char *id) {
        const char *ids[2] = { id, NULL };
        if (!provisioner_acting(p)) {
                log_info("Not terminating %s: this replica is not acting (Lease not renewed in time).", id);
                return;
        }
        log_info("TerminateInstances %s, acting replica %s.", id, provisioner_acting_as(p));
        (void) ec2_terminate_instances(p->ec2, ids, on_node_terminated, p);
}

typedef struct OrphanScan {
        Provisioner *p;
        uint64_t now;
} OrphanScan;

typedef struct OrphanCheck {
        Provisioner *p;
        char id[32];
        char node[256];
} OrphanCheck;

/* The instance of a Node being deleted: if EC2 has it shutting down, terminated, or not at
 * all, nothing is left to drain and the finalizer goes now. */
static void on_orphan_described(Ec2Client *ec2, const Ec2Error *err, Ec2InstanceList *list, void *userdata) {
        OrphanCheck *k = userdata;
        Provisioner *p = k->p;
        if (!err || err->kind == EC2_ERROR_NOT_FOUND) {
                bool gone = true;
                for (size_t i = 0; list && i < list->n; i++)
                        if (streq(list->items[i].id, k->id) && !streq_ptr(list->items[i].state, "terminated") &&
                            !streq_ptr(list->items[i].state, "shutting-down"))
                                gone = false;
                if (gone) {
                        log_notice("Node %s: instance %s is gone already.", k->node, k->id);
                        provisioner_remove_finalizer(p, k->node);
                        registry_bury(p->registry, k->id);
                }
        }
        ec2_instance_list_free(list);
        free(k);
}

/* A Node being deleted whose agent does not report (dead, or its instance gone): if EC2 says
 * the instance is gone the finalizer is removed at once; otherwise, once the grace period is
 * over, the coordinator terminates the instance and removes the finalizer itself. */
static int scan_orphan(const cJSON *node, void *userdata) {
        OrphanScan *s = userdata;
        Provisioner *p = s->p;
        const char *name = kube_object_meta(node, "name"), *id = node_provider_instance(node);
        const cJSON *dts = jget(jget(node, "metadata"), "deletionTimestamp");
        if (!name || !id || !cJSON_IsString(dts) || !has_finalizer(node))
                return 0;
        NodeEntry *e = registry_get(p->registry, id);
        uint64_t silent_after = MAX(3 * p->cfg.report_interval_ms * USEC_PER_MSEC, 5 * USEC_PER_SEC);
        if (e && s->now - e->last_seen_usec < silent_after)
                return 0; /* its agent is alive and drains it */
        for (size_t k = 0; k < p->n_orphans; k++)
                if (streq(p->orphans[k].instance_id, id)) {
                        /* a node with a report is terminated by provision_termination_pass once drained */
                        bool drained = !e && proxy_drains_drained(p->proxy_drains, name);
                        if (!p->orphans[k].sent &&
                            (drained || s->now - p->orphans[k].seen_usec >= proxy_drains_grace_usec(p->proxy_drains, name))) {
                                log_warning("Node %s is being deleted and its agent is silent; terminating %s%s.", name, id,
                                            drained ? " (drained by the coordinator)" : "");
                                p->orphans[k].sent = true;
                                provisioner_terminate_one(p, id);
                        }
                        return 0;
                }
        if (p->n_orphans < ELEMENTSOF(p->orphans)) {
                p->orphans[p->n_orphans] = (Orphan) { .seen_usec = s->now };
                snprintf(p->orphans[p->n_orphans].instance_id, sizeof p->orphans[0].instance_id, "%s", id);
                snprintf(p->orphans[p->n_orphans].node, sizeof p->orphans[0].node, "%s", name);
                p->n_orphans++;
                OrphanCheck *k = calloc(1, sizeof *k);
                const char *ids[2] = { id, NULL };
                if (k) {
                        k->p = p;
                        snprintf(k->id, sizeof k->id, "%s", id);
                        snprintf(k->node, sizeof k->node, "%s", name);
                        if (ec2_describe_instances_by_id(p->ec2, ids, on_orphan_described, k) < 0)
                                free(k);
                }
        }
        return 0;
}

/* Termination: a node told to drain (or whose Node is being deleted) that reports "drained"
 * is terminated (only instances tagged for this cluster), then its finalizer removed. An
 * agent that stops answering gets the grace period, then the same. */
void provision_termination_pass(Provisioner *p) {
        uint64_t now = provision_now_usec(p);
        uint64_t stale = p->cfg.stale_after_ms * USEC_PER_MSEC;
        const char *todo[64];
        size_t n = 0;
        NodeEntry *e;

        REGISTRY_FOREACH(e, p->registry) {
                if (n >= ELEMENTSOF(todo) || e->terminate_sent_usec)
                        continue;
                const char *node = provisioner_node_name(p, e);
                const cJSON *obj = node ? kube_watch_get(p->nodes, NULL, node) : NULL;
                bool deleting = obj && cJSON_IsString(jget(jget(obj, "metadata"), "deletionTimestamp"));
                bool draining = e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN || deleting;
                if (!draining)
                        continue;
                if (!e->drain_decided_usec)
                        e->drain_decided_usec = now;
                /* drained by its agent, or by the coordinator for a silent agent (proxydrain.c) */
                bool drained = (e->state->drain && e->state->drain->phase == NODESMITH__V1__DRAIN_STATUS__PHASE__PHASE_DRAINED) ||
                               proxy_drains_drained(p->proxy_drains, node);
                uint64_t grace = proxy_drains_grace_usec(p->proxy_drains, node);
                /* a Node that is gone (EC2 reclaimed the instance, the Node was deleted without
                 * the finalizer) holds no pods: nothing is left to drain, only to clean up */
                bool node_gone = node && !obj && kube_watch_synced(p->nodes);
                bool silent = now - e->last_seen_usec >= stale &&
                              (node_gone || now - e->drain_decided_usec >= grace);
                if (drained || silent) {
                        if (silent && !drained)
                                log_warning("Node %s: agent silent for %llus%s; terminating %s without a drain.",
                                            strempty(node), (unsigned long long) ((now - e->last_seen_usec) / USEC_PER_SEC),
                                            node_gone ? " and the Node gone" : "", e->instance_id);
                        e->terminate_sent_usec = now;
                        todo[n++] = e->instance_id;
                }
        }
        for (size_t i = 0; i < n; i++)
                provisioner_terminate_one(p, todo[i]);

        provisioner_dead_nodes_pass(p);
        OrphanScan s = { p, now };
        (void) kube_watch_foreach(p->nodes, scan_orphan, &s);
        if (provisioner_acting(p))
                proxy_drains_pass(p->proxy_drains, p->leading_since_usec);
}
