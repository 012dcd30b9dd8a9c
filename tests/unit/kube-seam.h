/* SPDX-License-Identifier: Apache-2.0 */
/* The Kubernetes client replaced at its seam, for unit tests that link with -Wl,--wrap= on the
 * kube_watch_* and kube_* call entry points (each test's .wrap file lists them). A small world of objects stands for the API server:
 *
 * - kube_watch_new() lists the world's objects of its collection that match its field selector
 *   (metadata.name, metadata.namespace, spec.nodeName; "k=" matches a missing field) from the
 *   loop, as ADDED events and SYNCED; world_put()/world_delete() then deliver ADDED, MODIFIED
 *   and DELETED to every synced watch that sees the object, as a watch stream would.
 * - Writes are recorded (world.writes, one line each: "PATCH path body", "EVICT ns/name",
 *   "EVENT kind/name reason", "CREATE path", "DELETE path") and answered from the loop. A
 *   strategic or merge patch is applied as a JSON merge patch (a metadata.resourceVersion in it
 *   is a precondition: 409 when it differs), a JSON patch's test and remove operations as
 *   RFC 6902 says (a failed test: 422). An eviction answers 429 (DisruptionBudget) while the
 *   pod's refusal count lasts (world_refuse_evictions()), then 201: the pod is deleted.
 *
 * Included by one test file per binary (the functions are the binary's wrappers). */
#pragma once

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-event.h>

#include "kube.h"
#include "macro.h"

#define WORLD_MAX_OBJECTS 256
#define WORLD_MAX_WRITES 512
#define WORLD_MAX_WATCHES 64

typedef struct WorldObject {
        char collection[96]; /* "/api/v1/pods" */
        cJSON *obj;
        unsigned refusals;   /* evictions still to answer 429 */
} WorldObject;

struct KubeWatch {
        unsigned id;
        char path[96];
        char selector[256];
        kube_watch_event_t cb;
        void *userdata;
        bool synced;
        sd_event_source *list;
};

typedef enum CallKind { CALL_DONE, CALL_PATCH, CALL_EVICT } CallKind;

/* A call answered from the loop: the answer is worked out then, the callback runs, and only
 * then do the watches see the change (a watch event usually follows the response). */
struct KubeCall {
        CallKind kind;
        kube_done_t cb;
        kube_evict_done_t evict_cb;
        void *userdata;
        char *path, *body;           /* CALL_PATCH */
        KubePatchType patch_type;
        char ns[128], name[256];     /* CALL_EVICT */
        KubeResponse resp;
        sd_event_source *source;
        struct KubeCall *next;
};

static struct {
        sd_event *event;
        WorldObject objs[WORLD_MAX_OBJECTS];
        size_t n;
        KubeWatch *watches[WORLD_MAX_WATCHES];
        size_t n_watches;
        unsigned next_watch_id;
        unsigned rv;
        char *writes[WORLD_MAX_WRITES];
        size_t n_writes;
        KubeCall *calls;
        unsigned evictions_refused, evictions_accepted;
} world;

static void world_record(const char *fmt, ...) _printf_(1, 2);
static void world_record(const char *fmt, ...) {
        va_list ap;
        char *s = NULL;
        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                abort();
        va_end(ap);
        if (world.n_writes >= WORLD_MAX_WRITES)
                abort();
        world.writes[world.n_writes++] = s;
}

/* How many recorded writes start with prefix. */
static _unused_ size_t world_count(const char *prefix) {
        size_t n = 0;
        for (size_t i = 0; i < world.n_writes; i++)
                n += strncmp(world.writes[i], prefix, strlen(prefix)) == 0;
        return n;
}

/* The first recorded write that starts with prefix, or NULL. */
static _unused_ const char *world_find(const char *prefix) {
        for (size_t i = 0; i < world.n_writes; i++)
                if (strncmp(world.writes[i], prefix, strlen(prefix)) == 0)
                        return world.writes[i];
        return NULL;
}

static const char *world_meta(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "metadata"), k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A dotted field of o as a string ("" when absent). */
static const char *world_field(const cJSON *o, const char *dotted) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", dotted);
        const cJSON *v = o;
        for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
                v = cJSON_GetObjectItemCaseSensitive(v, k);
        return cJSON_IsString(v) ? v->valuestring : "";
}

