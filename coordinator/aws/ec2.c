/* SPDX-License-Identifier: Apache-2.0 */
/* The EC2/SSM client: one Ec2Call per API call, driven by the loop through credentials → HTTP
 * attempt → answer → (retry after backoff | next page | done). */
#include <inttypes.h>
#include <libxml/parser.h>
#include <stdio.h>
#include <stdlib.h>

#include "aws-request.h"
#include "ec2-internal.h"
#include "log.h"
#include "macro.h"

#define DEFAULT_MAX_ATTEMPTS 8u
#define DEFAULT_BACKOFF_BASE_USEC (200 * USEC_PER_MSEC)
#define DEFAULT_BACKOFF_MAX_USEC (20 * USEC_PER_SEC)
#define DEFAULT_MAX_PAGES 200u
#define DEFAULT_MAX_ITEMS 100000u
#define DEFAULT_TIMEOUT_USEC (30 * USEC_PER_SEC)
#define SSM_BODY_MAX (256u * 1024)

struct Ec2Client {
        sd_event *event;
        HttpClient *http;
        AwsCredentialProvider *creds;
        char *region, *ec2_url, *ssm_url, *iam_url, *cluster;
        char *ec2_sigv4, *ssm_sigv4;
        unsigned max_attempts, max_pages;
        size_t max_items;
        uint64_t backoff_base, backoff_max, timeout;
        Ec2Stats stats;
        struct Ec2Call *calls;
        size_t n_calls;
};

typedef struct Ec2Call Ec2Call;
typedef int (*page_parse_t)(Ec2Call *call, xmlDoc *doc);
typedef void (*call_finish_t)(Ec2Call *call, const Ec2Error *error);

struct Ec2Call {
        Ec2Client *client;
        Ec2Call *prev, *next;
        const char *action;   /* static string */
        bool ssm, iam, paginate;
        char *body;           /* without NextToken */
        char *next_token;
        unsigned pages, attempt;
        HttpRequest *req;
        sd_event_source *timer;
        bool waiting_creds;
        page_parse_t parse;
        call_finish_t finish;
        void *result;
        void (*result_free)(void *);
        void *done, *userdata;
        /* TerminateInstances: the ids asked for and what the describe step found */
        char **ids, **tagged, **refused;
};

/* ---- errors ------------------------------------------------------------------------------ */

static const char *const kind_names[_EC2_ERROR_MAX] = {
        [EC2_ERROR_NONE] = "none",
        [EC2_ERROR_THROTTLED] = "throttled",
        [EC2_ERROR_INSUFFICIENT_CAPACITY] = "insufficient-capacity",
        [EC2_ERROR_INVALID_PARAMETER] = "invalid-parameter",
        [EC2_ERROR_NOT_FOUND] = "not-found",
        [EC2_ERROR_UNAUTHORIZED] = "unauthorized",
        [EC2_ERROR_AUTH_FAILURE] = "auth-failure",
        [EC2_ERROR_IDEMPOTENT_MISMATCH] = "idempotent-parameter-mismatch",
        [EC2_ERROR_SERVER] = "server",
        [EC2_ERROR_TRANSPORT] = "transport",
        [EC2_ERROR_PROTOCOL] = "protocol",
        [EC2_ERROR_CREDENTIALS] = "credentials",
        [EC2_ERROR_OTHER] = "other",
};

const char *ec2_error_kind_to_string(Ec2ErrorKind k) {
        return k >= 0 && k < _EC2_ERROR_MAX ? kind_names[k] : NULL;
}

static bool code_in(const char *code, const char *const *set) {
        for (; *set; set++)
                if (streq(code, *set))
                        return true;
        return false;
}

static bool ends_with(const char *s, const char *suffix) {
        size_t a = strlen(s), b = strlen(suffix);
        return a >= b && streq(s + a - b, suffix);
}

