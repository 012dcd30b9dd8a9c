/* SPDX-License-Identifier: Apache-2.0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kube-exec.h"
#include "kube-internal.h"
#include "log.h"

static void test_paths(void **state) {
        char *p = NULL;
        assert_int_equal(kube_path("v1", "kube-system", "pods", "web-0", "eviction", &p), 0);
        assert_string_equal(p, "/api/v1/namespaces/kube-system/pods/web-0/eviction");
        free(p);
        assert_int_equal(kube_path("v1", NULL, "nodes", "ip-10-0-0-1.ec2.internal", NULL, &p), 0);
        assert_string_equal(p, "/api/v1/nodes/ip-10-0-0-1.ec2.internal");
        free(p);
        assert_int_equal(kube_path("coordination.k8s.io/v1", "kube-system", "leases", NULL, NULL, &p), 0);
        assert_string_equal(p, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
        free(p);
        /* names are escaped; separators and dot segments are refused */
        assert_int_equal(kube_path("v1", NULL, "clusterroles", "system:node", NULL, &p), 0);
        assert_string_equal(p, "/api/v1/clusterroles/system%3Anode");
        free(p);
        p = NULL;
        assert_int_equal(kube_path("v1", "a/b", "pods", NULL, NULL, &p), -EINVAL);
        assert_int_equal(kube_path("v1", NULL, "nodes", "..", NULL, &p), -EINVAL);
        assert_int_equal(kube_path("v1", NULL, "nodes", "", NULL, &p), -EINVAL);
        assert_int_equal(kube_path("v1", NULL, "nodes", NULL, "status", &p), -EINVAL);
        assert_int_equal(kube_path("apps/", NULL, "deployments", NULL, NULL, &p), -EINVAL);
        assert_null(p);
}

static void test_urls(void **state) {
        char *u = NULL;
        KubeListOptions o = { .label_selector = "app=web,tier!=db", .field_selector = "spec.nodeName=n1",
                              .limit = 50 };
        KubeQuery q = { .list = &o, .cont = "abc+/=" };
        assert_int_equal(kube_url("https://10.0.0.1:443/", "/api/v1/pods", &q, &u), 0);
        assert_string_equal(u, "https://10.0.0.1:443/api/v1/pods?labelSelector=app%3Dweb%2Ctier%21%3Ddb"
                               "&fieldSelector=spec.nodeName%3Dn1&limit=50&continue=abc%2B%2F%3D");
        free(u);
        /* a watch: no limit, the resourceVersion, bookmarks and a time-out */
        q = (KubeQuery) { .list = &o, .watch = true, .resource_version = "1234", .timeout_seconds = 300 };
        assert_int_equal(kube_url("http://127.0.0.1:8080", "/api/v1/pods", &q, &u), 0);
        assert_string_equal(u, "http://127.0.0.1:8080/api/v1/pods?labelSelector=app%3Dweb%2Ctier%21%3Ddb"
                               "&fieldSelector=spec.nodeName%3Dn1&watch=1&allowWatchBookmarks=true"
                               "&resourceVersion=1234&timeoutSeconds=300");
        free(u);
        /* continue wins over resourceVersion (the server refuses both) */
        q = (KubeQuery) { .cont = "c", .resource_version = "9" };
        assert_int_equal(kube_url("http://h", "/api/v1/nodes?pretty=false", &q, &u), 0);
        assert_string_equal(u, "http://h/api/v1/nodes?pretty=false&continue=c");
        free(u);
        assert_int_equal(kube_url("http://h", "api/v1/nodes", NULL, &u), -EINVAL);
}

