/* SPDX-License-Identifier: Apache-2.0 */
#include <openssl/crypto.h>
#include <string.h>
#include <time.h>

#include "coordinator.h"
#include "log.h"
#include "macro.h"

static const char *const result_names[_REPORT_RESULT_MAX] = {
        [REPORT_OK] = "ok",
        [REPORT_DUPLICATE] = "duplicate",
        [REPORT_INVALID] = "invalid",
        [REPORT_UNAUTHENTICATED] = "unauthenticated",
        [REPORT_VERSION_MISMATCH] = "version_mismatch",
        [REPORT_OVERLOADED] = "overloaded",
};

const char *report_result_to_string(ReportResult r) {
        return r >= 0 && r < _REPORT_RESULT_MAX ? result_names[r] : "unknown";
}

const char *notice_kind_to_string(int kind) {
        static const char *const names[NOTICE_KINDS] = {
                "unspecified", "spot_interruption", "rebalance", "maintenance", "shutdown", "node_deleted",
        };
        return kind >= 0 && kind < NOTICE_KINDS ? names[kind] : "unknown";
}

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool token_equal(const char *given, const char *expected) {
        size_t gl = strlen(given), el = strlen(expected);
        if (gl != el || el == 0)
                return false;
        return CRYPTO_memcmp(given, expected, el) == 0;
}

/* A refused agent is logged, but at most once every 10 s with a count of what was suppressed, so
 * a misconfigured fleet cannot flood the journal. */
static void log_refusal(Coordinator *c, const char *what, const char *instance) {
        uint64_t now = coordinator_now(c);
        if (c->auth_log_usec && now - c->auth_log_usec < 10 * USEC_PER_SEC) {
                c->auth_suppressed++;
                return;
        }
        log_warning("Refused report from %s: %s%s", isempty(instance) ? "unidentified agent" : instance,
                    what, c->auth_suppressed ? " (and earlier refusals not logged)" : "");
        c->auth_log_usec = now;
        c->auth_suppressed = 0;
}

static void on_notice_change(const NodeEntry *e, const NoticeRecord *n, bool added, void *userdata) {
        Coordinator *c = userdata;
        int k = n->kind >= 0 && n->kind < NOTICE_KINDS ? n->kind : 0;
        if (added) {
                c->metrics.notices_total[k]++;
                int64_t left = n->deadline_unix_ms > 0 ? n->deadline_unix_ms - n->recorded_unix_ms : 0;
                if (n->deadline_unix_ms > 0)
                        log_notice("Node %s: %s notice %s, deadline in %.1fs.", e->instance_id,
                                   notice_kind_to_string(k), n->event_id, (double) left / 1000.0);
                else
                        log_notice("Node %s: %s notice %s.", e->instance_id, notice_kind_to_string(k),
                                   n->event_id);
        } else {
                c->metrics.notices_withdrawn_total[k]++;
                log_notice("Node %s: %s notice %s withdrawn.", e->instance_id,
                           notice_kind_to_string(k), n->event_id);
        }
}

static bool report_valid(const Coordinator *c, const Nodesmith__V1__AgentReport *r, const char **why) {
        if (!r->identity || isempty(r->identity->instance_id)) {
                *why = "report carries no instance id";
                return false;
        }
        if (strlen(r->identity->instance_id) > 64) {
                *why = "instance id too long";
                return false;
        }
        if (!r->capacity || !r->allocatable) {
                *why = "report carries no capacity";
                return false;
        }
        if (r->n_pods > c->cfg.max_pods_per_node) {
                *why = "too many pods in one report";
                return false;
        }
        if (r->n_notices > c->cfg.max_notices_per_node) {
                *why = "too many notices in one report";
                return false;
        }
        if (r->allocatable->cpu_millis < 0 || r->allocatable->memory_bytes < 0 ||
            r->allocatable->pods < 0 || r->capacity->cpu_millis < 0) {
                *why = "negative resources";
                return false;
        }
        return true;
}

