/* SPDX-License-Identifier: Apache-2.0 */
/* What the node has and may give pods: /proc, cgroups and the kubelet's configuration, read like
 * the kubelet. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "capacity.h"
#include "fileio.h"
#include "log.h"
#include "macro.h"
#include "quantity.h"
#include "yaml-json.h"

#define MiB (INT64_C(1024) * 1024)
#define GiB (MiB * 1024)
#define KUBELET_CONFIG_MAX (1024 * 1024)

static int path_join(char *buf, size_t size, const char *root, const char *path) {
        int n = snprintf(buf, size, "%s/%s", isempty(root) ? "" : root, path[0] == '/' ? path + 1 : path);
        return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

/* "0-3,8,10-11" → 7 */
static int count_cpu_list(const char *s, int64_t *ret) {
        int64_t n = 0;
        const char *p = s;
        while (*p && *p != '\n') {
                char *end;
                long a = strtol(p, &end, 10), b;
                if (end == p || a < 0)
                        return -EINVAL;
                p = end;
                if (*p == '-') {
                        b = strtol(p + 1, &end, 10);
                        if (end == p + 1 || b < a)
                                return -EINVAL;
                        p = end;
                } else
                        b = a;
                n += b - a + 1;
                if (*p == ',')
                        p++;
                else if (*p && *p != '\n')
                        return -EINVAL;
        }
        if (n <= 0)
                return -EINVAL;
        *ret = n;
        return 0;
}

static int read_cpus(const char *root, int64_t *ret) {
        char path[4096];
        _cleanup_free_ char *text = NULL;
        int r;

        r = path_join(path, sizeof path, root, "/sys/devices/system/cpu/online");
        if (r < 0)
                return r;
        if (read_file_bounded(path, 4096, &text, NULL) >= 0 && count_cpu_list(text, ret) >= 0)
                return 0;

        /* fall back to /proc/cpuinfo */
        free(text);
        text = NULL;
        r = path_join(path, sizeof path, root, "/proc/cpuinfo");
        if (r < 0)
                return r;
        r = read_file_bounded(path, 8 * 1024 * 1024, &text, NULL);
        if (r < 0)
                return r;
        int64_t n = 0;
        for (const char *l = text; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
                if (strncmp(l, "processor", 9) == 0 && (l[9] == ' ' || l[9] == '\t' || l[9] == ':'))
                        n++;
        if (n == 0)
                return -ENODATA;
        *ret = n;
        return 0;
}

static int meminfo_get(const char *text, const char *key, int64_t *ret) {
        size_t kl = strlen(key);
        for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
                if (strncmp(l, key, kl) != 0 || l[kl] != ':')
                        continue;
                char *end;
                errno = 0;
                long long v = strtoll(l + kl + 1, &end, 10);
                if (errno != 0 || v < 0)
                        return -EINVAL;
                while (*end == ' ')
                        end++;
                *ret = strncmp(end, "kB", 2) == 0 ? (int64_t) v * 1024 : (int64_t) v;
                return 0;
        }
        return -ENOENT;
}

static int read_hugepages(const char *root, const char *dir, int64_t page_bytes, int64_t *ret) {
        char path[4096];
        _cleanup_free_ char *text = NULL;
        char rel[256];
        snprintf(rel, sizeof rel, "/sys/kernel/mm/hugepages/%s/nr_hugepages", dir);
        int r = path_join(path, sizeof path, root, rel);
        if (r < 0)
                return r;
        r = read_file_bounded(path, 64, &text, NULL);
        if (r < 0) {
                *ret = 0;
                return 0;
        }
        long long n = strtoll(text, NULL, 10);
        *ret = n > 0 ? (int64_t) n * page_bytes : 0;
        return 0;
}

static int64_t count_gpus(const char *root) {
        char path[4096];
        if (path_join(path, sizeof path, root, "/proc/driver/nvidia/gpus") < 0)
                return 0;
        uint64_t n = 0;
        return dir_count_entries(path, &n) < 0 ? 0 : (int64_t) n;
}

