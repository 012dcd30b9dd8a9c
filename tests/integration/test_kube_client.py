#!/usr/bin/env python3
"""The Kubernetes client (lib/kube*.c) against the fake API server, through tests/tools/kubeprobe.

get and typed errors; lists across pages with label and field selectors; a strategic-merge cordon
that kubectl sees; finalizers removed with a guarded JSON patch (and 422 when the guard fails);
delete preconditions; evictions (201, 429 DisruptionBudget, 500 with two PDBs, 404); Events;
429/5xx bursts and dropped connections retried (Retry-After honoured) and bounded; body caps;
a watch delivering ADDED/MODIFIED/DELETED, then a stream cut, a compacted history (410) and a
relist that delivers the difference before it continues; bearer tokens over TLS (CA file, CA
data in a kubeconfig, client certificate data, in-cluster service account) and a token file
rotated under a running watch."""
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, Proc, TestDir, binary, wait_for  # noqa: E402

FAKE = os.path.join(ROOT, "tests", "fakes", "kubeapi.py")
FAST = ["--backoff-base", "20", "--backoff-max", "500", "--deadline", "30"]
# lib/http.h's two backends (docs/http.md): libcurl (coordinator, nodesmithctl) and NNG's HTTP
# client (the agent); the whole test runs on each.
BACKENDS = os.environ.get("KUBEPROBES", "kubeprobe kubeprobe-nng").split()
PROBE = BACKENDS[0]


def start_fake(d, name, *extra):
    p = Proc(name, [sys.executable, FAKE, "--port", "0", "--log-level", "info", *extra], d)
    line = wait_for(f"{name} listening", lambda: next(
        (ln for ln in p.output().splitlines() if ln.startswith("listening on ")), None), 15)
    return p, int(line.rsplit(":", 1)[1])


def http(method, url, body=None, ctype="application/json"):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": ctype} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def probe(conn, *args, expect_rc=None, timeout=60):
    out = subprocess.run([binary(PROBE), *conn, *FAST, *args], capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode in (0, 1), f"kubeprobe {args}: rc {out.returncode}: {out.stderr}"
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if expect_rc is not None:
        assert out.returncode == expect_rc, f"kubeprobe {args}: {res}"
    return res


def names(res):
    return sorted(i["metadata"]["name"] for i in res["object"]["items"])


def watch_lines(proc):
    with open(proc.log_path, errors="replace") as f:  # also once the process is stopped
        text = f.read()
    return [ln for ln in text.splitlines() if ln.split(" ")[0] in
            ("ADDED", "MODIFIED", "DELETED", "SYNCED", "ERROR", "STATS")]


def wait_line(proc, pred, what, timeout=15):
    return wait_for(what, lambda: next((ln for ln in watch_lines(proc) if pred(ln)), None), timeout)


def make_tls(d):
    def run(*a):
        subprocess.run(a, cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
        "ca.crt", "-subj", "/CN=kube-test-ca", "-days", "2")
    with open(os.path.join(d, "ext"), "w") as f:
        # kubernetes.default.svc: what in-cluster clients check (lib/kube.h); localhost: the name
        # given with tls-server-name (NNG's mbedTLS matches DNS names only)
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n")
    for who in ("server", "client", "other"):
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{who}.key", "-out",
            f"{who}.csr", "-subj", f"/CN={who}")
        run("openssl", "x509", "-req", "-in", f"{who}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{who}.crt", "-days", "2", "-extfile", "ext")
    return {k: os.path.join(d, k) for k in ("ca.crt", "server.crt", "server.key", "client.crt",
                                            "client.key", "other.key")}


def b64file(path):
    import base64
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def main():
    global PROBE
    for PROBE in BACKENDS:
        print(f"--- {PROBE}")
        run()


