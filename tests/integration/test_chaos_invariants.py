#!/usr/bin/env python3
"""The chaos runner's checks over the fakes' records (tests/chaos/chaoslib.py), on records made
up for each invariant: each check reports the bad history and passes the good one.

- no PDB ever violated: every entry of the API server's audit is reported, with the pod, the
  PDB and who deleted it;
- no instance launched twice: an instance ID in two launches, a ClientToken launching twice, a
  fleet launched only for pods whose instance is still on the way; a second launch for the same
  pods after the first instance registered, or went away, is fine, and so is a replayed answer;
- no instance terminated that lacks the cluster tag: a TerminateInstances of an untagged or
  other cluster's instance, a decoy no longer running;
- a draining node stays cordoned: a Node left schedulable or untainted for longer than the
  grace while the agent reports its drain evicting is reported once; a short lapse, a drain
  withdrawn, or a Node being deleted is not;
- at the end: a Deployment short of Running pods, Pending pods, a Node cordoned or tainted
  without a drain directed while its instance runs, a Node held by its finalizer, and a system
  that is not quiet (reclaim to come, instance booting, drain directed, no leader).

Run: python3 tests/integration/test_chaos_invariants.py   (< 1 s)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "chaos"))
import chaoslib  # noqa: E402


def fleet(seq, t, ids, token):
    return {"action": "CreateFleet", "seq": seq, "unix": t, "status": 200, "instance_ids": ids,
            "client_token": token}


def names(found):
    return [v[0] for v in found]


def main():
    audit = {"violations": [{"time": "2026-11-21T14:00:00.000000Z", "namespace": "default", "pod": "web-1",
                             "node": "n1", "pdb": "web", "healthyAfter": 4, "desiredHealthy": 5, "via": "client"}]}
    v = chaoslib.pdb_violations(audit)
    assert names(v) == ["no PDB ever violated"] and "web-1" in v[0][2] and "by client" in v[0][2], v
    assert chaoslib.pdb_violations({"violations": []}) == []

    pods = {"i-a": {"p1", "p2"}, "i-b": {"p1", "p2"}, "i-c": {"p1", "p3"}}
    # i-b launched for the pods of i-a while i-a was still booting: reported
    calls = [fleet(1, 100.0, ["i-a"], "t1"), fleet(2, 103.0, ["i-b"], "t2")]
    ev = [{"event": "registered", "instance": "i-a", "unix": 108.0}]
    v, n = chaoslib.launch_violations(calls, ev, pods)
    assert names(v) == ["no instance launched twice for the same pods"] and "i-b" in v[0][2] and n == 2, v
    # the same after i-a registered, or once it was going away: fine
    ok = [{"event": "registered", "instance": "i-a", "unix": 102.0}]
    assert chaoslib.launch_violations(calls, ok, pods)[0] == []
    gone = [{"event": "shutting-down", "instance": "i-a", "unix": 101.0}]
    assert chaoslib.launch_violations(calls, gone, pods)[0] == []
    # a fleet with one pod nobody launched for yet: fine
    assert chaoslib.launch_violations([calls[0], fleet(3, 103.0, ["i-c"], "t3")], ev, pods)[0] == []
    # one instance ID from two launches; one ClientToken launching twice; a replay is not a launch
    v, _ = chaoslib.launch_violations([fleet(1, 1.0, ["i-x"], "t1"), fleet(2, 2.0, ["i-x"], "t2")], [], {})
    assert names(v) == ["no instance launched twice"] and "i-x" in v[0][2], v
    v, _ = chaoslib.launch_violations([fleet(1, 1.0, ["i-x"], "t1"), fleet(2, 2.0, ["i-y"], "t1")], [], {})
    assert names(v) == ["no instance launched twice"] and "ClientToken t1" in v[0][2], v
    replay = {"action": "CreateFleet", "seq": 2, "unix": 2.0, "status": 200, "client_token": "t1", "replayed": True}
    assert chaoslib.launch_violations([fleet(1, 1.0, ["i-x"], "t1"), replay], [], {})[0] == []

    insts = {"i-ok": ({chaoslib.CLUSTER_TAG: "chaos"}, "terminated"), "i-bare": ({}, "terminated"),
             "i-other": ({chaoslib.CLUSTER_TAG: "another"}, "terminated"), "i-decoy": ({}, "running")}
    term = [{"action": "TerminateInstances", "seq": 5, "unix": 9.0, "status": 200, "instance_ids": ["i-ok"]}]
    assert chaoslib.termination_violations(term, insts, "chaos", {"i-decoy": "no tags"}) == []
    bad = [dict(term[0], instance_ids=["i-ok", "i-bare", "i-other"]),
           {"action": "TerminateInstances", "seq": 6, "status": 503, "instance_ids": ["i-decoy"]}]
    v = chaoslib.termination_violations(bad, insts, "chaos", {})
    assert names(v) == ["no instance terminated that lacks the cluster tag"] * 2, v
    assert "i-bare" in v[0][2] and "i-other" in v[1][2], v
    insts["i-decoy"] = ({}, "shutting-down")
    v = chaoslib.termination_violations([], insts, "chaos", {"i-decoy": "no tags"})
    assert len(v) == 1 and "decoy i-decoy (no tags) is shutting-down" in v[0][2], v
    # the end state
    def node(name, unschedulable=False, taint=False, deleting=False):
        md = {"name": name}
        if deleting:
            md.update(deletionTimestamp="2026-11-21T14:00:00Z", finalizers=["nodesmith.io/termination"])
        spec = {"unschedulable": True} if unschedulable else {}
        if taint:
            spec["taints"] = [{"key": chaoslib.DRAIN_TAINT, "effect": "NoSchedule"}]
        return {"metadata": md, "spec": spec}
    running = {"instanceId": "i-1", "node": "n1", "ec2State": "running", "phase": "ready"}
    assert chaoslib.end_state_problems({"web": (6, 6)}, 0, {"n1": node("n1")}, [], [running]) == {}
    p = chaoslib.end_state_problems({"web": (6, 5)}, 2, {"n1": node("n1")}, [], [running])
    assert p == {"no pod lost": ["deployment/web: 5 of 6 replicas Running and Ready", "2 pod(s) Pending"]}, p
    p = chaoslib.end_state_problems({}, 0, {"n1": node("n1", unschedulable=True, taint=True)}, [], [running])
    assert list(p) == ["no node left cordoned without a reason"] and "cordoned and tainted" in p[
        "no node left cordoned without a reason"][0], p
    # with a drain directed the cordon has its reason, but the system is not quiet yet
    p = chaoslib.end_state_problems({}, 0, {"n1": node("n1", taint=True)}, [{"name": "n1", "action": "drain"}],
                                    [running])
    assert p == {"the system settles": ["Node n1: drain directed"]}, p
    gone = dict(running, ec2State="terminated", phase="gone")
    p = chaoslib.end_state_problems({}, 0, {"n1": node("n1", deleting=True)}, [], [gone])
    assert list(p) == ["every finalizer eventually removed"], p
    p = chaoslib.end_state_problems({}, 0, {}, None, [dict(running, interruption={"kind": "spot"}),
                                                      dict(running, instanceId="i-2", phase="booting")])
    assert p == {"the system settles": ["i-1: spot reclaim pending", "i-2: phase booting",
                                        "no coordinator leads"]}, p
    # a draining node stays cordoned
    drain = [{"name": "n1", "action": "drain", "drain": {"phase": "PHASE_EVICTING"}}]
    w = chaoslib.CordonWatch(grace=3.0)
    w.observe(10.0, drain, {"n1": node("n1", unschedulable=True, taint=True)})
    w.observe(11.0, drain, {"n1": node("n1")})          # lapse begins
    w.observe(12.0, drain, {"n1": node("n1")})
    assert w.found == [], w.found
    w.observe(14.5, drain, {"n1": node("n1", taint=True)})
    w.observe(15.0, drain, {"n1": node("n1")})
    assert len(w.found) == 1 and w.found[0][1] == 11.0 and "n1" in w.found[0][2], w.found
    w.observe(20.0, drain, {"n1": node("n1")})
    assert len(w.found) == 1, w.found                    # once per node
    w = chaoslib.CordonWatch(grace=3.0)
    w.observe(10.0, drain, {"n1": node("n1")})
    w.observe(11.0, drain, {"n1": node("n1", unschedulable=True, taint=True)})   # short lapse
    w.observe(12.0, [dict(drain[0], action="run", drain={"phase": "PHASE_NONE"})], {"n1": node("n1")})
    w.observe(20.0, [dict(drain[0], action="run", drain={"phase": "PHASE_NONE"})], {"n1": node("n1")})
    w.observe(21.0, drain, {"n1": node("n1", deleting=True)})
    w.observe(30.0, drain, {"n1": node("n1", deleting=True)})
    assert w.found == [], w.found
    print("test_chaos_invariants: OK")


if __name__ == "__main__":
    main()
