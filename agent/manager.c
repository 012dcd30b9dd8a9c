/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's manager: wires IMDS, logind, the Node watch, drains and the link, and reports. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <systemd/sd-daemon.h>

#include "agent.h"
#include "daemon.h"
#include "bootsecret.h"
#include "fileio.h"
#include "log.h"
#include "macro.h"

#define OPT(field) offsetof(AgentConfig, field)
const Option agent_options[] = {
        { "coordinator", OPTION_STRING, OPT(coordinator), NULL,
          "coordinator address, tls+tcp://HOST:PORT" },
        { "insecure", OPTION_BOOL, OPT(insecure), "no",
          "allow tcp:// and ipc:// addresses (tests only)" },
        { "tls-ca", OPTION_STRING, OPT(tls_ca), "/etc/nodesmith/ca.crt",
          "CA certificate that signed the coordinator's certificate" },
        { "tls-server-name", OPTION_STRING, OPT(tls_server_name), NULL,
          "name to verify in the coordinator's certificate (default: the address's host)" },
        { "token", OPTION_STRING, OPT(token), NULL, "bootstrap token (prefer token-file)" },
        { "token-file", OPTION_STRING, OPT(token_file), "/etc/nodesmith/token",
          "file holding the bootstrap token" },
        { "report-interval", OPTION_MSEC, OPT(report_interval_ms), "10s",
          "how often to report when nothing changes" },
        { "request-timeout", OPTION_MSEC, OPT(request_timeout_ms), "5s",
          "how long to wait for the coordinator's answer" },
        { "max-message", OPTION_BYTES, OPT(max_message), "1Mi",
          "largest message accepted or sent (the coordinator's max-message; pod scheduling data is trimmed to fit)" },
        { "root", OPTION_STRING, OPT(root), "/", "read /proc, /sys and kubelet files under this root" },
        { "boot-secret-file", OPTION_STRING, OPT(boot_secret_file), "/run/nodesmith/boot-secret",
          "where the coordinator's per-boot secret is kept (under root), so a restarted agent keeps "
          "speaking for its node; empty: kept in memory only" },
        { "kubelet-config", OPTION_STRING, OPT(kubelet_config), "/etc/kubernetes/kubelet/config.json",
          "kubelet configuration (JSON or YAML; drop-ins in FILE.d/NAME.conf)" },
        { "kubelet-root-dir", OPTION_STRING, OPT(kubelet_root_dir), "/var/lib/kubelet",
          "kubelet root directory (ephemeral-storage capacity)" },
        { "eni-max-pods-file", OPTION_STRING, OPT(eni_max_pods_file), "/etc/eks/eni-max-pods.txt",
          "EKS max-pods table, used when the kubelet config sets no maxPods" },
        { "max-pods", OPTION_UINT, OPT(max_pods), "0", "override max pods (0: from the kubelet)" },
        { "node-name", OPTION_STRING, OPT(node_name), NULL, "Kubernetes node name (default: hostname)" },
        { "instance-id", OPTION_STRING, OPT(instance_id), NULL, "EC2 instance id (default: from IMDS)" },
        { "instance-type", OPTION_STRING, OPT(instance_type), NULL, "EC2 instance type (default: from IMDS)" },
        { "zone", OPTION_STRING, OPT(zone), NULL, "availability zone (default: from IMDS)" },
        { "region", OPTION_STRING, OPT(region), NULL, "region (default: from IMDS)" },
        { "capacity-type", OPTION_STRING, OPT(capacity_type), NULL,
          "spot or on-demand (default: from IMDS)" },
        { "arch", OPTION_STRING, OPT(arch), NULL, "amd64 or arm64 (default: this machine's)" },
        { "nodepool", OPTION_STRING, OPT(nodepool), NULL, "NodePool this node belongs to" },
        { "log-level", OPTION_STRING, OPT(log_level), "info", "debug, info, notice, warning, err" },
        { "logind", OPTION_BOOL, OPT(logind), "yes",
          "hold a logind shutdown delay lock to see shutdowns coming" },
        { "imds", OPTION_BOOL, OPT(imds), "yes",
          "read identity and interruption notices from the EC2 instance metadata service" },
        { "imds-endpoint", OPTION_STRING, OPT(imds_endpoint), "http://169.254.169.254",
          "instance metadata service address" },
        { "imds-poll-interval", OPTION_MSEC, OPT(imds_poll_interval_ms), "1s",
          "how often to poll IMDS for notices (100ms..1h)" },
        { "imds-token-ttl", OPTION_UINT, OPT(imds_token_ttl_s), "21600",
          "IMDSv2 session token lifetime to ask for, seconds (1..21600)" },
        { "imds-timeout", OPTION_MSEC, OPT(imds_timeout_ms), "1s",
          "connect and total time-out of one IMDS request (50ms..1s)" },
        { "kube-server", OPTION_STRING, OPT(kube_server), NULL,
          "Kubernetes API server URL (default: from kubeconfig, else in-cluster)" },
        { "kubeconfig", OPTION_STRING, OPT(kubeconfig), "/var/lib/kubelet/kubeconfig",
          "kubeconfig, by default the kubelet's: the agent acts as its node (used when it exists)" },
        { "kube-token-file", OPTION_STRING, OPT(kube_token_file), NULL,
          "bearer token file for the Kubernetes API (re-read when it changes)" },
        { "kube-ca", OPTION_STRING, OPT(kube_ca), NULL, "CA certificate of the Kubernetes API server" },
        { "drain-on", OPTION_STRING, OPT(drain_on), "spot,maintenance",
          "notices that drain the node when the coordinator cannot be reached: spot, rebalance, "
          "maintenance, or none (shutdown and node deletion always do)" },
        { "finalizer-timeout", OPTION_MSEC, OPT(finalizer_timeout_ms), "30s",
          "after a drain, how long the coordinator has to remove the termination finalizer "
          "before the agent does (only when the instance is shutting down)" },
        { "drain-safety-margin", OPTION_MSEC, OPT(drain_safety_margin_ms), "5s",
          "pods' grace periods are cut to end this long before the drain deadline" },
};
const size_t agent_options_count = ELEMENTSOF(agent_options);

