/* SPDX-License-Identifier: Apache-2.0 */
/* Kubernetes resource quantities. */
#pragma once

#include <stdint.h>

/* Kubernetes resource quantities ("100m", "1.5", "512Mi", "2G", "1e3", "10%"). */

/* Parse scaled by 10^shift10 (3: milli-units), rounded up. -EINVAL, -ERANGE. */
int quantity_parse_scaled(const char *s, int shift10, int64_t *ret);
/* Parse into milli-units (cpu: "250m" → 250, "2" → 2000). */
int quantity_parse_milli(const char *s, int64_t *ret);
/* Parse into whole units, rounding up like the API server does ("1Gi" → 1073741824,
 * "100m" → 1). */
int quantity_parse(const char *s, int64_t *ret);
/* "10%" → 10 (per cent, whole or fractional truncated); -EINVAL when not a percentage. */
int quantity_parse_percent(const char *s, double *ret);
