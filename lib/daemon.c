/* SPDX-License-Identifier: Apache-2.0 */
/* What every daemon's main() does first: signals blocked before NNG starts threads; the soft
 * file limit raised to the hard one. */
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <sys/resource.h>

#include "daemon.h"
#include "macro.h"

static const int loop_signals[] = { SIGTERM, SIGINT, SIGHUP };

void daemon_block_signals(void) {
        sigset_t ss;
        sigemptyset(&ss);
        for (size_t i = 0; i < ELEMENTSOF(loop_signals); i++)
                sigaddset(&ss, loop_signals[i]);
        pthread_sigmask(SIG_BLOCK, &ss, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int daemon_add_signals(sd_event *e, sd_event_signal_handler_t handler, void *userdata) {
        for (size_t i = 0; i < ELEMENTSOF(loop_signals); i++) {
                int r = sd_event_add_signal(e, NULL, loop_signals[i], handler, userdata);
                if (r < 0)
                        return r;
        }
        return 0;
}

static uint64_t limit_value(rlim_t v) {
        return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t) v;
}

int daemon_raise_nofile(uint64_t *ret_before, uint64_t *ret_after) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return -errno;
        uint64_t before = limit_value(rl.rlim_cur);
        /* an infinite hard limit is not one setrlimit takes for the soft one (fs.nr_open caps it) */
        if (rl.rlim_cur < rl.rlim_max && rl.rlim_max != RLIM_INFINITY) {
                rl.rlim_cur = rl.rlim_max;
                if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
                        return -errno;
        }
        if (ret_before)
                *ret_before = before;
        if (ret_after)
                *ret_after = limit_value(rl.rlim_cur);
        return 0;
}
