/* SPDX-License-Identifier: Apache-2.0 */
/* IMDSv2 on the agent's loop: the session token, the notices (spot, rebalance, maintenance) and
 * their parsers. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "http.h"
#include "imds.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "timestamp.h"

#define TOKEN_MAX 512
#define BACKOFF_MAX_USEC (10 * USEC_PER_SEC)
#define BACKOFF_MIN_USEC (100 * USEC_PER_MSEC)

/* ---- parsers -------------------------------------------------------------------------------- */

/* Dates outside 2000..2199 are not something IMDS would announce. */
/* Within the window, in milliseconds (what notices carry). */
static int in_window_ms(int r, const int64_t *t, int64_t *ret_ms) {
        int64_t usec = *t;
        if (r < 0)
                return r;
        if (usec < INT64_C(946684800) * (int64_t) USEC_PER_SEC ||    /* 2000-01-01 */
            usec >= INT64_C(7258118400) * (int64_t) USEC_PER_SEC)    /* 2200-01-01 */
                return -ERANGE;
        *ret_ms = usec / 1000;
        return 0;
}

int imds_parse_iso8601(const char *s, int64_t *ret_ms) {
        int64_t usec = 0;
        return in_window_ms(timestamp_parse_rfc3339(s, TIMESTAMP_UTC_ONLY, &usec), &usec, ret_ms);
}

int imds_parse_gmt_date(const char *s, int64_t *ret_ms) {
        int64_t usec = 0;
        return in_window_ms(timestamp_parse_dmy_gmt(s, &usec), &usec, ret_ms);
}

static int json_parse(const char *body, size_t len, cJSON **ret) {
        const char *end = NULL;
        if (!body)
                return -EBADMSG;
        if (len > IMDS_MAX_BODY)
                return -EFBIG;
        cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, false);
        if (!j)
                return -EBADMSG;
        while (end && end < body + len && isspace((unsigned char) *end))
                end++;
        if (end != body + len) {
                cJSON_Delete(j);
                return -EBADMSG;
        }
        *ret = j;
        return 0;
}

static bool printable(const char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        return false;
        return true;
}

/* Copy a bounded, printable identifier; too long or control characters are refused. */
static int copy_id(char *dst, size_t size, const char *s) {
        if (isempty(s) || strlen(s) >= size || !printable(s))
                return -EBADMSG;
        strcpy(dst, s);
        return 0;
}

/* Free text: truncated, control characters replaced. */
static void copy_text(char *dst, size_t size, const char *s) {
        size_t i = 0;
        for (; s && s[i] && i + 1 < size; i++)
                dst[i] = ((unsigned char) s[i] < 0x20 || s[i] == 0x7f) ? ' ' : s[i];
        dst[i] = 0;
}

int imds_parse_instance_action(const char *body, size_t len, ImdsNotice *ret) {
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        ImdsNotice n = { .kind = NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION };
        int r;

        r = json_parse(body, len, &j);
        if (r < 0)
                return r;
        if (!cJSON_IsObject(j))
                return -EBADMSG;
        const char *action = json_str(j, "action"), *t = json_str(j, "time");
        if (!action || !t)
                return -EBADMSG;
        if (!streq(action, "terminate") && !streq(action, "stop") && !streq(action, "hibernate"))
                return -EBADMSG;
        r = imds_parse_iso8601(t, &n.deadline_unix_ms);
        if (r < 0)
                return r;
        strcpy(n.action, action);
        snprintf(n.event_id, sizeof n.event_id, "%s@%s", action, t);
        snprintf(n.description, sizeof n.description, "spot instance-action: %s at %s", action, t);
        *ret = n;
        return 0;
}

int imds_parse_rebalance(const char *body, size_t len, ImdsNotice *ret) {
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        ImdsNotice n = { .kind = NODESMITH__V1__NOTICE__KIND__KIND_REBALANCE };
        int64_t when;
        int r;

        r = json_parse(body, len, &j);
        if (r < 0)
                return r;
        if (!cJSON_IsObject(j))
                return -EBADMSG;
        const char *t = json_str(j, "noticeTime");
        if (!t)
                return -EBADMSG;
        r = imds_parse_iso8601(t, &when);
        if (r < 0)
                return r;
        strcpy(n.action, "rebalance");
        snprintf(n.event_id, sizeof n.event_id, "rebalance@%s", t);
        snprintf(n.description, sizeof n.description, "rebalance recommendation at %s", t);
        /* a recommendation gives no deadline */
        *ret = n;
        return 0;
}

