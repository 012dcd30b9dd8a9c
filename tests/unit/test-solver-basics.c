/* SPDX-License-Identifier: Apache-2.0 */
/* Solver building blocks: quantities, kubelet allocatable, labels, selectors, tolerations. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/solver/solver.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (1024 * MI)

static void test_quantity(void **state) {
        int64_t v;
        assert_int_equal(solver_parse_quantity("100m", SOLVER_RES_CPU, &v), 0);
        assert_int_equal(v, 100);
        assert_int_equal(solver_parse_quantity("1.5", SOLVER_RES_CPU, &v), 0);
        assert_int_equal(v, 1500);
        assert_int_equal(solver_parse_quantity("2", SOLVER_RES_CPU, &v), 0);
        assert_int_equal(v, 2000);
        /* sub-millicore rounds up, like the API server does for requests */
        assert_int_equal(solver_parse_quantity("0.0001", SOLVER_RES_CPU, &v), 0);
        assert_int_equal(v, 1);
        assert_int_equal(solver_parse_quantity("2Gi", SOLVER_RES_MEMORY, &v), 0);
        assert_int_equal(v, 2 * GI);
        assert_int_equal(solver_parse_quantity("500M", SOLVER_RES_MEMORY, &v), 0);
        assert_int_equal(v, 500000000);
        assert_int_equal(solver_parse_quantity("1e3", SOLVER_RES_MEMORY, &v), 0);
        assert_int_equal(v, 1000);
        assert_int_equal(solver_parse_quantity("1.5Gi", SOLVER_RES_MEMORY, &v), 0);
        assert_int_equal(v, 3 * GI / 2);
        assert_int_equal(solver_parse_quantity("128974848", SOLVER_RES_MEMORY, &v), 0);
        assert_int_equal(v, 128974848);
        assert_int_equal(solver_parse_quantity("12Ki", SOLVER_RES_EPHEMERAL, &v), 0);
        assert_int_equal(v, 12 * 1024);
        /* bad input */
        assert_int_equal(solver_parse_quantity("", SOLVER_RES_CPU, &v), -EINVAL);
        assert_int_equal(solver_parse_quantity("abc", SOLVER_RES_CPU, &v), -EINVAL);
        assert_int_equal(solver_parse_quantity("1Gb", SOLVER_RES_MEMORY, &v), -EINVAL);
        assert_int_equal(solver_parse_quantity("1.2.3", SOLVER_RES_MEMORY, &v), -EINVAL);
        assert_int_equal(solver_parse_quantity("-1", SOLVER_RES_MEMORY, &v), -ERANGE);
        assert_int_equal(solver_parse_quantity("99999999999Ei", SOLVER_RES_MEMORY, &v), -ERANGE);

        char buf[32];
        assert_string_equal(solver_format_quantity(7910, SOLVER_RES_CPU, buf, sizeof(buf)), "7910m");
        assert_string_equal(solver_format_quantity(8000, SOLVER_RES_CPU, buf, sizeof(buf)), "8");
        assert_string_equal(solver_format_quantity(14162 * MI, SOLVER_RES_MEMORY, buf, sizeof(buf)), "14162Mi");
        assert_string_equal(solver_format_quantity(16 * GI, SOLVER_RES_MEMORY, buf, sizeof(buf)), "16Gi");
        assert_string_equal(solver_format_quantity(1000, SOLVER_RES_MEMORY, buf, sizeof(buf)), "1000");
}

static void test_resource_names(void **state) {
        assert_int_equal(solver_resource_from_name("cpu"), SOLVER_RES_CPU);
        assert_int_equal(solver_resource_from_name("nvidia.com/gpu"), SOLVER_RES_NVIDIA_GPU);
        assert_int_equal(solver_resource_from_name("ephemeral-storage"), SOLVER_RES_EPHEMERAL);
        assert_int_equal(solver_resource_from_name("example.com/foo"), SOLVER_RES_OTHER);
        assert_int_equal(solver_resource_from_name("bogus"), -EINVAL);
        assert_string_equal(solver_resource_to_name(SOLVER_RES_MEMORY), "memory");
}

/* The figures REFERENCE.md gives for a c6a.2xlarge: 8 vCPU, 16 GiB, 4 ENIs x 15 IPv4. */
static void test_allocatable_c6a_2xlarge(void **state) {
        SolverResources cap = {};
        cap.v[SOLVER_RES_CPU] = 8000;
        cap.v[SOLVER_RES_MEMORY] = 16 * GI;
        SolverResources a;
        assert_int_equal(solver_kubelet_allocatable(&cap, 4, 15, NULL, 7.5, &a), 0);
        assert_int_equal(cap.v[SOLVER_RES_PODS], 58);
        assert_int_equal(a.v[SOLVER_RES_CPU], 7910);
        assert_int_equal(a.v[SOLVER_RES_MEMORY], 14162 * MI);
        assert_int_equal(a.v[SOLVER_RES_PODS], 58);
        /* capacity loses the VM overhead: ceil(16384 * 7.5%) = 1229 Mi */
        assert_int_equal(cap.v[SOLVER_RES_MEMORY], (16384 - 1229) * MI);
}

