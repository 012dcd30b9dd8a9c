/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's handling of one agent message: envelope and node state decoding, version
 * and token checks, validation, the registry and its notices, and the reply. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "log.h"

static Coordinator *c;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (!c) {
                log_set_max_level(LOG_EMERG);
                if (coordinator_new(&c) < 0)
                        abort();
                c->cfg.report_interval_ms = 10000;
                c->cfg.max_pods_per_node = 1000;
                c->cfg.max_notices_per_node = 64;
                c->token = strdup("fuzz-token-0123456789");
                if (registry_init(&c->registry, 64) < 0 || !(c->scratch = pb_arena_new(65536)))
                        abort();
                (void) notice_policy_parse("spot,maintenance", &c->drain_on);
        }
        uint8_t reply[4096];
        size_t len = 0;
        (void) coordinator_handle_report(data, size, reply, sizeof reply, &len, c);
        if (len > sizeof reply)
                abort();
        return 0;
}
