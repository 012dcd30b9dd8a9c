/* SPDX-License-Identifier: Apache-2.0 */
/* Small macros every file uses: cleanup, ownership hand-over, string helpers, units. */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

/* Hand over an owned pointer: returns it and clears the variable. */
#define TAKE_PTR(p)                        \
        ({                                 \
                __typeof__(p) _p_ = (p);   \
                (p) = NULL;                \
                _p_;                       \
        })

#define TAKE_FD(fd)                        \
        ({                                 \
                int _fd_ = (fd);           \
                (fd) = -EBADF;             \
                _fd_;                      \
        })

/* Declare xyz_freep() for a destructor xyz_free() that accepts NULL. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)        \
        static inline void func##p(type *p) {          \
                if (*p)                                \
                        func(*p);                      \
        }

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0)
                close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline bool streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}
#define streq(a, b) (strcmp((a), (b)) == 0)
#define isempty(s) (!(s) || !*(s))
static inline const char *strempty(const char *s) {
        return s ? s : "";
}

/* Replace *p with a copy of s (NULL allowed). */
static inline int free_and_strdup(char **p, const char *s) {
        char *n = NULL;
        if (s) {
                n = strdup(s);
                if (!n)
                        return -ENOMEM;
        }
        free(*p);
        *p = n;
        return 0;
}

#define USEC_PER_SEC ((uint64_t) 1000000ULL)
#define USEC_PER_MSEC ((uint64_t) 1000ULL)
#define NSEC_PER_USEC ((uint64_t) 1000ULL)

#include <stdio.h>
static inline void fclosep_(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep_)