int coordinator_handle_report(const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                              size_t *ret_len, void *userdata) {
        Coordinator *c = userdata;
        Nodesmith__V1__NodeDirective d = NODESMITH__V1__NODE_DIRECTIVE__INIT;
        ReportResult result = REPORT_OK;
        const char *why = NULL;
        char errbuf[160];
        NodeEntry *e = NULL;

        d.protocol_version = NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
        d.report_interval_ms = (uint32_t) c->cfg.report_interval_ms;
        d.now_unix_ms = now_unix_ms();

        /* Everything the report holds lives in one arena, released in one go. */
        PbArena *arena = pb_arena_new(len * 4 + 512);
        Nodesmith__V1__AgentReport *r =
                arena ? nodesmith__v1__agent_report__unpack(pb_arena_allocator(arena), len, req) : NULL;
        if (!r) {
                result = REPORT_INVALID;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_INVALID;
                d.error = (char *) "malformed report";
                log_refusal(c, "malformed message", NULL);
                goto reply;
        }
        d.ack_sequence = r->sequence;
        const char *instance = r->identity ? r->identity->instance_id : NULL;

        if (r->protocol_version != NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT) {
                result = REPORT_VERSION_MISMATCH;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_VERSION_MISMATCH;
                snprintf(errbuf, sizeof errbuf,
                         "coordinator %s speaks protocol version %d, the agent sent version %u",
                         COORDINATOR_VERSION, NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT,
                         r->protocol_version);
                d.error = errbuf;
                log_refusal(c, errbuf, instance);
                goto reply;
        }
        if (!token_equal(strempty(r->token), c->token)) {
                result = REPORT_UNAUTHENTICATED;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_UNAUTHENTICATED;
                d.error = (char *) "bootstrap token not accepted";
                log_refusal(c, "wrong bootstrap token", instance);
                goto reply;
        }
        if (!report_valid(c, r, &why)) {
                result = REPORT_INVALID;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_INVALID;
                d.error = (char *) why;
                log_refusal(c, why, instance);
                goto reply;
        }

        bool is_new = false;
        int k = registry_update(&c->registry, r, arena, coordinator_now(c), &e, &is_new);
        if (k == -EALREADY) {
                result = REPORT_DUPLICATE; /* still answered with the desired state */
                e = registry_get(&c->registry, instance);
        } else if (k == -ENOSPC) {
                result = REPORT_OVERLOADED;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OVERLOADED;
                d.error = (char *) "coordinator at its node limit";
                log_refusal(c, "node limit reached (max-nodes)", instance);
                goto reply;
        } else if (k < 0) {
                result = REPORT_OVERLOADED;
                d.status = NODESMITH__V1__NODE_DIRECTIVE__STATUS__STATUS_OVERLOADED;
                d.error = (char *) "coordinator out of memory";
                goto reply;
        } else {
                r = NULL; /* the registry owns it now */
                arena = NULL;
                if (registry_sync_notices(e, d.now_unix_ms, on_notice_change, c) < 0)
                        log_warning("Node %s: out of memory recording notices.", e->instance_id);
                if (is_new) {
                        c->metrics.nodes_registered_total++;
                        const Nodesmith__V1__Identity *id = e->report->identity;
                        log_info("Node %s registered: %s %s in %s, allocatable %lldm CPU, %lld MiB, %lld pods.",
                                 id->instance_id, isempty(id->node_name) ? "-" : id->node_name,
                                 isempty(id->instance_type) ? "?" : id->instance_type,
                                 isempty(id->zone) ? "?" : id->zone,
                                 (long long) e->report->allocatable->cpu_millis,
                                 (long long) (e->report->allocatable->memory_bytes >> 20),
                                 (long long) e->report->allocatable->pods);
                }
        }
        if (e) {
                d.action = e->action;
                d.reason = e->reason;
                d.deadline_unix_ms = e->deadline_unix_ms;
                d.force = e->force;
        }

reply:
        c->metrics.reports[result]++;
        pb_arena_free(arena); /* and r with it, unless the registry took them */
        size_t n = nodesmith__v1__node_directive__get_packed_size(&d);
        if (n > reply_size)
                return -EMSGSIZE;
        *ret_len = nodesmith__v1__node_directive__pack(&d, reply);
        return 0;
}
