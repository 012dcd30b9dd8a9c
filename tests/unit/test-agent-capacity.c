/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "capacity.h"
#include "log.h"

#define MiB (INT64_C(1024) * 1024)
#define GiB (MiB * 1024)

static void write_at(const char *root, const char *rel, const char *text) {
        char path[4096], cmd[4200];
        snprintf(path, sizeof path, "%s/%s", root, rel);
        snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
        assert_int_equal(system(cmd), 0);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

static void test_eks_cpu_tiers(void **state) {
        /* 6 % of the first core, 1 % of the second, 0.5 % of cores 3-4, 0.25 % beyond */
        assert_int_equal(eks_kube_reserved_cpu_millis(1000), 60);
        assert_int_equal(eks_kube_reserved_cpu_millis(2000), 70);
        assert_int_equal(eks_kube_reserved_cpu_millis(4000), 80);
        assert_int_equal(eks_kube_reserved_cpu_millis(8000), 90);
        assert_int_equal(eks_kube_reserved_cpu_millis(48000), 190);
        /* 5 cores: 80 + 2.5 → rounded up */
        assert_int_equal(eks_kube_reserved_cpu_millis(5000), 83);
        assert_int_equal(eks_kube_reserved_memory_bytes(58), (11 * 58 + 255) * MiB);
        assert_int_equal(eks_kube_reserved_memory_bytes(110), 1465 * MiB);
}

static void test_c6a_2xlarge(void **state) {
        /* c6a.2xlarge: 8 vCPU, 16 GiB, 58 pods → 7910m CPU like Karpenter's estimate */
        NodeResources cap = { .cpu_millis = 8000, .memory_bytes = 16 * GiB, .pods = 58,
                              .ephemeral_bytes = 20 * GiB }, a;
        KubeletSettings k = {};
        allocatable_compute(&cap, &k, &a);
        assert_int_equal(a.cpu_millis, 7910);
        assert_int_equal(a.memory_bytes, 16 * GiB - 893 * MiB - 100 * MiB);
        assert_int_equal(a.pods, 58);
        assert_int_equal(a.ephemeral_bytes, 20 * GiB - GiB - 2 * GiB);
}

static void test_kubelet_settings(void **state) {
        const char *cfg = "{\"kind\":\"KubeletConfiguration\",\"maxPods\":17,"
                          "\"kubeReserved\":{\"cpu\":\"250m\",\"memory\":\"1Gi\",\"ephemeral-storage\":\"2Gi\"},"
                          "\"systemReserved\":{\"cpu\":\"100m\",\"memory\":\"100Mi\"},"
                          "\"evictionHard\":{\"memory.available\":\"5%\",\"nodefs.available\":\"1Gi\"}}";
        KubeletSettings k = {};
        /* memory.available as a percentage is not a quantity: refused, settings untouched */
        log_set_max_level(LOG_EMERG);
        assert_true(kubelet_config_parse(cfg, strlen(cfg), &k) < 0);

        const char *ok = "{\"kind\":\"KubeletConfiguration\",\"maxPods\":17,"
                         "\"kubeReserved\":{\"cpu\":\"250m\",\"memory\":\"1Gi\",\"ephemeral-storage\":\"2Gi\"},"
                         "\"systemReserved\":{\"cpu\":\"100m\",\"memory\":\"100Mi\"},"
                         "\"evictionHard\":{\"memory.available\":\"300Mi\",\"nodefs.available\":\"1Gi\"}}";
        KubeletSettings k2 = {};
        assert_int_equal(kubelet_config_parse(ok, strlen(ok), &k2), 0);
        assert_int_equal(k2.max_pods, 17);
        NodeResources cap = { .cpu_millis = 4000, .memory_bytes = 8 * GiB, .pods = 17,
                              .ephemeral_bytes = 100 * GiB, .hugepages_2mi_bytes = 256 * MiB }, a;
        allocatable_compute(&cap, &k2, &a);
        assert_int_equal(a.cpu_millis, 4000 - 250 - 100);
        assert_int_equal(a.memory_bytes, 8 * GiB - GiB - 100 * MiB - 300 * MiB - 256 * MiB);
        assert_int_equal(a.ephemeral_bytes, 100 * GiB - 2 * GiB - GiB);

        const char *wrong = "{\"kind\":\"Pod\"}";
        KubeletSettings k3 = {};
        assert_true(kubelet_config_parse(wrong, strlen(wrong), &k3) < 0);
        const char *bad = "{\"maxPods\": -3}";
        assert_true(kubelet_config_parse(bad, strlen(bad), &k3) < 0);
        log_set_max_level(LOG_INFO);
}

static void test_read_root(void **state) {
        char root[] = "/tmp/nodesmith-root-XXXXXX";
        assert_non_null(mkdtemp(root));
        write_at(root, "proc/meminfo", "MemTotal:       8000000 kB\nMemFree:  10 kB\n");
        write_at(root, "sys/devices/system/cpu/online", "0-3,6-7\n");
        write_at(root, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "10\n");
        write_at(root, "proc/driver/nvidia/gpus/0000:00:1e.0/information", "Model: Tesla T4\n");
        write_at(root, "var/lib/kubelet/.keep", "");
        write_at(root, "etc/eks/eni-max-pods.txt", "# comment\nm5.large 29\nm5.xlarge 58\n");
        write_at(root, "etc/kubernetes/kubelet/config.json", "{\"kind\":\"KubeletConfiguration\",\"maxPods\":20}");
        write_at(root, "etc/kubernetes/kubelet/config.json.d/40-a.conf", "{\"maxPods\":30}");
        write_at(root, "etc/kubernetes/kubelet/config.json.d/50-b.conf", "{\"maxPods\":40}");

        NodeResources c;
        assert_int_equal(capacity_read(root, "/var/lib/kubelet", &c), 0);
        assert_int_equal(c.cpu_millis, 6000);
        assert_int_equal(c.memory_bytes, 8000000LL * 1024);
        assert_int_equal(c.hugepages_2mi_bytes, 20 * MiB);
        assert_int_equal(c.gpus, 1);
        assert_true(c.ephemeral_bytes > 0);

        int64_t n;
        assert_int_equal(eni_max_pods_lookup(root, "/etc/eks/eni-max-pods.txt", "m5.xlarge", &n), 0);
        assert_int_equal(n, 58);
        assert_int_equal(eni_max_pods_lookup(root, "/etc/eks/eni-max-pods.txt", "m5.large", &n), 0);
        assert_int_equal(n, 29);
        assert_int_equal(eni_max_pods_lookup(root, "/etc/eks/eni-max-pods.txt", "m5", &n), -ENOENT);

        KubeletSettings k = {};
        assert_int_equal(kubelet_config_load(root, "/etc/kubernetes/kubelet/config.json", &k), 0);
        assert_int_equal(k.max_pods, 40); /* drop-ins in lexical order, last wins */

        KubeletSettings none = {};
        assert_int_equal(kubelet_config_load(root, "/etc/absent.json", &none), -ENOENT);

        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        assert_int_equal(system(cmd), 0);
}

static void test_missing_root(void **state) {
        NodeResources c;
        assert_true(capacity_read("/nonexistent-root", "/var/lib/kubelet", &c) < 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_eks_cpu_tiers),   cmocka_unit_test(test_c6a_2xlarge),
                cmocka_unit_test(test_kubelet_settings), cmocka_unit_test(test_read_root),
                cmocka_unit_test(test_missing_root),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
