/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The instance catalog built from live EC2 instead of the shipped file.
 *
 * catalog_ec2_build() asks EC2 for DescribeInstanceTypes (all), DescribeInstanceTypeOfferings
 * (location type availability-zone) and DescribeSpotPriceHistory (Linux/UNIX, the latest record
 * per type and zone), takes on-demand prices from a price table file
 * (data/ec2-on-demand-prices-REGION.json) and, for types the table lacks, from a fallback
 * catalog, then writes the JSON that data/gen-catalog.py writes and loads it with
 * catalog_load_json(): both paths share one loader.
 *
 * Rules, as in data/gen-catalog.py: types are sorted by name; a type is left out (and listed
 * under "skipped") when it has no zone offering, no on-demand price, or neither x86_64 nor arm64
 * among its architectures (Mac types: "x86_64_mac"/"arm64_mac"). Bare metal is kept.
 * Spot: the latest EC2 record per zone; records priced under CATALOG_EC2_SPOT_MIN_PRICE or
 * older than CATALOG_EC2_SPOT_MAX_AGE_SEC are placeholders (moto's are 0.00001 USD, dated 2006)
 * and ignored. A type with real records gets "spot_prices" (zone -> price, the type's zones
 * only) and "spot_price" = the cheapest of them (used for zones without a record); a type
 * without records gets "spot_price" = CATALOG_EC2_SPOT_FACTOR x on-demand when it supports
 * spot at all.
 *
 * Library code: it logs at debug level only and returns -errno; the caller logs once. */

#include <cjson/cJSON.h>

#include "model/catalog.h"
#include "aws/ec2.h"

#define CATALOG_EC2_SPOT_FACTOR 0.35                     /* as SPOT_FACTOR in data/gen-catalog.py */
#define CATALOG_EC2_SPOT_MIN_PRICE 0.0005                /* USD per hour */
#define CATALOG_EC2_SPOT_MAX_AGE_SEC ((int64_t) 30 * 86400)
#define CATALOG_EC2_MAX_DESCRIBED (4 * SOLVER_MAX_TYPES) /* types EC2 may describe */
#define CATALOG_EC2_MAX_ZONES 32                         /* per type, as the loader allows */
#define CATALOG_EC2_MAX_PRICE_TABLE (4u * 1024 * 1024)   /* bytes */

typedef struct CatalogEc2Stats {
        size_t described;         /* distinct types DescribeInstanceTypes returned */
        size_t kept;
        size_t skipped_arch;      /* neither x86_64 nor arm64 */
        size_t skipped_no_zone;   /* no availability-zone offering */
        size_t skipped_no_price;  /* neither the table nor the fallback has a price */
        size_t on_demand_fallback;/* on-demand price taken from the fallback catalog */
        size_t spot_from_ec2;     /* types with real spot records */
        size_t spot_estimated;    /* types given CATALOG_EC2_SPOT_FACTOR x on-demand */
        size_t spot_ignored;      /* spot records dropped as placeholders or unknown zones */
} CatalogEc2Stats;

/* error < 0 (-errno) and catalog NULL on failure; the callee owns catalog (catalog_free()). */
typedef void (*catalog_ec2_done_t)(int error, Catalog *catalog, void *userdata);

/* Starts the build. Returns < 0 when it could not start (bad arguments, an unreadable or bad
 * price table: -errno / -EBADMSG; a call EC2 client refused); done is then never called.
 * Otherwise done runs exactly once, on the loop, never from inside this call — unless the
 * Ec2Client is freed first (its calls are then cancelled and done never runs).
 * fallback (may be NULL) must stay valid until done runs; price_table_path (may be NULL) is read
 * before this returns. A failed DescribeSpotPriceHistory is not an error: every type then gets
 * the estimate. A failed DescribeInstanceTypes or DescribeInstanceTypeOfferings is. */
int catalog_ec2_build(Ec2Client *ec2, const char *region, const Catalog *fallback,
                      const char *price_table_path, catalog_ec2_done_t done, void *userdata);

/* Reads an on-demand price table ({"prices": {"TYPE": USD, ...}, ...}), at most
 * CATALOG_EC2_MAX_PRICE_TABLE bytes. ret: the whole document (cJSON_Delete()). */
int catalog_ec2_load_price_table(const char *path, cJSON **ret);

/* The pure part: the catalog JSON (data/gen-catalog.py's format) from EC2's answers.
 * prices: the table's "prices" object or NULL; spot and fallback may be NULL; now: seconds since
 * the epoch, for the age of spot records. -E2BIG past a cap (types, zones per type), -ENOMEM.
 * ret_stats may be NULL. */
int catalog_ec2_assemble(const char *region, const Ec2InstanceTypeList *types,
                         const Ec2OfferingList *offerings, const Ec2SpotPriceList *spot,
                         const cJSON *prices, const Catalog *fallback, int64_t now,
                         cJSON **ret_json, CatalogEc2Stats *ret_stats);
