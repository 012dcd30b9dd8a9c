/* SPDX-License-Identifier: Apache-2.0 */
/* The agent's side of the link contract. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "nodesmith.pb-c.h"

/* The agent's side of the link contract: a NodeState packed inside an AgentReport envelope. */
typedef struct WireEnvelope {
        uint32_t protocol_version; /* 0: PROTOCOL_VERSION_CURRENT */
        const char *token;
        const char *instance_id;
        const char *boot_id;
        uint64_t sequence;
        int64_t sent_unix_ms;
        uint32_t report_interval_ms;
} WireEnvelope;

/* Wrap already packed state bytes in an envelope; the result is malloc'ed. */
int wire_pack_envelope(const WireEnvelope *env, const uint8_t *state, size_t state_len, size_t max,
                       uint8_t **ret, size_t *ret_len);
/* Pack state into an envelope; the result is malloc'ed. -EMSGSIZE beyond max bytes. */
int wire_pack_report(const WireEnvelope *env, const Nodesmith__V1__NodeState *state, size_t max,
                     uint8_t **ret, size_t *ret_len);
