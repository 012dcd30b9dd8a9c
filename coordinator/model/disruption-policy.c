/* SPDX-License-Identifier: Apache-2.0 */
/* The pure rules of disruption: cron schedules, budgets, drift hashes. */
#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "disruption-policy.h"
#include "json-util.h"
#include "nodeclass-check.h"
#include "nodepool.h"
#include "macro.h"
#include "strbuf.h"

static const char *const reason_names[] = {
        [DISRUPTION_EMPTY] = "Empty",
        [DISRUPTION_DRIFTED] = "Drifted",
        [DISRUPTION_UNDERUTILIZED] = "Underutilized",
};

const char *disruption_reason_to_name(DisruptionReason r) {
        if ((unsigned) r >= ELEMENTSOF(reason_names))
                return "?";
        return reason_names[r];
}

/* ---- cron ------------------------------------------------------------------------------------ */

typedef struct CronField {
        int lo, hi;
        const char *const *names; /* 3-letter names from lo, or NULL */
} CronField;

static const char *const MONTHS[] = { "jan", "feb", "mar", "apr", "may", "jun",
                                      "jul", "aug", "sep", "oct", "nov", "dec", NULL };
static const char *const DAYS[] = { "sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL };

static const CronField FIELDS[5] = {
        { 0, 59, NULL }, { 0, 23, NULL }, { 1, 31, NULL }, { 1, 12, MONTHS }, { 0, 6, DAYS },
};

static int cron_value(const CronField *f, const char **s, int *ret) {
        const char *p = *s;
        if (isdigit((unsigned char) *p)) {
                int v = 0;
                while (isdigit((unsigned char) *p) && v < 1000)
                        v = v * 10 + (*p++ - '0');
                /* day of week 7 is Sunday too */
                if (f == &FIELDS[4] && v == 7)
                        v = 0;
                if (v < f->lo || v > f->hi)
                        return -EINVAL;
                *ret = v;
                *s = p;
                return 0;
        }
        for (size_t i = 0; f->names && f->names[i]; i++)
                if (strncasecmp(p, f->names[i], 3) == 0) {
                        *ret = f->lo + (int) i;
                        *s = p + 3;
                        return 0;
                }
        return -EINVAL;
}

/* One field into a bit set; *ret_star when it is '*' (day fields combine differently then). */
static int cron_field(const CronField *f, const char *s, size_t len, uint64_t *ret, bool *ret_star) {
        char buf[128];
        if (len == 0 || len >= sizeof buf)
                return -EINVAL;
        memcpy(buf, s, len);
        buf[len] = 0;
        *ret = 0;
        *ret_star = buf[0] == '*' && (buf[1] == 0 || buf[1] == '/');
        char *save = NULL;
        for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
                const char *p = part;
                int lo, hi, step = 1;
                if (*p == '*') {
                        lo = f->lo;
                        hi = f->hi;
                        p++;
                } else {
                        if (cron_value(f, &p, &lo) < 0)
                                return -EINVAL;
                        hi = lo;
                        if (*p == '-') {
                                p++;
                                if (cron_value(f, &p, &hi) < 0 || hi < lo)
                                        return -EINVAL;
                        }
                }
                if (*p == '/') {
                        p++;
                        char *end;
                        long v = strtol(p, &end, 10);
                        if (end == p || v <= 0 || v > 60)
                                return -EINVAL;
                        step = (int) v;
                        p = end;
                        if (hi == lo && part[0] != '*')
                                hi = f->hi; /* "5/15": from 5 to the end */
                }
                if (*p)
                        return -EINVAL;
                for (int v = lo; v <= hi; v += step)
                        *ret |= UINT64_C(1) << v;
        }
        return 0;
}

typedef struct Cron {
        uint64_t bits[5];
        bool star[5];
} Cron;

