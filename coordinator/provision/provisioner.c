/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aws/aws-credentials.h"
#include "model/catalog.h"
#include "catalog-ec2.h"
#include "coordinator.h"
#include "aws/ec2.h"
#include "fileio.h"
#include "http.h"
#include "aws/instanceprofile.h"
#include "kube.h"
#include "launchclass.h"
#include "leader.h"
#include "log.h"
#include "macro.h"
#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "model/nodepool.h"
#include "provisioner-internal.h"
#include "status/events.h"
#include "status/nodeclaims.h"
#include "solver/solver.h"
#include "model/userdata.h"

static uint64_t now_usec(Provisioner *p) {
        return provisioner_now(p);
}

/* For measuring work done inside one loop iteration (sd_event_now() stands still there). */
static uint64_t clock_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- small helpers ------------------------------------------------------------------------ */

/* May this replica act now? Leading, and (with an election) its last Lease renewal younger than
 * the renew deadline, by the clock, not by a callback the loop may not have run yet. Asked before
 * every EC2 write, so two replicas never act at once (docs/leader-election.md). */
bool provisioner_acting(const Provisioner *p) {
        return p->leading && (!p->c->leader || leader_is_leading(p->c->leader));
}

const char *provisioner_acting_as(const Provisioner *p) {
        return p->c->leader ? leader_identity(p->c->leader) : "the only replica";
}

/* A pod still to be bound by the scheduler (Pending, no node, nobody deleting it) that is not a
 * DaemonSet's or a static one (those follow their node). */
static bool pod_waiting(const cJSON *pod) {
        const cJSON *md = jget(pod, "metadata"), *status = jget(pod, "status");
        if (jget(md, "deletionTimestamp") && !cJSON_IsNull(jget(md, "deletionTimestamp")))
                return false;
        if (!isempty(jstr(jget(pod, "spec"), "nodeName")))
                return false;
        if (!streq_ptr(jstr(status, "phase"), "Pending"))
                return false;
        const cJSON *o;
        cJSON_ArrayForEach(o, jget(md, "ownerReferences"))
                if (cJSON_IsTrue(jget(o, "controller")) &&
                    (streq_ptr(jstr(o, "kind"), "DaemonSet") || streq_ptr(jstr(o, "kind"), "Node")))
                        return false;
        return true;
}

/* The node kube-scheduler's preemption nominated the pod to (its victims are going), or NULL. */
static const char *pod_nominated_node(const cJSON *pod) {
        const char *n = pod_waiting(pod) ? jstr(jget(pod, "status"), "nominatedNodeName") : NULL;
        return isempty(n) ? NULL : n;
}

/* The pod is pending because kube-scheduler found no node for it (PodScheduled=False,
 * reason Unschedulable) and nobody is deleting it. As Karpenter's IsProvisionable: a pod with
 * status.nominatedNodeName is being placed by the scheduler's preemption (its victims are
 * going), and DaemonSet or static pods follow their node, so none of these gets capacity. */
bool pod_unschedulable(const cJSON *pod) {
        const cJSON *status = jget(pod, "status");
        if (!pod_waiting(pod) || pod_nominated_node(pod))
                return false;
        const cJSON *c;
        cJSON_ArrayForEach(c, jget(status, "conditions"))
                if (streq_ptr(jstr(c, "type"), "PodScheduled") && streq_ptr(jstr(c, "status"), "False") &&
                    streq_ptr(jstr(c, "reason"), "Unschedulable"))
                        return true;
        return false;
}

void provisioner_digest(const char *data, size_t len, char *out, size_t out_size) {
        unsigned char md[32];
        unsigned int n = 0;
        EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
        for (unsigned i = 0; i < n && 2 * i + 2 < out_size; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static int arch_index(const char *arch) {
        return streq_ptr(arch, "arm64") ? 1 : 0;
}

static const char *arch_of_type(const SolverInstanceType *t) {
        for (size_t i = 0; i < t->n_labels; i++)
                if (streq(t->labels[i].key, SOLVER_LABEL_ARCH))
                        return t->labels[i].value;
        return "amd64";
}

static void set_error(Provisioner *p, const char *fmt, ...) _printf_(2, 3);
static void set_error(Provisioner *p, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->last_error, sizeof p->last_error, fmt, ap);
        va_end(ap);
}

/* ---- batching ----------------------------------------------------------------------------- */

static void round_start(Provisioner *p);
static void catalog_swap(Provisioner *p);

static void batch_close(Provisioner *p) {
        p->batch_open = false;
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_OFF);
}

static int on_batch_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Provisioner *p = userdata;
        if (p->round)
                return 0; /* the batch stays open: the round under way pokes it when it ends */
        batch_close(p);
        round_start(p);
        return 0;
}

/* A pod needs capacity: open a batch, or keep the open one waiting for more (1 s idle, 10 s
 * at most). */
void provisioner_poke(Provisioner *p) {
        uint64_t now = now_usec(p);
        if (!p->batch_open) {
                p->batch_open = true;
                (void) sd_event_source_set_time(p->batch_max, now + p->c->cfg.batch_max_ms * USEC_PER_MSEC);
                (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_ONESHOT);
        }
        (void) sd_event_source_set_time(p->batch_idle, now + p->c->cfg.batch_idle_ms * USEC_PER_MSEC);
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_ONESHOT);
}

static void on_pod_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        if ((ev->type == KUBE_WATCH_ADDED || ev->type == KUBE_WATCH_MODIFIED) && pod_unschedulable(ev->object))
                provisioner_poke(p);
        if (ev->type == KUBE_WATCH_SYNCED && p->pending_unschedulable == 0)
                provisioner_poke(p); /* look once at what was pending before we started */
}

static void on_other_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        /* a changed EC2NodeClass (AMI, security groups...) is resolved again before the next launch */
        if (w == p->nodeclasses && ev->type == KUBE_WATCH_MODIFIED &&
            !cJSON_Compare(jget(ev->object, "spec"), jget(ev->old, "spec"), true)) { /* not a status write */
                const char *name = jstr(jget(ev->object, "metadata"), "name");
                for (size_t i = 0; name && i < p->n_resolved; i++)
                        if (streq(p->resolved[i]->node_class, name))
                                p->resolved[i]->resolved_usec = 0;
        }
        /* a new NodePool may make pending pods schedulable; a Node may register */
        if (ev->type == KUBE_WATCH_ADDED && w != p->nodes)
                provisioner_poke(p);
}

/* ---- in-flight instances ------------------------------------------------------------------ */

static void inflight_free(InFlight *f) {
        free(f->instance_id);
        free(f->nodepool);
        free(f->instance_type);
        free(f->zone);
        free(f->node_name);
        for (char **k = f->pods; k && *k; k++)
                free(*k);
        free(f->pods);
}

static InFlight *inflight_find(Provisioner *p, const char *id) {
        for (size_t i = 0; i < p->n_inflight; i++)
                if (streq(p->inflight[i].instance_id, id))
                        return &p->inflight[i];
        return NULL;
}

static int inflight_add(Provisioner *p, const char *id, const char *pool, const char *type, const char *zone,
                        SolverCapacityType ct, uint64_t launched, size_t n_pods) {
        if (inflight_find(p, id))
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
                inflight_free(f);
                return -ENOMEM;
        }
        p->n_inflight++;
        return 1;
}

/* Remembers the pods a launch was made for: until the instance is initialized they count as on
 * it, so a round that runs meanwhile does not plan them again (Karpenter's nominations). */
static void inflight_nominate(Provisioner *p, const char *id, const Round *rd, const SolverLaunch *l) {
        InFlight *f = inflight_find(p, id);
        if (!f || f->pods || l->n_pods == 0)
                return;
        f->pods = calloc(l->n_pods + 1, sizeof(char *));
        for (size_t i = 0, k = 0; f->pods && i < l->n_pods; i++)
                if (rd->pod_uids[l->pods[i]] && (f->pods[k] = strdup(rd->pod_uids[l->pods[i]])))
                        k++;
}

static const InFlight *inflight_nominated(const Provisioner *p, const char *key) {
        for (size_t i = 0; i < p->n_inflight; i++)
                for (char **k = p->inflight[i].pods; k && *k; k++)
                        if (streq(*k, key))
                                return &p->inflight[i];
        return NULL;
}

