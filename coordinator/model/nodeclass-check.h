/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Every field of a Karpenter v1 EC2NodeClass spec either is carried into nodesmith's launches
 * or is refused here, with the field's path and the reason; a field Karpenter v1 does not
 * have is refused as unknown. Karpenter's own validation rules (CEL) are checked too: one of
 * role and instanceProfile, selector terms' mutually exclusive keys, enums and ranges.
 * docs/migrating-from-karpenter.md has the table of fields. */

#include <cjson/cJSON.h>

/* -EINVAL with *ret_error = "<what>: spec.<path>: <why>". */
int nodeclass_check(const cJSON *spec, const char *what, char **ret_error);

/* The family a checked spec launches: its amiFamily, else its alias's family (al2023@… is
 * AL2023, bottlerocket@… Bottlerocket), else AL2023. A static string. */
const char *nodeclass_ami_family(const cJSON *spec);
