/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The provisioner's state and what its files share (the files of provision/: batching, in-flight
 * instances, the snapshot, launches, rounds, termination, the catalog refresh, metrics).
 * Only the files of provision/ include it (tests/layers.sh): the rest of the coordinator reads
 * the provisioner through provisioner.h. */

#include <cjson/cJSON.h>
#include <systemd/sd-event.h>

#include "aws/aws-credentials.h"
#include "model/catalog.h"
#include "model/disruption-policy.h"
#include "aws/ec2.h"
#include "agents/proxydrain.h"
#include "agents/registry.h"
#include "http.h"
#include "kube.h"
#include "model/nodepool.h"
#include "model/reservations.h"
#include "provisioner.h"
#include "solver/solver.h"

#define ICE_TTL_USEC (3 * 60 * USEC_PER_SEC)
#define RESOLVE_TTL_USEC (5 * 60 * USEC_PER_SEC)
#define MAX_IN_FLIGHT 10000
#define MAX_ICE 4096
#define MAX_SUBNETS PROVISIONER_MAX_SUBNETS
#define MAX_SGS 16
#define NODESMITH_FINALIZER "nodesmith.io/termination"

typedef struct Unavailable {
        char *instance_type, *zone;
        SolverCapacityType capacity_type;
        uint64_t until_usec;
} Unavailable;

typedef struct Subnet {
        char *id, *zone;
        uint64_t free_ips;
} Subnet;

/* What a launch needs from EC2, resolved once per node class and refreshed now and then. */
typedef struct Resolved {
        char *node_class;        /* "" for NodePools without one */
        Subnet subnets[MAX_SUBNETS];
        size_t n_subnets;
        char *sgs[MAX_SGS + 1];  /* NULL-terminated */
        char *ami[2];            /* by arch: 0 amd64, 1 arm64 */
        char *profile;           /* the instance profile ("" for none), NULL until known */
        uint64_t image_checked_usec[2]; /* the terms' image last looked up again (images.c) */
        char **net_subnets, **net_sgs;  /* what the selector terms match now (classnet.c), NULL-terminated */
        bool net_checking;
        char *template_name[2];
        char *template_hash[2];  /* what the template was made from */
        uint64_t resolved_usec;
        uint64_t prefetch_usec;  /* last time subnets were looked up ahead of a solve */
        bool prefetching;
        /* the capacity reservations the class's terms select (reservations.c) */
        Ec2CapacityReservationList *cr_list;
        NodeReservation *reservations;  /* point into cr_list; available counts launches since */
        size_t n_reservations;
        uint64_t reservations_usec;     /* last look-up (CLOCK_MONOTONIC), 0: never */
        bool reservations_looking;
        bool reservations_round_waits;  /* a round waits for the look-up under way */
        char reservations_error[256];   /* the last look-up's failure, "" when it worked */
} Resolved;

typedef struct Orphan {
        char instance_id[32];
        char node[256];
        uint64_t seen_usec;
        bool sent;
} Orphan;

/* A node found dead (deadnode.c): its instance is being terminated, then its Node deleted. */
typedef struct DeadNode {
        char instance_id[32];
        char node[256];
        uint64_t since_usec;     /* CLOCK_MONOTONIC, when it was found dead */
        bool terminated;         /* TerminateInstances went through: the Node is being deleted */
} DeadNode;

typedef enum Step {
        STEP_IDLE,
        STEP_SUBNETS,
        STEP_SGS,
        STEP_PROFILE,
        STEP_AMI,
        STEP_TEMPLATE,
        STEP_FLEET,
} Step;

typedef struct SnapshotBuild SnapshotBuild;
typedef struct Solve Solve;

/* A round: the snapshot (built in slices), one solve (on a worker thread), then its launches
 * one after the other. */