static void inflight_remove(Provisioner *p, size_t i) {
        inflight_free(&p->inflight[i]);
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
static bool node_reported(Provisioner *p, const char *name) {
        NodeEntry *ne;
        REGISTRY_FOREACH(ne, &p->c->registry)
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
        return f->learned || node_reported(p, kube_object_meta(node, "name"));
}

static int forget_registered(const cJSON *node, void *userdata) {
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
                                histogram_observe(&p->c->metrics.registration_seconds,
                                                  (double) (now_usec(p) - f->launched_usec) / 1e6);
                        (void) free_and_strdup(&f->node_name, name);
                }
                if (node_initialized(p, node, f)) {
                        log_info("Node %s (%s) initialized: Ready, no startup taints%s.", strempty(name), id,
                                 f->learned ? "" : ", agent reporting");
                        inflight_remove(p, i);
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
static int node_initializing(Provisioner *p, SolverArena *a, SolverNode *n) {
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
        n->in_flight = !node_reported(p, n->name);
        return 1;
}

static void forget_orphan(Provisioner *p, const char *id) {
        for (size_t k = 0; id && k < p->n_orphans; k++)
                if (streq(p->orphans[k].instance_id, id)) {
                        p->orphans[k] = p->orphans[--p->n_orphans];
                        return;
                }
}

static void on_node_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        if (ev->type == KUBE_WATCH_ADDED || ev->type == KUBE_WATCH_MODIFIED) {
                (void) forget_registered(ev->object, p);
                provisioner_annotate_node(p, ev->object);
        }
        if (ev->type == KUBE_WATCH_DELETED) {
                const char *id = node_provider_instance(ev->object);
                forget_orphan(p, id);
                /* its Node is gone (the instance terminated, maybe by another replica while this
                 * one stood by): nothing will initialize, it is in flight no more */
                InFlight *f = id ? inflight_find(p, id) : NULL;
                if (f && f->node_name) {
                        log_info("Node %s of in-flight instance %s deleted; not in flight any more.", f->node_name, id);
                        inflight_remove(p, (size_t) (f - p->inflight));
                }
        }
}

/* ---- insufficient capacity ---------------------------------------------------------------- */

static bool ice_marked(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct, uint64_t now) {
        for (size_t i = 0; i < p->n_ice; i++)
                if (p->ice[i].until_usec > now && p->ice[i].capacity_type == ct &&
                    streq(p->ice[i].instance_type, type) && streq_ptr(p->ice[i].zone, zone))
                        return true;
        return false;
}

static void ice_mark(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct) {
        uint64_t now = now_usec(p);
        /* drop what expired */
        for (size_t i = 0; i < p->n_ice;)
                if (p->ice[i].until_usec <= now) {
                        free(p->ice[i].instance_type);
                        free(p->ice[i].zone);
                        p->ice[i] = p->ice[--p->n_ice];
                } else
                        i++;
        if (!type || ice_marked(p, type, zone, ct, now) || p->n_ice >= MAX_ICE)
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

/* ---- the snapshot ------------------------------------------------------------------------- */

typedef struct Collect {
        NodepoolObjects *o;
        const char *kind, *api_version;
        bool pending_only;
        size_t added;
} Collect;

/* Objects from a watch carry no kind or apiVersion: parse a shallow copy that adds them (its
 * fields are references to the watch's object, which stays untouched; parsing copies what it
 * keeps). One bad object is skipped with a warning; it never stops provisioning for everything
 * else. */
static int collect_one(const cJSON *obj, void *userdata) {
        Collect *k = userdata;
        if (k->pending_only && !pod_unschedulable(obj) && !pod_nominated_node(obj))
                return 0;
        cJSON *copy = cJSON_CreateObject();
        if (!copy)
                return -ENOMEM;
        bool ok = true;
        for (const cJSON *f = obj ? obj->child : NULL; f && ok; f = f->next)
                if (f->string)
                        ok = cJSON_AddItemReferenceToObject(copy, f->string, (cJSON *) f);
        if (ok && !jget(copy, "kind"))
                ok = cJSON_AddStringToObject(copy, "kind", k->kind);
        if (ok && !jget(copy, "apiVersion"))
                ok = cJSON_AddStringToObject(copy, "apiVersion", k->api_version);
        if (!ok) {
                cJSON_Delete(copy);
                return -ENOMEM;
        }
        char *err = NULL;
        int r = nodepool_objects_add(k->o, copy, NULL, &err);
        cJSON_Delete(copy);
        if (r < 0) {
                log_warning("Skipping %s: %s", k->kind, err ? err : strerror(-r));
                free(err);
        } else
                k->added++;
        return 0;
}

static int collect_kind(KubeWatch *w, NodepoolObjects *o, const char *kind, const char *api_version,
                        bool pending_only, size_t *ret_added) {
        Collect k = { .o = o, .kind = kind, .api_version = api_version, .pending_only = pending_only };
        int r = w ? kube_watch_foreach(w, collect_one, &k) : 0;
        if (ret_added)
                *ret_added = k.added;
        return r;
}

static void resources_from_pb(const Nodesmith__V1__Resources *r, SolverResources *ret) {
        *ret = (SolverResources) {};
        if (!r)
                return;
        ret->v[SOLVER_RES_CPU] = r->cpu_millis;
        ret->v[SOLVER_RES_MEMORY] = r->memory_bytes;
        ret->v[SOLVER_RES_PODS] = r->pods;
        ret->v[SOLVER_RES_EPHEMERAL] = r->ephemeral_storage_bytes;
        ret->v[SOLVER_RES_NVIDIA_GPU] = r->gpus;
        ret->v[SOLVER_RES_HUGEPAGES_2MI] = r->hugepages_2mi_bytes;
        ret->v[SOLVER_RES_HUGEPAGES_1GI] = r->hugepages_1gi_bytes;
}

static bool zone_usable(const char *const *zones, size_t n, const char *zone) {
        if (n == 0)
                return true; /* not known yet */
        for (size_t i = 0; i < n; i++)
                if (streq_ptr(zones[i], zone))
                        return true;
        return false;
}

/* Builds round->snap from the watches, the agents' reports and the in-flight instances. */
/* A pod an agent reports, with the constraints its report carries (proto Pod.scheduling) read as
 * the Pod they come from would be. Requests and the rest come from the report itself. */
static int pod_scheduling(SolverArena *a, const Nodesmith__V1__Pod *pp, SolverPod *ret) {
        if (isempty(pp->scheduling))
                return -ENOENT;
        cJSON *sch = cJSON_Parse(pp->scheduling);
        cJSON *pod = cJSON_CreateObject(), *md = cJSON_CreateObject(), *spec = cJSON_CreateObject();
        cJSON *containers = cJSON_CreateArray(), *c = cJSON_CreateObject();
        int r = -ENOMEM;
        if (!sch || !pod || !md || !spec || !containers || !c) {
                r = sch ? -ENOMEM : -EBADMSG;
                goto out;
        }
        cJSON_AddStringToObject(md, "name", strempty(pp->name));
        cJSON_AddStringToObject(md, "namespace", strempty(pp->namespace_));
        cJSON_AddStringToObject(c, "name", "c");
        cJSON_AddItemToArray(containers, TAKE_PTR(c));
        cJSON_AddItemToObject(spec, "containers", TAKE_PTR(containers));
        for (cJSON *f = sch->child; f; f = f->next)
                cJSON_AddItemToObject(streq(f->string, "labels") ? md : spec, f->string, cJSON_Duplicate(f, true));
        cJSON_AddItemToObject(pod, "metadata", TAKE_PTR(md));
        cJSON_AddItemToObject(pod, "spec", TAKE_PTR(spec));
        char *err = NULL;
        r = nodepool_parse_pod(a, pod, ret, &err);
        if (r < 0)
                log_debug("Pod %s/%s: its scheduling constraints are not understood: %s", strempty(pp->namespace_),
                          strempty(pp->name), strempty(err));
        free(err);
        ret->requests = (SolverResources) {};
out:
        cJSON_Delete(sch);
        cJSON_Delete(pod);
        cJSON_Delete(md);
        cJSON_Delete(spec);
        cJSON_Delete(containers);
        cJSON_Delete(c);
        return r;
}

int provisioner_snapshot(Provisioner *p, Round *rd, size_t *ret_pending) {
        NodepoolObjects *o = NULL;
        char *err = NULL;
        size_t pending = 0;
        int r;

        r = nodepool_objects_new(&o);
        if (r < 0)
                return r;
        rd->objects = o;
        r = collect_kind(p->nodepools, o, "NodePool", "nodesmith.io/v1", false, NULL);
        if (r >= 0)
                r = collect_kind(p->nodeclasses, o, "EC2NodeClass", "nodesmith.io/v1", false, NULL);
        if (r >= 0)
                r = collect_kind(p->daemonsets, o, "DaemonSet", "apps/v1", false, NULL);
        if (r >= 0)
                r = collect_kind(p->nodes, o, "Node", "v1", false, NULL);
        if (r >= 0)
                r = collect_kind(p->pods, o, "Pod", "v1", true, &pending);
        if (r < 0)
                return r;
        r = nodepool_objects_finish(o, p->catalog, &err);
        if (r < 0) {
                log_warning("Cannot build the snapshot: %s", err ? err : strerror(-r));
                free(err);
                return r;
        }
        *ret_pending = pending;

        SolverArena *a = o->arena;
        uint64_t now = now_usec(p);

        /* Nodes: those of the API, then instances still in flight. */
        size_t n_nodes = o->n_nodes + p->n_inflight;
        SolverNode *nodes = solver_arena_alloc(a, (n_nodes + 1) * sizeof *nodes);
        if (!nodes)
                return -ENOMEM;
        if (o->n_nodes > 0)
                memcpy(nodes, o->nodes, o->n_nodes * sizeof *nodes);
        size_t k = o->n_nodes;
        size_t nt = 0;
        const SolverInstanceType *types = catalog_types(p->catalog, &nt);
        /* an in-flight instance whose Node is registered is re-checked here, as its agent's
         * first report does not come with a Node event */
        for (size_t i = 0; i < p->n_inflight;) {
                const InFlight *f = &p->inflight[i];
                const cJSON *obj = f->node_name ? kube_watch_get(p->nodes, NULL, f->node_name) : NULL;
                size_t before = p->n_inflight;
                if (obj)
                        (void) forget_registered(obj, p);
                if (p->n_inflight == before)
                        i++;
        }
        for (size_t i = 0; i < p->n_inflight; i++) {
                const InFlight *f = &p->inflight[i];
                if (f->node_name && kube_watch_get(p->nodes, NULL, f->node_name))
                        continue; /* the Node stands for it */
                int t = catalog_find(p->catalog, f->instance_type);
                if (t < 0)
                        continue;
                SolverLabel *labels = solver_arena_alloc(a, 5 * sizeof *labels);
                if (!labels)
                        return -ENOMEM;
                labels[0] = (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, f->instance_type };
                labels[1] = (SolverLabel) { SOLVER_LABEL_ZONE, f->zone };
                labels[2] = (SolverLabel) { SOLVER_LABEL_CAPACITY_TYPE, solver_capacity_type_to_name(f->capacity_type) };
                labels[3] = (SolverLabel) { SOLVER_LABEL_NODEPOOL, f->nodepool };
                labels[4] = (SolverLabel) { SOLVER_LABEL_ARCH, arch_of_type(&types[t]) };
                nodes[k++] = (SolverNode) {
                        .name = solver_arena_strdup(a, f->instance_id),
                        .nodepool = solver_arena_strdup(a, f->nodepool),
                        .instance_type = types[t].name,
                        .zone = solver_arena_strdup(a, f->zone),
                        .capacity_type = f->capacity_type,
                        .labels = labels,
                        .n_labels = 5,
                        .allocatable = types[t].allocatable,
                        .in_flight = true,
                };
        }
        n_nodes = k;

        /* Pending pods that an instance in flight was launched for count as on it. */
        for (size_t i = 0; i < o->n_pods && p->n_inflight > 0; i++) {
                SolverPod *sp = &o->pods[i];
                const cJSON *obj = sp->node_name ? NULL : kube_watch_get(p->pods, sp->namespace_, sp->name);
                if (!obj)
                        continue;
                char key[512];
                snprintf(key, sizeof key, "%s/%s", strempty(sp->namespace_), strempty(kube_object_meta(obj, "uid")));
                const InFlight *f = inflight_nominated(p, key);
                if (!f)
                        continue;
                const char *on = f->node_name && kube_watch_get(p->nodes, NULL, f->node_name) ? f->node_name : f->instance_id;
                for (size_t j = 0; j < n_nodes; j++)
                        if (streq_ptr(nodes[j].name, on)) {
                                sp->node_name = nodes[j].name;
                                break;
                        }
        }

        /* A pod nominated to a node by the scheduler's preemption takes its room there, as the
         * scheduler reserves it: it needs no capacity, and no other pod is planned into it. */
        for (size_t i = 0; i < o->n_pods; i++) {
                SolverPod *sp = &o->pods[i];
                const cJSON *obj = sp->node_name ? NULL : kube_watch_get(p->pods, sp->namespace_, sp->name);
                const char *nominated = obj ? pod_nominated_node(obj) : NULL;
                if (!nominated)
                        continue;
                sp->node_name = solver_arena_strdup(a, nominated);
                if (!sp->node_name)
                        return -ENOMEM;
                if (*ret_pending > 0)
                        (*ret_pending)--;
        }

        /* A Node whose agent does not report: what runs there is unknown, so nothing new is
         * planned onto it (pods that fit there anyway are placed by kube-scheduler). */
        for (size_t i = 0; i < o->n_nodes; i++) {
                r = node_initializing(p, a, &nodes[i]);
                if (r < 0)
                        return r;
                if (r == 0 && !node_reported(p, nodes[i].name))
                        nodes[i].unschedulable = true;
        }

        /* Nodes told to drain are leaving: they take no pods, and theirs need a place. */
        NodeEntry *e;
        REGISTRY_FOREACH(e, &p->c->registry) {
                const char *node = provisioner_node_name(p, e);
                if ((e->action != NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN && !e->replace_started_usec) || !node)
                        continue;
                for (size_t i = 0; i < o->n_nodes; i++)
                        if (streq(nodes[i].name, node))
                                nodes[i].deleting = true;
        }

        /* Pods: the pending ones, then what each node's agent reports running there. */
        size_t n_bound = 0;
        REGISTRY_FOREACH(e, &p->c->registry)
                n_bound += e->state ? e->state->n_pods : 0;
        SolverPod *pods = solver_arena_alloc(a, (o->n_pods + n_bound + 1) * sizeof *pods);
        if (!pods)
                return -ENOMEM;
        if (o->n_pods > 0)
                memcpy(pods, o->pods, o->n_pods * sizeof *pods);
        size_t np = o->n_pods;
        REGISTRY_FOREACH(e, &p->c->registry) {
                const Nodesmith__V1__NodeState *st = e->state;
                const char *node = provisioner_node_name(p, e);
                bool known = false;
                for (size_t i = 0; node && i < o->n_nodes && !known; i++)
                        known = streq(nodes[i].name, node);
                if (!known)
                        continue;
                /* the agent's allocatable is exact */
                for (size_t i = 0; i < o->n_nodes; i++)
                        if (streq(nodes[i].name, node) && st->allocatable) {
                                SolverResources al;
                                resources_from_pb(st->allocatable, &al);
                                if (al.v[SOLVER_RES_CPU] > 0 && al.v[SOLVER_RES_MEMORY] > 0)
                                        nodes[i].allocatable = al;
                        }
                bool leaving = e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN || e->replace_started_usec;
                for (size_t i = 0; i < st->n_pods; i++) {
                        const Nodesmith__V1__Pod *pp = st->pods[i];
                        if (pp->terminating || streq_ptr(pp->phase, "Succeeded") || streq_ptr(pp->phase, "Failed"))
                                continue;
                        /* a leaving node's pods (but its DaemonSet and mirror pods) need a new home:
                         * they count as pending, sized by their requests */
                        bool move = leaving && !pp->daemonset && !pp->mirror;
                        if (move)
                                (*ret_pending)++;
                        SolverPod *sp = &pods[np++];
                        /* labels, selectors, affinity, tolerations, spread as the agent saw them */
                        if (pod_scheduling(a, pp, sp) < 0)
                                *sp = (SolverPod) {};
                        sp->name = solver_arena_strdup(a, pp->name);
                        sp->namespace_ = solver_arena_strdup(a, pp->namespace_);
                        sp->node_name = move ? NULL : solver_arena_strdup(a, node);
                        sp->priority = pp->priority;
                        sp->daemonset = pp->daemonset;
                        /* constraints the agent left out (proto Pod.scheduling_truncated): not moved */
                        sp->do_not_disrupt = pp->do_not_disrupt || pp->scheduling_truncated;
                        sp->deletion_cost = pp->deletion_cost;
                        resources_from_pb(pp->requests, &sp->requests);
                        sp->requests.v[SOLVER_RES_PODS] = 1;
                }
        }

        /* Zones with a subnet for nodes, once known: offerings elsewhere cannot launch. */
        const char *zones[MAX_SUBNETS * 2];
        size_t n_zones = 0;
        for (size_t ri = 0; ri < p->n_resolved; ri++)
                for (size_t sidx = 0; sidx < p->resolved[ri]->n_subnets && n_zones < ELEMENTSOF(zones); sidx++) {
                        bool dup = false;
                        for (size_t z = 0; z < n_zones && !dup; z++)
                                dup = streq(zones[z], p->resolved[ri]->subnets[sidx].zone);
                        if (!dup)
                                zones[n_zones++] = p->resolved[ri]->subnets[sidx].zone;
                }

        /* Offerings that failed for capacity lately are left out, and those in zones without a
         * subnet. */
        SolverInstanceType *tcopy = NULL;
        if (p->n_ice > 0 || n_zones > 0) {
                tcopy = solver_arena_alloc(a, (nt + 1) * sizeof *tcopy);
                if (!tcopy)
                        return -ENOMEM;
                memcpy(tcopy, types, nt * sizeof *tcopy);
                for (size_t t = 0; t < nt; t++) {
                        bool any = false;
                        for (size_t f = 0; f < types[t].n_offerings && !any; f++)
                                any = ice_marked(p, types[t].name, types[t].offerings[f].zone,
                                                 types[t].offerings[f].capacity_type, now) ||
                                      !zone_usable(zones, n_zones, types[t].offerings[f].zone);
                        if (!any)
                                continue;
                        SolverOffering *off = solver_arena_alloc(a, (types[t].n_offerings + 1) * sizeof *off);
                        if (!off)
                                return -ENOMEM;
                        for (size_t f = 0; f < types[t].n_offerings; f++) {
                                off[f] = types[t].offerings[f];
                                if (ice_marked(p, types[t].name, off[f].zone, off[f].capacity_type, now) ||
                                    !zone_usable(zones, n_zones, off[f].zone))
                                        off[f].available = false;
                        }
                        tcopy[t].offerings = off;
                }
        }

        rd->snap = (SolverSnapshot) {
                .types = tcopy ? tcopy : types,
                .n_types = nt,
                .nodepools = o->pools,
                .n_nodepools = o->n_pools,
                .nodes = nodes,
                .n_nodes = n_nodes,
                .pods = pods,
                .n_pods = np,
                .daemonsets = o->daemonsets,
                .n_daemonsets = o->n_daemonsets,
        };
        return 0;
}

/* ---- launching ---------------------------------------------------------------------------- */

static void round_next(Provisioner *p);
static void round_finish(Provisioner *p);

static Resolved *resolved_get(Provisioner *p, const char *node_class) {
        for (size_t i = 0; i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, strempty(node_class)))
                        return p->resolved[i];
        Resolved **n = realloc(p->resolved, (p->n_resolved + 1) * sizeof *n);
        if (!n)
                return NULL;
        p->resolved = n;
        Resolved *r = calloc(1, sizeof *r);
        if (!r || !(r->node_class = strdup(strempty(node_class)))) {
                free(r);
                return NULL;
        }
        p->resolved[p->n_resolved++] = r;
        return r;
}

static void resolved_reset(Resolved *r) {
        for (size_t i = 0; i < r->n_subnets; i++) {
                free(r->subnets[i].id);
                free(r->subnets[i].zone);
        }
        r->n_subnets = 0;
        for (size_t i = 0; r->sgs[i]; i++) {
                free(r->sgs[i]);
                r->sgs[i] = NULL;
        }
        for (int a = 0; a < 2; a++) {
                free(r->ami[a]);
                r->ami[a] = NULL;
        }
        free(r->profile);
        r->profile = NULL;
        r->resolved_usec = 0;
}

static void resolved_free(Resolved *r) {
        if (!r)
                return;
        resolved_reset(r);
        for (int a = 0; a < 2; a++) {
                free(r->template_name[a]);
                free(r->template_hash[a]);
        }
        free(r->node_class);
        free(r);
}

static void launch_failed(Provisioner *p, const char *what, const Ec2Error *err) {
        Round *rd = p->round;
        if (rd->result && rd->next < rd->result->n_launches)
                nodeclaims_launch_failed(p->c->status, rd, &rd->result->launches[rd->next], what,
                                         err ? err->code : NULL, err ? err->message : NULL);
        p->launch_errors++;
        set_error(p, "%s: %s %s", what, err ? err->code : "", err ? err->message : "");
        log_warning("Launch step failed (%s): %s %s", what, err ? err->code : "", err ? err->message : "");
        p->round->step = STEP_IDLE;
        p->round->next++;
        round_next(p);
}

static const cJSON *class_terms(Provisioner *p, const char *node_class, const char *field) {
        const cJSON *nc = node_class && p->nodeclasses ? kube_watch_get(p->nodeclasses, NULL, node_class) : NULL;
        return jget(jget(nc, "spec"), field);
}

/* The filter for DescribeSubnets / DescribeSecurityGroups: the tag nodesmith.io/discovery=CLUSTER
 * without a node class; a class's one term of plain tags as EC2 filters; else none, and the
 * terms (ORed, with ids, names and "*" values) are matched on the answer. */
static size_t selector_filters(Provisioner *p, const char *node_class, const char *field, Ec2Filter *f,
                               char names[][160], const char *values[][2]) {
        const cJSON *terms = class_terms(p, node_class, field);
        const cJSON *first = cJSON_GetArrayItem(terms, 0), *tags = jget(first, "tags");
        size_t n = 0;
        const cJSON *t;
        bool plain = cJSON_GetArraySize(terms) == 1 && cJSON_GetArraySize(first) == 1 && cJSON_GetArraySize(tags) <= 4;
        cJSON_ArrayForEach(t, tags)
                plain = plain && cJSON_IsString(t) && !strpbrk(t->valuestring, "*?[");
        if (terms && !plain)
                return 0;
        cJSON_ArrayForEach(t, tags) {
                if (n >= 4 || !cJSON_IsString(t))
                        break;
                snprintf(names[n], 160, "tag:%s", t->string);
                values[n][0] = t->valuestring;
                f[n] = (Ec2Filter) { .name = names[n], .values = values[n], .n_values = 1 };
                n++;
        }
        if (n == 0) {
                snprintf(names[0], 160, "tag:nodesmith.io/discovery");
                values[0][0] = p->c->cfg.cluster_name;
                f[0] = (Ec2Filter) { .name = names[0], .values = values[0], .n_values = 1 };
                n = 1;
        }
        return n;
}


/* What DescribeSubnets and DescribeSecurityGroups found, kept for the node class. */
static void resolved_add_subnets(Resolved *res, const Ec2SubnetList *list, const cJSON *terms) {
        for (size_t i = 0; i < list->n && res->n_subnets < MAX_SUBNETS; i++) {
                if (!launchclass_terms_match(terms, list->items[i].id, NULL, list->items[i].vpc_id, list->items[i].tags,
                                             list->items[i].n_tags))
                        continue;
                res->subnets[res->n_subnets].id = strdup(list->items[i].id);
                res->subnets[res->n_subnets].zone = strdup(strempty(list->items[i].zone));
                res->subnets[res->n_subnets].free_ips = list->items[i].available_ips;
                res->n_subnets++;
        }
}

static void resolved_add_sgs(Resolved *res, const Ec2SecurityGroupList *list, const cJSON *terms) {
        size_t k = 0;
        for (size_t i = 0; i < list->n && k < MAX_SGS; i++)
                if (launchclass_terms_match(terms, list->items[i].id, list->items[i].name, list->items[i].vpc_id,
                                            list->items[i].tags, list->items[i].n_tags))
                        res->sgs[k++] = strdup(list->items[i].id);
}

/* Subnets and security groups of a node class, looked up before the first solve: the solver
 * must know which zones nodes can go to. */
typedef struct Prefetch {
        Provisioner *p;
        Resolved *res;
        char *node_class;
} Prefetch;

static void prefetch_done(Prefetch *pf, bool ok) {
        Provisioner *p = pf->p;
        pf->res->prefetching = false;
        if (ok)
                pf->res->resolved_usec = now_usec(p);
        free(pf->node_class);
        free(pf);
        /* The round that waited for this look-up had closed its batch: solve now, with the
         * pods that came meanwhile, rather than after another idle window. */
        if (p->round) {
                provisioner_poke(p); /* a round under way: after it */
                return;
        }
        batch_close(p);
        round_start(p);
}

static void on_prefetch_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata) {
        Prefetch *pf = userdata;
        if (!err)
                resolved_add_sgs(pf->res, list, class_terms(pf->p, isempty(pf->node_class) ? NULL : pf->node_class,
                                                              "securityGroupSelectorTerms"));
        else
                log_warning("DescribeSecurityGroups failed: %s %s", err->code, err->message);
        ec2_security_group_list_free(list);
        prefetch_done(pf, !err);
}

