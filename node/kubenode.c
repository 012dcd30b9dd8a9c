/* SPDX-License-Identifier: Apache-2.0 */
/* One Node and the pods bound to it, watched through the Kubernetes API. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json-util.h"
#include "kubenode.h"
#include "log.h"
#include "quantity.h"
#include "timestamp.h"

struct KubeNode {
        KubeClient *client;
        char *name;
        kube_node_event_t cb;
        void *userdata;
        KubeWatch *node_watch;
        KubeWatch *pod_watch;
        KubeCall *finalizer_call;
        kube_node_done_t remove_cb;
        void *remove_userdata;
        KubeCall *remove_call;
        bool finalizer_failed_logged;
        uint64_t finalizer_retry_usec; /* CLOCK_MONOTONIC; no new attempt before */
};

static uint64_t mono_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / NSEC_PER_USEC;
}

/* ---- pure helpers ------------------------------------------------------------------------- */

static void copy(char *dst, size_t size, const char *s) {
        snprintf(dst, size, "%s", strempty(s));
}

int64_t kube_parse_rfc3339_ms(const char *s) {
        int64_t usec;
        return timestamp_parse_rfc3339(s, 0, &usec) < 0 ? 0 : usec / 1000;
}

/* Add the requests of one container (or the pod's overhead) to r. */
static void add_requests(const cJSON *requests, NodeResources *r, int sign) {
        const cJSON *q;
        cJSON_ArrayForEach(q, requests) {
                int64_t v;
                if (!cJSON_IsString(q) || !q->string)
                        continue;
                if (streq(q->string, "cpu")) {
                        if (quantity_parse_milli(q->valuestring, &v) >= 0)
                                r->cpu_millis += sign * v;
                        continue;
                }
                if (quantity_parse(q->valuestring, &v) < 0)
                        continue;
                if (streq(q->string, "memory"))
                        r->memory_bytes += sign * v;
                else if (streq(q->string, "ephemeral-storage"))
                        r->ephemeral_bytes += sign * v;
                else if (streq(q->string, "hugepages-2Mi"))
                        r->hugepages_2mi_bytes += sign * v;
                else if (streq(q->string, "hugepages-1Gi"))
                        r->hugepages_1gi_bytes += sign * v;
                else if (streq(q->string, "nvidia.com/gpu"))
                        r->gpus += sign * v;
        }
}

static const cJSON *container_requests(const cJSON *c) {
        const cJSON *res = json_get(c, "resources");
        const cJSON *req = json_get(res, "requests");
        /* limits without requests default the requests */
        if (!req)
                req = json_get(res, "limits");
        return req;
}

static void max_into(NodeResources *a, const NodeResources *b) {
        a->cpu_millis = MAX(a->cpu_millis, b->cpu_millis);
        a->memory_bytes = MAX(a->memory_bytes, b->memory_bytes);
        a->ephemeral_bytes = MAX(a->ephemeral_bytes, b->ephemeral_bytes);
        a->hugepages_2mi_bytes = MAX(a->hugepages_2mi_bytes, b->hugepages_2mi_bytes);
        a->hugepages_1gi_bytes = MAX(a->hugepages_1gi_bytes, b->hugepages_1gi_bytes);
        a->gpus = MAX(a->gpus, b->gpus);
}

static void add_into(NodeResources *a, const NodeResources *b) {
        a->cpu_millis += b->cpu_millis;
        a->memory_bytes += b->memory_bytes;
        a->ephemeral_bytes += b->ephemeral_bytes;
        a->hugepages_2mi_bytes += b->hugepages_2mi_bytes;
        a->hugepages_1gi_bytes += b->hugepages_1gi_bytes;
        a->gpus += b->gpus;
        a->pods += b->pods;
}

/* The pod's effective requests as the scheduler computes them: the sum over the containers
 * (sidecars, i.e. init containers with restartPolicy Always, included), or the largest init
 * container (plus the sidecars started before it) if that is more, plus the overhead. */