static void test_selectors(void **state) {
        char *s = NULL;
        assert_int_equal(kube_selector_add(&s, "app", "=", "web"), 0);
        assert_int_equal(kube_selector_add(&s, "karpenter.sh/nodepool", "!=", "gpu"), 0);
        assert_int_equal(kube_selector_add(&s, "node-role.kubernetes.io/control-plane", NULL, NULL), 0);
        assert_int_equal(kube_selector_add(&s, "!nodesmith.io/skip", NULL, NULL), 0);
        assert_int_equal(kube_selector_add(&s, "empty", "=", ""), 0);
        assert_string_equal(s, "app=web,karpenter.sh/nodepool!=gpu,node-role.kubernetes.io/control-plane,"
                               "!nodesmith.io/skip,empty=");
        /* what would change the selector's meaning is refused and leaves it alone */
        assert_int_equal(kube_selector_add(&s, "app", "=", "a,b=c"), -EINVAL);
        assert_int_equal(kube_selector_add(&s, "a b", "=", "x"), -EINVAL);
        assert_int_equal(kube_selector_add(&s, "app", "in", "x"), -EINVAL);
        assert_int_equal(kube_selector_add(&s, "Bad_Prefix/x", "=", "y"), -EINVAL);
        assert_int_equal(kube_selector_add(&s, "-x", "=", "y"), -EINVAL);
        assert_string_equal(s, "app=web,karpenter.sh/nodepool!=gpu,node-role.kubernetes.io/control-plane,"
                               "!nodesmith.io/skip,empty=");
        free(s);
}

static void test_status(void **state) {
        const char *pdb = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
                          "\"message\":\"Cannot evict pod as it would violate the pod's disruption budget.\","
                          "\"reason\":\"TooManyRequests\",\"details\":{\"causes\":[{\"reason\":\"DisruptionBudget\","
                          "\"message\":\"The disruption budget web needs 2 healthy pods and has 2 currently\"}],"
                          "\"retryAfterSeconds\":10},\"code\":429}";
        cJSON *j = cJSON_Parse(pdb);
        KubeStatus st;
        assert_int_equal(kube_status_parse(j, &st), 0);
        assert_int_equal(st.code, 429);
        assert_string_equal(st.reason, "TooManyRequests");
        assert_string_equal(st.cause, "DisruptionBudget");
        assert_string_equal(st.cause_message, "The disruption budget web needs 2 healthy pods and has 2 currently");
        assert_int_equal(st.retry_after, 10);
        assert_string_equal(st.status, "Failure");
        cJSON_Delete(j);

        /* field causes use "type" in older servers */
        j = cJSON_Parse("{\"kind\":\"Status\",\"code\":422,\"reason\":\"Invalid\",\"details\":{\"causes\":"
                        "[{\"type\":\"FieldValueInvalid\",\"field\":\"spec\"}]}}");
        assert_int_equal(kube_status_parse(j, &st), 0);
        assert_string_equal(st.cause, "FieldValueInvalid");
        cJSON_Delete(j);
        j = cJSON_Parse("{\"kind\":\"Node\",\"code\":404}");
        assert_int_equal(kube_status_parse(j, &st), -EINVAL);
        cJSON_Delete(j);

        /* the errno mapping; a conflict and an existing object differ */
        KubeStatus exists = { .reason = "AlreadyExists" }, conflict = { .reason = "Conflict" };
        assert_int_equal(kube_http_errno(200, NULL), 0);
        assert_int_equal(kube_http_errno(201, NULL), 0);
        assert_int_equal(kube_http_errno(404, NULL), -ENOENT);
        assert_int_equal(kube_http_errno(409, &exists), -EEXIST);
        assert_int_equal(kube_http_errno(409, &conflict), -EBUSY);
        assert_int_equal(kube_http_errno(409, NULL), -EBUSY);
        assert_int_equal(kube_http_errno(422, NULL), -EINVAL);
        assert_int_equal(kube_http_errno(403, NULL), -EACCES);
        assert_int_equal(kube_http_errno(401, NULL), -EPERM);
        assert_int_equal(kube_http_errno(429, NULL), -EAGAIN);
        assert_int_equal(kube_http_errno(410, NULL), -ESTALE);
        assert_int_equal(kube_http_errno(503, NULL), -EIO);
        assert_int_equal(kube_http_errno(418, NULL), -EPROTO);

        /* a response: a Status body keeps its text, a foreign error page its beginning */
        KubeResponse resp;
        kube_response_from_http(&resp, 0, 429, pdb, strlen(pdb));
        assert_int_equal(resp.error, -EAGAIN);
        assert_true(resp.has_status);
        assert_string_equal(resp.status.cause, "DisruptionBudget");
        cJSON_Delete(resp.object);
        const char *html = "<html>502 Bad Gateway\n</html>";
        kube_response_from_http(&resp, 0, 502, html, strlen(html));
        assert_int_equal(resp.error, -EIO);
        assert_false(resp.has_status);
        assert_null(resp.object);
        assert_string_equal(resp.status.message, "<html>502 Bad Gateway </html>");
        kube_response_from_http(&resp, 0, 200, "{\"kind\":", 8);
        assert_int_equal(resp.error, -EBADMSG);
        kube_response_from_http(&resp, -ECONNREFUSED, 0, "", 0);
        assert_int_equal(resp.error, -ECONNREFUSED);
}

