#!/usr/bin/env python3
"""`make demo`'s default scenario, headless: tests/demo/demo.py --quiet --json OUT, then the final
table is checked against what the scenario must show.

  - 0 PDB violations (the fake API server's own audit) and 0 pods lost (every Deployment back
    at its replica count, Running);
  - provisioning: at least 3 nodes launched for the burst, at least one arm64 and one from the
    GPU NodePool, every pod Running;
  - spot interruption: the node drained and its pods Running elsewhere (on a replacement if one
    was needed, Ready too) before the notice's deadline;
  - kubectl delete node: the Node was held by nodesmith's finalizer, drained, and gone only after
    its drain (last eviction, drained report and TerminateInstances all before it disappeared);
  - scale-in: the consolidation outcome as the build has it: if the coordinator has
    consolidation, a cheaper cluster after than before (fewer nodes, or as many cheaper ones);
    if not, the demo says so and the node count did not change;
  - within the 3 minutes `make demo` promises, and nothing left running."""
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import BUILD, ROOT, TestDir  # noqa: E402

DEMO = os.path.join(ROOT, "tests", "demo", "demo.py")


def main():
    with TestDir("demo-test") as d:
        out = os.path.join(d, "demo.json")
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, DEMO, "--quiet", "--json", out, "--out-dir", d, "--keep-logs"],
                           capture_output=True, text=True, timeout=300, env=dict(os.environ, BUILD=BUILD))
        took = time.monotonic() - t0
        print(r.stdout)
        print(r.stderr, file=sys.stderr)
        assert r.returncode == 0, f"demo.py exit {r.returncode}"
        with open(out) as f:
            res = json.load(f)
        try:
            check(res, took)
        except AssertionError:
            show_logs(os.path.join(d, "logs"))
            raise
    print("test_demo: OK")


def show_logs(logs):
    """The coordinator's log in full and the tail of every other one: what CI keeps of a failure."""
    for root, _, files in sorted(os.walk(logs)):
        for f in sorted(files):
            if not f.endswith(".log"):
                continue
            with open(os.path.join(root, f), errors="replace") as fh:
                lines = fh.readlines()
            keep = lines if f.startswith("coordinator") else lines[-15:]
            print(f"===== {os.path.relpath(os.path.join(root, f), logs)} ({len(keep)} of {len(lines)} lines) =====",
                  file=sys.stderr)
            print("".join(keep[-400:]), file=sys.stderr)


def step(res, kind, n=0):
    steps = [s for s in res["steps"] if s["do"] == kind]
    assert len(steps) > n, f"no {kind} step ran: {[s['do'] for s in res['steps']]}"
    return steps[n]


def check(res, took):
    s = res["summary"]
    assert res["completed"], res.get("error")
    assert all(x.get("ok", True) for x in res["steps"]), [(x["do"], x.get("note")) for x in res["steps"]]
    assert not res["shutdown"]["leftovers"], res["shutdown"]

    # the headline numbers
    assert s["pdbViolations"] == 0, s["violations"]
    assert s["podsLost"] == 0, s["deployments"]
    assert s["podsRunning"] == s["podsDesired"] > 0, (s["podsRunning"], s["podsDesired"])
    assert s["pendingToRunning"]["count"] >= step(res, "apply")["podsDesired"] and s["pendingToRunning"]["p50"] is not None
    assert s["pendingToRunning"]["p50"] <= s["pendingToRunning"]["p99"]
    assert s["podsDisrupted"] > 0                       # the drains evicted, through the Eviction API
    assert s["wallSeconds"] < 180 and took < 180, (s["wallSeconds"], took)

    # provisioning: the burst
    burst = step(res, "wait-running", 0)
    assert burst["ok"], burst
    first_fault = step(res, "spot-interrupt")["noticeUnix"]
    # EC2's launchTime has whole seconds: a replacement launched in the notice's own second reads
    # as launched before it, so the burst is what launched in an earlier second
    burst_nodes = {i: x for i, x in s["instances"].items() if x["launched"] < math.floor(first_fault)}
    assert len(burst_nodes) >= 3, burst_nodes
    assert all(x["ready"] and x["ready"] < first_fault for x in burst_nodes.values()), burst_nodes
    assert burst["instances"] >= 3, burst
    assert any(x.get("arch") == "arm64" for x in burst_nodes.values()), f"no arm64 node: {burst_nodes}"
    gpu = [x for x in burst_nodes.values() if x.get("nodepool") == "gpu"
           and x["type"].split(".")[0] in ("g4dn", "g5", "g6")]
    assert gpu, f"no GPU node in the burst: {burst_nodes}"

    # spot interruption
    sp = step(res, "spot-interrupt")
    assert sp["capacityType"] == "spot", sp
    assert sp["podsOnNode"] > 0, sp
    assert sp["drainReason"] == "spot-interruption", sp
    assert sp["drainedUnix"] and sp["drainedUnix"] <= sp["deadlineUnix"], sp
    assert sp["allRunningElsewhereUnix"] and sp["allRunningElsewhereUnix"] <= sp["deadlineUnix"], sp
    for r in sp["replacementInstances"]:
        assert r["readyUnix"] and r["readyUnix"] <= sp["deadlineUnix"], r
    assert sp["replacedBeforeDeadline"], sp
    assert sp["nodeGoneUnix"], sp

    # kubectl delete node
    dn = step(res, "delete-node")
    assert "nodesmith.io/termination" in dn["finalizersWhileDeleting"], dn
    assert dn["drainReason"] == "node-deleted", dn
    assert dn["drainedUnix"] and dn["nodeGoneUnix"] and dn["drainedUnix"] <= dn["nodeGoneUnix"], dn
    if dn["lastEvictionUnix"]:
        assert dn["lastEvictionUnix"] <= dn["nodeGoneUnix"], dn
    assert dn["terminatedUnix"] and dn["terminatedUnix"] <= dn["nodeGoneUnix"], dn
    assert dn["goneAfterDrain"], dn

    # scale-in and consolidation, as the build has it
    co = step(res, "wait-consolidation")
    if res["consolidationInBuild"]:
        # a delete leaves fewer nodes, a replace as many but cheaper ones
        assert co["consolidated"] and co["costAfter"] < co["costBefore"], co
        assert co["instancesAfter"] <= co["instancesBefore"], co
        assert s["cost"]["after"] <= s["cost"]["before"], s["cost"]
    else:
        assert not co["consolidated"] and co["note"].startswith("no consolidation happened within"), co
        assert co["instancesAfter"] == co["instancesBefore"], co
    print(f"demo: {len(burst_nodes)} nodes for the burst ({burst['instances']} instances), spot drain "
          f"{sp['deadlineUnix'] - sp['drainedUnix']:.1f}s before the deadline, delete-node held "
          f"{dn['nodeGoneUnix'] - dn['deleteUnix']:.1f}s; consolidation: {co['note']}; "
          f"{s['podsDisrupted']} pods evicted, 0 PDB violations, 0 lost; p50 {s['pendingToRunning']['p50']:.1f}s "
          f"p99 {s['pendingToRunning']['p99']:.1f}s; {took:.0f}s")


if __name__ == "__main__":
    main()
