/* SPDX-License-Identifier: Apache-2.0 */
/* A kubeconfig's exec credential plugin: run it, read its ExecCredential. */
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

#include "kube-exec.h"
#include "log.h"
#include "timestamp.h"

extern char **environ;

struct KubeExec {
        char *api_version;
        char *command;
        char **argv; /* command, args..., NULL */
        size_t n_argv;
        char **env; /* "NAME=value", NULL-terminated */
        size_t n_env;
};

static const char *const API_VERSIONS[] = {
        "client.authentication.k8s.io/v1",
        "client.authentication.k8s.io/v1beta1",
        "client.authentication.k8s.io/v1alpha1",
};

static void strv_free(char **v, size_t n) {
        for (size_t i = 0; v && i < n; i++) {
                if (v[i])
                        explicit_bzero(v[i], strlen(v[i])); /* env values may be secrets */
                free(v[i]);
        }
        free(v);
}

KubeExec *kube_exec_free(KubeExec *x) {
        if (!x)
                return NULL;
        free(x->api_version);
        free(x->command);
        strv_free(x->argv, x->n_argv);
        strv_free(x->env, x->n_env);
        free(x);
        return NULL;
}

const char *kube_exec_command(const KubeExec *x) {
        return x ? x->command : NULL;
}

static const char *jstr(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

int kube_exec_from_json(const cJSON *exec, const char *base_dir, KubeExec **ret) {
        _cleanup_(kube_exec_freep) KubeExec *x = NULL;
        const char *cmd = jstr(exec, "command"), *api = jstr(exec, "apiVersion"), *mode = jstr(exec, "interactiveMode");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(exec, "args");
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(exec, "env"), *e;
        bool known = false;

        if (!cJSON_IsObject(exec) || isempty(cmd))
                return log_debug_errno(EINVAL, "kubeconfig exec: no command");
        for (size_t i = 0; api && i < ELEMENTSOF(API_VERSIONS); i++)
                known = known || streq(api, API_VERSIONS[i]);
        if (!known)
                return log_debug_errno(EOPNOTSUPP, "kubeconfig exec: apiVersion \"%s\" is not supported (v1, v1beta1, "
                                       "v1alpha1 of client.authentication.k8s.io)", strempty(api));
        if (mode && streq(mode, "Always"))
                return log_debug_errno(EOPNOTSUPP, "kubeconfig exec: interactiveMode Always needs a terminal");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(exec, "provideClusterInfo")))
                return log_debug_errno(EOPNOTSUPP, "kubeconfig exec: provideClusterInfo is not supported");
        if ((args && !cJSON_IsArray(args) && !cJSON_IsNull(args)) || (env && !cJSON_IsArray(env) && !cJSON_IsNull(env)))
                return log_debug_errno(EINVAL, "kubeconfig exec: args and env must be lists");
        size_t n_args = (size_t) cJSON_GetArraySize(args), n_env = (size_t) cJSON_GetArraySize(env);
        if (n_args > KUBE_EXEC_MAX_ARGS || n_env > KUBE_EXEC_MAX_ENV)
                return log_debug_errno(E2BIG, "kubeconfig exec: too many args or env entries");

        x = calloc(1, sizeof *x);
        if (!x || !(x->api_version = strdup(api)))
                return -ENOMEM;
        if (strchr(cmd, '/') && cmd[0] != '/' && !isempty(base_dir)) {
                if (asprintf(&x->command, "%s/%s", base_dir, cmd) < 0)
                        x->command = NULL;
        } else
                x->command = strdup(cmd);
        if (!x->command || !(x->argv = calloc(n_args + 2, sizeof *x->argv)) || !(x->env = calloc(n_env + 1, sizeof *x->env)))
                return -ENOMEM;
        x->n_argv = n_args + 1;
        x->n_env = n_env;
        if (!(x->argv[0] = strdup(x->command)))
                return -ENOMEM;
        size_t i = 1;
        cJSON_ArrayForEach(e, args) {
                if (!cJSON_IsString(e))
                        return log_debug_errno(EINVAL, "kubeconfig exec: an arg is not a string");
                if (!(x->argv[i++] = strdup(e->valuestring)))
                        return -ENOMEM;
        }
        i = 0;
        cJSON_ArrayForEach(e, env) {
                const char *name = jstr(e, "name"), *value = jstr(e, "value");
                if (isempty(name) || !value || strchr(name, '='))
                        return log_debug_errno(EINVAL, "kubeconfig exec: an env entry needs a name (without '=') "
                                               "and a value");
                if (asprintf(&x->env[i], "%s=%s", name, value) < 0) {
                        x->env[i] = NULL;
                        return -ENOMEM;
                }
                i++;
        }
        *ret = TAKE_PTR(x);
        return 0;
}

