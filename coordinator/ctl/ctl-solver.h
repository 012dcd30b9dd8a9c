/* SPDX-License-Identifier: Apache-2.0 */
/* nodesmithctl's offline subcommands: simulate a plan, convert Karpenter objects. */
#pragma once

#include <cjson/cJSON.h>

/* nodesmithctl simulate --pods FILE --nodepools FILE [--nodes FILE] [--catalog FILE] [-o json]:
 * the provisioning plan for pending pods, offline. */
int ctl_simulate_main(int argc, char **argv);

/* nodesmithctl convert FILE [-o yaml|json]: Karpenter objects to nodesmith's. */
int ctl_convert_main(int argc, char **argv);

/* Reads a JSON or YAML file ("-": stdin) into a JSON array of its documents. On failure a
 * message naming the file (and line) is returned in *ret_error (the caller frees it). */
int ctl_solver_read_documents(const char *path, cJSON **ret, char **ret_error);
