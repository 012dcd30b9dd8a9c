/* SPDX-License-Identifier: Apache-2.0 */
/* disruption_pass() reports every failure: it returns it, says it once in the log and in the
 * explain API, and counts it in nodesmith_disruption_pass_failures_total; a pass with nothing
 * to do, or not its turn, returns 0 and counts nothing. The snapshot, the watches and the clock
 * are replaced (tests/unit/test-coord-disruption-pass.wrap). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/disruption/disruption.h"
#include "coordinator/provision/provisioner-internal.h"
#include "log.h"

static int snapshot_result;
static unsigned snapshots;

int __wrap_provisioner_snapshot(Provisioner *p, Round *rd, size_t *ret_pending);
int __wrap_provisioner_snapshot(Provisioner *p, Round *rd, size_t *ret_pending) {
        snapshots++;
        if (snapshot_result < 0)
                return snapshot_result;
        rd->snap = (SolverSnapshot) {}; /* an empty cluster: nothing to disrupt */
        *ret_pending = 0;
        return 0;
}

bool __wrap_kube_watch_synced(const KubeWatch *w);
bool __wrap_kube_watch_synced(const KubeWatch *w) {
        return true;
}

uint64_t __wrap_coordinator_now(Coordinator *c);
uint64_t __wrap_coordinator_now(Coordinator *c) {
        return 3600 * USEC_PER_SEC; /* an hour after the coordinator began leading */
}

typedef struct Fx {
        Coordinator c;
        Provisioner p;
} Fx;

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        f->c.cfg.report_interval_ms = 10000;
        f->p.c = &f->c;
        f->p.leading = true;
        f->p.learned = true;
        assert_int_equal(disruption_new(&f->p.disruption), 0);
        snapshot_result = 0;
        snapshots = 0;
        log_set_max_level(LOG_EMERG); /* the failures are expected */
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fx *f = *state;
        disruption_free(f->p.disruption);
        free(f);
        return 0;
}

/* The value of nodesmith_disruption_pass_failures_total in the metrics. */
static unsigned long failures(Provisioner *p) {
        StrBuf b;
        strbuf_init(&b, 1 << 20);
        disruption_metrics(p, &b);
        assert_int_equal(b.error, 0);
        const char *m = strstr(b.data, "\nnodesmith_disruption_pass_failures_total ");
        assert_non_null(m);
        unsigned long n = strtoul(m + strlen("\nnodesmith_disruption_pass_failures_total "), NULL, 10);
        strbuf_done(&b);
        return n;
}

static void test_snapshot_failure_reported(void **state) {
        Fx *f = *state;
        snapshot_result = -EIO;
        assert_int_equal(disruption_pass(&f->p), -EIO);
        assert_int_equal(snapshots, 1);
        assert_int_equal(failures(&f->p), 1);
        char *explain = provisioner_disruption_api(&f->p);
        assert_non_null(strstr(explain, "\"state\":\"failed\""));
        assert_non_null(strstr(explain, "building the snapshot"));
        free(explain);
        /* each failed pass counts */
        snapshot_result = -ENOMEM;
        assert_int_equal(disruption_pass(&f->p), -ENOMEM);
        assert_int_equal(failures(&f->p), 2);
}

static void test_quiet_pass(void **state) {
        Fx *f = *state;
        /* nothing to disrupt: a pass that decided nothing is no failure */
        assert_int_equal(disruption_pass(&f->p), 0);
        assert_int_equal(snapshots, 1);
        assert_int_equal(failures(&f->p), 0);
        char *explain = provisioner_disruption_api(&f->p);
        assert_null(strstr(explain, "\"state\":\"failed\""));
        free(explain);
}

static void test_not_its_turn(void **state) {
        Fx *f = *state;
        snapshot_result = -EIO;
        f->p.leading = false;
        assert_int_equal(disruption_pass(&f->p), 0);
        f->p.leading = true;
        f->p.batch_open = true; /* provisioning first */
        assert_int_equal(disruption_pass(&f->p), 0);
        assert_int_equal(snapshots, 0);
        assert_int_equal(failures(&f->p), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_snapshot_failure_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_quiet_pass, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_its_turn, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
