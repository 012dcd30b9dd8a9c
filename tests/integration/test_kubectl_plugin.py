#!/usr/bin/env python3
"""`kubectl nodesmith`: nodesmithctl installed as the kubectl plugin kubectl-nodesmith reaches the
coordinator through the real kube-apiserver's service proxy
(/api/v1/namespaces/NS/services/NAME:api/proxy/...), with the kubeconfig's server, CA and
credentials, so no port-forward is needed; the coordinator checks the caller itself
(api-auth=kubernetes: TokenReview, then SubjectAccessReview), as shipped.

The API server proxies only to addresses that are a pod's IP (never loopback), so the test runs
in a network namespace of its own (`unshare -n`) whose loopback device also carries POD_IP. The
real control plane (tests/pylib/cluster.py) and the coordinator run in it; the shipped manifests
(packaging/kubernetes, but the Deployment) are applied; a Pod object stands for the coordinator's
pod (status.podIP POD_IP), and an EndpointSlice of the shipped Service names it, as the
EndpointSlice controller would once the pod is ready.

  1. kubectl nodesmith status -o json (kubectl finds the plugin on PATH; KUBECONFIG names the
     kubeconfig of a user bound to the shipped nodesmith-api-reader roles): the coordinator's
     answer, and the API server's audit log shows the services/proxy request as that user.
  2. nodes and explain go the same way; -n and --service change the path (the API server's 404).
  3. A wrong token: the API server's 401, exit 1, and a message saying what the user needs; a user
     without services/proxy: the API server's 403; a user with services/proxy but not bound to
     nodesmith-api-reader's ClusterRole: the coordinator's own 403, through the proxy.
  4. A kubeconfig whose CA did not sign the server's certificate: refused (TLS is verified).
  5. nodesmithctl --coordinator URL together with --kubeconfig: refused, exit 2.
  6. A kubeconfig user with an exec credential plugin (as EKS's `aws eks get-token`): the
     plugin runs with its env and KUBERNETES_EXEC_INFO, and its token is used.
"""
import base64
import json
import os
import shutil
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from cluster import Cluster  # noqa: E402
from nsharness import BUILD, ROOT, Checklist, Coordinator, TestDir, free_port, make_pki, wait_for  # noqa: E402

check = Checklist()
POD_IP = "10.96.77.7"
NS = "nodesmith"
NETNS_MARK = "NODESMITH_TEST_NETNS"


def in_own_netns():
    """Runs this script again in a new network namespace (root: unshare -n; otherwise with a user
    namespace mapping the caller to root), with lo up and POD_IP on it."""
    if os.environ.get(NETNS_MARK) == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "addr", "add", f"{POD_IP}/32", "dev", "lo"], check=True)
        return None
    argv = ["unshare", "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    return subprocess.run(argv + [sys.executable, os.path.abspath(__file__)],
                          env=dict(os.environ, **{NETNS_MARK: "1"})).returncode


# An exec credential plugin as `aws eks get-token` is one: it needs its env from the kubeconfig
# and KUBERNETES_EXEC_INFO, and prints an ExecCredential.
EXEC_PLUGIN = """import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert os.environ.get("CLUSTER_ID") == "test" and info["spec"]["interactive"] is False, "bad env"
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": sys.argv[1]}}))
"""


def kubeconfig(path, server, ca, token=None, exec_token=None):
    user = {"token": token} if token else {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": ["-c", EXEC_PLUGIN, exec_token], "env": [{"name": "CLUSTER_ID", "value": "test"}],
        "interactiveMode": "Never"}}
    with open(path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "test",
                   "clusters": [{"name": "c", "cluster": {
                       "server": server, "certificate-authority-data": base64.b64encode(open(ca, "rb").read()).decode()}}],
                   "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
                   "users": [{"name": "u", "user": user}]}, f)
    return path


def proxied_as(c, user, path_prefix):
    """The services/proxy requests the audit log holds for user, under path_prefix."""
    seen = []
    with open(c.audit_log) as f:
        for line in f:
            ev = json.loads(line)
            if ev.get("stage") != "ResponseComplete" or ev.get("user", {}).get("username") != user:
                continue
            ref = ev.get("objectRef") or {}
            if ref.get("resource") == "services" and ref.get("subresource") == "proxy" and \
                    ev.get("requestURI", "").startswith(path_prefix):
                seen.append((ev["requestURI"], ev.get("responseStatus", {}).get("code")))
    return seen


