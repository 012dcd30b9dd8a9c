/* SPDX-License-Identifier: Apache-2.0 */
/* The catalog built from EC2's answers (coordinator/provision/catalog-ec2.c): canned DescribeInstanceTypes,
 * DescribeInstanceTypeOfferings and DescribeSpotPriceHistory results through
 * catalog_ec2_assemble(), then through the shared loader. Runs from the repository root. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/provision/catalog-ec2.h"

#define NOW ((int64_t) 1790000000)
#define HOUR 3600

static char *x86[] = { "i386", "x86_64", NULL };
static char *arm[] = { "arm64", NULL };
static char *mac[] = { "x86_64_mac", NULL };
static Ec2Gpu gpus_g5[] = { { "A10G", "NVIDIA", 1, 24576 } };
static Ec2Gpu gpus_two[] = { { "Radeon Pro V520", "AMD", 2, 8192 }, { "Radeon Pro V520", "AMD", 2, 8192 } };

static Ec2InstanceType types_v[] = {
        { .name = "m5.large", .vcpus = 2, .memory_mib = 8192, .architectures = x86, .max_enis = 3,
          .ipv4_per_eni = 10, .hypervisor = "nitro", .current_generation = true, .spot_supported = true },
        { .name = "g5.xlarge", .vcpus = 4, .memory_mib = 16384, .architectures = x86, .gpus = gpus_g5, .n_gpus = 1,
          .max_enis = 4, .ipv4_per_eni = 15, .hypervisor = "nitro", .current_generation = true, .spot_supported = true },
        { .name = "g4ad.8xlarge", .vcpus = 32, .memory_mib = 131072, .architectures = x86, .gpus = gpus_two, .n_gpus = 2,
          .max_enis = 8, .ipv4_per_eni = 30, .hypervisor = "nitro", .spot_supported = true },
        { .name = "m6g.metal", .vcpus = 64, .memory_mib = 262144, .architectures = arm, .max_enis = 15,
          .ipv4_per_eni = 50, .hypervisor = NULL, .bare_metal = true, .spot_supported = true },
        { .name = "t4g.nano", .vcpus = 2, .memory_mib = 512, .architectures = arm, .max_enis = 2, .ipv4_per_eni = 2,
          .hypervisor = "nitro", .spot_supported = false },
        { .name = "mac1.metal", .vcpus = 12, .memory_mib = 32768, .architectures = mac, .max_enis = 8,
          .ipv4_per_eni = 30, .bare_metal = true },
        { .name = "x9.huge", .vcpus = 8, .memory_mib = 65536, .architectures = x86, .max_enis = 4, .ipv4_per_eni = 15,
          .hypervisor = "nitro", .spot_supported = true },          /* no price anywhere */
        { .name = "c5.large", .vcpus = 2, .memory_mib = 4096, .architectures = x86, .max_enis = 3, .ipv4_per_eni = 10,
          .hypervisor = "nitro", .spot_supported = true },          /* no zone offered */
        { .name = "trn1.2xlarge", .vcpus = 8, .memory_mib = 32768, .architectures = x86, .max_enis = 4,
          .ipv4_per_eni = 15, .hypervisor = "nitro", .spot_supported = true }, /* priced by the fallback */
        { .name = "m5.large", .vcpus = 2, .memory_mib = 8192, .architectures = x86, .max_enis = 3,
          .ipv4_per_eni = 10, .hypervisor = "nitro", .spot_supported = true }, /* described twice */
};
static const Ec2InstanceTypeList types = { types_v, ELEMENTSOF(types_v) };

static Ec2Offering offerings_v[] = {
        { "m5.large", "us-east-1b" }, { "m5.large", "us-east-1a" }, { "m5.large", "us-east-1a" },
        { "g5.xlarge", "us-east-1c" }, { "g4ad.8xlarge", "us-east-1a" }, { "m6g.metal", "us-east-1d" },
        { "t4g.nano", "us-east-1a" }, { "mac1.metal", "us-east-1a" }, { "x9.huge", "us-east-1a" },
        { "trn1.2xlarge", "us-east-1f" }, { "trn1.2xlarge", "us-east-1c" },
};
static const Ec2OfferingList offerings = { offerings_v, ELEMENTSOF(offerings_v) };

static Ec2SpotPrice spot_v[] = {
        { "m5.large", "us-east-1a", 0.0401, NOW - HOUR },
        { "m5.large", "us-east-1a", 0.0350, NOW - 3 * HOUR }, /* older record: not the price */
        { "m5.large", "us-east-1b", 0.0377, NOW - HOUR },
        { "m5.large", "us-east-1e", 0.0100, NOW - HOUR },     /* a zone the type is not offered in */
        { "g5.xlarge", "us-east-1c", 0.4312, NOW - HOUR },
        { "m6g.metal", "us-east-1d", 0.00001, NOW - HOUR },   /* moto's placeholder price */
        { "g4ad.8xlarge", "us-east-1a", 0.61, NOW - 40 * 86400 }, /* too old */
};
static const Ec2SpotPriceList spot = { spot_v, ELEMENTSOF(spot_v) };

