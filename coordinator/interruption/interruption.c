/* SPDX-License-Identifier: Apache-2.0 */
/* The interruption queue's consumer: EventBridge events from SQS become notices on nodes. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aws/aws-credentials.h"
#include "agents/registry.h"
#include "agents/server.h"
#include "interruption.h"
#include "json-util.h"
#include "kube.h"
#include "log.h"
#include "promtext.h"
#include "macro.h"
#include "quantity.h"

#define NODEPOOL_LABEL "nodesmith.io/nodepool"
#define TERMINATION_FINALIZER "nodesmith.io/termination"

struct Interruption {
        sd_event *event;
        InterruptionSink sink;
        HttpClient *http;
        AwsCredentialProvider *creds;
        SqsClient *sqs;
        InterruptionStats stats;
};

/* ---- an entry for a Node whose agent has not reported ------------------------------------ */

static void resources_from_node(const cJSON *list, Nodesmith__V1__Resources *r) {
        int64_t v;
        if (quantity_parse_milli(strempty(json_str(list, "cpu")), &v) >= 0)
                r->cpu_millis = v;
        if (quantity_parse(strempty(json_str(list, "memory")), &v) >= 0)
                r->memory_bytes = v;
        if (quantity_parse(strempty(json_str(list, "pods")), &v) >= 0)
                r->pods = v;
        if (quantity_parse(strempty(json_str(list, "ephemeral-storage")), &v) >= 0)
                r->ephemeral_storage_bytes = v;
        if (quantity_parse(strempty(json_str(list, "nvidia.com/gpu")), &v) >= 0)
                r->gpus = v;
}

static bool has_finalizer(const cJSON *node) {
        const cJSON *f;
        cJSON_ArrayForEach(f, json_get(json_get(node, "metadata"), "finalizers"))
                if (streq_ptr(cJSON_GetStringValue(f), TERMINATION_FINALIZER))
                        return true;
        return false;
}

/* A Node nodesmith launched (its NodePool label) or looks after (its finalizer). */
static bool node_managed(const cJSON *node) {
        return json_str(json_get(json_get(node, "metadata"), "labels"), NODEPOOL_LABEL) || has_finalizer(node);
}

static bool node_ready(const cJSON *node) {
        const cJSON *x;
        cJSON_ArrayForEach(x, json_get(json_get(node, "status"), "conditions"))
                if (streq_ptr(json_str(x, "type"), "Ready"))
                        return streq_ptr(json_str(x, "status"), "True");
        return false;
}

/* The state an agent would report, as far as the Node tells it: identity, capacity and
 * allocatable; no pods (what runs there is unknown). */
static int entry_from_node(const InterruptionSink *c, const cJSON *node, const char *id, NodeEntry **ret) {
        const cJSON *labels = json_get(json_get(node, "metadata"), "labels");
        const char *ct = json_str(labels, "karpenter.sh/capacity-type") ?: json_str(labels, "nodesmith.io/capacity-type");
        const char *zone = json_str(labels, "topology.kubernetes.io/zone");
        char pzone[64] = "";
        const char *pid = json_str(json_get(node, "spec"), "providerID");

        /* aws:///ZONE/ID */
        if (!zone && pid && strncmp(pid, "aws:///", 7) == 0) {
                const char *z = pid + 7, *slash = strchr(z, '/');
                if (slash && (size_t) (slash - z) < sizeof pzone) {
                        memcpy(pzone, z, (size_t) (slash - z));
                        pzone[slash - z] = 0;
                        zone = pzone;
                }
        }
        Nodesmith__V1__Identity ident = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Resources cap = NODESMITH__V1__RESOURCES__INIT, alloc = NODESMITH__V1__RESOURCES__INIT,
                                 req = NODESMITH__V1__RESOURCES__INIT;
        Nodesmith__V1__NodeState st = NODESMITH__V1__NODE_STATE__INIT;
        ident.instance_id = (char *) id;
        ident.node_name = (char *) strempty(kube_object_meta(node, "name"));
        ident.instance_type = (char *) strempty(json_str(labels, "node.kubernetes.io/instance-type"));
        ident.zone = (char *) strempty(zone);
        ident.region = (char *) strempty(json_str(labels, "topology.kubernetes.io/region"));
        ident.arch = (char *) strempty(json_str(labels, "kubernetes.io/arch"));
        ident.nodepool = (char *) strempty(json_str(labels, NODEPOOL_LABEL));
        ident.capacity_type = streq_ptr(ct, "spot")        ? NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT
                              : streq_ptr(ct, "on-demand") ? NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_ON_DEMAND
                                                           : NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_UNSPECIFIED;
        resources_from_node(json_get(json_get(node, "status"), "capacity"), &cap);
        resources_from_node(json_get(json_get(node, "status"), "allocatable"), &alloc);
        st.identity = &ident;
        st.capacity = &cap;
        st.allocatable = &alloc;
        st.requested = &req;
        st.node_ready = node_ready(node);
        st.finalizer_present = has_finalizer(node);

        size_t n = nodesmith__v1__node_state__get_packed_size(&st);
        _cleanup_free_ uint8_t *bytes = malloc(n ?: 1);
        if (!bytes)
                return -ENOMEM;
        nodesmith__v1__node_state__pack(&st, bytes);
        PbArena *arena = pb_arena_new(n * 4 + 512);
        Nodesmith__V1__NodeState *state =
                arena ? nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), n, bytes) : NULL;
        if (!state) {
                pb_arena_free(arena);
                return -ENOMEM;
        }
        int r = registry_put_unreported(c->registry, id, state, arena, bytes, n, c->now(c->userdata), ret);
        if (r < 0)
                pb_arena_free(arena);
        return r;
}

