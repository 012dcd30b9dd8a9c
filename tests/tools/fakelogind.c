/* SPDX-License-Identifier: Apache-2.0 */
/* fakelogind: the part of systemd-logind's org.freedesktop.login1.Manager that nodesmith uses,
 * on a private bus, for tests. Inhibit(what, who, why, mode) hands out the write end of a pipe
 * (the lock holds while any copy of it is open); the InhibitDelayMaxUSec property; and the
 * PrepareForShutdown(b) signal: SIGUSR1 announces a shutdown, SIGUSR2 cancels it. Like logind,
 * after announcing it waits until every delay lock is released or the delay is over, and says
 * which on stdout:
 *   inhibit who=nodesmith-agent what=shutdown mode=delay
 *   shutdown announced
 *   proceeding: locks released after 0.123s      | proceeding: delay over after 5.000s
 *   shutdown cancelled
 *   fakelogind BUS-ADDRESS [--delay-ms N] */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-event.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOCKS 16

static sd_event *event;
static sd_bus *bus;
static uint64_t delay_usec = 5000000;
static int lock_fds[MAX_LOCKS];
static size_t n_locks;
static bool announced;
static uint64_t announced_at;
static sd_event_source *deadline;

static uint64_t now_usec(void) {
        uint64_t t;
        sd_event_now(event, CLOCK_MONOTONIC, &t);
        return t;
}

static void proceed(const char *why) {
        if (!announced)
                return;
        announced = false;
        printf("proceeding: %s after %.3fs\n", why, (double) (now_usec() - announced_at) / 1e6);
        fflush(stdout);
        sd_event_source_set_enabled(deadline, SD_EVENT_OFF);
}

static int on_lock_closed(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        for (size_t i = 0; i < n_locks; i++)
                if (lock_fds[i] == fd) {
                        lock_fds[i] = lock_fds[--n_locks];
                        break;
                }
        close(fd);
        sd_event_source_disable_unref(s);
        printf("released, %zu lock(s) left\n", n_locks);
        fflush(stdout);
        if (n_locks == 0)
                proceed("locks released");
        return 0;
}

static int method_inhibit(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        const char *what, *who, *why, *mode;
        int p[2], r;
        r = sd_bus_message_read(m, "ssss", &what, &who, &why, &mode);
        if (r < 0)
                return r;
        if (strcmp(mode, "delay") != 0 && strcmp(mode, "block") != 0)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "Invalid mode '%s'", mode);
        if (n_locks >= MAX_LOCKS || pipe2(p, O_CLOEXEC) < 0)
                return sd_bus_error_set_errno(error, ENOSPC);
        lock_fds[n_locks++] = p[0];
        sd_event_add_io(event, NULL, p[0], EPOLLHUP, on_lock_closed, NULL);
        printf("inhibit who=%s what=%s mode=%s\n", who, what, mode);
        fflush(stdout);
        r = sd_bus_reply_method_return(m, "h", p[1]);
        close(p[1]); /* the caller holds the only write end now */
        return r;
}

static int property_delay(sd_bus *b, const char *path, const char *interface, const char *property,
                          sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "t", delay_usec);
}

static const sd_bus_vtable manager_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("Inhibit", "ssss", "h", method_inhibit, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_PROPERTY("InhibitDelayMaxUSec", "t", property_delay, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_SIGNAL("PrepareForShutdown", "b", 0),
        SD_BUS_VTABLE_END
};

static int on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        proceed("delay over");
        return 0;
}

static int on_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        if (si->ssi_signo == SIGUSR1) {
                announced = true;
                announced_at = now_usec();
                printf("shutdown announced\n");
                fflush(stdout);
                sd_bus_emit_signal(bus, "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                                   "PrepareForShutdown", "b", 1);
                if (n_locks == 0)
                        proceed("no locks");
                else {
                        sd_event_source_set_time(deadline, announced_at + delay_usec);
                        sd_event_source_set_enabled(deadline, SD_EVENT_ONESHOT);
                }
        } else if (si->ssi_signo == SIGUSR2) {
                announced = false;
                sd_event_source_set_enabled(deadline, SD_EVENT_OFF);
                printf("shutdown cancelled\n");
                fflush(stdout);
                sd_bus_emit_signal(bus, "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                                   "PrepareForShutdown", "b", 0);
        } else
                sd_event_exit(event, 0);
        return 0;
}

int main(int argc, char **argv) {
        sigset_t ss;
        int r;
        if (argc < 2) {
                fprintf(stderr, "usage: fakelogind BUS-ADDRESS [--delay-ms N]\n");
                return 2;
        }
        if (argc >= 4 && strcmp(argv[2], "--delay-ms") == 0)
                delay_usec = strtoull(argv[3], NULL, 10) * 1000;
        sigemptyset(&ss);
        sigaddset(&ss, SIGUSR1);
        sigaddset(&ss, SIGUSR2);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigprocmask(SIG_BLOCK, &ss, NULL);

        sd_event_default(&event);
        if ((r = sd_bus_new(&bus)) < 0 || (r = sd_bus_set_address(bus, argv[1])) < 0 ||
            (r = sd_bus_set_bus_client(bus, 1)) < 0 || (r = sd_bus_start(bus)) < 0) {
                fprintf(stderr, "fakelogind: cannot connect to %s: %s\n", argv[1], strerror(-r));
                return 1;
        }
        sd_bus_attach_event(bus, event, 0);
        r = sd_bus_add_object_vtable(bus, NULL, "/org/freedesktop/login1", "org.freedesktop.login1.Manager",
                                     manager_vtable, NULL);
        if (r >= 0)
                r = sd_bus_request_name(bus, "org.freedesktop.login1", 0);
        if (r < 0) {
                fprintf(stderr, "fakelogind: %s\n", strerror(-r));
                return 1;
        }
        sd_event_add_time(event, &deadline, CLOCK_MONOTONIC, UINT64_MAX, 1, on_deadline, NULL);
        sd_event_source_set_enabled(deadline, SD_EVENT_OFF);
        int sigs[] = { SIGUSR1, SIGUSR2, SIGTERM, SIGINT };
        for (size_t i = 0; i < 4; i++)
                sd_event_add_signal(event, NULL, sigs[i], on_signal, NULL);
        printf("ready\n");
        fflush(stdout);
        r = sd_event_loop(event);
        sd_bus_flush_close_unref(bus);
        sd_event_unref(event);
        return r < 0 ? 1 : 0;
}