static int cron_parse(const char *spec, Cron *c) {
        static const struct {
                const char *name, *expr;
        } macros[] = {
                { "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
                { "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },   { "@midnight", "0 0 * * *" },
                { "@hourly", "0 * * * *" },
        };
        if (!spec)
                return -EINVAL;
        while (isspace((unsigned char) *spec))
                spec++;
        for (size_t i = 0; i < ELEMENTSOF(macros); i++)
                if (strcasecmp(spec, macros[i].name) == 0)
                        return cron_parse(macros[i].expr, c);
        const char *p = spec;
        for (int i = 0; i < 5; i++) {
                while (isspace((unsigned char) *p))
                        p++;
                const char *start = p;
                while (*p && !isspace((unsigned char) *p))
                        p++;
                if (cron_field(&FIELDS[i], start, (size_t) (p - start), &c->bits[i], &c->star[i]) < 0)
                        return -EINVAL;
        }
        while (isspace((unsigned char) *p))
                p++;
        return *p ? -EINVAL : 0;
}

int disruption_cron_valid(const char *spec) {
        Cron c;
        return cron_parse(spec, &c);
}

static bool cron_match(const Cron *c, time_t t) {
        struct tm tm;
        if (!gmtime_r(&t, &tm))
                return false;
        if (!(c->bits[0] >> tm.tm_min & 1) || !(c->bits[1] >> tm.tm_hour & 1) || !(c->bits[3] >> (tm.tm_mon + 1) & 1))
                return false;
        bool dom = c->bits[2] >> tm.tm_mday & 1, dow = c->bits[4] >> tm.tm_wday & 1;
        /* both day fields restricted: either may match (cron's rule) */
        if (!c->star[2] && !c->star[4])
                return dom || dow;
        return dom && dow;
}

bool disruption_cron_matches(const char *spec, time_t t) {
        Cron c;
        return cron_parse(spec, &c) >= 0 && cron_match(&c, t);
}

bool disruption_cron_active(const char *spec, int64_t duration_s, time_t now) {
        Cron c;
        if (cron_parse(spec, &c) < 0 || duration_s <= 0)
                return false;
        /* a window opened by a firing within the last duration_s (at most 31 days looked at) */
        int64_t minutes = MIN((duration_s + 59) / 60, (int64_t) 31 * 24 * 60);
        time_t m = now - now % 60;
        for (int64_t i = 0; i < minutes; i++, m -= 60)
                if (cron_match(&c, m) && now < m + duration_s)
                        return true;
        return false;
}

/* ---- budgets --------------------------------------------------------------------------------- */

/* Percentages of nodes round up, as Karpenter's do. */
static size_t percent_of(size_t n, double pct) {
        double x = (double) n * pct / 100.0;
        size_t i = (size_t) x;
        return (double) i < x ? i + 1 : i;
}

size_t disruption_budget(const cJSON *budgets, DisruptionReason r, size_t pool_nodes, time_t now) {
        size_t best = SIZE_MAX;
        bool any = false;
        const cJSON *b;
        cJSON_ArrayForEach(b, budgets) {
                any = true;
                const cJSON *reasons = cJSON_GetObjectItemCaseSensitive(b, "reasons"), *rs;
                if (cJSON_GetArraySize(reasons) > 0) {
                        bool applies = false;
                        cJSON_ArrayForEach(rs, reasons)
                                applies |= cJSON_IsString(rs) && streq(rs->valuestring, disruption_reason_to_name(r));
                        if (!applies)
                                continue;
                }
                const cJSON *sched = cJSON_GetObjectItemCaseSensitive(b, "schedule");
                const cJSON *dur = cJSON_GetObjectItemCaseSensitive(b, "duration");
                if (cJSON_IsString(sched)) {
                        int64_t d = 0;
                        if (!cJSON_IsString(dur) || nodepool_parse_duration(dur->valuestring, &d) < 0 ||
                            !disruption_cron_active(sched->valuestring, d, now))
                                continue;
                }
                const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(b, "nodes");
                if (!cJSON_IsString(nodes))
                        continue;
                char *end;
                double v = strtod(nodes->valuestring, &end);
                if (end == nodes->valuestring || v < 0)
                        continue;
                size_t n = *end == '%' ? percent_of(pool_nodes, v) : (size_t) v;
                best = MIN(best, n);
        }
        if (!any)
                return percent_of(pool_nodes, 10.0);
        return best;
}

/* ---- label selectors ------------------------------------------------------------------------ */

static const char *label_value(const SolverLabel *labels, size_t n, const char *key) {
        for (size_t i = 0; key && i < n; i++)
                if (streq(labels[i].key, key))
                        return labels[i].value;
        return NULL;
}

bool disruption_selector_matches(const cJSON *sel, const SolverLabel *labels, size_t n) {
        if (!cJSON_IsObject(sel))
                return false;
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(sel, "matchLabels"), *c;
        cJSON_ArrayForEach(c, ml)
                if (!cJSON_IsString(c) || !streq_ptr(label_value(labels, n, c->string), c->valuestring))
                        return false;
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(sel, "matchExpressions")) {
                const cJSON *k = cJSON_GetObjectItemCaseSensitive(c, "key");
                const cJSON *op = cJSON_GetObjectItemCaseSensitive(c, "operator");
                if (!cJSON_IsString(k) || !cJSON_IsString(op))
                        return false;
                const char *have = label_value(labels, n, k->valuestring);
                bool in = false;
                const cJSON *v;
                cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(c, "values"))
                        in |= cJSON_IsString(v) && streq_ptr(have, v->valuestring);
                if (streq(op->valuestring, "In") ? !in :
                    streq(op->valuestring, "NotIn") ? in :
                    streq(op->valuestring, "Exists") ? !have :
                    streq(op->valuestring, "DoesNotExist") ? have != NULL : true)
                        return false;
        }
        return true;
}

