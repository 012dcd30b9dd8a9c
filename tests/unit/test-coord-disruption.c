/* SPDX-License-Identifier: Apache-2.0 */
/* Disruption rules apart from the coordinator: cron schedules, budgets, drift hashes. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/disruption/balanced.h"
#include "coordinator/model/disruption-policy.h"
#include "coordinator/solver/solver.h"

/* 2026-11-23 was a Monday. */
static time_t utc(int y, int mo, int d, int h, int mi) {
        struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi };
        return timegm(&tm);
}

static void test_cron_parse(void **state) {
        assert_int_equal(disruption_cron_valid("0 9 * * 1-5"), 0);
        assert_int_equal(disruption_cron_valid("*/15 * * * *"), 0);
        assert_int_equal(disruption_cron_valid("0 0 1,15 jan-jun mon"), 0);
        assert_int_equal(disruption_cron_valid("@daily"), 0);
        assert_int_equal(disruption_cron_valid("@weekly"), 0);
        assert_int_equal(disruption_cron_valid("0 0 * * 7"), 0);
        assert_int_equal(disruption_cron_valid(""), -EINVAL);
        assert_int_equal(disruption_cron_valid("60 * * * *"), -EINVAL);
        assert_int_equal(disruption_cron_valid("* * * *"), -EINVAL);
        assert_int_equal(disruption_cron_valid("* * * * * *"), -EINVAL);
        assert_int_equal(disruption_cron_valid("5-1 * * * *"), -EINVAL);
        assert_int_equal(disruption_cron_valid("*/0 * * * *"), -EINVAL);
        assert_int_equal(disruption_cron_valid("@sometimes"), -EINVAL);
        assert_int_equal(disruption_cron_valid("0 0 * foo *"), -EINVAL);
}

static void test_cron_match(void **state) {
        /* weekdays at 09:00 */
        assert_true(disruption_cron_matches("0 9 * * 1-5", utc(2026, 11, 23, 9, 0)));
        assert_true(disruption_cron_matches("0 9 * * mon-fri", utc(2026, 11, 27, 9, 0) + 59));
        assert_false(disruption_cron_matches("0 9 * * 1-5", utc(2026, 11, 22, 9, 0))); /* Sunday */
        assert_false(disruption_cron_matches("0 9 * * 1-5", utc(2026, 11, 23, 9, 1)));
        /* Sunday as 0 and 7 */
        assert_true(disruption_cron_matches("0 0 * * 7", utc(2026, 11, 22, 0, 0)));
        assert_true(disruption_cron_matches("0 0 * * 0", utc(2026, 11, 22, 0, 0)));
        /* steps */
        assert_true(disruption_cron_matches("*/15 * * * *", utc(2026, 11, 23, 3, 45)));
        assert_false(disruption_cron_matches("*/15 * * * *", utc(2026, 11, 23, 3, 46)));
        assert_true(disruption_cron_matches("5/20 * * * *", utc(2026, 11, 23, 3, 25)));
        /* both day fields restricted: either matches (the 1st, or any Monday) */
        assert_true(disruption_cron_matches("0 0 1 * mon", utc(2026, 12, 1, 0, 0)));   /* a Tuesday */
        assert_true(disruption_cron_matches("0 0 1 * mon", utc(2026, 11, 23, 0, 0)));  /* a Monday */
        assert_false(disruption_cron_matches("0 0 1 * mon", utc(2026, 11, 24, 0, 0)));
        /* one restricted: both must hold */
        assert_false(disruption_cron_matches("0 0 1 * *", utc(2026, 11, 23, 0, 0)));
        assert_true(disruption_cron_matches("@monthly", utc(2026, 12, 1, 0, 0)));
        assert_true(disruption_cron_matches("@hourly", utc(2026, 12, 1, 7, 0)));
}

