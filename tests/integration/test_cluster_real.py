#!/usr/bin/env python3
"""The real control plane (tests/pylib/cluster.py) and the emulated kubelets
(tests/fakes/kubelet.py) behave as Kubernetes does where the old fake API server did not:

  1. The shipped manifests apply as they are (`kubectl apply -k packaging/kubernetes`), and a CEL
     rule of the NodePool CRD refuses a bad NodePool (the server's message names the rule).
  2. A new Node registers NotReady with node.kubernetes.io/not-ready:NoSchedule plus its startup
     taints; after its boot delay it is Ready and the real node lifecycle controller removes the
     not-ready taint (the startup taint stays).
  3. Authorisation: node A's certificate may not patch node B nor change its own taints (Node
     authorizer, NodeRestriction); an unprivileged ServiceAccount may not list Nodes; the
     coordinator's ServiceAccount may (RBAC from packaging/kubernetes).
  4. A PodDisruptionBudget's disruptionsAllowed comes from the real disruption controller.
  5. A deleted pod stays Terminating for its grace period (x the factor) and then goes.
  6. A kubelet that dies: the node lifecycle controller marks the Node Unknown, and a pod
     deleted there stays Terminating.
  7. Graceful node shutdown: NotReady, pods Failed with reason Terminated.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fakes"))
from cluster import Cluster  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from nsharness import TestDir, wait_for  # noqa: E402

GRACE_MONITOR = 6          # --node-monitor-grace-period of this cluster


def node_spec(name, taints=(), zone="us-east-1a"):
    return {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                     "kubernetes.io/arch": "amd64",
                                     "topology.kubernetes.io/zone": zone,
                                     "node.kubernetes.io/instance-type": "m6i.large"},
            "taints": list(taints), "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
            "providerID": f"aws:///{zone}/i-{abs(hash(name)) % 10**12:012d}",
            "internalIP": "10.0.0.1"}


def taint_keys(node):
    return sorted(t["key"] for t in node["spec"].get("taints") or [])


def ready_status(node):
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), None)


def kubelet(c, name, events, **kw):
    ident = c.node_identity(name)
    spec = node_spec(name, taints=kw.pop("taints", ()))
    return Kubelet(c.server, c.ca, ident.cert, ident.key, spec, log=events.append, **kw).start(), ident


def main():
    with TestDir("cluster-real") as d:
        events = []
        c = Cluster(os.path.join(d, "cluster"), node_monitor_grace=GRACE_MONITOR)
        secs = c.start()
        print(f"control plane start-up: {secs}s")
        assert secs < 240, secs

        # 1. manifests and CEL
        c.install_packaging()
        st, sa = c.api("GET", "/api/v1/namespaces/nodesmith/serviceaccounts/nodesmith-coordinator")
        assert st == 200, (st, sa)
        good = ("apiVersion: nodesmith.io/v1\nkind: NodePool\nmetadata: {name: ok}\nspec:\n"
                "  template:\n    spec:\n      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: d}\n"
                "      requirements:\n        - {key: nodesmith.io/capacity-type, operator: In, values: [spot]}\n")
        c.kubectl("apply", "-f", "-", input=good)
        bad = good.replace("name: ok", "name: bad").replace("values: [spot]", "values: []")
        r = c.kubectl("apply", "-f", "-", input=bad, check=False)
        assert r.returncode != 0, "a NodePool with `In` and no values was accepted"
        # the message of the CRD's rule `self.operator == 'In' ? self.values.size() != 0 : true`
        assert "requirements with operator 'In' must have a value defined" in r.stderr, r.stderr
        st, _ = c.api("GET", "/apis/nodesmith.io/v1/nodepools/bad")
        assert st == 404, st
        print(f"CEL refused the bad NodePool: {r.stderr.strip()[:200]}")

        # 2. registration: NotReady and tainted, then Ready and the not-ready taint removed
        t0 = time.monotonic()
        startup = {"key": "example.com/agent-not-ready", "value": "true", "effect": "NoSchedule"}
        ka, ida = kubelet(c, "node-a", events, boot_delay=3.0, grace_factor=1.0,
                          taints=[startup])
        first = wait_for("Node node-a", lambda: c.api("GET", "/api/v1/nodes/node-a")[1]
                         if c.api("GET", "/api/v1/nodes/node-a")[0] == 200 else None, 30, 0.05)
        assert ready_status(first) == "False", first["status"]
        assert "node.kubernetes.io/not-ready" in taint_keys(first), taint_keys(first)
        assert "example.com/agent-not-ready" in taint_keys(first), taint_keys(first)
        ready = wait_for("node-a Ready and untainted", lambda: (lambda n: n if ready_status(n) == "True"
                         and "node.kubernetes.io/not-ready" not in taint_keys(n) else None)(
                             c.api("GET", "/api/v1/nodes/node-a")[1]), 60, 0.2)
        took = time.monotonic() - t0
        assert took >= 2.5, f"Ready after {took:.1f}s, before the 3 s boot delay"
        assert taint_keys(ready) == ["example.com/agent-not-ready"], taint_keys(ready)
        st, lease = c.api("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a")
        assert st == 200 and lease["spec"]["holderIdentity"] == "node-a", (st, lease)
        print(f"node-a: NotReady + not-ready taint at registration, Ready and untainted after {took:.1f}s")

        kb, idb = kubelet(c, "node-b", events, boot_delay=0.5, grace_factor=1.0)
        wait_for("node-b Ready", lambda: ready_status(c.api("GET", "/api/v1/nodes/node-b")[1]) == "True", 60, 0.2)

        # 3. authorisation
        patch = {"spec": {"unschedulable": True}}
        st, out = c.api("PATCH", "/api/v1/nodes/node-b", patch, identity=ida,
                        ctype="application/strategic-merge-patch+json")
        assert st == 403, f"node-a patched node-b: HTTP {st} {out}"
        st, out = c.api("PATCH", "/api/v1/nodes/node-a", {"spec": {"taints": []}}, identity=ida,
                        ctype="application/merge-patch+json")
        assert st == 403, f"node-a removed its own taints: HTTP {st} {out}"
        c.kubectl("create", "serviceaccount", "nobody", "-n", "default")
        nobody = c.service_account_identity("default", "nobody")
        st, out = c.api("GET", "/api/v1/nodes", identity=nobody)
        assert st == 403, f"an unprivileged ServiceAccount listed nodes: HTTP {st}"
        coord = c.service_account_identity("nodesmith", "nodesmith-coordinator")
        st, out = c.api("GET", "/api/v1/nodes", identity=coord)
        assert st == 200 and len(out["items"]) == 2, st
        print("403 for node-a on node-b, node-a on its own taints, an unprivileged ServiceAccount")

        # 4. a PDB from the real disruption controller; both nodes run the pods
        c.kubectl("taint", "node", "node-a", "example.com/agent-not-ready-")
        c.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"terminationGracePeriodSeconds": 4, "containers": [{
                    "name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}))
        c.kubectl("create", "poddisruptionbudget", "web", "-n", "default", "--selector=app=web",
                  "--min-available=2")

        def pdb():
            st, p = c.api("GET", "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
            s = p.get("status", {})
            return s if s.get("currentHealthy") == 3 and s.get("observedGeneration") else None
        s = wait_for("PDB status from the disruption controller", pdb, 60, 0.3)
        assert s["disruptionsAllowed"] == 1 and s["desiredHealthy"] == 2, s
        print(f"PDB web: {s['currentHealthy']} healthy, disruptionsAllowed {s['disruptionsAllowed']}")

        # 5. grace period: the pod stays Terminating 4 s (factor 1) then goes
        pods = json.loads(c.kubectl("get", "pods", "-l", "app=web", "-o", "json"))["items"]
        victim = next(p for p in pods if p["spec"]["nodeName"] == "node-a")
        name = victim["metadata"]["name"]
        t0 = time.monotonic()
        st, _ = c.api("DELETE", f"/api/v1/namespaces/default/pods/{name}")
        assert st == 200, st

        def gone():
            st, p = c.api("GET", f"/api/v1/namespaces/default/pods/{name}")
            return st == 404 or p["metadata"]["uid"] != victim["metadata"]["uid"]
        time.sleep(2.0)
        assert not gone(), "the pod went before its grace period"
        wait_for("the pod to go after its grace period", gone, 30, 0.1)
        took = time.monotonic() - t0
        assert 3.5 <= took <= 20, took
        print(f"pod {name} (grace 4 s) went after {took:.1f}s")

        # 6. a dead kubelet: Unknown, pods stay Terminating
        ka.die()
        t0 = time.monotonic()
        wait_for("node-a Unknown", lambda: ready_status(c.api("GET", "/api/v1/nodes/node-a")[1]) == "Unknown",
                 GRACE_MONITOR + 60, 0.3)
        print(f"node-a Unknown {time.monotonic() - t0:.1f}s after its kubelet died "
              f"(node-monitor-grace-period {GRACE_MONITOR}s)")
        pods = json.loads(c.kubectl("get", "pods", "-l", "app=web", "-o", "json"))["items"]
        on_a = [p for p in pods if p["spec"].get("nodeName") == "node-a"
                and not p["metadata"].get("deletionTimestamp")]
        assert on_a, "no pod on node-a to delete"
        name = on_a[0]["metadata"]["name"]
        st, _ = c.api("DELETE", f"/api/v1/namespaces/default/pods/{name}")
        assert st == 200, st
        time.sleep(8)  # twice its grace period
        st, p = c.api("GET", f"/api/v1/namespaces/default/pods/{name}")
        assert st == 200 and p["metadata"].get("deletionTimestamp"), (st, p)
        print(f"pod {name} on the dead node still Terminating 8 s later")

        # 7. graceful node shutdown on node-b
        kb.shutdown(3)
        n = c.api("GET", "/api/v1/nodes/node-b")[1]
        assert ready_status(n) == "False", n["status"]["conditions"]
        pods = json.loads(c.kubectl("get", "pods", "-l", "app=web", "-o", "json",
                                    "--field-selector=spec.nodeName=node-b"))["items"]
        assert pods and all(p["status"]["phase"] == "Failed" and p["status"].get("reason") == "Terminated"
                            for p in pods), [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
        print(f"node-b shut down: NotReady, {len(pods)} pod(s) Failed/Terminated")
        for k in (ka, kb):
            k.stop()
        errors = sum(k.errors for k in (ka, kb))
        print(f"kubelet API errors: {errors}; events: {len(events)}")
        c.stop()
    print("PASS")


if __name__ == "__main__":
    main()
