/* SPDX-License-Identifier: Apache-2.0 */
/* The solver's time budget: a deadline on the monotonic clock, polled cheaply from the
 * placement loops (SolverOptions.time_budget_usec). */
#include <string.h>
#include <time.h>

#include "solver-internal.h"

#define BUDGET_POLL_EVERY 16

static uint64_t mono_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000u + (uint64_t) ts.tv_nsec / 1000u;
}

void solver_budget_start(Solver *s, uint64_t budget_usec) {
        s->deadline_usec = budget_usec ? mono_usec() + budget_usec : 0;
        s->budget_polls = 0;
        s->out_of_time = false;
        s->n_deferred = 0;
}

bool solver_out_of_time(Solver *s) {
        if (s->out_of_time)
                return true;
        if (s->deadline_usec == 0 || ++s->budget_polls % BUDGET_POLL_EVERY != 0)
                return false;
        s->out_of_time = mono_usec() >= s->deadline_usec;
        return s->out_of_time;
}
