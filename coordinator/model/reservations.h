/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* EC2 On-Demand Capacity Reservations an EC2NodeClass selects (capacityReservationSelectorTerms),
 * as the solver plans with them, Karpenter's way: a NodePool whose capacity-type requirement
 * admits `reserved` gets, for every active reservation of its class with instances left, a
 * reservation pool placed just before it (tried first: reserved capacity is already paid for).
 * A reservation pool is the NodePool narrowed to the reservation's instance type and zone, at
 * most `available` new nodes (limits.nodes), launched as on-demand into the reservation, with
 * the labels karpenter.sh/capacity-type=reserved, karpenter.k8s.aws/capacity-reservation-id and
 * karpenter.k8s.aws/capacity-reservation-type. When the reservations are used up the NodePool's
 * own offerings (on-demand, spot) follow. Pure: no I/O. */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "solver/solver.h"

#define RESERVATION_LABEL_ID "karpenter.k8s.aws/capacity-reservation-id"
#define RESERVATION_LABEL_TYPE "karpenter.k8s.aws/capacity-reservation-type"
#define RESERVATION_CAPACITY_TYPE "reserved"
#define RESERVATION_MAX 256          /* per EC2NodeClass */
/* A reservation pool's name: "<NodePool>/<reservation id>" ('/' is never in a NodePool's name). */
#define RESERVATION_POOL_SEP '/'

typedef struct NodeReservation {
        const char *id, *owner_id, *instance_type, *zone;
        const char *match_criteria;   /* open, targeted */
        const char *reservation_type; /* default, capacity-block */
        const char *state;            /* active, expired, ... */
        int64_t end_date;             /* seconds since the epoch; 0: none */
        uint64_t available;           /* instances it can still take */
        const SolverLabel *tags;      /* its EC2 tags (offline selection only) */
        size_t n_tags;
} NodeReservation;

/* The reservations of an `aws ec2 describe-capacity-reservations` answer ({"CapacityReservations":
 * [...]} as the CLI prints it; a bare list too), into the arena; at most RESERVATION_MAX *
 * 16. A missing or mistyped field is an error naming it. */
int reservations_parse_describe(SolverArena *a, const cJSON *j, NodeReservation **ret, size_t *ret_n,
                                char **ret_error);

/* Whether capacityReservationSelectorTerms select r, as EC2 answers Karpenter's queries: an
 * active reservation, and a term whose id is r's, or whose ownerID, instanceMatchCriteria and
 * tags (value "*": the key present) all match. */
bool reservation_selected(const cJSON *terms, const NodeReservation *r);

/* Pods' capacity-type rules as Karpenter reads them once reservation pools exist (nodes in a
 * reservation are `reserved`, not `on-demand`): a pod that admits reserved but not on-demand
 * goes only where karpenter.k8s.aws/capacity-reservation-id exists (a reservation pool, a node
 * in a reservation); one that admits on-demand but not reserved only where it does not; spot
 * and both: unchanged. nodeSelector values and required terms are rewritten into required terms
 * (a term admitting spot and reserved but not on-demand splits in two, terms being ORed).
 * Returns the pods, a new array in the arena when any changed (else pods itself). */
int reservation_pods(SolverArena *a, const SolverPod *pods, size_t n, const SolverPod **ret);

/* Karpenter's price of reserved capacity: the on-demand price / 10,000,000 (near free, the order
 * of on-demand prices kept for consolidation). */
double reservation_price(double on_demand_price);
/* A node in a capacity reservation (labelled karpenter.sh/capacity-type=reserved or with a
 * karpenter.k8s.aws/capacity-reservation-id). */
bool reservation_node(const SolverNode *n);

/* Whether the reservation can take launches now (active, not past its end, a default one:
 * capacity blocks are refused, see reservation_refusal()). */
bool reservation_usable(const NodeReservation *r, int64_t now);
/* Why a reservation is not used, for status and logs (NULL: it is). */
const char *reservation_refusal(const NodeReservation *r, int64_t now);

/* Whether pool's requirements admit capacity type `reserved` (a requirement on
 * karpenter.sh/capacity-type that matches it, or none: Karpenter's default NodePool takes every
 * capacity type the class offers). */
bool reservation_pool_admits(const SolverNodePool *pool);

/* The reservations of a node class (NULL class: none); *ret_n entries. */
typedef const NodeReservation *(*reservation_lookup_t)(const char *node_class, size_t *ret_n, void *userdata);

/* pools with reservation pools inserted before the pools that admit them (in the arena). The
 * reservation pool k of the result came from pools[ret_base[k]] (ret_base may be NULL);
 * ret_reservation[k] is its reservation or NULL for a NodePool of its own. */
int reservation_pools(SolverArena *a, const SolverNodePool *pools, size_t n, reservation_lookup_t lookup,
                      void *userdata, int64_t now, SolverNodePool **ret, size_t *ret_n, size_t **ret_base,
                      const NodeReservation ***ret_reservation);