static void test_cron_active(void **state) {
        /* a window of 8h from 09:00 on weekdays */
        assert_true(disruption_cron_active("0 9 * * 1-5", 8 * 3600, utc(2026, 11, 23, 9, 0)));
        assert_true(disruption_cron_active("0 9 * * 1-5", 8 * 3600, utc(2026, 11, 23, 16, 59)));
        assert_false(disruption_cron_active("0 9 * * 1-5", 8 * 3600, utc(2026, 11, 23, 17, 0)));
        assert_false(disruption_cron_active("0 9 * * 1-5", 8 * 3600, utc(2026, 11, 23, 8, 59)));
        assert_false(disruption_cron_active("0 9 * * 1-5", 8 * 3600, utc(2026, 11, 22, 12, 0)));
        /* a window across midnight */
        assert_true(disruption_cron_active("0 22 * * *", 4 * 3600, utc(2026, 11, 24, 1, 30)));
        assert_false(disruption_cron_active("0 22 * * *", 4 * 3600, utc(2026, 11, 24, 2, 0)));
        assert_false(disruption_cron_active("0 22 * * *", 0, utc(2026, 11, 24, 22, 0)));
}

static void test_budgets(void **state) {
        time_t mon_noon = utc(2026, 11, 23, 12, 0), sun_noon = utc(2026, 11, 22, 12, 0);
        /* none: 10 %, rounded up */
        assert_int_equal(disruption_budget(NULL, DISRUPTION_UNDERUTILIZED, 25, mon_noon), 3);
        assert_int_equal(disruption_budget(NULL, DISRUPTION_UNDERUTILIZED, 0, mon_noon), 0);
        cJSON *b = cJSON_Parse("[{\"nodes\": \"20%\"},"
                               " {\"nodes\": \"0\", \"schedule\": \"0 9 * * 1-5\", \"duration\": \"8h\"},"
                               " {\"nodes\": \"1\", \"reasons\": [\"Drifted\"]}]");
        assert_non_null(b);
        /* weekday business hours: nothing for any reason */
        assert_int_equal(disruption_budget(b, DISRUPTION_UNDERUTILIZED, 10, mon_noon), 0);
        assert_int_equal(disruption_budget(b, DISRUPTION_DRIFTED, 10, mon_noon), 0);
        /* Sunday: 20 % of 10, but drift one at a time */
        assert_int_equal(disruption_budget(b, DISRUPTION_UNDERUTILIZED, 10, sun_noon), 2);
        assert_int_equal(disruption_budget(b, DISRUPTION_EMPTY, 10, sun_noon), 2);
        assert_int_equal(disruption_budget(b, DISRUPTION_DRIFTED, 10, sun_noon), 1);
        /* 20 % of 3 rounds up to 1 */
        assert_int_equal(disruption_budget(b, DISRUPTION_EMPTY, 3, sun_noon), 1);
        cJSON_Delete(b);
        /* budgets that all are out of their window limit nothing */
        b = cJSON_Parse("[{\"nodes\": \"0\", \"schedule\": \"@daily\", \"duration\": \"1h\"}]");
        assert_int_equal(disruption_budget(b, DISRUPTION_EMPTY, 5, mon_noon), SIZE_MAX);
        assert_int_equal(disruption_budget(b, DISRUPTION_EMPTY, 5, utc(2026, 11, 23, 0, 30)), 0);
        cJSON_Delete(b);
        assert_string_equal(disruption_reason_to_name(DISRUPTION_DRIFTED), "Drifted");
}

static void test_hash(void **state) {
        char a[17], b[17], c[17];
        cJSON *x = cJSON_Parse("{\"amiSelectorTerms\": [{\"id\": \"ami-1\"}], \"role\": \"r\","
                               " \"subnetSelectorTerms\": [{\"tags\": {\"a\": \"b\"}}]}");
        cJSON *y = cJSON_Parse("{\"subnetSelectorTerms\": [{\"tags\": {\"c\": \"d\"}}], \"role\": \"r\","
                               " \"amiSelectorTerms\": [{\"id\": \"ami-1\"}]}");
        cJSON *z = cJSON_Parse("{\"amiSelectorTerms\": [{\"id\": \"ami-2\"}], \"role\": \"r\"}");
        static const char *const skip[] = { "subnetSelectorTerms", NULL };
        disruption_hash(x, skip, a);
        disruption_hash(y, skip, b);
        disruption_hash(z, skip, c);
        assert_int_equal(strlen(a), 16);
        /* member order and skipped members do not count; content does */
        assert_string_equal(a, b);
        assert_string_not_equal(a, c);
        disruption_hash(x, NULL, c);
        assert_string_not_equal(a, c);
        cJSON_Delete(x);
        cJSON_Delete(y);
        cJSON_Delete(z);
}

