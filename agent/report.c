/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "bootsecret.h"
#include "log.h"
#include "macro.h"
#include "pbjson.h"
#include "wire.h"

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void resources_to_pb(const NodeResources *r, Nodesmith__V1__Resources *pb) {
        nodesmith__v1__resources__init(pb);
        pb->cpu_millis = r->cpu_millis;
        pb->memory_bytes = r->memory_bytes;
        pb->pods = r->pods;
        pb->ephemeral_storage_bytes = r->ephemeral_bytes;
        pb->hugepages_2mi_bytes = r->hugepages_2mi_bytes;
        pb->hugepages_1gi_bytes = r->hugepages_1gi_bytes;
        pb->gpus = r->gpus;
}

static Nodesmith__V1__CapacityType capacity_type_from_string(const char *s) {
        if (streq_ptr(s, "spot"))
                return NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT;
        if (streq_ptr(s, "on-demand") || streq_ptr(s, "normal") || streq_ptr(s, "scheduled"))
                return NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_ON_DEMAND;
        return NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_UNSPECIFIED;
}

/* The message points into m's strings; it must not outlive this call's caller frame. */
typedef struct ReportParts {
        Nodesmith__V1__NodeState report; /* the state; the envelope is built around its bytes */
        Nodesmith__V1__Identity identity;
        Nodesmith__V1__Resources capacity, allocatable, requested;
        Nodesmith__V1__DrainStatus drain;
        Nodesmith__V1__Notice notices[IMDS_MAX_NOTICES + 2];   /* + shutdown, node deleted */
        Nodesmith__V1__Notice *notice_ptrs[IMDS_MAX_NOTICES + 2];
        char shutdown_id[40];
        char deleted_id[128];
        PodInfo *infos;                  /* owned: freed by parts_done() */
        size_t n_infos;
        Nodesmith__V1__Pod *pods;
        Nodesmith__V1__Pod **pod_ptrs;
        Nodesmith__V1__Resources *pod_requests;
        char **pod_scheduling;           /* owned: JSON per pod, NULL when nothing to respect */
        size_t scheduling_budget;        /* bytes of scheduling JSON left for the pods still to add */
        size_t scheduling_truncated;     /* pods whose scheduling was left out */
        DrainStatusInfo drain_info;
} ReportParts;

static void parts_done(ReportParts *p) {
        for (size_t i = 0; p->pod_scheduling && i < p->n_infos; i++)
                free(p->pod_scheduling[i]);
        free(p->pod_scheduling);
        free(p->infos);
        free(p->pods);
        free(p->pod_ptrs);
        free(p->pod_requests);
}

static void identity_from_imds(Manager *m, ReportParts *p) {
        const ImdsIdentity *id = imds_watcher_identity(m->imds);
        if (!id)
                return;
        p->identity.private_ip = id->local_ipv4 ? id->local_ipv4 : (char *) "";
        if (m->attested)
                return; /* the coordinator has it: about 2 KiB less in every report */
        if (id->document)
                p->identity.identity_document = (ProtobufCBinaryData) {
                        .len = strlen(id->document), .data = (uint8_t *) id->document };
        if (id->rsa2048)
                p->identity.identity_rsa2048 = (ProtobufCBinaryData) {
                        .len = strlen(id->rsa2048), .data = (uint8_t *) id->rsa2048 };
}

static void notices_to_pb(Manager *m, ReportParts *p) {
        const ImdsNotice *v = NULL;
        size_t n = imds_watcher_notices(m->imds, &v);
        for (size_t i = 0; i < n && i < IMDS_MAX_NOTICES; i++) {
                Nodesmith__V1__Notice *pb = &p->notices[i];
                nodesmith__v1__notice__init(pb);
                pb->kind = v[i].kind;
                pb->event_id = (char *) v[i].event_id;
                pb->action = (char *) v[i].action;
                pb->deadline_unix_ms = v[i].deadline_unix_ms;
                pb->first_seen_unix_ms = v[i].first_seen_unix_ms;
                pb->not_after_unix_ms = v[i].not_after_unix_ms;
                pb->description = (char *) v[i].description;
                p->notice_ptrs[i] = pb;
        }
        size_t k = MIN(n, (size_t) IMDS_MAX_NOTICES);
        if (m->shutting_down) {
                Nodesmith__V1__Notice *pb = &p->notices[k];
                nodesmith__v1__notice__init(pb);
                snprintf(p->shutdown_id, sizeof p->shutdown_id, "shutdown@%lld",
                         (long long) m->shutdown_seen_ms);
                pb->kind = NODESMITH__V1__NOTICE__KIND__KIND_SHUTDOWN;
                pb->event_id = p->shutdown_id;
                pb->action = (char *) "shutdown";
                pb->deadline_unix_ms = m->shutdown_deadline_ms;
                pb->first_seen_unix_ms = m->shutdown_seen_ms;
                pb->description = (char *) "systemd-logind PrepareForShutdown";
                p->notice_ptrs[k++] = pb;
        }
        int64_t deleted_ms = kube_node_deletion_unix_ms(m->kube_node);
        if (deleted_ms > 0) {
                Nodesmith__V1__Notice *pb = &p->notices[k];
                const cJSON *node = kube_node_object(m->kube_node);
                nodesmith__v1__notice__init(pb);
                snprintf(p->deleted_id, sizeof p->deleted_id, "node-deleted@%s",
                         strempty(node ? kube_object_meta(node, "uid") : NULL));
                pb->kind = NODESMITH__V1__NOTICE__KIND__KIND_NODE_DELETED;
                pb->event_id = p->deleted_id;
                pb->action = (char *) "delete";
                pb->first_seen_unix_ms = deleted_ms;
                pb->description = (char *) "Node has a deletionTimestamp";
                p->notice_ptrs[k++] = pb;
        }
        p->report.n_notices = k;
        p->report.notices = k ? p->notice_ptrs : NULL;
        p->report.shutting_down = m->shutting_down;
}

