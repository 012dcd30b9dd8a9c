/* SPDX-License-Identifier: Apache-2.0 */
/* disruption_pass() reports every failure: it returns it, says it once in the log and in the
 * explain API, and counts it in nodesmith_disruption_pass_failures_total; a pass with nothing
 * to do, or not its turn, returns 0 and counts nothing. The snapshot, the watches, the arena's
 * allocations and the solver's construction are replaced (tests/unit/test-coord-disruption-pass.wrap);
 * the pass sees the provisioner only through provisioner.h. */
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
static bool arena_fails, alloc_fails; /* solver_arena_new(), solver_arena_alloc() say -ENOMEM */
static bool solver_fails;             /* solver_new() says -ENOMEM */

int __real_solver_new(const SolverSnapshot *snap, Solver **ret, char **ret_error);
int __wrap_solver_new(const SolverSnapshot *snap, Solver **ret, char **ret_error);
int __wrap_solver_new(const SolverSnapshot *snap, Solver **ret, char **ret_error) {
        return solver_fails ? -ENOMEM : __real_solver_new(snap, ret, ret_error);
}

int __real_solver_arena_new(SolverArena **ret);
int __wrap_solver_arena_new(SolverArena **ret);
int __wrap_solver_arena_new(SolverArena **ret) {
        return arena_fails ? -ENOMEM : __real_solver_arena_new(ret);
}

void *__real_solver_arena_alloc(SolverArena *a, size_t size);
void *__wrap_solver_arena_alloc(SolverArena *a, size_t size);
void *__wrap_solver_arena_alloc(SolverArena *a, size_t size) {
        return alloc_fails ? NULL : __real_solver_arena_alloc(a, size);
}

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

typedef struct Fx {
        Registry registry;
        Provisioner p;
        Disruption *d;
} Fx;

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->p.event), 0);
        f->p.cfg.report_interval_ms = 10000;
        f->p.leading_since_usec = 0; /* the loop's clock is hours past it */
        f->p.leading = true;
        f->p.learned = true;
        assert_int_equal(disruption_new(&f->p, &f->registry, &(DisruptionConfig) { .report_interval_ms = 10000 },
                                        &f->d),
                         0);
        snapshot_result = 0;
        snapshots = 0;
        arena_fails = alloc_fails = solver_fails = false;
        log_set_max_level(LOG_EMERG); /* the failures are expected */
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fx *f = *state;
        disruption_free(f->d);
        sd_event_unref(f->p.event);
        free(f);
        return 0;
}

/* The value of nodesmith_disruption_pass_failures_total in the metrics. */
static unsigned long failures(Disruption *d) {
        StrBuf b;
        strbuf_init(&b, 1 << 20);
        disruption_metrics(d, &b);
        assert_int_equal(b.error, 0);
        const char *m = strstr(b.data, "\nnodesmith_disruption_pass_failures_total ");
        assert_non_null(m);
        unsigned long n = strtoul(m + strlen("\nnodesmith_disruption_pass_failures_total "), NULL, 10);
        strbuf_done(&b);
        return n;
}

/* Whether the explain API (/api/v1/disruption) holds this text. */
static bool explains(Disruption *d, const char *text) {
        char *explain = disruption_api(d);
        assert_non_null(explain);
        bool found = strstr(explain, text) != NULL;
        free(explain);
        return found;
}

static void test_snapshot_failure_reported(void **state) {
        Fx *f = *state;
        snapshot_result = -EIO;
        assert_int_equal(disruption_pass(f->d), -EIO);
        assert_int_equal(snapshots, 1);
        assert_int_equal(failures(f->d), 1);
        assert_true(explains(f->d, "\"state\":\"failed\""));
        assert_true(explains(f->d, "building the snapshot"));
        /* each failed pass counts */
        snapshot_result = -ENOMEM;
        assert_int_equal(disruption_pass(f->d), -ENOMEM);
        assert_int_equal(failures(f->d), 2);
}

/* The snapshot's arena, then the pass's own arrays, cannot be allocated: each is a failed pass
 * that says where it stopped. */
static void test_allocation_failure_reported(void **state) {
        Fx *f = *state;
        arena_fails = true;
        assert_int_equal(disruption_pass(f->d), -ENOMEM);
        assert_int_equal(snapshots, 0);
        assert_int_equal(failures(f->d), 1);
        assert_true(explains(f->d, "\"state\":\"failed\""));
        assert_true(explains(f->d, "building the snapshot"));

        arena_fails = false;
        alloc_fails = true;
        assert_int_equal(disruption_pass(f->d), -ENOMEM);
        assert_int_equal(snapshots, 1);
        alloc_fails = false;
        assert_int_equal(failures(f->d), 2);
        assert_true(explains(f->d, "allocating the pass"));

        /* and the next pass, with memory again, is no failure */
        assert_int_equal(disruption_pass(f->d), 0);
        assert_int_equal(failures(f->d), 2);
}

/* The solver cannot be made on the snapshot: the pass fails and says so. */
static void test_solver_failure_reported(void **state) {
        Fx *f = *state;
        solver_fails = true;
        assert_int_equal(disruption_pass(f->d), -ENOMEM);
        assert_int_equal(failures(f->d), 1);
        assert_true(explains(f->d, "compiling the snapshot"));
        solver_fails = false;
        assert_int_equal(disruption_pass(f->d), 0);
        assert_int_equal(failures(f->d), 1);
}

static void test_quiet_pass(void **state) {
        Fx *f = *state;
        /* nothing to disrupt: a pass that decided nothing is no failure */
        assert_int_equal(disruption_pass(f->d), 0);
        assert_int_equal(snapshots, 1);
        assert_int_equal(failures(f->d), 0);
        assert_false(explains(f->d, "\"state\":\"failed\""));
}

static void test_not_its_turn(void **state) {
        Fx *f = *state;
        snapshot_result = -EIO;
        f->p.leading = false;
        assert_int_equal(disruption_pass(f->d), 0);
        f->p.leading = true;
        f->p.batch_open = true; /* provisioning first */
        assert_int_equal(disruption_pass(f->d), 0);
        assert_int_equal(snapshots, 0);
        assert_int_equal(failures(f->d), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_snapshot_failure_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_allocation_failure_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_solver_failure_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_quiet_pass, setup, teardown),
                cmocka_unit_test_setup_teardown(test_not_its_turn, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