static void pod_requests(const cJSON *spec, NodeResources *ret) {
        NodeResources sum = {}, init_max = {}, sidecars = {};
        const cJSON *c;

        cJSON_ArrayForEach(c, json_get(spec, "initContainers")) {
                NodeResources one = {};
                add_requests(container_requests(c), &one, 1);
                if (streq_ptr(json_str(c, "restartPolicy"), "Always")) {
                        add_into(&sidecars, &one);
                        max_into(&init_max, &sidecars);
                } else {
                        add_into(&one, &sidecars);
                        max_into(&init_max, &one);
                }
        }
        cJSON_ArrayForEach(c, json_get(spec, "containers"))
                add_requests(container_requests(c), &sum, 1);
        add_into(&sum, &sidecars);
        max_into(&sum, &init_max);
        add_requests(json_get(spec, "overhead"), &sum, 1);
        sum.pods = 1;
        *ret = sum;
}

static bool annotation_true(const cJSON *annotations, const char *key) {
        const char *v = json_str(annotations, key);
        return v && streq(v, "true");
}

int pod_info_parse(const cJSON *pod, PodInfo *ret) {
        const cJSON *md = json_get(pod, "metadata");
        const cJSON *spec = json_get(pod, "spec");
        const cJSON *status = json_get(pod, "status");
        const cJSON *ann = json_get(md, "annotations");
        PodInfo p = {};

        if (isempty(json_str(md, "name")) || isempty(json_str(md, "namespace")))
                return -EBADMSG;
        copy(p.namespace, sizeof p.namespace, json_str(md, "namespace"));
        copy(p.name, sizeof p.name, json_str(md, "name"));
        copy(p.uid, sizeof p.uid, json_str(md, "uid"));
        copy(p.resource_version, sizeof p.resource_version, json_str(md, "resourceVersion"));

        /* the controller, else the first owner */
        const cJSON *o, *owner = NULL;
        cJSON_ArrayForEach(o, json_get(md, "ownerReferences")) {
                if (cJSON_IsTrue(json_get(o, "controller"))) {
                        owner = o;
                        break;
                }
                if (!owner)
                        owner = o;
        }
        if (owner) {
                copy(p.owner_kind, sizeof p.owner_kind, json_str(owner, "kind"));
                copy(p.owner_name, sizeof p.owner_name, json_str(owner, "name"));
                p.daemonset = cJSON_IsTrue(json_get(owner, "controller")) &&
                              streq(p.owner_kind, "DaemonSet");
        }
        p.mirror = json_get(ann, "kubernetes.io/config.mirror") != NULL;
        p.do_not_disrupt = annotation_true(ann, "nodesmith.io/do-not-disrupt") ||
                           annotation_true(ann, "karpenter.sh/do-not-disrupt");
        const char *cost = json_str(ann, "controller.kubernetes.io/pod-deletion-cost");
        if (cost) {
                char *end = NULL;
                errno = 0;
                long long v = strtoll(cost, &end, 10);
                if (errno == 0 && end != cost && *end == 0 && v >= INT32_MIN && v <= INT32_MAX)
                        p.deletion_cost = v;
        }
        p.terminating = !isempty(json_str(md, "deletionTimestamp"));

        pod_requests(spec, &p.requests);
        const cJSON *prio = json_get(spec, "priority");
        if (cJSON_IsNumber(prio))
                p.priority = (int32_t) prio->valuedouble;
        copy(p.priority_class, sizeof p.priority_class, json_str(spec, "priorityClassName"));
        p.critical = streq(p.priority_class, "system-node-critical") ||
                     streq(p.priority_class, "system-cluster-critical");
        const cJSON *grace = json_get(spec, "terminationGracePeriodSeconds");
        p.grace_seconds = cJSON_IsNumber(grace) && grace->valuedouble >= 0 ? (int64_t) grace->valuedouble : 30;
        copy(p.phase, sizeof p.phase, json_str(status, "phase"));
        if (isempty(p.phase))
                copy(p.phase, sizeof p.phase, "Pending");
        *ret = p;
        return 0;
}

