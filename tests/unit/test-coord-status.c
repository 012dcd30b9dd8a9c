/* SPDX-License-Identifier: Apache-2.0 */
/* The pieces of status writing and /metrics that need no API server: Prometheus label escaping
 * and histograms (http/promtext.c), conditions and their transition times (status/status.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "http/promtext.h"
#include "status/status-internal.h"

static void test_label_escaping(void **state) {
        StrBuf b;
        strbuf_init(&b, 4096);
        prom_label_value(&b, "a\"b\\c\nd");
        assert_non_null(b.data);
        assert_string_equal(b.data, "a\\\"b\\\\c\\nd");
        strbuf_done(&b);
}

static void test_histogram(void **state) {
        Histogram h;
        StrBuf b;
        histogram_init(&h, histogram_bounds_decision);
        histogram_observe(&h, 0.0005);  /* first bucket */
        histogram_observe(&h, 0.001);   /* the bound itself: le="0.001" */
        histogram_observe(&h, 0.3);     /* le="0.5" */
        histogram_observe(&h, 99);      /* only +Inf */
        strbuf_init(&b, 1 << 16);
        histogram_render(&h, &b, "x_seconds", "help text");
        assert_non_null(strstr(b.data, "# TYPE x_seconds histogram\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{le=\"0.001\"} 2\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{le=\"0.25\"} 2\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{le=\"0.5\"} 3\n"));   /* cumulative */
        assert_non_null(strstr(b.data, "x_seconds_bucket{le=\"10\"} 3\n"));
        assert_non_null(strstr(b.data, "x_seconds_bucket{le=\"+Inf\"} 4\n"));
        assert_non_null(strstr(b.data, "x_seconds_count 4\n"));
        assert_non_null(strstr(b.data, "x_seconds_sum 99.3015"));
        strbuf_done(&b);
}

static const char *cond_field(const cJSON *conds, const char *type, const char *field) {
        const cJSON *c;
        cJSON_ArrayForEach(c, conds)
                if (strcmp(cJSON_GetObjectItem(c, "type")->valuestring, type) == 0)
                        return cJSON_GetObjectItem(c, field)->valuestring;
        return NULL;
}

static void test_conditions(void **state) {
        /* the object as stored: Ready True since 2020, ValidationSucceeded False */
        cJSON *old = cJSON_Parse("{\"conditions\":["
                                 "{\"type\":\"Ready\",\"status\":\"True\",\"lastTransitionTime\":\"2020-01-01T00:00:00Z\"},"
                                 "{\"type\":\"ValidationSucceeded\",\"status\":\"False\",\"lastTransitionTime\":\"2020-01-01T00:00:00Z\"}]}");
        cJSON *conds = cJSON_CreateArray();
        assert_int_equal(status_condition_add(conds, old, 3, "ValidationSucceeded", "True", "ValidationSucceeded", ""), 0);
        assert_int_equal(status_condition_add(conds, old, 3, "NodeClassReady", "Unknown", "AwaitingReconciliation", "x"), 0);
        assert_int_equal(status_condition_add(conds, old, 3, "SubnetsReady", "False", "NotFound", "no subnet"), 0);
        assert_int_equal(status_condition_ready(conds, old, 3), 0);
        /* a changed status gets a new time; Ready is now False: also a new time */
        assert_string_not_equal(cond_field(conds, "ValidationSucceeded", "lastTransitionTime"), "2020-01-01T00:00:00Z");
        /* Ready follows the first False condition (not the Unknown one before it) */
        assert_string_equal(cond_field(conds, "Ready", "status"), "False");
        assert_string_equal(cond_field(conds, "Ready", "reason"), "NotFound");
        assert_string_equal(cond_field(conds, "Ready", "message"), "SubnetsReady: no subnet");
        cJSON_Delete(conds);

        /* all True: Ready True, and its time kept from the stored object */
        conds = cJSON_CreateArray();
        assert_int_equal(status_condition_add(conds, old, 3, "ValidationSucceeded", "True", "ValidationSucceeded", ""), 0);
        assert_int_equal(status_condition_ready(conds, old, 3), 0);
        assert_string_equal(cond_field(conds, "Ready", "status"), "True");
        assert_string_equal(cond_field(conds, "Ready", "lastTransitionTime"), "2020-01-01T00:00:00Z");
        cJSON_Delete(conds);

        /* only Unknown: Ready Unknown with its reason */
        conds = cJSON_CreateArray();
        assert_int_equal(status_condition_add(conds, NULL, 1, "AMIsReady", "Unknown", "NotResolved", "later"), 0);
        assert_int_equal(status_condition_ready(conds, NULL, 1), 0);
        assert_string_equal(cond_field(conds, "Ready", "status"), "Unknown");
        assert_string_equal(cond_field(conds, "Ready", "reason"), "NotResolved");
        cJSON_Delete(conds);
        cJSON_Delete(old);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_label_escaping),
                cmocka_unit_test(test_histogram),
                cmocka_unit_test(test_conditions),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