static void on_prefetch_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata) {
        Prefetch *pf = userdata;
        Resolved *res = pf->res;
        if (err) {
                log_warning("DescribeSubnets failed: %s %s", err->code, err->message);
                ec2_subnet_list_free(list);
                return prefetch_done(pf, false);
        }
        resolved_add_subnets(res, list, class_terms(pf->p, isempty(pf->node_class) ? NULL : pf->node_class,
                                                    "subnetSelectorTerms"));
        ec2_subnet_list_free(list);
        if (res->n_subnets == 0) {
                log_warning("No subnet matches the selector of EC2NodeClass %s.",
                            isempty(pf->node_class) ? "(default)" : pf->node_class);
                return prefetch_done(pf, false);
        }
        Ec2Filter f[4];
        char names[4][160];
        const char *values[4][2] = {};
        size_t nf = selector_filters(pf->p, pf->node_class, "securityGroupSelectorTerms", f, names, values);
        if (ec2_describe_security_groups(pf->p->ec2, NULL, f, nf, on_prefetch_sgs, pf) < 0)
                prefetch_done(pf, false);
}

/* Returns true when a look-up was started (or is under way): solve after it. */
static bool prefetch(Provisioner *p, const char *node_class) {
        Resolved *res = resolved_get(p, node_class);
        uint64_t now = now_usec(p);
        if (!res || res->resolved_usec)
                return false;
        if (res->prefetching)
                return true;
        if (res->prefetch_usec && now - res->prefetch_usec < 30 * USEC_PER_SEC)
                return false; /* it failed lately: solve without knowing the zones */
        Prefetch *pf = calloc(1, sizeof *pf);
        if (!pf)
                return false;
        pf->p = p;
        pf->res = res;
        pf->node_class = strdup(strempty(node_class));
        resolved_reset(res);
        Ec2Filter f[4];
        char names[4][160];
        const char *values[4][2] = {};
        size_t nf = selector_filters(p, node_class, "subnetSelectorTerms", f, names, values);
        res->prefetch_usec = now;
        if (!pf->node_class || ec2_describe_subnets(p->ec2, NULL, f, nf, on_prefetch_subnets, pf) < 0) {
                free(pf->node_class);
                free(pf);
                return false;
        }
        res->prefetching = true;
        return true;
}

