/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/*
 * nodesmith solver: a pure library (no I/O, no clock, no globals, no threads) that turns a
 * snapshot of the cluster into decisions. Used by the coordinator, by `nodesmithctl simulate`,
 * and by bench/scheduling.
 *
 *   SolverSnapshot  --solver_new()-->  Solver  --solver_provision(opts)-->  SolverResult
 *
 * solver_new() compiles the snapshot once (interned labels, per-instance-type bitsets, pod
 * shapes, topology groups, existing nodes with the pods bound to them). solver_provision() runs
 * one placement and leaves the Solver as it found it, so the same Solver can be asked many
 * questions: "where do the pending pods go" (provisioning), and "can the pods of nodes X, Y go
 * elsewhere with at most one new node" (consolidation, see SolverOptions.remove_nodes and
 * max_new_nodes). Results are deterministic for a given snapshot and options.
 *
 * Ownership: the snapshot and every string and array it points to belong to the caller and must
 * outlive the Solver and every SolverResult obtained from it (results point into it). A
 * SolverArena is provided so that parsers can build a snapshot with a single owner.
 *
 * Units: cpu in millicores, memory / ephemeral-storage / hugepages in bytes, everything else in
 * units. Prices in USD per hour.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- resources ------------------------------------------------------------------------------ */

typedef enum SolverResource {
        SOLVER_RES_CPU,             /* "cpu", millicores */
        SOLVER_RES_MEMORY,          /* "memory", bytes */
        SOLVER_RES_PODS,            /* "pods" (every pod requests exactly one; set by the solver) */
        SOLVER_RES_EPHEMERAL,       /* "ephemeral-storage", bytes */
        SOLVER_RES_NVIDIA_GPU,      /* "nvidia.com/gpu" */
        SOLVER_RES_AMD_GPU,         /* "amd.com/gpu" */
        SOLVER_RES_NEURON,          /* "aws.amazon.com/neuron" */
        SOLVER_RES_POD_ENI,         /* "vpc.amazonaws.com/pod-eni" */
        SOLVER_RES_HUGEPAGES_2MI,   /* "hugepages-2Mi", bytes */
        SOLVER_RES_HUGEPAGES_1GI,   /* "hugepages-1Gi", bytes */
        SOLVER_RES_OTHER,           /* any other extended resource: no instance type offers it */
        _SOLVER_RES_MAX,
} SolverResource;

typedef struct SolverResources {
        int64_t v[_SOLVER_RES_MAX];
} SolverResources;

/* "cpu" -> SOLVER_RES_CPU ...; an unknown name that looks like an extended resource
 * (contains '/') maps to SOLVER_RES_OTHER; anything else is -EINVAL. */
int solver_resource_from_name(const char *name);
const char *solver_resource_to_name(SolverResource r);

/* Kubernetes quantity ("100m", "1.5", "2Gi", "1e3", "500M") scaled to the solver's unit for a
 * resource: millicores for cpu (rounded up), plain units otherwise (rounded up). */
int solver_parse_quantity(const char *s, SolverResource r, int64_t *ret);
/* Human form: "7910m", "14162Mi", "58". buf of at least 32 bytes. */
const char *solver_format_quantity(int64_t v, SolverResource r, char *buf, size_t size);

/* ---- labels, requirements, taints ----------------------------------------------------------- */

/* Well-known node label keys. The Karpenter equivalents (karpenter.sh/capacity-type,
 * karpenter.sh/nodepool, karpenter.k8s.aws/instance-*) and the deprecated beta keys are
 * canonicalized to these everywhere a node label is matched. */
#define SOLVER_LABEL_INSTANCE_TYPE "node.kubernetes.io/instance-type"
#define SOLVER_LABEL_ZONE "topology.kubernetes.io/zone"
#define SOLVER_LABEL_REGION "topology.kubernetes.io/region"
#define SOLVER_LABEL_ARCH "kubernetes.io/arch"
#define SOLVER_LABEL_OS "kubernetes.io/os"
#define SOLVER_LABEL_HOSTNAME "kubernetes.io/hostname"
#define SOLVER_LABEL_CAPACITY_TYPE "nodesmith.io/capacity-type"
#define SOLVER_LABEL_NODEPOOL "nodesmith.io/nodepool"
#define SOLVER_LABEL_INSTANCE_PREFIX "nodesmith.io/instance-" /* category, family, generation,
                                                               * size, cpu, memory, gpu-count ... */

