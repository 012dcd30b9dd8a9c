/* SPDX-License-Identifier: Apache-2.0 */
/* Base64 encoding and decoding (mbedTLS), with white space and PEM armour skipped on input. */
#include <errno.h>
#include <mbedtls/base64.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "macro.h"

#define BASE64_MAX (256u * 1024 * 1024)

int base64_encode(const void *data, size_t len, size_t max_in, char **ret) {
        size_t n = 0;

        if (len > BASE64_MAX || (max_in && len > max_in))
                return -E2BIG;
        size_t size = 4 * ((len + 2) / 3) + 1;
        _cleanup_free_ char *out = malloc(size);
        if (!out)
                return -ENOMEM;
        if (mbedtls_base64_encode((unsigned char *) out, size, &n, data, len) != 0)
                return -EINVAL;
        out[n] = 0;
        *ret = TAKE_PTR(out);
        return 0;
}

int base64_decode(const char *s, size_t len, Base64Flags flags, void **ret, size_t *ret_len) {
        size_t m = 0, n = 0;

        if (!s || len > BASE64_MAX)
                return -E2BIG;
        _cleanup_free_ char *clean = malloc(len + 1);
        _cleanup_free_ unsigned char *out = malloc(len / 4 * 3 + 4);
        if (!clean || !out)
                return -ENOMEM;
        for (size_t i = 0; i < len;) {
                size_t e = i;
                while (e < len && s[e] != '\n')
                        e++;
                bool armour = (flags & BASE64_SKIP_ARMOUR) && e - i >= 5 && memcmp(s + i, "-----", 5) == 0;
                for (size_t k = i; k < e && !armour; k++)
                        if (!strchr(" \t\r", s[k]) || !s[k])
                                clean[m++] = s[k];
                i = e + 1;
        }
        if (m == 0 || m % 4 != 0) /* padded, as Go's StdEncoding (kubeconfig) and AWS write it */
                return -EBADMSG;
        if (mbedtls_base64_decode(out, len / 4 * 3 + 3, &n, (const unsigned char *) clean, m) != 0)
                return -EBADMSG;
        out[n] = 0;
        *ret = TAKE_PTR(out);
        *ret_len = n;
        return 0;
}
