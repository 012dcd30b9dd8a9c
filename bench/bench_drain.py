#!/usr/bin/env python3
"""bench/drain: time for the agent to drain a node of 110 pods, without and with
PodDisruptionBudgets, on the real Kubernetes control plane (tests/pylib/cluster.py).

One control plane for every run. Each run: a node holding 110 pods of 10 Deployments (11
replicas each) and a spare node with room for all of them, both registered by emulated kubelets
(tests/fakes/kubelet.py) and labelled for that run only (the Deployments select them); a
coordinator and one agent acting as its node (the node's kubelet kubeconfig, as on AL2023:
NodeRestriction lets it cordon, not taint). The clock starts at `DELETE /api/v1/nodes/NODE`
(the finalizer keeps the Node; the agent drains it, reason node-deleted, no deadline) and stops
when the coordinator's view of the node says PHASE_DRAINED (every pod gone, not merely
evicted). With --pdb every Deployment has a PDB with maxUnavailable 1, so each Deployment's pods
leave one at a time, each waiting for its replacement to be Ready on the spare node (the real
disruption controller's PDB status; the emulated kubelet starts a pod 0.2 s after it is bound).
Evictions and PDB violations are read from kube-apiserver's audit log (tests/pylib/kubeaudit.py).

  python3 bench/bench_drain.py [--runs 3] [--grace-scale 0.05] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import (GiB, Coordinator, Proc, TestDir, agent_argv, make_pki,  # noqa: E402
                       make_root, wait_for)
from realkube import RealKube, ready  # noqa: E402

DEPLOYMENTS = 10
REPLICAS = 11
FINALIZER = "nodesmith.io/termination"


def one_run(d, coord, kube, run, pdb):
    node, spare, inst, ns = f"bench-{run}", f"spare-{run}", f"i-bench{run}", f"bench-{run}"
    sel = {"bench-run": str(run)}
    kube.register_nodes(node, instances={node: inst}, labels=sel,
                        capacity={"cpu": "64", "memory": "256Gi", "pods": "110"})
    kube.namespace(ns)
    for i in range(DEPLOYMENTS):
        kube.deployment(ns, f"app{i}", REPLICAS, cpu="10m", memory="16Mi", node_selector=sel)
    wait_for("110 pods running", lambda: len([p for p in kube.pods(node)
                                              if p["status"].get("phase") == "Running"]) == 110, 180, 0.5)
    wait_for("110 pods ready", lambda: sum(ready(p) for p in kube.pods(node)) == 110, 60, 0.5)
    if pdb:
        for i in range(DEPLOYMENTS):
            kube.pdb(ns, f"app{i}", {"app": f"app{i}"}, max_unavailable=1)
        wait_for("PDBs computed", lambda: all(
            p.get("status", {}).get("disruptionsAllowed") == 1
            for p in kube.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets")["items"]), 30)
    kube.register_nodes(spare, labels=sel, capacity={"cpu": "64", "memory": "256Gi", "pods": "120"})

    root = os.path.join(d, f"root-{run}")
    make_root(root, cpus=4, mem_bytes=16 * GiB)
    argv = agent_argv(coord, root, inst, extra=["--kubeconfig", kube.node_kubeconfig(node), "--logind", "no",
                                                "--log-level", "info", "--node-name", node])
    agent = Proc(f"agent-{run}", argv, d)
    try:
        wait_for("pods reported", lambda: (coord.nodes().get(inst) or {}).get("pods") == 110, 30)
        wait_for("finalizer", lambda: FINALIZER in (kube.node(node)["metadata"].get("finalizers") or []), 20)
        t0 = time.monotonic()
        kube.req("DELETE", f"/api/v1/nodes/{node}")
        wait_for("drained", lambda: ((coord.nodes().get(inst) or {}).get("drain") or {}).get("phase")
                 == "PHASE_DRAINED", 300, interval=0.02)
        took = time.monotonic() - t0
        evicted = len(kube.audit.evictions(node, "evicted"))
        refused = len(kube.audit.evictions(node, "denied"))
        assert evicted == 110, evicted
        assert not kube.audit.violations(), kube.audit.violations()
    finally:
        agent.stop()
    # out of the way of the next run: the Node goes, the namespace's pods are finished by the
    # spare's kubelet, then both kubelets stop
    kube.req("PATCH", f"/api/v1/nodes/{node}", [{"op": "remove", "path": "/metadata/finalizers"}],
             ctype="application/json-patch+json")
    kube.req("DELETE", f"/api/v1/namespaces/{ns}")
    wait_for(f"namespace {ns} gone", lambda: kube.c.api("GET", f"/api/v1/namespaces/{ns}")[0] == 404, 180, 0.5)
    for n in (node, spare):
        kube.kubelets.pop(n).stop()
    kube.req("DELETE", f"/api/v1/nodes/{spare}", ok=(200, 404))
    return {"seconds": round(took, 3), "evicted": evicted, "pdb_refusals": refused}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grace-scale", type=float, default=0.05)
    ap.add_argument("--json")
    a = ap.parse_args()
    results = {"grace_scale": a.grace_scale, "pods": DEPLOYMENTS * REPLICAS, "runs": a.runs}
    with TestDir("bench-drain") as d:
        kube = RealKube(d, grace_factor=a.grace_scale, log=None).start(packaging=False, fault_proxy=False)
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
        kube.stop()
    print(json.dumps(results, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
