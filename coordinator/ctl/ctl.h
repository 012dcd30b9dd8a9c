/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Each subcommand: argv[0] is the subcommand's name; returns the process exit code. */
int ctl_nodes_main(int argc, char **argv);
int ctl_status_main(int argc, char **argv);
int ctl_explain_main(int argc, char **argv);

#include <cjson/cJSON.h>

/* A member of a JSON object: the number (0 if absent), the string ("-" if absent or empty). */
double ctl_num(const cJSON *o, const char *k);
const char *ctl_str(const cJSON *o, const char *k);

/* The options every command that asks the coordinator takes: --coordinator URL (default
 * $NODESMITH_COORDINATOR_HTTP, else http://127.0.0.1:8080), -o OUTPUT (*output keeps its default
 * when not given), --help (calls usage). Returns -1 to go on (optind at the first operand), else
 * the exit code. */
int ctl_common_options(int argc, char **argv, void (*usage)(void), const char **base, const char **output);

/* GET base+path from the coordinator's HTTP endpoint; the body is NUL-terminated. */
int ctl_http_get(const char *base, const char *path, char **ret);
