/* SPDX-License-Identifier: Apache-2.0 */
/* Draining one node: taint and cordon, evict, wait for the pods to go. Run by the agent on its
 * own node, and by the coordinator for a node whose agent is silent
 * (coordinator/agents/proxydrain.c). Unlike lib/, it logs its steps at info and above: it is the
 * daemon's drain. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grow.h"
#include "drain.h"
#include "log.h"

#define P(x) NODESMITH__V1__DRAIN_STATUS__PHASE__PHASE_##x
#define TICK_USEC (1 * USEC_PER_SEC)
#define CONFLICT_RETRY_USEC (200 * USEC_PER_MSEC)

typedef enum PodState {
        POD_NEW,
        POD_IN_FLIGHT,
        POD_BLOCKED,      /* 429 DisruptionBudget */
        POD_MULTI_PDB,    /* 500, more than one PDB */
        POD_RETRY,        /* another failure */
        POD_EVICTED,      /* accepted: waiting for it to go */
} PodState;

typedef struct DrainPod {
        Drain *drain;
        char namespace[64];
        char name[254];
        char uid[64];
        PodState state;
        unsigned attempts;
        uint64_t next_usec;      /* CLOCK_MONOTONIC of the next attempt */
        KubeCall *call;
        bool seen;               /* in the current snapshot */
} DrainPod;

struct Drain {
        sd_event *event;
        KubeClient *client;
        KubeNode *node;
        DrainConfig cfg;
        drain_event_t cb;
        void *userdata;
        sd_event_source *timer;

        bool active;
        DrainRequest req;
        DrainStatusInfo st;
        bool cordoned;           /* taint and cordon are on the Node (seen or patched) */
        bool draining_event_sent;
        bool deadline_reported;
        KubeCall *patch_call;
        bool patch_on;           /* the patch in flight taints and cordons (else undoes) */
        char patched_rv[64];     /* the informer's Node resourceVersion when our last patch ended */
        uint64_t patch_retry_usec;
        bool stopping;           /* untaint/uncordon wanted */
        bool cordon_only;        /* the API server refused our taint (NodeRestriction): cordon only */
        uint64_t last_blocked_event_usec;
        unsigned posted;

        DrainPod **pods;
        size_t n_pods, n_alloc;
};

/* ---- pure pieces --------------------------------------------------------------------------- */

DrainPodClass drain_pod_class(const PodInfo *p, bool force) {
        if (p->daemonset)
                return DRAIN_POD_SKIP_DAEMONSET;
        if (p->mirror)
                return DRAIN_POD_SKIP_MIRROR;
        if (pod_info_terminal(p))
                return DRAIN_POD_SKIP_FINISHED;
        if (p->terminating)
                return DRAIN_POD_TERMINATING;
        if (p->do_not_disrupt && !force)
                return DRAIN_POD_HOLD;
        return DRAIN_POD_EVICT;
}

int drain_pod_order(const PodInfo *a, const PodInfo *b) {
        if (a->critical != b->critical)
                return a->critical ? 1 : -1;
        if (a->priority != b->priority)
                return a->priority < b->priority ? -1 : 1;
        if (a->deletion_cost != b->deletion_cost)
                return a->deletion_cost < b->deletion_cost ? -1 : 1;
        int r = strcmp(a->namespace, b->namespace);
        return r ? r : strcmp(a->name, b->name);
}

int64_t drain_grace_seconds(int64_t pod_grace_s, int64_t deadline_ms, int64_t now_ms, uint64_t margin_ms) {
        if (deadline_ms <= 0)
                return -1;
        int64_t left_ms = deadline_ms - now_ms - (int64_t) margin_ms;
        int64_t cap = left_ms / 1000;
        if (cap < 1)
                cap = 1;
        if (pod_grace_s >= 0 && pod_grace_s <= cap)
                return -1;
        return cap;
}

uint64_t drain_backoff_ms(unsigned n, uint64_t min_ms, uint64_t max_ms, uint32_t rnd) {
        uint64_t d = min_ms;
        for (unsigned i = 1; i < n && d < max_ms; i++)
                d *= 2;
        d = MIN(d, max_ms);
        uint64_t j = d / 4;
        return j ? d - j + rnd % (j + 1) : d;
}

