#!/usr/bin/env python3
"""The fault proxy (tests/fakes/kubeproxy.py) in front of the real kube-apiserver:

  1. identities pass through: a node's client certificate is that node upstream (the API server's
     SelfSubjectReview says system:node:NAME in system:nodes, and the Node authorizer still
     refuses it another node: 403), a ServiceAccount token is that ServiceAccount;
  2. a 429 window (`count` null, `seconds`) answers every match with Retry-After, then lapses;
     one rule is removed by its id;
  3. a slow answer takes its delay;
  4. open watches are cut on demand (the matching stream ends without its terminating chunk,
     the others stay open, and the client watches again from its last resourceVersion) and
     after N events (`dropWatchAfter`); the agent's HTTP/1.0 watch streams through unchunked;
  5. the API server restarted behind it: connections fail while it is down, requests succeed
     again after.

Run: python3 tests/integration/test_kubeproxy.py   (~40 s)"""
import http.client
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from cluster import Cluster  # noqa: E402
from nsharness import TestDir, binary, wait_for  # noqa: E402


def whoami(c, px, ident):
    st, out = c.api("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                    identity=ident, base=px.server)
    assert st == 201, (st, out)
    u = out["status"]["userInfo"]
    return u["username"], sorted(u.get("groups") or [])


def open_watch(c, px, path):
    """A watch through the proxy as admin: (connection, response)."""
    conn = http.client.HTTPSConnection("127.0.0.1", px.port, context=c.ssl_context(), timeout=30)
    conn.request("GET", path, headers={"Accept": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    return conn, resp


def main():
    with TestDir("kubeproxy") as d:
        c = Cluster(os.path.join(d, "cluster"))
        c.start()
        px = c.start_fault_proxy()

        # 1. identities
        node = c.node_identity("node-a")
        user, groups = whoami(c, px, node)
        assert user == "system:node:node-a" and "system:nodes" in groups, (user, groups)
        c.kubectl("create", "serviceaccount", "probe", "-n", "default")
        sa = c.service_account_identity("default", "probe")
        assert whoami(c, px, sa)[0] == "system:serviceaccount:default:probe"
        st, _ = c.api("GET", "/api/v1/nodes/node-b", identity=node, base=px.server)
        assert st == 403, st
        st, _ = c.api("GET", "/api/v1/namespaces", base=px.server)
        assert st == 200, st
        print(f"identities through the proxy: {user} {groups}, {whoami(c, px, sa)[0]}; node-a on node-b: 403")

        # 2. a 429 window
        r = px.fault(method="GET", path=r"/api/v1/namespaces/default/configmaps", status=429,
                     retryAfter=1, count=None, seconds=1.5)
        codes = [c.api("GET", "/api/v1/namespaces/default/configmaps", base=px.server) for _ in range(5)]
        assert [s for s, _ in codes] == [429] * 5, codes
        assert codes[0][1]["details"]["retryAfterSeconds"] == 1, codes[0]
        st, _ = c.api("GET", "/api/v1/namespaces/default/secrets", base=px.server)
        assert st == 200, st
        wait_for("the window to lapse", lambda: c.api(
            "GET", "/api/v1/namespaces/default/configmaps", base=px.server)[0] == 200, 10, 0.1)
        a = px.fault(path="/configmaps", status=500, count=None)
        b = px.fault(path="/secrets", status=503, count=None)
        px._call("DELETE", f"faults/{a['id']}")
        assert c.api("GET", "/api/v1/namespaces/default/configmaps", base=px.server)[0] == 200
        assert c.api("GET", "/api/v1/namespaces/default/secrets", base=px.server)[0] == 503
        assert [f["id"] for f in px._call("GET", "faults")["faults"]] == [r["id"], b["id"]]
        px.clear()
        print("429 window of 1.5 s with Retry-After, lapsed; one rule removed by id")

        # 3. slow answers
        px.fault(path="/api/v1/namespaces$", delay=1.5, count=1)
        t = time.monotonic()
        assert c.api("GET", "/api/v1/namespaces", base=px.server)[0] == 200
        slow = time.monotonic() - t
        t = time.monotonic()
        c.api("GET", "/api/v1/namespaces", base=px.server)
        fast = time.monotonic() - t
        assert slow >= 1.4 and fast < 1.0, (slow, fast)
        print(f"slow answer {slow:.2f}s, the next {fast:.2f}s")

        # 4. watches cut on demand and after N events
        rv = c.api("GET", "/api/v1/namespaces/default/configmaps")[1]["metadata"]["resourceVersion"]
        conn, resp = open_watch(c, px, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}")
        conn2, resp2 = open_watch(c, px, f"/api/v1/namespaces/default/secrets?watch=1&resourceVersion={rv}")
        got, ended = [], []

        def read_stream():
            try:
                got.append(json.loads(resp.readline()))
                resp.read()   # to the end: IncompleteRead when the last chunk never comes
                ended.append("clean")
            except (OSError, http.client.HTTPException, ValueError) as e:
                ended.append(type(e).__name__)
        t = threading.Thread(target=read_stream, daemon=True)
        t.start()
        wait_for("both watches open at the proxy", lambda: px.stats()["watchesOpen"] == 2, 10, 0.1)
        c.kubectl("create", "configmap", "before-cut", "-n", "default")
        wait_for("the event before the cut", lambda: got, 10, 0.1)
        dropped = px.drop_watches(r"configmaps")
        t.join(10)
        assert not t.is_alive() and len(dropped) == 1, (dropped, t.is_alive())
        # cut: the stream ends without its terminating chunk; the other watch stays open
        assert ended and ended[0] != "clean", ended
        assert px.stats()["watchesOpen"] == 1, px.stats()
        conn.close()
        conn2.close()
        # the client watches again from where it was and gets what happened since
        last = got[-1]["object"]["metadata"]["resourceVersion"]
        c.kubectl("delete", "configmap", "before-cut", "-n", "default")
        conn, resp = open_watch(c, px, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={last}")
        ev = json.loads(resp.readline())
        assert ev["type"] == "DELETED" and ev["object"]["metadata"]["name"] == "before-cut", ev
        conn.close()
        px.fault(path="watch=1", dropWatchAfter=2, count=1)
        conn, resp = open_watch(c, px, "/api/v1/namespaces/default/configmaps?watch=1")
        for i in range(4):
            c.kubectl("create", "configmap", f"cm{i}", "-n", "default")
        lines = []
        try:
            for line in iter(resp.readline, b""):
                lines.append(json.loads(line))
        except (OSError, http.client.HTTPException, ValueError):
            pass
        conn.close()
        assert len(lines) == 2 and all(x["type"] == "ADDED" for x in lines), lines
        print("watch cut on demand; a watch cut after 2 events")
        # the agent's HTTP backend watches with HTTP/1.0 (docs/http.md): streamed to the end of
        # the connection, never chunked
        kc = c.write_kubeconfig(os.path.join(d, "probe.kubeconfig"), c.admin, server=px.server)
        r = subprocess.run(["timeout", "4", binary("kubeprobe-nng"), "--kubeconfig", kc, "watch",
                            "/api/v1/namespaces/default/configmaps"], capture_output=True, text=True)
        assert "SYNCED" in r.stdout and "ERROR" not in r.stdout, r.stdout[-500:]
        print("the agent's HTTP/1.0 watch through the proxy: no error")

        # 5. the API server restarts behind the proxy
        th = threading.Thread(target=c.restart_apiserver, kwargs={"down": 2.0}, daemon=True)
        th.start()
        wait_for("requests fail while the API server is down",
                 lambda: _fails(c, px), 30, 0.1)
        th.join(150)
        wait_for("requests succeed again", lambda: c.api("GET", "/api/v1/namespaces",
                                                          base=px.server)[0] == 200, 60, 0.2)
        print(f"API server restarted behind the proxy; stats {px.stats()}")
        c.stop()
    print("PASS")


def _fails(c, px):
    try:
        return c.api("GET", "/api/v1/namespaces", base=px.server, timeout=3)[0] != 200
    except (OSError, http.client.HTTPException):
        return True


if __name__ == "__main__":
    main()
