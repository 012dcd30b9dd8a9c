/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>

#include "kube.h"
#include "registry.h"

/* Which Node a report speaks for (docs/security.md, "a compromised node").
 *
 * The node name an agent sends is a claim. A report is bound to the attested (or at least
 * token-holding) instance; the Node it may speak for is the one whose spec.providerID
 * (aws:///ZONE/INSTANCE) names that instance. Everything the coordinator does to a Node — cordon,
 * taint, evict, remove the finalizer, count its pods — goes through node_bound_name(), so an agent
 * that names another Node changes nothing there; its report is refused as soon as the Node watch
 * shows the mismatch (node_binding_check()). */

/* The instance id in a Node's spec.providerID ("aws:///us-east-1a/i-0abc" -> "i-0abc"), or NULL. */
const char *node_provider_instance(const cJSON *node);

/* The Node whose providerID names instance_id (a scan of the watch), or NULL. */
const cJSON *node_of_instance(const KubeWatch *nodes, const char *instance_id);

/* The Node an entry's agent names, when the watch holds it and its providerID names the entry's
 * instance; NULL otherwise (no watch, no such Node yet, or another instance's Node). */
const char *node_bound_name(const KubeWatch *nodes, const NodeEntry *e);

/* May instance_id's agent call its Node name? 0: yes, or nothing to check against (no watch, not
 * listed yet, or no Node of that name and none for the instance yet); -EPERM with *ret_why when
 * the Node of that name is another instance's (or names none), or the instance's own Node has
 * another name. */
int node_binding_check(const KubeWatch *nodes, const char *instance_id, const char *name, const char **ret_why);