/* ---- hashes ---------------------------------------------------------------------------------- */

static int key_cmp(const void *a, const void *b) {
        const cJSON *x = *(const cJSON *const *) a, *y = *(const cJSON *const *) b;
        return strcmp(x->string, y->string);
}

static void canonical(StrBuf *b, const cJSON *o, const char *const *skip, int depth) {
        if (depth > 64) {
                strbuf_printf(b, "\"...\"");
                return;
        }
        if (cJSON_IsObject(o)) {
                size_t n = 0, k = 0;
                const cJSON *c;
                cJSON_ArrayForEach(c, o)
                        n++;
                const cJSON **keys = calloc(n + 1, sizeof *keys);
                if (!keys)
                        return;
                cJSON_ArrayForEach(c, o) {
                        bool skipped = false;
                        for (size_t i = 0; depth == 0 && skip && skip[i] && !skipped; i++)
                                skipped = streq(c->string, skip[i]);
                        if (!skipped && c->string)
                                keys[k++] = c;
                }
                qsort(keys, k, sizeof *keys, key_cmp);
                strbuf_append(b, "{", 1);
                for (size_t i = 0; i < k; i++) {
                        _cleanup_free_ char *name = cJSON_PrintUnformatted(&(cJSON) { .type = cJSON_String,
                                                                                       .valuestring = keys[i]->string });
                        strbuf_printf(b, "%s%s:", i ? "," : "", strempty(name));
                        canonical(b, keys[i], NULL, depth + 1);
                }
                strbuf_append(b, "}", 1);
                free(keys);
        } else if (cJSON_IsArray(o)) {
                const cJSON *c;
                bool first = true;
                strbuf_append(b, "[", 1);
                cJSON_ArrayForEach(c, o) {
                        if (!first)
                                strbuf_append(b, ",", 1);
                        first = false;
                        canonical(b, c, NULL, depth + 1);
                }
                strbuf_append(b, "]", 1);
        } else {
                _cleanup_free_ char *v = o ? cJSON_PrintUnformatted(o) : NULL;
                strbuf_printf(b, "%s", v ? v : "null");
        }
}

void disruption_hash(const cJSON *obj, const char *const *skip, char out[17]) {
        StrBuf b;
        unsigned char md[32];
        unsigned int n = 0;
        strbuf_init(&b, 16u << 20);
        canonical(&b, obj, skip, 0);
        EVP_Digest(b.data ? b.data : "", b.len, md, &n, EVP_sha256(), NULL);
        strbuf_done(&b);
        for (unsigned i = 0; i < 8; i++)
                snprintf(out + 2 * i, 3, "%02x", md[i]);
        out[16] = 0;
}

void disruption_pool_hash(const cJSON *np, char out[17]) {
        cJSON *t = cJSON_Duplicate(json_get(json_get(np, "spec"), "template"), true);
        out[0] = 0;
        if (!t)
                return;
        cJSON *spec = cJSON_GetObjectItemCaseSensitive(t, "spec");
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "requirements");
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "expireAfter");
        cJSON_DeleteItemFromObjectCaseSensitive(spec, "terminationGracePeriod");
        disruption_hash(t, NULL, out);
        cJSON_Delete(t);
}

void disruption_class_hash(const cJSON *nc, char out[DISRUPTION_CLASS_HASH_SIZE]) {
        /* Selector terms drift by what they select now (the image, subnet, security groups and
         * reservations a node has against those the terms resolve to), not by their text; the
         * family by its value, however it is given (amiFamily or the alias's); ipPrefixCount not
         * at all. Karpenter's hash:"ignore" fields of EC2NodeClassSpec. */
        static const char *const skip[] = { "subnetSelectorTerms", "securityGroupSelectorTerms", "amiSelectorTerms",
                                            "capacityReservationSelectorTerms", "amiFamily", "ipPrefixCount", NULL };
        const cJSON *spec = json_get(nc, "spec");
        out[0] = 0;
        if (!cJSON_IsObject(spec))
                return;
        cJSON *copy = cJSON_Duplicate(spec, true);
        if (!copy)
                return;
        for (size_t i = 0; skip[i]; i++)
                cJSON_DeleteItemFromObjectCaseSensitive(copy, skip[i]);
        char h[17];
        if (cJSON_AddStringToObject(copy, "amiFamily", nodeclass_ami_family(spec))) {
                disruption_hash(copy, NULL, h);
                snprintf(out, DISRUPTION_CLASS_HASH_SIZE, "%s.%s", DISRUPTION_CLASS_HASH_VERSION, h);
        }
        cJSON_Delete(copy);
}

bool disruption_class_hash_current(const char *label) {
        size_t n = strlen(DISRUPTION_CLASS_HASH_VERSION);
        return label && strncmp(label, DISRUPTION_CLASS_HASH_VERSION, n) == 0 && label[n] == '.';
}