static void on_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                ec2_subnet_list_free(list);
                return launch_failed(p, "DescribeSubnets", err);
        }
        Resolved *res = rd->res;
        resolved_add_subnets(res, list, class_terms(p, isempty(res->node_class) ? NULL : res->node_class,
                                                    "subnetSelectorTerms"));
        ec2_subnet_list_free(list);
        if (res->n_subnets == 0) {
                Ec2Error e = { .kind = EC2_ERROR_NOT_FOUND };
                snprintf(e.code, sizeof e.code, "NoSubnets");
                snprintf(e.message, sizeof e.message, "no subnet matches the node class's selector");
                return launch_failed(p, "DescribeSubnets", &e);
        }
        rd->step = STEP_SGS;
        round_next(p);
}

static void on_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                ec2_security_group_list_free(list);
                return launch_failed(p, "DescribeSecurityGroups", err);
        }
        resolved_add_sgs(rd->res, list, class_terms(p, isempty(rd->res->node_class) ? NULL : rd->res->node_class,
                                                    "securityGroupSelectorTerms"));
        ec2_security_group_list_free(list);
        if (!rd->res->sgs[0]) {
                Ec2Error e = { .kind = EC2_ERROR_NOT_FOUND };
                snprintf(e.code, sizeof e.code, "NoSecurityGroups");
                snprintf(e.message, sizeof e.message, "no security group matches the node class's selector");
                rd->res->resolved_usec = 0; /* looked up again next time */
                return launch_failed(p, "DescribeSecurityGroups", &e);
        }
        rd->step = STEP_PROFILE;
        round_next(p);
}

/* The node class's spec (NULL: none) and what it puts into a launch (in the round's arena). */
static LaunchClass *launch_class(Provisioner *p, Round *rd, const char *node_class, const cJSON **ret_spec) {
        const cJSON *spec = node_class ? jget(kube_watch_get(p->nodeclasses, NULL, node_class), "spec") : NULL;
        LaunchClass *lc = solver_arena_alloc(rd->arena, sizeof *lc);
        if (!lc || launchclass_from_spec(spec, lc) < 0)
                return NULL;
        if (ret_spec)
                *ret_spec = spec;
        return lc;
}

static void on_profile(const Ec2Error *err, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                /* not known to hold the role: made sure of again before the next launch */
                free(rd->res->profile);
                rd->res->profile = NULL;
                return launch_failed(p, "instance profile (EC2NodeClass role)", err);
        }
        rd->step = rd->res->ami[rd->arch] ? STEP_TEMPLATE : STEP_AMI;
        round_next(p);
}

/* The instance profile the class's nodes get: spec.instanceProfile as it is; for spec.role one
 * made and kept by nodesmith; no class: the coordinator's --instance-profile. Returns 1 when a
 * look-up was started (on_profile continues). */
static int profile_resolve(Provisioner *p, Round *rd, const char *node_class) {
        const CoordConfig *cfg = &p->c->cfg;
        const cJSON *spec = NULL;
        LaunchClass *lc = launch_class(p, rd, node_class, &spec);
        if (!lc)
                return -ENOMEM;
        const char *role = lc->role, *named = lc->instance_profile;
        char name[160];
        if (!role) {
                rd->res->profile = strdup(named ?: strempty(cfg->instance_profile));
                return rd->res->profile ? 0 : -ENOMEM;
        }
        int r = launchclass_profile_name(cfg->cluster_name, cfg->region, node_class, name, sizeof name);
        if (r < 0)
                return r;
        rd->res->profile = strdup(name);
        if (!rd->res->profile)
                return -ENOMEM;
        InstanceProfileSpec ips = { .name = name, .role = role, .cluster = cfg->cluster_name, .region = cfg->region,
                                    .nodeclass = node_class, .tags = lc->tags, .n_tags = lc->n_tags };
        r = instance_profile_ensure(p->ec2, &ips, on_profile, p);
        if (r < 0) {
                free(rd->res->profile);
                rd->res->profile = NULL;
                return r;
        }
        return 1;
}

static void on_ami(Ec2Client *ec2, const Ec2Error *err, char *value, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        if (err) {
                free(value);
                return launch_failed(p, "GetParameter (EKS AMI)", err);
        }
        free(rd->res->ami[rd->arch]);
        rd->res->ami[rd->arch] = value;
        rd->res->image_checked_usec[rd->arch] = now_usec(p);
        rd->res->resolved_usec = now_usec(p);
        rd->step = STEP_TEMPLATE;
        round_next(p);
}

static int ami_lookup(Provisioner *p, Round *rd, const char *node_class, char *ssm, size_t size);

/* One term's images: the newest available one of the architecture competes with the other
 * terms' (terms are ORed); after the last term the newest of all is the image. */
static void on_images(Ec2Client *ec2, const Ec2Error *err, Ec2ImageList *list, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        const char *arch = rd->arch ? "arm64" : "x86_64";
        if (err) {
                ec2_image_list_free(list);
                free(rd->ami_best);
                rd->ami_best = NULL;
                return launch_failed(p, "DescribeImages (amiSelectorTerms)", err);
        }
        const Ec2Image *img = NULL;
        for (size_t i = 0; list && i < list->n && !img; i++)
                if (streq_ptr(list->items[i].architecture, arch) &&
                    (!list->items[i].state || streq(list->items[i].state, "available")))
                        img = &list->items[i];
        if (img && (!rd->ami_best || img->creation_date > rd->ami_best_date)) {
                free(rd->ami_best);
                rd->ami_best = strdup(img->id);
                rd->ami_best_date = img->creation_date;
        }
        ec2_image_list_free(list);
        const SolverNodePool *pool = &rd->snap.nodepools[rd->result->launches[rd->next].nodepool];
        const cJSON *terms = class_terms(p, pool->node_class, "amiSelectorTerms");
        if (++rd->ami_term < (size_t) cJSON_GetArraySize(terms)) {
                char ssm[256];
                int r = ami_lookup(p, rd, pool->node_class, ssm, sizeof ssm);
                if (r >= 0)
                        return;
                Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = r };
                snprintf(e.code, sizeof e.code, "Local");
                snprintf(e.message, sizeof e.message, "%s", strerror(-r));
                return launch_failed(p, "DescribeImages (amiSelectorTerms)", &e);
        }
        char *id = TAKE_PTR(rd->ami_best);
        if (!id) {
                Ec2Error e = { .kind = EC2_ERROR_NOT_FOUND, .error = -ENOENT };
                snprintf(e.code, sizeof e.code, "NoMatchingImage");
                snprintf(e.message, sizeof e.message, "no available %s image matches the EC2NodeClass's amiSelectorTerms",
                         arch);
                return launch_failed(p, "DescribeImages (amiSelectorTerms)", &e);
        }
        on_ami(ec2, NULL, id, p);
}

/* An ssmParameter term's image id, then that image (its architecture and state). */
static void on_term_parameter(Ec2Client *ec2, const Ec2Error *err, char *value, void *userdata) {
        Provisioner *p = userdata;
        if (err) {
                free(value);
                return launch_failed(p, "GetParameter (amiSelectorTerms ssmParameter)", err);
        }
        const char *ids[2] = { value, NULL };
        int r = ec2_describe_images(p->ec2, ids, NULL, NULL, 0, on_images, p);
        free(value);
        if (r < 0) {
                Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = r };
                snprintf(e.code, sizeof e.code, "Local");
                snprintf(e.message, sizeof e.message, "%s", strerror(-r));
                launch_failed(p, "DescribeImages (amiSelectorTerms)", &e);
        }
}

/* The image for the launch's architecture from the EC2NodeClass's amiSelectorTerms: an alias
 * (al2023@latest, al2023@vYYYYMMDD: the SSM parameters AWS publishes); else each term in turn
 * (an id; an ssmParameter holding an id; a name, tags and owner), the newest available image
 * of the architecture among them. No terms: al2023@latest. */
static int ami_lookup(Provisioner *p, Round *rd, const char *node_class, char *ssm, size_t size) {
        const cJSON *terms = class_terms(p, node_class, "amiSelectorTerms");
        const char *arch = rd->arch ? "arm64" : "x86_64", *k8s = p->c->cfg.kubernetes_version;
        const cJSON *first = cJSON_GetArrayItem(terms, 0);
        const char *alias = jstr(first, "alias");
        if (!first || alias) {
                int r = launchclass_alias_parameter(alias, k8s, arch, ssm, size);
                return r < 0 ? r : ec2_ssm_get_parameter(p->ec2, ssm, on_ami, p);
        }
        const cJSON *t = cJSON_GetArrayItem(terms, (int) rd->ami_term);
        if (!t)
                return -ENOENT;
        if (jstr(t, "ssmParameter"))
                return ec2_ssm_get_parameter(p->ec2, jstr(t, "ssmParameter"), on_term_parameter, p);
        const char *ids[2] = { jstr(t, "id"), NULL }, *owners[2] = { jstr(t, "owner"), NULL }, *archv[1] = { arch };
        Ec2Filter f[EC2_MAX_FILTERS];
        char names[EC2_MAX_FILTERS][160];
        const char *values[EC2_MAX_FILTERS][1];
        size_t nf = 0;
        f[nf++] = (Ec2Filter) { .name = "architecture", .values = archv, .n_values = 1 };
        if (jstr(t, "name")) {
                values[nf][0] = jstr(t, "name");
                f[nf] = (Ec2Filter) { .name = "name", .values = values[nf], .n_values = 1 };
                nf++;
        }
        const cJSON *tag;
        cJSON_ArrayForEach(tag, jget(t, "tags")) {
                if (!cJSON_IsString(tag) || nf >= ELEMENTSOF(f))
                        return -E2BIG;
                snprintf(names[nf], sizeof names[nf], "tag:%s", tag->string);
                values[nf][0] = tag->valuestring;
                f[nf] = (Ec2Filter) { .name = names[nf], .values = values[nf], .n_values = 1 };
                nf++;
        }
        return ec2_describe_images(p->ec2, ids[0] ? ids : NULL, owners[0] ? owners : NULL, f, nf, on_images, p);
}

static void on_template(Ec2Client *ec2, const Ec2Error *err, Ec2LaunchTemplate *t, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        /* a template of that name already made earlier (by us, or by the leader before us) is
         * used by name: its name carries the content hash */
        if (err && !strstr(err->code, "AlreadyExists")) {
                ec2_launch_template_free(t);
                return launch_failed(p, "CreateLaunchTemplate", err);
        }
        ec2_launch_template_free(t);
        rd->step = STEP_FLEET;
        round_next(p);
}

