/* SPDX-License-Identifier: Apache-2.0 */
/* A kubeconfig user with an exec credential plugin (client.authentication.k8s.io: aws eks
 * get-token, kubelogin, ...), for kubectl nodesmith: the plugin is run as kubectl runs it
 * (its args and env, KUBERNETES_EXEC_INFO, not interactive), the token of the ExecCredential it
 * prints replaces the exec stanza, and the kubeconfig is read as usual. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "fileio.h"
#include "json-util.h"
#include "kube.h"
#include "macro.h"
#include "yaml-json.h"

#define KUBECONFIG_MAX (1u << 20)
#define CREDENTIAL_MAX (64u * 1024)
#define EXEC_TIMEOUT_MS 30000

extern char **environ;

static const cJSON *named(const cJSON *list, const char *name) {
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
                if (streq_ptr(json_str(it, "name"), name))
                        return it;
        return NULL;
}

/* Runs argv with env added; its standard output (bounded) into *ret. Killed after the timeout. */
static int run_plugin(char **argv, char **env, char **ret) {
        int fds[2], status = 0, r = 0;
        pid_t pid;
        posix_spawn_file_actions_t fa;
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
        r = -posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
        if (r < 0) {
                close(fds[0]);
                return r;
        }
        char *buf = calloc(1, CREDENTIAL_MAX + 1);
        size_t n = 0;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (buf && n < CREDENTIAL_MAX) {
                struct timespec t;
                clock_gettime(CLOCK_MONOTONIC, &t);
                long left = EXEC_TIMEOUT_MS - (t.tv_sec - t0.tv_sec) * 1000 - (t.tv_nsec - t0.tv_nsec) / 1000000;
                struct pollfd p = { .fd = fds[0], .events = POLLIN };
                if (left <= 0 || poll(&p, 1, (int) left) <= 0) {
                        r = -ETIMEDOUT;
                        break;
                }
                ssize_t k = read(fds[0], buf + n, CREDENTIAL_MAX - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                n += (size_t) k;
        }
        close(fds[0]);
        if (r < 0)
                (void) kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
        if (!buf)
                return -ENOMEM;
        if (r == 0 && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
                r = -EPROTO;
        if (r == 0 && n >= CREDENTIAL_MAX)
                r = -E2BIG;
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret = buf;
        return 0;
}

/* The token the user's exec plugin gives, put in place of the exec stanza. */
static int exec_token(cJSON *user, const cJSON *exec) {
        const char *cmd = json_str(exec, "command");
        const cJSON *args = json_get(exec, "args"), *env = json_get(exec, "env"), *it;
        _cleanup_free_ char **argv = NULL, **envp = NULL;
        _cleanup_free_ char *info = NULL, *out = NULL;
        size_t na = 0, ne = 0, nenv = 0;
        int r;

        if (isempty(cmd)) {
                fprintf(stderr, "nodesmithctl: the kubeconfig's exec user has no command\n");
                return -EINVAL;
        }
        while (environ[nenv])
                nenv++;
        argv = calloc((size_t) cJSON_GetArraySize(args) + 2, sizeof *argv);
        envp = calloc(nenv + (size_t) cJSON_GetArraySize(env) + 2, sizeof *envp);
        if (!argv || !envp)
                return -ENOMEM;
        argv[na++] = (char *) cmd;
        cJSON_ArrayForEach(it, args)
                if (cJSON_IsString(it))
                        argv[na++] = it->valuestring;
        for (size_t i = 0; i < nenv; i++)
                envp[ne++] = environ[i];
        char *extra[64] = {};
        size_t nx = 0;
        cJSON_ArrayForEach(it, env)
                if (nx < ELEMENTSOF(extra) && json_str(it, "name") &&
                    asprintf(&extra[nx], "%s=%s", json_str(it, "name"), strempty(json_str(it, "value"))) >= 0)
                        envp[ne++] = extra[nx++];
        if (asprintf(&info, "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\","
                            "\"spec\":{\"interactive\":false}}",
                     json_str(exec, "apiVersion") ?: "client.authentication.k8s.io/v1") < 0)
                info = NULL;
        if (info)
                envp[ne++] = info;
        r = run_plugin(argv, envp, &out);
        for (size_t i = 0; i < nx; i++)
                free(extra[i]);
        if (r < 0) {
                fprintf(stderr, "nodesmithctl: the kubeconfig's exec credential plugin %s: %s\n", cmd,
                        r == -EPROTO ? "failed" : r == -ETIMEDOUT ? "timed out" : strerror(-r));
                return r;
        }
        cJSON *cred = cJSON_Parse(out);
        const char *token = json_str(json_get(cred, "status"), "token");
        if (isempty(token)) {
                fprintf(stderr, "nodesmithctl: the exec credential plugin %s gave no status.token%s\n", cmd,
                        json_get(json_get(cred, "status"), "clientCertificateData") ?
                        " (client certificates from exec plugins are not supported)" : "");
                cJSON_Delete(cred);
                return -EPERM;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(user, "exec");
        r = cJSON_AddStringToObject(user, "token", token) ? 0 : -ENOMEM;
        cJSON_Delete(cred);
        return r;
}

int ctl_kubeconfig_load(const char *path, const char *context, KubeConfig **ret) {
        _cleanup_free_ char *text = NULL, *dir = NULL, *rewritten = NULL;
        size_t len = 0;
        int r = read_file_bounded(path, KUBECONFIG_MAX, &text, &len);
        if (r < 0)
                return r;
        cJSON *kc = NULL;
        r = json_or_yaml_parse(text, len, &kc);
        if (r < 0)
                return r;
        const char *ctx = context ?: json_str(kc, "current-context");
        const cJSON *c = named(json_get(kc, "contexts"), ctx);
        cJSON *u = (cJSON *) json_get((cJSON *) named(json_get(kc, "users"), json_str(json_get(c, "context"), "user")), "user");
        const cJSON *exec = json_get(u, "exec");
        if (exec) {
                r = exec_token(u, exec);
                if (r >= 0 && !(rewritten = cJSON_PrintUnformatted(kc)))
                        r = -ENOMEM;
        }
        cJSON_Delete(kc);
        if (r < 0)
                return r;
        if (!(dir = strdup(path)))
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        if (slash)
                *slash = 0;
        else
                strcpy(dir, ".");
        const char *use = rewritten ?: text;
        return kube_config_parse_kubeconfig(use, strlen(use), dir, context, ret);
}
