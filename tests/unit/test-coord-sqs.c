/* SPDX-License-Identifier: Apache-2.0 */
/* coordinator/sqs*.c and interruption.c: SQS request bodies and answers, EventBridge event
 * bodies (real shapes and broken ones), and one notice from two sources: the agent and the
 * interruption queue. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents/server.h"
#include "interruption/interruption.h"
#include "log.h"
#include "interruption/sqs-event.h"
#include "aws/sqs.h"

#define K(x) NODESMITH__V1__NOTICE__KIND__KIND_##x
#define DRAIN NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN
#define RUN NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_RUN

/* ---- SQS requests and answers ------------------------------------------------------------ */

static void test_request_bodies(void **state) {
        char *s = sqs_build_receive("https://sqs.us-east-1.amazonaws.com/123456789012/q", 10, 20);
        cJSON *j = cJSON_Parse(s);
        assert_non_null(j);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "QueueUrl")),
                            "https://sqs.us-east-1.amazonaws.com/123456789012/q");
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "MaxNumberOfMessages")), 10);
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "WaitTimeSeconds")), 20);
        cJSON_Delete(j);
        free(s);

        s = sqs_build_delete("https://q/1/x", "AQEB\"quoted\"+/=");
        j = cJSON_Parse(s);
        assert_non_null(j);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "ReceiptHandle")), "AQEB\"quoted\"+/=");
        cJSON_Delete(j);
        free(s);

        s = sqs_build_visibility("https://q/1/x", "AQEB", 2);
        j = cJSON_Parse(s);
        assert_non_null(j);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "QueueUrl")), "https://q/1/x");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(j, "ReceiptHandle")), "AQEB");
        assert_int_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "VisibilityTimeout")), 2);
        cJSON_Delete(j);
        free(s);
}

