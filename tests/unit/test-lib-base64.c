/* SPDX-License-Identifier: Apache-2.0 */
/* lib/base64.c: encoding with a cap, decoding with white space and PEM armour skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "macro.h"

static void test_encode(void **state) {
        char *s = NULL;
        assert_int_equal(base64_encode("", 0, 0, &s), 0);
        assert_string_equal(s, "");
        free(s);
        assert_int_equal(base64_encode("f", 1, 0, &s), 0);
        assert_string_equal(s, "Zg==");
        free(s);
        assert_int_equal(base64_encode("foobar", 6, 0, &s), 0);
        assert_string_equal(s, "Zm9vYmFy");
        free(s);
        s = NULL;
        assert_int_equal(base64_encode("foobar", 6, 5, &s), -E2BIG);
        assert_null(s);
}

static void decode_ok(const char *in, Base64Flags flags, const char *want) {
        _cleanup_free_ void *out = NULL;
        size_t len = 99;
        assert_int_equal(base64_decode(in, strlen(in), flags, &out, &len), 0);
        assert_int_equal(len, strlen(want));
        assert_memory_equal(out, want, len);
        assert_int_equal(((char *) out)[len], 0);
}

static void test_decode(void **state) {
        decode_ok("Zm9vYmFy", 0, "foobar");
        decode_ok("Zg==", 0, "f");
        /* white space anywhere, as kubectl takes a kubeconfig's data */
        decode_ok(" Zm9v\r\n YmFy\t\n", 0, "foobar");
        /* armour lines only with the flag */
        decode_ok("-----BEGIN PKCS7-----\nZm9v\nYmFy\n-----END PKCS7-----\n", BASE64_SKIP_ARMOUR, "foobar");
}

static void test_decode_refused(void **state) {
        void *out = NULL;
        size_t len = 0;
        const char *bad[] = { "", "  \n", "Zm9vYmF", "Zm9v!mFy", "Zg=", "-----BEGIN X-----\nZm9v\n" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(base64_decode(bad[i], strlen(bad[i]), 0, &out, &len), -EBADMSG);
        /* a NUL inside the input is not white space */
        assert_int_equal(base64_decode("Zm9v\0mFy", 8, 0, &out, &len), -EBADMSG);
        assert_null(out);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_encode),
                cmocka_unit_test(test_decode),
                cmocka_unit_test(test_decode_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
