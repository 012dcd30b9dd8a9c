/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"
#include "quantity.h"
#include "strbuf.h"

static void test_milli(void **state) {
        int64_t v;
        assert_int_equal(quantity_parse_milli("250m", &v), 0);
        assert_int_equal(v, 250);
        assert_int_equal(quantity_parse_milli("2", &v), 0);
        assert_int_equal(v, 2000);
        assert_int_equal(quantity_parse_milli("1.5", &v), 0);
        assert_int_equal(v, 1500);
        assert_int_equal(quantity_parse_milli("0.1", &v), 0);
        assert_int_equal(v, 100);
        assert_int_equal(quantity_parse_milli("100u", &v), 0); /* rounds up like the API server */
        assert_int_equal(v, 1);
}

static void test_bytes(void **state) {
        int64_t v;
        assert_int_equal(quantity_parse("512Mi", &v), 0);
        assert_int_equal(v, 512LL * 1024 * 1024);
        assert_int_equal(quantity_parse("1Gi", &v), 0);
        assert_int_equal(v, 1073741824LL);
        assert_int_equal(quantity_parse("2G", &v), 0);
        assert_int_equal(v, 2000000000LL);
        assert_int_equal(quantity_parse("1e3", &v), 0);
        assert_int_equal(v, 1000);
        assert_int_equal(quantity_parse("128974848", &v), 0);
        assert_int_equal(v, 128974848);
        assert_int_equal(quantity_parse("100m", &v), 0);
        assert_int_equal(v, 1);
        assert_int_equal(quantity_parse("1.5Gi", &v), 0);
        assert_int_equal(v, 1610612736LL);
}

static void test_bad(void **state) {
        int64_t v = 42;
        assert_int_equal(quantity_parse("", &v), -EINVAL);
        assert_int_equal(quantity_parse("Mi", &v), -EINVAL);
        assert_int_equal(quantity_parse("12XB", &v), -EINVAL);
        assert_int_equal(quantity_parse("1..2", &v), -EINVAL);
        assert_int_equal(quantity_parse("1e99", &v), -EINVAL);
        assert_int_equal(quantity_parse(" 1", &v), -EINVAL);
        assert_int_equal(v, 42); /* untouched on failure */
}

static void test_percent(void **state) {
        double p;
        assert_int_equal(quantity_parse_percent("10%", &p), 0);
        assert_true(p == 10.0);
        assert_int_equal(quantity_parse_percent("7.5%", &p), 0);
        assert_true(p == 7.5);
        assert_int_equal(quantity_parse_percent("10", &p), -EINVAL);
        assert_int_equal(quantity_parse_percent("120%", &p), -EINVAL);
}

static void test_msec(void **state) {
        uint64_t v;
        assert_int_equal(parse_msec("10s", &v), 0);
        assert_int_equal(v, 10000);
        assert_int_equal(parse_msec("250ms", &v), 0);
        assert_int_equal(v, 250);
        assert_int_equal(parse_msec("2m", &v), 0);
        assert_int_equal(v, 120000);
        assert_int_equal(parse_msec("1.5", &v), 0);
        assert_int_equal(v, 1500);
        assert_int_equal(parse_msec("5d", &v), -EINVAL);
        assert_int_equal(parse_msec("-1s", &v), -EINVAL);
}

static void test_strbuf_cap(void **state) {
        StrBuf b;
        strbuf_init(&b, 16);
        assert_int_equal(strbuf_printf(&b, "%s", "0123456789"), 0);
        assert_int_equal(strbuf_printf(&b, "%s", "0123456789"), -ENOBUFS);
        /* stays failed */
        assert_int_equal(strbuf_append(&b, "x", 1), -ENOBUFS);
        assert_string_equal(b.data, "0123456789");
        strbuf_done(&b);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_milli),   cmocka_unit_test(test_bytes),
                cmocka_unit_test(test_bad),     cmocka_unit_test(test_percent),
                cmocka_unit_test(test_msec),    cmocka_unit_test(test_strbuf_cap),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
