/* SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "nodebind.h"

const char *node_provider_instance(const cJSON *node) {
        const char *pid = json_str(json_get(node, "spec"), "providerID");
        const char *slash = pid ? strrchr(pid, '/') : NULL;
        return slash && slash[1] == 'i' ? slash + 1 : NULL;
}

static const char *claimed_name(const NodeEntry *e) {
        return e && e->state && e->state->identity && !isempty(e->state->identity->node_name)
                       ? e->state->identity->node_name
                       : NULL;
}

const char *node_bound_name(const KubeWatch *nodes, const NodeEntry *e) {
        const char *name = claimed_name(e);
        const cJSON *node = nodes && name ? kube_watch_get(nodes, NULL, name) : NULL;
        return node && streq_ptr(node_provider_instance(node), e->instance_id) ? name : NULL;
}

typedef struct ByInstance {
        const char *instance_id;
        const cJSON *node;
} ByInstance;

static int match_instance(const cJSON *node, void *userdata) {
        ByInstance *k = userdata;
        if (!streq_ptr(node_provider_instance(node), k->instance_id))
                return 0;
        k->node = node;
        return -EEXIST; /* found: stop */
}

const cJSON *node_of_instance(const KubeWatch *nodes, const char *instance_id) {
        ByInstance k = { .instance_id = instance_id };
        (void) kube_watch_foreach(nodes, match_instance, &k);
        return k.node;
}

int node_binding_check(const KubeWatch *nodes, const char *instance_id, const char *name, const char **ret_why) {
        if (!nodes || !kube_watch_synced(nodes) || isempty(name))
                return 0;
        const cJSON *node = kube_watch_get(nodes, NULL, name);
        if (node) {
                if (streq_ptr(node_provider_instance(node), instance_id))
                        return 0;
                *ret_why = "node_name names a Node whose providerID is not this instance";
                return -EPERM;
        }
        if (node_of_instance(nodes, instance_id)) {
                *ret_why = "node_name is not the name of this instance's Node";
                return -EPERM;
        }
        return 0; /* the Node has not registered yet */
}
