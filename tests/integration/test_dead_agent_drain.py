#!/usr/bin/env python3
"""The coordinator drains a node whose agent is dead, end to end on the local stack (moto behind
tests/fakes/ec2proxy.py, the fake API server, the node emulator running one real agent per
instance, a coordinator with --report-interval 1s, so an agent counts as silent after 3 s).

  1. `kubectl delete node` of a node whose agent was killed: the coordinator cordons, taints and
     evicts through the Eviction API (a PDB refuses one eviction until a replacement node it
     launched runs the pod; no violation), DaemonSet pods stay; the instance is terminated, the
     finalizer removed, the Node gone, every pod Running elsewhere. The drain's deadline is the
     NodePool's terminationGracePeriod.
  2. A spot interruption that the agent reported before it died (its API calls were failing, so it
     had done nothing): the coordinator drains the node before the notice's deadline and
     terminates the instance itself, before EC2 reclaims it.
  3. Hand-over: the agent is stopped (SIGSTOP), the Node deleted, the coordinator begins the drain;
     the agent is let go on (SIGCONT) mid-drain: the coordinator stops at its next report, the
     agent resumes from the taint, no pod is evicted twice, the node goes as usual.
  4. A dead agent and an EventBridge spot interruption warning from the SQS interruption queue
     (moto's SQS; the node's IMDS says nothing): the coordinator drains the node and terminates the
     instance, the message is deleted.
  5. Two agents killed, then the coordinator restarted with --max-proxy-drains 1 (it has never
     heard of them) and both Nodes deleted: one drain at a time, the other waits; both drained,
     terminated, gone.
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, http_get, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import (Queue, apply_objs as apply, coordinator_metric as m, deployment, evictions,  # noqa: E402
                      instance, instance_state, node_class_yaml, on_node, pdb, running_of, violations,
                      wait_registered)
from workload import fake_api as fake  # noqa: E402

CLUSTER = "deadagent-test"
NODEPOOLS = node_class_yaml(CLUSTER) + """---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      terminationGracePeriod: 3m
      requirements:
        - {key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}
        - {key: nodesmith.io/instance-category, operator: In, values: [c, m, r]}
        - {key: nodesmith.io/instance-generation, operator: Gt, values: ["5"]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: nodesmith.io/instance-size, operator: NotIn, values: [metal, medium]}
