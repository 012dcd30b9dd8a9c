/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "registry.h"

/* Which notices start a drain ("drain-on"): a set of Notice kinds. Shutdown and the Node's
 * deletion always drain; spot interruption and maintenance drain by default; a rebalance
 * recommendation only reports unless asked for. */
typedef uint32_t NoticePolicy; /* bit i: Nodesmith__V1__Notice__Kind i drains */

#define NOTICE_POLICY_DEFAULT "spot,maintenance"

/* "spot,rebalance,maintenance" (also "none"); -EINVAL names nothing it knows. */
int notice_policy_parse(const char *s, NoticePolicy *ret);

/* The desired state that the node's notices call for under the policy. A drain that notices
 * asked for is withdrawn when they are gone; a drain decided for another reason (disruption) is
 * left alone. Returns true when the directive changed. */
bool directive_from_notices(NodeEntry *e, NoticePolicy policy);
