/* SPDX-License-Identifier: Apache-2.0 */
/* NodePool and EC2NodeClass status (conditions, resources, resolved selectors), written by the
 * leader. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/registry.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "model/nodepool.h"
#include "provision/provisioner.h"
#include "status/status-internal.h"

#define STATUS_INTERVAL_USEC (5 * USEC_PER_SEC)
#define STATUS_RETRY_USEC USEC_PER_SEC

struct Pending {
        StatusWriter *s;
        Pending *next, *prev;
        StatusOp op;
        char *what;          /* "Status of NodePool general" */
};

static void pending_free(Pending *pd) {
        StatusWriter *s = pd->s;
        if (pd->prev)
                pd->prev->next = pd->next;
        else
                s->pending = pd->next;
        if (pd->next)
                pd->next->prev = pd->prev;
        s->in_flight--;
        free(pd->what);
        free(pd);
}

void status_now_rfc3339(char *buf, size_t size) {
        time_t t = time(NULL);
        struct tm tm;
        strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
}

const cJSON *status_condition_find(const cJSON *status, const char *type) {
        const cJSON *c;
        cJSON_ArrayForEach(c, json_get(status, "conditions"))
                if (streq_ptr(json_str(c, "type"), type))
                        return c;
        return NULL;
}

int status_condition_add(cJSON *conds, const cJSON *old_status, int64_t generation, const char *type,
                         const char *status, const char *reason, const char *message) {
        const cJSON *old = status_condition_find(old_status, type);
        char now[32];
        const char *since = NULL;
        if (old && streq_ptr(json_str(old, "status"), status))
                since = json_str(old, "lastTransitionTime");
        if (!since) {
                status_now_rfc3339(now, sizeof now);
                since = now;
        }
        cJSON *c = cJSON_CreateObject();
        if (!c || !cJSON_AddStringToObject(c, "type", type) || !cJSON_AddStringToObject(c, "status", status) ||
            !cJSON_AddNumberToObject(c, "observedGeneration", (double) generation) ||
            !cJSON_AddStringToObject(c, "lastTransitionTime", since) ||
            !cJSON_AddStringToObject(c, "reason", reason) ||
            !cJSON_AddStringToObject(c, "message", strempty(message))) {
                cJSON_Delete(c);
                return -ENOMEM;
        }
        cJSON_AddItemToArray(conds, c);
        return 0;
}

int status_condition_ready(cJSON *conds, const cJSON *old_status, int64_t generation) {
        const cJSON *c, *first = NULL;
        cJSON_ArrayForEach(c, conds)
                if (streq_ptr(json_str(c, "status"), "False")) {
                        first = c;
                        break;
                } else if (!first && !streq_ptr(json_str(c, "status"), "True"))
                        first = c;
        if (!first)
                return status_condition_add(conds, old_status, generation, "Ready", "True", "Ready", "");
        char msg[1100];
        snprintf(msg, sizeof msg, "%s: %s", json_str(first, "type"), strempty(json_str(first, "message")));
        return status_condition_add(conds, old_status, generation, "Ready", json_str(first, "status"), json_str(first, "reason"), msg);
}

static void on_sent(KubeResponse *resp, void *userdata) {
        Pending *pd = userdata;
        StatusWriter *s = pd->s;
        if (resp->error == 0 || (pd->op == STATUS_DELETE && resp->http_status == 404)) {
                s->written++;
                log_debug("%s: done.", pd->what);
        } else if (resp->http_status == 409) {
                s->conflicts++;
                log_debug("%s: conflict; done again from the newer object.", pd->what);
                (void) sd_event_source_set_time_relative(s->timer, STATUS_RETRY_USEC);
        } else {
                s->errors++;
                log_warning("%s failed: HTTP %ld (%s)", pd->what, resp->http_status, strerror(-resp->error));
        }
        pending_free(pd);
}

