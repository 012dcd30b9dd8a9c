/* SPDX-License-Identifier: Apache-2.0 */
/* The churn guard's record on the Node (churn.h). The in-memory record the disruption pass keeps
 * for the instances it launched as replacements is written onto their Nodes as they appear; a
 * coordinator that did not launch them (restarted, or a new leader) reads it from there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "churn.h"
#include "json-util.h"
#include "kube.h"
#include "log.h"
#include "macro.h"
#include "timestamp.h"

static void on_annotated(KubeResponse *resp, void *userdata) {
        char *name = userdata;
        if (resp->error < 0)
                log_warning("Cannot record the churn guard on Node %s: %s", name,
                            resp->has_status ? resp->status.message : strerror(-resp->error));
        free(name);
}

static const char *annotation_of(Provisioner *p, const char *node) {
        const cJSON *obj = node ? kube_watch_get(provisioner_watch(p, PROVISIONER_WATCH_NODES), NULL, node) : NULL;
        return json_str(json_get(json_get(obj, "metadata"), "annotations"), CHURN_ANNOTATION);
}

void churn_annotate(Provisioner *p, const char *node, int64_t launched_unix_usec) {
        if (!node || !kube_watch_get(provisioner_watch(p, PROVISIONER_WATCH_NODES), NULL, node) || !provisioner_acting(p))
                return;
        time_t t = (time_t) (launched_unix_usec / 1000000);
        struct tm tm;
        char when[32];
        if (!gmtime_r(&t, &tm) || strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
                return;
        if (streq_ptr(annotation_of(p, node), when))
                return;
        char body[160];
        snprintf(body, sizeof body, "{\"metadata\":{\"annotations\":{\"" CHURN_ANNOTATION "\":\"%s\"}}}", when);
        _cleanup_free_ char *path = NULL;
        if (kube_path("v1", NULL, "nodes", node, NULL, &path) < 0)
                return;
        char *copy = strdup(node);
        if (!copy || kube_patch(provisioner_kube(p), path, KUBE_PATCH_MERGE, body, on_annotated, copy, NULL) < 0)
                free(copy);
        else
                log_debug("Node %s: launched as a replacement at %s (churn guard recorded).", node, when);
}

int churn_annotated(Provisioner *p, const char *node, int64_t *ret_unix_usec) {
        const char *v = annotation_of(p, node);
        if (!v)
                return -ENOENT;
        return timestamp_parse_rfc3339(v, 0, ret_unix_usec);
}
