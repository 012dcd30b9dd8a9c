/* SPDX-License-Identifier: Apache-2.0 */
/* Instances in flight (launched, not registered yet) and offerings out after insufficient capacity. */
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

/* ---- in-flight instances ------------------------------------------------------------------ */

void provision_inflight_free(InFlight *f) {
        free(f->instance_id);
        free(f->nodepool);
        free(f->instance_type);
        free(f->zone);
        free(f->reservation_id);
        free(f->node_name);
        for (char **k = f->pods; k && *k; k++)
                free(*k);
        free(f->pods);
}

InFlight *provision_inflight_find(Provisioner *p, const char *id) {
        for (size_t i = 0; i < p->n_inflight; i++)
                if (streq(p->inflight[i].instance_id, id))
                        return &p->inflight[i];
        return NULL;
}

int provision_inflight_add(Provisioner *p, const char *id, const char *pool, const char *type, const char *zone,
                        SolverCapacityType ct, uint64_t launched, size_t n_pods) {
        if (provision_inflight_find(p, id))
                return 0;
        if (p->n_inflight >= MAX_IN_FLIGHT)
                return -ENOSPC;
        InFlight *n = realloc(p->inflight, (p->n_inflight + 1) * sizeof *n);
        if (!n)
                return -ENOMEM;
        p->inflight = n;
        InFlight *f = &p->inflight[p->n_inflight];
        *f = (InFlight) { .instance_id = strdup(id), .nodepool = strdup(strempty(pool)),
                          .instance_type = strdup(strempty(type)), .zone = strdup(strempty(zone)),
                          .capacity_type = ct, .launched_usec = launched, .n_pods = n_pods };
        if (!f->instance_id || !f->nodepool || !f->instance_type || !f->zone) {
                provision_inflight_free(f);
                return -ENOMEM;
        }
        p->n_inflight++;
        return 1;
}

/* Remembers the pods a launch was made for: until the instance is initialized they count as on
 * it, so a round that runs meanwhile does not plan them again (Karpenter's nominations). */
void provision_inflight_nominate(Provisioner *p, const char *id, const Round *rd, const SolverLaunch *l) {
        InFlight *f = provision_inflight_find(p, id);
        if (!f || f->pods || l->n_pods == 0)
                return;
        f->pods = calloc(l->n_pods + 1, sizeof(char *));
        for (size_t i = 0, k = 0; f->pods && i < l->n_pods; i++)
                if (rd->pod_uids[l->pods[i]] && (f->pods[k] = strdup(rd->pod_uids[l->pods[i]])))
                        k++;
}

const InFlight *provision_inflight_nominated(const Provisioner *p, const char *key) {
        for (size_t i = 0; i < p->n_inflight; i++)
                for (char **k = p->inflight[i].pods; k && *k; k++)
                        if (streq(*k, key))
                                return &p->inflight[i];
        return NULL;
}

void provision_inflight_remove(Provisioner *p, size_t i) {
        provision_inflight_free(&p->inflight[i]);
        p->inflight[i] = p->inflight[--p->n_inflight];
}


/* Taints a new Node carries while it starts, which go away by themselves: the kubelet's and the
 * node lifecycle controller's (not-ready, unreachable, network-unavailable) and the cloud
 * controller manager's (uninitialized), as Karpenter's KnownEphemeralTaints. */
static bool taint_ephemeral(const char *key) {
        static const char *const keys[] = { "node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                                            "node.kubernetes.io/network-unavailable",
                                            "node.cloudprovider.kubernetes.io/uninitialized" };
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                if (streq_ptr(key, keys[i]))
                        return true;
        return false;
}

/* A startup taint of the node's NodePool (spec.template.spec.startupTaints): removed by
 * something on the node once it is set up. */
static bool taint_startup(Provisioner *p, const char *pool, const char *key) {
        const cJSON *np = pool ? kube_watch_get(p->nodepools, NULL, pool) : NULL;
        const cJSON *t;
        cJSON_ArrayForEach(t, jget(jget(jget(jget(np, "spec"), "template"), "spec"), "startupTaints"))
                if (streq_ptr(jstr(t, "key"), key))
                        return true;
        return false;
}

/* An agent reports for the Node (the Node its attested instance is bound to). */
bool provision_node_reported(Provisioner *p, const char *name) {
        NodeEntry *ne;
        REGISTRY_FOREACH(ne, p->registry)
                if (streq_ptr(provisioner_node_name(p, ne), name))
                        return true;
        return false;
}

/* A launched instance's Node is initialized once it is Ready, its temporary taints are gone and
 * its agent reports: until then it stays in flight, and the solver sees it without them. An
 * instance this replica found in EC2 at start-up (a new leader) needs no report: its agent may
 * still be reporting to the old leader's address. */
static bool node_initialized(Provisioner *p, const cJSON *node, const InFlight *f) {
        const char *pool = f->nodepool;
        bool ready = false;
        const cJSON *c, *t;
        cJSON_ArrayForEach(c, jget(jget(node, "status"), "conditions"))
                if (streq_ptr(jstr(c, "type"), "Ready"))
                        ready = streq_ptr(jstr(c, "status"), "True");
        if (!ready)
                return false;
        cJSON_ArrayForEach(t, jget(jget(node, "spec"), "taints"))
                if (taint_ephemeral(jstr(t, "key")) || taint_startup(p, pool, jstr(t, "key")))
                        return false;
        return f->learned || provision_node_reported(p, kube_object_meta(node, "name"));
}

