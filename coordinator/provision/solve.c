/* SPDX-License-Identifier: Apache-2.0 */
/* Solving a round off the loop: solver_new() and solver_provision() run on a worker thread over
 * the round's snapshot, and the loop learns that they are over through an eventfd. The solver is
 * a pure library (no I/O, no globals, no clock but its budget's), the snapshot is the round's own
 * (its arenas, and the catalog that is not swapped while a round is under way), so the thread
 * shares nothing else with the loop; the loop reads the result only after joining it. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

struct Solve {
        Provisioner *p;
        Round *rd;
        provision_solve_done_t done;
        SolverOptions opts;
        pthread_t thread;
        bool running; /* the thread was started and is not joined yet */
        int efd;
        sd_event_source *source;
        /* written by the thread, read by the loop after the join */
        int r;
        char *err;
        Solver *solver;
        SolverResult *result;
        uint64_t usec;
};

static void *solve_thread(void *userdata) {
        Solve *s = userdata;
        uint64_t t0 = provision_clock_usec();
        s->r = solver_new(&s->rd->snap, &s->solver, &s->err);
        if (s->r >= 0)
                s->r = solver_provision(s->solver, &s->opts, &s->result);
        s->usec = provision_clock_usec() - t0;
        uint64_t one = 1;
        /* an eventfd counter write of 8 bytes does not fail short of an overflow */
        (void) !write(s->efd, &one, sizeof one);
        return NULL;
}

static void solve_join(Solve *s) {
        if (!s->running)
                return;
        (void) pthread_join(s->thread, NULL);
        s->running = false;
}

Solve *provision_solve_free(Solve *s) {
        if (!s)
                return NULL;
        solve_join(s);
        sd_event_source_disable_unref(s->source);
        if (s->efd >= 0)
                close(s->efd);
        solver_result_free(s->result);
        solver_free(s->solver);
        free(s->err);
        free(s);
        return NULL;
}

static int on_solved(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        Solve *s = userdata;
        uint64_t v;
        if (read(s->efd, &v, sizeof v) < 0 && errno == EAGAIN)
                return 0; /* not yet */
        solve_join(s);
        Round *rd = s->rd;
        Provisioner *p = s->p;
        provision_solve_done_t done = s->done;
        int r = s->r;
        char *err = TAKE_PTR(s->err);
        uint64_t usec = s->usec;
        rd->solver = TAKE_PTR(s->solver);
        rd->result = TAKE_PTR(s->result);
        rd->solve = provision_solve_free(s);
        done(p, r, err, usec);
        return 0;
}

int provision_solve_start(Provisioner *p, Round *rd, const SolverOptions *opts, provision_solve_done_t done) {
        if (rd->solve)
                return -EBUSY;
        Solve *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (Solve) { .p = p, .rd = rd, .done = done, .opts = *opts, .efd = -1 };
        int r;
        s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->efd < 0) {
                r = -errno;
                goto fail;
        }
        r = sd_event_add_io(p->event, &s->source, s->efd, EPOLLIN, on_solved, s);
        if (r < 0)
                goto fail;
        (void) sd_event_source_set_description(s->source, "provisioning-solve");
        r = -pthread_create(&s->thread, NULL, solve_thread, s);
        if (r < 0)
                goto fail;
        s->running = true;
        rd->solve = s;
        return 0;
fail:
        provision_solve_free(s);
        return r;
}
