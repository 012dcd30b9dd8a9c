/* SPDX-License-Identifier: Apache-2.0 */
/* A NodePool's spec.template.metadata.annotations on the nodes of the pool, as Karpenter puts
 * them there: a node lacking one, or holding another value, gets a merge patch with what its
 * pool says. Level-triggered from the Node watch; a node that has them all is left alone. */
#include <stdlib.h>

#include "kube.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

static void on_annotated(KubeResponse *resp, void *userdata) {
        char *name = userdata;
        if (resp->error < 0)
                log_warning("Cannot annotate Node %s as its NodePool says: %s", name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
        free(name);
}

void provisioner_annotate_node(Provisioner *p, const cJSON *node) {
        const cJSON *md = jget(node, "metadata");
        const char *name = jstr(md, "name");
        const char *pool = jstr(jget(md, "labels"), "nodesmith.io/nodepool");
        const cJSON *want = jget(jget(jget(jget(kube_watch_get(p->nodepools, NULL, pool ?: ""), "spec"), "template"),
                                      "metadata"),
                                 "annotations");
        const cJSON *have = jget(md, "annotations"), *a;
        if (!name || !cJSON_IsObject(want) || !provisioner_acting(p))
                return;
        cJSON *patch = cJSON_CreateObject(), *ann = NULL;
        cJSON_ArrayForEach(a, want) {
                if (!cJSON_IsString(a) || streq_ptr(jstr(have, a->string), a->valuestring))
                        continue;
                if (!ann)
                        ann = cJSON_AddObjectToObject(cJSON_AddObjectToObject(patch, "metadata"), "annotations");
                cJSON_AddStringToObject(ann, a->string, a->valuestring);
        }
        _cleanup_free_ char *body = ann ? cJSON_PrintUnformatted(patch) : NULL, *path = NULL;
        cJSON_Delete(patch);
        if (!body || kube_path("v1", NULL, "nodes", name, NULL, &path) < 0)
                return;
        char *copy = strdup(name);
        if (!copy || kube_patch(p->kube, path, KUBE_PATCH_MERGE, body, on_annotated, copy, NULL) < 0)
                free(copy);
        else
                log_info("Node %s: annotations of NodePool %s's template put on it.", name, pool);
}
