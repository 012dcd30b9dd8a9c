/* SPDX-License-Identifier: Apache-2.0 */

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog-ec2.h"
#include "log.h"
#include "macro.h"

/* ---- price table ------------------------------------------------------------------------- */

int catalog_ec2_load_price_table(const char *path, cJSON **ret) {
        _cleanup_free_ char *text = NULL;
        size_t n = 0;

        if (isempty(path) || !ret)
                return -EINVAL;
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        text = malloc(CATALOG_EC2_MAX_PRICE_TABLE + 1);
        if (!text) {
                fclose(f);
                return -ENOMEM;
        }
        n = fread(text, 1, CATALOG_EC2_MAX_PRICE_TABLE + 1, f);
        bool err = ferror(f);
        fclose(f);
        if (err)
                return -EIO;
        if (n > CATALOG_EC2_MAX_PRICE_TABLE)
                return -EFBIG;
        cJSON *doc = cJSON_ParseWithLength(text, n);
        if (!doc)
                return -EBADMSG;
        if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "prices"))) {
                cJSON_Delete(doc);
                return -EBADMSG;
        }
        *ret = doc;
        return 0;
}

/* ---- assembly ---------------------------------------------------------------------------- */

static int type_cmp(const void *a, const void *b) {
        const Ec2InstanceType *x = *(const Ec2InstanceType *const *) a, *y = *(const Ec2InstanceType *const *) b;
        return strcmp(x->name, y->name);
}

static int offering_cmp(const void *a, const void *b) {
        const Ec2Offering *x = *(const Ec2Offering *const *) a, *y = *(const Ec2Offering *const *) b;
        int c = strcmp(x->instance_type, y->instance_type);
        return c ? c : strcmp(x->zone, y->zone);
}

static int spot_cmp(const void *a, const void *b) {
        const Ec2SpotPrice *x = *(const Ec2SpotPrice *const *) a, *y = *(const Ec2SpotPrice *const *) b;
        int c = strcmp(x->instance_type, y->instance_type);
        if (c == 0)
                c = strcmp(x->zone, y->zone);
        if (c == 0) /* newest first within a pool */
                c = (x->timestamp < y->timestamp) - (x->timestamp > y->timestamp);
        return c;
}

/* First index in [0, n) whose type name is >= name; get() reads an element's type name. */
static size_t lower_bound(const void *const *v, size_t n, const char *name, const char *(*get)(const void *)) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(get(v[mid]), name) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

static const char *offering_type(const void *p) {
        return ((const Ec2Offering *) p)->instance_type;
}

static const char *spot_type(const void *p) {
        return ((const Ec2SpotPrice *) p)->instance_type;
}

static const char *arch_of(const Ec2InstanceType *t) {
        /* gen-catalog.py: the first supported architecture that maps to amd64 or arm64 */
        for (size_t i = 0; t->architectures && t->architectures[i]; i++) {
                if (streq(t->architectures[i], "x86_64"))
                        return "amd64";
                if (streq(t->architectures[i], "arm64"))
                        return "arm64";
        }
        return NULL;
}

static double table_price(const cJSON *prices, const char *name) {
        const cJSON *v = prices ? cJSON_GetObjectItemCaseSensitive(prices, name) : NULL;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0)
                return -1;
        return v->valuedouble;
}

static char *lowercase(const char *s) {
        char *r = strdup(strempty(s));
        for (char *p = r; p && *p; p++)
                *p = (char) tolower((unsigned char) *p);
        return r;
}

static const char *fallback_label(const SolverInstanceType *t, const char *key) {
        for (size_t i = 0; t && i < t->n_labels; i++)
                if (streq(t->labels[i].key, key))
                        return t->labels[i].value;
        return NULL;
}

/* Fields DescribeInstanceTypes carries but coordinator/aws/ec2.c does not parse (CPU manufacturer,
 * encryption in transit, baseline bandwidth, NVMe, Neuron devices): from the fallback's type. */
