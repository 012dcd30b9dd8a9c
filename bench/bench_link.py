#!/usr/bin/env python3
"""bench/link: reports per second one coordinator answers from N simulated agents, and the RSS of
a real nodesmith-agent. Runs each configuration several times and prints medians.

  python3 bench/bench_link.py [--runs 5] [--seconds 4] [--agents 200,1000] [--pods 0,20,100]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, make_pki, make_root, wait_for  # noqa: E402


BENCH_LINK = os.path.join(os.path.abspath(os.environ.get("BUILD", "build")), "benchbin", "link")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--agents", default="200,1000")
    ap.add_argument("--pods", default="0,20,100")
    ap.add_argument("--transports", default="tls,tcp")
    ap.add_argument("--change-rates", default="0,1", help="fractions of reports whose state changed")
    args = ap.parse_args()
    results = {"link": [], "agent": {}}

    with TestDir("bench-link") as d:
        pki = make_pki(d)
        print(f"{'transport':<9} {'agents':>6} {'pods':>5} {'changed':>7} {'bytes':>6} {'reports/s (median)':>19} "
              f"{'min':>8} {'max':>8} {'coord CPU/s':>11} {'per coord core':>15}")
        for transport in args.transports.split(","):
            for agents in [int(x) for x in args.agents.split(",")]:
                for pods, rate in [(p, r) for p in [int(x) for x in args.pods.split(",")]
                                   for r in [float(x) for x in args.change_rates.split(",")]]:
                    coord = Coordinator(d, pki, insecure=(transport == "tcp"), interval="10s",
                                        extra=["--log-level", "warning", "--max-nodes", "20000"],
                                        name=f"coord-{transport}-{agents}-{pods}-{rate}").start()
                    rates, cpus, nbytes, lost = [], [], 0, 0
                    for _ in range(args.runs):
                        c0 = cpu_seconds(coord.proc.pid)
                        out = subprocess.run([BENCH_LINK, coord.url, "--agents", str(agents), "--pods", str(pods),
                                              "--seconds", str(args.seconds), "--token", pki["token"],
                                              "--change-rate", str(rate),
                                              "--ca", pki["ca"]], capture_output=True, text=True,
                                             timeout=args.seconds + 60, check=True).stdout
                        r = json.loads(out)
                        c1 = cpu_seconds(coord.proc.pid)
                        rates.append(r["reports_per_second"])
                        cpus.append((c1 - c0) / (r["seconds"] + 0.5))
                        nbytes = r["report_bytes"]
                        assert r["errors"] == 0 and r["refused"] == 0, r
                        lost += r["timeouts"]
                    med = statistics.median(rates)
                    cpu = statistics.median(cpus)
                    per_core = med / cpu if cpu > 0 else 0
                    print(f"{transport:<9} {agents:>6} {pods:>5} {rate:>7.0%} {nbytes:>6} {med:>19.0f} {min(rates):>8.0f} "
                          f"{max(rates):>8.0f} {cpu:>11.2f} {per_core:>15.0f}  lost replies: {lost}", flush=True)
                    results["link"].append({"transport": transport, "agents": agents, "pods": pods, "change_rate": rate,
                                            "report_bytes": nbytes, "median": med, "runs": rates,
                                            "coordinator_cpu": cpu, "per_coordinator_core": per_core,
                                            "lost_replies": lost})
                    coord.proc.stop()

        # the agent's own footprint: a real agent, reporting every second, for 10 s
        coord = Coordinator(d, pki, interval="1s", extra=["--log-level", "warning"], name="coord-rss").start()
        root = make_root(os.path.join(d, "root"), cpus=4, mem_bytes=16 * GiB, eni_max_pods={"m5.xlarge": 58})
        agent = Proc("agent-rss", agent_argv(coord, root, "i-rss", "m5.xlarge", extra=["--log-level", "info"]), d)
        wait_for("agent registered", lambda: "i-rss" in coord.nodes(), 10)
        c0 = cpu_seconds(agent.pid)
        time.sleep(10)
        c1 = cpu_seconds(agent.pid)
        rss, hwm = status_kib(agent.pid, "VmRSS"), status_kib(agent.pid, "VmHWM")
        results["agent"] = {"rss_kib": rss, "hwm_kib": hwm, "cpu_percent_at_1s_reports": (c1 - c0) / 10 * 100}
        print(f"\nagent: VmRSS {rss} KiB ({rss / 1024:.2f} MiB), VmHWM {hwm} KiB, "
              f"CPU {(c1 - c0) / 10 * 100:.2f}% while reporting every 1 s")
        agent.stop()
        coord.proc.stop()
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "link.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
