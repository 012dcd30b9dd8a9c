/* SPDX-License-Identifier: Apache-2.0 */
/* lib/procmetrics.c: /proc/PID/stat and /proc/stat parsed; the process_* families rendered
 * for this process with values that agree with what the test reads itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "procmetrics.h"

/* A command name with spaces and a ')' of its own: fields count from the last ')'. */
static const char STAT_LINE[] =
        "4242 (nodesmith) co) S 1 4242 4242 0 -1 4194560 1205 0 0 0 "
        "150 37 0 0 20 0 3 0 98765 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0\n";

static void test_stat_line(void **state) {
        ProcStat ps;
        assert_int_equal(proc_stat_parse(STAT_LINE, &ps), 0);
        assert_int_equal(ps.utime_ticks, 150);
        assert_int_equal(ps.stime_ticks, 37);
        assert_int_equal(ps.start_ticks, 98765);
        assert_int_equal(ps.vsize_bytes, 123456789);
        assert_int_equal(ps.rss_pages, 2048);
}

static void test_stat_refused(void **state) {
        ProcStat ps;
        assert_int_equal(proc_stat_parse("no parenthesis here", &ps), -EINVAL);
        assert_int_equal(proc_stat_parse("1 (short) S 1 2 3\n", &ps), -EINVAL);
        assert_int_equal(proc_stat_parse("1 (x) S 1 2 3 4 5 6 7 8 9 ten 11 12 13 14 15 16 17 18 19 20 21\n", &ps),
                         -EINVAL);
        assert_int_equal(proc_stat_parse(NULL, &ps), -EINVAL);
}

static void test_boot_time(void **state) {
        uint64_t t = 0;
        assert_int_equal(proc_boot_time_parse("cpu  1 2 3\ncpu0 1 2 3\nintr 5\nbtime 1764200000\nprocesses 9\n", &t), 0);
        assert_int_equal(t, 1764200000);
        assert_int_equal(proc_boot_time_parse("cpu  1 2 3\n", &t), -EINVAL);
}

static double family_value(const char *text, const char *name) {
        char key[128];
        snprintf(key, sizeof key, "\n%s ", name);
        const char *p = strstr(text, key);
        assert_non_null(p);
        return strtod(p + strlen(key), NULL);
}

/* The rendered values are this process's: descriptors opened here show up, the limit is
 * getrlimit's, the memory is about what /proc/self/statm says. */
static void test_this_process(void **state) {
        StrBuf b;
        strbuf_init(&b, 1 << 16);
        process_metrics(&b);
        double fds = family_value(b.data, "process_open_fds");
        int extra[8];
        for (size_t i = 0; i < 8; i++)
                assert_true((extra[i] = dup(0)) >= 0);
        StrBuf b2;
        strbuf_init(&b2, 1 << 16);
        process_metrics(&b2);
        assert_int_equal((long) family_value(b2.data, "process_open_fds"), (long) fds + 8);
        for (size_t i = 0; i < 8; i++)
                close(extra[i]);

        struct rlimit rl;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
        assert_int_equal((long long) family_value(b.data, "process_max_fds"), (long long) rl.rlim_cur);

        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long size, resident;
        assert_non_null(f);
        assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
        fclose(f);
        double rss = family_value(b.data, "process_resident_memory_bytes");
        double page = (double) sysconf(_SC_PAGESIZE);
        assert_true(rss > 0.5 * resident * page && rss < 2.0 * resident * page + (1 << 20));
        assert_true(family_value(b.data, "process_virtual_memory_bytes") >= rss);
        assert_true(family_value(b.data, "process_cpu_seconds_total") >= 0);
        double start = family_value(b.data, "process_start_time_seconds");
        double now = (double) time(NULL);
        assert_true(start <= now + 1 && start > now - 3600);
        assert_non_null(strstr(b.data, "# TYPE process_cpu_seconds_total counter\n"));
        assert_non_null(strstr(b.data, "# TYPE process_resident_memory_bytes gauge\n"));
        strbuf_done(&b);
        strbuf_done(&b2);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_stat_line),
                cmocka_unit_test(test_stat_refused),
                cmocka_unit_test(test_boot_time),
                cmocka_unit_test(test_this_process),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
