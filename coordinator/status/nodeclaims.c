/* SPDX-License-Identifier: Apache-2.0 */
/* Read-only NodeClaims: one per launched instance or failed launch, reconciled every tick. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json-util.h"
#include "kubenode.h"
#include "log.h"
#include "macro.h"
#include "status/nodeclaims.h"
#include "status/status-internal.h"

#define RECORDS_MAX 4096
#define PODS_LISTED 20                       /* pod names kept per claim; the count is exact */
#define FAILED_KEEP_USEC (10 * 60 * USEC_PER_SEC)
#define DELETE_AFTER_SEC 60                  /* a claim younger than this is never collected */
#define CLAIMS_PATH "/apis/nodesmith.io/v1/nodeclaims"
#define MANAGED_BY "app.kubernetes.io/managed-by"

struct ClaimRecord {
        char *name;
        char *instance_id;                   /* NULL: a failed launch */
        char *nodepool, *node_class, *instance_type, *zone, *capacity_type;
        char *pods[PODS_LISTED];
        size_t n_pods, total_pods;
        char *reason, *message;              /* failed launches */
        uint64_t at_usec;
};

static void record_clear(ClaimRecord *r) {
        free(r->name);
        free(r->instance_id);
        free(r->nodepool);
        free(r->node_class);
        free(r->instance_type);
        free(r->zone);
        free(r->capacity_type);
        for (size_t i = 0; i < r->n_pods; i++)
                free(r->pods[i]);
        free(r->reason);
        free(r->message);
        *r = (ClaimRecord) {};
}

static void record_remove(StatusWriter *s, size_t i) {
        record_clear(&s->records[i]);
        s->records[i] = s->records[--s->n_records];
}

static ClaimRecord *record_find(StatusWriter *s, const char *name) {
        for (size_t i = 0; i < s->n_records; i++)
                if (streq(s->records[i].name, name))
                        return &s->records[i];
        return NULL;
}

/* A new record, the oldest dropped when full. */
static ClaimRecord *record_new(StatusWriter *s, uint64_t now) {
        if (s->n_records >= RECORDS_MAX) {
                size_t oldest = 0;
                for (size_t i = 1; i < s->n_records; i++)
                        if (s->records[i].at_usec < s->records[oldest].at_usec)
                                oldest = i;
                record_remove(s, oldest);
        }
        ClaimRecord *r = &s->records[s->n_records++];
        *r = (ClaimRecord) { .at_usec = now };
        return r;
}

static char *claim_name(const char *nodepool, const char *instance_id) {
        char *n = NULL;
        if (asprintf(&n, "%s-%s", nodepool, strncmp(instance_id, "i-", 2) == 0 ? instance_id + 2 : instance_id) < 0)
                return NULL;
        return n;
}

static void record_launch(ClaimRecord *r, const Round *rd, const SolverLaunch *l) {
        const SolverSnapshot *sn = provisioner_round_snapshot(rd);
        const SolverNodePool *pool = provisioner_round_pool(rd, l->nodepool);
        r->nodepool = strdup(pool->name);
        r->node_class = pool->node_class ? strdup(pool->node_class) : NULL;
        r->total_pods = l->n_pods;
        for (size_t i = 0; i < l->n_pods && r->n_pods < PODS_LISTED; i++) {
                const SolverPod *sp = &sn->pods[l->pods[i]];
                if (asprintf(&r->pods[r->n_pods], "%s/%s", strempty(sp->namespace_), sp->name) >= 0)
                        r->n_pods++;
        }
}

void nodeclaims_launched(StatusWriter *s, const char *instance_id, const char *instance_type, const char *zone,
                         const char *capacity_type, const Round *rd, const SolverLaunch *l) {
        if (!s)
                return;
        _cleanup_free_ char *name = claim_name(provisioner_round_pool(rd, l->nodepool)->name, instance_id);
        if (!name || record_find(s, name))
                return;
        ClaimRecord *r = record_new(s, provisioner_now(s->p));
        r->name = TAKE_PTR(name);
        r->instance_id = strdup(instance_id);
        r->instance_type = strdup(strempty(instance_type));
        r->zone = strdup(strempty(zone));
        r->capacity_type = strdup(strempty(capacity_type));
        record_launch(r, rd, l);
        status_writer_poke(s); /* in kubectl at once, not at the next tick */
}

