/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* YAML to cJSON through libyaml, for manifests given to the CLI and for kubelet configuration.
 *
 * Scalars follow the YAML 1.2 core schema: null (~, null, empty), booleans (true/false in any of
 * the usual casings), integers (decimal, 0x, 0o), floats (including .inf/.nan); quoted scalars
 * and scalars tagged !!str are always strings. Anchors and aliases are expanded, "<<" merge
 * keys are honoured. .inf and .nan stay strings (JSON cannot carry them). Bounded: input size, nesting depth and the number of values produced
 * (aliases included) are capped, so hostile input cannot exhaust memory. */

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#define YAML_JSON_MAX_INPUT (16u * 1024 * 1024)
#define YAML_JSON_MAX_DEPTH 64
#define YAML_JSON_MAX_NODES 1000000

/* Errors: -EBADMSG (syntax; the line is in the debug log and in errbuf for the _error variants),
 * -E2BIG (over a bound), -ENOMEM. */

/* The first document (an empty input gives JSON null). */
int yaml_to_json(const char *text, size_t len, cJSON **ret);

/* Every document of a multi-document stream ("---"), as a JSON array (empty documents are
 * left out). */
int yaml_documents_to_json(const char *text, size_t len, cJSON **ret);

/* JSON when the text is JSON, else YAML (first document). */
int json_or_yaml_parse(const char *text, size_t len, cJSON **ret);

/* Variants that describe a failure for people ("line 3, column 5: mapping values are not
 * allowed in this context") into errbuf. json_or_yaml_documents_error() returns a JSON array:
 * the documents of a YAML stream, or a JSON text (an array stays an array of its items, any
 * other value becomes a one-element array). */
int yaml_documents_to_json_error(const char *text, size_t len, cJSON **ret, char *errbuf, size_t errlen);
int json_or_yaml_documents_error(const char *text, size_t len, cJSON **ret, char *errbuf, size_t errlen);

/* YAML text for a JSON value (one document), or for each element of an array as separate
 * documents when `documents` is set. Strings that YAML would read as another type ("true",
 * "1.5", "null", "") are quoted. *ret is NUL-terminated; the caller frees it. */
int json_to_yaml(const cJSON *j, bool documents, char **ret);
