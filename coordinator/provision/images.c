/* SPDX-License-Identifier: Apache-2.0 */
/* The images behind EC2NodeClass aliases, looked up again every --image-refresh: a new release
 * behind al2023@latest becomes the class's image for its launches, and the nodes that boot the
 * old one drift (disruption.c compares their nodesmith.io/image-id label with it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

typedef struct Lookup {
        Provisioner *p;
        char *node_class;
        int arch;
} Lookup;

const Resolved *provisioner_resolved_find(Provisioner *p, const char *node_class) {
        for (size_t i = 0; p && node_class && i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, node_class))
                        return p->resolved[i];
        return NULL;
}

static void on_image(Ec2Client *ec2, const Ec2Error *err, char *value, void *userdata) {
        Lookup *l = userdata;
        Resolved *res = (Resolved *) provisioner_resolved_find(l->p, l->node_class);
        if (err)
                log_warning("EC2NodeClass %s: looking its image up again failed: %s %s", l->node_class, err->code,
                            err->message);
        else if (res && res->ami[l->arch] && value && !streq(res->ami[l->arch], value)) {
                log_notice("EC2NodeClass %s: image %s replaces %s for %s; nodes on the old one drift.", l->node_class,
                           value, res->ami[l->arch], l->arch ? "arm64" : "amd64");
                free(res->ami[l->arch]);
                res->ami[l->arch] = TAKE_PTR(value);
        }
        free(value);
        free(l->node_class);
        free(l);
}

void provisioner_images_refresh(Provisioner *p) {
        uint64_t now = provisioner_now(p), every = p->c->cfg.image_refresh_ms * USEC_PER_MSEC;
        if (!p->leading || every == 0)
                return;
        for (size_t i = 0; i < p->n_resolved; i++) {
                Resolved *res = p->resolved[i];
                const cJSON *spec = isempty(res->node_class) ? NULL
                                                              : jget(kube_watch_get(p->nodeclasses, NULL, res->node_class), "spec");
                const char *alias = jstr(cJSON_GetArrayItem(jget(spec, "amiSelectorTerms"), 0), "alias");
                for (int a = 0; a < 2 && alias; a++) {
                        char name[256];
                        if (!res->ami[a] || now - res->image_checked_usec[a] < every ||
                            launchclass_alias_parameter(alias, p->c->cfg.kubernetes_version, a ? "arm64" : "x86_64", name,
                                                        sizeof name) < 0)
                                continue;
                        res->image_checked_usec[a] = now;
                        Lookup *l = calloc(1, sizeof *l);
                        if (!l || !(l->node_class = strdup(res->node_class))) {
                                free(l);
                                return;
                        }
                        l->p = p;
                        l->arch = a;
                        if (ec2_ssm_get_parameter(p->ec2, name, on_image, l) < 0) {
                                free(l->node_class);
                                free(l);
                        }
                }
        }
}
