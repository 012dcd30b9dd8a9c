/* SPDX-License-Identifier: Apache-2.0 */
/* Batching: pending pods open a batch (1 s idle, 10 s at most) whose end starts a round. */
#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agents/nodebind.h"
#include "agents/proxydrain.h"
#include "aws/aws-credentials.h"
#include "aws/ec2.h"
#include "aws/instanceprofile.h"
#include "catalog-ec2.h"
#include "fileio.h"
#include "http.h"
#include "kube.h"
#include "launchclass.h"
#include "log.h"
#include "macro.h"
#include "model/catalog.h"
#include "model/nodepool.h"
#include "model/userdata.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* ---- batching ----------------------------------------------------------------------------- */


void provision_batch_close(Provisioner *p) {
        p->batch_open = false;
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_OFF);
}

int provision_on_batch_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Provisioner *p = userdata;
        if (p->round)
                return 0; /* the batch stays open: the round under way pokes it when it ends */
        provision_batch_close(p);
        provision_round_start(p);
        return 0;
}

/* A pod needs capacity: open a batch, or keep the open one waiting for more (1 s idle, 10 s
 * at most). */
void provisioner_poke(Provisioner *p) {
        uint64_t now = provision_now_usec(p);
        if (!p->batch_open) {
                p->batch_open = true;
                (void) sd_event_source_set_time(p->batch_max, now + p->cfg.batch_max_ms * USEC_PER_MSEC);
                (void) sd_event_source_set_enabled(p->batch_max, SD_EVENT_ONESHOT);
        }
        (void) sd_event_source_set_time(p->batch_idle, now + p->cfg.batch_idle_ms * USEC_PER_MSEC);
        (void) sd_event_source_set_enabled(p->batch_idle, SD_EVENT_ONESHOT);
}

void provision_on_pod_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        if ((ev->type == KUBE_WATCH_ADDED || ev->type == KUBE_WATCH_MODIFIED) && pod_unschedulable(ev->object))
                provisioner_poke(p);
        if (ev->type == KUBE_WATCH_SYNCED && p->pending_unschedulable == 0)
                provisioner_poke(p); /* look once at what was pending before we started */
}

void provision_on_other_event(KubeWatch *w, const KubeWatchEvent *ev, void *userdata) {
        Provisioner *p = userdata;
        /* a changed EC2NodeClass (AMI, security groups...) is resolved again before the next launch,
         * and what its terms select now is looked up at the next housekeeping tick rather than at
         * the next --image-refresh: nodes drift by what the terms select, not by their text */
        if (w == p->nodeclasses && ev->type == KUBE_WATCH_MODIFIED &&
            !cJSON_Compare(jget(ev->object, "spec"), jget(ev->old, "spec"), true)) { /* not a status write */
                const char *name = jstr(jget(ev->object, "metadata"), "name");
                for (size_t i = 0; name && i < p->n_resolved; i++)
                        if (streq(p->resolved[i]->node_class, name)) {
                                Resolved *res = p->resolved[i];
                                res->resolved_usec = 0;
                                res->image_checked_usec[0] = res->image_checked_usec[1] = 0;
                                res->reservations_usec = 0;
                                p->networks_checked_usec = 0;
                        }
        }
        /* a new NodePool may make pending pods schedulable; a Node may register */
        if (ev->type == KUBE_WATCH_ADDED && w != p->nodes)
                provisioner_poke(p);
}
