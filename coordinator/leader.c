/* SPDX-License-Identifier: Apache-2.0 */
/* Leader election through a coordination.k8s.io/v1 Lease, as client-go does it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <time.h>

#include "json-util.h"
#include "leader.h"
#include "log.h"
#include "macro.h"

struct Leader {
        sd_event *event;
        KubeClient *kube;
        char *namespace, *name, *identity, *path, *collection;
        uint64_t lease_usec;
        leader_change_t cb;
        void *userdata;
        uint64_t renew_deadline_usec; /* a leader that has not renewed for this long steps down */
        uint64_t retry_usec;          /* how often a candidate looks, and a failed renewal retries */
        sd_event_source *timer;       /* the next read (or renewal) */
        sd_event_source *deadline;    /* the leader's renew deadline */
        bool leading;
        KubeCall *call;               /* the request in flight, or NULL */
        uint64_t call_sent_usec;      /* CLOCK_MONOTONIC when it was sent */
        uint64_t last_renew_usec;     /* CLOCK_MONOTONIC when our last successful write was sent */
        char *holder;
        uint64_t transitions;
        /* What a candidate last saw of someone else's Lease, and when (client-go's observedTime):
         * the Lease expires lease_usec after it was first seen unchanged, by our own clock, so a
         * skewed clock elsewhere cannot make it look expired early. */
        char *observed_record;
        uint64_t observed_usec;
        cJSON *held;                  /* the Lease as our last successful write stored it */
        KubeCall *release;            /* the release in flight (leader_release) */
        leader_released_t released;
        void *released_userdata;
};

static uint64_t now_mono(Leader *l) {
        uint64_t t = 0;
        (void) sd_event_now(l->event, CLOCK_MONOTONIC, &t);
        return t;
}

/* MicroTime, as the API wants it: 2006-01-02T15:04:05.000000Z */
static void micro_time(char *buf, size_t size) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf + n, size - n, ".%06ldZ", ts.tv_nsec / 1000);
}

static void set_leading(Leader *l, bool leading) {
        if (l->leading == leading)
                return;
        l->leading = leading;
        if (!leading)
                (void) sd_event_source_set_enabled(l->deadline, SD_EVENT_OFF);
        if (leading)
                log_notice("Leading: holding Lease %s/%s as %s.", l->namespace, l->name, l->identity);
        else if (isempty(l->holder) || streq(l->holder, l->identity)) /* stepping down, or releasing */
                log_notice("No longer leading (Lease %s/%s).", l->namespace, l->name);
        else
                log_notice("No longer leading (Lease %s/%s held by %s).", l->namespace, l->name, l->holder);
        if (l->cb)
                l->cb(l, leading, l->userdata);
}

static void schedule(Leader *l, uint64_t delay) {
        (void) sd_event_source_set_time(l->timer, now_mono(l) + delay);
        (void) sd_event_source_set_enabled(l->timer, SD_EVENT_ONESHOT);
}

/* The Lease as it is written: holder and duration, renewed now; acquired now as well when
 * `acquired` (the leader's first write, a takeover, a release), and a takeover of someone else's
 * record counted in leaseTransitions. */
static cJSON *lease_record(Leader *l, const cJSON *old, const char *holder, double duration_s, bool acquired,
                           bool transition) {
        char now[40];
        micro_time(now, sizeof now);
        _cleanup_(cJSON_Deletep) cJSON *o = old ? cJSON_Duplicate(old, true) : cJSON_CreateObject();
        if (!o)
                return NULL;
        if (!old) {
                cJSON_AddStringToObject(o, "apiVersion", "coordination.k8s.io/v1");
                cJSON_AddStringToObject(o, "kind", "Lease");
                cJSON *md = cJSON_AddObjectToObject(o, "metadata");
                cJSON_AddStringToObject(md, "name", l->name);
                cJSON_AddStringToObject(md, "namespace", l->namespace);
        }
        cJSON_DeleteItemFromObject(o, "status");
        cJSON *spec = cJSON_GetObjectItem(o, "spec");
        if (!spec)
                spec = cJSON_AddObjectToObject(o, "spec");
        cJSON_DeleteItemFromObject(spec, "holderIdentity");
        cJSON_DeleteItemFromObject(spec, "leaseDurationSeconds");
        cJSON_DeleteItemFromObject(spec, "renewTime");
        double transitions = 0;
        if (acquired) {
                const cJSON *t = cJSON_GetObjectItem(spec, "leaseTransitions");
                transitions = cJSON_IsNumber(t) ? t->valuedouble + (transition ? 1 : 0) : 0;
                cJSON_DeleteItemFromObject(spec, "leaseTransitions");
                cJSON_DeleteItemFromObject(spec, "acquireTime");
        }
        if (!cJSON_AddStringToObject(spec, "holderIdentity", holder) ||
            !cJSON_AddNumberToObject(spec, "leaseDurationSeconds", duration_s) ||
            !cJSON_AddStringToObject(spec, "renewTime", now) ||
            (acquired && (!cJSON_AddNumberToObject(spec, "leaseTransitions", transitions) ||
                          !cJSON_AddStringToObject(spec, "acquireTime", now))))
                return NULL;
        return TAKE_PTR(o);
}