static void test_retry_after(void **state) {
        uint64_t u = 0;
        assert_int_equal(kube_parse_retry_after("10", 0, &u), 0);
        assert_int_equal(u, 10 * USEC_PER_SEC);
        assert_int_equal(kube_parse_retry_after(" 0", 0, &u), 0);
        assert_int_equal(u, 0);
        assert_int_equal(kube_parse_retry_after("999999999999", 0, &u), 0);
        assert_int_equal(u, KUBE_MAX_RETRY_AFTER_USEC);
        /* an HTTP-date: 1994-11-06 08:49:37 UTC is 784111777 */
        assert_int_equal(kube_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 - 5, &u), 0);
        assert_int_equal(u, 5 * USEC_PER_SEC);
        assert_int_equal(kube_parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111777 + 5, &u), 0);
        assert_int_equal(u, 0);
        assert_int_equal(kube_parse_retry_after("10s", 0, &u), -EINVAL);
        assert_int_equal(kube_parse_retry_after("", 0, &u), -EINVAL);
        assert_int_equal(kube_parse_retry_after("soon", 0, &u), -EINVAL);

        /* backoff doubles, is capped, and its jitter stays in [d/2, d] */
        assert_int_equal(kube_backoff_usec(1, 100, 10000, 0), 50);
        assert_int_equal(kube_backoff_usec(1, 100, 10000, 50), 100);
        assert_int_equal(kube_backoff_usec(3, 100, 10000, 0), 200);
        assert_int_equal(kube_backoff_usec(30, 100, 10000, 0), 5000);
        for (uint32_t rnd = 0; rnd < 1000; rnd += 37) {
                uint64_t d = kube_backoff_usec(4, 100, 10000, rnd * 7919);
                assert_true(d >= 400 && d <= 800);
        }
}

static void test_lines(void **state) {
        KubeLines l;
        char *line;
        size_t len;

        kube_lines_init(&l, 32);
        assert_int_equal(kube_lines_feed(&l, "{\"type\":\"ADD", 12), 0);
        assert_false(kube_lines_next(&l, &line, &len));
        const char *piece = "ED\"}\n\n{\"b\":1}\r\n{\"c\"";
        assert_int_equal(kube_lines_feed(&l, piece, strlen(piece)), 0);
        assert_true(kube_lines_next(&l, &line, &len));
        assert_string_equal(line, "{\"type\":\"ADDED\"}");
        assert_int_equal(len, 16);
        assert_true(kube_lines_next(&l, &line, &len)); /* the empty line is skipped, \r dropped */
        assert_string_equal(line, "{\"b\":1}");
        assert_false(kube_lines_next(&l, &line, &len));
        assert_int_equal(kube_lines_feed(&l, ":2}\n", 4), 0);
        assert_true(kube_lines_next(&l, &line, &len));
        assert_string_equal(line, "{\"c\":2}");
        assert_false(kube_lines_next(&l, &line, &len));

        /* many lines in one piece, after the buffer was compacted */
        char big[400] = "";
        for (int i = 0; i < 20; i++)
                snprintf(big + strlen(big), sizeof big - strlen(big), "{\"i\":%d}\n", i);
        assert_int_equal(kube_lines_feed(&l, big, strlen(big)), 0);
        for (int i = 0; i < 20; i++) {
                char want[32];
                snprintf(want, sizeof want, "{\"i\":%d}", i);
                assert_true(kube_lines_next(&l, &line, &len));
                assert_string_equal(line, want);
        }
        assert_false(kube_lines_next(&l, &line, &len));

        /* one event over the cap: refused, in one piece or growing across pieces */
        char over[40];
        memset(over, 'x', sizeof over);
        assert_int_equal(kube_lines_feed(&l, over, 33), -EFBIG);
        kube_lines_done(&l);
        assert_int_equal(kube_lines_feed(&l, over, 20), 0);
        assert_int_equal(kube_lines_feed(&l, over, 13), -EFBIG);
        kube_lines_done(&l);
        /* exactly the cap is fine */
        assert_int_equal(kube_lines_feed(&l, over, 32), 0);
        assert_int_equal(kube_lines_feed(&l, "\n", 1), 0);
        assert_true(kube_lines_next(&l, &line, &len));
        assert_int_equal(len, 32);
        kube_lines_done(&l);
}