bool pod_info_terminal(const PodInfo *p) {
        return streq(p->phase, "Succeeded") || streq(p->phase, "Failed");
}

void pod_infos_requested(const PodInfo *pods, size_t n, NodeResources *ret) {
        NodeResources sum = {};
        for (size_t i = 0; i < n; i++)
                if (!pod_info_terminal(&pods[i]))
                        add_into(&sum, &pods[i].requests);
        *ret = sum;
}

bool node_has_taint(const cJSON *node, const char *key) {
        const cJSON *t;
        cJSON_ArrayForEach(t, json_get(json_get(node, "spec"),
                                                               "taints"))
                if (streq_ptr(json_str(t, "key"), key))
                        return true;
        return false;
}

bool node_has_finalizer(const cJSON *node, const char *finalizer) {
        const cJSON *f;
        cJSON_ArrayForEach(f, json_get(json_get(node, "metadata"),
                                                               "finalizers"))
                if (cJSON_IsString(f) && streq(f->valuestring, finalizer))
                        return true;
        return false;
}

/* ---- the informers ------------------------------------------------------------------------ */

static void on_node_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        KubeNode *k = userdata;
        if (ev->type == KUBE_WATCH_ERROR) {
                log_debug_errno(ev->error, "Watch of node %s: %m", k->name);
                return;
        }
        if (k->cb)
                k->cb(k, KUBE_NODE_EVENT_NODE, k->userdata);
}

static void on_pod_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        KubeNode *k = userdata;
        if (ev->type == KUBE_WATCH_ERROR) {
                log_debug_errno(ev->error, "Watch of the pods on %s: %m", k->name);
                return;
        }
        if (k->cb)
                k->cb(k, KUBE_NODE_EVENT_PODS, k->userdata);
}

int kube_node_new(KubeClient *client, const char *node_name, kube_node_event_t cb, void *userdata,
                  KubeNode **ret) {
        if (!client || isempty(node_name))
                return -EINVAL;
        KubeNode *k = calloc(1, sizeof *k);
        if (!k)
                return -ENOMEM;
        k->client = client;
        k->cb = cb;
        k->userdata = userdata;
        k->name = strdup(node_name);
        if (!k->name) {
                free(k);
                return -ENOMEM;
        }
        *ret = k;
        return 0;
}

KubeNode *kube_node_free(KubeNode *k) {
        if (!k)
                return NULL;
        kube_watch_free(k->node_watch);
        kube_watch_free(k->pod_watch);
        if (k->finalizer_call)
                kube_call_cancel(k->finalizer_call);
        if (k->remove_call)
                kube_call_cancel(k->remove_call);
        free(k->name);
        free(k);
        return NULL;
}

int kube_node_start(KubeNode *k) {
        _cleanup_free_ char *node_sel = NULL, *pod_sel = NULL;
        int r;

        if (asprintf(&node_sel, "metadata.name=%s", k->name) < 0 ||
            asprintf(&pod_sel, "spec.nodeName=%s", k->name) < 0)
                return -ENOMEM;
        r = kube_watch_new(k->client, "/api/v1/nodes", &(KubeListOptions) { .field_selector = node_sel },
                           on_node_event, k, &k->node_watch);
        if (r < 0)
                return r;
        /* pages of 50: a page is whole only until it is trimmed (kube_object_trim), so the
         * memory a (re)list takes at once stays small on a node with many pods */
        return kube_watch_new(k->client, "/api/v1/pods", &(KubeListOptions) { .field_selector = pod_sel, .limit = 50 },
                              on_pod_event, k, &k->pod_watch);
}

const char *kube_node_name(const KubeNode *k) {
        return k ? k->name : NULL;
}

bool kube_node_synced(const KubeNode *k) {
        return k && kube_watch_synced(k->node_watch) && kube_watch_synced(k->pod_watch);
}

const cJSON *kube_node_object(const KubeNode *k) {
        return k ? kube_watch_get(k->node_watch, NULL, k->name) : NULL;
}