/* This replica's record over old (NULL: a new Lease); takeover: it was someone else's. */
static cJSON *lease_body(Leader *l, const cJSON *old, bool takeover) {
        return lease_record(l, old, l->identity, (double) (l->lease_usec / USEC_PER_SEC), takeover || !old,
                            takeover && old);
}

static void on_read(KubeResponse *resp, void *userdata);
static void on_written(KubeResponse *resp, void *userdata);

/* Sends one request (get, or the write `body` when not NULL) with its deadline: a call still
 * unanswered after renew_deadline_usec is cancelled, so a slow API server can never hold the
 * election past the point where another replica may take the Lease. */
static int send_call(Leader *l, int (*write)(KubeClient *, const char *, const cJSON *, kube_done_t, void *, KubeCall **),
                     const char *path, const cJSON *body) {
        int r = write ? write(l->kube, path, body, on_written, l, &l->call)
                      : kube_get(l->kube, path, on_read, l, &l->call);
        if (r < 0) {
                l->call = NULL;
                return r;
        }
        l->call_sent_usec = now_mono(l);
        schedule(l, l->renew_deadline_usec);
        return 0;
}

/* A leader steps down once renew_deadline_usec has passed since its last successful renewal was
 * sent, whatever is still in flight: client-go's RenewDeadline. Another replica can take the
 * Lease only lease_usec after it saw that renewal, and lease_usec > renew_deadline_usec. */
static bool past_deadline(Leader *l) {
        return l->leading && now_mono(l) - l->last_renew_usec >= l->renew_deadline_usec;
}

static void step_down_if_late(Leader *l) {
        if (!past_deadline(l))
                return;
        log_warning("Lease %s/%s not renewed within %" PRIu64 " ms; stepping down.", l->namespace, l->name,
                    l->renew_deadline_usec / USEC_PER_MSEC);
        set_leading(l, false);
}

static void on_written(KubeResponse *resp, void *userdata) {
        Leader *l = userdata;
        uint64_t sent = l->call_sent_usec;
        l->call = NULL;
        if (resp->error == 0) {
                const cJSON *spec = cJSON_GetObjectItem(resp->object, "spec");
                const cJSON *t = cJSON_GetObjectItem(spec, "leaseTransitions");
                l->transitions = cJSON_IsNumber(t) ? (uint64_t) t->valuedouble : l->transitions;
                (void) free_and_strdup(&l->holder, l->identity);
                free(l->observed_record);
                l->observed_record = NULL;
                cJSON_Delete(l->held);
                l->held = resp->object ? cJSON_Duplicate(resp->object, true) : NULL;
                /* counted from when the write was sent: the API server stored it after that */
                l->last_renew_usec = sent;
                bool fresh = now_mono(l) - sent < l->renew_deadline_usec;
                if (!fresh)
                        log_warning("Lease %s/%s renewed, but the answer came after the renew deadline.",
                                    l->namespace, l->name);
                set_leading(l, fresh);
                if (fresh) {
                        (void) sd_event_source_set_time(l->deadline, sent + l->renew_deadline_usec);
                        (void) sd_event_source_set_enabled(l->deadline, SD_EVENT_ONESHOT);
                }
                schedule(l, l->retry_usec);
                return;
        }
        /* 409: someone else wrote first; re-read at once */
        if (resp->error == -EBUSY || resp->error == -EEXIST) {
                log_debug("Lease write lost a race; re-reading.");
                schedule(l, 0);
                return;
        }
        log_warning("Cannot write Lease %s/%s: %s", l->namespace, l->name,
                    resp->has_status ? resp->status.message : strerror(-resp->error));
        step_down_if_late(l);
        schedule(l, l->retry_usec);
}