static int template_for(Provisioner *p, Round *rd, const SolverLaunch *l, bool *ret_create,
                        Ec2LaunchTemplateSpec *spec, char **ret_userdata) {
        const SolverNodePool *pool = &rd->snap.nodepools[l->nodepool];
        Resolved *res = rd->res;
        const CoordConfig *cfg = &p->c->cfg;
        _cleanup_free_ char *ud = NULL;

        /* labels and taints the node registers with: the pool's, and what the plan narrowed */
        size_t nl = l->n_labels, ntt = pool->n_taints + pool->n_startup_taints;
        const char **labels = solver_arena_alloc(rd->arena, (nl + 4) * sizeof *labels);
        const char **taints = solver_arena_alloc(rd->arena, (ntt + 1) * sizeof *taints);
        if (!labels || !taints)
                return -ENOMEM;
        for (size_t i = 0; i < nl; i++)
                labels[i] = solver_arena_printf(rd->arena, "%s=%s", l->labels[i].key, l->labels[i].value);
        /* what the node was made from, so that drift can be told later */
        char h[17];
        disruption_pool_hash(kube_watch_get(p->nodepools, NULL, pool->name), h);
        if (h[0])
                labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_POOL_HASH, h);
        /* the image it boots, so that a new image behind the same alias drifts it */
        if (res->ami[rd->arch])
                labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_IMAGE, res->ami[rd->arch]);
        if (pool->node_class) {
                disruption_class_hash(kube_watch_get(p->nodeclasses, NULL, pool->node_class), h);
                if (h[0])
                        labels[nl++] = solver_arena_printf(rd->arena, "%s=%s", DISRUPTION_LABEL_CLASS_HASH, h);
        }
        size_t k = 0;
        static const char *const eff[] = { "NoSchedule", "PreferNoSchedule", "NoExecute" };
        for (size_t i = 0; i < pool->n_taints; i++)
                taints[k++] = solver_arena_printf(rd->arena, "%s%s%s:%s", pool->taints[i].key,
                                                  pool->taints[i].value ? "=" : "", strempty(pool->taints[i].value),
                                                  eff[pool->taints[i].effect]);
        for (size_t i = 0; i < pool->n_startup_taints; i++)
                taints[k++] = solver_arena_printf(rd->arena, "%s%s%s:%s", pool->startup_taints[i].key,
                                                  pool->startup_taints[i].value ? "=" : "",
                                                  strempty(pool->startup_taints[i].value),
                                                  eff[pool->startup_taints[i].effect]);
        UserDataSpec uds = {
                .cluster_name = cfg->cluster_name,
                .api_server_endpoint = cfg->cluster_endpoint,
                .certificate_authority = cfg->cluster_ca,
                .cidr = cfg->cluster_cidr,
                .labels = labels,
                .taints = taints,
                .coordinator = cfg->agent_endpoint,
                .coordinator_ca_pem = p->agent_ca_pem,
                .tls_server_name = cfg->agent_tls_server_name,
                .token = p->c->token,
                .nodepool = pool->name,
        };
        const cJSON *class_spec = NULL;
        LaunchClass *lc = launch_class(p, rd, pool->node_class, &class_spec);
        if (!lc)
                return -ENOMEM;
        int r;
        uds.kubelet = lc->kubelet;
        uds.user_data = lc->user_data;
        uds.raid0 = lc->raid0;
        if (streq(lc->ami_family, "Custom"))
                r = (ud = strdup(strempty(lc->user_data))) ? 0 : -ENOMEM; /* as given, as Karpenter does */
        else
                r = userdata_render(&uds, &ud);
        if (r < 0)
                return r;
        _cleanup_free_ char *class_json = class_spec ? cJSON_PrintUnformatted(class_spec) : NULL;

        /* The template's name carries a hash of what it holds: a change makes a new one. */
        char hash[65];
        StrBuf b;
        strbuf_init(&b, 1u << 20);
        strbuf_printf(&b, "%s|%s|%s|%s|", strempty(res->ami[rd->arch]), ud, strempty(res->profile), strempty(class_json));
        for (size_t i = 0; res->sgs[i]; i++)
                strbuf_printf(&b, "%s,", res->sgs[i]);
        provisioner_digest(b.data ? b.data : "", b.len, hash, sizeof hash);
        strbuf_done(&b);
        char *name = solver_arena_printf(rd->arena, "nodesmith-%s-%s-%s-%.12s", cfg->cluster_name, pool->name,
                                         rd->arch ? "arm64" : "amd64", hash);
        if (!name)
                return -ENOMEM;
        *ret_create = !streq_ptr(res->template_name[rd->arch], name);
        r = free_and_strdup(&res->template_name[rd->arch], name);
        if (r < 0)
                return r;
        *spec = (Ec2LaunchTemplateSpec) {
                .name = name,
                .image_id = res->ami[rd->arch],
                .instance_profile_name = isempty(res->profile) ? NULL : res->profile,
                .security_group_ids = (const char *const *) res->sgs,
                .block_devices = lc->devices,
                .n_block_devices = lc->n_devices,
                .metadata_hop_limit = lc->hop_limit,
                .http_tokens = lc->http_tokens,
                .http_endpoint = lc->http_endpoint,
                .http_protocol_ipv6 = lc->http_protocol_ipv6,
                .detailed_monitoring = lc->detailed_monitoring,
                .enclave = lc->enclave,
                .associate_public_ip = lc->associate_public_ip,
                .ipv4_prefix_count = lc->ip_prefix_count,
                .tags = lc->tags,
                .n_tags = lc->n_tags,
                .interface_tags = lc->tags,
                .n_interface_tags = lc->n_tags,
                .client_token = solver_arena_printf(rd->arena, "%.32s", hash),
        };
        *ret_userdata = TAKE_PTR(ud);
        return 0;
}

static void on_fleet(Ec2Client *ec2, const Ec2Error *err, Ec2FleetResult *res, void *userdata) {
        Provisioner *p = userdata;
        Round *rd = p->round;
        const SolverLaunch *l = &rd->result->launches[rd->next];
        const SolverNodePool *pool = &rd->snap.nodepools[l->nodepool];

        if (err) {
                ec2_fleet_result_free(res);
                if (err->kind == EC2_ERROR_INSUFFICIENT_CAPACITY) {
                        for (size_t i = 0; i < l->n_offerings; i++)
                                ice_mark(p, rd->snap.types[l->offerings[i].type].name, l->offerings[i].zone,
                                         l->offerings[i].capacity_type);
                        rd->launched_nothing = true;
                }
                return launch_failed(p, "CreateFleet", err);
        }
        size_t launched = ec2_fleet_result_count(res);
        for (size_t i = 0; i < res->n_errors; i++) {
                const Ec2FleetError *fe = &res->errors[i];
                log_notice("CreateFleet for NodePool %s: %s on %s in %s (%s): %s", pool->name, strempty(fe->code),
                           strempty(fe->instance_type), strempty(fe->zone), strempty(fe->lifecycle),
                           strempty(fe->message));
                if (fe->code && strstr(fe->code, "InsufficientInstanceCapacity")) {
                        int ct = fe->lifecycle ? solver_capacity_type_from_name(fe->lifecycle) : (int) l->capacity_type;
                        ice_mark(p, fe->instance_type, fe->zone, ct >= 0 ? (SolverCapacityType) ct : l->capacity_type);
                }
        }
        for (size_t i = 0; i < res->n_instances; i++) {
                const Ec2FleetInstances *in = &res->instances[i];
                SolverCapacityType ct = streq_ptr(in->lifecycle, "spot") ? SOLVER_CAPACITY_SPOT : SOLVER_CAPACITY_ON_DEMAND;
                for (char **id = in->instance_ids; id && *id; id++) {
                        disruption_launched(p, *id);
                        if (inflight_add(p, *id, pool->name, in->instance_type, in->zone, ct, now_usec(p), l->n_pods) > 0) {
                                inflight_nominate(p, *id, rd, l);
                                p->instances_launched++;
                                log_notice("Launched %s (%s %s in %s) for NodePool %s: %zu pod(s), $%.4f/h.", *id,
                                           strempty(in->instance_type), solver_capacity_type_to_name(ct),
                                           strempty(in->zone), pool->name, l->n_pods, l->price);
                                nodeclaims_launched(p->c->status, *id, in->instance_type, in->zone,
                                                    solver_capacity_type_to_name(ct), rd, l);
                                /* its Node may have registered before CreateFleet answered (a slow
                                 * answer, a fast boot): no Node event comes for it any more */
                                const cJSON *node = node_of_instance(p->nodes, *id);
                                if (node)
                                        (void) forget_registered(node, p);
                        }
                }
        }
        /* tell the pods where they go, as kube-scheduler's nominations do */
        const char *first_id = NULL, *first_type = NULL, *first_zone = NULL;
        for (size_t i = 0; i < res->n_instances && !first_id; i++)
                if (res->instances[i].instance_ids && res->instances[i].instance_ids[0]) {
                        first_id = res->instances[i].instance_ids[0];
                        first_type = res->instances[i].instance_type;
                        first_zone = res->instances[i].zone;
                }
        for (size_t i = 0; first_id && i < l->n_pods; i++) {
                const SolverPod *sp = &rd->snap.pods[l->pods[i]];
                char msg[256];
                snprintf(msg, sizeof msg, "Pod should schedule on instance %s (%s in %s), launched for NodePool %s",
                         first_id, strempty(first_type), strempty(first_zone), pool->name);
                KubeEventInfo ev = { .api_version = "v1", .kind = "Pod", .object_namespace = sp->namespace_,
                                     .name = sp->name, .uid = events_pod_uid(rd->pod_uids[l->pods[i]]), .reason = "Nominated",
                                     .message = msg, .component = "nodesmith-coordinator" };
                (void) kube_event_create(p->kube, &ev, NULL, NULL, NULL);
        }
        if (first_id) {
                char msg[256];
                snprintf(msg, sizeof msg, "Launched %s (%s in %s) for %zu pod(s)", first_id, strempty(first_type),
                         strempty(first_zone), l->n_pods);
                KubeEventInfo ev = { .api_version = "nodesmith.io/v1", .kind = "NodePool", .name = pool->name,
                                     .reason = "Launched", .message = msg, .component = "nodesmith-coordinator" };
                (void) kube_event_create(p->kube, &ev, NULL, NULL, NULL);
        }
        if (launched == 0) {
                nodeclaims_launch_failed(p->c->status, rd, l, "CreateFleet", res->n_errors ? res->errors[0].code : NULL,
                                         res->n_errors ? res->errors[0].message : NULL);
                rd->launched_nothing = true;
                p->launch_errors++;
                set_error(p, "CreateFleet for NodePool %s launched nothing", pool->name);
        } else {
                p->launches++;
                p->pods_nominated += l->n_pods;
        }
        ec2_fleet_result_free(res);
        /* a slow CreateFleet answer may come after the Node registered (and went Ready): its
         * events are not seen again, so look at the Nodes now */
        if (launched > 0)
                (void) kube_watch_foreach(p->nodes, forget_registered, p);
        rd->step = STEP_IDLE;
        rd->next++;
        round_next(p);
}

