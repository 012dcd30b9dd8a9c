/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator drains a node whose agent is silent, with the agent's own drain. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coordinator.h"
#include "drain.h"
#include "json-util.h"
#include "kubenode.h"
#include "leader.h"
#include "log.h"
#include "model/nodepool.h"
#include "nodebind.h"
#include "proxydrain.h"

#define COMPONENT "nodesmith-coordinator"
#define NODEPOOL_LABEL "nodesmith.io/nodepool"

typedef enum EndResult {
        END_DRAINED,      /* drained by the coordinator (then terminated, or released) */
        END_HANDED_OVER,  /* the agent reported again and took over */
        END_WITHDRAWN,    /* the drain is no longer wanted: taint and cordon undone */
        END_ABANDONED,    /* let go before drained: terminated at the deadline, Node gone, leadership lost */
        _END_MAX,
} EndResult;

static const char *const end_names[_END_MAX] = {
        [END_DRAINED] = "drained",
        [END_HANDED_OVER] = "handed_over",
        [END_WITHDRAWN] = "withdrawn",
        [END_ABANDONED] = "abandoned",
};

typedef struct ProxyDrain {
        ProxyDrains *owner;
        char *node;
        char *instance_id;
        KubeNode *kn;
        Drain *drain;
        DrainRequest req;
        int64_t grace_deadline_ms;  /* decision + grace, fixed when the drain began */
        bool wanted;                /* in the current pass */
        bool withdrawing;           /* drain_stop() called: freed once the untaint is done */
        bool drained;               /* reached DRAINED at least once */
        int32_t evicted_counted;
} ProxyDrain;

/* A Node being deleted that waits for a drain slot is tainted and cordoned at once, so that the
 * pods evicted from the nodes drained meanwhile do not land on it. */
typedef struct Precordon {
        ProxyDrains *owner;
        char *node;
        KubeCall *call;
} Precordon;

struct ProxyDrains {
        Coordinator *c;
        KubeClient *kube;
        KubeWatch *nodes, *nodepools;
        ProxyDrain **v;
        size_t n, n_alloc;
        size_t waiting;             /* drains wanted beyond max-proxy-drains at the last pass */
        Precordon *pre[64];         /* patches in flight */
        size_t n_pre;
        uint64_t started, ended[_END_MAX], pods_evicted, precordoned;
};

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static uint64_t silent_usec(const ProxyDrains *pd) {
        const CoordConfig *cfg = &pd->c->cfg;
        return MAX(cfg->agent_silent_intervals, (uint64_t) 1) * cfg->report_interval_ms * USEC_PER_MSEC;
}

static void node_event(ProxyDrains *pd, const char *node, const char *type, const char *reason,
                       const char *fmt, ...) _printf_(5, 6);
static void node_event(ProxyDrains *pd, const char *node, const char *type, const char *reason,
                       const char *fmt, ...) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        const cJSON *obj = kube_watch_get(pd->nodes, NULL, node);
        KubeEventInfo ev = { .api_version = "v1", .kind = "Node", .name = node,
                             .uid = obj ? kube_object_meta(obj, "uid") : NULL, .type = type,
                             .reason = reason, .message = msg, .component = COMPONENT };
        int r = kube_event_create(pd->kube, &ev, NULL, NULL, NULL);
        if (r < 0)
                log_debug_errno(r, "Event %s on node %s not posted: %m", reason, node);
}

uint64_t proxy_drains_grace_usec(const ProxyDrains *pd, const char *node) {
        uint64_t dflt = pd->c->cfg.termination_grace_ms * USEC_PER_MSEC;
        const cJSON *obj = node ? kube_watch_get(pd->nodes, NULL, node) : NULL;
        const char *pool = json_str(json_get(json_get(obj, "metadata"), "labels"), NODEPOOL_LABEL);
        const cJSON *np = pool ? kube_watch_get(pd->nodepools, NULL, pool) : NULL;
        const char *tgp = json_str(json_get(json_get(json_get(np, "spec"), "template"), "spec"), "terminationGracePeriod");
        int64_t s;
        if (!tgp || nodepool_parse_duration(tgp, &s) < 0 || s < 0)
                return dflt;
        return (uint64_t) s * USEC_PER_SEC;
}

