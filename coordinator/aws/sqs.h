/* SPDX-License-Identifier: Apache-2.0 */
/* An SQS long-poll consumer on the loop. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "aws-credentials.h"
#include "http.h"

/* An SQS consumer on the sd-event loop: long-polls one queue with ReceiveMessage and deletes
 * each message the handler is done with (DeleteMessage). AWS JSON 1.0 protocol
 * (X-Amz-Target: AmazonSQS.*), signed by libcurl (CURLOPT_AWS_SIGV4, service "sqs") with
 * credentials from the standard chain. Every failure (transport, throttling, 5xx, a missing
 * queue, no credentials) is retried after an exponential backoff with jitter; the consumer never
 * stops on its own and never polls faster than once a second without messages. */

#define SQS_MAX_MESSAGES 10          /* per ReceiveMessage: SQS's own limit */
#define SQS_MESSAGE_MAX (256u * 1024) /* a message body: SQS's own limit */
#define SQS_ANSWER_MAX (4u * 1024 * 1024)

typedef struct SqsClient SqsClient;

typedef struct SqsConfig {
        const char *region;           /* required */
        const char *queue_url;        /* required: https://sqs.REGION.amazonaws.com/ACCOUNT/NAME */
        const char *endpoint;         /* NULL: https://sqs.REGION.amazonaws.com/ */
        unsigned wait_seconds;        /* long poll, 1..20; 0: 20 */
        unsigned max_messages;        /* 1..10; 0: 10 */
        uint64_t backoff_base_usec;   /* 0: 1 s */
        uint64_t backoff_max_usec;    /* 0: 60 s */
        uint64_t idle_min_usec;       /* the least time between two empty receives; 0: 1 s */
} SqsConfig;

typedef struct SqsMessage {
        char *message_id;
        char *receipt_handle;
        char *body;
        size_t body_len;
} SqsMessage;

typedef struct SqsStats {
        uint64_t receives;        /* ReceiveMessage answers */
        uint64_t messages;        /* messages received */
        uint64_t deleted;         /* DeleteMessage answers 200 */
        uint64_t receive_errors;  /* ReceiveMessage failures (each retried after a backoff) */
        uint64_t delete_errors;   /* DeleteMessage failures (the message comes back) */
        uint64_t soon;            /* messages asked back in SQS_SOON_SECONDS */
} SqsStats;

/* What to do with a message: delete it (handled, or never to be understood), leave it to come
 * back after the queue's visibility timeout (it could not be handled yet), or have it back in
 * SQS_SOON_SECONDS (ChangeMessageVisibility: what it needs is on its way, e.g. a CreateFleet
 * answer that names its instance). */
typedef enum SqsVerdict {
        SQS_LEAVE,
        SQS_DELETE,
        SQS_SOON,
} SqsVerdict;
#define SQS_SOON_SECONDS 2
typedef SqsVerdict (*sqs_message_t)(SqsClient *c, const SqsMessage *m, void *userdata);

int sqs_client_new(sd_event *e, HttpClient *http, AwsCredentialProvider *creds, const SqsConfig *config,
                   sqs_message_t handler, void *userdata, SqsClient **ret);
/* Cancels everything in flight; the handler is not called afterwards. */
SqsClient *sqs_client_free(SqsClient *c);
/* Poll (true) or stop polling (false): only the replica that acts may take messages. */
int sqs_client_set_active(SqsClient *c, bool active);
bool sqs_client_active(const SqsClient *c);
const SqsStats *sqs_client_stats(const SqsClient *c);

/* ---- pure pieces, exposed for tests ------------------------------------------------------ */

/* JSON bodies of ReceiveMessage and DeleteMessage. */
char *sqs_build_receive(const char *queue_url, unsigned max_messages, unsigned wait_seconds);
char *sqs_build_delete(const char *queue_url, const char *receipt_handle);
/* The JSON body of ChangeMessageVisibility. */
char *sqs_build_visibility(const char *queue_url, const char *receipt_handle, unsigned seconds);
/* A ReceiveMessage answer ({"Messages": [...]} or {}): at most SQS_MAX_MESSAGES messages into
 * ret (each with an id, a receipt handle and a body of at most SQS_MESSAGE_MAX); -EBADMSG for
 * anything else. */
int sqs_parse_receive(const char *body, size_t len, SqsMessage ret[SQS_MAX_MESSAGES], size_t *ret_n);
void sqs_message_done(SqsMessage *m);