static void launch_failed_fill(StatusWriter *s, ClaimRecord *r, const Round *rd, const SolverLaunch *l,
                               const char *step, const char *code, const char *message);

void nodeclaims_launch_failed(StatusWriter *s, const Round *rd, const SolverLaunch *l, const char *step,
                              const char *code, const char *message) {
        if (!s || !rd || !l)
                return;
        const SolverNodePool *pool = provisioner_round_pool(rd, l->nodepool);
        uint64_t now = provisioner_now(s->p);
        /* one failed NodeClaim per NodePool, the latest failure: a launch failing every round
         * updates it rather than adding objects */
        for (size_t i = 0; i < s->n_records; i++)
                if (!s->records[i].instance_id && streq_ptr(s->records[i].nodepool, pool->name)) {
                        _cleanup_free_ char *name = TAKE_PTR(s->records[i].name);
                        record_clear(&s->records[i]);
                        s->records[i].name = TAKE_PTR(name);
                        s->records[i].at_usec = now;
                        launch_failed_fill(s, &s->records[i], rd, l, step, code, message);
                        return;
                }
        ClaimRecord *r = record_new(s, now);
        if (asprintf(&r->name, "%s-failed-%08llx", pool->name, (unsigned long long) (now / 1000 % 0xffffffffULL)) < 0)
                r->name = NULL;
        launch_failed_fill(s, r, rd, l, step, code, message);
}

static void launch_failed_fill(StatusWriter *s, ClaimRecord *r, const Round *rd, const SolverLaunch *l,
                               const char *step, const char *code, const char *message) {
        r->instance_type = strdup(provisioner_round_snapshot(rd)->types[l->type].name);
        r->zone = l->zone ? strdup(l->zone) : NULL;
        r->capacity_type = strdup(solver_capacity_type_to_name(l->capacity_type));
        r->reason = strdup(isempty(code) ? "LaunchFailed" : code);
        if (asprintf(&r->message, "%s failed: %s", step, isempty(message) ? "no instance launched" : message) < 0)
                r->message = NULL;
        record_launch(r, rd, l);
        if (!r->name)
                record_remove(s, (size_t) (r - s->records));
        status_writer_poke(s);
}

/* ---- the desired objects -------------------------------------------------------------------- */

typedef struct Claim {
        const char *name, *instance_id, *nodepool, *node_class, *instance_type, *zone, *capacity_type;
        const char *node_name;               /* the Node it became, once registered */
        int ready;                           /* the Node's Ready: 1, 0, -1 unknown */
        const ClaimRecord *record;
} Claim;