int manager_new(Manager **ret) {
        Manager *m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        int r = sd_event_default(&m->event);
        if (r < 0) {
                free(m);
                return r;
        }
        *ret = m;
        return 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;
        imds_watcher_free(m->imds);
        drain_free(m->drain);
        kube_node_free(m->kube_node);
        kube_client_free(m->kube);
        sd_event_source_disable_unref(m->pods_timer);
        sd_event_source_disable_unref(m->tick_timer);
        link_client_free(m->link);
        logind_free(m->logind);
        sd_event_source_disable_unref(m->shutdown_timer);
        sd_event_source_disable_unref(m->report_timer);
        sd_event_unref(m->event);
        config_free(agent_options, agent_options_count, &m->cfg);
        if (m->token)
                explicit_bzero(m->token, strlen(m->token));
        free(m->token);
        free(m->capacity_error);
        free(m->drain_reason);
        free(m);
        return NULL;
}

static int read_first_line(const char *path, char *buf, size_t size) {
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        if (!fgets(buf, (int) size, f))
                return -ENODATA;
        buf[strcspn(buf, "\r\n")] = 0;
        return 0;
}

static const char *machine_arch(void) {
        struct utsname u;
        if (uname(&u) < 0)
                return "";
        if (streq(u.machine, "x86_64"))
                return "amd64";
        if (streq(u.machine, "aarch64"))
                return "arm64";
        return "";
}

