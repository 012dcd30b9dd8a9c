/* SPDX-License-Identifier: Apache-2.0 */
/* Kubernetes resource quantities and resource names. */

#include <inttypes.h>
#include <stdio.h>

#include "macro.h"
#include "quantity.h"
#include "solver-internal.h"

static const char *const resource_names[_SOLVER_RES_MAX] = {
        [SOLVER_RES_CPU] = "cpu",
        [SOLVER_RES_MEMORY] = "memory",
        [SOLVER_RES_PODS] = "pods",
        [SOLVER_RES_EPHEMERAL] = "ephemeral-storage",
        [SOLVER_RES_NVIDIA_GPU] = "nvidia.com/gpu",
        [SOLVER_RES_AMD_GPU] = "amd.com/gpu",
        [SOLVER_RES_NEURON] = "aws.amazon.com/neuron",
        [SOLVER_RES_POD_ENI] = "vpc.amazonaws.com/pod-eni",
        [SOLVER_RES_HUGEPAGES_2MI] = "hugepages-2Mi",
        [SOLVER_RES_HUGEPAGES_1GI] = "hugepages-1Gi",
        [SOLVER_RES_OTHER] = "other",
};

int solver_resource_from_name(const char *name) {
        if (isempty(name))
                return -EINVAL;
        for (int r = 0; r < SOLVER_RES_OTHER; r++)
                if (streq(name, resource_names[r]))
                        return r;
        if (strchr(name, '/'))
                return SOLVER_RES_OTHER;
        return -EINVAL;
}

const char *solver_resource_to_name(SolverResource r) {
        if ((unsigned) r >= _SOLVER_RES_MAX)
                return "?";
        return resource_names[r];
}

static bool resource_is_bytes(SolverResource r) {
        return r == SOLVER_RES_MEMORY || r == SOLVER_RES_EPHEMERAL || r == SOLVER_RES_HUGEPAGES_2MI ||
               r == SOLVER_RES_HUGEPAGES_1GI;
}

int solver_parse_quantity(const char *s, SolverResource r, int64_t *ret) {
        return quantity_parse_scaled(s, r == SOLVER_RES_CPU ? 3 : 0, ret);
}

const char *solver_format_quantity(int64_t v, SolverResource r, char *buf, size_t size) {
        if (r == SOLVER_RES_CPU) {
                if (v % 1000 == 0)
                        snprintf(buf, size, "%" PRId64, v / 1000);
                else
                        snprintf(buf, size, "%" PRId64 "m", v);
        } else if (resource_is_bytes(r) && v != 0) {
                static const char *const units[] = { "Ki", "Mi", "Gi", "Ti" };
                int u = -1;
                int64_t x = v;
                while (u < 3 && x % 1024 == 0) {
                        x /= 1024;
                        u++;
                }
                if (u < 0)
                        snprintf(buf, size, "%" PRId64, v);
                else
                        snprintf(buf, size, "%" PRId64 "%s", x, units[u]);
        } else
                snprintf(buf, size, "%" PRId64, v);
        return buf;
}

const char *solver_format_resources(SolverArena *a, const int64_t *v) {
        char out[512] = "";
        size_t o = 0;
        for (int r = 0; r < _SOLVER_RES_MAX; r++) {
                if (v[r] == 0 || r == SOLVER_RES_PODS)
                        continue;
                char b[48];
                int n = snprintf(out + o, sizeof(out) - o, "%s%s=%s", o ? " " : "",
                                 resource_names[r], solver_format_quantity(v[r], r, b, sizeof(b)));
                if (n < 0 || (size_t) n >= sizeof(out) - o)
                        break;
                o += (size_t) n;
        }
        if (o == 0)
                snprintf(out, sizeof(out), "pods=1");
        return solver_arena_strdup(a, out);
}
