/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Timestamps as the servers nodesmith talks to write them, parsed strictly into microseconds
 * since the Unix epoch: RFC 3339 (Kubernetes, IMDS, EventBridge, STS, the identity document),
 * the HTTP-date of RFC 9110 (Retry-After, AWS Health) and IMDS's maintenance dates. Dates that do
 * not exist (31 Feb) and years outside 1970..9999 are -ERANGE; any other malformed input, trailing
 * bytes included, is -EBADMSG. Nothing is written on failure. No locale is consulted. */

#include <stdint.h>

typedef enum TimestampFlags {
        TIMESTAMP_UTC_ONLY = 1 << 0, /* refuse an offset other than Z or +00:00 */
} TimestampFlags;

/* "2017-09-18T08:22:00Z", "2025-01-01T02:00:00.123456789+02:00": date, 'T' (or 't'), time, an
 * optional fraction of 1 to 9 digits (kept to the microsecond), then 'Z', 'z' or ±HH:MM. */
int timestamp_parse_rfc3339(const char *s, TimestampFlags flags, int64_t *ret_usec);

/* IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT" (the form RFC 9110 §5.6.7 says servers send);
 * white space around it, as a header value may carry, is ignored. */
int timestamp_parse_http_date(const char *s, int64_t *ret_usec);

/* "21 Jan 2019 09:00:43 GMT" (IMDS events/maintenance/scheduled NotBefore/NotAfter); the day may
 * have one digit. */
int timestamp_parse_dmy_gmt(const char *s, int64_t *ret_usec);

/* Whichever of the three s is. */
int timestamp_parse_any(const char *s, int64_t *ret_usec);
