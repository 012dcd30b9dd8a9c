/* SPDX-License-Identifier: Apache-2.0 */
/* Pieces of Prometheus's text exposition format. */
#pragma once

#include <stdint.h>

#include "strbuf.h"

/* A label value, escaped (backslash, quote, newline). */
void prom_label_value(StrBuf *b, const char *s);

/* One metric without labels: "# HELP", "# TYPE" and its value. */
void prom_counter(StrBuf *b, const char *name, const char *help, uint64_t value);
void prom_gauge(StrBuf *b, const char *name, const char *help, uint64_t value);
/* The same for a value in seconds (microsecond precision). */
void prom_counter_seconds(StrBuf *b, const char *name, const char *help, double value);
void prom_gauge_seconds(StrBuf *b, const char *name, const char *help, double value);

/* A histogram with fixed upper bounds (seconds). */
#define HISTOGRAM_BUCKETS 12

typedef struct Histogram {
        const double *bounds;          /* HISTOGRAM_BUCKETS ascending upper bounds; +Inf is added */
        uint64_t counts[HISTOGRAM_BUCKETS + 1];
        uint64_t count;
        double sum;
} Histogram;

/* Bounds for decisions (1 ms .. 10 s) and for node lifecycles (5 s .. 30 min). */
extern const double histogram_bounds_decision[HISTOGRAM_BUCKETS];
extern const double histogram_bounds_lifecycle[HISTOGRAM_BUCKETS];

void histogram_init(Histogram *h, const double *bounds);
void histogram_observe(Histogram *h, double v);
/* "# HELP", "# TYPE" and the cumulative buckets, _sum and _count of metric name. */
void histogram_render(const Histogram *h, StrBuf *b, const char *name, const char *help);