Ec2ErrorKind ec2_error_kind_from_code(const char *code, long status) {
        static const char *const throttled[] = {
                "RequestLimitExceeded", "Throttling", "ThrottlingException", "ThrottledException",
                "RequestThrottled", "RequestThrottledException", "TooManyRequestsException",
                "PriorRequestNotComplete", "SlowDown", "EC2ThrottledException", NULL
        };
        static const char *const capacity[] = {
                "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
                "InsufficientReservedInstanceCapacity", "ReservationCapacityExceeded", "UnfulfillableCapacity",
                "MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded",
                "SpotMaxPriceTooLow", NULL
        };
        static const char *const auth[] = {
                "AuthFailure", "SignatureDoesNotMatch", "InvalidClientTokenId",
                "UnrecognizedClientException", "IncompleteSignature", "MissingAuthenticationToken",
                "ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidAccessKeyId",
                "InvalidSignatureException", NULL
        };
        static const char *const unauthorized[] = {
                "UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "OptInRequired", NULL
        };
        static const char *const invalid[] = {
                "InvalidParameterValue", "InvalidParameter", "InvalidParameterCombination",
                "MissingParameter", "ValidationError", "ValidationException", "UnknownParameter",
                "InvalidAction", NULL
        };
        static const char *const server[] = {
                "InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable",
                "InternalServerError", "InternalServerErrorException", NULL
        };

        if (!isempty(code)) {
                if (code_in(code, throttled))
                        return EC2_ERROR_THROTTLED;
                if (code_in(code, capacity))
                        return EC2_ERROR_INSUFFICIENT_CAPACITY;
                if (code_in(code, auth))
                        return EC2_ERROR_AUTH_FAILURE;
                if (code_in(code, unauthorized))
                        return EC2_ERROR_UNAUTHORIZED;
                if (streq(code, "IdempotentParameterMismatch"))
                        return EC2_ERROR_IDEMPOTENT_MISMATCH;
                if (ends_with(code, ".NotFound") || ends_with(code, "NotFound") ||
                    streq(code, "ParameterNotFound") || streq(code, "NoSuchEntity"))
                        return EC2_ERROR_NOT_FOUND;
                if (code_in(code, invalid) || strncmp(code, "Invalid", 7) == 0 ||
                    ends_with(code, ".Malformed"))
                        return EC2_ERROR_INVALID_PARAMETER;
                if (code_in(code, server))
                        return EC2_ERROR_SERVER;
        }
        if (status >= 500)
                return EC2_ERROR_SERVER;
        if (status == 429)
                return EC2_ERROR_THROTTLED;
        if (status == 401)
                return EC2_ERROR_AUTH_FAILURE;
        if (status == 403)
                return EC2_ERROR_UNAUTHORIZED;
        return EC2_ERROR_OTHER;
}

int ec2_error_kind_to_errno(Ec2ErrorKind k) {
        switch (k) {
        case EC2_ERROR_NONE:
                return 0;
        case EC2_ERROR_THROTTLED:
                return -EBUSY;
        case EC2_ERROR_INSUFFICIENT_CAPACITY:
                return -ENOSPC;
        case EC2_ERROR_INVALID_PARAMETER:
                return -EINVAL;
        case EC2_ERROR_NOT_FOUND:
                return -ENOENT;
        case EC2_ERROR_UNAUTHORIZED:
                return -EPERM;
        case EC2_ERROR_AUTH_FAILURE:
                return -EACCES;
        case EC2_ERROR_IDEMPOTENT_MISMATCH:
                return -EEXIST;
        case EC2_ERROR_SERVER:
                return -EIO;
        case EC2_ERROR_TRANSPORT:
                return -ECONNRESET;
        case EC2_ERROR_PROTOCOL:
                return -EBADMSG;
        case EC2_ERROR_CREDENTIALS:
                return -ENOKEY;
        default:
                return -EREMOTEIO;
        }
}

bool ec2_error_kind_retryable(Ec2ErrorKind k) {
        return k == EC2_ERROR_THROTTLED || k == EC2_ERROR_SERVER || k == EC2_ERROR_TRANSPORT;
}

uint64_t ec2_backoff_usec(unsigned attempt, uint64_t base, uint64_t cap, uint32_t rnd) {
        uint64_t d = base;
        if (attempt < 2)
                return 0;
        for (unsigned i = 2; i < attempt && d < cap; i++)
                d *= 2;
        d = MIN(d, cap);
        /* equal jitter: never less than half the step, so retries really back off */
        return d / 2 + (uint64_t) ((double) (d - d / 2) * ((double) rnd / (double) UINT32_MAX));
}

/* ---- the client ------------------------------------------------------------------------ */