static char *b64(const char *s) {
        size_t n = strlen(s);
        char *o = malloc(n / 3 * 4 + 8);
        static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t j = 0;
        for (size_t i = 0; i < n; i += 3) {
                uint32_t v = (uint32_t) (unsigned char) s[i] << 16;
                if (i + 1 < n)
                        v |= (uint32_t) (unsigned char) s[i + 1] << 8;
                if (i + 2 < n)
                        v |= (unsigned char) s[i + 2];
                o[j++] = t[v >> 18 & 63];
                o[j++] = t[v >> 12 & 63];
                o[j++] = i + 1 < n ? t[v >> 6 & 63] : '=';
                o[j++] = i + 2 < n ? t[v & 63] : '=';
        }
        o[j] = 0;
        return o;
}

#define CA_PEM "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
#define KEY_PEM "-----BEGIN PRIVATE KEY-----\nMIIEfake\n-----END PRIVATE KEY-----\n"

static void test_kubeconfig(void **state) {
        char *ca = b64(CA_PEM), *cert = b64(CA_PEM), *key = b64(KEY_PEM), *text = NULL;
        KubeConfig *c = NULL;
        assert_true(asprintf(&text,
                             "apiVersion: v1\n"
                             "kind: Config\n"
                             "current-context: prod\n"
                             "clusters:\n"
                             "- name: other\n"
                             "  cluster: {server: 'https://other:6443'}\n"
                             "- name: prod\n"
                             "  cluster:\n"
                             "    server: https://ABCD.gr7.us-east-1.eks.amazonaws.com/\n"
                             "    certificate-authority-data: %s\n"
                             "contexts:\n"
                             "- name: dev\n"
                             "  context: {cluster: other, user: dev}\n"
                             "- name: prod\n"
                             "  context: {cluster: prod, user: agent, namespace: nodesmith}\n"
                             "users:\n"
                             "- name: dev\n"
                             "  user:\n"
                             "    tokenFile: secrets/token\n"
                             "    client-certificate: certs/dev.crt\n"
                             "    client-key: /abs/dev.key\n"
                             "- name: agent\n"
                             "  user:\n"
                             "    token: abc.def\n"
                             "    client-certificate-data: %s\n"
                             "    client-key-data: %s\n",
                             ca, cert, key) > 0);
        assert_int_equal(kube_config_parse_kubeconfig(text, strlen(text), "/etc/nodesmith", NULL, &c), 0);
        assert_string_equal(c->server, "https://ABCD.gr7.us-east-1.eks.amazonaws.com");
        assert_int_equal(c->ca_data_len, strlen(CA_PEM));
        assert_memory_equal(c->ca_data, CA_PEM, c->ca_data_len);
        assert_int_equal(c->cert_data_len, strlen(CA_PEM));
        assert_memory_equal(c->key_data, KEY_PEM, strlen(KEY_PEM));
        assert_string_equal(c->token, "abc.def");
        assert_string_equal(c->namespace, "nodesmith");
        assert_null(c->ca_file);
        assert_false(c->insecure_skip_verify);
        c = kube_config_free(c);

        /* another context: files relative to the kubeconfig's directory */
        assert_int_equal(kube_config_parse_kubeconfig(text, strlen(text), "/etc/nodesmith", "dev", &c), 0);
        assert_string_equal(c->server, "https://other:6443");
        assert_string_equal(c->token_file, "/etc/nodesmith/secrets/token");
        assert_string_equal(c->cert_file, "/etc/nodesmith/certs/dev.crt");
        assert_string_equal(c->key_file, "/abs/dev.key");
        assert_null(c->token);
        assert_null(c->namespace);
        c = kube_config_free(c);
        assert_int_equal(kube_config_parse_kubeconfig(text, strlen(text), "/", "staging", &c), -ENOENT);
        free(text);

        log_set_max_level(LOG_EMERG);
        /* an exec plugin without an apiVersion we speak is refused, not ignored */
        const char *exec = "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\n"
                           "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                           "users: [{name: u, user: {exec: {command: aws}}}]\n";
        assert_int_equal(kube_config_parse_kubeconfig(exec, strlen(exec), "/", NULL, &c), -EOPNOTSUPP);
        const char *badb64 = "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k', "
                             "certificate-authority-data: '!!notbase64!!'}}]\n"
                             "contexts: [{name: x, context: {cluster: c}}]\n";
        assert_int_equal(kube_config_parse_kubeconfig(badb64, strlen(badb64), "/", NULL, &c), -EBADMSG);
        const char *noserver = "current-context: x\nclusters: [{name: c, cluster: {server: 'ftp://k'}}]\n"
                               "contexts: [{name: x, context: {cluster: c}}]\n";
        assert_int_equal(kube_config_parse_kubeconfig(noserver, strlen(noserver), "/", NULL, &c), -EINVAL);
        const char *halfcert = "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\n"
                               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                               "users: [{name: u, user: {client-certificate: /a.crt}}]\n";
        assert_int_equal(kube_config_parse_kubeconfig(halfcert, strlen(halfcert), "/", NULL, &c), -EINVAL);
        assert_int_equal(kube_config_parse_kubeconfig("a: [", 4, "/", NULL, &c), -EBADMSG);
        log_set_max_level(LOG_INFO);
        assert_null(c);
        free(ca);
        free(cert);
        free(key);
}