/* Returns the canonical key for a node label key (a static string or key itself). */
const char *solver_canonical_label_key(const char *key);

typedef struct SolverLabel {
        const char *key;
        const char *value;
} SolverLabel;

typedef enum SolverOperator {
        SOLVER_OP_IN,
        SOLVER_OP_NOT_IN,
        SOLVER_OP_EXISTS,
        SOLVER_OP_DOES_NOT_EXIST,
        SOLVER_OP_GT,
        SOLVER_OP_LT,
} SolverOperator;

int solver_operator_from_name(const char *name); /* "In" ... "Lt", else -EINVAL */
const char *solver_operator_to_name(SolverOperator op);

typedef struct SolverRequirement {
        const char *key;
        SolverOperator op;
        const char *const *values;
        size_t n_values;
        int32_t min_values; /* NodePool only: at least this many distinct values must remain
                             * among the instance types a node may become (0: no minimum) */
} SolverRequirement;

/* A node selector term: requirements ANDed. */
typedef struct SolverTerm {
        const SolverRequirement *reqs;
        size_t n_reqs;
} SolverTerm;

typedef struct SolverPreferredTerm {
        int32_t weight;
        SolverTerm term;
} SolverPreferredTerm;

typedef enum SolverTaintEffect {
        SOLVER_EFFECT_NO_SCHEDULE,
        SOLVER_EFFECT_PREFER_NO_SCHEDULE,
        SOLVER_EFFECT_NO_EXECUTE,
        SOLVER_EFFECT_ANY = -1, /* tolerations only: empty effect */
} SolverTaintEffect;

typedef struct SolverTaint {
        const char *key;
        const char *value; /* may be NULL */
        SolverTaintEffect effect;
} SolverTaint;

typedef struct SolverToleration {
        const char *key;   /* NULL or "" with exists: tolerates everything */
        bool exists;       /* operator Exists (else Equal) */
        const char *value; /* Equal only */
        SolverTaintEffect effect;
} SolverToleration;

bool solver_toleration_tolerates(const SolverToleration *t, const SolverTaint *taint);
/* True when every NoSchedule/NoExecute taint (and PreferNoSchedule ones unless
 * ignore_prefer) is tolerated. */
bool solver_tolerates_all(const SolverToleration *tols, size_t n_tols, const SolverTaint *taints,
                          size_t n_taints, bool ignore_prefer);

/* Pod label selector (matchLabels + matchExpressions with In, NotIn, Exists, DoesNotExist). */
typedef struct SolverLabelSelector {
        const SolverLabel *match_labels;
        size_t n_match_labels;
        const SolverRequirement *exprs;
        size_t n_exprs;
} SolverLabelSelector;

bool solver_selector_matches(const SolverLabelSelector *sel, const SolverLabel *labels, size_t n);
/* Node-label semantics (Gt/Lt allowed; keys canonicalized on both sides). */
bool solver_requirement_matches_labels(const SolverRequirement *req, const SolverLabel *labels,
                                       size_t n);

/* ---- instance catalog ----------------------------------------------------------------------- */

typedef enum SolverCapacityType {
        SOLVER_CAPACITY_SPOT,
        SOLVER_CAPACITY_ON_DEMAND,
        _SOLVER_CAPACITY_MAX,
} SolverCapacityType;

const char *solver_capacity_type_to_name(SolverCapacityType ct); /* "spot", "on-demand" */
int solver_capacity_type_from_name(const char *name);

typedef struct SolverOffering {
        const char *zone;
        SolverCapacityType capacity_type;
        double price;
        bool available;
} SolverOffering;

typedef struct SolverInstanceType {
        const char *name;
        /* Labels derived from the type: node.kubernetes.io/instance-type, kubernetes.io/arch,
         * kubernetes.io/os, nodesmith.io/instance-{category,family,generation,size,cpu,memory,
         * gpu-count,gpu-name,...}. Requirements on any key defined here filter instance types. */
        const SolverLabel *labels;
        size_t n_labels;
        SolverResources capacity;
        SolverResources allocatable; /* capacity minus kube-reserved, eviction, VM overhead */
        const SolverOffering *offerings;
        size_t n_offerings;
} SolverInstanceType;

