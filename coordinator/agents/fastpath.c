/* SPDX-License-Identifier: Apache-2.0 */
/* Unchanged agent reports answered in NNG's threads, from a copy of what the loop last decided. */
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fastpath.h"
#include "hash.h"
#include "wire.h"

typedef struct FastEntry FastEntry;
struct FastEntry {
        FastEntry *next; /* in its bucket */
        FastEntry *dirty_next; /* in the list of entries answered since the last sync */
        bool dirty;
        char *instance_id;
        char *boot_id;
        uint8_t state_digest[REGISTRY_DIGEST_SIZE]; /* the registry's (registry.h) */
        size_t state_len;
        uint64_t sequence;  /* the last answered, by the loop or here */
        uint64_t seen_usec; /* CLOCK_MONOTONIC */
        uint64_t pending;   /* answered here since the last sync */
        /* the directive */
        int action;
        char *reason;
        int64_t deadline_unix_ms;
        bool force;
        bool attested;
        bool has_secret;
        uint8_t secret[32];
};

struct FastPath {
        pthread_mutex_t lock;
        const char *token;
        uint32_t report_interval_ms;
        uint64_t fresh_usec;
        FastEntry **buckets;
        size_t n_buckets; /* a power of two */
        size_t n;
        FastEntry *dirty; /* answered here since the last sync */
};

static FastEntry **bucket_of(FastPath *f, const char *id) {
        return &f->buckets[hash_str(id) & (f->n_buckets - 1)];
}

static FastEntry **find(FastPath *f, const char *id) {
        FastEntry **p = bucket_of(f, id);
        while (*p && !streq((*p)->instance_id, id))
                p = &(*p)->next;
        return p;
}

static void entry_free(FastEntry *fe) {
        free(fe->instance_id);
        free(fe->boot_id);
        free(fe->reason);
        free(fe);
}

int fast_path_new(const char *token, uint32_t report_interval_ms, uint64_t fresh_usec, FastPath **ret) {
        FastPath *f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        f->n_buckets = 256;
        f->buckets = calloc(f->n_buckets, sizeof *f->buckets);
        if (!f->buckets) {
                free(f);
                return -ENOMEM;
        }
        pthread_mutex_init(&f->lock, NULL);
        f->token = token;
        f->report_interval_ms = report_interval_ms;
        f->fresh_usec = fresh_usec;
        *ret = f;
        return 0;
}

FastPath *fast_path_free(FastPath *f) {
        if (!f)
                return NULL;
        for (size_t i = 0; i < f->n_buckets; i++)
                while (f->buckets[i]) {
                        FastEntry *fe = f->buckets[i];
                        f->buckets[i] = fe->next;
                        entry_free(fe);
                }
        free(f->buckets);
        pthread_mutex_destroy(&f->lock);
        free(f);
        return NULL;
}

size_t fast_path_size(FastPath *f) {
        pthread_mutex_lock(&f->lock);
        size_t n = f->n;
        pthread_mutex_unlock(&f->lock);
        return n;
}