int status_send(StatusWriter *s, StatusOp op, const char *path, cJSON *body, const char *what) {
        _cleanup_(cJSON_Deletep) cJSON *b = body;
        _cleanup_free_ char *text = NULL;
        int r;
        if (s->in_flight >= STATUS_WRITES_MAX) {
                (void) sd_event_source_set_time_relative(s->timer, STATUS_RETRY_USEC);
                return 0;
        }
        if (b && !(text = cJSON_PrintUnformatted(b)))
                return -ENOMEM;
        Pending *pd = calloc(1, sizeof *pd);
        if (!pd || !(pd->what = strdup(what))) {
                free(pd);
                return -ENOMEM;
        }
        pd->s = s;
        pd->op = op;
        pd->next = s->pending;
        if (s->pending)
                s->pending->prev = pd;
        s->pending = pd;
        s->in_flight++;
        KubeClient *kube = provisioner_kube(s->p);
        switch (op) {
        case STATUS_PATCH:
                r = kube_patch(kube, path, KUBE_PATCH_MERGE, text, on_sent, pd, NULL);
                break;
        case STATUS_CREATE:
                r = kube_create(kube, path, b, on_sent, pd, NULL);
                break;
        default:
                r = kube_delete(kube, path, NULL, on_sent, pd, NULL);
                break;
        }
        if (r < 0)
                pending_free(pd);
        return r;
}

/* PATCH the status subresource when `status` differs from the object's; takes ownership of
 * status. */
static int status_write(StatusWriter *s, const char *resource, const char *kind, const cJSON *obj, cJSON *status) {
        _cleanup_(cJSON_Deletep) cJSON *st = status, *body = NULL;
        _cleanup_free_ char *path = NULL, *what = NULL;
        const char *name = kube_object_meta(obj, "name"), *rv = kube_object_meta(obj, "resourceVersion");
        const cJSON *old = json_get(obj, "status");
        int r;

        if (old && cJSON_Compare(old, st, true)) {
                s->unchanged++;
                return 0;
        }
        if (log_get_max_level() >= LOG_DEBUG) {
                _cleanup_free_ char *a = old ? cJSON_PrintUnformatted(old) : NULL, *b = cJSON_PrintUnformatted(st);
                log_debug("Status of %s %s changes from %s to %s", kind, name, a ? a : "nothing", strempty(b));
        }
        r = kube_path("nodesmith.io/v1", NULL, resource, name, "status", &path);
        if (r < 0)
                return r;
        body = cJSON_CreateObject();
        cJSON *md = body ? cJSON_AddObjectToObject(body, "metadata") : NULL;
        if (!md || (rv && !cJSON_AddStringToObject(md, "resourceVersion", rv)))
                return -ENOMEM;
        /* a merge patch keeps what it does not name: what nodesmith no longer sets is removed */
        const cJSON *f;
        cJSON_ArrayForEach(f, old)
                if (!json_get(st, f->string) && !cJSON_AddNullToObject(st, f->string))
                        return -ENOMEM;
        cJSON_AddItemToObject(body, "status", TAKE_PTR(st));
        if (asprintf(&what, "Status of %s %s", kind, name) < 0)
                return -ENOMEM;
        return status_send(s, STATUS_PATCH, path, TAKE_PTR(body), what);
}

static int64_t generation(const cJSON *obj) {
        const cJSON *g = json_get(json_get(obj, "metadata"), "generation");
        return cJSON_IsNumber(g) ? (int64_t) g->valuedouble : 0;
}

/* ---- NodePool -------------------------------------------------------------------------------- */

static char *quantity_milli(int64_t milli) {
        char *s = NULL;
        if (milli % 1000 == 0)
                return asprintf(&s, "%lld", (long long) (milli / 1000)) < 0 ? NULL : s;
        return asprintf(&s, "%lldm", (long long) milli) < 0 ? NULL : s;
}

static char *quantity_bytes(int64_t bytes) {
        static const char *const units[] = { "", "Ki", "Mi", "Gi", "Ti" };
        size_t u = 0;
        char *s = NULL;
        while (u + 1 < ELEMENTSOF(units) && bytes != 0 && bytes % 1024 == 0) {
                bytes /= 1024;
                u++;
        }
        return asprintf(&s, "%lld%s", (long long) bytes, units[u]) < 0 ? NULL : s;
}

static int add_quantity(cJSON *o, const char *key, char *value) {
        _cleanup_free_ char *v = value;
        return v && cJSON_AddStringToObject(o, key, v) ? 0 : -ENOMEM;
}

/* status.resources: the capacity of the pool's nodes (as their agents report it) and their
 * number, as Karpenter's NodePool status carries them; status.nodes the number again, as an
 * integer (the scale subresource's status replicas, for static NodePools). */