/* Kubelet settings that shape allocatable (EC2NodeClass spec.kubelet). Zero means default. */
typedef struct SolverKubelet {
        int32_t max_pods;
        int32_t pods_per_core;
        bool has_kube_reserved_cpu, has_kube_reserved_memory, has_system_reserved_cpu,
                has_system_reserved_memory, has_eviction_memory;
        int64_t kube_reserved_cpu;       /* millicores */
        int64_t kube_reserved_memory;    /* bytes */
        int64_t system_reserved_cpu;
        int64_t system_reserved_memory;
        int64_t eviction_memory;         /* memory.available hard threshold, bytes */
        bool has_eviction_memory_pct;    /* memory.available as a percentage of memory */
        double eviction_memory_pct;
        bool has_eviction_nodefs, has_eviction_nodefs_pct; /* nodefs.available (default 10 %) */
        int64_t eviction_nodefs;
        double eviction_nodefs_pct;
        bool has_kube_reserved_ephemeral, has_system_reserved_ephemeral; /* default 1 Gi, 0 */
        int64_t kube_reserved_ephemeral, system_reserved_ephemeral;
        /* EC2NodeClass instanceStorePolicy RAID0: ephemeral storage is the instance store's
         * NVMe disks in one RAID-0 array where the type has any, else the root volume */
        bool instance_store_raid0;
} SolverKubelet;

/* EKS/AL2023 kubelet formulas (what Karpenter assumes before a node of the type has reported):
 * max pods = ENIs x (IPv4 per ENI - 1) + 2 (unless kubelet maxPods / podsPerCore), kube-reserved
 * cpu 6% / 1% / 0.5% / 0.25% tiers, kube-reserved memory 11 x pods + 255 MiB, eviction 100 Mi,
 * VM memory overhead vm_overhead_percent of capacity (7.5 by default), ephemeral-storage minus
 * 1 Gi reserved and 10 % eviction. capacity.v[SOLVER_RES_PODS] is filled with max pods. */
int solver_kubelet_allocatable(SolverResources *capacity, uint32_t enis, uint32_t ipv4_per_eni,
                               const SolverKubelet *kubelet, double vm_overhead_percent,
                               SolverResources *ret_allocatable);

/* ---- NodePools ------------------------------------------------------------------------------ */

typedef struct SolverNodePool {
        const char *name;
        int32_t weight;                       /* higher is tried first; among equal weights by
                                               * name, a pool named "NAME/…" (a capacity
                                               * reservation's, model/reservations.h) just
                                               * before NAME */
        const SolverRequirement *requirements;
        size_t n_requirements;
        const SolverLabel *labels;
        size_t n_labels;
        const SolverTaint *taints;
        size_t n_taints;
        const SolverTaint *startup_taints;    /* ignored for scheduling, carried to launches */
        size_t n_startup_taints;
        /* Limits on the total capacity of the pool's nodes; < 0 means unlimited. */
        SolverResources limits;
        /* spec.limits.nodes (with has_node_limit): at most this many nodes in the pool, the
         * snapshot's nodes of the pool (in flight and deleting ones too) counted. A hard limit as
         * in Karpenter: nodes removed in a consolidation still count, so a replacement needs
         * room for itself. */
        bool has_node_limit;
        int64_t node_limit;
        /* nodesmith extension: capacity kept free and ready (0: none). Planned as virtual
         * lowest-priority pods that real pending pods displace at once. headroom.v[PODS] = N
         * splits cpu/memory into N equal units (one pod slot each); 0 means one unit. */
        SolverResources headroom;
        /* Per-instance-type allocatable for this pool when its EC2NodeClass kubelet settings
         * differ from the catalog's defaults (NULL: use SolverInstanceType.allocatable).
         * Indexed like SolverSnapshot.types. */
        const SolverResources *allocatable;
        const char *node_class;               /* informational, carried to launches */
        /* A static NodePool (Karpenter's spec.replicas): it keeps exactly `replicas` nodes,
         * launched whatever the pods (empty, the cheapest offering, spread over its zones);
         * no node of it is opened for pending pods, which still go onto its nodes. */
        bool is_static;
        uint32_t replicas;
} SolverNodePool;

/* ---- nodes and pods ------------------------------------------------------------------------- */

