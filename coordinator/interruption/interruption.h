/* SPDX-License-Identifier: Apache-2.0 */
/* The interruption queue: EventBridge events through SQS, a second source of notices. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "sqs-event.h"
#include "aws/sqs.h"
#include <systemd/sd-event.h>

#include "strbuf.h"

/* The interruption queue ("interruption-queue"): EventBridge events delivered to SQS, a second
 * source of notices beside the agents. Each event becomes a notice on the node of each instance
 * it names, recorded as NOTICE_FROM_QUEUE and merged with the agent's notice of the same kind
 * (one notice, counted and logged once); then the same path as an agent notice: the directive
 * under drain-on, replacement capacity at once, a spot offering marked unavailable. An instance
 * no agent has reported is found through its Node (spec.providerID) and gets an entry made from
 * the Node. Only the leader polls. */

typedef struct Interruption Interruption;
typedef struct NodeEntry NodeEntry;
typedef struct NoticeRecord NoticeRecord;
typedef struct Registry Registry;
struct cJSON;

typedef struct InterruptionStats {
        uint64_t received[_SQS_EVENT_KIND_MAX]; /* understood messages, by kind */
        uint64_t duplicates;      /* notices the node had already (from its agent or the queue) */
        uint64_t not_understood;  /* deleted without effect */
        uint64_t ignored;         /* understood, but for no node of this cluster or calling for nothing */
        uint64_t errors;          /* events that could not be applied (left in the queue) */
} InterruptionStats;

typedef struct InterruptionConfig {
        const char *queue_url;   /* https://sqs.REGION.amazonaws.com/ACCOUNT/NAME */
        const char *region;
        const char *endpoint;    /* SQS endpoint override (tests) */
} InterruptionConfig;

/* Where events go: the registry and what the rest of the coordinator does with a notice. */
typedef struct InterruptionSink {
        Registry *registry;
        void *userdata;
        uint64_t (*now)(void *userdata); /* CLOCK_MONOTONIC, µs */
        /* The Node whose providerID names the instance: -EAGAIN until the Nodes are listed,
         * -ENOENT when there is none (NULL: no Node watch, -ENOENT). */
        int (*find_node)(void *userdata, const char *instance_id, const struct cJSON **ret);
        /* An instance launched and not registered goes away: true when it was in flight. */
        bool (*instance_leaving)(void *userdata, const char *instance_id);
        /* A CreateFleet is under way whose answer may name an instance not known yet. */
        bool (*launch_unanswered)(void *userdata);
        /* A notice recorded first (counted and logged once). */
        void (*notice_added)(void *userdata, const NodeEntry *e, const NoticeRecord *n);
        /* The node's notices changed: the directive under drain-on. */
        void (*apply_notices)(void *userdata, NodeEntry *e);
} InterruptionSink;

int interruption_new(sd_event *e, const InterruptionConfig *cfg, const InterruptionSink *sink,
                     Interruption **ret);
Interruption *interruption_free(Interruption *q);
/* Poll while this replica acts (the leader), not otherwise. */
void interruption_set_active(Interruption *q, bool active);
/* Prometheus lines. */
void interruption_metrics(Interruption *q, StrBuf *b);

/* ---- exposed for tests ------------------------------------------------------------------ */

/* One message body: parsed and applied. SQS_LEAVE when it must be tried again later (the Node
 * watch has not listed yet, out of memory). */
SqsVerdict interruption_handle_body(const InterruptionSink *sink, InterruptionStats *stats, const char *body, size_t len,
                                    int64_t now_unix_ms);
/* One instance of an event: 1 a new notice, 0 nothing new (a duplicate, or ignored), < 0 an
 * error (-EAGAIN: try later). */
int interruption_apply(const InterruptionSink *sink, InterruptionStats *stats, const SqsEvent *ev, const char *instance_id,
                       int64_t now_unix_ms);
