/* SPDX-License-Identifier: Apache-2.0 */
/* Nodes as solver nodes: labels, taints, allocatable. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "disruption-policy.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "parse-internal.h"
#include "quantity.h"

int nodepool_parse_node(SolverArena *a, const cJSON *j, SolverNode *n, char **ret_error) {
        char what[300];
        const cJSON *nm = json_get(json_get(j, "metadata"), "name");
        snprintf(what, sizeof(what), "Node %s", cJSON_IsString(nm) ? nm->valuestring : "?");
        Ctx c = { a, what, ret_error };
        *n = (SolverNode) { .capacity_type = SOLVER_CAPACITY_ON_DEMAND };
        SolverLabel *labels;
        int r = model_parse_meta(&c, j, "", &n->name, NULL, &labels, &n->n_labels, true);
        if (r < 0)
                return r;
        n->labels = labels;
        for (size_t i = 0; i < n->n_labels; i++) {
                const char *k = solver_canonical_label_key(labels[i].key);
                if (streq(k, SOLVER_LABEL_NODEPOOL))
                        n->nodepool = labels[i].value;
                else if (streq(k, SOLVER_LABEL_INSTANCE_TYPE))
                        n->instance_type = labels[i].value;
                else if (streq(k, SOLVER_LABEL_ZONE))
                        n->zone = labels[i].value;
                else if (streq(k, SOLVER_LABEL_CAPACITY_TYPE) && streq(labels[i].value, "spot"))
                        n->capacity_type = SOLVER_CAPACITY_SPOT;
        }
        const cJSON *spec = json_get(j, "spec");
        r = model_want(&c, spec, false, "spec");
        if (r < 0)
                return r;
        SolverTaint *t;
        r = model_parse_taints(&c, json_get(spec, "taints"), "spec.taints", &t, &n->n_taints);
        if (r < 0)
                return r;
        n->taints = t;
        n->unschedulable = cJSON_IsTrue(json_get(spec, "unschedulable"));
        n->deleting = model_present(json_get(json_get(j, "metadata"), "deletionTimestamp"));
        n->in_flight = model_annotation_true(j, "nodesmith.io/in-flight");
        const cJSON *status = json_get(j, "status");
        const cJSON *alloc = json_get(status, "allocatable");
        const char *which = "status.allocatable";
        if (!model_present(alloc)) {
                alloc = json_get(status, "capacity");
                which = "status.capacity";
        }
        if (!model_present(alloc))
                return model_fail(&c, "status.allocatable", "is required");
        r = model_parse_resource_map(&c, alloc, which, &n->allocatable, NULL);
        if (r < 0)
                return r;
        if (n->allocatable.v[SOLVER_RES_PODS] == 0)
                n->allocatable.v[SOLVER_RES_PODS] = 110;
        return 0;
}