static int fleet_start(Provisioner *p, Round *rd, const SolverLaunch *l) {
        const SolverNodePool *pool = &rd->snap.nodepools[l->nodepool];
        Resolved *res = rd->res;
        Ec2FleetOverride ov[EC2_MAX_FLEET_OVERRIDES];
        size_t n = 0;
        const char *arch = arch_of_type(&rd->snap.types[l->type]);

        /* ranked offerings of the plan's architecture, each in the zone's subnet with the most
         * free addresses */
        for (size_t i = 0; i < l->n_offerings && n < EC2_MAX_FLEET_OVERRIDES; i++) {
                const SolverLaunchOffering *o = &l->offerings[i];
                if (o->capacity_type != l->capacity_type || !streq(arch_of_type(&rd->snap.types[o->type]), arch))
                        continue;
                const Subnet *best = NULL;
                for (size_t s = 0; s < res->n_subnets; s++)
                        if (streq(res->subnets[s].zone, o->zone) && (!best || res->subnets[s].free_ips > best->free_ips))
                                best = &res->subnets[s];
                if (!best)
                        continue;
                ov[n] = (Ec2FleetOverride) { .instance_type = rd->snap.types[o->type].name,
                                             .subnet_id = best->id,
                                             .availability_zone = o->zone,
                                             .priority = (double) n };
                n++;
        }
        if (n == 0) {
                rd->launched_nothing = true; /* solve again, now that the subnets' zones are known */
                return -ENOENT;
        }

        /* The ClientToken is derived from the plan (pool, pods, offerings): a retry of the same
         * plan is the same fleet; a plan changed by capacity errors is a new one. */
        StrBuf b;
        strbuf_init(&b, 1u << 22);
        /* ... and by how many instances this coordinator has launched so far: once a plan's fleet
         * exists, the same pods planned again later (their node could not take them) must make
         * a new fleet, not get the old one back from EC2's idempotency */
        strbuf_printf(&b, "%s|%s|%llu|", p->c->cfg.cluster_name, pool->name, (unsigned long long) p->instances_launched);
        for (size_t i = 0; i < l->n_pods; i++)
                strbuf_printf(&b, "%s,", strempty(rd->pod_uids[l->pods[i]]));
        for (size_t i = 0; i < n; i++)
                strbuf_printf(&b, "%s/%s;", ov[i].instance_type, ov[i].availability_zone);
        char hash[65];
        provisioner_digest(b.data ? b.data : "", b.len, hash, sizeof hash);
        strbuf_done(&b);

        char token[48], name[128];
        snprintf(token, sizeof token, "nodesmith-%.32s", hash);
        snprintf(name, sizeof name, "nodesmith-%s-%s", p->c->cfg.cluster_name, pool->name);
        LaunchClass *lc = launch_class(p, rd, pool->node_class, NULL);
        if (!lc)
                return -ENOMEM;
        Ec2FleetSpec spec = {
                .context = lc->context,
                .extra_tags = lc->tags,
                .n_extra_tags = lc->n_tags,
                .launch_template_name = res->template_name[rd->arch],
                .overrides = ov,
                .n_overrides = n,
                .target_capacity = 1,
                .capacity_type = l->capacity_type == SOLVER_CAPACITY_SPOT ? EC2_CAPACITY_SPOT : EC2_CAPACITY_ON_DEMAND,
                .nodepool = pool->name,
                .name_tag = name,
                .client_token = token,
        };
        if (!provisioner_acting(p))
                return -ESTALE;
        log_info("CreateFleet for NodePool %s: %zu override(s), %s first (%s), token %s, acting replica %s.", pool->name, n,
                 ov[0].instance_type, solver_capacity_type_to_name(l->capacity_type), token, provisioner_acting_as(p));
        return ec2_create_fleet(p->ec2, &spec, on_fleet, p);
}

/* Drives the launches of the round: resolve what the node class needs, make the launch
 * template, create the fleet; then the next launch. */
static void round_next(Provisioner *p) {
        Round *rd = p->round;
        int r = 0;
        char ssm[256];

        for (;;) {
                if (!rd || rd->next >= rd->result->n_launches || !provisioner_acting(p))
                        return round_finish(p);
                const SolverLaunch *l = &rd->result->launches[rd->next];
                const SolverNodePool *pool = &rd->snap.nodepools[l->nodepool];
                switch (rd->step) {
                case STEP_IDLE:
                        rd->res = resolved_get(p, pool->node_class);
                        if (!rd->res) {
                                log_oom();
                                return round_finish(p);
                        }
                        rd->arch = arch_index(arch_of_type(&rd->snap.types[l->type]));
                        if (rd->res->resolved_usec == 0 || now_usec(p) - rd->res->resolved_usec > RESOLVE_TTL_USEC) {
                                resolved_reset(rd->res);
                                rd->step = STEP_SUBNETS;
                        } else if (!rd->res->profile)
                                rd->step = STEP_PROFILE;
                        else if (!rd->res->ami[rd->arch])
                                rd->step = STEP_AMI;
                        else
                                rd->step = STEP_TEMPLATE;
                        continue;
                case STEP_SUBNETS: {
                        Ec2Filter f[4];
                        char names[4][160];
                        const char *values[4][2] = {};
                        size_t nf = selector_filters(p, pool->node_class, "subnetSelectorTerms", f, names, values);
                        r = ec2_describe_subnets(p->ec2, NULL, f, nf, on_subnets, p);
                        break;
                }
                case STEP_SGS: {
                        Ec2Filter f[4];
                        char names[4][160];
                        const char *values[4][2] = {};
                        size_t nf = selector_filters(p, pool->node_class, "securityGroupSelectorTerms", f, names, values);
                        r = ec2_describe_security_groups(p->ec2, NULL, f, nf, on_sgs, p);
                        break;
                }
                case STEP_PROFILE:
                        r = profile_resolve(p, rd, pool->node_class);
                        if (r == 0) {
                                rd->step = rd->res->ami[rd->arch] ? STEP_TEMPLATE : STEP_AMI;
                                continue;
                        }
                        break;
                case STEP_AMI:
                        rd->ami_term = 0;
                        free(rd->ami_best);
                        rd->ami_best = NULL;
                        r = ami_lookup(p, rd, pool->node_class, ssm, sizeof ssm);
                        break;
                case STEP_TEMPLATE: {
                        Ec2LaunchTemplateSpec spec;
                        bool create = false;
                        _cleanup_free_ char *ud = NULL;
                        r = template_for(p, rd, l, &create, &spec, &ud);
                        if (r >= 0 && create) {
                                spec.user_data = ud;
                                r = ec2_create_launch_template(p->ec2, &spec, on_template, p);
                                if (ud)
                                        explicit_bzero(ud, strlen(ud));
                                break;
                        }
                        if (r >= 0) {
                                rd->step = STEP_FLEET;
                                continue;
                        }
                        break;
                }
                case STEP_FLEET:
                        r = fleet_start(p, rd, l);
                        if (r == -ESTALE) /* no longer acting: nothing is launched */
                                return round_finish(p);
                        break;
                }
                if (r < 0) {
                        Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = r };
                        snprintf(e.code, sizeof e.code, "Local");
                        snprintf(e.message, sizeof e.message, "%s", strerror(-r));
                        launch_failed(p, "launch", &e);
                }
                return; /* the callback continues */
        }
}

void provisioner_round_free(Round *rd) {
        if (!rd)
                return;
        free(rd->ami_best);
        solver_result_free(rd->result);
        solver_free(rd->solver);
        nodepool_objects_free(rd->objects);
        solver_arena_free(rd->arena);
        free(rd);
}

static void round_finish(Provisioner *p) {
        Round *rd = p->round;
        if (!rd)
                return;
        p->last_round_seconds = (double) (now_usec(p) - rd->started_usec) / 1e6;
        histogram_observe(&p->c->metrics.round_seconds, p->last_round_seconds);
        bool again = rd->launched_nothing || rd->budget_cut;
        p->round = NULL;
        provisioner_round_free(rd);
        catalog_swap(p); /* a catalog built meanwhile: the round no longer points into the old one */
        /* capacity errors: solve again at once with those offerings left out; pods that came
         * while we were busy: their batch fires now */
        if (again || p->batch_open)
                provisioner_poke(p);
}

static void round_start(Provisioner *p) {
        Round *rd = NULL;
        size_t pending = 0;
        char *err = NULL;
        int r;

        if (!p->leading || !p->learned || p->round)
                return; /* the round under way pokes again when it ends */
        /* A new leader first gives the agents a couple of report intervals to reach it, so it
         * knows what runs on the nodes before it decides anything. */
        uint64_t sync = 2 * p->c->cfg.report_interval_ms * USEC_PER_MSEC + USEC_PER_SEC;
        if (now_usec(p) - p->leading_since_usec < sync) {
                provisioner_poke(p);
                return;
        }
        if (!kube_watch_synced(p->pods) || !kube_watch_synced(p->nodepools) || !kube_watch_synced(p->nodes)) {
                provisioner_poke(p);
                return;
        }
        rd = calloc(1, sizeof *rd);
        if (!rd || solver_arena_new(&rd->arena) < 0) {
                free(rd);
                log_oom();
                return;
        }
        rd->started_usec = now_usec(p);
        p->round = rd;
        p->rounds++;
        log_debug("Provisioning round %llu: batch closed, building the snapshot.", (unsigned long long) p->rounds);

        r = provisioner_snapshot(p, rd, &pending);
        p->pending_unschedulable = pending;
        if (r >= 0 && pending == 0)
                log_debug("Provisioning round %llu: no pod is pending.", (unsigned long long) p->rounds);
        if (r < 0 || pending == 0) {
                p->round = NULL;
                provisioner_round_free(rd);
                return;
        }
        /* the zones nodes can go to must be known before solving */
        bool waiting = false;
        for (size_t i = 0; i < rd->snap.n_nodepools; i++)
                waiting |= prefetch(p, rd->snap.nodepools[i].node_class);
        if (waiting) {
                p->round = NULL;
                provisioner_round_free(rd);
                return; /* the look-up starts the round again when done */
        }
        /* pod uids for ClientTokens, by snapshot index (pending pods come first) */
        rd->pod_uids = solver_arena_alloc(rd->arena, (rd->snap.n_pods + 1) * sizeof(char *));
        if (!rd->pod_uids) {
                p->round = NULL;
                provisioner_round_free(rd);
                return;
        }
        for (size_t i = 0; i < rd->snap.n_pods; i++) {
                const SolverPod *sp = &rd->snap.pods[i];
                const cJSON *obj = sp->node_name ? NULL : kube_watch_get(p->pods, sp->namespace_, sp->name);
                rd->pod_uids[i] = solver_arena_printf(rd->arena, "%s/%s", strempty(sp->namespace_),
                                                      obj ? strempty(kube_object_meta(obj, "uid")) : strempty(sp->name));
        }

        uint64_t t0 = clock_usec();
        r = solver_new(&rd->snap, &rd->solver, &err);
        if (r >= 0) {
                SolverOptions opts = SOLVER_OPTIONS_DEFAULT;
                /* a consolidation that found its replacement on-demand (spot is not replaced by
                 * spot unless allowed) launches it so */
                NodeEntry *e;
                REGISTRY_FOREACH(e, &p->c->registry)
                        opts.on_demand_only |= e->replace_started_usec && e->replace_on_demand;
                /* the budget covers compiling the snapshot too: what is left of it */
                uint64_t budget = p->c->cfg.solver_budget_ms * USEC_PER_MSEC, spent = clock_usec() - t0;
                opts.time_budget_usec = budget == 0 ? 0 : budget > spent ? budget - spent : 1;
                r = solver_provision(rd->solver, &opts, &rd->result);
        }
        p->last_decision_seconds = (double) (clock_usec() - t0) / 1e6;
        histogram_observe(&p->c->metrics.solver_seconds, p->last_decision_seconds);
        if (r < 0) {
                log_warning("Solver failed: %s", err ? err : strerror(-r));
                set_error(p, "solver: %s", err ? err : strerror(-r));
                free(err);
                p->round = NULL;
                provisioner_round_free(rd);
                return;
        }
        const SolverResult *res = rd->result;
        p->pods_unschedulable = res->n_unschedulable;
        log_info("Provisioning: %zu pending pod(s): %zu on existing or in-flight nodes, %zu on %zu new node(s) "
                 "($%.4f/h), %zu unschedulable; decided in %.1f ms.",
                 pending, res->n_placed_existing, res->n_placed_new, res->n_launches, res->total_price,
                 res->n_unschedulable, p->last_decision_seconds * 1000);
        if (res->budget_exhausted) {
                /* a partial plan: launch it, and plan the rest in the next round */
                rd->budget_cut = true;
                p->budget_cuts++;
                p->pods_deferred += res->n_deferred;
                log_info("Provisioning: the solver's time budget (%llu ms) ran out; %zu pod(s) left for the next round.",
                         (unsigned long long) p->c->cfg.solver_budget_ms, res->n_deferred);
        }
        for (size_t i = 0; i < res->n_decisions; i++)
                if (res->decisions[i].kind == SOLVER_DECISION_EXISTING && !rd->snap.pods[i].node_name &&
                    res->decisions[i].target < rd->snap.n_nodes)
                        disruption_nominated(p, rd->snap.nodes[res->decisions[i].target].name);
        for (size_t i = 0; i < res->n_decisions; i++)
                if (res->decisions[i].kind == SOLVER_DECISION_UNSCHEDULABLE && !rd->snap.pods[i].node_name)
                        log_info("Pod %s/%s cannot be placed: %s", rd->snap.pods[i].namespace_, rd->snap.pods[i].name,
                                 strempty(res->decisions[i].message));
        events_pod_decisions(p->c, rd);
        rd->next = 0;
        rd->step = STEP_IDLE;
        round_next(p);
}


