/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The instance catalog: every instance type with its capacity, labels, ENI limits and offerings
 * (zone x capacity type, price), as solver structs.
 *
 * Loaded from the JSON that data/gen-catalog.py writes (data/catalog-REGION.json) or that the
 * coordinator builds from DescribeInstanceTypes/DescribeInstanceTypeOfferings and prices.
 * Allocatable is estimated with the kubelet formulas (solver_kubelet_allocatable, 7.5 % VM
 * memory overhead) until a node of the type reports: catalog_learn() then makes the type's
 * allocatable exact, for every later snapshot. */

#include <cjson/cJSON.h>

#include "solver/solver.h"
#include "macro.h"

typedef struct Catalog Catalog;

#define CATALOG_VM_OVERHEAD_PERCENT 7.5
#define CATALOG_DEFAULT_ROOT_VOLUME ((int64_t) 20 * 1024 * 1024 * 1024) /* EC2NodeClass default */

int catalog_new(const char *region, Catalog **ret);
Catalog *catalog_free(Catalog *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(Catalog *, catalog_free);

/* Adds the catalog JSON's instance types. On bad input returns -EINVAL and, when ret_error is
 * not NULL, a message naming the type and the field (the caller frees it). */
int catalog_load_json(Catalog *c, const cJSON *root, char **ret_error);
int catalog_load_file(const char *path, Catalog **ret, char **ret_error);

const char *catalog_region(const Catalog *c);
/* The types, in the order loaded; valid until the next change to the catalog. */
const SolverInstanceType *catalog_types(const Catalog *c, size_t *ret_n);
int catalog_find(const Catalog *c, const char *name); /* index, or -ENOENT */
/* Cheapest available on-demand price of a type (any zone), or -1. */
double catalog_on_demand_price(const Catalog *c, const char *name);

/* Learned overhead: a node of this type reported what the kubelet sees (capacity) and what it
 * allocates. From now on the type's allocatable is that report, and allocatable computed for
 * other kubelet settings starts from the reported memory capacity instead of the 7.5 % guess.
 * -ENOENT for an unknown type, -EINVAL for a nonsensical report. */
int catalog_learn(Catalog *c, const char *name, const SolverResources *capacity,
                  const SolverResources *allocatable);
bool catalog_is_learned(const Catalog *c, const char *name);

/* Per-type allocatable for a NodePool whose EC2NodeClass sets kubelet options and/or a root
 * volume size (0: default): an array indexed like catalog_types(), owned by the catalog, valid
 * until the catalog changes. */
int catalog_allocatable_for(Catalog *c, const SolverKubelet *kubelet, int64_t root_volume_bytes,
                            const SolverResources **ret);
