#!/usr/bin/env python3
"""F1, F4: one node cannot harm another. The local stack (moto behind ec2proxy, the real control
plane, the node emulator with one emulated kubelet, one real agent and one fake IMDS per
instance), a coordinator with the shipped defaults (attestation required) and
--report-interval 1s --stale-after 5s, so an agent counts as silent after 3 s and stale after
5 s. The evictions are read from kube-apiserver's audit log.

Two nodes: A (the attacker is root there: it has A's bootstrap token, A's boot id and A's signed
identity document from A's IMDS) and V, the victim, running two pods with the termination
finalizer on its Node; a third Node that nodesmith does not manage (no providerID of ours).

  F1. A's agent is killed; once A counts as stale, one report with A's own instance id, boot id
      and document but node_name=V and a spot notice, then silence. Before: the coordinator
      cordoned and tainted V and evicted all its pods within 4 s. Now: refused (node_mismatch),
      logged, counted; for 10 s (3 silent intervals and more) V is not cordoned, not tainted, no pod
      of V is evicted, the finalizer stays, V's directive stays "run". The same with the unmanaged
      Node's name.
  F4. V's agent is alive: a report with V's instance id, boot id and the token but without V's
      boot secret, a second boot of V, a sequence of 2^62, and a report from an instance that
      sends no identity document: each refused, logged, counted; V's real reports go on being
      accepted (no duplicates), V is not told to drain."""
import json
import os
import signal
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
from attacklib import MemoryWatch, agent_report, identity, m, node_state, notice, report  # noqa: E402
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import (apply_objs as apply, deployment, evictions, instance, node_class_yaml,  # noqa: E402
                      running_of, wait_registered)

CLUSTER = "isolation-test"
NODEPOOLS = node_class_yaml(CLUSTER) + """---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      requirements:
        - {key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
"""


