#!/usr/bin/env python3
"""make demo: nodesmith running locally on 127.0.0.1.

Starts a coordinator (TLS on the agent link, bootstrap token), one nodesmith-agent per simulated
node (each with its own fake node root: CPUs, memory, hugepages, GPUs, kubelet config), shows the
node table as the operator sees it with `nodesmithctl nodes`, then kills the coordinator and
restarts it to show the agents coming back on their own. Everything it starts is stopped at the
end or on Ctrl-C."""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, binary, make_pki, make_root, wait_for  # noqa: E402

T0 = time.monotonic()

NODES = [
    # instance id, type, zone, vCPU, memory, extra root settings
    ("i-0a1b2c3d4e5f60001", "m6i.large", "us-east-1a", 2, 8 * GiB, {"eni_max_pods": {"m6i.large": 29}}),
    ("i-0a1b2c3d4e5f60002", "c6g.xlarge", "us-east-1b", 4, 8 * GiB, {"eni_max_pods": {"c6g.xlarge": 58}}),
    ("i-0a1b2c3d4e5f60003", "g4dn.xlarge", "us-east-1c", 4, 16 * GiB,
     {"gpus": 1, "kubelet_config": {"kind": "KubeletConfiguration", "maxPods": 29,
                                    "kubeReserved": {"cpu": "80m", "memory": "574Mi"}}}),
]


def say(event, node="-", detail=""):
    print(f"{time.monotonic() - T0:7.2f}s  {event:<26} {node:<22} {detail}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", help="scenario file (JSON list of nodes)")
    args = ap.parse_args()
    nodes = NODES
    if args.scenario:
        with open(args.scenario) as f:
            nodes = [(n["instanceId"], n["instanceType"], n["zone"], n["cpus"], int(n["memoryGiB"] * GiB),
                      n.get("root", {})) for n in json.load(f)["nodes"]]

    signal.signal(signal.SIGINT, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"{'TIME':>8}  {'EVENT':<26} {'NODE':<22} DETAIL")
    with TestDir("demo") as d:
        try:
            pki = make_pki(d)
            say("pki", detail="CA, coordinator certificate (DNS:localhost), bootstrap token")
            coord = Coordinator(d, pki, interval="1s").start()
            say("coordinator started", detail=f"agents: {coord.url}  http: {coord.http}")
            for iid, itype, zone, cpus, mem, extra in nodes:
                root = make_root(os.path.join(d, iid), cpus=cpus, mem_bytes=mem, **extra)
                Proc(f"agent-{iid}", agent_argv(coord, root, iid, itype, zone), d)
                say("agent started", iid, f"{itype} in {zone}: {cpus} vCPU, {mem // GiB} GiB")
            wait_for("all nodes", lambda: len(coord.nodes()) == len(nodes), 20)
            for iid, n in sorted(coord.nodes().items()):
                a = n["allocatable"]
                say("node registered", iid, f"allocatable {a.get('cpuMillis', 0)}m CPU, "
                    f"{a.get('memoryBytes', 0) // 2**20} MiB, {a.get('pods', 0)} pods, {a.get('gpus', 0)} GPU")
            print()
            os.system(f"{binary('nodesmithctl')} nodes --coordinator {coord.http}")
            print()
            coord.proc.kill()
            say("coordinator killed", detail="agents keep running and back off with jitter")
            time.sleep(3)
            coord.proc.stop()
            t = time.monotonic()
            coord.start()
            wait_for("agents back", lambda: len(coord.nodes()) == len(nodes), 20, interval=0.02)
            say("coordinator restarted", detail=f"all {len(nodes)} agents back in {time.monotonic() - t:.2f}s, "
                "rebuilt from their reports")
            print()
            print("Summary")
            print(f"  nodes reporting        {len(coord.nodes())}")
            print(f"  agent link             TLS (mbedTLS via NNG), bootstrap token")
            print(f"  metrics                {coord.http}/metrics")
        except KeyboardInterrupt:
            say("interrupted", detail="stopping everything")
        finally:
            Proc.stop_all()
            say("stopped", detail="no process left running")


if __name__ == "__main__":
    main()
