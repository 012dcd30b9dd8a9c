/* SPDX-License-Identifier: Apache-2.0 */
/* lib/promtext.c: one-value metrics, escaped label values, cumulative histograms. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "promtext.h"

static void test_counter_and_gauge(void **state) {
        StrBuf b;
        strbuf_init(&b, 4096);
        prom_counter(&b, "nodesmith_x_total", "Things counted.", 42);
        prom_gauge(&b, "nodesmith_y", "A level.", 7);
        assert_string_equal(b.data, "# HELP nodesmith_x_total Things counted.\n# TYPE nodesmith_x_total counter\n"
                                    "nodesmith_x_total 42\n"
                                    "# HELP nodesmith_y A level.\n# TYPE nodesmith_y gauge\nnodesmith_y 7\n");
        strbuf_done(&b);
}

static void test_seconds(void **state) {
        StrBuf b;
        strbuf_init(&b, 4096);
        prom_counter_seconds(&b, "x_seconds_total", "Time.", 1.25);
        prom_gauge_seconds(&b, "y_seconds", "When.", 1764200000.5);
        assert_string_equal(b.data, "# HELP x_seconds_total Time.\n# TYPE x_seconds_total counter\nx_seconds_total 1.250000\n"
                                    "# HELP y_seconds When.\n# TYPE y_seconds gauge\ny_seconds 1764200000.500000\n");
        strbuf_done(&b);
}

static void test_label_value(void **state) {
        StrBuf b;
        strbuf_init(&b, 4096);
        prom_label_value(&b, "a\"b\\c\nd");
        assert_string_equal(b.data, "a\\\"b\\\\c\\nd");
        strbuf_done(&b);
}

static void test_histogram(void **state) {
        Histogram h;
        StrBuf b;
        histogram_init(&h, histogram_bounds_decision);
        histogram_observe(&h, 0.0005); /* below the first bound */
        histogram_observe(&h, 100);    /* above the last: only +Inf */
        strbuf_init(&b, 1 << 16);
        histogram_render(&h, &b, "nodesmith_z_seconds", "Durations.");
        assert_non_null(strstr(b.data, "# TYPE nodesmith_z_seconds histogram\n"));
        assert_non_null(strstr(b.data, "nodesmith_z_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert_non_null(strstr(b.data, "nodesmith_z_seconds_count 2\n"));
        strbuf_done(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_counter_and_gauge),
                cmocka_unit_test(test_seconds),
                cmocka_unit_test(test_label_value),
                cmocka_unit_test(test_histogram),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