int ec2_client_new(sd_event *e, HttpClient *http, AwsCredentialProvider *creds,
                   const Ec2Config *cfg, Ec2Client **ret) {
        Ec2Client *c;

        if (!e || !http || !creds || !cfg || isempty(cfg->region) || strchr(cfg->region, ':'))
                return -EINVAL;
        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = sd_event_ref(e);
        c->http = http;
        c->creds = creds;
        c->max_attempts = cfg->max_attempts ?: DEFAULT_MAX_ATTEMPTS;
        c->max_pages = cfg->max_pages ?: DEFAULT_MAX_PAGES;
        c->max_items = cfg->max_items ?: DEFAULT_MAX_ITEMS;
        c->backoff_base = cfg->backoff_base_usec ?: DEFAULT_BACKOFF_BASE_USEC;
        c->backoff_max = MAX(cfg->backoff_max_usec ?: DEFAULT_BACKOFF_MAX_USEC, c->backoff_base);
        c->timeout = cfg->timeout_usec ?: DEFAULT_TIMEOUT_USEC;
        c->region = strdup(cfg->region);
        c->cluster = cfg->cluster_name ? strdup(cfg->cluster_name) : NULL;
        c->ec2_url = aws_endpoint_url(cfg->ec2_endpoint, "ec2", cfg->region);
        c->ssm_url = aws_endpoint_url(cfg->ssm_endpoint, "ssm", cfg->region);
        if (asprintf(&c->ec2_sigv4, "aws:amz:%s:ec2", cfg->region) < 0)
                c->ec2_sigv4 = NULL;
        if (asprintf(&c->ssm_sigv4, "aws:amz:%s:ssm", cfg->region) < 0)
                c->ssm_sigv4 = NULL;
        /* IAM is global: one endpoint, signed for us-east-1 */
        c->iam_url = cfg->iam_endpoint ? aws_endpoint_url(cfg->iam_endpoint, "iam", cfg->region)
                                       : strdup("https://iam.amazonaws.com/");
        if (!c->region || (cfg->cluster_name && !c->cluster) || !c->ec2_url || !c->ssm_url || !c->iam_url ||
            !c->ec2_sigv4 || !c->ssm_sigv4) {
                ec2_client_free(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

static void call_free(Ec2Call *call);

Ec2Client *ec2_client_free(Ec2Client *c) {
        if (!c)
                return NULL;
        while (c->calls)
                call_free(c->calls);
        free(c->region);
        free(c->cluster);
        free(c->ec2_url);
        free(c->ssm_url);
        free(c->iam_url);
        free(c->ec2_sigv4);
        free(c->ssm_sigv4);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

size_t ec2_client_in_flight(const Ec2Client *c) {
        return c ? c->n_calls : 0;
}

const Ec2Stats *ec2_client_stats(const Ec2Client *c) {
        return &c->stats;
}

const char *ec2_client_cluster(const Ec2Client *c) {
        return c->cluster;
}

/* ---- calls ---------------------------------------------------------------------------- */

static void on_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata);

static void call_free(Ec2Call *call) {
        if (!call)
                return;
        Ec2Client *c = call->client;
        if (call->prev)
                call->prev->next = call->next;
        else if (c->calls == call)
                c->calls = call->next;
        if (call->next)
                call->next->prev = call->prev;
        c->n_calls--;
        if (call->req)
                http_request_cancel(call->req);
        if (call->waiting_creds)
                aws_credentials_cancel(c->creds, on_creds, call);
        sd_event_source_disable_unref(call->timer);
        if (call->result && call->result_free)
                call->result_free(call->result);
        free(call->body);
        free(call->next_token);
        ec2_strv_free(call->ids);
        ec2_strv_free(call->tagged);
        ec2_strv_free(call->refused);
        free(call);
}

static Ec2Call *call_new(Ec2Client *c, const char *action, void *done, void *userdata) {
        Ec2Call *call = calloc(1, sizeof *call);
        if (!call)
                return NULL;
        call->client = c;
        call->action = action;
        call->done = done;
        call->userdata = userdata;
        call->next = c->calls;
        if (c->calls)
                c->calls->prev = call;
        c->calls = call;
        c->n_calls++;
        return call;
}

static void call_finish(Ec2Call *call, const Ec2Error *error) {
        if (error) {
                call->client->stats.errors++;
                log_debug("EC2 %s failed: %s %s (%s) after %u attempt(s)", call->action,
                          strempty(ec2_error_kind_to_string(error->kind)), error->code, error->message,
                          error->attempts);
        }
        call->finish(call, error);
        call_free(call);
}

static void call_fail(Ec2Call *call, Ec2ErrorKind kind, int error, const char *what) {
        Ec2Error e = { .kind = kind, .error = error < 0 ? error : ec2_error_kind_to_errno(kind),
                       .attempts = call->attempt };
        snprintf(e.message, sizeof e.message, "%s: %s", what, strerror(-e.error));
        call_finish(call, &e);
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Ec2Call *call = userdata;
        int r;
        call->timer = sd_event_source_disable_unref(call->timer);
        call->attempt++;
        call->waiting_creds = true;
        r = aws_credentials_get(call->client->creds, on_creds, call);
        if (r < 0) {
                call->waiting_creds = false;
                call_fail(call, EC2_ERROR_CREDENTIALS, r, "no AWS credentials");
        }
        return 0;
}

/* The next attempt, after delay (0: on the next loop iteration, never from inside the caller). */
static int call_schedule(Ec2Call *call, uint64_t delay) {
        return sd_event_add_time_relative(call->client->event, &call->timer, CLOCK_MONOTONIC, delay,
                                          delay ? 10 * USEC_PER_MSEC : 1, on_timer, call);
}

static void on_http_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                         void *userdata);

static void on_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata) {
        Ec2Call *call = userdata;
        Ec2Client *c = call->client;
        HttpRequest *req = NULL;
        StrBuf b;
        int r;

        call->waiting_creds = false;
        if (error < 0)
                return call_fail(call, EC2_ERROR_CREDENTIALS, error, "no AWS credentials");
        strbuf_init(&b, EC2_QUERY_MAX + 4096);
        r = strbuf_append(&b, call->body, strlen(call->body));
        if (r >= 0 && call->next_token) {
                _cleanup_free_ char *t = http_escape(call->next_token);
                r = t ? strbuf_printf(&b, "&NextToken=%s", t) : -ENOMEM;
        }
        char target[96];
        snprintf(target, sizeof target, "AmazonSSM.%s", call->action);
        AwsRequestSpec spec = {
                .url = call->ssm ? c->ssm_url : call->iam ? c->iam_url : c->ec2_url,
                .sigv4 = call->ssm ? c->ssm_sigv4 : call->iam ? "aws:amz:us-east-1:iam" : c->ec2_sigv4,
                .content_type = call->ssm ? "application/x-amz-json-1.1"
                                          : "application/x-www-form-urlencoded; charset=utf-8",
                .target = call->ssm ? target : NULL,
                .body = b.data,
                .body_len = b.len,
                .timeout_usec = c->timeout,
                .max_body = call->ssm ? SSM_BODY_MAX : EC2_BODY_MAX,
        };
        if (r >= 0)
                r = aws_request_new(c->http, &spec, creds, &req);
        strbuf_done(&b);
        if (r < 0)
                return call_fail(call, EC2_ERROR_OTHER, r, "cannot build the request");
        r = http_request_start(req, on_http_done, call);
        if (r < 0)
                return call_fail(call, EC2_ERROR_TRANSPORT, r, "cannot start the request");
        call->req = req;
        c->stats.requests++;
        if (call->attempt > 1)
                c->stats.retries++;
}

static void call_retry_or_fail(Ec2Call *call, Ec2Error *e) {
        Ec2Client *c = call->client;
        e->attempts = call->attempt;
        if (e->kind == EC2_ERROR_THROTTLED)
                c->stats.throttled++;
        if (e->kind == EC2_ERROR_AUTH_FAILURE)
                aws_credentials_invalidate(c->creds); /* fetched again on the next call */
        if (ec2_error_kind_retryable(e->kind) && call->attempt < c->max_attempts) {
                uint64_t d = ec2_backoff_usec(call->attempt + 1, c->backoff_base, c->backoff_max,
                                              arc4random());
                log_debug("EC2 %s: %s (%s), attempt %u of %u, retrying in %" PRIu64 " ms",
                          call->action, e->code, strempty(ec2_error_kind_to_string(e->kind)), call->attempt,
                          c->max_attempts, d / USEC_PER_MSEC);
                int r = call_schedule(call, d);
                if (r >= 0)
                        return;
        }
        call_finish(call, e);
}

static void on_http_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                         void *userdata) {
        Ec2Call *call = userdata;
        Ec2Client *c = call->client;
        Ec2Error e = {};
        xmlDoc *doc = NULL;
        int r;

        call->req = NULL;
        if (error < 0) {
                e = (Ec2Error) { .kind = error == -EFBIG ? EC2_ERROR_PROTOCOL : EC2_ERROR_TRANSPORT,
                                 .error = error };
                snprintf(e.code, sizeof e.code, "%s", error == -EFBIG ? "ResponseTooLarge" : "Transport");
                snprintf(e.message, sizeof e.message, "%s", strerror(-error));
                return call_retry_or_fail(call, &e);
        }
        if (call->ssm) {
                if (status != 200) {
                        if (ec2_json_error(body, status, &e) < 0 && status < 500)
                                e.kind = EC2_ERROR_PROTOCOL, e.error = -EBADMSG;
                        return call_retry_or_fail(call, &e);
                }
                char *value = NULL;
                r = ec2_parse_ssm_parameter(body, &value);
                if (r < 0)
                        return call_fail(call, EC2_ERROR_PROTOCOL, r, "unreadable SSM answer");
                call->result = value;
                return call_finish(call, NULL);
        }
        r = ec2_xml_parse(body, len, status, &doc, &e);
        if (r == -EPROTO)
                return call_retry_or_fail(call, &e);
        if (r < 0)
                return call_fail(call, EC2_ERROR_PROTOCOL, r, "unreadable EC2 answer");
        r = call->parse(call, doc);
        char *next = call->paginate && r >= 0 ? ec2_xml_next_token(doc) : NULL;
        xmlFreeDoc(doc);
        if (r < 0) {
                free(next);
                return call_fail(call, EC2_ERROR_PROTOCOL, r,
                                 r == -ENOBUFS ? "answer over the item cap" : "unreadable EC2 answer");
        }
        call->pages++;
        if (next && streq_ptr(next, call->next_token)) {
                free(next);
                return call_fail(call, EC2_ERROR_PROTOCOL, -ELOOP, "NextToken repeats");
        }
        free(call->next_token);
        call->next_token = next;
        if (!next)
                return call_finish(call, NULL);
        if (call->pages >= c->max_pages)
                return call_fail(call, EC2_ERROR_PROTOCOL, -ENOBUFS, "too many pages");
        call->attempt = 0;
        r = call_schedule(call, 0);
        if (r < 0)
                call_fail(call, EC2_ERROR_OTHER, r, "cannot schedule the next page");
}

