/* SPDX-License-Identifier: Apache-2.0 */
/* The snapshot: the cluster as the solver sees it (catalog, NodePools, Nodes, pods, capacity in flight). */
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

/* ---- the snapshot ------------------------------------------------------------------------- */

typedef struct Collect {
        NodepoolObjects *o;
        const char *kind, *api_version;
        bool pending_only;
        size_t added;
} Collect;

/* Objects from a provision_watch carry no kind or apiVersion: parse a shallow copy that adds them (its
 * fields are references to the provision_watch's object, which stays untouched; parsing copies what it
 * keeps). One bad object is skipped with a warning; it never stops provisioning for everything
 * else. */
static int collect_one(const cJSON *obj, void *userdata) {
        Collect *k = userdata;
        if (k->pending_only && !pod_unschedulable(obj) && !provision_pod_nominated_node(obj))
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

/* ---- the pending pods, read in slices --------------------------------------------------- */

/* The pods watch is read a slice at a time (provisioner_snapshot_pods), so that a backlog of
 * pending pods never holds the loop for long: the keys of the watched pods are taken when the
 * build begins; each slice looks its pods up (one deleted meanwhile is skipped, one changed is
 * read as it is now) and parses those that wait for capacity. What the rest of the round needs
 * of each collected pod's object (its uid, the node it is nominated to) is kept beside it, so
 * nothing looks the watch up again. */
struct SnapshotBuild {
        const char **ns, **names; /* the watched pods' keys (round arena) */
        size_t n_keys, next;
        const char **uids;        /* per collected pod: metadata.uid */
        const char **nominated;   /* per collected pod: status.nominatedNodeName, or NULL */
        size_t pending;
};

typedef struct KeyCollect {
        SolverArena *a;
        SnapshotBuild *b;
        size_t cap;
} KeyCollect;

static int key_one(const cJSON *obj, void *userdata) {
        KeyCollect *k = userdata;
        SnapshotBuild *b = k->b;
        if (b->n_keys >= k->cap)
                return 0; /* the watch holds no more than it said */
        b->ns[b->n_keys] = solver_arena_strdup(k->a, kube_object_meta(obj, "namespace"));
        b->names[b->n_keys] = solver_arena_strdup(k->a, kube_object_meta(obj, "name"));
        if (!b->names[b->n_keys])
                return -ENOMEM;
        b->n_keys++;
        return 0;
}

int provisioner_snapshot_begin(Provisioner *p, Round *rd) {
        NodepoolObjects *o = NULL;
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
        if (r < 0)
                return r;
        size_t n = kube_watch_size(p->pods);
        SnapshotBuild *b = solver_arena_alloc(rd->arena, sizeof *b);
        if (!b)
                return -ENOMEM;
        b->ns = solver_arena_alloc(rd->arena, (n + 1) * sizeof(char *));
        b->names = solver_arena_alloc(rd->arena, (n + 1) * sizeof(char *));
        b->uids = solver_arena_alloc(rd->arena, (n + 1) * sizeof(char *));
        b->nominated = solver_arena_alloc(rd->arena, (n + 1) * sizeof(char *));
        if (!b->ns || !b->names || !b->uids || !b->nominated)
                return -ENOMEM;
        rd->build = b;
        KeyCollect k = { .a = rd->arena, .b = b, .cap = n };
        return p->pods ? kube_watch_foreach(p->pods, key_one, &k) : 0;
}

int provisioner_snapshot_pods(Provisioner *p, Round *rd, uint64_t deadline_usec) {
        SnapshotBuild *b = rd->build;
        NodepoolObjects *o = rd->objects;
        Collect k = { .o = o, .kind = "Pod", .api_version = "v1", .pending_only = true };
        int r = 1;

        for (size_t i = 0; b->next < b->n_keys; b->next++, i++) {
                /* the clock is read every 32 pods; the first pod of a slice is always read */
                if (deadline_usec > 0 && i % 32 == 31 && provision_clock_usec() >= deadline_usec) {
                        r = 0;
                        break;
                }
                const cJSON *obj = kube_watch_get(p->pods, b->ns[b->next], b->names[b->next]);
                if (!obj)
                        continue; /* deleted since the build began */
                size_t at = o->n_pods;
                int q = collect_one(obj, &k);
                if (q < 0)
                        return q;
                if (o->n_pods == at)
                        continue;
                const char *nominated = provision_pod_nominated_node(obj);
                b->uids[at] = solver_arena_strdup(rd->arena, kube_object_meta(obj, "uid"));
                b->nominated[at] = nominated ? solver_arena_strdup(rd->arena, nominated) : NULL;
                if ((nominated && !b->nominated[at]) || (kube_object_meta(obj, "uid") && !b->uids[at]))
                        return -ENOMEM;
        }
        b->pending += k.added;
        return r;
}

const char *provisioner_snapshot_pod_uid(const Round *rd, size_t i) {
        const SnapshotBuild *b = rd->build;
        return b && rd->objects && i < rd->objects->n_pods ? b->uids[i] : NULL;
}

int provisioner_snapshot(Provisioner *p, Round *rd, size_t *ret_pending) {
        int r = provisioner_snapshot_begin(p, rd);
        if (r >= 0)
                r = provisioner_snapshot_pods(p, rd, 0);
        if (r >= 0)
                r = provisioner_snapshot_end(p, rd, ret_pending);
        return r;
}

int provision_inflight_node(SolverArena *a, const SolverInstanceType *t, const char *name, const char *nodepool,
                            const char *zone, SolverCapacityType capacity_type, const char *reservation_id,
                            SolverNode *ret) {
        SolverLabel *labels = solver_arena_alloc(a, 6 * sizeof *labels);
        if (!labels)
                return -ENOMEM;
        labels[0] = (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, t->name };
        labels[1] = (SolverLabel) { SOLVER_LABEL_ZONE, solver_arena_strdup(a, zone) };
        /* in a reservation: labelled as its Node will be (launch.c) */
        labels[2] = (SolverLabel) { SOLVER_LABEL_CAPACITY_TYPE, reservation_id ? RESERVATION_CAPACITY_TYPE
                                                                : solver_capacity_type_to_name(capacity_type) };
        labels[3] = (SolverLabel) { SOLVER_LABEL_NODEPOOL, solver_arena_strdup(a, nodepool) };
        labels[4] = (SolverLabel) { SOLVER_LABEL_ARCH, provision_arch_of_type(t) };
        labels[5] = (SolverLabel) { RESERVATION_LABEL_ID, solver_arena_strdup(a, reservation_id) };
        *ret = (SolverNode) {
                .name = solver_arena_strdup(a, name),
                .nodepool = labels[3].value,
                .instance_type = t->name,
                .zone = labels[1].value,
                .capacity_type = capacity_type,
                .labels = labels,
                .n_labels = reservation_id ? 6 : 5,
                .allocatable = t->allocatable,
                .in_flight = true,
        };
        if ((name && !ret->name) || (zone && !ret->zone) || (nodepool && !ret->nodepool) ||
            (reservation_id && !labels[5].value))
                return -ENOMEM;
        return 0;
}

int provisioner_snapshot_end(Provisioner *p, Round *rd, size_t *ret_pending) {
        NodepoolObjects *o = rd->objects;
        const SnapshotBuild *b = rd->build;
        char *err = NULL;
        int r;

        r = nodepool_objects_finish(o, p->catalog, &err);
        if (r < 0) {
                log_warning("Cannot build the snapshot: %s", err ? err : strerror(-r));
                free(err);
                return r;
        }
        *ret_pending = b->pending;

        SolverArena *a = o->arena;
        uint64_t now = provision_now_usec(p);

        /* Nodes: those of the API, then instances still in flight. */
        size_t n_nodes = o->n_nodes + p->n_inflight + provision_launching_count(p);
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
                        (void) provision_forget_registered(obj, p);
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
                r = provision_inflight_node(a, &types[t], f->instance_id, f->nodepool, f->zone, f->capacity_type,
                                            f->reservation_id, &nodes[k++]);
                if (r < 0)
                        return r;
        }
        /* launches whose CreateFleet is unanswered, with the pods they were launched for */
        size_t n_launching = 0;
        r = provision_launching_nodes(p, a, nodes + k, n_nodes - k, &n_launching, o->pods, b->uids, o->n_pods);
        if (r < 0)
                return r;
        k += n_launching;
        n_nodes = k;

        /* Pending pods that an instance in flight was launched for count as on it. */
        InFlightIndex nominated_on = {};
        if (p->n_inflight > 0) {
                r = provision_inflight_index(p, a, &nominated_on);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < o->n_pods && p->n_inflight > 0; i++) {
                SolverPod *sp = &o->pods[i];
                if (sp->node_name)
                        continue;
                char key[512];
                snprintf(key, sizeof key, "%s/%s", strempty(sp->namespace_), strempty(b->uids[i]));
                const InFlight *f = provision_inflight_nominated(&nominated_on, key);
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
                const char *nominated = sp->node_name ? NULL : b->nominated[i];
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
                r = provision_node_initializing(p, a, &nodes[i]);
                if (r < 0)
                        return r;
                if (r == 0 && !provision_node_reported(p, nodes[i].name))
                        nodes[i].unschedulable = true;
        }

        /* Nodes told to drain are leaving: they take no pods, and theirs need a place. */
        NodeEntry *e;
        REGISTRY_FOREACH(e, p->registry) {
                const char *node = provisioner_node_name(p, e);
                if ((e->action != NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN && !e->replace_started_usec) || !node)
                        continue;
                for (size_t i = 0; i < o->n_nodes; i++)
                        if (streq(nodes[i].name, node))
                                nodes[i].deleting = true;
        }

        /* Pods: the pending ones, then what each node's agent reports running there. */
        size_t n_bound = 0, n_unreported = p->bound ? kube_watch_size(p->bound) : 0;
        REGISTRY_FOREACH(e, p->registry)
                n_bound += e->state ? e->state->n_pods : 0;
        SolverPod *pods = solver_arena_alloc(a, (o->n_pods + n_bound + n_unreported + 1) * sizeof *pods);
        if (!pods)
                return -ENOMEM;
        if (o->n_pods > 0)
                memcpy(pods, o->pods, o->n_pods * sizeof *pods);
        size_t np = o->n_pods;
        REGISTRY_FOREACH(e, p->registry) {
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

        /* Pods bound to a Node whose agent has not reported them yet take their room there. */
        r = provision_bound_unreported(p, a, nodes, o->n_nodes, b->uids, o->n_pods, pods + np, n_unreported,
                                       &n_unreported);
        if (r < 0)
                return r;
        np += n_unreported;
        rd->bound_unreported = n_unreported;

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
                                any = provision_ice_marked(p, types[t].name, types[t].offerings[f].zone,
                                                 types[t].offerings[f].capacity_type, now) ||
                                      !zone_usable(zones, n_zones, types[t].offerings[f].zone);
                        if (!any)
                                continue;
                        SolverOffering *off = solver_arena_alloc(a, (types[t].n_offerings + 1) * sizeof *off);
                        if (!off)
                                return -ENOMEM;
                        for (size_t f = 0; f < types[t].n_offerings; f++) {
                                off[f] = types[t].offerings[f];
                                if (provision_ice_marked(p, types[t].name, off[f].zone, off[f].capacity_type, now) ||
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
