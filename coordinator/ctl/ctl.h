/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* nodesmithctl's subcommands, one file each, and what they share (reaching the coordinator's
 * /api/v1). Each subcommand: argv[0] is the subcommand's name; returns the process exit code. */
int ctl_nodes_main(int argc, char **argv);
int ctl_status_main(int argc, char **argv);
int ctl_explain_main(int argc, char **argv);

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdbool.h>

/* A member of a JSON object: the number (0 if absent), the string ("-" if absent or empty). */
double ctl_num(const cJSON *o, const char *k);
const char *ctl_str(const cJSON *o, const char *k);

/* The options every command that asks the coordinator takes: --coordinator URL (default
 * $NODESMITH_COORDINATOR_HTTP, else http://127.0.0.1:8080), or --kubeconfig FILE, --context NAME,
 * -n/--namespace NS (nodesmith), --service NAME (nodesmith-coordinator) for the API server's
 * service proxy (the default as kubectl-nodesmith), -o OUTPUT (*output keeps its default when not
 * given), --help (calls usage). Returns -1 to go on (optind at the first operand), else the exit
 * code. */
int ctl_common_options(int argc, char **argv, void (*usage)(void), const char **base, const char **output);

/* target.c: the API server's service proxy to the coordinator's http port, from a kubeconfig
 * (NULL: $KUBECONFIG, else ~/.kube/config) and context (NULL: its current one); *ret_base
 * stays valid until the next call. Then ctl_target_apply() adds the credentials and CA to each
 * request (nothing when the proxy is not used). */
int ctl_target_kube(const char *kubeconfig, const char *context, const char *ns, const char *service,
                    const char **ret_base);
int ctl_target_apply(CURL *h, struct curl_slist **headers);
#define CTL_KUBE_OPTIONS_HELP \
        "  --kubeconfig FILE  through the API server's service proxy, with this kubeconfig\n" \
        "                     [$KUBECONFIG, else ~/.kube/config; the default as kubectl-nodesmith]\n" \
        "  --context NAME     the kubeconfig's context [its current-context]\n" \
        "  -n, --namespace NS the coordinator's namespace [nodesmith]\n" \
        "  --service NAME     the coordinator's Service, port api [nodesmith-coordinator]\n"

/* execcred.c: a kubeconfig (YAML or JSON) and context (NULL: current-context); a user with an
 * exec credential plugin gets the token the plugin prints (its failure is said on stderr). */
typedef struct KubeConfig KubeConfig;
int ctl_kubeconfig_load(const char *path, const char *context, KubeConfig **ret);

/* Run as kubectl-nodesmith (the kubectl plugin): the service proxy is the default. */
extern bool ctl_kubectl_plugin;

/* GET base+path from the coordinator's HTTP endpoint; the body is NUL-terminated. */
int ctl_http_get(const char *base, const char *path, char **ret);
