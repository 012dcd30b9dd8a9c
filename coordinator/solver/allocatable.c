/* SPDX-License-Identifier: Apache-2.0 */
/* Kubelet allocatable estimate for an instance type that has not reported yet (EKS AL2023, as
 * Karpenter computes it). See ../shared/REFERENCE.md "EKS node allocatable". */

#include <math.h>

#include "macro.h"
#include "solver-internal.h"

#define MI ((int64_t) 1024 * 1024)
#define GI (MI * 1024)

static int64_t kube_reserved_cpu(int64_t cpu_millis) {
        /* 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% of the rest. */
        static const struct {
                int64_t start, end;
                double pct;
        } tiers[] = {
                { 0, 1000, 0.06 },
                { 1000, 2000, 0.01 },
                { 2000, 4000, 0.005 },
                { 4000, INT64_MAX / 2, 0.0025 },
        };
        double r = 0;
        for (size_t i = 0; i < ELEMENTSOF(tiers); i++) {
                if (cpu_millis <= tiers[i].start)
                        break;
                int64_t span = MIN(cpu_millis, tiers[i].end) - tiers[i].start;
                r += (double) span * tiers[i].pct;
        }
        return (int64_t) llround(r);
}

int solver_kubelet_allocatable(SolverResources *capacity, uint32_t enis, uint32_t ipv4_per_eni,
                               const SolverKubelet *kubelet, double vm_overhead_percent,
                               SolverResources *ret_allocatable) {
        static const SolverKubelet none = {};
        if (!capacity || !ret_allocatable)
                return -EINVAL;
        if (!kubelet)
                kubelet = &none;
        if (vm_overhead_percent < 0 || vm_overhead_percent >= 100)
                return -EINVAL;

        int64_t pods;
        if (kubelet->max_pods > 0)
                pods = kubelet->max_pods;
        else if (enis > 0 && ipv4_per_eni > 1)
                pods = (int64_t) enis * (ipv4_per_eni - 1) + 2;
        else
                pods = 110;
        if (kubelet->pods_per_core > 0) {
                int64_t ppc = (int64_t) kubelet->pods_per_core * ((capacity->v[SOLVER_RES_CPU] + 999) / 1000);
                pods = MIN(pods, ppc);
        }
        capacity->v[SOLVER_RES_PODS] = pods;

        /* The hypervisor keeps part of the nominal memory; Karpenter rounds it up to MiB. */
        int64_t mem_mi = capacity->v[SOLVER_RES_MEMORY] / MI;
        int64_t overhead_mi = (int64_t) ceil((double) mem_mi * vm_overhead_percent / 100.0);
        capacity->v[SOLVER_RES_MEMORY] -= overhead_mi * MI;

        SolverResources a = *capacity;
        int64_t kr_cpu = kubelet->has_kube_reserved_cpu ? kubelet->kube_reserved_cpu
                                                        : kube_reserved_cpu(capacity->v[SOLVER_RES_CPU]);
        int64_t kr_mem = kubelet->has_kube_reserved_memory ? kubelet->kube_reserved_memory
                                                           : (11 * pods + 255) * MI;
        int64_t sr_cpu = kubelet->has_system_reserved_cpu ? kubelet->system_reserved_cpu : 0;
        int64_t sr_mem = kubelet->has_system_reserved_memory ? kubelet->system_reserved_memory : 0;
        /* a percentage threshold is of the capacity the kubelet sees, as the kubelet takes it */
        int64_t ev_mem = kubelet->has_eviction_memory       ? kubelet->eviction_memory
                         : kubelet->has_eviction_memory_pct ? (int64_t) ((double) capacity->v[SOLVER_RES_MEMORY] *
                                                                         kubelet->eviction_memory_pct / 100.0)
                                                            : 100 * MI;
        int64_t eph = capacity->v[SOLVER_RES_EPHEMERAL];
        int64_t ev_fs = kubelet->has_eviction_nodefs       ? kubelet->eviction_nodefs
                        : kubelet->has_eviction_nodefs_pct ? (int64_t) ((double) eph * kubelet->eviction_nodefs_pct / 100.0)
                                                           : eph / 10;
        int64_t kr_eph = kubelet->has_kube_reserved_ephemeral ? kubelet->kube_reserved_ephemeral : GI;
        int64_t sr_eph = kubelet->has_system_reserved_ephemeral ? kubelet->system_reserved_ephemeral : 0;

        a.v[SOLVER_RES_CPU] -= kr_cpu + sr_cpu;
        a.v[SOLVER_RES_MEMORY] -= kr_mem + sr_mem + ev_mem;
        if (eph > 0)
                a.v[SOLVER_RES_EPHEMERAL] -= kr_eph + sr_eph + ev_fs;
        for (int r = 0; r < _SOLVER_RES_MAX; r++)
                if (a.v[r] < 0)
                        a.v[r] = 0;
        *ret_allocatable = a;
        return 0;
}
