/* SPDX-License-Identifier: Apache-2.0 */
/* The launches' Kubernetes Events (a "Nominated" Event per pod, a "Launched" Event per node),
 * sent EVENTS_AT_ONCE at a time: one CreateFleet of 30 nodes is some 500 Events, and 500
 * requests started together held 35 MiB of the coordinator's memory at once (bench/scaleout). */
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

struct QueuedEvent {
        struct QueuedEvent *next;
        char *api_version, *kind, *object_namespace, *name, *uid, *reason, *message, *component;
};

static QueuedEvent *queued_event_free(QueuedEvent *q) {
        if (!q)
                return NULL;
        free(q->api_version);
        free(q->kind);
        free(q->object_namespace);
        free(q->name);
        free(q->uid);
        free(q->reason);
        free(q->message);
        free(q->component);
        free(q);
        return NULL;
}

static bool dup_field(char **dst, const char *s) {
        return !s || (*dst = strdup(s));
}

static void events_send(Provisioner *p);

static void on_event_done(KubeResponse *resp, void *userdata) {
        Provisioner *p = userdata;
        p->events_in_flight--;
        events_send(p);
}

/* Starts queued Events while fewer than EVENTS_AT_ONCE are under way. */
static void events_send(Provisioner *p) {
        while (!p->events_closing && p->events_head && p->events_in_flight < EVENTS_AT_ONCE) {
                QueuedEvent *q = p->events_head;
                p->events_head = q->next;
                if (!p->events_head)
                        p->events_tail = NULL;
                p->n_events_queued--;
                KubeEventInfo ev = { .api_version = q->api_version, .kind = q->kind,
                                     .object_namespace = q->object_namespace, .name = q->name, .uid = q->uid,
                                     .reason = q->reason, .message = q->message, .component = q->component };
                if (kube_event_create(p->kube, &ev, on_event_done, p, NULL) >= 0)
                        p->events_in_flight++;
                queued_event_free(q);
        }
}

void provision_event(Provisioner *p, const KubeEventInfo *ev) {
        if (p->events_closing)
                return;
        if (p->n_events_queued >= EVENTS_QUEUED_MAX) {
                p->events_dropped++;
                log_debug("Event %s for %s %s dropped: %zu Events wait already.", ev->reason, ev->kind, ev->name,
                          p->n_events_queued);
                return;
        }
        QueuedEvent *q = calloc(1, sizeof *q);
        if (!q || !dup_field(&q->api_version, ev->api_version) || !dup_field(&q->kind, ev->kind) ||
            !dup_field(&q->object_namespace, ev->object_namespace) || !dup_field(&q->name, ev->name) ||
            !dup_field(&q->uid, ev->uid) || !dup_field(&q->reason, ev->reason) ||
            !dup_field(&q->message, ev->message) || !dup_field(&q->component, ev->component)) {
                queued_event_free(q);
                log_oom();
                return;
        }
        if (p->events_tail)
                p->events_tail->next = q;
        else
                p->events_head = q;
        p->events_tail = q;
        p->n_events_queued++;
        events_send(p);
}

void provision_events_close(Provisioner *p) {
        p->events_closing = true;
        while (p->events_head) {
                QueuedEvent *q = p->events_head;
                p->events_head = q->next;
                queued_event_free(q);
        }
        p->events_tail = NULL;
        p->n_events_queued = 0;
}