/* ---- events ------------------------------------------------------------------------------ */

int interruption_apply(const InterruptionSink *c, InterruptionStats *stats, const SqsEvent *ev, const char *id,
                       int64_t now) {
        const NoticeRecord *rec = NULL;
        const char *kind = sqs_event_kind_to_string(ev->kind);
        int r;

        if (ev->notice_kind <= 0) {
                log_debug("Interruption queue: %s %s (%s) for %s calls for nothing.", kind, ev->id, ev->action, id);
                stats->ignored++;
                return 0;
        }
        if (registry_is_buried(c->registry, id)) {
                log_debug("Interruption queue: %s %s for %s, terminated already.", kind, ev->id, id);
                stats->ignored++;
                return 0;
        }
        NodeEntry *e = registry_get(c->registry, id);
        if (!e) {
                const cJSON *node = NULL;
                r = c->find_node ? c->find_node(c->userdata, id, &node) : -ENOENT;
                if (r == -EAGAIN)
                        return r; /* the Nodes are not listed yet: the message comes back */
                bool leaving = ev->notice_kind == NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION ||
                               ev->notice_kind == NODESMITH__V1__NOTICE__KIND__KIND_SHUTDOWN;
                if (r == -ENOENT && leaving && c->instance_leaving && c->instance_leaving(c->userdata, id))
                        return 0; /* launched, not registered yet: no capacity on the way any more */
                if (r == -ENOENT && c->launch_unanswered && c->launch_unanswered(c->userdata)) {
                        /* EC2 can tell of an instance before its CreateFleet answer arrives */
                        log_debug("Interruption queue: %s %s for %s, not known while a launch is answered; "
                                  "read again in %us.", kind, ev->id, id, SQS_SOON_SECONDS);
                        return -EAGAIN;
                }
                if (r < 0 || !node_managed(node)) {
                        log_info("Interruption queue: %s %s for %s: no node of this cluster has that instance; ignored.",
                                 kind, ev->id, id);
                        stats->ignored++;
                        return 0;
                }
                r = entry_from_node(c, node, id, &e);
                if (r < 0)
                        return log_warning_errno(r, "Interruption queue: %s %s for %s (Node %s): cannot record it: %m",
                                                 kind, ev->id, id, strempty(kube_object_meta(node, "name")));
                log_notice("Interruption queue: %s for %s, whose agent has not reported: Node %s taken from the API.",
                           kind, id, strempty(kube_object_meta(node, "name")));
        }
        r = registry_add_notice(e, ev->notice_kind, ev->id, ev->deadline_unix_ms, now, NOTICE_FROM_QUEUE, &rec);
        if (r < 0)
                return log_warning_errno(r, "Node %s: cannot record the %s notice %s: %m", id, kind, ev->id);
        if (r == 0) {
                stats->duplicates++;
                log_debug("Node %s: interruption queue event %s repeats its %s notice %s.", id, ev->id,
                          notice_kind_to_string(ev->notice_kind), rec->event_id);
        } else if (c->notice_added)
                c->notice_added(c->userdata, e, rec);
        if (c->apply_notices)
                c->apply_notices(c->userdata, e);
        return r;
}

/* Printable start of a body, for the log. */
static void preview(const char *body, size_t len, char *out, size_t size) {
        size_t k = 0;
        for (size_t i = 0; i < len && k + 4 < size; i++)
                out[k++] = body[i] >= 0x20 && body[i] < 0x7f ? body[i] : '?';
        if (len > k && k + 4 <= size) {
                memcpy(out + k, "...", 3);
                k += 3;
        }
        out[k] = 0;
}

