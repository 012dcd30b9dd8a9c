/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "strbuf.h"

void strbuf_init(StrBuf *b, size_t max) {
        *b = (StrBuf) { .max = max };
}

void strbuf_done(StrBuf *b) {
        free(b->data);
        *b = (StrBuf) {};
}

static int reserve(StrBuf *b, size_t extra) {
        if (b->error)
                return b->error;
        if (b->len + extra + 1 > b->max)
                return (b->error = -ENOBUFS);
        int r = GROW(b->data, b->size, MAX(b->len + extra + 1, MIN((size_t) 256, b->max)), b->max);
        return r < 0 ? (b->error = r) : 0;
}

int strbuf_append(StrBuf *b, const char *s, size_t n) {
        int r = reserve(b, n);
        if (r < 0)
                return r;
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = 0;
        return 0;
}

int strbuf_printf(StrBuf *b, const char *fmt, ...) {
        va_list ap;
        char small[512];

        va_start(ap, fmt);
        int n = vsnprintf(small, sizeof small, fmt, ap);
        va_end(ap);
        if (n < 0)
                return (b->error = -EINVAL);
        if ((size_t) n < sizeof small)
                return strbuf_append(b, small, (size_t) n);
        int r = reserve(b, (size_t) n);
        if (r < 0)
                return r;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t) n + 1, fmt, ap);
        va_end(ap);
        b->len += (size_t) n;
        return 0;
}
