#!/usr/bin/env python3
"""bench/provision: how fast pending pods become a CreateFleet call, and the coordinator's
memory with a big cluster reporting to it.

A. Pending-to-CreateFleet: N pending pods (one Deployment) in the fake API server, one NodePool,
   the coordinator provisioning against the EC2 proxy (moto). Measured from the moment the
   batch window closes (the coordinator's "batch closed" log line) to the first CreateFleet
   the proxy receives: snapshot, solve and the launch template + fleet requests. Also the
   solver's own time (nodesmith_decision_seconds). N = 1 000 and 10 000.
B. Memory: 1 000 simulated agents each reporting 20 pods (20 000 pods) to one coordinator
   (bench/link's simulator), then the coordinator's VmRSS and VmHWM.

  python3 bench/bench_provision.py [--sizes 1000,10000] [--runs 3]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import Coordinator, TestDir, http_get, make_pki, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
POOLS = """
apiVersion: nodesmith.io/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  amiSelectorTerms: [{{alias: al2023@latest}}]
  role: nodesmith-node
  subnetSelectorTerms: [{{tags: {{nodesmith.io/discovery: {c}}}}}]
  securityGroupSelectorTerms: [{{tags: {{nodesmith.io/discovery: {c}}}}}]
---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {{name: general}}
spec:
  template:
    spec:
      nodeClassRef: {{group: nodesmith.io, kind: EC2NodeClass, name: default}}
      requirements:
        - {{key: nodesmith.io/instance-category, operator: In, values: [c, m, r]}}
        - {{key: nodesmith.io/instance-generation, operator: Gt, values: ["5"]}}
"""


def log_time(line):
    m = re.match(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) ", line)
    if not m:
        return None
    h, mi, s, ms = map(int, m.groups())
    return h * 3600 + mi * 60 + s + ms / 1000


def proc_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])


def one(d, n, run):
    w = os.path.join(d, f"p{n}-{run}")
    os.makedirs(w, exist_ok=True)
    with LocalStack(w, cluster="bench") as s:
        s.start_ec2()
        s.setup_network()
        s.start_kube(grace_scale=0.05)
        s.apply(POOLS.format(c="bench"))
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "load", "namespace": "default"},
               "spec": {"replicas": n, "selector": {"matchLabels": {"app": "load"}},
                        "template": {"metadata": {"labels": {"app": "load"}},
                                     "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                                         "requests": {"cpu": "250m", "memory": "512Mi"}}}]}}}}
        s.apply(json.dumps(dep))
        # every pod created and marked Unschedulable before the coordinator starts, so its
        # first round holds all of them
        def unschedulable():
            pods = s.pods("default")
            return len(pods) == n and all(any(c.get("reason") == "Unschedulable" for c in
                                              p["status"].get("conditions", [])) for p in pods)
        wait_for(f"{n} unschedulable pods", unschedulable, 600, interval=1)
        coord = s.start_coordinator("--batch-idle", "1s", "--batch-max", "10s", "--consolidation-interval", "0")
        wait_for("a CreateFleet", lambda: s.proxy("GET", "log?action=CreateFleet")["calls"], 300, interval=0.2)
        calls = s.proxy("GET", "log?action=CreateFleet")["calls"]
        out = coord.output()
        lines = out.splitlines()
        # the round that launched: its "batch closed" line, then its first "CreateFleet for" line
        fleet_i = next(i for i, l in enumerate(lines) if "CreateFleet for NodePool" in l)
        start_i = max(i for i, l in enumerate(lines[:fleet_i]) if "batch closed, building the snapshot" in l)
        t0, t_fleet = log_time(lines[start_i]), log_time(lines[fleet_i])
        decided = re.findall(r"Provisioning: (\d+) pending pod\(s\).*decided in ([0-9.]+) ms", out)
        pend, ms = decided[-1] if decided else ("?", "nan")
        return {"pods": n, "pending_in_round": int(pend) if pend != "?" else None,
                "batch_to_createfleet_s": t_fleet - t0, "solver_ms": float(ms), "fleets": len(calls)}


def memory(d):
    with TestDir("bench-provision-mem") as w:
        pki = make_pki(w)
        c = Coordinator(w, pki, insecure=True, interval="10s", extra=["--log-level", "warning", "--max-nodes", "5000"]).start()
        out = subprocess.run([os.path.join(BUILD, "benchbin", "link"), c.url, "--agents", "1000", "--pods", "20",
                              "--seconds", "3", "--token", pki["token"]], capture_output=True, text=True, timeout=120)
        r = json.loads(out.stdout)
        nodes = len(c.nodes())
        rss, hwm = proc_kib(c.proc.pid, "VmRSS"), proc_kib(c.proc.pid, "VmHWM")
        c.proc.stop()
        return {"nodes": nodes, "pods": nodes * 20, "rss_kib": rss, "hwm_kib": hwm, "reports_per_second": r["reports_per_second"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    results = {"latency": [], "memory": None}
    with TestDir("bench-provision") as d:
        print(f"{'pods':>7} {'batch closed -> CreateFleet (median s)':>40} {'min':>7} {'max':>7} {'solver ms':>10}")
        for n in [int(x) for x in args.sizes.split(",")]:
            rs = [one(d, n, i) for i in range(args.runs)]
            lat = [r["batch_to_createfleet_s"] for r in rs]
            print(f"{n:>7} {statistics.median(lat):>40.3f} {min(lat):>7.3f} {max(lat):>7.3f} "
                  f"{statistics.median(r['solver_ms'] for r in rs):>10.1f}", flush=True)
            results["latency"].append({"pods": n, "runs": rs, "median_s": statistics.median(lat)})
        results["memory"] = memory(d)
        m = results["memory"]
        print(f"\ncoordinator with {m['nodes']} nodes / {m['pods']} pods reporting: VmRSS {m['rss_kib'] / 1024:.1f} MiB, "
              f"VmHWM {m['hwm_kib'] / 1024:.1f} MiB")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "provision.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