SqsVerdict interruption_handle_body(const InterruptionSink *c, InterruptionStats *stats, const char *body, size_t len,
                                    int64_t now) {
        SqsEvent ev;
        char p[100];
        int r = sqs_event_parse(body, len, &ev);
        if (r < 0) {
                stats->not_understood++;
                preview(body, len, p, sizeof p);
                log_warning("Interruption queue: %s message deleted: %s", r == -EOPNOTSUPP ? "unknown" : "malformed", p);
                return SQS_DELETE;
        }
        stats->received[ev.kind]++;
        bool again = false, soon = false;
        for (size_t i = 0; i < ev.n_instances; i++) {
                r = interruption_apply(c, stats, &ev, ev.instances[i], now);
                if (r == -EAGAIN) /* what it needs is on its way */
                        soon = true;
                else if (r < 0) {
                        stats->errors++;
                        again = true;
                }
        }
        return again ? SQS_LEAVE : soon ? SQS_SOON : SQS_DELETE;
}

static SqsVerdict on_message(SqsClient *s, const SqsMessage *m, void *userdata) {
        Interruption *q = userdata;
        uint64_t now = 0;
        (void) sd_event_now(q->event, CLOCK_REALTIME, &now);
        return interruption_handle_body(&q->sink, &q->stats, m->body, m->body_len, (int64_t) (now / USEC_PER_MSEC));
}

/* ---- set-up ------------------------------------------------------------------------------ */

int interruption_new(sd_event *e, const InterruptionConfig *cfg, const InterruptionSink *sink,
                     Interruption **ret) {
        Interruption *q = calloc(1, sizeof *q);
        int r;

        if (!q)
                return -ENOMEM;
        q->event = e;
        q->sink = *sink;
        r = http_client_new(e, &q->http);
        if (r >= 0) {
                AwsCredentialsConfig acc = { .region = cfg->region };
                r = aws_credential_provider_new(e, q->http, &acc, &q->creds);
        }
        if (r >= 0) {
                SqsConfig sc = { .region = cfg->region, .queue_url = cfg->queue_url, .endpoint = cfg->endpoint };
                r = sqs_client_new(e, q->http, q->creds, &sc, on_message, q, &q->sqs);
        }
        if (r < 0) {
                interruption_free(q);
                return r;
        }
        *ret = q;
        return 0;
}

Interruption *interruption_free(Interruption *q) {
        if (!q)
                return NULL;
        sqs_client_free(q->sqs);
        aws_credential_provider_free(q->creds);
        http_client_free(q->http);
        free(q);
        return NULL;
}

void interruption_set_active(Interruption *q, bool active) {
        if (q)
                (void) sqs_client_set_active(q->sqs, active);
}

void interruption_metrics(Interruption *q, StrBuf *b) {
        if (!q)
                return;
        const SqsStats *s = sqs_client_stats(q->sqs);
        strbuf_printf(b, "# HELP nodesmith_interruption_messages_total Interruption queue messages understood, by kind.\n"
                         "# TYPE nodesmith_interruption_messages_total counter\n");
        for (int k = 0; k < _SQS_EVENT_KIND_MAX; k++)
                strbuf_printf(b, "nodesmith_interruption_messages_total{kind=\"%s\"} %llu\n", sqs_event_kind_to_string(k),
                              (unsigned long long) q->stats.received[k]);
        prom_counter(b, "nodesmith_interruption_not_understood_total",
                     "Interruption queue messages deleted unread (malformed or of another kind).", q->stats.not_understood);
        prom_counter(b, "nodesmith_interruption_duplicates_total",
                     "Queue notices the node had already (from its agent or an earlier message).", q->stats.duplicates);
        prom_counter(b, "nodesmith_interruption_ignored_total",
                     "Queue events for instances of no node of this cluster, or calling for nothing.", q->stats.ignored);
        prom_counter(b, "nodesmith_interruption_read_again_total",
                     "Queue messages asked back within seconds: their instance was not known yet while a launch "
                     "was being answered, or the Nodes not listed yet.", s->soon);
        strbuf_printf(b, "# HELP nodesmith_interruption_errors_total Interruption queue failures, by operation (each retried).\n"
                         "# TYPE nodesmith_interruption_errors_total counter\n"
                         "nodesmith_interruption_errors_total{op=\"receive\"} %llu\n"
                         "nodesmith_interruption_errors_total{op=\"delete\"} %llu\n"
                         "nodesmith_interruption_errors_total{op=\"apply\"} %llu\n",
                      (unsigned long long) s->receive_errors, (unsigned long long) s->delete_errors,
                      (unsigned long long) q->stats.errors);
        strbuf_printf(b, "# HELP nodesmith_interruption_messages_deleted_total Interruption queue messages deleted.\n"
                         "# TYPE nodesmith_interruption_messages_deleted_total counter\n"
                         "nodesmith_interruption_messages_deleted_total %llu\n"
                         "# HELP nodesmith_interruption_queue_polling Whether this replica polls the interruption queue.\n"
                         "# TYPE nodesmith_interruption_queue_polling gauge\nnodesmith_interruption_queue_polling %d\n",
                      (unsigned long long) s->deleted, sqs_client_active(q->sqs) ? 1 : 0);
}