static void test_parse_receive(void **state) {
        SqsMessage m[SQS_MAX_MESSAGES];
        size_t n = 99;
        const char *two = "{\"Messages\": [{\"MessageId\": \"a1\", \"ReceiptHandle\": \"rh1\", \"MD5OfBody\": \"x\", "
                          "\"Body\": \"{\\\"id\\\":1}\"}, {\"MessageId\": \"a2\", \"ReceiptHandle\": \"rh2\", \"Body\": \"\"}]}";
        assert_int_equal(sqs_parse_receive(two, strlen(two), m, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(m[0].message_id, "a1");
        assert_string_equal(m[0].receipt_handle, "rh1");
        assert_string_equal(m[0].body, "{\"id\":1}");
        assert_int_equal(m[0].body_len, 8);
        assert_string_equal(m[1].body, "");
        for (size_t i = 0; i < n; i++)
                sqs_message_done(&m[i]);

        assert_int_equal(sqs_parse_receive("{}", 2, m, &n), 0);
        assert_int_equal(n, 0);

        n = 77;
        static const char *const bad[] = {
                "", "null", "[]", "{\"Messages\": {}}", "{\"Messages\": [1]}",
                "{\"Messages\": [{\"MessageId\": \"a\", \"Body\": \"b\"}]}",          /* no receipt handle */
                "{\"Messages\": [{\"MessageId\": \"a\", \"ReceiptHandle\": \"r\"}]}", /* no body */
                "{\"Messages\": [{\"MessageId\": \"a\", \"ReceiptHandle\": \"r\", \"Body\": 5}]}",
                "{\"Messages\": [{\"MessageId\": \"a\", \"ReceiptHandle\": \"r\", \"Body\": \"b\"}", /* cut */
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(sqs_parse_receive(bad[i], strlen(bad[i]), m, &n), -EBADMSG);
        /* more than SQS ever sends */
        char big[4096] = "{\"Messages\": [";
        for (int i = 0; i < 11; i++)
                snprintf(big + strlen(big), sizeof big - strlen(big), "%s{\"MessageId\":\"m%d\",\"ReceiptHandle\":\"r\",\"Body\":\"b\"}",
                         i ? "," : "", i);
        strcat(big, "]}");
        assert_int_equal(sqs_parse_receive(big, strlen(big), m, &n), -EBADMSG);
        assert_int_equal(n, 77); /* written only on success */
}

/* ---- EventBridge events ------------------------------------------------------------------ */

static const char SPOT[] =
        "{\"version\": \"0\", \"id\": \"1e5527d7-bb36-4607-3370-4164db56a40e\", "
        "\"detail-type\": \"EC2 Spot Instance Interruption Warning\", \"source\": \"aws.ec2\", "
        "\"account\": \"123456789012\", \"time\": \"1970-01-01T00:00:00Z\", \"region\": \"us-east-1\", "
        "\"resources\": [\"arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0\"], "
        "\"detail\": {\"instance-id\": \"i-0b662ef9931388ba0\", \"instance-action\": \"terminate\"}}";

static const char REBALANCE[] =
        "{\"version\": \"0\", \"id\": \"5f2a2a3b-4c1e-4f2b-8e0a-2b1c3d4e5f60\", "
        "\"detail-type\": \"EC2 Instance Rebalance Recommendation\", \"source\": \"aws.ec2\", "
        "\"account\": \"123456789012\", \"time\": \"2020-10-26T14:14:14Z\", \"region\": \"us-east-1\", "
        "\"resources\": [\"arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0\"], "
        "\"detail\": {\"instance-id\": \"i-0b662ef9931388ba0\"}}";

static const char STOPPING[] =
        "{\"version\": \"0\", \"id\": \"7bf73129-1428-4cd3-a780-95db273d1602\", "
        "\"detail-type\": \"EC2 Instance State-change Notification\", \"source\": \"aws.ec2\", "
        "\"account\": \"123456789012\", \"time\": \"2015-11-11T21:29:54Z\", \"region\": \"us-east-1\", "
        "\"resources\": [\"arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111\"], "
        "\"detail\": {\"instance-id\": \"i-abcd1111\", \"state\": \"stopping\"}}";

static const char HEALTH[] =
        "{\"version\": \"0\", \"id\": \"7fb65329-1628-4cf3-a740-95fg457h1402\", \"detail-type\": \"AWS Health Event\", "
        "\"source\": \"aws.health\", \"account\": \"123456789012\", \"time\": \"2021-05-20T12:00:00Z\", "
        "\"region\": \"us-east-1\", \"resources\": [\"i-0b662ef9931388ba0\", \"i-0123456789abcdef0\"], "
        "\"detail\": {\"eventArn\": \"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x\", "
        "\"service\": \"EC2\", \"eventTypeCode\": \"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED\", "
        "\"eventTypeCategory\": \"scheduledChange\", \"startTime\": \"Sat, 05 Jun 2021 04:00:00 GMT\", "
        "\"endTime\": \"Sat, 05 Jun 2021 06:00:00 GMT\", \"statusCode\": \"upcoming\", "
        "\"eventDescription\": [{\"language\": \"en_US\", \"latestDescription\": \"retirement\"}], "
        "\"affectedEntities\": [{\"entityValue\": \"i-0b662ef9931388ba0\"}, {\"entityValue\": \"vol-123\"}, "
        "{\"entityValue\": \"i-0123456789abcdef0\"}]}}";

static int parse(const char *s, SqsEvent *ev) {
        return sqs_event_parse(s, strlen(s), ev);
}

/* The body with one substring replaced. */
static char *with(const char *body, const char *from, const char *to) {
        const char *p = strstr(body, from);
        assert_non_null(p);
        size_t n = strlen(body) - strlen(from) + strlen(to) + 1;
        char *s = malloc(n);
        snprintf(s, n, "%.*s%s%s", (int) (p - body), body, to, p + strlen(from));
        return s;
}

static void test_event_spot(void **state) {
        SqsEvent ev;
        assert_int_equal(parse(SPOT, &ev), 0);
        assert_int_equal(ev.kind, SQS_EVENT_SPOT_INTERRUPTION);
        assert_string_equal(ev.id, "1e5527d7-bb36-4607-3370-4164db56a40e");
        assert_int_equal(ev.n_instances, 1);
        assert_string_equal(ev.instances[0], "i-0b662ef9931388ba0");
        assert_string_equal(ev.action, "terminate");
        assert_int_equal(ev.notice_kind, K(SPOT_INTERRUPTION));
        assert_int_equal(ev.time_unix_ms, 0);
        assert_int_equal(ev.deadline_unix_ms, 120000); /* two minutes after the warning */

        /* the detail's own time wins */
        char *s = with(SPOT, "\"instance-action\": \"terminate\"",
                       "\"instance-action\": \"stop\", \"instance-action-time\": \"1970-01-01T00:01:30Z\"");
        assert_int_equal(parse(s, &ev), 0);
        assert_string_equal(ev.action, "stop");
        assert_int_equal(ev.deadline_unix_ms, 90000);
        free(s);
        s = with(SPOT, "\"instance-action\": \"terminate\"", "\"instance-action\": \"explode\"");
        assert_int_equal(parse(s, &ev), -EBADMSG);
        free(s);
}

static void test_event_others(void **state) {
        SqsEvent ev;
        assert_int_equal(parse(REBALANCE, &ev), 0);
        assert_int_equal(ev.kind, SQS_EVENT_REBALANCE);
        assert_int_equal(ev.notice_kind, K(REBALANCE));
        assert_int_equal(ev.deadline_unix_ms, 0);

        assert_int_equal(parse(STOPPING, &ev), 0);
        assert_int_equal(ev.kind, SQS_EVENT_STATE_CHANGE);
        assert_string_equal(ev.instances[0], "i-abcd1111");
        assert_string_equal(ev.action, "stopping");
        assert_int_equal(ev.notice_kind, K(SHUTDOWN));
        assert_int_equal(ev.deadline_unix_ms, 1447277394000LL); /* now */
        static const char *const leaving[] = { "stopped", "shutting-down", "terminated" };
        for (size_t i = 0; i < ELEMENTSOF(leaving); i++) {
                char to[64];
                snprintf(to, sizeof to, "\"state\": \"%s\"", leaving[i]);
                char *s = with(STOPPING, "\"state\": \"stopping\"", to);
                assert_int_equal(parse(s, &ev), 0);
                assert_int_equal(ev.notice_kind, K(SHUTDOWN));
                free(s);
        }
        char *s = with(STOPPING, "\"state\": \"stopping\"", "\"state\": \"running\"");
        assert_int_equal(parse(s, &ev), 0);
        assert_int_equal(ev.notice_kind, 0); /* calls for nothing */
        free(s);

        assert_int_equal(parse(HEALTH, &ev), 0);
        assert_int_equal(ev.kind, SQS_EVENT_SCHEDULED_CHANGE);
        assert_int_equal(ev.notice_kind, K(MAINTENANCE));
        assert_int_equal(ev.n_instances, 2); /* the volume is not an instance */
        assert_string_equal(ev.instances[0], "i-0b662ef9931388ba0");
        assert_string_equal(ev.instances[1], "i-0123456789abcdef0");
        assert_string_equal(ev.action, "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED");
        assert_int_equal(ev.deadline_unix_ms, 1622865600000LL);
        s = with(HEALTH, "\"statusCode\": \"upcoming\"", "\"statusCode\": \"closed\"");
        assert_int_equal(parse(s, &ev), 0);
        assert_int_equal(ev.notice_kind, 0);
        free(s);
        s = with(HEALTH, "\"eventTypeCategory\": \"scheduledChange\"", "\"eventTypeCategory\": \"issue\"");
        assert_int_equal(parse(s, &ev), -EOPNOTSUPP);
        free(s);
        s = with(HEALTH, "\"service\": \"EC2\"", "\"service\": \"RDS\"");
        assert_int_equal(parse(s, &ev), -EOPNOTSUPP);
        free(s);
}

static void test_event_malformed(void **state) {
        SqsEvent ev = { .n_instances = 42 };
        static const char *const bad[] = {
                "", "{", "[]", "\"EC2 Spot Instance Interruption Warning\"",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(sqs_event_parse(bad[i], strlen(bad[i]), &ev), -EBADMSG);
        assert_int_equal(parse("{\"detail-type\": \"Scheduled Event\", \"source\": \"aws.events\"}", &ev), -EOPNOTSUPP);
        assert_int_equal(parse("{\"detail-type\": 1}", &ev), -EOPNOTSUPP);
        const struct {
                const char *body, *from, *to;
        } cases[] = {
                { SPOT, "\"source\": \"aws.ec2\"", "\"source\": \"my.app\"" },        /* forged source */
                { SPOT, "\"id\": \"1e5527d7-bb36-4607-3370-4164db56a40e\"", "\"id\": \"\"" },
                { SPOT, "\"time\": \"1970-01-01T00:00:00Z\"", "\"time\": \"yesterday\"" },
                { SPOT, "\"instance-id\": \"i-0b662ef9931388ba0\"", "\"instance-id\": \"i-XYZ\"" },
                { SPOT, "\"instance-id\": \"i-0b662ef9931388ba0\"", "\"instance-id\": 7" },
                { SPOT, "\"detail\": {", "\"detail\": 3, \"x\": {" },
                { REBALANCE, "\"instance-id\": \"i-0b662ef9931388ba0\"", "\"instance\": \"i-0b662ef9931388ba0\"" },
                { STOPPING, "\"state\": \"stopping\"", "\"state\": null" },
                { HEALTH, "\"startTime\": \"Sat, 05 Jun 2021 04:00:00 GMT\"", "\"startTime\": \"soon\"" },
                { HEALTH, "{\"entityValue\": \"i-0b662ef9931388ba0\"}, {\"entityValue\": \"vol-123\"}, "
                          "{\"entityValue\": \"i-0123456789abcdef0\"}", "{\"entityValue\": \"vol-123\"}" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *s = with(cases[i].body, cases[i].from, cases[i].to);
                assert_int_equal(parse(s, &ev), -EBADMSG);
                free(s);
        }
        assert_int_equal(ev.n_instances, 42); /* written only on success */
        assert_true(sqs_instance_id_valid("i-0123abcd"));
        assert_true(sqs_instance_id_valid("i-0123456789abcdef0"));
        assert_false(sqs_instance_id_valid("i-0123ABCD"));
        assert_false(sqs_instance_id_valid("i-0123abc"));
        assert_false(sqs_instance_id_valid("vol-0123abcd"));
}

/* ---- one notice, two sources ------------------------------------------------------------- */

#define ID "i-0b662ef9931388ba0"

/* The agent server and the interruption queue's sink, wired as the coordinator wires them. */
typedef struct Fx {
        Registry registry;
        AgentServer *agents;
        InterruptionSink sink;
} Fx;

static uint64_t fx_now(void *userdata) {
        return 1;
}

static void fx_notice_added(void *userdata, const NodeEntry *e, const NoticeRecord *n) {
        Fx *c = userdata;
        agent_server_notice_changed(e, n, true, c->agents);
}

static void fx_apply_notices(void *userdata, NodeEntry *e) {
        Fx *c = userdata;
        agent_server_apply_notices(c->agents, e);
}

static Fx *coord(const char *drain_on) {
        Fx *c = calloc(1, sizeof *c);
        AgentServerConfig cfg = { .token = "0123456789abcdef", .report_interval_ms = 1000,
                                  .max_pods_per_node = 100, .max_notices_per_node = 16 };
        AgentServerPorts ports = { .userdata = c, .now = fx_now };
        assert_non_null(c);
        assert_int_equal(registry_init(&c->registry, 100), 0);
        assert_int_equal(notice_policy_parse(drain_on, &cfg.drain_on), 0);
        assert_int_equal(agent_server_new(&cfg, &c->registry, NULL, NULL, &ports, &c->agents), 0);
        c->sink = (InterruptionSink) { .registry = &c->registry, .userdata = c, .now = fx_now,
                                       .notice_added = fx_notice_added, .apply_notices = fx_apply_notices };
        return c;
}

static void fx_free(Fx *c) {
        agent_server_free(c->agents);
        registry_done(&c->registry);
        free(c);
}

/* What server.c does with a report: the state in, the notices synced, the directive. */
static void report(Fx *c, uint64_t seq, const Nodesmith__V1__Notice *const *notices, size_t n) {
        Nodesmith__V1__Identity id = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Resources res = NODESMITH__V1__RESOURCES__INIT;
        Nodesmith__V1__NodeState st = NODESMITH__V1__NODE_STATE__INIT;
        id.instance_id = (char *) ID;
        id.boot_id = (char *) "boot-1";
        id.node_name = (char *) "ip-10-0-0-1.ec2.internal";
        id.capacity_type = NODESMITH__V1__CAPACITY_TYPE__CAPACITY_TYPE_SPOT;
        res.cpu_millis = 2000;
        st.identity = &id;
        st.capacity = st.allocatable = &res;
        st.notices = (Nodesmith__V1__Notice **) notices;
        st.n_notices = n;
        size_t len = nodesmith__v1__node_state__get_packed_size(&st);
        uint8_t *bytes = malloc(len + 1);
        nodesmith__v1__node_state__pack(&st, bytes);
        PbArena *arena = pb_arena_new(len * 4 + 512);
        Nodesmith__V1__NodeState *u = nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), len, bytes);
        assert_non_null(u);
        NodeEntry *e = NULL;
        assert_int_equal(registry_put(&c->registry, ID, seq, u, arena, bytes, len, seq, &e, NULL), 0);
        free(bytes);
        assert_true(registry_sync_notices(e, 1000, agent_server_notice_changed, c->agents) >= 0);
        agent_server_apply_notices(c->agents, e);
}

static SqsVerdict queue(Fx *c, InterruptionStats *s, const char *body) {
        return interruption_handle_body(&c->sink, s, body, strlen(body), 2000);
}

static void test_agent_then_queue(void **state) {
        Fx *c = coord("spot,maintenance");
        InterruptionStats s = {};
        Nodesmith__V1__Notice spot = NODESMITH__V1__NOTICE__INIT;
        spot.kind = K(SPOT_INTERRUPTION);
        spot.event_id = (char *) "terminate@1970-01-01T00:02:00Z";
        spot.deadline_unix_ms = 120000;
        const Nodesmith__V1__Notice *v[] = { &spot };

        report(c, 1, v, 1);
        NodeEntry *e = registry_get(&c->registry, ID);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(SPOT_INTERRUPTION)], 1);
        assert_int_equal(e->action, DRAIN);
        assert_string_equal(e->reason, "spot-interruption");

        assert_int_equal(queue(c, &s, SPOT), SQS_DELETE);
        assert_int_equal(s.received[SQS_EVENT_SPOT_INTERRUPTION], 1);
        assert_int_equal(s.duplicates, 1);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(SPOT_INTERRUPTION)], 1); /* counted once */
        assert_int_equal(e->n_notices, 1);
        assert_int_equal(e->notices[0].sources, NOTICE_FROM_AGENT | NOTICE_FROM_QUEUE);
        assert_int_equal(e->deadline_unix_ms, 120000);

        /* the agent's notice goes, the queue's word stands */
        report(c, 2, NULL, 0);
        assert_int_equal(e->n_notices, 1);
        assert_int_equal(e->notices[0].sources, NOTICE_FROM_QUEUE);
        assert_int_equal(agent_server_metrics(c->agents)->notices_withdrawn_total[K(SPOT_INTERRUPTION)], 0);
        assert_int_equal(e->action, DRAIN);
        fx_free(c);
}

