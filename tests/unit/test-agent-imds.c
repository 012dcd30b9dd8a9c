/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imds.h"
#include "log.h"

#define KIND(k) NODESMITH__V1__NOTICE__KIND__KIND_##k

static int parse_action(const char *s, ImdsNotice *n) {
        return imds_parse_instance_action(s, strlen(s), n);
}

static int parse_rebalance(const char *s, ImdsNotice *n) {
        return imds_parse_rebalance(s, strlen(s), n);
}

static int parse_maint(const char *s, ImdsNotice *v, size_t max, size_t *n) {
        return imds_parse_maintenance(s, strlen(s), v, max, n);
}

static void test_dates(void **state) {
        int64_t ms;
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00Z", &ms), 0);
        assert_int_equal(ms, INT64_C(1505722920000));
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00.250Z", &ms), 0);
        assert_int_equal(ms, INT64_C(1505722920250));
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00+00:00", &ms), 0);
        assert_int_equal(ms, INT64_C(1505722920000));
        assert_int_equal(imds_parse_gmt_date("21 Jan 2019 09:00:43 GMT", &ms), 0);
        assert_int_equal(ms, INT64_C(1548061243000));
        assert_int_equal(imds_parse_gmt_date("1 Mar 2024 00:00:00 GMT", &ms), 0);
        assert_int_equal(ms, INT64_C(1709251200000));

        /* malformed */
        assert_int_equal(imds_parse_iso8601("2017-09-18 08:22:00", &ms), -EBADMSG);
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00+02:00", &ms), -EBADMSG);
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00Zjunk", &ms), -EBADMSG);
        assert_int_equal(imds_parse_iso8601("", &ms), -EBADMSG);
        assert_int_equal(imds_parse_iso8601("2017-09-18T08:22:00.Z", &ms), -EBADMSG);
        assert_int_equal(imds_parse_gmt_date("21 Jan 2019 09:00:43", &ms), -EBADMSG);
        assert_int_equal(imds_parse_gmt_date("21 Jan 2019 09:00:43 GMT+1", &ms), -EBADMSG);
        assert_int_equal(imds_parse_gmt_date("2019-01-21T09:00:43Z", &ms), -EBADMSG);
        /* absurd */
        assert_int_equal(imds_parse_iso8601("1970-01-01T00:00:00Z", &ms), -ERANGE);
        assert_int_equal(imds_parse_iso8601("9999-01-01T00:00:00Z", &ms), -ERANGE);
        assert_int_equal(imds_parse_iso8601("2030-02-31T00:00:00Z", &ms), -ERANGE);
        assert_int_equal(imds_parse_gmt_date("31 Feb 2030 09:00:43 GMT", &ms), -ERANGE);
        assert_int_equal(imds_parse_gmt_date("21 Jan 1999 09:00:43 GMT", &ms), -ERANGE);
        /* nothing written on failure */
        ms = 42;
        assert_int_equal(imds_parse_iso8601("garbage", &ms), -EBADMSG);
        assert_int_equal(ms, 42);
}

static void test_instance_action(void **state) {
        ImdsNotice n;
        assert_int_equal(parse_action("{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}", &n), 0);
        assert_int_equal(n.kind, KIND(SPOT_INTERRUPTION));
        assert_string_equal(n.action, "terminate");
        assert_string_equal(n.event_id, "terminate@2017-09-18T08:22:00Z");
        assert_int_equal(n.deadline_unix_ms, INT64_C(1505722920000));
        assert_int_equal(n.first_seen_unix_ms, 0);

        assert_int_equal(parse_action(" {\"time\":\"2017-09-18T08:22:00Z\",\"action\":\"hibernate\"}\n", &n), 0);
        assert_string_equal(n.action, "hibernate");
        assert_int_equal(parse_action("{\"action\": \"stop\", \"time\": \"2017-09-18T08:22:00Z\"}", &n), 0);
        assert_string_equal(n.event_id, "stop@2017-09-18T08:22:00Z");

        /* malformed JSON, wrong types, unknown action, absurd date, trailing junk */
        static const char *const bad[] = {
                "", "none", "{", "[]", "null", "\"terminate\"",
                "{\"action\": \"terminate\"}",
                "{\"time\": \"2017-09-18T08:22:00Z\"}",
                "{\"action\": 1, \"time\": \"2017-09-18T08:22:00Z\"}",
                "{\"action\": \"terminate\", \"time\": 1505722920}",
                "{\"action\": \"reboot\", \"time\": \"2017-09-18T08:22:00Z\"}",
                "{\"action\": \"terminate\", \"time\": \"next tuesday\"}",
                "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"} {}",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(parse_action(bad[i], &n), -EBADMSG);
        assert_int_equal(parse_action("{\"action\": \"terminate\", \"time\": \"1970-01-01T00:00:00Z\"}", &n),
                         -ERANGE);

        /* huge */
        size_t len = IMDS_MAX_BODY + 100;
        char *huge = malloc(len + 1);
        assert_non_null(huge);
        memset(huge, ' ', len);
        huge[len] = 0;
        const char *head = "{\"action\": \"terminate\", \"time\": \"2017-09-18T08:22:00Z\"}";
        memcpy(huge, head, strlen(head));
        assert_int_equal(imds_parse_instance_action(huge, len, &n), -EFBIG);
        free(huge);
        assert_int_equal(imds_parse_instance_action(NULL, 0, &n), -EBADMSG);
}