static void on_read(KubeResponse *resp, void *userdata) {
        Leader *l = userdata;
        cJSON *o = NULL;
        int r;

        l->call = NULL;
        if (resp->error == -ENOENT) {
                o = lease_body(l, NULL, true);
                r = o ? send_call(l, kube_create, l->collection, o) : -ENOMEM;
                cJSON_Delete(o);
                if (r < 0)
                        schedule(l, l->retry_usec);
                return;
        }
        if (resp->error < 0) {
                log_warning("Cannot read Lease %s/%s: %s", l->namespace, l->name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
                step_down_if_late(l);
                schedule(l, l->retry_usec);
                return;
        }

        const cJSON *md = cJSON_GetObjectItem(resp->object, "metadata");
        const cJSON *spec = cJSON_GetObjectItem(resp->object, "spec");
        const cJSON *h = cJSON_GetObjectItem(spec, "holderIdentity");
        const cJSON *rt = cJSON_GetObjectItem(spec, "renewTime");
        const cJSON *rv = cJSON_GetObjectItem(md, "resourceVersion");
        const cJSON *d = cJSON_GetObjectItem(spec, "leaseDurationSeconds");
        const char *holder = cJSON_IsString(h) ? h->valuestring : NULL;
        uint64_t duration = cJSON_IsNumber(d) && d->valuedouble > 0 ? (uint64_t) d->valuedouble * USEC_PER_SEC
                                                                     : l->lease_usec;
        (void) free_and_strdup(&l->holder, holder);

        bool ours = streq_ptr(holder, l->identity);
        bool expired = isempty(holder);
        if (!ours && !expired) {
                /* the record as seen: holder, renewTime and resourceVersion; a change restarts
                 * the clock */
                char rec[512];
                snprintf(rec, sizeof rec, "%s|%s|%s", holder, cJSON_IsString(rt) ? rt->valuestring : "",
                         cJSON_IsString(rv) ? rv->valuestring : "");
                if (!streq_ptr(rec, l->observed_record)) {
                        (void) free_and_strdup(&l->observed_record, rec);
                        l->observed_usec = now_mono(l);
                }
                expired = now_mono(l) - l->observed_usec >= duration;
        }
        if (!ours && !expired) {
                if (l->leading)
                        set_leading(l, false);
                schedule(l, l->retry_usec);
                return;
        }
        o = lease_body(l, resp->object, !ours);
        r = o ? send_call(l, kube_replace, l->path, o) : -ENOMEM;
        cJSON_Delete(o);
        if (r < 0)
                schedule(l, l->retry_usec);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Leader *l = userdata;
        if (l->call) {
                /* the request outlived its deadline: give it up, and try again */
                if (now_mono(l) - l->call_sent_usec < l->renew_deadline_usec) {
                        schedule(l, l->call_sent_usec + l->renew_deadline_usec - now_mono(l));
                        return 0;
                }
                log_warning("Lease %s/%s: no answer from the API server within %" PRIu64 " ms; giving the request up.",
                            l->namespace, l->name, l->renew_deadline_usec / USEC_PER_MSEC);
                kube_call_cancel(l->call);
                l->call = NULL;
        }
        step_down_if_late(l);
        if (send_call(l, NULL, l->path, NULL) < 0)
                schedule(l, l->retry_usec);
        return 0;
}

static int on_deadline(sd_event_source *s, uint64_t usec, void *userdata) {
        step_down_if_late(userdata);
        return 0;
}

static void on_release_written(KubeResponse *resp, void *userdata) {
        Leader *l = userdata;
        l->release = NULL;
        if (resp->error == 0)
                log_notice("Released Lease %s/%s: another replica may lead at once.", l->namespace, l->name);
        else /* a conflict: someone else wrote it since, and holds it */
                log_warning("Cannot release Lease %s/%s: %s; it expires by itself.", l->namespace, l->name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
        if (l->released)
                l->released(l, resp->error == 0, l->released_userdata);
}

/* client-go's release (ReleaseOnCancel): the record with no holder, a lease of 1 s, renewed and
 * acquired now, written over the one we hold (its resourceVersion: a Lease someone else wrote
 * since is left alone). */
int leader_release(Leader *l, leader_released_t done, void *userdata) {
        bool held = l->leading && l->held;
        /* stop acting first: nothing this replica decides from here on is acted upon */
        set_leading(l, false);
        (void) sd_event_source_set_enabled(l->timer, SD_EVENT_OFF);
        if (l->call) {
                kube_call_cancel(l->call);
                l->call = NULL;
        }
        if (!held || l->release)
                return 0;
        /* a release keeps leaseTransitions: the next holder counts its own takeover */
        _cleanup_(cJSON_Deletep) cJSON *o = lease_record(l, l->held, "", 1, true, false);
        if (!o)
                return -ENOMEM;
        l->released = done;
        l->released_userdata = userdata;
        int r = kube_replace(l->kube, l->path, o, on_release_written, l, &l->release);
        if (r < 0) {
                l->release = NULL;
                return r;
        }
        return 1;
}

int leader_new(sd_event *e, KubeClient *kube, const LeaderConfig *cfg, leader_change_t cb,
               void *userdata, Leader **ret) {
        Leader *l = calloc(1, sizeof *l);
        int r;
        if (!l)
                return -ENOMEM;
        l->event = sd_event_ref(e);
        l->kube = kube;
        l->cb = cb;
        l->userdata = userdata;
        l->lease_usec = cfg->lease_usec ? cfg->lease_usec : 15 * USEC_PER_SEC;
        /* client-go's defaults are 15 s / 10 s / 2 s: the same proportions */
        l->renew_deadline_usec = cfg->renew_deadline_usec ? cfg->renew_deadline_usec : l->lease_usec * 2 / 3;
        l->retry_usec = cfg->retry_usec ? cfg->retry_usec : l->lease_usec * 2 / 15;
        if (l->renew_deadline_usec >= l->lease_usec || l->retry_usec >= l->renew_deadline_usec) {
                free(l);
                sd_event_unref(e);
                return -EINVAL;
        }
        l->namespace = strdup(cfg->namespace);
        l->name = strdup(cfg->name);
        l->identity = strdup(cfg->identity);
        if (!l->namespace || !l->name || !l->identity) {
                leader_free(l);
                return -ENOMEM;
        }
        r = kube_path("coordination.k8s.io/v1", l->namespace, "leases", l->name, NULL, &l->path);
        if (r >= 0)
                r = kube_path("coordination.k8s.io/v1", l->namespace, "leases", NULL, NULL, &l->collection);
        if (r >= 0)
                r = sd_event_add_time(e, &l->timer, CLOCK_MONOTONIC, 0, 1, on_timer, l);
        if (r >= 0)
                r = sd_event_add_time(e, &l->deadline, CLOCK_MONOTONIC, UINT64_MAX, 1, on_deadline, l);
        if (r >= 0)
                r = sd_event_source_set_enabled(l->deadline, SD_EVENT_OFF);
        if (r < 0) {
                leader_free(l);
                return r;
        }
        *ret = l;
        return 0;
}

Leader *leader_free(Leader *l) {
        if (!l)
                return NULL;
        if (l->call)
                kube_call_cancel(l->call);
        if (l->release)
                kube_call_cancel(l->release);
        cJSON_Delete(l->held);
        sd_event_source_disable_unref(l->timer);
        sd_event_source_disable_unref(l->deadline);
        sd_event_unref(l->event);
        free(l->namespace);
        free(l->name);
        free(l->identity);
        free(l->path);
        free(l->collection);
        free(l->holder);
        free(l->observed_record);
        free(l);
        return NULL;
}

bool leader_is_leading(const Leader *l) {
        if (!l || !l->leading)
                return false;
        /* the loop may not have run the deadline timer yet: the clock decides */
        uint64_t t = 0;
        (void) sd_event_now(l->event, CLOCK_MONOTONIC, &t);
        return t - l->last_renew_usec < l->renew_deadline_usec;
}

const char *leader_identity(const Leader *l) {
        return l ? l->identity : NULL;
}

uint64_t leader_renew_deadline_usec(const Leader *l) {
        return l ? l->renew_deadline_usec : 0;
}

const char *leader_holder(const Leader *l) {
        return l ? l->holder : NULL;
}

uint64_t leader_transitions(const Leader *l) {
        return l ? l->transitions : 0;
}
