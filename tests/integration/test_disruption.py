#!/usr/bin/env python3
"""Disruption on the local stack (moto behind tests/fakes/ec2proxy.py, the node emulator with a
real agent per node, the fake API server with its eviction audit):
  1. Scale-in: 60 pods on several nodes scaled to 10: the nodes consolidate down one at a time
     (NodePool budget nodes: "1"), every pod keeps running, no PDB is violated (the fake API
     server's audit), and the cost falls to what the solver's fresh plan for the 10 pods costs
     (within the consolidation threshold a replace must beat).
  2. do-not-disrupt: a pod annotated karpenter.sh/do-not-disrupt keeps its node through the
     next scale-in (the pod is never moved), and `nodesmithctl explain NODE` says why.
  3. Drift: the EC2NodeClass's amiSelectorTerms changed to another image: every node is
     replaced (new node first, then the old one drained), one at a time under the budget,
     and the new instances run the new image.
"""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, TestDir, binary, http_get, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

CLUSTER = "disrupt-test"
CATALOG = os.path.join(ROOT, "data", "catalog-us-east-1.json")
THRESHOLD = 0.15  # the default consolidationThreshold


def nodeclass(ami_terms):
    return f"""
apiVersion: nodesmith.io/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  amiFamily: AL2023
  amiSelectorTerms: {ami_terms}
  role: nodesmith-node
  subnetSelectorTerms: [{{tags: {{nodesmith.io/discovery: {CLUSTER}}}}}]
  securityGroupSelectorTerms: [{{tags: {{nodesmith.io/discovery: {CLUSTER}}}}}]
"""


# small on-demand nodes (2 or 4 vCPU), so that 60 pods need several
NODEPOOL = """
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      requirements:
        - {key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}
        - {key: nodesmith.io/instance-category, operator: In, values: [c, m]}
        - {key: nodesmith.io/instance-cpu, operator: In, values: ["2", "4"]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
    budgets: [{nodes: "1"}]
"""


def web(replicas):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "registry.example/web",
                                                           "resources": {"requests": {"cpu": "250m",
                                                                                      "memory": "256Mi"}}}]}}}}


def keeper(node):
    """One pod that asks not to be disrupted, on the given node."""
    d = web(1)
    d["metadata"]["name"] = "keeper"
    d["spec"]["selector"]["matchLabels"] = {"app": "keeper"}
    t = d["spec"]["template"]
    t["metadata"] = {"labels": {"app": "keeper"}, "annotations": {"karpenter.sh/do-not-disrupt": "true"}}
    t["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}
    return d


PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
       "metadata": {"name": "web", "namespace": "default"},
       "spec": {"minAvailable": "80%", "selector": {"matchLabels": {"app": "web"}}}}


def docs(*objs):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def prices():
    with open(CATALOG) as f:
        return {t["name"]: t["on_demand_price"] for t in json.load(f)["instance_types"]}