static void test_rebalance(void **state) {
        ImdsNotice n;
        assert_int_equal(parse_rebalance("{\"noticeTime\": \"2020-10-27T08:22:00Z\"}", &n), 0);
        assert_int_equal(n.kind, KIND(REBALANCE));
        assert_string_equal(n.event_id, "rebalance@2020-10-27T08:22:00Z");
        assert_int_equal(n.deadline_unix_ms, 0);
        assert_int_equal(parse_rebalance("{\"noticeTime\": null}", &n), -EBADMSG);
        assert_int_equal(parse_rebalance("{\"noticeTime\": 1603786920}", &n), -EBADMSG);
        assert_int_equal(parse_rebalance("[{\"noticeTime\": \"2020-10-27T08:22:00Z\"}]", &n), -EBADMSG);
        assert_int_equal(parse_rebalance("{\"noticetime\": \"2020-10-27T08:22:00Z\"}", &n), -EBADMSG);
        assert_int_equal(parse_rebalance("{\"noticeTime\": \"2300-10-27T08:22:00Z\"}", &n), -ERANGE);
}

#define EV(id, state, nb, na)                                                                      \
        "{\"NotBefore\": \"" nb "\", \"Code\": \"system-reboot\", \"Description\": \"scheduled "  \
        "reboot\", \"EventId\": \"" id "\", \"NotAfter\": \"" na "\", \"State\": \"" state "\"}"