int imds_parse_maintenance(const char *body, size_t len, ImdsNotice *ret, size_t max, size_t *ret_n) {
        _cleanup_(cJSON_Deletep) cJSON *j = NULL;
        _cleanup_free_ ImdsNotice *out = NULL;
        const cJSON *e;
        size_t k = 0;
        int r;

        r = json_parse(body, len, &j);
        if (r < 0)
                return r;
        if (!cJSON_IsArray(j))
                return -EBADMSG;
        out = calloc(MAX(max, 1u), sizeof *out);
        if (!out)
                return -ENOMEM;
        /* Check every element, even past max: one bad element refuses the answer. */
        cJSON_ArrayForEach(e, j) {
                ImdsNotice n = { .kind = NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE };
                if (!cJSON_IsObject(e))
                        return -EBADMSG;
                const char *id = json_str(e, "EventId"), *code = json_str(e, "Code"),
                           *state = json_str(e, "State"), *nb = json_str(e, "NotBefore"),
                           *na = json_str(e, "NotAfter");
                const cJSON *desc = cJSON_GetObjectItemCaseSensitive(e, "Description");
                if (!id || !code || !state || !nb)
                        return -EBADMSG;
                if (desc && !cJSON_IsString(desc) && !cJSON_IsNull(desc))
                        return -EBADMSG;
                if (cJSON_GetObjectItemCaseSensitive(e, "NotAfter") && !na &&
                    !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "NotAfter")))
                        return -EBADMSG;
                if (copy_id(n.event_id, sizeof n.event_id, id) < 0 ||
                    copy_id(n.action, sizeof n.action, code) < 0)
                        return -EBADMSG;
                r = imds_parse_gmt_date(nb, &n.deadline_unix_ms);
                if (r < 0)
                        return r;
                if (!isempty(na)) {
                        r = imds_parse_gmt_date(na, &n.not_after_unix_ms);
                        if (r < 0)
                                return r;
                        if (n.not_after_unix_ms < n.deadline_unix_ms)
                                return -ERANGE;
                }
                copy_text(n.description, sizeof n.description,
                          cJSON_IsString(desc) ? desc->valuestring : "");
                /* canceled and completed events are not (or no longer) notices */
                if (streq(state, "active") && k < max)
                        out[k++] = n;
        }
        if (k > 0)
                memcpy(ret, out, k * sizeof *out);
        *ret_n = k;
        return 0;
}

static const char *kind_name(Nodesmith__V1__Notice__Kind k) {
        switch (k) {
        case NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION:
                return "spot interruption";
        case NODESMITH__V1__NOTICE__KIND__KIND_REBALANCE:
                return "rebalance recommendation";
        case NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE:
                return "scheduled maintenance";
        default:
                return "notice";
        }
}

/* spot/instance-action and events/recommendations/rebalance hold at most one notice each, and
 * the time in it is not an identity: AWS's own IMDS mock (amazon-ec2-metadata-mock, what the
 * Node Termination Handler tests with) answers "now + 2 min" and "now" afresh on every request.
 * A notice of those kinds with the same action is the same notice, whatever its time says. A
 * maintenance event is named by its EventId. */
static bool single_valued(Nodesmith__V1__Notice__Kind k) {
        return k == NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION ||
               k == NODESMITH__V1__NOTICE__KIND__KIND_REBALANCE;
}

static bool same_notice(const ImdsNotice *a, const ImdsNotice *b) {
        if (a->kind != b->kind)
                return false;
        return single_valued(a->kind) ? streq(a->action, b->action) : streq(a->event_id, b->event_id);
}

static const ImdsNotice *find_notice(const ImdsNotice *v, size_t n, const ImdsNotice *like) {
        for (size_t i = 0; i < n; i++)
                if (same_notice(&v[i], like))
                        return &v[i];
        return NULL;
}

