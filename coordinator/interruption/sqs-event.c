/* SPDX-License-Identifier: Apache-2.0 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "timestamp.h"
#include "aws/aws-credentials.h"
#include "json-util.h"
#include "macro.h"
#include "nodesmith.pb-c.h"
#include "sqs-event.h"

#define K(x) NODESMITH__V1__NOTICE__KIND__KIND_##x
#define SPOT_WARNING_MS (2 * 60 * 1000)

static const char *const kind_names[_SQS_EVENT_KIND_MAX] = {
        [SQS_EVENT_SPOT_INTERRUPTION] = "spot_interruption",
        [SQS_EVENT_REBALANCE] = "rebalance",
        [SQS_EVENT_STATE_CHANGE] = "state_change",
        [SQS_EVENT_SCHEDULED_CHANGE] = "scheduled_change",
};

const char *sqs_event_kind_to_string(SqsEventKind k) {
        return k >= 0 && k < _SQS_EVENT_KIND_MAX ? kind_names[k] : "unknown";
}

bool sqs_instance_id_valid(const char *s) {
        if (!s || strncmp(s, "i-", 2) != 0)
                return false;
        size_t n = 0;
        for (const char *p = s + 2; *p; p++, n++)
                if (!isxdigit((unsigned char) *p) || isupper((unsigned char) *p))
                        return false;
        return n == 8 || n == 17;
}

static int copy(char *dst, size_t size, const char *src) {
        if (!src || strlen(src) >= size)
                return -EBADMSG;
        memcpy(dst, src, strlen(src) + 1);
        return 0;
}

static int add_instance(SqsEvent *ev, const char *id) {
        if (!sqs_instance_id_valid(id))
                return -EBADMSG;
        for (size_t i = 0; i < ev->n_instances; i++)
                if (streq(ev->instances[i], id))
                        return 0;
        if (ev->n_instances >= SQS_EVENT_MAX_INSTANCES)
                return -E2BIG;
        return copy(ev->instances[ev->n_instances++], sizeof ev->instances[0], id);
}

/* RFC 3339 (EventBridge) or an HTTP-date "Sat, 05 Jun 2021 04:00:00 GMT" (Health's startTime). */
static int parse_time_ms(const char *s, int64_t *ret) {
        int64_t usec;
        int r = isempty(s) ? -EBADMSG : timestamp_parse_any(s, &usec);
        if (r < 0)
                return r;
        *ret = usec / 1000;
        return 0;
}

static int parse_spot(const cJSON *detail, SqsEvent *ev) {
        const char *action = json_str(detail, "instance-action");
        int r = add_instance(ev, json_str(detail, "instance-id"));
        if (r < 0)
                return r;
        if (action && !streq(action, "terminate") && !streq(action, "stop") && !streq(action, "hibernate"))
                return -EBADMSG;
        r = copy(ev->action, sizeof ev->action, action ?: "terminate");
        if (r < 0)
                return r;
        ev->notice_kind = K(SPOT_INTERRUPTION);
        /* two minutes after the warning, unless the detail names the time itself */
        const char *t = json_str(detail, "instance-action-time") ?: json_str(detail, "time");
        if (t)
                return parse_time_ms(t, &ev->deadline_unix_ms);
        ev->deadline_unix_ms = ev->time_unix_ms + SPOT_WARNING_MS;
        return 0;
}

static int parse_rebalance(const cJSON *detail, SqsEvent *ev) {
        int r = add_instance(ev, json_str(detail, "instance-id"));
        if (r < 0)
                return r;
        ev->notice_kind = K(REBALANCE);
        return copy(ev->action, sizeof ev->action, "rebalance");
}

static int parse_state_change(const cJSON *detail, SqsEvent *ev) {
        static const char *const leaving[] = { "stopping", "stopped", "shutting-down", "terminated" };
        const char *state = json_str(detail, "state");
        int r = add_instance(ev, json_str(detail, "instance-id"));
        if (r < 0)
                return r;
        r = copy(ev->action, sizeof ev->action, state);
        if (r < 0 || isempty(state))
                return -EBADMSG;
        for (size_t i = 0; i < ELEMENTSOF(leaving); i++)
                if (streq(state, leaving[i])) {
                        /* the instance is going now: an immediate shutdown */
                        ev->notice_kind = K(SHUTDOWN);
                        ev->deadline_unix_ms = ev->time_unix_ms;
                }
        return 0;
}

static int parse_scheduled_change(const cJSON *detail, SqsEvent *ev) {
        const char *service = json_str(detail, "service"), *category = json_str(detail, "eventTypeCategory");
        const char *code = json_str(detail, "eventTypeCode"), *status = json_str(detail, "statusCode");
        const cJSON *entities = json_get(detail, "affectedEntities"), *x;
        int r;

        if (!streq_ptr(service, "EC2") || !streq_ptr(category, "scheduledChange"))
                return -EOPNOTSUPP; /* Health events of other services and categories */
        if (!cJSON_IsArray(entities))
                return -EBADMSG;
        cJSON_ArrayForEach(x, entities) {
                const char *id = json_str(x, "entityValue");
                if (!sqs_instance_id_valid(id))
                        continue; /* entities that are not instances */
                r = add_instance(ev, id);
                if (r < 0)
                        return r;
        }
        if (ev->n_instances == 0)
                return -EBADMSG;
        r = copy(ev->action, sizeof ev->action, code ?: "scheduledChange");
        if (r < 0)
                return r;
        if (streq_ptr(status, "closed"))
                return 0; /* over or canceled: nothing to do */
        ev->notice_kind = K(MAINTENANCE);
        const char *start = json_str(detail, "startTime");
        if (start && parse_time_ms(start, &ev->deadline_unix_ms) < 0)
                return -EBADMSG;
        return 0;
}

int sqs_event_parse(const char *body, size_t len, SqsEvent *ret) {
        static const struct {
                const char *source, *detail_type;
                SqsEventKind kind;
                int (*parse)(const cJSON *detail, SqsEvent *ev);
        } table[] = {
                { "aws.ec2", "EC2 Spot Instance Interruption Warning", SQS_EVENT_SPOT_INTERRUPTION, parse_spot },
                { "aws.ec2", "EC2 Instance Rebalance Recommendation", SQS_EVENT_REBALANCE, parse_rebalance },
                { "aws.ec2", "EC2 Instance State-change Notification", SQS_EVENT_STATE_CHANGE, parse_state_change },
                { "aws.health", "AWS Health Event", SQS_EVENT_SCHEDULED_CHANGE, parse_scheduled_change },
        };
        SqsEvent ev = {};
        int r = -EOPNOTSUPP;

        if (!body || len == 0 || len > SQS_EVENT_BODY_MAX)
                return -EBADMSG;
        cJSON *j = cJSON_ParseWithLength(body, len);
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return -EBADMSG;
        }
        const char *source = json_str(j, "source"), *type = json_str(j, "detail-type");
        const cJSON *detail = json_get(j, "detail");
        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                if (!streq_ptr(type, table[i].detail_type))
                        continue;
                if (!streq_ptr(source, table[i].source) || !cJSON_IsObject(detail) ||
                    copy(ev.id, sizeof ev.id, json_str(j, "id")) < 0 || isempty(ev.id) ||
                    parse_time_ms(json_str(j, "time"), &ev.time_unix_ms) < 0) {
                        r = -EBADMSG;
                        break;
                }
                ev.kind = table[i].kind;
                r = table[i].parse(detail, &ev);
                break;
        }
        cJSON_Delete(j);
        if (r < 0)
                return r == -EOPNOTSUPP ? r : -EBADMSG;
        *ret = ev;
        return 0;
}
