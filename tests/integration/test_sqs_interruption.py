#!/usr/bin/env python3
"""The interruption queue end to end on the local stack: moto serves EC2 (behind
tests/fakes/ec2proxy.py) and SQS, the fake API server, the node emulator running one real agent
per instance, and a coordinator given --interruption-queue.

  1. An EventBridge spot interruption warning for a node's instance reaches the queue only (the
     node's IMDS says nothing): the node is told to drain, a replacement is launched before the
     old node is gone, the pods run elsewhere with no PDB violation (the fake API server's
     eviction audit), the instance is terminated and the Node is gone; the message is deleted.
  2. The same warning from both sources: the agent reports the IMDS notice, then the queue
     delivers the event for that instance (twice: SQS delivers at least once): one notice,
     counted and logged once; the queue's copies count as duplicates.
  3. A warning for an instance the coordinator has not heard of: the coordinator restarted while
     the node's agent was frozen (SIGSTOP). The Node is found by its providerID and the node
     told to drain; the agent is let go on at once. Whoever drains it (the agent, once it
     reports, or the coordinator for a silent agent), the notice is never withdrawn, the pod
     runs elsewhere, the instance is terminated and the Node is gone.
  4. The queue failing (500 from the proxy, four times in a row): the coordinator backs off
     (doubling from 1 s, with jitter), warns once, and reads the next message when it is back.
  5. An instance launched for a pending pod is reclaimed before it boots (the emulator is paused):
     the queue's state change to shutting-down takes it out of the capacity on the way, and a
     new instance is launched at once (not after the registration time-out); the pod runs.

Each scenario is a function taking the stack; a case with a dead agent goes next to them.
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import (Queue, apply_objs, coordinator_metric, deployment, evictions, instance,  # noqa: E402
                      instance_state, node_class_yaml, on_node, pdb, running_of, spot_warning, violations,
                      wait_registered)

CLUSTER = "sqs-test"
QUEUE = "nodesmith-interruptions"
NODEPOOLS = node_class_yaml(CLUSTER) + """---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      requirements:
        - {key: nodesmith.io/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: nodesmith.io/instance-category, operator: In, values: [c, m, r]}
        - {key: nodesmith.io/instance-generation, operator: Gt, values: ["5"]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: nodesmith.io/instance-size, operator: NotIn, values: [metal, medium]}
