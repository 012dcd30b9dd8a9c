/* SPDX-License-Identifier: Apache-2.0 */
/* What every daemon's main() does first: signals blocked before NNG starts threads. */
#include <pthread.h>
#include <signal.h>

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
