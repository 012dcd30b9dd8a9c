/* SPDX-License-Identifier: Apache-2.0 */
/* Kubernetes resource quantities parsed and formatted exactly, in integers. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>

#include "macro.h"
#include "quantity.h"

/* Exact, in integers (k8s.io/apimachinery resource.Quantity): a decimal mantissa, then a binary
 * suffix (Ki Mi Gi Ti Pi Ei), a decimal one (n u m k M G T P, E alone) or an exponent (e/E),
 * times 10^shift10, rounded up as the API server rounds requests. Negative values are refused. */
int quantity_parse_scaled(const char *s, int shift10, int64_t *ret) {
        if (isempty(s) || strlen(s) > 64)
                return -EINVAL;
        const char *p = s;
        bool neg = false;
        if (*p == '+' || *p == '-')
                neg = *p++ == '-';
        unsigned __int128 mant = 0;
        int dexp = 0, digits = 0;
        bool any = false, dot = false;
        for (; *p; p++) {
                if (*p == '.') {
                        if (dot)
                                return -EINVAL;
                        dot = true;
                        continue;
                }
                if (*p < '0' || *p > '9')
                        break;
                any = true;
                if (digits < 30) {
                        mant = mant * 10 + (unsigned) (*p - '0');
                        if (mant)
                                digits++;
                        if (dot)
                                dexp--;
                } else if (!dot)
                        dexp++;
        }
        if (!any)
                return -EINVAL;
        int bexp = 0;
        /* suffix */
        if ((*p == 'e' || *p == 'E') && p[1] != 'i') {
                if (p[1] == 0) { /* "E" alone is exa */
                        dexp += 18;
                        p++;
                } else {
                        char *end;
                        long e = strtol(p + 1, &end, 10);
                        if (end == p + 1 || *end || e < -40 || e > 40)
                                return -EINVAL;
                        dexp += (int) e;
                        p = end;
                }
        } else if (*p) {
                static const struct {
                        const char *sfx;
                        int d, b;
                } sfx[] = {
                        { "Ki", 0, 10 }, { "Mi", 0, 20 }, { "Gi", 0, 30 }, { "Ti", 0, 40 },
                        { "Pi", 0, 50 }, { "Ei", 0, 60 }, { "n", -9, 0 },  { "u", -6, 0 },
                        { "m", -3, 0 },  { "k", 3, 0 },   { "M", 6, 0 },   { "G", 9, 0 },
                        { "T", 12, 0 },  { "P", 15, 0 },
                };
                size_t i;
                for (i = 0; i < ELEMENTSOF(sfx); i++)
                        if (streq(p, sfx[i].sfx))
                                break;
                if (i == ELEMENTSOF(sfx))
                        return -EINVAL;
                dexp += sfx[i].d;
                bexp = sfx[i].b;
                p += strlen(sfx[i].sfx);
        }
        if (*p)
                return -EINVAL;
        if (neg && mant != 0)
                return -ERANGE;
        dexp += shift10;

        const unsigned __int128 lim = (unsigned __int128) INT64_MAX;
        unsigned __int128 v = mant;
        for (int i = 0; i < bexp; i++) {
                v <<= 1;
                if (v > lim)
                        return -ERANGE;
        }
        if (dexp >= 0) {
                for (int i = 0; i < dexp; i++) {
                        v *= 10;
                        if (v > lim)
                                return -ERANGE;
                }
        } else {
                unsigned __int128 den = 1;
                for (int i = 0; i < -dexp; i++) {
                        den *= 10;
                        if (den > ((unsigned __int128) 1 << 120))
                                break;
                }
                v = (v + den - 1) / den; /* round up, like Kubernetes for requests */
        }
        if (v > lim)
                return -ERANGE;
        *ret = (int64_t) v;
        return 0;
}

int quantity_parse_milli(const char *s, int64_t *ret) {
        return quantity_parse_scaled(s, 3, ret);
}

int quantity_parse(const char *s, int64_t *ret) {
        return quantity_parse_scaled(s, 0, ret);
}

int quantity_parse_percent(const char *s, double *ret) {
        if (isempty(s))
                return -EINVAL;
        size_t n = strlen(s);
        if (n < 2 || n > 32 || s[n - 1] != '%')
                return -EINVAL;
        char buf[40];
        memcpy(buf, s, n - 1);
        buf[n - 1] = 0;
        char *end;
        errno = 0;
        double v = strtod(buf, &end);
        if (errno != 0 || *end != 0 || v < 0 || v > 100 || isnan(v))
                return -EINVAL;
        *ret = v;
        return 0;
}
