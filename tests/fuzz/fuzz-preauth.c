/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's pre-authentication path, as anyone on the pod network can drive it: the
 * envelope read in place (wire_peek_report), the fast path's answer (NNG's threads), then the
 * loop's handling of the same bytes as a node's first report — version, token, boot secret,
 * sequence, the node-name binding and the registry's byte budget. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/fastpath.h"
#include "agents/server.h"
#include "log.h"
#include "wire.h"

#define TOKEN "fuzz-token-0123456789"

static AgentServer *server;
static FastPath *fast;
static Registry registry;
static unsigned runs;

static uint64_t fuzz_now(void *userdata) {
        return 1000000;
}

static void setup(void) {
        AgentServerConfig cfg = { .token = TOKEN, .report_interval_ms = 10000, .stale_after_ms = 60000,
                                  .max_pods_per_node = 1000, .max_notices_per_node = 64 };
        AgentServerPorts ports = { .now = fuzz_now };
        log_set_max_level(LOG_EMERG);
        (void) notice_policy_parse("spot,maintenance", &cfg.drain_on);
        if (registry_init(&registry, 64) < 0)
                abort();
        registry.max_state_memory = 8u << 20;
        if (fast_path_new(TOKEN, 10000, 60ULL * 1000 * 1000, &fast) < 0 ||
            agent_server_new(&cfg, &registry, NULL, fast, &ports, &server) < 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (!server)
                setup();
        /* a fresh registry now and then: every report is a first report again (the fast path is
         * keyed by instance id and drops the nodes that are gone at its next sync) */
        if (++runs % 512 == 0) {
                registry_done(&registry);
                if (registry_init(&registry, 64) < 0)
                        abort();
                registry.max_state_memory = 8u << 20;
                agent_server_fast_sync(server);
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
        if (agent_server_fast_answer(data, size, reply, sizeof reply, &len, server) > 0 && len > sizeof reply)
                abort();
        len = 0;
        /* the loop's handling; an accepted report's node is remembered by the fast path there */
        int r = agent_server_handle_report(data, size, reply, sizeof reply, &len, server);
        if (r >= 0 && len > sizeof reply)
                abort();
        if (registry.state_memory > registry.max_state_memory)
                abort();
        return 0;
}
