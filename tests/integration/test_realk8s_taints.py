#!/usr/bin/env python3
"""New Nodes arrive NotReady and tainted (issue 16, point 1), on the real control plane.

A real kubelet registers its Node with `node.kubernetes.io/not-ready:NoSchedule`, on EKS
(`--cloud-provider=external`) also `node.cloudprovider.kubernetes.io/uninitialized:NoSchedule`,
plus the NodePool's startupTaints from the user data. The coordinator must keep counting such an
instance as in flight, and read those taints as temporary, until the Node is initialized;
otherwise the pending pods look unplaceable and a second instance is launched.

Three sub-runs, the emulated kubelets going Ready 1 s, 15 s and 60 s after registering. Each
scales up pods that only its own NodePool's nodes take, so that `nodesmithctl simulate` of the
same pods and NodePool is the plan the coordinator must make. The test plays the two other
parties that untaint a new Node: the cloud controller manager (uninitialized, once the Node is
registered) and the NodePool's startup DaemonSet (its startupTaint, once the Node is Ready).
Checked: every pod Running, and CreateFleet (counted at the EC2 proxy) launched exactly the
planned instances, nothing more, also a few seconds after the pods run.

Run time here: about 2.5 minutes (control plane start-up included).
"""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, TestDir, binary, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import node_class_yaml, start_real  # noqa: E402

CLUSTER = "taints-test"
CATALOG = os.path.join(ROOT, "data", "catalog-us-east-1.json")
STARTUP_TAINT = "example.com/cni-not-ready"
UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
READY_DELAYS = (1, 15, 60)
PODS = 6

NODECLASS = node_class_yaml(CLUSTER)


def nodepool(run):
    return f"""
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {{name: {run}}}
spec:
  disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: Never}}
  template:
    metadata: {{labels: {{subrun: {run}}}}}
    spec:
      nodeClassRef: {{group: nodesmith.io, kind: EC2NodeClass, name: default}}
      startupTaints: [{{key: {STARTUP_TAINT}, value: "true", effect: NoSchedule}}]
      requirements:
        - {{key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}}
        - {{key: nodesmith.io/instance-category, operator: In, values: [c, m]}}
        - {{key: nodesmith.io/instance-size, operator: In, values: [large]}}
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
"""


def deployment(run, replicas):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": run, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": run}},
                     "template": {"metadata": {"labels": {"app": run}}, "spec": {
                         "nodeSelector": {"subrun": run},
                         "containers": [{"name": "app", "image": "registry.example/app",
                                         "resources": {"requests": {"cpu": "700m", "memory": "1Gi"}}}]}}}}


