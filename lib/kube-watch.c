/* SPDX-License-Identifier: Apache-2.0 */
/* KubeWatch: list + watch with a cache of the objects, like client-go's informer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "kube-internal.h"
#include "log.h"

#define WATCH_MIN_TIMEOUT_SEC 300 /* timeoutSeconds is random in [300, 600), as client-go does */
#define WATCH_SHORT_USEC (1 * USEC_PER_SEC)

typedef struct Entry {
        char *key;
        cJSON *obj;
        struct Entry *next;
        bool seen;
} Entry;

typedef enum Next {
        NEXT_LIST,
        NEXT_WATCH,
} Next;

struct KubeWatch {
        KubeClient *client;
        char *path, *label_selector, *field_selector, *resource_version;
        bool pods; /* the path lists pods: kube_object_trim() keeps less of them */
        KubeListOptions opts;
        kube_watch_event_t cb;
        void *userdata;

        Entry **buckets;
        size_t n_buckets, n;

        char rv[64];
        bool synced;
        KubeCall *list_call;
        HttpRequest *http;
        KubeLines lines;
        bool force_token;
        sd_event_source *defer, *timer;
        Next next;
        unsigned failures;
        uint64_t stream_started;
        unsigned stream_events;
        unsigned dispatching;
        bool dead;
        KubeWatchStats stats;
};

/* ---- the cache ------------------------------------------------------------------------------ */

static Entry **slot(const KubeWatch *w, const char *key) {
        if (w->n_buckets == 0)
                return NULL;
        Entry **p = &w->buckets[(size_t) hash_str(key) % w->n_buckets];
        while (*p && !streq((*p)->key, key))
                p = &(*p)->next;
        return p;
}

static Entry *lookup(const KubeWatch *w, const char *key) {
        Entry **p = slot(w, key);
        return p ? *p : NULL;
}

static int grow(KubeWatch *w) {
        if (w->n < w->n_buckets)
                return 0;
        size_t nb = MAX(w->n_buckets * 2, (size_t) 64);
        Entry **b = calloc(nb, sizeof *b);
        if (!b)
                return -ENOMEM;
        for (size_t i = 0; i < w->n_buckets; i++)
                for (Entry *e = w->buckets[i], *next; e; e = next) {
                        next = e->next;
                        size_t h = (size_t) hash_str(e->key) % nb;
                        e->next = b[h];
                        b[h] = e;
                }
        free(w->buckets);
        w->buckets = b;
        w->n_buckets = nb;
        return 0;
}

static void entry_free(Entry *e) {
        if (!e)
                return;
        free(e->key);
        cJSON_Delete(e->obj);
        free(e);
}

/* Takes ownership of key and obj (also on failure). Returns the old object (to be freed by the
 * caller), NULL when new; *ret_new tells which. */
static int cache_put(KubeWatch *w, char *key, cJSON *obj, cJSON **ret_old) {
        Entry *e = lookup(w, key);
        *ret_old = NULL;
        kube_object_trim(obj, w->pods);
        if (e) {
                free(key);
                *ret_old = e->obj;
                e->obj = obj;
                e->seen = true;
                return 0;
        }
        const KubeConfig *cfg = w->client ? kube_client_config(w->client) : NULL;
        if (cfg && w->n >= cfg->max_items) {
                free(key);
                cJSON_Delete(obj);
                return -E2BIG;
        }
        if (grow(w) < 0 || !(e = calloc(1, sizeof *e))) {
                free(key);
                cJSON_Delete(obj);
                return -ENOMEM;
        }
        e->key = key;
        e->obj = obj;
        e->seen = true;
        Entry **p = slot(w, key);
        *p = e;
        w->n++;
        return 1;
}

static Entry *cache_take(KubeWatch *w, const char *key) {
        Entry **p = slot(w, key);
        if (!p || !*p)
                return NULL;
        Entry *e = *p;
        *p = e->next;
        e->next = NULL;
        w->n--;
        return e;
}

static void cache_clear(KubeWatch *w) {
        for (size_t i = 0; i < w->n_buckets; i++)
                while (w->buckets[i]) {
                        Entry *e = w->buckets[i];
                        w->buckets[i] = e->next;
                        entry_free(e);
                }
        w->n = 0;
}

const cJSON *kube_watch_get(const KubeWatch *w, const char *ns, const char *name) {
        _cleanup_free_ char *key = NULL;
        if (!w || isempty(name) || asprintf(&key, "%s/%s", strempty(ns), name) < 0)
                return NULL;
        Entry *e = lookup(w, key);
        return e ? e->obj : NULL;
}

