/* SPDX-License-Identifier: Apache-2.0 */
/* Kubernetes Events for people: pods nodesmith cannot place, notices and drains on Nodes. */
#include <stdio.h>
#include <string.h>

#include "agents/registry.h"
#include "hash.h"
#include "kube.h"
#include "log.h"
#include "macro.h"
#include "status/events.h"

#define COMPONENT "nodesmith-coordinator"
#define SEEN_SLOTS 8192 /* pods whose last posted reason is remembered; cleared when full */

/* What was last posted per pod (uid hash -> message hash), so that a pod pending through many
 * rounds gets one event per reason, not one per round. One coordinator per process. */
static struct {
        uint64_t pod, msg;
} seen[SEEN_SLOTS];
static size_t n_seen;

/* true when this message was not the last one posted for the pod (and records it) */
static bool seen_changed(const char *uid, const char *msg) {
        uint64_t p = hash_str(uid) | 1, m = hash_str(msg);
        size_t i = p % SEEN_SLOTS;
        for (size_t k = 0; k < SEEN_SLOTS; k++, i = (i + 1) % SEEN_SLOTS) {
                if (seen[i].pod == p) {
                        if (seen[i].msg == m)
                                return false;
                        seen[i].msg = m;
                        return true;
                }
                if (seen[i].pod == 0)
                        break;
        }
        if (n_seen >= SEEN_SLOTS * 3 / 4) {
                memset(seen, 0, sizeof seen);
                n_seen = 0;
                i = p % SEEN_SLOTS;
        }
        while (seen[i].pod != 0)
                i = (i + 1) % SEEN_SLOTS;
        seen[i].pod = p;
        seen[i].msg = m;
        n_seen++;
        return true;
}

static KubeClient *leader_client(Provisioner *p) {
        return provisioner_leading(p) ? provisioner_kube(p) : NULL;
}

void events_pod_decisions(Provisioner *c, const Round *rd) {
        KubeClient *kube = leader_client(c);
        const SolverResult *res = provisioner_round_result(rd);
        const SolverSnapshot *sn = provisioner_round_snapshot(rd);
        for (size_t i = 0; kube && res && i < res->n_decisions && i < sn->n_pods; i++) {
                const SolverPod *sp = &sn->pods[i];
                const SolverDecision *d = &res->decisions[i];
                if (sp->node_name || d->kind != SOLVER_DECISION_UNSCHEDULABLE)
                        continue;
                char msg[1024];
                snprintf(msg, sizeof msg, "nodesmith cannot launch a node for this pod (%s): %s",
                         solver_reason_to_name(d->reason), isempty(d->message) ? "no NodePool can hold it" : d->message);
                const char *uid = provisioner_pod_uid(provisioner_round_pod_key(rd, i));
                if (!seen_changed(uid, msg))
                        continue;
                KubeEventInfo ev = { .api_version = "v1", .kind = "Pod", .object_namespace = sp->namespace_,
                                     .name = sp->name, .uid = uid, .type = "Warning", .reason = "FailedScheduling",
                                     .message = msg, .component = COMPONENT };
                int r = kube_event_create(kube, &ev, NULL, NULL, NULL);
                if (r < 0)
                        log_debug_errno(r, "Event on pod %s/%s not posted: %m", sp->namespace_, sp->name);
        }
}

static void node_event(Provisioner *c, const NodeEntry *e, const char *type, const char *reason, const char *msg) {
        KubeClient *kube = leader_client(c);
        const char *node = provisioner_node_name(c, e);
        if (!kube || isempty(node))
                return;
        const cJSON *obj = kube_watch_get(provisioner_watch(c, PROVISIONER_WATCH_NODES), NULL, node);
        KubeEventInfo ev = { .api_version = "v1", .kind = "Node", .name = node,
                             .uid = obj ? kube_object_meta(obj, "uid") : NULL, .type = type, .reason = reason,
                             .message = msg, .component = COMPONENT };
        int r = kube_event_create(kube, &ev, NULL, NULL, NULL);
        if (r < 0)
                log_debug_errno(r, "Event %s on node %s not posted: %m", reason, node);
}

void events_notice(Provisioner *c, const NodeEntry *e, const char *kind, const char *event_id, int64_t deadline_in_ms,
                   bool added) {
        char msg[512];
        if (!added)
                snprintf(msg, sizeof msg, "The %s notice %s of instance %s was withdrawn", kind, strempty(event_id),
                         e->instance_id);
        else if (deadline_in_ms > 0)
                snprintf(msg, sizeof msg, "Instance %s has a %s notice (%s): it goes away in %.0fs", e->instance_id,
                         kind, strempty(event_id), (double) deadline_in_ms / 1000.0);
        else
                snprintf(msg, sizeof msg, "Instance %s has a %s notice (%s)", e->instance_id, kind, strempty(event_id));
        node_event(c, e, added ? "Warning" : NULL, added ? "NodesmithInterruptionNotice" : "NodesmithNoticeWithdrawn", msg);
}

void events_notice_drain(Provisioner *c, const NodeEntry *e, bool drain) {
        char msg[512];
        if (drain)
                snprintf(msg, sizeof msg, "nodesmith drains the node (%s)%s: replacement capacity is planned now",
                         strempty(e->reason), e->deadline_unix_ms > 0 ? " before the deadline" : "");
        else
                snprintf(msg, sizeof msg, "nodesmith withdrew the drain: the notices are gone");
        node_event(c, e, NULL, drain ? "NodesmithDrainDecided" : "NodesmithDrainWithdrawn", msg);
}