/* Pod.scheduling is budgeted (proto/): 16 KiB for one pod, half of max-message for all. */
#define SCHEDULING_POD_MAX (16u * 1024)

/* The pod's scheduling constraints and labels, as JSON, for the coordinator (see proto/). */
static char *pod_scheduling(const cJSON *pod) {
        static const struct {
                const char *obj, *key, *as;
        } fields[] = {
                { "metadata", "labels", "labels" },
                { "spec", "nodeSelector", "nodeSelector" },
                { "spec", "affinity", "affinity" },
                { "spec", "tolerations", "tolerations" },
                { "spec", "topologySpreadConstraints", "topologySpreadConstraints" },
        };
        cJSON *out = NULL;
        for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pod, fields[i].obj),
                                                                  fields[i].key);
                if (!v || cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child))
                        continue;
                if (!out && !(out = cJSON_CreateObject()))
                        return NULL;
                cJSON *c = cJSON_Duplicate(v, true);
                if (!c || !cJSON_AddItemToObject(out, fields[i].as, c)) {
                        cJSON_Delete(c);
                        cJSON_Delete(out);
                        return NULL;
                }
        }
        char *s = out ? cJSON_PrintUnformatted(out) : NULL;
        cJSON_Delete(out);
        return s;
}

int report_pod_to_pb(PodInfo *in, const cJSON *obj, size_t *scheduling_budget, Nodesmith__V1__Pod *pb,
                     Nodesmith__V1__Resources *requests, char **ret_scheduling) {
        bool truncated = false;
        nodesmith__v1__pod__init(pb);
        pb->namespace_ = in->namespace;
        pb->name = in->name;
        pb->uid = in->uid;
        pb->owner_kind = in->owner_kind;
        pb->owner_name = in->owner_name;
        resources_to_pb(&in->requests, requests);
        pb->requests = requests;
        pb->priority = in->priority;
        pb->priority_class = in->priority_class;
        pb->do_not_disrupt = in->do_not_disrupt;
        pb->daemonset = in->daemonset;
        pb->mirror = in->mirror;
        pb->phase = in->phase;
        pb->terminating = in->terminating;
        pb->critical = in->critical;
        pb->deletion_cost = in->deletion_cost;
        char *sch = pod_scheduling(obj);
        size_t len = sch ? strlen(sch) : 0;
        if (len > SCHEDULING_POD_MAX || len > *scheduling_budget) {
                /* a tenant's pod cannot make the report too large to send */
                free(sch);
                sch = NULL;
                pb->scheduling_truncated = truncated = true;
                len = 0;
        }
        *scheduling_budget -= len;
        if (sch)
                pb->scheduling = sch;
        *ret_scheduling = sch;
        return truncated;
}

