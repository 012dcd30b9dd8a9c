/* SPDX-License-Identifier: Apache-2.0 */
/* The registry of reporting nodes: open addressing by instance id, their state, pods and notices. */
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "hash.h"
#include "registry.h"

int registry_init(Registry *r, size_t max_nodes) {
        *r = (Registry) { .max_nodes = max_nodes, .capacity = 64 };
        r->slots = calloc(r->capacity, sizeof *r->slots);
        return r->slots ? 0 : -ENOMEM;
}

static void notices_free(NodeEntry *e) {
        for (size_t i = 0; i < e->n_notices; i++)
                free(e->notices[i].event_id);
        free(e->notices);
        e->notices = NULL;
        e->n_notices = 0;
}

static void entry_free(NodeEntry *e) {
        if (!e)
                return;
        notices_free(e);
        pb_arena_free(e->arena);
        free(e->instance_id);
        free(e->reason);
        free(e->secret_boot);
        free(e);
}

static size_t pb_arena_used_or_zero(const PbArena *a) {
        return a ? pb_arena_used(a) : 0;
}

/* The unpacked state (its bytes are kept as a digest, here and in the fast path: fastpath.h). */
static size_t entry_memory(const NodeEntry *e) {
        return e ? pb_arena_used_or_zero(e->arena) : 0;
}

void registry_done(Registry *r) {
        for (size_t i = 0; i < r->capacity; i++)
                entry_free(r->slots[i]);
        for (size_t i = 0; i < ELEMENTSOF(r->gone); i++)
                free(r->gone[i]);
        free(r->slots);
        *r = (Registry) {};
}

static size_t find_slot(const Registry *r, const char *id) {
        size_t mask = r->capacity - 1;
        for (size_t i = hash_str(id) & mask;; i = (i + 1) & mask)
                if (!r->slots[i] || streq(r->slots[i]->instance_id, id))
                        return i;
}

NodeEntry *registry_get(const Registry *r, const char *id) {
        if (!r->slots || !id)
                return NULL;
        return r->slots[find_slot(r, id)];
}

static int grow(Registry *r) {
        size_t ncap = r->capacity * 2;
        NodeEntry **old = r->slots, **n = calloc(ncap, sizeof *n);
        if (!n)
                return -ENOMEM;
        size_t ocap = r->capacity;
        r->slots = n;
        r->capacity = ncap;
        for (size_t i = 0; i < ocap; i++)
                if (old[i])
                        r->slots[find_slot(r, old[i]->instance_id)] = old[i];
        free(old);
        return 0;
}

bool registry_is_duplicate(const NodeEntry *e, const char *boot_id, uint64_t sequence) {
        return e && e->state && e->reports > 0 && streq_ptr(e->state->identity ? e->state->identity->boot_id : NULL, boot_id) &&
               sequence <= e->sequence;
}

void registry_state_digest(const uint8_t *state, size_t len, uint8_t ret[static REGISTRY_DIGEST_SIZE]) {
        (void) SHA256(state, len, ret);
}

bool registry_state_unchanged(const NodeEntry *e, const uint8_t *state, size_t len) {
        uint8_t digest[REGISTRY_DIGEST_SIZE];
        if (!e || e->state_len == 0 || e->state_len != len)
                return false;
        registry_state_digest(state, len, digest);
        return memcmp(e->state_digest, digest, sizeof digest) == 0;
}

void registry_touch(NodeEntry *e, uint64_t sequence, uint64_t now) {
        e->sequence = sequence;
        e->last_seen_usec = now;
        e->reports++;
}

/* The same pods (by uid), in any order. */
static bool same_pods(const Nodesmith__V1__NodeState *a, const Nodesmith__V1__NodeState *b) {
        if (!a || !b || a->n_pods != b->n_pods)
                return false;
        /* An agent lists its pods in a stable order: compare in order first, and search (up to
         * n² comparisons: 12 100 for 110 pods) only from the first pod that differs. */
        size_t i = 0;
        while (i < a->n_pods && streq_ptr(a->pods[i]->uid, b->pods[i]->uid))
                i++;
        for (; i < a->n_pods; i++) {
                bool found = false;
                for (size_t k = 0; k < b->n_pods && !found; k++)
                        found = streq_ptr(a->pods[i]->uid, b->pods[k]->uid);
                if (!found)
                        return false;
        }
        return true;
}