static void test_maintenance(void **state) {
        ImdsNotice v[4];
        size_t n = 99;

        assert_int_equal(parse_maint("[]", v, 4, &n), 0);
        assert_int_equal(n, 0);

        assert_int_equal(parse_maint("[" EV("instance-event-1", "active", "21 Jan 2019 09:00:43 GMT",
                                            "21 Jan 2019 09:17:23 GMT") ", "
                                     EV("instance-event-2", "canceled", "22 Jan 2019 09:00:43 GMT",
                                        "22 Jan 2019 09:17:23 GMT") ", "
                                     EV("instance-event-3", "completed", "23 Jan 2019 09:00:43 GMT",
                                        "23 Jan 2019 09:17:23 GMT") "]",
                                     v, 4, &n), 0);
        assert_int_equal(n, 1); /* only the active one is a notice */
        assert_int_equal(v[0].kind, KIND(MAINTENANCE));
        assert_string_equal(v[0].event_id, "instance-event-1");
        assert_string_equal(v[0].action, "system-reboot");
        assert_string_equal(v[0].description, "scheduled reboot");
        assert_int_equal(v[0].deadline_unix_ms, INT64_C(1548061243000));
        assert_int_equal(v[0].not_after_unix_ms, INT64_C(1548062243000));

        /* one bad element refuses the whole answer */
        static const char *const bad[] = {
                "{}", "[1]", "[null]", "not json", "[{\"EventId\": 5}]",
                "[" EV("e", "active", "21 Jan 2019 09:00:43", "21 Jan 2019 09:17:23 GMT") "]",
                "[" EV("e", "active", "2019-01-21T09:00:43Z", "21 Jan 2019 09:17:23 GMT") "]",
                "[" EV("", "active", "21 Jan 2019 09:00:43 GMT", "21 Jan 2019 09:17:23 GMT") "]",
                "[{\"NotBefore\": \"21 Jan 2019 09:00:43 GMT\", \"Code\": \"system-reboot\", "
                "\"EventId\": \"e\", \"State\": 1}]",
                "[{\"NotBefore\": \"21 Jan 2019 09:00:43 GMT\", \"Code\": \"system-reboot\", "
                "\"EventId\": \"e\", \"State\": \"active\", \"Description\": 7}]",
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                n = 99;
                assert_int_equal(parse_maint(bad[i], v, 4, &n), -EBADMSG);
                assert_int_equal(n, 99);
        }
        assert_int_equal(parse_maint("[" EV("e", "active", "31 Feb 2019 09:00:43 GMT",
                                            "1 Mar 2019 09:17:23 GMT") "]", v, 4, &n), -ERANGE);
        /* window ending before it starts */
        assert_int_equal(parse_maint("[" EV("e", "active", "21 Jan 2019 09:00:43 GMT",
                                            "20 Jan 2019 09:17:23 GMT") "]", v, 4, &n), -ERANGE);
        /* more active events than room: the first max */
        assert_int_equal(parse_maint("[" EV("a", "active", "21 Jan 2019 09:00:43 GMT", "21 Jan 2019 09:17:23 GMT")
                                     "," EV("b", "active", "21 Jan 2019 09:00:43 GMT", "21 Jan 2019 09:17:23 GMT")
                                     "," EV("c", "active", "21 Jan 2019 09:00:43 GMT", "21 Jan 2019 09:17:23 GMT") "]",
                                     v, 2, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(v[1].event_id, "b");
}

static ImdsNotice mk(Nodesmith__V1__Notice__Kind kind, const char *id) {
        ImdsNotice n = { .kind = kind };
        snprintf(n.event_id, sizeof n.event_id, "%s", id);
        return n;
}

static void test_merge(void **state) {
        ImdsNotice set[IMDS_MAX_NOTICES];
        size_t n = 0;
        ImdsNotice cur[3];

        cur[0] = mk(KIND(SPOT_INTERRUPTION), "terminate@t1");
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), cur, 1, 1000), 1);
        assert_int_equal(n, 1);
        assert_int_equal(set[0].first_seen_unix_ms, 1000);

        /* the same notice again: not new, first_seen kept */
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), cur, 1, 2000), 0);
        assert_int_equal(n, 1);
        assert_int_equal(set[0].first_seen_unix_ms, 1000);

        /* another kind leaves the spot notice alone */
        cur[0] = mk(KIND(MAINTENANCE), "ev-1");
        cur[1] = mk(KIND(MAINTENANCE), "ev-2");
        cur[2] = mk(KIND(MAINTENANCE), "ev-1"); /* duplicate in one answer: once */
        assert_int_equal(imds_notices_merge(set, &n, KIND(MAINTENANCE), cur, 3, 3000), 2);
        assert_int_equal(n, 3);

        /* ev-1 canceled: withdrawn; ev-2 keeps its first_seen */
        cur[0] = mk(KIND(MAINTENANCE), "ev-2");
        assert_int_equal(imds_notices_merge(set, &n, KIND(MAINTENANCE), cur, 1, 4000), 1);
        assert_int_equal(n, 2);
        bool spot = false, ev2 = false;
        for (size_t i = 0; i < n; i++) {
                if (set[i].kind == KIND(SPOT_INTERRUPTION))
                        spot = set[i].first_seen_unix_ms == 1000;
                if (streq(set[i].event_id, "ev-2"))
                        ev2 = set[i].first_seen_unix_ms == 3000;
        }
        assert_true(spot);
        assert_true(ev2);

        /* spot notice gone (404): withdrawn; a new time is a new notice */
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), NULL, 0, 5000), 1);
        assert_int_equal(n, 1);
        cur[0] = mk(KIND(SPOT_INTERRUPTION), "terminate@t2");
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), cur, 1, 6000), 1);
        assert_int_equal(n, 2);
}