int imds_notices_merge(ImdsNotice *set, size_t *n, Nodesmith__V1__Notice__Kind kind,
                       const ImdsNotice *cur, size_t n_cur, int64_t now_ms) {
        ImdsNotice out[IMDS_MAX_NOTICES];
        size_t k = 0;
        int changes = 0;

        for (size_t i = 0; i < *n; i++) {
                if (set[i].kind != kind)
                        out[k++] = set[i];
                else if (!find_notice(cur, n_cur, &set[i])) {
                        log_notice("IMDS: %s %s withdrawn.", kind_name(kind), set[i].event_id);
                        changes++;
                }
        }
        for (size_t j = 0; j < n_cur && k < IMDS_MAX_NOTICES; j++) {
                if (cur[j].kind != kind || find_notice(out, k, &cur[j]))
                        continue;
                const ImdsNotice *old = find_notice(set, *n, &cur[j]);
                if (!old) {
                        out[k] = cur[j];
                        out[k].first_seen_unix_ms = now_ms;
                        log_notice("IMDS: %s %s (action %s, deadline %lld ms).", kind_name(kind),
                                   cur[j].event_id, cur[j].action, (long long) cur[j].deadline_unix_ms);
                        changes++;
                } else if (single_valued(kind) && cur[j].deadline_unix_ms > 0 &&
                           (old->deadline_unix_ms == 0 || cur[j].deadline_unix_ms < old->deadline_unix_ms)) {
                        /* the same notice, brought forward: the earlier deadline wins */
                        out[k] = cur[j];
                        out[k].first_seen_unix_ms = old->first_seen_unix_ms;
                        log_notice("IMDS: %s %s brought forward to %s.", kind_name(kind), old->event_id,
                                   cur[j].event_id);
                        changes++;
                } else {
                        /* unchanged, or only its time moved later: the notice as first seen stays */
                        out[k] = *old;
                        if (!streq(old->event_id, cur[j].event_id))
                                log_debug("IMDS: %s %s now announced as %s; keeping the first.",
                                          kind_name(kind), old->event_id, cur[j].event_id);
                }
                k++;
        }
        memcpy(set, out, k * sizeof *out);
        *n = k;
        return changes;
}

/* ---- the watcher ---------------------------------------------------------------------------- */

typedef struct Step {
        const char *path;
        ImdsSource source;
        size_t offset;   /* identity: field in ImdsIdentity */
        size_t max;      /* identity: longest value accepted */
        bool json;       /* identity: must be a JSON object */
} Step;

#define ID(p, f, m, j) { p, IMDS_SOURCE_IDENTITY, offsetof(ImdsIdentity, f), m, j }
static const Step steps[] = {
        ID("meta-data/instance-id", instance_id, 64, false),
        ID("meta-data/instance-type", instance_type, 64, false),
        ID("meta-data/placement/availability-zone", zone, 64, false),
        ID("meta-data/placement/region", region, 64, false),
        ID("meta-data/instance-life-cycle", life_cycle, 32, false),
        ID("meta-data/local-ipv4", local_ipv4, 64, false),
        ID("dynamic/instance-identity/document", document, 16384, true),
        ID("dynamic/instance-identity/rsa2048", rsa2048, 16384, false),
        { "meta-data/spot/instance-action", IMDS_SOURCE_SPOT },
        { "meta-data/events/recommendations/rebalance", IMDS_SOURCE_REBALANCE },
        { "meta-data/events/maintenance/scheduled", IMDS_SOURCE_MAINTENANCE },
};
#define FIRST_POLL 8

static const char *const source_names[_IMDS_SOURCE_MAX] = {
        [IMDS_SOURCE_SPOT] = "spot/instance-action",
        [IMDS_SOURCE_REBALANCE] = "events/recommendations/rebalance",
        [IMDS_SOURCE_MAINTENANCE] = "events/maintenance/scheduled",
        [IMDS_SOURCE_IDENTITY] = "identity",
};

typedef struct Call {
        ImdsWatcher *w;
        size_t step;
        HttpRequest *req;
} Call;

struct ImdsWatcher {
        sd_event *event;
        HttpClient *http;
        HttpRequest *token_req;
        Call calls[ELEMENTSOF(steps)];   /* a phase's requests run in parallel */
        size_t in_flight;
        sd_event_source *timer;
        char *endpoint;
        uint64_t poll_usec;
        uint64_t ttl_s;
        uint64_t timeout_ms;
        imds_event_t cb;
        void *userdata;