bool kube_node_ready(const KubeNode *k) {
        const cJSON *n = kube_node_object(k), *c;
        cJSON_ArrayForEach(c, json_get(json_get(n, "status"),
                                                               "conditions"))
                if (streq_ptr(json_str(c, "type"), "Ready"))
                        return streq_ptr(json_str(c, "status"), "True");
        return false;
}

bool kube_node_has_finalizer(const KubeNode *k) {
        return node_has_finalizer(kube_node_object(k), KUBE_NODE_FINALIZER);
}

int64_t kube_node_deletion_unix_ms(const KubeNode *k) {
        const cJSON *n = kube_node_object(k);
        const char *ts = n ? kube_object_meta(n, "deletionTimestamp") : NULL;
        return ts ? MAX(kube_parse_rfc3339_ms(ts), (int64_t) 1) : 0;
}

bool kube_node_deleting(const KubeNode *k) {
        return kube_node_deletion_unix_ms(k) > 0;
}

bool kube_node_has_taint(const KubeNode *k) {
        return node_has_taint(kube_node_object(k), KUBE_NODE_TAINT);
}

bool kube_node_object_cordoned_by_drain(const cJSON *node) {
        const cJSON *spec = json_get(node, "spec");
        const cJSON *v = json_get(json_get(json_get(node, "metadata"), "annotations"), KUBE_NODE_CORDONED_ANNOTATION);
        return cJSON_IsTrue(json_get(spec, "unschedulable")) && cJSON_IsString(v) && streq(v->valuestring, "true");
}

bool kube_node_drain_marked(const KubeNode *k) {
        return kube_node_has_taint(k) || kube_node_object_cordoned_by_drain(kube_node_object(k));
}

bool kube_node_unschedulable(const KubeNode *k) {
        const cJSON *spec = json_get(kube_node_object(k), "spec");
        return cJSON_IsTrue(json_get(spec, "unschedulable"));
}

typedef struct Collect {
        PodInfo *v;
        size_t n, max;
} Collect;

static int collect_one(const cJSON *obj, void *userdata) {
        Collect *c = userdata;
        if (c->n >= c->max)
                return 0;
        if (pod_info_parse(obj, &c->v[c->n]) >= 0)
                c->n++;
        return 0;
}

static int pod_cmp(const void *a, const void *b) {
        const PodInfo *x = a, *y = b;
        int r = strcmp(x->namespace, y->namespace);
        return r ? r : strcmp(x->name, y->name);
}

int kube_node_pods(const KubeNode *k, PodInfo **ret, size_t *ret_n) {
        size_t n = MIN(kube_watch_size(k ? k->pod_watch : NULL), (size_t) KUBE_NODE_MAX_PODS);
        Collect c = { .max = n };
        if (n > 0) {
                c.v = calloc(n, sizeof *c.v);
                if (!c.v)
                        return -ENOMEM;
                (void) kube_watch_foreach(k->pod_watch, collect_one, &c);
                qsort(c.v, c.n, sizeof *c.v, pod_cmp);
        }
        *ret = c.v;
        *ret_n = c.n;
        return 0;
}

const cJSON *kube_node_pod(const KubeNode *k, const char *ns, const char *name) {
        return k ? kube_watch_get(k->pod_watch, ns, name) : NULL;
}

/* ---- the finalizer ------------------------------------------------------------------------ */

static void on_finalizer_added(KubeResponse *resp, void *userdata) {
        KubeNode *k = userdata;
        k->finalizer_call = NULL;
        if (resp->error < 0) {
                /* 422 (the test failed: the Node changed meanwhile) is retried at the next event;
                 * anything else (403: RBAC) after a pause, logged once */
                if (resp->error == -EINVAL)
                        return;
                log_full_errno(k->finalizer_failed_logged ? LOG_DEBUG : LOG_WARNING, resp->error,
                               "Failed to add the finalizer %s to node %s: %m%s%s; retrying every 30s.",
                               KUBE_NODE_FINALIZER, k->name, resp->status.message[0] ? ": " : "",
                               resp->status.message);
                k->finalizer_failed_logged = true;
                k->finalizer_retry_usec = mono_usec() + 30 * USEC_PER_SEC;
                return;
        }
        log_info("Finalizer %s added to node %s.", KUBE_NODE_FINALIZER, k->name);
}