"""
TGP_SECONDS = 180
DEFAULT_GRACE = "10m"

DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "logs", "namespace": "default"},
             "spec": {"selector": {"matchLabels": {"ds": "logs"}},
                      "template": {"metadata": {"labels": {"ds": "logs"}},
                                   "spec": {"tolerations": [{"operator": "Exists"}],
                                            "containers": [{"name": "c", "image": "pause",
                                                            "resources": {"requests": {"cpu": "10m"}}}]}}}}


def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))


def node_events(s, node):
    items = json.loads(s.kubectl("get", "events", "-A", "-o", "json"))["items"]
    return [e for e in items if e.get("involvedObject", {}).get("name") == node]


def coordinator_events(s, node):
    return {e["reason"]: e for e in node_events(s, node)
            if (e.get("source") or {}).get("component") == "nodesmith-coordinator"
            or e.get("reportingComponent") == "nodesmith-coordinator"}


def metrics(s):
    return http_get(s.coordinator_http + "/metrics")[1]


def node_gone(s, node):
    return node not in s.nodes()


def terminate_calls(s, iid):
    return [c for c in s.proxy("GET", "log?action=TerminateInstances")["calls"] if iid in json.dumps(c)]


def slow_evicted(s, node):
    return [e for e in evictions(s, node, "evicted") if e["pod"].startswith("slow-")]


def on_node(pods, node):
    return [p for p in pods if p["spec"].get("nodeName") == node]


def place_on(s, node, app, n, *objs):
    """Creates objs with every node but `node` (a name or a list) cordoned, so that app's n pods
    land there; waits until they are Ready and the Nodes carry the termination finalizer."""
    targets = [node] if isinstance(node, str) else list(node)
    others = [x for x in s.nodes() if x not in targets]
    for x in others:
        s.kubectl("cordon", x)
    apply(s, *objs)
    wait_for(f"{app} pods Ready on {node}", lambda: len(
        [p for t in targets for p in on_node(running_of(s, app), t) if ready(p)]) == n, 30, 0.3)
    for x in others:
        s.kubectl("uncordon", x)
    wait_for(f"finalizer on {node}", lambda: all("nodesmith.io/termination" in
             (s.nodes()[t]["metadata"].get("finalizers") or []) for t in targets), 20, 0.3)


# ---- 1. kubectl delete node, agent dead ----------------------------------------------------------

def scenario_delete(s):
    iids = [s.run_instance("m6i.large", zone=z, nodepool="general") for z in ("us-east-1a", "us-east-1b", "us-east-1c")]
    names = wait_registered(s, iids)
    apply(s, DAEMONSET, deployment("web", 6, "800m"), pdb("web", maxUnavailable=1))
    wait_for("6 web pods Running and Ready", lambda: len([p for p in running_of(s, "web") if ready(p)]) == 6, 60, 0.5)
    victim = iids[0]
    node = names[victim]
    on_victim = {p["metadata"]["uid"] for p in on_node(running_of(s, "web"), node)}
    assert len(on_victim) == 2, [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in running_of(s, "web")]
    wait_for("finalizer on the victim", lambda: "nodesmith.io/termination" in
             (s.nodes()[node]["metadata"].get("finalizers") or []), 20, 0.3)

    pid = instance(s, victim)["agentPid"]
    os.kill(pid, signal.SIGKILL)
    wait_for("agent dead", lambda: not instance(s, victim)["agentAlive"], 10, 0.2)
    t_kill = time.time()
    s.kubectl("delete", "node", node, "--wait=false")
    print(f"1. agent of {victim} ({node}) killed, Node deleted")

    wait_for("a coordinator drain started", lambda: m(s, "nodesmith_proxy_drains_started_total") >= 1, 20, 0.3)
    started_after = time.time() - t_kill
    wait_for("victim Node gone", lambda: node_gone(s, node), 150, 0.5)
    took = time.time() - t_kill
    assert not instance(s, victim)["agentAlive"]
    evicted = evictions(s, node, "evicted")
    denied = [e for e in evictions(s, node, "denied") if e.get("pdb") == "web"]
    assert sorted(e["uid"] for e in evicted) == sorted(on_victim), (evicted, on_victim)
    assert not [e for e in evictions(s, node) if e["pod"].startswith("logs-")], "DaemonSet pod evicted"
    assert denied, "the PDB never refused an eviction"
    assert violations(s) == 0
    wait_for("6 web pods Running elsewhere", lambda: len(running_of(s, "web")) == 6 and
             not on_node(running_of(s, "web"), node), 60, 0.5)
    assert instance_state(s, victim) in ("shutting-down", "terminated"), instance_state(s, victim)
    assert terminate_calls(s, victim), "no TerminateInstances for the victim"
    ev = coordinator_events(s, node)
    assert {"NodesmithCoordinatorDrain", "NodesmithDraining", "NodesmithDrained"} <= set(ev), sorted(ev)
    # "Draining node (node-deleted, forced), Ns before the deadline": the NodePool's 3m, not 10m
    secs = float(ev["NodesmithDraining"]["message"].rsplit(", ", 1)[1].split("s ")[0])
    assert 0 < secs <= TGP_SECONDS, ev["NodesmithDraining"]["message"]
    assert m(s, "nodesmith_proxy_drain_pods_evicted_total") >= 2
    assert m(s, "nodesmith_proxy_drains_finished_total", {"result": "drained"}) >= 1
    launched = [i for i in s.instances(cluster_only=True) if i not in iids]
    print(f"1. coordinator drain began {started_after:.1f}s after the kill; 2 pods evicted, {len(denied)} PDB "
          f"refusals, 0 violations, {len(launched)} replacement node(s); instance {instance_state(s, victim)}, "
          f"Node gone {took:.1f}s after the kill; drain deadline {secs:.0f}s (terminationGracePeriod)")
    return [i for i in iids if i != victim]


# ---- 2. spot notice reported, then the agent died -------------------------------------------------

def scenario_spot(s, others):
    iid = s.run_instance("m6i.large", zone="us-east-1a", spot=True, nodepool="general")
    node = wait_registered(s, [iid])[iid]
    place_on(s, node, "api", 2, deployment("api", 2, "100m"), pdb("api", minAvailable=1))

    # the agent's patches of its Node fail: it is told to drain but gets nowhere before it dies
    fake(s, "POST", "faults", {"method": "PATCH", "path": f"/nodes/{node}$", "count": 100000, "status": 503,
                               "message": "unavailable"})
    since = s.emu_events()[-1]["seq"] if s.emu_events() else 0
    notice = s.spot_interrupt(iid, grace=90)
    notice_at = time.time() + notice["interruption"]["graceSeconds"]
    wait_for("the agent directed to drain", lambda: any(
        e["event"] == "drain-directed" and e["instance"] == iid for e in s.emu_events(since)), 20, 0.2)
    v = s.coordinator_nodes()[iid]
    assert v.get("drainReason") == "spot-interruption", v
    os.kill(instance(s, iid)["agentPid"], signal.SIGKILL)
    wait_for("agent dead", lambda: not instance(s, iid)["agentAlive"], 10, 0.2)
    assert evictions(s, node) == [], "the agent evicted before it died"
    fake(s, "DELETE", "faults")
    t_kill = time.time()
    print(f"2. spot notice on {iid} ({node}) reported, agent killed before it could drain")

    wait_for("spot instance terminated", lambda: instance_state(s, iid) in ("shutting-down", "terminated"), 60, 0.5)
    t_term = time.time()
    assert t_term < notice_at - 5, f"terminated {t_term - notice_at:.1f}s after the notice's time"
    evicted = evictions(s, node, "evicted")
    assert len(evicted) == 2 and len({e["uid"] for e in evicted}) == 2, evicted
    assert violations(s) == 0
    calls = terminate_calls(s, iid)
    assert calls, "no TerminateInstances"
    wait_for("spot Node gone", lambda: node_gone(s, node), 30, 0.5)
    wait_for("api pods Running elsewhere", lambda: len(running_of(s, "api")) == 2, 30, 0.5)
    assert not any(e["event"] == "reclaimed" and e["instance"] == iid for e in s.emu_events(since)), \
        "EC2 reclaimed the instance before the coordinator terminated it"
    ev = coordinator_events(s, node)
    assert "NodesmithDrained" in ev and "NodesmithCoordinatorDrain" in ev, sorted(ev)
    print(f"2. drained by the coordinator and terminated {t_term - t_kill:.1f}s after the kill, "
          f"{notice_at - t_term:.0f}s before the spot deadline; 2 pods evicted, 0 violations; Node gone")
    return others


# ---- 3. the agent comes back mid-drain -------------------------------------------------------------

def scenario_handover(s, others):
    target = others[0]
    node = instance(s, target)["node"]
    # replacements take 60 s x grace-scale 0.05 = 3 s to be Ready: the PDB holds each eviction
    place_on(s, node, "slow", 3, deployment("slow", 3, "50m", ready_after=60),
             pdb("slow", maxUnavailable=1))
    slow = {p["metadata"]["uid"] for p in on_node(running_of(s, "slow"), node)}
    handed_before = m(s, "nodesmith_proxy_drains_finished_total", {"result": "handed_over"})
    agent = instance(s, target)
    os.kill(agent["agentPid"], signal.SIGSTOP)
    try:
        s.kubectl("delete", "node", node, "--wait=false")
        wait_for("the coordinator's first eviction of a slow pod", lambda: slow_evicted(s, node), 30, 0.2)
        by_coordinator = len(slow_evicted(s, node))
        assert by_coordinator < 3, "drain finished before the agent came back"
    finally:
        os.kill(agent["agentPid"], signal.SIGCONT)
    print(f"3. agent of {target} ({node}) stopped, Node deleted; the coordinator evicted {by_coordinator}; agent resumed")
    wait_for("hand-over", lambda: m(s, "nodesmith_proxy_drains_finished_total", {"result": "handed_over"})
             > handed_before, 20, 0.2)
    wait_for("target Node gone", lambda: node_gone(s, node), 90, 0.5)
    evicted = evictions(s, node, "evicted")
    uids = [e["uid"] for e in evicted]
    assert len(uids) == len(set(uids)), ("a pod evicted twice", [(e["pod"], e["uid"]) for e in evicted])
    assert sorted(e["uid"] for e in slow_evicted(s, node)) == sorted(slow), (evicted, slow)
    assert violations(s) == 0
    with open(agent["agentLog"], errors="replace") as f:
        log = f.read()
    assert "resuming the drain" in log, log[-3000:]
    assert "NodesmithDrainHandedOver" in coordinator_events(s, node)
    wait_for("slow pods Running elsewhere", lambda: len(running_of(s, "slow")) == 3, 30, 0.5)
    print(f"3. handed over: the agent resumed from the taint and evicted {3 - by_coordinator} slow pods; "
          f"{len(uids)} pods evicted in all, each once, 0 violations; instance {instance_state(s, target)}, Node gone")


# ---- 4. a dead agent and the SQS interruption queue ------------------------------------------------

def scenario_queue(s, q):
    iid = s.run_instance("m6i.large", zone="us-east-1b", spot=True, nodepool="general")
    node = wait_registered(s, [iid])[iid]
    place_on(s, node, "batch", 2, deployment("batch", 2, "100m"), pdb("batch", minAvailable=1))
    started = m(s, "nodesmith_proxy_drains_started_total")
    os.kill(instance(s, iid)["agentPid"], signal.SIGKILL)
    wait_for("agent dead", lambda: not instance(s, iid)["agentAlive"], 10, 0.2)
    q.send_spot_warning(iid, "us-east-1b")
    t0 = time.time()
    print(f"4. agent of spot instance {iid} ({node}) killed; spot interruption warning sent to the queue only")
    wait_for("the warning read", lambda: m(s, "nodesmith_interruption_messages_total",
                                           {"kind": "spot_interruption"}) >= 1, 40, 0.3)
    wait_for("a coordinator drain started", lambda: m(s, "nodesmith_proxy_drains_started_total") > started, 20, 0.3)
    assert s.coordinator_nodes()[iid].get("drainReason") == "spot-interruption", s.coordinator_nodes()[iid]
    assert not instance(s, iid).get("interruption"), "the IMDS was told too"
    wait_for("spot instance terminated", lambda: instance_state(s, iid) in ("shutting-down", "terminated"), 60, 0.5)
    took = time.time() - t0
    assert took < 110, f"terminated {took:.0f}s after the warning: past the two minutes"
    assert terminate_calls(s, iid), "no TerminateInstances"
    evicted = evictions(s, node, "evicted")
    assert len(evicted) == 2 and len({e["uid"] for e in evicted}) == 2, evicted
    assert violations(s) == 0
    wait_for("spot Node gone", lambda: node_gone(s, node), 30, 0.5)
    wait_for("batch pods Running elsewhere", lambda: len(running_of(s, "batch")) == 2, 30, 0.5)
    wait_for("the message deleted", lambda: q.depth() == 0, 30, 0.5)
    print(f"4. drained by the coordinator and terminated {took:.1f}s after the warning; 2 pods evicted, "
          "0 violations; Node gone; message deleted")


# ---- 5. a restarted coordinator, two dead agents, one drain at a time ----------------------------

def scenario_restart_limit(s, coord_args):
    iids = [s.run_instance("m6i.large", zone=z, nodepool="general") for z in ("us-east-1a", "us-east-1c")]
    names = wait_registered(s, iids)
    victims = [names[i] for i in iids]
    place_on(s, victims, "pair", 4, deployment("pair", 4, "100m", ready_after=60),
             pdb("pair", maxUnavailable=1))
    uids = {v: {p["metadata"]["uid"] for p in on_node(running_of(s, "pair"), v)} for v in victims}
    assert all(len(u) == 2 for u in uids.values()), uids
    for i in iids:
        os.kill(instance(s, i)["agentPid"], signal.SIGKILL)
    wait_for("agents dead", lambda: not any(instance(s, i)["agentAlive"] for i in iids), 10, 0.2)
    rc = s.procs["coordinator"].stop(timeout=15)
    assert rc == 0, f"the coordinator exited {rc}"
    s.start_coordinator(*coord_args, "--max-proxy-drains", "1", name="coordinator-2")
    wait_for("the new coordinator leading", lambda: json.loads(
        http_get(s.coordinator_http + "/api/v1/provisioning")[1]).get("leading"), 30, 0.3)
    for v in victims:
        s.kubectl("delete", "node", v, "--wait=false")
    print(f"5. agents of {iids} killed, coordinator restarted with --max-proxy-drains 1, both Nodes deleted")
    wait_for("one drain under way, one waiting", lambda: m(s, "nodesmith_proxy_drains_active") == 1
             and m(s, "nodesmith_proxy_drains_waiting") == 1, 30, 0.2)
    # the waiting one is tainted and cordoned at once: no pod evicted from the other lands on it
    wait_for("both victims cordoned", lambda: all(
        (s.nodes().get(v) or {"spec": {"unschedulable": True}})["spec"].get("unschedulable") for v in victims), 10, 0.2)
    wait_for("both Nodes gone", lambda: all(node_gone(s, v) for v in victims), 120, 0.5)
    for v in victims:
        evicted = evictions(s, v, "evicted")
        assert sorted(e["uid"] for e in evicted) == sorted(uids[v]), (v, evicted, uids[v])
    assert violations(s) == 0
    assert m(s, "nodesmith_proxy_drains_started_total") == 2
    assert m(s, "nodesmith_proxy_drains_precordoned_total") == 1
    assert all(instance_state(s, i) in ("shutting-down", "terminated") for i in iids)
    wait_for("pair pods Running elsewhere", lambda: len(running_of(s, "pair")) == 4, 30, 0.5)
    print("5. drained one after the other by the restarted coordinator (never heard of them), the second "
          "cordoned while it waited; 4 pods evicted, each from the node it ran on, 0 violations; both instances "
          "terminated, both Nodes gone")


def main():
    with TestDir("dead-agent-drain") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            s.start_ec2()
            q = Queue(s)
            s.setup_network()
            s.start_kube(grace_scale=0.05, fault_proxy=True)
            s.apply(NODEPOOLS)
            coord_args = ("--batch-idle", "700ms", "--lease-duration", "3s", "--consolidation-interval", "0",
                          "--termination-grace-period", DEFAULT_GRACE,
                          "--interruption-queue", q.url, "--sqs-endpoint", s.ec2_endpoint)
            s.start_coordinator(*coord_args)
            s.start_emulator(boot_delay=0.3, agent_args=["--imds-poll-interval", "250ms"])
            others = scenario_delete(s)
            others = scenario_spot(s, others)
            scenario_handover(s, others)
            scenario_queue(s, q)
            scenario_restart_limit(s, coord_args)
            m_text = metrics(s)
            print("metrics of the restarted coordinator: " + ", ".join(
                f"{k}={metric(m_text, k, l) or 0:.0f}" for k, l in (
                    ("nodesmith_proxy_drains_started_total", None),
                    ("nodesmith_proxy_drains_finished_total", {"result": "drained"}),
                    ("nodesmith_proxy_drains_finished_total", {"result": "handed_over"}),
                    ("nodesmith_proxy_drain_pods_evicted_total", None))))
            rcs = s.stop_all()
            assert rcs.get("coordinator-2") == 0, f"the coordinator exited {rcs.get('coordinator-2')}"
    print("test_dead_agent_drain: OK")


if __name__ == "__main__":
    main()
