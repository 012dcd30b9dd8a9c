/* SPDX-License-Identifier: Apache-2.0 */
/* The provisioner: set-up, leadership and housekeeping, small helpers, Nodes by instance. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "aws/instanceprofile.h"
#include "catalog-ec2.h"
#include "fileio.h"
#include "http.h"
#include "kube.h"
#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

uint64_t provision_now_usec(Provisioner *p) {
        return provisioner_now(p);
}

/* For measuring work done inside one loop iteration (sd_event_now() stands still there). */
uint64_t provision_clock_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* ---- small helpers ------------------------------------------------------------------------ */

/* May this replica act now? Leading, and (with an election) its last Lease renewal younger than
 * the renew deadline, by the clock, not by a callback the loop may not have run yet. Asked before
 * every EC2 write, so two replicas never act at once (docs/leader-election.md). */
bool provisioner_acting(const Provisioner *p) {
        return p->leading && (!p->ports.acting || p->ports.acting(p->ports.userdata));
}

const char *provisioner_acting_as(const Provisioner *p) {
        const char *who = p->ports.acting_as ? p->ports.acting_as(p->ports.userdata) : NULL;
        return who ? who : "the only replica";
}

/* A pod still to be bound by the scheduler (Pending, no node, nobody deleting it) that is not a
 * DaemonSet's or a static one (those follow their node). */
static bool pod_waiting(const cJSON *pod) {
        const cJSON *md = jget(pod, "metadata"), *status = jget(pod, "status");
        if (jget(md, "deletionTimestamp") && !cJSON_IsNull(jget(md, "deletionTimestamp")))
                return false;
        if (!isempty(jstr(jget(pod, "spec"), "nodeName")))
                return false;
        if (!streq_ptr(jstr(status, "phase"), "Pending"))
                return false;
        const cJSON *o;
        cJSON_ArrayForEach(o, jget(md, "ownerReferences"))
                if (cJSON_IsTrue(jget(o, "controller")) &&
                    (streq_ptr(jstr(o, "kind"), "DaemonSet") || streq_ptr(jstr(o, "kind"), "Node")))
                        return false;
        return true;
}

/* The node kube-scheduler's preemption nominated the pod to (its victims are going), or NULL. */
const char *provision_pod_nominated_node(const cJSON *pod) {
        const char *n = pod_waiting(pod) ? jstr(jget(pod, "status"), "nominatedNodeName") : NULL;
        return isempty(n) ? NULL : n;
}

/* The pod is pending because kube-scheduler found no node for it (PodScheduled=False,
 * reason Unschedulable) and nobody is deleting it. As Karpenter's IsProvisionable: a pod with
 * status.nominatedNodeName is being placed by the scheduler's preemption (its victims are
 * going), and DaemonSet or static pods follow their node, so none of these gets capacity. */
bool pod_unschedulable(const cJSON *pod) {
        const cJSON *status = jget(pod, "status");
        if (!pod_waiting(pod) || provision_pod_nominated_node(pod))
                return false;
        const cJSON *c;
        cJSON_ArrayForEach(c, jget(status, "conditions"))
                if (streq_ptr(jstr(c, "type"), "PodScheduled") && streq_ptr(jstr(c, "status"), "False") &&
                    streq_ptr(jstr(c, "reason"), "Unschedulable"))
                        return true;
        return false;
}

void provisioner_digest(const char *data, size_t len, char *out, size_t out_size) {
        unsigned char md[32];
        unsigned int n = 0;
        EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
        for (unsigned i = 0; i < n && 2 * i + 2 < out_size; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
}

int provision_arch_index(const char *arch) {
        return streq_ptr(arch, "arm64") ? 1 : 0;
}

const char *provision_arch_of_type(const SolverInstanceType *t) {
        for (size_t i = 0; i < t->n_labels; i++)
                if (streq(t->labels[i].key, SOLVER_LABEL_ARCH))
                        return t->labels[i].value;
        return "amd64";
}

void provision_set_error(Provisioner *p, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->last_error, sizeof p->last_error, fmt, ap);
        va_end(ap);
}