static void pods_to_pb(Manager *m, ReportParts *p) {
        NodeResources requested = {};

        if (!m->kube_node || kube_node_pods(m->kube_node, &p->infos, &p->n_infos) < 0 || p->n_infos == 0) {
                resources_to_pb(&requested, &p->requested);
                return;
        }
        size_t n = p->n_infos;
        p->pods = calloc(n, sizeof *p->pods);
        p->pod_ptrs = calloc(n, sizeof *p->pod_ptrs);
        p->pod_requests = calloc(n, sizeof *p->pod_requests);
        p->pod_scheduling = calloc(n, sizeof *p->pod_scheduling);
        if (!p->pods || !p->pod_ptrs || !p->pod_requests || !p->pod_scheduling) {
                log_oom();
                resources_to_pb(&requested, &p->requested);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                PodInfo *in = &p->infos[i];
                if (report_pod_to_pb(in, kube_node_pod(m->kube_node, in->namespace, in->name), &p->scheduling_budget,
                                     &p->pods[i], &p->pod_requests[i], &p->pod_scheduling[i]) > 0)
                        p->scheduling_truncated++;
                p->pod_ptrs[i] = &p->pods[i];
        }
        p->report.n_pods = n;
        p->report.pods = p->pod_ptrs;
        pod_infos_requested(p->infos, n, &requested);
        resources_to_pb(&requested, &p->requested);
}

static void drain_to_pb(Manager *m, ReportParts *p) {
        DrainStatusInfo *s = &p->drain_info;
        drain_status(m->drain, s);
        if (!m->drain && m->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN) {
                /* asked to drain without access to the API: say so */
                *s = (DrainStatusInfo) { .phase = NODESMITH__V1__DRAIN_STATUS__PHASE__PHASE_FAILED,
                                         .deadline_unix_ms = m->drain_deadline_ms };
                snprintf(s->reason, sizeof s->reason, "%s", strempty(m->drain_reason));
                snprintf(s->last_error, sizeof s->last_error, "no Kubernetes API access configured on the agent");
        }
        p->drain.phase = s->phase;
        p->drain.reason = s->reason;
        p->drain.started_unix_ms = s->started_unix_ms;
        p->drain.deadline_unix_ms = s->deadline_unix_ms;
        p->drain.pods_left = s->pods_left;
        p->drain.pods_evicted = s->pods_evicted;
        p->drain.pods_blocked_by_pdb = s->pods_blocked_by_pdb;
        p->drain.last_error = s->last_error;
}

/* scheduling_budget: bytes of Pod.scheduling for all pods together (0: none at all). */
static void report_build(Manager *m, ReportParts *p, size_t scheduling_budget) {
        const AgentConfig *c = &m->cfg;

        p->infos = NULL;
        p->pods = NULL;
        p->pod_ptrs = NULL;
        p->pod_requests = NULL;
        p->pod_scheduling = NULL;
        p->n_infos = 0;
        p->scheduling_budget = scheduling_budget;
        p->scheduling_truncated = 0;

        nodesmith__v1__node_state__init(&p->report);
        nodesmith__v1__identity__init(&p->identity);
        nodesmith__v1__drain_status__init(&p->drain);

        p->identity.instance_id = c->instance_id ? c->instance_id : (char *) "";
        p->identity.instance_type = c->instance_type ? c->instance_type : (char *) "";
        p->identity.zone = c->zone ? c->zone : (char *) "";
        p->identity.region = c->region ? c->region : (char *) "";
        p->identity.capacity_type = capacity_type_from_string(c->capacity_type);
        p->identity.arch = c->arch ? c->arch : (char *) "";
        p->identity.nodepool = c->nodepool ? c->nodepool : (char *) "";
        p->identity.agent_version = (char *) AGENT_VERSION;
        p->identity.boot_id = m->boot_id;
        p->identity.node_name = c->node_name ? c->node_name : m->hostname;
        identity_from_imds(m, p);

        resources_to_pb(&m->capacity, &p->capacity);
        resources_to_pb(&m->allocatable, &p->allocatable);
        pods_to_pb(m, p);
        drain_to_pb(m, p);
        p->report.node_ready = kube_node_ready(m->kube_node);
        p->report.finalizer_present = kube_node_has_finalizer(m->kube_node);

        p->report.identity = &p->identity;
        p->report.capacity = &p->capacity;
        p->report.allocatable = &p->allocatable;
        p->report.requested = &p->requested;
        p->report.drain = &p->drain;
        notices_to_pb(m, p);
}

static WireEnvelope envelope(Manager *m) {
        return (WireEnvelope) {
                .token = m->token,
                .instance_id = m->cfg.instance_id,
                .boot_id = m->boot_id,
                .boot_secret = m->boot_secret,
                .boot_secret_len = m->boot_secret_len,
                .sequence = m->sequence,
                .sent_unix_ms = now_unix_ms(),
                .report_interval_ms = (uint32_t) (m->interval_usec / 1000),
        };
}

