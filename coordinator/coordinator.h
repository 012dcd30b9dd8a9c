/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator process: its configuration and the pieces it wires together. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "link.h"
#include "kube.h"
#include "agents/policy.h"
#include "agents/registry.h"
#include "agents/server.h" /* COORDINATOR_VERSION */

typedef struct CoordConfig {
        char *listen;
        bool insecure;
        char *tls_cert;
        char *tls_key;
        char *token;
        char *token_file;
        char *http_listen;
        char *api_listen;
        char *api_auth;
        uint64_t report_interval_ms;   /* asked of agents */
        uint64_t max_nodes;
        uint64_t max_pods_per_node;
        uint64_t max_notices_per_node;
        uint64_t max_message;
        uint64_t max_connections;
        uint64_t max_connections_per_source;
        uint64_t max_unauthenticated;
        uint64_t max_unauthenticated_per_source;
        uint64_t auth_timeout_ms;
        uint64_t idle_timeout_ms;
        uint64_t max_state_memory;
        uint64_t stale_after_ms;
        bool fast_answers;
        char *drain_on;
        /* provisioning */
        char *cluster_name;
        char *kube_server;
        char *kubeconfig;
        char *region;
        char *ec2_endpoint;
        char *ssm_endpoint;
        char *iam_endpoint;
        uint64_t image_refresh_ms;
        char *interruption_queue;
        char *sqs_endpoint;
        char *catalog;
        char *price_table;
        uint64_t catalog_refresh_ms;
        uint64_t batch_idle_ms;
        uint64_t batch_max_ms;
        uint64_t solver_budget_ms;       /* 0: the solver runs to the end */
        uint64_t registration_timeout_ms;
        uint64_t termination_grace_ms;
        uint64_t dead_node_after_ms;     /* Ready Unknown and agent silent this long: terminated (0: never) */
        uint64_t agent_silent_intervals; /* report intervals: then a leaving node is drained for its agent */
        uint64_t max_proxy_drains;
        uint64_t consolidation_interval_ms;
        uint64_t consolidation_validation_ms;
        bool spot_to_spot;
        char *kubernetes_version;
        char *instance_profile;
        char *agent_image;
        char *cluster_endpoint;
        char *cluster_ca;
        char *cluster_cidr;
        char *agent_endpoint;
        char *agent_ca;
        char *agent_tls_server_name;
        bool leader_elect;
        char *lease_namespace;
        char *lease_name;
        uint64_t lease_duration_ms;
        uint64_t lease_renew_deadline_ms, lease_retry_ms;
        char *identity;
        char *log_level;
        /* attestation (attest.h) */
        char *attestation;
        char *attestation_ca;
} CoordConfig;

extern const Option coord_options[];
extern const size_t coord_options_count;

typedef struct HttpServer HttpServer;
typedef struct Interruption Interruption;
typedef struct Leader Leader;
typedef struct ApiAuth ApiAuth;
typedef struct Disruption Disruption;
typedef struct Provisioner Provisioner;
typedef struct StatusWriter StatusWriter;

/* The process: it owns every piece and wires them; none of them sees it. */
typedef struct Coordinator {
        sd_event *event;
        CoordConfig cfg;
        char *token;
        Registry registry;             /* the nodes that report: the server writes, others read */
        NoticePolicy drain_on;
        KubeClient *kube;              /* for the Lease */
        Leader *leader;
        AgentServer *agents;           /* reports in, directives out */
        Provisioner *provisioner;      /* with disruption and the drains for silent agents */
        StatusWriter *status;          /* NodePool and EC2NodeClass status, with the provisioner */
        Disruption *disruption;        /* what to remove, on the provisioner's snapshot */
        Interruption *interruption;    /* the interruption queue, when configured */
        bool leading;
        LinkServer *link;
        FastPath *fast;                /* unchanged reports answered in NNG's threads; NULL: off */
        sd_event_source *fast_timer;   /* takes back what they saw */
        bool stopping;                 /* a stop signal came: the Lease is being released */
        HttpServer *http;              /* http-listen: health and metrics (and /api/v1 when api-listen is the same) */
        HttpServer *api;               /* api-listen, when it is another address */
        ApiAuth *api_auth;             /* api-auth=kubernetes */
        Attestor *attest;              /* NULL when attestation is off */
        uint64_t start_usec;
} Coordinator;

int coordinator_new(Coordinator **ret);
Coordinator *coordinator_free(Coordinator *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Coordinator *, coordinator_free);
int coordinator_validate(Coordinator *c);
int coordinator_start(Coordinator *c);
int coordinator_run(Coordinator *c);
uint64_t coordinator_now(Coordinator *c);
