/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include "coordinator.h"
#include "strbuf.h"

/* /metrics beyond the counters (docs/observability.md): the fleet by NodePool, instance type,
 * zone and capacity type (nodes, allocatable, requested, cost), drains (by reason, past their
 * deadline), the oldest pending pod, the Lease's transitions, the API watches' errors and the
 * latency histograms. What the Grafana dashboards and the alerting rules query. */
void observe_metrics(Coordinator *c, StrBuf *b);
