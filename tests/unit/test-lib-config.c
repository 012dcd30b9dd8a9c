/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "log.h"

typedef struct Cfg {
        char *address;
        uint64_t interval;
        bool insecure;
        uint64_t max;
        uint64_t count;
} Cfg;

static const Option opts[] = {
        { "address", OPTION_STRING, offsetof(Cfg, address), "tls+tcp://a:1", "x" },
        { "interval", OPTION_MSEC, offsetof(Cfg, interval), "10s", "x" },
        { "insecure", OPTION_BOOL, offsetof(Cfg, insecure), "no", "x" },
        { "max", OPTION_BYTES, offsetof(Cfg, max), "4Mi", "x" },
        { "count", OPTION_UINT, offsetof(Cfg, count), "3", "x" },
};

static char *write_file(const char *text) {
        char *path = strdup("/tmp/nodesmith-config-XXXXXX");
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
        return path;
}

static void test_defaults(void **state) {
        Cfg c = {};
        ConfigAction a;
        ConfigError why = {};
        char *argv[] = { "prog", NULL };
        ConfigSource src = {};
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 1, argv, &a, &why), 0);
        assert_int_equal(a, CONFIG_RUN);
        assert_string_equal(c.address, "tls+tcp://a:1");
        assert_int_equal(c.interval, 10000);
        assert_false(c.insecure);
        assert_int_equal(c.max, 4 * 1024 * 1024);
        config_free(opts, ELEMENTSOF(opts), &c);
}

static void test_precedence(void **state) {
        Cfg c = {};
        ConfigAction a;
        ConfigError why = {};
        char *path = write_file("# comment\naddress = tcp://file:1\ninterval = 5s\ncount = 7\n");
        char *argv[] = { "prog", "--config", path, "--interval", "250ms", "--insecure", "-n", NULL };
        ConfigSource src = { .env_prefix = "NSTEST" };
        setenv("NSTEST_COUNT", "9", 1);
        setenv("NSTEST_INTERVAL", "1s", 1);
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 7, argv, &a, &why), 0);
        assert_int_equal(a, CONFIG_CHECK);
        assert_string_equal(c.address, "tcp://file:1"); /* file over default */
        assert_int_equal(c.count, 9);                     /* env over file */
        assert_int_equal(c.interval, 250);                /* flag over env */
        assert_true(c.insecure);
        unsetenv("NSTEST_COUNT");
        unsetenv("NSTEST_INTERVAL");
        unlink(path);
        free(path);
        config_free(opts, ELEMENTSOF(opts), &c);
}

static void test_errors(void **state) {
        Cfg c = {};
        ConfigAction a;
        ConfigError why = {};
        ConfigSource src = {};
        log_set_max_level(LOG_EMERG); /* the errors are expected */

        char *p1 = write_file("address tcp://x\n");
        char *argv1[] = { "prog", "--config", p1, NULL };
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 3, argv1, &a, &why), -EINVAL);
        config_free(opts, ELEMENTSOF(opts), &c);

        char *p2 = write_file("nonsense = 1\n");
        char *argv2[] = { "prog", "--config", p2, NULL };
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 3, argv2, &a, &why), -EINVAL);
        /* the message names the file and line, for the daemon to log (lib/ logs nothing) */
        assert_non_null(strstr(why.message, ":1: unknown setting 'nonsense'"));
        config_free(opts, ELEMENTSOF(opts), &c);

        char *argv3[] = { "prog", "--interval", "soon", NULL };
        assert_true(config_load(opts, ELEMENTSOF(opts), &c, &src, 3, argv3, &a, &why) < 0);
        config_free(opts, ELEMENTSOF(opts), &c);

        char *argv4[] = { "prog", "--bogus", NULL };
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 2, argv4, &a, &why), -EINVAL);
        assert_string_equal(why.message, "Unknown option '--bogus'. See --help.");
        config_free(opts, ELEMENTSOF(opts), &c);

        char *argv5[] = { "prog", "--config", "/nonexistent/file.conf", NULL };
        assert_int_equal(config_load(opts, ELEMENTSOF(opts), &c, &src, 3, argv5, &a, &why), -ENOENT);
        config_free(opts, ELEMENTSOF(opts), &c);

        unlink(p1);
        unlink(p2);
        free(p1);
        free(p2);
        log_set_max_level(LOG_INFO);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_precedence),
                cmocka_unit_test(test_errors),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