typedef struct SolverNode {
        const char *name;                     /* also the hostname domain */
        const char *nodepool;                 /* NULL: not managed by nodesmith */
        const char *instance_type;            /* may be NULL */
        const char *zone;                     /* NULL: taken from the zone label */
        SolverCapacityType capacity_type;
        const SolverLabel *labels;
        size_t n_labels;
        const SolverTaint *taints;
        size_t n_taints;
        SolverResources allocatable;          /* exact, from the agent (estimate when in flight) */
        double price;                         /* USD/hour, for disruption decisions */
        bool unschedulable;                   /* cordoned: takes no new pods */
        bool in_flight;                       /* launched, not registered: DaemonSet overhead of
                                               * its pool is added to what it holds */
        bool deleting;                        /* going away: takes no new pods */
} SolverNode;

typedef struct SolverSpread {
        const char *topology_key;             /* zone or hostname */
        int32_t max_skew;
        bool schedule_anyway;                 /* whenUnsatisfiable: ScheduleAnyway */
        int32_t min_domains;
        SolverLabelSelector selector;
} SolverSpread;

typedef struct SolverPodAffinityTerm {
        const char *topology_key;             /* zone or hostname */
        SolverLabelSelector selector;
        const char *const *namespaces;        /* empty: the pod's own namespace */
        size_t n_namespaces;
        bool all_namespaces;                  /* namespaceSelector: {} */
        int32_t weight;                       /* preferred terms only */
} SolverPodAffinityTerm;

typedef struct SolverHostPort {
        uint16_t port;
        uint8_t protocol;                     /* 0 TCP, 1 UDP, 2 SCTP */
} SolverHostPort;

typedef struct SolverPod {
        const char *name;
        const char *namespace_;
        const char *owner;                    /* "Deployment/web" ...: for people, optional */
        const SolverLabel *labels;
        size_t n_labels;
        SolverResources requests;             /* effective: max(init, sum of containers) +
                                               * overhead; pods is forced to 1 */
        int32_t priority;
        bool preempt_never;                   /* preemptionPolicy: Never */
        const char *node_name;                /* bound (running) pod; NULL: pending */
        bool daemonset;                       /* bound DaemonSet pod: never moved */
        bool do_not_disrupt;
        int64_t deletion_cost;                /* controller.kubernetes.io/pod-deletion-cost */

        const SolverLabel *node_selector;
        size_t n_node_selector;
        const SolverTerm *required_terms;     /* ORed */
        size_t n_required_terms;
        const SolverPreferredTerm *preferred_terms;
        size_t n_preferred_terms;
        const SolverToleration *tolerations;
        size_t n_tolerations;
        const SolverSpread *spreads;
        size_t n_spreads;
        const SolverPodAffinityTerm *affinity;          /* required */
        size_t n_affinity;
        const SolverPodAffinityTerm *anti_affinity;     /* required */
        size_t n_anti_affinity;
        const SolverPodAffinityTerm *pref_affinity;
        size_t n_pref_affinity;
        const SolverPodAffinityTerm *pref_anti_affinity;
        size_t n_pref_anti_affinity;
        const SolverHostPort *host_ports;
        size_t n_host_ports;
        /* Zones allowed by bound zonal volumes (PV node affinity): the pod must go there. */
        const char *const *volume_zones;
        size_t n_volume_zones;
        /* Unbound WaitForFirstConsumer claims ("ns/name"): the claim follows the zone chosen
         * for the pod, and other pods of the same claim follow it. */
        const char *const *wffc_claims;
        size_t n_wffc_claims;
} SolverPod;

typedef struct SolverSnapshot {
        const SolverInstanceType *types;
        size_t n_types;
        const SolverNodePool *nodepools;
        size_t n_nodepools;
        const SolverNode *nodes;              /* existing and in-flight nodes */
        size_t n_nodes;
        const SolverPod *pods;                /* pending pods and pods bound to nodes */
        size_t n_pods;
        const SolverPod *daemonsets;          /* one template per DaemonSet */
        size_t n_daemonsets;
} SolverSnapshot;

/* Hard caps, checked by solver_new() (-E2BIG). */
#define SOLVER_MAX_TYPES 4096
#define SOLVER_MAX_ZONES 32
#define SOLVER_MAX_PODS 1000000
#define SOLVER_MAX_NODES 200000

