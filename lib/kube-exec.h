/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

/* A kubeconfig's exec credential plugin (users[].user.exec), as client-go runs it: the command
 * with its args and env, KUBERNETES_EXEC_INFO set, stdin closed; its stdout is an ExecCredential
 * (client.authentication.k8s.io/v1, v1beta1 or v1alpha1) whose status.token is the bearer token,
 * valid until status.expirationTimestamp (none: until the server answers 401). This is how EKS
 * nodes authenticate (`aws eks get-token`, `aws-iam-authenticator token`). */

#include <stdint.h>

#include <cjson/cJSON.h>

#include "macro.h"

#define KUBE_EXEC_MAX_OUTPUT (256u * 1024)        /* the plugin's stdout */
#define KUBE_EXEC_TIMEOUT_USEC (10 * USEC_PER_SEC) /* one run, then SIGKILL; well under the
                                                    * agent's WatchdogSec=30s, as the run blocks */
#define KUBE_EXEC_MAX_ARGS 256u
#define KUBE_EXEC_MAX_ENV 256u

typedef struct KubeExec KubeExec;

/* From the exec object of a kubeconfig user; base_dir resolves a command given as a relative
 * path with a slash (a bare name is looked up in $PATH). Refused, with -EOPNOTSUPP:
 * interactiveMode Always (the agent has no terminal), provideClusterInfo true, an apiVersion
 * other than the three above, client certificates in the answer (at run time). -EINVAL: no
 * command, or malformed args/env. */
int kube_exec_from_json(const cJSON *exec, const char *base_dir, KubeExec **ret);
int kube_exec_copy(const KubeExec *x, KubeExec **ret);
KubeExec *kube_exec_free(KubeExec *x);
DEFINE_TRIVIAL_CLEANUP_FUNC(KubeExec *, kube_exec_free);
const char *kube_exec_command(const KubeExec *x);

/* Run the plugin, at most timeout_usec (0: KUBE_EXEC_TIMEOUT_USEC): the token and its expiry
 * (microseconds since the epoch, 0 when the answer gives none). -ETIMEDOUT, -EIO (it failed,
 * or exited with a status other than 0), -E2BIG, -EBADMSG (not an ExecCredential of its
 * apiVersion, or no token). */
int kube_exec_run(const KubeExec *x, uint64_t timeout_usec, char **ret_token, int64_t *ret_expiry_usec);
/* The ExecCredential part of it, for tests. */
int kube_exec_parse_credential(const KubeExec *x, const char *text, size_t len, char **ret_token,
                               int64_t *ret_expiry_usec);
