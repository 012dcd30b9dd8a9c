#!/usr/bin/env python3
"""Static NodePools (Karpenter's spec.replicas, issue 17) on the real control plane:

1. a pool with replicas 2 gets two empty nodes with no pod pending, spread over two zones;
2. pods on the cluster go onto them (kube-scheduler), and the empty static nodes are never
   consolidated (consolidation runs every 2 s here, its policy WhenEmpty with consolidateAfter 0s,
   which Karpenter ignores on static pools);
3. scaled up to 3 (kubectl scale, the CRD's scale subresource): a third node;
4. scaled down to 1: two nodes drain and are terminated, the one with the pods stays;
5. the API server refuses turning the pool dynamic (Karpenter's transition rule).

Run time here: about 2 minutes (control plane start-up included).
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import apply_objs, deployment, node_class_yaml, running_of, start_real  # noqa: E402

CLUSTER = "static-pool"

OBJECTS = node_class_yaml(CLUSTER) + """---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: fixed}
spec:
  replicas: 2
  limits: {nodes: 4}  # room for a replacement beside the replicas, as Karpenter advises
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 0s}
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, m5.xlarge]}
"""


def pool_instances(s):
    return {i: x for i, x in s.instances(cluster_only=True, states=["running", "pending"]).items()
            if any(t["Key"] == "nodesmith.io/nodepool" and t["Value"] == "fixed" for t in x.get("Tags", []))}


def wait_count(s, n, what, timeout=120):
    t0 = time.monotonic()
    wait_for(what, lambda: len(pool_instances(s)) == n, timeout, interval=1)
    print(f"{what}: {time.monotonic() - t0:.1f}s")
    return pool_instances(s)


def scale(s, n):
    s.kubectl("scale", "nodepool", "fixed", f"--replicas={n}")  # the CRD's scale subresource


def main():
    with TestDir("karpenter-static") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s)
    print("test_karpenter_static: OK")


def run(s):
    coord = start_real(s, OBJECTS, coordinator=("--consolidation-interval", "2s"))
    two = wait_count(s, 2, "two static nodes with no pod pending")
    assert {x["InstanceType"] for x in two.values()} == {"m5.large"}, two  # the cheapest type
    zones = sorted(x["Placement"]["AvailabilityZone"] for x in two.values())
    assert len(set(zones)) == 2, zones
    print(f"launched {sorted(two)} in {zones}")
    wait_for("both Nodes registered", lambda: len(s.nodes()) == 2, 90, interval=1)

    # pods go onto them; the static pool launches nothing for them
    apply_objs(s, deployment("web", 2, "250m", "256Mi"))
    wait_for("the pods Running", lambda: len(running_of(s, "web")) == 2, 90, interval=0.5)
    time.sleep(10)  # five consolidation passes: empty or not, static nodes stay
    assert sorted(pool_instances(s)) == sorted(two), pool_instances(s)
    log = coord.output()
    assert "Disrupting Node" not in log and "Replacing Node" not in log

    scale(s, 3)
    three = wait_count(s, 3, "scaled up to 3")
    busy = {p["spec"]["nodeName"] for p in running_of(s, "web")}

    scale(s, 1)
    one = wait_count(s, 1, "scaled down to 1", timeout=180)
    drained = [ln for ln in coord.output().splitlines() if "(scaled-down)" in ln]
    assert len(drained) == 2, drained
    print(drained[0].split("] ", 1)[-1][:200])
    left = next(iter(one))
    assert left in three
    node = next(n for n, o in s.nodes().items() if o["spec"].get("providerID", "").endswith(left))
    # the emptier nodes went first: the pods' node stays when they share one
    if len(busy) == 1:
        assert node in busy, (node, busy)
    wait_for("the pods Running", lambda: len(running_of(s, "web")) == 2, 90, interval=0.5)
    wait_for("status.nodes 1 (the scale subresource's replicas)", lambda: s.kubectl(
        "get", "nodepool", "fixed", "--subresource=scale", "-o", "jsonpath={.status.replicas}").strip() == "1", 60, 1)

    try:
        s.kubectl("patch", "nodepool", "fixed", "--type", "json", "-p", '[{"op":"remove","path":"/spec/replicas"}]')
        refused = ""
    except AssertionError as e:
        refused = str(e)
    assert "Cannot transition NodePool between static" in refused, refused
    assert s.kubectl("get", "nodepool", "fixed", "-o", "jsonpath={.spec.replicas}").strip() == "1"


if __name__ == "__main__":
    main()