static const char *PRICES = "{\"m5.large\": 0.096, \"g5.xlarge\": 1.006, \"g4ad.8xlarge\": 1.734, "
                            "\"m6g.metal\": 2.464, \"t4g.nano\": 0.0042, \"mac1.metal\": 1.083, \"c5.large\": 0.085, "
                            "\"x9.huge\": 0, \"not-described.large\": 1.0}";

static const char *FALLBACK =
        "{\"region\": \"us-east-1\", \"instance_types\": ["
        "{\"name\":\"trn1.2xlarge\",\"arch\":\"amd64\",\"vcpu\":8,\"memory_mib\":32768,\"enis\":4,\"ipv4_per_eni\":15,"
        "\"cpu_manufacturer\":\"intel\",\"encryption_in_transit\":true,\"network_bandwidth_mbps\":3125,"
        "\"neuron_count\":1,\"local_nvme_gib\":474,\"on_demand_price\":1.34375,\"zones\":[\"us-east-1c\"],"
        "\"spot_price\":0.47},"
        "{\"name\":\"m5.large\",\"arch\":\"amd64\",\"vcpu\":2,\"memory_mib\":8192,\"enis\":3,\"ipv4_per_eni\":10,"
        "\"on_demand_price\":0.5,\"zones\":[\"us-east-1a\"]}]}";

static cJSON *entry(const cJSON *doc, const char *name) {
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "instance_types"))
                if (strcmp(cJSON_GetObjectItemCaseSensitive(e, "name")->valuestring, name) == 0)
                        return (cJSON *) e;
        return NULL;
}

static double num(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        assert_true(cJSON_IsNumber(v));
        return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        assert_true(cJSON_IsString(v));
        return v->valuestring;
}

static char *strings(const cJSON *a) {
        char *s = cJSON_PrintUnformatted(a);
        assert_non_null(s);
        return s;
}

static Catalog *fallback_catalog(void) {
        cJSON *j = cJSON_Parse(FALLBACK);
        Catalog *c = NULL;
        assert_int_equal(catalog_new(NULL, &c), 0);
        assert_int_equal(catalog_load_json(c, j, NULL), 0);
        cJSON_Delete(j);
        return c;
}

static cJSON *assemble(const Catalog *fallback, CatalogEc2Stats *st) {
        cJSON *prices = cJSON_Parse(PRICES), *doc = NULL;
        assert_int_equal(catalog_ec2_assemble("us-east-1", &types, &offerings, &spot, prices, fallback, NOW, &doc, st), 0);
        cJSON_Delete(prices);
        return doc;
}

static void test_types_and_skips(void **state) {
        CatalogEc2Stats st;
        cJSON *doc = assemble(NULL, &st);
        char *s;

        /* sorted by name, once each; the skip rules of data/gen-catalog.py */
        const cJSON *e;
        const char *want[] = { "g4ad.8xlarge", "g5.xlarge", "m5.large", "m6g.metal", "t4g.nano" };
        size_t i = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "instance_types")) {
                assert_true(i < ELEMENTSOF(want));
                assert_string_equal(str(e, "name"), want[i++]);
        }
        assert_int_equal(i, ELEMENTSOF(want));
        s = strings(cJSON_GetObjectItemCaseSensitive(doc, "skipped"));
        assert_string_equal(s, "[\"c5.large\",\"mac1.metal\",\"trn1.2xlarge\",\"x9.huge\"]");
        free(s);
        assert_int_equal(st.described, 9);
        assert_int_equal(st.kept, 5);
        assert_int_equal(st.skipped_no_price, 2); /* x9.huge (price 0), trn1.2xlarge (no fallback) */
        assert_int_equal(st.skipped_no_zone, 1);  /* c5.large */
        assert_int_equal(st.skipped_arch, 1);     /* mac1.metal */
        s = strings(cJSON_GetObjectItemCaseSensitive(doc, "zones"));
        assert_string_equal(s, "[\"us-east-1a\",\"us-east-1b\",\"us-east-1c\",\"us-east-1d\"]");
        free(s);
        assert_string_equal(str(doc, "region"), "us-east-1");

        /* the specs, bare metal kept with an empty hypervisor, the first usable architecture */
        e = entry(doc, "m6g.metal");
        assert_string_equal(str(e, "arch"), "arm64");
        assert_string_equal(str(e, "hypervisor"), "");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "bare_metal")));
        assert_int_equal((int) num(e, "enis"), 15);
        assert_int_equal((int) num(e, "ipv4_per_eni"), 50);
        e = entry(doc, "m5.large");
        assert_string_equal(str(e, "arch"), "amd64");
        assert_int_equal((int) num(e, "vcpu"), 2);
        assert_int_equal((int) num(e, "memory_mib"), 8192);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "current_generation")));
        s = strings(cJSON_GetObjectItemCaseSensitive(e, "zones"));
        assert_string_equal(s, "[\"us-east-1a\",\"us-east-1b\"]");
        free(s);
        assert_null(cJSON_GetObjectItemCaseSensitive(e, "gpu_count"));
        cJSON_Delete(doc);
}