static cJSON *claim_object(const Claim *cl, const cJSON *old) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        const cJSON *old_status = cJSON_GetObjectItemCaseSensitive(old, "status");
        cJSON *md = o ? cJSON_AddObjectToObject(o, "metadata") : NULL;
        cJSON *labels = md ? cJSON_AddObjectToObject(md, "labels") : NULL;
        cJSON *spec = o ? cJSON_AddObjectToObject(o, "spec") : NULL;
        cJSON *ref = spec ? cJSON_AddObjectToObject(spec, "nodeClassRef") : NULL;
        cJSON *st = o ? cJSON_AddObjectToObject(o, "status") : NULL;
        cJSON *conds = st ? cJSON_AddArrayToObject(st, "conditions") : NULL;
        char pid[256];
        int r = 0;

        if (!conds || !cJSON_AddStringToObject(md, "name", cl->name) ||
            !cJSON_AddStringToObject(labels, MANAGED_BY, "nodesmith") ||
            !cJSON_AddStringToObject(labels, SOLVER_LABEL_NODEPOOL, cl->nodepool) ||
            !cJSON_AddStringToObject(ref, "group", "nodesmith.io") ||
            !cJSON_AddStringToObject(ref, "kind", "EC2NodeClass") ||
            !cJSON_AddStringToObject(ref, "name", strempty(cl->node_class)))
                return NULL;
        if (!isempty(cl->instance_type) && !cJSON_AddStringToObject(labels, SOLVER_LABEL_INSTANCE_TYPE, cl->instance_type))
                return NULL;
        if (!isempty(cl->zone) && !cJSON_AddStringToObject(labels, SOLVER_LABEL_ZONE, cl->zone))
                return NULL;
        if (!isempty(cl->capacity_type) && !cJSON_AddStringToObject(labels, SOLVER_LABEL_CAPACITY_TYPE, cl->capacity_type))
                return NULL;
        if (cl->instance_id) {
                snprintf(pid, sizeof pid, "aws:///%s/%s", strempty(cl->zone), cl->instance_id);
                if (!cJSON_AddStringToObject(st, "instanceID", cl->instance_id) || !cJSON_AddStringToObject(st, "providerID", pid))
                        return NULL;
        }
        if (cl->node_name && !cJSON_AddStringToObject(st, "nodeName", cl->node_name))
                return NULL;
        if (cl->record && cl->record->total_pods > 0) {
                cJSON *pods = cJSON_AddArrayToObject(st, "nominatedPods");
                for (size_t i = 0; pods && i < cl->record->n_pods; i++)
                        cJSON_AddItemToArray(pods, cJSON_CreateString(cl->record->pods[i]));
                if (!pods || !cJSON_AddNumberToObject(st, "nominatedPodCount", (double) cl->record->total_pods))
                        return NULL;
        }
        if (!cl->instance_id) {
                r = status_condition_add(conds, old_status, 0, "Launched", "False", cl->record->reason,
                                         strempty(cl->record->message));
                if (r >= 0)
                        r = status_condition_add(conds, old_status, 0, "Ready", "False", cl->record->reason,
                                                 strempty(cl->record->message));
                return r < 0 ? NULL : TAKE_PTR(o);
        }
        r = status_condition_add(conds, old_status, 0, "Launched", "True", "Launched", "");
        if (r >= 0)
                r = cl->node_name ?
                        status_condition_add(conds, old_status, 0, "Registered", "True", "Registered", "") :
                        status_condition_add(conds, old_status, 0, "Registered", "Unknown", "AwaitingRegistration",
                                             "the instance has not joined the cluster as a Node yet");
        if (r >= 0)
                r = cl->ready > 0 ? status_condition_add(conds, old_status, 0, "Initialized", "True", "Initialized", "") :
                    status_condition_add(conds, old_status, 0, "Initialized", cl->ready == 0 ? "False" : "Unknown",
                                         cl->ready == 0 ? "NodeNotReady" : "AwaitingRegistration",
                                         cl->ready == 0 ? "the Node is not Ready" : "");
        if (r >= 0)
                r = status_condition_ready(conds, old_status, 0);
        return r < 0 ? NULL : TAKE_PTR(o);
}

typedef struct Reconcile {
        StatusWriter *s;
        char **seen;
        size_t n_seen, cap_seen;
} Reconcile;

static bool seen(const Reconcile *rc, const char *name) {
        for (size_t i = 0; i < rc->n_seen; i++)
                if (streq(rc->seen[i], name))
                        return true;
        return false;
}

static int mark_seen(Reconcile *rc, const char *name) {
        if (rc->n_seen == rc->cap_seen) {
                size_t cap = rc->cap_seen ? rc->cap_seen * 2 : 64;
                char **n = realloc(rc->seen, cap * sizeof *n);
                if (!n)
                        return -ENOMEM;
                rc->seen = n;
                rc->cap_seen = cap;
        }
        return (rc->seen[rc->n_seen] = strdup(name)) ? (int) ++rc->n_seen : -ENOMEM;
}