typedef struct Round {
        SolverArena *arena;         /* owns copies of what the launches need */
        NodepoolObjects *objects;
        /* snap.nodepools with capacity reservations' pools (model/reservations.h): the NodePool
         * (index into objects->pools) and reservation of each; NULL without reservations */
        size_t *pool_base;
        const NodeReservation **pool_reservation;
        Solver *solver;
        SolverResult *result;
        SolverSnapshot snap;
        SnapshotBuild *build;       /* the snapshot under construction (snapshot.c, round arena) */
        Solve *solve;               /* the solve under way off the loop (solve.c) */
        size_t pending;             /* pods waiting for capacity, as the snapshot counted them */
        size_t bound_unreported;    /* pods counted on their Node before its agent reported them */
        size_t missing;             /* nodes static NodePools lack */
        size_t next;                /* next launch to start */
        Step step;
        Resolved *res;              /* of the launch under way */
        int arch;                   /* 0 amd64, 1 arm64 */
        bool launched_nothing;      /* a launch failed for capacity, or past EC2's retries: solve again */
        bool budget_cut;            /* the solver's time budget left pods for the next round */
        uint64_t started_usec;
        char **pod_uids;            /* per snapshot pod */
        double price_cap;           /* the launch under way replaces consolidated nodes: its
                                     * offerings cost less than this (0: no cap; pricecap.c) */
        /* CreateFleet calls go out without waiting for the previous one's answer, up to
         * FLEETS_AT_ONCE unanswered (each is an EC2 round trip of a second or more: one after the
         * other, 40 nodes took a minute); the round ends when the last is answered */
        struct FleetCall *fleet_calls; /* per launch: what its CreateFleet callback needs */
        bool *sent;                 /* per launch: its CreateFleet went out (its own or an earlier
                                     * identical launch's, with TotalTargetCapacity above 1) */
        size_t fleets_in_flight;
        bool parked;                /* waiting for an answer (a free slot, or the last one) */
        /* every CreateFleet went out and only answers are awaited: the round left p->round for
         * p->detached, so that the next one can run meanwhile (launching.c) */
        bool detached;
        struct Round *next_detached;
} Round;

#define FLEETS_AT_ONCE 8
/* Identical launches of a round (the same NodePool, offerings, labels; no capacity reservation,
 * no consolidation's price cap) go out as one CreateFleet for this many instances at most, as
 * Karpenter batches identical NodeClaims: 40 nodes of a scale-out are a handful of calls. */
#define FLEET_BATCH_MAX 50

/* events.c: the launches' Events, this many requests under way at most, this many waiting
 * (more are dropped and counted) */
#define EVENTS_AT_ONCE 16
#define EVENTS_QUEUED_MAX 20000
typedef struct QueuedEvent QueuedEvent;

typedef struct FleetCall {
        Provisioner *p;
        size_t launch;              /* index in the round's result: the first of the batch */
        size_t *launches;           /* the batch's launches, launch first (round arena) */
        size_t n_launches;          /* TotalTargetCapacity */
        Round *rd;                  /* the round it belongs to (p->round, or a detached one) */
        bool answered;
} FleetCall;

struct Provisioner {
        sd_event *event;
        ProvisionerConfig cfg;
        Registry *registry;             /* the nodes that report (the coordinator's) */
        ProvisionerPorts ports;
        ProxyDrains *proxy_drains;      /* drains for silent agents, on this provisioner's watches */
        ProvisionerHistograms histograms;
        KubeClient *kube;
        KubeWatch *pods, *nodepools, *nodeclasses, *daemonsets, *nodes, *pdbs;
        KubeWatch *bound;               /* pods bound to a Node, not started yet (bound.c) */
        HttpClient *http;
        AwsCredentialProvider *creds;
        Ec2Client *ec2;
        Catalog *catalog;
        Catalog *next_catalog;          /* built from EC2, swapped in between rounds */
        bool catalog_building;
        uint64_t catalog_built_usec;
        char *agent_ca_pem;

        sd_event_source *batch_idle, *batch_max, *housekeeping;
        sd_event_source *snapshot_slice; /* the round's snapshot reads its next slice of pods */
        bool batch_open;
        bool leading;
        uint64_t leading_since_usec;
        bool learned;               /* in-flight instances learned from EC2 since leading */
        bool learning;
        Round *round;
        Round *detached;            /* rounds awaiting only CreateFleet answers (launching.c) */

        QueuedEvent *events_head, *events_tail; /* events.c */
        size_t n_events_queued, events_in_flight;
        uint64_t events_dropped;
        bool events_closing;

        InFlight *inflight;
        size_t n_inflight;
        Unavailable *ice;
        size_t n_ice;
        Resolved **resolved;
        size_t n_resolved;
        uint64_t static_checked_usec;    /* static NodePools last counted (staticpools.c) */
        Ec2InstanceList *seen_instances; /* running, as last listed for drift (classnet.c) */
        bool seeing_instances;
        uint64_t networks_checked_usec;

