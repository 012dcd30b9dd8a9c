/* SPDX-License-Identifier: Apache-2.0 */
/* Static NodePools (spec.replicas) need a provisioning round with no pod pending: when one is
 * created or scaled up, or one of its nodes leaves (expired, drifted, interrupted, deleted), it
 * lacks nodes. Every few seconds while static pools exist and nothing else is under way, the
 * snapshot's nodes are counted (solver_static_missing()) and a round is asked for when one
 * lacks any; the round launches them. Scale-down is a disruption step (disruption.c). */
#include <stdlib.h>

#include "log.h"
#include "macro.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

#define STATIC_CHECK_USEC (5 * USEC_PER_SEC)

static int has_replicas(const cJSON *pool, void *userdata) {
        return jget(jget(pool, "spec"), "replicas") ? -EEXIST : 0; /* found: stop */
}

void provisioner_static_check(Provisioner *p) {
        uint64_t now = provisioner_now(p);
        if (!provisioner_acting(p) || !p->learned || p->round || p->batch_open ||
            now - p->static_checked_usec < STATIC_CHECK_USEC)
                return;
        p->static_checked_usec = now;
        if (!p->nodepools || kube_watch_foreach(p->nodepools, has_replicas, NULL) != -EEXIST)
                return;
        Round *rd = calloc(1, sizeof *rd);
        size_t pending = 0, missing = 0;
        if (!rd || solver_arena_new(&rd->arena) < 0) {
                free(rd);
                log_oom();
                return;
        }
        if (provisioner_snapshot(p, rd, &pending) >= 0)
                for (size_t k = 0; k < rd->snap.n_nodepools; k++)
                        missing += solver_static_missing(&rd->snap, k);
        provisioner_round_free(rd);
        if (missing > 0)
                provisioner_poke(p);
}