def imds_get(port, path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    tok = urllib.request.urlopen(req, timeout=5).read().decode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/latest/{path}", headers={"X-aws-ec2-metadata-token": tok})
    return urllib.request.urlopen(req, timeout=5).read()


def what_root_on(s, iid):
    """What root on the instance can read: token, boot id, signed identity document."""
    inst = instance(s, iid)
    with open(os.path.join(inst["dir"], "root", "proc/sys/kernel/random/boot_id")) as f:
        boot = f.read().strip()
    with open(s.pki["token_file"]) as f:
        token = f.read().strip()
    doc = imds_get(inst["imdsPort"], "dynamic/instance-identity/document")
    sig = imds_get(inst["imdsPort"], "dynamic/instance-identity/rsa2048")
    return {"token": token, "boot": boot, "doc": doc, "sig": sig, "node": inst["node"], "zone": inst["zone"]}


def node_untouched(s, node):
    n = s.nodes()[node]
    taints = [t["key"] for t in n["spec"].get("taints") or []]
    return (not n["spec"].get("unschedulable") and not any(t.startswith("nodesmith.io") for t in taints)
            and "nodesmith.io/termination" in (n["metadata"].get("finalizers") or []))


def hold(s, what, check, seconds=10.0):
    """check() stays true for seconds."""
    end = time.time() + seconds
    while time.time() < end:
        assert check(), f"{what} broke"
        time.sleep(0.5)


def coordinator_view(s, iid):
    return s.coordinator_nodes().get(iid) or {}


def f1_forged_node_name(s, a, v_node, v_pods, unmanaged, mem):
    root = what_root_on(s, a)
    os.kill(instance(s, a)["agentPid"], signal.SIGKILL)
    wait_for("A's agent dead", lambda: not instance(s, a)["agentAlive"], 10, 0.2)
    time.sleep(6)  # A's entry is stale: a report of A's boot is taken again (attested)
    for target in (v_node, unmanaged):
        before = m(s.proxy_metrics(), "nodesmith_reports_total", {"result": "node_mismatch"})
        ident = identity(a, root["boot"], target, zone=root["zone"], document=root["doc"], rsa2048=root["sig"])
        body = agent_report(root["token"], a, root["boot"], int(time.time() * 1e6),
                            node_state(ident, notices=[notice()]))
        d = report(s.coordinator_url, s.pki["ca"], body)
        for _ in range(20):  # attestation asks EC2 first: PENDING, then the verdict
            if d["status"] != "PENDING":
                break
            time.sleep(0.3)
            d = report(s.coordinator_url, s.pki["ca"], body)
        assert d["status"] == "UNAUTHENTICATED" and "node_name" in d["error"], d
        wait_for("node_mismatch counted", lambda: m(s.proxy_metrics(), "nodesmith_reports_total",
                                                   {"result": "node_mismatch"}) > before, 10)
        wait_for("refusal logged", lambda: f"node_name {target}" in s.procs["coordinator"].output(), 10)
        print(f"F1. A ({a}) as root, node_name={target} + spot notice: {d['status']}: {d['error']}")
        # then silence: what the coordinator used to do within 4 s (and 10 s apart, each refusal
        # kind is logged at most once every 10 s)
        hold(s, f"victim {v_node} untouched", lambda: node_untouched(s, v_node) and mem.sample(), 10.5)
    assert not evictions(s, v_node), evictions(s, v_node)
    assert sorted(p["metadata"]["uid"] for p in running_of(s, "web") if p["spec"].get("nodeName") == v_node) == v_pods
    n = s.nodes()[unmanaged]
    assert not n["spec"].get("unschedulable") and not [t for t in n["spec"].get("taints") or []
                                                       if t["key"].startswith("nodesmith.io")], n
    assert m(s.proxy_metrics(), "nodesmith_proxy_drains_started_total") == 0
    mem.report(f"F1. 10 s later: {v_node} not cordoned, not tainted, finalizer kept, its 2 pods running, "
               f"0 evictions; {unmanaged} untouched; 0 coordinator drains")


def f4_boot_secret(s, v, mem):
    root = what_root_on(s, v)
    st = node_state(identity(v, root["boot"], root["node"], zone=root["zone"]))
    cases = [
        ("V's boot id and token, no boot secret", agent_report(root["token"], v, root["boot"], int(time.time() * 1e6), st),
         "boot secret missing or wrong"),
        ("a second boot of V while its agent is alive",
         agent_report(root["token"], v, "0f0f0f0f-0000-4000-8000-000000000000", 1,
                      node_state(identity(v, "0f0f0f0f-0000-4000-8000-000000000000", root["node"], zone=root["zone"],
                                          document=root["doc"], rsa2048=root["sig"]))),
         "another agent boot holds"),
        ("a sequence of 2^62", agent_report(root["token"], v, root["boot"], 1 << 62, st), "implausible sequence"),
        ("an instance that sends no identity document",
         agent_report(root["token"], "i-0nodocument00000", "b", 1, node_state(identity("i-0nodocument00000", "b", "n"))),
         "attestation refused"),
    ]
    for what, body, expect in cases:
        d = report(s.coordinator_url, s.pki["ca"], body)
        assert d["status"] in ("UNAUTHENTICATED", "INVALID") and expect in d["error"], (what, d)
        assert not d["boot_secret"], f"{what}: the reply carried V's boot secret"
        print(f"F4. {what}: {d['status']}: {d['error']}")
    dup = m(s.proxy_metrics(), "nodesmith_reports_total", {"result": "duplicate"})
    seen = coordinator_view(s, v).get("reports", 0)
    time.sleep(4)
    view = coordinator_view(s, v)
    assert view.get("lastReportAgeSeconds", 99) < 3, view
    assert not view.get("drainReason"), view
    assert m(s.proxy_metrics(), "nodesmith_reports_total", {"result": "duplicate"}) == dup
    mem.report(f"F4. V's own agent still accepted after each ({seen} reports before, last "
               f"{view.get('lastReportAgeSeconds')}s ago), never told to drain")


def main():
    with TestDir("sec-isolation") as d:
        with LocalStack(d, cluster=CLUSTER) as s:
            s.start_ec2()
            s.setup_network()
            s.start_kube(grace_scale=0.05)
            s.apply(NODEPOOLS)
            s.start_coordinator("--stale-after", "5s", "--consolidation-interval", "0")
            s.proxy_metrics = lambda: urllib.request.urlopen(s.coordinator_http + "/metrics", timeout=5).read().decode()
            mem = MemoryWatch(s.procs["coordinator"].pid)
            s.start_emulator(boot_delay=0.3)
            a = s.run_instance("m6i.large", zone="us-east-1a", nodepool="general")
            v = s.run_instance("m6i.large", zone="us-east-1b", nodepool="general")
            names = wait_registered(s, [a, v])
            v_node = names[v]
            s.kubectl("cordon", names[a])
            apply(s, deployment("web", 2, "100m"))
            wait_for("2 web pods on V", lambda: len([p for p in running_of(s, "web")
                                                    if p["spec"].get("nodeName") == v_node]) == 2, 60, 0.5)
            wait_for("finalizer on V", lambda: node_untouched(s, v_node), 30, 0.3)
            v_pods = sorted(p["metadata"]["uid"] for p in running_of(s, "web"))
            unmanaged = "unmanaged-node"
            s.kubectl("apply", "-f", "-", input=json.dumps({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": unmanaged},
                "spec": {"providerID": "aws:///us-east-1a/i-0notnodesmith0000"}}))

            f4_boot_secret(s, v, mem)
            f1_forged_node_name(s, a, v_node, v_pods, unmanaged, mem)
            rcs = s.stop_all()
            assert rcs.get("coordinator") == 0, rcs
    print("test_node_isolation: OK")


if __name__ == "__main__":
    main()
