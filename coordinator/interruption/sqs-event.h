/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* EventBridge events as they reach an SQS interruption queue (the message body is the event):
 *   aws.ec2    "EC2 Spot Instance Interruption Warning"  detail.instance-id, instance-action
 *   aws.ec2    "EC2 Instance Rebalance Recommendation"   detail.instance-id
 *   aws.ec2    "EC2 Instance State-change Notification"  detail.instance-id, state
 *   aws.health "AWS Health Event"                        detail.service EC2, eventTypeCategory
 *              scheduledChange, affectedEntities[].entityValue, startTime, statusCode
 * each read into the instances it concerns and the notice it amounts to. */

#define SQS_EVENT_MAX_INSTANCES 64
#define SQS_EVENT_BODY_MAX (256u * 1024)

typedef enum SqsEventKind {
        SQS_EVENT_SPOT_INTERRUPTION,
        SQS_EVENT_REBALANCE,
        SQS_EVENT_STATE_CHANGE,
        SQS_EVENT_SCHEDULED_CHANGE,
        _SQS_EVENT_KIND_MAX,
} SqsEventKind;

typedef struct SqsEvent {
        SqsEventKind kind;
        char id[128];               /* the EventBridge event id */
        char action[96];            /* spot: terminate|stop|hibernate; state-change: the state;
                                     * scheduled change: the Health eventTypeCode */
        int notice_kind;            /* Nodesmith__V1__Notice__Kind it amounts to; 0: none (an
                                     * instance starting, a Health event closed) */
        int64_t time_unix_ms;       /* the event's time */
        int64_t deadline_unix_ms;   /* when the instance goes away; 0: unknown */
        char instances[SQS_EVENT_MAX_INSTANCES][24];
        size_t n_instances;         /* ≥ 1 */
} SqsEvent;

/* "spot_interruption", "rebalance", "state_change", "scheduled_change". */
const char *sqs_event_kind_to_string(SqsEventKind k);
/* -EBADMSG: not an event, or a known event without what it must carry; -EOPNOTSUPP: an event
 * of another kind. ret is written only on success. */
int sqs_event_parse(const char *body, size_t len, SqsEvent *ret);
/* "i-" and 8 or 17 lowercase hex digits. */
bool sqs_instance_id_valid(const char *s);
