#!/usr/bin/env python3
"""The agent drains its own node, end to end on 127.0.0.1, on the real control plane.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler (tests/pylib/cluster.py, one
cluster for every scenario), an emulated kubelet per Node (tests/fakes/kubelet.py, grace factor
0.05 so that grace periods and readiness probes' delays pass quickly), a coordinator, fake IMDS
instances for spot notices, and agents. The agents here use the coordinator's ServiceAccount
token from the shipped manifests: the identity of the coordinator's own drain, which may taint
(docs/drain.md); an agent acting as its node (cordon only, NodeRestriction) is
test_agent_identity.py's. Evictions are counted from kube-apiserver's audit log
(tests/pylib/kubeaudit.py), faults come from tests/fakes/kubeproxy.py. Shown:

1. spot notice: every evictable pod is evicted before the notice's deadline; DaemonSet and mirror
   pods stay; a PDB (minAvailable 2 of 3) refuses one eviction until the replacement is Ready on
   a second node, then the drain finishes; no PDB is ever violated; critical pods go last; Events
   are posted; the finalizer is kept while the spot deadline has not passed and removed by the
   agent once it has (the coordinator does not remove it yet);
2. `kubectl delete node`: the finalizer holds the Node, the drain runs (node-deleted, forced),
   the agent reports drained and keeps the finalizer, since the instance is not going away;
3. agent killed mid-drain and restarted: it resumes from its taint and no pod is evicted twice
   (eviction requests counted in the audit log);
4. 429 and 500 bursts from the API server on evictions and on the Node patch (the fault proxy in
   front of it): the drain still completes within the spot deadline;
5. the same workload drained once by `kubectl drain --ignore-daemonsets --delete-emptydir-data`
   and once by the agent ends in the same state."""
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from nsharness import (GiB, Coordinator, Proc, TestDir, agent_argv, make_pki,  # noqa: E402
                       make_root, wait_for)
from realkube import RealKube, ready  # noqa: E402

GRACE_SCALE = 0.05
FAKE_IMDS = os.path.join(HERE, "..", "fakes", "imds.py")
FINALIZER = "nodesmith.io/termination"


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


