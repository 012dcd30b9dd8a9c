/* SPDX-License-Identifier: Apache-2.0 */
/* The hash of the in-memory tables (node ids, pipes' source addresses, watch keys, interned
 * strings): FNV-1a's step (xor a byte, multiply by its 64-bit prime) from a fixed start. The start
 * is 1469598103934665603, one digit short of FNV's published offset basis; the tables have always
 * used it and nothing outside the process sees these values, so it stays. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define HASH_START 1469598103934665603ULL

static inline uint64_t hash_bytes(const void *p, size_t n) {
        const unsigned char *b = p;
        uint64_t h = HASH_START;
        for (size_t i = 0; i < n; i++)
                h = (h ^ b[i]) * 1099511628211ULL;
        return h;
}

/* A NUL-terminated string's bytes; NULL hashes as "". */
static inline uint64_t hash_str(const char *s) {
        uint64_t h = HASH_START;
        for (; s && *s; s++)
                h = (h ^ (unsigned char) *s) * 1099511628211ULL;
        return h;
}