int provision_forget_registered(const cJSON *node, void *userdata) {
        Provisioner *p = userdata;
        const char *id = node_provider_instance(node);
        const char *name = kube_object_meta(node, "name");
        for (size_t i = 0; id && i < p->n_inflight; i++) {
                InFlight *f = &p->inflight[i];
                if (!streq(f->instance_id, id))
                        continue;
                if (!f->node_name) {
                        log_info("Instance %s registered as Node %s.", id, strempty(name));
                        if (!f->learned)
                                histogram_observe(&p->histograms.registration_seconds,
                                                  (double) (provision_now_usec(p) - f->launched_usec) / 1e6);
                        (void) free_and_strdup(&f->node_name, name);
                }
                if (node_initialized(p, node, f)) {
                        log_info("Node %s (%s) initialized: Ready, no startup taints%s.", strempty(name), id,
                                 f->learned ? "" : ", agent reporting");
                        provision_inflight_remove(p, i);
                        /* pods planned onto it that it did not get (another took their room) are
                         * pending still: look again now that it counts as it is */
                        if (p->pending_unschedulable > 0)
                                provisioner_poke(p);
                }
                break;
        }
        return 0;
}

/* In flight with a Node already: the snapshot takes the Node (its name, labels and allocatable)
 * without the taints that go away by themselves, and takes it as a node that will take pods. */
int provision_node_initializing(Provisioner *p, SolverArena *a, SolverNode *n) {
        const InFlight *f = NULL;
        for (size_t i = 0; i < p->n_inflight && !f; i++)
                if (streq_ptr(p->inflight[i].node_name, n->name))
                        f = &p->inflight[i];
        if (!f)
                return 0;
        SolverTaint *kept = solver_arena_alloc(a, (n->n_taints + 1) * sizeof *kept);
        if (!kept)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < n->n_taints; i++)
                if (!taint_ephemeral(n->taints[i].key) && !taint_startup(p, f->nodepool, n->taints[i].key))
                        kept[k++] = n->taints[i];
        n->taints = kept;
        n->n_taints = k;
        /* until its agent reports its pods, the pool's DaemonSet overhead is counted for it */
        n->in_flight = !provision_node_reported(p, n->name);
        return 1;
}

static void forget_orphan(Provisioner *p, const char *id) {
        for (size_t k = 0; id && k < p->n_orphans; k++)
                if (streq(p->orphans[k].instance_id, id)) {
                        p->orphans[k] = p->orphans[--p->n_orphans];
                        return;
                }
}

void provision_on_node_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        if (ev->type == KUBE_WATCH_ADDED || ev->type == KUBE_WATCH_MODIFIED) {
                (void) provision_forget_registered(ev->object, p);
                provisioner_annotate_node(p, ev->object);
        }
        if (ev->type == KUBE_WATCH_DELETED) {
                const char *id = node_provider_instance(ev->object);
                forget_orphan(p, id);
                /* its Node is gone (the instance terminated, maybe by another replica while this
                 * one stood by): nothing will initialize, it is in flight no more */
                InFlight *f = id ? provision_inflight_find(p, id) : NULL;
                if (f && f->node_name) {
                        log_info("Node %s of in-flight instance %s deleted; not in flight any more.", f->node_name, id);
                        provision_inflight_remove(p, (size_t) (f - p->inflight));
                }
        }
}

/* ---- insufficient capacity ---------------------------------------------------------------- */

bool provision_ice_marked(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct, uint64_t now) {
        for (size_t i = 0; i < p->n_ice; i++)
                if (p->ice[i].until_usec > now && p->ice[i].capacity_type == ct &&
                    streq(p->ice[i].instance_type, type) && streq_ptr(p->ice[i].zone, zone))
                        return true;
        return false;
}

void provision_ice_mark(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct) {
        uint64_t now = provision_now_usec(p);
        /* drop what expired */
        for (size_t i = 0; i < p->n_ice;)
                if (p->ice[i].until_usec <= now) {
                        free(p->ice[i].instance_type);
                        free(p->ice[i].zone);
                        p->ice[i] = p->ice[--p->n_ice];
                } else
                        i++;
        if (!type || provision_ice_marked(p, type, zone, ct, now) || p->n_ice >= MAX_ICE)
                return;
        Unavailable *n = realloc(p->ice, (p->n_ice + 1) * sizeof *n);
        if (!n)
                return;
        p->ice = n;
        p->ice[p->n_ice] = (Unavailable) { .instance_type = strdup(type), .zone = zone ? strdup(zone) : NULL,
                                           .capacity_type = ct, .until_usec = now + ICE_TTL_USEC };
        if (p->ice[p->n_ice].instance_type)
                p->n_ice++;
        p->ice_total++;
        log_notice("Offering %s %s in %s marked unavailable for 3 minutes (insufficient capacity).", type,
                   solver_capacity_type_to_name(ct), zone ? zone : "every zone");
}