int kube_exec_copy(const KubeExec *s, KubeExec **ret) {
        _cleanup_(kube_exec_freep) KubeExec *x = calloc(1, sizeof *x);
        if (!x || !(x->api_version = strdup(s->api_version)) || !(x->command = strdup(s->command)) ||
            !(x->argv = calloc(s->n_argv + 1, sizeof *x->argv)) || !(x->env = calloc(s->n_env + 1, sizeof *x->env)))
                return -ENOMEM;
        x->n_argv = s->n_argv;
        x->n_env = s->n_env;
        for (size_t i = 0; i < s->n_argv; i++)
                if (!(x->argv[i] = strdup(s->argv[i])))
                        return -ENOMEM;
        for (size_t i = 0; i < s->n_env; i++)
                if (!(x->env[i] = strdup(s->env[i])))
                        return -ENOMEM;
        *ret = TAKE_PTR(x);
        return 0;
}

int kube_exec_parse_credential(const KubeExec *x, const char *text, size_t len, char **ret_token,
                               int64_t *ret_expiry_usec) {
        cJSON *root = cJSON_ParseWithLength(text, len);
        const cJSON *status = cJSON_GetObjectItemCaseSensitive(root, "status");
        const char *token = jstr(status, "token"), *exp = jstr(status, "expirationTimestamp");
        int64_t expiry = 0;
        int r = 0;

        if (!cJSON_IsObject(root) || !streq(strempty(jstr(root, "kind")), "ExecCredential") ||
            !streq(strempty(jstr(root, "apiVersion")), x->api_version))
                r = log_debug_errno(EBADMSG, "exec plugin %s: not an ExecCredential of %s", x->command, x->api_version);
        else if (jstr(status, "clientCertificateData") || jstr(status, "clientKeyData"))
                r = log_debug_errno(EOPNOTSUPP, "exec plugin %s: client certificates from a plugin are not supported",
                                    x->command);
        else if (isempty(token) || strlen(token) > 64 * 1024 || strpbrk(token, "\r\n"))
                r = log_debug_errno(EBADMSG, "exec plugin %s: no usable status.token", x->command);
        else if (exp && timestamp_parse_rfc3339(exp, 0, &expiry) < 0)
                r = log_debug_errno(EBADMSG, "exec plugin %s: bad status.expirationTimestamp", x->command);
        if (r == 0) {
                char *t = strdup(token);
                if (!t)
                        r = -ENOMEM;
                else {
                        *ret_token = t;
                        *ret_expiry_usec = expiry;
                }
        }
        cJSON_Delete(root);
        return r;
}

/* Our environment with the plugin's env over it and KUBERNETES_EXEC_INFO; the strings are
 * borrowed except info. */
static int build_env(const KubeExec *x, const char *info, char ***ret) {
        size_t n = 0;
        while (environ && environ[n])
                n++;
        char **v = calloc(n + x->n_env + 2, sizeof *v);
        if (!v)
                return -ENOMEM;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                size_t nl = strcspn(environ[i], "=");
                bool over = strncmp(environ[i], "KUBERNETES_EXEC_INFO=", 21) == 0;
                for (size_t j = 0; !over && j < x->n_env; j++)
                        over = strncmp(environ[i], x->env[j], nl + 1) == 0;
                if (!over)
                        v[k++] = environ[i];
        }
        for (size_t j = 0; j < x->n_env; j++)
                v[k++] = x->env[j];
        v[k++] = (char *) info;
        *ret = v;
        return 0;
}

