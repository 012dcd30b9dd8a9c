/* SPDX-License-Identifier: Apache-2.0 */
/* The SQS consumer: timer → credentials → ReceiveMessage (long poll) → handler per message →
 * DeleteMessage for those it is done with (ChangeMessageVisibility for those wanted back soon) →
 * the next ReceiveMessage at once (or after a backoff, or after the idle minimum when nothing
 * came). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "aws-request.h"
#include "ec2-internal.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "sqs.h"

#define DEFAULT_WAIT_SECONDS 20u
#define DEFAULT_BACKOFF_BASE_USEC (1 * USEC_PER_SEC)
#define DEFAULT_BACKOFF_MAX_USEC (60 * USEC_PER_SEC)
#define DEFAULT_IDLE_MIN_USEC (1 * USEC_PER_SEC)
#define RECEIVE_SLACK_USEC (10 * USEC_PER_SEC) /* beyond the long poll, for the answer */
#define DELETE_TIMEOUT_USEC (10 * USEC_PER_SEC)
#define DELETE_ANSWER_MAX (64u * 1024)
#define MAX_DELETES 64u
#define CONTENT_TYPE "application/x-amz-json-1.0"

typedef struct SqsDelete SqsDelete;
struct SqsDelete {
        SqsClient *client;
        SqsDelete *prev, *next;
        char *receipt_handle;
        char *message_id;
        int visibility;          /* -1: DeleteMessage; else ChangeMessageVisibility to it */
        HttpRequest *req;
        bool waiting_creds;
};

struct SqsClient {
        sd_event *event;
        HttpClient *http;
        AwsCredentialProvider *creds;
        char *queue_url, *url, *sigv4;
        unsigned wait_seconds, max_messages;
        uint64_t backoff_base, backoff_max, idle_min;
        sqs_message_t handler;
        void *userdata;

        bool active;
        sd_event_source *timer;
        bool waiting_creds;
        HttpRequest *receive;
        uint64_t receive_started;
        unsigned failures;        /* in a row */
        SqsDelete *deletes;
        size_t n_deletes;
        SqsStats stats;
};

/* ---- pure pieces ------------------------------------------------------------------------- */

char *sqs_build_receive(const char *queue_url, unsigned max_messages, unsigned wait_seconds) {
        cJSON *o = cJSON_CreateObject();
        char *s = NULL;
        if (o && cJSON_AddStringToObject(o, "QueueUrl", queue_url) &&
            cJSON_AddNumberToObject(o, "MaxNumberOfMessages", max_messages) &&
            cJSON_AddNumberToObject(o, "WaitTimeSeconds", wait_seconds))
                s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return s;
}

/* A body naming the queue and one received message; visibility >= 0 adds VisibilityTimeout. */
static char *build_for_message(const char *queue_url, const char *receipt_handle, int visibility) {
        cJSON *o = cJSON_CreateObject();
        char *s = NULL;
        if (o && cJSON_AddStringToObject(o, "QueueUrl", queue_url) &&
            cJSON_AddStringToObject(o, "ReceiptHandle", receipt_handle) &&
            (visibility < 0 || cJSON_AddNumberToObject(o, "VisibilityTimeout", visibility)))
                s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        return s;
}

char *sqs_build_delete(const char *queue_url, const char *receipt_handle) {
        return build_for_message(queue_url, receipt_handle, -1);
}

char *sqs_build_visibility(const char *queue_url, const char *receipt_handle, unsigned seconds) {
        return build_for_message(queue_url, receipt_handle, (int) seconds);
}

void sqs_message_done(SqsMessage *m) {
        if (!m)
                return;
        free(m->message_id);
        free(m->receipt_handle);
        free(m->body);
        *m = (SqsMessage) {};
}

