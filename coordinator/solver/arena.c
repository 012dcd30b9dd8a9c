/* SPDX-License-Identifier: Apache-2.0 */
/* Bump allocator and string interning for the solver and snapshot builders. */

#include <stdarg.h>
#include <stdio.h>

#include "hash.h"
#include "macro.h"
#include "solver-internal.h"

#define ARENA_BLOCK (64 * 1024)

typedef struct ArenaBlock {
        struct ArenaBlock *next;
        size_t used, size;
        _Alignas(16) unsigned char data[];
} ArenaBlock;

struct SolverArena {
        ArenaBlock *head;
        size_t total;
};

int solver_arena_new(SolverArena **ret) {
        SolverArena *a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        *ret = a;
        return 0;
}

SolverArena *solver_arena_free(SolverArena *a) {
        if (!a)
                return NULL;
        for (ArenaBlock *b = a->head, *n; b; b = n) {
                n = b->next;
                free(b);
        }
        free(a);
        return NULL;
}

static void *arena_alloc_raw(SolverArena *a, size_t size) {
        size = (size + 15) & ~(size_t) 15;
        if (size == 0)
                size = 16;
        if (!a->head || a->head->size - a->head->used < size) {
                size_t bs = size > ARENA_BLOCK / 4 ? size : ARENA_BLOCK;
                ArenaBlock *b = malloc(sizeof(ArenaBlock) + bs);
                if (!b)
                        return NULL;
                b->size = bs;
                b->used = 0;
                if (bs != ARENA_BLOCK && a->head) {
                        /* Large block: keep the current block as the bump target. */
                        b->next = a->head->next;
                        a->head->next = b;
                } else {
                        b->next = a->head;
                        a->head = b;
                }
                a->total += bs;
                b->used = size;
                return b->data;
        }
        void *p = a->head->data + a->head->used;
        a->head->used += size;
        return p;
}

void *solver_arena_alloc(SolverArena *a, size_t size) {
        void *p = arena_alloc_raw(a, size);
        if (p)
                memset(p, 0, size);
        return p;
}

void *solver_arena_alloc_nozero(SolverArena *a, size_t size) {
        return arena_alloc_raw(a, size);
}

char *solver_arena_strndup(SolverArena *a, const char *s, size_t n) {
        if (!s)
                return NULL;
        char *d = arena_alloc_raw(a, n + 1);
        if (!d)
                return NULL;
        memcpy(d, s, n);
        d[n] = 0;
        return d;
}

char *solver_arena_strdup(SolverArena *a, const char *s) {
        return s ? solver_arena_strndup(a, s, strlen(s)) : NULL;
}

char *solver_arena_printf(SolverArena *a, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(NULL, 0, fmt, ap);
        va_end(ap);
        if (n < 0)
                return NULL;
        char *d = arena_alloc_raw(a, (size_t) n + 1);
        if (!d)
                return NULL;
        va_start(ap, fmt);
        vsnprintf(d, (size_t) n + 1, fmt, ap);
        va_end(ap);
        return d;
}

void *solver_arena_realloc(SolverArena *a, void *old, size_t old_size, size_t new_size) {
        void *p = arena_alloc_raw(a, new_size);
        if (!p)
                return NULL;
        if (old && old_size)
                memcpy(p, old, MIN(old_size, new_size));
        if (new_size > old_size)
                memset((char *) p + old_size, 0, new_size - old_size);
        return p;
}

/* ---- interning ------------------------------------------------------------------------------ */

void solver_intern_init(Intern *t, SolverArena *arena) {
        *t = (Intern) { .arena = arena };
}

void solver_intern_done(Intern *t) {
        free(t->slots);
        free(t->strs);
        *t = (Intern) {};
}

static int intern_grow(Intern *t) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        uint32_t *ns = malloc(ncap * sizeof(uint32_t));
        if (!ns)
                return -ENOMEM;
        memset(ns, 0xff, ncap * sizeof(uint32_t));
        for (size_t i = 0; i < t->cap; i++) {
                uint32_t id = t->slots[i];
                if (id == UINT32_MAX)
                        continue;
                uint64_t h = hash_bytes(t->strs[id], strlen(t->strs[id]));
                size_t j = h & (ncap - 1);
                while (ns[j] != UINT32_MAX)
                        j = (j + 1) & (ncap - 1);
                ns[j] = id;
        }
        free(t->slots);
        t->slots = ns;
        t->cap = ncap;
        return 0;
}

int64_t solver_intern_lookup(const Intern *t, const char *s) {
        if (!s || t->cap == 0)
                return -1;
        size_t n = strlen(s);
        uint64_t h = hash_bytes(s, n);
        size_t j = h & (t->cap - 1);
        for (;;) {
                uint32_t id = t->slots[j];
                if (id == UINT32_MAX)
                        return -1;
                if (streq(t->strs[id], s))
                        return id;
                j = (j + 1) & (t->cap - 1);
        }
}

int solver_intern_get(Intern *t, const char *s, uint32_t *ret) {
        int64_t found = solver_intern_lookup(t, s);
        if (found >= 0) {
                *ret = (uint32_t) found;
                return 0;
        }
        if ((t->n + 1) * 2 > t->cap) {
                int r = intern_grow(t);
                if (r < 0)
                        return r;
        }
        if (t->n == t->strs_cap) {
                size_t nc = t->strs_cap ? t->strs_cap * 2 : 256;
                const char **ns = realloc(t->strs, nc * sizeof(char *));
                if (!ns)
                        return -ENOMEM;
                t->strs = ns;
                t->strs_cap = nc;
        }
        char *copy = solver_arena_strdup(t->arena, s);
        if (!copy)
                return -ENOMEM;
        size_t n = strlen(s);
        size_t j = hash_bytes(s, n) & (t->cap - 1);
        while (t->slots[j] != UINT32_MAX)
                j = (j + 1) & (t->cap - 1);
        uint32_t id = (uint32_t) t->n++;
        t->slots[j] = id;
        t->strs[id] = copy;
        *ret = id;
        return 0;
}
