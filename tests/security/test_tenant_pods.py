#!/usr/bin/env python3
"""F6: a tenant's pods cannot silence their node's agent. The real control plane
(tests/pylib/realkube.py: its Node registered by an emulated kubelet), a coordinator, one agent
acting as its node (the node's kubelet kubeconfig). A tenant creates 4 legal pods on the node carrying 1.3 MiB of node affinity
and labels each (before: "Failed to build the report: Message too long", no report any more), then
a fifth, ordinary one with a nodeSelector. The agent goes on reporting: the coordinator sees all 5
pods, fresh; the agent logs that it left 4 pods' scheduling data out (the budget: 16 KiB per pod,
max-message/2 in all); the agent's and the coordinator's memory are measured."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
from attacklib import MiB, MemoryWatch, rss  # noqa: E402
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, make_pki, make_root, wait_for  # noqa: E402
from realkube import RealKube  # noqa: E402

INSTANCE = "i-0tenant00000000"
NODE = f"ip-{INSTANCE}"


def hostile_pod(i):
    values = [f"zone-{i}-{k:06d}-" + "x" * 40 for k in range(24000)]  # ~1.3 MiB
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"big-{i}", "namespace": "default",
                         "labels": {f"l{k}": "v" * 60 for k in range(64)}},
            "spec": {"nodeName": NODE,
                     "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                         "nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": values}]}]}}},
                     "containers": [{"name": "c", "image": "pause",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def main():
    with TestDir("sec-tenant") as d:
        kube = RealKube(d, log=None).start(packaging=False, fault_proxy=False, audit=False)
        try:
            run(d, kube)
        finally:
            kube.stop()
    print("test_tenant_pods: OK")


def run(d, kube):
    pki = make_pki(d)
    coord = Coordinator(d, pki, interval="1s").start()
    kube.register_nodes(NODE, instances={NODE: INSTANCE}, capacity={"cpu": "8", "memory": "32Gi", "pods": "110"})
    root = make_root(os.path.join(d, "root"), cpus=8, mem_bytes=32 * GiB)
    agent = Proc("agent", agent_argv(coord, root, INSTANCE, extra=[
        "--kubeconfig", kube.node_kubeconfig(NODE), "--logind", "no"]), d)
    wait_for("the node registered", lambda: INSTANCE in coord.nodes(), 20, 0.3)
    mem = MemoryWatch(coord.proc.pid)
    agent_before = rss(agent.pid)[0]

    sizes = []
    for i in range(4):
        pod = hostile_pod(i)
        sizes.append(len(str(pod)))
        kube.req("POST", "/api/v1/namespaces/default/pods", pod)
    kube.req("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "small", "namespace": "default"},
        "spec": {"nodeName": NODE, "nodeSelector": {"disk": "ssd"},
                 "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "10m"}}}]}})
    print(f"F6. 4 pods of {min(sizes) / MiB:.1f}-{max(sizes) / MiB:.1f} MiB of affinity and labels, and one "
          f"ordinary pod, on {NODE}")

    wait_for("the agent reports all 5 pods", lambda: mem.sample() and coord.nodes()[INSTANCE]["pods"] == 5, 30, 0.5)
    wait_for("the agent says what it left out", lambda: "Scheduling data of 4 pods left out" in agent.output(), 10)
    assert "Message too long" not in agent.output(), agent.output()[-2000:]
    time.sleep(3)
    view = coord.nodes()[INSTANCE]
    assert view["lastReportAgeSeconds"] < 2.5, view
    agent_rss = rss(agent.pid)[0]
    mem.report(f"F6. reports keep coming (last {view['lastReportAgeSeconds']:.1f}s ago, 5 pods); agent RSS "
               f"{agent_before / MiB:.0f} -> {agent_rss / MiB:.0f} MiB (it holds the 5 pods it watches)")
    line = [x for x in agent.output().splitlines() if "left out of the report" in x][-1]
    print(f"F6. agent: {line.strip()[:160]}")
    assert agent.alive() and coord.proc.alive()


if __name__ == "__main__":
    main()