int sqs_parse_receive(const char *body, size_t len, SqsMessage ret[SQS_MAX_MESSAGES], size_t *ret_n) {
        SqsMessage out[SQS_MAX_MESSAGES] = {};
        size_t n = 0;
        int r = 0;

        if (!body || len > SQS_ANSWER_MAX)
                return -EBADMSG;
        cJSON *j = cJSON_ParseWithLength(body, len);
        if (!cJSON_IsObject(j)) {
                cJSON_Delete(j);
                return -EBADMSG;
        }
        const cJSON *msgs = json_get(j, "Messages"), *m;
        if (msgs && (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) > SQS_MAX_MESSAGES)) {
                cJSON_Delete(j);
                return -EBADMSG;
        }
        cJSON_ArrayForEach(m, msgs) {
                const char *id = json_str(m, "MessageId"), *rh = json_str(m, "ReceiptHandle"),
                           *b = json_str(m, "Body");
                if (isempty(id) || isempty(rh) || !b || strlen(b) > SQS_MESSAGE_MAX ||
                    strlen(rh) > 8192 || strlen(id) > 128) {
                        r = -EBADMSG;
                        break;
                }
                out[n] = (SqsMessage) { .message_id = strdup(id), .receipt_handle = strdup(rh),
                                        .body = strdup(b), .body_len = strlen(b) };
                if (!out[n].message_id || !out[n].receipt_handle || !out[n].body) {
                        sqs_message_done(&out[n]);
                        r = -ENOMEM;
                        break;
                }
                n++;
        }
        cJSON_Delete(j);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        sqs_message_done(&out[i]);
                return r;
        }
        memcpy(ret, out, n * sizeof *out);
        *ret_n = n;
        return 0;
}

/* ---- the client -------------------------------------------------------------------------- */

int sqs_client_new(sd_event *e, HttpClient *http, AwsCredentialProvider *creds, const SqsConfig *cfg,
                   sqs_message_t handler, void *userdata, SqsClient **ret) {
        if (!e || !http || !creds || !cfg || !handler || isempty(cfg->region) || strchr(cfg->region, ':') ||
            isempty(cfg->queue_url) || cfg->wait_seconds > 20 || cfg->max_messages > SQS_MAX_MESSAGES)
                return -EINVAL;
        SqsClient *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event = sd_event_ref(e);
        c->http = http;
        c->creds = creds;
        c->handler = handler;
        c->userdata = userdata;
        c->wait_seconds = cfg->wait_seconds ?: DEFAULT_WAIT_SECONDS;
        c->max_messages = cfg->max_messages ?: SQS_MAX_MESSAGES;
        c->backoff_base = cfg->backoff_base_usec ?: DEFAULT_BACKOFF_BASE_USEC;
        c->backoff_max = MAX(cfg->backoff_max_usec ?: DEFAULT_BACKOFF_MAX_USEC, c->backoff_base);
        c->idle_min = cfg->idle_min_usec ?: DEFAULT_IDLE_MIN_USEC;
        c->queue_url = strdup(cfg->queue_url);
        c->url = aws_endpoint_url(cfg->endpoint, "sqs", cfg->region);
        if (asprintf(&c->sigv4, "aws:amz:%s:sqs", cfg->region) < 0)
                c->sigv4 = NULL;
        if (!c->queue_url || !c->url || !c->sigv4) {
                sqs_client_free(c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

static void on_receive_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata);
static void on_delete_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata);

static void delete_free(SqsDelete *d) {
        SqsClient *c = d->client;
        if (d->prev)
                d->prev->next = d->next;
        else
                c->deletes = d->next;
        if (d->next)
                d->next->prev = d->prev;
        c->n_deletes--;
        if (d->req)
                http_request_cancel(d->req);
        if (d->waiting_creds)
                aws_credentials_cancel(c->creds, on_delete_creds, d);
        free(d->receipt_handle);
        free(d->message_id);
        free(d);
}

static void receive_stop(SqsClient *c) {
        c->timer = sd_event_source_disable_unref(c->timer);
        if (c->receive)
                http_request_cancel(TAKE_PTR(c->receive));
        if (c->waiting_creds) {
                aws_credentials_cancel(c->creds, on_receive_creds, c);
                c->waiting_creds = false;
        }
}

SqsClient *sqs_client_free(SqsClient *c) {
        if (!c)
                return NULL;
        receive_stop(c);
        while (c->deletes)
                delete_free(c->deletes);
        free(c->queue_url);
        free(c->url);
        free(c->sigv4);
        sd_event_unref(c->event);
        free(c);
        return NULL;
}

bool sqs_client_active(const SqsClient *c) {
        return c && c->active;
}

const SqsStats *sqs_client_stats(const SqsClient *c) {
        return &c->stats;
}

static uint64_t now_usec(SqsClient *c) {
        uint64_t t = 0;
        (void) sd_event_now(c->event, CLOCK_MONOTONIC, &t);
        return t;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        SqsClient *c = userdata;
        c->timer = sd_event_source_disable_unref(c->timer);
        if (!c->active)
                return 0;
        c->waiting_creds = true;
        int r = aws_credentials_get(c->creds, on_receive_creds, c);
        if (r < 0) {
                c->waiting_creds = false;
                on_receive_creds(c->creds, r, NULL, c);
        }
        return 0;
}

static void receive_schedule(SqsClient *c, uint64_t delay) {
        if (!c->active || c->timer)
                return;
        int r = sd_event_add_time_relative(c->event, &c->timer, CLOCK_MONOTONIC, delay,
                                           delay ? 50 * USEC_PER_MSEC : 1, on_timer, c);
        if (r < 0)
                log_error_errno(r, "SQS %s: cannot schedule the next ReceiveMessage: %m", c->queue_url);
}

int sqs_client_set_active(SqsClient *c, bool active) {
        if (!c)
                return -EINVAL;
        if (c->active == active)
                return 0;
        c->active = active;
        if (!active) {
                receive_stop(c);
                log_info("SQS %s: polling stopped.", c->queue_url);
                return 0;
        }
        log_info("SQS %s: polling (long poll %us, up to %u messages).", c->queue_url, c->wait_seconds,
                 c->max_messages);
        receive_schedule(c, 0);
        return c->timer ? 0 : -ENOMEM;
}

/* A failed ReceiveMessage: the first of a streak is a warning, the next ones debug; then a
 * backoff with jitter. */
static void receive_failed(SqsClient *c, const char *code, const char *message) {
        c->stats.receive_errors++;
        c->failures++;
        uint64_t d = ec2_backoff_usec(c->failures + 1, c->backoff_base, c->backoff_max, arc4random());
        if (c->failures == 1)
                log_warning("SQS %s: ReceiveMessage failed: %s %s; retrying with backoff.", c->queue_url, code,
                            message);
        else
                log_debug("SQS %s: ReceiveMessage failed (%u in a row): %s %s; retrying in %" PRIu64 " ms.",
                          c->queue_url, c->failures, code, message, d / USEC_PER_MSEC);
        receive_schedule(c, d);
}

static void on_delete_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                           void *userdata) {
        SqsDelete *d = userdata;
        SqsClient *c = d->client;
        d->req = NULL;
        if (error >= 0 && status == 200) {
                if (d->visibility < 0)
                        c->stats.deleted++;
        } else {
                Ec2Error e = {};
                if (error < 0)
                        snprintf(e.message, sizeof e.message, "%s", strerror(-error));
                else
                        (void) ec2_json_error(body, status, &e);
                c->stats.delete_errors++;
                log_warning("SQS %s: %s of %s failed: HTTP %ld %s %s; it comes back after the "
                            "visibility timeout.", c->queue_url,
                            d->visibility < 0 ? "DeleteMessage" : "ChangeMessageVisibility", d->message_id, status,
                            e.code, e.message);
                if (e.kind == EC2_ERROR_AUTH_FAILURE)
                        aws_credentials_invalidate(c->creds);
        }
        delete_free(d);
}