/* Start a prepared call; takes ownership of body (a StrBuf's data). On failure the call is
 * freed and no callback runs. */
static int call_start(Ec2Call *call, StrBuf *body) {
        int r = body->error;
        if (r >= 0) {
                call->body = TAKE_PTR(body->data);
                if (!call->body)
                        r = -ENOMEM;
        }
        strbuf_done(body);
        if (r >= 0)
                r = call_schedule(call, 0);
        if (r < 0) {
                call->finish = NULL;
                call_free(call);
        }
        return r;
}

/* The end of a call's set-up: call is NULL when building the query failed (r < 0), there is no
 * callback (have_done false: -EINVAL) or memory ran out; b is freed then and that error returned.
 * Else the call starts with b as its body. */
static int call_send(Ec2Call *call, StrBuf *b, int r, bool have_done) {
        if (!call) {
                strbuf_done(b);
                return r < 0 ? r : have_done ? -ENOMEM : -EINVAL;
        }
        return call_start(call, b);
}

/* ---- typed finishes --------------------------------------------------------------------- */

#define DEFINE_LIST_CALL(Name, ListType, parse_fn, free_fn, done_type)                              \
        static int Name##_parse(Ec2Call *call, xmlDoc *doc) {                                      \
                return parse_fn(doc, call->result, call->client->max_items);                      \
        }                                                                                          \
        static void Name##_free(void *p) {                                                         \
                free_fn(p);                                                                        \
        }                                                                                          \
        static void Name##_finish(Ec2Call *call, const Ec2Error *error) {                          \
                ((done_type) call->done)(call->client, error,                                      \
                                         error ? NULL : TAKE_PTR(call->result), call->userdata);   \
        }                                                                                          \
        static Ec2Call *Name##_new(Ec2Client *c, const char *action, void *done, void *userdata) { \
                Ec2Call *call = call_new(c, action, done, userdata);                               \
                if (!call)                                                                         \
                        return NULL;                                                               \
                call->result = calloc(1, sizeof(ListType));                                        \
                if (!call->result) {                                                               \
                        call_free(call);                                                           \
                        return NULL;                                                               \
                }                                                                                  \
                call->result_free = Name##_free;                                                   \
                call->parse = Name##_parse;                                                        \
                call->finish = Name##_finish;                                                      \
                call->paginate = true;                                                             \
                return call;                                                                       \
        }