def start_agent(d, coord, kube, instance, imds=None, extra=(), name=None, via_proxy=False):
    root = os.path.join(d, f"root-{instance}")
    if not os.path.exists(root):
        make_root(root, cpus=2, mem_bytes=4 * GiB)
    kc = kube.agent_kubeconfig(f"agent-{instance}{'-proxy' if via_proxy else ''}", via_proxy)
    argv = agent_argv(coord, root, instance, extra=["--kubeconfig", kc, "--logind", "no",
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


def is_mirror(p):
    return "kubernetes.io/config.mirror" in (p["metadata"].get("annotations") or {})


def workload_on(kube, node):
    """The pods on the node that a drain must remove."""
    return [p for p in pods_on(kube, node) if not is_ds(p) and not is_mirror(p)]


def running_on(kube, node, n):
    return len([p for p in pods_on(kube, node) if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")]) == n


def evictions(kube, node=None, decision=None):
    return kube.audit.evictions(node, decision)


def events_for(kube, node):
    items = kube.get("/api/v1/events")["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == node]


def has_finalizer(kube, node):
    n = kube.node(node)
    return n is not None and FINALIZER in (n["metadata"].get("finalizers") or [])


# ---- 1. spot notice ------------------------------------------------------------------------------

def scenario_spot(d, coord, kube):
    inst, node, spare = "i-spot", "ip-i-spot", "spare-1"
    imds = start_imds(d, inst)
    kube.register_nodes(node, instances={node: inst})
    kube.namespace("shop")
    kube.deployment("shop", "web", 5)
    kube.deployment("shop", "db", 3, ready_after=40)
    kube.pdb("shop", "db", {"app": "db"}, min_available=2)
    kube.deployment("shop", "pinned", 1, annotations={"karpenter.sh/do-not-disrupt": "true"})
    kube.deployment("kube-system", "dns", 2, priority_class="system-cluster-critical")
    # node agents tolerate every taint, as kube-proxy and CNI DaemonSets do
    kube.daemonset("kube-system", "logs", tolerations=[{"operator": "Exists"}])
    kube.mirror_pod("kube-system", f"etcd-{node}", node)
    wait_for("13 pods running", lambda: running_on(kube, node, 13), 60, 0.2)
    wait_for("13 pods ready", lambda: sum(ready(p) for p in pods_on(kube, node)) == 13, 60, 0.2)
    before = {p["metadata"]["uid"]: p for p in pods_on(kube, node)}
    kube.register_nodes(spare)

    agent = start_agent(d, coord, kube, inst, imds=imds)
    wait_for("pods reported", lambda: node_view(coord, inst).get("pods") == 13, 30)
    v = node_view(coord, inst)
    assert v["requested"]["pods"] == 13 and v["requested"]["cpuMillis"] == 5 * 50 + 3 * 50 + 50 + 2 * 50 + 10, v
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 20)

    notice = imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 25})
    deadline = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    t0 = time.time()
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 30, 0.2)
    took = time.time() - t0
    assert time.time() < deadline, "drained after the deadline"
    v = node_view(coord, inst)
    assert v["drain"]["reason"] == "spot-interruption", v["drain"]

    left = {p["metadata"]["uid"] for p in pods_on(kube, node)}
    for uid, p in before.items():
        if is_ds(p) or is_mirror(p):
            assert uid in left, f"{p['metadata']['name']} was touched"
        else:
            assert uid not in left, f"{p['metadata']['name']} still on the node"
    ev = evictions(kube, node)
    evicted = [e for e in ev if e["decision"] == "evicted"]
    assert not [e for e in ev if e["pod"].startswith("logs-") or e["pod"].startswith("etcd-")], ev
    assert len(evicted) == 11, [e["pod"] for e in evicted]
    denied = [e for e in ev if e["decision"] == "denied" and e.get("pdb") == "db"]
    assert denied, "the PDB never refused an eviction"
    assert not kube.audit.violations(), kube.audit.violations()
    # critical pods only after every other pod was evicted
    last_plain = max(e["unix"] for e in evicted if not e["pod"].startswith("dns-"))
    first_critical = min(e["unix"] for e in evicted if e["pod"].startswith("dns-"))
    assert first_critical > last_plain, (first_critical, last_plain)
    # the blocked db pod went only once its replacement was Ready on the spare node
    n = kube.node(node)
    assert n["spec"].get("unschedulable") is True, n["spec"]
    assert any(t["key"] == "nodesmith.io/disrupted" and t["effect"] == "NoSchedule" for t in n["spec"]["taints"])
    # the agent posts its events after the state it reports: the last one may follow it closely
    want = {"NodesmithDraining", "NodesmithDrained", "NodesmithEvictionBlocked"}
    try:
        wait_for("the drain's events on the Node", lambda: want <= {e["reason"] for e in events_for(kube, node)}, 10, 0.2)
    except AssertionError:
        raise AssertionError(f"events {sorted({e['reason'] for e in events_for(kube, node)})}, want {sorted(want)}")
    print(f"spot: drained in {took:.1f}s, {deadline - time.time():.1f}s before the deadline; "
          f"11 pods evicted, DaemonSet and mirror pods untouched, {len(denied)} PDB refusals, 0 violations")

    # the finalizer stays while the instance is not yet going (deadline ahead) ...
    time.sleep(2.0)
    assert time.time() < deadline - 1
    assert has_finalizer(kube, node), "finalizer removed before the instance was going away"
    assert node_view(coord, inst)["drain"]["phase"] == "PHASE_DRAINED"
    # ... and the agent removes it once the spot deadline passed (nobody else did)
    wait_for("finalizer removed after the deadline", lambda: not has_finalizer(kube, node),
             deadline - time.time() + 10)
    assert time.time() >= deadline - 1.0
    print("spot: finalizer kept until the spot deadline passed, then removed by the agent")
    assert agent.stop() == 0


# ---- 2. kubectl delete node ----------------------------------------------------------------------

def scenario_delete_node(d, coord, kube):
    inst, node = "i-del", "ip-i-del"
    kube.register_nodes(node, instances={node: inst})
    kube.namespace("del")
    kube.deployment("del", "api", 4, node_selector={"kubernetes.io/hostname": node})
    wait_for("pods running", lambda: running_on(kube, node, 5), 60, 0.2)   # + the DaemonSet's
    agent = start_agent(d, coord, kube, inst)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 20)
    wait_for("pods reported", lambda: node_view(coord, inst).get("pods") == 5, 20)

    kube.c.kubectl("delete", "node", node, "--wait=false")
    n = kube.node(node)
    assert n["metadata"].get("deletionTimestamp"), "no deletionTimestamp"
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 30, 0.2)
    v = node_view(coord, inst)
    assert v["drainReason"] == "node-deleted", v
    assert any(x["kind"] == "KIND_NODE_DELETED" for x in v["notices"]), v["notices"]
    wait_for("the node empty", lambda: workload_on(kube, node) == [], 15, 0.2)  # finished by its kubelet
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
    kube.register_nodes(node, "spare-rst", instances={node: inst}, labels={"pool": "rst"})
    kube.c.kubectl("cordon", "spare-rst")
    kube.namespace("rst")
    # one at a time: maxUnavailable 1 and replacements that take 2 s to be Ready
    kube.deployment("rst", "slow", 6, ready_after=40, node_selector={"pool": "rst"})
    wait_for("pods running", lambda: running_on(kube, node, 7), 60, 0.2)
    wait_for("pods ready", lambda: all(ready(p) for p in pods_on(kube, node)), 60, 0.2)
    kube.pdb("rst", "slow", {"app": "slow"}, max_unavailable=1)
    kube.c.kubectl("uncordon", "spare-rst")
    agent = start_agent(d, coord, kube, inst)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 20)
    kube.req("DELETE", f"/api/v1/nodes/{node}")
    wait_for("two pods evicted", lambda: len(evictions(kube, node, "evicted")) >= 2, 40, 0.1)
    agent.kill()
    assert len(evictions(kube, node, "evicted")) < 6, "drain finished before the restart"
    agent2 = start_agent(d, coord, kube, inst, name="agent-i-rst-2")
    wait_for("node empty", lambda: workload_on(kube, node) == [], 90, 0.2)
    wait_for("drained", lambda: "drained (node-deleted)" in agent2.output(), 20)
    assert "resuming the drain" in agent2.output(), agent2.output()[-2000:]
    evicted = evictions(kube, node, "evicted")
    uids = [e["uid"] for e in evicted]
    assert len(uids) == len(set(uids)) == 6, [(e["pod"], e["uid"]) for e in evicted]
    assert not kube.audit.violations(), kube.audit.violations()
    print(f"restart: resumed from the taint, 6 pods evicted exactly once each "
          f"({len(evictions(kube, node))} eviction requests in all, PDB refusals included)")
    assert agent2.stop() == 0


