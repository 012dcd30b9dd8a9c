/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "sqs-event.h"
#include "aws/sqs.h"
#include "strbuf.h"

/* The interruption queue ("interruption-queue"): EventBridge events delivered to SQS, a second
 * source of notices beside the agents. Each event becomes a notice on the node of each instance
 * it names, recorded as NOTICE_FROM_QUEUE and merged with the agent's notice of the same kind
 * (one notice, counted and logged once); then the same path as an agent notice: the directive
 * under drain-on, replacement capacity at once, a spot offering marked unavailable. An instance
 * no agent has reported is found through its Node (spec.providerID) and gets an entry made from
 * the Node. Only the leader polls. */

typedef struct Coordinator Coordinator;
typedef struct Interruption Interruption;

typedef struct InterruptionStats {
        uint64_t received[_SQS_EVENT_KIND_MAX]; /* understood messages, by kind */
        uint64_t duplicates;      /* notices the node had already (from its agent or the queue) */
        uint64_t not_understood;  /* deleted without effect */
        uint64_t ignored;         /* understood, but for no node of this cluster or calling for nothing */
        uint64_t errors;          /* events that could not be applied (left in the queue) */
} InterruptionStats;

int interruption_new(Coordinator *c, Interruption **ret);
Interruption *interruption_free(Interruption *q);
/* Poll while this replica acts (the leader), not otherwise. */
void interruption_set_active(Interruption *q, bool active);
/* Prometheus lines. */
void interruption_metrics(Interruption *q, StrBuf *b);

/* ---- exposed for tests ------------------------------------------------------------------ */

/* One message body: parsed and applied. SQS_LEAVE when it must be tried again later (the Node
 * watch has not listed yet, out of memory). */
SqsVerdict interruption_handle_body(Coordinator *c, InterruptionStats *stats, const char *body, size_t len,
                                    int64_t now_unix_ms);
/* One instance of an event: 1 a new notice, 0 nothing new (a duplicate, or ignored), < 0 an
 * error (-EAGAIN: try later). */
int interruption_apply(Coordinator *c, InterruptionStats *stats, const SqsEvent *ev, const char *instance_id,
                       int64_t now_unix_ms);