int kube_node_ensure_finalizer(KubeNode *k) {
        _cleanup_free_ char *path = NULL, *body = NULL;
        const cJSON *n = kube_node_object(k);
        int r;

        if (!n || k->finalizer_call || kube_node_deleting(k) || kube_node_has_finalizer(k) ||
            mono_usec() < k->finalizer_retry_usec)
                return 0;
        const char *rv = kube_object_meta(n, "resourceVersion");
        if (isempty(rv))
                return -EBADMSG;
        const cJSON *fins = json_get(json_get(n, "metadata"),
                                                             "finalizers");
        /* the resourceVersion test makes it idempotent: a second add on the same version fails */
        cJSON *p = cJSON_CreateArray(), *op = NULL;
        bool ok = p && (op = cJSON_CreateObject()) && cJSON_AddItemToArray(p, op) &&
                  cJSON_AddStringToObject(op, "op", "test") &&
                  cJSON_AddStringToObject(op, "path", "/metadata/resourceVersion") &&
                  cJSON_AddStringToObject(op, "value", rv) && (op = cJSON_CreateObject()) &&
                  cJSON_AddItemToArray(p, op) && cJSON_AddStringToObject(op, "op", "add");
        if (ok && cJSON_IsArray(fins)) {
                ok = cJSON_AddStringToObject(op, "path", "/metadata/finalizers/-") &&
                     cJSON_AddStringToObject(op, "value", KUBE_NODE_FINALIZER);
        } else if (ok) {
                cJSON *v = NULL;
                ok = cJSON_AddStringToObject(op, "path", "/metadata/finalizers") &&
                     (v = cJSON_AddArrayToObject(op, "value")) &&
                     cJSON_AddItemToArray(v, cJSON_CreateString(KUBE_NODE_FINALIZER));
        }
        body = ok ? cJSON_PrintUnformatted(p) : NULL;
        cJSON_Delete(p);
        if (!body)
                return -ENOMEM;
        r = kube_path("v1", NULL, "nodes", k->name, NULL, &path);
        if (r < 0)
                return r;
        return kube_patch(k->client, path, KUBE_PATCH_JSON, body, on_finalizer_added, k, &k->finalizer_call);
}

static void on_finalizer_removed(KubeResponse *resp, void *userdata) {
        KubeNode *k = userdata;
        k->remove_call = NULL;
        if (resp->error < 0)
                log_warning_errno(resp->error, "Failed to remove the finalizer %s from node %s: %m%s%s",
                                  KUBE_NODE_FINALIZER, k->name, resp->status.message[0] ? ": " : "",
                                  resp->status.message);
        else
                log_notice("Finalizer %s removed from node %s.", KUBE_NODE_FINALIZER, k->name);
        if (k->remove_cb)
                k->remove_cb(k, resp->error < 0 ? resp->error : 0, k->remove_userdata);
}

int kube_node_remove_finalizer(KubeNode *k, kube_node_done_t cb, void *userdata) {
        _cleanup_free_ char *path = NULL, *body = NULL;
        const cJSON *n = kube_node_object(k);
        int r;

        if (!n)
                return -ENOENT;
        if (k->remove_call)
                return -EBUSY;
        r = kube_finalizer_remove_patch(n, KUBE_NODE_FINALIZER, &body);
        if (r < 0)
                return r;
        r = kube_path("v1", NULL, "nodes", k->name, NULL, &path);
        if (r < 0)
                return r;
        k->remove_cb = cb;
        k->remove_userdata = userdata;
        return kube_patch(k->client, path, KUBE_PATCH_JSON, body, on_finalizer_removed, k, &k->remove_call);
}