static void write_file(const char *dir, const char *name, const char *text) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, name);
        FILE *f = fopen(p, "we");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
}

/* A fake exec credential plugin: counts its runs in DIR/count, keeps KUBERNETES_EXEC_INFO in
 * DIR/info, answers a token made of its first argument, $FAKE_ENV and the run number, valid
 * until $FAKE_EXPIRY; "fail" as first argument exits 3, "slow" sleeps, "cert" answers a client
 * certificate, "v1beta1" answers another apiVersion. */
static const char FAKE_PLUGIN[] =
        "#!/bin/sh\n"
        "d=$(dirname \"$0\")\n"
        "n=$(cat \"$d/count\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$d/count\"\n"
        "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$d/info\"\n"
        "case \"$1\" in fail) echo oops >&2; exit 3;; slow) sleep 5;; esac\n"
        "api=client.authentication.k8s.io/v1; [ \"$1\" = v1beta1 ] && api=client.authentication.k8s.io/v1beta1\n"
        "extra=; [ \"$1\" = cert ] && extra=',\"clientCertificateData\":\"x\",\"clientKeyData\":\"y\"'\n"
        "printf '{\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s-%s-%s\","
        "\"expirationTimestamp\":\"%s\"%s}}' \"$api\" \"$1\" \"$FAKE_ENV\" \"$n\" \"$FAKE_EXPIRY\" \"$extra\"\n";

static char *exec_kubeconfig(const char *arg, const char *mode) {
        char *text = NULL;
        assert_true(asprintf(&text,
                             "current-context: x\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:8080'}}]\n"
                             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                             "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, "
                             "command: ./plugin.sh, args: [%s, ignored], env: [{name: FAKE_ENV, value: from-env}], "
                             "interactiveMode: %s}}}]\n", arg, mode) > 0);
        return text;
}

static int count_runs(const char *dir) {
        char p[512], buf[32] = "";
        snprintf(p, sizeof p, "%s/count", dir);
        FILE *f = fopen(p, "re");
        if (!f)
                return 0;
        if (!fgets(buf, sizeof buf, f))
                buf[0] = 0;
        fclose(f);
        return atoi(buf);
}

