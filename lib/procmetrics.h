/* SPDX-License-Identifier: Apache-2.0 */
/* The process metrics every Prometheus client library exports (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_open_fds, process_max_fds, ...), read from /proc/self,
 * with the same names and meanings: the coordinator's memory and descriptors grow with the
 * fleet (docs/helm.md, "Sizing the coordinator"). */
#pragma once

#include <stdint.h>

#include "strbuf.h"

typedef struct ProcStat {
        uint64_t utime_ticks, stime_ticks; /* user and system CPU, clock ticks */
        uint64_t start_ticks;              /* start, clock ticks after boot */
        uint64_t vsize_bytes;
        uint64_t rss_pages;
} ProcStat;

/* The fields of one /proc/PID/stat line. The command name (field 2) may hold spaces and
 * parentheses: the fields are counted from its last ')'. -EINVAL for a line that is not one. */
int proc_stat_parse(const char *line, ProcStat *ret);

/* "btime N" of /proc/stat: the boot, seconds since the epoch. -EINVAL when missing. */
int proc_boot_time_parse(const char *text, uint64_t *ret);

/* Renders the process_* families for this process; a source that cannot be read leaves its
 * families out rather than reporting a wrong value. */
void process_metrics(StrBuf *b);
