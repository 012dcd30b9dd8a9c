/* SPDX-License-Identifier: Apache-2.0 */
/* The kubelet's resource names and amounts. */
#pragma once

#include <stdint.h>

/* What a node has, what pods may use, what a pod asks for: the kubelet's resource names. */
typedef struct NodeResources {
        int64_t cpu_millis;
        int64_t memory_bytes;
        int64_t pods;
        int64_t ephemeral_bytes;
        int64_t hugepages_2mi_bytes;
        int64_t hugepages_1gi_bytes;
        int64_t gpus;
} NodeResources;
