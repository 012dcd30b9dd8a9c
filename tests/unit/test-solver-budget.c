/* SPDX-License-Identifier: Apache-2.0 */
/* The solver's time budget (SolverOptions.time_budget_usec): past it the plan is partial, says
 * so, and every pod is either decided or counted as deferred; without one, or with room, the
 * plan is whole and the same. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/solver/solver.h"

#define N_PODS 20000
#define N_SHAPES 50
#define MI ((int64_t) 1024 * 1024)

typedef struct Fx {
        SolverArena *a;
        SolverInstanceType type;
        SolverOffering offerings[2];
        SolverLabel labels[3];
        SolverNodePool pool;
        SolverPod *pods;
        SolverSnapshot snap;
} Fx;

static int setup(void **state) {
        Fx *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(solver_arena_new(&f->a), 0);
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
                f->pool.limits.v[r] = -1;
        f->pods = calloc(N_PODS, sizeof *f->pods);
        assert_non_null(f->pods);
        for (size_t i = 0; i < N_PODS; i++) {
                SolverPod *p = &f->pods[i];
                /* N_SHAPES shapes, so the plan is many batches */
                *p = (SolverPod) { .name = solver_arena_printf(f->a, "p-%zu", i), .namespace_ = "default" };
                p->requests.v[SOLVER_RES_CPU] = 100 + (int64_t) (i % N_SHAPES) * 10;
                p->requests.v[SOLVER_RES_MEMORY] = 256 * MI;
                p->requests.v[SOLVER_RES_PODS] = 1;
        }
        f->snap = (SolverSnapshot) { .types = &f->type, .n_types = 1, .nodepools = &f->pool,
                                     .n_nodepools = 1, .pods = f->pods, .n_pods = N_PODS };
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fx *f = *state;
        free(f->pods);
        solver_arena_free(f->a);
        free(f);
        return 0;
}

/* Plans with the budget; checks that every pod is accounted for exactly once. */
static SolverResult *plan(Fx *f, uint64_t budget_usec) {
        Solver *s = NULL;
        SolverResult *res = NULL;
        SolverOptions o = SOLVER_OPTIONS_DEFAULT;
        o.time_budget_usec = budget_usec;
        assert_int_equal(solver_new(&f->snap, &s, NULL), 0);
        assert_int_equal(solver_provision(s, &o, &res), 0);
        size_t none = 0, launch = 0;
        for (size_t i = 0; i < res->n_decisions; i++) {
                const SolverDecision *d = &res->decisions[i];
                none += d->kind == SOLVER_DECISION_NONE;
                if (d->kind == SOLVER_DECISION_LAUNCH) {
                        launch++;
                        assert_true(d->target < res->n_launches);
                }
        }
        assert_int_equal(none, res->n_deferred);
        assert_int_equal(launch, res->n_placed_new);
        assert_int_equal(res->n_placed_new + res->n_placed_existing + res->n_unschedulable + res->n_deferred,
                         N_PODS);
        size_t in_launches = 0;
        for (size_t i = 0; i < res->n_launches; i++)
                in_launches += res->launches[i].n_pods;
        assert_int_equal(in_launches, res->n_placed_new);
        solver_free(s);
        return res;
}

static void test_no_budget(void **state) {
        SolverResult *res = plan(*state, 0);
        assert_false(res->budget_exhausted);
        assert_int_equal(res->n_deferred, 0);
        assert_int_equal(res->n_placed_new, N_PODS);
        solver_result_free(res);
}

static void test_budget_spent(void **state) {
        /* one microsecond: spent before the plan is done */
        SolverResult *res = plan(*state, 1);
        assert_true(res->budget_exhausted);
        assert_true(res->n_deferred > 0);
        assert_true(res->n_deferred <= N_PODS);
        assert_int_equal(res->n_unschedulable, 0); /* deferred is not unschedulable */
        solver_result_free(res);
}

static void test_budget_with_room(void **state) {
        SolverResult *whole = plan(*state, 0);
        SolverResult *res = plan(*state, 60 * 1000000ULL); /* a minute: never reached */
        assert_false(res->budget_exhausted);
        assert_int_equal(res->n_launches, whole->n_launches);
        assert_true(res->total_price == whole->total_price);
        solver_result_free(whole);
        solver_result_free(res);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_no_budget, setup, teardown),
                cmocka_unit_test_setup_teardown(test_budget_spent, setup, teardown),
                cmocka_unit_test_setup_teardown(test_budget_with_room, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
