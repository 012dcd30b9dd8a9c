/* SPDX-License-Identifier: Apache-2.0 */
/* Fleet metrics for /metrics, gathered from the pieces coordinator.c hands over. */
#pragma once

#include "strbuf.h"

typedef struct Leader Leader;
typedef struct Provisioner Provisioner;
typedef struct Registry Registry;
typedef struct StatusWriter StatusWriter;

/* What the fleet's metrics read (coordinator.c fills it in); every member but the registry may
 * be NULL (no provisioning, no election). */
typedef struct ObserveSources {
        const Registry *registry;      /* the nodes that report */
        const Provisioner *provisioner; /* watches, catalog, EC2 counters, histograms */
        const Leader *leader;          /* the Lease's transitions */
        const StatusWriter *status;    /* status writes */
} ObserveSources;

/* /metrics beyond the counters (docs/observability.md): the fleet by NodePool, instance type,
 * zone and capacity type (nodes, allocatable, requested, cost), drains (by reason, past their
 * deadline), the oldest pending pod, the Lease's transitions, the API watches' errors and the
 * latency histograms. What the Grafana dashboards and the alerting rules query. */
void observe_metrics(const ObserveSources *src, StrBuf *b);
