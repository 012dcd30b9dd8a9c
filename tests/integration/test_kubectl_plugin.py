#!/usr/bin/env python3
"""`kubectl nodesmith`: nodesmithctl installed as the kubectl plugin kubectl-nodesmith reaches the
coordinator through the API server's service proxy
(/api/v1/namespaces/NS/services/NAME:api/proxy/...), with the kubeconfig's server, CA and
credentials, so no port-forward is needed.

Here the API server is a stand-in on 127.0.0.1 that serves only that proxy path over TLS (a
certificate from a test CA), checks the bearer token, and forwards to a real coordinator:

  1. kubectl nodesmith status -o json (kubectl finds the plugin on PATH; KUBECONFIG names the
     kubeconfig): the coordinator's answer, asked through the proxy path with the token.
  2. nodes and explain go the same way; -n and --service change the path.
  3. A wrong token: the proxy's 401, exit 1, and a message saying what the user needs.
  4. A kubeconfig whose CA did not sign the server's certificate: refused (TLS is verified).
  5. nodesmithctl --coordinator URL together with --kubeconfig: refused, exit 2.
  6. A kubeconfig user with an exec credential plugin (as EKS's `aws eks get-token`): the
     plugin runs with its env and KUBERNETES_EXEC_INFO, and its token is used.
"""
import base64
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import BUILD, Checklist, Coordinator, TestDir, make_pki  # noqa: E402

check = Checklist()
PREFIX = "/api/v1/namespaces/"


class ServiceProxy(http.server.BaseHTTPRequestHandler):
    """GET /api/v1/namespaces/NS/services/NAME:api/proxy/PATH with the right token: PATH of the
    coordinator; anything else as the API server would refuse it."""
    token = ""
    backend = ""
    seen = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            return self.reply(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        parts = self.path.split("/")
        # ['', 'api', 'v1', 'namespaces', NS, 'services', 'NAME:api', 'proxy', ...]
        if len(parts) < 8 or parts[5] != "services" or parts[7] != "proxy" or \
                parts[4] != "nodesmith" or parts[6] != "nodesmith-coordinator:api":
            return self.reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        with urllib.request.urlopen(self.backend + "/" + "/".join(parts[8:]), timeout=5) as r:
            body = r.read()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


# An exec credential plugin as `aws eks get-token` is one: it needs its env from the kubeconfig
# and KUBERNETES_EXEC_INFO, and prints an ExecCredential.
EXEC_PLUGIN = """import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert os.environ.get("CLUSTER_ID") == "test" and info["spec"]["interactive"] is False, "bad env"
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": sys.argv[1]}}))
"""


def kubeconfig(path, port, ca, token=None, exec_token=None):
    user = {"token": token} if token else {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": ["-c", EXEC_PLUGIN, exec_token], "env": [{"name": "CLUSTER_ID", "value": "test"}],
        "interactiveMode": "Never"}}
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "test",
                   "clusters": [{"name": "c", "cluster": {
                       "server": f"https://localhost:{port}",
                       "certificate-authority-data": base64.b64encode(open(ca, "rb").read()).decode()}}],
                   "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
                   "users": [{"name": "u", "user": user}]}, f)
    return path


def main():
    if not shutil.which("kubectl"):
        print("FAIL  kubectl not installed")
        return 1
    with TestDir("kubectl-plugin") as d:
        pki = make_pki(d)
        os.makedirs(os.path.join(d, "other"))
        other = make_pki(os.path.join(d, "other"))
        coord = Coordinator(d, pki=pki, insecure=True, extra=["--leader-elect", "no"])
        coord.start()
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ServiceProxy)
        try:
            run(d, pki, other, coord, srv)
        finally:
            srv.shutdown()
            coord.proc.stop()
    return check.exit_code("test_kubectl_plugin")