static bool world_selects(const KubeWatch *w, const WorldObject *o) {
        if (!streq(w->path, o->collection))
                return false;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", w->selector);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(t, '=');
                if (!eq)
                        return false;
                bool negated = eq > t && eq[-1] == '!'; /* "spec.nodeName!=": any other value */
                *eq = 0;
                if (negated)
                        eq[-1] = 0;
                if (streq(world_field(o->obj, t), eq + 1) == negated)
                        return false;
        }
        return true;
}

static bool world_same_key(const cJSON *a, const char *ns, const char *name) {
        return streq_ptr(world_meta(a, "name"), name) && streq(strempty(world_meta(a, "namespace")), strempty(ns));
}

static WorldObject *world_lookup(const char *collection, const char *ns, const char *name) {
        for (size_t i = 0; i < world.n; i++)
                if (streq(world.objs[i].collection, collection) && world_same_key(world.objs[i].obj, ns, name))
                        return &world.objs[i];
        return NULL;
}

static KubeWatch *world_watch_live(unsigned id) {
        for (size_t i = 0; i < world.n_watches; i++)
                if (world.watches[i]->id == id)
                        return world.watches[i];
        return NULL;
}

/* Delivers the change of one object (old → now, either may be NULL) to every synced watch that
 * sees it before or after; a callback may free or create watches. */
static void world_deliver(const char *collection, const cJSON *old, const cJSON *now) {
        unsigned ids[WORLD_MAX_WATCHES];
        size_t n = world.n_watches;
        for (size_t i = 0; i < n; i++)
                ids[i] = world.watches[i]->id;
        for (size_t i = 0; i < n; i++) {
                KubeWatch *w = world_watch_live(ids[i]);
                if (!w || !w->synced)
                        continue;
                WorldObject a = { .obj = (cJSON *) old }, b = { .obj = (cJSON *) now };
                snprintf(a.collection, sizeof a.collection, "%s", collection);
                snprintf(b.collection, sizeof b.collection, "%s", collection);
                bool saw = old && world_selects(w, &a), sees = now && world_selects(w, &b);
                KubeWatchEvent ev = {};
                if (sees)
                        ev = (KubeWatchEvent) { .type = saw ? KUBE_WATCH_MODIFIED : KUBE_WATCH_ADDED, .object = now,
                                                .old = saw ? old : NULL };
                else if (saw)
                        ev = (KubeWatchEvent) { .type = KUBE_WATCH_DELETED, .object = old };
                else
                        continue;
                w->cb(w, &ev, w->userdata);
        }
}

/* Adds or replaces an object (takes ownership of obj); its resourceVersion is the world's next. */
static void world_put_json(const char *collection_arg, cJSON *obj) {
        char rv[16], collection[96];
        snprintf(collection, sizeof collection, "%s", collection_arg); /* it may point into the world */
        snprintf(rv, sizeof rv, "%u", ++world.rv);
        cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
        if (!md)
                md = cJSON_AddObjectToObject(obj, "metadata");
        cJSON_DeleteItemFromObjectCaseSensitive(md, "resourceVersion");
        cJSON_AddStringToObject(md, "resourceVersion", rv);
        WorldObject *o = world_lookup(collection, world_meta(obj, "namespace"), world_meta(obj, "name"));
        cJSON *old = NULL;
        if (o) {
                old = o->obj;
                o->obj = obj;
        } else {
                if (world.n >= WORLD_MAX_OBJECTS)
                        abort();
                o = &world.objs[world.n++];
                *o = (WorldObject) { .obj = obj };
                snprintf(o->collection, sizeof o->collection, "%s", collection);
        }
        world_deliver(collection, old, obj);
        cJSON_Delete(old);
}

static _unused_ void world_put(const char *collection, const char *json) {
        cJSON *obj = cJSON_Parse(json);
        if (!obj)
                abort();
        world_put_json(collection, obj);
}

static _unused_ const cJSON *world_get(const char *collection, const char *ns, const char *name) {
        const WorldObject *o = world_lookup(collection, ns, name);
        return o ? o->obj : NULL;
}

static _unused_ void world_delete(const char *collection, const char *ns, const char *name) {
        WorldObject *o = world_lookup(collection, ns, name);
        if (!o)
                return;
        char coll[96];
        snprintf(coll, sizeof coll, "%s", o->collection);
        cJSON *old = o->obj;
        *o = world.objs[--world.n];
        world_deliver(coll, old, NULL);
        cJSON_Delete(old);
}

