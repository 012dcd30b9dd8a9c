/* SPDX-License-Identifier: Apache-2.0 */
/* Launches whose CreateFleet is not answered yet. A round whose CreateFleet calls have all gone
 * out leaves p->round ("detached") and waits for their answers apart, so that the next round
 * runs meanwhile: pods that became pending, or found no room where the scheduler put others,
 * are not held behind EC2's slowest answer (with a loaded EC2 fake, 12-30 s: bench/scaleout).
 * Karpenter's provisioner does not wait for launches either: its NodeClaims exist before their
 * instances. Here each unanswered launch is an in-flight node of the rounds that run meanwhile,
 * with the pods it was launched for on it, so that they are not planned twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "log.h"
#include "macro.h"
#include "model/catalog.h"
#include "provisioner-internal.h"
#include "solver/solver.h"

/* Calls each unanswered launch of the detached rounds with its round; stops at a negative
 * return. */
static int launching_foreach(const Provisioner *p, int (*fn)(const Round *rd, const SolverLaunch *l, void *userdata),
                             void *userdata) {
        for (const Round *rd = p->detached; rd; rd = rd->next_detached)
                for (size_t c = 0; rd->fleet_calls && c < rd->result->n_launches; c++) {
                        const FleetCall *fc = &rd->fleet_calls[c];
                        for (size_t k = 0; !fc->answered && k < fc->n_launches; k++) {
                                int r = fn(rd, &rd->result->launches[fc->launches[k]], userdata);
                                if (r < 0)
                                        return r;
                        }
                }
        return 0;
}

static int count_one(const Round *rd, const SolverLaunch *l, void *userdata) {
        (*(size_t *) userdata)++;
        return 0;
}

size_t provision_launching_count(const Provisioner *p) {
        size_t n = 0;
        (void) launching_foreach(p, count_one, &n);
        return n;
}

typedef struct Pinned {
        const char *key;  /* "namespace/uid" */
        const char *node;
} Pinned;

typedef struct Collect {
        Provisioner *p;
        SolverArena *a;
        SolverNode *out;
        size_t cap, n;
        Pinned *pinned;
        size_t n_pinned, cap_pinned;
} Collect;

static int node_one(const Round *rd, const SolverLaunch *l, void *userdata) {
        Collect *c = userdata;
        Provisioner *p = c->p;
        const SolverNodePool *pool = round_pool(rd, l->nodepool);
        size_t nt = 0;
        const SolverInstanceType *types = catalog_types(p->catalog, &nt);
        int t = catalog_find(p->catalog, rd->snap.types[l->type].name);
        const char *zone = l->zone ? l->zone : l->n_offerings > 0 ? l->offerings[0].zone : NULL;
        if (t < 0 || c->n >= c->cap)
                return 0;
        char name[32];
        snprintf(name, sizeof name, "launch/%zu", c->n);
        SolverNode *node = &c->out[c->n];
        int r = provision_inflight_node(c->a, &types[t], name, pool->name, zone, l->capacity_type, NULL, node);
        if (r < 0)
                return r;
        c->n++;
        for (size_t i = 0; i < l->n_pods; i++) {
                r = GROW(c->pinned, c->cap_pinned, c->n_pinned + 1, SIZE_MAX / sizeof *c->pinned);
                if (r < 0)
                        return r;
                c->pinned[c->n_pinned++] = (Pinned) { rd->pod_uids[l->pods[i]], node->name };
        }
        return 0;
}

static int cmp_pinned(const void *a, const void *b) {
        return strcmp(((const Pinned *) a)->key, ((const Pinned *) b)->key);
}

int provision_launching_nodes(Provisioner *p, SolverArena *a, SolverNode *out, size_t cap, size_t *ret_n,
                              SolverPod *pods, const char *const *uids, size_t n_pods) {
        Collect c = { .p = p, .a = a, .out = out, .cap = cap };
        *ret_n = 0;
        int r = launching_foreach(p, node_one, &c);
        if (r < 0) {
                free(c.pinned);
                return r;
        }
        if (c.n_pinned > 0)
                qsort(c.pinned, c.n_pinned, sizeof *c.pinned, cmp_pinned);
        for (size_t i = 0; i < n_pods && c.n_pinned > 0; i++) {
                if (pods[i].node_name)
                        continue;
                char key[512];
                snprintf(key, sizeof key, "%s/%s", strempty(pods[i].namespace_), strempty(uids[i]));
                Pinned want = { key, NULL };
                const Pinned *hit = bsearch(&want, c.pinned, c.n_pinned, sizeof *c.pinned, cmp_pinned);
                if (hit)
                        pods[i].node_name = hit->node;
        }
        free(c.pinned);
        *ret_n = c.n;
        return 0;
}

bool provision_round_detach(Provisioner *p) {
        Round *rd = p->round;
        /* a reservation's pool points into the class's looked-up reservations, which a later
         * round may look up again */
        if (!rd || rd->pool_reservation)
                return false;
        rd->detached = true;
        rd->parked = false;
        rd->next_detached = p->detached;
        p->detached = rd;
        p->round = NULL;
        log_debug("Provisioning: %zu CreateFleet answer(s) awaited apart; the next round may run.", rd->fleets_in_flight);
        /* pods the solver's budget left, or that came while this round was under way */
        if (rd->budget_cut || p->batch_open)
                provisioner_poke(p);
        return true;
}

void provision_detached_finish(Provisioner *p, Round *rd) {
        for (Round **pp = &p->detached; *pp; pp = &(*pp)->next_detached)
                if (*pp == rd) {
                        *pp = rd->next_detached;
                        break;
                }
        p->last_round_seconds = (double) (provision_now_usec(p) - rd->started_usec) / 1e6;
        histogram_observe(&p->histograms.round_seconds, p->last_round_seconds);
        bool again = rd->launched_nothing;
        provisioner_round_free(rd);
        provision_catalog_swap(p);
        /* capacity errors: solve again with those offerings left out */
        if (again)
                provisioner_poke(p);
}
