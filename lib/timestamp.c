/* SPDX-License-Identifier: Apache-2.0 */
/* Timestamp parsing (RFC 3339, HTTP-date, IMDS dates) into microseconds: one strict parser for
 * every daemon, with the calendar checked through timegm()'s round trip. */
#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <time.h>

#include "macro.h"
#include "timestamp.h"

#define TIMESTAMP_MAX_LEN 64

static const char months[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
static const char weekdays[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };

/* Exactly n digits at *p (advanced past them). */
static int digits(const char **p, unsigned n, int *ret) {
        int v = 0;
        for (unsigned i = 0; i < n; i++) {
                if (!isdigit((unsigned char) (*p)[i]))
                        return -EBADMSG;
                v = v * 10 + ((*p)[i] - '0');
        }
        *p += n;
        *ret = v;
        return 0;
}

static int expect(const char **p, char c) {
        if (**p != c)
                return -EBADMSG;
        (*p)++;
        return 0;
}

static int name_index(const char **p, const char (*names)[4], int n) {
        for (int i = 0; i < n; i++)
                if (strncmp(*p, names[i], 3) == 0) {
                        *p += 3;
                        return i;
                }
        return -EBADMSG;
}

/* HH:MM:SS into tm. */
static int clock_time(const char **p, struct tm *tm) {
        int r = digits(p, 2, &tm->tm_hour);
        if (r >= 0)
                r = expect(p, ':');
        if (r >= 0)
                r = digits(p, 2, &tm->tm_min);
        if (r >= 0)
                r = expect(p, ':');
        if (r >= 0)
                r = digits(p, 2, &tm->tm_sec);
        return r;
}

/* Broken-down UTC (tm_year as the full year, tm_mon 1..12) to seconds, refusing what timegm()
 * would normalise (31 Feb, 25:00) and years outside 1970..9999. */
static int to_seconds(const struct tm *in, int64_t *ret) {
        struct tm tm = *in, back;
        if (in->tm_year < 1970 || in->tm_year > 9999 || in->tm_mon < 1 || in->tm_mon > 12)
                return -ERANGE;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        tm.tm_isdst = 0;
        struct tm want = tm;
        time_t t = timegm(&tm);
        if (t == (time_t) -1 || !gmtime_r(&t, &back))
                return -ERANGE;
        if (back.tm_year != want.tm_year || back.tm_mon != want.tm_mon ||
            back.tm_mday != want.tm_mday || back.tm_hour != want.tm_hour ||
            back.tm_min != want.tm_min || back.tm_sec != want.tm_sec)
                return -ERANGE;
        *ret = (int64_t) t;
        return 0;
}

static bool too_long(const char *s) {
        return !s || strnlen(s, TIMESTAMP_MAX_LEN + 1) > TIMESTAMP_MAX_LEN;
}

int timestamp_parse_rfc3339(const char *s, TimestampFlags flags, int64_t *ret_usec) {
        struct tm tm = {};
        int64_t secs, frac_usec = 0, offset = 0;
        const char *p = s;
        int r;

        if (too_long(s))
                return -EBADMSG;
        r = digits(&p, 4, &tm.tm_year);
        if (r >= 0)
                r = expect(&p, '-');
        if (r >= 0)
                r = digits(&p, 2, &tm.tm_mon);
        if (r >= 0)
                r = expect(&p, '-');
        if (r >= 0)
                r = digits(&p, 2, &tm.tm_mday);
        if (r < 0)
                return r;
        if (*p != 'T' && *p != 't')
                return -EBADMSG;
        p++;
        r = clock_time(&p, &tm);
        if (r < 0)
                return r;
        if (*p == '.') {
                unsigned n = 0;
                int64_t scale = 100000;
                for (p++; isdigit((unsigned char) *p); p++, n++) {
                        frac_usec += (*p - '0') * scale;
                        scale /= 10;
                }
                if (n == 0 || n > 9)
                        return -EBADMSG;
        }
        if (*p == 'Z' || *p == 'z')
                p++;
        else if (*p == '+' || *p == '-') {
                int sign = *p == '-' ? -1 : 1, hh, mm;
                p++;
                r = digits(&p, 2, &hh);
                if (r >= 0)
                        r = expect(&p, ':');
                if (r >= 0)
                        r = digits(&p, 2, &mm);
                if (r < 0 || hh > 23 || mm > 59)
                        return -EBADMSG;
                offset = sign * (hh * 3600 + mm * 60);
                if (offset != 0 && (flags & TIMESTAMP_UTC_ONLY))
                        return -EBADMSG;
        } else
                return -EBADMSG;
        if (*p)
                return -EBADMSG;
        r = to_seconds(&tm, &secs);
        if (r < 0)
                return r;
        *ret_usec = (secs - offset) * (int64_t) USEC_PER_SEC + frac_usec;
        return 0;
}

/* DD Mon YYYY HH:MM:SS GMT (day of one or two digits) */
static int dmy_gmt(const char **p, unsigned day_digits, struct tm *tm) {
        int r = digits(p, day_digits, &tm->tm_mday);
        if (r >= 0)
                r = expect(p, ' ');
        if (r >= 0) {
                r = name_index(p, months, 12);
                tm->tm_mon = r + 1;
        }
        if (r >= 0)
                r = expect(p, ' ');
        if (r >= 0)
                r = digits(p, 4, &tm->tm_year);
        if (r >= 0)
                r = expect(p, ' ');
        if (r >= 0)
                r = clock_time(p, tm);
        if (r >= 0 && strncmp(*p, " GMT", 4) != 0)
                r = -EBADMSG;
        if (r < 0)
                return r;
        *p += 4;
        return 0;
}

static int finish(const struct tm *tm, int64_t *ret_usec) {
        int64_t secs;
        int r = to_seconds(tm, &secs);
        if (r < 0)
                return r;
        *ret_usec = secs * (int64_t) USEC_PER_SEC;
        return 0;
}

int timestamp_parse_http_date(const char *s, int64_t *ret_usec) {
        struct tm tm = {};
        const char *p = s;
        int r;

        if (too_long(s))
                return -EBADMSG;
        p += strspn(p, " \t");
        r = name_index(&p, weekdays, 7);
        if (r >= 0)
                r = expect(&p, ',');
        if (r >= 0)
                r = expect(&p, ' ');
        if (r >= 0)
                r = dmy_gmt(&p, 2, &tm);
        if (r < 0)
                return r;
        p += strspn(p, " \t\r\n");
        if (*p)
                return -EBADMSG;
        return finish(&tm, ret_usec);
}

int timestamp_parse_dmy_gmt(const char *s, int64_t *ret_usec) {
        struct tm tm = {};
        const char *p = s;

        if (too_long(s))
                return -EBADMSG;
        int r = dmy_gmt(&p, isdigit((unsigned char) s[0]) && isdigit((unsigned char) s[1]) ? 2 : 1, &tm);
        if (r < 0)
                return r;
        if (*p)
                return -EBADMSG;
        return finish(&tm, ret_usec);
}

int timestamp_parse_any(const char *s, int64_t *ret_usec) {
        if (too_long(s))
                return -EBADMSG;
        if (isalpha((unsigned char) s[strspn(s, " \t")]))
                return timestamp_parse_http_date(s, ret_usec);
        if (strlen(s) > 4 && s[4] == '-')
                return timestamp_parse_rfc3339(s, 0, ret_usec);
        return timestamp_parse_dmy_gmt(s, ret_usec);
}
