/* SPDX-License-Identifier: Apache-2.0 */
/* lib/timestamp.c: RFC 3339, HTTP-date and IMDS dates, their fractions, zones and refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>

#include "timestamp.h"

#define S INT64_C(1000000)

static void test_rfc3339(void **state) {
        int64_t t = -1;
        assert_int_equal(timestamp_parse_rfc3339("2017-09-18T08:22:00Z", 0, &t), 0);
        assert_int_equal(t, INT64_C(1505722920) * S);
        assert_int_equal(timestamp_parse_rfc3339("1970-01-01T00:00:00Z", 0, &t), 0);
        assert_int_equal(t, 0);
        /* fractions of any length to nine digits, kept to the microsecond */
        assert_int_equal(timestamp_parse_rfc3339("2025-03-01T10:00:00.5Z", 0, &t), 0);
        assert_int_equal(t, INT64_C(1740823200) * S + 500000);
        assert_int_equal(timestamp_parse_rfc3339("2025-03-01T10:00:00.123456789Z", 0, &t), 0);
        assert_int_equal(t, INT64_C(1740823200) * S + 123456);
        assert_int_equal(timestamp_parse_rfc3339("2025-03-01T10:00:00.000001z", 0, &t), 0);
        assert_int_equal(t, INT64_C(1740823200) * S + 1);
        /* offsets move the instant; lower-case t is RFC 3339 too */
        assert_int_equal(timestamp_parse_rfc3339("2025-01-01T02:00:00+02:00", 0, &t), 0);
        assert_int_equal(t, INT64_C(1735689600) * S);
        assert_int_equal(timestamp_parse_rfc3339("2024-12-31t19:30:00-04:30", 0, &t), 0);
        assert_int_equal(t, INT64_C(1735689600) * S);
        /* a leap day exists in 2024, not in 2025 */
        assert_int_equal(timestamp_parse_rfc3339("2024-02-29T00:00:00Z", 0, &t), 0);
}

static void test_rfc3339_refused(void **state) {
        int64_t t = 42;
        const char *bad[] = { "", "garbage", "2017-09-18 08:22:00Z", "2017-09-18T08:22:00",
                              "2017-09-18T08:22:00Zjunk", "2017-09-18T08:22:00.Z",
                              "2017-09-18T08:22:00.1234567890Z", "2017-9-18T08:22:00Z",
                              "2025-01-01T00:00:00+1:2", "2025-01-01T00:00:00-0",
                              "2025-01-01T00:00:00+02:0", "2025-01-01T00:00:00+24:00",
                              "2025-01-01T00:00:00+02:00x", " 2025-01-01T00:00:00Z",
                              "2025-01-01T00:00:00.000000000000000000000000000000000000000000000000Z" };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
                assert_int_equal(timestamp_parse_rfc3339(bad[i], 0, &t), -EBADMSG);
        assert_int_equal(timestamp_parse_rfc3339(NULL, 0, &t), -EBADMSG);
        assert_int_equal(timestamp_parse_rfc3339("2030-02-31T00:00:00Z", 0, &t), -ERANGE);
        assert_int_equal(timestamp_parse_rfc3339("2025-02-29T00:00:00Z", 0, &t), -ERANGE);
        assert_int_equal(timestamp_parse_rfc3339("2025-13-01T00:00:00Z", 0, &t), -ERANGE);
        assert_int_equal(timestamp_parse_rfc3339("2025-01-01T24:00:00Z", 0, &t), -ERANGE);
        assert_int_equal(timestamp_parse_rfc3339("1969-12-31T23:59:59Z", 0, &t), -ERANGE);
        /* UTC only: Z and +00:00 pass, any other offset does not */
        assert_int_equal(timestamp_parse_rfc3339("2017-09-18T08:22:00+02:00", TIMESTAMP_UTC_ONLY, &t),
                         -EBADMSG);
        assert_int_equal(t, 42); /* nothing written on failure */
        assert_int_equal(timestamp_parse_rfc3339("2017-09-18T08:22:00+00:00", TIMESTAMP_UTC_ONLY, &t), 0);
        assert_int_equal(t, INT64_C(1505722920) * S);
}

static void test_http_date(void **state) {
        int64_t t = -1;
        assert_int_equal(timestamp_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
        assert_int_equal(t, INT64_C(784111777) * S);
        assert_int_equal(timestamp_parse_http_date(" Sat, 05 Jun 2021 04:00:00 GMT\r\n", &t), 0);
        assert_int_equal(t, INT64_C(1622865600) * S);
        assert_int_equal(timestamp_parse_http_date("Sun, 06 Nov 1994 08:49:37", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_http_date("Sun, 6 Nov 1994 08:49:37 GMT", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT x", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_http_date("Sun, 31 Feb 1994 08:49:37 GMT", &t), -ERANGE);
        assert_int_equal(timestamp_parse_http_date("10", &t), -EBADMSG);
}

static void test_dmy_gmt(void **state) {
        int64_t t = -1;
        assert_int_equal(timestamp_parse_dmy_gmt("21 Jan 2019 09:00:43 GMT", &t), 0);
        assert_int_equal(t, INT64_C(1548061243) * S);
        assert_int_equal(timestamp_parse_dmy_gmt("1 Mar 2024 00:00:00 GMT", &t), 0);
        assert_int_equal(t, INT64_C(1709251200) * S);
        assert_int_equal(timestamp_parse_dmy_gmt("21 Jan 2019 09:00:43", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_dmy_gmt("21 Jan 2019 09:00:43 GMT+1", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_dmy_gmt("2019-01-21T09:00:43Z", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_dmy_gmt("21 Foo 2019 09:00:43 GMT", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_dmy_gmt("31 Feb 2030 09:00:43 GMT", &t), -ERANGE);
}

static void test_any(void **state) {
        int64_t t = -1;
        assert_int_equal(timestamp_parse_any("2017-09-18T08:22:00Z", &t), 0);
        assert_int_equal(t, INT64_C(1505722920) * S);
        assert_int_equal(timestamp_parse_any("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
        assert_int_equal(t, INT64_C(784111777) * S);
        assert_int_equal(timestamp_parse_any("21 Jan 2019 09:00:43 GMT", &t), 0);
        assert_int_equal(t, INT64_C(1548061243) * S);
        assert_int_equal(timestamp_parse_any("soon", &t), -EBADMSG);
        assert_int_equal(timestamp_parse_any("", &t), -EBADMSG);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_rfc3339),
                cmocka_unit_test(test_rfc3339_refused),
                cmocka_unit_test(test_http_date),
                cmocka_unit_test(test_dmy_gmt),
                cmocka_unit_test(test_any),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