int kube_watch_foreach(const KubeWatch *w, int (*fn)(const cJSON *obj, void *userdata), void *userdata) {
        for (size_t i = 0; i < w->n_buckets; i++)
                for (Entry *e = w->buckets[i]; e; e = e->next) {
                        int r = fn(e->obj, userdata);
                        if (r < 0)
                                return r;
                }
        return 0;
}

size_t kube_watch_size(const KubeWatch *w) {
        return w ? w->n : 0;
}

bool kube_watch_synced(const KubeWatch *w) {
        return w && w->synced;
}

void kube_watch_stats(const KubeWatch *w, KubeWatchStats *ret) {
        *ret = w->stats;
        snprintf(ret->resource_version, sizeof ret->resource_version, "%s", w->rv);
}

/* ---- life cycle ------------------------------------------------------------------------------ */

static void stop_traffic(KubeWatch *w) {
        if (w->list_call) {
                kube_call_cancel(w->list_call);
                w->list_call = NULL;
        }
        if (w->http) {
                http_request_cancel(w->http);
                w->http = NULL;
        }
        w->timer = sd_event_source_disable_unref(w->timer);
        w->defer = sd_event_source_disable_unref(w->defer);
}

void kube_watch_detach(KubeWatch *w) {
        stop_traffic(w);
        w->client = NULL;
}

static void watch_destroy(KubeWatch *w) {
        stop_traffic(w);
        if (w->client)
                kube_client_remove_watch(w->client, w);
        cache_clear(w);
        free(w->buckets);
        kube_lines_done(&w->lines);
        free(w->path);
        free(w->label_selector);
        free(w->field_selector);
        free(w->resource_version);
        free(w);
}

KubeWatch *kube_watch_free(KubeWatch *w) {
        if (!w)
                return NULL;
        if (w->dispatching > 0) {
                /* freed from its own callback: finish when the callback returns */
                stop_traffic(w);
                w->dead = true;
                return NULL;
        }
        watch_destroy(w);
        return NULL;
}

/* Deliver one event; false when the watch was freed meanwhile (stop touching it). */
static bool emit(KubeWatch *w, const KubeWatchEvent *ev) {
        w->dispatching++;
        w->cb(w, ev, w->userdata);
        w->dispatching--;
        return !w->dead;
}

/* At the end of every entry point from the loop. */
static void reap(KubeWatch *w) {
        if (w->dead && w->dispatching == 0)
                watch_destroy(w);
}

static void start_list(KubeWatch *w);
static void start_watch(KubeWatch *w);

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        KubeWatch *w = userdata;
        w->timer = sd_event_source_disable_unref(w->timer);
        if (w->next == NEXT_LIST)
                start_list(w);
        else
                start_watch(w);
        reap(w);
        return 0;
}

static void schedule(KubeWatch *w, Next next, uint64_t delay) {
        uint64_t now = 0;
        if (!w->client || w->dead)
                return;
        sd_event *e = kube_client_event(w->client);
        w->next = next;
        w->timer = sd_event_source_disable_unref(w->timer);
        (void) sd_event_now(e, CLOCK_MONOTONIC, &now);
        int r = sd_event_add_time(e, &w->timer, CLOCK_MONOTONIC, now + delay, 0, on_timer, w);
        if (r < 0) {
                /* nothing else can restart us: try again at once from the loop */
                log_debug_errno(r, "Watch %s: cannot arm a timer: %m", w->path);
                if (sd_event_add_time_relative(e, &w->timer, CLOCK_MONOTONIC, USEC_PER_SEC, 0, on_timer, w) < 0)
                        return;
        }
        (void) sd_event_source_set_description(w->timer, "kube-watch");
}

static uint64_t backoff(KubeWatch *w) {
        const KubeConfig *cfg = kube_client_config(w->client);
        w->failures++;
        return kube_backoff_usec(w->failures, MAX(cfg->backoff_base_usec, 100 * USEC_PER_MSEC),
                                 cfg->backoff_max_usec, kube_client_random(w->client));
}

static bool emit_error(KubeWatch *w, int error, const KubeStatus *st) {
        KubeWatchEvent ev = { .type = KUBE_WATCH_ERROR, .error = error, .status = st };
        w->stats.errors++;
        log_debug("Watch %s: %s%s%s", w->path, strerror(-error), st && st->message[0] ? ": " : "",
                  st ? st->message : "");
        return emit(w, &ev);
}

/* ---- the list ------------------------------------------------------------------------------- */

