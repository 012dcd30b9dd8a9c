/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's pre-authentication path, as anyone on the pod network can drive it: the
 * envelope read in place (wire_peek_report), the fast path's answer (NNG's threads), then the
 * loop's handling of the same bytes as a node's first report — version, token, boot secret,
 * sequence, the node-name binding and the registry's byte budget. A remembered node with a boot
 * secret is there from the start, so forged reports of it go through the secret checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/fastpath.h"
#include "coordinator.h"
#include "log.h"
#include "wire.h"

#define TOKEN "fuzz-token-0123456789"

static Coordinator *c;
static FastPath *fast;
static unsigned runs;

static void setup(void) {
        log_set_max_level(LOG_EMERG);
        if (coordinator_new(&c) < 0)
                abort();
        c->cfg.report_interval_ms = 10000;
        c->cfg.stale_after_ms = 60000;
        c->cfg.max_pods_per_node = 1000;
        c->cfg.max_notices_per_node = 64;
        c->token = strdup(TOKEN);
        if (!c->token || registry_init(&c->registry, 64) < 0 || !(c->scratch = pb_arena_new(65536)))
                abort();
        c->registry.max_state_memory = 8u << 20;
        (void) notice_policy_parse("spot,maintenance", &c->drain_on);
        if (fast_path_new(c->token, 10000, 60ULL * 1000 * 1000, &fast) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (!c)
                setup();
        /* a fresh registry now and then: every report is a first report again */
        if (++runs % 512 == 0) {
                registry_done(&c->registry);
                if (registry_init(&c->registry, 64) < 0)
                        abort();
                c->registry.max_state_memory = 8u << 20;
        }

        WireView v;
        if (wire_peek_report(data, size, &v) == 0) {
                /* every span lies inside the message */
                const WireSpan *spans[] = { &v.token, &v.instance_id, &v.boot_id, &v.boot_secret, &v.state };
                for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++)
                        if (spans[i]->len && (spans[i]->data < data || spans[i]->data + spans[i]->len > data + size))
                                abort();
        }

        uint8_t reply[4096];
        size_t len = 0;
        if (fast_path_answer(fast, data, size, reply, sizeof reply, &len) > 0 && len > sizeof reply)
                abort();
        len = 0;
        int r = coordinator_handle_report(data, size, reply, sizeof reply, &len, c);
        if (r >= 0 && len > sizeof reply)
                abort();
        /* an accepted report's node is remembered by the fast path, as the loop does */
        if (r > 0) {
                WireView w;
                char id[65];
                NodeEntry *e = wire_peek_report(data, size, &w) == 0 &&
                                               wire_span_string(w.instance_id, id, sizeof id) == 0
                                       ? registry_get(&c->registry, id)
                                       : NULL;
                if (e && e->state && e->state->identity)
                        fast_path_remember(fast, e, e->state->identity->boot_id, false, 0);
        }
        if (c->registry.state_memory > c->registry.max_state_memory)
                abort();
        return 0;
}
