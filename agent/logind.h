/* SPDX-License-Identifier: Apache-2.0 */
/* The shutdown warning from systemd-logind. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* systemd-logind's shutdown delay lock: Inhibit("shutdown", …, "delay") on the system bus gives
 * a file descriptor; while it is open, a shutdown waits (at most InhibitDelayMaxSec) after
 * announcing itself with PrepareForShutdown(true). The agent drains in that window, then
 * releases the lock. PrepareForShutdown(false) means the shutdown was cancelled: the lock is
 * taken again. */

typedef struct Logind Logind;

/* starting: true when a shutdown begins, false when it was cancelled. */
typedef void (*logind_shutdown_t)(Logind *l, bool starting, void *userdata);

/* Connects to the system bus (DBUS_SYSTEM_BUS_ADDRESS honoured), subscribes to
 * PrepareForShutdown, takes the lock and reads InhibitDelayMaxUSec, all asynchronously on e.
 * Fails (-errno) when there is no bus: the caller runs on without it. */
int logind_new(sd_event *e, logind_shutdown_t cb, void *userdata, Logind **ret);
Logind *logind_free(Logind *l);

bool logind_holding(const Logind *l);
/* InhibitDelayMaxUSec as logind reports it (0 until known). */
uint64_t logind_delay_max_usec(const Logind *l);
/* Let the shutdown proceed: close the lock's descriptor. */
void logind_release(Logind *l);