DEFINE_LIST_CALL(types, Ec2InstanceTypeList, ec2_parse_instance_types, ec2_instance_type_list_free,
                 ec2_instance_types_done_t)
DEFINE_LIST_CALL(offerings, Ec2OfferingList, ec2_parse_offerings, ec2_offering_list_free,
                 ec2_offerings_done_t)
DEFINE_LIST_CALL(subnets, Ec2SubnetList, ec2_parse_subnets, ec2_subnet_list_free, ec2_subnets_done_t)
DEFINE_LIST_CALL(sgs, Ec2SecurityGroupList, ec2_parse_security_groups, ec2_security_group_list_free,
                 ec2_security_groups_done_t)
DEFINE_LIST_CALL(instances, Ec2InstanceList, ec2_parse_instances, ec2_instance_list_free,
                 ec2_instances_done_t)
DEFINE_LIST_CALL(reservations, Ec2CapacityReservationList, ec2_parse_capacity_reservations,
                 ec2_capacity_reservation_list_free, ec2_capacity_reservations_done_t)

/* spot prices and images post-process the whole list */
static int spot_parse(Ec2Call *call, xmlDoc *doc) {
        return ec2_parse_spot_prices(doc, call->result, call->client->max_items);
}
static void spot_free(void *p) {
        ec2_spot_price_list_free(p);
}
static void spot_finish(Ec2Call *call, const Ec2Error *error) {
        if (!error)
                ec2_spot_prices_latest(call->result);
        ((ec2_spot_prices_done_t) call->done)(call->client, error, error ? NULL : TAKE_PTR(call->result),
                                              call->userdata);
}
static int images_parse(Ec2Call *call, xmlDoc *doc) {
        return ec2_parse_images(doc, call->result, call->client->max_items);
}
static void images_free(void *p) {
        ec2_image_list_free(p);
}
static void images_finish(Ec2Call *call, const Ec2Error *error) {
        if (!error)
                ec2_images_sort(call->result);
        ((ec2_images_done_t) call->done)(call->client, error, error ? NULL : TAKE_PTR(call->result),
                                         call->userdata);
}

static Ec2Call *list_call_new(Ec2Client *c, const char *action, size_t size, page_parse_t parse,
                              void (*result_free)(void *), call_finish_t finish, void *done,
                              void *userdata) {
        Ec2Call *call = call_new(c, action, done, userdata);
        if (!call)
                return NULL;
        call->result = calloc(1, size);
        if (!call->result) {
                call_free(call);
                return NULL;
        }
        call->result_free = result_free;
        call->parse = parse;
        call->finish = finish;
        call->paginate = true;
        return call;
}

/* ---- public calls ----------------------------------------------------------------------- */

