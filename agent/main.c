/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmith-agent: one node's capacity, warnings and drains, reported to the coordinator. */
#include <malloc.h>
#include <stdio.h>

#include "agent.h"
#include "daemon.h"
#include "log.h"

int main(int argc, char **argv) {
        daemon_block_signals(); /* first: before anything starts a thread */
        /* One malloc arena: without it each of NNG's threads that allocates gets its own, and
         * their pages stay resident (0.25-0.5 MiB of the agent's memory, docs/benchmarks.md). */
        (void) mallopt(M_ARENA_MAX, 1);

        _cleanup_(manager_freep) Manager *m = NULL;
        ConfigAction action;
        int r;

        log_set_ident("nodesmith-agent");
        r = manager_new(&m);
        if (r < 0)
                return log_error_errno(r, "Failed to allocate: %m"), 1;

        ConfigSource src = {
                .default_file = "/etc/nodesmith/agent.conf",
                .env_prefix = "NODESMITH_AGENT",
                .allow_once = true,
        };
        ConfigError cfg_error = {};
        r = config_load(agent_options, agent_options_count, &m->cfg, &src, argc, argv, &action, &cfg_error);
        if (r < 0)
                return log_error_errno(r, "%s", cfg_error.message), 2;
        switch (action) {
        case CONFIG_HELP:
                config_help(agent_options, agent_options_count, "nodesmith-agent",
                            "Reports this node's capacity, pods and warnings to the nodesmith "
                            "coordinator and carries out drains.\n  --once  print the report as "
                            "JSON and exit",
                            stdout);
                return 0;
        case CONFIG_VERSION:
                printf("nodesmith-agent %s\n", AGENT_VERSION);
                return 0;
        default:
                break;
        }

        r = manager_validate(m);
        if (r < 0)
                return 2;

        if (action == CONFIG_CHECK) {
                const char *why = NULL;
                if (link_url_check(m->cfg.coordinator, m->cfg.insecure, &why) < 0) {
                        log_error("coordinator: %s", why);
                        return 1;
                }
                config_print(agent_options, agent_options_count, &m->cfg, stdout);
                printf("# configuration OK\n");
                return 0;
        }

        if (action == CONFIG_ONCE) {
                r = manager_refresh_capacity(m);
                if (r < 0)
                        return log_error_errno(r, "Cannot read node capacity: %m"), 1;
                return report_print_json(m, stdout) < 0 ? 1 : 0;
        }

        r = manager_start(m);
        if (r < 0)
                return 1;
        r = manager_run(m);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m"), 1;
        return 0;
}