static bool add_fallback_fields(cJSON *e, const SolverInstanceType *ft) {
        const char *s;
        bool ok = true;
        if (!ft)
                return true;
        if ((s = fallback_label(ft, "nodesmith.io/instance-cpu-manufacturer")))
                ok = ok && cJSON_AddStringToObject(e, "cpu_manufacturer", s);
        if ((s = fallback_label(ft, "nodesmith.io/instance-encryption-in-transit-supported")))
                ok = ok && cJSON_AddBoolToObject(e, "encryption_in_transit", streq(s, "true"));
        if ((s = fallback_label(ft, "nodesmith.io/instance-network-bandwidth")))
                ok = ok && cJSON_AddNumberToObject(e, "network_bandwidth_mbps", strtod(s, NULL));
        if ((s = fallback_label(ft, "nodesmith.io/instance-local-nvme")))
                ok = ok && cJSON_AddNumberToObject(e, "local_nvme_gib", strtod(s, NULL));
        if ((s = fallback_label(ft, "nodesmith.io/instance-cpu-sustained-clock-speed-mhz")))
                ok = ok && cJSON_AddNumberToObject(e, "sustained_clock_mhz", strtod(s, NULL));
        if ((s = fallback_label(ft, "nodesmith.io/instance-ebs-bandwidth")))
                ok = ok && cJSON_AddNumberToObject(e, "ebs_bandwidth_mbps", strtod(s, NULL));
        if ((s = fallback_label(ft, "nodesmith.io/instance-accelerator-count")))
                ok = ok && cJSON_AddNumberToObject(e, "accelerator_count", strtod(s, NULL));
        if ((s = fallback_label(ft, "nodesmith.io/instance-accelerator-name")))
                ok = ok && cJSON_AddStringToObject(e, "accelerator_name", s);
        if ((s = fallback_label(ft, "nodesmith.io/instance-accelerator-manufacturer")))
                ok = ok && cJSON_AddStringToObject(e, "accelerator_manufacturer", s);
        if (ft->capacity.v[SOLVER_RES_NEURON] > 0)
                ok = ok && cJSON_AddNumberToObject(e, "neuron_count", (double) ft->capacity.v[SOLVER_RES_NEURON]);
        return ok;
}

static bool add_gpus(cJSON *e, const Ec2InstanceType *t) {
        if (t->n_gpus == 0)
                return true;
        unsigned count = 0;
        for (size_t i = 0; i < t->n_gpus; i++)
                count += t->gpus[i].count;
        _cleanup_free_ char *name = lowercase(t->gpus[0].name), *man = lowercase(t->gpus[0].manufacturer);
        return name && man && cJSON_AddNumberToObject(e, "gpu_count", count) &&
               cJSON_AddStringToObject(e, "gpu_name", name) && cJSON_AddStringToObject(e, "gpu_manufacturer", man) &&
               cJSON_AddNumberToObject(e, "gpu_memory_mib", (double) t->gpus[0].memory_mib);
}

static bool has_string(const cJSON *array, const char *s) {
        const cJSON *i;
        cJSON_ArrayForEach(i, array)
                if (cJSON_IsString(i) && streq(i->valuestring, s))
                        return true;
        return false;
}

static int str_cmp(const void *a, const void *b) {
        return strcmp(*(const char *const *) a, *(const char *const *) b);
}

