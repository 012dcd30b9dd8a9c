/* SPDX-License-Identifier: Apache-2.0 */
/* The provisioner as the rest of the coordinator reads it (provisioner.h): where provisioning
 * stands, its watches and catalog, a round's snapshot, the instances in flight, what a class
 * resolved to. Read-only views; the state itself stays in provisioner-internal.h. */
#include <errno.h>

#include "provisioner-internal.h"

uint64_t provisioner_now(const Provisioner *p) {
        uint64_t t = 0;
        (void) sd_event_now(p->event, CLOCK_MONOTONIC, &t);
        return t;
}

bool provisioner_leading(const Provisioner *p) {
        return p && p->leading;
}

void provisioner_activity(const Provisioner *p, ProvisionerActivity *ret) {
        *ret = (ProvisionerActivity) {
                .learned = p->learned,
                .batch_open = p->batch_open,
                .round_running = p->round != NULL,
                .in_flight = p->n_inflight,
                .rounds = p->rounds,
                .leading_since_usec = p->leading_since_usec,
        };
}

const KubeWatch *provisioner_watch(const Provisioner *p, ProvisionerWatch w) {
        if (!p)
                return NULL;
        switch (w) {
        case PROVISIONER_WATCH_PODS:
                return p->pods;
        case PROVISIONER_WATCH_NODES:
                return p->nodes;
        case PROVISIONER_WATCH_NODEPOOLS:
                return p->nodepools;
        case PROVISIONER_WATCH_NODECLASSES:
                return p->nodeclasses;
        case PROVISIONER_WATCH_DAEMONSETS:
                return p->daemonsets;
        case PROVISIONER_WATCH_PDBS:
                return p->pdbs;
        default:
                return NULL;
        }
}

KubeClient *provisioner_kube(const Provisioner *p) {
        return p ? p->kube : NULL;
}

const Catalog *provisioner_catalog(const Provisioner *p) {
        return p ? p->catalog : NULL;
}

const Ec2Stats *provisioner_ec2_stats(const Provisioner *p) {
        return p ? ec2_client_stats(p->ec2) : NULL;
}

int provisioner_snapshot_take(Provisioner *p, Round **ret, size_t *ret_pending) {
        Round *rd = calloc(1, sizeof *rd);
        if (!rd || solver_arena_new(&rd->arena) < 0) {
                free(rd);
                return -ENOMEM;
        }
        int r = provisioner_snapshot(p, rd, ret_pending);
        if (r < 0) {
                provisioner_round_free(rd);
                return r;
        }
        *ret = rd;
        return 0;
}

const SolverSnapshot *provisioner_round_snapshot(const Round *rd) {
        return &rd->snap;
}

const SolverNodePool *provisioner_round_pool(const Round *rd, uint32_t k) {
        return round_pool(rd, k);
}

const NodepoolObjects *provisioner_round_objects(const Round *rd) {
        return rd->objects;
}

SolverArena *provisioner_round_arena(const Round *rd) {
        return rd->arena;
}

const SolverResult *provisioner_round_result(const Round *rd) {
        return rd->result;
}

const char *provisioner_round_pod_key(const Round *rd, size_t i) {
        return rd->pod_uids && i < rd->snap.n_pods ? rd->pod_uids[i] : NULL;
}

const InFlight *provisioner_inflight(const Provisioner *p, size_t *ret_n) {
        *ret_n = p ? p->n_inflight : 0;
        return p ? p->inflight : NULL;
}

int provisioner_class(const Provisioner *p, const char *node_class, ProvisionerClass *ret) {
        const Resolved *res = NULL;
        for (size_t i = 0; p && node_class && i < p->n_resolved; i++)
                if (streq(p->resolved[i]->node_class, node_class))
                        res = p->resolved[i];
        if (!res)
                return -ENOENT;
        *ret = (ProvisionerClass) {
                .resolved = res->resolved_usec > 0,
                .n_subnets = MIN(res->n_subnets, (size_t) PROVISIONER_MAX_SUBNETS),
                .security_groups = (const char *const *) res->sgs,
                .ami = { res->ami[0], res->ami[1] },
                .profile = res->profile,
                .reservations_known = res->reservations_usec > 0,
                .reservations_error = res->reservations_error,
                .reservations = res->reservations,
                .n_reservations = res->n_reservations,
        };
        for (size_t i = 0; i < ret->n_subnets; i++) {
                ret->subnet_ids[i] = res->subnets[i].id;
                ret->subnet_zones[i] = res->subnets[i].zone;
        }
        return 0;
}