/* ---- solving -------------------------------------------------------------------------------- */

typedef struct Solver Solver;

/* Compiles the snapshot. On failure returns -errno and, when ret_error is not NULL, a newly
 * allocated message for people (the caller frees it): -EINVAL for an inconsistent snapshot
 * (duplicate node or NodePool names, a negative price), -E2BIG beyond the hard caps. */
int solver_new(const SolverSnapshot *snap, Solver **ret, char **ret_error);
Solver *solver_free(Solver *s);

typedef struct SolverOptions {
        bool skip_pending;               /* do not place the snapshot's pending pods */
        /* Consolidation: these nodes (indices into snapshot.nodes) are taken away and their
         * pods (except DaemonSet pods) must be placed elsewhere. */
        const size_t *remove_nodes;
        size_t n_remove_nodes;
        size_t max_new_nodes;            /* SIZE_MAX: unlimited; 0 is honoured */
        bool no_headroom;                /* do not plan NodePool headroom */
        bool no_preemption;              /* never plan preemption */
        size_t max_types_per_launch;     /* 0: 60 (CreateFleet override list size) */
        bool stop_at_first_failure;      /* consolidation: give up as soon as a pod fails */
        bool on_demand_only;             /* new nodes: on-demand offerings only */
        /* CPU time the caller lets the placement run (monotonic microseconds; 0: no limit).
         * Past it, what is placed stays placed, the rest is left undecided (decision NONE,
         * counted in SolverResult.n_deferred) and the result says so (budget_exhausted): a
         * caller on an event loop plans those pods in a later round instead of stalling. */
        uint64_t time_budget_usec;
        /* Fewer, bigger nodes: size new nodes so that the run's demand fits in about this many
         * (0: by cost alone). A soft bound: pods never go unplaced because of it (that is
         * max_new_nodes); hostname rules and instance sizes may still need more nodes. */
        size_t target_nodes;
} SolverOptions;

#define SOLVER_OPTIONS_DEFAULT ((SolverOptions) { .max_new_nodes = SIZE_MAX })

typedef struct SolverLaunchOffering {
        uint32_t type;                   /* index into snapshot.types */
        const char *zone;
        SolverCapacityType capacity_type;
        double price;
} SolverLaunchOffering;

/* How many nodes static NodePool k of the snapshot lacks: replicas less its nodes that are
 * not leaving (in flight ones counted), within its limits.nodes (all its nodes counted). 0 for
 * a dynamic pool. */
size_t solver_static_missing(const SolverSnapshot *snap, size_t k);

typedef struct SolverLaunch {
        uint32_t nodepool;               /* index into snapshot.nodepools */
        const char *zone;                /* NULL: any zone among the offerings */
        SolverCapacityType capacity_type; /* of the cheapest offering */
        double price;                    /* cheapest offering: what the plan costs */
        uint32_t type;                   /* cheapest instance type */
        SolverLaunchOffering *offerings; /* ranked cheapest first (CreateFleet overrides) */
        size_t n_offerings;
        size_t n_types;                  /* instance types still able to hold everything */
        SolverResources requests;        /* pods + DaemonSet overhead */
        uint32_t *pods;                  /* indices into snapshot.pods */
        size_t n_pods;
        uint32_t headroom_units;         /* virtual headroom units planned on this node */
        SolverLabel *labels;             /* node labels: NodePool labels and the values of custom
                                          * keys the pods narrowed (nodesmith.io/nodepool too) */
        size_t n_labels;
} SolverLaunch;

typedef enum SolverDecisionKind {
        SOLVER_DECISION_NONE,            /* not part of this run (bound pod left in place) */
        SOLVER_DECISION_EXISTING,        /* goes to existing/in-flight node `target` */
        SOLVER_DECISION_LAUNCH,          /* goes to launch `target` */
        SOLVER_DECISION_PREEMPT,         /* kube-scheduler will preempt lower-priority pods on
                                          * node `target`; no new capacity needed */
        SOLVER_DECISION_UNSCHEDULABLE,
} SolverDecisionKind;

