/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <cjson/cJSON.h>
#include <stddef.h>

/* YAML (libyaml) to cJSON, for manifests and the kubelet configuration. Plain scalars are typed
 * as YAML 1.2's core schema does (null, true/false, integers, floats); quoted scalars stay
 * strings. Bounded: input size, nesting depth and the number of nodes produced (aliases
 * included) are capped. Errors: -EBADMSG (syntax, with the line in the debug log), -E2BIG
 * (over a bound), -ENOMEM. */

#define YAML_JSON_MAX_INPUT (16u * 1024 * 1024)
#define YAML_JSON_MAX_DEPTH 64
#define YAML_JSON_MAX_NODES 1000000

/* The first document (an empty input gives JSON null). */
int yaml_to_json(const char *text, size_t len, cJSON **ret);
/* Every document of a multi-document stream ("---"), as a JSON array. */
int yaml_documents_to_json(const char *text, size_t len, cJSON **ret);
/* JSON when the text is JSON, else YAML (first document). */
int json_or_yaml_parse(const char *text, size_t len, cJSON **ret);
