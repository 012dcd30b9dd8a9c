/* SPDX-License-Identifier: Apache-2.0 */
/* Draining a node within a deadline, as kubectl drain does. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "kube.h"
#include "kubenode.h"
#include "macro.h"
#include "nodesmith.pb-c.h"

/* Draining a node, as kubectl drain does it but within a deadline. The agent drains its own
 * node; the coordinator drains a node whose agent is silent, with the same code and the same
 * marks on the Node, so that either can pick up where the other left off:
 *  1. taint nodesmith.io/disrupted:NoSchedule and cordon (one strategic merge patch, guarded by
 *     the Node's resourceVersion; the annotation nodesmith.io/drain-cordoned records that
 *     nodesmith cordoned it, so a withdrawn drain uncordons only what nodesmith did);
 *  2. evict through the Eviction API every pod except DaemonSet and mirror pods, pods already
 *     terminating and finished pods; non-critical pods first, then system-*-critical ones;
 *     do-not-disrupt pods only when the drain is forced;
 *  3. a PDB refusal (429) is retried with back-off (1 s doubling to 5 s, jitter) until the pod
 *     can go; several PDBs (500) are reported and retried every 10 s; other failures back off;
 *  4. grace periods are capped so that the pod is gone before the deadline (deadline - now -
 *     safety margin, at least 1 s);
 *  5. the pods are gone when the informer drops them (or their uid changed): "drained".
 * Everything is recomputed from the informers' caches at every step, so a restarted agent (or the
 * coordinator taking over) that finds the taint resumes without repeating work (terminating pods
 * are never evicted again). */

typedef enum DrainPodClass {
        DRAIN_POD_SKIP_DAEMONSET,
        DRAIN_POD_SKIP_MIRROR,
        DRAIN_POD_SKIP_FINISHED,   /* Succeeded or Failed */
        DRAIN_POD_TERMINATING,     /* already going: waited for, never evicted */
        DRAIN_POD_HOLD,            /* do-not-disrupt, drain not forced: stays, the drain waits */
        DRAIN_POD_EVICT,
} DrainPodClass;

typedef struct DrainRequest {
        char reason[64];
        int64_t deadline_unix_ms;  /* 0: none */
        bool force;
        bool local;                /* started by the agent's own policy, not the coordinator */
} DrainRequest;

typedef struct DrainConfig {
        uint64_t safety_margin_ms;
        uint64_t backoff_min_ms;      /* PDB refusal back-off: from */
        uint64_t backoff_max_ms;      /* ... to */
        uint64_t multi_pdb_retry_ms;  /* several PDBs match the pod */
        uint64_t event_interval_ms;   /* at most one NodesmithEvictionBlocked event per interval */
        unsigned max_in_flight;       /* evictions at a time */
        const char *component;        /* Events' source */
        const char *host;
} DrainConfig;
#define DRAIN_CONFIG_DEFAULTS                                                                      \
        { .safety_margin_ms = 5000, .backoff_min_ms = 1000, .backoff_max_ms = 5000,                \
          .multi_pdb_retry_ms = 10000, .event_interval_ms = 30000, .max_in_flight = 32,            \
          .component = "nodesmith-agent" }

typedef struct DrainStatusInfo {
        Nodesmith__V1__DrainStatus__Phase phase;
        char reason[64];
        int64_t started_unix_ms;
        int64_t deadline_unix_ms;
        int32_t pods_left;
        int32_t pods_evicted;
        int32_t pods_blocked_by_pdb;
        char last_error[256];
        bool forced;
} DrainStatusInfo;

typedef struct Drain Drain;
typedef enum DrainEvent {
        DRAIN_EVENT_PROGRESS,  /* the status changed: report it */
        DRAIN_EVENT_DRAINED,   /* every pod that had to go is gone */
} DrainEvent;
typedef void (*drain_event_t)(Drain *d, DrainEvent ev, void *userdata);

int drain_new(sd_event *e, KubeClient *client, KubeNode *node, const DrainConfig *cfg, drain_event_t cb,
              void *userdata, Drain **ret);
Drain *drain_free(Drain *d);
DEFINE_TRIVIAL_CLEANUP_FUNC(Drain *, drain_free);

/* Start a drain, or update the one under way (reason, deadline, force). */
int drain_start(Drain *d, const DrainRequest *req);
/* The drain is withdrawn: untaint and uncordon if the agent did it. Also used after a restart
 * when the Node carries the agent's taint but no drain is wanted. */
int drain_stop(Drain *d);
/* Something changed (a pod, the Node): take the next step soon. */
void drain_kick(Drain *d);
bool drain_active(const Drain *d);
/* drain_stop() was called and the untaint/uncordon is not done yet. */
bool drain_undoing(const Drain *d);
bool drain_drained(const Drain *d);
void drain_status(const Drain *d, DrainStatusInfo *ret);
/* Evictions posted by this process (for the logs and tests). */
unsigned drain_evictions_posted(const Drain *d);

/* ---- pure pieces (exported for the unit tests) ---------------------------------------------- */

DrainPodClass drain_pod_class(const PodInfo *p, bool force);
/* Order of eviction: non-critical before critical, then lower priority, then lower deletion
 * cost, then namespace/name. */
int drain_pod_order(const PodInfo *a, const PodInfo *b);
/* The grace period to ask for: -1 (the pod's own) when it ends before deadline - margin, else
 * that remainder in whole seconds, at least 1. No deadline: -1. */
int64_t drain_grace_seconds(int64_t pod_grace_s, int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms);
/* The strategic merge patch that taints and cordons the Node (on) or undoes what nodesmith did
 * (off), guarded by its resourceVersion: 1 with *ret (the caller frees it), 0 when there is
 * nothing to change, -ENOENT without a Node or resourceVersion. */
int drain_node_patch(const cJSON *node, bool on, char **ret);
/* The same, with the taint only when taint is true (a node's own identity may not change its
 * taints: NodeRestriction). */
int drain_node_patch_with(const cJSON *node, bool on, bool taint, char **ret);
/* Back-off before retry n (n >= 1): min·2^(n-1) capped at max, with jitter in [d·3/4, d]. */
uint64_t drain_backoff_ms(unsigned n, uint64_t min_ms, uint64_t max_ms, uint32_t rnd);

/* drain-on: a set of Notice kinds ("spot,rebalance,maintenance", or "none"). Shutdown and the
 * Node's deletion are always in it. */
int drain_on_parse(const char *s, uint32_t *ret_mask);

/* What the agent wants, from the coordinator's directive and its own triggers. */
typedef struct DrainInputs {
        bool coordinator_drain;       /* the last directive says DRAIN */
        const char *coordinator_reason;
        int64_t coordinator_deadline_ms;
        bool coordinator_force;
        bool has_trigger;             /* a local reason to drain (notice, shutdown, deletion) */
        DrainRequest trigger;
        bool coordinator_saw_trigger; /* a reply answered a report that carried the trigger */
        bool connected;
        int64_t trigger_seen_ms;
        int64_t now_ms;
        uint64_t wait_ms;             /* how long the coordinator may take to answer a trigger */
} DrainInputs;
/* 1 with *ret filled when a drain is wanted, else 0. The coordinator's word wins once it has
 * seen the trigger; before that (unreachable or slower than wait_ms) the trigger drains. */
int drain_decide(const DrainInputs *in, DrainRequest *ret);