static void test_prices(void **state) {
        CatalogEc2Stats st;
        cJSON *doc = assemble(NULL, &st);

        /* on-demand from the table; spot: the latest record per offered zone, the cheapest as
         * spot_price */
        const cJSON *e = entry(doc, "m5.large");
        assert_true(num(e, "on_demand_price") == 0.096);
        assert_true(num(e, "spot_price") == 0.0377);
        char *s = strings(cJSON_GetObjectItemCaseSensitive(e, "spot_prices"));
        assert_string_equal(s, "{\"us-east-1a\":0.0401,\"us-east-1b\":0.0377}");
        free(s);
        e = entry(doc, "g5.xlarge");
        assert_true(num(e, "spot_price") == 0.4312);

        /* placeholders and stale records: the documented estimate */
        e = entry(doc, "m6g.metal");
        assert_true(num(e, "spot_price") == round(2.464 * 0.35 * 1e6) / 1e6);
        assert_null(cJSON_GetObjectItemCaseSensitive(e, "spot_prices"));
        e = entry(doc, "g4ad.8xlarge");
        assert_true(num(e, "spot_price") == round(1.734 * 0.35 * 1e6) / 1e6);
        /* no spot at all for a type that does not support it */
        e = entry(doc, "t4g.nano");
        assert_null(cJSON_GetObjectItemCaseSensitive(e, "spot_price"));
        assert_true(num(e, "on_demand_price") == 0.0042);
        assert_int_equal(st.spot_from_ec2, 2);
        assert_int_equal(st.spot_estimated, 2);
        assert_int_equal(st.spot_ignored, 3); /* placeholder, too old, zone not offered */
        cJSON_Delete(doc);
}

static void test_gpus(void **state) {
        cJSON *doc = assemble(NULL, NULL);
        const cJSON *e = entry(doc, "g5.xlarge");
        assert_int_equal((int) num(e, "gpu_count"), 1);
        assert_string_equal(str(e, "gpu_name"), "a10g");
        assert_string_equal(str(e, "gpu_manufacturer"), "nvidia");
        assert_int_equal((int) num(e, "gpu_memory_mib"), 24576);
        e = entry(doc, "g4ad.8xlarge"); /* two entries: counts add up, the first names them */
        assert_int_equal((int) num(e, "gpu_count"), 4);
        assert_string_equal(str(e, "gpu_name"), "radeon pro v520");
        assert_string_equal(str(e, "gpu_manufacturer"), "amd");
        cJSON_Delete(doc);
}

static void test_fallback(void **state) {
        Catalog *fb = fallback_catalog();
        CatalogEc2Stats st;
        cJSON *doc = assemble(fb, &st);

        /* not in the table: the fallback's price, and the fields ec2.c does not parse */
        const cJSON *e = entry(doc, "trn1.2xlarge");
        assert_non_null(e);
        assert_true(num(e, "on_demand_price") == 1.34375);
        assert_int_equal((int) num(e, "neuron_count"), 1);
        assert_string_equal(str(e, "cpu_manufacturer"), "intel");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "encryption_in_transit")));
        assert_int_equal((int) num(e, "network_bandwidth_mbps"), 3125);
        assert_int_equal((int) num(e, "local_nvme_gib"), 474);
        /* EC2's zones, not the fallback's; no spot records: the estimate */
        char *s = strings(cJSON_GetObjectItemCaseSensitive(e, "zones"));
        assert_string_equal(s, "[\"us-east-1c\",\"us-east-1f\"]");
        free(s);
        assert_true(num(e, "spot_price") == round(1.34375 * 0.35 * 1e6) / 1e6);
        /* the table wins over the fallback */
        assert_true(num(entry(doc, "m5.large"), "on_demand_price") == 0.096);
        assert_int_equal(st.on_demand_fallback, 1);
        assert_int_equal(st.kept, 6);
        assert_int_equal(st.skipped_no_price, 1);
        cJSON_Delete(doc);
        catalog_free(fb);
}

