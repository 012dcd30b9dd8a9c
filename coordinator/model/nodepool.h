/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Kubernetes and Karpenter objects (as cJSON, from the API or from files) into solver structs.
 *
 * Understood kinds: NodePool (nodesmith.io/v1; karpenter.sh/v1 and v1beta1 are converted on the
 * way), EC2NodeClass (nodesmith.io/v1, karpenter.k8s.aws/v1), Provisioner (karpenter.sh/
 * v1alpha5) and AWSNodeTemplate (karpenter.k8s.aws/v1alpha1) through karpenter_convert(), Pod,
 * Deployment, StatefulSet, ReplicaSet, Job, DaemonSet, Node, PersistentVolume,
 * PersistentVolumeClaim, StorageClass, PriorityClass, and List / *List objects holding them.
 *
 * Every error names the object and the field: "Pod default/web-0: spec.containers[0].resources.
 * requests.cpu: "lots" is not a quantity". */

#include <cjson/cJSON.h>

#include "catalog.h"
#include "solver/solver.h"
#include "macro.h"

/* Hard caps on what one set of objects may expand to. */
#define NODEPOOL_MAX_PODS 200000
#define NODEPOOL_MAX_REPLICAS 100000
#define NODEPOOL_MAX_OBJECTS 100000  /* NodePools, EC2NodeClasses, Nodes of one object set */

typedef struct NodeClass {
        const char *name;
        const char *ami_family;          /* amiFamily, else the alias's family, else AL2023 */
        const char *role;
        const char *instance_profile;
        const char *user_data;
        int64_t root_volume_bytes;       /* 0: the 20 Gi default */
        bool http_tokens_required;       /* IMDSv2 (default true) */
        int32_t http_put_hop_limit;      /* default 1 */
        bool has_kubelet;
        SolverKubelet kubelet;
        cJSON *spec;                     /* the whole spec for the launch path (owned) */
} NodeClass;

typedef struct NodePoolExtra {
        const char *node_class;          /* spec.template.spec.nodeClassRef.name */
        int64_t expire_after_s;          /* -1: Never (default 720h) */
        int64_t termination_grace_s;     /* -1: unset */
        const char *consolidation_policy; /* WhenEmpty | WhenEmptyOrUnderutilized | Balanced */
        int32_t balanced_k;              /* Balanced: K (the integer consolidationThreshold, default
                                          * 2): a move must score at least 1/K; 0 otherwise */
        int64_t consolidate_after_s;     /* -1: Never */
        cJSON *budgets;                  /* spec.disruption.budgets (owned, may be NULL) */
        double consolidation_threshold;  /* spec.disruption.consolidationThreshold; -1: default */
        int64_t churn_guard_s;           /* spec.disruption.churnGuard; -1: default */
} NodePoolExtra;

typedef struct NodepoolObjects {
        SolverArena *arena;
        SolverPod *pods;
        size_t n_pods, cap_pods;
        SolverPod *daemonsets;
        size_t n_daemonsets, cap_daemonsets;
        SolverNodePool *pools;
        NodePoolExtra *extra;            /* parallel to pools */
        size_t n_pools, cap_pools;
        NodeClass *classes;
        size_t n_classes, cap_classes;
        SolverNode *nodes;
        size_t n_nodes, cap_nodes;
        char **notes;                    /* things skipped or carried over loosely */
        size_t n_notes;
        void *priv;                      /* volumes, claims, priority classes */
} NodepoolObjects;

int nodepool_objects_new(NodepoolObjects **ret);
NodepoolObjects *nodepool_objects_free(NodepoolObjects *o);
DEFINE_TRIVIAL_CLEANUP_FUNC(NodepoolObjects *, nodepool_objects_free);

/* Adds one document: an object or a list of objects (nested lists too). -EINVAL with a message
 * naming object and field; -E2BIG past the caps. `source` (a file name, may be NULL) prefixes
 * messages. */
int nodepool_objects_add(NodepoolObjects *o, const cJSON *doc, const char *source, char **ret_error);

/* Once everything is added: resolves volumes (claims -> zones), priority classes, each pool's
 * EC2NodeClass (kubelet settings -> per-type allocatable from the catalog, may be NULL), node
 * prices. */
int nodepool_objects_finish(NodepoolObjects *o, Catalog *catalog, char **ret_error);

/* Single objects, for the coordinator's watch. Strings and arrays go into the arena. */
int nodepool_parse_pod(SolverArena *a, const cJSON *pod, SolverPod *ret, char **ret_error);
int nodepool_parse_nodepool(SolverArena *a, const cJSON *np, SolverNodePool *ret, NodePoolExtra *ret_extra,
                            char **ret_error);
int nodepool_parse_nodeclass(SolverArena *a, const cJSON *nc, NodeClass *ret, char **ret_error);
int nodepool_parse_node(SolverArena *a, const cJSON *node, SolverNode *ret, char **ret_error);

/* Go-style durations ("720h", "1h30m", "30s", "0s") in seconds; "Never" is -1. */
int nodepool_parse_duration(const char *s, int64_t *ret);