def plan_cost(d, replicas):
    """What `nodesmithctl simulate` would launch for the pods on an empty cluster."""
    pf, nf = os.path.join(d, "plan-pods.json"), os.path.join(d, "plan-pools.yaml")
    with open(pf, "w") as f:
        f.write(docs(web(replicas)))
    with open(nf, "w") as f:
        f.write(nodeclass("[{alias: al2023@latest}]") + "---" + NODEPOOL)
    out = subprocess.run([binary("nodesmithctl"), "simulate", "--catalog", CATALOG, "--pods", pf,
                          "--nodepools", nf, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    return sum(l["price"] for l in plan["launches"]), [l["instanceType"] for l in plan["launches"]]


def running(s, app="web"):
    return [p for p in s.pods("default") if p["metadata"].get("labels", {}).get("app") == app
            and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def pending(s):
    return [p for p in s.pods("default") if p["status"].get("phase") == "Pending"]


class Watcher:
    """Samples, every 0.3 s, how many of the pool's nodes are disrupting at once: told to drain
    (the coordinator's /api/v1/nodes) or being replaced (nodesmith_nodes_replacing)."""

    def __init__(self, s):
        self.s, self.max, self.samples, self.stop = s, 0, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                nodes = json.loads(http_get(self.s.coordinator_http + "/api/v1/nodes")[1])["items"]
                draining = sum(1 for n in nodes if n.get("action") == "drain")
                replacing = metric(http_get(self.s.coordinator_http + "/metrics")[1], "nodesmith_nodes_replacing") or 0
                self.max = max(self.max, draining + int(replacing))
                self.samples += 1
            except Exception:
                pass
            self.stop.wait(0.3)

    def done(self):
        self.stop.set()
        self.t.join(5)
        return self.max


def audit(s):
    """Every eviction, and those that broke a PDB (kube-apiserver's audit log)."""
    return s.eviction_audit()


def cluster_cost(s, price):
    inst = s.instances(cluster_only=True, states=["pending", "running"])
    return sum(price[i["InstanceType"]] for i in inst.values()), inst


def settle(s, what, until, timeout, quiet=12):
    """Waits until `until()` holds and the set of running instances has not changed for `quiet`
    seconds (consolidation ended, not paused between two steps)."""
    t0, last, since = time.monotonic(), None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        ids = tuple(sorted(s.instances(cluster_only=True, states=["pending", "running"])))
        if ids != last:
            last, since = ids, time.monotonic()
        if until() and time.monotonic() - since >= quiet:
            return time.monotonic() - t0
        time.sleep(1)
    explain = subprocess.run([binary("nodesmithctl"), "explain", "--coordinator", s.coordinator_http],
                             capture_output=True, text=True, timeout=10).stdout
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{explain}")


def main():
    with TestDir("disruption") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s, d)
    print("test_disruption: OK")


def run(s, d):
    price = prices()
    s.start_ec2()
    s.setup_network()
    s.start_kube(grace_scale=0.05)
    s.apply(nodeclass("[{alias: al2023@latest}]") + "---" + NODEPOOL)
    s.start_coordinator("--batch-idle", "500ms", "--lease-duration", "3s", "--consolidation-interval", "1s",
                        "--consolidation-validation-delay", "2s", log_level="info")
    s.start_emulator(boot_delay=0.3)

    # ---- 1. sixty pods, then ten: consolidation, one node at a time --------------------------
    s.apply(docs(web(60), PDB))
    wait_for("60 web pods Running", lambda: len(running(s)) == 60, 120, interval=1)
    cost0, inst0 = cluster_cost(s, price)
    print(f"60 pods on {len(inst0)} node(s): ${cost0:.4f}/h")
    assert len(inst0) >= 3, inst0
    evictions0 = len(audit(s)["evictions"])
    w = Watcher(s)
    s.kubectl("scale", "deployment", "web", "--replicas=10")
    want, plan = plan_cost(d, 10)
    bound = want / (1 - THRESHOLD) + 1e-6
    took = settle(s, "the scale-in to consolidate",
                  lambda: cluster_cost(s, price)[0] <= bound and len(running(s)) == 10 and not pending(s), 240)
    most = w.done()
    cost1, inst1 = cluster_cost(s, price)
    aud = audit(s)
    m = http_get(s.coordinator_http + "/metrics")[1]
    print(f"scale-in to 10: {len(inst0)} -> {len(inst1)} node(s), ${cost0:.4f} -> ${cost1:.4f}/h in {took:.0f}s "
          f"(fresh plan {plan} ${want:.4f}/h); at most {most} node(s) disrupting at once over {w.samples} samples; "
          f"{len(aud['evictions']) - evictions0} eviction(s), {len(aud.get('violations') or [])} PDB violation(s); "
          f"decisions: " + ", ".join(f"{k} {metric(m, 'nodesmith_disruption_decisions_total', {'method': k}):.0f}"
                                     for k in ("emptiness", "multi-node", "single-node")))
    assert len(inst1) < len(inst0), (inst0.keys(), inst1.keys())
    assert cost1 <= bound, (cost1, want, plan)
    assert most <= 1, most
    assert w.samples > 10
    assert not aud.get("violations"), aud["violations"]
    assert len(running(s)) == 10

    # ---- 2. a do-not-disrupt pod holds its node ---------------------------------------------
    first = set(s.nodes())
    s.kubectl("scale", "deployment", "web", "--replicas=40")
    wait_for("40 web pods Running", lambda: len(running(s)) == 40 and not pending(s), 120, interval=1)
    new_nodes = sorted(set(s.nodes()) - first)
    assert new_nodes, "no node launched for the scale-up"
    per_node = {}
    for p in running(s):
        per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
    keep = min(new_nodes, key=lambda n: per_node.get(n, 0))  # the one with room left
    # the keeper goes to one of the new nodes (hostname affinity) and asks not to be disrupted
    s.apply(docs(keeper(keep)))
    wait_for("the keeper Running", lambda: len(running(s, "keeper")) == 1, 60, interval=1)
    kpod = running(s, "keeper")[0]
    assert kpod["spec"]["nodeName"] == keep, kpod["spec"]["nodeName"]
    s.kubectl("scale", "deployment", "web", "--replicas=10")
    settle(s, "the second scale-in to consolidate", lambda: len(running(s)) == 10 and not pending(s), 240)
    nodes = s.nodes()
    kpod2 = running(s, "keeper")
    out = ""
    for _ in range(40):  # the pass lists the nodes once nothing is pending
        out = subprocess.run([binary("nodesmithctl"), "explain", keep, "--coordinator", s.coordinator_http],
                             capture_output=True, text=True, timeout=10).stdout
        if "do-not-disrupt" in out:
            break
        time.sleep(0.5)
    print(f"do-not-disrupt: {len(first)} + {len(new_nodes)} node(s) after the scale-up, {len(nodes)} after the "
          f"scale-in; the keeper's node {keep} kept: {out.strip().splitlines()[-1]}")
    assert keep in nodes, (keep, list(nodes))
    assert kpod2 and kpod2[0]["metadata"]["uid"] == kpod["metadata"]["uid"], kpod2
    assert "do-not-disrupt" in out, out
    s.kubectl("delete", "deployment", "keeper")

    # ---- 3. drift: a new image for the EC2NodeClass ------------------------------------------
    s.kubectl("scale", "deployment", "web", "--replicas=40")
    wait_for("40 web pods Running", lambda: len(running(s)) == 40 and not pending(s), 120, interval=1)
    settle(s, "the scale-up to settle", lambda: True, 60, quiet=5)
    before = s.instances(cluster_only=True, states=["pending", "running"])
    assert len(before) >= 3, before.keys()
    old_ami = {i["ImageId"] for i in before.values()}
    src = next(iter(before.values()))["ImageId"]
    new_ami = s.ec2.copy_image(SourceImageId=src, SourceRegion=s.region, Name="nodesmith-test-drift-x86_64",
                               Description="drift test image")["ImageId"]
    assert new_ami not in old_ami
    w = Watcher(s)
    t0 = time.monotonic()
    s.apply(nodeclass(f"[{{id: {new_ami}}}]"))

    def drifted_away():
        inst = s.instances(cluster_only=True, states=["pending", "running"])
        return inst and all(i["ImageId"] == new_ami for i in inst.values()) and len(running(s)) == 40 \
            and not pending(s)
    settle(s, "every node replaced with the new image", drifted_away, 240, quiet=5)
    most = w.done()
    after = s.instances(cluster_only=True, states=["pending", "running"])
    m = http_get(s.coordinator_http + "/metrics")[1]
    aud = audit(s)
    labels = {n["metadata"]["labels"].get("nodesmith.io/nodeclass-hash") for n in s.nodes().values()}
    print(f"drift: {len(before)} node(s) on {sorted(old_ami)} replaced by {len(after)} on {new_ami} in "
          f"{time.monotonic() - t0:.0f}s, at most {most} at once; drift decisions "
          f"{metric(m, 'nodesmith_disruption_decisions_total', {'method': 'drift'}):.0f}; "
          f"{len(aud.get('violations') or [])} PDB violation(s)")
    assert not set(before) & set(after), (before.keys(), after.keys())
    assert most <= 1, most
    assert (metric(m, "nodesmith_disruption_decisions_total", {"method": "drift"}) or 0) >= len(before)
    assert len(labels) == 1 and None not in labels, labels
    assert not aud.get("violations"), aud["violations"]


if __name__ == "__main__":
    main()