static void test_loaded_catalog(void **state) {
        cJSON *doc = assemble(NULL, NULL);
        Catalog *c = NULL;
        char *err = NULL;
        assert_int_equal(catalog_new("us-east-1", &c), 0);
        assert_int_equal(catalog_load_json(c, doc, &err), 0);
        size_t n;
        const SolverInstanceType *t = catalog_types(c, &n);
        assert_int_equal(n, 5);
        assert_true(catalog_on_demand_price(c, "m5.large") == 0.096);
        assert_int_equal(catalog_find(c, "mac1.metal"), -ENOENT);

        /* per zone: on-demand and spot at EC2's zone price */
        int i = catalog_find(c, "m5.large");
        assert_true(i >= 0);
        size_t od = 0, sp = 0;
        for (size_t k = 0; k < t[i].n_offerings; k++) {
                const SolverOffering *o = &t[i].offerings[k];
                if (o->capacity_type == SOLVER_CAPACITY_SPOT) {
                        sp++;
                        assert_true(o->price == (strcmp(o->zone, "us-east-1a") == 0 ? 0.0401 : 0.0377));
                } else {
                        od++;
                        assert_true(o->price == 0.096);
                }
        }
        assert_int_equal(od, 2);
        assert_int_equal(sp, 2);
        i = catalog_find(c, "g5.xlarge");
        assert_int_equal(t[i].capacity.v[SOLVER_RES_NVIDIA_GPU], 1);
        i = catalog_find(c, "g4ad.8xlarge");
        assert_int_equal(t[i].capacity.v[SOLVER_RES_AMD_GPU], 4);
        /* t4g.nano: on-demand offerings only */
        i = catalog_find(c, "t4g.nano");
        assert_int_equal(t[i].n_offerings, 1);
        catalog_free(c);
        cJSON_Delete(doc);
}

static void test_bounds_and_bad_input(void **state) {
        cJSON *doc = NULL;
        /* more zones per type than the loader takes */
        Ec2Offering many[40];
        char zones[40][16];
        for (size_t i = 0; i < ELEMENTSOF(many); i++) {
                snprintf(zones[i], sizeof zones[i], "zone-%02zu", i);
                many[i] = (Ec2Offering) { "m5.large", zones[i] };
        }
        Ec2OfferingList ol = { many, ELEMENTSOF(many) };
        cJSON *prices = cJSON_Parse(PRICES);
        assert_int_equal(catalog_ec2_assemble("us-east-1", &types, &ol, NULL, prices, NULL, NOW, &doc, NULL), -E2BIG);
        assert_null(doc);
        assert_int_equal(catalog_ec2_assemble(NULL, &types, &offerings, NULL, prices, NULL, NOW, &doc, NULL), -EINVAL);
        /* nothing from EC2: an empty catalog, not a crash */
        assert_int_equal(catalog_ec2_assemble("us-east-1", NULL, NULL, NULL, NULL, NULL, NOW, &doc, NULL), 0);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "instance_types")), 0);
        cJSON_Delete(doc);
        doc = NULL;
        /* no price table: everything is skipped for want of a price */
        CatalogEc2Stats st;
        assert_int_equal(catalog_ec2_assemble("us-east-1", &types, &offerings, &spot, NULL, NULL, NOW, &doc, &st), 0);
        assert_int_equal(st.kept, 0);
        assert_int_equal(st.skipped_no_price, 9);
        cJSON_Delete(doc);
        cJSON_Delete(prices);
}

static void test_price_table(void **state) {
        cJSON *doc = NULL;
        assert_int_equal(catalog_ec2_load_price_table("data/ec2-on-demand-prices-us-east-1.json", &doc), 0);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(doc, "prices");
        assert_true(cJSON_GetObjectItemCaseSensitive(p, "m5.large")->valuedouble == 0.096);
        cJSON_Delete(doc);
        doc = NULL;
        assert_int_equal(catalog_ec2_load_price_table("/nonexistent/prices.json", &doc), -ENOENT);

        char path[] = "/tmp/test-catalog-ec2-XXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "{\"prices\": [1, 2]}", 18), 18);
        close(fd);
        assert_int_equal(catalog_ec2_load_price_table(path, &doc), -EBADMSG); /* "prices" not an object */
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        assert_true(fputs("{\"prices\": {", f) >= 0);
        fclose(f);
        assert_int_equal(catalog_ec2_load_price_table(path, &doc), -EBADMSG); /* not JSON */
        f = fopen(path, "w");
        assert_non_null(f);
        for (size_t i = 0; i < CATALOG_EC2_MAX_PRICE_TABLE / 64 + 2; i++)
                fputs("                                                               \n", f);
        fclose(f);
        assert_int_equal(catalog_ec2_load_price_table(path, &doc), -EFBIG);
        assert_null(doc);
        unlink(path);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_types_and_skips), cmocka_unit_test(test_prices),
                cmocka_unit_test(test_gpus),            cmocka_unit_test(test_fallback),
                cmocka_unit_test(test_loaded_catalog),  cmocka_unit_test(test_bounds_and_bad_input),
                cmocka_unit_test(test_price_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
