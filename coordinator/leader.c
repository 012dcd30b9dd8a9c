/* SPDX-License-Identifier: Apache-2.0 */
/* Leader election through a coordination.k8s.io/v1 Lease, as client-go does it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        sd_event_source *timer;
        bool leading;
        bool busy;                 /* a request is in flight */
        uint64_t last_renew_usec;  /* CLOCK_MONOTONIC of our last successful renewal */
        char *holder;
        uint64_t transitions;
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

static int64_t parse_micro_time(const char *s) {
        struct tm tm = {};
        const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
        if (!p)
                return -1;
        int64_t us = 0;
        if (*p == '.') {
                int digits = 0;
                for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                        if (digits < 6)
                                us = us * 10 + (*p - '0');
                for (; digits < 6; digits++)
                        us *= 10;
        }
        return (int64_t) timegm(&tm) * 1000000 + us;
}

static int64_t now_real_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void set_leading(Leader *l, bool leading) {
        if (l->leading == leading)
                return;
        l->leading = leading;
        if (leading)
                log_notice("Leading: holding Lease %s/%s as %s.", l->namespace, l->name, l->identity);
        else
                log_notice("No longer leading (Lease %s/%s held by %s).", l->namespace, l->name,
                           strempty(l->holder));
        if (l->cb)
                l->cb(l, leading, l->userdata);
}

static void schedule(Leader *l, uint64_t delay) {
        (void) sd_event_source_set_time(l->timer, now_mono(l) + delay);
        (void) sd_event_source_set_enabled(l->timer, SD_EVENT_ONESHOT);
}

static cJSON *lease_body(Leader *l, const cJSON *old, bool takeover) {
        char now[40];
        micro_time(now, sizeof now);
        cJSON *o = old ? cJSON_Duplicate(old, true) : cJSON_CreateObject();
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
        cJSON_AddStringToObject(spec, "holderIdentity", l->identity);
        cJSON_DeleteItemFromObject(spec, "leaseDurationSeconds");
        cJSON_AddNumberToObject(spec, "leaseDurationSeconds", (double) (l->lease_usec / USEC_PER_SEC));
        cJSON_DeleteItemFromObject(spec, "renewTime");
        cJSON_AddStringToObject(spec, "renewTime", now);
        if (takeover || !old) {
                const cJSON *t = cJSON_GetObjectItem(spec, "leaseTransitions");
                double n = cJSON_IsNumber(t) ? t->valuedouble + (old ? 1 : 0) : 0;
                cJSON_DeleteItemFromObject(spec, "leaseTransitions");
                cJSON_AddNumberToObject(spec, "leaseTransitions", n);
                cJSON_DeleteItemFromObject(spec, "acquireTime");
                cJSON_AddStringToObject(spec, "acquireTime", now);
        }
        return o;
}

static void on_written(KubeResponse *resp, void *userdata) {
        Leader *l = userdata;
        l->busy = false;
        if (resp->error == 0) {
                const cJSON *spec = cJSON_GetObjectItem(resp->object, "spec");
                const cJSON *t = cJSON_GetObjectItem(spec, "leaseTransitions");
                l->transitions = cJSON_IsNumber(t) ? (uint64_t) t->valuedouble : l->transitions;
                (void) free_and_strdup(&l->holder, l->identity);
                l->last_renew_usec = now_mono(l);
                set_leading(l, true);
                schedule(l, l->lease_usec / 3);
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
        if (l->leading && now_mono(l) - l->last_renew_usec >= l->lease_usec)
                set_leading(l, false);
        schedule(l, l->lease_usec / 6);
}

static void on_read(KubeResponse *resp, void *userdata) {
        Leader *l = userdata;
        cJSON *o = NULL;
        int r;

        l->busy = false;
        if (resp->error == -ENOENT) {
                o = lease_body(l, NULL, true);
                if (o)
                        r = kube_create(l->kube, l->collection, o, on_written, l, NULL);
                else
                        r = -ENOMEM;
                cJSON_Delete(o);
                if (r >= 0)
                        l->busy = true;
                else
                        schedule(l, l->lease_usec / 6);
                return;
        }
        if (resp->error < 0) {
                log_warning("Cannot read Lease %s/%s: %s", l->namespace, l->name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
                if (l->leading && now_mono(l) - l->last_renew_usec >= l->lease_usec)
                        set_leading(l, false);
                schedule(l, l->lease_usec / 6);
                return;
        }

        const cJSON *spec = cJSON_GetObjectItem(resp->object, "spec");
        const cJSON *h = cJSON_GetObjectItem(spec, "holderIdentity");
        const cJSON *rt = cJSON_GetObjectItem(spec, "renewTime");
        const cJSON *d = cJSON_GetObjectItem(spec, "leaseDurationSeconds");
        const char *holder = cJSON_IsString(h) ? h->valuestring : NULL;
        int64_t renew = cJSON_IsString(rt) ? parse_micro_time(rt->valuestring) : -1;
        int64_t duration = cJSON_IsNumber(d) ? (int64_t) d->valuedouble * 1000000 : (int64_t) l->lease_usec;
        (void) free_and_strdup(&l->holder, holder);

        bool ours = streq_ptr(holder, l->identity);
        bool expired = isempty(holder) || renew < 0 || now_real_usec() > renew + duration;
        if (!ours && !expired) {
                if (l->leading)
                        set_leading(l, false);
                schedule(l, l->lease_usec / 3);
                return;
        }
        o = lease_body(l, resp->object, !ours);
        if (!o) {
                schedule(l, l->lease_usec / 6);
                return;
        }
        r = kube_replace(l->kube, l->path, o, on_written, l, NULL);
        cJSON_Delete(o);
        if (r >= 0)
                l->busy = true;
        else
                schedule(l, l->lease_usec / 6);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Leader *l = userdata;
        if (l->busy)
                return 0;
        /* a leader that has not renewed for a whole lease is no longer one */
        if (l->leading && now_mono(l) - l->last_renew_usec >= l->lease_usec)
                set_leading(l, false);
        if (kube_get(l->kube, l->path, on_read, l, NULL) >= 0)
                l->busy = true;
        else
                schedule(l, l->lease_usec / 6);
        return 0;
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
        if (l->kube)
                kube_client_cancel(l->kube, l);
        sd_event_source_disable_unref(l->timer);
        sd_event_unref(l->event);
        free(l->namespace);
        free(l->name);
        free(l->identity);
        free(l->path);
        free(l->collection);
        free(l->holder);
        free(l);
        return NULL;
}

bool leader_is_leading(const Leader *l) {
        return l && l->leading;
}

const char *leader_holder(const Leader *l) {
        return l ? l->holder : NULL;
}

uint64_t leader_transitions(const Leader *l) {
        return l ? l->transitions : 0;
}
