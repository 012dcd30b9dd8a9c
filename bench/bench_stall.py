#!/usr/bin/env python3
"""bench/stall: how long agents wait for an answer while the coordinator plans a large round.

N pods (one Deployment, 250m CPU / 512 Mi each; 20 000 by default) are pending before the
coordinator starts: the local stack runs the real control plane (tests/pylib/cluster.py), whose
ReplicaSet controller creates them and whose kube-scheduler marks them Unschedulable; one NodePool;
EC2 is moto behind the project's proxy. Meanwhile bench/link simulates A agents (200 by default)
whose every report carries a changed node state (--change-rate 1: nothing is answered by the
fast path, every report waits for the loop), each reporting again 20 ms after its answer. The
window runs from before the first batch closes until after the round's first CreateFleet, so the
snapshot and the solve fall inside it. Printed: the worst time from a report sent to its answer
over the whole window (its p99, and the coordinator's log line just before that answer came)
and during the plan (replies in flight between the first batch closing and the round's first
CreateFleet), the rounds' solver times, whether the solver's time budget cut the plan, and the
time from the batch closing to the first CreateFleet.

  python3 bench/bench_stall.py [--pods 20000] [--agents 200] [--runs 1] [-- coordinator options]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from bench_provision import create_pods, stack, unschedulable  # noqa: E402
from nsharness import TestDir, log_time, wait_for  # noqa: E402

BUILD = os.path.abspath(os.environ.get("BUILD", "build"))
SOLVED = re.compile(r"Provisioning: (\d+) pending pod\(s\).*decided in ([0-9.]+) ms")
FLEET_SENT = re.compile(r"CreateFleet for NodePool \S+: \d+ override")
BUDGET = re.compile(r"time budget")


def one(w, n, agents, seconds, extra, log_copy=None):
    with stack(w) as s:
        create_pods(s, n)
        wait_for(f"{n} unschedulable pods", lambda: unschedulable(s) == n, 1800, interval=2)
        coord = s.start_coordinator("--batch-idle", "1s", "--batch-max", "10s", "--consolidation-interval", "0",
                                    "--attestation", "off", "--max-nodes", "5000",
                                    # the simulated agents all come from 127.0.0.1 and dial at once
                                    "--max-unauthenticated", "1000", "--max-unauthenticated-per-source", "1000",
                                    "--max-connections-per-source", "1000",
                                    # one replica and no Lease: this measures the loop, not the election
                                    # (a renewal answered late by an API server busy with 20 000 pods
                                    # would pause provisioning and blur the window)
                                    "--leader-elect", "no", *extra)
        trace = os.path.join(w, "slow-replies.txt")
        link = subprocess.Popen([os.path.join(BUILD, "benchbin", "link"), s.coordinator_url, "--agents", str(agents),
                                 "--pods", "20", "--seconds", str(seconds), "--change-rate", "1", "--pace-ms", "20",
                                 "--token", s.pki["token"], "--ca", s.pki["ca"], "--trace", trace],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = link.communicate(timeout=seconds + 120)
        finally:
            if link.poll() is None:
                link.kill()
                link.wait()
        if link.returncode != 0:
            raise RuntimeError(f"bench/link failed: {err}")
        r = json.loads(out)
        lines = coord.output().splitlines()
        if log_copy:
            with open(log_copy, "w") as f:
                f.write("\n".join(lines) + "\n")
        solved = [SOLVED.search(l) for l in lines]
        solved = [m for m in solved if m]
        fleets = [l for l in lines if FLEET_SENT.search(l)]
        start = next((l for l in lines if "batch closed, building the snapshot" in l), None)
        now = time.time()
        slow = []
        with open(trace) as f:
            for line in f:
                sent_ms, lat_ms = line.split()
                slow.append((int(sent_ms) / 1000, float(lat_ms)))
        during = None
        if fleets and start:
            t_start, t_end = log_time(start, now), log_time(fleets[0], now)
            during = max((lat for sent, lat in slow if sent <= t_end and sent + lat / 1000 >= t_start), default=0.0)
        worst_log = None
        if slow:
            sent, lat = max(slow, key=lambda x: x[1])
            before = [l for l in lines if log_time(l, now) is not None and log_time(l, now) <= sent + lat / 1000]
            worst_log = before[-1][:160] if before else None
        if not solved:
            raise RuntimeError(f"no round was solved within the {seconds:.0f} s the agents ran: raise --seconds")
        return {"pods": n, "agents": agents, "reports_per_second": r["reports_per_second"],
                "max_reply_ms": r["max_reply_ms"], "p99_reply_ms_upper": r["p99_reply_ms_upper"],
                "max_reply_ms_during_plan": during, "log_before_worst_reply": worst_log,
                "slow_replies_over_100ms": r["slow_replies"], "timeouts": r["timeouts"], "refused": r["refused"],
                "rounds_solved": len(solved),
                "solver_ms": [float(m.group(2)) for m in solved],
                "pending_per_round": [int(m.group(1)) for m in solved],
                "budget_cuts": sum(1 for l in lines if BUDGET.search(l)),
                "batch_to_first_createfleet_s": round(log_time(fleets[0]) - log_time(start), 3)
                if fleets and start else None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--agents", type=int, default=200)
    # the agents run this long from the coordinator's start; the plan must fall inside: under load
    # the first round can come 40 s after the start (leader sync, listing 20 000 pods)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--log", help="copy the coordinator's log here (the last run's)")
    ap.add_argument("extra", nargs="*", help="more coordinator options (after --)")
    a = ap.parse_args()
    with TestDir("bench-stall") as d:
        for run in range(a.runs):
            w = os.path.join(d, f"run{run}")
            os.makedirs(w, exist_ok=True)
            print(json.dumps(one(w, a.pods, a.agents, a.seconds, a.extra, a.log)), flush=True)


if __name__ == "__main__":
    main()
