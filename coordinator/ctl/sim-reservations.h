/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl simulate --reservations FILE: plans with the capacity reservations of an
 * `aws ec2 describe-capacity-reservations` answer, each EC2NodeClass taking those its
 * capacityReservationSelectorTerms select (model/reservations.h), as the coordinator does. */
#pragma once

#include "model/nodepool.h"
#include "model/reservations.h"
#include "solver/solver.h"

typedef struct SimReservations {
        const NodepoolObjects *objs;
        NodeReservation *all;                /* the file's */
        size_t n_all;
        const SolverNodePool *pools;         /* objs->pools: the NodePools before reservation pools */
        size_t *base;                        /* per snapshot pool: its NodePool (NULL: none added) */
        const NodeReservation **which;       /* per snapshot pool: its reservation or NULL */
} SimReservations;

/* Reads path into rv (strings in the objects' arena); the message names the file. */
int sim_reservations_load(const char *path, const NodepoolObjects *objs, SimReservations *rv, char **ret_error);
/* Classes that select reservations when no file was given: a warning each on stderr. */
void sim_reservations_warn_unused(const NodepoolObjects *objs);
/* The snapshot's pools with reservation pools (snap->nodepools replaced, in the arena). */
int sim_reservations_apply(SimReservations *rv, SolverSnapshot *snap);

/* The NodePool launch l is for, its reservation (NULL: none), its capacity type's name and the
 * hourly price as Karpenter counts it (reserved capacity near free). rv may be NULL. */
const char *sim_launch_pool(const SimReservations *rv, const SolverSnapshot *snap, const SolverLaunch *l);
const NodeReservation *sim_launch_reservation(const SimReservations *rv, const SolverLaunch *l);
const char *sim_launch_capacity_type(const SimReservations *rv, const SolverLaunch *l, SolverCapacityType ct);
double sim_launch_price(const SimReservations *rv, const SolverLaunch *l, double price);
double sim_total_price(const SimReservations *rv, const SolverResult *res);
