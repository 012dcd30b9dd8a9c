#!/usr/bin/env python3
"""nodesmith-agent with its node's own identity, on the real control plane (issue 16, point 6).

The agent authenticates as the kubelet of its node (client certificate CN=system:node:NAME,
O=system:nodes, the identity an EKS node already has): kube-apiserver's Node authorizer and the
NodeRestriction admission plugin then limit it to its own Node and the pods bound to it.

  1. Nodes A and B register through the emulated kubelet (tests/fakes/kubelet.py), each with its
     own certificate. Three `web` pods with a PDB (minAvailable 2) run on A, one `other` pod on B.
  2. The real nodesmith-agent for A runs with a kubeconfig carrying A's certificate and nothing
     else. A spot notice (fake IMDS) starts its drain: A is cordoned (NodeRestriction refuses a
     node's own taints, so the agent cordons only, see docs/drain.md), every web pod is evicted
     through the Eviction API, the PDB refuses at least once and is never broken (kube-apiserver's
     audit log, tests/pylib/kubeaudit.py), the web pods run on B, and the agent removes its
     Node's finalizer once the spot deadline has passed.
  3. The same credentials against B are refused with 403: cordon (kubectl with A's kubeconfig),
     taint (kubectl), eviction of B's pod and removal of B's finalizer (tests/tools/kubeprobe,
     the agent's own HTTP client). B's pod is still Running, B is not cordoned.

Run time here: about 1 minute, control plane start-up included.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "fakes"))
from cluster import Cluster  # noqa: E402
from kubeaudit import PodAudit  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from nsharness import (GiB, Coordinator, Proc, TestDir, agent_argv, binary, make_pki,  # noqa: E402
                       make_root, wait_for)
from test_drain import imds_ctl, start_imds  # noqa: E402

FINALIZER = "nodesmith.io/termination"
HOLD = {"key": "test.nodesmith.io/hold", "value": "true", "effect": "NoSchedule"}


def node_spec(name, instance, taints=()):
    zone = "us-east-1a"
    return {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                     "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": zone,
                                     "node.kubernetes.io/instance-type": "m5.large"},
            "taints": list(taints), "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
            "providerID": f"aws:///{zone}/{instance}", "internalIP": "10.0.0.1"}


def deployment(name, replicas, node=None):
    spec = {"terminationGracePeriodSeconds": 2, "containers": [{
        "name": "c", "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def running(c, app):
    out = json.loads(c.kubectl("get", "pods", "-l", f"app={app}", "-o", "json"))["items"]
    return [p for p in out if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def nodes_of(pods):
    return {p["spec"].get("nodeName") for p in pods}


def node(c, name):
    st, n = c.api("GET", f"/api/v1/nodes/{name}")
    assert st == 200, (st, n)
    return n


def probe(kubeconfig, *args):
    r = subprocess.run([binary("kubeprobe"), "--kubeconfig", kubeconfig, "--max-attempts", "1", *args],
                       capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    with TestDir("agent-identity") as d:
        c = Cluster(os.path.join(d, "cluster"))
        kubelets = []
        try:
            print(f"control plane start-up: {c.start()}s")
            run(c, d, kubelets)
        finally:
            for k in kubelets:
                k.stop()
            c.stop()
    print("test_agent_identity: OK")


def run(c, d, kubelets):
    t_start = time.monotonic()
    audit = PodAudit(c).start()
    a, b, inst_a = "ip-i-a", "ip-i-b", "i-a"
    ids = {}
    for name, inst, taints in ((a, inst_a, ()), (b, "i-b", (HOLD,))):
        ids[name] = c.node_identity(name)
        kubelets.append(Kubelet(c.server, c.ca, ids[name].cert, ids[name].key, node_spec(name, inst, taints),
                                boot_delay=0.5, grace_factor=1.0).start())
    for name in (a, b):
        wait_for(f"{name} Ready", lambda: any(x["type"] == "Ready" and x["status"] == "True" for x in
                                              node(c, name)["status"].get("conditions", [])), 60, 0.2)
    kc_a = c.write_kubeconfig(os.path.join(d, "node-a.kubeconfig"), ids[a])

    # the workload: web (PDB minAvailable 2) on A while B is held, other pinned to B
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        deployment("web", 3), deployment("other", 1, node=b),
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
         "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}]}))
    c.kubectl("patch", "deployment", "other", "--type=json", "-p", json.dumps([{
        "op": "add", "path": "/spec/template/spec/tolerations", "value": [{"operator": "Exists"}]}]))
    wait_for("3 web pods Running on A", lambda: len(running(c, "web")) == 3 and nodes_of(running(c, "web")) == {a},
             90, 0.5)
    wait_for("other Running on B", lambda: nodes_of(running(c, "other")) == {b}, 90, 0.5)
    c.kubectl("taint", "node", b, f"{HOLD['key']}-")
    other = running(c, "other")[0]

    # A's agent, with A's kubeconfig only
    pki = make_pki(d)
    coord = Coordinator(d, pki=pki).start()
    imds = start_imds(d, inst_a)
    root = os.path.join(d, "root-a")
    make_root(root, cpus=2, mem_bytes=4 * GiB)
    argv = agent_argv(coord, root, inst_a, extra=["--kubeconfig", kc_a, "--logind", "no",
                                                  "--finalizer-timeout", "1s"])
    i = argv.index("--imds")
    argv[i + 1] = "yes"
    argv += ["--imds-endpoint", imds, "--imds-poll-interval", "200ms"]
    agent = Proc("agent-a", argv, d)
    wait_for("A's finalizer added by its agent", lambda: FINALIZER in (node(c, a)["metadata"].get("finalizers") or []),
             30, 0.2)

    # 2. the agent drains its own node
    notice = imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 30})
    deadline = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    t0 = time.monotonic()
    wait_for("A cordoned", lambda: node(c, a)["spec"].get("unschedulable") is True, 20, 0.2)
    wait_for("3 web pods Running on B", lambda: len(running(c, "web")) == 3 and nodes_of(running(c, "web")) == {b},
             60, 0.5)
    took = time.monotonic() - t0
    ev = [e for e in audit.evictions(a) if e["pod"].startswith("web-")]
    evicted = [e for e in ev if e["decision"] == "evicted"]
    refused = [e for e in ev if e["decision"] == "denied"]
    users = sorted({e["user"] for e in evicted})
    print(f"A drained by its agent in {took:.1f}s: {len(evicted)} evicted, {len(refused)} refused by the PDB, "
          f"{len(audit.violations())} PDB violation(s); evicted as {users}")
    assert len(evicted) == 3, ev
    assert refused, "the PDB never refused an eviction"
    assert users == [f"system:node:{a}"], users
    assert not audit.violations(), audit.violations()
    out = agent.output()
    assert "NodeRestriction" in out or "cordon only" in out, "the agent did not say it cordons without its taint"
    wait_for("A's finalizer removed by its agent after the spot deadline",
             lambda: FINALIZER not in (node(c, a)["metadata"].get("finalizers") or []),
             deadline - time.time() + 20, 0.5)
    assert time.time() >= deadline - 1.0, "finalizer removed before the instance was going away"
    print("A's finalizer kept until the spot deadline, then removed by its agent")

    # 3. the same credentials on B: 403 each time
    c.kubectl("patch", "node", b, "--type=json", "-p", json.dumps([
        {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]))
    kubectl_a = ["kubectl", "--kubeconfig", kc_a]
    for what, args in (("cordon", ["cordon", b]),
                       ("taint", ["taint", "node", b, "nodesmith.io/disrupted=:NoSchedule"])):
        r = subprocess.run(kubectl_a + args, capture_output=True, text=True, timeout=30)
        assert r.returncode != 0 and "forbidden" in r.stderr.lower(), (what, r.returncode, r.stdout, r.stderr)
        print(f"{what} of B with A's kubeconfig: {r.stderr.strip()[:160]}")
    for what, args in (("cordon", ("cordon", b)),
                       ("evict", ("evict", "default", other["metadata"]["name"])),
                       ("unfinalize", ("unfinalize", f"/api/v1/nodes/{b}", FINALIZER))):
        res = probe(kc_a, *args)
        assert res.get("http") == 403, (what, res)
        print(f"kubeprobe {what} on B as A: HTTP 403 ({res.get('message', '')[:120]})")
    # and the agent's own node stays within reach of the same probe: uncordon A works
    res = probe(kc_a, "uncordon", a)
    assert res.get("error", 0) == 0, res
    nb = node(c, b)
    assert not nb["spec"].get("unschedulable") and FINALIZER in nb["metadata"]["finalizers"], nb
    assert [p["metadata"]["uid"] for p in running(c, "other")] == [other["metadata"]["uid"]], "B's pod was touched"
    assert not [e for e in audit.evictions(b) if e["decision"] == "evicted"], audit.evictions(b)
    c.kubectl("patch", "node", b, "--type=json", "-p", json.dumps([{"op": "remove", "path": "/metadata/finalizers"}]))
    assert agent.stop() == 0
    audit.stop()
    coord.proc.stop()
    print(f"test_agent_identity: {time.monotonic() - t_start:.0f}s after start-up")


if __name__ == "__main__":
    main()
