/* SPDX-License-Identifier: Apache-2.0 */
/* The instance catalog rebuilt from EC2 now and then, swapped in between rounds. */
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

/* ---- the catalog from EC2 ------------------------------------------------------------------- */

void provision_catalog_swap(Provisioner *p) {
        if (!p->next_catalog || p->round || p->detached) /* rounds point into the catalog */
                return;
        catalog_free(p->catalog);
        p->catalog = TAKE_PTR(p->next_catalog);
        size_t n;
        (void) catalog_types(p->catalog, &n);
        log_info("Instance catalog from EC2: %zu types.", n);
}

static void on_catalog_built(int error, Catalog *catalog, void *userdata) {
        Provisioner *p = userdata;
        p->catalog_building = false;
        if (error < 0 || !catalog) {
                log_warning_errno(error, "Cannot build the instance catalog from EC2 (%m); keeping %s.",
                                  p->cfg.catalog);
                catalog_free(catalog);
                return;
        }
        catalog_free(p->next_catalog);
        p->next_catalog = catalog;
        provision_catalog_swap(p);
}

/* Types, offerings and spot prices from EC2 with on-demand prices from the price table, at
 * start and every catalog-refresh; the shipped catalog stands in until then and for types EC2
 * gives no price for. */
void provision_catalog_refresh(Provisioner *p) {
        uint64_t every = p->cfg.catalog_refresh_ms * USEC_PER_MSEC;
        if (!every || p->catalog_building || !p->leading ||
            (p->catalog_built_usec && provision_now_usec(p) - p->catalog_built_usec < every))
                return;
        p->catalog_built_usec = provision_now_usec(p);
        int r = catalog_ec2_build(p->ec2, p->cfg.region, p->catalog, p->cfg.price_table,
                                  on_catalog_built, p);
        if (r < 0)
                log_warning_errno(r, "Cannot build the instance catalog from EC2 (price table %s: %m); keeping %s.",
                                  strempty(p->cfg.price_table), p->cfg.catalog);
        else
                p->catalog_building = true;
}
