/* SPDX-License-Identifier: Apache-2.0 */
/* Provisioning: pending pods become EC2 instances. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <systemd/sd-event.h>

#include "agents/proxydrain.h"
#include "model/nodepool.h"
#include "model/reservations.h"
#include "promtext.h"
#include "solver/solver.h"
#include "strbuf.h"

/* Provisioning: pending pods become EC2 instances.
 *
 * Watches unscheduled pods, NodePools, EC2NodeClasses, DaemonSets and Nodes. Pods that the
 * scheduler marked Unschedulable open a batch (1 s idle, 10 s at most); the batch builds a
 * snapshot (the catalog, NodePools, Nodes with the pods their agents report, instances launched
 * but not yet registered) and asks the solver where the pods go. Each new node of the plan is
 * launched with CreateFleet (instant): ranked overrides over instance types and subnets, a
 * ClientToken derived from the plan, so a retry never doubles capacity. Offerings that report
 * insufficient capacity are left out for 3 minutes and the batch is solved again; a launch that
 * EC2 throttled or failed past the client's retries is tried again in the next round, the same
 * plan under the same ClientToken. Instances that never register are terminated. Only the
 * leader acts; a new leader first learns the instances already launched (EC2 tag
 * nodesmith.io/cluster) and counts them as in flight. */

typedef struct Provisioner Provisioner;
typedef struct Registry Registry;
/* A round: a snapshot of the cluster as the solver sees it, and what was decided on it (a
 * provisioning round's plan; a disruption pass takes one through provisioner_snapshot_take()).
 * Opaque outside provision/: read it with the provisioner_round_*() accessors below. */
typedef struct Round Round;
typedef struct SolverLaunch SolverLaunch;
typedef struct Ec2Stats Ec2Stats;
typedef struct KubeClient KubeClient;

typedef struct ProvisionerConfig {
        const char *cluster_name;          /* the nodesmith.io/cluster tag */
        const char *kube_server, *kubeconfig; /* neither: in-cluster */
        const char *region, *ec2_endpoint, *ssm_endpoint, *iam_endpoint;
        const char *catalog, *price_table; /* the shipped catalog; on-demand prices for EC2's */
        uint64_t catalog_refresh_ms;       /* 0: only the file */
        uint64_t image_refresh_ms;         /* classes' images, subnets, security groups looked up again */
        uint64_t batch_idle_ms, batch_max_ms;
        uint64_t solver_budget_ms;         /* 0: the solver runs to the end */
        uint64_t registration_timeout_ms;
        uint64_t dead_node_after_ms;       /* Ready Unknown and agent silent this long: dead (0: never) */
        uint64_t report_interval_ms;       /* what agents are asked (a new leader waits for them) */
        uint64_t stale_after_ms;           /* an agent silent this long no longer counts */
        /* user data of the nodes launched */
        const char *kubernetes_version, *instance_profile;
        const char *agent_image;           /* Bottlerocket nodes' agent host container (NULL: none) */
        const char *cluster_endpoint, *cluster_ca, *cluster_cidr;
        const char *agent_endpoint, *agent_ca, *agent_tls_server_name;
        const char *token;                 /* the agents' bootstrap token */
        uint64_t consolidation_interval_ms; /* 0: no disruption passes */
        ProxyDrainsConfig proxy_drains;
} ProvisionerConfig;

/* What the provisioner asks of the process around it; every member may be NULL. */
typedef struct ProvisionerPorts {
        void *userdata;
        /* The Lease is held and renewed within its deadline (NULL: no election, always). */
        bool (*acting)(void *userdata);
        const char *(*acting_as)(void *userdata); /* this replica's identity */
        /* For people (status/): a launch gave this instance; a launch step failed (EC2's code and
         * message); a round decided (pods it cannot place). */
        void (*launched)(void *userdata, const char *instance_id, const char *instance_type, const char *zone,
                         const char *capacity_type, const Round *rd, const SolverLaunch *l);
        void (*launch_failed)(void *userdata, const Round *rd, const SolverLaunch *l, const char *step,
                              const char *code, const char *message);
        void (*decided)(void *userdata, const Round *rd);
        /* EC2 gave this instance (before it is counted in flight). */
        void (*new_instance)(void *userdata, const char *instance_id);
        /* Pending pods were planned onto this existing node. */
        void (*nominated)(void *userdata, const char *node);
        /* Every consolidation-interval, while nothing else holds the loop: a disruption pass. */
        void (*disrupt)(void *userdata);
} ProvisionerPorts;