int catalog_ec2_assemble(const char *region, const Ec2InstanceTypeList *types,
                         const Ec2OfferingList *offerings, const Ec2SpotPriceList *spot,
                         const cJSON *prices, const Catalog *fallback, int64_t now,
                         cJSON **ret_json, CatalogEc2Stats *ret_stats) {
        _cleanup_free_ const Ec2InstanceType **tv = NULL;
        _cleanup_free_ const Ec2Offering **ov = NULL;
        _cleanup_free_ const Ec2SpotPrice **sv = NULL;
        _cleanup_free_ const char **zv = NULL;
        _cleanup_free_ bool *used = NULL; /* offerings of kept types */
        CatalogEc2Stats st = {};
        size_t nt = types ? types->n : 0, no = offerings ? offerings->n : 0, ns = spot ? spot->n : 0;

        if (isempty(region) || !ret_json)
                return -EINVAL;
        if (nt > CATALOG_EC2_MAX_DESCRIBED)
                return -E2BIG;
        tv = calloc(nt + 1, sizeof *tv);
        ov = calloc(no + 1, sizeof *ov);
        sv = calloc(ns + 1, sizeof *sv);
        zv = calloc(no + 1, sizeof *zv);
        used = calloc(no + 1, sizeof *used);
        if (!tv || !ov || !sv || !zv || !used)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < nt; i++)
                if (!isempty(types->items[i].name))
                        tv[k++] = &types->items[i];
        nt = k;
        k = 0;
        for (size_t i = 0; i < no; i++)
                if (!isempty(offerings->items[i].instance_type) && !isempty(offerings->items[i].zone))
                        ov[k++] = &offerings->items[i];
        no = k;
        k = 0;
        for (size_t i = 0; i < ns; i++) {
                const Ec2SpotPrice *p = &spot->items[i];
                if (isempty(p->instance_type) || isempty(p->zone) || !isfinite(p->price) ||
                    p->price < CATALOG_EC2_SPOT_MIN_PRICE || now - p->timestamp > CATALOG_EC2_SPOT_MAX_AGE_SEC) {
                        st.spot_ignored++;
                        continue;
                }
                sv[k++] = p;
        }
        ns = k;
        qsort(tv, nt, sizeof *tv, type_cmp);
        qsort(ov, no, sizeof *ov, offering_cmp);
        qsort(sv, ns, sizeof *sv, spot_cmp);

        cJSON *doc = cJSON_CreateObject();
        if (!doc)
                return -ENOMEM;
        cJSON *sources = cJSON_AddObjectToObject(doc, "sources");
        cJSON *all_zones = cJSON_CreateArray(), *skipped = cJSON_CreateArray(), *entries = cJSON_CreateArray();
        bool ok = cJSON_AddStringToObject(doc, "region", region) &&
                  cJSON_AddStringToObject(doc, "generated_by", "coordinator/provision/catalog-ec2.c") && sources &&
                  all_zones && skipped && entries;
        if (ok)
                ok = cJSON_AddItemToObject(doc, "zones", all_zones);
        else
                cJSON_Delete(all_zones);
        if (ok)
                ok = cJSON_AddItemToObject(doc, "skipped", skipped);
        else
                cJSON_Delete(skipped);
        if (ok)
                ok = cJSON_AddItemToObject(doc, "instance_types", entries);
        else
                cJSON_Delete(entries);
        int r = ok ? 0 : -ENOMEM;

        for (size_t i = 0; r >= 0 && i < nt; i++) {
                const Ec2InstanceType *t = tv[i];
                if (i > 0 && streq(tv[i - 1]->name, t->name))
                        continue; /* described twice: the loader refuses duplicates */
                st.described++;

                /* zones: offerings of this type, sorted and unique */
                size_t o0 = lower_bound((const void *const *) ov, no, t->name, offering_type), o1 = o0;
                size_t nz = 0;
                for (; o1 < no && streq(ov[o1]->instance_type, t->name); o1++)
                        if (o1 == o0 || !streq(ov[o1 - 1]->zone, ov[o1]->zone))
                                nz++;
                if (nz > CATALOG_EC2_MAX_ZONES) {
                        log_debug("catalog-ec2: %s is offered in %zu zones, more than %d", t->name, nz,
                                  CATALOG_EC2_MAX_ZONES);
                        r = -E2BIG;
                        break;
                }
                int fi = fallback ? catalog_find(fallback, t->name) : -ENOENT;
                size_t nft = 0;
                const SolverInstanceType *ft = fi >= 0 ? &catalog_types(fallback, &nft)[fi] : NULL;
                double od = table_price(prices, t->name);
                if (od < 0 && fallback) {
                        od = catalog_on_demand_price(fallback, t->name);
                        if (od > 0)
                                st.on_demand_fallback++;
                }
                const char *arch = arch_of(t);
                /* gen-catalog.py's order: price and zones first, then the architecture */
                if (od <= 0 || nz == 0 || !arch) {
                        if (od <= 0)
                                st.skipped_no_price++;
                        else if (nz == 0)
                                st.skipped_no_zone++;
                        else
                                st.skipped_arch++;
                        if (!cJSON_AddItemToArray(skipped, cJSON_CreateString(t->name)))
                                r = -ENOMEM;
                        continue;
                }
                if (st.kept >= SOLVER_MAX_TYPES) {
                        r = -E2BIG;
                        break;
                }

                cJSON *e = cJSON_CreateObject();
                if (!e || !cJSON_AddItemToArray(entries, e)) {
                        cJSON_Delete(e);
                        r = -ENOMEM;
                        break;
                }
                ok = cJSON_AddStringToObject(e, "name", t->name) && cJSON_AddStringToObject(e, "arch", arch) &&
                     cJSON_AddNumberToObject(e, "vcpu", t->vcpus) &&
                     cJSON_AddNumberToObject(e, "memory_mib", (double) t->memory_mib) &&
                     cJSON_AddNumberToObject(e, "enis", t->max_enis) &&
                     cJSON_AddNumberToObject(e, "ipv4_per_eni", t->ipv4_per_eni) &&
                     cJSON_AddStringToObject(e, "hypervisor", strempty(t->hypervisor)) &&
                     cJSON_AddBoolToObject(e, "bare_metal", t->bare_metal) &&
                     cJSON_AddBoolToObject(e, "current_generation", t->current_generation) &&
                     add_fallback_fields(e, ft) && add_gpus(e, t) &&
                     cJSON_AddNumberToObject(e, "on_demand_price", od);
                cJSON *zones = ok ? cJSON_AddArrayToObject(e, "zones") : NULL;
                for (size_t o = o0; zones && o < o1; o++)
                        if (o == o0 || !streq(ov[o - 1]->zone, ov[o]->zone)) {
                                ok = ok && cJSON_AddItemToArray(zones, cJSON_CreateString(ov[o]->zone));
                                used[o] = true;
                        }
                if (!ok || !zones) {
                        r = -ENOMEM;
                        break;
                }

                /* spot: the latest record per zone (sorted newest first), offered zones only */
                cJSON *sp = cJSON_CreateObject();
                double cheapest = -1;
                size_t s0 = lower_bound((const void *const *) sv, ns, t->name, spot_type);
                for (size_t s = s0; sp && s < ns && streq(sv[s]->instance_type, t->name); s++) {
                        if (s > s0 && streq(sv[s - 1]->zone, sv[s]->zone))
                                continue;
                        if (!has_string(zones, sv[s]->zone)) {
                                st.spot_ignored++;
                                continue;
                        }
                        if (!cJSON_AddNumberToObject(sp, sv[s]->zone, sv[s]->price))
                                ok = false;
                        if (cheapest < 0 || sv[s]->price < cheapest)
                                cheapest = sv[s]->price;
                }
                if (!sp || !ok) {
                        cJSON_Delete(sp);
                        r = -ENOMEM;
                        break;
                }
                if (cheapest > 0) {
                        st.spot_from_ec2++;
                        ok = cJSON_AddNumberToObject(e, "spot_price", cheapest) &&
                             cJSON_AddItemToObject(e, "spot_prices", sp);
                        if (!ok)
                                cJSON_Delete(sp);
                } else {
                        cJSON_Delete(sp);
                        if (t->spot_supported) {
                                st.spot_estimated++;
                                ok = cJSON_AddNumberToObject(e, "spot_price",
                                                             round(od * CATALOG_EC2_SPOT_FACTOR * 1e6) / 1e6);
                        }
                }
                if (!ok) {
                        r = -ENOMEM;
                        break;
                }
                st.kept++;
        }

        if (r >= 0) { /* every zone of a kept type, sorted, once */
                size_t nzv = 0;
                for (size_t o = 0; o < no; o++)
                        if (used[o])
                                zv[nzv++] = ov[o]->zone;
                qsort(zv, nzv, sizeof *zv, str_cmp);
                for (size_t z = 0; r >= 0 && z < nzv; z++)
                        if ((z == 0 || !streq(zv[z - 1], zv[z])) &&
                            !cJSON_AddItemToArray(all_zones, cJSON_CreateString(zv[z])))
                                r = -ENOMEM;
        }
        if (r >= 0) {
                char spot_src[160];
                snprintf(spot_src, sizeof spot_src,
                         "EC2 DescribeSpotPriceHistory (%zu types); estimate %.2f x on-demand for %zu types",
                         st.spot_from_ec2, CATALOG_EC2_SPOT_FACTOR, st.spot_estimated);
                if (!cJSON_AddStringToObject(sources, "instance_types",
                                             "EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings") ||
                    !cJSON_AddStringToObject(sources, "on_demand",
                                             st.on_demand_fallback ? "price table, then the fallback catalog"
                                                                   : "price table") ||
                    !cJSON_AddStringToObject(sources, "spot", spot_src))
                        r = -ENOMEM;
        }
        if (r < 0) {
                cJSON_Delete(doc);
                return r;
        }
        *ret_json = doc;
        if (ret_stats)
                *ret_stats = st;
        return 0;
}