static int pool_resources(StatusWriter *s, const char *pool, cJSON *status) {
        int64_t cpu = 0, memory = 0, pods = 0, storage = 0, nodes = 0;
        NodeEntry *e;
        REGISTRY_FOREACH(e, s->registry) {
                const Nodesmith__V1__NodeState *st = e->state;
                if (!st || !st->identity || !streq_ptr(st->identity->nodepool, pool) || !st->capacity)
                        continue;
                nodes++;
                cpu += st->capacity->cpu_millis;
                memory += st->capacity->memory_bytes;
                pods += st->capacity->pods;
                storage += st->capacity->ephemeral_storage_bytes;
        }
        cJSON *res = cJSON_AddObjectToObject(status, "resources");
        char n[32];
        if (!res)
                return -ENOMEM;
        snprintf(n, sizeof n, "%lld", (long long) nodes);
        if (!cJSON_AddStringToObject(res, "nodes", n) || !cJSON_AddNumberToObject(status, "nodes", (double) nodes))
                return -ENOMEM;
        int r = add_quantity(res, "cpu", quantity_milli(cpu));
        if (r >= 0)
                r = add_quantity(res, "memory", quantity_bytes(memory));
        if (r >= 0)
                r = add_quantity(res, "pods", quantity_milli(pods * 1000));
        if (r >= 0)
                r = add_quantity(res, "ephemeral-storage", quantity_bytes(storage));
        return r;
}

static int nodepool_status(const cJSON *np, void *userdata) {
        StatusWriter *s = userdata;
        const cJSON *old = json_get(np, "status");
        int64_t gen = generation(np);
        _cleanup_(cJSON_Deletep) cJSON *status = cJSON_CreateObject();
        cJSON *conds = status ? cJSON_AddArrayToObject(status, "conditions") : NULL;
        SolverArena *a = NULL;
        SolverNodePool pool;
        NodePoolExtra extra = {};
        _cleanup_free_ char *err = NULL;
        int r;

        if (!conds || solver_arena_new(&a) < 0)
                return -ENOMEM;
        r = nodepool_parse_nodepool(a, np, &pool, &extra, &err);
        const char *class_name = json_str(json_get(json_get(json_get(json_get(np, "spec"), "template"), "spec"), "nodeClassRef"), "name");
        if (r < 0)
                r = status_condition_add(conds, old, gen, "ValidationSucceeded", "False", "ValidationFailed",
                                  err ? err : strerror(-r));
        else
                r = status_condition_add(conds, old, gen, "ValidationSucceeded", "True", "ValidationSucceeded", "");
        cJSON_Delete(extra.budgets);
        solver_arena_free(a);
        if (r < 0)
                return r;

        const KubeWatch *classes = provisioner_watch(s->p, PROVISIONER_WATCH_NODECLASSES);
        const cJSON *nc = class_name ? kube_watch_get(classes, NULL, class_name) : NULL;
        const cJSON *ready = nc ? status_condition_find(json_get(nc, "status"), "Ready") : NULL;
        char msg[400];
        if (!class_name)
                r = status_condition_add(conds, old, gen, "NodeClassReady", "False", "NodeClassNotSet",
                                  "spec.template.spec.nodeClassRef names no EC2NodeClass");
        else if (!nc) {
                snprintf(msg, sizeof msg, "EC2NodeClass %s not found", class_name);
                r = status_condition_add(conds, old, gen, "NodeClassReady", "False", "NodeClassNotFound", msg);
        } else if (!ready)
                r = status_condition_add(conds, old, gen, "NodeClassReady", "Unknown", "AwaitingReconciliation",
                                  "the EC2NodeClass has no Ready condition yet");
        else {
                snprintf(msg, sizeof msg, "EC2NodeClass %s: %s", class_name, strempty(json_str(ready, "message")));
                bool ok = streq_ptr(json_str(ready, "status"), "True");
                r = status_condition_add(conds, old, gen, "NodeClassReady", strempty(json_str(ready, "status")),
                                  ok ? "NodeClassReady" : "NodeClassNotReady", ok ? "" : msg);
        }
        if (r >= 0)
                r = status_condition_ready(conds, old, gen);
        if (r >= 0)
                r = pool_resources(s, kube_object_meta(np, "name"), status);
        if (r < 0)
                return r;
        /* what status fields nodesmith does not write are kept as they are */
        const cJSON *keep = json_get(old, "nodeClassObservedGeneration");
        if (keep)
                cJSON_AddItemToObject(status, "nodeClassObservedGeneration", cJSON_Duplicate(keep, true));
        (void) status_write(s, "nodepools", "NodePool", np, TAKE_PTR(status));
        return 0;
}

