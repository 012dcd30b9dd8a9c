/* SPDX-License-Identifier: Apache-2.0 */
/* Process start-up shared by the daemons. */
#pragma once

#include <stdint.h>
#include <systemd/sd-event.h>

/* First statement of each daemon's main(): NNG starts threads, and a SIGTERM delivered to one
 * of them would kill the process without cleanup. SIGTERM, SIGINT and SIGHUP are blocked in every
 * thread and reach the loop through signalfd; SIGPIPE is ignored. */
void daemon_block_signals(void);

/* Route SIGTERM, SIGINT and SIGHUP to handler on the loop. */
int daemon_add_signals(sd_event *e, sd_event_signal_handler_t handler, void *userdata);

/* Raise the soft file limit (RLIMIT_NOFILE) to the hard one, as Go's runtime does for every
 * program since 1.19: systemd services and containerd 2 containers start with a soft limit of
 * 1024 and a hard one far above, and a daemon holding a descriptor per peer needs the latter
 * (NNG polls with epoll, never select, so descriptors above 1023 are fine). ret_before and
 * ret_after (either may be NULL) get the soft limit before and after; RLIM_INFINITY is
 * reported as UINT64_MAX. -errno from getrlimit/setrlimit. */
int daemon_raise_nofile(uint64_t *ret_before, uint64_t *ret_after);