static void set_rv(KubeWatch *w, const cJSON *obj) {
        const char *rv = kube_object_meta(obj, "resourceVersion");
        if (!isempty(rv) && strlen(rv) < sizeof w->rv)
                strcpy(w->rv, rv);
}

/* Replace the cache by the list's items, delivering the difference. */
static bool apply_list(KubeWatch *w, cJSON *items) {
        for (size_t i = 0; i < w->n_buckets; i++)
                for (Entry *e = w->buckets[i]; e; e = e->next)
                        e->seen = false;
        while (items && items->child) {
                cJSON *it = cJSON_DetachItemViaPointer(items, items->child), *old = NULL;
                char *key = NULL;
                if (kube_object_key(it, &key) < 0) {
                        cJSON_Delete(it);
                        continue;
                }
                Entry *e = lookup(w, key);
                if (e && streq_ptr(kube_object_meta(e->obj, "resourceVersion"),
                                   kube_object_meta(it, "resourceVersion"))) {
                        e->seen = true;
                        free(key);
                        cJSON_Delete(it);
                        continue;
                }
                int r = cache_put(w, key, it, &old);
                if (r < 0) {
                        if (!emit_error(w, r, NULL))
                                return false;
                        continue;
                }
                KubeWatchEvent ev = { .type = r > 0 ? KUBE_WATCH_ADDED : KUBE_WATCH_MODIFIED,
                                      .object = it, .old = old };
                bool alive = emit(w, &ev);
                cJSON_Delete(old);
                if (!alive)
                        return false;
        }
        /* what the list no longer has was deleted while we did not watch */
        Entry *gone = NULL;
        for (size_t i = 0; i < w->n_buckets; i++)
                for (Entry **p = &w->buckets[i]; *p;) {
                        Entry *e = *p;
                        if (e->seen) {
                                p = &e->next;
                                continue;
                        }
                        *p = e->next;
                        w->n--;
                        e->next = gone;
                        gone = e;
                }
        while (gone) {
                Entry *e = gone;
                gone = e->next;
                KubeWatchEvent ev = { .type = KUBE_WATCH_DELETED, .object = e->obj };
                bool alive = emit(w, &ev);
                entry_free(e);
                if (!alive) {
                        while (gone) {
                                e = gone;
                                gone = e->next;
                                entry_free(e);
                        }
                        return false;
                }
        }
        return true;
}

static void on_list(KubeResponse *resp, void *userdata) {
        KubeWatch *w = userdata;
        w->list_call = NULL;

        if (resp->error < 0) {
                if (emit_error(w, resp->error, resp->status.message[0] ? &resp->status : NULL))
                        schedule(w, NEXT_LIST, backoff(w));
                reap(w);
                return;
        }
        cJSON *items = cJSON_GetObjectItemCaseSensitive(resp->object, "items");
        const cJSON *rv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(resp->object, "metadata"),
                                                           "resourceVersion");
        if (cJSON_IsString(rv) && strlen(rv->valuestring) < sizeof w->rv)
                strcpy(w->rv, rv->valuestring);
        else
                w->rv[0] = 0;
        w->stats.lists++;
        if (!apply_list(w, items)) {
                reap(w);
                return;
        }
        w->synced = true;
        KubeWatchEvent ev = { .type = KUBE_WATCH_SYNCED };
        if (!emit(w, &ev)) {
                reap(w);
                return;
        }
        start_watch(w);
}

static void start_list(KubeWatch *w) {
        if (!w->client || w->dead)
                return;
        /* the first list may ask for a version; relists want the current state */
        KubeListOptions o = w->opts;
        if (w->stats.lists > 0)
                o.resource_version = NULL;
        int r = kube_list(w->client, w->path, &o, on_list, w, &w->list_call);
        if (r < 0) {
                w->list_call = NULL;
                if (emit_error(w, r, NULL))
                        schedule(w, NEXT_LIST, backoff(w));
        }
}

static void relist(KubeWatch *w) {
        w->stats.relists++;
        w->synced = false;
        schedule(w, NEXT_LIST, 0);
}

/* ---- the watch stream ------------------------------------------------------------------------ */

/* Inside libcurl: only buffer; the lines are handled from the loop (on_defer). */
static int on_chunk(HttpRequest *req, const char *data, size_t len, void *userdata) {
        KubeWatch *w = userdata;
        int r = kube_lines_feed(&w->lines, data, len);
        if (r < 0)
                return r;
        if (memchr(data, '\n', len) && w->defer)
                (void) sd_event_source_set_enabled(w->defer, SD_EVENT_ONESHOT);
        return 0;
}

