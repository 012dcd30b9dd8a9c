/* SPDX-License-Identifier: Apache-2.0 */
/* The instance catalog: the shipped us-east-1 file, labels, offerings, allocatable formulas and
 * the learned-overhead hook. Runs from the repository root (tests/run.sh does). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/model/catalog.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (1024 * MI)

static const char *label(const SolverInstanceType *t, const char *key) {
        for (size_t i = 0; i < t->n_labels; i++)
                if (strcmp(t->labels[i].key, key) == 0)
                        return t->labels[i].value;
        return NULL;
}

static const SolverInstanceType *type(Catalog *c, const char *name) {
        int i = catalog_find(c, name);
        assert_true(i >= 0);
        size_t n;
        return &catalog_types(c, &n)[i];
}

static void test_shipped_catalog(void **state) {
        Catalog *c = NULL;
        char *err = NULL;
        assert_int_equal(catalog_load_file("data/catalog-us-east-1.json", &c, &err), 0);
        size_t n;
        catalog_types(c, &n);
        assert_true(n > 1000);
        assert_string_equal(catalog_region(c), "us-east-1");

        /* REFERENCE.md: a c6a.2xlarge comes out at 7910m CPU, 14162 Mi memory, 58 pods */
        const SolverInstanceType *t = type(c, "c6a.2xlarge");
        assert_int_equal(t->allocatable.v[SOLVER_RES_CPU], 7910);
        assert_int_equal(t->allocatable.v[SOLVER_RES_MEMORY], 14162 * MI);
        assert_int_equal(t->allocatable.v[SOLVER_RES_PODS], 58);
        assert_string_equal(label(t, "node.kubernetes.io/instance-type"), "c6a.2xlarge");
        assert_string_equal(label(t, "kubernetes.io/arch"), "amd64");
        assert_string_equal(label(t, "nodesmith.io/instance-family"), "c6a");
        assert_string_equal(label(t, "nodesmith.io/instance-category"), "c");
        assert_string_equal(label(t, "nodesmith.io/instance-generation"), "6");
        assert_string_equal(label(t, "nodesmith.io/instance-size"), "2xlarge");
        assert_string_equal(label(t, "nodesmith.io/instance-cpu"), "8");
        assert_string_equal(label(t, "nodesmith.io/instance-memory"), "16384");
        assert_string_equal(label(t, "nodesmith.io/instance-gpu-count"), "0");
        assert_string_equal(label(t, "topology.kubernetes.io/region"), "us-east-1");
        /* on-demand at the table's price and spot at the documented estimate, in each zone */
        size_t od = 0, spot = 0;
        for (size_t i = 0; i < t->n_offerings; i++) {
                if (t->offerings[i].capacity_type == SOLVER_CAPACITY_ON_DEMAND) {
                        assert_true(t->offerings[i].price == 0.306);
                        od++;
                } else {
                        assert_true(t->offerings[i].price < 0.306 * 0.36 && t->offerings[i].price > 0.306 * 0.34);
                        spot++;
                }
        }
        assert_true(od >= 3);
        assert_int_equal(od, spot);
        assert_true(catalog_on_demand_price(c, "c6a.2xlarge") == 0.306);

        /* a GPU type and an arm64 type */
        const SolverInstanceType *g = type(c, "g5.xlarge");
        assert_int_equal(g->capacity.v[SOLVER_RES_NVIDIA_GPU], 1);
        assert_int_equal(g->allocatable.v[SOLVER_RES_NVIDIA_GPU], 1);
        assert_string_equal(label(g, "nodesmith.io/instance-gpu-name"), "a10g");
        assert_string_equal(label(g, "nodesmith.io/instance-gpu-manufacturer"), "nvidia");
        assert_string_equal(label(type(c, "m7g.large"), "kubernetes.io/arch"), "arm64");
        assert_int_equal(catalog_find(c, "nonexistent.large"), -ENOENT);
        catalog_free(c);
}