/* The next n evictions of the pod are refused by its PodDisruptionBudget (429). */
static _unused_ void world_refuse_evictions(const char *ns, const char *name, unsigned n) {
        WorldObject *o = world_lookup("/api/v1/pods", ns, name);
        if (!o)
                abort();
        o->refusals = n;
}

static _unused_ void world_init(sd_event *e) {
        world = (typeof(world)) { .event = e, .rv = 100 };
}

static void world_call_free(KubeCall *k) {
        for (KubeCall **pp = &world.calls; *pp; pp = &(*pp)->next)
                if (*pp == k) {
                        *pp = k->next;
                        break;
                }
        sd_event_source_disable_unref(k->source);
        cJSON_Delete(k->resp.object);
        free(k->path);
        free(k->body);
        free(k);
}

/* Everything the world holds goes; the watches must have been freed by their owners. */
static _unused_ void world_done(void) {
        while (world.calls)
                world_call_free(world.calls);
        for (size_t i = 0; i < world.n; i++)
                cJSON_Delete(world.objs[i].obj);
        for (size_t i = 0; i < world.n_writes; i++)
                free(world.writes[i]);
        world.n = world.n_writes = 0;
}

/* ---- the watches ---------------------------------------------------------------------------- */

static int world_on_list(sd_event_source *s, void *userdata) {
        unsigned id = ((KubeWatch *) userdata)->id;
        KubeWatch *w = world_watch_live(id);
        if (!w)
                return 0;
        w->list = sd_event_source_disable_unref(w->list);
        /* what matched when the list was taken, delivered one by one as a list is */
        cJSON *seen = cJSON_CreateArray();
        for (size_t i = 0; i < world.n; i++)
                if (world_selects(w, &world.objs[i]))
                        cJSON_AddItemToArray(seen, cJSON_Duplicate(world.objs[i].obj, true));
        w->synced = true;
        const cJSON *o;
        cJSON_ArrayForEach(o, seen) {
                KubeWatchEvent ev = { .type = KUBE_WATCH_ADDED, .object = o };
                if (!world_watch_live(id))
                        break;
                w->cb(w, &ev, w->userdata);
        }
        cJSON_Delete(seen);
        if (world_watch_live(id)) {
                KubeWatchEvent ev = { .type = KUBE_WATCH_SYNCED };
                w->cb(w, &ev, w->userdata);
        }
        return 0;
}

int __wrap_kube_watch_new(KubeClient *c, const char *path, const KubeListOptions *opts, kube_watch_event_t cb,
                          void *userdata, KubeWatch **ret);
int __wrap_kube_watch_new(KubeClient *c, const char *path, const KubeListOptions *opts, kube_watch_event_t cb,
                          void *userdata, KubeWatch **ret) {
        if (world.n_watches >= WORLD_MAX_WATCHES)
                return -ENOSPC;
        KubeWatch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (KubeWatch) { .id = ++world.next_watch_id, .cb = cb, .userdata = userdata };
        snprintf(w->path, sizeof w->path, "%s", path);
        snprintf(w->selector, sizeof w->selector, "%s", opts && opts->field_selector ? opts->field_selector : "");
        if (sd_event_add_defer(world.event, &w->list, world_on_list, w) < 0) {
                free(w);
                return -ENOMEM;
        }
        world.watches[world.n_watches++] = w;
        *ret = w;
        return 0;
}

KubeWatch *__wrap_kube_watch_free(KubeWatch *w);
KubeWatch *__wrap_kube_watch_free(KubeWatch *w) {
        if (!w)
                return NULL;
        for (size_t i = 0; i < world.n_watches; i++)
                if (world.watches[i] == w) {
                        world.watches[i] = world.watches[--world.n_watches];
                        break;
                }
        sd_event_source_disable_unref(w->list);
        free(w);
        return NULL;
}

bool __wrap_kube_watch_synced(const KubeWatch *w);
bool __wrap_kube_watch_synced(const KubeWatch *w) {
        return w && w->synced;
}

const cJSON *__wrap_kube_watch_get(const KubeWatch *w, const char *ns, const char *name);
const cJSON *__wrap_kube_watch_get(const KubeWatch *w, const char *ns, const char *name) {
        WorldObject *o = w && w->synced ? world_lookup(w->path, ns, name) : NULL;
        return o && world_selects(w, o) ? o->obj : NULL;
}