        /* metrics */
        uint64_t rounds, launches, instances_launched, launch_errors, ice_total, terminated_unregistered;
        uint64_t pods_nominated, pods_unschedulable, terminated;
        uint64_t budget_cuts, pods_deferred;
        uint64_t replacements_abandoned; /* consolidation replacements with no offering under their cap */
        uint64_t last_disruption_usec;
        Orphan orphans[64];
        size_t n_orphans;
        DeadNode dead[64];
        size_t n_dead;
        uint64_t dead_nodes;
        double last_decision_seconds, last_round_seconds;
        size_t pending_unschedulable;
        char last_error[256];
};

/* The NodePool snapshot pool k launches for (a capacity reservation's pool is its NodePool's),
 * and the reservation (NULL: none). */
static inline const SolverNodePool *round_pool(const Round *rd, uint32_t k) {
        return rd->pool_base ? &rd->objects->pools[rd->pool_base[k]] : &rd->snap.nodepools[k];
}
static inline const NodeReservation *round_reservation(const Round *rd, uint32_t k) {
        return rd->pool_reservation ? rd->pool_reservation[k] : NULL;
}

static inline const cJSON *jget(const cJSON *o, const char *k) {
        return cJSON_GetObjectItemCaseSensitive(o, k);
}

static inline const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A snapshot of the cluster into rd: pending pods (counted in *ret_pending, with the pods of
 * leaving nodes), nodes with the pods their agents report, instances in flight. */
int provisioner_snapshot(Provisioner *p, Round *rd, size_t *ret_pending);
/* The same in steps, so that the loop is never held long: begin (NodePools, classes,
 * DaemonSets, Nodes, and the keys of the watched pods), then pods until deadline_usec
 * (CLOCK_MONOTONIC, 0: no deadline; returns 1 when all are read, 0 when time is up), then end
 * (everything else). */
int provisioner_snapshot_begin(Provisioner *p, Round *rd);
int provisioner_snapshot_pods(Provisioner *p, Round *rd, uint64_t deadline_usec);
int provisioner_snapshot_end(Provisioner *p, Round *rd, size_t *ret_pending);
/* A node in flight for the solver (an instance launched, not registered yet; or a launch not
 * answered yet): instance type t of the catalog under name, labelled as its Node will be (a
 * reservation's capacity type and id when reservation_id is set); every string copied into a,
 * as the snapshot outlives what it was read from. */
int provision_inflight_node(SolverArena *a, const SolverInstanceType *t, const char *name, const char *nodepool,
                            const char *zone, SolverCapacityType capacity_type, const char *reservation_id,
                            SolverNode *ret);
/* bound.c: the pods of the watch p->bound that the agent of their Node (one of nodes[0..n_nodes))
 * does not report yet and that are not among the snapshot's pending pods (pending_uids), as
 * bound pods of that Node into out (at most cap; strings in a). */
int provision_bound_unreported(Provisioner *p, SolverArena *a, const SolverNode *nodes, size_t n_nodes,
                               const char *const *pending_uids, size_t n_pending, SolverPod *out, size_t cap,
                               size_t *ret_n);
/* launching.c: launches whose CreateFleet is unanswered (in rounds detached from p->round) are in
 * flight for the rounds that run meanwhile, as NodeClaims are in Karpenter before their instance
 * exists: provision_launching_count() of them; provision_launching_nodes() adds each as an
 * in-flight node (named "launch/N", with the catalog's allocatable) to out and pins the pending
 * pods it was launched for (pods[0..n_pods), uids as the snapshot read them) to it. */
size_t provision_launching_count(const Provisioner *p);
int provision_launching_nodes(Provisioner *p, SolverArena *a, SolverNode *out, size_t cap, size_t *ret_n,
                              SolverPod *pods, const char *const *uids, size_t n_pods);
/* The round p->round sent every CreateFleet and awaits only answers: it goes to p->detached and
 * p->round is free for the next. Returns false (nothing done) for a round that cannot (capacity
 * reservations: their counts are refreshed between rounds). */