/* ---- the asynchronous build -------------------------------------------------------------- */

typedef struct Build {
        char *region;
        const Catalog *fallback;
        cJSON *price_doc;
        Ec2InstanceTypeList *types;
        Ec2OfferingList *offerings;
        Ec2SpotPriceList *spot;
        int error;        /* first fatal error */
        unsigned pending; /* EC2 calls still in flight */
        bool abandoned;   /* catalog_ec2_build() failed after a call had started: no callback */
        catalog_ec2_done_t done;
        void *userdata;
} Build;

static Build *build_free(Build *b) {
        if (!b)
                return NULL;
        ec2_instance_type_list_free(b->types);
        ec2_offering_list_free(b->offerings);
        ec2_spot_price_list_free(b->spot);
        cJSON_Delete(b->price_doc);
        free(b->region);
        free(b);
        return NULL;
}

static int build_finish(Build *b, Catalog **ret) {
        _cleanup_(catalog_freep) Catalog *c = NULL;
        CatalogEc2Stats st;
        cJSON *doc = NULL;
        _cleanup_free_ char *err = NULL;
        const cJSON *prices = b->price_doc ? cJSON_GetObjectItemCaseSensitive(b->price_doc, "prices") : NULL;

        int r = catalog_ec2_assemble(b->region, b->types, b->offerings, b->spot, prices, b->fallback,
                                     (int64_t) time(NULL), &doc, &st);
        if (r < 0)
                return r;
        r = catalog_new(b->region, &c);
        if (r >= 0)
                r = catalog_load_json(c, doc, &err);
        cJSON_Delete(doc);
        if (r < 0) {
                log_debug_errno(r, "catalog-ec2: the loader refused the assembled catalog: %s", strempty(err));
                return r;
        }
        log_debug("catalog-ec2: %zu of %zu types (skipped: %zu without a price, %zu without a zone, "
                  "%zu by architecture); on-demand from the fallback for %zu; spot from EC2 for %zu, "
                  "estimated for %zu; %zu spot records ignored",
                  st.kept, st.described, st.skipped_no_price, st.skipped_no_zone, st.skipped_arch,
                  st.on_demand_fallback, st.spot_from_ec2, st.spot_estimated, st.spot_ignored);
        *ret = TAKE_PTR(c);
        return 0;
}

