#!/usr/bin/env python3
"""bench/provision: how fast pending pods become CreateFleet calls, and the coordinator's memory
with a big cluster reporting to it.

The local stack runs the real control plane (tests/pylib/cluster.py: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler).

A. Batch closed -> CreateFleet: N pods (one Deployment, 250m CPU / 512 Mi each) already pending
   and marked Unschedulable by kube-scheduler when the coordinator starts, one NodePool,
   the EC2 proxy (moto) behind it. Timed from the moment its first batch window closes (the
   coordinator's first "batch closed" log line) to the first CreateFleet it sends (its
   "CreateFleet for NodePool" line): the subnet and security group look-up a first round
   waits for, the snapshot, the solve, the AMI and launch template requests. Also the
   snapshot's and the solver's own times. Before the coordinator starts, the time the control
   plane took to create the N pods and mark them Unschedulable is printed (kube-controller-
   manager's and kube-scheduler's speed, not nodesmith's).
B. Pods created -> all CreateFleet calls sent: the coordinator runs and leads first; then the
   Deployment of N pods is created, and the clock runs until the coordinator has sent the
   CreateFleet calls whose instances hold every pod (its "Launched ...: K pod(s)" lines add up to
   N): the ReplicaSet controller's slow-start batches and the scheduler, the watch, the batch window (1 s idle,
   10 s max), as many rounds as that takes, and the EC2 calls.
C. Memory: 1 000 simulated agents each reporting 20 pods (20 000 pods) to one coordinator
   (bench/link's simulator), then the coordinator's VmRSS and VmHWM.

Every figure is the median over --runs runs (min and max beside it).

  python3 bench/bench_provision.py [--sizes 1000,10000] [--runs 3] [--only a,b,c]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import Coordinator, TestDir, log_time, make_pki, wait_for  # noqa: E402
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


def proc_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])


def kube(s, method, path, body=None, timeout=120):
    """One request to the API server as admin: the parsed answer; an error status raises."""
    st, out = s.api(method, path, body, timeout=timeout)
    if st not in (200, 201):
        raise AssertionError(f"{method} {path}: HTTP {st} {str(out)[:300]}")
    return out


def deployment(n):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "load", "namespace": "default"},
            "spec": {"replicas": n, "selector": {"matchLabels": {"app": "load"}},
                     "template": {"metadata": {"labels": {"app": "load"}},
                                  "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                                      "requests": {"cpu": "250m", "memory": "512Mi"}}}]}}}}


def create_pods(s, n):
    """Creates the Deployment of n pods through the API (the ReplicaSet controller makes the pods)."""
    kube(s, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment(n))


def unschedulable(s):
    """How many unbound pods carry PodScheduled=False/Unschedulable (one list, no kubectl: at
    10 000 pods its chunked lists and table printing take seconds)."""
    pods = kube(s, "GET", "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3D")["items"]
    return sum(1 for p in pods if any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                                      for c in (p.get("status") or {}).get("conditions") or []))


def stack(w):
    s = LocalStack(w, cluster="bench")
    try:
        s.start_ec2()
        s.setup_network()
        s.start_kube(grace_scale=0.05)
        s.apply(POOLS.format(c="bench"))
    except BaseException:
        s.stop_all()
        raise
    return s


def start_coordinator(s):
    return s.start_coordinator("--batch-idle", "1s", "--batch-max", "10s", "--consolidation-interval", "0")


ROUND = re.compile(r"Provisioning: (\d+) pending pod\(s\): \d+ on existing or in-flight nodes, \d+ on (\d+) new node")
LAUNCHED = re.compile(r"Launched \S+ \(.*\) for NodePool ")
FLEET_SENT = re.compile(r"CreateFleet for NodePool \S+: \d+ override")


def wait_leading(s):
    """Until the stack's coordinator answers /readyz (it holds the Lease)."""
    def ready():
        try:
            with urllib.request.urlopen(s.coordinator_http + "/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    wait_for("the coordinator to lead", ready, 60, interval=0.2)


def all_launched(lines, n):
    """The index of the line where capacity for all n pods is launched: after a round that saw
    the n pods pending, as many instances launched as that round planned; else None."""
    for i in range(len(lines) - 1, -1, -1):
        m = ROUND.search(lines[i])
        if m and int(m.group(1)) == n:
            want = int(m.group(2))
            got = [j for j in range(i + 1, len(lines)) if LAUNCHED.search(lines[j])]
            return i if want == 0 else (got[want - 1] if len(got) >= want else None)
    return None


def pending_first(d, n, run):
    """A: the pods pending before the coordinator starts; batch closed -> first CreateFleet."""
    w = os.path.join(d, f"a{n}-{run}")
    os.makedirs(w, exist_ok=True)
    with stack(w) as s:
        t0 = time.monotonic()
        create_pods(s, n)
        # every pod created and marked Unschedulable before the coordinator starts, so its
        # first round holds all of them
        wait_for(f"{n} unschedulable pods", lambda: unschedulable(s) == n, 900, interval=1)
        fill = time.monotonic() - t0
        coord = start_coordinator(s)
        wait_for("a CreateFleet", lambda: s.proxy("GET", "log?action=CreateFleet")["calls"], 300, interval=0.2)
        out = coord.output()
        lines = out.splitlines()
        # the first batch that closed (every pod was pending already), the round that solved
        # (after the subnet look-up a first round waits for), its first CreateFleet
        fleet_i = next(i for i, l in enumerate(lines) if FLEET_SENT.search(l))
        start_i = next(i for i, l in enumerate(lines) if "batch closed, building the snapshot" in l)
        solved_i = next(i for i, l in enumerate(lines) if ROUND.search(l))
        solved_start_i = max(i for i, l in enumerate(lines[:solved_i]) if "batch closed, building the snapshot" in l)
        t_batch, t_fleet = log_time(lines[start_i]), log_time(lines[fleet_i])
        m = re.search(r"Provisioning: (\d+) pending pod\(s\).*decided in ([0-9.]+) ms", lines[solved_i])
        pend, ms = int(m.group(1)), float(m.group(2))
        return {"pods": n, "fill_s": round(fill, 2), "pending_in_round": pend,
                "batch_to_createfleet_s": round(t_fleet - t_batch, 3), "solver_ms": ms,
                # the solving round's snapshot: from its "batch closed" to its decision, less the solver
                "snapshot_ms": round((log_time(lines[solved_i]) - log_time(lines[solved_start_i])) * 1000 - ms, 1)}


def arriving(d, n, run):
    """B: the coordinator leads first; pods created -> every CreateFleet sent."""
    w = os.path.join(d, f"b{n}-{run}")
    os.makedirs(w, exist_ok=True)
    with stack(w) as s:
        coord = start_coordinator(s)
        wait_leading(s)
        # a new leader waits two report intervals (1 s here) for agents before deciding
        time.sleep(3.5)
        t0 = time.time()
        create_pods(s, n)
        wait_for(f"instances launched for {n} pods", lambda: all_launched(coord.output().splitlines(), n) is not None,
                 900, interval=0.5)
        lines = coord.output().splitlines()
        lines = lines[:all_launched(lines, n) + 1]
        fleets = [log_time(l, t0) for l in lines if FLEET_SENT.search(l)]
        return {"pods": n, "created_to_all_createfleet_s": round(max(fleets) - t0, 3), "fleets": len(fleets),
                "rounds": sum(1 for l in lines if ROUND.search(l)),
                "instances": sum(1 for l in lines if LAUNCHED.search(l))}


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


def med(rs, key):
    v = [r[key] for r in rs]
    return statistics.median(v), min(v), max(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="a,b,c", help="which of A, B, C to run (default: a,b,c)")
    args = ap.parse_args()
    only = {x.strip().lower() for x in args.only.split(",")}
    results = {"pending_first": [], "arriving": [], "memory": None}
    with TestDir("bench-provision") as d:
        for n in [int(x) for x in args.sizes.split(",")]:
            print(f"{n} pods, {args.runs} run(s), median (min-max):", flush=True)
            if "a" in only:
                a = [pending_first(d, n, i) for i in range(args.runs)]
                results["pending_first"].append({"pods": n, "runs": a,
                                                 "median_s": med(a, "batch_to_createfleet_s")[0]})
                print("  A batch closed -> first CreateFleet sent  %.3f s (%.3f-%.3f); snapshot %.1f ms, "
                      "solver %.1f ms; pods in the round %s; the control plane took %.1f s to hold them all "
                      "Unschedulable" % (*med(a, "batch_to_createfleet_s"), med(a, "snapshot_ms")[0],
                                         med(a, "solver_ms")[0], sorted({r["pending_in_round"] for r in a}),
                                         med(a, "fill_s")[0]), flush=True)
            if "b" in only:
                b = [arriving(d, n, i) for i in range(args.runs)]
                results["arriving"].append({"pods": n, "runs": b,
                                            "median_s": med(b, "created_to_all_createfleet_s")[0]})
                print("  B pods created -> all CreateFleet sent    %.3f s (%.3f-%.3f); %s CreateFleet call(s) "
                      "in %s round(s)" % (*med(b, "created_to_all_createfleet_s"),
                                          sorted({r["fleets"] for r in b}), sorted({r["rounds"] for r in b})),
                      flush=True)
        if "c" in only:
            results["memory"] = memory(d)
            m = results["memory"]
            print(f"\ncoordinator with {m['nodes']} nodes / {m['pods']} pods reporting: VmRSS {m['rss_kib'] / 1024:.1f} MiB, "
                  f"VmHWM {m['hwm_kib'] / 1024:.1f} MiB")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "provision.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