/* Stop reading this stream; whatever it still had buffered is dropped. */
static void end_stream(KubeWatch *w) {
        if (w->http) {
                http_request_cancel(w->http);
                w->http = NULL;
        }
        kube_lines_done(&w->lines);
        if (w->defer)
                (void) sd_event_source_set_enabled(w->defer, SD_EVENT_OFF);
}

/* Handle one event line. false: stop reading this stream (the watch was freed, or the stream
 * was ended and its successor scheduled). */
static bool handle_line(KubeWatch *w, char *line, size_t len) {
        cJSON *j = cJSON_ParseWithLength(line, len);
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(j, "type");
        cJSON *obj = cJSON_GetObjectItemCaseSensitive(j, "object");
        KubeStatus st;

        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                goto bad;
        }
        if (!cJSON_IsString(type) && kube_status_parse(j, &st) >= 0) {
                /* not an event: the whole answer was a Status (e.g. HTTP 410) */
                cJSON_Delete(j);
                goto status;
        }
        if (!cJSON_IsString(type) || !cJSON_IsObject(obj)) {
                cJSON_Delete(j);
                goto bad;
        }
        const char *t = type->valuestring;
        w->stream_events++;
        if (streq(t, "BOOKMARK")) {
                w->stats.bookmarks++;
                set_rv(w, obj);
                cJSON_Delete(j);
                return true;
        }
        if (streq(t, "ERROR")) {
                if (kube_status_parse(obj, &st) < 0)
                        st = (KubeStatus) { .code = 500 };
                cJSON_Delete(j);
                goto status;
        }
        KubeWatchEventType et;
        if (streq(t, "ADDED"))
                et = KUBE_WATCH_ADDED;
        else if (streq(t, "MODIFIED"))
                et = KUBE_WATCH_MODIFIED;
        else if (streq(t, "DELETED"))
                et = KUBE_WATCH_DELETED;
        else {
                log_debug("Watch %s: ignoring event type %s", w->path, t);
                cJSON_Delete(j);
                return true;
        }
        w->stats.events++;
        set_rv(w, obj);
        char *key = NULL;
        if (kube_object_key(obj, &key) < 0) {
                cJSON_Delete(j);
                goto bad;
        }
        obj = cJSON_DetachItemViaPointer(j, obj);
        cJSON_Delete(j);
        bool alive;
        if (et == KUBE_WATCH_DELETED) {
                Entry *e = cache_take(w, key);
                free(key);
                KubeWatchEvent ev = { .type = et, .object = obj };
                alive = emit(w, &ev);
                entry_free(e);
                cJSON_Delete(obj);
                return alive;
        }
        cJSON *old = NULL;
        int r = cache_put(w, key, obj, &old);
        if (r < 0)
                return emit_error(w, r, NULL);
        /* ADDED for a known object (after a relist raced the stream) is a modification */
        KubeWatchEvent ev = { .type = r > 0 ? KUBE_WATCH_ADDED : KUBE_WATCH_MODIFIED, .object = obj,
                              .old = old };
        alive = emit(w, &ev);
        cJSON_Delete(old);
        return alive;

status:
        end_stream(w);
        if (st.code == 410 || streq(st.reason, "Expired") || streq(st.reason, "Gone")) {
                log_debug("Watch %s: resourceVersion %s is too old, listing again", w->path, w->rv);
                relist(w);
                return false;
        }
        if (st.code == 401)
                w->force_token = true;
        if (emit_error(w, kube_http_errno(st.code ? st.code : 500, &st), &st))
                schedule(w, NEXT_WATCH, backoff(w));
        return false;
bad:
        end_stream(w);
        if (emit_error(w, -EBADMSG, NULL))
                schedule(w, NEXT_WATCH, backoff(w));
        return false;
}

/* false: this stream is over (or the watch freed). */
static bool process_lines(KubeWatch *w) {
        char *line;
        size_t len;
        while (kube_lines_next(&w->lines, &line, &len))
                if (!handle_line(w, line, len))
                        return false;
        return true;
}

static int on_defer(sd_event_source *s, void *userdata) {
        KubeWatch *w = userdata;
        (void) process_lines(w);
        reap(w);
        return 0;
}

