/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator process: the sd-event loop and the wiring of its subsystems (its options are
 * options.c's). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "agents/attest.h"
#include "agents/fastpath.h"
#include "agents/server.h"
#include "coordinator.h"
#include "daemon.h"
#include "disruption/disruption.h"
#include "fileio.h"
#include "http/api.h"
#include "http/apiauth.h"
#include "http/httpd.h"
#include "interruption/interruption.h"
#include "leader.h"
#include "log.h"
#include "macro.h"
#include "observe.h"
#include "procmetrics.h"
#include "provision/provisioner.h"
#include "status/events.h"
#include "status/nodeclaims.h"
#include "status/status.h"

int coordinator_new(Coordinator **ret) {
        Coordinator *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        int r = sd_event_default(&c->event);
        if (r < 0) {
                free(c);
                return r;
        }
        *ret = c;
        return 0;
}

Coordinator *coordinator_free(Coordinator *c) {
        if (!c)
                return NULL;
        interruption_free(c->interruption);
        status_writer_free(c->status); /* before the provisioner: it writes through its client */
        disruption_free(c->disruption); /* before the provisioner it decides on */
        provisioner_free(c->provisioner);
        attestor_free(c->attest);
        leader_free(c->leader);
        api_auth_free(c->api_auth); /* first: reviews in flight are answered 503, or the servers' stop waits */
        http_server_free(c->http);
        http_server_free(c->api);
        kube_client_free(c->kube);
        link_server_free(c->link); /* first: no fast answer runs after it */
        sd_event_source_disable_unref(c->fast_timer);
        c->registry.forget = NULL;
        agent_server_free(c->agents);
        fast_path_free(c->fast);
        registry_done(&c->registry);
        sd_event_unref(c->event);
        config_free(coord_options, coord_options_count, &c->cfg);
        if (c->token)
                explicit_bzero(c->token, strlen(c->token));
        free(c->token);
        free(c);
        return NULL;
}

uint64_t coordinator_now(Coordinator *c) {
        uint64_t t = 0;
        (void) sd_event_now(c->event, CLOCK_MONOTONIC, &t);
        return t;
}

static int read_token_file(const char *path, char **ret) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        int r = read_secret_file(path, 4096, &buf, &len);
        if (r < 0)
                return r;
        buf[strcspn(buf, "\r\n")] = 0;
        if (strlen(buf) < 16) {
                explicit_bzero(buf, len);
                return -EKEYREJECTED;
        }
        *ret = strdup(buf);
        explicit_bzero(buf, len);
        return *ret ? 0 : -ENOMEM;
}

/* The attestor, when attestation is on: it needs the cluster's tag and the certificates. */
static int coordinator_validate_attestation(Coordinator *c) {
        const CoordConfig *cfg = &c->cfg;
        _cleanup_(attest_trust_freep) AttestTrust *trust = NULL;
        AttestMode mode;
        int r;

        if (attest_mode_from_string(cfg->attestation, &mode) < 0)
                return log_error_errno(EINVAL, "attestation '%s': expected required, warn or off.",
                                       strempty(cfg->attestation));
        if (mode == ATTEST_OFF) {
                log_warning("Attestation off (set explicitly): any holder of the bootstrap token can report as any instance.");
                return 0;
        }
        if (isempty(cfg->cluster_name))
                return log_error_errno(EINVAL, "attestation=%s needs cluster-name (the nodesmith.io/cluster tag "
                                       "instances must carry) and EC2; attestation=off, set explicitly, lets any "
                                       "holder of the token report as any instance.", attest_mode_to_string(mode));
        r = attest_trust_from_file(strempty(cfg->attestation_ca), &trust);
        if (r < 0)
                return log_error_errno(r, "attestation-ca %s: %s.", strempty(cfg->attestation_ca),
                                       r == -ENOKEY ? "no PEM certificate in it" : strerror(-r));
        size_t n = attest_trust_count(trust);
        AttestConfig ac = { .mode = mode, .region = cfg->region, .cluster = cfg->cluster_name,
                            .max_entries = cfg->max_nodes + 256 };
        attestor_free(c->attest);
        c->attest = NULL;
        r = attestor_new(&ac, TAKE_PTR(trust), &c->attest);
        if (r < 0)
                return log_oom();
        log_info("Attestation %s: %zu trusted signer certificate(s) from %s, region %s, cluster %s.",
                 attest_mode_to_string(mode), n, cfg->attestation_ca, cfg->region, cfg->cluster_name);
        return 0;
}

