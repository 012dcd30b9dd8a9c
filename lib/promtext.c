/* SPDX-License-Identifier: Apache-2.0 */
/* Prometheus text exposition: escaped label values, fixed-bucket histograms. */
#include "promtext.h"

void prom_label_value(StrBuf *b, const char *s) {
        for (; s && *s; s++) {
                if (*s == '\\' || *s == '"')
                        strbuf_printf(b, "\\%c", *s);
                else if (*s == '\n')
                        strbuf_append(b, "\\n", 2);
                else
                        strbuf_append(b, s, 1);
        }
}

const double histogram_bounds_decision[HISTOGRAM_BUCKETS] = {
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10,
};
const double histogram_bounds_lifecycle[HISTOGRAM_BUCKETS] = {
        5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1800,
};

void histogram_init(Histogram *h, const double *bounds) {
        *h = (Histogram) { .bounds = bounds };
}

void histogram_observe(Histogram *h, double v) {
        size_t i = 0;
        if (!h->bounds)
                return;
        while (i < HISTOGRAM_BUCKETS && v > h->bounds[i])
                i++;
        h->counts[i]++;
        h->count++;
        h->sum += v;
}

void histogram_render(const Histogram *h, StrBuf *b, const char *name, const char *help) {
        uint64_t cumulative = 0;
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        for (size_t i = 0; h->bounds && i < HISTOGRAM_BUCKETS; i++) {
                cumulative += h->counts[i];
                strbuf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], (unsigned long long) cumulative);
        }
        strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
                      (unsigned long long) h->count, name, h->sum, name, (unsigned long long) h->count);
}

static void prom_metric(StrBuf *b, const char *type, const char *name, const char *help, uint64_t value) {
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                      (unsigned long long) value);
}

void prom_counter(StrBuf *b, const char *name, const char *help, uint64_t value) {
        prom_metric(b, "counter", name, help, value);
}

void prom_gauge(StrBuf *b, const char *name, const char *help, uint64_t value) {
        prom_metric(b, "gauge", name, help, value);
}

static void prom_metric_seconds(StrBuf *b, const char *type, const char *name, const char *help, double value) {
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.6f\n", name, help, name, type, name, value);
}

void prom_counter_seconds(StrBuf *b, const char *name, const char *help, double value) {
        prom_metric_seconds(b, "counter", name, help, value);
}

void prom_gauge_seconds(StrBuf *b, const char *name, const char *help, double value) {
        prom_metric_seconds(b, "gauge", name, help, value);
}
