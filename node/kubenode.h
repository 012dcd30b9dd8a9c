/* SPDX-License-Identifier: Apache-2.0 */
/* One Node and the pods bound to it, watched. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include <cjson/cJSON.h>

#include "kube.h"
#include "macro.h"
#include "resources.h"

/* One Node and the pods bound to it: two informers on the caller's loop
 * (nodes?fieldSelector=metadata.name=NODE and pods?fieldSelector=spec.nodeName=NODE), the
 * termination finalizer added once the node is managed, and pure helpers that turn a pod into
 * what the agent reports and what a drain needs. The agent watches its own node with it; the
 * coordinator a node it drains for a silent agent. */

#define KUBE_NODE_FINALIZER "nodesmith.io/termination"
#define KUBE_NODE_TAINT "nodesmith.io/disrupted"
/* set by a drain (the agent's or the coordinator's) that cordoned the node itself, so that only
 * nodesmith uncordons what nodesmith cordoned */
#define KUBE_NODE_CORDONED_ANNOTATION "nodesmith.io/drain-cordoned"
#define KUBE_NODE_MAX_PODS 1000

typedef struct PodInfo {
        char namespace[64];
        char name[254];
        char uid[64];
        char resource_version[32];  /* as read: the eviction's precondition */
        char owner_kind[64];
        char owner_name[254];
        NodeResources requests;     /* pods is 1 */
        int32_t priority;
        char priority_class[254];
        bool do_not_disrupt;
        bool daemonset;
        bool mirror;
        char phase[16];
        bool terminating;
        bool critical;
        int64_t deletion_cost;
        int64_t grace_seconds;      /* spec.terminationGracePeriodSeconds (default 30) */
} PodInfo;

/* Parse one Pod object. -EBADMSG when it has no metadata.name/namespace. */
int pod_info_parse(const cJSON *pod, PodInfo *ret);
/* Succeeded or Failed. */
bool pod_info_terminal(const PodInfo *p);
/* Sum of the requests of the pods that are not terminal. */
void pod_infos_requested(const PodInfo *pods, size_t n, NodeResources *ret);

typedef struct KubeNode KubeNode;

typedef enum KubeNodeEvent {
        KUBE_NODE_EVENT_NODE,      /* the Node changed (or appeared, or is gone) */
        KUBE_NODE_EVENT_PODS,      /* a pod bound to the node was added, changed or removed */
} KubeNodeEvent;
typedef void (*kube_node_event_t)(KubeNode *k, KubeNodeEvent ev, void *userdata);

int kube_node_new(KubeClient *client, const char *node_name, kube_node_event_t cb, void *userdata,
                  KubeNode **ret);
KubeNode *kube_node_free(KubeNode *k);
DEFINE_TRIVIAL_CLEANUP_FUNC(KubeNode *, kube_node_free);
int kube_node_start(KubeNode *k);

const char *kube_node_name(const KubeNode *k);
/* Both informers listed once. */
bool kube_node_synced(const KubeNode *k);
/* The Node as last seen; NULL before it is seen and after it is gone. */
const cJSON *kube_node_object(const KubeNode *k);
bool kube_node_ready(const KubeNode *k);
bool kube_node_has_finalizer(const KubeNode *k);
bool kube_node_deleting(const KubeNode *k);
bool kube_node_has_taint(const KubeNode *k);
/* The Node object carries the cordon a drain of ours put on it (unschedulable, with
 * KUBE_NODE_CORDONED_ANNOTATION: the API server refused the node's own taint). */
bool kube_node_object_cordoned_by_drain(const cJSON *node);
/* Our taint, or our cordon: what a drain of ours leaves on the Node. */
bool kube_node_drain_marked(const KubeNode *k);
bool kube_node_unschedulable(const KubeNode *k);
/* "deletionTimestamp" in ms since the epoch, 0 when none. */
int64_t kube_node_deletion_unix_ms(const KubeNode *k);
/* The pods bound to the node, sorted by namespace/name (at most KUBE_NODE_MAX_PODS); the array
 * is the caller's. */
int kube_node_pods(const KubeNode *k, PodInfo **ret, size_t *ret_n);
/* The pod in the cache, or NULL. */
const cJSON *kube_node_pod(const KubeNode *k, const char *ns, const char *name);

/* Add the termination finalizer (JSON patch guarded by the resourceVersion; nothing when it is
 * there, the Node is being deleted, or an attempt is in flight). */
int kube_node_ensure_finalizer(KubeNode *k);
/* Remove it (JSON patch with a test on its index); the callback gets 0 or -errno. */
typedef void (*kube_node_done_t)(KubeNode *k, int error, void *userdata);
int kube_node_remove_finalizer(KubeNode *k, kube_node_done_t cb, void *userdata);

/* Node helpers, pure (exported for the unit tests). */
bool node_has_taint(const cJSON *node, const char *key);
bool node_has_finalizer(const cJSON *node, const char *finalizer);
int64_t kube_parse_rfc3339_ms(const char *s);