int registry_put(Registry *r, const char *id, uint64_t sequence, Nodesmith__V1__NodeState *state,
                 PbArena *arena, const uint8_t *bytes, size_t len, uint64_t now, NodeEntry **ret,
                 bool *ret_new) {
        size_t i = find_slot(r, id);
        NodeEntry *e = r->slots[i];
        bool is_new = false;
        size_t old_bytes = entry_memory(e), new_bytes = pb_arena_used_or_zero(arena);
        if (r->max_state_memory && new_bytes > old_bytes &&
            r->state_memory - old_bytes + new_bytes > r->max_state_memory)
                return -ENOBUFS;

        if (!e) {
                if (r->n >= r->max_nodes)
                        return -ENOSPC;
                if ((r->n + 1) * 4 > r->capacity * 3) {
                        int k = grow(r);
                        if (k < 0)
                                return k;
                        i = find_slot(r, id);
                }
                e = calloc(1, sizeof *e);
                if (!e || !(e->instance_id = strdup(id))) {
                        free(e);
                        return -ENOMEM;
                }
                e->first_seen_usec = now;
                r->slots[i] = e;
                r->n++;
                is_new = true;
        } else if (e->reports == 0) {
                /* the first report of a node known so far from elsewhere only */
                e->first_seen_usec = now;
                is_new = true;
        }
        if (is_new || !same_pods(e->state, state))
                e->pods_changed_usec = now;
        r->state_memory = r->state_memory - entry_memory(e) + new_bytes;
        pb_arena_free(e->arena);
        e->state = state;
        e->arena = arena;
        registry_state_digest(bytes, len, e->state_digest);
        e->state_len = len;
        registry_touch(e, sequence, now);
        if (ret)
                *ret = e;
        if (ret_new)
                *ret_new = is_new;
        return 0;
}

int registry_put_unreported(Registry *r, const char *id, Nodesmith__V1__NodeState *state, PbArena *arena,
                            const uint8_t *bytes, size_t len, uint64_t now, NodeEntry **ret) {
        NodeEntry *e = NULL;
        if (registry_get(r, id))
                return -EEXIST;
        int k = registry_put(r, id, 0, state, arena, bytes, len, now, &e, NULL);
        if (k < 0)
                return k;
        e->reports = 0;
        e->last_seen_usec = 0;
        if (ret)
                *ret = e;
        return 0;
}

int registry_remove(Registry *r, const char *id) {
        size_t mask = r->capacity - 1, i = find_slot(r, id);
        if (!r->slots[i])
                return -ENOENT;
        r->state_memory -= entry_memory(r->slots[i]);
        registry_directive_changed(r, r->slots[i]);
        entry_free(r->slots[i]);
        r->slots[i] = NULL;
        r->n--;
        /* backward-shift the cluster that follows so probing stays correct */
        for (size_t j = (i + 1) & mask; r->slots[j]; j = (j + 1) & mask) {
                NodeEntry *e = r->slots[j];
                r->slots[j] = NULL;
                r->slots[find_slot(r, e->instance_id)] = e;
        }
        return 0;
}

const NoticeRecord *registry_find_notice(const NodeEntry *e, const char *event_id) {
        for (size_t i = 0; i < e->n_notices; i++)
                if (streq(e->notices[i].event_id, event_id))
                        return &e->notices[i];
        return NULL;
}

static void records_free(NoticeRecord *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i].event_id);
        free(v);
}

/* The record an agent notice continues: its own (same event id), else one of the same kind that
 * only the queue told of. */
static ssize_t match_agent_notice(const NodeEntry *e, const bool *claimed, const Nodesmith__V1__Notice *no) {
        for (size_t j = 0; j < e->n_notices; j++)
                if (!claimed[j] && (e->notices[j].sources & NOTICE_FROM_AGENT) &&
                    streq(e->notices[j].event_id, strempty(no->event_id)))
                        return (ssize_t) j;
        for (size_t j = 0; j < e->n_notices; j++)
                if (!claimed[j] && !(e->notices[j].sources & NOTICE_FROM_AGENT) &&
                    e->notices[j].kind == (int) no->kind)
                        return (ssize_t) j;
        return -1;
}