def simulate(workdir, run):
    pf, nf = os.path.join(workdir, f"{run}-pods.json"), os.path.join(workdir, f"{run}-pools.yaml")
    with open(pf, "w") as f:
        json.dump(deployment(run, PODS), f)
    with open(nf, "w") as f:
        f.write(NODECLASS + "---" + nodepool(run))
    out = subprocess.run([binary("nodesmithctl"), "simulate", "--catalog", CATALOG, "--pods", pf,
                          "--nodepools", nf, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class Untainter(threading.Thread):
    """The parties that untaint a new Node on EKS: the cloud controller manager removes
    `uninitialized` once the Node is registered, the NodePool's startup DaemonSet removes the
    startupTaint once the Node is Ready. Records when each Node registered and went Ready."""

    def __init__(self, s, ccm_delay=0.5):
        super().__init__(daemon=True)
        self.s, self.ccm_delay = s, ccm_delay
        self.stop_evt = threading.Event()
        self.seen = {}       # node -> {"registered", "ready", "taints at registration"}
        self.errors = []

    def _untaint(self, node, key):
        taints = [t for t in node["spec"].get("taints") or [] if t["key"] != key]
        st, out = self.s.api("PATCH", f"/api/v1/nodes/{node['metadata']['name']}",
                             [{"op": "test", "path": "/metadata/resourceVersion",
                               "value": node["metadata"]["resourceVersion"]},
                              {"op": "replace", "path": "/spec/taints", "value": taints}],
                             ctype="application/json-patch+json")
        if st not in (200, 409, 422, 404):
            self.errors.append(f"untaint {key}: HTTP {st} {str(out)[:200]}")

    def run(self):
        while not self.stop_evt.wait(0.2):
            st, lst = self.s.api("GET", "/api/v1/nodes")
            if st != 200:
                continue
            now = time.monotonic()
            for n in lst["items"]:
                name = n["metadata"]["name"]
                keys = [t["key"] for t in n["spec"].get("taints") or []]
                rec = self.seen.setdefault(name, {"registered": now, "ready": None, "taints": keys})
                ready = any(c["type"] == "Ready" and c["status"] == "True"
                            for c in n["status"].get("conditions") or [])
                if ready and rec["ready"] is None:
                    rec["ready"] = now
                if UNINITIALIZED in keys and now - rec["registered"] >= self.ccm_delay:
                    self._untaint(n, UNINITIALIZED)
                elif STARTUP_TAINT in keys and ready:
                    self._untaint(n, STARTUP_TAINT)


def fleets(s, since):
    """CreateFleet calls after seq `since` that launched instances: [(seq, [instance types])]."""
    out = []
    for e in s.proxy("GET", f"log?action=CreateFleet&since={since}")["calls"]:
        types = [p["instance_type"] for p in e.get("pools", []) for _ in p.get("instances", [])]
        if e.get("instance_ids") and not e.get("replayed"):
            out.append((e["seq"], types))
    return out


def last_seq(s):
    return max([e["seq"] for e in s.proxy("GET", "log")["calls"]] + [0])


def running(s, run):
    return [p for p in s.pods("default") if p["metadata"]["labels"].get("app") == run
            and p["status"].get("phase") == "Running"]


def main():
    with TestDir("realk8s-taints") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run_all(s, d)
    print("test_realk8s_taints: OK")


def run_all(s, d):
    t_start = time.monotonic()
    start_real(s, NODECLASS + "---" + "---".join(nodepool(f"r{delay}") for delay in READY_DELAYS),
               kube={"external_cloud_provider": True}, emulator={"ready_delay": READY_DELAYS[0]})
    unt = Untainter(s)
    unt.start()
    try:
        for delay in READY_DELAYS:
            subrun(s, d, unt, delay)
    finally:
        unt.stop_evt.set()
        unt.join(5)
    assert not unt.errors, unt.errors
    print(f"test_realk8s_taints: {time.monotonic() - t_start:.0f}s in all")


def subrun(s, d, unt, delay):
    run = f"r{delay}"
    s.emu("POST", "settings", {"readyDelay": delay})
    plan = simulate(d, run)
    planned = sorted(l["instanceType"] for l in plan["launches"])
    assert len(planned) >= 2 and not plan["unschedulable"], plan
    since = last_seq(s)
    t0 = time.monotonic()
    s.apply(json.dumps(deployment(run, PODS)))
    wait_for(f"{PODS} {run} pods Running", lambda: len(running(s, run)) == PODS, delay + 120, 0.5)
    took = time.monotonic() - t0
    time.sleep(5)   # a late second launch would come within a batch window or two
    got = fleets(s, since)
    launched = sorted(t for _, ts in got for t in ts)
    nodes = {n: v for n, v in s.nodes().items() if v["metadata"]["labels"].get("subrun") == run}
    regs = [unt.seen.get(n, {}) for n in nodes]
    tainted = all(set(r.get("taints") or []) >= {"node.kubernetes.io/not-ready", UNINITIALIZED,
                                                  STARTUP_TAINT} for r in regs)
    waits = [r["ready"] - r["registered"] for r in regs if r.get("ready")]
    print(f"ready delay {delay:>2}s: {PODS} pods Running after {took:.1f}s on {len(nodes)} node(s); "
          f"plan {planned}, CreateFleet launched {launched} in {len(got)} call(s); Nodes registered "
          f"with not-ready+uninitialized+startup taints: {tainted}; registration->Ready "
          f"{min(waits, default=0):.1f}-{max(waits, default=0):.1f}s")
    assert tainted, regs
    assert waits and min(waits) >= delay * 0.8, waits
    assert launched == planned, (launched, planned)
    assert len(nodes) == len(planned), sorted(nodes)


if __name__ == "__main__":
    main()
