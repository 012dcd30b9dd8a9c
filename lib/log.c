/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"

static int max_level = LOG_INFO;
static const char *ident = NULL;
static int journal = -1;

static const char *const level_names[] = {
        "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

void log_set_max_level(int level) {
        if (level >= LOG_EMERG && level <= LOG_DEBUG)
                max_level = level;
}

int log_get_max_level(void) {
        return max_level;
}

void log_set_ident(const char *s) {
        ident = s;
}

int log_parse_level(const char *s) {
        if (isempty(s))
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                if (strcasecmp(s, level_names[i]) == 0)
                        return (int) i;
        if (strcasecmp(s, "error") == 0)
                return LOG_ERR;
        if (strcasecmp(s, "warn") == 0)
                return LOG_WARNING;
        if (s[0] >= '0' && s[0] <= '7' && s[1] == 0)
                return s[0] - '0';
        return -EINVAL;
}

/* One call, one line: control characters in what was formatted (a newline, an escape, a NUL's
 * neighbours from a peer's string) are written as \xNN, so text that came from outside (an
 * instance id, a node name, an event id) cannot start a line of its own, with a priority prefix of
 * its choosing, or rewrite the terminal. */
static void escape_controls(const char *in, char *out, size_t size) {
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *) in; *p && o + 5 < size; p++) {
                if (*p < 0x20 || *p == 0x7f) {
                        out[o++] = '\\';
                        out[o++] = 'x';
                        out[o++] = hex[*p >> 4];
                        out[o++] = hex[*p & 15];
                } else
                        out[o++] = (char) *p;
        }
        out[o] = 0;
}

int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) {
        int saved = errno;
        error = error < 0 ? -error : error;

        if (level > max_level) {
                errno = saved;
                return -error;
        }
        if (journal < 0)
                journal = getenv("JOURNAL_STREAM") != NULL;

        char raw[2048], msg[2048];
        va_list ap;
        va_start(ap, fmt);
        errno = error; /* "%m" expands to the error we were given */
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        escape_controls(raw, msg, sizeof msg);

        if (journal) {
                fprintf(stderr, "<%d>%s\n", level, msg);
        } else {
                struct timespec ts;
                struct tm tm;
                char when[32];
                clock_gettime(CLOCK_REALTIME, &ts);
                gmtime_r(&ts.tv_sec, &tm);
                strftime(when, sizeof when, "%H:%M:%S", &tm);
                if (max_level >= LOG_DEBUG)
                        fprintf(stderr, "%s.%03ld %s[%s] %s (%s:%d %s)\n", when, ts.tv_nsec / 1000000,
                                ident ? ident : "", level_names[level], msg, file, line, func);
                else
                        fprintf(stderr, "%s.%03ld %s[%s] %s\n", when, ts.tv_nsec / 1000000,
                                ident ? ident : "", level_names[level], msg);
        }
        errno = saved;
        return -error;
}
