#!/usr/bin/env python3
"""Consolidation replacements on the local stack (moto behind tests/fakes/ec2proxy.py, the node
emulator with a real agent per node, the real Kubernetes control plane):
  1. Price cap: a node whose pods fit a far cheaper type is replaced, but EC2 has no capacity for
     that type (the EC2 proxy answers InsufficientInstanceCapacity). The replacement's CreateFleet
     lists only offerings cheaper than the node it replaces, so EC2 cannot fall back to a type as
     dear as the node; with nothing cheaper left the replacement is abandoned: the node and its
     pods stay, nothing else is launched (nodesmith_replacements_abandoned_total).
  2. Churn guard across a restart: a replacement that went through carries
     nodesmith.io/replacement-launched-at on its Node, and a coordinator started afresh (no
     memory of the launch) still keeps it out of consolidation for spec.disruption.churnGuard
     (`nodesmithctl explain NODE` says churnGuard).
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, binary, http_get, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import node_class_yaml, nodepool_yaml  # noqa: E402

CLUSTER = "replace-test"
ANNOTATION = "nodesmith.io/replacement-launched-at"


def pools():
    def pool(name, types):
        return nodepool_yaml(name, requirements=(
            "{key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}",
            f"{{key: node.kubernetes.io/instance-type, operator: In, values: [{types}]}}"),
            spec="  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, "
                 "churnGuard: 1h}\n")
    return node_class_yaml(CLUSTER) + pool("capped", "m6a.large, m6a.4xlarge") + pool("guarded", "c6a.large, c6a.4xlarge")


def deployment(name, pool, replicas, cpu):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "nodeSelector": {"nodesmith.io/nodepool": pool},
                         "containers": [{"name": name, "image": "registry.example/app",
                                         "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]}}}}


def docs(*objs):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def running(s, app):
    return [p for p in s.pods("default") if p["metadata"].get("labels", {}).get("app") == app
            and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def pool_instances(s, pool):
    return {i: x for i, x in s.instances(cluster_only=True, states=["pending", "running"]).items()
            if any(t["Key"] == "nodesmith.io/nodepool" and t["Value"] == pool for t in x.get("Tags", []))}


def fleets(s, since):
    return s.proxy("GET", f"log?action=CreateFleet&since={since}")["calls"]


def last_seq(s):
    return max([e["seq"] for e in s.proxy("GET", "log?action=CreateFleet")["calls"]] + [0])


def explain(s, node):
    return subprocess.run([binary("nodesmithctl"), "explain", node, "--coordinator", s.coordinator_http],
                          capture_output=True, text=True, timeout=10).stdout


def main():
    with TestDir("replacement") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s)
    print("test_replacement: OK")


def start(s):
    return s.start_coordinator("--batch-idle", "500ms", "--consolidation-interval", "1s",
                               "--consolidation-validation-delay", "1s", log_level="info")


def run(s):
    s.start_ec2()
    s.setup_network()
    s.start_kube(grace_scale=0.05)
    s.apply(pools())
    coord = start(s)
    s.start_emulator(boot_delay=0.3)

    # ---- 1. the replacement may not cost what the node costs --------------------------------
    # 3 cpu + 2 x 0.5 cpu: one m6a.4xlarge ($0.6912/h); without the big pod an m6a.large
    # ($0.0864/h) holds the rest, and a replace is decided
    s.apply(docs(deployment("big", "capped", 1, "3"), deployment("small", "capped", 2, "500m")))
    wait_for("big and small Running", lambda: len(running(s, "big")) == 1 and len(running(s, "small")) == 2,
             90, interval=1)
    inst = pool_instances(s, "capped")
    assert [x["InstanceType"] for x in inst.values()] == ["m6a.4xlarge"], inst
    s.proxy("POST", "rules", {"kind": "ice", "instance_type": "m6a.large", "zone": "*",
                              "capacity_type": "on-demand", "capacity": 0, "count": None})
    since = last_seq(s)
    s.kubectl("delete", "deployment", "big")

    def abandoned():
        m = http_get(s.coordinator_http + "/metrics")[1]
        return (metric(m, "nodesmith_replacements_abandoned_total") or 0) >= 1
    wait_for("the replacement abandoned", abandoned, 120, interval=1)
    time.sleep(5)  # a pass or two more: nothing else may be launched
    calls = fleets(s, since)
    listed = sorted({p["instance_type"] for e in calls for p in e.get("pools", [])})
    launched = [p["instance_type"] for e in calls for p in e.get("pools", []) for _ in p.get("instances", [])]
    after = pool_instances(s, "capped")
    line = next((l for l in coord.output().splitlines() if "replacement for NodePool capped abandoned" in l), "")
    print(f"price cap: {len(calls)} CreateFleet call(s) for the replacement, offerings {listed}, launched "
          f"{launched}; capped pool {[x['InstanceType'] for x in after.values()]}; {line.strip()[-160:]}")
    assert calls, "no replacement was attempted"
    assert "m6a.4xlarge" not in listed, calls
    assert not launched, launched
    assert set(after) == set(inst), (after.keys(), inst.keys())
    assert len(running(s, "small")) == 2
    assert line, coord.output()[-2000:]
    s.proxy("DELETE", "rules")

    # ---- 2. the churn guard survives a restart ----------------------------------------------
    s.apply(docs(deployment("big2", "guarded", 1, "3"), deployment("small2", "guarded", 2, "500m")))
    wait_for("big2 and small2 Running", lambda: len(running(s, "big2")) == 1 and len(running(s, "small2")) == 2,
             90, interval=1)
    first = pool_instances(s, "guarded")
    assert [x["InstanceType"] for x in first.values()] == ["c6a.4xlarge"], first
    s.kubectl("delete", "deployment", "big2")

    def replaced():
        now = pool_instances(s, "guarded")
        return [x["InstanceType"] for x in now.values()] == ["c6a.large"] and len(running(s, "small2")) == 2
    wait_for("the c6a.4xlarge replaced by a c6a.large", replaced, 180, interval=1)
    (new_id,) = pool_instances(s, "guarded")
    node = next(n for n, o in s.nodes().items() if o["spec"].get("providerID", "").endswith(new_id))
    wait_for(f"{ANNOTATION} on Node {node}",
             lambda: ANNOTATION in (s.nodes()[node]["metadata"].get("annotations") or {}), 30, interval=1)
    stamp = s.nodes()[node]["metadata"]["annotations"][ANNOTATION]
    coord.stop()
    coord = start(s)  # no memory of the launch
    out = ""
    for _ in range(60):
        out = explain(s, node)
        if "churnGuard" in out:
            break
        time.sleep(1)
    print(f"churn guard: {node} ({new_id}) annotated {ANNOTATION}={stamp}; after a restart: "
          f"{out.strip().splitlines()[-1] if out.strip() else '(nothing)'}")
    assert "churnGuard" in out, out
    assert set(pool_instances(s, "guarded")) == {new_id}


if __name__ == "__main__":
    main()
