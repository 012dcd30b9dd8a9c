/* SPDX-License-Identifier: Apache-2.0 */
#include <fcntl.h>
#include <stdlib.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "log.h"
#include "logind.h"
#include "macro.h"

#define LOGIND_SERVICE "org.freedesktop.login1"
#define LOGIND_PATH "/org/freedesktop/login1"
#define LOGIND_MANAGER "org.freedesktop.login1.Manager"

struct Logind {
        sd_bus *bus;
        sd_bus_slot *signal_slot;
        sd_bus_slot *inhibit_slot;
        sd_bus_slot *delay_slot;
        int fd;
        uint64_t delay_max_usec;
        bool announce_pending;     /* a shutdown began: the callback waits for the delay's value */
        logind_shutdown_t cb;
        void *userdata;
        bool shutting_down;
};

static int take_lock(Logind *l);

static int on_inhibit_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Logind *l = userdata;
        int fd, r;

        l->inhibit_slot = sd_bus_slot_unref(l->inhibit_slot);
        if (sd_bus_message_is_method_error(m, NULL)) {
                const sd_bus_error *e = sd_bus_message_get_error(m);
                log_warning("logind refused the shutdown delay lock: %s", e && e->message ? e->message : "unknown error");
                return 0;
        }
        r = sd_bus_message_read(m, "h", &fd);
        if (r < 0) {
                log_warning_errno(r, "Unreadable answer to Inhibit(): %m");
                return 0;
        }
        /* the descriptor belongs to the message: keep our own copy */
        l->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (l->fd < 0)
                log_warning_errno(errno, "Cannot keep the inhibitor descriptor: %m");
        else
                log_debug("Holding logind's shutdown delay lock.");
        return 0;
}

static int take_lock(Logind *l) {
        if (l->fd >= 0 || l->inhibit_slot)
                return 0;
        return sd_bus_call_method_async(l->bus, &l->inhibit_slot, LOGIND_SERVICE, LOGIND_PATH,
                                        LOGIND_MANAGER, "Inhibit", on_inhibit_reply, l, "ssss",
                                        "shutdown", "nodesmith-agent",
                                        "Draining the node's pods before shutdown", "delay");
}

static int on_delay_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Logind *l = userdata;
        uint64_t v;
        l->delay_slot = sd_bus_slot_unref(l->delay_slot);
        if (!sd_bus_message_is_method_error(m, NULL) && sd_bus_message_enter_container(m, 'v', "t") >= 0 &&
            sd_bus_message_read(m, "t", &v) >= 0) {
                l->delay_max_usec = v;
                log_debug("logind InhibitDelayMaxUSec=%llu", (unsigned long long) v);
        }
        if (l->announce_pending) {
                l->announce_pending = false;
                if (l->cb && l->shutting_down)
                        l->cb(l, true, l->userdata);
        }
        return 0;
}

/* InhibitDelayMaxUSec, asked again: logind reads its drop-ins again on SIGHUP (the kubelet and
 * nodesmith's user data raise the delay after boot, maybe after the agent started). */
static int read_delay(Logind *l) {
        l->delay_slot = sd_bus_slot_unref(l->delay_slot);
        return sd_bus_call_method_async(l->bus, &l->delay_slot, LOGIND_SERVICE, LOGIND_PATH,
                                        "org.freedesktop.DBus.Properties", "Get", on_delay_reply,
                                        l, "ss", LOGIND_MANAGER, "InhibitDelayMaxUSec");
}

static int on_prepare_for_shutdown(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Logind *l = userdata;
        int starting, r;

        r = sd_bus_message_read(m, "b", &starting);
        if (r < 0)
                return 0;
        l->shutting_down = starting;
        if (!starting)
                (void) take_lock(l); /* cancelled: be ready for the next one */
        if (starting && read_delay(l) >= 0) {
                l->announce_pending = true; /* told once the delay in force is known */
                return 0;
        }
        l->announce_pending = false;
        if (l->cb)
                l->cb(l, starting, l->userdata);
        return 0;
}

int logind_new(sd_event *e, logind_shutdown_t cb, void *userdata, Logind **ret) {
        Logind *l;
        int r;

        l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        l->fd = -EBADF;
        l->cb = cb;
        l->userdata = userdata;

        r = sd_bus_open_system(&l->bus);
        if (r >= 0)
                r = sd_bus_attach_event(l->bus, e, SD_EVENT_PRIORITY_NORMAL);
        if (r >= 0)
                r = sd_bus_match_signal_async(l->bus, &l->signal_slot, LOGIND_SERVICE, LOGIND_PATH,
                                              LOGIND_MANAGER, "PrepareForShutdown",
                                              on_prepare_for_shutdown, NULL, l);
        if (r >= 0)
                r = take_lock(l);
        if (r >= 0)
                r = read_delay(l);
        if (r < 0) {
                logind_free(l);
                return r;
        }
        *ret = l;
        return 0;
}

Logind *logind_free(Logind *l) {
        if (!l)
                return NULL;
        sd_bus_slot_unref(l->signal_slot);
        sd_bus_slot_unref(l->inhibit_slot);
        sd_bus_slot_unref(l->delay_slot);
        if (l->fd >= 0)
                close(l->fd);
        sd_bus_flush_close_unref(l->bus);
        free(l);
        return NULL;
}

bool logind_holding(const Logind *l) {
        return l && l->fd >= 0;
}

uint64_t logind_delay_max_usec(const Logind *l) {
        return l ? l->delay_max_usec : 0;
}

void logind_release(Logind *l) {
        if (!l || l->fd < 0)
                return;
        close(l->fd);
        l->fd = -EBADF;
        log_info("Released logind's shutdown delay lock.");
}