static void test_queue_then_agent(void **state) {
        Fx *c = coord("spot,maintenance");
        InterruptionStats s = {};
        Nodesmith__V1__Notice spot = NODESMITH__V1__NOTICE__INIT, reb = NODESMITH__V1__NOTICE__INIT;
        spot.kind = K(SPOT_INTERRUPTION);
        spot.event_id = (char *) "terminate@1970-01-01T00:02:00Z";
        spot.deadline_unix_ms = 121000;
        reb.kind = K(REBALANCE);
        reb.event_id = (char *) "rebalance@1970-01-01T00:00:00Z";

        report(c, 1, NULL, 0);
        NodeEntry *e = registry_get(&c->registry, ID);
        assert_int_equal(e->action, RUN);
        assert_int_equal(queue(c, &s, SPOT), SQS_DELETE);
        assert_int_equal(s.duplicates, 0);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(SPOT_INTERRUPTION)], 1);
        assert_int_equal(e->action, DRAIN);
        assert_string_equal(e->reason, "spot-interruption");
        assert_int_equal(e->deadline_unix_ms, 120000);
        assert_true(e->force);

        /* a report without it does not withdraw it */
        report(c, 2, NULL, 0);
        assert_int_equal(e->n_notices, 1);
        assert_int_equal(e->action, DRAIN);
        assert_int_equal(agent_server_metrics(c->agents)->notices_withdrawn_total[K(SPOT_INTERRUPTION)], 0);

        /* the agent's own notice later: the same notice, not a second one; a rebalance is new */
        const Nodesmith__V1__Notice *v[] = { &spot, &reb };
        report(c, 3, v, 2);
        assert_int_equal(e->n_notices, 2);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(SPOT_INTERRUPTION)], 1);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(REBALANCE)], 1);
        const NoticeRecord *r = registry_find_notice(e, "terminate@1970-01-01T00:02:00Z");
        assert_non_null(r);
        assert_int_equal(r->sources, NOTICE_FROM_AGENT | NOTICE_FROM_QUEUE);
        assert_int_equal(r->recorded_unix_ms, 2000); /* when the queue told */
        assert_int_equal(e->deadline_unix_ms, 120000); /* the deadline known first stays */

        /* the same report again, then the same message again (redelivered): nothing doubles */
        report(c, 4, v, 2);
        assert_int_equal(queue(c, &s, SPOT), SQS_DELETE);
        assert_int_equal(s.duplicates, 1);
        assert_int_equal(e->n_notices, 2);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(SPOT_INTERRUPTION)], 1);

        /* the agent drops both: the rebalance is withdrawn, the spot notice stays */
        report(c, 5, NULL, 0);
        assert_int_equal(e->n_notices, 1);
        assert_int_equal(agent_server_metrics(c->agents)->notices_withdrawn_total[K(REBALANCE)], 1);
        assert_int_equal(agent_server_metrics(c->agents)->notices_withdrawn_total[K(SPOT_INTERRUPTION)], 0);
        assert_int_equal(e->action, DRAIN);
        fx_free(c);
}