int coordinator_validate(Coordinator *c) {
        CoordConfig *cfg = &c->cfg;
        const char *why = NULL;
        int r;

        if (cfg->log_level) {
                r = log_parse_level(cfg->log_level);
                if (r < 0)
                        return log_error_errno(r, "Unknown log level '%s'.", cfg->log_level);
                log_set_max_level(r);
        }
        r = link_url_check(cfg->listen, cfg->insecure, &why);
        if (r < 0)
                return log_error_errno(r, "listen '%s': %s.", strempty(cfg->listen), why);
        if (strncmp(cfg->listen, "tls+", 4) == 0) {
                if (isempty(cfg->tls_cert) || access(cfg->tls_cert, R_OK) < 0)
                        return log_error_errno(ENOKEY, "tls-cert %s is not readable.", strempty(cfg->tls_cert));
                if (isempty(cfg->tls_key) || access(cfg->tls_key, R_OK) < 0)
                        return log_error_errno(ENOKEY, "tls-key %s is not readable.", strempty(cfg->tls_key));
        }
        if (!isempty(cfg->token)) {
                if (strlen(cfg->token) < 16)
                        return log_error_errno(EKEYREJECTED, "token must be at least 16 characters.");
                c->token = strdup(cfg->token);
                if (!c->token)
                        return log_oom();
        } else {
                r = read_token_file(strempty(cfg->token_file), &c->token);
                if (r == -EKEYREJECTED)
                        return log_error_errno(r, "The token in %s must be at least 16 characters.",
                                               cfg->token_file);
                if (r == -EPERM)
                        return log_error_errno(r, "token-file %s may be read or written by others (or written by its "
                                               "group): refusing it; chmod 0600 (or 0400/0440).", cfg->token_file);
                if (r < 0)
                        return log_error_errno(r, "No bootstrap token: cannot read token-file %s: %m",
                                               strempty(cfg->token_file));
        }
        r = notice_policy_parse(strempty(cfg->drain_on), &c->drain_on);
        if (r < 0)
                return log_error_errno(r, "drain-on '%s': expected a list of spot, rebalance, maintenance.",
                                       strempty(cfg->drain_on));
        if (cfg->report_interval_ms < 100 || cfg->report_interval_ms > 3600 * 1000)
                return log_error_errno(EINVAL, "report-interval must be within 100ms..1h.");
        if (cfg->max_nodes < 1 || cfg->max_nodes > 100000)
                return log_error_errno(EINVAL, "max-nodes must be within 1..100000.");
        if (cfg->agent_silent_intervals < 1 || cfg->agent_silent_intervals > 1000)
                return log_error_errno(EINVAL, "agent-silent-intervals must be within 1..1000.");
        if (cfg->max_proxy_drains > 1000)
                return log_error_errno(EINVAL, "max-proxy-drains must be at most 1000 (0: never drain for a silent agent).");
        if (cfg->max_message < 4096 || cfg->max_message > 64 * 1024 * 1024)
                return log_error_errno(EINVAL, "max-message must be within 4Ki..64Mi.");
        if (cfg->max_connections < 1 || cfg->max_connections_per_source < 1 || cfg->max_unauthenticated < 1 ||
            cfg->max_unauthenticated_per_source < 1)
                return log_error_errno(EINVAL, "max-connections, max-connections-per-source, max-unauthenticated and "
                                       "max-unauthenticated-per-source must be 1 at least.");
        if (cfg->auth_timeout_ms < 100)
                return log_error_errno(EINVAL, "auth-timeout must be 100ms at least.");
        if (cfg->max_state_memory < cfg->max_message)
                return log_error_errno(EINVAL, "max-state-memory must be at least max-message.");
        if (!isempty(cfg->cluster_name) && !isempty(cfg->agent_endpoint) &&
            link_url_check(cfg->agent_endpoint, false, NULL) < 0 && !cfg->insecure)
                return log_error_errno(EINVAL, "agent-endpoint must be tls+tcp://HOST:PORT.");
        if (!isempty(cfg->http_listen) && strncmp(cfg->http_listen, "http://", 7) != 0)
                return log_error_errno(EINVAL, "http-listen must be http://HOST:PORT.");
        if (!isempty(cfg->api_listen) && strncmp(cfg->api_listen, "http://", 7) != 0)
                return log_error_errno(EINVAL, "api-listen must be http://HOST:PORT.");
        if (!streq_ptr(cfg->api_auth, "kubernetes") && !streq_ptr(cfg->api_auth, "none"))
                return log_error_errno(EINVAL, "api-auth '%s': expected kubernetes or none.", strempty(cfg->api_auth));
        if (streq_ptr(cfg->api_auth, "none") && !isempty(cfg->api_listen))
                log_warning("api-auth=none: anyone who reaches %s reads /api/v1 (instance ids, drains, blocking pods).",
                            cfg->api_listen);
        if (!isempty(cfg->interruption_queue) &&
            ((strncmp(cfg->interruption_queue, "https://", 8) != 0 && strncmp(cfg->interruption_queue, "http://", 7) != 0) ||
             strlen(cfg->interruption_queue) > 1024))
                return log_error_errno(EINVAL, "interruption-queue must be the queue's URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME).");
        return coordinator_validate_attestation(c);
}

