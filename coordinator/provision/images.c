/* SPDX-License-Identifier: Apache-2.0 */
/* The images EC2NodeClasses' amiSelectorTerms resolve to, looked up again every --image-refresh
 * (amiterms.c): a new release behind al2023@latest, or a newer image matching a class's name,
 * tags, id or ssmParameter terms, becomes the class's image for its launches, and the nodes that
 * boot another one drift (disruption.c compares their nodesmith.io/image-id label with it), as
 * Karpenter's drift does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"

typedef struct Lookup {
        char *node_class;
        int arch;
        bool first;   /* the class had no image of the architecture yet */
} Lookup;

const Resolved *provisioner_resolved_find(const Provisioner *p, const char *node_class) {
        for (size_t i = 0; p && node_class && i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, node_class))
                        return p->resolved[i];
        return NULL;
}

static void on_image(Provisioner *p, const Ec2Error *err, const char *what, char *value, void *userdata) {
        Lookup *l = userdata;
        Resolved *res = (Resolved *) provisioner_resolved_find(p, l->node_class);
        const char *name = isempty(l->node_class) ? "(default)" : l->node_class;
        if (err && !l->first)
                log_warning("EC2NodeClass %s: looking its image up again failed (%s): %s %s", name, what, err->code,
                            err->message);
        else if (err) /* none yet for this architecture: a class for one architecture only */
                log_debug("EC2NodeClass %s: no %s image (%s): %s %s", name, l->arch ? "arm64" : "amd64", what,
                          err->code, err->message);
        else if (res && !res->ami[l->arch] && value) {
                res->ami[l->arch] = TAKE_PTR(value); /* known before the class's first launch: drift can be told */
                res->image_checked_usec[l->arch] = provisioner_now(p);
        } else if (res && res->ami[l->arch] && value && !streq(res->ami[l->arch], value)) {
                log_notice("EC2NodeClass %s: image %s replaces %s for %s; nodes on the old one drift.", name, value,
                           res->ami[l->arch], l->arch ? "arm64" : "amd64");
                free(res->ami[l->arch]);
                res->ami[l->arch] = TAKE_PTR(value);
        }
        free(value);
        free(l->node_class);
        free(l);
}

void provisioner_images_refresh(Provisioner *p) {
        uint64_t now = provisioner_now(p), every = p->cfg.image_refresh_ms * USEC_PER_MSEC;
        if (!p->leading || every == 0)
                return;
        for (size_t i = 0; i < p->n_resolved; i++) {
                Resolved *res = p->resolved[i];
                for (int a = 0; a < 2; a++) {
                        if (res->image_checked_usec[a] && now - res->image_checked_usec[a] < every)
                                continue;
                        res->image_checked_usec[a] = now;
                        Lookup *l = calloc(1, sizeof *l);
                        if (!l || !(l->node_class = strdup(res->node_class))) {
                                free(l);
                                return;
                        }
                        l->arch = a;
                        l->first = !res->ami[a];
                        if (provision_image_resolve(p, res->node_class, a, on_image, l) < 0) {
                                free(l->node_class);
                                free(l);
                        }
                }
        }
}