static void build_step(Build *b) {
        assert(b->pending > 0);
        if (--b->pending > 0)
                return;
        if (b->abandoned) {
                build_free(b);
                return;
        }
        Catalog *c = NULL;
        int r = b->error < 0 ? b->error : build_finish(b, &c);
        catalog_ec2_done_t done = b->done;
        void *userdata = b->userdata;
        build_free(b);
        done(r, r < 0 ? NULL : c, userdata);
}

static int fatal_errno(const Ec2Error *e) {
        return e->error < 0 ? e->error : -EIO;
}

static void on_types(Ec2Client *c, const Ec2Error *e, Ec2InstanceTypeList *l, void *userdata) {
        Build *b = userdata;
        if (e) {
                log_debug_errno(fatal_errno(e), "catalog-ec2: DescribeInstanceTypes failed: %s %s", e->code, e->message);
                if (b->error >= 0)
                        b->error = fatal_errno(e);
        }
        b->types = l;
        build_step(b);
}

static void on_offerings(Ec2Client *c, const Ec2Error *e, Ec2OfferingList *l, void *userdata) {
        Build *b = userdata;
        if (e) {
                log_debug_errno(fatal_errno(e), "catalog-ec2: DescribeInstanceTypeOfferings failed: %s %s", e->code,
                                e->message);
                if (b->error >= 0)
                        b->error = fatal_errno(e);
        }
        b->offerings = l;
        build_step(b);
}

static void on_spot(Ec2Client *c, const Ec2Error *e, Ec2SpotPriceList *l, void *userdata) {
        Build *b = userdata;
        if (e) /* not fatal: every type gets the estimate, as in data/gen-catalog.py */
                log_debug_errno(fatal_errno(e), "catalog-ec2: DescribeSpotPriceHistory failed, estimating: %s %s",
                                e->code, e->message);
        b->spot = l;
        build_step(b);
}

int catalog_ec2_build(Ec2Client *ec2, const char *region, const Catalog *fallback,
                      const char *price_table_path, catalog_ec2_done_t done, void *userdata) {
        Build *b;
        int r;

        if (!ec2 || isempty(region) || !done)
                return -EINVAL;
        b = calloc(1, sizeof *b);
        if (!b)
                return -ENOMEM;
        *b = (Build) { .fallback = fallback, .done = done, .userdata = userdata };
        b->region = strdup(region);
        if (!b->region) {
                build_free(b);
                return -ENOMEM;
        }
        if (price_table_path) {
                r = catalog_ec2_load_price_table(price_table_path, &b->price_doc);
                if (r < 0) {
                        log_debug_errno(r, "catalog-ec2: cannot use the price table %s: %m", price_table_path);
                        build_free(b);
                        return r;
                }
        }

        r = ec2_describe_instance_types(ec2, NULL, NULL, 0, on_types, b);
        if (r < 0) {
                build_free(b);
                return r;
        }
        b->pending++;
        r = ec2_describe_instance_type_offerings(ec2, NULL, 0, on_offerings, b);
        if (r >= 0) {
                b->pending++;
                r = ec2_describe_spot_prices(ec2, NULL, 0, on_spot, b);
                if (r >= 0)
                        b->pending++;
        }
        if (r < 0) {
                /* the calls already started cannot be taken back: they free b, quietly */
                b->abandoned = true;
                return r;
        }
        return 0;
}
