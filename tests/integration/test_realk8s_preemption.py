#!/usr/bin/env python3
"""Preemption on the real control plane (issue 16, point 3).

A node full of low-priority pods; then a high-priority pod that fits nowhere else. The real
kube-scheduler preempts a low-priority pod for it: it writes the high pod's
status.nominatedNodeName and deletes the victim, whose ReplicaSet makes a new pod at once. Karpenter
skips pods with a nominated node: the scheduler is placing them. Checked: the coordinator launches
no node for the high-priority pod (it runs on the node it preempted), and launches exactly one
node for the preempted pod's replacement, which runs there.

Run time here: about 50 seconds (control plane start-up included).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import (ON_DEMAND_M6I_LARGE, NO_CONSOLIDATION, deployment, node_class_yaml,  # noqa: E402
                      nodepool_yaml, start_real)

CLUSTER = "preempt-test"
OBJECTS = node_class_yaml(CLUSTER) + nodepool_yaml(
    requirements=ON_DEMAND_M6I_LARGE, spec=NO_CONSOLIDATION) + """---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000000
"""


def prio_deployment(name, replicas, cpu, priority):
    d = deployment(name, replicas, cpu, memory="1Gi")
    d["spec"]["template"]["spec"]["priorityClassName"] = priority
    return d


def fleets(s):
    return [e for e in s.proxy("GET", "log?action=CreateFleet")["calls"]
            if e.get("instance_ids") and not e.get("replayed")]


def pods_of(s, app):
    return [p for p in s.pods("default") if p["metadata"]["labels"].get("app") == app]


def running_on(s, app):
    return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods_of(s, app)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def main():
    with TestDir("realk8s-preemption") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s)
    print("test_realk8s_preemption: OK")


def run(s):
    t_start = time.monotonic()
    start_real(s, OBJECTS)

    # an m6i.large (2 vCPU, 1930m allocatable) full of low-priority pods: two of 800m
    s.apply(json.dumps(prio_deployment("low", 2, "800m", "low")))
    wait_for("2 low pods Running", lambda: len(running_on(s, "low")) == 2, 90, 0.5)
    first = wait_for("the first CreateFleet logged at the EC2 proxy", lambda: fleets(s), 30, 0.5)
    nodes = set(running_on(s, "low").values())
    assert len(first) == 1 and len(nodes) == 1, (first, nodes)
    full = nodes.pop()
    time.sleep(3)   # the first node initialized; nothing more in flight
    print(f"node {full} holds the two low-priority pods after 1 CreateFleet")

    # the high-priority pod fits only where a low one is: the scheduler preempts
    t0 = time.monotonic()
    s.apply(json.dumps(prio_deployment("high", 1, "1", "high")))
    seen = {}

    def high_running():
        for p in pods_of(s, "high"):
            nn = (p.get("status") or {}).get("nominatedNodeName")
            if nn:
                seen["nominated"] = nn
        r = running_on(s, "high")
        return r if r else None
    placed = wait_for("the high-priority pod Running", high_running, 90, 0.3)
    high_node = next(iter(placed.values()))
    took = time.monotonic() - t0
    wait_for("2 low pods Running again", lambda: len(running_on(s, "low")) == 2, 90, 0.5)
    time.sleep(4)   # a launch for the high pod, if any, would have come within a batch
    after = fleets(s)[len(first):]
    low_nodes = running_on(s, "low")
    print(f"high-priority pod nominated to {seen.get('nominated')}, Running on {high_node} after "
          f"{took:.1f}s; {len(after)} CreateFleet after it; low pods on {sorted(set(low_nodes.values()))}")
    assert seen.get("nominated") == full, seen
    assert high_node == full, (high_node, full)
    assert len(after) == 1, after                  # for the preempted pod only
    assert len(after[0]["instance_ids"]) == 1, after
    new_nodes = set(low_nodes.values()) - {full}
    assert len(new_nodes) == 1, low_nodes          # the preempted pod got the new node
    nodes = s.nodes()
    assert len(nodes) == 2, sorted(nodes)
    print(f"test_realk8s_preemption: {time.monotonic() - t_start:.0f}s in all")


if __name__ == "__main__":
    main()
