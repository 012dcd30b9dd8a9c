/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "link.h"
#include "kube.h"
#include "agents/policy.h"
#include "agents/registry.h"
#include "http/promtext.h"

#define COORDINATOR_VERSION "0.1.0"

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

typedef enum ReportResult {
        REPORT_OK,
        REPORT_DUPLICATE,
        REPORT_INVALID,
        REPORT_UNAUTHENTICATED,
        REPORT_VERSION_MISMATCH,
        REPORT_OVERLOADED,
        REPORT_PENDING,                /* attestation waits for EC2: the agent sends again */
        REPORT_NODE_MISMATCH,          /* names a Node that is not its instance's (nodebind.h) */
        _REPORT_RESULT_MAX,
} ReportResult;

#define NOTICE_KINDS 6 /* Nodesmith__V1__Notice__Kind values */

typedef struct Metrics {
        uint64_t reports[_REPORT_RESULT_MAX];
        uint64_t reports_unchanged_total;
        uint64_t notices_total[NOTICE_KINDS];
        uint64_t notices_withdrawn_total[NOTICE_KINDS];
        uint64_t nodes_registered_total;
        uint64_t http_requests_total;
        uint64_t http_rejected_total;
        Histogram round_seconds;          /* observe.c renders these */
        Histogram solver_seconds;
        Histogram registration_seconds;
} Metrics;

typedef struct HttpServer HttpServer;
typedef struct ApiAuth ApiAuth;
typedef struct Attestor Attestor;
typedef struct Provisioner Provisioner;
typedef struct Leader Leader;
typedef struct ProxyDrains ProxyDrains;
typedef struct Interruption Interruption;
typedef struct FastPath FastPath;
typedef struct StatusWriter StatusWriter;

typedef struct Coordinator {
        sd_event *event;
        CoordConfig cfg;
        char *token;
        Registry registry;
        PbArena *scratch;              /* for report envelopes, reset per report */
        NoticePolicy drain_on;
        KubeClient *kube;              /* for the Lease */
        Leader *leader;
        Provisioner *provisioner;
        StatusWriter *status;          /* NodePool and EC2NodeClass status, with the provisioner */
        ProxyDrains *proxy_drains;     /* drains for silent agents; set up with the provisioner */
        Interruption *interruption;    /* the interruption queue, when configured */
        bool leading;
        LinkServer *link;
        FastPath *fast;                /* unchanged reports answered in NNG's threads; NULL: off */
        sd_event_source *fast_timer;   /* takes back what they saw */
        HttpServer *http;              /* http-listen: health and metrics (and /api/v1 when api-listen is the same) */
        HttpServer *api;               /* api-listen, when it is another address */
        ApiAuth *api_auth;             /* api-auth=kubernetes */
        Attestor *attest;              /* NULL when attestation is off */
        Metrics metrics;
        uint64_t start_usec;
        uint64_t auth_log_usec[_REPORT_RESULT_MAX];   /* rate limit for refusal logs, per result */
        uint64_t auth_suppressed[_REPORT_RESULT_MAX];
} Coordinator;

int coordinator_new(Coordinator **ret);
Coordinator *coordinator_free(Coordinator *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Coordinator *, coordinator_free);
int coordinator_validate(Coordinator *c);
int coordinator_start(Coordinator *c);
int coordinator_run(Coordinator *c);
uint64_t coordinator_now(Coordinator *c);

/* server.c: one agent report in, one directive out. */
int coordinator_handle_report(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                              size_t *ret_len, void *userdata);
/* server.c, in NNG's threads: an unchanged report answered at once (a link_fast_t; fastpath.h). */
int coordinator_fast_answer(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size, size_t *ret_len,
                            void *userdata);
/* server.c, on the loop: what the fast answers saw into the registry and the metrics. */
void coordinator_fast_sync(Coordinator *c);
const char *report_result_to_string(ReportResult r);
/* "spot_interruption", "rebalance", ... */
const char *notice_kind_to_string(int kind);
/* A notice recorded first (added) or withdrawn: counted and logged once (a notice_change_t). */
void coordinator_notice_changed(const NodeEntry *e, const NoticeRecord *n, bool added, void *userdata);
/* The node's notices changed (from its agent or the interruption queue): the directive they call
 * for under drain-on; a new drain plans replacement capacity at once. */
void coordinator_apply_notices(Coordinator *c, NodeEntry *e);

/* httpd.c: /metrics, /healthz, /readyz, /api/v1/nodes served from the loop. */
/* What one HTTP listener serves: health and metrics (open), and/or /api/v1 (authenticated through
 * auth unless NULL: apiauth.h). */
#define HTTP_SERVE_HEALTH 1u
#define HTTP_SERVE_API 2u
int http_server_new(Coordinator *c, const char *url, unsigned roles, ApiAuth *auth, HttpServer **ret);
HttpServer *http_server_free(HttpServer *h);

/* api.c: what the HTTP endpoints answer. */
const char *capacity_type_name(Nodesmith__V1__CapacityType t); /* "spot", "on-demand" or "" */
int metrics_render(Coordinator *c, char **ret, size_t *ret_len);
int api_nodes_render(Coordinator *c, char **ret, size_t *ret_len);
int api_provisioning_render(Coordinator *c, char **ret, size_t *ret_len);
/* /api/v1/disruption: the last disruption pass explained (nodesmithctl explain). */
int api_disruption_render(Coordinator *c, char **ret, size_t *ret_len);