typedef enum SolverReason {
        SOLVER_REASON_NONE,
        SOLVER_REASON_NO_NODEPOOL,       /* no NodePool at all */
        SOLVER_REASON_REQUIREMENTS,      /* node selector / affinity vs NodePool requirements */
        SOLVER_REASON_TAINTS,
        SOLVER_REASON_RESOURCES,         /* no instance type large enough */
        SOLVER_REASON_LIMITS,            /* NodePool limits reached */
        SOLVER_REASON_TOPOLOGY,          /* spread / affinity / anti-affinity */
        SOLVER_REASON_HOST_PORTS,
        SOLVER_REASON_VOLUME_ZONE,
        SOLVER_REASON_MAX_NEW_NODES,     /* options.max_new_nodes reached */
        SOLVER_REASON_UNSUPPORTED,       /* e.g. a topology key other than zone / hostname */
} SolverReason;

const char *solver_reason_to_name(SolverReason r);

typedef struct SolverDecision {
        SolverDecisionKind kind;
        uint32_t target;                 /* node index or launch index */
        SolverReason reason;             /* UNSCHEDULABLE only */
        const char *message;             /* UNSCHEDULABLE: why, for people */
        uint32_t relaxed;                /* how many preferences were dropped to place it */
        bool preempted;                  /* bound pod evicted by a PREEMPT decision */
} SolverDecision;

typedef struct SolverClaimZone {
        const char *claim;
        const char *zone;                /* NULL when the node's zone is left to EC2 */
} SolverClaimZone;

typedef struct SolverResult {
        SolverLaunch *launches;
        size_t n_launches;
        SolverDecision *decisions;       /* one per snapshot pod */
        size_t n_decisions;
        size_t n_placed_existing, n_placed_new, n_preempting, n_unschedulable;
        double total_price;              /* sum of launch prices, USD/hour */
        SolverClaimZone *claim_zones;
        size_t n_claim_zones;
        uint32_t *preempted_pods;        /* bound pods evicted by PREEMPT decisions */
        size_t n_preempted_pods;
        size_t n_headroom_unplaced;      /* NodePool headroom units that found no room */
        bool budget_exhausted;           /* options.time_budget_usec ran out: a partial plan */
        size_t n_deferred;               /* pods left undecided for that reason */
        void *arena;                     /* private */
} SolverResult;

int solver_provision(Solver *s, const SolverOptions *opts, SolverResult **ret);
SolverResult *solver_result_free(SolverResult *r);

/* ---- disruption: consolidation ----------------------------------------------------------- */

/* What taking a node away costs, Karpenter's way: for each pod but DaemonSet pods, 1 plus its
 * pod-deletion-cost / 2^27 plus its priority / 2^25 (each term clamped); an empty node costs 0.
 * Candidates are tried cheapest first. */
double solver_disruption_cost(const SolverSnapshot *snap, size_t node);

typedef struct SolverConsolidateOptions {
        /* Nodes that may be disrupted (indices into snapshot.nodes), already filtered by the
         * caller's rules (managed, settled, no do-not-disrupt, no PDB forbidding an eviction). */
        const size_t *candidates;
        size_t n_candidates;
        /* How many more nodes of each NodePool may be disrupted now (indexed like
         * snapshot.nodepools; NULL: no limit). A set never takes more of a pool than this. */
        const size_t *pool_allowance;
        /* A replacement must cost at most (1 - threshold) x the price of what it replaces. */
        double threshold;
        bool spot_to_spot;               /* spot may be replaced by cheaper spot (single node) */
        size_t min_spot_types;           /* ... if at least this many cheaper types remain (0: 15) */
        size_t max_multi;                /* multi-node: candidates considered (0: 100) */
        bool no_multi;                   /* skip multi-node consolidation */
        bool no_single;                  /* skip single-node consolidation */
        bool no_replace;                 /* deletes only */
} SolverConsolidateOptions;

typedef enum SolverConsolidationKind {
        SOLVER_CONSOLIDATE_NONE,
        SOLVER_CONSOLIDATE_DELETE,       /* the nodes' pods fit on the remaining nodes */
        SOLVER_CONSOLIDATE_REPLACE,      /* ... with one new, cheaper node */
} SolverConsolidationKind;

const char *solver_consolidation_kind_to_name(SolverConsolidationKind k); /* none, delete, replace */