def run():
    with TestDir(f"kube-client-{PROBE}") as d:
        # idle connections closed after 0.5 s: requests after a Retry-After or a backoff find
        # their kept connection closed and must go again on a new one
        fake, port = start_fake(d, "kubeapi", "--node", "n1", "--node", "n2", "--grace-scale", "0.05",
                                "--ready-delay", "0.1", "--bookmark-interval", "0.5", "--idle-timeout", "0.5")
        base = f"http://127.0.0.1:{port}"
        conn = ["--server", base]
        kubeconfig = os.path.join(d, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write(f"apiVersion: v1\nkind: Config\nclusters: [{{name: fake, cluster: {{server: '{base}'}}}}]\n"
                    "contexts: [{name: fake, context: {cluster: fake, user: u}}]\n"
                    "current-context: fake\nusers: [{name: u, user: {}}]\n")

        def kubectl(*a):
            return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *a], capture_output=True,
                                  text=True, timeout=30, check=True).stdout

        # --- get and typed errors ------------------------------------------------------------
        r = probe(conn, "get", "/api/v1/nodes/n1", expect_rc=0)
        assert r["object"]["metadata"]["name"] == "n1" and r["attempts"] == 1, r
        r = probe(conn, "get", "/api/v1/nodes/nope", expect_rc=1)
        assert (r["errno"], r["http"], r["reason"], r["attempts"]) == ("ENOENT", 404, "NotFound", 1), r
        assert 'nodes "nope" not found' in r["message"], r

        # --- create, lists across pages, selectors -------------------------------------------
        assert http("POST", base + "/api/v1/namespaces", {"metadata": {"name": "w"}})[0] == 201
        for i in range(12):
            cm = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": f"cm-{i:02d}", "labels": {"tier": "a" if i % 2 == 0 else "b"}},
                  "data": {"i": str(i)}}
            probe(conn, "create", "/api/v1/namespaces/default/configmaps", json.dumps(cm), expect_rc=0)
        r = probe(conn, "create", "/api/v1/namespaces/default/configmaps",
                  json.dumps({"metadata": {"name": "cm-00"}}), expect_rc=1)
        assert (r["errno"], r["http"], r["reason"]) == ("EEXIST", 409, "AlreadyExists"), r
        r = probe(conn, "--limit", "5", "list", "/api/v1/namespaces/default/configmaps", expect_rc=0)
        cms = [n for n in names(r) if n.startswith("cm-")]
        assert cms == [f"cm-{i:02d}" for i in range(12)], names(r)
        assert r["attempts"] >= 3, r["attempts"]  # >= 12 items in pages of 5
        assert r["object"]["kind"] == "ConfigMapList" and r["object"]["metadata"]["resourceVersion"]
        r = probe(conn, "--limit", "2", "-l", "tier=a", "list", "/api/v1/namespaces/default/configmaps",
                  expect_rc=0)
        assert names(r) == [f"cm-{i:02d}" for i in range(0, 12, 2)] and r["attempts"] == 3, r["attempts"]
        r = probe(conn, "--field-selector", "metadata.name=cm-07", "list",
                  "/api/v1/namespaces/default/configmaps", expect_rc=0)
        assert names(r) == ["cm-07"], names(r)
        r = probe(conn, "--field-selector", "data.i=3", "list", "/api/v1/namespaces/default/configmaps",
                  expect_rc=1)
        assert r["errno"] == "EINVAL" and r["http"] == 400 and "not supported" in r["message"], r
        # a page that fails once is retried, the list still complete
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "configmaps.*continue=",
                                              "count": 1, "status": 500})
        r = probe(conn, "--limit", "5", "list", "/api/v1/namespaces/default/configmaps", expect_rc=0)
        assert len([n for n in names(r) if n.startswith("cm-")]) == 12 and r["attempts"] == 4, r["attempts"]
        print("get, create, paginated lists with selectors: ok")

        # --- cordon (strategic merge), visible to kubectl -----------------------------------------
        probe(conn, "cordon", "n1", expect_rc=0)
        assert kubectl("get", "node", "n1", "-o", "jsonpath={.spec.unschedulable}") == "true"
        assert "SchedulingDisabled" in kubectl("get", "node", "n1")
        r = probe(conn, "uncordon", "n1", expect_rc=0)
        assert "unschedulable" not in r["object"]["spec"], r["object"]["spec"]
        assert kubectl("get", "node", "n1", "-o", "jsonpath={.spec.unschedulable}") == ""
        print("cordon/uncordon seen by kubectl: ok")

        # --- finalizers: delete keeps the object; a guarded JSON patch removes ours ---------------
        cm = {"metadata": {"name": "held", "finalizers": ["example.com/keep", "nodesmith.io/termination"]}}
        r = probe(conn, "create", "/api/v1/namespaces/default/configmaps", json.dumps(cm), expect_rc=0)
        uid = r["object"]["metadata"]["uid"]
        r = probe(conn, "--uid", "not-the-uid", "delete", "/api/v1/namespaces/default/configmaps/held",
                  expect_rc=1)
        assert (r["errno"], r["http"]) == ("EBUSY", 409), r
        r = probe(conn, "--uid", uid, "delete", "/api/v1/namespaces/default/configmaps/held", expect_rc=0)
        assert r["http"] in (200, 202) and r["object"]["metadata"].get("deletionTimestamp"), r
        # the guard fails (index 0 holds another finalizer): 422, nothing removed, not retried
        bad = json.dumps([{"op": "test", "path": "/metadata/finalizers/0", "value": "nodesmith.io/termination"},
                          {"op": "remove", "path": "/metadata/finalizers/0"}])
        r = probe(conn, "patch", "/api/v1/namespaces/default/configmaps/held", "json", bad, expect_rc=1)
        assert (r["errno"], r["http"], r["reason"], r["attempts"]) == ("EINVAL", 422, "Invalid", 1), r
        r = probe(conn, "unfinalize", "/api/v1/namespaces/default/configmaps/held", "nodesmith.io/termination",
                  expect_rc=0)
        assert r["object"]["metadata"]["finalizers"] == ["example.com/keep"], r["object"]["metadata"]
        r = probe(conn, "unfinalize", "/api/v1/namespaces/default/configmaps/held", "example.com/keep",
                  expect_rc=0)
        wait_for("held is gone", lambda: probe(conn, "get", "/api/v1/namespaces/default/configmaps/held")
                 ["errno"] == "ENOENT", 10)
        # merge patch
        r = probe(conn, "patch", "/api/v1/namespaces/default/configmaps/cm-01", "merge",
                  '{"data":{"extra":"yes","i":null}}', expect_rc=0)
        assert r["object"]["data"] == {"extra": "yes"}, r["object"]["data"]
        print("finalizers, preconditions, JSON patch guard (422), merge patch: ok")

        # --- eviction ------------------------------------------------------------------------
        def pod(name, app):
            return {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "labels": {"app": app}},
                    "spec": {"nodeName": "n2", "terminationGracePeriodSeconds": 1,
                             "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
        for name, app in (("web-0", "web"), ("web-1", "web"), ("free-0", "free")):
            probe(conn, "create", "/api/v1/namespaces/default/pods", json.dumps(pod(name, app)), expect_rc=0)

        def ready(name):
            st = probe(conn, "get", f"/api/v1/namespaces/default/pods/{name}")["object"].get("status", {})
            return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))
        for name in ("web-0", "web-1", "free-0"):
            wait_for(f"{name} Ready", lambda n=name: ready(n), 15)
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}
        probe(conn, "create", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", json.dumps(pdb),
              expect_rc=0)

        def pdb_ready(name):
            o = probe(conn, "get", f"/apis/policy/v1/namespaces/default/poddisruptionbudgets/{name}")["object"]
            st = o.get("status", {})
            return st.get("observedGeneration") == o["metadata"].get("generation") and st.get("currentHealthy") == 2
        wait_for("PDB web observed", lambda: pdb_ready("web"), 15)

        r = probe(conn, "--grace", "1", "evict", "default", "free-0", expect_rc=0)
        assert r["result"] == "accepted" and r["http"] in (200, 201), r
        o = probe(conn, "get", "/api/v1/namespaces/default/pods/free-0")["object"]
        assert o is None or "deletionTimestamp" in o.get("metadata", {}), o
        r = probe(conn, "evict", "default", "web-0", expect_rc=1)
        assert (r["result"], r["http"], r["cause"], r["attempts"]) == ("blocked", 429, "DisruptionBudget", 1), r
        assert "disruption budget" in r["message"], r
        pdb["metadata"]["name"] = "web-too"
        probe(conn, "create", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", json.dumps(pdb),
              expect_rc=0)
        wait_for("PDB web-too observed", lambda: pdb_ready("web-too"), 15)
        r = probe(conn, "evict", "default", "web-0", expect_rc=1)
        assert (r["result"], r["http"], r["attempts"]) == ("multiple-pdbs", 500, 1), r
        r = probe(conn, "evict", "default", "nobody", expect_rc=1)
        assert r["result"] == "not-found" and r["http"] == 404, r
        ev = http("GET", base + "/_fake/evictions")[1]
        assert not ev["violations"], ev["violations"]
        print("eviction: 201, 429 DisruptionBudget, 500 two PDBs, 404: ok")

        # --- events --------------------------------------------------------------------------
        r = probe(conn, "--event-type", "Warning", "event", "", "Node", "n1", "Cordoned",
                  "nodesmith cordoned the node before termination", expect_rc=0)
        assert r["http"] == 201, r
        r = probe(conn, "--field-selector", "involvedObject.name=n1,reason=Cordoned", "list",
                  "/api/v1/namespaces/default/events", expect_rc=0)
        evs = r["object"]["items"]
        assert len(evs) == 1 and evs[0]["type"] == "Warning" and evs[0]["involvedObject"]["kind"] == "Node", evs
        assert evs[0]["source"]["component"] == "kubeprobe" and evs[0]["count"] == 1, evs
        print("events: ok")

        # --- retries --------------------------------------------------------------------------
        http("DELETE", base + "/_fake/faults")
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "/api/v1/nodes/n2$", "count": 2,
                                              "status": 429, "retryAfter": 1})
        r = probe(conn, "get", "/api/v1/nodes/n2", expect_rc=0)
        assert r["attempts"] == 3 and r["elapsedMs"] >= 1900, r  # Retry-After: 1, twice
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "/api/v1/nodes/n2$", "count": 3,
                                              "status": 500})
        r = probe(conn, "get", "/api/v1/nodes/n2", expect_rc=0)
        assert r["attempts"] == 4 and r["elapsedMs"] < 1900, r
        http("POST", base + "/_fake/faults", {"method": "PATCH", "path": "/api/v1/nodes/n2$", "count": 1,
                                              "close": True})
        r = probe(conn, "cordon", "n2", expect_rc=0)
        assert r["attempts"] == 2 and r["object"]["spec"]["unschedulable"] is True, r
        probe(conn, "uncordon", "n2", expect_rc=0)
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "/api/v1/nodes/n2$", "count": 10,
                                              "status": 503})
        r = probe(conn, "--max-attempts", "3", "get", "/api/v1/nodes/n2", expect_rc=1)
        assert (r["errno"], r["http"], r["attempts"]) == ("EIO", 503, 3), r
        http("DELETE", base + "/_fake/faults")
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "/api/v1/nodes/n2$", "count": 10,
                                              "status": 429, "retryAfter": 5})
        r = probe(conn, "--deadline", "2", "get", "/api/v1/nodes/n2", expect_rc=1)
        assert (r["errno"], r["http"], r["attempts"]) == ("EAGAIN", 429, 1), r  # 5 s would pass the deadline
        faults = http("GET", base + "/_fake/faults")[1]
        faults = faults.get("faults", faults) if isinstance(faults, dict) else faults
        assert [f["matched"] for f in faults] == [1], faults
        http("DELETE", base + "/_fake/faults")
        r = probe(conn, "--max-body", "2000", "list", "/api/v1/nodes", expect_rc=1)
        assert r["errno"] == "EFBIG", r
        print("retries (429 with Retry-After, 500, dropped connection), attempts and deadline bounds, body cap: ok")

        # --- watch: events, a cut stream, compaction, relist ---------------------------------------
        ns = "/api/v1/namespaces/w/configmaps"
        for i in range(3):
            probe(conn, "create", ns, json.dumps({"metadata": {"name": f"w{i}"}, "data": {"v": "0"}}), expect_rc=0)
        w = Proc("watch", [binary(PROBE), *conn, *FAST, "--limit", "2", "watch", ns], d)
        wait_line(w, lambda ln: ln == "SYNCED n=3", "first SYNCED")
        added = [ln.split()[1] for ln in watch_lines(w) if ln.startswith("ADDED")]
        assert sorted(added) == ["w/w0", "w/w1", "w/w2"], watch_lines(w)
        probe(conn, "create", ns, json.dumps({"metadata": {"name": "w3"}}), expect_rc=0)
        wait_line(w, lambda ln: ln.startswith("ADDED w/w3 "), "ADDED w3")
        r = probe(conn, "patch", f"{ns}/w1", "merge", '{"data":{"v":"1"}}', expect_rc=0)
        rv = r["object"]["metadata"]["resourceVersion"]
        line = wait_line(w, lambda ln: ln.startswith("MODIFIED w/w1 "), "MODIFIED w1")
        assert f"rv={rv}" in line, line
        probe(conn, "delete", f"{ns}/w0", expect_rc=0)
        wait_line(w, lambda ln: ln == "DELETED w/w0", "DELETED w0")

        w.stop()
        # a new watcher whose first stream is cut at once and whose reconnect waits 3 s in the
        # server, while objects change and the history is compacted
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "configmaps.*watch=1", "count": 1,
                                              "dropWatchAfter": 0})
        http("POST", base + "/_fake/faults", {"method": "GET", "path": "configmaps.*watch=1", "count": 1,
                                              "delay": 3})
        w2 = Proc("watch2", [binary(PROBE), *conn, *FAST, "watch", ns], d)
        wait_line(w2, lambda ln: ln == "SYNCED n=3", "watch2 SYNCED")

        def fault_matched(i):
            f = http("GET", base + "/_fake/faults")[1]
            f = f.get("faults", f) if isinstance(f, dict) else f
            return f[i]["matched"] == 1
        wait_for("the reconnect waiting in the server", lambda: fault_matched(1), 10)
        probe(conn, "create", ns, json.dumps({"metadata": {"name": "w4"}}), expect_rc=0)
        probe(conn, "patch", f"{ns}/w2", "merge", '{"data":{"v":"2"}}', expect_rc=0)
        probe(conn, "delete", f"{ns}/w3", expect_rc=0)
        http("POST", base + "/_fake/compact")
        wait_line(w2, lambda ln: ln == "SYNCED n=3" and watch_lines(w2).count("SYNCED n=3") >= 2,
                  "SYNCED after the relist", 15)
        lines = watch_lines(w2)
        second = lines[lines.index("SYNCED n=3") + 1:]
        assert any(ln.startswith("ADDED w/w4 ") for ln in second), lines
        assert any(ln.startswith("MODIFIED w/w2 ") for ln in second), lines
        assert "DELETED w/w3" in second, lines
        assert not any(ln.startswith(("ADDED w/w1", "MODIFIED w/w1")) for ln in second), lines
        # and it continues watching
        probe(conn, "create", ns, json.dumps({"metadata": {"name": "w5"}}), expect_rc=0)
        wait_line(w2, lambda ln: ln.startswith("ADDED w/w5 "), "ADDED w5 after the relist")
        time.sleep(1.2)  # a bookmark or two
        w2.stop()
        stats = json.loads(wait_line(w2, lambda ln: ln.startswith("STATS "), "STATS")[6:])
        assert stats["relists"] == 1 and stats["lists"] == 2 and stats["watches"] >= 3, stats
        assert stats["bookmarks"] >= 1 and stats["size"] == 4, stats
        print("watch: ADDED/MODIFIED/DELETED, cut stream, 410 relist with the difference, continues: ok")
        http("DELETE", base + "/_fake/faults")
        fake.stop()

        # --- TLS and bearer tokens ------------------------------------------------------------
        tls = make_tls(d)
        token = os.urandom(16).hex()
        fake, port = start_fake(d, "kubeapi-tls", "--node", "n1", "--token", token,
                                "--tls-cert", tls["server.crt"], "--tls-key", tls["server.key"])
        url = f"https://127.0.0.1:{port}"
        # the address is in the certificate; mbedTLS needs the DNS name beside it
        sn = ["--tls-server-name", "localhost"] if PROBE.endswith("-nng") else []
        r = probe(["--server", url, "--ca", tls["ca.crt"], "--token", token, *sn], "get", "/api/v1/nodes/n1",
                  expect_rc=0)
        assert r["object"]["metadata"]["name"] == "n1"
        r = probe(["--server", url, "--ca", tls["ca.crt"], *sn], "get", "/api/v1/nodes/n1", expect_rc=1)
        assert (r["errno"], r["http"], r["reason"]) == ("EPERM", 401, "Unauthorized"), r
        r = probe(["--server", url, "--token", token, *sn], "get", "/api/v1/nodes/n1", expect_rc=1)
        assert r["errno"] == "EKEYREJECTED" and r["http"] == 0 and r["attempts"] == 1, r

        def kc(path, user):
            with open(path, "w") as f:
                json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                           "clusters": [{"name": "k", "cluster": {"server": url, "tls-server-name": "localhost",
                                                                  "certificate-authority-data": b64file(tls["ca.crt"])}}],
                           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                           "users": [{"name": "u", "user": user}]}, f)
            return path
        good = kc(os.path.join(d, "kc-good"), {"token": token, "client-certificate-data": b64file(tls["client.crt"]),
                                               "client-key-data": b64file(tls["client.key"])})
        r = probe(["--kubeconfig", good], "get", "/api/v1/nodes/n1", expect_rc=0)
        assert r["object"]["metadata"]["name"] == "n1"
        # the client key is really loaded: a key that does not match the certificate fails
        bad = kc(os.path.join(d, "kc-bad"), {"token": token, "client-certificate-data": b64file(tls["client.crt"]),
                                             "client-key-data": b64file(tls["other.key"])})
        r = probe(["--kubeconfig", bad], "get", "/api/v1/nodes/n1", expect_rc=1)
        assert r["http"] == 0 and r["errno"] in ("EKEYREJECTED", "EIO"), r

        # in-cluster service account
        sa = os.path.join(d, "sa")
        os.makedirs(sa)
        with open(os.path.join(sa, "token"), "w") as f:
            f.write(token + "\n")
        with open(os.path.join(sa, "namespace"), "w") as f:
            f.write("default")
        with open(tls["ca.crt"]) as src, open(os.path.join(sa, "ca.crt"), "w") as dst:
            dst.write(src.read())
        env = dict(os.environ, KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(port))
        out = subprocess.run([binary(PROBE), f"--in-cluster={sa}", "get", "/api/v1/nodes/n1"],
                             capture_output=True, text=True, timeout=30, env=env)
        assert out.returncode == 0 and json.loads(out.stdout)["object"]["metadata"]["name"] == "n1", out

        # a token file rotated under a running watch: refused first, then used without a restart
        tf = os.path.join(d, "rotating-token")
        with open(tf, "w") as f:
            f.write("expired-token\n")
        w = Proc("watch-tls", [binary(PROBE), "--server", url, "--ca", tls["ca.crt"], "--token-file", tf, *sn,
                               *FAST, "watch", "/api/v1/nodes"], d)
        wait_line(w, lambda ln: ln.startswith("ERROR EPERM"), "401 with the old token")
        with open(tf + ".new", "w") as f:
            f.write(token + "\n")
        os.rename(tf + ".new", tf)
        wait_line(w, lambda ln: ln == "SYNCED n=1", "SYNCED with the rotated token", 15)
        w.stop()
        print("TLS: CA file, kubeconfig CA/client data, in-cluster, 401, token rotation: ok")
        fake.stop()


if __name__ == "__main__":
    main()