/* Durations the provisioner observes, for /metrics. */
typedef struct ProvisionerHistograms {
        Histogram round_seconds;         /* a round: batch closed to its last launch */
        Histogram solver_seconds;        /* compiling and placing */
        Histogram registration_seconds;  /* launched to registered */
} ProvisionerHistograms;
const ProvisionerHistograms *provisioner_histograms(const Provisioner *p);

/* registry: the nodes that report (the caller's, outlives the provisioner). */
int provisioner_new(sd_event *e, const ProvisionerConfig *cfg, Registry *registry,
                    const ProvisionerPorts *ports, Provisioner **ret);
Provisioner *provisioner_free(Provisioner *p);
void provisioner_set_leading(Provisioner *p, bool leading);
typedef struct NodeEntry NodeEntry;
/* A node was told to drain (a notice, a disruption decision): plan replacement capacity for
 * its pods now; a spot interruption also takes that spot offering out for a while. */
void provisioner_node_leaving(Provisioner *p, const NodeEntry *e);
struct cJSON;
/* The Node whose spec.providerID (aws:///ZONE/ID) names the instance, from the Node watch:
 * -EAGAIN until the watch has listed the Nodes, -ENOENT when there is none. */
/* The Node watch (NULL without provisioning), for binding reports to their Node (nodebind.h). */
struct KubeWatch;
const struct KubeWatch *provisioner_nodes(Provisioner *p);
int provisioner_find_node(Provisioner *p, const char *instance_id, const struct cJSON **ret);
/* An instance launched but not registered yet is going away (a spot interruption, a state
 * change to stopping or terminated): it no longer counts as capacity on the way and its pods
 * are planned again at once; a spot one takes its offering out for a while (EC2 took the
 * capacity back, and a new plan gets a new ClientToken). false: the instance is not in flight. */
bool provisioner_instance_leaving(Provisioner *p, const char *instance_id);
/* A CreateFleet has been sent and its answer (the instances it launched) not handled yet. */
bool provisioner_launch_unanswered(const Provisioner *p);
/* Prometheus lines. */
void provisioner_metrics(Provisioner *p, StrBuf *b);
/* {"inFlight": [...], "pending": N, ...} for /api/v1/provisioning. */
char *provisioner_api(Provisioner *p);
/* The pod's uid from a round's "namespace/uid" key. */
const char *provisioner_pod_uid(const char *key);
/* The drains it runs for silent agents (NULL without a provisioner). */
ProxyDrains *provisioner_proxy_drains(const Provisioner *p);

/* ---- what disruption/, status/ and the coordinator's metrics read of the provisioner --------
 * (the files of provision/ share the rest through provisioner-internal.h; nothing else may). */

/* The loop's CLOCK_MONOTONIC now. */
uint64_t provisioner_now(const Provisioner *p);
/* Leading, with the Lease renewed within its renew deadline: asked before every action; and
 * this replica's identity, for the log. */
bool provisioner_acting(const Provisioner *p);
const char *provisioner_acting_as(const Provisioner *p);
/* Open (or extend) a batch: a provisioning round follows soon. */
void provisioner_poke(Provisioner *p);

/* This replica leads (provisioner_set_leading(); provisioner_acting() also asks the Lease). */
bool provisioner_leading(const Provisioner *p);
/* Where provisioning stands, for whoever waits on it (disruption acts only when it is settled). */
typedef struct ProvisionerActivity {
        bool learned;                 /* the instances in flight are learned from EC2 since leading */
        bool batch_open;              /* pending pods are being batched: a round follows */
        bool round_running;           /* a round is solving or launching */
        size_t in_flight;             /* instances launched whose Node is not initialized yet */
        uint64_t rounds;              /* rounds started so far */
        uint64_t leading_since_usec;  /* CLOCK_MONOTONIC */
} ProvisionerActivity;
void provisioner_activity(const Provisioner *p, ProvisionerActivity *ret);

/* The provisioner's watches of the API (NULL before provisioner_new() set them up). */
typedef enum ProvisionerWatch {
        PROVISIONER_WATCH_PODS,        /* pods not bound yet */
        PROVISIONER_WATCH_NODES,
        PROVISIONER_WATCH_NODEPOOLS,
        PROVISIONER_WATCH_NODECLASSES, /* EC2NodeClasses */
        PROVISIONER_WATCH_DAEMONSETS,
        PROVISIONER_WATCH_PDBS,        /* PodDisruptionBudgets */
        _PROVISIONER_WATCH_MAX,
} ProvisionerWatch;
const struct KubeWatch *provisioner_watch(const Provisioner *p, ProvisionerWatch w);
/* Its Kubernetes client (Events, patches, the status subresource). */
KubeClient *provisioner_kube(const Provisioner *p);
/* The instance catalog in use; EC2's call counters (NULL: no client). */
const Catalog *provisioner_catalog(const Provisioner *p);
const Ec2Stats *provisioner_ec2_stats(const Provisioner *p);