typedef struct SolverConsolidation {
        SolverConsolidationKind kind;
        bool multi;                      /* found by multi-node consolidation */
        size_t *nodes;                   /* indices into snapshot.nodes */
        size_t n_nodes;
        size_t n_pods;                   /* pods that move (DaemonSet pods excepted) */
        double old_price;                /* of the nodes, USD/hour */
        double new_price;                /* of the replacement (0 for a delete) */
        /* REPLACE: the new node, its offerings cut to those cheaper than the threshold allows and
         * of an allowed capacity type; points into result. */
        const SolverLaunch *replacement;
        SolverResult *result;            /* the placement that proved it (owned) */
        size_t evaluations;              /* placements tried to find it */
        char message[256];               /* why, or why not, for people */
} SolverConsolidation;

/* Is taking exactly these nodes away (with at most one new node) worth it? Always returns a
 * SolverConsolidation (kind NONE with the reason in message when not). */
int solver_consolidate_evaluate(Solver *s, const SolverConsolidateOptions *o, const size_t *nodes,
                                size_t n_nodes, SolverConsolidation **ret);

/* The consolidation to make now, in Karpenter's order: multi-node first (the largest prefix of
 * the candidates sorted by disruption cost that is worth it, by binary search), then single
 * node (the first candidate, cheapest to disrupt first, that can be deleted or replaced).
 * Deterministic. kind NONE when nothing is worth doing. */
int solver_consolidate(Solver *s, const SolverConsolidateOptions *o, SolverConsolidation **ret);
SolverConsolidation *solver_consolidation_free(SolverConsolidation *c);

/* Statistics about the compiled snapshot (for benchmarks and logs). */
typedef struct SolverStats {
        size_t n_shapes;
        size_t n_groups;
        size_t n_zones;
        size_t n_types;
} SolverStats;
void solver_get_stats(const Solver *s, SolverStats *ret);
const char *solver_zone_name(const Solver *s, uint32_t zone);

/* ---- arena for snapshot builders ------------------------------------------------------------ */

typedef struct SolverArena SolverArena;
int solver_arena_new(SolverArena **ret);
SolverArena *solver_arena_free(SolverArena *a);
void *solver_arena_alloc(SolverArena *a, size_t size);     /* zeroed; NULL on OOM */
char *solver_arena_strdup(SolverArena *a, const char *s);   /* NULL in, NULL out */
char *solver_arena_strndup(SolverArena *a, const char *s, size_t n);
char *solver_arena_printf(SolverArena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Grows an arena array: copies n elements of size into a new block of capacity new_n. */
void *solver_arena_realloc(SolverArena *a, void *old, size_t old_size, size_t new_size);

/* ---- the planning model, for measuring plans against an optimum ----------------------------- */

/* What a new node can be: a NodePool, an instance type and a capacity type, at the cheapest
 * offering of that capacity type in the pool's zones, with the room left for pods once the
 * pool's DaemonSets are on it (the allocatable model the solver plans with). */
typedef struct SolverModelKind {
        uint32_t nodepool;               /* index into snapshot.nodepools */
        uint32_t type;                   /* index into snapshot.types */
        SolverCapacityType capacity_type;
        double price;
        SolverResources room;
        uint32_t zones;                  /* zones with such an offering (bit = solver_zone_name) */
} SolverModelKind;

/* The pending pods of one shape (identical scheduling inputs). */
typedef struct SolverModelShape {
        const uint32_t *pods;            /* indices into snapshot.pods */
        size_t n_pods;
        SolverResources requests;
        uint32_t max_per_node;           /* hostname anti-affinity, spread or host ports; 0: none */
        bool constrained;                /* zonal spread/affinity or preferences: the model relaxes them */
        int32_t zone_spread;             /* required zonal spread over its own pods: maxSkew (0: none) */
        uint32_t zones;                  /* zones it may run in */
        uint32_t *kinds;                 /* indices into SolverModel.kinds a new node may be for it */
        size_t n_kinds;
} SolverModelShape;

typedef struct SolverModel {
        SolverModelKind *kinds;
        size_t n_kinds;
        SolverModelShape *shapes;
        size_t n_shapes;
        SolverArena *arena;              /* private */
} SolverModel;

/* The model of the compiled snapshot's pending pods on new nodes (existing nodes are left
 * out). Zonal topology rules are not in it: an optimum computed on it is a lower bound when
 * they bind. */
int solver_model(Solver *s, SolverModel **ret);
SolverModel *solver_model_free(SolverModel *m);