int report_pack(Manager *m, uint8_t **ret, size_t *ret_len) {
        ReportParts p;
        WireEnvelope w = envelope(m);
        report_build(m, &p, m->cfg.max_message / 2);
        int r = wire_pack_report(&w, &p.report, m->cfg.max_message, ret, ret_len);
        size_t truncated = p.scheduling_truncated;
        parts_done(&p);
        if (r == -EMSGSIZE) {
                /* identity and notices go out whatever the pods hold: without any scheduling */
                report_build(m, &p, 0);
                r = wire_pack_report(&w, &p.report, m->cfg.max_message, ret, ret_len);
                truncated = p.scheduling_truncated;
                parts_done(&p);
        }
        if (truncated != m->scheduling_truncated) {
                if (truncated > 0)
                        log_warning("Scheduling data of %zu pods left out of the report (over the 16 KiB per pod or "
                                    "max-message/2 in all): the coordinator will not move them.", truncated);
                m->scheduling_truncated = truncated;
        }
        return r;
}

int report_print_json(Manager *m, FILE *f) {
        ReportParts p;
        cJSON *j = NULL;
        int r;

        report_build(m, &p, m->cfg.max_message / 2);
        r = pb_to_json(&p.report.base, false, &j);
        parts_done(&p);
        if (r < 0)
                return r;
        /* the envelope's fields, but never the token */
        WireEnvelope w = envelope(m);
        cJSON_AddStringToObject(j, "instanceId", strempty(w.instance_id));
        cJSON_AddStringToObject(j, "bootId", strempty(w.boot_id));
        cJSON_AddNumberToObject(j, "protocolVersion", NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT);
        cJSON_AddNumberToObject(j, "reportIntervalMs", w.report_interval_ms);
        char *s = cJSON_Print(j);
        cJSON_Delete(j);
        if (!s)
                return -ENOMEM;
        fprintf(f, "%s\n", s);
        free(s);
        return 0;
}

int directive_apply(Manager *m, const uint8_t *buf, size_t len) {
        Nodesmith__V1__NodeDirective *d = nodesmith__v1__node_directive__unpack(NULL, len, buf);
        if (!d)
                return -EBADMSG;

        int r = 0;
        switch (d->status) {
        case NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OK:
                break;
        case NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_UNAUTHENTICATED:
                log_error("Coordinator refused this agent: %s", d->error);
                m->attested = false; /* the identity document goes with the next report */
                r = -EACCES;
                goto out;
        case NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_VERSION_MISMATCH:
                log_error("Protocol version mismatch (agent speaks %d): %s",
                          NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT, d->error);
                r = -EPROTONOSUPPORT;
                goto out;
        case NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OVERLOADED:
                log_warning("Coordinator is at a limit: %s", d->error);
                r = -EBUSY;
                goto out;
        case NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_PENDING:
                log_debug("Coordinator not done checking this agent: %s", d->error);
                m->attested = false;
                r = -EINPROGRESS;
                goto out;
        default:
                log_error("Coordinator rejected the report: %s", d->error);
                r = -EINVAL;
                goto out;
        }

        if (d->boot_secret.len == sizeof m->boot_secret &&
            (m->boot_secret_len != sizeof m->boot_secret ||
             memcmp(m->boot_secret, d->boot_secret.data, sizeof m->boot_secret) != 0)) {
                log_debug("Coordinator issued this agent boot a new secret.");
                memcpy(m->boot_secret, d->boot_secret.data, sizeof m->boot_secret);
                m->boot_secret_len = sizeof m->boot_secret;
                if (m->boot_secret_path[0]) {
                        int k = boot_secret_save(m->boot_secret_path, m->boot_id, m->boot_secret);
                        if (k < 0)
                                log_warning_errno(k, "Cannot keep the boot secret in %s (a restarted agent will wait "
                                                  "until its node counts as stale): %m", m->boot_secret_path);
                }
        }
        if (d->attested != m->attested) {
                log_debug("Coordinator %s this agent's attestation: the identity document is %s.",
                          d->attested ? "holds" : "does not hold", d->attested ? "left out" : "sent");
                m->attested = d->attested;
        }
        if (d->report_interval_ms >= 100 && d->report_interval_ms <= 3600 * 1000)
                m->interval_usec = (uint64_t) d->report_interval_ms * 1000;

        if (d->action != m->action || !streq_ptr(d->reason, m->drain_reason) ||
            d->deadline_unix_ms != m->drain_deadline_ms || d->force != m->drain_force) {
                if (d->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN)
                        log_notice("Coordinator directs: drain (reason %s, deadline %lld).",
                                   isempty(d->reason) ? "unspecified" : d->reason,
                                   (long long) d->deadline_unix_ms);
                else if (m->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN)
                        log_notice("Coordinator directs: run (drain withdrawn).");
                m->action = d->action;
                r = free_and_strdup(&m->drain_reason, d->reason);
                m->drain_deadline_ms = d->deadline_unix_ms;
                m->drain_force = d->force;
        }
out:
        nodesmith__v1__node_directive__free_unpacked(d, NULL);
        return r;
}
