/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>

#include "macro.h"
#include "quantity.h"

/* Split "<number><suffix>" and give the value as a long double scaled by the suffix. Follows
 * k8s.io/apimachinery resource.Quantity: binary suffixes Ki Mi Gi Ti Pi Ei, decimal m k M G T P
 * E (and none), or a decimal exponent e/E. */
static int parse_scaled(const char *s, long double *ret) {
        if (isempty(s) || strlen(s) > 64)
                return -EINVAL;

        const char *p = s;
        if (*p == '+' || *p == '-')
                p++;
        size_t digits = 0;
        while (isdigit((unsigned char) *p) || *p == '.') {
                if (isdigit((unsigned char) *p))
                        digits++;
                p++;
        }
        if (digits == 0)
                return -EINVAL;

        char num[72];
        size_t n = (size_t) (p - s);
        memcpy(num, s, n);
        num[n] = 0;
        char *end;
        errno = 0;
        long double v = strtold(num, &end);
        if (errno != 0 || *end != 0)
                return -EINVAL;

        static const struct {
                const char *suffix;
                long double mult;
        } suffixes[] = {
                { "Ki", 1024.0L }, { "Mi", 1048576.0L }, { "Gi", 1073741824.0L },
                { "Ti", 1099511627776.0L }, { "Pi", 1125899906842624.0L },
                { "Ei", 1152921504606846976.0L },
                { "n", 1e-9L }, { "u", 1e-6L }, { "m", 1e-3L }, { "", 1.0L }, { "k", 1e3L },
                { "M", 1e6L }, { "G", 1e9L }, { "T", 1e12L }, { "P", 1e15L }, { "E", 1e18L },
        };
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (streq(p, suffixes[i].suffix)) {
                        *ret = v * suffixes[i].mult;
                        return 0;
                }
        if (*p == 'e' || *p == 'E') {
                char *e2;
                errno = 0;
                long x = strtol(p + 1, &e2, 10);
                if (errno != 0 || *e2 != 0 || p[1] == 0 || x < -18 || x > 18)
                        return -EINVAL;
                *ret = v * powl(10.0L, (long double) x);
                return 0;
        }
        return -EINVAL;
}

int quantity_parse_milli(const char *s, int64_t *ret) {
        long double v;
        int r = parse_scaled(s, &v);
        if (r < 0)
                return r;
        v = ceill(v * 1000.0L - 1e-9L);
        if (v > (long double) INT64_MAX || v < (long double) INT64_MIN)
                return -ERANGE;
        *ret = (int64_t) v;
        return 0;
}

int quantity_parse(const char *s, int64_t *ret) {
        long double v;
        int r = parse_scaled(s, &v);
        if (r < 0)
                return r;
        v = ceill(v - 1e-9L);
        if (v > (long double) INT64_MAX || v < (long double) INT64_MIN)
                return -ERANGE;
        *ret = (int64_t) v;
        return 0;
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