# ---- 4. API server faults ------------------------------------------------------------------------

def scenario_faults(d, coord, kube):
    inst, node = "i-flt", "ip-i-flt"
    imds = start_imds(d, inst)
    kube.register_nodes(node, instances={node: inst})
    kube.namespace("flt")
    kube.deployment("flt", "w", 8, node_selector={"kubernetes.io/hostname": node})
    wait_for("pods running", lambda: running_on(kube, node, 9), 60, 0.2)
    agent = start_agent(d, coord, kube, inst, imds=imds, via_proxy=True)
    wait_for("finalizer added", lambda: has_finalizer(kube, node), 20)
    px = kube.proxy
    px.fault(method="POST", path="/eviction", count=10, status=429, retryAfter=1, message="slow down")
    px.fault(method="POST", path="/eviction", count=6, status=500, message="etcdserver: request timed out")
    px.fault(method="PATCH", path=f"/nodes/{node}$", count=2, status=503)
    notice = imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 40})
    deadline = time.mktime(time.strptime(notice["time"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 40, 0.2)
    assert time.time() < deadline, "drain finished after the deadline"
    faults = px._call("GET", "faults")["faults"]
    matched = sum(f["matched"] for f in faults)
    assert matched == 18, faults
    wait_for("the node empty", lambda: workload_on(kube, node) == [], 15, 0.2)  # finished by its kubelet
    print(f"faults: {matched} injected 429/500/503 answers, drained {deadline - time.time():.1f}s "
          "before the spot deadline")
    px.clear()
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
        if is_mirror(p):
            out.append(("mirror", p["metadata"]["name"]))
        elif refs and refs[0]["kind"] == "ReplicaSet":
            out.append(("ReplicaSet", p["metadata"]["labels"]["app"]))
        elif refs and refs[0]["kind"] == "DaemonSet":
            out.append(("DaemonSet", p["metadata"]["labels"]["ds"]))
        else:
            out.append(("-", p["metadata"]["name"]))
    return sorted(out)


def scenario_kubectl_equivalence(d, coord, kube):
    n_kc, n_ag, inst = "eq-kubectl", "ip-i-eq", "i-eq"
    imds = start_imds(d, inst)
    kube.register_nodes(n_kc, n_ag, instances={n_ag: inst})
    build_workload(kube, "eq1", n_kc)
    build_workload(kube, "eq2", n_ag)
    wait_for("pods running", lambda: running_on(kube, n_kc, 7) and running_on(kube, n_ag, 7), 60, 0.2)
    assert summary(kube, n_kc) == summary(kube, n_ag)

    kube.c.kubectl("drain", n_kc, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s", timeout=90)

    agent = start_agent(d, coord, kube, inst, imds=imds)
    wait_for("agent sees its node", lambda: node_view(coord, inst).get("pods") == 7, 20)
    imds_ctl(imds, "POST", "spot", {"action": "terminate", "in_seconds": 120})
    wait_for("drained", lambda: drain_phase(coord, inst) == "PHASE_DRAINED", 40, 0.2)
    wait_for("evicted pods gone", lambda: len(pods_on(kube, n_ag)) == len(pods_on(kube, n_kc)), 20)

    a, b = summary(kube, n_kc), summary(kube, n_ag)
    assert a == b, (a, b)
    assert a == [("DaemonSet", "logs"), ("mirror", "static")], a
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
        kube = RealKube(d, grace_factor=GRACE_SCALE)
        try:
            kube.start(packaging=True, fault_proxy=True)
            pki = make_pki(d)
            coord = Coordinator(d, pki, insecure=True, interval="2s").start()
            for scenario in (scenario_spot, scenario_delete_node, scenario_restart, scenario_faults,
                             scenario_kubectl_equivalence):
                t = time.monotonic()
                scenario(d, coord, kube)
                print(f"  ({scenario.__name__}: {time.monotonic() - t:.0f}s)", flush=True)
            coord.proc.stop()
        finally:
            kube.stop()
    print("test_drain: OK")


if __name__ == "__main__":
    main()