def run(d, pki, other, coord, srv):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki["cert"], pki["key"])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ServiceProxy.token = "s3cret-token"
    ServiceProxy.backend = coord.http
    kc = kubeconfig(os.path.join(d, "kubeconfig"), port, pki["ca"], "s3cret-token")
    env = dict(os.environ, KUBECONFIG=kc, PATH=BUILD + os.pathsep + os.environ["PATH"])
    env.pop("NODESMITH_COORDINATOR_HTTP", None)

    def kubectl(*args):
        return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)

    p = kubectl("plugin", "list")
    check("kubectl plugin list finds kubectl-nodesmith", "kubectl-nodesmith" in p.stdout, p.stdout + p.stderr)
    ServiceProxy.seen.clear()
    p = kubectl("nodesmith", "status", "-o", "json")
    ok = p.returncode == 0 and "provisioning" in json.loads(p.stdout or "{}")
    check("kubectl nodesmith status -o json: the coordinator's answer", ok, p.stdout[-500:] + p.stderr)
    check("asked through the service proxy with the kubeconfig's token",
          ("/api/v1/namespaces/nodesmith/services/nodesmith-coordinator:api/proxy/api/v1/provisioning",
           "Bearer s3cret-token") in ServiceProxy.seen, ServiceProxy.seen)
    p = kubectl("nodesmith", "status")
    check("kubectl nodesmith status (text)", p.returncode == 0 and "Leader:" in p.stdout, p.stdout + p.stderr)
    for cmd in ("nodes", "explain"):
        p = kubectl("nodesmith", cmd, "-o", "json")
        check(f"kubectl nodesmith {cmd}", p.returncode == 0 and json.loads(p.stdout or "null") is not None, p.stdout[-300:] + p.stderr)
    ServiceProxy.seen.clear()
    p = kubectl("nodesmith", "nodes", "-n", "kube-system", "--service", "ns-coord")
    check("-n and --service change the proxy path (404 from the API server: exit 1)",
          p.returncode == 1 and ServiceProxy.seen and
          ServiceProxy.seen[-1][0].startswith("/api/v1/namespaces/kube-system/services/ns-coord:api/proxy/"),
          (p.returncode, ServiceProxy.seen, p.stderr))

    ServiceProxy.seen.clear()
    kubeconfig(kc, port, pki["ca"], exec_token="s3cret-token")
    p = kubectl("nodesmith", "status", "-o", "json")
    check("an exec credential plugin user (as aws eks get-token): its token is used",
          p.returncode == 0 and ServiceProxy.seen and ServiceProxy.seen[-1][1] == "Bearer s3cret-token",
          (p.stderr, ServiceProxy.seen))
    kubeconfig(kc, port, pki["ca"], exec_token="")
    p = kubectl("nodesmith", "status")
    check("an exec plugin that gives no token: exit 1, said", p.returncode == 1 and "no status.token" in p.stderr, p.stderr)

    kubeconfig(kc, port, pki["ca"], "wrong-token")
    p = kubectl("nodesmith", "status")
    check("a wrong token: exit 1 and what the user needs", p.returncode == 1 and "HTTP 401" in p.stderr
          and "services/proxy" in p.stderr, p.stderr)

    kubeconfig(kc, port, other["ca"], "s3cret-token")
    p = kubectl("nodesmith", "status")
    check("a CA that did not sign the server's certificate: refused", p.returncode == 1 and p.stdout == "", p.stderr)

    p = subprocess.run([os.path.join(BUILD, "nodesmithctl"), "status", "--coordinator", coord.http, "--kubeconfig", kc],
                       capture_output=True, text=True, timeout=30)
    check("--coordinator with --kubeconfig: refused, exit 2", p.returncode == 2 and "exclude" in p.stderr, p.stderr)
    p = subprocess.run([os.path.join(BUILD, "nodesmithctl"), "status", "--coordinator", coord.http],
                       capture_output=True, text=True, timeout=30, env=dict(os.environ, KUBECONFIG=kc))
    check("nodesmithctl with --coordinator still asks the URL directly", p.returncode == 0 and "Leader:" in p.stdout, p.stderr)


if __name__ == "__main__":
    sys.exit(main())