        char *token;
        uint64_t token_refresh_usec; /* CLOCK_MONOTONIC: get a new token from then on */

        bool done[ELEMENTSOF(steps)]; /* answered in this round (identity: for good) */
        bool round_unauthorized;
        bool round_retried;          /* this round already got a fresh token after a 401 */
        int round_error;
        long round_status;
        const char *round_what;
        unsigned failures;
        bool warned;
        bool rejected_logged[_IMDS_SOURCE_MAX];

        ImdsIdentity pending;
        bool identity_done;

        ImdsNotice notices[IMDS_MAX_NOTICES];
        size_t n_notices;
        ImdsCounters counters;
};

static uint64_t mono_usec(ImdsWatcher *w) {
        uint64_t t = 0;
        (void) sd_event_now(w->event, CLOCK_MONOTONIC, &t);
        return t;
}

static int64_t now_unix_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void identity_clear(ImdsIdentity *id) {
        char **fields[] = { &id->instance_id, &id->instance_type, &id->zone, &id->region,
                            &id->life_cycle, &id->local_ipv4, &id->document, &id->rsa2048 };
        for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
                free(*fields[i]);
                *fields[i] = NULL;
        }
}

static void drop_token(ImdsWatcher *w) {
        if (w->token) {
                explicit_bzero(w->token, strlen(w->token));
                free(w->token);
                w->token = NULL;
        }
}

ImdsWatcher *imds_watcher_free(ImdsWatcher *w) {
        if (!w)
                return NULL;
        if (w->token_req)
                http_request_cancel(w->token_req);
        for (size_t i = 0; i < ELEMENTSOF(w->calls); i++)
                if (w->calls[i].req)
                        http_request_cancel(w->calls[i].req);
        http_client_free(w->http);
        sd_event_source_disable_unref(w->timer);
        sd_event_unref(w->event);
        drop_token(w);
        identity_clear(&w->pending);
        free(w->endpoint);
        free(w);
        return NULL;
}

static void schedule(ImdsWatcher *w, uint64_t delay) {
        (void) sd_event_source_set_time(w->timer, mono_usec(w) + delay);
        (void) sd_event_source_set_enabled(w->timer, SD_EVENT_ONESHOT);
}

static uint64_t jitter(uint64_t d) {
        uint64_t j = d / 4;
        return j > 0 ? d - j + (uint64_t) random() % (2 * j + 1) : d;
}

/* A failed request: back off exponentially from the poll interval, at most 10 s, with jitter.
 * The cycle resumes at the same step. */
static void fail(ImdsWatcher *w, int error, long status, const char *what) {
        w->failures++;
        if (status == 429)
                w->counters.throttled++;
        else
                w->counters.errors++;
        uint64_t d = MAX(w->poll_usec, BACKOFF_MIN_USEC) << MIN(w->failures, 7u);
        d = jitter(MIN(d, BACKOFF_MAX_USEC));
        if (!w->warned) {
                if (status > 0)
                        log_warning("IMDS %s: HTTP %ld; retrying with back-off.", what, status);
                else
                        log_warning_errno(error, "IMDS %s: %m; retrying with back-off.", what);
                w->warned = true;
        } else if (status > 0)
                log_debug("IMDS %s: HTTP %ld; next try in %llu ms.", what, status,
                          (unsigned long long) (d / USEC_PER_MSEC));
        else
                log_debug_errno(error, "IMDS %s: %m; next try in %llu ms.", what,
                                (unsigned long long) (d / USEC_PER_MSEC));
        schedule(w, d);
}

static void rejected(ImdsWatcher *w, ImdsSource src, int error) {
        w->counters.rejected[src]++;
        if (!w->rejected_logged[src]) {
                log_warning_errno(error, "IMDS %s: answer rejected (%m); ignoring it (%llu so far).",
                                  source_names[src], (unsigned long long) w->counters.rejected[src]);
                w->rejected_logged[src] = true;
        } else
                log_debug_errno(error, "IMDS %s: answer rejected (%m); %llu so far.", source_names[src],
                                (unsigned long long) w->counters.rejected[src]);
}

