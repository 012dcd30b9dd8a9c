/* SPDX-License-Identifier: Apache-2.0 */
/* The HTTP API's answers (/metrics, nodes, provisioning, disruption) rendered from the loop's
 * state. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "apiauth.h"
#include "macro.h"
#include "promtext.h"
#include "pbjson.h"
#include "strbuf.h"

#define BODY_MAX (64u * 1024 * 1024)

const char *capacity_type_name(Nodesmith__V1__CapacityType t) {
        switch (t) {
        case NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT:
                return "spot";
        case NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_ON_DEMAND:
                return "on-demand";
        default:
                return "";
        }
}

static int metrics_render(const ApiView *c, char **ret, size_t *ret_len) {
        StrBuf b;
        NodeEntry *e;
        uint64_t now = c->now_usec;

        strbuf_init(&b, BODY_MAX);
        strbuf_printf(&b, "# HELP nodesmith_build_info Version of the running coordinator.\n"
                          "# TYPE nodesmith_build_info gauge\n"
                          "nodesmith_build_info{version=\"%s\"} 1\n", COORDINATOR_VERSION);
        strbuf_printf(&b, "# HELP nodesmith_reports_total Agent reports received, by result.\n"
                          "# TYPE nodesmith_reports_total counter\n");
        for (int i = 0; i < _REPORT_RESULT_MAX; i++)
                strbuf_printf(&b, "nodesmith_reports_total{result=\"%s\"} %llu\n",
                              report_result_to_string(i), (unsigned long long) c->agents->reports[i]);
        if (c->api_auth) {
                ApiAuthStats a;
                api_auth_stats(c->api_auth, &a);
                strbuf_printf(&b, "# HELP nodesmith_api_requests_total /api/v1 requests by the verdict on their credentials (TokenReview, SubjectAccessReview).\n"
                                  "# TYPE nodesmith_api_requests_total counter\n"
                                  "nodesmith_api_requests_total{result=\"allowed\"} %llu\n"
                                  "nodesmith_api_requests_total{result=\"unauthenticated\"} %llu\n"
                                  "nodesmith_api_requests_total{result=\"forbidden\"} %llu\n"
                                  "nodesmith_api_requests_total{result=\"unavailable\"} %llu\n"
                                  "# HELP nodesmith_api_auth_cache_hits_total /api/v1 verdicts taken from the 10 s cache.\n"
                                  "# TYPE nodesmith_api_auth_cache_hits_total counter\n"
                                  "nodesmith_api_auth_cache_hits_total %llu\n",
                              (unsigned long long) a.allowed, (unsigned long long) a.unauthenticated,
                              (unsigned long long) a.forbidden, (unsigned long long) a.unavailable,
                              (unsigned long long) a.cache_hits);
        }
        {
                LinkGuardStats g;
                link_server_guard_stats(c->link, &g);
                strbuf_printf(&b, "# HELP nodesmith_link_connections Agent connections now, by state.\n"
                                  "# TYPE nodesmith_link_connections gauge\n"
                                  "nodesmith_link_connections{state=\"authenticated\"} %llu\n"
                                  "nodesmith_link_connections{state=\"unauthenticated\"} %llu\n"
                                  "# HELP nodesmith_link_connections_refused_total Agent connections closed as they arrived, by the limit they met.\n"
                                  "# TYPE nodesmith_link_connections_refused_total counter\n"
                                  "nodesmith_link_connections_refused_total{limit=\"max-connections\"} %llu\n"
                                  "nodesmith_link_connections_refused_total{limit=\"max-connections-per-source\"} %llu\n"
                                  "nodesmith_link_connections_refused_total{limit=\"max-unauthenticated\"} %llu\n"
                                  "nodesmith_link_connections_refused_total{limit=\"max-unauthenticated-per-source\"} %llu\n"
                                  "# HELP nodesmith_link_connections_closed_total Agent connections closed by a timeout.\n"
                                  "# TYPE nodesmith_link_connections_closed_total counter\n"
                                  "nodesmith_link_connections_closed_total{reason=\"auth-timeout\"} %llu\n"
                                  "nodesmith_link_connections_closed_total{reason=\"idle-timeout\"} %llu\n"
                                  "nodesmith_link_connections_closed_total{reason=\"handshake-timeout\"} %llu\n"
                                  "nodesmith_link_connections_closed_total{reason=\"handshake-limit\"} %llu\n"
                                  "# HELP nodesmith_link_connections_idle_deferred_total Idle closes put off: data had arrived on the connection within idle-timeout though no request of it had been received.\n"
                                  "# TYPE nodesmith_link_connections_idle_deferred_total counter\n"
                                  "nodesmith_link_connections_idle_deferred_total %llu\n"
                                  "# HELP nodesmith_link_handshakes TCP connections still in their TLS handshake, at the last sweep.\n"
                                  "# TYPE nodesmith_link_handshakes gauge\n"
                                  "nodesmith_link_handshakes %llu\n"
                                  "# HELP nodesmith_link_handshakes_closing TCP connections not yet pipes and already shut down (by a sweep or by the peer) whose descriptors the link library has not closed yet, at the last sweep; not counted against the caps.\n"
                                  "# TYPE nodesmith_link_handshakes_closing gauge\n"
                                  "nodesmith_link_handshakes_closing %llu\n",
                              (unsigned long long) (g.pipes - g.unauthenticated), (unsigned long long) g.unauthenticated,
                              (unsigned long long) g.refused_total, (unsigned long long) g.refused_per_source,
                              (unsigned long long) g.refused_unauthenticated,
                              (unsigned long long) g.refused_unauthenticated_per_source, (unsigned long long) g.closed_auth_timeout,
                              (unsigned long long) g.closed_idle, (unsigned long long) g.handshakes_closed_timeout,
                              (unsigned long long) g.handshakes_closed_limit, (unsigned long long) g.idle_deferred,
                              (unsigned long long) g.handshakes, (unsigned long long) g.handshakes_closing);
        }
        strbuf_printf(&b, "# HELP nodesmith_notices_total Notices that a node will go away, first recorded, by kind.\n"
                          "# TYPE nodesmith_notices_total counter\n");
        for (int k = 1; k < NOTICE_KINDS; k++)
                strbuf_printf(&b, "nodesmith_notices_total{kind=\"%s\"} %llu\n", notice_kind_to_string(k),
                              (unsigned long long) c->agents->notices_total[k]);
        strbuf_printf(&b, "# HELP nodesmith_notices_withdrawn_total Notices withdrawn (e.g. maintenance canceled).\n"
                          "# TYPE nodesmith_notices_withdrawn_total counter\n");
        for (int k = 1; k < NOTICE_KINDS; k++)
                strbuf_printf(&b, "nodesmith_notices_withdrawn_total{kind=\"%s\"} %llu\n",
                              notice_kind_to_string(k),
                              (unsigned long long) c->agents->notices_withdrawn_total[k]);
        {
                uint64_t in_force[NOTICE_KINDS] = {};
                NodeEntry *ne;
                REGISTRY_FOREACH(ne, c->registry)
                        for (size_t i = 0; i < ne->n_notices; i++)
                                if (ne->notices[i].kind > 0 && ne->notices[i].kind < NOTICE_KINDS)
                                        in_force[ne->notices[i].kind]++;
                strbuf_printf(&b, "# HELP nodesmith_notices_in_force Notices currently in force, by kind.\n"
                                  "# TYPE nodesmith_notices_in_force gauge\n");
                for (int k = 1; k < NOTICE_KINDS; k++)
                        strbuf_printf(&b, "nodesmith_notices_in_force{kind=\"%s\"} %llu\n",
                                      notice_kind_to_string(k), (unsigned long long) in_force[k]);
        }
        strbuf_printf(&b, "# HELP nodesmith_reports_unchanged_total Reports whose node state was unchanged (not re-read).\n"
                          "# TYPE nodesmith_reports_unchanged_total counter\nnodesmith_reports_unchanged_total %llu\n",
                      (unsigned long long) c->agents->reports_unchanged_total);
        strbuf_printf(&b, "# HELP nodesmith_nodes Nodes known from agent reports.\n"
                          "# TYPE nodesmith_nodes gauge\nnodesmith_nodes %zu\n", c->registry->n);
        strbuf_printf(&b, "# HELP nodesmith_nodes_registered_total Nodes that registered.\n"
                          "# TYPE nodesmith_nodes_registered_total counter\n"
                          "nodesmith_nodes_registered_total %llu\n",
                      (unsigned long long) c->agents->nodes_registered_total);
        strbuf_printf(&b, "# HELP nodesmith_link_messages_total Messages received on the agent link.\n"
                          "# TYPE nodesmith_link_messages_total counter\n"
                          "nodesmith_link_messages_total %llu\n",
                      (unsigned long long) link_server_handled(c->link));
        strbuf_printf(&b, "# HELP nodesmith_link_replies_dropped_total Replies that could not be sent.\n"
                          "# TYPE nodesmith_link_replies_dropped_total counter\n"
                          "nodesmith_link_replies_dropped_total %llu\n",
                      (unsigned long long) link_server_dropped(c->link));
        strbuf_printf(&b, "# HELP nodesmith_http_requests_total HTTP requests served.\n"
                          "# TYPE nodesmith_http_requests_total counter\n"
                          "nodesmith_http_requests_total %llu\n",
                      (unsigned long long) c->http_requests);

        strbuf_printf(&b, "# HELP nodesmith_node_allocatable Allocatable resources reported by each node's agent.\n"
                          "# TYPE nodesmith_node_allocatable gauge\n");
        REGISTRY_FOREACH(e, c->registry) {
                const Nodesmith__V1__Resources *a = e->state->allocatable;
                const struct {
                        const char *name;
                        int64_t v;
                } res[] = { { "cpu", a->cpu_millis }, { "memory", a->memory_bytes },
                            { "pods", a->pods }, { "ephemeral_storage", a->ephemeral_storage_bytes },
                            { "nvidia_com_gpu", a->gpus } };
                for (size_t k = 0; k < ELEMENTSOF(res); k++) {
                        strbuf_printf(&b, "nodesmith_node_allocatable{instance_id=\"");
                        prom_label_value(&b, e->instance_id);
                        strbuf_printf(&b, "\",node=\"");
                        prom_label_value(&b, e->state->identity->node_name);
                        if (k == 0)
                                strbuf_printf(&b, "\",resource=\"cpu\"} %.3f\n", (double) res[k].v / 1000.0);
                        else
                                strbuf_printf(&b, "\",resource=\"%s\"} %lld\n", res[k].name,
                                              (long long) res[k].v);
                }
        }
        strbuf_printf(&b, "# HELP nodesmith_node_report_age_seconds Time since each node's last report.\n"
                          "# TYPE nodesmith_node_report_age_seconds gauge\n");
        REGISTRY_FOREACH(e, c->registry) {
                strbuf_printf(&b, "nodesmith_node_report_age_seconds{instance_id=\"");
                prom_label_value(&b, e->instance_id);
                strbuf_printf(&b, "\"} %.3f\n", (double) (now - e->last_seen_usec) / 1e6);
        }
        strbuf_printf(&b, "# HELP nodesmith_leader Whether this replica holds the Lease (acts).\n"
                          "# TYPE nodesmith_leader gauge\nnodesmith_leader %d\n", c->leading ? 1 : 0);
        provisioner_metrics(c->provisioner, &b);
        attestor_metrics(c->attest, &b);
        proxy_drains_metrics(c->proxy_drains, &b);
        interruption_metrics(c->interruption, &b);
        if (c->more_metrics)
                c->more_metrics(c->userdata, &b);
        if (b.error < 0) {
                int r = b.error;
                strbuf_done(&b);
                return r;
        }
        *ret = b.data;
        *ret_len = b.len;
        return 0;
}

static int api_provisioning_render(const ApiView *c, char **ret, size_t *ret_len) {
        char *s = provisioner_api(c->provisioner);
        if (!s)
                return -ENOMEM;
        *ret = s;
        *ret_len = strlen(s);
        return 0;
}

static int api_disruption_render(const ApiView *c, char **ret, size_t *ret_len) {
        char *s = c->disruption ? disruption_api(c->disruption)
                                 : strdup("{\"state\": \"off\", \"message\": \"no provisioning (no --cluster-name)\"}");
        if (!s)
                return -ENOMEM;
        *ret = s;
        *ret_len = strlen(s);
        return 0;
}

static cJSON *resources_json(const Nodesmith__V1__Resources *r) {
        cJSON *o = NULL;
        if (!r || pb_to_json(&r->base, false, &o) < 0)
                return cJSON_CreateObject();
        return o;
}

/* "sources": ["agent"], ["queue"] or both: who told of a notice. */
static void add_sources(cJSON *j, unsigned sources) {
        cJSON *a = cJSON_AddArrayToObject(j, "sources");
        if (a && (sources & NOTICE_FROM_AGENT))
                cJSON_AddItemToArray(a, cJSON_CreateString("agent"));
        if (a && (sources & NOTICE_FROM_QUEUE))
                cJSON_AddItemToArray(a, cJSON_CreateString("queue"));
}