/* ---- leadership, learning, housekeeping ---------------------------------------------------- */

static void on_learned(Ec2Client *ec2, const Ec2Error *err, Ec2InstanceList *list, void *userdata) {
        Provisioner *p = userdata;
        p->learning = false;
        if (err) {
                log_warning("Cannot list this cluster's instances (%s %s); retrying.", err->code, err->message);
                ec2_instance_list_free(list);
                return;
        }
        size_t added = 0;
        for (size_t i = 0; i < list->n; i++) {
                const Ec2Instance *in = &list->items[i];
                SolverCapacityType ct = streq_ptr(in->lifecycle, "spot") ? SOLVER_CAPACITY_SPOT : SOLVER_CAPACITY_ON_DEMAND;
                if (provision_inflight_add(p, in->id, ec2_instance_tag(in, "nodesmith.io/nodepool"), in->instance_type, in->zone,
                                 ct, provision_now_usec(p), 0) > 0) {
                        InFlight *f = provision_inflight_find(p, in->id);
                        f->learned = true;
                        if (in->capacity_reservation_id)
                                f->reservation_id = strdup(in->capacity_reservation_id);
                        added++;
                }
        }
        /* in flight from an earlier time as leader, no longer pending or running: another
         * replica terminated it meanwhile (EC2's list may lag a fresh launch: a minute's grace) */
        for (size_t i = 0; i < p->n_inflight;) {
                bool live = provision_now_usec(p) - p->inflight[i].launched_usec < 60 * USEC_PER_SEC;
                for (size_t k = 0; k < list->n && !live; k++)
                        live = streq(list->items[k].id, p->inflight[i].instance_id);
                if (live) {
                        i++;
                        continue;
                }
                log_info("Instance %s is no longer pending or running; not in flight any more.",
                         p->inflight[i].instance_id);
                provision_inflight_remove(p, i);
        }
        ec2_instance_list_free(list);
        /* those that are Nodes already are not in flight */
        (void) kube_watch_foreach(p->nodes, provision_forget_registered, p);
        log_info("Learned %zu instance(s) of cluster %s from EC2; %zu not registered yet.", added,
                 p->cfg.cluster_name, p->n_inflight);
        p->learned = true;
        provisioner_poke(p);
}

static void learn(Provisioner *p) {
        static const char *const states[] = { "pending", "running", NULL };
        if (p->learning || p->learned || !p->leading || !kube_watch_synced(p->nodes))
                return;
        if (ec2_describe_cluster_instances(p->ec2, states, NULL, 0, on_learned, p) >= 0)
                p->learning = true;
}

static void on_terminated(Ec2Client *ec2, const Ec2Error *err, Ec2TerminateResult *res, void *userdata) {
        if (err)
                log_warning("TerminateInstances failed: %s %s", err->code, err->message);
        for (char **id = res ? res->terminated : NULL; id && *id; id++)
                log_notice("Terminated %s: it never registered.", *id);
        for (char **id = res ? res->refused : NULL; id && *id; id++)
                log_warning("Refused to terminate %s: it lacks this cluster's tag.", *id);
        ec2_terminate_result_free(res);
}

