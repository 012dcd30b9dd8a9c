/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl simulate --reservations: capacity reservations in an offline plan. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ctl-solver.h"
#include "macro.h"
#include "sim-reservations.h"

static const cJSON *class_terms(const NodepoolObjects *objs, const char *node_class) {
        for (size_t i = 0; node_class && i < objs->n_classes; i++)
                if (streq(objs->classes[i].name, node_class))
                        return cJSON_GetObjectItemCaseSensitive(objs->classes[i].spec, "capacityReservationSelectorTerms");
        return NULL;
}

int sim_reservations_load(const char *path, const NodepoolObjects *objs, SimReservations *rv, char **ret_error) {
        cJSON *docs = NULL;
        char *err = NULL;
        int r = ctl_solver_read_documents(path, &docs, ret_error);
        if (r < 0)
                return r;
        *rv = (SimReservations) { .objs = objs };
        if (cJSON_GetArraySize(docs) != 1) {
                cJSON_Delete(docs);
                if (asprintf(ret_error, "%s: expected one document, the answer of `aws ec2 describe-capacity-reservations`",
                             path) < 0)
                        *ret_error = NULL;
                return -EINVAL;
        }
        r = reservations_parse_describe(objs->arena, cJSON_GetArrayItem(docs, 0), &rv->all, &rv->n_all, &err);
        cJSON_Delete(docs);
        if (r < 0 && asprintf(ret_error, "%s: %s", path, err ? err : strerror(-r)) < 0)
                *ret_error = NULL;
        free(err);
        return r;
}

void sim_reservations_warn_unused(const NodepoolObjects *objs) {
        for (size_t i = 0; i < objs->n_classes; i++)
                if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(objs->classes[i].spec,
                                                                        "capacityReservationSelectorTerms")) > 0)
                        fprintf(stderr, "nodesmithctl simulate: EC2NodeClass %s selects capacity reservations; planned "
                                        "without them (pass --reservations FILE, the answer of `aws ec2 "
                                        "describe-capacity-reservations`)\n", objs->classes[i].name);
}

/* The class's reservations: those its terms select (in the arena, asked once per pool). */
static const NodeReservation *lookup(const char *node_class, size_t *ret_n, void *userdata) {
        SimReservations *rv = userdata;
        const cJSON *terms = class_terms(rv->objs, node_class);
        NodeReservation *sel = terms ? solver_arena_alloc(rv->objs->arena, (rv->n_all + 1) * sizeof *sel) : NULL;
        size_t n = 0;
        for (size_t i = 0; sel && i < rv->n_all; i++)
                if (reservation_selected(terms, &rv->all[i]))
                        sel[n++] = rv->all[i];
        *ret_n = n;
        return n ? sel : NULL;
}

int sim_reservations_apply(SimReservations *rv, SolverSnapshot *snap) {
        SolverNodePool *pools;
        size_t n;
        rv->pools = snap->nodepools;
        int r = reservation_pools(rv->objs->arena, snap->nodepools, snap->n_nodepools, lookup, rv, (int64_t) time(NULL),
                                  &pools, &n, &rv->base, &rv->which);
        if (r < 0)
                return r;
        snap->nodepools = pools;
        snap->n_nodepools = n;
        return rv->which && n > rv->objs->n_pools ? reservation_pods(rv->objs->arena, snap->pods, snap->n_pods, &snap->pods)
                                                  : 0;
}

const NodeReservation *sim_launch_reservation(const SimReservations *rv, const SolverLaunch *l) {
        return rv && rv->which ? rv->which[l->nodepool] : NULL;
}

const char *sim_launch_pool(const SimReservations *rv, const SolverSnapshot *snap, const SolverLaunch *l) {
        return rv && rv->base ? rv->pools[rv->base[l->nodepool]].name : snap->nodepools[l->nodepool].name;
}

const char *sim_launch_capacity_type(const SimReservations *rv, const SolverLaunch *l, SolverCapacityType ct) {
        return sim_launch_reservation(rv, l) ? RESERVATION_CAPACITY_TYPE : solver_capacity_type_to_name(ct);
}

double sim_launch_price(const SimReservations *rv, const SolverLaunch *l, double price) {
        return sim_launch_reservation(rv, l) ? reservation_price(price) : price;
}

double sim_total_price(const SimReservations *rv, const SolverResult *res) {
        double t = 0;
        for (size_t i = 0; i < res->n_launches; i++)
                t += sim_launch_price(rv, &res->launches[i], res->launches[i].price);
        return t;
}