static void on_stream_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                           void *userdata) {
        KubeWatch *w = userdata;
        uint64_t now = 0;

        w->http = NULL;
        /* what arrived before the end, and a last line without its newline */
        if (error >= 0 && kube_lines_feed(&w->lines, "\n", 1) < 0)
                error = -EFBIG;
        if (!process_lines(w)) {
                reap(w);
                return;
        }
        if (status == 401)
                w->force_token = true;
        if (error == -EFBIG || error == -ENOBUFS) {
                /* an event over the cap cannot be skipped: start again from a list */
                if (emit_error(w, error, NULL))
                        schedule(w, NEXT_LIST, backoff(w));
        } else if (status == 410) {
                relist(w);
        } else if (error < 0 || status != 200) {
                KubeStatus st = { .code = (int) status };
                if (emit_error(w, error < 0 ? error : kube_http_errno(status, NULL), status ? &st : NULL))
                        schedule(w, NEXT_WATCH, backoff(w));
        } else {
                /* a clean end (timeoutSeconds): resume at once, unless streams keep ending early */
                (void) sd_event_now(kube_client_event(w->client), CLOCK_MONOTONIC, &now);
                if (w->stream_events > 0 || now - w->stream_started >= WATCH_SHORT_USEC) {
                        w->failures = 0;
                        schedule(w, NEXT_WATCH, 0);
                } else
                        schedule(w, NEXT_WATCH, backoff(w));
        }
        reap(w);
}

static void start_watch(KubeWatch *w) {
        _cleanup_free_ char *url = NULL;
        HttpRequest *h = NULL;
        int r;

        if (!w->client || w->dead)
                return;
        const KubeConfig *cfg = kube_client_config(w->client);
        unsigned timeout = WATCH_MIN_TIMEOUT_SEC + kube_client_random(w->client) % WATCH_MIN_TIMEOUT_SEC;
        KubeListOptions o = { .label_selector = w->opts.label_selector,
                              .field_selector = w->opts.field_selector };
        KubeQuery q = { .list = &o, .watch = true, .resource_version = w->rv, .timeout_seconds = timeout };
        r = kube_url(cfg->server, w->path, &q, &url);
        if (r >= 0)
                r = kube_client_http_request(w->client, "GET", url, w->force_token, &h);
        if (r >= 0) {
                w->force_token = false;
                http_request_set_timeouts(h, 5000, (uint64_t) (timeout + 30) * 1000);
                http_request_set_stream(h, on_chunk);
                kube_lines_done(&w->lines);
                r = http_request_start(h, on_stream_done, w);
        }
        if (r < 0) {
                if (emit_error(w, r, NULL))
                        schedule(w, NEXT_WATCH, backoff(w));
                return;
        }
        w->http = h;
        w->stats.watches++;
        w->stream_events = 0;
        (void) sd_event_now(kube_client_event(w->client), CLOCK_MONOTONIC, &w->stream_started);
}

int kube_watch_new(KubeClient *c, const char *path, const KubeListOptions *opts,
                   kube_watch_event_t cb, void *userdata, KubeWatch **ret) {
        int r;

        if (!c || isempty(path) || path[0] != '/' || strchr(path, '?') || !cb)
                return -EINVAL;
        KubeWatch *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->client = c;
        w->cb = cb;
        w->userdata = userdata;
        kube_lines_init(&w->lines, kube_client_config(c)->max_event);
        size_t pl = strlen(path);
        w->pods = pl >= 5 && streq(path + pl - 5, "/pods");
        if (!(w->path = strdup(path)) ||
            (opts && opts->label_selector && !(w->label_selector = strdup(opts->label_selector))) ||
            (opts && opts->field_selector && !(w->field_selector = strdup(opts->field_selector))) ||
            (opts && opts->resource_version && !(w->resource_version = strdup(opts->resource_version)))) {
                w->client = NULL;
                watch_destroy(w);
                return -ENOMEM;
        }
        w->opts = (KubeListOptions) { .label_selector = w->label_selector, .field_selector = w->field_selector,
                                      .resource_version = w->resource_version, .trim = true,
                                      .limit = opts ? opts->limit : 0 };
        r = kube_client_add_watch(c, w);
        if (r < 0) {
                w->client = NULL;
                watch_destroy(w);
                return r;
        }
        r = sd_event_add_defer(kube_client_event(c), &w->defer, on_defer, w);
        if (r >= 0)
                r = sd_event_source_set_enabled(w->defer, SD_EVENT_OFF);
        if (r < 0) {
                watch_destroy(w);
                return r;
        }
        (void) sd_event_source_set_description(w->defer, "kube-watch-lines");
        r = kube_list(c, w->path, &w->opts, on_list, w, &w->list_call);
        if (r < 0) {
                w->list_call = NULL;
                watch_destroy(w);
                return r;
        }
        *ret = w;
        return 0;
}