def setup(c, d):
    """The shipped manifests but the Deployment (this process is the coordinator), users, and the
    coordinator's pod and endpoints as the kubelet and the EndpointSlice controller would make them."""
    rendered = c.kubectl("kustomize", os.path.join(ROOT, "packaging", "kubernetes"))
    objs = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Deployment"]
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    for sa in ("reader", "nobody", "proxy-only"):
        c.kubectl("create", "serviceaccount", sa, "-n", "default")
    # as docs/security.md says to grant it: the ClusterRole (the coordinator's paths) and the Role
    # (services/proxy on its Service, in its namespace)
    c.kubectl("create", "clusterrolebinding", "reader-api", "--clusterrole=nodesmith-api-reader",
              "--serviceaccount=default:reader")
    for sa in ("reader", "proxy-only"):
        c.kubectl("create", "rolebinding", f"{sa}-proxy", "-n", NS, "--role=nodesmith-api-reader",
                  f"--serviceaccount=default:{sa}")

    api_port = free_port()
    coord = Coordinator(d, make_pki(d), interval="1s", extra=[
        "--attestation", "off", "--leader-elect", "no",
        "--kubeconfig", c.service_account_kubeconfig(NS, "nodesmith-coordinator"),
        "--api-listen", f"http://{POD_IP}:{api_port}", "--api-auth", "kubernetes"]).start()

    node = "ip-10-96-77-7.ec2.internal"
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    pod = "nodesmith-coordinator-0"
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": NS, "labels": {"app.kubernetes.io/name": "nodesmith-coordinator-test"}},
        "spec": {"nodeName": node, "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "coordinator", "image": "nodesmith-coordinator",
                                 "ports": [{"name": "api", "containerPort": api_port}],
                                 # the namespace enforces PodSecurity "restricted", as shipped
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}}}]}}))
    c.kubectl("patch", "pod", pod, "-n", NS, "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"phase": "Running", "podIP": POD_IP, "podIPs": [{"ip": POD_IP}],
                    "conditions": [{"type": "Ready", "status": "True"}]}}))
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "nodesmith-coordinator-test", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "nodesmith-coordinator",
                                "endpointslice.kubernetes.io/managed-by": "nodesmith-test"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [POD_IP], "conditions": {"ready": True},
                       "targetRef": {"kind": "Pod", "namespace": NS, "name": pod}}],
        "ports": [{"name": "api", "port": api_port, "protocol": "TCP"}]}))
    return coord, {sa: c.service_account_token("default", sa, 3600) for sa in ("reader", "nobody", "proxy-only")}


def main():
    if not shutil.which("kubectl"):
        print("FAIL  kubectl not installed")
        return 1
    rc = in_own_netns()
    if rc is not None:
        return rc
    with TestDir("kubectl-plugin") as d, Cluster(os.path.join(d, "cluster")) as c:
        coord, tokens = setup(c, d)
        try:
            run(d, c, coord, tokens)
        finally:
            coord.proc.stop()
    return check.exit_code("test_kubectl_plugin")