static void test_policy_and_kinds(void **state) {
        /* a rebalance drains only when drain-on says so, from the queue as from the agent */
        Fx *c = coord("spot,maintenance");
        InterruptionStats s = {};
        report(c, 1, NULL, 0);
        NodeEntry *e = registry_get(&c->registry, ID);
        assert_int_equal(queue(c, &s, REBALANCE), SQS_DELETE);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(REBALANCE)], 1);
        assert_int_equal(e->action, RUN);
        fx_free(c);

        c = coord("spot,rebalance,maintenance");
        s = (InterruptionStats) {};
        report(c, 1, NULL, 0);
        e = registry_get(&c->registry, ID);
        assert_int_equal(queue(c, &s, REBALANCE), SQS_DELETE);
        assert_int_equal(e->action, DRAIN);
        assert_string_equal(e->reason, "rebalance-recommendation");
        /* a scheduled change names two instances: the one known gets the notice, the other is
         * of no node here (no provisioner: no Node watch) */
        assert_int_equal(queue(c, &s, HEALTH), SQS_DELETE);
        assert_int_equal(s.received[SQS_EVENT_SCHEDULED_CHANGE], 1);
        assert_int_equal(agent_server_metrics(c->agents)->notices_total[K(MAINTENANCE)], 1);
        assert_int_equal(s.ignored, 1);
        assert_int_equal(e->action, DRAIN);
        assert_string_equal(e->reason, "scheduled-maintenance");
        assert_int_equal(e->deadline_unix_ms, 1622865600000LL);
        fx_free(c);

        /* a state change to stopping: shut down now, whatever drain-on says */
        c = coord("none");
        s = (InterruptionStats) {};
        report(c, 1, NULL, 0);
        e = registry_get(&c->registry, ID);
        char *stop = with(STOPPING, "\"instance-id\": \"i-abcd1111\"", "\"instance-id\": \"" ID "\"");
        assert_int_equal(queue(c, &s, stop), SQS_DELETE);
        free(stop);
        assert_int_equal(e->action, DRAIN);
        assert_string_equal(e->reason, "shutdown");
        assert_int_equal(e->deadline_unix_ms, 1447277394000LL);
        /* garbage is deleted, counted, and changes nothing */
        assert_int_equal(queue(c, &s, "not json at all"), SQS_DELETE);
        assert_int_equal(queue(c, &s, "{\"detail-type\": \"Something Else\", \"source\": \"aws.ec2\"}"), SQS_DELETE);
        assert_int_equal(s.not_understood, 2);
        assert_int_equal(e->n_notices, 1);
        fx_free(c);
}