static void test_selector(void **state) {
        const SolverLabel l[] = { { "app", "web" }, { "tier", "front" } };
        cJSON *sel;
#define M(json, want)                                                                   \
        sel = cJSON_Parse(json);                                                        \
        assert_true(disruption_selector_matches(sel, l, 2) == (want));                  \
        cJSON_Delete(sel)
        M("{}", true); /* policy/v1: an empty selector selects every pod */
        M("{\"matchLabels\": {\"app\": \"web\"}}", true);
        M("{\"matchLabels\": {\"app\": \"api\"}}", false);
        M("{\"matchExpressions\": [{\"key\": \"tier\", \"operator\": \"In\", \"values\": [\"front\", \"x\"]}]}", true);
        M("{\"matchExpressions\": [{\"key\": \"tier\", \"operator\": \"NotIn\", \"values\": [\"front\"]}]}", false);
        M("{\"matchExpressions\": [{\"key\": \"zone\", \"operator\": \"DoesNotExist\"}]}", true);
        M("{\"matchExpressions\": [{\"key\": \"zone\", \"operator\": \"Exists\"}]}", false);
        M("{\"matchLabels\": {\"app\": \"web\"}, \"matchExpressions\": [{\"key\": \"tier\", \"operator\": \"Bogus\"}]}", false);
#undef M
        assert_false(disruption_selector_matches(NULL, l, 2));
}

/* Balanced consolidation scores savings against disruption as Karpenter does: its RFC's pool of
 * ten nodes (eight at $4.84/day, two at $9.68/day, 80 pods: disruption cost 90). */
static void test_balanced(void **state) {
        double score = balanced_score(7.26, 4.0, 58.08, 90); /* an oversized node replaced */
        assert_true(score > 2.8 && score < 2.82);
        assert_true(balanced_score(0.5, 20, 58.08, 90) < 0.5); /* little saving, many pods */
        assert_true(balanced_score(1, 1, 0, 90) < 0);          /* no totals: no approval */

        /* a pool of three nodes; consolidating the one with 4 pods from $0.40 to $0.10/h */
        SolverNodePool pools[] = { { .name = "bal" }, { .name = "other" } };
        SolverNode nodes[] = { { .name = "a", .nodepool = "bal", .price = 0.40 },
                               { .name = "b", .nodepool = "bal", .price = 0.40 },
                               { .name = "c", .nodepool = "bal", .price = 0.40 },
                               { .name = "d", .nodepool = "other", .price = 0.40 } };
        SolverPod pods[8] = {};
        for (size_t i = 0; i < 8; i++)
                pods[i] = (SolverPod) { .name = "p", .node_name = i < 4 ? "a" : "b" };
        SolverSnapshot sn = { .nodepools = pools, .n_nodepools = 2, .nodes = nodes, .n_nodes = 4, .pods = pods,
                              .n_pods = 8 };
        NodePoolExtra extra[2] = { { .balanced_k = 2 }, { .balanced_k = 0 } };
        char why[300];
        size_t a = 0, d = 3;
        /* saves 25 % of the pool's cost for 5/11 of its disruption cost: 0.55 >= 1/2 */
        assert_true(balanced_approves(&sn, extra, &a, 1, 0.40, 0.10, why, sizeof why));
        assert_non_null(strstr(why, "score 0.55 >= 1/2"));
        /* saving a third as much: 0.18 < 1/2 */
        assert_false(balanced_approves(&sn, extra, &a, 1, 0.40, 0.30, why, sizeof why));
        assert_non_null(strstr(why, "< 1/2"));
        /* K = 10 asks for 0.1 only */
        extra[0].balanced_k = 10;
        assert_true(balanced_approves(&sn, extra, &a, 1, 0.40, 0.30, why, sizeof why));
        /* a pool that is not Balanced passes as it is */
        assert_true(balanced_approves(&sn, extra, &d, 1, 0.40, 0.39, why, sizeof why));
        assert_string_equal(why, "");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cron_parse),
                cmocka_unit_test(test_cron_match),
                cmocka_unit_test(test_cron_active),
                cmocka_unit_test(test_budgets),
                cmocka_unit_test(test_hash),
                cmocka_unit_test(test_selector),
                cmocka_unit_test(test_balanced),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
