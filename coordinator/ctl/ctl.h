/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* Each subcommand: argv[0] is the subcommand's name; returns the process exit code. */
int ctl_nodes_main(int argc, char **argv);
int ctl_status_main(int argc, char **argv);

#include <cjson/cJSON.h>

/* A member of a JSON object: the number (0 if absent), the string ("-" if absent or empty). */
double ctl_num(const cJSON *o, const char *k);
const char *ctl_str(const cJSON *o, const char *k);

/* GET base+path from the coordinator's HTTP endpoint; the body is NUL-terminated. */
int ctl_http_get(const char *base, const char *path, char **ret);