static int api_nodes_render(const ApiView *c, char **ret, size_t *ret_len) {
        cJSON *root = cJSON_CreateObject(), *items;
        NodeEntry *e;
        uint64_t now = c->now_usec;

        if (!root)
                return -ENOMEM;
        cJSON_AddStringToObject(root, "kind", "NodeList");
        items = cJSON_AddArrayToObject(root, "items");
        if (!items) {
                cJSON_Delete(root);
                return -ENOMEM;
        }
        REGISTRY_FOREACH(e, c->registry) {
                const Nodesmith__V1__NodeState *r = e->state;
                const Nodesmith__V1__Identity *id = r->identity;
                cJSON *n = cJSON_CreateObject();
                if (!n)
                        break;
                cJSON_AddStringToObject(n, "name", id->node_name);
                cJSON_AddStringToObject(n, "instanceId", id->instance_id);
                cJSON_AddStringToObject(n, "instanceType", id->instance_type);
                cJSON_AddStringToObject(n, "zone", id->zone);
                cJSON_AddStringToObject(n, "capacityType", capacity_type_name(id->capacity_type));
                cJSON_AddStringToObject(n, "arch", id->arch);
                cJSON_AddStringToObject(n, "nodepool", id->nodepool);
                cJSON_AddStringToObject(n, "agentVersion", id->agent_version);
                cJSON_AddItemToObject(n, "capacity", resources_json(r->capacity));
                cJSON_AddItemToObject(n, "allocatable", resources_json(r->allocatable));
                cJSON_AddItemToObject(n, "requested", resources_json(r->requested));
                cJSON_AddNumberToObject(n, "pods", (double) r->n_pods);
                cJSON *notices = cJSON_AddArrayToObject(n, "notices");
                for (size_t i = 0; notices && i < r->n_notices; i++) {
                        cJSON *j = NULL;
                        if (pb_to_json(&r->notices[i]->base, false, &j) < 0)
                                continue;
                        const NoticeRecord *rec = registry_find_notice(e, strempty(r->notices[i]->event_id));
                        if (rec) {
                                cJSON_AddNumberToObject(j, "recordedUnixMs", (double) rec->recorded_unix_ms);
                                add_sources(j, rec->sources);
                        }
                        cJSON_AddItemToArray(notices, j);
                }
                /* what only the interruption queue told of */
                for (size_t i = 0; notices && i < e->n_notices; i++) {
                        const NoticeRecord *rec = &e->notices[i];
                        const ProtobufCEnumValue *k =
                                protobuf_c_enum_descriptor_get_value(&nodesmith__v1__notice__kind__descriptor, rec->kind);
                        cJSON *j = rec->sources == NOTICE_FROM_QUEUE ? cJSON_CreateObject() : NULL;
                        if (!j)
                                continue;
                        cJSON_AddStringToObject(j, "kind", k ? k->name : "KIND_UNSPECIFIED");
                        cJSON_AddStringToObject(j, "eventId", rec->event_id);
                        if (rec->deadline_unix_ms)
                                cJSON_AddNumberToObject(j, "deadlineUnixMs", (double) rec->deadline_unix_ms);
                        cJSON_AddNumberToObject(j, "recordedUnixMs", (double) rec->recorded_unix_ms);
                        add_sources(j, rec->sources);
                        cJSON_AddItemToArray(notices, j);
                }
                if (r->drain) {
                        cJSON *j = NULL;
                        if (pb_to_json(&r->drain->base, false, &j) >= 0)
                                cJSON_AddItemToObject(n, "drain", j);
                }
                cJSON_AddStringToObject(n, "action", e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN ? "drain" : "run");
                if (e->reason)
                        cJSON_AddStringToObject(n, "drainReason", e->reason);
                if (e->deadline_unix_ms)
                        cJSON_AddNumberToObject(n, "drainDeadlineUnixMs", (double) e->deadline_unix_ms);
                cJSON_AddNumberToObject(n, "reportSequence", (double) e->sequence);
                cJSON_AddNumberToObject(n, "reports", (double) e->reports);
                cJSON_AddNumberToObject(n, "lastReportAgeSeconds",
                                        (double) (now - e->last_seen_usec) / 1e6);
                cJSON_AddItemToArray(items, n);
        }
        char *s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        if (!s)
                return -ENOMEM;
        *ret = s;
        *ret_len = strlen(s);
        return 0;
}

int api_render(const ApiView *v, HttpPage page, char **ret, size_t *ret_len) {
        switch (page) {
        case HTTP_PAGE_METRICS:
                return metrics_render(v, ret, ret_len);
        case HTTP_PAGE_NODES:
                return api_nodes_render(v, ret, ret_len);
        case HTTP_PAGE_PROVISIONING:
                return api_provisioning_render(v, ret, ret_len);
        case HTTP_PAGE_DISRUPTION:
                return api_disruption_render(v, ret, ret_len);
        default:
                return -EINVAL;
        }
}