static void on_delete_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata) {
        SqsDelete *d = userdata;
        SqsClient *c = d->client;
        _cleanup_free_ char *body = NULL;
        int r = error;

        d->waiting_creds = false;
        if (r >= 0)
                r = (body = build_for_message(c->queue_url, d->receipt_handle, d->visibility)) ? 0 : -ENOMEM;
        if (r >= 0) {
                AwsRequestSpec spec = { .url = c->url, .sigv4 = c->sigv4, .content_type = CONTENT_TYPE,
                                        .target = d->visibility < 0 ? "AmazonSQS.DeleteMessage"
                                                                    : "AmazonSQS.ChangeMessageVisibility",
                                        .body = body,
                                        .body_len = strlen(body), .timeout_usec = DELETE_TIMEOUT_USEC,
                                        .max_body = DELETE_ANSWER_MAX };
                HttpRequest *req = NULL;
                r = aws_request_new(c->http, &spec, creds, &req);
                if (r >= 0) {
                        r = http_request_start(req, on_delete_done, d);
                        if (r >= 0)
                                d->req = req;
                }
        }
        if (r < 0) {
                c->stats.delete_errors++;
                log_warning_errno(r, "SQS %s: cannot delete message %s (%m); it comes back after the visibility timeout.",
                                  c->queue_url, d->message_id);
                delete_free(d);
        }
}

