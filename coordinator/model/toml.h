/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* TOML (Bottlerocket's user data) to and from cJSON, through toml++ (toml.cc): tables become
 * objects, arrays arrays, strings, integers, floats and booleans their JSON kind; dates and
 * times become strings. Back to TOML, a JSON number without a fraction is an integer. */

#include <cjson/cJSON.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TOML_TEXT_MAX (64 * 1024)

/* Parses text (at most TOML_TEXT_MAX bytes). -EBADMSG with *ret_error ("line L, column C:
 * what", malloc'ed) when it is not TOML; -E2BIG when too long. */
int toml_parse_json(const char *text, cJSON **ret, char **ret_error);

/* root must be an object; null members are left out. */
int toml_format_json(const cJSON *root, char **ret);

#ifdef __cplusplus
}
#endif
