/* SPDX-License-Identifier: Apache-2.0 */
/* Bounded text buffers. */
#pragma once

#include <stdarg.h>
#include <stddef.h>

#include "macro.h"

/* A growing text buffer with a hard cap; once an append fails, the buffer stays failed. */
typedef struct StrBuf {
        char *data;
        size_t len, size, max;
        int error;
} StrBuf;

void strbuf_init(StrBuf *b, size_t max);
void strbuf_done(StrBuf *b);
int strbuf_printf(StrBuf *b, const char *fmt, ...) _printf_(2, 3);
int strbuf_append(StrBuf *b, const char *s, size_t n);