int registry_sync_notices(NodeEntry *e, int64_t now, notice_change_t cb, void *userdata) {
        const Nodesmith__V1__NodeState *rep = e->state;
        size_t n = rep->n_notices, k = 0;

        /* Fast path: the same set as before, in the same order, all the agent's (the steady state). */
        if (n == e->n_notices) {
                bool same = true;
                for (size_t i = 0; same && i < n; i++)
                        same = e->notices[i].sources == NOTICE_FROM_AGENT &&
                               streq(strempty(rep->notices[i]->event_id), e->notices[i].event_id) &&
                               (int) rep->notices[i]->kind == e->notices[i].kind;
                if (same)
                        return 0;
        }

        NoticeRecord *next = calloc(MAX(n + e->n_notices, (size_t) 1), sizeof *next);
        bool *claimed = calloc(MAX(e->n_notices, (size_t) 1), sizeof *claimed);
        if (!next || !claimed) {
                free(next);
                free(claimed);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                const Nodesmith__V1__Notice *no = rep->notices[i];
                ssize_t o = match_agent_notice(e, claimed, no);
                const NoticeRecord *old = o >= 0 ? &e->notices[o] : NULL;
                bool queued = old && (old->sources & NOTICE_FROM_QUEUE);
                if (old)
                        claimed[o] = true;
                next[k] = (NoticeRecord) {
                        .event_id = strdup(strempty(no->event_id)),
                        .kind = (int) no->kind,
                        /* one notice: the deadline known first stays */
                        .deadline_unix_ms = queued && old->deadline_unix_ms ? old->deadline_unix_ms
                                                                             : no->deadline_unix_ms,
                        .recorded_unix_ms = old ? old->recorded_unix_ms : now,
                        .sources = NOTICE_FROM_AGENT | (queued ? NOTICE_FROM_QUEUE : 0),
                };
                if (!next[k].event_id) {
                        records_free(next, k);
                        free(claimed);
                        return -ENOMEM;
                }
                if (!old && cb)
                        cb(e, &next[k], true, userdata);
                k++;
        }
        for (size_t j = 0; j < e->n_notices; j++) {
                if (claimed[j])
                        continue;
                const NoticeRecord *old = &e->notices[j];
                if (!(old->sources & NOTICE_FROM_QUEUE)) {
                        if (cb)
                                cb(e, old, false, userdata);
                        continue;
                }
                /* the agent no longer tells of it (or never did): the queue's word stands */
                next[k] = *old;
                next[k].sources = NOTICE_FROM_QUEUE;
                next[k].event_id = strdup(old->event_id);
                if (!next[k].event_id) {
                        records_free(next, k);
                        free(claimed);
                        return -ENOMEM;
                }
                k++;
        }
        free(claimed);
        notices_free(e);
        e->notices = next;
        e->n_notices = k;
        return 1;
}

int registry_add_notice(NodeEntry *e, int kind, const char *event_id, int64_t deadline, int64_t now,
                        unsigned source, const NoticeRecord **ret) {
        for (size_t i = 0; i < e->n_notices; i++) {
                NoticeRecord *n = &e->notices[i];
                if (n->kind != kind)
                        continue;
                n->sources |= source;
                if (n->deadline_unix_ms == 0)
                        n->deadline_unix_ms = deadline;
                if (ret)
                        *ret = n;
                return 0;
        }
        NoticeRecord *v = realloc(e->notices, (e->n_notices + 1) * sizeof *v);
        if (!v)
                return -ENOMEM;
        e->notices = v;
        NoticeRecord *n = &v[e->n_notices];
        *n = (NoticeRecord) { .event_id = strdup(strempty(event_id)), .kind = kind, .deadline_unix_ms = deadline,
                              .recorded_unix_ms = now, .sources = source };
        if (!n->event_id)
                return -ENOMEM;
        e->n_notices++;
        if (ret)
                *ret = n;
        return 1;
}

void registry_directive_changed(Registry *r, const NodeEntry *e) {
        if (r->forget && e)
                r->forget(r->forget_userdata, e->instance_id);
}

void registry_bury(Registry *r, const char *id) {
        (void) registry_remove(r, id);
        if (registry_is_buried(r, id))
                return;
        size_t k = r->gone_next++ % ELEMENTSOF(r->gone);
        free(r->gone[k]);
        r->gone[k] = strdup(id);
}

bool registry_is_buried(const Registry *r, const char *id) {
        for (size_t i = 0; i < ELEMENTSOF(r->gone); i++)
                if (r->gone[i] && streq(r->gone[i], id))
                        return true;
        return false;
}