static int run_plugin(const char *dir, const char *arg, uint64_t timeout, char **token, int64_t *expiry) {
        _cleanup_free_ char *text = exec_kubeconfig(arg, "Never");
        KubeConfig *c = NULL;
        assert_int_equal(kube_config_parse_kubeconfig(text, strlen(text), dir, NULL, &c), 0);
        assert_non_null(c->exec);
        int r = kube_exec_run(c->exec, timeout, token, expiry);
        kube_config_free(c);
        return r;
}

static void test_exec_plugin(void **state) {
        char dir[] = "/tmp/test-kube-exec-XXXXXX", p[512];
        char *token = NULL;
        int64_t expiry = 0;
        assert_non_null(mkdtemp(dir));
        write_file(dir, "plugin.sh", FAKE_PLUGIN);
        snprintf(p, sizeof p, "%s/plugin.sh", dir);
        assert_int_equal(chmod(p, 0700), 0);
        setenv("FAKE_EXPIRY", "2099-01-02T03:04:05Z", 1);
        setenv("FAKE_ENV", "from-our-environment", 1);
        log_set_max_level(LOG_EMERG);

        /* args and env reach the plugin (env over ours), the relative command is the kubeconfig
         * directory's, the token and expiry are read */
        assert_int_equal(run_plugin(dir, "first", 0, &token, &expiry), 0);
        assert_string_equal(token, "first-from-env-1");
        assert_int_equal(expiry, (int64_t) 4071006245 * 1000000);
        free(token);
        token = NULL;
        char info[512] = "";
        snprintf(p, sizeof p, "%s/info", dir);
        FILE *f = fopen(p, "re");
        assert_non_null(f);
        assert_non_null(fgets(info, sizeof info, f));
        fclose(f);
        assert_non_null(strstr(info, "\"apiVersion\":\"client.authentication.k8s.io/v1\""));
        assert_non_null(strstr(info, "\"interactive\":false"));

        /* failures: exit status, a slow plugin killed at its time-out, a client certificate, a
         * different apiVersion than the kubeconfig asked for */
        assert_int_equal(run_plugin(dir, "fail", 0, &token, &expiry), -EIO);
        assert_int_equal(run_plugin(dir, "slow", 300 * 1000, &token, &expiry), -ETIMEDOUT);
        assert_int_equal(run_plugin(dir, "cert", 0, &token, &expiry), -EOPNOTSUPP);
        assert_int_equal(run_plugin(dir, "v1beta1", 0, &token, &expiry), -EBADMSG);
        assert_null(token);
        assert_int_equal(count_runs(dir), 5);

        /* refused in the kubeconfig: interactiveMode Always, provideClusterInfo */
        KubeConfig *c = NULL;
        _cleanup_free_ char *always = exec_kubeconfig("x", "Always");
        assert_int_equal(kube_config_parse_kubeconfig(always, strlen(always), dir, NULL, &c), -EOPNOTSUPP);
        const char *pci = "current-context: x\nclusters: [{name: c, cluster: {server: 'https://k'}}]\n"
                          "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                          "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
                          "command: aws, provideClusterInfo: true}}}]\n";
        assert_int_equal(kube_config_parse_kubeconfig(pci, strlen(pci), dir, NULL, &c), -EOPNOTSUPP);
        assert_null(c);

        /* the client: one run while the token is valid, a new one when forced (after a 401) and
         * when the expiry is near */
        sd_event *e = NULL;
        KubeClient *kc = NULL;
        HttpRequest *req = NULL;
        _cleanup_free_ char *text = exec_kubeconfig("client", "IfAvailable");
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(kube_config_parse_kubeconfig(text, strlen(text), dir, NULL, &c), 0);
        assert_int_equal(kube_client_new(e, c, &kc), 0);
        for (int i = 0; i < 3; i++) {
                assert_int_equal(kube_client_http_request(kc, "GET", "http://127.0.0.1:8080/api", false, &req), 0);
                req = http_request_free(req);
        }
        assert_int_equal(count_runs(dir), 6);
        assert_int_equal(kube_client_http_request(kc, "GET", "http://127.0.0.1:8080/api", true, &req), 0);
        req = http_request_free(req);
        assert_int_equal(count_runs(dir), 7);
        kube_client_free(kc);
        char soon[32];
        time_t t = time(NULL) + 30; /* within the renewal margin */
        struct tm tm;
        strftime(soon, sizeof soon, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
        setenv("FAKE_EXPIRY", soon, 1);
        assert_int_equal(kube_client_new(e, c, &kc), 0);
        for (int i = 0; i < 2; i++) {
                assert_int_equal(kube_client_http_request(kc, "GET", "http://127.0.0.1:8080/api", false, &req), 0);
                req = http_request_free(req);
        }
        assert_int_equal(count_runs(dir), 9);
        kube_client_free(kc);
        kube_config_free(c);
        sd_event_unref(e);
        log_set_max_level(LOG_INFO);

        const char *names[] = { "plugin.sh", "count", "info" };
        for (size_t i = 0; i < 3; i++) {
                snprintf(p, sizeof p, "%s/%s", dir, names[i]);
                unlink(p);
        }
        rmdir(dir);
}

static void test_in_cluster(void **state) {
        char dir[] = "/tmp/test-kube-XXXXXX";
        KubeConfig *c = NULL;
        assert_non_null(mkdtemp(dir));

        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");
        assert_int_equal(kube_config_in_cluster(dir, &c), -ENXIO);
        setenv("KUBERNETES_SERVICE_HOST", "10.100.0.1", 1);
        setenv("KUBERNETES_SERVICE_PORT", "443", 1);
        log_set_max_level(LOG_EMERG);
        assert_int_equal(kube_config_in_cluster(dir, &c), -ENOENT); /* no token */
        log_set_max_level(LOG_INFO);
        write_file(dir, "token", "eyJhbGciOi.x.y\n");
        write_file(dir, "ca.crt", CA_PEM);
        write_file(dir, "namespace", "nodesmith-system\n");
        assert_int_equal(kube_config_in_cluster(dir, &c), 0);
        assert_string_equal(c->server, "https://10.100.0.1:443");
        assert_string_equal(c->namespace, "nodesmith-system");
        char want[600];
        snprintf(want, sizeof want, "%s/token", dir);
        assert_string_equal(c->token_file, want);
        snprintf(want, sizeof want, "%s/ca.crt", dir);
        assert_string_equal(c->ca_file, want);
        assert_null(c->token); /* read (and re-read) by the client */
        c = kube_config_free(c);
        setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
        assert_int_equal(kube_config_in_cluster(dir, &c), 0);
        assert_string_equal(c->server, "https://[fd00::1]:443");
        c = kube_config_free(c);
        setenv("KUBERNETES_SERVICE_PORT", "443/evil", 1);
        assert_int_equal(kube_config_in_cluster(dir, &c), -EINVAL);
        unsetenv("KUBERNETES_SERVICE_HOST");
        unsetenv("KUBERNETES_SERVICE_PORT");

        /* a file kubeconfig: relative to its own directory */
        write_file(dir, "kubeconfig", "current-context: x\nclusters: [{name: c, cluster: {server: "
                                      "'http://127.0.0.1:1', certificate-authority: ca.crt}}]\n"
                                      "contexts: [{name: x, context: {cluster: c}}]\n");
        snprintf(want, sizeof want, "%s/kubeconfig", dir);
        assert_int_equal(kube_config_from_kubeconfig(want, NULL, &c), 0);
        snprintf(want, sizeof want, "%s/ca.crt", dir);
        assert_string_equal(c->ca_file, want);
        c = kube_config_free(c);

        const char *names[] = { "token", "ca.crt", "namespace", "kubeconfig" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                snprintf(want, sizeof want, "%s/%s", dir, names[i]);
                unlink(want);
        }
        rmdir(dir);
}

static void test_client_refuses_token_over_http(void **state) {
        sd_event *e = NULL;
        KubeConfig *cfg = NULL;
        KubeClient *c = NULL;
        assert_int_equal(sd_event_new(&e), 0);
        assert_int_equal(kube_config_new("http://api.example.com", &cfg), 0);
        assert_int_equal(free_and_strdup(&cfg->token, "secret"), 0);
        log_set_max_level(LOG_EMERG);
        assert_int_equal(kube_client_new(e, cfg, &c), -EINVAL);
        log_set_max_level(LOG_INFO);
        assert_int_equal(free_and_strdup(&cfg->server, "http://127.0.0.1:8080"), 0);
        assert_int_equal(kube_client_new(e, cfg, &c), 0);
        /* defaults are filled in */
        assert_int_equal(kube_client_config(c)->max_attempts, KUBE_DEFAULT_MAX_ATTEMPTS);
        assert_int_equal(kube_client_config(c)->max_event, KUBE_DEFAULT_MAX_EVENT);
        kube_client_free(c);
        kube_config_free(cfg);
        sd_event_unref(e);
}

static void test_object_trim(void **state) {
        const char *pod_json =
                "{\"metadata\":{\"name\":\"p\",\"labels\":{\"a\":\"b\"},\"managedFields\":[{\"manager\":\"x\"}]},"
                "\"spec\":{\"nodeName\":\"n\",\"tolerations\":[],\"volumes\":[{\"name\":\"v\"}],"
                "\"containers\":[{\"name\":\"c\",\"image\":\"i\",\"env\":[{\"name\":\"E\"}],"
                "\"command\":[\"sh\"],\"livenessProbe\":{},\"ports\":[{\"hostPort\":80}],"
                "\"resources\":{\"requests\":{\"cpu\":\"1\"}}}],"
                "\"initContainers\":[{\"name\":\"s\",\"restartPolicy\":\"Always\",\"args\":[\"x\"]}]},"
                "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\"}],"
                "\"containerStatuses\":[{\"name\":\"c\"}]}}";
        cJSON *pod = cJSON_Parse(pod_json), *node = cJSON_Parse(pod_json);
        assert_non_null(pod);
        kube_object_trim(pod, true);
        kube_object_trim(node, false);
        _cleanup_free_ char *got = cJSON_PrintUnformatted(pod);
        assert_string_equal(got,
                "{\"metadata\":{\"name\":\"p\",\"labels\":{\"a\":\"b\"}},"
                "\"spec\":{\"nodeName\":\"n\",\"tolerations\":[],\"volumes\":[{\"name\":\"v\"}],"
                "\"containers\":[{\"name\":\"c\",\"ports\":[{\"hostPort\":80}],"
                "\"resources\":{\"requests\":{\"cpu\":\"1\"}}}],"
                "\"initContainers\":[{\"name\":\"s\",\"restartPolicy\":\"Always\"}]},"
                "\"status\":{\"phase\":\"Running\",\"conditions\":[{\"type\":\"Ready\"}]}}");
        /* not a pod: only managedFields go */
        assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(node, "metadata"), "managedFields"));
        assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(node, "status"), "containerStatuses"));
        kube_object_trim(NULL, true);
        cJSON_Delete(pod);
        cJSON_Delete(node);
}