static uint64_t mono_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* Read fd to EOF (at most max bytes) before deadline. */
static int read_output(int fd, uint64_t deadline, size_t max, char **ret, size_t *ret_len) {
        _cleanup_free_ char *buf = malloc(max + 1);
        size_t len = 0;

        if (!buf)
                return -ENOMEM;
        for (;;) {
                uint64_t now = mono_usec();
                if (now >= deadline)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int n = poll(&p, 1, (int) ((deadline - now + 999) / 1000));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        continue;
                ssize_t got = read(fd, buf + len, max + 1 - len);
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (got < 0)
                        return -errno;
                if (got == 0)
                        break;
                len += (size_t) got;
                if (len > max)
                        return -E2BIG;
        }
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

/* The child's exit, waiting until deadline, then killing it. */
static int reap(pid_t pid, uint64_t deadline, int *ret_status) {
        for (;;) {
                pid_t w = waitpid(pid, ret_status, WNOHANG);
                if (w == pid)
                        return 0;
                if (w < 0 && errno != EINTR)
                        return -errno;
                if (mono_usec() >= deadline) {
                        (void) kill(pid, SIGKILL);
                        while (waitpid(pid, ret_status, 0) < 0 && errno == EINTR)
                                ;
                        return -ETIMEDOUT;
                }
                (void) usleep(10000);
        }
}

int kube_exec_run(const KubeExec *x, uint64_t timeout_usec, char **ret_token, int64_t *ret_expiry_usec) {
        _cleanup_free_ char *info = NULL, *out = NULL;
        _cleanup_free_ char **envp = NULL;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t none, deflt;
        int fds[2], r, status = 0;
        size_t len = 0;
        pid_t pid;

        if (asprintf(&info, "KUBERNETES_EXEC_INFO={\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\","
                            "\"spec\":{\"interactive\":false}}", x->api_version) < 0) {
                info = NULL;
                return -ENOMEM;
        }
        r = build_env(x, info, &envp);
        if (r < 0)
                return r;
        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        /* the daemon blocks SIGTERM, SIGINT and SIGHUP: the plugin gets an ordinary mask */
        sigemptyset(&none);
        sigemptyset(&deflt);
        sigaddset(&deflt, SIGTERM);
        sigaddset(&deflt, SIGINT);
        sigaddset(&deflt, SIGHUP);
        sigaddset(&deflt, SIGPIPE);
        posix_spawn_file_actions_init(&fa);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &deflt);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
        r = -posix_spawnp(&pid, x->command, &fa, &attr, x->argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        close(fds[1]);
        if (r < 0) {
                close(fds[0]);
                return log_debug_errno(r, "exec plugin %s: cannot start it: %m", x->command);
        }
        uint64_t deadline = mono_usec() + (timeout_usec ? timeout_usec : KUBE_EXEC_TIMEOUT_USEC);
        r = read_output(fds[0], deadline, KUBE_EXEC_MAX_OUTPUT, &out, &len);
        close(fds[0]);
        if (r < 0)
                (void) kill(pid, SIGKILL);
        int rr = reap(pid, deadline, &status);
        if (r < 0)
                return log_debug_errno(r, "exec plugin %s: reading its answer: %m", x->command);
        if (rr < 0)
                return log_debug_errno(rr, "exec plugin %s: %m", x->command);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return log_debug_errno(EIO, "exec plugin %s failed (%s %d)", x->command,
                                       WIFEXITED(status) ? "exit status" : "signal",
                                       WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        r = kube_exec_parse_credential(x, out, len, ret_token, ret_expiry_usec);
        explicit_bzero(out, len);
        return r;
}