static int on_housekeeping(sd_event_source *s, uint64_t usec, void *userdata) {
        Provisioner *p = userdata;
        uint64_t now = provision_now_usec(p), timeout = p->cfg.registration_timeout_ms * USEC_PER_MSEC;

        learn(p);
        provision_catalog_refresh(p);
        provisioner_images_refresh(p);
        provisioner_networks_refresh(p);
        provisioner_reservations_housekeeping(p);
        provisioner_static_check(p);
        if (p->leading && p->learned)
                provision_termination_pass(p);
        if (p->cfg.consolidation_interval_ms > 0 &&
            now - p->last_disruption_usec >= p->cfg.consolidation_interval_ms * USEC_PER_MSEC) {
                p->last_disruption_usec = now;
                if (p->ports.disrupt)
                        p->ports.disrupt(p->ports.userdata); /* failures are logged and counted there */
        }
        if (provisioner_acting(p) && p->learned && !p->round) {
                const char *ids[65];
                size_t n = 0;
                for (size_t i = 0; i < p->n_inflight && n < 64;)
                        if (now - p->inflight[i].launched_usec > timeout) {
                                log_warning("Instance %s did not %s within %llus; terminating it.",
                                            p->inflight[i].instance_id,
                                            p->inflight[i].node_name ? "initialize (Ready, startup taints gone, agent reporting)" : "register",
                                            (unsigned long long) (timeout / USEC_PER_SEC));
                                ids[n++] = strdup(p->inflight[i].instance_id);
                                p->terminated_unregistered++;
                                provision_inflight_remove(p, i);
                        } else
                                i++;
                ids[n] = NULL;
                if (n > 0) {
                        log_info("TerminateInstances of %zu unregistered instance(s), acting replica %s.", n, provisioner_acting_as(p));
                        (void) ec2_terminate_instances(p->ec2, ids, on_terminated, p);
                        provisioner_poke(p); /* their pods need capacity again */
                }
                for (size_t i = 0; i < n; i++)
                        free((char *) ids[i]);
        }
        (void) sd_event_source_set_time(s, now + 2 * USEC_PER_SEC);
        return 0;
}

void provisioner_set_leading(Provisioner *p, bool leading) {
        if (!p || p->leading == leading)
                return;
        p->leading = leading;
        if (leading)
                p->leading_since_usec = provision_now_usec(p);
        if (!leading) {
                /* another replica acts now; what we knew may be stale when we lead again */
                p->learned = false;
                proxy_drains_release_all(p->proxy_drains);
                for (size_t i = p->n_inflight; i > 0; i--)
                        provision_inflight_remove(p, i - 1);
                return;
        }
        learn(p);
}

/* ---- set-up --------------------------------------------------------------------------------- */

int provision_watch(Provisioner *p, const char *path, const char *field_selector, kube_watch_event_t cb, KubeWatch **ret) {
        KubeListOptions o = { .field_selector = field_selector };
        return kube_watch_new(p->kube, path, &o, cb, p, ret);
}

static void on_bound_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
}

static const char *acting_as_port(void *userdata) {
        return provisioner_acting_as(userdata);
}

