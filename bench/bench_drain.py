#!/usr/bin/env python3
"""bench/drain: time for the agent to drain a node of 110 pods, without and with
PodDisruptionBudgets, against the fake Kubernetes API server.

Each run: a fresh cluster (POST /_fake/reset) with one node holding 110 pods of 10 Deployments
(11 replicas each) and a spare node with room for all of them; a coordinator and one agent
(--kube-server). The clock starts at `DELETE /api/v1/nodes/NODE` (the finalizer keeps the Node;
the agent drains it, reason node-deleted, no deadline) and stops when the coordinator's view of
the node says PHASE_DRAINED (every pod gone, not merely evicted). With --pdb every Deployment
has a PDB with maxUnavailable 1, so each Deployment's pods leave one at a time, each waiting for
its replacement to be Ready on the spare node (the fake's kubelet: --ready-delay 0.5 s).

  python3 bench/bench_drain.py [--runs 3] [--grace-scale 0.05] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import (GiB, Coordinator, FakeKube, Proc, TestDir, agent_argv, make_pki,  # noqa: E402
                       make_root, wait_for)

DEPLOYMENTS = 10
REPLICAS = 11


def one_run(d, coord, kube, run, pdb):
    kube.fake("POST", "reset")
    node, inst = f"bench-{run}", f"i-bench{run}"
    kube.register_node(node, instanceID=inst, capacity={"cpu": "64", "memory": "256Gi", "pods": "110"})
    kube.namespace("bench")
    for i in range(DEPLOYMENTS):
        kube.deployment("bench", f"app{i}", REPLICAS, cpu="10m", memory="16Mi")
    wait_for("110 pods running", lambda: len([p for p in kube.pods(node)
                                              if p["status"].get("phase") == "Running"]) == 110, 60)
    wait_for("110 pods ready", lambda: sum(1 for p in kube.pods(node) for c in p["status"].get("conditions", [])
                                           if c["type"] == "Ready" and c["status"] == "True") == 110, 60)
    if pdb:
        for i in range(DEPLOYMENTS):
            kube.pdb("bench", f"app{i}", {"app": f"app{i}"}, max_unavailable=1)
        wait_for("PDBs computed", lambda: all(
            p.get("status", {}).get("disruptionsAllowed") == 1
            for p in kube.get("/apis/policy/v1/namespaces/bench/poddisruptionbudgets")["items"]), 20)
    kube.register_node(f"spare-{run}", capacity={"cpu": "64", "memory": "256Gi", "pods": "120"})

    root = os.path.join(d, f"root-{run}")
    make_root(root, cpus=4, mem_bytes=16 * GiB)
    argv = agent_argv(coord, root, inst, extra=["--kube-server", kube.url, "--logind", "no",
                                                "--log-level", "info", "--node-name", node])
    agent = Proc(f"agent-{run}", argv, d)
    try:
        wait_for("pods reported", lambda: (coord.nodes().get(inst) or {}).get("pods") == 110, 20)
        wait_for("finalizer", lambda: "nodesmith.io/termination" in
                 (kube.node(node)["metadata"].get("finalizers") or []), 10)
        t0 = time.monotonic()
        kube.req("DELETE", f"/api/v1/nodes/{node}")
        wait_for("drained", lambda: ((coord.nodes().get(inst) or {}).get("drain") or {}).get("phase")
                 == "PHASE_DRAINED", 300, interval=0.02)
        took = time.monotonic() - t0
        audit = kube.audit()
        evicted = len([e for e in audit["evictions"] if e["decision"] == "evicted"])
        refused = len([e for e in audit["evictions"] if e["decision"] == "denied"])
        assert evicted == 110, evicted
        assert audit["violationCount"] == 0, audit["violations"]
    finally:
        agent.stop()
    return {"seconds": round(took, 3), "evicted": evicted, "pdb_refusals": refused}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grace-scale", type=float, default=0.05)
    ap.add_argument("--json")
    a = ap.parse_args()
    results = {"grace_scale": a.grace_scale, "pods": DEPLOYMENTS * REPLICAS, "runs": a.runs}
    with TestDir("bench-drain") as d:
        kube = FakeKube(d, grace_scale=a.grace_scale).start()
        pki = make_pki(d)
        coord = Coordinator(d, pki, insecure=True, interval="2s").start()
        run = 0
        for mode, pdb in (("no_pdb", False), ("pdb_max_unavailable_1", True)):
            rows = []
            for _ in range(a.runs):
                run += 1
                r = one_run(d, coord, kube, run, pdb)
                print(f"{mode} run {len(rows) + 1}: drained 110 pods in {r['seconds']:.2f}s "
                      f"({r['pdb_refusals']} PDB refusals)", flush=True)
                rows.append(r)
            results[mode] = {"median_seconds": statistics.median(r["seconds"] for r in rows),
                             "min_seconds": min(r["seconds"] for r in rows),
                             "max_seconds": max(r["seconds"] for r in rows),
                             "median_pdb_refusals": statistics.median(r["pdb_refusals"] for r in rows),
                             "runs": rows}
        coord.proc.stop()
        kube.proc.stop()
    print(json.dumps(results, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