int manager_validate(Manager *m) {
        AgentConfig *c = &m->cfg;
        int r;

        if (c->log_level) {
                r = log_parse_level(c->log_level);
                if (r < 0)
                        return log_error_errno(r, "Unknown log level '%s'.", c->log_level);
                log_set_max_level(r);
        }
        if (c->report_interval_ms < 100 || c->report_interval_ms > 3600 * 1000)
                return log_error_errno(EINVAL, "report-interval must be within 100ms..1h.");
        if (c->request_timeout_ms < 50)
                return log_error_errno(EINVAL, "request-timeout must be at least 50ms.");
        if (c->max_message < 4096 || c->max_message > 64 * 1024 * 1024)
                return log_error_errno(EINVAL, "max-message must be within 4Ki..64Mi.");
        if (c->imds_poll_interval_ms < 100 || c->imds_poll_interval_ms > 3600 * 1000)
                return log_error_errno(EINVAL, "imds-poll-interval must be within 100ms..1h.");
        if (c->imds_token_ttl_s < 1 || c->imds_token_ttl_s > 21600)
                return log_error_errno(EINVAL, "imds-token-ttl must be within 1..21600 seconds.");
        if (c->imds_timeout_ms < 50 || c->imds_timeout_ms > 1000)
                return log_error_errno(EINVAL, "imds-timeout must be within 50ms..1s.");
        if (c->imds && (isempty(c->imds_endpoint) || (strncmp(c->imds_endpoint, "http://", 7) != 0 &&
                                                       strncmp(c->imds_endpoint, "https://", 8) != 0)))
                return log_error_errno(EINVAL, "imds-endpoint must be an http:// or https:// URL.");
        if (drain_on_parse(strempty(c->drain_on), &m->drain_on) < 0)
                return log_error_errno(EINVAL, "drain-on '%s': expected a list of spot, rebalance, maintenance, "
                                               "or none.", strempty(c->drain_on));
        if (c->finalizer_timeout_ms > 24 * 3600 * 1000)
                return log_error_errno(EINVAL, "finalizer-timeout must be at most 24h.");
        if (c->drain_safety_margin_ms > 600 * 1000)
                return log_error_errno(EINVAL, "drain-safety-margin must be at most 10m.");
        if (!isempty(c->kube_server) && strncmp(c->kube_server, "http://", 7) != 0 &&
            strncmp(c->kube_server, "https://", 8) != 0)
                return log_error_errno(EINVAL, "kube-server must be an http:// or https:// URL.");
        if (c->capacity_type && !streq(c->capacity_type, "spot") && !streq(c->capacity_type, "on-demand"))
                return log_error_errno(EINVAL, "capacity-type must be spot or on-demand.");
        if (!c->arch && (r = free_and_strdup(&c->arch, machine_arch())) < 0)
                return log_oom();

        char path[4200];
        snprintf(path, sizeof path, "%s/proc/sys/kernel/random/boot_id", c->root);
        if (read_first_line(path, m->boot_id, sizeof m->boot_id) < 0)
                m->boot_id[0] = 0;
        if (!isempty(c->boot_secret_file) && m->boot_id[0]) {
                snprintf(m->boot_secret_path, sizeof m->boot_secret_path, "%s%s%s", streq(c->root, "/") ? "" : c->root,
                         c->boot_secret_file[0] == '/' ? "" : "/", c->boot_secret_file);
                r = boot_secret_load(m->boot_secret_path, m->boot_id, m->boot_secret);
                if (r >= 0) {
                        m->boot_secret_len = sizeof m->boot_secret;
                        log_info("Boot secret of this boot found in %s: the coordinator knows this agent.", m->boot_secret_path);
                } else if (r == -EPERM)
                        log_warning("Ignoring %s: others may read it.", m->boot_secret_path);
                else if (r != -ENOENT && r != -ESTALE)
                        log_warning_errno(r, "Ignoring %s: %m", m->boot_secret_path);
        }
        if (gethostname(m->hostname, sizeof m->hostname - 1) < 0)
                strcpy(m->hostname, "localhost");

        /* The token: inline, else the file (a missing file is an error only when connecting). */
        if (!isempty(c->token)) {
                r = free_and_strdup(&m->token, c->token);
                if (r < 0)
                        return log_oom();
        } else if (!isempty(c->token_file)) {
                _cleanup_free_ char *buf = NULL;
                size_t len = 0;
                r = read_secret_file(c->token_file, 4096, &buf, &len);
                if (r == -EPERM)
                        return log_error_errno(r, "token-file %s may be read or written by others (or written by "
                                               "its group): refusing it; chmod 0600.", c->token_file);
                if (r >= 0) {
                        buf[strcspn(buf, "\r\n")] = 0;
                        m->token = strdup(buf);
                        explicit_bzero(buf, len);
                        if (!m->token)
                                return log_oom();
                }
        }
        m->interval_usec = c->report_interval_ms * 1000;
        return 0;
}

int manager_refresh_capacity(Manager *m) {
        const AgentConfig *c = &m->cfg;
        NodeResources cap, alloc;
        KubeletSettings k = {};
        int r;

        r = capacity_read(c->root, c->kubelet_root_dir, &cap);
        if (r < 0) {
                if (!m->capacity_error) {
                        log_warning_errno(r, "Cannot read node capacity under %s: %m", c->root);
                        m->capacity_error = strdup("capacity");
                }
                return r;
        }
        if (m->capacity_error) {
                log_info("Node capacity readable again.");
                free(m->capacity_error);
                m->capacity_error = NULL;
        }

        r = kubelet_config_load(c->root, c->kubelet_config, &k);
        if (r < 0 && r != -ENOENT)
                log_warning_errno(r, "Ignoring unreadable kubelet config %s: %m", c->kubelet_config);

        if (c->max_pods > 0)
                cap.pods = (int64_t) c->max_pods;
        else if (k.max_pods > 0)
                cap.pods = k.max_pods;
        else if (eni_max_pods_lookup(c->root, c->eni_max_pods_file, c->instance_type, &cap.pods) < 0)
                cap.pods = 110; /* the kubelet's own default */

        allocatable_compute(&cap, &k, &alloc);
        bool changed = memcmp(&cap, &m->capacity, sizeof cap) != 0 ||
                       memcmp(&alloc, &m->allocatable, sizeof alloc) != 0;
        m->capacity = cap;
        m->allocatable = alloc;
        return changed;
}

static uint64_t now_usec(Manager *m) {
        uint64_t t = 0;
        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &t);
        return t;
}

/* Exponential back-off on failures, capped at the report interval, with ±25 % jitter so a
 * fleet of agents does not reconnect in lock-step. */
