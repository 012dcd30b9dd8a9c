#!/usr/bin/env python3
"""F7: the coordinator's HTTP API as the pod network sees it. A real control plane (etcd,
kube-apiserver with RBAC; tests/pylib/cluster.py), the shipped manifests applied, and a
coordinator running as its shipped ServiceAccount with the Deployment's HTTP settings
(--http-listen :8080 open, --api-listen :8081, --api-auth kubernetes).

  1. /api/v1/nodes without a token: 401; with a token the API server does not know: 401; with a
     ServiceAccount's token that RBAC does not allow: 403; with one bound to the shipped
     nodesmith-api-reader ClusterRole: 200 (checked with a TokenReview then a
     SubjectAccessReview, as Kubernetes components do); the same through X-Nodesmith-Authorization
     (what nodesmithctl sends through the API server's service proxy, which drops Authorization).
  2. /metrics and /healthz stay open on 8080; /api/v1 is not served there.
  3. 1 000 connections with unfinished headers: beyond the caps they are shut at once, the rest
     within 30 s; /metrics answers throughout; memory measured.
  4. The shipped NetworkPolicy admits the agent port and 8080 from anywhere, 8081 only from
     namespaces labelled nodesmith.io/api-access=true."""
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
from attacklib import MemoryWatch  # noqa: E402
from cluster import Cluster  # noqa: E402
from nsharness import ROOT, Coordinator, TestDir, free_port, make_pki, metric, wait_for  # noqa: E402


def get(url, token=None, header="Authorization"):
    req = urllib.request.Request(url, headers={header: f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main():
    with TestDir("sec-http-api") as d:
        with Cluster(os.path.join(d, "cluster")) as c:
            # the shipped manifests but the CRDs (this test needs none; they are the CRD tests' to check)
            rendered = c.kubectl("kustomize", os.path.join(ROOT, "packaging", "kubernetes"))
            objs = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "CustomResourceDefinition"]
            c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
            c.kubectl("create", "serviceaccount", "reader", "-n", "default")
            c.kubectl("create", "serviceaccount", "nobody", "-n", "default")
            c.kubectl("create", "clusterrolebinding", "reader-api", "--clusterrole=nodesmith-api-reader",
                      "--serviceaccount=default:reader")
            reader = c.service_account_token("default", "reader", 3600)
            nobody = c.service_account_token("default", "nobody", 3600)
            kubeconfig = c.service_account_kubeconfig("nodesmith", "nodesmith-coordinator")
            pki = make_pki(d)
            api = f"http://127.0.0.1:{free_port()}"
            coord = Coordinator(d, pki, interval="1s", extra=[
                "--attestation", "off", "--kubeconfig", kubeconfig, "--api-listen", api, "--api-auth", "kubernetes"]).start()
            mem = MemoryWatch(coord.proc.pid)

            cases = [("no token", None, "Authorization", 401), ("an unknown token", "not-a-token", "Authorization", 401),
                     ("a token RBAC does not allow", nobody, "Authorization", 403),
                     ("a token bound to nodesmith-api-reader", reader, "Authorization", 200),
                     ("the same through X-Nodesmith-Authorization", reader, "X-Nodesmith-Authorization", 200)]
            for what, token, header, want in cases:
                status, body = get(api + "/api/v1/nodes", token, header)
                assert status == want, (what, status, body[:200])
                if want == 200:
                    assert "items" in json.loads(body)
                print(f"F7. /api/v1/nodes with {what}: {status}")
            status, _ = get(api + "/api/v1/nodes", nobody)  # cached verdicts stay right
            assert status == 403
            for path, want in (("/metrics", 200), ("/healthz", 200), ("/api/v1/nodes", 404)):
                status, _ = get(coord.http + path)
                assert status == want, (path, status)
            status, _ = get(api + "/metrics")
            assert status == 404
            text = get(coord.http + "/metrics")[1].decode()
            counts = {r: metric(text, "nodesmith_api_requests_total", {"result": r}) for r in
                      ("allowed", "unauthenticated", "forbidden")}
            assert counts == {"allowed": 2, "unauthenticated": 2, "forbidden": 2}, counts
            out = coord.proc.output()
            assert "API: system:serviceaccount:default:nobody may not get /nodesmith/api/v1/nodes" in out, out[-2000:]
            assert "API: a bearer token the API server does not know" in out
            print(f"F7. logged and counted: nodesmith_api_requests_total {counts}")
            print("F7. /metrics and /healthz open on http-listen; /api/v1 only on api-listen")

            # 3. unfinished headers
            port = int(api.rsplit(":", 1)[1])
            socks = []
            for i in range(1000):
                s = socket.socket()
                s.bind((f"127.0.{1 + i // 250}.{2 + i % 250}" if i % 2 else "127.0.9.9", 0))
                try:
                    s.connect(("127.0.0.1", port))
                    s.sendall(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                except OSError:
                    pass
                socks.append(s)
            t0 = time.time()

            def open_count():
                n = 0
                for s in socks:
                    s.setblocking(False)
                    try:
                        n += s.recv(1) != b""
                    except BlockingIOError:
                        n += 1
                    except OSError:
                        pass
                return n
            time.sleep(2)
            kept = open_count()
            assert kept <= 128, kept
            assert get(coord.http + "/metrics")[0] == 200
            assert get(api + "/api/v1/nodes", reader)[0] in (200, 503), "a real caller during the flood"
            wait_for("every unfinished request closed", lambda: mem.sample() and open_count() == 0, 45, 1)
            took = time.time() - t0
            for s in socks:
                s.close()
            mem.report(f"F7. 1000 connections with unfinished headers: {kept} kept after 2 s, all closed "
                       f"{took:.0f}s after they opened; /metrics answered throughout")
            assert get(api + "/api/v1/nodes", reader)[0] == 200

            np = json.loads(c.kubectl("get", "networkpolicy", "-n", "nodesmith", "nodesmith-coordinator", "-o", "json"))
            rules = np["spec"]["ingress"]
            open_ports = {p["port"] for r in rules if not r.get("from") for p in r["ports"]}
            api_rule = [r for r in rules if any(p["port"] == "api" for p in r["ports"])][0]
            assert open_ports == {"agents", "http"}, rules
            assert api_rule["from"] == [{"namespaceSelector": {"matchLabels": {"nodesmith.io/api-access": "true"}}}]
            print("F7. NetworkPolicy nodesmith-coordinator installed: agents and http from anywhere, api only from "
                  "namespaces labelled nodesmith.io/api-access=true")
            coord.proc.stop()
    print("test_http_api: OK")


if __name__ == "__main__":
    main()
