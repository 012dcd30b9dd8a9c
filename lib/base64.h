/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Base64 (RFC 4648, standard alphabet, padded) on mbedTLS, which every nodesmith binary already
 * carries for NNG's TLS. */

#include <stddef.h>

typedef enum Base64Flags {
        BASE64_SKIP_ARMOUR = 1 << 0, /* skip "-----BEGIN …" style lines (PEM armour) */
} Base64Flags;

/* Encodes len bytes into a NUL-terminated string. -E2BIG above max_in bytes of input (0: no cap
 * of our own). */
int base64_encode(const void *data, size_t len, size_t max_in, char **ret);

/* Decodes s[0..len): white space and line breaks anywhere are skipped (as kubectl does); any
 * other byte outside the alphabet, bad padding or an empty input is -EBADMSG. The result is
 * NUL-terminated (not counted in *ret_len). */
int base64_decode(const char *s, size_t len, Base64Flags flags, void **ret, size_t *ret_len);