static uint64_t next_delay(Manager *m) {
        uint64_t d = m->interval_usec;
        if (m->failures > 0) {
                uint64_t b = 500 * USEC_PER_MSEC << MIN(m->failures - 1, 10u);
                d = MIN(b, m->interval_usec);
        }
        uint64_t j = d / 4;
        if (j > 0)
                d = d - j + (uint64_t) random() % (2 * j + 1);
        return d;
}

static void schedule(Manager *m, uint64_t delay) {
        (void) sd_event_source_set_time(m->report_timer, now_usec(m) + delay);
        (void) sd_event_source_set_enabled(m->report_timer, SD_EVENT_ONESHOT);
}

static void notify_status(Manager *m) {
        (void) sd_notifyf(false, "STATUS=%s %s; allocatable %lldm CPU, %lld MiB, %lld pods",
                          m->connected ? "Connected to" : "Connecting to", m->cfg.coordinator,
                          (long long) m->allocatable.cpu_millis,
                          (long long) (m->allocatable.memory_bytes >> 20),
                          (long long) m->allocatable.pods);
}

static int send_report(Manager *m) {
        _cleanup_free_ uint8_t *buf = NULL;
        size_t len;
        int r;

        (void) manager_refresh_capacity(m);
        m->sequence++;
        if (m->shutting_down && !m->shutdown_sequence)
                m->shutdown_sequence = m->sequence;
        r = report_pack(m, &buf, &len);
        if (r < 0)
                return log_error_errno(r, "Failed to build the report: %m");
        r = link_client_send(m->link, buf, len, m->cfg.request_timeout_ms * 1000);
        if (r < 0)
                return log_debug_errno(r, "Report not sent: %m");
        m->dirty = false;
        return 0;
}

static void manager_evaluate(Manager *m);

static void on_reply(LinkClient *c, int error, const uint8_t *reply, size_t len, void *userdata);

static int link_open(Manager *m) {
        LinkTls tls = { .ca_file = m->cfg.tls_ca, .server_name = m->cfg.tls_server_name };
        m->link_opened_usec = now_usec(m);
        return link_client_new(m->event, m->cfg.coordinator, &tls, m->cfg.max_message,
                               MIN(m->cfg.report_interval_ms, 5000u), on_reply, m, &m->link);
}

static void report_failed(Manager *m, int error) {
        m->failures++;
        /* NNG's dialer gives up for good on some failures (a peer that closes the connection
         * during the TLS handshake, as a load balancer with no ready backend does). After
         * several failed reports and at most every 10 s, start over with a new socket. */
        if (m->failures >= 5 && now_usec(m) - m->link_opened_usec >= 10 * USEC_PER_SEC)
                m->relink = true; /* done from the report timer, not inside the link's callback */
        /* Not connected yet (-EAGAIN) is normal for a moment after start or a restart. */
        if (m->connected || m->failures == 3)
                log_warning_errno(error, "Coordinator %s not answering (%m)%s; retrying with back-off.",
                                  m->cfg.coordinator,
                                  strncmp(m->cfg.coordinator, "tls+", 4) == 0 && !m->connected
                                          ? "; if it persists, check tls-ca and tls-server-name"
                                          : "");
        else
                log_debug_errno(error, "Report failed: %m");
        if (m->connected) {
                m->connected = false;
                notify_status(m);
        }
        schedule(m, next_delay(m));
}

static int on_report_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        /* A report says what the agent observes: until its Node and pods are listed (a
         * restarted agent especially, whose Node may be deleting), it waits, up to 10 s. */
        if (m->kube_node && !kube_node_synced(m->kube_node) &&
            now_usec(m) - m->link_opened_usec < 10 * USEC_PER_SEC) {
                schedule(m, 100 * USEC_PER_MSEC);
                return 0;
        }
        if (m->relink) {
                LinkClient *old = m->link;
                m->relink = false;
                m->link = NULL;
                if (link_open(m) >= 0) {
                        log_info("No answer from %s for %u reports; reconnecting from scratch.",
                                 m->cfg.coordinator, m->failures);
                        link_client_free(old);
                } else
                        m->link = old;
        }
        int r = send_report(m);
        if (r < 0)
                report_failed(m, r);
        /* otherwise the reply (or its time-out) schedules the next one */
        return 0;
}

static void on_reply(LinkClient *c, int error, const uint8_t *reply, size_t len, void *userdata) {
        Manager *m = userdata;
        int r;

        if (error < 0) {
                report_failed(m, error);
                return;
        }
        r = directive_apply(m, reply, len);
        if (r == -EINPROGRESS) {
                /* the coordinator is still verifying this agent (attestation): ask again soon */
                schedule(m, 500 * USEC_PER_MSEC);
                return;
        }
        if (r < 0) {
                if (r == -EBADMSG)
                        log_warning("Coordinator sent an unreadable reply; retrying.");
                report_failed(m, r);
                return;
        }
        if (!m->connected) {
                log_info("Connected to coordinator %s (report %llu accepted).", m->cfg.coordinator,
                         (unsigned long long) m->sequence);
                m->connected = true;
                notify_status(m);
        }
        m->failures = 0;
        m->last_ok_usec = now_usec(m);
        m->directive_received = true;
        if (m->trigger_key[0] && m->trigger_sequence && m->sequence >= m->trigger_sequence)
                m->trigger_acked = true;
        manager_evaluate(m);
        schedule(m, m->dirty ? 0 : next_delay(m));
}

