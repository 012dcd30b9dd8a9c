#!/usr/bin/env python3
"""bench/notice: time from the fake IMDS publishing a spot interruption notice to the
coordinator recording it, at the agent's default poll interval (1 s), over many notices; and
the agent's RSS and CPU while it polls.

N agents, each with its own fake IMDS, report to one coordinator (TLS). In each round every
fake publishes a spot notice at a random moment; the coordinator's /api/v1/nodes gives the time
it first recorded each notice (recordedUnixMs). The notice is then cleared and the next round
starts once the coordinator has seen it withdrawn.

  python3 bench/bench_notice.py [--agents 10] [--rounds 20] [--poll 1s]
"""
import argparse
import json
import os
import random
import re
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import GiB, Coordinator, Proc, TestDir, binary, make_pki, make_root, wait_for  # noqa: E402

FAKES = os.path.join(os.path.dirname(__file__), "..", "tests", "fakes")


def post(url, body=None, method="POST"):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read()


def pct(v, p):
    v = sorted(v)
    k = (len(v) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--poll", default="1s", help="agent --imds-poll-interval (default: the agent's default)")
    args = ap.parse_args()
    random.seed(7)
    lat = []
    with TestDir("bench-notice") as d:
        pki = make_pki(d)
        coord = Coordinator(d, pki, interval="10s", extra=["--log-level", "info"]).start()
        fakes, agents = [], []
        for i in range(args.agents):
            iid = f"i-0bench{i:012d}"
            fake = Proc(f"imds-{i}", [sys.executable, os.path.join(FAKES, "imds.py"), "--port", "0",
                                      "--instance-id", iid, "--instance-type", "m6i.large",
                                      "--zone", "us-east-1a", "--life-cycle", "spot"], d)
            port = int(wait_for("fake IMDS", lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                                                                  fake.output()).group(1), 15))
            root = make_root(os.path.join(d, f"root-{i}"), cpus=2, mem_bytes=8 * GiB)
            argv = [binary("nodesmith-agent"), "--coordinator", coord.url, "--tls-ca", pki["ca"],
                    "--tls-server-name", "localhost", "--token-file", pki["token_file"], "--root", root,
                    "--imds-endpoint", f"http://127.0.0.1:{port}", "--log-level", "notice"]
            if args.poll != "1s":
                argv += ["--imds-poll-interval", args.poll]
            agents.append(Proc(f"agent-{i}", argv, d))
            fakes.append((iid, f"http://127.0.0.1:{port}/_fake"))
        wait_for("all agents registered", lambda: len(coord.nodes()) == args.agents, 30)

        # the agent's footprint while it polls, before any notice
        a0 = agents[0].pid
        c0 = proc_cpu(a0)
        time.sleep(20)
        cpu = (proc_cpu(a0) - c0) / 20 * 100
        rss, hwm = proc_kib(a0, "VmRSS"), proc_kib(a0, "VmHWM")

        for rnd in range(args.rounds):
            published = {}
            order = list(range(args.agents))
            random.shuffle(order)
            for i in order:
                time.sleep(random.uniform(0, 0.2))  # land anywhere in the poll cycle
                iid, fk = fakes[i]
                published[iid] = time.time() * 1000
                post(fk + "/spot", {"action": "terminate", "in_seconds": 120})

            def all_recorded():
                n = coord.nodes()
                got = {}
                for iid in published:
                    notes = [x for x in n[iid].get("notices", []) if x.get("kind") == "KIND_SPOT_INTERRUPTION"]
                    if not notes:
                        return None
                    got[iid] = notes[0]["recordedUnixMs"]
                return got
            rec = wait_for("notices recorded", all_recorded, 15, interval=0.05)
            lat += [(rec[iid] - published[iid]) / 1000 for iid in published]
            for iid, fk in fakes:
                post(fk + "/spot", method="DELETE")
            wait_for("notices withdrawn", lambda: all(not x.get("notices") for x in coord.nodes().values()), 15)

        for p in agents:
            p.stop()
        coord.proc.stop()

    result = {"notices": len(lat), "poll_interval": args.poll, "p50_s": statistics.median(lat),
              "p90_s": pct(lat, 90), "p99_s": pct(lat, 99), "max_s": max(lat), "min_s": min(lat),
              "agent_rss_kib": rss, "agent_hwm_kib": hwm, "agent_cpu_percent": cpu}
    print(json.dumps(result, indent=1))
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "notice.json"), "w") as f:
        json.dump({"latencies_s": lat, **result}, f)
    return 0 if result["p99_s"] <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