int __wrap_kube_watch_foreach(const KubeWatch *w, int (*fn)(const cJSON *obj, void *userdata), void *userdata);
int __wrap_kube_watch_foreach(const KubeWatch *w, int (*fn)(const cJSON *obj, void *userdata), void *userdata) {
        for (size_t i = 0; w && w->synced && i < world.n; i++)
                if (world_selects(w, &world.objs[i])) {
                        int r = fn(world.objs[i].obj, userdata);
                        if (r < 0)
                                return r;
                }
        return 0;
}

size_t __wrap_kube_watch_size(const KubeWatch *w);
size_t __wrap_kube_watch_size(const KubeWatch *w) {
        size_t n = 0;
        for (size_t i = 0; w && w->synced && i < world.n; i++)
                n += world_selects(w, &world.objs[i]);
        return n;
}

void __wrap_kube_watch_stats(const KubeWatch *w, KubeWatchStats *ret);
void __wrap_kube_watch_stats(const KubeWatch *w, KubeWatchStats *ret) {
        *ret = (KubeWatchStats) { .lists = w && w->synced };
}

/* ---- the writes ----------------------------------------------------------------------------- */

/* The object a path names: "/api/v1/nodes/NAME", "/api/v1/namespaces/NS/pods/NAME", … */
static WorldObject *world_at(const char *path) {
        char coll[96], ns[128] = "", name[256];
        const char *q = strstr(path, "/namespaces/");
        if (q) {
                /* /api/v1/namespaces/NS/RESOURCE/NAME */
                const char *nsb = q + strlen("/namespaces/"), *nse = strchr(nsb, '/');
                const char *re = nse ? strchr(nse + 1, '/') : NULL;
                if (!re)
                        return NULL;
                snprintf(ns, sizeof ns, "%.*s", (int) (nse - nsb), nsb);
                snprintf(coll, sizeof coll, "%.*s%.*s", (int) (q - path), path, (int) (re - nse), nse);
                snprintf(name, sizeof name, "%s", re + 1);
        } else {
                const char *slash = strrchr(path, '/');
                if (!slash)
                        return NULL;
                snprintf(coll, sizeof coll, "%.*s", (int) (slash - path), path);
                snprintf(name, sizeof name, "%s", slash + 1);
        }
        return world_lookup(coll, ns, name);
}

/* RFC 7386 onto target (objects merge, null removes, anything else replaces). */
static void world_merge(cJSON *target, const cJSON *patch) {
        const cJSON *f;
        cJSON_ArrayForEach(f, patch) {
                cJSON *t = cJSON_GetObjectItemCaseSensitive(target, f->string);
                if (cJSON_IsNull(f))
                        cJSON_DeleteItemFromObjectCaseSensitive(target, f->string);
                else if (cJSON_IsObject(f) && cJSON_IsObject(t))
                        world_merge(t, f);
                else {
                        cJSON_DeleteItemFromObjectCaseSensitive(target, f->string);
                        cJSON_AddItemToObject(target, f->string, cJSON_Duplicate(f, true));
                }
        }
}

/* An RFC 6901 pointer's parent in doc and its last token (object keys and array indexes only). */
static cJSON *world_pointer(cJSON *doc, const char *ptr, char *last, size_t size) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", ptr);
        char *end = strrchr(buf, '/');
        if (!end)
                return NULL;
        snprintf(last, size, "%s", end + 1);
        *end = 0;
        cJSON *v = doc;
        for (char *save = NULL, *k = strtok_r(buf, "/", &save); k && v; k = strtok_r(NULL, "/", &save))
                v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(k)) : cJSON_GetObjectItemCaseSensitive(v, k);
        return v;
}

/* RFC 6902 "test" and "remove"; anything else, or a failed test: -EINVAL. */
static int world_json_patch(cJSON *doc, const cJSON *ops) {
        const cJSON *op;
        cJSON_ArrayForEach(op, ops) {
                const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "op"));
                const char *ptr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(op, "path"));
                char last[128];
                cJSON *parent = ptr ? world_pointer(doc, ptr, last, sizeof last) : NULL;
                cJSON *at = !parent ? NULL : cJSON_IsArray(parent) ? cJSON_GetArrayItem(parent, atoi(last))
                                                                 : cJSON_GetObjectItemCaseSensitive(parent, last);
                if (!at)
                        return -EINVAL;
                if (streq_ptr(kind, "test")) {
                        if (!cJSON_Compare(at, cJSON_GetObjectItemCaseSensitive(op, "value"), true))
                                return -EINVAL;
                } else if (streq_ptr(kind, "remove")) {
                        if (cJSON_IsArray(parent))
                                cJSON_DeleteItemFromArray(parent, atoi(last));
                        else
                                cJSON_DeleteItemFromObjectCaseSensitive(parent, last);
                } else
                        return -EINVAL;
        }
        return 0;
}