"""


# ---- helpers -----------------------------------------------------------------------------------

m = coordinator_metric


def place_on(s, node, *objs):
    """Apply objs while every other node is cordoned, so their pods land on node."""
    others = [n for n in s.nodes() if n != node]
    for n in others:
        s.kubectl("cordon", n)
    apply_objs(s, *objs)
    return others


def uncordon(s, nodes):
    for n in nodes:
        s.kubectl("uncordon", n)


def coordinator_log(s):
    with open(os.path.join(s.workdir, "coordinator.log"), errors="replace") as f:
        return f.read()


# ---- 1. the queue alone tells of a spot interruption ---------------------------------------------

def scenario_queue_spot(s, q):
    iid = s.run_instance("m6i.large", zone="us-east-1a", spot=True, nodepool="general")
    node = wait_registered(s, [iid])[iid]
    others = place_on(s, node, deployment("web", 2, "500m", "256Mi"), pdb("web", minAvailable=1))
    wait_for("web pods Running on the spot node", lambda: len(on_node(running_of(s, "web"), node)) == 2, 30, 0.3)
    uncordon(s, others)
    wait_for("finalizer on the spot node", lambda: "nodesmith.io/termination" in
             (s.nodes()[node]["metadata"].get("finalizers") or []), 20, 0.3)
    before = set(s.instances(cluster_only=True))
    ice = m(s, "nodesmith_insufficient_capacity_total")
    since = s.emu_events()[-1]["seq"]

    q.send(spot_warning(iid))
    t0 = time.time()
    print(f"1. spot interruption warning for {iid} ({node}) sent to the queue only")
    wait_for("the agent directed to drain", lambda: any(
        e["event"] == "drain-directed" and e["instance"] == iid for e in s.emu_events(since)), 30, 0.2)
    directed = time.time() - t0
    v = s.coordinator_nodes()[iid]
    assert v.get("drainReason") == "spot-interruption", v
    assert [(n["kind"], n["sources"]) for n in v["notices"]] == [("KIND_SPOT_INTERRUPTION", ["queue"])], v
    assert not instance(s, iid).get("interruption"), "the IMDS was told too"
    wait_for("the node gone", lambda: node not in s.nodes(), 120, 0.5)
    gone = time.time() - t0
    wait_for("web pods Running elsewhere", lambda: len(running_of(s, "web")) == 2, 60, 0.5)
    assert not on_node(running_of(s, "web"), node)
    assert instance_state(s, iid) in ("shutting-down", "terminated"), instance_state(s, iid)
    assert violations(s) == 0
    evicted = evictions(s, node, "evicted")
    assert len(evicted) == 2, evicted

    # the replacement was launched before the old node went away
    events = s.emu_events(since)
    new = [e for e in events if e["event"] == "launched" and e["instance"] not in before]
    deleted = [e for e in events if e["event"] == "node-deleted" and e["instance"] == iid]
    assert new, "no replacement launched"
    assert deleted, "no node-deleted event"
    assert new[0]["unix"] < deleted[0]["unix"], (new[0], deleted[0])
    assert m(s, "nodesmith_insufficient_capacity_total") > ice, "the spot offering was not marked unavailable"
    assert m(s, "nodesmith_interruption_messages_total", {"kind": "spot_interruption"}) == 1
    assert m(s, "nodesmith_notices_total", {"kind": "spot_interruption"}) == 1
    assert m(s, "nodesmith_interruption_duplicates_total") == 0
    wait_for("the message deleted", lambda: q.depth() == 0, 30, 0.5)
    print(f"1. drain directed {directed:.1f}s after the message; replacement {new[0]['instance']} launched "
          f"{deleted[0]['unix'] - new[0]['unix']:.1f}s before the Node went; 2 pods evicted, 0 violations; "
          f"instance {instance_state(s, iid)}, Node gone {gone:.1f}s after the message; queue empty")


# ---- 2. the agent and the queue tell of the same interruption -------------------------------------

def scenario_both_sources(s, q):
    iid = s.run_instance("m6i.large", zone="us-east-1b", spot=True, nodepool="general")
    node = wait_registered(s, [iid])[iid]
    # a pod whose PDB allows no eviction holds the drain (and the node) until the counts are read
    others = place_on(s, node, deployment("held", 1, "100m"), pdb("held", minAvailable=1))
    wait_for("the held pod Running on the node", lambda: len(on_node(running_of(s, "held"), node)) == 1, 30, 0.3)
    uncordon(s, others)
    notices = m(s, "nodesmith_notices_total", {"kind": "spot_interruption"})
    received = m(s, "nodesmith_interruption_messages_total", {"kind": "spot_interruption"})
    dups = m(s, "nodesmith_interruption_duplicates_total")

    s.spot_interrupt(iid, grace=110)
    wait_for("the agent's notice at the coordinator", lambda: [
        n for n in s.coordinator_nodes()[iid].get("notices", []) if n.get("kind") == "KIND_SPOT_INTERRUPTION"], 20, 0.2)
    event = spot_warning(iid, zone="us-east-1b")
    q.send(event)
    q.send(event)  # delivered twice
    print(f"2. spot interruption of {iid} ({node}) from its IMDS, then twice from the queue")
    wait_for("both messages read", lambda: m(s, "nodesmith_interruption_messages_total", {"kind": "spot_interruption"})
             == received + 2, 60, 0.3)
    assert m(s, "nodesmith_interruption_duplicates_total") == dups + 2
    assert m(s, "nodesmith_notices_total", {"kind": "spot_interruption"}) == notices + 1
    v = s.coordinator_nodes()[iid]
    spot = [n for n in v.get("notices", []) if n.get("kind") == "KIND_SPOT_INTERRUPTION"]
    assert len(spot) == 1 and spot[0]["sources"] == ["agent", "queue"], v
    logged = re.findall(rf"Node {iid}: spot_interruption notice \S+, deadline in", coordinator_log(s))
    assert len(logged) == 1, logged
    assert node in s.nodes()
    wait_for("the messages deleted", lambda: q.depth() == 0, 30, 0.5)
    s.kubectl("delete", "pdb", "held")
    wait_for("the node gone", lambda: node not in s.nodes(), 120, 0.5)
    assert instance_state(s, iid) in ("shutting-down", "terminated")
    wait_for("the held pod Running elsewhere", lambda: len(running_of(s, "held")) == 1, 60, 0.5)
    print("2. one notice: counted once, logged once; both messages duplicates, deleted; Node gone")


# ---- 3. an instance no agent has reported to this coordinator ---------------------------------------

def scenario_unreported(s, q):
    iid = s.run_instance("m6i.large", zone="us-east-1c", spot=True, nodepool="general")
    node = wait_registered(s, [iid])[iid]
    others = place_on(s, node, deployment("late", 1, "100m"))
    wait_for("the late pod Running on the node", lambda: len(on_node(running_of(s, "late"), node)) == 1, 30, 0.3)
    uncordon(s, others)
    pid = instance(s, iid)["agentPid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        s.procs["coordinator"].stop()
        start_coordinator(s, q)
        assert iid not in s.coordinator_nodes()
        q.send(spot_warning(iid, zone="us-east-1c"))
        print(f"3. agent of {iid} ({node}) frozen, coordinator restarted; warning sent to the queue")
        v = wait_for("an entry made from the Node", lambda: s.coordinator_nodes().get(iid), 30, 0.1)
        assert v["action"] == "drain" and v["drainReason"] == "spot-interruption", v
        assert v["name"] == node and v["reports"] == 0, v
        assert "whose agent has not reported" in coordinator_log(s)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("the node gone", lambda: node not in s.nodes(), 120, 0.5)
    wait_for("the late pod Running elsewhere", lambda: len(running_of(s, "late")) == 1, 60, 0.5)
    assert instance_state(s, iid) in ("shutting-down", "terminated")
    assert violations(s) == 0
    assert m(s, "nodesmith_notices_total", {"kind": "spot_interruption"}) == 1
    assert m(s, "nodesmith_notices_withdrawn_total", {"kind": "spot_interruption"}) == 0
    by = "the coordinator" if f"({iid}) drained by the coordinator" in coordinator_log(s) else "its agent"
    print(f"3. drained by {by}, notice never withdrawn, pod Running elsewhere, instance "
          f"{instance_state(s, iid)}, Node gone")


# ---- 4. the queue failing -------------------------------------------------------------------------

def rebalance_event(iid):
    ev = spot_warning(iid)
    ev.update({"detail-type": "EC2 Instance Rebalance Recommendation", "detail": {"instance-id": iid}})
    return ev


def scenario_queue_errors(s, q):
    key = ("nodesmith_interruption_errors_total", {"op": "receive"})
    errors = m(s, *key)
    read = m(s, "nodesmith_interruption_messages_total", {"kind": "rebalance"})
    s.proxy("POST", "rules", {"kind": "error", "service": "sqs", "status": 500, "count": 4})
    print("4. the queue answers 500 four times")
    wait_for("the first failure (after the long poll under way)", lambda: m(s, *key) > errors, 40, 0.1)
    t1 = time.monotonic()
    wait_for("four failures", lambda: m(s, *key) >= errors + 4, 40, 0.1)
    spread = time.monotonic() - t1
    q.send(rebalance_event("i-0123456789abcdef0"))  # no node of this cluster: read, then ignored
    wait_for("the next message read", lambda: m(s, "nodesmith_interruption_messages_total", {"kind": "rebalance"})
             == read + 1, 40, 0.2)
    assert m(s, *key) == errors + 4, m(s, *key)
    # backoff after the 1st, 2nd and 3rd failure: at least 0.5 + 1 + 2 s
    assert spread >= 3.2, f"four failures within {spread:.1f}s: no backoff"
    log = coordinator_log(s)
    assert len(re.findall(r"ReceiveMessage failed: InternalError", log)) == 1, "not warned once"
    assert "ReceiveMessage answers again after 4 failure(s)" in log
    wait_for("the message deleted", lambda: q.depth() == 0, 30, 0.5)
    print(f"4. four failures over {spread:.1f}s (backoff), one warning; the next message read and deleted")


# ---- 5. an instance going away before it registered -------------------------------------------------

def state_change(iid, state):
    ev = spot_warning(iid)
    ev.update({"detail-type": "EC2 Instance State-change Notification", "detail": {"instance-id": iid, "state": state}})
    return ev


def fleets(s):
    return [c for c in s.proxy("GET", "log?action=CreateFleet")["calls"] if c.get("instance_ids")]


def scenario_in_flight(s, q):
    known = {i for c in fleets(s) for i in c["instance_ids"]}
    emu = s.procs["nodeemu"]
    os.kill(emu.pid, signal.SIGSTOP)  # nothing boots meanwhile
    try:
        apply_objs(s, deployment("big", 1, "3", "4Gi"))  # fits on no node running
        new = wait_for("an instance launched for the big pod", lambda: [
            i for c in fleets(s) for i in c["instance_ids"] if i not in known], 30, 0.2)
        iid = new[0]
        s.terminate(iid)  # EC2 takes it back before it boots
        q.send(state_change(iid, "shutting-down"))
        t0 = time.time()
        print(f"5. {iid} launched for the big pod, terminated before it booted; state change sent to the queue")
        again = wait_for("another instance launched", lambda: [
            i for c in fleets(s) for i in c["instance_ids"] if i not in known and i != iid], 30, 0.2)
        took = time.time() - t0
        assert "is going away before it registered" in coordinator_log(s)
    finally:
        os.kill(emu.pid, signal.SIGCONT)
    wait_for("the big pod Running", lambda: len(running_of(s, "big")) == 1, 60, 0.5)
    assert running_of(s, "big")[0]["spec"]["nodeName"] == instance(s, again[0])["node"]
    print(f"5. replacement {again[0]} launched {took:.1f}s after the state change; the big pod Running on it")


def start_coordinator(s, q):
    s.start_coordinator("--batch-idle", "700ms", "--lease-duration", "3s", "--consolidation-interval", "0",
                        "--interruption-queue", q.url, "--sqs-endpoint", s.ec2_endpoint)
    wait_for("the coordinator polling the queue", lambda: m(s, "nodesmith_interruption_queue_polling") == 1, 30, 0.3)


def main():
    with TestDir("sqs-interruption") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            s.start_ec2()
            s.setup_network()
            s.start_kube(grace_scale=0.05)
            s.apply(NODEPOOLS)
            q = Queue(s, QUEUE)
            start_coordinator(s, q)
            s.start_emulator(boot_delay=0.3, agent_args=["--imds-poll-interval", "250ms"])
            scenario_queue_spot(s, q)
            scenario_both_sources(s, q)
            scenario_unreported(s, q)
            scenario_queue_errors(s, q)
            scenario_in_flight(s, q)
            assert m(s, "nodesmith_interruption_not_understood_total") == 0
            assert violations(s) == 0
    print("test_sqs_interruption: OK")


if __name__ == "__main__":
    main()