static ProxyDrain *find(const ProxyDrains *pd, const char *node) {
        for (size_t i = 0; node && i < pd->n; i++)
                if (streq(pd->v[i]->node, node))
                        return pd->v[i];
        return NULL;
}

static void count_evictions(ProxyDrain *d) {
        DrainStatusInfo st;
        drain_status(d->drain, &st);
        if (st.pods_evicted > d->evicted_counted) {
                d->owner->pods_evicted += (uint64_t) (st.pods_evicted - d->evicted_counted);
                d->evicted_counted = st.pods_evicted;
        }
}

static void proxy_drain_free(ProxyDrain *d) {
        drain_free(d->drain);
        kube_node_free(d->kn);
        free(d->node);
        free(d->instance_id);
        free(d);
}

static void unlist(ProxyDrains *pd, ProxyDrain *d) {
        for (size_t i = 0; i < pd->n; i++)
                if (pd->v[i] == d) {
                        pd->v[i] = pd->v[--pd->n];
                        return;
                }
}

/* Takes d out of the list and frees it; the Drain's calls are cancelled, nothing is undone. */
static void end(ProxyDrain *d, EndResult how) {
        ProxyDrains *pd = d->owner;
        count_evictions(d);
        pd->ended[d->drained && how == END_ABANDONED ? END_DRAINED : how]++;
        unlist(pd, d);
        proxy_drain_free(d);
}

static void on_drain(Drain *drain, DrainEvent ev, void *userdata) {
        ProxyDrain *d = userdata;
        count_evictions(d);
        if (ev == DRAIN_EVENT_DRAINED && !d->drained) {
                d->drained = true;
                log_notice("Node %s (%s) drained by the coordinator for its silent agent.", d->node,
                           strempty(d->instance_id));
        }
}

static void start_when_listed(ProxyDrain *d) {
        /* like the agent, the drain starts once both informers listed: a taint found then means
         * a drain (the agent's or ours) to resume */
        if (!d->withdrawing && kube_node_synced(d->kn))
                (void) drain_start(d->drain, &d->req);
}

static void on_kube_node(KubeNode *k, KubeNodeEvent ev, void *userdata) {
        ProxyDrain *d = userdata;
        start_when_listed(d);
        drain_kick(d->drain);
}

typedef struct Want {
        const char *node;
        const char *instance_id;
        const char *reason;
        int64_t deadline_unix_ms;      /* the notice's; 0: none */
        bool force;
        bool deleting;                 /* the Node is being deleted: no way back */
        uint64_t decided_usec;         /* CLOCK_MONOTONIC, when the node was first seen leaving */
        uint64_t silent_for_usec;
} Want;

static void precordon_free(Precordon *k) {
        ProxyDrains *pd = k->owner;
        for (size_t i = 0; i < pd->n_pre; i++)
                if (pd->pre[i] == k) {
                        pd->pre[i] = pd->pre[--pd->n_pre];
                        break;
                }
        free(k->node);
        free(k);
}

static void on_precordoned(KubeResponse *resp, void *userdata) {
        Precordon *k = userdata;
        if (resp->error < 0) /* 409: the Node changed; the next pass tries again */
                log_debug_errno(resp->error, "Node %s not tainted and cordoned ahead of its drain: %m", k->node);
        else {
                k->owner->precordoned++;
                log_info("Node %s tainted %s:NoSchedule and cordoned; it waits for a drain slot.", k->node,
                         KUBE_NODE_TAINT);
        }
        precordon_free(k);
}