static void test_unreported_entry(void **state) {
        /* an entry made from elsewhere counts as registered at the agent's first report */
        Fx *c = coord("spot");
        Nodesmith__V1__Identity id = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__Resources res = NODESMITH__V1__RESOURCES__INIT;
        Nodesmith__V1__NodeState st = NODESMITH__V1__NODE_STATE__INIT;
        id.instance_id = (char *) ID;
        st.identity = &id;
        st.capacity = st.allocatable = &res;
        size_t len = nodesmith__v1__node_state__get_packed_size(&st);
        uint8_t bytes[256];
        nodesmith__v1__node_state__pack(&st, bytes);
        PbArena *arena = pb_arena_new(1024);
        Nodesmith__V1__NodeState *u = nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), len, bytes);
        NodeEntry *e = NULL;
        assert_int_equal(registry_put_unreported(&c->registry, ID, u, arena, bytes, len, 5, &e), 0);
        assert_int_equal(e->reports, 0);
        assert_int_equal(e->last_seen_usec, 0);
        assert_false(registry_is_duplicate(e, "", 0));
        InterruptionStats s = {};
        assert_int_equal(queue(c, &s, SPOT), SQS_DELETE);
        assert_int_equal(e->action, DRAIN);

        /* the agent reports: registered now, the queue's notice kept */
        Nodesmith__V1__Identity id2 = NODESMITH__V1__IDENTITY__INIT;
        Nodesmith__V1__NodeState st2 = NODESMITH__V1__NODE_STATE__INIT;
        id2.instance_id = (char *) ID;
        id2.boot_id = (char *) "b";
        st2.identity = &id2;
        st2.capacity = st2.allocatable = &res;
        len = nodesmith__v1__node_state__get_packed_size(&st2);
        nodesmith__v1__node_state__pack(&st2, bytes);
        arena = pb_arena_new(1024);
        u = nodesmith__v1__node_state__unpack(pb_arena_allocator(arena), len, bytes);
        bool is_new = false;
        assert_int_equal(registry_put(&c->registry, ID, 1, u, arena, bytes, len, 9, &e, &is_new), 0);
        assert_true(is_new);
        assert_int_equal(e->reports, 1);
        assert_int_equal(e->last_seen_usec, 9);
        assert_true(registry_sync_notices(e, 3000, agent_server_notice_changed, c->agents) >= 0);
        assert_int_equal(e->n_notices, 1);
        assert_int_equal(e->action, DRAIN);
        assert_int_equal(registry_put_unreported(&c->registry, ID, NULL, NULL, bytes, len, 5, &e), -EEXIST);
        fx_free(c);
}