static void world_fail(KubeResponse *resp, int error, long http_status, const char *reason, const char *message) {
        *resp = (KubeResponse) { .error = error, .http_status = http_status, .attempts = 1, .has_status = true };
        resp->status.code = (int) http_status;
        snprintf(resp->status.reason, sizeof resp->status.reason, "%s", reason);
        snprintf(resp->status.message, sizeof resp->status.message, "%s", message);
}

/* The patch applied to a copy of the object, or an error (resp says why). */
static int world_patch_apply(KubeCall *k, const cJSON *patch, cJSON *copy) {
        if (k->patch_type == KUBE_PATCH_JSON) {
                if (world_json_patch(copy, patch) < 0) {
                        world_fail(&k->resp, -EINVAL, 422, "Invalid", "the patch's test failed");
                        return -EINVAL;
                }
                return 0;
        }
        const char *want = world_meta(patch, "resourceVersion");
        if (want && !streq_ptr(want, world_meta(copy, "resourceVersion"))) {
                world_fail(&k->resp, -EBUSY, 409, "Conflict", "the object has been modified");
                return -EBUSY;
        }
        world_merge(copy, patch);
        return 0;
}

/* The patched object (NULL when refused: resp says why). */
static cJSON *world_patched(KubeCall *k) {
        WorldObject *o = world_at(k->path);
        if (!o) {
                world_fail(&k->resp, -ENOENT, 404, "NotFound", "not found");
                return NULL;
        }
        cJSON *patch = cJSON_Parse(k->body), *copy = cJSON_Duplicate(o->obj, true);
        int r = patch ? world_patch_apply(k, patch, copy) : -EINVAL;
        if (!patch)
                world_fail(&k->resp, -EINVAL, 400, "BadRequest", "the patch is no JSON");
        cJSON_Delete(patch);
        if (r < 0) {
                cJSON_Delete(copy);
                return NULL;
        }
        return copy;
}

