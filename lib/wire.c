/* SPDX-License-Identifier: Apache-2.0 */
/* The link's envelope: a NodeState packed inside an AgentReport, with bounds. */
#include <stdlib.h>

#include "macro.h"
#include "wire.h"

int wire_pack_report(const WireEnvelope *w, const Nodesmith__V1__NodeState *state, size_t max,
                     uint8_t **ret, size_t *ret_len) {
        size_t sl = nodesmith__v1__node_state__get_packed_size(state);
        if (sl > max)
                return -EMSGSIZE;
        _cleanup_free_ uint8_t *sb = malloc(sl ? sl : 1);
        if (!sb)
                return -ENOMEM;
        nodesmith__v1__node_state__pack(state, sb);
        return wire_pack_envelope(w, sb, sl, max, ret, ret_len);
}

int wire_pack_envelope(const WireEnvelope *w, const uint8_t *sb, size_t sl, size_t max, uint8_t **ret,
                       size_t *ret_len) {
        Nodesmith__V1__AgentReport env = NODESMITH__V1__AGENT_REPORT__INIT;

        env.protocol_version = w->protocol_version ? w->protocol_version
                                                   : NODESMITH__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_CURRENT;
        env.token = (char *) strempty(w->token);
        env.instance_id = (char *) strempty(w->instance_id);
        env.boot_id = (char *) strempty(w->boot_id);
        env.sequence = w->sequence;
        env.sent_unix_ms = w->sent_unix_ms;
        env.report_interval_ms = w->report_interval_ms;
        env.state = (ProtobufCBinaryData) { .len = sl, .data = (uint8_t *) sb };

        size_t n = nodesmith__v1__agent_report__get_packed_size(&env);
        if (n > max)
                return -EMSGSIZE;
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf)
                return -ENOMEM;
        nodesmith__v1__agent_report__pack(&env, buf);
        *ret = buf;
        *ret_len = n;
        return 0;
}