int capacity_read(const char *root, const char *kubelet_dir, NodeResources *ret) {
        NodeResources c = {};
        char path[4096];
        _cleanup_free_ char *meminfo = NULL;
        int64_t cpus;
        int r;

        r = read_cpus(root, &cpus);
        if (r < 0)
                return log_debug_errno(r, "Cannot count CPUs under %s: %m", root);
        c.cpu_millis = cpus * 1000;

        r = path_join(path, sizeof path, root, "/proc/meminfo");
        if (r < 0)
                return r;
        r = read_file_bounded(path, 1024 * 1024, &meminfo, NULL);
        if (r < 0)
                return log_debug_errno(r, "Cannot read %s: %m", path);
        r = meminfo_get(meminfo, "MemTotal", &c.memory_bytes);
        if (r < 0)
                return log_debug_errno(r, "No MemTotal in %s.", path);

        (void) read_hugepages(root, "hugepages-2048kB", 2 * MiB, &c.hugepages_2mi_bytes);
        (void) read_hugepages(root, "hugepages-1048576kB", GiB, &c.hugepages_1gi_bytes);
        c.gpus = count_gpus(root);

        r = path_join(path, sizeof path, root, kubelet_dir);
        if (r < 0)
                return r;
        struct statvfs sv;
        if (statvfs(path, &sv) < 0) {
                /* the kubelet root may not exist yet on a booting node: use the root fs */
                r = path_join(path, sizeof path, root, "/");
                if (r < 0 || statvfs(path, &sv) < 0)
                        return log_debug_errno(errno, "statvfs %s: %m", path);
        }
        c.ephemeral_bytes = (int64_t) sv.f_blocks * (int64_t) sv.f_frsize;

        *ret = c;
        return 0;
}

static int parse_reserved(const cJSON *o, NodeResources *ret) {
        const cJSON *v;
        int r;
        if (!cJSON_IsObject(o))
                return -EINVAL;
        if ((v = cJSON_GetObjectItemCaseSensitive(o, "cpu"))) {
                if (!cJSON_IsString(v) || (r = quantity_parse_milli(v->valuestring, &ret->cpu_millis)) < 0)
                        return -EINVAL;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(o, "memory"))) {
                if (!cJSON_IsString(v) || (r = quantity_parse(v->valuestring, &ret->memory_bytes)) < 0)
                        return -EINVAL;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(o, "ephemeral-storage"))) {
                if (!cJSON_IsString(v) || (r = quantity_parse(v->valuestring, &ret->ephemeral_bytes)) < 0)
                        return -EINVAL;
        }
        return 0;
}

static int apply_config(const cJSON *root, KubeletSettings *k) {
        const cJSON *v;
        int r;

        if (!cJSON_IsObject(root))
                return log_debug_errno(EINVAL, "kubelet config is not an object");
        v = cJSON_GetObjectItemCaseSensitive(root, "kind");
        if (v && (!cJSON_IsString(v) || !streq(v->valuestring, "KubeletConfiguration")))
                return log_debug_errno(EINVAL, "kubelet config: kind is not KubeletConfiguration");

        if ((v = cJSON_GetObjectItemCaseSensitive(root, "maxPods"))) {
                if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 100000)
                        return log_debug_errno(EINVAL, "kubelet config: bad maxPods");
                k->max_pods = (int64_t) v->valuedouble;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(root, "kubeReserved"))) {
                NodeResources res = {};
                r = parse_reserved(v, &res);
                if (r < 0)
                        return log_debug_errno(r, "kubelet config: bad kubeReserved");
                k->kube_reserved = res;
                k->has_kube_reserved = true;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(root, "systemReserved"))) {
                NodeResources res = {};
                r = parse_reserved(v, &res);
                if (r < 0)
                        return log_debug_errno(r, "kubelet config: bad systemReserved");
                k->system_reserved = res;
        }
        if ((v = cJSON_GetObjectItemCaseSensitive(root, "evictionHard"))) {
                if (!cJSON_IsObject(v))
                        return log_debug_errno(EINVAL, "kubelet config: bad evictionHard");
                const cJSON *m = cJSON_GetObjectItemCaseSensitive(v, "memory.available");
                if (m) {
                        if (!cJSON_IsString(m) ||
                            quantity_parse(m->valuestring, &k->eviction_memory_bytes) < 0)
                                return log_debug_errno(EINVAL, "kubelet config: bad memory.available");
                        k->has_eviction_memory = true;
                }
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(v, "nodefs.available");
                if (n) {
                        if (!cJSON_IsString(n))
                                return log_debug_errno(EINVAL, "kubelet config: bad nodefs.available");
                        k->eviction_nodefs_percent = 0;
                        k->eviction_nodefs_bytes = 0;
                        if (quantity_parse_percent(n->valuestring, &k->eviction_nodefs_percent) < 0 &&
                            quantity_parse(n->valuestring, &k->eviction_nodefs_bytes) < 0)
                                return log_debug_errno(EINVAL, "kubelet config: bad nodefs.available");
                        k->has_eviction_nodefs = true;
                }
        }
        return 0;
}

int kubelet_config_parse(const char *text, size_t len, KubeletSettings *k) {
        cJSON *root = NULL;
        int r = json_or_yaml_parse(text, len, &root);
        if (r < 0)
                return log_debug_errno(r, "kubelet config: not JSON or YAML");
        r = apply_config(root, k);
        cJSON_Delete(root);
        return r;
}

