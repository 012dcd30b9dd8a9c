/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "registry.h"

static uint64_t hash_str(const char *s) {
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (; *s; s++) {
                h ^= (unsigned char) *s;
                h *= 1099511628211ULL;
        }
        return h;
}

int registry_init(Registry *r, size_t max_nodes) {
        *r = (Registry) { .max_nodes = max_nodes, .capacity = 64 };
        r->slots = calloc(r->capacity, sizeof *r->slots);
        return r->slots ? 0 : -ENOMEM;
}

static void entry_free(NodeEntry *e) {
        if (!e)
                return;
        pb_arena_free(e->arena);
        free(e->instance_id);
        free(e->reason);
        free(e);
}

void registry_done(Registry *r) {
        for (size_t i = 0; i < r->capacity; i++)
                entry_free(r->slots[i]);
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

int registry_update(Registry *r, Nodesmith__V1__AgentReport *report, PbArena *arena, uint64_t now,
                    NodeEntry **ret, bool *ret_new) {
        const char *id = report->identity->instance_id;
        size_t i = find_slot(r, id);
        NodeEntry *e = r->slots[i];
        bool is_new = false;

        if (e) {
                const Nodesmith__V1__AgentReport *old = e->report;
                if (old && streq_ptr(old->identity->boot_id, report->identity->boot_id) &&
                    report->sequence <= old->sequence)
                        return -EALREADY;
                e->arena = pb_arena_free(e->arena);
        } else {
                if (r->n >= r->max_nodes)
                        return -ENOSPC;
                if ((r->n + 1) * 4 > r->capacity * 3) {
                        int k = grow(r);
                        if (k < 0)
                                return k;
                        i = find_slot(r, id);
                }
                e = calloc(1, sizeof *e);
                if (!e)
                        return -ENOMEM;
                e->instance_id = strdup(id);
                if (!e->instance_id) {
                        free(e);
                        return -ENOMEM;
                }
                e->first_seen_usec = now;
                r->slots[i] = e;
                r->n++;
                is_new = true;
        }
        e->report = report;
        e->arena = arena;
        e->last_seen_usec = now;
        e->reports++;
        if (ret)
                *ret = e;
        if (ret_new)
                *ret_new = is_new;
        return 0;
}

int registry_remove(Registry *r, const char *id) {
        size_t mask = r->capacity - 1, i = find_slot(r, id);
        if (!r->slots[i])
                return -ENOENT;
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