bool provision_round_detach(Provisioner *p);
/* A detached round's last answer came: it ends. */
void provision_detached_finish(Provisioner *p, Round *rd);
/* metadata.uid of the snapshot's pending pod i, as it was read; NULL past them. */
const char *provisioner_snapshot_pod_uid(const Round *rd, size_t i);

/* solve.c: solver_new() and solver_provision() over rd->snap on a worker thread; done() runs on
 * the loop once they are over, with rd->solver and rd->result set (r < 0: err says why, owned by
 * the callee) and how long they took. Nothing on the loop may change what rd->snap points to
 * before then. provision_solve_free() waits for a solve under way. */
typedef void (*provision_solve_done_t)(Provisioner *p, int r, char *err, uint64_t usec);
int provision_solve_start(Provisioner *p, Round *rd, const SolverOptions *opts, provision_solve_done_t done);
Solve *provision_solve_free(Solve *s);

/* Hex SHA-256 of data into out (65 bytes for all of it). */
void provisioner_digest(const char *data, size_t len, char *out, size_t out_size);

/* pricecap.c: a consolidation's replacement costs less than what it replaces. The cap of launch
 * l (0: none, it is not only a replacement); whether an offering at price is within cap; and
 * the replacements it serves given up (returns how many nodes stop being replaced). */
double provision_price_cap(const Registry *reg, const SolverSnapshot *snap, const SolverLaunch *l);
bool provision_price_cap_allows(double cap, double price);
size_t provision_price_cap_abandon(Registry *reg, const SolverSnapshot *snap, const SolverLaunch *l);

/* images.c: the class's resolved launch inputs (NULL: none yet), and the periodic look-up of the
 * images behind aliases. */
const Resolved *provisioner_resolved_find(const Provisioner *p, const char *node_class);
void provisioner_images_refresh(Provisioner *p);
/* classnet.c: the subnets and security groups the classes' selector terms match now, and the
 * running instances', looked up again every --image-refresh (provisioner_network_drifted()
 * compares them). */
void provisioner_networks_refresh(Provisioner *p);
/* reservations.c: the reservations a class's capacityReservationSelectorTerms select, looked up
 * again when older than a minute before a solve (true: a look-up is under way, solve after it);
 * the round's pools with reservation pools; a launch into one (its count taken) or its
 * reservation found used up (ReservationCapacityExceeded: nothing left until the next look-up). */
bool provision_reservations_refresh(Provisioner *p, const char *node_class);
/* ... and from the housekeeping timer (no round started after it). */
void provisioner_reservations_housekeeping(Provisioner *p);
int provision_reservation_pools(Provisioner *p, Round *rd);
void provision_reservation_used(Provisioner *p, const char *node_class, const char *id, bool exhausted);
/* A terminated instance gives its reservation one instance back until the next look-up, as
 * Karpenter's availability cache counts it. */
void provision_reservation_released(Provisioner *p, const char *instance_id);
/* staticpools.c: a provisioning round when a static NodePool lacks nodes. */
void provisioner_static_check(Provisioner *p);
/* TerminateInstances of one instance of this cluster, if this replica is acting; the Node of a
 * terminated instance loses its finalizer. */
void provisioner_terminate_one(Provisioner *p, const char *instance_id);
/* Removes nodesmith's termination finalizer from the Node (if it has it). */
void provisioner_remove_finalizer(Provisioner *p, const char *node_name);

/* deadnode.c: nodes whose kubelet and agent are both gone are terminated without a drain and
 * their Nodes deleted (a pass from the housekeeping timer; a hook when EC2 confirms, told whether
 * the caller removed the Node's finalizer already). */
void provisioner_dead_nodes_pass(Provisioner *p);
void provisioner_dead_node_terminated(Provisioner *p, const char *instance_id, bool unfinalized);

/* events.c: an Event (its strings copied) sent when fewer than EVENTS_AT_ONCE are under way,
 * else queued; provision_events_close() drops the queue and sends nothing more (before the
 * Kubernetes client goes). */
void provision_event(Provisioner *p, const KubeEventInfo *ev);
void provision_events_close(Provisioner *p);

/* annotate.c: the NodePool's template annotations onto its node. */
void provisioner_annotate_node(Provisioner *p, const cJSON *node);

/* ---- what the files of provision/ share ---- */

