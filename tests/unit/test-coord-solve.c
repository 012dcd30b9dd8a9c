/* SPDX-License-Identifier: Apache-2.0 */
/* A round's solve runs off the loop (coordinator/provision/solve.c): while 20 000 pods are
 * compiled and placed, the loop's timer keeps firing; the plan reaches done() on the loop, the
 * same as solver_provision() gives in place; a solver failure reaches done() with its message;
 * freeing a solve under way waits for it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator/provision/provisioner-internal.h"
#include "macro.h"

#define N_PODS 20000
#define MI ((int64_t) 1024 * 1024)
#define TICK_USEC (2 * USEC_PER_MSEC)

typedef struct Fx {
        sd_event *event;
        sd_event_source *tick;
        Provisioner p;
        Round rd;
        SolverInstanceType type;
        SolverOffering offerings[2];
        SolverLabel labels[3];
        SolverNodePool pool;
        SolverPod *pods;
        /* what the loop saw */
        unsigned ticks, ticks_at_done, dones;
        int r;
        char *err;
} Fx;

static Fx *fx_now; /* done() gets the provisioner: the fixture is found through it */

static uint64_t mono_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

static int on_tick(sd_event_source *s, uint64_t usec, void *userdata) {
        Fx *f = userdata;
        f->ticks++;
        (void) sd_event_source_set_time(s, mono_usec() + TICK_USEC);
        return 0;
}

static void on_done(Provisioner *p, int r, char *err, uint64_t usec) {
        Fx *f = fx_now;
        assert_ptr_equal(p, &f->p);
        f->dones++;
        f->ticks_at_done = f->ticks;
        f->r = r;
        f->err = err;
        (void) sd_event_exit(f->event, 0);
}

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(sd_event_add_time(f->event, &f->tick, CLOCK_MONOTONIC, mono_usec() + TICK_USEC, 1, on_tick, f),
                         0);
        assert_int_equal(sd_event_source_set_enabled(f->tick, SD_EVENT_ON), 0);
        f->p.event = f->event;
        f->labels[0] = (SolverLabel) { SOLVER_LABEL_INSTANCE_TYPE, "m.large" };
        f->labels[1] = (SolverLabel) { SOLVER_LABEL_ARCH, "amd64" };
        f->labels[2] = (SolverLabel) { SOLVER_LABEL_OS, "linux" };
        f->offerings[0] = (SolverOffering) { "zone-a", SOLVER_CAPACITY_ON_DEMAND, 0.2, true };
        f->offerings[1] = (SolverOffering) { "zone-b", SOLVER_CAPACITY_ON_DEMAND, 0.2, true };
        f->type = (SolverInstanceType) { .name = "m.large", .labels = f->labels, .n_labels = 3,
                                         .offerings = f->offerings, .n_offerings = 2 };
        f->type.capacity.v[SOLVER_RES_CPU] = 16000;
        f->type.capacity.v[SOLVER_RES_MEMORY] = 64 * 1024 * MI;
        f->type.capacity.v[SOLVER_RES_PODS] = 110;
        f->type.allocatable = f->type.capacity;
        f->pool = (SolverNodePool) { .name = "default" };
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                f->pool.limits.v[r] = -1; /* no limits */
        f->pods = calloc(N_PODS, sizeof *f->pods);
        assert_non_null(f->pods);
        for (size_t i = 0; i < N_PODS; i++) {
                /* 50 shapes, so that compiling and placing take a while */
                f->pods[i] = (SolverPod) { .name = "p", .namespace_ = "default" };
                f->pods[i].requests.v[SOLVER_RES_CPU] = 100 + 10 * (int64_t) (i % 50);
                f->pods[i].requests.v[SOLVER_RES_MEMORY] = (128 + 16 * (int64_t) (i % 50)) * MI;
                f->pods[i].requests.v[SOLVER_RES_PODS] = 1;
        }
        f->rd.snap = (SolverSnapshot) { .types = &f->type, .n_types = 1, .nodepools = &f->pool, .n_nodepools = 1,
                                        .pods = f->pods, .n_pods = N_PODS };
        fx_now = f;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fx *f = *state;
        f->rd.solve = provision_solve_free(f->rd.solve);
        solver_result_free(f->rd.result);
        solver_free(f->rd.solver);
        free(f->err);
        free(f->pods);
        sd_event_source_disable_unref(f->tick);
        sd_event_unref(f->event);
        free(f);
        fx_now = NULL;
        return 0;
}