/* ---- EC2NodeClass ---------------------------------------------------------------------------- */

/* Subnets are looked up before the first solve for a NodePool of the class; security groups and
 * AMIs at its first launch (and again after a day or a change of the class). */
static int resolved_condition(cJSON *conds, const cJSON *old, int64_t gen, const char *type,
                              const ProvisionerClass *res, size_t found, const char *what, bool none_is_final) {
        char msg[200];
        if (res && res->resolved && found > 0)
                return status_condition_add(conds, old, gen, type, "True", type, "");
        if (res && res->resolved && none_is_final) {
                snprintf(msg, sizeof msg, "no %s matches the selector terms", what);
                return status_condition_add(conds, old, gen, type, "False", "NotFound", msg);
        }
        snprintf(msg, sizeof msg, "the %ss are looked up in EC2 for the first launch of a NodePool of this class", what);
        return status_condition_add(conds, old, gen, type, "Unknown", "NotResolved", msg);
}

static int nodeclass_resolved(const ProvisionerClass *res, cJSON *status) {
        cJSON *subnets = cJSON_AddArrayToObject(status, "subnets");
        cJSON *sgs = cJSON_AddArrayToObject(status, "securityGroups");
        cJSON *amis = cJSON_AddArrayToObject(status, "amis");
        if (!subnets || !sgs || !amis)
                return -ENOMEM;
        for (size_t i = 0; res && i < res->n_subnets; i++) {
                cJSON *o = cJSON_CreateObject();
                if (!o || !cJSON_AddStringToObject(o, "id", res->subnet_ids[i]) ||
                    !cJSON_AddStringToObject(o, "zone", strempty(res->subnet_zones[i]))) {
                        cJSON_Delete(o);
                        return -ENOMEM;
                }
                cJSON_AddItemToArray(subnets, o);
        }
        for (size_t i = 0; res && res->security_groups && res->security_groups[i]; i++) {
                cJSON *o = cJSON_CreateObject();
                if (!o || !cJSON_AddStringToObject(o, "id", res->security_groups[i])) {
                        cJSON_Delete(o);
                        return -ENOMEM;
                }
                cJSON_AddItemToArray(sgs, o);
        }
        static const char *const arch[] = { "amd64", "arm64" };
        for (size_t k = 0; res && k < 2; k++) {
                if (!res->ami[k])
                        continue;
                const char *vals[] = { arch[k] };
                cJSON *o = cJSON_CreateObject(), *req = cJSON_CreateObject();
                cJSON *reqs = o ? cJSON_AddArrayToObject(o, "requirements") : NULL;
                if (!reqs || !req || !cJSON_AddStringToObject(o, "id", res->ami[k]) ||
                    !cJSON_AddStringToObject(req, "key", "kubernetes.io/arch") ||
                    !cJSON_AddStringToObject(req, "operator", "In") ||
                    !cJSON_AddItemToObject(req, "values", cJSON_CreateStringArray(vals, 1))) {
                        cJSON_Delete(o);
                        cJSON_Delete(req);
                        return -ENOMEM;
                }
                cJSON_AddItemToArray(reqs, req);
                cJSON_AddItemToArray(amis, o);
        }
        return 0;
}

/* status.capacityReservations: what the terms select now, but past its end (Karpenter's fields,
 * and nodesmith's availableInstanceCount). */
