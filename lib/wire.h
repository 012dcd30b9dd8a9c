/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nodesmith.pb-c.h"

/* The agent's side of the link contract: a NodeState packed inside an AgentReport envelope. */
typedef struct WireEnvelope {
        uint32_t protocol_version; /* 0: PROTOCOL_VERSION_CURRENT */
        const char *token;
        const char *instance_id;
        const char *boot_id;
        const uint8_t *boot_secret; /* NULL: none yet */
        size_t boot_secret_len;
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

/* An AgentReport's envelope read in place, before anything is unpacked or copied: strings and
 * the state point into the message (not NUL-terminated). The last occurrence of a field wins, as
 * protobuf-c unpacks it. */
typedef struct WireSpan {
        const uint8_t *data;
        size_t len;
} WireSpan;

typedef struct WireView {
        uint64_t protocol_version;
        WireSpan token, instance_id, boot_id, boot_secret, state;
        uint64_t sequence;
} WireView;

/* -EBADMSG when the top level is not well-formed protobuf (nested messages are not looked into). */
int wire_peek_report(const uint8_t *buf, size_t len, WireView *ret);
/* The span equals s (constant time in the span's length when both have the same length). */
bool wire_span_equal(WireSpan span, const char *s);
/* Copy a span as a C string into buf; -ENAMETOOLONG if it does not fit, -EBADMSG if it holds a NUL. */
int wire_span_string(WireSpan span, char *buf, size_t size);