/* Creates the claim, or patches what differs. */
static int claim_apply(Reconcile *rc, Claim *cl) {
        StatusWriter *s = rc->s;
        if (!cl->name || seen(rc, cl->name))
                return 0;
        int r = mark_seen(rc, cl->name);
        if (r < 0)
                return r;
        cl->record = record_find(s, cl->name);
        const cJSON *old = kube_watch_get(s->claims, NULL, cl->name);
        _cleanup_(cJSON_Deletep) cJSON *want = claim_object(cl, old);
        char what[320];
        if (!want)
                return -ENOMEM;
        if (!old) {
                cJSON_AddStringToObject(want, "apiVersion", "nodesmith.io/v1");
                cJSON_AddStringToObject(want, "kind", "NodeClaim");
                snprintf(what, sizeof what, "Create NodeClaim %s", cl->name);
                return status_send(s, STATUS_CREATE, CLAIMS_PATH, TAKE_PTR(want), what);
        }
        const cJSON *old_labels = json_get(json_get(old, "metadata"), "labels"), *l;
        bool same = cJSON_Compare(json_get(old, "spec"), json_get(want, "spec"), true) &&
                    cJSON_Compare(json_get(old, "status"), json_get(want, "status"), true);
        cJSON_ArrayForEach(l, json_get(json_get(want, "metadata"), "labels"))
                same = same && streq_ptr(json_str(old_labels, l->string), l->valuestring);
        if (same)
                return 0;
        const cJSON *f;
        cJSON *st = cJSON_GetObjectItemCaseSensitive(want, "status");
        cJSON_ArrayForEach(f, json_get(old, "status"))
                if (!json_get(st, f->string))
                        cJSON_AddNullToObject(st, f->string);
        _cleanup_free_ char *path = NULL;
        r = kube_path("nodesmith.io/v1", NULL, "nodeclaims", cl->name, NULL, &path);
        if (r < 0)
                return r;
        snprintf(what, sizeof what, "Update NodeClaim %s", cl->name);
        return status_send(s, STATUS_PATCH, path, TAKE_PTR(want), what);
}

static const char *pool_node_class(StatusWriter *s, const char *pool) {
        const cJSON *np = kube_watch_get(provisioner_watch(s->p, PROVISIONER_WATCH_NODEPOOLS), NULL, pool);
        return json_str(json_get(json_get(json_get(json_get(np, "spec"), "template"), "spec"), "nodeClassRef"), "name");
}

static int node_claim(const cJSON *node, void *userdata) {
        Reconcile *rc = userdata;
        const cJSON *labels = json_get(json_get(node, "metadata"), "labels");
        const char *pool = json_str(labels, SOLVER_LABEL_NODEPOOL);
        const char *pid = json_str(json_get(node, "spec"), "providerID");
        const char *id = pid ? strrchr(pid, '/') : NULL;
        if (isempty(pool) || !id || strncmp(id + 1, "i-", 2) != 0)
                return 0;
        int ready = -1;
        const cJSON *c;
        cJSON_ArrayForEach(c, json_get(json_get(node, "status"), "conditions"))
                if (streq_ptr(json_str(c, "type"), "Ready"))
                        ready = streq_ptr(json_str(c, "status"), "True");
        _cleanup_free_ char *name = claim_name(pool, id + 1);
        Claim cl = { .name = name, .instance_id = id + 1, .nodepool = pool, .node_class = pool_node_class(rc->s, pool),
                     .instance_type = json_str(labels, SOLVER_LABEL_INSTANCE_TYPE), .zone = json_str(labels, SOLVER_LABEL_ZONE),
                     .capacity_type = json_str(labels, SOLVER_LABEL_CAPACITY_TYPE),
                     .node_name = kube_object_meta(node, "name"), .ready = ready };
        (void) claim_apply(rc, &cl);
        return 0;
}

