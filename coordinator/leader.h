/* SPDX-License-Identifier: Apache-2.0 */
/* Lease-based leader election: only the leader acts. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "kube.h"

/* Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does:
 * the holder renews renewTime every lease/3; a candidate takes the lease over (PUT with the
 * resourceVersion it read, so only one wins) once renewTime + leaseDurationSeconds has passed.
 * A leader that cannot renew within the lease duration steps down by itself. */

typedef struct Leader Leader;
typedef void (*leader_change_t)(Leader *l, bool leading, void *userdata);

typedef struct LeaderConfig {
        const char *namespace;   /* "nodesmith" */
        const char *name;        /* "nodesmith-coordinator" */
        const char *identity;    /* this replica: hostname + pid */
        uint64_t lease_usec;     /* 15 s */
} LeaderConfig;

int leader_new(sd_event *e, KubeClient *kube, const LeaderConfig *cfg, leader_change_t cb,
               void *userdata, Leader **ret);
Leader *leader_free(Leader *l);
bool leader_is_leading(const Leader *l);
const char *leader_holder(const Leader *l); /* the current holder as last read, or NULL */
uint64_t leader_transitions(const Leader *l);