void manager_report_soon(Manager *m) {
        m->dirty = true;
        if (!link_client_in_flight(m->link))
                schedule(m, 0);
}

/* IMDS values fill what the flags left unset. */
static int fill_from_imds(char **field, const char *value) {
        if (*field || isempty(value))
                return 0;
        return free_and_strdup(field, value);
}

static void on_imds(ImdsWatcher *w, ImdsEvent ev, void *userdata) {
        Manager *m = userdata;
        AgentConfig *c = &m->cfg;

        if (ev == IMDS_EVENT_IDENTITY) {
                const ImdsIdentity *id = imds_watcher_identity(w);
                const char *lc = NULL;
                if (id && id->life_cycle)
                        lc = streq(id->life_cycle, "spot") ? "spot" : "on-demand";
                if (fill_from_imds(&c->instance_id, id ? id->instance_id : NULL) < 0 ||
                    fill_from_imds(&c->instance_type, id ? id->instance_type : NULL) < 0 ||
                    fill_from_imds(&c->zone, id ? id->zone : NULL) < 0 ||
                    fill_from_imds(&c->region, id ? id->region : NULL) < 0 ||
                    fill_from_imds(&c->capacity_type, lc) < 0)
                        log_oom();
                (void) manager_refresh_capacity(m);
        }
        manager_report_soon(m);
        manager_evaluate(m);
}

static int64_t realtime_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int on_shutdown_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        if (logind_holding(m->logind)) {
                log_warning("Shutdown delay nearly over; releasing the lock.");
                logind_release(m->logind);
        }
        return 0;
}

static void on_shutdown(Logind *l, bool starting, void *userdata) {
        Manager *m = userdata;
        if (starting && !m->shutting_down) {
                uint64_t delay = logind_delay_max_usec(l);
                if (delay == 0)
                        delay = 5 * USEC_PER_SEC; /* logind's default InhibitDelayMaxSec */
                m->shutting_down = true;
                m->shutdown_seen_ms = realtime_ms();
                m->shutdown_deadline_ms = m->shutdown_seen_ms + (int64_t) (delay / 1000);
                m->shutdown_sequence = 0;
                log_notice("System shutdown announced; %.1fs of delay.", (double) delay / 1e6);
                /* keep a margin: logind proceeds without us at the end of the delay */
                uint64_t margin = MIN(delay / 5, 2 * USEC_PER_SEC);
                if (!m->shutdown_timer)
                        (void) sd_event_add_time(m->event, &m->shutdown_timer, CLOCK_MONOTONIC,
                                                 now_usec(m) + delay - margin, 1, on_shutdown_timer, m);
                else {
                        (void) sd_event_source_set_time(m->shutdown_timer, now_usec(m) + delay - margin);
                        (void) sd_event_source_set_enabled(m->shutdown_timer, SD_EVENT_ONESHOT);
                }
                manager_report_soon(m);
                manager_evaluate(m);
        } else if (!starting && m->shutting_down) {
                log_notice("System shutdown cancelled.");
                m->shutting_down = false;
                m->shutdown_sequence = 0;
                (void) sd_event_source_set_enabled(m->shutdown_timer, SD_EVENT_OFF);
                manager_report_soon(m);
                manager_evaluate(m);
        }
}

/* ---- Kubernetes: the own Node, its pods, drains ---------------------------------------------- */

#define NK(x) NODESMITH__V1__NOTICE__KIND__KIND_##x

static const char *node_name(Manager *m) {
        return m->cfg.node_name ? m->cfg.node_name : m->hostname;
}

