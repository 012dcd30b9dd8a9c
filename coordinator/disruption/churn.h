/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The churn guard on the object, so that it survives a restart or a new leader: a node launched
 * to replace others carries the annotation nodesmith.io/replacement-launched-at (RFC 3339, the
 * launch time) on its Node, written by the leader once the Node exists, read by any leader. */

#include <stdint.h>

#include "provision/provisioner.h"

#define CHURN_ANNOTATION "nodesmith.io/replacement-launched-at"

/* Puts the annotation with launched_unix_usec on Node node unless it already says so. */
void churn_annotate(Provisioner *p, const char *node, int64_t launched_unix_usec);
/* The launch time the Node's annotation gives (µs since the epoch); -ENOENT without one,
 * -EBADMSG/-ERANGE when it is not an RFC 3339 time. */
int churn_annotated(Provisioner *p, const char *node, int64_t *ret_unix_usec);
