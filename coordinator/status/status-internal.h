/* SPDX-License-Identifier: Apache-2.0 */
/* What status.c and nodeclaims.c share: the writer and its writes. */
#pragma once

#include "json-util.h"
#include "kube.h"
#include "macro.h"
#include "status/status.h"

/* Shared by status.c (NodePool, EC2NodeClass) and nodeclaims.c (NodeClaims). */

#define STATUS_WRITES_MAX 64 /* in flight at once; the rest waits for the next tick */

typedef struct Pending Pending;
typedef struct ClaimRecord ClaimRecord;

struct StatusWriter {
        Provisioner *p;      /* what it writes: read through provisioner.h */
        Registry *registry;  /* the nodes that report: a NodePool's status.resources */
        sd_event_source *timer;
        Pending *pending;    /* writes in flight, cancelled when the writer goes */
        unsigned in_flight;
        uint64_t written, unchanged, conflicts, errors;
        /* nodeclaims.c */
        KubeWatch *claims;
        ClaimRecord *records;
        size_t n_records;
};

typedef enum StatusOp {
        STATUS_PATCH,        /* merge patch */
        STATUS_CREATE,       /* POST to the collection path */
        STATUS_DELETE,
} StatusOp;

/* Sends one write on the leader's client, counted in nodesmith_status_writes_total; a 409 makes
 * the next tick come a second later. Takes ownership of body (NULL for a delete). */
int status_send(StatusWriter *s, StatusOp op, const char *path, cJSON *body, const char *what);

void status_now_rfc3339(char *buf, size_t size);
/* The condition `type` of a status (NULL when absent). */
const cJSON *status_condition_find(const cJSON *status, const char *type);
/* Adds a condition; its lastTransitionTime is the old one's when the status did not change. */
int status_condition_add(cJSON *conds, const cJSON *old_status, int64_t generation, const char *type,
                         const char *status, const char *reason, const char *message);
/* Ready: True when every other condition is True; else False after the first False one, or
 * Unknown after the first Unknown one. */
int status_condition_ready(cJSON *conds, const cJSON *old_status, int64_t generation);

/* nodeclaims.c */
int nodeclaims_start(StatusWriter *s);
void nodeclaims_done(StatusWriter *s);
void nodeclaims_reconcile(StatusWriter *s);