int provisioner_new(sd_event *e, const ProvisionerConfig *cfg, Registry *registry,
                    const ProvisionerPorts *ports, Provisioner **ret) {
        _cleanup_(kube_config_freep) KubeConfig *kc = NULL;
        Provisioner *p;
        char *err = NULL;
        int r;

        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->event = e;
        p->cfg = *cfg;
        p->registry = registry;
        p->ports = ports ? *ports : (ProvisionerPorts) {};
        histogram_init(&p->histograms.round_seconds, histogram_bounds_decision);
        histogram_init(&p->histograms.solver_seconds, histogram_bounds_decision);
        histogram_init(&p->histograms.registration_seconds, histogram_bounds_lifecycle);
        if (!isempty(cfg->kube_server))
                r = kube_config_new(cfg->kube_server, &kc);
        else if (!isempty(cfg->kubeconfig))
                r = kube_config_from_kubeconfig(cfg->kubeconfig, NULL, &kc);
        else
                r = kube_config_in_cluster(NULL, &kc);
        if (r < 0) {
                log_error_errno(r, "No Kubernetes API to provision for (kube-server, kubeconfig or in-cluster): %m");
                goto fail;
        }
        r = kube_client_new(e, kc, &p->kube);
        if (r < 0)
                goto fail;

        r = catalog_load_file(cfg->catalog, &p->catalog, &err);
        if (r < 0) {
                log_error_errno(r, "Cannot load the instance catalog %s: %s", cfg->catalog, err ? err : strerror(-r));
                free(err);
                goto fail;
        }
        if (!isempty(cfg->agent_ca)) {
                r = read_file_bounded(cfg->agent_ca, 256 * 1024, &p->agent_ca_pem, NULL);
                if (r < 0) {
                        log_error_errno(r, "Cannot read agent-ca %s: %m", cfg->agent_ca);
                        goto fail;
                }
        }

        r = http_client_new(e, &p->http);
        if (r < 0)
                goto fail;
        AwsCredentialsConfig acc = { .region = cfg->region };
        r = aws_credential_provider_new(e, p->http, &acc, &p->creds);
        if (r < 0)
                goto fail;
        Ec2Config ec = { .region = cfg->region, .ec2_endpoint = cfg->ec2_endpoint,
                         .ssm_endpoint = cfg->ssm_endpoint, .iam_endpoint = cfg->iam_endpoint,
                         .cluster_name = cfg->cluster_name };
        r = ec2_client_new(e, p->http, p->creds, &ec, &p->ec2);
        if (r < 0)
                goto fail;

        r = provision_watch(p, "/api/v1/pods", "spec.nodeName=", provision_on_pod_event, &p->pods);
        if (r >= 0) /* read by each snapshot (bound.c); a binding alone needs no round */
                r = provision_watch(p, "/api/v1/pods", "spec.nodeName!=,status.phase=Pending", on_bound_event, &p->bound);
        if (r >= 0)
                r = provision_watch(p, "/apis/nodesmith.io/v1/nodepools", NULL, provision_on_other_event, &p->nodepools);
        if (r >= 0)
                r = provision_watch(p, "/apis/nodesmith.io/v1/ec2nodeclasses", NULL, provision_on_other_event, &p->nodeclasses);
        if (r >= 0)
                r = provision_watch(p, "/apis/apps/v1/daemonsets", NULL, provision_on_other_event, &p->daemonsets);
        if (r >= 0)
                r = provision_watch(p, "/apis/policy/v1/poddisruptionbudgets", NULL, provision_on_other_event, &p->pdbs);
        if (r >= 0)
                r = provision_watch(p, "/api/v1/nodes", NULL, provision_on_node_event, &p->nodes);
        if (r >= 0)
                r = proxy_drains_new(e, &(ProxyDrainsConfig) { .report_interval_ms = cfg->proxy_drains.report_interval_ms,
                                                               .agent_silent_intervals = cfg->proxy_drains.agent_silent_intervals,
                                                               .termination_grace_ms = cfg->proxy_drains.termination_grace_ms,
                                                               .max_proxy_drains = cfg->proxy_drains.max_proxy_drains,
                                                               .acting_as = acting_as_port, .userdata = p },
                                     registry, p->kube, p->nodes, p->nodepools, &p->proxy_drains);
        if (r >= 0)
                r = sd_event_add_time(e, &p->batch_idle, CLOCK_MONOTONIC, UINT64_MAX, 1, provision_on_batch_timer, p);
        if (r >= 0)
                r = sd_event_add_time(e, &p->batch_max, CLOCK_MONOTONIC, UINT64_MAX, 1, provision_on_batch_timer, p);
        if (r >= 0)
                r = sd_event_add_time(e, &p->snapshot_slice, CLOCK_MONOTONIC, UINT64_MAX, 1, provision_on_snapshot_slice, p);
        if (r >= 0)
                r = sd_event_add_time(e, &p->housekeeping, CLOCK_MONOTONIC, 0, USEC_PER_MSEC * 100,
                                      on_housekeeping, p);
        if (r >= 0)
                r = sd_event_source_set_enabled(p->housekeeping, SD_EVENT_ON);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(p->snapshot_slice, SD_EVENT_OFF);
        log_info("Provisioning for cluster %s: %zu instance types in the catalog, EC2 %s.", cfg->cluster_name,
                 ({ size_t n; catalog_types(p->catalog, &n); n; }), isempty(cfg->ec2_endpoint) ? cfg->region : cfg->ec2_endpoint);
        *ret = p;
        return 0;
fail:
        provisioner_free(p);
        return r;
}

