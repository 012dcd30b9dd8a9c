/* SPDX-License-Identifier: Apache-2.0 */
/* Logging for the daemons. */
#pragma once

#include <syslog.h>

#include "macro.h"

/* Logging for the daemons. Under systemd (JOURNAL_STREAM set) lines carry the sd-daemon "<N>"
 * priority prefix so journald records the level; otherwise a timestamped human line. lib/ code
 * uses log_debug only: it returns errors and the caller logs where the decision is taken. */

void log_set_max_level(int level);
int log_get_max_level(void);
int log_parse_level(const char *s); /* "debug", "info", ... or 0..7; -EINVAL otherwise */
void log_set_ident(const char *ident);

/* Returns -abs(error) so callers can "return log_error_errno(r, ...)". "%m" expands to the
 * error's text. */
int log_internal(int level, int error, const char *file, int line, const char *func,
                 const char *fmt, ...) _printf_(6, 7);

#define log_full_errno(level, error, ...) \
        log_internal((level), (error), __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_full(level, ...) (void) log_full_errno((level), 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)

#define log_debug_errno(e, ...) log_full_errno(LOG_DEBUG, (e), __VA_ARGS__)
#define log_info_errno(e, ...) log_full_errno(LOG_INFO, (e), __VA_ARGS__)
#define log_notice_errno(e, ...) log_full_errno(LOG_NOTICE, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_full_errno(LOG_ERR, (e), __VA_ARGS__)

#define log_oom() log_error_errno(ENOMEM, "Out of memory.")