int drain_on_parse(const char *s, uint32_t *ret_mask) {
        static const struct {
                const char *name;
                int kind;
        } kinds[] = {
                { "spot", NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION },
                { "rebalance", NODESMITH__V1__NOTICE__KIND__KIND_REBALANCE },
                { "maintenance", NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE },
        };
        uint32_t m = (1u << NODESMITH__V1__NOTICE__KIND__KIND_SHUTDOWN) |
                     (1u << NODESMITH__V1__NOTICE__KIND__KIND_NODE_DELETED);
        if (!s)
                return -EINVAL;
        if (*s && !streq(s, "none"))
                for (const char *w = s;;) {
                        size_t n = strcspn(w, ","), i;
                        for (i = 0; i < ELEMENTSOF(kinds); i++)
                                if (strlen(kinds[i].name) == n && strncmp(kinds[i].name, w, n) == 0)
                                        break;
                        if (i == ELEMENTSOF(kinds))
                                return -EINVAL;
                        m |= 1u << kinds[i].kind;
                        w += n;
                        if (!*w)
                                break;
                        w++;
                }
        *ret_mask = m;
        return 0;
}

int drain_decide(const DrainInputs *in, DrainRequest *ret) {
        DrainRequest r = {};
        if (in->coordinator_drain) {
                snprintf(r.reason, sizeof r.reason, "%s", isempty(in->coordinator_reason) ? "coordinator" : in->coordinator_reason);
                r.deadline_unix_ms = in->coordinator_deadline_ms;
                r.force = in->coordinator_force;
                if (in->has_trigger && !in->coordinator_saw_trigger) {
                        /* the coordinator has not seen it yet: the tighter of both */
                        if (in->trigger.deadline_unix_ms > 0 &&
                            (r.deadline_unix_ms == 0 || in->trigger.deadline_unix_ms < r.deadline_unix_ms))
                                r.deadline_unix_ms = in->trigger.deadline_unix_ms;
                        r.force = r.force || in->trigger.force;
                }
                *ret = r;
                return 1;
        }
        if (!in->has_trigger || in->coordinator_saw_trigger)
                return 0;
        if (in->connected && in->now_ms - in->trigger_seen_ms < (int64_t) in->wait_ms)
                return 0; /* give the coordinator its chance */
        r = in->trigger;
        r.local = true;
        *ret = r;
        return 1;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t now_usec(Drain *d) {
        uint64_t t = 0;
        (void) sd_event_now(d->event, CLOCK_MONOTONIC, &t);
        return t;
}

static void progress(Drain *d) {
        if (d->cb)
                d->cb(d, DRAIN_EVENT_PROGRESS, d->userdata);
}

static void set_error(Drain *d, const char *fmt, ...) _printf_(2, 3);
static void set_error(Drain *d, const char *fmt, ...) {
        char buf[sizeof d->st.last_error];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        if (!streq(buf, d->st.last_error)) {
                memcpy(d->st.last_error, buf, sizeof buf);
                progress(d);
        }
}

static void post_event(Drain *d, const char *type, const char *reason, const char *fmt, ...) _printf_(4, 5);
static void post_event(Drain *d, const char *type, const char *reason, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        const cJSON *n = kube_node_object(d->node);
        KubeEventInfo ev = {
                .api_version = "v1",
                .kind = "Node",
                .name = kube_node_name(d->node),
                .uid = n ? kube_object_meta(n, "uid") : NULL,
                .type = type,
                .reason = reason,
                .message = msg,
                .component = d->cfg.component,
                .host = d->cfg.host,
        };
        int r = kube_event_create(d->client, &ev, NULL, d, NULL);
        if (r < 0)
                log_debug_errno(r, "Event %s not posted: %m", reason);
}

static void arm(Drain *d, uint64_t when) {
        uint64_t cur = 0;
        int enabled = SD_EVENT_OFF;
        (void) sd_event_source_get_enabled(d->timer, &enabled);
        (void) sd_event_source_get_time(d->timer, &cur);
        if (enabled != SD_EVENT_OFF && cur <= when)
                return;
        (void) sd_event_source_set_time(d->timer, when);
        (void) sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
}

void drain_kick(Drain *d) {
        if (d && (d->active || d->stopping))
                arm(d, now_usec(d));
}

/* ---- the Node: taint + cordon, and back ---------------------------------------------------- */

static void on_patched(KubeResponse *resp, void *userdata) {
        Drain *d = userdata;
        d->patch_call = NULL;
        if (resp->error == -EACCES && d->patch_on && !d->cordon_only) {
                /* With the node's own identity (docs/security.md) NodeRestriction forbids a node to
                 * change its own taints; the cordon alone keeps new pods off the Node. */
                d->cordon_only = true;
                log_notice("The API server refuses node %s's own taint %s (NodeRestriction: the agent runs as the "
                           "node): cordon only from now on.", kube_node_name(d->node), KUBE_NODE_TAINT);
                d->patch_retry_usec = 0;
                drain_kick(d);
                return;
        }
        if (resp->error < 0) {
                /* 409: the Node changed under us; the informer brings the new version */
                if (resp->error != -EBUSY)
                        log_warning_errno(resp->error, "Failed to %s node %s: %m%s%s",
                                          d->stopping ? "untaint/uncordon" : "taint/cordon", kube_node_name(d->node),
                                          resp->status.message[0] ? ": " : "", resp->status.message);
                if (d->active)
                        set_error(d, "cordon: %s", resp->status.message[0] ? resp->status.message : strerror(-resp->error));
                d->patch_retry_usec = now_usec(d) + (resp->error == -EBUSY ? CONFLICT_RETRY_USEC : TICK_USEC);
                arm(d, d->patch_retry_usec);
                return;
        }
        const char *rv = kube_node_object(d->node) ? kube_object_meta(kube_node_object(d->node), "resourceVersion") : NULL;
        snprintf(d->patched_rv, sizeof d->patched_rv, "%s", strempty(rv));
        if (d->patch_on && d->active) {
                d->cordoned = true;
                if (d->cordon_only)
                        log_info("Node %s cordoned.", kube_node_name(d->node));
                else
                        log_info("Node %s tainted %s:NoSchedule and cordoned.", kube_node_name(d->node), KUBE_NODE_TAINT);
        } else if (!d->patch_on && !d->active) {
                d->stopping = false;
                log_info("Node %s untainted (and uncordoned if the agent had cordoned it).", kube_node_name(d->node));
        } else if (!d->patch_on && d->active) {
                /* the undo of a withdrawn drain landed after the drain started again: whatever
                 * the Node looked like before, it is untainted now; taint and cordon it again */
                d->cordoned = false;
                log_info("Node %s untainted by a withdrawn drain's patch; tainting it again.", kube_node_name(d->node));
        }
        /* otherwise the drain was withdrawn meanwhile: the next step fixes it */
        drain_kick(d);
}

/* Whether the informer's Node has changed since our last patch ended: only then does its taint
 * and cordon say something that patch did not (it may have come before the patch's own event). */
static bool node_view_fresh(const Drain *d, const cJSON *n) {
        const char *rv = n ? kube_object_meta(n, "resourceVersion") : NULL;
        return isempty(d->patched_rv) || isempty(rv) || !streq(rv, d->patched_rv);
}

static const cJSON *node_annotations(const cJSON *n) {
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(n, "metadata"), "annotations");
}

