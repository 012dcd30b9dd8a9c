/* SPDX-License-Identifier: Apache-2.0 */
/* The node's capacity and allocatable, computed on the node itself. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "resources.h"

/* What the node has and what pods may use, computed on the node itself like the kubelet does. */

typedef struct KubeletSettings {
        int64_t max_pods;                 /* 0: not set */
        bool has_kube_reserved;
        NodeResources kube_reserved;
        NodeResources system_reserved;
        bool has_eviction_memory;
        int64_t eviction_memory_bytes;    /* memory.available */
        bool has_eviction_nodefs;
        double eviction_nodefs_percent;   /* nodefs.available as a percentage, or */
        int64_t eviction_nodefs_bytes;    /* as an absolute quantity */
        char *root_dir;                   /* kubelet --root-dir; not in config.json, kept NULL */
} KubeletSettings;

/* Read capacity from ROOT/proc, ROOT/sys and a statvfs of ROOT/KUBELET_DIR. pods is left 0. */
int capacity_read(const char *root, const char *kubelet_dir, NodeResources *ret);

/* Parse a kubelet configuration (KubeletConfiguration, JSON or YAML) held in text. */
int kubelet_config_parse(const char *text, size_t len, KubeletSettings *ret);
/* Load ROOT/PATH and its drop-ins PATH.d/<name>.conf (AL2023), later files overriding earlier
 * ones. -ENOENT when there is no config at all. */
int kubelet_config_load(const char *root, const char *path, KubeletSettings *ret);

/* Max pods from an EKS eni-max-pods.txt ("instance-type max-pods" lines). -ENOENT if absent. */
int eni_max_pods_lookup(const char *root, const char *path, const char *instance_type,
                        int64_t *ret);

/* EKS's kube-reserved CPU (6 % of the first core, 1 % of the second, 0.5 % of cores 3-4,
 * 0.25 % of each further core) and memory (11 MiB × max pods + 255 MiB). */
int64_t eks_kube_reserved_cpu_millis(int64_t cpu_millis);
int64_t eks_kube_reserved_memory_bytes(int64_t max_pods);

/* allocatable = capacity − kube-reserved − system-reserved − eviction-hard − hugepages (memory);
 * kube-reserved and eviction thresholds come from the kubelet settings when set, else the EKS
 * defaults (ephemeral-storage 1 Gi reserved, memory.available 100 Mi, nodefs.available 10 %). */
void allocatable_compute(const NodeResources *capacity, const KubeletSettings *k,
                         NodeResources *ret);
