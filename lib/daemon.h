/* SPDX-License-Identifier: Apache-2.0 */
/* Process start-up shared by the daemons. */
#pragma once

#include <systemd/sd-event.h>

/* First statement of each daemon's main(): NNG starts threads, and a SIGTERM delivered to one
 * of them would kill the process without cleanup. SIGTERM, SIGINT and SIGHUP are blocked in every
 * thread and reach the loop through signalfd; SIGPIPE is ignored. */
void daemon_block_signals(void);

/* Route SIGTERM, SIGINT and SIGHUP to handler on the loop. */
int daemon_add_signals(sd_event *e, sd_event_signal_handler_t handler, void *userdata);