static void test_allocatable_tiers_and_kubelet(void **state) {
        SolverResources cap = {}, a;
        /* 1 vCPU: 6% of the first core = 60m; t3.micro-like: 2 ENIs x 2 IPs -> 4 pods */
        cap.v[SOLVER_RES_CPU] = 1000;
        cap.v[SOLVER_RES_MEMORY] = 1 * GI;
        assert_int_equal(solver_kubelet_allocatable(&cap, 2, 2, NULL, 0, &a), 0);
        assert_int_equal(a.v[SOLVER_RES_CPU], 940);
        assert_int_equal(cap.v[SOLVER_RES_PODS], 4);
        /* memory: 1024 - (11*4 + 255) - 100 = 625 Mi */
        assert_int_equal(a.v[SOLVER_RES_MEMORY], 625 * MI);

        /* 48 vCPU: 60 + 10 + 10 + 44 * 2.5 = 190m */
        SolverResources big = {};
        big.v[SOLVER_RES_CPU] = 48000;
        big.v[SOLVER_RES_MEMORY] = 96 * GI;
        assert_int_equal(solver_kubelet_allocatable(&big, 15, 50, NULL, 7.5, &a), 0);
        assert_int_equal(a.v[SOLVER_RES_CPU], 48000 - 190);
        assert_int_equal(big.v[SOLVER_RES_PODS], 737);

        /* kubelet maxPods and explicit reservations win over the formulas */
        SolverKubelet k = { .max_pods = 110, .has_kube_reserved_cpu = true, .kube_reserved_cpu = 500,
                            .has_system_reserved_memory = true, .system_reserved_memory = 100 * MI };
        SolverResources c2 = {};
        c2.v[SOLVER_RES_CPU] = 8000;
        c2.v[SOLVER_RES_MEMORY] = 16 * GI;
        assert_int_equal(solver_kubelet_allocatable(&c2, 4, 15, &k, 7.5, &a), 0);
        assert_int_equal(a.v[SOLVER_RES_PODS], 110);
        assert_int_equal(a.v[SOLVER_RES_CPU], 7500);
        /* 15155 - (11*110+255) - 100 (system) - 100 (eviction) */
        assert_int_equal(a.v[SOLVER_RES_MEMORY], (15155 - 1465 - 100 - 100) * MI);

        /* podsPerCore caps max pods: 2 x 8 = 16 */
        SolverKubelet ppc = { .pods_per_core = 2 };
        SolverResources c3 = {};
        c3.v[SOLVER_RES_CPU] = 8000;
        c3.v[SOLVER_RES_MEMORY] = 16 * GI;
        assert_int_equal(solver_kubelet_allocatable(&c3, 4, 15, &ppc, 7.5, &a), 0);
        assert_int_equal(a.v[SOLVER_RES_PODS], 16);

        /* ephemeral storage: 20 Gi root volume - 1 Gi reserved - 10 % eviction */
        SolverResources c4 = {};
        c4.v[SOLVER_RES_CPU] = 2000;
        c4.v[SOLVER_RES_MEMORY] = 4 * GI;
        c4.v[SOLVER_RES_EPHEMERAL] = 20 * GI;
        assert_int_equal(solver_kubelet_allocatable(&c4, 3, 10, NULL, 7.5, &a), 0);
        assert_int_equal(a.v[SOLVER_RES_EPHEMERAL], 20 * GI - GI - 2 * GI);

        assert_int_equal(solver_kubelet_allocatable(&c4, 3, 10, NULL, 120, &a), -EINVAL);
}

static void test_canonical_keys(void **state) {
        assert_string_equal(solver_canonical_label_key("karpenter.sh/capacity-type"), SOLVER_LABEL_CAPACITY_TYPE);
        assert_string_equal(solver_canonical_label_key("karpenter.k8s.aws/instance-family"),
                            "nodesmith.io/instance-family");
        assert_string_equal(solver_canonical_label_key("karpenter.k8s.aws/instance-gpu-count"),
                            "nodesmith.io/instance-gpu-count");
        assert_string_equal(solver_canonical_label_key("karpenter.sh/nodepool"), SOLVER_LABEL_NODEPOOL);
        assert_string_equal(solver_canonical_label_key("beta.kubernetes.io/arch"), SOLVER_LABEL_ARCH);
        assert_string_equal(solver_canonical_label_key("failure-domain.beta.kubernetes.io/zone"), SOLVER_LABEL_ZONE);
        assert_string_equal(solver_canonical_label_key("team"), "team");
        assert_string_equal(solver_canonical_label_key("karpenter.k8s.aws/unknown"), "karpenter.k8s.aws/unknown");
}