/* A snapshot of the cluster into a new round (*ret, freed with provisioner_round_free()):
 * pending pods (counted in *ret_pending, with the pods of leaving nodes), nodes with the pods
 * their agents report, instances in flight. -errno (nothing in *ret) when it cannot be built. */
int provisioner_snapshot_take(Provisioner *p, Round **ret, size_t *ret_pending);
void provisioner_round_free(Round *rd);
const SolverSnapshot *provisioner_round_snapshot(const Round *rd);
/* The NodePool snapshot pool k launches for: a capacity reservation's pool
 * (model/reservations.h) is its NodePool's. */
const SolverNodePool *provisioner_round_pool(const Round *rd, uint32_t k);
/* The NodePools' settings the solver does not read (disruption, expiry, classes), by index. */
const NodepoolObjects *provisioner_round_objects(const Round *rd);
/* The round's arena: what is allocated in it lives as long as the round. */
SolverArena *provisioner_round_arena(const Round *rd);
/* A provisioning round's plan (NULL before the solve); the "namespace/uid" key of snapshot pod
 * i (NULL when unknown). */
const SolverResult *provisioner_round_result(const Round *rd);
const char *provisioner_round_pod_key(const Round *rd, size_t i);

/* An instance launched whose Node is not initialized yet (read-only outside provision/). */
typedef struct InFlight {
        char *instance_id;
        char *nodepool;
        char *instance_type;
        char *zone;
        SolverCapacityType capacity_type;
        uint64_t launched_usec;  /* CLOCK_MONOTONIC */
        size_t n_pods;           /* nominated when launched */
        char **pods;             /* "namespace/uid" of the pods it was launched for (NULL-ended,
                                  * may be NULL): while it is in flight they count as on it */
        bool learned;            /* found in EC2 at start-up, not launched by this replica */
        char *reservation_id;    /* the capacity reservation it runs in, or NULL */
        char *node_name;         /* its Node, once registered; it stays in flight until that
                                  * Node is initialized (Ready, temporary taints gone, agent
                                  * reporting), as Karpenter treats a NodeClaim */
} InFlight;
/* The instances in flight (*ret_n of them); valid until the loop runs again. */
const InFlight *provisioner_inflight(const Provisioner *p, size_t *ret_n);

#define PROVISIONER_MAX_SUBNETS 64
/* What EC2 gave for an EC2NodeClass's selector terms, as launches use it. */
typedef struct ProvisionerClass {
        bool resolved;               /* looked up in EC2 at least once */
        size_t n_subnets;
        const char *subnet_ids[PROVISIONER_MAX_SUBNETS], *subnet_zones[PROVISIONER_MAX_SUBNETS];
        const char *const *security_groups; /* NULL-terminated */
        const char *ami[2];          /* by arch: 0 amd64, 1 arm64 (NULL: not known) */
        const char *profile;         /* the instance profile ("": none), NULL until known */
        /* capacityReservationSelectorTerms: what they select (looked up at least once when
         * reservations_known; reservations_error: the last look-up's failure, or "") */
        bool reservations_known;
        const char *reservations_error;
        const NodeReservation *reservations;
        size_t n_reservations;
} ProvisionerClass;
/* -ENOENT: the class has not been looked up. Valid until the loop runs again. */
int provisioner_class(const Provisioner *p, const char *node_class, ProvisionerClass *ret);
/* Whether instance_id's subnet or security groups no longer match what node_class's terms
 * match now (why written then); not known: false. */
bool provisioner_network_drifted(Provisioner *p, const char *node_class, const char *instance_id, char *why,
                                 size_t size);
/* Whether instance_id's capacity reservation (EC2's, as last listed for drift) is no longer among
 * those node_class's capacityReservationSelectorTerms select (why written then); not known or
 * not in one: false (reservations.c). */
bool provisioner_reservation_drifted(Provisioner *p, const char *node_class, const char *instance_id, char *why,
                                     size_t size);
/* The Node e's agent speaks for, bound through its providerID (nodebind.h); NULL: none. */
const char *provisioner_node_name(Provisioner *p, const NodeEntry *e);
/* The pod waits for capacity: PodScheduled=False, reason Unschedulable, not being deleted. */
bool pod_unschedulable(const cJSON *pod);