uint64_t provision_now_usec(Provisioner *p);
uint64_t provision_clock_usec(void);
int provision_arch_index(const char *arch);
const char *provision_arch_of_type(const SolverInstanceType *t);
void provision_set_error(Provisioner *p, const char *fmt, ...) _printf_(2, 3);
int provision_watch(Provisioner *p, const char *path, const char *field_selector, kube_watch_event_t cb, KubeWatch **ret);
void provision_batch_close(Provisioner *p);
int provision_on_batch_timer(sd_event_source *s, uint64_t usec, void *userdata);
void provision_on_pod_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata);
void provision_on_other_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata);
void provision_inflight_free(InFlight *f);
InFlight *provision_inflight_find(Provisioner *p, const char *id);
int provision_inflight_add(Provisioner *p, const char *id, const char *pool, const char *type, const char *zone,
                        SolverCapacityType ct, uint64_t launched, size_t n_pods);
void provision_inflight_nominate(Provisioner *p, const char *id, const Round *rd, const SolverLaunch *l);
/* The in-flight instances' nominated pods ("namespace/uid"), sorted once (arena) so that each
 * pending pod of a snapshot is looked up in O(log n); valid while p->inflight is unchanged.
 * provision_inflight_nominated(): the first instance launched for the pod, or NULL. */
typedef struct InFlightIndex {
        const Provisioner *p;
        const struct NominatedKey *keys;
        size_t n;
} InFlightIndex;
int provision_inflight_index(const Provisioner *p, SolverArena *a, InFlightIndex *ret);
const InFlight *provision_inflight_nominated(const InFlightIndex *x, const char *key);
void provision_inflight_remove(Provisioner *p, size_t i);
bool provision_node_reported(Provisioner *p, const char *name);
int provision_forget_registered(const cJSON *node, void *userdata);
int provision_node_initializing(Provisioner *p, SolverArena *a, SolverNode *n);
void provision_on_node_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata);
bool provision_ice_marked(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct, uint64_t now);
void provision_ice_mark(Provisioner *p, const char *type, const char *zone, SolverCapacityType ct);
Resolved *provision_resolved_get(Provisioner *p, const char *node_class);
void provision_resolved_reset(Resolved *r);
void provision_resolved_free(Resolved *r);
void provision_launch_failed(Provisioner *p, const char *what, const Ec2Error *err);
size_t provision_selector_filters(Provisioner *p, const char *node_class, const char *field, Ec2Filter *f,
                               char names[][160], const char *values[][2]);
bool provision_prefetch(Provisioner *p, const char *node_class);
void provision_on_subnets(Ec2Client *ec2, const Ec2Error *err, Ec2SubnetList *list, void *userdata);
void provision_on_sgs(Ec2Client *ec2, const Ec2Error *err, Ec2SecurityGroupList *list, void *userdata);
int provision_profile_resolve(Provisioner *p, Round *rd, const char *node_class);
int provision_ami_lookup(Provisioner *p, Round *rd, const char *node_class);
/* amiterms.c: the image node_class's amiSelectorTerms give for arch (0 amd64, 1 arm64) now;
 * done() takes id (NULL on failure: err and what say why). */
typedef void (*provision_image_done_t)(Provisioner *p, const Ec2Error *err, const char *what, char *id, void *userdata);
int provision_image_resolve(Provisioner *p, const char *node_class, int arch, provision_image_done_t done,
                            void *userdata);
void provision_on_template(Ec2Client *ec2, const Ec2Error *err, Ec2LaunchTemplate *t, void *userdata);
int provision_template_for(Provisioner *p, Round *rd, const SolverLaunch *l, bool *ret_create,
                        Ec2LaunchTemplateSpec *spec, char **ret_userdata);
/* Starts launch `launch`'s CreateFleet; its answer is handled when it comes (the round goes on). */
int provision_fleet_start(Provisioner *p, Round *rd, size_t launch);
void provision_round_next(Provisioner *p);
void provision_round_finish(Provisioner *p);
void provision_round_start(Provisioner *p);
int provision_on_snapshot_slice(sd_event_source *s, uint64_t usec, void *userdata);
void provision_termination_pass(Provisioner *p);
void provision_catalog_swap(Provisioner *p);
void provision_catalog_refresh(Provisioner *p);
/* The node kube-scheduler's preemption nominated the pod to (its victims are going), or NULL. */
const char *provision_pod_nominated_node(const cJSON *pod);