static void accepted(ImdsWatcher *w, ImdsSource src) {
        if (w->rejected_logged[src]) {
                log_info("IMDS %s: answers valid again.", source_names[src]);
                w->rejected_logged[src] = false;
        }
}

static void on_token(HttpRequest *req, int error, long status, const char *body, size_t len,
                     void *userdata) {
        ImdsWatcher *w = userdata;
        w->token_req = NULL;

        if (error < 0 || status != 200) {
                fail(w, error, status, "token");
                return;
        }
        if (len == 0 || len >= TOKEN_MAX || !printable(body)) {
                fail(w, -EBADMSG, 0, "token");
                return;
        }
        drop_token(w);
        w->token = strndup(body, len);
        if (!w->token) {
                fail(w, -ENOMEM, 0, "token");
                return;
        }
        uint64_t ttl = w->ttl_s;
        const char *h = http_request_header(req, "X-aws-ec2-metadata-token-ttl-seconds");
        if (h) {
                char *end = NULL;
                errno = 0;
                unsigned long long v = strtoull(h, &end, 10);
                if (errno == 0 && end != h && *end == 0 && v >= 1 && v <= 21600)
                        ttl = MIN(ttl, (uint64_t) v);
        }
        /* refresh at half the granted lifetime: well before expiry, whatever the cap */
        w->token_refresh_usec = mono_usec(w) + ttl * USEC_PER_SEC / 2;
        w->counters.tokens++;
        log_debug("IMDS token obtained (TTL %llus).", (unsigned long long) ttl);
        schedule(w, 0);
}

static int start_token(ImdsWatcher *w) {
        _cleanup_free_ char *url = NULL;
        char ttl[32];
        HttpRequest *req = NULL;
        int r;

        if (asprintf(&url, "%s/latest/api/token", w->endpoint) < 0)
                return -ENOMEM;
        r = http_request_new(w->http, "PUT", url, &req);
        if (r < 0)
                return r;
        snprintf(ttl, sizeof ttl, "%llu", (unsigned long long) w->ttl_s);
        if ((r = http_request_add_header(req, "X-aws-ec2-metadata-token-ttl-seconds", ttl)) < 0 ||
            (r = http_request_set_body(req, "", 0)) < 0) {
                http_request_free(req);
                return r;
        }
        http_request_set_timeouts(req, w->timeout_ms, w->timeout_ms);
        http_request_set_max_body(req, TOKEN_MAX);
        w->counters.requests++;
        r = http_request_start(req, on_token, w);
        if (r < 0)
                return r;
        w->token_req = req;
        return 0;
}

static void apply_notices(ImdsWatcher *w, Nodesmith__V1__Notice__Kind kind, const ImdsNotice *cur,
                          size_t n) {
        int changes = imds_notices_merge(w->notices, &w->n_notices, kind, cur, n, now_unix_ms());
        if (changes > 0) {
                w->counters.notice_changes += (uint64_t) changes;
                if (w->cb)
                        w->cb(w, IMDS_EVENT_NOTICES, w->userdata);
        }
}

static void handle_identity(ImdsWatcher *w, const Step *s, long status, const char *body, size_t len) {
        char **field = (char **) ((uint8_t *) &w->pending + s->offset);

        if (status == 404) {
                log_warning("IMDS %s: not found; leaving it empty.", s->path);
                return;
        }
        int r = 0;
        if (len == 0 || len > s->max || strlen(body) != len)
                r = -EBADMSG;
        else if (s->json) {
                cJSON *j = NULL;
                r = json_parse(body, len, &j);
                if (r >= 0 && !cJSON_IsObject(j))
                        r = -EBADMSG;
                cJSON_Delete(j);
        } else {
                for (size_t i = 0; i < len && r >= 0; i++)
                        if ((unsigned char) body[i] < 0x20 && body[i] != '\n' && body[i] != '\r')
                                r = -EBADMSG;
                if (r >= 0 && s->max <= 64 && (strchr(body, '\n') || strchr(body, ' ')))
                        r = -EBADMSG;
        }
        if (r < 0) {
                log_warning("IMDS %s: unusable value; leaving it empty.", s->path);
                rejected(w, IMDS_SOURCE_IDENTITY, r);
                return;
        }
        if (free_and_strdup(field, body) < 0)
                log_oom();
}