static int collect(const cJSON *claim, void *userdata) {
        Reconcile *rc = userdata;
        StatusWriter *s = rc->s;
        const char *name = kube_object_meta(claim, "name");
        const char *created = kube_object_meta(claim, "creationTimestamp");
        int64_t t = created ? kube_parse_rfc3339_ms(created) : 0;
        if (!name || seen(rc, name) || !streq_ptr(json_str(json_get(json_get(claim, "metadata"), "labels"), MANAGED_BY), "nodesmith"))
                return 0;
        /* one that never had a Node may just not be in our view yet (a launch answered a moment
         * ago); one whose Node is gone is collected at once */
        if (!json_str(json_get(claim, "status"), "nodeName") && t > 0 && time(NULL) * 1000LL - t < DELETE_AFTER_SEC * 1000LL)
                return 0;
        _cleanup_free_ char *path = NULL;
        char what[320];
        if (kube_path("nodesmith.io/v1", NULL, "nodeclaims", name, NULL, &path) < 0)
                return 0;
        snprintf(what, sizeof what, "Delete NodeClaim %s (its instance is gone)", name);
        log_debug("%s", what);
        (void) status_send(s, STATUS_DELETE, path, NULL, what);
        ClaimRecord *r = record_find(s, name);
        if (r)
                record_remove(s, (size_t) (r - s->records));
        return 0;
}

void nodeclaims_reconcile(StatusWriter *s) {
        Provisioner *p = s->p;
        Reconcile rc = { .s = s };
        ProvisionerActivity pa;
        size_t n_inflight = 0;
        if (!provisioner_leading(p))
                return;
        uint64_t now = provisioner_now(p);
        const KubeWatch *nodes = provisioner_watch(p, PROVISIONER_WATCH_NODES);
        provisioner_activity(p, &pa);
        if (!s->claims || !kube_watch_synced(s->claims) || !kube_watch_synced(nodes) || !pa.learned)
                return;
        /* launched, not registered yet */
        const InFlight *inflight = provisioner_inflight(p, &n_inflight);
        for (size_t i = 0; i < n_inflight; i++) {
                const InFlight *f = &inflight[i];
                _cleanup_free_ char *name = claim_name(f->nodepool, f->instance_id);
                Claim cl = { .name = name, .instance_id = f->instance_id, .nodepool = f->nodepool,
                             .node_class = pool_node_class(s, f->nodepool), .instance_type = f->instance_type,
                             .zone = f->zone, .capacity_type = solver_capacity_type_to_name(f->capacity_type), .ready = -1 };
                const ClaimRecord *r = record_find(s, name ? name : "");
                if (!cl.node_class && r)
                        cl.node_class = r->node_class;
                (void) claim_apply(&rc, &cl);
        }
        /* Nodes nodesmith launched */
        (void) kube_watch_foreach(nodes, node_claim, &rc);
        /* failed launches, for a while */
        for (size_t i = 0; i < s->n_records;) {
                ClaimRecord *r = &s->records[i];
                if (r->instance_id) {
                        i++;
                        continue;
                }
                if (now - r->at_usec > FAILED_KEEP_USEC) {
                        record_remove(s, i);
                        continue;
                }
                Claim cl = { .name = r->name, .nodepool = r->nodepool, .node_class = r->node_class,
                             .instance_type = r->instance_type, .zone = r->zone, .capacity_type = r->capacity_type };
                (void) claim_apply(&rc, &cl);
                i++;
        }
        /* the rest: their instances are gone */
        (void) kube_watch_foreach(s->claims, collect, &rc);
        for (size_t i = 0; i < rc.n_seen; i++)
                free(rc.seen[i]);
        free(rc.seen);
}

static void on_claim_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        /* the cache is what reconcile reads; nothing to do per event */
}

int nodeclaims_start(StatusWriter *s) {
        KubeClient *kube = provisioner_kube(s->p);
        if (!kube)
                return 0;
        s->records = calloc(RECORDS_MAX, sizeof *s->records);
        if (!s->records)
                return -ENOMEM;
        return kube_watch_new(kube, CLAIMS_PATH, NULL, on_claim_event, s, &s->claims);
}

void nodeclaims_done(StatusWriter *s) {
        s->claims = kube_watch_free(s->claims);
        for (size_t i = 0; i < s->n_records; i++)
                record_clear(&s->records[i]);
        free(s->records);
        s->records = NULL;
        s->n_records = 0;
}