/* ---- nodes going away: replacement and termination --------------------------------------- */

void provisioner_node_leaving(Provisioner *p, const NodeEntry *e) {
        if (!p || !e || !e->state || !e->state->identity)
                return;
        const Nodesmith__V1__Identity *id = e->state->identity;
        if (streq_ptr(e->reason, "spot-interruption") &&
            id->capacity_type == NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT && !isempty(id->instance_type))
                ice_mark(p, id->instance_type, id->zone, SOLVER_CAPACITY_SPOT);
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
                NodeEntry *e = registry_get(&p->c->registry, *id);
                const char *node = e ? provisioner_node_name(p, e) : NULL;
                log_notice("Terminated %s%s%s.", *id, node ? " (Node " : "", node ? node : "");
                p->terminated++;
                InFlight *f = inflight_find(p, *id); /* it never initialized: it will not now */
                if (f)
                        inflight_remove(p, (size_t) (f - p->inflight));
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
                registry_bury(&p->c->registry, *id);
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
                        registry_bury(&p->c->registry, k->id);
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
        NodeEntry *e = registry_get(&p->c->registry, id);
        uint64_t silent_after = MAX(3 * p->c->cfg.report_interval_ms * USEC_PER_MSEC, 5 * USEC_PER_SEC);
        if (e && s->now - e->last_seen_usec < silent_after)
                return 0; /* its agent is alive and drains it */
        for (size_t k = 0; k < p->n_orphans; k++)
                if (streq(p->orphans[k].instance_id, id)) {
                        /* a node with a report is terminated by termination_pass once drained */
                        bool drained = !e && proxy_drains_drained(p->c->proxy_drains, name);
                        if (!p->orphans[k].sent &&
                            (drained || s->now - p->orphans[k].seen_usec >= proxy_drains_grace_usec(p->c->proxy_drains, name))) {
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
static void termination_pass(Provisioner *p) {
        uint64_t now = now_usec(p);
        uint64_t stale = p->c->cfg.stale_after_ms * USEC_PER_MSEC;
        const char *todo[64];
        size_t n = 0;
        NodeEntry *e;

        REGISTRY_FOREACH(e, &p->c->registry) {
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
                               proxy_drains_drained(p->c->proxy_drains, node);
                uint64_t grace = proxy_drains_grace_usec(p->c->proxy_drains, node);
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
                proxy_drains_pass(p->c->proxy_drains, p->leading_since_usec);
}


/* ---- the catalog from EC2 ------------------------------------------------------------------- */

static void catalog_swap(Provisioner *p) {
        if (!p->next_catalog || p->round)
                return;
        catalog_free(p->catalog);
        p->catalog = TAKE_PTR(p->next_catalog);
        size_t n;
        (void) catalog_types(p->catalog, &n);
        log_info("Instance catalog from EC2: %zu types.", n);
}

static void on_catalog_built(int error, Catalog *catalog, void *userdata) {
        Provisioner *p = userdata;
        p->catalog_building = false;
        if (error < 0 || !catalog) {
                log_warning_errno(error, "Cannot build the instance catalog from EC2 (%m); keeping %s.",
                                  p->c->cfg.catalog);
                catalog_free(catalog);
                return;
        }
        catalog_free(p->next_catalog);
        p->next_catalog = catalog;
        catalog_swap(p);
}

/* Types, offerings and spot prices from EC2 with on-demand prices from the price table, at
 * start and every catalog-refresh; the shipped catalog stands in until then and for types EC2
 * gives no price for. */
static void catalog_refresh(Provisioner *p) {
        uint64_t every = p->c->cfg.catalog_refresh_ms * USEC_PER_MSEC;
        if (!every || p->catalog_building || !p->leading ||
            (p->catalog_built_usec && now_usec(p) - p->catalog_built_usec < every))
                return;
        p->catalog_built_usec = now_usec(p);
        int r = catalog_ec2_build(p->ec2, p->c->cfg.region, p->catalog, p->c->cfg.price_table,
                                  on_catalog_built, p);
        if (r < 0)
                log_warning_errno(r, "Cannot build the instance catalog from EC2 (price table %s: %m); keeping %s.",
                                  strempty(p->c->cfg.price_table), p->c->cfg.catalog);
        else
                p->catalog_building = true;
}

/* ---- leadership, learning, housekeeping ---------------------------------------------------- */

static void on_learned(Ec2Client *ec2, const Ec2Error *err, Ec2InstanceList *list, void *userdata) {
        Provisioner *p = userdata;
        p->learning = false;
        if (err) {
                log_warning("Cannot list this cluster's instances (%s %s); retrying.", err->code, err->message);
                ec2_instance_list_free(list);
                return;
        }
        size_t added = 0;
        for (size_t i = 0; i < list->n; i++) {
                const Ec2Instance *in = &list->items[i];
                SolverCapacityType ct = streq_ptr(in->lifecycle, "spot") ? SOLVER_CAPACITY_SPOT : SOLVER_CAPACITY_ON_DEMAND;
                if (inflight_add(p, in->id, ec2_instance_tag(in, "nodesmith.io/nodepool"), in->instance_type, in->zone,
                                 ct, now_usec(p), 0) > 0) {
                        inflight_find(p, in->id)->learned = true;
                        added++;
                }
        }
        /* in flight from an earlier time as leader, no longer pending or running: another
         * replica terminated it meanwhile (EC2's list may lag a fresh launch: a minute's grace) */
        for (size_t i = 0; i < p->n_inflight;) {
                bool live = now_usec(p) - p->inflight[i].launched_usec < 60 * USEC_PER_SEC;
                for (size_t k = 0; k < list->n && !live; k++)
                        live = streq(list->items[k].id, p->inflight[i].instance_id);
                if (live) {
                        i++;
                        continue;
                }
                log_info("Instance %s is no longer pending or running; not in flight any more.",
                         p->inflight[i].instance_id);
                inflight_remove(p, i);
        }
        ec2_instance_list_free(list);
        /* those that are Nodes already are not in flight */
        (void) kube_watch_foreach(p->nodes, forget_registered, p);
        log_info("Learned %zu instance(s) of cluster %s from EC2; %zu not registered yet.", added,
                 p->c->cfg.cluster_name, p->n_inflight);
        p->learned = true;
        provisioner_poke(p);
}

static void learn(Provisioner *p) {
        static const char *const states[] = { "pending", "running", NULL };
        if (p->learning || p->learned || !p->leading || !kube_watch_synced(p->nodes))
                return;
        if (ec2_describe_cluster_instances(p->ec2, states, NULL, 0, on_learned, p) >= 0)
                p->learning = true;
}

static void on_terminated(Ec2Client *ec2, const Ec2Error *err, Ec2TerminateResult *res, void *userdata) {
        if (err)
                log_warning("TerminateInstances failed: %s %s", err->code, err->message);
        for (char **id = res ? res->terminated : NULL; id && *id; id++)
                log_notice("Terminated %s: it never registered.", *id);
        for (char **id = res ? res->refused : NULL; id && *id; id++)
                log_warning("Refused to terminate %s: it lacks this cluster's tag.", *id);
        ec2_terminate_result_free(res);
}

static int on_housekeeping(sd_event_source *s, uint64_t usec, void *userdata) {
        Provisioner *p = userdata;
        uint64_t now = now_usec(p), timeout = p->c->cfg.registration_timeout_ms * USEC_PER_MSEC;

        learn(p);
        catalog_refresh(p);
        provisioner_images_refresh(p);
        if (p->leading && p->learned)
                termination_pass(p);
        if (p->c->cfg.consolidation_interval_ms > 0 &&
            now - p->last_disruption_usec >= p->c->cfg.consolidation_interval_ms * USEC_PER_MSEC) {
                p->last_disruption_usec = now;
                (void) disruption_pass(p); /* a failure is logged and counted; the next pass tries again */
        }
        if (provisioner_acting(p) && p->learned && !p->round) {
                const char *ids[65];
                size_t n = 0;
                for (size_t i = 0; i < p->n_inflight && n < 64;)
                        if (now - p->inflight[i].launched_usec > timeout) {
                                log_warning("Instance %s did not %s within %llus; terminating it.",
                                            p->inflight[i].instance_id,
                                            p->inflight[i].node_name ? "initialize (Ready, startup taints gone, agent reporting)" : "register",
                                            (unsigned long long) (timeout / USEC_PER_SEC));
                                ids[n++] = strdup(p->inflight[i].instance_id);
                                p->terminated_unregistered++;
                                inflight_remove(p, i);
                        } else
                                i++;
                ids[n] = NULL;
                if (n > 0) {
                        log_info("TerminateInstances of %zu unregistered instance(s), acting replica %s.", n, provisioner_acting_as(p));
                        (void) ec2_terminate_instances(p->ec2, ids, on_terminated, p);
                        provisioner_poke(p); /* their pods need capacity again */
                }
                for (size_t i = 0; i < n; i++)
                        free((char *) ids[i]);
        }
        (void) sd_event_source_set_time(s, now + 2 * USEC_PER_SEC);
        return 0;
}

void provisioner_set_leading(Provisioner *p, bool leading) {
        if (!p || p->leading == leading)
                return;
        p->leading = leading;
        if (leading)
                p->leading_since_usec = now_usec(p);
        if (!leading) {
                /* another replica acts now; what we knew may be stale when we lead again */
                p->learned = false;
                proxy_drains_release_all(p->c->proxy_drains);
                for (size_t i = p->n_inflight; i > 0; i--)
                        inflight_remove(p, i - 1);
                return;
        }
        learn(p);
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int watch(Provisioner *p, const char *path, const char *field_selector, kube_watch_event_t cb, KubeWatch **ret) {
        KubeListOptions o = { .field_selector = field_selector };
        return kube_watch_new(p->kube, path, &o, cb, p, ret);
}

int provisioner_new(Coordinator *c, Provisioner **ret) {
        const CoordConfig *cfg = &c->cfg;
        _cleanup_(kube_config_freep) KubeConfig *kc = NULL;
        Provisioner *p;
        char *err = NULL;
        int r;

        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->c = c;
        r = disruption_new(&p->disruption);
        if (r < 0) {
                free(p);
                return r;
        }

        if (!isempty(cfg->kube_server))
                r = kube_config_new(cfg->kube_server, &kc);
        else if (!isempty(cfg->kubeconfig))
                r = kube_config_from_kubeconfig(cfg->kubeconfig, NULL, &kc);
        else
                r = kube_config_in_cluster(NULL, &kc);
        if (r < 0) {
                log_error_errno(r, "No Kubernetes API to provision for (kube-server, kubeconfig or in-cluster): %m");
                goto fail;
        }
        r = kube_client_new(c->event, kc, &p->kube);
        if (r < 0)
                goto fail;

        r = catalog_load_file(cfg->catalog, &p->catalog, &err);
        if (r < 0) {
                log_error_errno(r, "Cannot load the instance catalog %s: %s", cfg->catalog, err ? err : strerror(-r));
                free(err);
                goto fail;
        }
        if (!isempty(cfg->agent_ca)) {
                r = read_file_bounded(cfg->agent_ca, 256 * 1024, &p->agent_ca_pem, NULL);
                if (r < 0) {
                        log_error_errno(r, "Cannot read agent-ca %s: %m", cfg->agent_ca);
                        goto fail;
                }
        }

        r = http_client_new(c->event, &p->http);
        if (r < 0)
                goto fail;
        AwsCredentialsConfig acc = { .region = cfg->region };
        r = aws_credential_provider_new(c->event, p->http, &acc, &p->creds);
        if (r < 0)
                goto fail;
        Ec2Config ec = { .region = cfg->region, .ec2_endpoint = cfg->ec2_endpoint,
                         .ssm_endpoint = cfg->ssm_endpoint, .iam_endpoint = cfg->iam_endpoint,
                         .cluster_name = cfg->cluster_name };
        r = ec2_client_new(c->event, p->http, p->creds, &ec, &p->ec2);
        if (r < 0)
                goto fail;

        r = watch(p, "/api/v1/pods", "spec.nodeName=", on_pod_event, &p->pods);
        if (r >= 0)
                r = watch(p, "/apis/nodesmith.io/v1/nodepools", NULL, on_other_event, &p->nodepools);
        if (r >= 0)
                r = watch(p, "/apis/nodesmith.io/v1/ec2nodeclasses", NULL, on_other_event, &p->nodeclasses);
        if (r >= 0)
                r = watch(p, "/apis/apps/v1/daemonsets", NULL, on_other_event, &p->daemonsets);
        if (r >= 0)
                r = watch(p, "/apis/policy/v1/poddisruptionbudgets", NULL, on_other_event, &p->pdbs);
        if (r >= 0)
                r = watch(p, "/api/v1/nodes", NULL, on_node_event, &p->nodes);
        if (r >= 0)
                r = proxy_drains_new(c, p->kube, p->nodes, p->nodepools, &c->proxy_drains);
        if (r >= 0)
                r = sd_event_add_time(c->event, &p->batch_idle, CLOCK_MONOTONIC, UINT64_MAX, 1, on_batch_timer, p);
        if (r >= 0)
                r = sd_event_add_time(c->event, &p->batch_max, CLOCK_MONOTONIC, UINT64_MAX, 1, on_batch_timer, p);
        if (r >= 0)
                r = sd_event_add_time(c->event, &p->housekeeping, CLOCK_MONOTONIC, 0, USEC_PER_MSEC * 100,
                                      on_housekeeping, p);
        if (r >= 0)
                r = sd_event_source_set_enabled(p->housekeeping, SD_EVENT_ON);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_OFF);
        log_info("Provisioning for cluster %s: %zu instance types in the catalog, EC2 %s.", cfg->cluster_name,
                 ({ size_t n; catalog_types(p->catalog, &n); n; }), isempty(cfg->ec2_endpoint) ? cfg->region : cfg->ec2_endpoint);
        *ret = p;
        return 0;
fail:
        provisioner_free(p);
        return r;
}

Provisioner *provisioner_free(Provisioner *p) {
        if (!p)
                return NULL;
        provisioner_round_free(p->round);
        p->disruption = disruption_free(p->disruption);
        p->c->proxy_drains = proxy_drains_free(p->c->proxy_drains);
        kube_watch_free(p->pods);
        kube_watch_free(p->nodepools);
        kube_watch_free(p->nodeclasses);
        kube_watch_free(p->daemonsets);
        kube_watch_free(p->pdbs);
        kube_watch_free(p->nodes);
        kube_client_free(p->kube);
        ec2_client_free(p->ec2);
        aws_credential_provider_free(p->creds);
        http_client_free(p->http);
        catalog_free(p->catalog);
        catalog_free(p->next_catalog);
        sd_event_source_disable_unref(p->batch_idle);
        sd_event_source_disable_unref(p->batch_max);
        sd_event_source_disable_unref(p->housekeeping);
        for (size_t i = 0; i < p->n_inflight; i++)
                inflight_free(&p->inflight[i]);
        free(p->inflight);
        for (size_t i = 0; i < p->n_ice; i++) {
                free(p->ice[i].instance_type);
                free(p->ice[i].zone);
        }
        free(p->ice);
        for (size_t i = 0; i < p->n_resolved; i++)
                resolved_free(p->resolved[i]);
        free(p->resolved);
        free(p->agent_ca_pem);
        free(p);
        return NULL;
}

/* ---- reporting ------------------------------------------------------------------------------ */

void provisioner_metrics(Provisioner *p, StrBuf *b) {
        if (!p)
                return;
        const Ec2Stats *es = ec2_client_stats(p->ec2);
        strbuf_printf(b, "# HELP nodesmith_pending_pods Pending pods the scheduler marked Unschedulable, at the last round.\n"
                         "# TYPE nodesmith_pending_pods gauge\nnodesmith_pending_pods %zu\n", p->pending_unschedulable);
        strbuf_printf(b, "# HELP nodesmith_provisioning_rounds_total Provisioning rounds (batches solved).\n"
                         "# TYPE nodesmith_provisioning_rounds_total counter\nnodesmith_provisioning_rounds_total %llu\n",
                      (unsigned long long) p->rounds);
        strbuf_printf(b, "# HELP nodesmith_launches_total Fleets that launched at least one instance.\n"
                         "# TYPE nodesmith_launches_total counter\nnodesmith_launches_total %llu\n",
                      (unsigned long long) p->launches);
        strbuf_printf(b, "# HELP nodesmith_instances_launched_total Instances launched.\n"
                         "# TYPE nodesmith_instances_launched_total counter\nnodesmith_instances_launched_total %llu\n",
                      (unsigned long long) p->instances_launched);
        strbuf_printf(b, "# HELP nodesmith_launch_errors_total Launch steps that failed.\n"
                         "# TYPE nodesmith_launch_errors_total counter\nnodesmith_launch_errors_total %llu\n",
                      (unsigned long long) p->launch_errors);
        strbuf_printf(b, "# HELP nodesmith_insufficient_capacity_total Offerings marked unavailable after insufficient capacity.\n"
                         "# TYPE nodesmith_insufficient_capacity_total counter\nnodesmith_insufficient_capacity_total %llu\n",
                      (unsigned long long) p->ice_total);
        strbuf_printf(b, "# HELP nodesmith_instances_in_flight Instances launched and not registered yet.\n"
                         "# TYPE nodesmith_instances_in_flight gauge\nnodesmith_instances_in_flight %zu\n", p->n_inflight);
        strbuf_printf(b, "# HELP nodesmith_decision_seconds Time the solver took in the last round.\n"
                         "# TYPE nodesmith_decision_seconds gauge\nnodesmith_decision_seconds %.6f\n", p->last_decision_seconds);
        strbuf_printf(b, "# HELP nodesmith_solver_budget_exhausted_total Rounds whose solver ran out of its time budget (a partial plan).\n"
                         "# TYPE nodesmith_solver_budget_exhausted_total counter\nnodesmith_solver_budget_exhausted_total %llu\n"
                         "# HELP nodesmith_solver_deferred_pods_total Pods such rounds left for the next round.\n"
                         "# TYPE nodesmith_solver_deferred_pods_total counter\nnodesmith_solver_deferred_pods_total %llu\n",
                      (unsigned long long) p->budget_cuts, (unsigned long long) p->pods_deferred);
        strbuf_printf(b, "# HELP nodesmith_ec2_requests_total EC2 and SSM HTTP requests.\n"
                         "# TYPE nodesmith_ec2_requests_total counter\nnodesmith_ec2_requests_total %llu\n"
                         "# HELP nodesmith_ec2_throttled_total Throttling answers from EC2.\n"
                         "# TYPE nodesmith_ec2_throttled_total counter\nnodesmith_ec2_throttled_total %llu\n",
                      (unsigned long long) (es ? es->requests : 0), (unsigned long long) (es ? es->throttled : 0));
        strbuf_printf(b, "# HELP nodesmith_disruptions_total Nodes the coordinator decided to remove (expired, empty, underutilized).\n"
                         "# TYPE nodesmith_disruptions_total counter\nnodesmith_disruptions_total %llu\n",
                      (unsigned long long) p->disruptions);
        disruption_metrics(p, b);
        strbuf_printf(b, "# HELP nodesmith_instances_terminated_total Instances terminated after a drain or deletion.\n"
                         "# TYPE nodesmith_instances_terminated_total counter\nnodesmith_instances_terminated_total %llu\n",
                      (unsigned long long) p->terminated);
        strbuf_printf(b, "# HELP nodesmith_instances_terminated_unregistered_total Instances terminated for never registering.\n"
                         "# TYPE nodesmith_instances_terminated_unregistered_total counter\n"
                         "nodesmith_instances_terminated_unregistered_total %llu\n",
                      (unsigned long long) p->terminated_unregistered);
        strbuf_printf(b, "# HELP nodesmith_dead_nodes_total Nodes found dead (Ready Unknown, agent silent) and terminated without a drain.\n"
                         "# TYPE nodesmith_dead_nodes_total counter\nnodesmith_dead_nodes_total %llu\n",
                      (unsigned long long) p->dead_nodes);
}

char *provisioner_api(Provisioner *p) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        cJSON_AddBoolToObject(o, "leading", p && p->leading);
        if (p) {
                cJSON *a = cJSON_AddArrayToObject(o, "inFlight");
                uint64_t now = now_usec(p);
                for (size_t i = 0; i < p->n_inflight; i++) {
                        const InFlight *f = &p->inflight[i];
                        cJSON *j = cJSON_CreateObject();
                        cJSON_AddStringToObject(j, "instanceId", f->instance_id);
                        cJSON_AddStringToObject(j, "nodepool", f->nodepool);
                        cJSON_AddStringToObject(j, "instanceType", f->instance_type);
                        cJSON_AddStringToObject(j, "zone", f->zone);
                        cJSON_AddStringToObject(j, "capacityType", solver_capacity_type_to_name(f->capacity_type));
                        cJSON_AddNumberToObject(j, "ageSeconds", (double) (now - f->launched_usec) / 1e6);
                        cJSON_AddNumberToObject(j, "nominatedPods", (double) f->n_pods);
                        cJSON_AddItemToArray(a, j);
                }
                cJSON_AddNumberToObject(o, "pendingPods", (double) p->pending_unschedulable);
                cJSON_AddNumberToObject(o, "unschedulablePods", (double) p->pods_unschedulable);
                cJSON_AddNumberToObject(o, "rounds", (double) p->rounds);
                cJSON_AddNumberToObject(o, "instancesLaunched", (double) p->instances_launched);
                cJSON_AddNumberToObject(o, "lastDecisionSeconds", p->last_decision_seconds);
                cJSON_AddStringToObject(o, "lastError", p->last_error);
        }
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return s;
}

/* ---- Nodes by instance (the interruption queue) ------------------------------------------- */

int provisioner_find_node(Provisioner *p, const char *instance_id, const cJSON **ret) {
        if (!p || !kube_watch_synced(p->nodes))
                return -EAGAIN;
        const cJSON *node = node_of_instance(p->nodes, instance_id);
        if (!node)
                return -ENOENT;
        *ret = node;
        return 0;
}

bool provisioner_instance_leaving(Provisioner *p, const char *instance_id) {
        for (size_t i = 0; p && i < p->n_inflight; i++) {
                const InFlight *f = &p->inflight[i];
                if (!streq(f->instance_id, instance_id))
                        continue;
                log_notice("Instance %s (%s in %s) is going away before it registered; its pods are planned again.",
                           f->instance_id, f->instance_type, f->zone);
                if (f->capacity_type == SOLVER_CAPACITY_SPOT)
                        ice_mark(p, f->instance_type, f->zone, SOLVER_CAPACITY_SPOT);
                inflight_remove(p, i);
                provisioner_poke(p);
                return true;
        }
        return false;
}