static void handle_poll(ImdsWatcher *w, const Step *s, long status, const char *body, size_t len) {
        ImdsNotice cur[IMDS_MAX_NOTICES];
        size_t n = 0;
        int r = 0;
        Nodesmith__V1__Notice__Kind kind;

        switch (s->source) {
        case IMDS_SOURCE_SPOT:
                kind = NODESMITH__V1__NOTICE__KIND__KIND_SPOT_INTERRUPTION;
                if (status == 200 && (r = imds_parse_instance_action(body, len, &cur[0])) >= 0)
                        n = 1;
                break;
        case IMDS_SOURCE_REBALANCE:
                kind = NODESMITH__V1__NOTICE__KIND__KIND_REBALANCE;
                if (status == 200 && (r = imds_parse_rebalance(body, len, &cur[0])) >= 0)
                        n = 1;
                break;
        case IMDS_SOURCE_MAINTENANCE:
                kind = NODESMITH__V1__NOTICE__KIND__KIND_MAINTENANCE;
                if (status == 200)
                        r = imds_parse_maintenance(body, len, cur, ELEMENTSOF(cur), &n);
                break;
        default:
                return;
        }
        if (r < 0) {
                /* keep what we had: a garbled answer neither adds nor withdraws */
                rejected(w, s->source, r);
                return;
        }
        accepted(w, s->source);
        apply_notices(w, kind, cur, n);
}

static bool in_phase(const ImdsWatcher *w, size_t step) {
        return w->identity_done ? step >= FIRST_POLL : step < FIRST_POLL;
}

/* Every request of the round has answered. */
static void round_finish(ImdsWatcher *w) {
        if (w->round_unauthorized && !w->round_retried && w->round_error == 0) {
                /* the token was refused: a new one, and the refused requests once more */
                w->round_retried = true;
                w->round_unauthorized = false;
                drop_token(w);
                schedule(w, 0);
                return;
        }
        if (w->round_error < 0 || w->round_unauthorized) {
                int e = w->round_error < 0 ? w->round_error : -EACCES;
                long st = w->round_error < 0 ? w->round_status : 401;
                const char *what = w->round_what ? w->round_what : "request";
                w->round_unauthorized = w->round_retried = false;
                w->round_error = 0;
                w->round_status = 0;
                w->round_what = NULL;
                fail(w, e, st, what);
                return;
        }
        w->round_retried = false;
        if (!w->identity_done) {
                w->identity_done = true;
                log_info("IMDS identity: %s, %s in %s (%s), %s.", strempty(w->pending.instance_id),
                         strempty(w->pending.instance_type), strempty(w->pending.zone),
                         strempty(w->pending.region), strempty(w->pending.life_cycle));
                if (w->cb)
                        w->cb(w, IMDS_EVENT_IDENTITY, w->userdata);
                schedule(w, 0);
                return;
        }
        /* a full poll answered */
        if (w->warned) {
                log_info("IMDS answering again.");
                w->warned = false;
        }
        w->failures = 0;
        for (size_t i = FIRST_POLL; i < ELEMENTSOF(steps); i++)
                w->done[i] = false;
        schedule(w, w->poll_usec);
}

static void round_error(ImdsWatcher *w, int error, long status, const char *what) {
        if (w->round_error == 0) {
                w->round_error = error;
                w->round_status = status;
                w->round_what = what;
        }
}

static void on_get(HttpRequest *req, int error, long status, const char *body, size_t len,
                   void *userdata) {
        Call *call = userdata;
        ImdsWatcher *w = call->w;
        const Step *s = &steps[call->step];
        call->req = NULL;
        w->in_flight--;

        if (error == -EFBIG) {
                /* over the cap: a malformed answer, not an outage */
                rejected(w, s->source, error);
                w->done[call->step] = true;
        } else if (error < 0)
                round_error(w, error, 0, s->path);
        else if (status == 401) {
                w->counters.unauthorized++;
                log_debug("IMDS %s: token refused.", s->path);
                w->round_unauthorized = true;
        } else if (status == 200 || status == 404) {
                if (s->source == IMDS_SOURCE_IDENTITY)
                        handle_identity(w, s, status, body, len);
                else
                        handle_poll(w, s, status, body, len);
                w->done[call->step] = true;
        } else
                round_error(w, -EIO, status, s->path);

        if (w->in_flight == 0)
                round_finish(w);
}