bool manager_local_trigger(Manager *m, DrainRequest *ret) {
        DrainRequest best = {};
        bool found = false;
        int64_t now = realtime_ms();

        /* the trigger that leaves the least time wins (no deadline counts as last) */
#define CONSIDER(reason_, deadline_, force_)                                                        \
        do {                                                                                        \
                int64_t dl_ = (deadline_);                                                          \
                if (!found || (dl_ > 0 && (best.deadline_unix_ms == 0 || dl_ < best.deadline_unix_ms))) { \
                        best = (DrainRequest) { .deadline_unix_ms = dl_, .force = (force_) };       \
                        snprintf(best.reason, sizeof best.reason, "%s", (reason_));                 \
                        found = true;                                                               \
                }                                                                                   \
        } while (0)

        const ImdsNotice *v = NULL;
        size_t n = imds_watcher_notices(m->imds, &v);
        for (size_t i = 0; i < n; i++) {
                if (v[i].kind < 0 || v[i].kind >= 32 || !(m->drain_on & (1u << v[i].kind)))
                        continue;
                switch (v[i].kind) {
                case NK(SPOT_INTERRUPTION):
                        /* two minutes from the notice when IMDS gives no time */
                        CONSIDER("spot-interruption",
                                 v[i].deadline_unix_ms > 0 ? v[i].deadline_unix_ms
                                                           : (v[i].first_seen_unix_ms ? v[i].first_seen_unix_ms : now) + 120000,
                                 true);
                        break;
                case NK(REBALANCE):
                        CONSIDER("rebalance-recommendation", 0, false);
                        break;
                case NK(MAINTENANCE):
                        CONSIDER("scheduled-maintenance", v[i].deadline_unix_ms, true);
                        break;
                default:
                        break;
                }
        }
        if (m->shutting_down)
                CONSIDER("shutdown", m->shutdown_deadline_ms, true);
        if (kube_node_deleting(m->kube_node))
                CONSIDER("node-deleted", 0, true);
#undef CONSIDER
        if (found && ret)
                *ret = best;
        return found;
}

/* The instance goes away whatever happens: a shutdown is under way, or a spot interruption's or
 * maintenance's time has come. */
static bool instance_going(Manager *m) {
        if (m->shutting_down)
                return true;
        const ImdsNotice *v = NULL;
        size_t n = imds_watcher_notices(m->imds, &v);
        int64_t now = realtime_ms();
        for (size_t i = 0; i < n; i++)
                if ((v[i].kind == NK(SPOT_INTERRUPTION) || v[i].kind == NK(MAINTENANCE)) &&
                    v[i].deadline_unix_ms > 0 && v[i].deadline_unix_ms <= now)
                        return true;
        return false;
}

static void shutdown_release_check(Manager *m, bool drain_wanted) {
        if (!m->shutting_down || !logind_holding(m->logind))
                return;
        if (!m->drain) {
                /* No Kubernetes access, nothing to drain: the coordinator knowing is enough. */
                if (m->shutdown_sequence && m->sequence >= m->shutdown_sequence && m->directive_received) {
                        log_info("Shutdown reported to the coordinator; letting it proceed.");
                        logind_release(m->logind);
                }
        } else if (drain_drained(m->drain)) {
                log_info("Node drained; letting the shutdown proceed.");
                logind_release(m->logind);
        } else if (!drain_wanted && m->trigger_acked && m->shutdown_sequence && m->sequence >= m->shutdown_sequence) {
                log_info("The coordinator does not drain this node for the shutdown; letting it proceed.");
                logind_release(m->logind);
        }
}

static void on_finalizer_removed(KubeNode *k, int error, void *userdata) {
        Manager *m = userdata;
        if (error < 0)
                m->finalizer_removal_started = false; /* tried again at the next tick */
        else
                m->finalizer_removed = true;
        manager_report_soon(m);
}

static void finalizer_check(Manager *m) {
        int64_t now = realtime_ms();
        if (!drain_drained(m->drain)) {
                m->drained_at_ms = 0;
                m->finalizer_removal_started = false;
                return;
        }
        if (m->drained_at_ms == 0)
                m->drained_at_ms = now;
        if (m->finalizer_removal_started || !kube_node_has_finalizer(m->kube_node))
                return;
        if (now - m->drained_at_ms < (int64_t) m->cfg.finalizer_timeout_ms || !instance_going(m))
                return;
        log_notice("Drained %.1fs ago, the coordinator has not removed %s and the instance is going away: "
                   "removing it.", (double) (now - m->drained_at_ms) / 1000.0, KUBE_NODE_FINALIZER);
        int r = kube_node_remove_finalizer(m->kube_node, on_finalizer_removed, m);
        if (r < 0)
                log_warning_errno(r, "Cannot remove the finalizer from node %s: %m", node_name(m));
        else
                m->finalizer_removal_started = true;
}