static uint64_t clock_usec(clockid_t id) {
        struct timespec ts;
        clock_gettime(id, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

int fast_path_answer(FastPath *f, const uint8_t *req, size_t len, uint8_t *reply, size_t reply_size,
                     size_t *ret_len) {
        WireView v;
        char instance_id[65], boot_id[65];
        uint8_t digest[REGISTRY_DIGEST_SIZE];
        int r = 0;

        /* read in place, nothing unpacked: anything but a well-formed report of the current
         * version with the right token (and boot secret), from a remembered boot, newer and
         * unchanged, is the loop's to answer (and refuse) */
        if (wire_peek_report(req, len, &v) < 0 ||
            v.protocol_version != NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT ||
            !wire_span_equal(v.token, f->token) || v.instance_id.len == 0 ||
            wire_span_string(v.instance_id, instance_id, sizeof instance_id) < 0 ||
            wire_span_string(v.boot_id, boot_id, sizeof boot_id) < 0)
                return 0;
        registry_state_digest(v.state.data, v.state.len, digest); /* outside the lock */
        uint64_t now = clock_usec(CLOCK_MONOTONIC);
        pthread_mutex_lock(&f->lock);
        FastEntry *fe = *find(f, instance_id);
        if (fe && streq(fe->boot_id, boot_id) && v.sequence > fe->sequence &&
            now - fe->seen_usec < f->fresh_usec && fe->state_len == v.state.len &&
            memcmp(fe->state_digest, digest, sizeof digest) == 0 &&
            (!fe->has_secret || (v.boot_secret.len == sizeof fe->secret &&
                                 CRYPTO_memcmp(v.boot_secret.data, fe->secret, sizeof fe->secret) == 0))) {
                Nodesmith__V1__NodeDirective d = NODESMITH__V1__NODE_DIRECTIVE__INIT;
                d.protocol_version = NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
                d.report_interval_ms = f->report_interval_ms;
                d.now_unix_ms = (int64_t) (clock_usec(CLOCK_REALTIME) / 1000);
                d.ack_sequence = v.sequence;
                d.action = (Nodesmith__V1__NodeDirective__Action) fe->action;
                d.reason = fe->reason;
                d.deadline_unix_ms = fe->deadline_unix_ms;
                d.force = fe->force;
                d.attested = fe->attested;
                if (fe->has_secret)
                        d.boot_secret = (ProtobufCBinaryData) { .len = sizeof fe->secret, .data = fe->secret };
                if (nodesmith__v1__node_directive__get_packed_size(&d) <= reply_size) {
                        *ret_len = nodesmith__v1__node_directive__pack(&d, reply);
                        fe->sequence = v.sequence;
                        fe->seen_usec = now;
                        fe->pending++;
                        if (!fe->dirty) {
                                fe->dirty = true;
                                fe->dirty_next = f->dirty;
                                f->dirty = fe;
                        }
                        r = 1;
                }
        }
        pthread_mutex_unlock(&f->lock);
        return r;
}

static void unlink_entry(FastPath *f, FastEntry **p) {
        FastEntry *fe = *p;
        if (fe->dirty) /* a drop: rare, and the list holds one sync period's answers */
                for (FastEntry **d = &f->dirty; *d; d = &(*d)->dirty_next)
                        if (*d == fe) {
                                *d = fe->dirty_next;
                                break;
                        }
        *p = fe->next;
        entry_free(fe);
        f->n--;
}

static int grow(FastPath *f) {
        size_t n = f->n_buckets * 2;
        FastEntry **b = calloc(n, sizeof *b);
        if (!b)
                return -ENOMEM;
        for (size_t i = 0; i < f->n_buckets; i++)
                while (f->buckets[i]) {
                        FastEntry *fe = f->buckets[i];
                        f->buckets[i] = fe->next;
                        fe->next = b[hash_str(fe->instance_id) & (n - 1)];
                        b[hash_str(fe->instance_id) & (n - 1)] = fe;
                }
        free(f->buckets);
        f->buckets = b;
        f->n_buckets = n;
        return 0;
}

static int entry_update(FastEntry *fe, const NodeEntry *e, const char *boot_id, bool attested, uint64_t now) {
        if (!streq_ptr(fe->boot_id, boot_id)) {
                if (free_and_strdup(&fe->boot_id, boot_id) < 0)
                        return -ENOMEM;
                fe->sequence = 0; /* a new boot starts its own sequence */
        }
        memcpy(fe->state_digest, e->state_digest, sizeof fe->state_digest);
        fe->state_len = e->state_len;
        if (!streq_ptr(fe->reason, e->reason) && free_and_strdup(&fe->reason, e->reason) < 0)
                return -ENOMEM;
        fe->sequence = MAX(fe->sequence, e->sequence);
        fe->seen_usec = now;
        fe->action = (int) e->action;
        fe->deadline_unix_ms = e->deadline_unix_ms;
        fe->force = e->force;
        fe->attested = attested;
        /* a report must present it here; one without it (not confirmed yet) goes to the loop */
        fe->has_secret = e->secret_boot && streq(e->secret_boot, boot_id);
        if (fe->has_secret)
                memcpy(fe->secret, e->boot_secret, sizeof fe->secret);
        return 0;
}

void fast_path_remember(FastPath *f, const NodeEntry *e, const char *boot_id, bool attested, uint64_t now) {
        pthread_mutex_lock(&f->lock);
        FastEntry **p = find(f, e->instance_id);
        if (!*p) {
                if (f->n >= f->n_buckets && grow(f) == 0)
                        p = find(f, e->instance_id);
                FastEntry *fe = calloc(1, sizeof *fe);
                if (!fe || !(fe->instance_id = strdup(e->instance_id))) {
                        free(fe); /* out of memory: the loop answers this node */
                        pthread_mutex_unlock(&f->lock);
                        return;
                }
                *p = fe;
                f->n++;
        }
        if (entry_update(*p, e, strempty(boot_id), attested, now) < 0)
                unlink_entry(f, p);
        pthread_mutex_unlock(&f->lock);
}

/* Hands *p's news to keep(); false if it was dropped (and *p now the next one). */
static bool sync_entry(FastPath *f, FastEntry **p, fast_path_sync_t keep, void *userdata) {
        FastEntry *fe = *p;
        uint64_t n = fe->pending;
        fe->pending = 0;
        if (keep(fe->instance_id, fe->boot_id, n, fe->sequence, fe->seen_usec, fe->action, fe->reason,
                 fe->deadline_unix_ms, fe->force, userdata))
                return true;
        unlink_entry(f, p);
        return false;
}

void fast_path_sync(FastPath *f, fast_path_sync_t keep, void *userdata) {
        pthread_mutex_lock(&f->lock);
        FastEntry *fe = f->dirty;
        f->dirty = NULL;
        while (fe) {
                FastEntry *next = fe->dirty_next;
                fe->dirty = false;
                fe->dirty_next = NULL;
                (void) sync_entry(f, find(f, fe->instance_id), keep, userdata);
                fe = next;
        }
        pthread_mutex_unlock(&f->lock);
}

void fast_path_sync_one(FastPath *f, const char *instance_id, fast_path_sync_t keep, void *userdata) {
        pthread_mutex_lock(&f->lock);
        FastEntry **p = find(f, instance_id);
        if (*p)
                (void) sync_entry(f, p, keep, userdata);
        pthread_mutex_unlock(&f->lock);
}

void fast_path_forget(FastPath *f, const char *instance_id, fast_path_sync_t keep, void *userdata) {
        pthread_mutex_lock(&f->lock);
        FastEntry **p = find(f, instance_id);
        if (*p && sync_entry(f, p, keep, userdata))
                unlink_entry(f, p);
        pthread_mutex_unlock(&f->lock);
}