static bool cordoned_by_us(const cJSON *n) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(node_annotations(n), KUBE_NODE_CORDONED_ANNOTATION);
        return cJSON_IsString(v) && streq(v->valuestring, "true");
}

/* Whether the Node carries what a drain of ours puts on it: the cordon, and our taint unless the
 * API server refused it. */
static bool node_marked(const Drain *d, const cJSON *n) {
        return n && (d->cordon_only || node_has_taint(n, KUBE_NODE_TAINT)) && kube_node_unschedulable(d->node);
}

int drain_node_patch(const cJSON *n, bool on, char **ret) {
        return drain_node_patch_with(n, on, true, ret);
}

/* One strategic merge patch: the taint list is replaced (taints have no merge key), so it is
 * the Node's own list plus or minus ours, guarded by the resourceVersion it was read at. Without
 * taint only the cordon changes. */
int drain_node_patch_with(const cJSON *n, bool on, bool taint, char **ret) {
        const char *rv = n ? kube_object_meta(n, "resourceVersion") : NULL;
        char *body;

        if (!n || isempty(rv))
                return -ENOENT;
        const cJSON *spec = cJSON_GetObjectItemCaseSensitive(n, "spec");
        bool unsched = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(spec, "unschedulable"));
        bool tainted = node_has_taint(n, KUBE_NODE_TAINT);

        cJSON *p = cJSON_CreateObject(), *md = NULL, *ps = NULL, *ann = NULL;
        bool ok = p && (md = cJSON_AddObjectToObject(p, "metadata")) &&
                  cJSON_AddStringToObject(md, "resourceVersion", rv) && (ps = cJSON_AddObjectToObject(p, "spec"));
        if (ok && on && !unsched) {
                ok = cJSON_AddTrueToObject(ps, "unschedulable") && (ann = cJSON_AddObjectToObject(md, "annotations")) &&
                     cJSON_AddStringToObject(ann, KUBE_NODE_CORDONED_ANNOTATION, "true");
        } else if (ok && !on && cordoned_by_us(n)) {
                ok = cJSON_AddNullToObject(ps, "unschedulable") && (ann = cJSON_AddObjectToObject(md, "annotations")) &&
                     cJSON_AddNullToObject(ann, KUBE_NODE_CORDONED_ANNOTATION);
        }
        if (ok && taint && on != tainted) {
                cJSON *taints = cJSON_AddArrayToObject(ps, "taints"), *t;
                ok = taints != NULL;
                cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(spec, "taints")) {
                        const cJSON *key = cJSON_GetObjectItemCaseSensitive(t, "key");
                        if (cJSON_IsString(key) && streq(key->valuestring, KUBE_NODE_TAINT))
                                continue;
                        ok = ok && cJSON_AddItemToArray(taints, cJSON_Duplicate(t, true));
                }
                if (ok && on) {
                        char ts[32];
                        time_t now = time(NULL);
                        struct tm tm;
                        strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
                        cJSON *mine = cJSON_CreateObject();
                        ok = mine && cJSON_AddItemToArray(taints, mine) &&
                             cJSON_AddStringToObject(mine, "key", KUBE_NODE_TAINT) &&
                             cJSON_AddStringToObject(mine, "effect", "NoSchedule") &&
                             cJSON_AddStringToObject(mine, "timeAdded", ts);
                }
        }
        if (ok && cJSON_GetArraySize(ps) == 0 && !ann) {
                cJSON_Delete(p);
                *ret = NULL;
                return 0; /* nothing to change */
        }
        body = ok ? cJSON_PrintUnformatted(p) : NULL;
        cJSON_Delete(p);
        if (!body)
                return -ENOMEM;
        *ret = body;
        return 1;
}

