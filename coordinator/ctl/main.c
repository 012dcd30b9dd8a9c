/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl: the operator's tool. A table of subcommands; each lives in its own file. */
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "ctl-solver.h"
#include "log.h"

static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *help;
} commands[] = {
        { "status",   ctl_status_main,   "what the coordinator is doing: leader, pending pods, launches" },
        { "nodes",    ctl_nodes_main,    "list the nodes the coordinator knows" },
        { "explain",  ctl_explain_main,  "why nodes are removed, or kept: the last disruption pass" },
        { "simulate", ctl_simulate_main, "plan nodes for pods, offline (NodePools, catalog)" },
        { "convert",  ctl_convert_main,  "turn Karpenter objects into nodesmith's" },
};

static void help(FILE *f) {
        fprintf(f, "Usage: %s COMMAND [OPTIONS]\n\nCommands:\n", ctl_kubectl_plugin ? "kubectl nodesmith" : "nodesmithctl");
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
        fprintf(f, "\nRun 'nodesmithctl COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
        log_set_ident("nodesmithctl");
        log_set_max_level(LOG_WARNING);
        /* installed as kubectl-nodesmith, kubectl runs it for `kubectl nodesmith ...` */
        const char *me = strrchr(argv[0], '/');
        ctl_kubectl_plugin = streq(me ? me + 1 : argv[0], "kubectl-nodesmith");
        if (argc < 2) {
                help(stderr);
                return 2;
        }
        if (streq(argv[1], "--help") || streq(argv[1], "-h") || streq(argv[1], "help")) {
                help(stdout);
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(argv[1], commands[i].name))
                        return commands[i].run(argc - 1, argv + 1);
        fprintf(stderr, "nodesmithctl: unknown command '%s'\n", argv[1]);
        help(stderr);
        return 2;
}
