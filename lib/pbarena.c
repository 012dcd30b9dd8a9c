/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdlib.h>

#include "macro.h"
#include "pbarena.h"

#define ARENA_ALIGN 16u
#define ARENA_MAX (256u * 1024 * 1024)

typedef struct Chunk {
        struct Chunk *next;
        size_t size, used;
        _Alignas(16) unsigned char data[];
} Chunk;

struct PbArena {
        ProtobufCAllocator allocator;
        Chunk *chunks;
        size_t total;
};

static Chunk *chunk_new(size_t size) {
        Chunk *c = malloc(sizeof(Chunk) + size);
        if (!c)
                return NULL;
        c->next = NULL;
        c->size = size;
        c->used = 0;
        return c;
}

static void *arena_alloc(void *data, size_t size) {
        PbArena *a = data;
        size_t need = (size + ARENA_ALIGN - 1) & ~(size_t) (ARENA_ALIGN - 1);
        Chunk *c = a->chunks;

        if (need == 0)
                need = ARENA_ALIGN;
        if (!c || c->size - c->used < need) {
                size_t n = MAX(need, c ? c->size * 2 : (size_t) 4096);
                if (a->total + n > ARENA_MAX)
                        return NULL;
                Chunk *nc = chunk_new(n);
                if (!nc)
                        return NULL;
                nc->next = a->chunks;
                a->chunks = c = nc;
                a->total += n;
        }
        void *p = c->data + c->used;
        c->used += need;
        return p;
}

static void arena_release(void *data, void *p) {
        /* everything goes at once in pb_arena_free() */
}

PbArena *pb_arena_new(size_t size_hint) {
        PbArena *a = calloc(1, sizeof *a);
        if (!a)
                return NULL;
        a->allocator.alloc = arena_alloc;
        a->allocator.free = arena_release;
        a->allocator.allocator_data = a;
        size_t n = MAX(size_hint, (size_t) 1024);
        n = (n + ARENA_ALIGN - 1) & ~(size_t) (ARENA_ALIGN - 1);
        if (n <= ARENA_MAX) {
                a->chunks = chunk_new(n);
                if (!a->chunks) {
                        free(a);
                        return NULL;
                }
                a->total = n;
        }
        return a;
}

PbArena *pb_arena_free(PbArena *a) {
        if (!a)
                return NULL;
        for (Chunk *c = a->chunks, *n; c; c = n) {
                n = c->next;
                free(c);
        }
        free(a);
        return NULL;
}

ProtobufCAllocator *pb_arena_allocator(PbArena *a) {
        return &a->allocator;
}

size_t pb_arena_used(const PbArena *a) {
        size_t u = 0;
        for (const Chunk *c = a->chunks; c; c = c->next)
                u += c->used;
        return u;
}

void pb_arena_reset(PbArena *a) {
        Chunk *keep = NULL;
        for (Chunk *c = a->chunks, *n; c; c = n) {
                n = c->next;
                if (!keep || c->size > keep->size) {
                        free(keep);
                        keep = c;
                } else
                        free(c);
        }
        if (keep) {
                keep->next = NULL;
                keep->used = 0;
                a->total = keep->size;
        } else
                a->total = 0;
        a->chunks = keep;
}

void pb_arena_trim(PbArena *a, size_t max_keep) {
        pb_arena_reset(a);
        if (a->chunks && a->chunks->size > max_keep) {
                free(a->chunks);
                a->chunks = NULL;
                a->total = 0;
        }
}