static void test_learned_overhead(void **state) {
        Catalog *c = NULL;
        assert_int_equal(catalog_load_file("data/catalog-us-east-1.json", &c, NULL), 0);
        assert_false(catalog_is_learned(c, "c6a.2xlarge"));
        /* an agent on a c6a.2xlarge reports what the kubelet sees */
        SolverResources cap = {}, alloc = {};
        cap.v[SOLVER_RES_CPU] = 8000;
        cap.v[SOLVER_RES_MEMORY] = 15200 * MI;
        cap.v[SOLVER_RES_PODS] = 58;
        alloc.v[SOLVER_RES_CPU] = 7910;
        alloc.v[SOLVER_RES_MEMORY] = 14300 * MI;
        alloc.v[SOLVER_RES_PODS] = 58;
        assert_int_equal(catalog_learn(c, "c6a.2xlarge", &cap, &alloc), 0);
        assert_true(catalog_is_learned(c, "c6a.2xlarge"));
        assert_int_equal(type(c, "c6a.2xlarge")->allocatable.v[SOLVER_RES_MEMORY], 14300 * MI);
        /* the default kubelet settings give exactly the report */
        const SolverResources *a;
        int i = catalog_find(c, "c6a.2xlarge");
        assert_int_equal(catalog_allocatable_for(c, NULL, 0, &a), 0);
        assert_int_equal(a[i].v[SOLVER_RES_MEMORY], 14300 * MI);
        /* other settings start from the observed memory: 15200 - (11*110 + 255) - 100 */
        SolverKubelet k = { .max_pods = 110 };
        assert_int_equal(catalog_allocatable_for(c, &k, 0, &a), 0);
        assert_int_equal(a[i].v[SOLVER_RES_PODS], 110);
        assert_int_equal(a[i].v[SOLVER_RES_MEMORY], (15200 - 1465 - 100) * MI);
        /* an unlearned type keeps the 7.5 % guess: 15155 - 1465 - 100 */
        int j = catalog_find(c, "c6i.2xlarge");
        assert_int_equal(a[j].v[SOLVER_RES_MEMORY], (15155 - 1465 - 100) * MI);
        /* a bigger root volume: 100 Gi - 1 Gi - 10 % */
        assert_int_equal(catalog_allocatable_for(c, NULL, 100 * GI, &a), 0);
        assert_int_equal(a[j].v[SOLVER_RES_EPHEMERAL], 100 * GI - GI - 10 * GI);
        /* nonsense is refused */
        alloc.v[SOLVER_RES_CPU] = 9000;
        assert_int_equal(catalog_learn(c, "c6a.2xlarge", &cap, &alloc), -EINVAL);
        assert_int_equal(catalog_learn(c, "nope.large", &cap, &alloc), -ENOENT);
        catalog_free(c);
}

/* vpc.amazonaws.com/pod-eni: the branch interfaces the VPC resource controller lists for a type
 * (its pkg/aws/vpc/limits.go: c5.large 9, m7i.large 9, c5.xlarge 18, c6g.medium 4, c5.18xlarge
 * and c5.metal 107, a1.medium 10, i3en.large 5), none for Xen and burstable types. */
static void test_pod_eni(void **state) {
        Catalog *c = NULL;
        char *err = NULL;
        assert_int_equal(catalog_load_file("data/catalog-us-east-1.json", &c, &err), 0);
        static const struct {
                const char *type;
                int64_t branches;
        } want[] = {
                { "c5.large", 9 },     { "m7i.large", 9 }, { "c5.xlarge", 18 }, { "c6g.medium", 4 },
                { "c5.18xlarge", 107 }, { "c5.metal", 107 }, { "m4.large", 0 }, { "i3.large", 0 },
                { "t3.large", 0 },     { "a1.medium", 10 }, { "i3en.large", 5 },
                { "d3.8xlarge", 119 },
        };
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                const SolverInstanceType *t = type(c, want[i].type);
                if (t->capacity.v[SOLVER_RES_POD_ENI] != want[i].branches ||
                    t->allocatable.v[SOLVER_RES_POD_ENI] != want[i].branches)
                        fail_msg("%s: pod-eni %lld/%lld, want %lld", want[i].type,
                                 (long long) t->capacity.v[SOLVER_RES_POD_ENI],
                                 (long long) t->allocatable.v[SOLVER_RES_POD_ENI], (long long) want[i].branches);
        }
        catalog_free(c);
}

static void test_bad_catalog(void **state) {
        static const struct {
                const char *json, *msg;
        } cases[] = {
                { "[]", "not a JSON object" },
                { "{\"instance_types\": 3}", "\"instance_types\" must be a list" },
                { "{\"instance_types\": [{\"arch\": \"amd64\"}]}", "instance_types[0]: missing or bad \"name\"" },
                { "{\"instance_types\": [{\"name\": \"x.large\", \"arch\": \"sparc\"}]}", "x.large: \"arch\"" },
                { "{\"instance_types\": [{\"name\": \"x.large\", \"arch\": \"amd64\", \"memory_mib\": 1}]}",
                  "x.large: bad \"vcpu\"" },
                { "{\"instance_types\": [{\"name\": \"x.large\", \"arch\": \"amd64\", \"vcpu\": 2, \"memory_mib\": 4096,"
                  " \"on_demand_price\": -1, \"zones\": []}]}",
                  "negative \"on_demand_price\"" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                Catalog *c = NULL;
                assert_int_equal(catalog_new("us-east-1", &c), 0);
                cJSON *j = cJSON_Parse(cases[i].json);
                assert_non_null(j);
                char *err = NULL;
                assert_int_equal(catalog_load_json(c, j, &err), -EINVAL);
                assert_non_null(err);
                if (!strstr(err, cases[i].msg))
                        fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].msg);
                free(err);
                cJSON_Delete(j);
                catalog_free(c);
        }
        char *err = NULL;
        Catalog *c = NULL;
        assert_true(catalog_load_file("/nonexistent/catalog.json", &c, &err) < 0);
        assert_non_null(strstr(err, "/nonexistent/catalog.json"));
        free(err);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_shipped_catalog),
                cmocka_unit_test(test_learned_overhead),
                cmocka_unit_test(test_pod_eni),
                cmocka_unit_test(test_bad_catalog),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
