/* SPDX-License-Identifier: Apache-2.0 */
/* process_* metrics from /proc/self (promtext's conventions; the names and units of the
 * Prometheus client libraries' process collector). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fileio.h"
#include "macro.h"
#include "procmetrics.h"
#include "promtext.h"

#define PROC_STAT_MAX 4096    /* one line of /proc/self/stat */
#define PROC_STAT_ALL_MAX (1 << 20) /* /proc/stat: a line per CPU, interrupts */

int proc_stat_parse(const char *line, ProcStat *ret) {
        const char *p = line ? strrchr(line, ')') : NULL;
        if (!p)
                return -EINVAL;
        /* after the name: field 3 (state) onward; utime is field 14, stime 15, starttime 22,
         * vsize 23, rss 24 (proc(5)) */
        uint64_t v[25] = {};
        int field = 3;
        for (p++; *p && field <= 24;) {
                while (*p == ' ')
                        p++;
                if (!*p || *p == '\n')
                        break;
                char *end;
                if (field == 3) /* the state, a letter */
                        end = (char *) p + strcspn(p, " ");
                else {
                        errno = 0;
                        long long n = strtoll(p, &end, 10);
                        if (end == p || errno)
                                return -EINVAL;
                        v[field] = n < 0 ? 0 : (uint64_t) n;
                }
                p = end;
                field++;
        }
        if (field <= 24)
                return -EINVAL;
        *ret = (ProcStat) { .utime_ticks = v[14], .stime_ticks = v[15], .start_ticks = v[22],
                            .vsize_bytes = v[23], .rss_pages = v[24] };
        return 0;
}

int proc_boot_time_parse(const char *text, uint64_t *ret) {
        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
                unsigned long long t;
                if (sscanf(p, "btime %llu", &t) == 1) {
                        *ret = t;
                        return 0;
                }
        }
        return -EINVAL;
}

/* Descriptors open now: the entries of /proc/self/fd but "." and "..", and the one the
 * listing itself holds. */
static int open_fds(uint64_t *ret) {
        uint64_t n = 0;
        int r = dir_count_entries("/proc/self/fd", &n);
        if (r < 0)
                return r;
        *ret = n > 0 ? n - 1 : 0;
        return 0;
}

void process_metrics(StrBuf *b) {
        _cleanup_free_ char *stat = NULL, *all = NULL;
        long ticks = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
        ProcStat ps;
        if (ticks > 0 && page > 0 && read_file_bounded("/proc/self/stat", PROC_STAT_MAX, &stat, NULL) >= 0 &&
            proc_stat_parse(stat, &ps) >= 0) {
                prom_counter_seconds(b, "process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                                     (double) (ps.utime_ticks + ps.stime_ticks) / (double) ticks);
                prom_gauge(b, "process_resident_memory_bytes", "Resident memory size in bytes.",
                           ps.rss_pages * (uint64_t) page);
                prom_gauge(b, "process_virtual_memory_bytes", "Virtual memory size in bytes.", ps.vsize_bytes);
                static uint64_t boot; /* constant: /proc/stat is read once */
                if (boot == 0 && read_file_bounded("/proc/stat", PROC_STAT_ALL_MAX, &all, NULL) >= 0 &&
                    proc_boot_time_parse(all, &boot) < 0)
                        boot = 0;
                if (boot > 0)
                        prom_gauge_seconds(b, "process_start_time_seconds",
                                           "Start time of the process since unix epoch in seconds.",
                                           (double) boot + (double) ps.start_ticks / (double) ticks);
        }
        uint64_t fds = 0;
        if (open_fds(&fds) >= 0)
                prom_gauge(b, "process_open_fds", "Number of open file descriptors.", fds);
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
                prom_gauge(b, "process_max_fds", "Maximum number of open file descriptors.", (uint64_t) rl.rlim_cur);
}