static void test_loop_runs_while_solving(void **state) {
        Fx *f = *state;
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        assert_int_equal(provision_solve_start(&f->p, &f->rd, &o, on_done), 0);
        assert_non_null(f->rd.solve);
        assert_int_equal(provision_solve_start(&f->p, &f->rd, &o, on_done), -EBUSY); /* one at a time */
        assert_int_equal(f->dones, 0); /* done() comes from the loop, never from the start */
        assert_null(f->rd.result);
        uint64_t t0 = mono_usec();
        assert_int_equal(sd_event_loop(f->event), 0);
        uint64_t took = mono_usec() - t0;
        assert_int_equal(f->dones, 1);
        assert_int_equal(f->r, 0);
        assert_null(f->rd.solve); /* handed over and freed before done() */
        assert_non_null(f->rd.result);
        assert_non_null(f->rd.solver);
        /* The loop ran its timer all along: ticks of 2 ms for the whole solve (a solve of 20 000
         * pods in 50 shapes takes tens of milliseconds at the very least), and never a gap near
         * the solve's length. The bounds are loose: the machine may be busy. */
        /* The loop ran its 2 ms timer while the solve was under way (compiling and placing
         * 20 000 pods of 50 shapes takes tens of milliseconds): done in place, done() would
         * have come before the loop ran at all. */
        assert_true(f->ticks_at_done >= 2);
        assert_true(took >= 2 * TICK_USEC);

        /* the plan is the one solver_provision() gives in place */
        Solver *s = NULL;
        SolverResult *same = NULL;
        assert_int_equal(solver_new(&f->rd.snap, &s, NULL), 0);
        assert_int_equal(solver_provision(s, &o, &same), 0);
        assert_int_equal(f->rd.result->n_placed_new, N_PODS);
        assert_int_equal(same->n_launches, f->rd.result->n_launches);
        assert_true(same->total_price == f->rd.result->total_price);
        for (size_t i = 0; i < N_PODS; i++)
                assert_int_equal(same->decisions[i].target, f->rd.result->decisions[i].target);
        solver_result_free(same);
        solver_free(s);
}

static void test_failure_reaches_done(void **state) {
        Fx *f = *state;
        SolverNodePool twice[2] = { f->pool, f->pool }; /* refused by solver_new(): one name twice */
        f->rd.snap.nodepools = twice;
        f->rd.snap.n_nodepools = 2;
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        assert_int_equal(provision_solve_start(&f->p, &f->rd, &o, on_done), 0);
        assert_int_equal(sd_event_loop(f->event), 0);
        assert_int_equal(f->dones, 1);
        assert_true(f->r < 0);
        assert_non_null(f->err);
        assert_string_equal(f->err, "duplicate NodePool name");
        assert_null(f->rd.result);
}

static void test_free_waits(void **state) {
        Fx *f = *state;
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        assert_int_equal(provision_solve_start(&f->p, &f->rd, &o, on_done), 0);
        /* freed at once, without running the loop: joins the thread, and done() is never called */
        f->rd.solve = provision_solve_free(f->rd.solve);
        (void) sd_event_run(f->event, 10 * USEC_PER_MSEC); /* the tick, if anything */
        assert_int_equal(f->dones, 0);
        assert_null(f->rd.result);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_loop_runs_while_solving, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failure_reaches_done, setup, teardown),
                cmocka_unit_test_setup_teardown(test_free_waits, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