static bool launch_under_way;

static bool fx_launch_unanswered(void *userdata) {
        return launch_under_way;
}

static int fx_no_node(void *userdata, const char *instance_id, const cJSON **ret) {
        return -ENOENT;
}

static void test_unknown_while_launching(void **state) {
        /* EC2 may tell of an instance (a state change, a spot warning) before the CreateFleet
         * answer that names it is handled: while a launch is answered the message comes back in
         * seconds, otherwise an unknown instance is another cluster's and the message goes */
        Fx *c = coord("spot");
        c->sink.find_node = fx_no_node;
        c->sink.launch_unanswered = fx_launch_unanswered;
        InterruptionStats s = {};
        launch_under_way = true;
        assert_int_equal(queue(c, &s, SPOT), SQS_SOON);
        assert_int_equal(s.errors, 0);
        assert_int_equal(s.ignored, 0);
        assert_null(registry_get(&c->registry, ID));
        launch_under_way = false;
        assert_int_equal(queue(c, &s, SPOT), SQS_DELETE);
        assert_int_equal(s.ignored, 1);
        fx_free(c);
}

int main(void) {
        log_set_max_level(LOG_WARNING);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_request_bodies),
                cmocka_unit_test(test_parse_receive),
                cmocka_unit_test(test_event_spot),
                cmocka_unit_test(test_event_others),
                cmocka_unit_test(test_event_malformed),
                cmocka_unit_test(test_agent_then_queue),
                cmocka_unit_test(test_queue_then_agent),
                cmocka_unit_test(test_policy_and_kinds),
                cmocka_unit_test(test_unreported_entry),
                cmocka_unit_test(test_unknown_while_launching),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
