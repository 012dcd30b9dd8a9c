/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The pure rules of disruption, apart from the coordinator's state: NodePool budgets (count or
 * percentage, cron schedule with a duration, reasons), drift hashes. */

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef enum DisruptionReason {
        DISRUPTION_EMPTY,
        DISRUPTION_DRIFTED,
        DISRUPTION_UNDERUTILIZED,
        _DISRUPTION_REASON_MAX,
} DisruptionReason;

/* "Empty", "Drifted", "Underutilized": the names budgets' reasons use. */
const char *disruption_reason_to_name(DisruptionReason r);

/* A cron schedule as Karpenter's budgets take it: five fields (minute hour day-of-month month
 * day-of-week; numbers, names, '*', ranges, lists, steps) or @yearly, @annually, @monthly,
 * @weekly, @daily, @midnight, @hourly. UTC. 0 or -EINVAL. */
int disruption_cron_valid(const char *spec);
/* Does the schedule fire in the minute that holds t? */
bool disruption_cron_matches(const char *spec, time_t t);
/* Is a window of duration_s that opens each time the schedule fires open at now? */
bool disruption_cron_active(const char *spec, int64_t duration_s, time_t now);

/* How many of a pool's nodes may be disrupting at once for reason r now: the smallest of the
 * pool's budgets that apply to r (no reasons: all of them) and are active (no schedule: always);
 * "N" or "P%" of pool_nodes, rounded up. No budgets: 10 %. Budgets that are all inactive: no
 * limit from them (SIZE_MAX). */
size_t disruption_budget(const cJSON *budgets, DisruptionReason r, size_t pool_nodes, time_t now);

/* A Kubernetes label selector (matchLabels, matchExpressions In / NotIn / Exists /
 * DoesNotExist) against a pod's labels: an empty selector matches every pod, a missing one none
 * (policy/v1 PodDisruptionBudget semantics). */
typedef struct SolverLabel SolverLabel;
bool disruption_selector_matches(const cJSON *selector, const SolverLabel *labels, size_t n);

/* A short, stable hash (16 hex digits) of obj with the members named in skip (NULL-terminated,
 * top level only) left out: object members in sorted order, so the same content always gives
 * the same hash however it was written. */
void disruption_hash(const cJSON *obj, const char *const *skip, char out[17]);
/* The labels a node is launched with so that drift can be told later: nodesmith.io/nodepool-hash
 * (the NodePool's spec.template but its requirements, expireAfter and terminationGracePeriod) and
 * nodesmith.io/nodeclass-hash ("v2." and the hash of the EC2NodeClass's spec without its selector
 * terms, with its effective AMI family; see disruption_class_hash). NULL objects give no label
 * (out empty). A class hash of another version (an older coordinator's) is not compared: the
 * node drifts then only by what the class resolves to. */
#define DISRUPTION_LABEL_POOL_HASH "nodesmith.io/nodepool-hash"
#define DISRUPTION_LABEL_CLASS_HASH "nodesmith.io/nodeclass-hash"
#define DISRUPTION_LABEL_IMAGE "nodesmith.io/image-id"  /* the image it boots */
void disruption_pool_hash(const cJSON *nodepool, char out[17]);
#define DISRUPTION_CLASS_HASH_VERSION "v2"
#define DISRUPTION_CLASS_HASH_SIZE 20
void disruption_class_hash(const cJSON *nodeclass, char out[DISRUPTION_CLASS_HASH_SIZE]);
/* Whether a node's class hash label is of this version (comparable with disruption_class_hash). */
bool disruption_class_hash_current(const char *label);