static int reservations_status(const ProvisionerClass *res, cJSON *status) {
        cJSON *list = cJSON_AddArrayToObject(status, "capacityReservations");
        if (!list)
                return -ENOMEM;
        int64_t now = (int64_t) time(NULL);
        for (size_t i = 0; res && i < res->n_reservations; i++) {
                const NodeReservation *nr = &res->reservations[i];
                if (nr->end_date > 0 && nr->end_date <= now)
                        continue;
                cJSON *o = cJSON_CreateObject();
                char end[32] = "";
                if (nr->end_date > 0) {
                        time_t t = (time_t) nr->end_date;
                        struct tm tm;
                        strftime(end, sizeof end, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
                }
                if (!o || !cJSON_AddStringToObject(o, "availabilityZone", nr->zone) ||
                    !cJSON_AddStringToObject(o, "id", nr->id) ||
                    !cJSON_AddStringToObject(o, "instanceMatchCriteria", strempty(nr->match_criteria)) ||
                    !cJSON_AddStringToObject(o, "instanceType", nr->instance_type) ||
                    !cJSON_AddStringToObject(o, "ownerID", strempty(nr->owner_id)) ||
                    !cJSON_AddStringToObject(o, "reservationType", strempty(nr->reservation_type)) ||
                    !cJSON_AddStringToObject(o, "state", strempty(nr->state)) ||
                    !cJSON_AddNumberToObject(o, "availableInstanceCount", (double) nr->available) ||
                    (end[0] && !cJSON_AddStringToObject(o, "endTime", end))) {
                        cJSON_Delete(o);
                        return -ENOMEM;
                }
                cJSON_AddItemToArray(list, o);
        }
        return 0;
}

/* The selected reservations nodesmith does not launch into, and why (capacity blocks). */
static const char *reservations_refused(const ProvisionerClass *res, char *buf, size_t size) {
        size_t o = 0;
        buf[0] = 0;
        for (size_t i = 0; i < res->n_reservations && o + 1 < size; i++) {
                const char *why = reservation_refusal(&res->reservations[i], (int64_t) time(NULL));
                if (why && streq_ptr(res->reservations[i].state, "active"))
                        o += (size_t) snprintf(buf + o, size - o, "%s%s not launched into: %s", o ? "; " : "",
                                               res->reservations[i].id, why);
        }
        return buf;
}

static int nodeclass_status(const cJSON *nc, void *userdata) {
        StatusWriter *s = userdata;
        const char *name = kube_object_meta(nc, "name");
        const cJSON *old = json_get(nc, "status");
        int64_t gen = generation(nc);
        _cleanup_(cJSON_Deletep) cJSON *status = cJSON_CreateObject();
        cJSON *conds = status ? cJSON_AddArrayToObject(status, "conditions") : NULL;
        SolverArena *a = NULL;
        NodeClass parsed = {};
        _cleanup_free_ char *err = NULL;
        int r;

        if (!conds || !name || solver_arena_new(&a) < 0)
                return -ENOMEM;
        r = nodepool_parse_nodeclass(a, nc, &parsed, &err);
        cJSON_Delete(parsed.spec);
        solver_arena_free(a);
        if (r < 0)
                r = status_condition_add(conds, old, gen, "ValidationSucceeded", "False", "ValidationFailed",
                                  err ? err : strerror(-r));
        else
                r = status_condition_add(conds, old, gen, "ValidationSucceeded", "True", "ValidationSucceeded", "");

        ProvisionerClass found;
        const ProvisionerClass *res = provisioner_class(s->p, name, &found) >= 0 ? &found : NULL;
        size_t n_sgs = 0;
        while (res && res->security_groups && res->security_groups[n_sgs])
                n_sgs++;
        if (r >= 0)
                r = resolved_condition(conds, old, gen, "SubnetsReady", res, res ? res->n_subnets : 0, "subnet", true);
        if (r >= 0)
                r = resolved_condition(conds, old, gen, "SecurityGroupsReady", res, n_sgs, "security group", false);
        if (r >= 0)
                r = resolved_condition(conds, old, gen, "AMIsReady", res, res ? !!res->ami[0] + !!res->ami[1] : 0, "AMI", false);
        /* the profile launches use: spec.instanceProfile, or the one nodesmith keeps for
         * spec.role (provision/provisioner.c) */
        const char *profile = res ? res->profile : NULL;
        if (r >= 0)
                r = !profile ? status_condition_add(conds, old, gen, "InstanceProfileReady", "Unknown", "NotResolved",
                                                    "made or looked up for the first launch of a NodePool of this class") :
                    isempty(profile) ? status_condition_add(conds, old, gen, "InstanceProfileReady", "False", "NotConfigured",
                                                            "no instance profile: set spec.role or spec.instanceProfile") :
                    status_condition_add(conds, old, gen, "InstanceProfileReady", "True", "InstanceProfileReady", "");
        /* capacityReservationSelectorTerms: looked up before each solve, at most once a minute */
        char refused[512];
        bool selects = cJSON_GetArraySize(json_get(json_get(nc, "spec"), "capacityReservationSelectorTerms")) > 0;
        if (r >= 0 && selects)
                r = !res || !res->reservations_known
                            ? status_condition_add(conds, old, gen, "CapacityReservationsReady", "Unknown", "NotResolved",
                                                   "looked up in EC2 before a NodePool of this class is planned for")
                    : res->reservations_error[0]
                            ? status_condition_add(conds, old, gen, "CapacityReservationsReady", "False",
                                                   "CapacityReservationsNotFound", res->reservations_error)
                            : status_condition_add(conds, old, gen, "CapacityReservationsReady", "True",
                                                   "CapacityReservationsReady", reservations_refused(res, refused,
                                                                                                     sizeof refused));
        if (r >= 0)
                r = status_condition_ready(conds, old, gen);
        if (r >= 0 && selects && res && res->reservations_known)
                r = reservations_status(res, status);
        if (r >= 0 && res && res->resolved)
                r = nodeclass_resolved(res, status);
        if (r >= 0 && !isempty(profile) && !cJSON_AddStringToObject(status, "instanceProfile", profile))
                r = -ENOMEM;
        if (r < 0)
                return r;
        (void) status_write(s, "ec2nodeclasses", "EC2NodeClass", nc, TAKE_PTR(status));
        return 0;
}

/* ---- the loop -------------------------------------------------------------------------------- */

static int on_tick(sd_event_source *src, uint64_t usec, void *userdata) {
        StatusWriter *s = userdata;
        const KubeWatch *pools = provisioner_watch(s->p, PROVISIONER_WATCH_NODEPOOLS);
        const KubeWatch *classes = provisioner_watch(s->p, PROVISIONER_WATCH_NODECLASSES);
        (void) sd_event_source_set_time_relative(src, STATUS_INTERVAL_USEC);
        if (!provisioner_leading(s->p) || !kube_watch_synced(pools) || !kube_watch_synced(classes))
                return 0;
        /* classes first: a pool's NodeClassReady follows its class's Ready */
        (void) kube_watch_foreach(classes, nodeclass_status, s);
        (void) kube_watch_foreach(pools, nodepool_status, s);
        nodeclaims_reconcile(s);
        return 0;
}

int status_writer_new(sd_event *e, Provisioner *p, Registry *registry, StatusWriter **ret) {
        StatusWriter *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->p = p;
        s->registry = registry;
        int r = sd_event_add_time_relative(e, &s->timer, CLOCK_MONOTONIC, STATUS_RETRY_USEC, 0, on_tick, s);
        if (r >= 0)
                r = nodeclaims_start(s);
        if (r < 0) {
                status_writer_free(s);
                return r;
        }
        (void) sd_event_source_set_enabled(s->timer, SD_EVENT_ON);
        *ret = s;
        return 0;
}

StatusWriter *status_writer_free(StatusWriter *s) {
        if (!s)
                return NULL;
        while (s->pending) {
                (void) kube_client_cancel(provisioner_kube(s->p), s->pending);
                pending_free(s->pending);
        }
        nodeclaims_done(s);
        sd_event_source_disable_unref(s->timer);
        free(s);
        return NULL;
}

void status_writer_poke(StatusWriter *s) {
        if (s)
                (void) sd_event_source_set_time_relative(s->timer, 0);
}

void status_writer_metrics(const StatusWriter *s, StrBuf *b) {
        if (!s)
                return;
        strbuf_printf(b, "# HELP nodesmith_status_writes_total NodePool and EC2NodeClass status writes and NodeClaim changes, by result.\n"
                         "# TYPE nodesmith_status_writes_total counter\n"
                         "nodesmith_status_writes_total{result=\"written\"} %llu\n"
                         "nodesmith_status_writes_total{result=\"conflict\"} %llu\n"
                         "nodesmith_status_writes_total{result=\"error\"} %llu\n",
                      (unsigned long long) s->written, (unsigned long long) s->conflicts,
                      (unsigned long long) s->errors);
}
