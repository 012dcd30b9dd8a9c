/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "capacity.h"
#include "imds.h"
#include "config.h"
#include "drain.h"
#include "kube.h"
#include "kubenode.h"
#include "link.h"
#include "logind.h"
#include "macro.h"
#include "nodesmith.pb-c.h"

#define AGENT_VERSION "0.1.0"

typedef struct AgentConfig {
        char *coordinator;
        bool insecure;
        char *tls_ca;
        char *tls_server_name;
        char *token;
        char *token_file;
        uint64_t report_interval_ms;
        uint64_t request_timeout_ms;
        uint64_t max_message;
        char *root;
        char *kubelet_config;
        char *boot_secret_file;
        char *kubelet_root_dir;
        char *eni_max_pods_file;
        uint64_t max_pods;
        char *node_name;
        char *instance_id;
        char *instance_type;
        char *zone;
        char *region;
        char *capacity_type;
        char *arch;
        char *nodepool;
        char *log_level;
        bool imds;
        char *imds_endpoint;
        uint64_t imds_poll_interval_ms;
        uint64_t imds_token_ttl_s;
        uint64_t imds_timeout_ms;
        bool logind;
        char *kube_server;
        char *kubeconfig;
        char *kube_token_file;
        char *kube_ca;
        char *drain_on;
        uint64_t finalizer_timeout_ms;
        uint64_t drain_safety_margin_ms;
} AgentConfig;

extern const Option agent_options[];
extern const size_t agent_options_count;

typedef struct Manager {
        sd_event *event;
        AgentConfig cfg;
        char *token;                 /* resolved from token or token-file */
        char boot_id[40];
        char hostname[256];

        LinkClient *link;
        uint64_t link_opened_usec;   /* when the link's socket was made */
        bool relink;                 /* start over with a new socket at the next report */
        ImdsWatcher *imds;           /* NULL with imds=no */
        Logind *logind;              /* NULL without a system bus or with logind=no */
        sd_event_source *shutdown_timer; /* releases the delay lock before logind gives up */
        bool shutting_down;          /* PrepareForShutdown(true) seen */
        int64_t shutdown_seen_ms;
        int64_t shutdown_deadline_ms;
        uint64_t shutdown_sequence;  /* first report that carried the shutdown notice */
        sd_event_source *report_timer;

        NodeResources capacity;
        NodeResources allocatable;
        char *capacity_error;        /* last failure to read capacity, logged once */

        uint64_t sequence;
        uint64_t interval_usec;      /* current reporting interval */
        unsigned failures;           /* consecutive failed reports */
        bool connected;
        bool dirty;                  /* something changed: report at once */
        uint64_t last_ok_usec;       /* CLOCK_MONOTONIC of the last answered report */

        /* desired state from the coordinator */
        Nodesmith__V1__NodeDirective__Action action;
        char *drain_reason;
        int64_t drain_deadline_ms;
        bool drain_force;
        bool directive_received;     /* at least one reply since start */
        uint8_t boot_secret[32];     /* from the coordinator (NodeDirective.boot_secret), sent back */
        char boot_secret_path[4200]; /* under root; "" when not kept (bootsecret.h) */
        size_t boot_secret_len;
        size_t scheduling_truncated;  /* pods whose scheduling the last report left out */
        bool attested;               /* the coordinator holds this boot's attestation: the
                                      * identity document stays out of reports */

        /* Kubernetes: the own Node and its pods, and drains (NULL without API access) */
        KubeClient *kube;
        KubeNode *kube_node;
        Drain *drain;
        uint32_t drain_on;           /* bit per Notice kind */
        sd_event_source *pods_timer; /* coalesces bursts of pod changes into one report */
        sd_event_source *tick_timer; /* drain decisions and the finalizer time-out */
        char trigger_key[96];        /* the local reason to drain now ("" for none) */
        uint64_t trigger_sequence;   /* first report that carried it */
        bool trigger_acked;          /* the coordinator answered such a report */
        int64_t trigger_seen_ms;
        bool taint_checked;          /* after a restart: leftover taint looked at */
        int64_t drained_at_ms;       /* since when the drain is complete (0: it is not) */
        bool finalizer_removal_started;
        bool finalizer_removed;      /* by the agent: never added again by this process */
} Manager;

int manager_new(Manager **ret);
Manager *manager_free(Manager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(Manager *, manager_free);

/* Read the node's capacity and compute allocatable; 0 when unchanged, 1 when changed. */
int manager_refresh_capacity(Manager *m);
int manager_validate(Manager *m);
int manager_start(Manager *m);
int manager_run(Manager *m);
/* Request a report as soon as possible (a change happened). */
void manager_report_soon(Manager *m);
/* The local reason to drain, if any (notices per drain-on, shutdown, Node deletion). */
bool manager_local_trigger(Manager *m, DrainRequest *ret);

/* report.c: the AgentReport for the current state, packed; and as JSON for --once. */
int report_pack(Manager *m, uint8_t **ret, size_t *ret_len);
/* One pod of the report, from what the watch parsed (in) and its object (obj, for Pod.scheduling,
 * within *scheduling_budget, which it reduces; 16 KiB at most). pb points into in and *ret_scheduling
 * (owned by the caller, NULL when none). 1: scheduling left out (over budget), 0 otherwise. */
int report_pod_to_pb(PodInfo *in, const cJSON *obj, size_t *scheduling_budget, Nodesmith__V1__Pod *pb,
                     Nodesmith__V1__Resources *requests, char **ret_scheduling);
int report_print_json(Manager *m, FILE *f);
/* Apply a coordinator's reply. */
int directive_apply(Manager *m, const uint8_t *buf, size_t len);