Provisioner *provisioner_free(Provisioner *p) {
        if (!p)
                return NULL;
        provisioner_round_free(p->round);
        while (p->detached) {
                Round *rd = p->detached;
                p->detached = rd->next_detached;
                provisioner_round_free(rd);
        }
        sd_event_source_disable_unref(p->snapshot_slice);
        p->proxy_drains = proxy_drains_free(p->proxy_drains);
        kube_watch_free(p->pods);
        kube_watch_free(p->bound);
        kube_watch_free(p->nodepools);
        kube_watch_free(p->nodeclasses);
        kube_watch_free(p->daemonsets);
        kube_watch_free(p->pdbs);
        kube_watch_free(p->nodes);
        provision_events_close(p);
        kube_client_free(p->kube);
        ec2_client_free(p->ec2);
        aws_credential_provider_free(p->creds);
        http_client_free(p->http);
        catalog_free(p->catalog);
        catalog_free(p->next_catalog);
        sd_event_source_disable_unref(p->batch_idle);
        sd_event_source_disable_unref(p->batch_max);
        sd_event_source_disable_unref(p->housekeeping);
        for (size_t i = 0; i < p->n_inflight; i++)
                provision_inflight_free(&p->inflight[i]);
        free(p->inflight);
        for (size_t i = 0; i < p->n_ice; i++) {
                free(p->ice[i].instance_type);
                free(p->ice[i].zone);
        }
        free(p->ice);
        for (size_t i = 0; i < p->n_resolved; i++)
                provision_resolved_free(p->resolved[i]);
        free(p->resolved);
        ec2_instance_list_free(p->seen_instances);
        free(p->agent_ca_pem);
        free(p);
        return NULL;
}


/* ---- Nodes by instance (the interruption queue) ------------------------------------------- */

int provisioner_find_node(Provisioner *p, const char *instance_id, const cJSON **ret) {
        if (!p || !kube_watch_synced(p->nodes))
                return -EAGAIN;
        const cJSON *node = node_of_instance(p->nodes, instance_id);
        if (!node)
                return -ENOENT;
        *ret = node;
        return 0;
}

bool provisioner_launch_unanswered(const Provisioner *p) {
        if (p && p->detached)
                return true; /* a detached round lives while an answer is awaited */
        return p && p->round && p->round->fleets_in_flight > 0;
}

bool provisioner_instance_leaving(Provisioner *p, const char *instance_id) {
        for (size_t i = 0; p && i < p->n_inflight; i++) {
                const InFlight *f = &p->inflight[i];
                if (!streq(f->instance_id, instance_id))
                        continue;
                log_notice("Instance %s (%s in %s) is going away before it registered; its pods are planned again.",
                           f->instance_id, f->instance_type, f->zone);
                if (f->capacity_type == SOLVER_CAPACITY_SPOT)
                        provision_ice_mark(p, f->instance_type, f->zone, SOLVER_CAPACITY_SPOT);
                provision_inflight_remove(p, i);
                provisioner_poke(p);
                return true;
        }
        return false;
}

ProxyDrains *provisioner_proxy_drains(const Provisioner *p) {
        return p ? p->proxy_drains : NULL;
}

const ProvisionerHistograms *provisioner_histograms(const Provisioner *p) {
        return p ? &p->histograms : NULL;
}

const char *provisioner_pod_uid(const char *key) {
        const char *slash = key ? strchr(key, '/') : NULL;
        return slash ? slash + 1 : key;
}