static int patch_node(Drain *d, bool on) {
        _cleanup_free_ char *path = NULL, *body = NULL;
        int r;

        r = drain_node_patch_with(kube_node_object(d->node), on, !d->cordon_only, &body);
        if (r <= 0)
                return r;
        r = kube_path("v1", NULL, "nodes", kube_node_name(d->node), NULL, &path);
        if (r < 0)
                return r;
        r = kube_patch(d->client, path, KUBE_PATCH_STRATEGIC, body, on_patched, d, &d->patch_call);
        if (r < 0)
                return r;
        d->patch_on = on;
        return 1;
}

/* ---- pods ---------------------------------------------------------------------------------- */

static DrainPod *pod_find(Drain *d, const char *uid) {
        for (size_t i = 0; i < d->n_pods; i++)
                if (streq(d->pods[i]->uid, uid))
                        return d->pods[i];
        return NULL;
}

static DrainPod *pod_add(Drain *d, const PodInfo *p) {
        /* pods that left the list stay until their eviction is settled: twice the node's */
        if (GROW(d->pods, d->n_alloc, d->n_pods + 1, (size_t) 2 * KUBE_NODE_MAX_PODS) < 0)
                return NULL;
        DrainPod *dp = calloc(1, sizeof *dp);
        if (!dp)
                return NULL;
        dp->drain = d;
        memcpy(dp->namespace, p->namespace, sizeof dp->namespace);
        memcpy(dp->name, p->name, sizeof dp->name);
        memcpy(dp->uid, p->uid, sizeof dp->uid);
        d->pods[d->n_pods++] = dp;
        return dp;
}

