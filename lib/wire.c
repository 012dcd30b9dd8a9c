/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

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
        env.boot_secret = (ProtobufCBinaryData) { .len = w->boot_secret ? w->boot_secret_len : 0,
                                                  .data = (uint8_t *) w->boot_secret };
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

/* AgentReport's field numbers (proto/nodesmith.proto) */
enum {
        F_PROTOCOL_VERSION = 1,
        F_TOKEN = 2,
        F_INSTANCE_ID = 3,
        F_BOOT_ID = 4,
        F_SEQUENCE = 5,
        F_STATE = 8,
        F_BOOT_SECRET = 9,
};

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *ret) {
        uint64_t v = 0;
        for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
                uint8_t b = *(*p)++;
                v |= (uint64_t) (b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *ret = v;
                        return 0;
                }
        }
        return -EBADMSG;
}

int wire_peek_report(const uint8_t *buf, size_t len, WireView *ret) {
        const uint8_t *p = buf, *end = buf + len;
        WireView v = {};

        while (p < end) {
                uint64_t key, n;
                if (read_varint(&p, end, &key) < 0 || key >> 3 == 0 || key >> 3 > UINT32_MAX)
                        return -EBADMSG;
                WireSpan *span = NULL;
                switch (key & 7) {
                case 0: /* varint */
                        if (read_varint(&p, end, &n) < 0)
                                return -EBADMSG;
                        if (key >> 3 == F_PROTOCOL_VERSION)
                                v.protocol_version = n;
                        else if (key >> 3 == F_SEQUENCE)
                                v.sequence = n;
                        break;
                case 1: /* fixed64 */
                case 5: /* fixed32 */
                        n = (key & 7) == 1 ? 8 : 4;
                        if ((size_t) (end - p) < n)
                                return -EBADMSG;
                        p += n;
                        break;
                case 2: /* length-delimited */
                        if (read_varint(&p, end, &n) < 0 || n > (uint64_t) (end - p))
                                return -EBADMSG;
                        switch (key >> 3) {
                        case F_TOKEN: span = &v.token; break;
                        case F_INSTANCE_ID: span = &v.instance_id; break;
                        case F_BOOT_ID: span = &v.boot_id; break;
                        case F_BOOT_SECRET: span = &v.boot_secret; break;
                        case F_STATE: span = &v.state; break;
                        }
                        if (span)
                                *span = (WireSpan) { p, n };
                        p += n;
                        break;
                default: /* groups are not proto3 */
                        return -EBADMSG;
                }
        }
        *ret = v;
        return 0;
}

bool wire_span_equal(WireSpan span, const char *s) {
        size_t l = strlen(s);
        if (span.len != l || l == 0)
                return false;
        volatile uint8_t diff = 0; /* constant time: every byte is compared */
        for (size_t i = 0; i < l; i++)
                diff |= span.data[i] ^ (uint8_t) s[i];
        return diff == 0;
}

int wire_span_string(WireSpan span, char *buf, size_t size) {
        if (span.len >= size)
                return -ENAMETOOLONG;
        if (span.len && memchr(span.data, 0, span.len))
                return -EBADMSG;
        if (span.len)
                memcpy(buf, span.data, span.len);
        buf[span.len] = 0;
        return 0;
}