static void manager_evaluate(Manager *m) {
        DrainRequest trig = {}, want = {};
        bool has = false, wanted = false;

        if (m->drain) {
                has = manager_local_trigger(m, &trig);
                char key[sizeof m->trigger_key] = "";
                if (has)
                        snprintf(key, sizeof key, "%s@%lld", trig.reason, (long long) trig.deadline_unix_ms);
                if (!streq(key, m->trigger_key)) {
                        memcpy(m->trigger_key, key, sizeof key);
                        m->trigger_sequence = m->sequence + 1;
                        m->trigger_acked = false;
                        m->trigger_seen_ms = realtime_ms();
                        if (has)
                                manager_report_soon(m);
                }
                DrainInputs in = {
                        .coordinator_drain = m->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN,
                        .coordinator_reason = m->drain_reason,
                        .coordinator_deadline_ms = m->drain_deadline_ms,
                        .coordinator_force = m->drain_force,
                        .has_trigger = has,
                        .trigger = trig,
                        .coordinator_saw_trigger = m->trigger_acked,
                        .connected = m->connected || m->failures == 0,
                        .trigger_seen_ms = m->trigger_seen_ms,
                        .now_ms = realtime_ms(),
                        .wait_ms = m->cfg.request_timeout_ms,
                };
                wanted = drain_decide(&in, &want) > 0;
                if (wanted && kube_node_synced(m->kube_node)) {
                        (void) drain_start(m->drain, &want);
                        m->taint_checked = true;
                } else if (!wanted && drain_active(m->drain)) {
                        /* withdrawn: by the coordinator, or the local reason is gone */
                        if (m->directive_received || !has)
                                (void) drain_stop(m->drain);
                } else if (!wanted && !m->taint_checked && m->directive_received && kube_node_synced(m->kube_node)) {
                        /* restarted while a drain was under way that is no longer wanted: its
                         * taint, or its cordon where the API server refused the node's own taint */
                        m->taint_checked = true;
                        if (kube_node_drain_marked(m->kube_node))
                                (void) drain_stop(m->drain);
                }
                /* the finalizer goes on once the coordinator manages the node; never again
                 * while draining or after the agent took it off */
                if (m->connected && kube_node_synced(m->kube_node) && !drain_active(m->drain) &&
                    !m->finalizer_removed)
                        (void) kube_node_ensure_finalizer(m->kube_node);
                finalizer_check(m);
        }
        shutdown_release_check(m, wanted);
}

static void on_drain(Drain *d, DrainEvent ev, void *userdata) {
        Manager *m = userdata;
        manager_report_soon(m);
        if (ev == DRAIN_EVENT_DRAINED)
                manager_evaluate(m);
}

static int on_pods_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        manager_report_soon(userdata);
        return 0;
}

static void on_kube_node(KubeNode *k, KubeNodeEvent ev, void *userdata) {
        Manager *m = userdata;
        drain_kick(m->drain);
        if (ev == KUBE_NODE_EVENT_NODE) {
                manager_evaluate(m);
                manager_report_soon(m);
                return;
        }
        /* a burst of pod changes becomes one report */
        int enabled = SD_EVENT_OFF;
        (void) sd_event_source_get_enabled(m->pods_timer, &enabled);
        if (enabled == SD_EVENT_OFF) {
                (void) sd_event_source_set_time(m->pods_timer, now_usec(m) + 100 * USEC_PER_MSEC);
                (void) sd_event_source_set_enabled(m->pods_timer, SD_EVENT_ONESHOT);
        }
}

static int on_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        manager_evaluate(m);
        (void) sd_event_source_set_time(s, usec + USEC_PER_SEC);
        return 0;
}