def run(d, c, coord, tokens):
    os.makedirs(os.path.join(d, "other"))
    other = make_pki(os.path.join(d, "other"))
    kc = kubeconfig(os.path.join(d, "kubeconfig"), c.server, c.ca, tokens["reader"])
    env = dict(os.environ, KUBECONFIG=kc, PATH=BUILD + os.pathsep + os.environ["PATH"])
    env.pop("NODESMITH_COORDINATOR_HTTP", None)
    env.pop("NODESMITH_API_TOKEN", None)
    reader = "system:serviceaccount:default:reader"
    proxy = f"/api/v1/namespaces/{NS}/services/nodesmith-coordinator:api/proxy/"

    def kubectl(*args):
        return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=60)

    p = kubectl("plugin", "list")
    check("kubectl plugin list finds kubectl-nodesmith", "kubectl-nodesmith" in p.stdout, p.stdout + p.stderr)
    # the EndpointSlice is read by the API server through its informer: a moment after it is made
    p = None

    def status_json():
        nonlocal p
        p = kubectl("nodesmith", "status", "-o", "json")
        return p.returncode == 0 and "provisioning" in json.loads(p.stdout or "{}")
    try:
        wait_for("kubectl nodesmith status through the API server", status_json, 30, 1)
        ok = True
    except AssertionError:
        ok = False
    check("kubectl nodesmith status -o json: the coordinator's answer, through the real service proxy", ok,
          (p.stdout[-500:] + p.stderr) if p else "")
    seen = wait_for("the audit log", lambda: proxied_as(c, reader, proxy + "api/v1/provisioning"), 10, 0.5)
    check("the API server's audit log: services/proxy as the kubeconfig's user, 200",
          any(code == 200 for _, code in seen), seen)
    p = kubectl("nodesmith", "status")
    check("kubectl nodesmith status (text)", p.returncode == 0 and "Leader:" in p.stdout, p.stdout + p.stderr)
    for cmd in ("nodes", "explain"):
        p = kubectl("nodesmith", cmd, "-o", "json")
        check(f"kubectl nodesmith {cmd}", p.returncode == 0 and json.loads(p.stdout or "null") is not None,
              p.stdout[-300:] + p.stderr)
    p = kubectl("nodesmith", "nodes", "-n", "kube-system", "--service", "ns-coord")
    seen = proxied_as(c, reader, "/api/v1/namespaces/kube-system/services/ns-coord:api/proxy/")
    check("-n and --service change the proxy path (the API server refuses it: exit 1)",
          p.returncode == 1 and seen and all(code in (403, 404) for _, code in seen), (p.returncode, seen, p.stderr))

    kubeconfig(kc, c.server, c.ca, exec_token=tokens["reader"])
    p = kubectl("nodesmith", "status", "-o", "json")
    check("an exec credential plugin user (as aws eks get-token): its token is used",
          p.returncode == 0 and "provisioning" in json.loads(p.stdout or "{}"), p.stderr)
    kubeconfig(kc, c.server, c.ca, exec_token="")
    p = kubectl("nodesmith", "status")
    check("an exec plugin that gives no token: exit 1, said", p.returncode == 1 and "no status.token" in p.stderr, p.stderr)

    kubeconfig(kc, c.server, c.ca, "wrong-token")
    p = kubectl("nodesmith", "status")
    check("a wrong token: the API server's 401, exit 1 and what the user needs",
          p.returncode == 1 and "HTTP 401" in p.stderr and "services/proxy" in p.stderr, p.stderr)
    kubeconfig(kc, c.server, c.ca, tokens["nobody"])
    p = kubectl("nodesmith", "status")
    check("a user without services/proxy: the API server's 403, exit 1", p.returncode == 1 and "HTTP 403" in p.stderr,
          p.stderr)
    kubeconfig(kc, c.server, c.ca, tokens["proxy-only"])
    p = kubectl("nodesmith", "status")
    out = coord.proc.output()
    check("services/proxy but not nodesmith-api-reader's paths: the coordinator's own 403 through the proxy",
          p.returncode == 1 and "HTTP 403" in p.stderr and
          "system:serviceaccount:default:proxy-only may not get /nodesmith/api/v1/" in out, (p.stderr, out[-1500:]))

    kubeconfig(kc, c.server, other["ca"], tokens["reader"])
    p = kubectl("nodesmith", "status")
    check("a CA that did not sign the server's certificate: refused", p.returncode == 1 and p.stdout == "", p.stderr)

    api = f"http://{POD_IP}:{coord.extra[coord.extra.index('--api-listen') + 1].rsplit(':', 1)[1]}"
    ctl = os.path.join(BUILD, "nodesmithctl")
    p = subprocess.run([ctl, "status", "--coordinator", api, "--kubeconfig", kc], capture_output=True, text=True, timeout=30)
    check("--coordinator with --kubeconfig: refused, exit 2", p.returncode == 2 and "exclude" in p.stderr, p.stderr)
    p = subprocess.run([ctl, "status", "--coordinator", api], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, KUBECONFIG=kc, NODESMITH_API_TOKEN=tokens["reader"]))
    check("nodesmithctl with --coordinator asks the URL directly (NODESMITH_API_TOKEN)",
          p.returncode == 0 and "Leader:" in p.stdout, p.stderr)


if __name__ == "__main__":
    sys.exit(main())