static void test_requirements_and_selectors(void **state) {
        const SolverLabel labels[] = {
                { "nodesmith.io/instance-cpu", "8" },
                { "kubernetes.io/arch", "amd64" },
                { "team", "a" },
        };
        const char *eight[] = { "8" }, *four[] = { "4" }, *arm[] = { "arm64" }, *ab[] = { "a", "b" };
        SolverRequirement gt4 = { "karpenter.k8s.aws/instance-cpu", SOLVER_OP_GT, four, 1 };
        SolverRequirement lt8 = { "nodesmith.io/instance-cpu", SOLVER_OP_LT, eight, 1 };
        SolverRequirement notarm = { "kubernetes.io/arch", SOLVER_OP_NOT_IN, arm, 1 };
        SolverRequirement inarm = { "kubernetes.io/arch", SOLVER_OP_IN, arm, 1 };
        SolverRequirement ex = { "team", SOLVER_OP_EXISTS, NULL, 0 };
        SolverRequirement dne = { "gpu", SOLVER_OP_DOES_NOT_EXIST, NULL, 0 };
        SolverRequirement notin_missing = { "gpu", SOLVER_OP_NOT_IN, ab, 2 };
        assert_true(solver_requirement_matches_labels(&gt4, labels, 3)); /* alias key matched */
        assert_false(solver_requirement_matches_labels(&lt8, labels, 3));
        assert_true(solver_requirement_matches_labels(&notarm, labels, 3));
        assert_false(solver_requirement_matches_labels(&inarm, labels, 3));
        assert_true(solver_requirement_matches_labels(&ex, labels, 3));
        assert_true(solver_requirement_matches_labels(&dne, labels, 3));
        assert_true(solver_requirement_matches_labels(&notin_missing, labels, 3));

        const SolverLabel pl[] = { { "app", "web" }, { "tier", "front" } };
        SolverLabel ml = { "app", "web" };
        SolverRequirement tier_in = { "tier", SOLVER_OP_IN, (const char *[]) { "front", "back" }, 2 };
        SolverLabelSelector s1 = { &ml, 1, &tier_in, 1 };
        assert_true(solver_selector_matches(&s1, pl, 2));
        SolverLabel other = { "app", "db" };
        SolverLabelSelector s2 = { &other, 1, NULL, 0 };
        assert_false(solver_selector_matches(&s2, pl, 2));
        SolverLabelSelector empty = {};
        assert_true(solver_selector_matches(&empty, pl, 2)); /* {} matches everything */

        assert_int_equal(solver_operator_from_name("DoesNotExist"), SOLVER_OP_DOES_NOT_EXIST);
        assert_int_equal(solver_operator_from_name("in"), -EINVAL);
}

static void test_tolerations(void **state) {
        SolverTaint t = { "dedicated", "gpu", SOLVER_EFFECT_NO_SCHEDULE };
        SolverTaint pref = { "spot", NULL, SOLVER_EFFECT_PREFER_NO_SCHEDULE };
        SolverToleration eq = { "dedicated", false, "gpu", SOLVER_EFFECT_NO_SCHEDULE };
        SolverToleration wrong = { "dedicated", false, "cpu", SOLVER_EFFECT_NO_SCHEDULE };
        SolverToleration exists_any = { "dedicated", true, NULL, SOLVER_EFFECT_ANY };
        SolverToleration all = { NULL, true, NULL, SOLVER_EFFECT_ANY };
        SolverToleration noexec = { "dedicated", true, NULL, SOLVER_EFFECT_NO_EXECUTE };
        assert_true(solver_toleration_tolerates(&eq, &t));
        assert_false(solver_toleration_tolerates(&wrong, &t));
        assert_true(solver_toleration_tolerates(&exists_any, &t));
        assert_true(solver_toleration_tolerates(&all, &t));
        assert_false(solver_toleration_tolerates(&noexec, &t));
        SolverTaint both[] = { t, pref };
        assert_true(solver_tolerates_all(&eq, 1, both, 2, true));
        assert_false(solver_tolerates_all(&eq, 1, both, 2, false));
        assert_true(solver_tolerates_all(&all, 1, both, 2, false));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_quantity),
                cmocka_unit_test(test_resource_names),
                cmocka_unit_test(test_allocatable_c6a_2xlarge),
                cmocka_unit_test(test_allocatable_tiers_and_kubelet),
                cmocka_unit_test(test_canonical_keys),
                cmocka_unit_test(test_requirements_and_selectors),
                cmocka_unit_test(test_tolerations),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
