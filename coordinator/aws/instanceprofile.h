/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* The instance profile of an EC2NodeClass that names a role, made and kept as Karpenter does:
 * looked up by name; created when missing (path /nodesmith/REGION/CLUSTER/, tagged with the
 * cluster, the node class, the region and the class's tags); the role added, or put in place of
 * another one. */

#include "ec2.h"

typedef struct InstanceProfileSpec {
        const char *name;       /* launchclass_profile_name() */
        const char *role;       /* a role name or a path/name: the name is used */
        const char *cluster, *region, *nodeclass;
        const Ec2Tag *tags;     /* the class's tags */
        size_t n_tags;
} InstanceProfileSpec;

/* error: NULL when the profile holds the role. */
typedef void (*instance_profile_done_t)(const Ec2Error *error, void *userdata);

/* Asynchronous; < 0 when it could not start (the callback is then never called). */
int instance_profile_ensure(Ec2Client *ec2, const InstanceProfileSpec *spec, instance_profile_done_t done,
                            void *userdata);