static void test_finalizer_patch(void **state) {
        cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"n1\",\"finalizers\":[\"a.io/x\","
                               "\"nodesmith.io/termination\",\"b.io/y\"]}}");
        char *p = NULL, *k = NULL;
        assert_int_equal(kube_finalizer_remove_patch(o, "nodesmith.io/termination", &p), 0);
        assert_string_equal(p, "[{\"op\":\"test\",\"path\":\"/metadata/finalizers/1\",\"value\":"
                               "\"nodesmith.io/termination\"},{\"op\":\"remove\",\"path\":\"/metadata/finalizers/1\"}]");
        free(p);
        assert_int_equal(kube_finalizer_remove_patch(o, "other", &p), -ENOENT);
        assert_int_equal(kube_object_key(o, &k), 0);
        assert_string_equal(k, "/n1");
        free(k);
        cJSON_Delete(o);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_paths),
                cmocka_unit_test(test_urls),
                cmocka_unit_test(test_selectors),
                cmocka_unit_test(test_status),
                cmocka_unit_test(test_retry_after),
                cmocka_unit_test(test_lines),
                cmocka_unit_test(test_kubeconfig),
                cmocka_unit_test(test_in_cluster),
                cmocka_unit_test(test_exec_plugin),
                cmocka_unit_test(test_client_refuses_token_over_http),
                cmocka_unit_test(test_finalizer_patch),
                cmocka_unit_test(test_object_trim),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
