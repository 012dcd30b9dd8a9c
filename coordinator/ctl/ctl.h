/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Each subcommand: argv[0] is the subcommand's name; returns the process exit code. */
int ctl_nodes_main(int argc, char **argv);
int ctl_status_main(int argc, char **argv);

/* GET base+path from the coordinator's HTTP endpoint; the body is NUL-terminated. */
int ctl_http_get(const char *base, const char *path, char **ret);