#define RELEASE_WAIT_USEC (2 * USEC_PER_SEC)

static void on_released(Leader *l, bool ok, void *userdata) {
        Coordinator *c = userdata;
        (void) sd_event_exit(c->event, 0);
}

static int on_release_late(sd_event_source *s, uint64_t usec, void *userdata) {
        Coordinator *c = userdata;
        log_warning("The Lease release was not answered within %llu s; stopping without it.",
                    (unsigned long long) (RELEASE_WAIT_USEC / USEC_PER_SEC));
        return sd_event_exit(c->event, 0);
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Coordinator *c = userdata;
        if (si->ssi_signo == SIGHUP) {
                log_info("SIGHUP ignored: restart to apply a new configuration.");
                return 0;
        }
        log_info("Received %s, stopping.", strsignal((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        if (c->stopping || !c->leader) /* a second signal does not wait for the release */
                return sd_event_exit(c->event, 0);
        c->stopping = true;
        /* the leader hands the Lease over (client-go's ReleaseOnCancel) for RELEASE_WAIT_USEC at
         * most: a standby takes it at its next look instead of after the lease duration */
        int r = leader_release(c->leader, on_released, c);
        if (r <= 0) {
                if (r < 0)
                        log_warning_errno(r, "Cannot release the Lease: %m; it expires by itself.");
                return sd_event_exit(c->event, 0);
        }
        r = sd_event_add_time_relative(c->event, NULL, CLOCK_MONOTONIC, RELEASE_WAIT_USEC, 0, on_release_late, c);
        return r < 0 ? sd_event_exit(c->event, 0) : 0;
}

static void on_leading(Leader *l, bool leading, void *userdata) {
        Coordinator *c = userdata;
        c->leading = leading;
        provisioner_set_leading(c->provisioner, leading);
        interruption_set_active(c->interruption, leading);
        if (leading)
                status_writer_poke(c->status);
        else if (c->link) {
                /* the agents dial again through the Service, which sends them to the ready
                 * replica (the new leader); a standby neither hears nor directs them */
                int n = link_server_close_peers(c->link);
                if (n > 0)
                        log_notice("Standing by: closed %d agent connection(s); they reconnect to the leader.", n);
        }
        (void) sd_notifyf(false, "STATUS=%s", leading ? "Leading" : "Standing by");
}

/* The coordinator's own Kubernetes client (the Lease, the API's TokenReviews), made once. */
static int coordinator_kube(Coordinator *c) {
        const CoordConfig *cfg = &c->cfg;
        _cleanup_(kube_config_freep) KubeConfig *kc = NULL;
        int r;

        if (c->kube)
                return 0;
        if (!isempty(cfg->kube_server))
                r = kube_config_new(cfg->kube_server, &kc);
        else if (!isempty(cfg->kubeconfig))
                r = kube_config_from_kubeconfig(cfg->kubeconfig, NULL, &kc);
        else
                r = kube_config_in_cluster(NULL, &kc);
        if (r >= 0)
                r = kube_client_new(c->event, kc, &c->kube);
        return r;
}

/* Leader election through a Lease, or lead alone when it is off. */
static int coordinator_elect(Coordinator *c) {
        const CoordConfig *cfg = &c->cfg;
        char identity[300];
        int r;

        if (!cfg->leader_elect) {
                on_leading(NULL, true, c);
                return 0;
        }
        r = coordinator_kube(c);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the Kubernetes client for leader election: %m");
        if (isempty(cfg->identity)) {
                char host[256] = "coordinator";
                (void) gethostname(host, sizeof host - 1);
                snprintf(identity, sizeof identity, "%s_%d", host, (int) getpid());
        } else
                snprintf(identity, sizeof identity, "%s", cfg->identity);
        LeaderConfig lc = { .namespace = cfg->lease_namespace, .name = cfg->lease_name, .identity = identity,
                            .lease_usec = cfg->lease_duration_ms * USEC_PER_MSEC,
                            .renew_deadline_usec = cfg->lease_renew_deadline_ms * USEC_PER_MSEC,
                            .retry_usec = cfg->lease_retry_ms * USEC_PER_MSEC };
        r = leader_new(c->event, c->kube, &lc, on_leading, c, &c->leader);
        if (r == -EINVAL)
                return log_error_errno(r, "Failed to set up leader election: --lease-retry-period < --lease-renew-deadline < --lease-duration does not hold.");
        if (r < 0)
                return log_error_errno(r, "Failed to set up leader election: %m");
        log_info("Leader election: Lease %s/%s as %s.", cfg->lease_namespace, cfg->lease_name, identity);
        return 0;
}

/* How often what the fast answers saw is taken back, and a changed directive reaches them. */
#define FAST_SYNC_USEC (50 * USEC_PER_MSEC)

static int on_fast_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Coordinator *c = userdata;
        agent_server_fast_sync(c->agents);
        return sd_event_source_set_time(s, usec + FAST_SYNC_USEC);
}

/* ---- the ports: what each piece asks of the others, answered here -------------------------- */

static uint64_t port_now(void *userdata) {
        return coordinator_now(userdata);
}

static void port_node_leaving(void *userdata, const NodeEntry *e) {
        Coordinator *c = userdata;
        provisioner_node_leaving(c->provisioner, e);
}

static void port_agent_reported(void *userdata, const NodeEntry *e) {
        Coordinator *c = userdata;
        proxy_drains_agent_reported(provisioner_proxy_drains(c->provisioner), e);
}

static void port_registry_forget(void *userdata, const char *instance_id) {
        Coordinator *c = userdata;
        agent_server_fast_forget(c->agents, instance_id);
}

static const KubeWatch *port_nodes(void *userdata) {
        Coordinator *c = userdata;
        return provisioner_nodes(c->provisioner);
}

static void port_notice_event(void *userdata, const NodeEntry *e, const char *kind, const char *event_id,
                              int64_t deadline_in_ms, bool added) {
        Coordinator *c = userdata;
        events_notice(c->provisioner, e, kind, event_id, deadline_in_ms, added);
}

static void port_drain_event(void *userdata, const NodeEntry *e, bool drain) {
        Coordinator *c = userdata;
        events_notice_drain(c->provisioner, e, drain);
}

static bool port_acting(void *userdata) {
        Coordinator *c = userdata;
        return !c->leader || leader_is_leading(c->leader);
}

static const char *port_acting_as(void *userdata) {
        Coordinator *c = userdata;
        return c->leader ? leader_identity(c->leader) : NULL;
}

static void port_new_instance(void *userdata, const char *instance_id) {
        Coordinator *c = userdata;
        disruption_launched(c->disruption, instance_id);
}

static void port_nominated(void *userdata, const char *node) {
        Coordinator *c = userdata;
        disruption_nominated(c->disruption, node);
}

static void port_disrupt(void *userdata) {
        Coordinator *c = userdata;
        (void) disruption_pass(c->disruption); /* a failure is logged and counted; the next pass tries again */
}

static void port_launched(void *userdata, const char *instance_id, const char *instance_type, const char *zone,
                          const char *capacity_type, const Round *rd, const SolverLaunch *l) {
        Coordinator *c = userdata;
        nodeclaims_launched(c->status, instance_id, instance_type, zone, capacity_type, rd, l);
}

static void port_launch_failed(void *userdata, const Round *rd, const SolverLaunch *l, const char *step,
                               const char *code, const char *message) {
        Coordinator *c = userdata;
        nodeclaims_launch_failed(c->status, rd, l, step, code, message);
}

static void port_decided(void *userdata, const Round *rd) {
        Coordinator *c = userdata;
        events_pod_decisions(c->provisioner, rd);
}

static int port_find_node(void *userdata, const char *instance_id, const cJSON **ret) {
        Coordinator *c = userdata;
        return c->provisioner ? provisioner_find_node(c->provisioner, instance_id, ret) : -ENOENT;
}

static bool port_instance_leaving(void *userdata, const char *instance_id) {
        Coordinator *c = userdata;
        return c->provisioner && provisioner_instance_leaving(c->provisioner, instance_id);
}

static bool port_launch_unanswered(void *userdata) {
        Coordinator *c = userdata;
        return c->provisioner && provisioner_launch_unanswered(c->provisioner);
}

static void port_notice_added(void *userdata, const NodeEntry *e, const NoticeRecord *n) {
        Coordinator *c = userdata;
        agent_server_notice_changed(e, n, true, c->agents);
}

static void port_apply_notices(void *userdata, NodeEntry *e) {
        Coordinator *c = userdata;
        agent_server_apply_notices(c->agents, e);
}

static bool port_ready(void *userdata) {
        Coordinator *c = userdata;
        return c->link != NULL && (!c->provisioner || c->leading);
}

static void port_more_metrics(void *userdata, StrBuf *b) {
        Coordinator *c = userdata;
        if (c->disruption)
                disruption_metrics(c->disruption, b);
        ObserveSources os = { .registry = &c->registry, .provisioner = c->provisioner, .leader = c->leader,
                              .status = c->status };
        observe_metrics(&os, b);
        process_metrics(b);
}

static int port_render(void *userdata, HttpPage page, char **ret, size_t *ret_len) {
        Coordinator *c = userdata;
        ApiView v = { .registry = &c->registry, .agents = agent_server_metrics(c->agents), .link = c->link,
                      .http_requests = http_server_requests(c->http) + http_server_requests(c->api), .leading = c->leading,
                      .now_usec = coordinator_now(c), .provisioner = c->provisioner, .attest = c->attest,
                      .proxy_drains = provisioner_proxy_drains(c->provisioner),
                      .interruption = c->interruption, .disruption = c->disruption, .api_auth = c->api_auth, .userdata = c,
                      .more_metrics = port_more_metrics };
        return api_render(&v, page, ret, ret_len);
}

/* What the provisioner needs of the configuration. */
static ProvisionerConfig provisioner_config(const Coordinator *c) {
        const CoordConfig *cfg = &c->cfg;
        return (ProvisionerConfig) {
                .cluster_name = cfg->cluster_name, .kube_server = cfg->kube_server, .kubeconfig = cfg->kubeconfig,
                .region = cfg->region, .ec2_endpoint = cfg->ec2_endpoint, .ssm_endpoint = cfg->ssm_endpoint,
                .iam_endpoint = cfg->iam_endpoint,
                .catalog = cfg->catalog, .price_table = cfg->price_table, .catalog_refresh_ms = cfg->catalog_refresh_ms,
                .image_refresh_ms = cfg->image_refresh_ms,
                .batch_idle_ms = cfg->batch_idle_ms, .batch_max_ms = cfg->batch_max_ms,
                .solver_budget_ms = cfg->solver_budget_ms, .registration_timeout_ms = cfg->registration_timeout_ms,
                .dead_node_after_ms = cfg->dead_node_after_ms,
                .report_interval_ms = cfg->report_interval_ms, .stale_after_ms = cfg->stale_after_ms,
                .kubernetes_version = cfg->kubernetes_version, .instance_profile = cfg->instance_profile,
                .agent_image = cfg->agent_image,
                .cluster_endpoint = cfg->cluster_endpoint, .cluster_ca = cfg->cluster_ca,
                .cluster_cidr = cfg->cluster_cidr, .agent_endpoint = cfg->agent_endpoint, .agent_ca = cfg->agent_ca,
                .agent_tls_server_name = cfg->agent_tls_server_name, .token = c->token,
                .consolidation_interval_ms = cfg->consolidation_interval_ms,
                .proxy_drains = { .report_interval_ms = cfg->report_interval_ms,
                                  .agent_silent_intervals = cfg->agent_silent_intervals,
                                  .termination_grace_ms = cfg->termination_grace_ms,
                                  .max_proxy_drains = cfg->max_proxy_drains },
        };
}

/* health and metrics on http-listen, /api/v1 on api-listen (the same listener when equal) */
static int coordinator_serve_http(Coordinator *c) {
        const CoordConfig *cfg = &c->cfg;
        HttpPorts hp = { .userdata = c, .ready = port_ready, .render = port_render };
        bool same = !isempty(cfg->api_listen) && streq_ptr(cfg->api_listen, cfg->http_listen);
        int r;

        if (!isempty(cfg->api_listen) && streq(cfg->api_auth, "kubernetes")) {
                r = coordinator_kube(c);
                if (r >= 0)
                        r = api_auth_new(c->kube, &c->api_auth);
                if (r < 0)
                        return log_error_errno(r, "api-auth=kubernetes needs the Kubernetes API (kube-server, kubeconfig "
                                               "or in-cluster) for TokenReviews: %m; api-auth=none serves /api/v1 to anyone.");
        }
        if (!isempty(cfg->http_listen)) {
                r = http_server_new(c->event, cfg->http_listen, HTTP_SERVE_HEALTH | (same ? HTTP_SERVE_API : 0),
                                    c->api_auth, &hp, &c->http);
                if (r < 0)
                        return log_error_errno(r, "Failed to serve HTTP on %s: %m", cfg->http_listen);
        }
        if (!isempty(cfg->api_listen) && !same) {
                r = http_server_new(c->event, cfg->api_listen, HTTP_SERVE_API, c->api_auth, &hp, &c->api);
                if (r < 0)
                        return log_error_errno(r, "Failed to serve the API on %s: %m", cfg->api_listen);
        }
        return 0;
}

int coordinator_start(Coordinator *c) {
        int r;

        r = registry_init(&c->registry, c->cfg.max_nodes);
        if (r < 0)
                return log_oom();
        c->registry.max_state_memory = c->cfg.max_state_memory;
        if (c->cfg.fast_answers) {
                /* an agent silent long enough to be taken for dead goes through the loop */
                uint64_t fresh_ms = MIN(c->cfg.stale_after_ms, c->cfg.report_interval_ms * c->cfg.agent_silent_intervals);
                r = fast_path_new(c->token, (uint32_t) c->cfg.report_interval_ms, fresh_ms * USEC_PER_MSEC,
                                  &c->fast);
                if (r < 0)
                        return log_oom();
        }
        AgentServerConfig ac = { .token = c->token, .report_interval_ms = c->cfg.report_interval_ms,
                                 .stale_after_ms = c->cfg.stale_after_ms,
                                 .max_pods_per_node = c->cfg.max_pods_per_node,
                                 .max_notices_per_node = c->cfg.max_notices_per_node, .drain_on = c->drain_on };
        AgentServerPorts ap = { .userdata = c, .now = port_now, .node_leaving = port_node_leaving,
                                .agent_reported = port_agent_reported, .nodes = port_nodes,
                                .notice_event = port_notice_event, .drain_event = port_drain_event };
        r = agent_server_new(&ac, &c->registry, c->attest, c->fast, &ap, &c->agents);
        if (r < 0)
                return log_oom();
        c->registry.forget = port_registry_forget; /* a changed directive leaves the fast path at once */
        c->registry.forget_userdata = c;

        LinkTls tls = { .cert_file = c->cfg.tls_cert, .key_file = c->cfg.tls_key };
        uint64_t idle_ms = c->cfg.idle_timeout_ms ?: MAX(60 * 1000, 6 * c->cfg.report_interval_ms);
        LinkLimits limits = {
                .max_pipes = c->cfg.max_connections,
                .max_pipes_per_source = c->cfg.max_connections_per_source,
                .max_unauthenticated = c->cfg.max_unauthenticated,
                .max_unauthenticated_per_source = c->cfg.max_unauthenticated_per_source,
                .auth_timeout_usec = c->cfg.auth_timeout_ms * USEC_PER_MSEC,
                .idle_timeout_usec = idle_ms * USEC_PER_MSEC,
        };
        r = link_server_new(c->event, c->cfg.listen, &tls, c->cfg.max_message, &limits,
                            agent_server_handle_report, c->agents, &c->link);
        if (r < 0)
                return log_error_errno(r, r == -EPERM ? "Failed to listen on %s: tls-key %s may be read or written by "
                                                        "others (or written by its group); chmod 0600 (or 0400/0440)."
                                                      : "Failed to listen on %s: %m (tls-key %s)",
                                       c->cfg.listen, strempty(c->cfg.tls_key));
        if (c->fast) {
                r = sd_event_add_time_relative(c->event, &c->fast_timer, CLOCK_MONOTONIC, FAST_SYNC_USEC,
                                               1000, on_fast_timer, c);
                if (r < 0)
                        return log_error_errno(r, "Failed to add a timer: %m");
                (void) sd_event_source_set_enabled(c->fast_timer, SD_EVENT_ON);
                link_server_set_fast(c->link, agent_server_fast_answer);
        }

        r = coordinator_serve_http(c);
        if (r < 0)
                return r;

        r = daemon_add_signals(c->event, on_signal, c);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");
        r = sd_event_set_watchdog(c->event, true);
        if (r < 0)
                log_warning_errno(r, "Failed to enable the watchdog: %m");

        if (c->attest) {
                r = attestor_use_ec2(c->attest, c->event, c->cfg.region, c->cfg.ec2_endpoint,
                                     c->cfg.cluster_name);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up EC2 for attestation: %m");
        }
        if (!isempty(c->cfg.cluster_name)) {
                ProvisionerConfig pc = provisioner_config(c);
                ProvisionerPorts pp = { .userdata = c, .acting = port_acting, .acting_as = port_acting_as,
                                        .launched = port_launched, .launch_failed = port_launch_failed,
                                        .decided = port_decided, .new_instance = port_new_instance,
                                        .nominated = port_nominated, .disrupt = port_disrupt };
                r = provisioner_new(c->event, &pc, &c->registry, &pp, &c->provisioner);
                if (r >= 0) {
                        DisruptionConfig dc = { .consolidation_validation_ms = c->cfg.consolidation_validation_ms,
                                                .spot_to_spot = c->cfg.spot_to_spot,
                                                .report_interval_ms = c->cfg.report_interval_ms };
                        r = disruption_new(c->provisioner, &c->registry, &dc, &c->disruption);
                }
                if (r < 0)
                        return log_error_errno(r, "Failed to set up provisioning: %m");
                r = status_writer_new(c->event, c->provisioner, &c->registry, &c->status);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up status writing: %m");
                r = coordinator_elect(c);
                if (r < 0)
                        return r;
        }

        if (!isempty(c->cfg.interruption_queue)) {
                InterruptionConfig ic = { .queue_url = c->cfg.interruption_queue, .region = c->cfg.region,
                                          .endpoint = c->cfg.sqs_endpoint };
                InterruptionSink is = { .registry = &c->registry, .userdata = c, .now = port_now,
                                        .find_node = port_find_node, .instance_leaving = port_instance_leaving,
                                        .launch_unanswered = port_launch_unanswered,
                                        .notice_added = port_notice_added, .apply_notices = port_apply_notices };
                r = interruption_new(c->event, &ic, &is, &c->interruption);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the interruption queue %s: %m",
                                               c->cfg.interruption_queue);
                /* only the leader takes messages; without provisioning there is no election */
                interruption_set_active(c->interruption, c->leading || !c->provisioner);
        }

        c->start_usec = coordinator_now(c);
        (void) sd_notify(false, "READY=1");
        log_info("nodesmith-coordinator %s listening on %s (agents) and %s (HTTP).", COORDINATOR_VERSION,
                 c->cfg.listen, isempty(c->cfg.http_listen) ? "nothing" : c->cfg.http_listen);
        return 0;
}

int coordinator_run(Coordinator *c) {
        return sd_event_loop(c->event);
}