static void pod_free(DrainPod *dp) {
        if (dp && dp->call)
                kube_call_cancel(dp->call);
        free(dp);
}

static void pods_clear(Drain *d) {
        for (size_t i = 0; i < d->n_pods; i++)
                pod_free(d->pods[i]);
        d->n_pods = 0;
}

static void on_evicted(KubeEvictResult result, KubeResponse *resp, void *userdata) {
        DrainPod *dp = userdata;
        Drain *d = dp->drain;
        uint64_t now = now_usec(d);

        dp->call = NULL;
        dp->attempts++;
        switch (result) {
        case KUBE_EVICT_ACCEPTED:
                dp->state = POD_EVICTED;
                d->st.pods_evicted++;
                log_info("Evicted pod %s/%s.", dp->namespace, dp->name);
                progress(d);
                break;
        case KUBE_EVICT_NOT_FOUND:
                dp->state = POD_EVICTED; /* gone already */
                break;
        case KUBE_EVICT_BLOCKED: {
                bool first = dp->state != POD_BLOCKED;
                dp->state = POD_BLOCKED;
                dp->next_usec = now + drain_backoff_ms(dp->attempts, d->cfg.backoff_min_ms, d->cfg.backoff_max_ms,
                                                       (uint32_t) random()) * USEC_PER_MSEC;
                if (first)
                        log_info("Eviction of %s/%s blocked by a PodDisruptionBudget: %s", dp->namespace, dp->name,
                                 resp->status.cause_message[0] ? resp->status.cause_message : resp->status.message);
                set_error(d, "%s/%s: %s", dp->namespace, dp->name,
                          resp->status.cause_message[0] ? resp->status.cause_message : resp->status.message);
                if (d->last_blocked_event_usec == 0 ||
                    now - d->last_blocked_event_usec >= d->cfg.event_interval_ms * USEC_PER_MSEC) {
                        d->last_blocked_event_usec = now;
                        post_event(d, "Warning", "NodesmithEvictionBlocked", "Eviction of pod %s/%s blocked: %s",
                                   dp->namespace, dp->name,
                                   resp->status.cause_message[0] ? resp->status.cause_message : resp->status.message);
                }
                break;
        }
        case KUBE_EVICT_MULTIPLE_PDBS:
                if (dp->state != POD_MULTI_PDB)
                        log_warning("Pod %s/%s cannot be evicted: %s", dp->namespace, dp->name, resp->status.message);
                dp->state = POD_MULTI_PDB;
                dp->next_usec = now + d->cfg.multi_pdb_retry_ms * USEC_PER_MSEC;
                set_error(d, "%s/%s: multiple PodDisruptionBudgets match the pod", dp->namespace, dp->name);
                if (d->last_blocked_event_usec == 0 ||
                    now - d->last_blocked_event_usec >= d->cfg.event_interval_ms * USEC_PER_MSEC) {
                        d->last_blocked_event_usec = now;
                        post_event(d, "Warning", "NodesmithEvictionBlocked", "Eviction of pod %s/%s blocked: %s",
                                   dp->namespace, dp->name, resp->status.message);
                }
                break;
        case KUBE_EVICT_FAILED:
        default:
                dp->state = POD_RETRY;
                dp->next_usec = now + drain_backoff_ms(dp->attempts, d->cfg.backoff_min_ms, d->cfg.backoff_max_ms,
                                                       (uint32_t) random()) * USEC_PER_MSEC;
                log_debug_errno(resp->error, "Eviction of %s/%s failed (HTTP %ld): %m", dp->namespace, dp->name,
                                resp->http_status);
                set_error(d, "%s/%s: eviction failed: %s%s%s", dp->namespace, dp->name, strerror(-resp->error),
                          resp->status.message[0] ? ": " : "", resp->status.message);
                break;
        }
        drain_kick(d);
}

typedef struct Snapshot {
        PodInfo *pods;
        size_t n;
} Snapshot;

static int info_cmp(const void *a, const void *b) {
        return drain_pod_order(a, b);
}