static int start_get(ImdsWatcher *w, size_t step) {
        _cleanup_free_ char *url = NULL;
        HttpRequest *req = NULL;
        Call *call = &w->calls[step];
        int r;

        if (asprintf(&url, "%s/latest/%s", w->endpoint, steps[step].path) < 0)
                return -ENOMEM;
        r = http_request_new(w->http, "GET", url, &req);
        if (r < 0)
                return r;
        r = http_request_add_header(req, "X-aws-ec2-metadata-token", w->token);
        if (r < 0) {
                http_request_free(req);
                return r;
        }
        http_request_set_timeouts(req, w->timeout_ms, w->timeout_ms);
        http_request_set_max_body(req, IMDS_MAX_BODY);
        call->w = w;
        call->step = step;
        w->counters.requests++;
        r = http_request_start(req, on_get, call);
        if (r < 0)
                return r;
        call->req = req;
        w->in_flight++;
        return 0;
}

static int on_timer(sd_event_source *es, uint64_t usec, void *userdata) {
        ImdsWatcher *w = userdata;
        int r = 0;

        if (w->token_req || w->in_flight > 0)
                return 0;
        if (!w->token || mono_usec(w) >= w->token_refresh_usec) {
                r = start_token(w);
                if (r < 0)
                        fail(w, r, 0, "token");
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(steps) && r >= 0; i++)
                if (in_phase(w, i) && !w->done[i])
                        r = start_get(w, i);
        if (r < 0)
                round_error(w, r, 0, "request");
        if (w->in_flight == 0) /* nothing started: the round is over already */
                round_finish(w);
        return 0;
}

int imds_watcher_new(sd_event *e, const ImdsConfig *cfg, imds_event_t cb, void *userdata,
                     ImdsWatcher **ret) {
        _cleanup_(imds_watcher_freep) ImdsWatcher *w = NULL;
        int r;

        if (isempty(cfg->endpoint) || cfg->poll_interval_ms == 0 || cfg->token_ttl_s < 1 ||
            cfg->token_ttl_s > 21600 || cfg->timeout_ms == 0)
                return -EINVAL;
        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->event = sd_event_ref(e);
        w->endpoint = strdup(cfg->endpoint);
        if (!w->endpoint)
                return -ENOMEM;
        size_t l = strlen(w->endpoint);
        while (l > 0 && w->endpoint[l - 1] == '/')
                w->endpoint[--l] = 0;
        w->poll_usec = cfg->poll_interval_ms * USEC_PER_MSEC;
        w->ttl_s = cfg->token_ttl_s;
        w->timeout_ms = cfg->timeout_ms;
        w->cb = cb;
        w->userdata = userdata;
        r = http_client_new(e, &w->http);
        if (r < 0)
                return r;
        r = sd_event_add_time(e, &w->timer, CLOCK_MONOTONIC, 0, 0, on_timer, w);
        if (r < 0)
                return r;
        (void) sd_event_source_set_enabled(w->timer, SD_EVENT_OFF);
        (void) sd_event_source_set_description(w->timer, "imds");
        /* sub-second polling: not the loop's default 250 ms slack */
        (void) sd_event_source_set_time_accuracy(w->timer, 1);
        *ret = TAKE_PTR(w);
        return 0;
}

int imds_watcher_start(ImdsWatcher *w) {
        schedule(w, 0);
        return 0;
}

const ImdsIdentity *imds_watcher_identity(const ImdsWatcher *w) {
        return w && w->identity_done ? &w->pending : NULL;
}

size_t imds_watcher_notices(const ImdsWatcher *w, const ImdsNotice **ret) {
        if (!w) {
                *ret = NULL;
                return 0;
        }
        *ret = w->notices;
        return w->n_notices;
}

const ImdsCounters *imds_watcher_counters(const ImdsWatcher *w) {
        return &w->counters;
}
