/* SPDX-License-Identifier: Apache-2.0 */
/* Reading cJSON trees: members by exact name. */
#pragma once

#include <cjson/cJSON.h>

#include "macro.h"

/* _cleanup_(cJSON_Deletep) */
DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete);

/* Reading cJSON trees: a member by its exact name, a member's string (NULL when absent or not a
 * string). Both accept NULL objects. */
static inline const cJSON *json_get(const cJSON *o, const char *key) {
        return cJSON_GetObjectItemCaseSensitive(o, key);
}

static inline const char *json_str(const cJSON *o, const char *key) {
        return cJSON_GetStringValue(json_get(o, key));
}
