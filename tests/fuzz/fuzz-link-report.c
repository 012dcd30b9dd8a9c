/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's handling of one agent message: envelope and node state decoding, version
 * and token checks, validation, the registry and its notices, and the reply. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agents/server.h"
#include "log.h"

static AgentServer *server;
static Registry registry;

static uint64_t fuzz_now(void *userdata) {
        return 1000000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (!server) {
                AgentServerConfig cfg = { .token = "fuzz-token-0123456789", .report_interval_ms = 10000,
                                          .max_pods_per_node = 1000, .max_notices_per_node = 64 };
                AgentServerPorts ports = { .now = fuzz_now };
                log_set_max_level(LOG_EMERG);
                (void) notice_policy_parse("spot,maintenance", &cfg.drain_on);
                if (registry_init(&registry, 64) < 0 ||
                    agent_server_new(&cfg, &registry, NULL, NULL, &ports, &server) < 0)
                        abort();
        }
        uint8_t reply[4096];
        size_t len = 0;
        (void) agent_server_handle_report(data, size, reply, sizeof reply, &len, server);
        if (len > sizeof reply)
                abort();
        return 0;
}