static void precordon(ProxyDrains *pd, const char *node) {
        _cleanup_free_ char *body = NULL, *path = NULL;
        const cJSON *obj = kube_watch_get(pd->nodes, NULL, node);
        Precordon *k;

        if (!obj || pd->n_pre >= ELEMENTSOF(pd->pre))
                return;
        for (size_t i = 0; i < pd->n_pre; i++)
                if (streq(pd->pre[i]->node, node))
                        return; /* under way */
        if (drain_node_patch(obj, true, &body) <= 0 || kube_path("v1", NULL, "nodes", node, NULL, &path) < 0)
                return; /* done already, or nothing to patch */
        k = calloc(1, sizeof *k);
        if (!k || !(k->node = strdup(node))) {
                free(k);
                return (void) log_oom();
        }
        k->owner = pd;
        pd->pre[pd->n_pre++] = k;
        if (kube_patch(pd->kube, path, KUBE_PATCH_STRATEGIC, body, on_precordoned, k, &k->call) < 0)
                precordon_free(k);
}

static void want(ProxyDrains *pd, const Want *w) {
        ProxyDrain *d = find(pd, w->node);
        uint64_t now = coordinator_now(pd->c);
        int r;

        if (d && d->withdrawing)
                return; /* still undoing; a new drain starts once that is done */
        if (!d) {
                if (pd->n >= pd->c->cfg.max_proxy_drains) {
                        pd->waiting++;
                        if (w->deleting)
                                precordon(pd, w->node);
                        return;
                }
                if (pd->n == pd->n_alloc) {
                        size_t n = pd->n_alloc ? pd->n_alloc * 2 : 8;
                        ProxyDrain **v = realloc(pd->v, n * sizeof *v);
                        if (!v)
                                return (void) log_oom();
                        pd->v = v;
                        pd->n_alloc = n;
                }
                d = calloc(1, sizeof *d);
                if (!d || !(d->node = strdup(w->node)) ||
                    (w->instance_id && !(d->instance_id = strdup(w->instance_id)))) {
                        if (d)
                                free(d->node);
                        free(d);
                        return (void) log_oom();
                }
                d->owner = pd;
                uint64_t grace = proxy_drains_grace_usec(pd, w->node);
                uint64_t at = w->decided_usec + grace;
                d->grace_deadline_ms = now_unix_ms() + (at >= now ? (int64_t) ((at - now) / USEC_PER_MSEC)
                                                                  : -(int64_t) ((now - at) / USEC_PER_MSEC));
                DrainConfig dc = DRAIN_CONFIG_DEFAULTS;
                dc.component = COMPONENT;
                r = kube_node_new(pd->kube, w->node, on_kube_node, d, &d->kn);
                if (r >= 0)
                        r = drain_new(pd->c->event, pd->kube, d->kn, &dc, on_drain, d, &d->drain);
                if (r >= 0)
                        r = kube_node_start(d->kn);
                if (r < 0) {
                        log_warning_errno(r, "Cannot drain node %s for its silent agent: %m", w->node);
                        proxy_drain_free(d);
                        return;
                }
                pd->v[pd->n++] = d;
                pd->started++;
                log_warning("Node %s (%s) must drain (%s) and its agent has been silent for %.0fs: the coordinator "
                            "drains it; acting replica %s.", w->node, strempty(w->instance_id), w->reason,
                            (double) w->silent_for_usec / USEC_PER_SEC,
                            pd->c->leader ? leader_identity(pd->c->leader) : "the only replica");
                node_event(pd, w->node, "Warning", "NodesmithCoordinatorDrain",
                           "Agent silent for %.0fs: the coordinator drains the node (%s)",
                           (double) w->silent_for_usec / USEC_PER_SEC, w->reason);
        }
        d->wanted = true;
        DrainRequest req = { .force = w->force };
        snprintf(req.reason, sizeof req.reason, "%s", w->reason);
        req.deadline_unix_ms = w->deadline_unix_ms > 0 ? MIN(w->deadline_unix_ms, d->grace_deadline_ms)
                                                       : d->grace_deadline_ms;
        d->req = req;
        start_when_listed(d);
}

static void withdraw(ProxyDrain *d) {
        log_notice("Node %s no longer needs to drain; the coordinator undoes its taint and cordon.", d->node);
        d->withdrawing = true;
        (void) drain_stop(d->drain);
}