static int filter_conf(const struct dirent *de) {
        size_t l = strlen(de->d_name);
        return de->d_name[0] != '.' && l > 5 && streq(de->d_name + l - 5, ".conf");
}

int kubelet_config_load(const char *root, const char *path, KubeletSettings *ret) {
        KubeletSettings k = {};
        char full[4096];
        bool found = false;
        int r;

        r = path_join(full, sizeof full, root, path);
        if (r < 0)
                return r;
        _cleanup_free_ char *text = NULL;
        size_t len;
        r = read_file_bounded(full, KUBELET_CONFIG_MAX, &text, &len);
        if (r >= 0) {
                r = kubelet_config_parse(text, len, &k);
                if (r < 0)
                        return r;
                found = true;
        } else if (r != -ENOENT)
                return r;

        /* AL2023 nodeadm drop-ins: config.json.d/NAME.conf, applied in lexical order */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s.d", full);
        struct dirent **names = NULL;
        int n = scandir(dir, &names, filter_conf, alphasort);
        for (int i = 0; i < n; i++) {
                char p[4500];
                snprintf(p, sizeof p, "%s/%s", dir, names[i]->d_name);
                _cleanup_free_ char *t = NULL;
                size_t tl;
                r = read_file_bounded(p, KUBELET_CONFIG_MAX, &t, &tl);
                if (r >= 0)
                        r = kubelet_config_parse(t, tl, &k);
                if (r < 0) {
                        for (int j = i; j < n; j++)
                                free(names[j]);
                        free(names);
                        return r;
                }
                found = true;
                free(names[i]);
        }
        free(names);

        if (!found)
                return -ENOENT;
        *ret = k;
        return 0;
}

int eni_max_pods_lookup(const char *root, const char *path, const char *instance_type, int64_t *ret) {
        char full[4096];
        _cleanup_free_ char *text = NULL;
        int r;

        if (isempty(instance_type))
                return -ENOENT;
        r = path_join(full, sizeof full, root, path);
        if (r < 0)
                return r;
        r = read_file_bounded(full, 4 * 1024 * 1024, &text, NULL);
        if (r < 0)
                return r;
        size_t tl = strlen(instance_type);
        for (char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
                if (*l == '#' || strncmp(l, instance_type, tl) != 0 || (l[tl] != ' ' && l[tl] != '\t'))
                        continue;
                long long v = strtoll(l + tl, NULL, 10);
                if (v <= 0 || v > 100000)
                        return -EINVAL;
                *ret = v;
                return 0;
        }
        return -ENOENT;
}

int64_t eks_kube_reserved_cpu_millis(int64_t cpu_millis) {
        /* in thousandths of a millicore to keep 0.25 % exact */
        int64_t cores = cpu_millis / 1000, r = 0;
        for (int64_t c = 1; c <= cores; c++) {
                if (c == 1)
                        r += 60000;
                else if (c == 2)
                        r += 10000;
                else if (c <= 4)
                        r += 5000;
                else
                        r += 2500;
        }
        return (r + 999) / 1000;
}

int64_t eks_kube_reserved_memory_bytes(int64_t max_pods) {
        return (11 * max_pods + 255) * MiB;
}

static int64_t clamp0(int64_t v) {
        return v < 0 ? 0 : v;
}

void allocatable_compute(const NodeResources *cap, const KubeletSettings *k, NodeResources *ret) {
        NodeResources a = *cap;
        NodeResources kr;

        if (k->has_kube_reserved)
                kr = k->kube_reserved;
        else
                kr = (NodeResources) {
                        .cpu_millis = eks_kube_reserved_cpu_millis(cap->cpu_millis),
                        .memory_bytes = eks_kube_reserved_memory_bytes(cap->pods),
                        .ephemeral_bytes = GiB,
                };
        int64_t ev_mem = k->has_eviction_memory ? k->eviction_memory_bytes : 100 * MiB;
        int64_t ev_fs = k->has_eviction_nodefs
                                ? (k->eviction_nodefs_bytes > 0
                                           ? k->eviction_nodefs_bytes
                                           : (int64_t) ((double) cap->ephemeral_bytes *
                                                        k->eviction_nodefs_percent / 100.0))
                                : cap->ephemeral_bytes / 10;

        a.cpu_millis = clamp0(cap->cpu_millis - kr.cpu_millis - k->system_reserved.cpu_millis);
        a.memory_bytes = clamp0(cap->memory_bytes - kr.memory_bytes - k->system_reserved.memory_bytes -
                                ev_mem - cap->hugepages_2mi_bytes - cap->hugepages_1gi_bytes);
        a.ephemeral_bytes = clamp0(cap->ephemeral_bytes - kr.ephemeral_bytes -
                                   k->system_reserved.ephemeral_bytes - ev_fs);
        *ret = a;
}