static int world_on_answer(sd_event_source *s, void *userdata) {
        KubeCall *k = userdata;
        char coll[96] = "";
        if (k->kind == CALL_PATCH) {
                cJSON *patched = world_patched(k);
                if (patched)
                        snprintf(coll, sizeof coll, "%s", world_at(k->path)->collection);
                if (k->cb)
                        k->cb(&k->resp, k->userdata);
                if (patched)
                        world_put_json(coll, patched);
        } else if (k->kind == CALL_EVICT) {
                WorldObject *o = world_lookup("/api/v1/pods", k->ns, k->name);
                KubeEvictResult result = KUBE_EVICT_ACCEPTED;
                if (!o) {
                        result = KUBE_EVICT_NOT_FOUND;
                        world_fail(&k->resp, -ENOENT, 404, "NotFound", "pods not found");
                } else if (o->refusals > 0) {
                        o->refusals--;
                        world.evictions_refused++;
                        result = KUBE_EVICT_BLOCKED;
                        world_fail(&k->resp, -EBUSY, 429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.");
                        snprintf(k->resp.status.cause, sizeof k->resp.status.cause, "DisruptionBudget");
                } else
                        world.evictions_accepted++;
                k->evict_cb(result, &k->resp, k->userdata);
                /* accepted: the pod goes (its kubelet ends it at once here) */
                if (result == KUBE_EVICT_ACCEPTED)
                        world_delete("/api/v1/pods", k->ns, k->name);
        } else if (k->cb)
                k->cb(&k->resp, k->userdata);
        world_call_free(k);
        return 0;
}

/* Answers from the loop, as a real call would. */
static int world_answer(KubeCall *k, KubeCall **ret_call) {
        if (sd_event_add_defer(world.event, &k->source, world_on_answer, k) < 0) {
                free(k);
                return -ENOMEM;
        }
        k->next = world.calls;
        world.calls = k;
        if (ret_call)
                *ret_call = k;
        return 0;
}

static KubeCall *world_call(CallKind kind, kube_done_t cb, void *userdata, long http_status) {
        KubeCall *k = calloc(1, sizeof *k);
        if (!k)
                abort();
        *k = (KubeCall) { .kind = kind, .cb = cb, .userdata = userdata };
        k->resp = (KubeResponse) { .http_status = http_status, .attempts = 1 };
        return k;
}

int __wrap_kube_patch(KubeClient *c, const char *path, KubePatchType type, const char *body, kube_done_t cb,
                      void *userdata, KubeCall **ret_call);
int __wrap_kube_patch(KubeClient *c, const char *path, KubePatchType type, const char *body, kube_done_t cb,
                      void *userdata, KubeCall **ret_call) {
        world_record("PATCH %s %s", path, body);
        KubeCall *k = world_call(CALL_PATCH, cb, userdata, 200);
        k->patch_type = type;
        k->path = strdup(path);
        k->body = strdup(body);
        if (!k->path || !k->body)
                abort();
        return world_answer(k, ret_call);
}

int __wrap_kube_evict(KubeClient *c, const char *ns, const char *name, const KubeDeleteOptions *opts, kube_evict_done_t cb,
                      void *userdata, KubeCall **ret_call);
int __wrap_kube_evict(KubeClient *c, const char *ns, const char *name, const KubeDeleteOptions *opts, kube_evict_done_t cb,
                      void *userdata, KubeCall **ret_call) {
        world_record("EVICT %s/%s", ns, name);
        KubeCall *k = world_call(CALL_EVICT, NULL, userdata, 201);
        k->evict_cb = cb;
        snprintf(k->ns, sizeof k->ns, "%s", ns);
        snprintf(k->name, sizeof k->name, "%s", name);
        return world_answer(k, ret_call);
}

int __wrap_kube_event_create(KubeClient *c, const KubeEventInfo *info, kube_done_t cb, void *userdata,
                             KubeCall **ret_call);
int __wrap_kube_event_create(KubeClient *c, const KubeEventInfo *info, kube_done_t cb, void *userdata,
                             KubeCall **ret_call) {
        world_record("EVENT %s/%s %s %s", info->kind, info->name, info->reason, strempty(info->message));
        return world_answer(world_call(CALL_DONE, cb, userdata, 201), ret_call);
}

int __wrap_kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                       KubeCall **ret_call);
int __wrap_kube_create(KubeClient *c, const char *path, const cJSON *body, kube_done_t cb, void *userdata,
                       KubeCall **ret_call) {
        world_record("CREATE %s", path);
        return world_answer(world_call(CALL_DONE, cb, userdata, 201), ret_call);
}

int __wrap_kube_delete(KubeClient *c, const char *path, const KubeDeleteOptions *opts, kube_done_t cb,
                       void *userdata, KubeCall **ret_call);
int __wrap_kube_delete(KubeClient *c, const char *path, const KubeDeleteOptions *opts, kube_done_t cb,
                       void *userdata, KubeCall **ret_call) {
        world_record("DELETE %s", path);
        return world_answer(world_call(CALL_DONE, cb, userdata, 200), ret_call);
}

/* Reads that no test answers: the test's API knows only its watches. */
int __wrap_kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call);
int __wrap_kube_get(KubeClient *c, const char *path, kube_done_t cb, void *userdata, KubeCall **ret_call) {
        world_record("GET %s", path);
        KubeCall *k = world_call(CALL_DONE, cb, userdata, 404);
        world_fail(&k->resp, -ENOENT, 404, "NotFound", "not found");
        return world_answer(k, ret_call);
}

void __wrap_kube_call_cancel(KubeCall *k);
void __wrap_kube_call_cancel(KubeCall *k) {
        if (k)
                world_call_free(k);
}

size_t __wrap_kube_client_cancel(KubeClient *c, void *userdata);
size_t __wrap_kube_client_cancel(KubeClient *c, void *userdata) {
        size_t n = 0;
        for (KubeCall *k = world.calls, *next; k; k = next) {
                next = k->next;
                if (k->userdata == userdata) {
                        world_call_free(k);
                        n++;
                }
        }
        return n;
}

/* Runs the loop until done() holds or max_ms pass (then false). */
static _unused_ bool world_run_until(bool (*done)(void *userdata), void *userdata, unsigned max_ms) {
        uint64_t start = 0, now = 0;
        (void) sd_event_now(world.event, CLOCK_MONOTONIC, &start);
        for (;;) {
                if (done(userdata))
                        return true;
                if (sd_event_run(world.event, 20 * 1000) < 0)
                        return false;
                (void) sd_event_now(world.event, CLOCK_MONOTONIC, &now);
                if (now - start > (uint64_t) max_ms * 1000)
                        return done(userdata);
        }
}