typedef struct OrphanPass {
        ProxyDrains *pd;
        uint64_t now;
} OrphanPass;

/* A Node being deleted that no agent has reported to this coordinator since it leads. */
static int orphan(const cJSON *node, void *userdata) {
        OrphanPass *o = userdata;
        ProxyDrains *pd = o->pd;
        const char *name = kube_object_meta(node, "name"), *id = node_provider_instance(node);
        const char *dts = kube_object_meta(node, "deletionTimestamp");
        if (!name || !id || !dts || !node_has_finalizer(node, KUBE_NODE_FINALIZER))
                return 0;
        if (registry_get(&pd->c->registry, id) || registry_is_buried(&pd->c->registry, id))
                return 0;
        int64_t since_ms = now_unix_ms() - kube_parse_rfc3339_ms(dts);
        uint64_t since = since_ms > 0 ? (uint64_t) since_ms * USEC_PER_MSEC : 0;
        if (since <= silent_usec(pd))
                return 0;
        Want w = { .node = name, .instance_id = id, .reason = "node-deleted", .force = true, .deleting = true,
                   .decided_usec = o->now > since ? o->now - since : 0, .silent_for_usec = since };
        want(pd, &w);
        return 0;
}

void proxy_drains_pass(ProxyDrains *pd, uint64_t leading_since_usec) {
        NodeEntry *e;

        if (!pd || !kube_watch_synced(pd->nodes))
                return;
        uint64_t now = coordinator_now(pd->c), silent = silent_usec(pd);
        pd->waiting = 0;
        for (size_t i = 0; i < pd->n; i++)
                pd->v[i]->wanted = false;

        REGISTRY_FOREACH(e, &pd->c->registry) {
                /* only the Node whose providerID names this instance: never one another agent named */
                const char *node = node_bound_name(pd->nodes, e);
                const cJSON *obj = node ? kube_watch_get(pd->nodes, NULL, node) : NULL;
                if (!obj)
                        continue;
                bool deleting = kube_object_meta(obj, "deletionTimestamp") != NULL;
                bool directed = e->action == NODESMITH__V1__NODE_DIRECTIVE__ACTION__ACTION_DRAIN;
                ProxyDrain *d = find(pd, node);
                if (!directed && !deleting) {
                        if (d && !d->withdrawing)
                                withdraw(d);
                        continue;
                }
                if (e->terminate_sent_usec)
                        continue; /* the instance goes: let go below */
                uint64_t heard = MAX(e->last_seen_usec, e->heard_usec);
                if (now - heard <= silent)
                        continue; /* the agent drains (a drain of ours was handed over at its report) */
                Want w = {
                        .node = node,
                        .instance_id = e->instance_id,
                        .reason = directed && !isempty(e->reason) ? e->reason : "node-deleted",
                        .deadline_unix_ms = directed ? e->deadline_unix_ms : 0,
                        .force = (directed && e->force) || deleting,
                        .deleting = deleting,
                        .decided_usec = e->drain_decided_usec ? e->drain_decided_usec : now,
                        .silent_for_usec = now - heard,
                };
                want(pd, &w);
        }
        if (now - leading_since_usec > silent) {
                OrphanPass o = { pd, now };
                (void) kube_watch_foreach(pd->nodes, orphan, &o);
        }

        for (size_t i = pd->n; i > 0; i--) {
                ProxyDrain *d = pd->v[i - 1];
                if (d->withdrawing && !drain_undoing(d->drain))
                        end(d, END_WITHDRAWN);
                else if (!d->wanted && !d->withdrawing) {
                        log_info("Node %s: the coordinator stops draining it (%s).", d->node,
                                 d->drained ? "drained, instance terminating" : "instance terminating or Node gone");
                        end(d, END_ABANDONED);
                }
        }
}

