/* SPDX-License-Identifier: Apache-2.0 */
/* Lease-based leader election: only the leader acts. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "kube.h"

/* Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does:
 * the holder renews every retry period (2 s); a candidate takes the Lease over (PUT with the
 * resourceVersion it read, so only one wins) once it has seen the same record, unchanged, for
 * leaseDurationSeconds by its own clock (client-go's observedTime). A leader steps down by itself
 * at its renew deadline (10 s after its last successful renewal was sent), with any request still
 * in flight cancelled, so it has stopped acting before anyone else can take the Lease (15 s). */

typedef struct Leader Leader;
typedef void (*leader_change_t)(Leader *l, bool leading, void *userdata);

typedef struct LeaderConfig {
        const char *namespace;   /* "nodesmith" */
        const char *name;        /* "nodesmith-coordinator" */
        const char *identity;    /* this replica: hostname + pid */
        uint64_t lease_usec;          /* 15 s */
        uint64_t renew_deadline_usec; /* 0: two thirds of lease_usec (10 s) */
        uint64_t retry_usec;          /* 0: lease_usec * 2/15 (2 s) */
} LeaderConfig;

int leader_new(sd_event *e, KubeClient *kube, const LeaderConfig *cfg, leader_change_t cb,
               void *userdata, Leader **ret);
Leader *leader_free(Leader *l);
/* On a clean shutdown (client-go's ReleaseOnCancel): stop leading at once (the change callback
 * runs) and, if this replica held the Lease, write it without a holder so that another replica
 * takes it at its next look (2 s) instead of after the lease duration (15 s). Returns 1 when the
 * write is under way (done runs when it is answered, ok true when stored), 0 when there was
 * nothing to release (done does not run), -errno when the write could not be sent. A candidate
 * stops looking either way. */
typedef void (*leader_released_t)(Leader *l, bool ok, void *userdata);
int leader_release(Leader *l, leader_released_t done, void *userdata);
/* True while the last renewal is younger than the renew deadline: ask before every action. */
bool leader_is_leading(const Leader *l);
uint64_t leader_renew_deadline_usec(const Leader *l);
const char *leader_identity(const Leader *l);
const char *leader_holder(const Leader *l); /* the current holder as last read, or NULL */
uint64_t leader_transitions(const Leader *l);
