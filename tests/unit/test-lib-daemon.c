/* SPDX-License-Identifier: Apache-2.0 */
/* lib/daemon.c: the soft file limit raised to the hard one, and left alone when already there. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/resource.h>

#include "daemon.h"

static void test_soft_limit_raised_to_hard(void **state) {
        struct rlimit rl;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
        if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max <= 64)
                skip();
        rlim_t hard = rl.rlim_max;
        rl.rlim_cur = 64;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);

        uint64_t before = 0, after = 0;
        assert_int_equal(daemon_raise_nofile(&before, &after), 0);
        assert_int_equal(before, 64);
        assert_int_equal(after, hard);
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
        assert_int_equal(rl.rlim_cur, hard);
        assert_int_equal(rl.rlim_max, hard);

        /* at the hard limit already: nothing changes, both say so */
        assert_int_equal(daemon_raise_nofile(&before, &after), 0);
        assert_int_equal(before, hard);
        assert_int_equal(after, hard);
        assert_int_equal(daemon_raise_nofile(NULL, NULL), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_soft_limit_raised_to_hard),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