void proxy_drains_agent_reported(ProxyDrains *pd, const NodeEntry *e) {
        const char *node = pd ? node_bound_name(pd->nodes, e) : NULL;
        ProxyDrain *d = pd && node ? find(pd, node) : NULL;
        if (!d || d->withdrawing)
                return;
        DrainStatusInfo st;
        drain_status(d->drain, &st);
        log_notice("Agent of node %s (%s) reported again: it takes the drain over (%d pods evicted by the coordinator).",
                   d->node, e->instance_id, st.pods_evicted);
        node_event(pd, d->node, NULL, "NodesmithDrainHandedOver",
                   "Agent reported again: it carries on the drain (%d pods evicted by the coordinator)",
                   st.pods_evicted);
        end(d, END_HANDED_OVER);
}

void proxy_drains_release_all(ProxyDrains *pd) {
        while (pd && pd->n > 0)
                end(pd->v[pd->n - 1], END_ABANDONED);
}

bool proxy_drains_drained(const ProxyDrains *pd, const char *node) {
        const ProxyDrain *d = pd ? find(pd, node) : NULL;
        return d && !d->withdrawing && drain_drained(d->drain);
}

void proxy_drains_metrics(const ProxyDrains *pd, StrBuf *b) {
        if (!pd)
                return;
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_started_total Drains the coordinator started for nodes whose agent is silent.\n"
                         "# TYPE nodesmith_proxy_drains_started_total counter\nnodesmith_proxy_drains_started_total %llu\n",
                      (unsigned long long) pd->started);
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_finished_total Coordinator drains that ended, by result.\n"
                         "# TYPE nodesmith_proxy_drains_finished_total counter\n");
        for (int i = 0; i < _END_MAX; i++)
                strbuf_printf(b, "nodesmith_proxy_drains_finished_total{result=\"%s\"} %llu\n", end_names[i],
                              (unsigned long long) pd->ended[i]);
        size_t drained = 0;
        for (size_t i = 0; i < pd->n; i++)
                drained += pd->v[i]->drained;
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_active Coordinator drains under way (drained nodes awaiting termination included).\n"
                         "# TYPE nodesmith_proxy_drains_active gauge\nnodesmith_proxy_drains_active %zu\n", pd->n);
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_drained Coordinator drains whose node is drained, awaiting termination.\n"
                         "# TYPE nodesmith_proxy_drains_drained gauge\nnodesmith_proxy_drains_drained %zu\n", drained);
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_waiting Nodes to drain for a silent agent beyond max-proxy-drains.\n"
                         "# TYPE nodesmith_proxy_drains_waiting gauge\nnodesmith_proxy_drains_waiting %zu\n", pd->waiting);
        strbuf_printf(b, "# HELP nodesmith_proxy_drains_precordoned_total Nodes being deleted tainted and cordoned while they waited for a drain slot.\n"
                         "# TYPE nodesmith_proxy_drains_precordoned_total counter\nnodesmith_proxy_drains_precordoned_total %llu\n",
                      (unsigned long long) pd->precordoned);
        strbuf_printf(b, "# HELP nodesmith_proxy_drain_pods_evicted_total Pods evicted by the coordinator's drains.\n"
                         "# TYPE nodesmith_proxy_drain_pods_evicted_total counter\nnodesmith_proxy_drain_pods_evicted_total %llu\n",
                      (unsigned long long) pd->pods_evicted);
}

int proxy_drains_new(Coordinator *c, KubeClient *kube, KubeWatch *nodes, KubeWatch *nodepools,
                     ProxyDrains **ret) {
        ProxyDrains *pd = calloc(1, sizeof *pd);
        if (!pd)
                return -ENOMEM;
        *pd = (ProxyDrains) { .c = c, .kube = kube, .nodes = nodes, .nodepools = nodepools };
        *ret = pd;
        return 0;
}

ProxyDrains *proxy_drains_free(ProxyDrains *pd) {
        if (!pd)
                return NULL;
        while (pd->n > 0)
                proxy_drain_free(pd->v[--pd->n]);
        while (pd->n_pre > 0) {
                kube_call_cancel(pd->pre[0]->call);
                precordon_free(pd->pre[0]);
        }
        free(pd->v);
        free(pd);
        return NULL;
}
