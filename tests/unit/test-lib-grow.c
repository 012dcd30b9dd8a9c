/* SPDX-License-Identifier: Apache-2.0 */
/* lib/grow.c: amortised doubling, the cap, overflow, and nothing changed on failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>

#include "grow.h"
#include "macro.h"

static void test_doubling(void **state) {
        _cleanup_free_ int *v = NULL;
        size_t cap = 0, reallocs = 0;
        for (size_t i = 0; i < 10000; i++) {
                size_t before = cap;
                assert_int_equal(GROW(v, cap, i + 1, 100000), 0);
                reallocs += cap != before;
                v[i] = (int) i; /* ASan/valgrind would catch a short allocation */
        }
        assert_true(cap >= 10000);
        assert_true(reallocs <= 12); /* 8, 16, ... 16384 */
        for (size_t i = 0; i < 10000; i++)
                assert_int_equal(v[i], (int) i);
        /* room already there: nothing moves */
        int *before = v;
        assert_int_equal(GROW(v, cap, 5, 100000), 0);
        assert_ptr_equal(v, before);
}

static void test_cap(void **state) {
        _cleanup_free_ char *b = NULL;
        size_t cap = 0;
        assert_int_equal(GROW(b, cap, 100, 1000), 0);
        assert_int_equal(cap, 100);
        assert_int_equal(GROW(b, cap, 700, 1000), 0);
        assert_int_equal(cap, 700);
        /* doubling stops at the cap */
        assert_int_equal(GROW(b, cap, 701, 1000), 0);
        assert_int_equal(cap, 1000);
        char *keep = b;
        assert_int_equal(GROW(b, cap, 1001, 1000), -ENOBUFS);
        assert_ptr_equal(b, keep);
        assert_int_equal(cap, 1000);
}

static void test_overflow(void **state) {
        _cleanup_free_ uint64_t *v = NULL;
        size_t cap = 0;
        assert_int_equal(GROW(v, cap, SIZE_MAX / 4, SIZE_MAX), -ENOBUFS);
        assert_null(v);
        assert_int_equal(cap, 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_doubling),
                cmocka_unit_test(test_cap),
                cmocka_unit_test(test_overflow),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