static void finish(Drain *d) {
        bool was = d->st.phase == P(DRAINED);
        d->st.phase = P(DRAINED);
        d->st.last_error[0] = 0;
        if (!was) {
                log_notice("Node %s drained (%s): %d pods evicted.", kube_node_name(d->node), d->req.reason,
                           d->st.pods_evicted);
                post_event(d, NULL, "NodesmithDrained", "Node drained (%s): %d pods evicted", d->req.reason,
                           d->st.pods_evicted);
                progress(d);
                if (d->cb)
                        d->cb(d, DRAIN_EVENT_DRAINED, d->userdata);
        }
}

static void step_evict(Drain *d) {
        _cleanup_free_ PodInfo *pods = NULL;
        size_t n = 0;
        uint64_t now = now_usec(d), next = now + TICK_USEC;
        int64_t now_ms = now_unix_ms();
        int left = 0, blocked = 0, in_flight = 0, held = 0, waiting_critical = 0;
        bool noncritical_left = false;

        if (kube_node_pods(d->node, &pods, &n) < 0) {
                log_oom();
                arm(d, next);
                return;
        }
        if (n > 1)
                qsort(pods, n, sizeof *pods, info_cmp);

        for (size_t i = 0; i < d->n_pods; i++) {
                d->pods[i]->seen = false;
                if (d->pods[i]->state == POD_IN_FLIGHT)
                        in_flight++;
        }
        for (size_t i = 0; i < n; i++) {
                DrainPodClass c = drain_pod_class(&pods[i], d->req.force);
                if (c <= DRAIN_POD_SKIP_FINISHED)
                        continue;
                left++;
                if (!pods[i].critical)
                        noncritical_left = true;
        }

        for (size_t i = 0; i < n; i++) {
                const PodInfo *p = &pods[i];
                DrainPodClass c = drain_pod_class(p, d->req.force);
                DrainPod *dp = c > DRAIN_POD_SKIP_FINISHED ? pod_find(d, p->uid) : NULL;
                if (dp)
                        dp->seen = true;
                if (c == DRAIN_POD_HOLD)
                        held++;
                if (c != DRAIN_POD_EVICT)
                        continue;
                if (!dp && !(dp = pod_add(d, p))) {
                        log_oom();
                        break;
                }
                dp->seen = true;
                if (dp->state == POD_BLOCKED || dp->state == POD_MULTI_PDB)
                        blocked++;
                if (dp->state == POD_IN_FLIGHT || dp->state == POD_EVICTED)
                        continue;
                if (p->critical && noncritical_left) {
                        waiting_critical++;
                        continue;
                }
                if (dp->state != POD_NEW && dp->next_usec > now) {
                        next = MIN(next, dp->next_usec);
                        continue;
                }
                if ((unsigned) in_flight >= d->cfg.max_in_flight)
                        continue;
                int64_t grace = drain_grace_seconds(p->grace_seconds, d->req.deadline_unix_ms, now_ms,
                                                    d->cfg.safety_margin_ms);
                /* preconditions: a pod another drain (the coordinator's for a silent agent, or the
                 * agent's taking it back) evicted since this view of it answers 409 and is seen
                 * terminating at the retry, instead of being evicted twice */
                KubeDeleteOptions opts = {
                        .grace_seconds = grace,
                        .uid = isempty(p->uid) ? NULL : p->uid,
                        .resource_version = isempty(p->resource_version) ? NULL : p->resource_version,
                };
                int r = kube_evict(d->client, p->namespace, p->name, &opts, on_evicted, dp, &dp->call);
                if (r < 0) {
                        log_warning_errno(r, "Cannot post the eviction of %s/%s: %m", p->namespace, p->name);
                        dp->state = POD_RETRY;
                        dp->next_usec = now + d->cfg.backoff_max_ms * USEC_PER_MSEC;
                        continue;
                }
                log_debug("Evicting %s/%s (grace %llds).", p->namespace, p->name, (long long) grace);
                dp->state = POD_IN_FLIGHT;
                d->posted++;
                in_flight++;
        }

        /* forget pods that are gone (their calls, if any, are finished or cancelled) */
        size_t k = 0;
        for (size_t i = 0; i < d->n_pods; i++) {
                if (d->pods[i]->seen || d->pods[i]->state == POD_IN_FLIGHT)
                        d->pods[k++] = d->pods[i];
                else
                        pod_free(d->pods[i]);
        }
        d->n_pods = k;

        Nodesmith__V1__DrainStatus__Phase phase;
        if (left == 0) {
                d->st.pods_left = 0;
                d->st.pods_blocked_by_pdb = 0;
                finish(d);
                return;
        }
        phase = in_flight > 0 || blocked > 0 || waiting_critical > 0 ? P(EVICTING) : P(WAITING);
        if (d->req.deadline_unix_ms > 0 && now_ms > d->req.deadline_unix_ms) {
                phase = P(FAILED);
                if (!d->deadline_reported) {
                        d->deadline_reported = true;
                        log_warning("Drain of %s past its deadline with %d pods left; still trying.",
                                    kube_node_name(d->node), left);
                        set_error(d, "deadline passed with %d pods left", left);
                }
        } else if (held > 0 && held == left)
                set_error(d, "%d do-not-disrupt pods stay (drain not forced)", held);
        if (phase != d->st.phase || left != d->st.pods_left || blocked != d->st.pods_blocked_by_pdb) {
                d->st.phase = phase;
                d->st.pods_left = left;
                d->st.pods_blocked_by_pdb = blocked;
                progress(d);
        }
        arm(d, next);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Drain *d = userdata;
        uint64_t now = now_usec(d);

        if (d->stopping && !d->active) {
                if (d->patch_call || now < d->patch_retry_usec)
                        return 0;
                int r = patch_node(d, false);
                if (r == 0) {
                        d->stopping = false;
                        log_info("Node %s carries no drain taint or cordon of ours.", kube_node_name(d->node));
                } else if (r < 0 && r != -ENOENT)
                        log_warning_errno(r, "Cannot untaint node %s: %m", kube_node_name(d->node));
                if (r < 0)
                        arm(d, now + TICK_USEC);
                return 0;
        }
        if (!d->active)
                return 0;
        if (!kube_node_synced(d->node)) {
                arm(d, now + TICK_USEC);
                return 0;
        }

        /* The Node must stay tainted and cordoned while the drain runs: a withdrawn drain's undo
         * landing late, or someone's uncordon, would let the scheduler bring evicted pods back. */
        if (d->cordoned && !d->patch_call) {
                const cJSON *n = kube_node_object(d->node);
                if (n && node_view_fresh(d, n) && !node_marked(d, n))
                        d->cordoned = false;
        }
        if (!d->cordoned) {
                const cJSON *n = kube_node_object(d->node);
                if (node_marked(d, n) && !d->patch_call && node_view_fresh(d, n))
                        d->cordoned = true;
                else if (n && !d->patch_call && now >= d->patch_retry_usec) {
                        int r = patch_node(d, true);
                        if (r == 0)
                                d->cordoned = true;
                        else if (r < 0) {
                                log_warning_errno(r, "Cannot cordon node %s: %m", kube_node_name(d->node));
                                arm(d, now + TICK_USEC);
                                return 0;
                        }
                }
                if (!d->cordoned && n) {
                        if (d->st.phase != P(CORDONING)) {
                                d->st.phase = P(CORDONING);
                                progress(d);
                        }
                        arm(d, now + TICK_USEC);
                        return 0;
                }
                /* no Node object (deleted, or never registered): evict all the same */
        }
        if (!d->draining_event_sent) {
                d->draining_event_sent = true;
                if (d->req.deadline_unix_ms > 0)
                        post_event(d, NULL, "NodesmithDraining", "Draining node (%s%s), %.0fs before the deadline",
                                   d->req.reason, d->req.force ? ", forced" : "",
                                   (double) (d->req.deadline_unix_ms - now_unix_ms()) / 1000.0);
                else
                        post_event(d, NULL, "NodesmithDraining", "Draining node (%s%s), no deadline",
                                   d->req.reason, d->req.force ? ", forced" : "");
        }
        step_evict(d);
        return 0;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

int drain_new(sd_event *e, KubeClient *client, KubeNode *node, const DrainConfig *cfg, drain_event_t cb,
              void *userdata, Drain **ret) {
        Drain *d = calloc(1, sizeof *d);
        if (!d)
                return -ENOMEM;
        d->event = sd_event_ref(e);
        d->client = client;
        d->node = node;
        d->cfg = *cfg;
        if (d->cfg.max_in_flight == 0)
                d->cfg.max_in_flight = 1;
        d->cb = cb;
        d->userdata = userdata;
        int r = sd_event_add_time(e, &d->timer, CLOCK_MONOTONIC, 0, 1, on_timer, d);
        if (r < 0) {
                drain_free(d);
                return r;
        }
        (void) sd_event_source_set_enabled(d->timer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(d->timer, "drain");
        *ret = d;
        return 0;
}

Drain *drain_free(Drain *d) {
        if (!d)
                return NULL;
        pods_clear(d);
        free(d->pods);
        if (d->client)
                (void) kube_client_cancel(d->client, d);
        sd_event_source_disable_unref(d->timer);
        sd_event_unref(d->event);
        free(d);
        return NULL;
}

int drain_start(Drain *d, const DrainRequest *req) {
        if (!d->active) {
                d->active = true;
                d->stopping = false;
                d->req = *req;
                d->cordoned = false;
                d->draining_event_sent = false;
                d->deadline_reported = false;
                d->st = (DrainStatusInfo) { .phase = P(CORDONING), .started_unix_ms = now_unix_ms() };
                /* a drain that this agent began before a restart: keep its start time */
                const cJSON *n = kube_node_object(d->node);
                if (n && node_has_taint(n, KUBE_NODE_TAINT)) {
                        const cJSON *t;
                        cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(n, "spec"), "taints")) {
                                const cJSON *key = cJSON_GetObjectItemCaseSensitive(t, "key");
                                const cJSON *ta = cJSON_GetObjectItemCaseSensitive(t, "timeAdded");
                                if (cJSON_IsString(key) && streq(key->valuestring, KUBE_NODE_TAINT) &&
                                    cJSON_IsString(ta) && kube_parse_rfc3339_ms(ta->valuestring) > 0)
                                        d->st.started_unix_ms = kube_parse_rfc3339_ms(ta->valuestring);
                        }
                        log_notice("Node %s already carries %s: resuming the drain (%s).", kube_node_name(d->node),
                                   KUBE_NODE_TAINT, req->reason);
                } else
                        log_notice("Draining node %s (%s%s%s), %s %.1fs.", kube_node_name(d->node),
                                   req->reason, req->force ? ", forced" : "",
                                   req->local ? ", agent's own decision" : "",
                                   req->deadline_unix_ms > 0 ? "deadline in" : "no deadline,",
                                   req->deadline_unix_ms > 0 ? (double) (req->deadline_unix_ms - now_unix_ms()) / 1000.0
                                                             : 0.0);
        } else if (!streq(req->reason, d->req.reason) || req->deadline_unix_ms != d->req.deadline_unix_ms ||
                   req->force != d->req.force) {
                log_notice("Drain of %s updated: %s, deadline %lld%s.", kube_node_name(d->node), req->reason,
                           (long long) req->deadline_unix_ms, req->force ? ", forced" : "");
                d->req = *req;
                d->deadline_reported = false;
        } else
                return 0;
        snprintf(d->st.reason, sizeof d->st.reason, "%s", d->req.reason);
        d->st.deadline_unix_ms = d->req.deadline_unix_ms;
        d->st.forced = d->req.force;
        progress(d);
        drain_kick(d);
        return 1;
}

int drain_stop(Drain *d) {
        if (d->active)
                log_notice("Drain of %s withdrawn; undoing the agent's taint and cordon.", kube_node_name(d->node));
        pods_clear(d);
        bool was = d->active;
        d->active = false;
        d->st = (DrainStatusInfo) {};
        d->stopping = true;
        d->patch_retry_usec = 0;
        if (was)
                progress(d);
        drain_kick(d);
        return 0;
}

bool drain_active(const Drain *d) {
        return d && d->active;
}

bool drain_undoing(const Drain *d) {
        return d && d->stopping;
}

bool drain_drained(const Drain *d) {
        return d && d->active && d->st.phase == P(DRAINED);
}

void drain_status(const Drain *d, DrainStatusInfo *ret) {
        if (!d) {
                *ret = (DrainStatusInfo) {};
                return;
        }
        *ret = d->st;
}

unsigned drain_evictions_posted(const Drain *d) {
        return d ? d->posted : 0;
}