static int kube_setup(Manager *m) {
        const AgentConfig *c = &m->cfg;
        _cleanup_(kube_config_freep) KubeConfig *kc = NULL;
        const char *source;
        int r;

        if (!isempty(c->kube_server)) {
                r = kube_config_new(c->kube_server, &kc);
                source = c->kube_server;
        } else if (!isempty(c->kubeconfig) && access(c->kubeconfig, F_OK) == 0) {
                r = kube_config_from_kubeconfig(c->kubeconfig, NULL, &kc);
                source = c->kubeconfig;
        } else if (getenv("KUBERNETES_SERVICE_HOST")) {
                r = kube_config_in_cluster(NULL, &kc);
                source = "in-cluster service account";
        } else {
                log_notice("No Kubernetes API configured (kube-server, kubeconfig %s, or in-cluster): "
                           "pods are not reported and drains cannot be carried out.", strempty(c->kubeconfig));
                return 0;
        }
        if (r < 0)
                return log_error_errno(r, "Failed to load the Kubernetes configuration from %s: %m", source);
        if (!isempty(c->kube_token_file) && free_and_strdup(&kc->token_file, c->kube_token_file) < 0)
                return log_oom();
        if (!isempty(c->kube_ca) && free_and_strdup(&kc->ca_file, c->kube_ca) < 0)
                return log_oom();
        kc->timeout_usec = 10 * USEC_PER_SEC;
        kc->deadline_usec = 30 * USEC_PER_SEC;

        r = kube_client_new(m->event, kc, &m->kube);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the Kubernetes client for %s: %m", kc->server);
        r = kube_node_new(m->kube, node_name(m), on_kube_node, m, &m->kube_node);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the node watch: %m");
        DrainConfig dc = DRAIN_CONFIG_DEFAULTS;
        dc.safety_margin_ms = c->drain_safety_margin_ms;
        dc.host = m->hostname;
        r = drain_new(m->event, m->kube, m->kube_node, &dc, on_drain, m, &m->drain);
        if (r < 0)
                return log_error_errno(r, "Failed to set up draining: %m");
        r = sd_event_add_time(m->event, &m->pods_timer, CLOCK_MONOTONIC, 0, 1, on_pods_timer, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add a timer: %m");
        (void) sd_event_source_set_enabled(m->pods_timer, SD_EVENT_OFF);
        r = sd_event_add_time(m->event, &m->tick_timer, CLOCK_MONOTONIC, now_usec(m) + USEC_PER_SEC, 1, on_tick, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add a timer: %m");
        (void) sd_event_source_set_enabled(m->tick_timer, SD_EVENT_ON);
        r = kube_node_start(m->kube_node);
        if (r < 0)
                return log_error_errno(r, "Failed to watch node %s: %m", node_name(m));
        log_info("Watching node %s and its pods through %s.", node_name(m), kc->server);
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;
        if (si->ssi_signo == SIGHUP) {
                log_info("SIGHUP: re-reading node capacity.");
                if (manager_refresh_capacity(m) > 0)
                        manager_report_soon(m);
                return 0;
        }
        log_info("Received %s, stopping.", strsignal((int) si->ssi_signo));
        (void) sd_notify(false, "STOPPING=1");
        return sd_event_exit(m->event, 0);
}

int manager_start(Manager *m) {
        const char *why = NULL;
        int r;

        r = link_url_check(m->cfg.coordinator, m->cfg.insecure, &why);
        if (r < 0)
                return log_error_errno(r, "Refusing coordinator address '%s': %s.",
                                       strempty(m->cfg.coordinator), why);
        if (isempty(m->token))
                return log_error_errno(ENOKEY, "No bootstrap token: set token-file (%s) or token.",
                                       strempty(m->cfg.token_file));

        r = link_open(m);
        if (r < 0)
                return log_error_errno(r, "Failed to set up the link to %s: %m", m->cfg.coordinator);

        if (isempty(m->cfg.instance_id) && !m->cfg.imds)
                return log_error_errno(EINVAL, "No instance id: set instance-id or enable imds.");

        r = sd_event_add_time(m->event, &m->report_timer, CLOCK_MONOTONIC, 0, 1, on_report_timer, m);
        if (r < 0)
                return log_error_errno(r, "Failed to add the report timer: %m");
        (void) sd_event_source_set_description(m->report_timer, "report");

        if (m->cfg.imds) {
                ImdsConfig ic = {
                        .endpoint = m->cfg.imds_endpoint,
                        .poll_interval_ms = m->cfg.imds_poll_interval_ms,
                        .token_ttl_s = m->cfg.imds_token_ttl_s,
                        .timeout_ms = m->cfg.imds_timeout_ms,
                };
                r = imds_watcher_new(m->event, &ic, on_imds, m, &m->imds);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the IMDS client: %m");
                r = imds_watcher_start(m->imds);
                if (r < 0)
                        return log_error_errno(r, "Failed to start the IMDS client: %m");
                /* Without an instance id the first report waits for IMDS's answer. */
                if (isempty(m->cfg.instance_id)) {
                        (void) sd_event_source_set_enabled(m->report_timer, SD_EVENT_OFF);
                        log_info("Waiting for the instance identity from IMDS (%s).",
                                 m->cfg.imds_endpoint);
                }
        }

        if (m->cfg.logind) {
                r = logind_new(m->event, on_shutdown, m, &m->logind);
                if (r < 0)
                        log_notice_errno(r, "No system bus (%m): running without a shutdown delay lock; "
                                            "spot and maintenance notices still come from IMDS.");
        }

        r = kube_setup(m);
        if (r < 0)
                return r;

        r = daemon_add_signals(m->event, on_signal, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");
        r = sd_event_set_watchdog(m->event, true);
        if (r < 0)
                log_warning_errno(r, "Failed to enable the watchdog: %m");

        srandom((unsigned) (now_usec(m) ^ (uint64_t) getpid()));
        /* The sequence starts at the wall clock (microseconds), so an agent restarted within
         * the same boot still sends newer sequence numbers than before (the coordinator drops
         * older ones of the same boot as duplicates). */
        {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                m->sequence = (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
        }
        (void) manager_refresh_capacity(m);
        (void) sd_notify(false, "READY=1");
        notify_status(m);
        log_info("nodesmith-agent %s started: node %s, reporting to %s every %llums.", AGENT_VERSION,
                 m->cfg.node_name ? m->cfg.node_name : m->hostname, m->cfg.coordinator,
                 (unsigned long long) m->cfg.report_interval_ms);
        return 0;
}

int manager_run(Manager *m) {
        return sd_event_loop(m->event);
}
