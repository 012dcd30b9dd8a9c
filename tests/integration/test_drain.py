#!/usr/bin/env python3
"""The agent drains its own node, end to end on 127.0.0.1.

The fake Kubernetes API server (tests/fakes/kubeapi.py, --grace-scale 0.05 so that grace periods
and readiness delays pass quickly), a coordinator, fake IMDS instances for spot notices, and
agents given --kube-server. Shown:

1. spot notice: every evictable pod is evicted before the notice's deadline; DaemonSet and mirror
   pods stay; a PDB (minAvailable 2 of 3) refuses one eviction until the replacement is Ready on
   a second node, then the drain finishes; no PDB is ever violated (the fake's own audit);
   critical pods go last; Events are posted; the finalizer is kept while the spot deadline has
   not passed and removed by the agent once it has (the coordinator does not remove it yet);
2. `kubectl delete node`: the finalizer holds the Node, the drain runs (node-deleted, forced),
   the agent reports drained and keeps the finalizer, since the instance is not going away;
3. agent killed mid-drain and restarted: it resumes from its taint and no pod is evicted twice
   (eviction POSTs counted in the fake's audit);
4. 429 and 500 bursts from the API server on evictions and on the Node patch: the drain still
   completes within the spot deadline;
5. the same workload drained once by `kubectl drain --ignore-daemonsets --delete-emptydir-data`
   and once by the agent ends in the same state."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import (GiB, Coordinator, FakeKube, Proc, TestDir, agent_argv, make_pki,  # noqa: E402
                       make_root, wait_for)

GRACE_SCALE = 0.05
KUBECTL = shutil.which("kubectl")
FAKE_IMDS = os.path.join(os.path.dirname(__file__), "..", "fakes", "imds.py")


def start_imds(d, instance):
    p = Proc(f"imds-{instance}", [sys.executable, FAKE_IMDS, "--port", "0", "--instance-id", instance,
                                  "--life-cycle", "spot"], d)
    port = int(wait_for("fake IMDS port", lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                                                            p.output()).group(1), 15))
    return f"http://127.0.0.1:{port}"


def imds_ctl(base, method, path, body=None):
    import urllib.request
    r = urllib.request.Request(base + "/_fake/" + path, data=json.dumps(body or {}).encode(), method=method,
                               headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(r, timeout=5) as resp:
        return json.loads(resp.read() or b"null")


def start_agent(d, coord, kube, instance, imds=None, extra=(), name=None):
    root = os.path.join(d, f"root-{instance}")
    if not os.path.exists(root):
        make_root(root, cpus=2, mem_bytes=4 * GiB)
    argv = agent_argv(coord, root, instance, extra=["--kube-server", kube.url, "--logind", "no",
                                                    "--finalizer-timeout", "1s"] + list(extra))
    if imds:
        i = argv.index("--imds")
        argv[i + 1] = "yes"
        argv += ["--imds-endpoint", imds, "--imds-poll-interval", "200ms"]
    return Proc(name or f"agent-{instance}", argv, d)


def node_view(coord, instance):
    return coord.nodes().get(instance) or {}


def drain_phase(coord, instance):
    return node_view(coord, instance).get("drain", {}).get("phase")


def pods_on(kube, node):
    return kube.pods(node)


def is_ds(p):
    return any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])


def workload_on(kube, node):
    """The pods on the node that a drain must remove."""
    return [p for p in pods_on(kube, node) if not is_ds(p)]


def running_on(kube, node, n):
    return len([p for p in pods_on(kube, node) if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]) == n


def evictions(kube, node=None, decision=None):
    return [e for e in kube.audit()["evictions"] if (node is None or e.get("node") == node)
            and (decision is None or e.get("decision") == decision)]


def events_for(kube, node):
    items = kube.get("/api/v1/events")["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == node]


def has_finalizer(kube, node):
    n = kube.node(node)
    return n is not None and n.get("kind") == "Node" and \
        "nodesmith.io/termination" in (n["metadata"].get("finalizers") or [])


# ---- 1. spot notice ------------------------------------------------------------------------------

def scenario_spot(d, coord, kube):
    inst, node, spare = "i-spot", "ip-i-spot", "spare-1"
    imds = start_imds(d, inst)
    kube.register_node(node, instanceID=inst, capacity={"cpu": "8", "memory": "32Gi", "pods": "110"})
    kube.namespace("shop")
    kube.deployment("shop", "web", 5)
    kube.deployment("shop", "db", 3, annotations={"kubeapi.fake/ready-after-seconds": "40"})
    kube.pdb("shop", "db", {"app": "db"}, min_available=2)
    kube.deployment("shop", "pinned", 1, annotations={"karpenter.sh/do-not-disrupt": "true"})
    kube.deployment("kube-system", "dns", 2, priority_class="system-cluster-critical")
    # node agents tolerate every taint, as kube-proxy and CNI DaemonSets do (the fake's DaemonSet
    # controller removes pods from nodes with an untolerated NoSchedule taint)
    kube.daemonset("kube-system", "logs", tolerations=[{"operator": "Exists"}])
    kube.mirror_pod("kube-system", f"etcd-{node}", node)
    wait_for("13 pods running", lambda: running_on(kube, node, 13), 20)
    before = {p["metadata"]["uid"]: p for p in pods_on(kube, node)}
    kube.register_node(spare, capacity={"cpu": "8", "memory": "32Gi", "pods": "110"})

    agent = start_agent(d, coord, kube, inst, imds=imds)
    wait_for("pods reported", lambda: node_view(coord, inst).get("pods") == 13, 15)
    v = node_view(coord, inst)
    assert v["requested"]["pods"] == 13 and v["requested"]["cpuMillis"] == 5 * 50 + 3 * 50 + 50 + 2 * 50 + 10, v
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 10)

    notice = imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 20})
    deadline = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    t0 = time.time()
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 20)
    took = time.time() - t0
    assert time.time() < deadline, "drained after the deadline"
    v = node_view(coord, inst)
    assert v["drain"]["reason"] == "spot-interruption", v["drain"]

    left = {p["metadata"]["uid"] for p in pods_on(kube, node)}
    for uid, p in before.items():
        ann = p["metadata"].get("annotations") or {}
        ds = any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
        if ds or "kubernetes.io/config.mirror" in ann:
            assert uid in left, f"{p['metadata']['name']} was touched"
        else:
            assert uid not in left, f"{p['metadata']['name']} still on the node"
    ev = evictions(kube, node)
    evicted = [e for e in ev if e["decision"] == "evicted"]
    assert not [e for e in ev if e["pod"].startswith("logs-") or e["pod"].startswith("etcd-")], ev
    assert len(evicted) == 11, [e["pod"] for e in evicted]
    denied = [e for e in ev if e["decision"] == "denied" and e.get("pdb") == "db"]
    assert denied, "the PDB never refused an eviction"
    audit = kube.audit()
    assert audit["violationCount"] == 0, audit["violations"]
    # critical pods only after every other pod was evicted
    last_plain = max(e["time"] for e in evicted if not e["pod"].startswith("dns-"))
    first_critical = min(e["time"] for e in evicted if e["pod"].startswith("dns-"))
    assert first_critical > last_plain, (first_critical, last_plain)
    # the replacement for the blocked db pod was Ready on the spare node before it went
    n = kube.node(node)
    assert n["spec"].get("unschedulable") is True, n["spec"]
    assert any(t["key"] == "nodesmith.io/disrupted" and t["effect"] == "NoSchedule" for t in n["spec"]["taints"])
    reasons = {e["reason"] for e in events_for(kube, node)}
    assert {"NodesmithDraining", "NodesmithDrained", "NodesmithEvictionBlocked"} <= reasons, reasons
    print(f"spot: drained in {took:.1f}s, {deadline - time.time():.1f}s before the deadline; "
          f"11 pods evicted, DaemonSet and mirror pods untouched, {len(denied)} PDB refusals, 0 violations")

    # the finalizer stays while the instance is not yet going (deadline ahead) ...
    time.sleep(2.0)
    assert time.time() < deadline - 1
    assert has_finalizer(kube, node), "finalizer removed before the instance was going away"
    assert node_view(coord, inst)["drain"]["phase"] == "PHASE_DRAINED"
    # ... and the agent removes it once the spot deadline passed (nobody else did)
    wait_for("finalizer removed after the deadline", lambda: not has_finalizer(kube, node),
             deadline - time.time() + 5)
    assert time.time() >= deadline - 1.0
    print("spot: finalizer kept until the spot deadline passed, then removed by the agent")
    assert agent.stop() == 0


# ---- 2. kubectl delete node ----------------------------------------------------------------------

def scenario_delete_node(d, coord, kube, kubeconfig):
    inst, node = "i-del", "ip-i-del"
    kube.register_node(node, instanceID=inst)
    kube.namespace("del")
    kube.deployment("del", "api", 4, node_selector={"kubernetes.io/hostname": node})
    wait_for("pods running", lambda: running_on(kube, node, 5), 20)   # + the DaemonSet's
    agent = start_agent(d, coord, kube, inst)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 10)
    wait_for("pods reported", lambda: node_view(coord, inst).get("pods") == 5, 10)

    out = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "delete", "node", node, "--wait=false"],
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    n = kube.node(node)
    assert n["metadata"].get("deletionTimestamp"), "no deletionTimestamp"
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 20)
    v = node_view(coord, inst)
    assert v["drainReason"] == "node-deleted", v
    assert any(x["kind"] == "KIND_NODE_DELETED" for x in v["notices"]), v["notices"]
    assert workload_on(kube, node) == []
    # drained, instance not going away: the finalizer stays well past finalizer-timeout (1 s)
    time.sleep(3)
    assert has_finalizer(kube, node), "the agent removed the finalizer without a shutdown"
    assert "Finalizer nodesmith.io/termination removed" not in agent.output()
    print("kubectl delete node: Node held by the finalizer, drained (node-deleted), finalizer kept "
          "while the instance is not shutting down")
    assert agent.stop() == 0


# ---- 3. restart mid-drain ------------------------------------------------------------------------

def scenario_restart(d, coord, kube):
    inst, node = "i-rst", "ip-i-rst"
    kube.register_node(node, instanceID=inst, labels={"pool": "rst"})
    kube.register_node("spare-rst", labels={"pool": "rst"}, unschedulable=True)
    kube.namespace("rst")
    # one at a time: maxUnavailable 1 and replacements that take 2 s to be Ready
    kube.deployment("rst", "slow", 6, annotations={"kubeapi.fake/ready-after-seconds": "40"},
                    node_selector={"pool": "rst"})
    wait_for("pods running", lambda: running_on(kube, node, 7), 20)
    wait_for("pods ready", lambda: all(any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in p["status"].get("conditions", []))
                                       for p in pods_on(kube, node)), 20)
    kube.pdb("rst", "slow", {"app": "slow"}, max_unavailable=1)
    kube.req("PATCH", "/api/v1/nodes/spare-rst", {"spec": {"unschedulable": None}},
             ctype="application/strategic-merge-patch+json")
    agent = start_agent(d, coord, kube, inst)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 10)
    kube.req("DELETE", f"/api/v1/nodes/{node}")
    wait_for("two pods evicted", lambda: len(evictions(kube, node, "evicted")) >= 2, 20)
    agent.kill()
    assert len(evictions(kube, node, "evicted")) < 6, "drain finished before the restart"
    agent2 = start_agent(d, coord, kube, inst, name="agent-i-rst-2")
    wait_for("node empty", lambda: workload_on(kube, node) == [], 40)
    wait_for("drained", lambda: "drained (node-deleted)" in agent2.output(), 10)
    assert "resuming the drain" in agent2.output(), agent2.output()[-2000:]
    evicted = evictions(kube, node, "evicted")
    uids = [e["uid"] for e in evicted]
    assert len(uids) == len(set(uids)) == 6, [(e["pod"], e["uid"]) for e in evicted]
    assert kube.audit()["violationCount"] == 0
    # the cordon was done once (the restarted agent found its taint)
    print(f"restart: resumed from the taint, 6 pods evicted exactly once each "
          f"({len(evictions(kube, node))} eviction POSTs in all, PDB refusals included)")
    assert agent2.stop() == 0


# ---- 4. API server faults ------------------------------------------------------------------------

def scenario_faults(d, coord, kube):
    inst, node = "i-flt", "ip-i-flt"
    imds = start_imds(d, inst)
    kube.register_node(node, instanceID=inst)
    kube.namespace("flt")
    kube.deployment("flt", "w", 8, node_selector={"kubernetes.io/hostname": node})
    wait_for("pods running", lambda: running_on(kube, node, 9), 20)
    agent = start_agent(d, coord, kube, inst, imds=imds)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 10)
    kube.fake("POST", "faults", {"method": "POST", "path": "/eviction", "count": 10, "status": 429,
                                 "retryAfter": 1, "message": "slow down"})
    kube.fake("POST", "faults", {"method": "POST", "path": "/eviction", "count": 6, "status": 500,
                                 "message": "etcdserver: request timed out"})
    kube.fake("POST", "faults", {"method": "PATCH", "path": f"/nodes/{node}$", "count": 2, "status": 503})
    notice = imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 30})
    deadline = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 30)
    assert time.time() < deadline, "drain finished after the deadline"
    faults = kube.fake("GET", "faults")["faults"]
    matched = sum(f["matched"] for f in faults)
    assert matched == 18, faults
    assert workload_on(kube, node) == []
    print(f"faults: {matched} injected 429/500/503 answers, drained {deadline - time.time():.1f}s "
          "before the spot deadline")
    kube.fake("DELETE", "faults")
    assert agent.stop() == 0


# ---- 5. same end state as kubectl drain ----------------------------------------------------------

def build_workload(kube, ns, node):
    kube.namespace(ns)
    sel = {"kubernetes.io/hostname": node}
    kube.deployment(ns, "web", 3, node_selector=sel)
    kube.deployment(ns, "cache", 2, node_selector=sel)
    kube.mirror_pod(ns, "static", node)


def summary(kube, node):
    out = []
    for p in pods_on(kube, node):
        refs = p["metadata"].get("ownerReferences") or []
        kind = refs[0]["kind"] if refs else "-"
        name = p["metadata"]["name"] if kind in ("-",) else p["metadata"].get("labels", {}).get("app") or \
            p["metadata"].get("labels", {}).get("ds") or kind
        if kind == "ReplicaSet":
            name = p["metadata"]["labels"]["app"]
        out.append((kind, name))
    return sorted(out)


def scenario_kubectl_equivalence(d, coord, kube, kubeconfig):
    n_kc, n_ag, inst = "eq-kubectl", "ip-i-eq", "i-eq"
    imds = start_imds(d, inst)
    for n in (n_kc, n_ag):
        kube.register_node(n)
    build_workload(kube, "eq1", n_kc)
    build_workload(kube, "eq2", n_ag)
    wait_for("pods running", lambda: running_on(kube, n_kc, 7) and running_on(kube, n_ag, 7), 20)
    assert summary(kube, n_kc) == summary(kube, n_ag)

    out = subprocess.run([KUBECTL, "--kubeconfig", kubeconfig, "drain", n_kc, "--ignore-daemonsets",
                          "--delete-emptydir-data", "--timeout=60s"], capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr

    agent = start_agent(d, coord, kube, inst, imds=imds)
    wait_for("agent sees its node", lambda: node_view(coord, inst).get("pods") == 7, 10)
    imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 120})
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 30)
    wait_for("evicted pods gone", lambda: len(pods_on(kube, n_ag)) == len(pods_on(kube, n_kc)), 10)

    a, b = summary(kube, n_kc), summary(kube, n_ag)
    assert a == b, (a, b)
    assert a == [("-", "static"), ("DaemonSet", "logs")], a
    nk, na = kube.node(n_kc), kube.node(n_ag)
    assert nk["spec"].get("unschedulable") is True and na["spec"].get("unschedulable") is True
    # pods gone: the same deployments' pods, none of the pods left behind
    gone_kc = {e["pod"].rsplit("-", 2)[0] for e in evictions(kube, n_kc, "evicted")}
    gone_ag = {e["pod"].rsplit("-", 2)[0] for e in evictions(kube, n_ag, "evicted")}
    assert gone_kc == gone_ag == {"web", "cache"}, (gone_kc, gone_ag)
    assert len(evictions(kube, n_kc, "evicted")) == len(evictions(kube, n_ag, "evicted")) == 5
    print(f"kubectl drain vs agent: same pods gone (5: web, cache), same pods left {a}, both cordoned")
    assert agent.stop() == 0


def main():
    with TestDir("drain") as d:
        kube = FakeKube(d, grace_scale=GRACE_SCALE).start()
        kubeconfig = kube.kubeconfig(os.path.join(d, "kubeconfig"))
        pki = make_pki(d)
        coord = Coordinator(d, pki, insecure=True, interval="2s").start()
        scenario_spot(d, coord, kube)
        scenario_delete_node(d, coord, kube, kubeconfig)
        scenario_restart(d, coord, kube)
        scenario_faults(d, coord, kube)
        scenario_kubectl_equivalence(d, coord, kube, kubeconfig)
        coord.proc.stop()
        kube.proc.stop()
    print("test_drain: OK")


if __name__ == "__main__":
    main()