static ImdsNotice mk_timed(Nodesmith__V1__Notice__Kind kind, const char *action, int64_t when) {
        ImdsNotice n = { .kind = kind, .deadline_unix_ms = when };
        snprintf(n.action, sizeof n.action, "%s", action);
        snprintf(n.event_id, sizeof n.event_id, "%s@%lld", action, (long long) when);
        return n;
}

static const ImdsNotice *only(const ImdsNotice *set, size_t n, Nodesmith__V1__Notice__Kind kind) {
        const ImdsNotice *found = NULL;
        for (size_t i = 0; i < n; i++)
                if (set[i].kind == kind) {
                        assert_null(found);
                        found = &set[i];
                }
        assert_non_null(found);
        return found;
}

/* amazon-ec2-metadata-mock answers spot/instance-action with "now + 2 min" and the rebalance
 * recommendation with "now", afresh on every request: one notice each, not one per poll. */
static void test_merge_moving_time(void **state) {
        ImdsNotice set[IMDS_MAX_NOTICES];
        size_t n = 0;
        ImdsNotice cur;

        cur = mk_timed(KIND(SPOT_INTERRUPTION), "terminate", 120000);
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), &cur, 1, 1000), 1);
        for (int64_t t = 121000; t <= 130000; t += 1000) {
                cur = mk_timed(KIND(SPOT_INTERRUPTION), "terminate", t);
                assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), &cur, 1, t), 0);
        }
        const ImdsNotice *s = only(set, n, KIND(SPOT_INTERRUPTION));
        assert_string_equal(s->event_id, "terminate@120000");
        assert_int_equal(s->deadline_unix_ms, 120000);
        assert_int_equal(s->first_seen_unix_ms, 1000);

        /* brought forward: the earlier deadline is reported, first_seen kept */
        cur = mk_timed(KIND(SPOT_INTERRUPTION), "terminate", 90000);
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), &cur, 1, 20000), 1);
        s = only(set, n, KIND(SPOT_INTERRUPTION));
        assert_int_equal(s->deadline_unix_ms, 90000);
        assert_string_equal(s->event_id, "terminate@90000");
        assert_int_equal(s->first_seen_unix_ms, 1000);

        /* another action is another notice: the old one withdrawn, the new one added */
        cur = mk_timed(KIND(SPOT_INTERRUPTION), "stop", 90000);
        assert_int_equal(imds_notices_merge(set, &n, KIND(SPOT_INTERRUPTION), &cur, 1, 21000), 2);
        s = only(set, n, KIND(SPOT_INTERRUPTION));
        assert_string_equal(s->action, "stop");
        assert_int_equal(s->first_seen_unix_ms, 21000);

        /* a recommendation has no deadline: its moving noticeTime changes nothing; maintenance
         * events stay named by EventId: a new id is a new event (the old one withdrawn) */
        static const struct {
                Nodesmith__V1__Notice__Kind kind;
                const char *action, *first, *second, *kept;
                int changes;
        } renamed[] = {
                { KIND(REBALANCE), "rebalance", "rebalance@t1", "rebalance@t2", "rebalance@t1", 0 },
                { KIND(MAINTENANCE), "system-reboot", "instance-event-1", "instance-event-2",
                  "instance-event-2", 2 },
        };
        for (size_t i = 0; i < ELEMENTSOF(renamed); i++) {
                cur = mk_timed(renamed[i].kind, renamed[i].action, 50000);
                snprintf(cur.event_id, sizeof cur.event_id, "%s", renamed[i].first);
                assert_int_equal(imds_notices_merge(set, &n, renamed[i].kind, &cur, 1, 22000), 1);
                snprintf(cur.event_id, sizeof cur.event_id, "%s", renamed[i].second);
                assert_int_equal(imds_notices_merge(set, &n, renamed[i].kind, &cur, 1, 23000),
                                 renamed[i].changes);
                assert_string_equal(only(set, n, renamed[i].kind)->event_id, renamed[i].kept);
        }
        assert_int_equal(n, 3);
}

int main(void) {
        log_set_max_level(LOG_ERR);
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_dates),
                cmocka_unit_test(test_instance_action),
                cmocka_unit_test(test_rebalance),
                cmocka_unit_test(test_maintenance),
                cmocka_unit_test(test_merge),
                cmocka_unit_test(test_merge_moving_time),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
