/* SPDX-License-Identifier: Apache-2.0 */
/* What the object parsers of model/ share: the error context, field readers, common structures. */
#pragma once

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include "disruption-policy.h"
#include "json-util.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "quantity.h"
#include "log.h"
#include "macro.h"

#define P(buf, ...) model_pathf((buf), sizeof(buf), __VA_ARGS__)

typedef struct Ctx {
        SolverArena *a;
        const char *what; /* "Pod default/web-0" */
        char **err;
} Ctx;

typedef struct PodExtra {
        const char **claims; /* "ns/name" of persistentVolumeClaim volumes */
        size_t n_claims;
        const char *priority_class;
        bool priority_set;
} PodExtra;

int model_fail(Ctx *c, const char *path, const char *fmt, ...) _printf_(3, 4);
bool model_present(const cJSON *v);
int model_get_str(Ctx *c, const cJSON *o, const char *k, const char *path, const char **ret);
int model_get_int(Ctx *c, const cJSON *o, const char *k, const char *path, int64_t min, int64_t max,
                   bool *ret_set, int64_t *ret);
int model_want(Ctx *c, const cJSON *v, bool array, const char *path);
int model_parse_string_map(Ctx *c, const cJSON *m, const char *path, SolverLabel **ret, size_t *ret_n);
int model_parse_quantity(Ctx *c, const cJSON *v, SolverResource res, const char *path, int64_t *ret);
int model_parse_resource_map(Ctx *c, const cJSON *m, const char *path, SolverResources *ret, bool *ret_set);
int model_parse_string_list(Ctx *c, const cJSON *a, const char *path, const char ***ret, size_t *ret_n);
int model_parse_requirements(Ctx *c, const cJSON *a, const char *path, bool label_selector, bool min_values,
                              SolverRequirement **ret, size_t *ret_n);
int model_parse_term(Ctx *c, const cJSON *j, const char *path, SolverTerm *ret);
int model_parse_label_selector(Ctx *c, const cJSON *j, const char *path, SolverLabelSelector *ret);
int model_parse_taints(Ctx *c, const cJSON *a, const char *path, SolverTaint **ret, size_t *ret_n);
int model_parse_tolerations(Ctx *c, const cJSON *a, const char *path, SolverToleration **ret, size_t *ret_n);
int model_parse_pod_spec(Ctx *c, const cJSON *spec, const char *ns, const SolverLabel *labels, size_t n_labels,
                          const char *base, SolverPod *p, PodExtra *x);
int model_parse_meta(Ctx *c, const cJSON *obj, const char *base, const char **ret_name, const char **ret_ns,
                      SolverLabel **ret_labels, size_t *ret_n, bool name_required);
bool model_annotation_true(const cJSON *obj, const char *key);
int model_pod_from_json(Ctx *c, const cJSON *j, SolverPod *p, PodExtra *x);
bool model_api_group_is(const cJSON *obj, const char *group);
char *model_pathf(char *buf, size_t n, const char *fmt, ...) _printf_(3, 4);