int ec2_describe_instance_types(Ec2Client *c, const char *const *names, const Ec2Filter *filters,
                                size_t n_filters, ec2_instance_types_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeInstanceTypes");
        if (r >= 0)
                r = ec2_query_add_list(&b, "InstanceType", names);
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        if (r >= 0 && !names) /* with explicit names AWS refuses MaxResults */
                r = ec2_query_add(&b, "MaxResults", "100");
        Ec2Call *call = r >= 0 && done ? types_new(c, "DescribeInstanceTypes", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_instance_type_offerings(Ec2Client *c, const Ec2Filter *filters, size_t n_filters,
                                         ec2_offerings_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeInstanceTypeOfferings");
        if (r >= 0)
                r = ec2_query_add(&b, "LocationType", "availability-zone");
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        if (r >= 0)
                r = ec2_query_add(&b, "MaxResults", "1000");
        Ec2Call *call = r >= 0 && done ? offerings_new(c, "DescribeInstanceTypeOfferings", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_spot_prices(Ec2Client *c, const char *const *types, int64_t start_time,
                             ec2_spot_prices_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_build_spot_prices(types, start_time, &b);
        Ec2Call *call = r >= 0 && done
                ? list_call_new(c, "DescribeSpotPriceHistory", sizeof(Ec2SpotPriceList), spot_parse,
                                spot_free, spot_finish, done, userdata)
                : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_subnets(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                         size_t n_filters, ec2_subnets_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeSubnets");
        if (r >= 0)
                r = ec2_query_add_list(&b, "SubnetId", ids);
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        Ec2Call *call = r >= 0 && done ? subnets_new(c, "DescribeSubnets", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_capacity_reservations(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                       size_t n_filters, ec2_capacity_reservations_done_t done,
                                       void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeCapacityReservations");
        if (r >= 0)
                r = ec2_query_add_list(&b, "CapacityReservationId", ids);
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        if (r >= 0 && !ids) /* EC2 refuses MaxResults with ids */
                r = ec2_query_add(&b, "MaxResults", "1000");
        Ec2Call *call = r >= 0 && done ? reservations_new(c, "DescribeCapacityReservations", done, userdata) : NULL;
        if (!call) {
                strbuf_done(&b);
                return r < 0 ? r : done ? -ENOMEM : -EINVAL;
        }
        return call_start(call, &b);
}

int ec2_describe_security_groups(Ec2Client *c, const char *const *ids, const Ec2Filter *filters,
                                 size_t n_filters, ec2_security_groups_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeSecurityGroups");
        if (r >= 0)
                r = ec2_query_add_list(&b, "GroupId", ids);
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        Ec2Call *call = r >= 0 && done ? sgs_new(c, "DescribeSecurityGroups", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_images(Ec2Client *c, const char *const *ids, const char *const *owners,
                        const Ec2Filter *filters, size_t n_filters, ec2_images_done_t done,
                        void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeImages");
        if (r >= 0)
                r = ec2_query_add_list(&b, "ImageId", ids);
        if (r >= 0)
                r = ec2_query_add_list(&b, "Owner", owners);
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, filters, n_filters);
        Ec2Call *call = r >= 0 && done
                ? list_call_new(c, "DescribeImages", sizeof(Ec2ImageList), images_parse, images_free,
                                images_finish, done, userdata)
                : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_cluster_instances(Ec2Client *c, const char *const *states,
                                   const Ec2Filter *filters, size_t n_filters,
                                   ec2_instances_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_build_cluster_instances(c->cluster, states, filters, n_filters, &b);
        Ec2Call *call = r >= 0 && done ? instances_new(c, "DescribeInstances", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

int ec2_describe_instances_by_id(Ec2Client *c, const char *const *ids, ec2_instances_done_t done,
                                 void *userdata) {
        StrBuf b;
        int r = ec2_query_init(&b, "DescribeInstances");
        if (r >= 0)
                r = ids && ids[0] ? ec2_query_add_list(&b, "InstanceId", ids) : -EINVAL;
        Ec2Call *call = r >= 0 && done ? instances_new(c, "DescribeInstances", done, userdata) : NULL;
        return call_send(call, &b, r, done != NULL);
}

/* SSM GetParameter */
static void ssm_finish(Ec2Call *call, const Ec2Error *error) {
        ((ec2_ssm_parameter_done_t) call->done)(call->client, error,
                                                error ? NULL : TAKE_PTR(call->result), call->userdata);
}

int ec2_ssm_get_parameter(Ec2Client *c, const char *name, ec2_ssm_parameter_done_t done,
                          void *userdata) {
        StrBuf b;
        if (isempty(name) || name[0] != '/' || strlen(name) > 2048 || !done)
                return -EINVAL;
        _cleanup_free_ char *json = ec2_build_ssm_get_parameter(name);
        if (!json)
                return -ENOMEM;
        Ec2Call *call = call_new(c, "GetParameter", done, userdata);
        if (!call)
                return -ENOMEM;
        call->ssm = true;
        call->result_free = free;
        call->finish = ssm_finish;
        strbuf_init(&b, SSM_BODY_MAX);
        (void) strbuf_append(&b, json, strlen(json));
        return call_start(call, &b);
}

/* IAM instance profiles */
static int iam_parse(Ec2Call *call, xmlDoc *doc) {
        if (streq(call->action, "GetInstanceProfile"))
                call->result = ec2_parse_iam_role(doc);
        return 0;
}
static void iam_finish(Ec2Call *call, const Ec2Error *error) {
        ((ec2_iam_done_t) call->done)(call->client, error, error ? NULL : TAKE_PTR(call->result), call->userdata);
}

int ec2_iam_instance_profile(Ec2Client *c, const Ec2IamRequest *req, ec2_iam_done_t done, void *userdata) {
        StrBuf b;
        if (!done || !req)
                return -EINVAL;
        int r = ec2_build_iam(req, &b);
        if (r < 0) {
                strbuf_done(&b);
                return r;
        }
        Ec2Call *call = call_new(c, req->action, done, userdata);
        if (!call) {
                strbuf_done(&b);
                return -ENOMEM;
        }
        call->iam = true;
        call->parse = iam_parse;
        call->result_free = free;
        call->finish = iam_finish;
        return call_start(call, &b);
}

/* CreateLaunchTemplate */
static int lt_parse(Ec2Call *call, xmlDoc *doc) {
        Ec2LaunchTemplate *t = NULL;
        int r = ec2_parse_launch_template(doc, &t);
        if (r >= 0)
                call->result = t;
        return r;
}
static void lt_free(void *p) {
        ec2_launch_template_free(p);
}
static void lt_finish(Ec2Call *call, const Ec2Error *error) {
        ((ec2_launch_template_done_t) call->done)(call->client, error,
                                                  error ? NULL : TAKE_PTR(call->result), call->userdata);
}

int ec2_create_launch_template(Ec2Client *c, const Ec2LaunchTemplateSpec *spec,
                               ec2_launch_template_done_t done, void *userdata) {
        StrBuf b;
        int r = ec2_build_create_launch_template(spec, c->cluster, &b);
        Ec2Call *call = r >= 0 && done ? call_new(c, "CreateLaunchTemplate", done, userdata) : NULL;
        if (!call) {
                strbuf_done(&b);
                return r < 0 ? r : done ? -ENOMEM : -EINVAL;
        }
        call->parse = lt_parse;
        call->result_free = lt_free;
        call->finish = lt_finish;
        return call_start(call, &b);
}

/* CreateFleet */
static int fleet_parse(Ec2Call *call, xmlDoc *doc) {
        Ec2FleetResult *f = NULL;
        int r = ec2_parse_create_fleet(doc, &f);
        if (r >= 0)
                call->result = f;
        return r;
}
static void fleet_free(void *p) {
        ec2_fleet_result_free(p);
}
static void fleet_finish(Ec2Call *call, const Ec2Error *error) {
        ((ec2_fleet_done_t) call->done)(call->client, error, error ? NULL : TAKE_PTR(call->result),
                                        call->userdata);
}

int ec2_create_fleet(Ec2Client *c, const Ec2FleetSpec *spec, ec2_fleet_done_t done, void *userdata) {
        StrBuf b;
        int r = isempty(c->cluster) ? -EINVAL : ec2_build_create_fleet(spec, c->cluster, &b);
        if (r < 0 && isempty(c->cluster))
                return r;
        Ec2Call *call = r >= 0 && done ? call_new(c, "CreateFleet", done, userdata) : NULL;
        if (!call) {
                strbuf_done(&b);
                return r < 0 ? r : done ? -ENOMEM : -EINVAL;
        }
        call->parse = fleet_parse;
        call->result_free = fleet_free;
        call->finish = fleet_finish;
        return call_start(call, &b);
}

/* CreateTags */
static int no_parse(Ec2Call *call, xmlDoc *doc) {
        return 0;
}
static void tags_finish(Ec2Call *call, const Ec2Error *error) {
        ((ec2_done_t) call->done)(call->client, error, call->userdata);
}

int ec2_create_tags(Ec2Client *c, const char *const *resource_ids, const Ec2Tag *tags,
                    size_t n_tags, ec2_done_t done, void *userdata) {
        StrBuf b;
        int r;
        if (!resource_ids || !resource_ids[0] || n_tags == 0 || n_tags > 50 || !done)
                return -EINVAL;
        for (size_t i = 0; i < n_tags; i++)
                if (streq_ptr(tags[i].key, EC2_CLUSTER_TAG))
                        return -EPERM; /* cluster membership is set at launch, never changed */
        r = ec2_query_init(&b, "CreateTags");
        if (r >= 0)
                r = ec2_query_add_list(&b, "ResourceId", resource_ids);
        if (r >= 0)
                r = ec2_query_add_tags(&b, "Tag", tags, n_tags);
        Ec2Call *call = r >= 0 ? call_new(c, "CreateTags", done, userdata) : NULL;
        if (!call) {
                strbuf_done(&b);
                return r < 0 ? r : -ENOMEM;
        }
        call->parse = no_parse;
        call->finish = tags_finish;
        return call_start(call, &b);
}

/* TerminateInstances: describe (filter instance-id, so unknown ids are simply absent), keep the
 * ids tagged with this cluster, terminate those, report the rest as refused. */
static void terminate_deliver(Ec2Call *call, const Ec2Error *error, char **terminated) {
        Ec2TerminateResult *t = NULL;
        if (!error) {
                t = calloc(1, sizeof *t);
                if (t) {
                        t->terminated = terminated ?: calloc(1, sizeof(char *));
                        t->refused = TAKE_PTR(call->refused) ?: calloc(1, sizeof(char *));
                        terminated = NULL;
                }
                if (!t || !t->terminated || !t->refused) {
                        ec2_terminate_result_free(t);
                        t = NULL;
                        Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = -ENOMEM };
                        snprintf(e.message, sizeof e.message, "out of memory");
                        ((ec2_terminate_done_t) call->done)(call->client, &e, NULL, call->userdata);
                        ec2_strv_free(terminated);
                        return;
                }
        }
        ((ec2_terminate_done_t) call->done)(call->client, error, t, call->userdata);
        ec2_strv_free(terminated);
}

static int terminate_parse(Ec2Call *call, xmlDoc *doc) {
        char **ids = NULL;
        int r = ec2_parse_terminated(doc, &ids);
        if (r >= 0)
                call->result = ids;
        return r;
}
static void strv_free_void(void *p) {
        ec2_strv_free(p);
}
static void terminate_finish(Ec2Call *call, const Ec2Error *error) {
        terminate_deliver(call, error, error ? NULL : TAKE_PTR(call->result));
}

static void call_fail_deliver_oom(Ec2Call *call) {
        Ec2Error e = { .kind = EC2_ERROR_OTHER, .error = -ENOMEM, .attempts = call->attempt };
        snprintf(e.message, sizeof e.message, "out of memory");
        terminate_deliver(call, &e, NULL);
}

static void describe_for_terminate_finish(Ec2Call *call, const Ec2Error *error) {
        Ec2Client *c = call->client;
        Ec2InstanceList *l = call->result;
        size_t n_tagged = 0, n_refused = 0;
        StrBuf b;
        int r;

        if (error)
                return terminate_deliver(call, error, NULL);
        for (size_t i = 0; call->ids[i]; i++) {
                const Ec2Instance *found = NULL;
                for (size_t k = 0; k < l->n; k++)
                        if (streq(l->items[k].id, call->ids[i]))
                                found = &l->items[k];
                bool ours = found && streq_ptr(ec2_instance_tag(found, EC2_CLUSTER_TAG), c->cluster);
                if (!ours)
                        log_warning("Refusing to terminate %s: %s", call->ids[i],
                                    found ? "it lacks this cluster's tag " EC2_CLUSTER_TAG
                                          : "no such instance");
                r = ec2_strv_push(ours ? &call->tagged : &call->refused, ours ? &n_tagged : &n_refused,
                                  call->ids[i]);
                if (r < 0)
                        return call_fail_deliver_oom(call);
        }
        if (n_tagged == 0)
                return terminate_deliver(call, NULL, NULL);

        r = ec2_query_init(&b, "TerminateInstances");
        if (r >= 0)
                r = ec2_query_add_list(&b, "InstanceId", (const char *const *) call->tagged);
        Ec2Call *t = r >= 0 ? call_new(c, "TerminateInstances", call->done, call->userdata) : NULL;
        if (!t) {
                strbuf_done(&b);
                return call_fail_deliver_oom(call);
        }
        t->parse = terminate_parse;
        t->result_free = strv_free_void;
        t->finish = terminate_finish;
        t->refused = TAKE_PTR(call->refused);
        r = call_start(t, &b);
        if (r < 0)
                return call_fail_deliver_oom(call);
}

int ec2_terminate_instances(Ec2Client *c, const char *const *ids, ec2_terminate_done_t done,
                            void *userdata) {
        size_t n = 0;
        StrBuf b;
        int r;

        if (isempty(c->cluster) || !ids || !ids[0] || !done)
                return -EINVAL;
        while (ids[n])
                if (++n > 1000)
                        return -E2BIG;
        const Ec2Filter f = { .name = "instance-id", .values = ids, .n_values = n };
        if (n > EC2_MAX_FILTER_VALUES)
                return -E2BIG;
        r = ec2_query_init(&b, "DescribeInstances");
        if (r >= 0)
                r = ec2_query_add_filters(&b, 1, &f, 1);
        Ec2Call *call = r >= 0 ? instances_new(c, "DescribeInstances", done, userdata) : NULL;
        if (!call) {
                strbuf_done(&b);
                return r < 0 ? r : -ENOMEM;
        }
        call->finish = describe_for_terminate_finish;
        for (size_t i = 0, k = 0; i < n; i++)
                if (ec2_strv_push(&call->ids, &k, ids[i]) < 0) {
                        strbuf_done(&b);
                        call->finish = NULL;
                        call_free(call);
                        return -ENOMEM;
                }
        return call_start(call, &b);
}