/* visibility < 0: DeleteMessage; else ChangeMessageVisibility to that many seconds. */
static void delete_start(SqsClient *c, const SqsMessage *m, int visibility) {
        if (c->n_deletes >= MAX_DELETES) {
                c->stats.delete_errors++;
                log_warning("SQS %s: too many deletions under way; message %s comes back later.", c->queue_url,
                            m->message_id);
                return;
        }
        SqsDelete *d = calloc(1, sizeof *d);
        if (!d || !(d->receipt_handle = strdup(m->receipt_handle)) || !(d->message_id = strdup(m->message_id))) {
                if (d) {
                        free(d->receipt_handle);
                        free(d);
                }
                c->stats.delete_errors++;
                log_oom();
                return;
        }
        d->client = c;
        d->visibility = visibility;
        d->next = c->deletes;
        if (c->deletes)
                c->deletes->prev = d;
        c->deletes = d;
        c->n_deletes++;
        d->waiting_creds = true;
        int r = aws_credentials_get(c->creds, on_delete_creds, d);
        if (r < 0) {
                d->waiting_creds = false;
                on_delete_creds(c->creds, r, NULL, d);
        }
}

static void on_receive_done(HttpRequest *req, int error, long status, const char *body, size_t len,
                            void *userdata) {
        SqsClient *c = userdata;
        SqsMessage msgs[SQS_MAX_MESSAGES];
        size_t n = 0;
        int r;

        c->receive = NULL;
        if (error < 0)
                return receive_failed(c, error == -EFBIG ? "ResponseTooLarge" : "Transport", strerror(-error));
        if (status != 200) {
                Ec2Error e = {};
                if (ec2_json_error(body, status, &e) < 0 || isempty(e.code))
                        snprintf(e.code, sizeof e.code, "HTTP%ld", status);
                if (e.kind == EC2_ERROR_AUTH_FAILURE)
                        aws_credentials_invalidate(c->creds); /* fetched again on the next try */
                return receive_failed(c, e.code, e.message);
        }
        r = sqs_parse_receive(body, len, msgs, &n);
        if (r < 0)
                return receive_failed(c, "UnreadableAnswer", strerror(-r));
        if (c->failures > 0)
                log_info("SQS %s: ReceiveMessage answers again after %u failure(s).", c->queue_url, c->failures);
        c->failures = 0;
        c->stats.receives++;
        c->stats.messages += n;
        for (size_t i = 0; i < n; i++) {
                SqsVerdict v = c->handler(c, &msgs[i], c->userdata);
                if (v == SQS_DELETE)
                        delete_start(c, &msgs[i], -1);
                else if (v == SQS_SOON) {
                        c->stats.soon++;
                        delete_start(c, &msgs[i], SQS_SOON_SECONDS);
                }
                sqs_message_done(&msgs[i]);
        }
        /* more may wait: ask again at once; an empty answer that came quickly (a queue that does
         * not hold the long poll) waits the idle minimum */
        uint64_t took = now_usec(c) - c->receive_started;
        receive_schedule(c, n == 0 && took < c->idle_min ? c->idle_min - took : 0);
}

static void on_receive_creds(AwsCredentialProvider *p, int error, const AwsCredentials *creds, void *userdata) {
        SqsClient *c = userdata;
        _cleanup_free_ char *body = NULL;
        HttpRequest *req = NULL;
        int r;

        c->waiting_creds = false;
        if (error < 0)
                return receive_failed(c, "NoCredentials", strerror(-error));
        body = sqs_build_receive(c->queue_url, c->max_messages, c->wait_seconds);
        if (!body)
                return receive_failed(c, "Local", strerror(ENOMEM));
        AwsRequestSpec spec = { .url = c->url, .sigv4 = c->sigv4, .content_type = CONTENT_TYPE,
                                .target = "AmazonSQS.ReceiveMessage", .body = body, .body_len = strlen(body),
                                .timeout_usec = c->wait_seconds * USEC_PER_SEC + RECEIVE_SLACK_USEC,
                                .max_body = SQS_ANSWER_MAX };
        r = aws_request_new(c->http, &spec, creds, &req);
        if (r >= 0)
                r = http_request_start(req, on_receive_done, c);
        if (r < 0)
                return receive_failed(c, "Local", strerror(-r));
        c->receive = req;
        c->receive_started = now_usec(c);
}
