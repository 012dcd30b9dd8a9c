#!/usr/bin/env python3
"""bench/link: reports per second one coordinator answers from N simulated agents, and the RSS of
a real nodesmith-agent. Runs each configuration several times and prints medians.

  python3 bench/bench_link.py [--runs 5] [--seconds 4] [--agents 200,1000] [--pods 0,20,100]
      [--server coordinator|nngrep-poll|nngrep-aio] [--no-agent]
      [--agent-only] [--agent-runs 3] [--agent-bin PATH] [--agent-env K=V,...]
      [--agent-world node|link] [--floor]
  python3 bench/bench_link.py --curve 1000,5000,10000,20000 [--interval 10] [--seconds 30]
      [--curve-pods 20] [--per-client 1000] [--transports tls] [--max-unauthenticated 4096]
      [--coordinator-arg '--idle-timeout 10m' ...]

--curve: the coordinator's memory and answer times with N agents each reporting every --interval
seconds (bench/link --interval-ms: a report per agent per interval, the agents' phases spread over
it), for each N of the list, a fresh coordinator each time. The agents come from ceil(N /
--per-client) client processes, each with its own range of node ids (--id-offset); file limits are
raised for the coordinator (prlimit) and the clients (setrlimit; needs the right to raise the hard
limit, e.g. root). Per N: the warm-up (every agent dials, TLS handshake included, and registers,
the client processes in parallel; its slowest registration) apart from the steady state, then over
--seconds of steady state: p50/p99/max answer time (all clients' reply times in one histogram of
0.1 ms buckets), the coordinator's VmHWM, its VmRSS (median of one sample a second) and CPU.

The agent footprint: a real nodesmith-agent (--agent-bin: another build of it, e.g. the rpm's
$BUILD/rpm/nodesmith-agent) reporting every second over TLS, measured after 10 s: VmRSS, and from
smaps_rollup its Pss (shared pages divided among the processes that map them) and its private
pages; median of --agent-runs runs. With --agent-world node (the default) it does a node's whole
job meanwhile: IMDSv2 polled every second (tests/fakes/imds.py) and its Node and pods watched on
the real Kubernetes control plane (tests/pylib/cluster.py; the Node's emulated kubelet runs
--agent-pods pods bound to it, 20 by default; the agent uses the node's kubelet kubeconfig); with
link, only the link. The
resident memory of each mapping (libc, libsystemd, the binary, anonymous...) is printed too.
--floor also measures bench/footprint, a program that maps the agent's libraries and does
nothing else, layer by layer (see bench/footprint.c).

--server nngrep-*: instead of the coordinator, bench/nngrep, which answers every report with one
fixed directive without reading it: the ceiling that NNG and the clients leave on this machine.
"""
import argparse
import collections
import json
import os
import re
import resource
import select
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "pylib"))
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, free_port, make_pki, make_root, wait_for  # noqa: E402
from realkube import RealKube  # noqa: E402


BENCH_LINK = os.path.join(os.path.abspath(os.environ.get("BUILD", "build")), "benchbin", "link")
BENCH_FOOTPRINT = os.path.join(os.path.abspath(os.environ.get("BUILD", "build")), "benchbin", "footprint")
BENCH_NNGREP = os.path.join(os.path.abspath(os.environ.get("BUILD", "build")), "benchbin", "nngrep")


class NngRep:
    """bench/nngrep in place of the coordinator: same listener, one fixed answer."""
    def __init__(self, d, pki, insecure, mode, name):
        self.url = f"{'tcp' if insecure else 'tls+tcp'}://127.0.0.1:{free_port()}"
        argv = [BENCH_NNGREP, self.url, "--mode", mode]
        if not insecure:
            argv += ["--cert", pki["cert"], "--key", pki["key"]]
        self.proc = Proc(name, argv, d)
        time.sleep(0.3)


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


def smaps_rollup_kib(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                out[k] = int(v.split()[0])
    return out


def smaps_by_mapping_kib(pid):
    """Resident kB per mapped file (basename) or [anon]/[heap]/[stack], largest first."""
    agg, cur = collections.Counter(), None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                parts = line.split()
                cur = os.path.basename(parts[5]) if len(parts) > 5 else "[anon]"
            elif line.startswith("Rss:"):
                agg[cur] += int(line.split()[1])
    return [(k, v) for k, v in agg.most_common() if v]


def raise_nofile(n):
    """For the client processes (preexec_fn): soft and hard file limits of n."""
    def f():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return f


def merged_quantile(hist, q):
    """hist: {upper_edge_ms: count}; the upper edge of the bucket holding the q-th quantile."""
    total, seen = sum(hist.values()), 0
    for edge in sorted(hist):
        seen += hist[edge]
        if total and seen >= q * total:
            return edge
    return 0.0


def curve_point(d, pki, agents, args):
    """One point of --curve: a fresh coordinator, `agents` agents from several client processes."""
    transport = args.transports.split(",")[0]
    # the hard limit can be raised only with CAP_SYS_RESOURCE; without it (this build machine: 20 000)
    # a point must stay below it
    nofile = min(agents + 4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    # every agent comes from 127.0.0.1: the per-source caps are lifted to the fleet's size; the
    # caps on connections not yet authenticated are --max-unauthenticated (the coordinator's
    # default, 64, throttles the warm-up: see docs/benchmarks.md)
    coord = Coordinator(d, pki, insecure=(transport == "tcp"), interval=f"{args.interval}s",
                        extra=["--log-level", "warning", "--max-nodes", str(max(agents, 5000)),
                               "--max-connections", str(agents + 1000),
                               "--max-connections-per-source", str(agents + 1000),
                               "--max-unauthenticated", str(args.max_unauthenticated),
                               "--max-unauthenticated-per-source", str(args.max_unauthenticated)]
                              + [x for a in args.coordinator_arg for x in a.split()],
                        name=f"coordinator-curve-{agents}").start()
    clients = []
    try:
        for attempt in range(10):  # refused now and then right after the coordinator's start
            try:
                resource.prlimit(coord.proc.pid, resource.RLIMIT_NOFILE, (nofile, nofile))
                break
            except PermissionError:
                if attempt == 9:
                    raise
                time.sleep(0.5)
        base = {"rss": status_kib(coord.proc.pid, "VmRSS"), "hwm": status_kib(coord.proc.pid, "VmHWM")}
        n_clients = -(-agents // args.per_client)
        per = [agents // n_clients + (1 if j < agents % n_clients else 0) for j in range(n_clients)]
        t_start = time.monotonic()
        offset = 0
        for j, n in enumerate(per):
            argv = [BENCH_LINK, coord.url, "--agents", str(n), "--id-offset", str(offset), "--pods", str(args.curve_pods),
                    "--interval-ms", str(int(args.interval * 1000)), "--seconds", str(args.seconds),
                    "--token", pki["token"], "--ca", pki["ca"], "--histogram", "--wait-stdin"]
            offset += n
            clients.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, preexec_fn=raise_nofile(n + 1024)))
        samples = []  # (monotonic, VmRSS kB, CPU seconds) once a second until every client answered
        outs = [None] * len(clients)
        # the warm-up dials one connection at a time per client: under load, tens per second
        deadline = t_start + args.seconds + 4 * args.interval + agents / 5 + 300
        pending = {c.stdout.fileno(): i for i, c in enumerate(clients)}
        while pending and time.monotonic() < deadline:
            if not coord.proc.alive():
                raise AssertionError(f"coordinator exited: {coord.proc.output()[-1500:]}")
            samples.append((time.monotonic(), status_kib(coord.proc.pid, "VmRSS"), cpu_seconds(coord.proc.pid)))
            ready, _, _ = select.select(list(pending), [], [], 1.0)
            for fd in ready:
                i = pending.pop(fd)
                outs[i] = clients[i].stdout.readline()
                if not outs[i]:
                    raise AssertionError(f"client {i} ended: {clients[i].stderr.read()[-1500:]}")
        if pending:
            raise AssertionError(f"{len(pending)} client(s) gave no result in time")
        t_end = time.monotonic()
        hwm = status_kib(coord.proc.pid, "VmHWM")
        rs = [json.loads(o) for o in outs]
        # the steady window: the last --seconds before the first client's result
        first = min(t for t, _, _ in samples if t >= t_end - 1.5) if samples else t_end
        window = [x for x in samples if first - args.seconds <= x[0] <= first] or samples[-2:]
        steady_rss = statistics.median(x[1] for x in window)
        cpu = (window[-1][2] - window[0][2]) / max(window[-1][0] - window[0][0], 1e-9)
        hist = collections.Counter()
        for r in rs:
            for edge, n in r["histogram"]:
                hist[edge] += n
        replies = sum(r["replies"] for r in rs)
        point = {"agents": agents, "clients": n_clients, "transport": transport, "pods_per_report": args.curve_pods,
                 "report_bytes": rs[0]["report_bytes"], "interval_s": args.interval, "seconds": args.seconds,
                 "replies": replies, "reports_per_second": round(sum(r["reports_per_second"] for r in rs)),
                 "errors": sum(r["errors"] for r in rs), "refused": sum(r["refused"] for r in rs),
                 "timeouts": sum(r["timeouts"] for r in rs),
                 "p50_ms": merged_quantile(hist, 0.5), "p99_ms": merged_quantile(hist, 0.99),
                 "max_ms": max(r["max_reply_ms"] for r in rs), "over_100ms": sum(r["slow_replies"] for r in rs),
                 "vmhwm_kib": hwm, "steady_rss_kib": steady_rss, "idle_rss_kib": base["rss"],
                 "coordinator_cpu": round(cpu, 3),
                 "warmup_seconds": max(r["warmup"]["dial_and_register_seconds"] for r in rs),
                 "dial_retries": sum(r["warmup"]["dial_retries"] for r in rs),
                 "warmup_registered": sum(r["warmup"]["registered"] for r in rs),
                 "warmup_p99_ms_worst_client": max(r["warmup"]["p99_ms"] for r in rs),
                 "warmup_max_ms": max(r["warmup"]["max_ms"] for r in rs),
                 "nodes": len(coord.nodes()), "coordinator_args": args.coordinator_arg}
        # what the coordinator's connection guard did meanwhile (refusals, closes, handshakes)
        point["link_metrics"] = {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in coord.metrics().splitlines()
                                 if ln.startswith(("nodesmith_link_connections", "nodesmith_link_handshakes"))}
        return point
    finally:
        # the coordinator closes first (its TIME_WAIT entries stay on its one port), then the
        # clients, which were holding their connections open on --wait-stdin
        coord.proc.stop(timeout=20)
        for c in clients:
            try:
                c.stdin.close()
            except OSError:
                pass
        for c in clients:
            try:
                c.wait(timeout=30)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait(timeout=10)


def curve(args):
    points = []
    with TestDir("bench-link-curve") as d:
        pki = make_pki(d)
        print(f"{'agents':>6} {'clients':>7} {'reports/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'>100ms':>6} "
              f"{'VmHWM MiB':>9} {'RSS MiB':>8} {'CPU':>5} {'warm-up s':>9} {'warm-up p99/max ms':>18} "
              f"{'errors/refused/timeouts':>23}", flush=True)
        for agents in [int(x) for x in args.curve.split(",")]:
            p = curve_point(d, pki, agents, args)
            points.append(p)
            save_curve(points)  # each point as it comes: a later one may not finish
            print(f"{agents:>6} {p['clients']:>7} {p['reports_per_second']:>9} {p['p50_ms']:>7.1f} {p['p99_ms']:>7.1f} "
                  f"{p['max_ms']:>7.1f} {p['over_100ms']:>6} {p['vmhwm_kib'] / 1024:>9.1f} "
                  f"{p['steady_rss_kib'] / 1024:>8.1f} {p['coordinator_cpu']:>5.2f} {p['warmup_seconds']:>9.1f} "
                  f"{p['warmup_p99_ms_worst_client']:>8.1f}/{p['warmup_max_ms']:<9.1f} "
                  f"{p['errors']:>7}/{p['refused']}/{p['timeouts']}  nodes {p['nodes']}, dial retries {p['dial_retries']}", flush=True)
            print("        guard: " + ", ".join(f"{k} {v:g}" for k, v in p["link_metrics"].items() if v), flush=True)
    return points


def save_curve(points):
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "link-curve.json"), "w") as f:
        json.dump(points, f, indent=1)


def start_node_world(d, node, instance, pods):
    """A fake IMDS for the instance, and the real control plane (tests/pylib/cluster.py) holding
    its Node (registered by an emulated kubelet, tests/fakes/kubelet.py) and `pods` pods bound to
    it, which that kubelet runs. Returns (imds, RealKube, the agent's extra arguments)."""
    fakes = os.path.join(os.path.dirname(__file__), "..", "tests", "fakes")
    imds = Proc("imds", [sys.executable, os.path.join(fakes, "imds.py"), "--port", "0", "--instance-id", instance,
                         "--life-cycle", "spot"], d)
    iport = int(wait_for("fake IMDS", lambda: (re.search(r"listening on 127\.0\.0\.1:(\d+)", imds.output())
                                               or [None, None])[1], 15))
    kube = RealKube(d, log=None).start(packaging=False, fault_proxy=False, audit=False)
    kube.register_nodes(node, instances={node: instance},
                        capacity={"cpu": "4", "memory": "16Gi", "pods": str(max(110, pods + 10))})
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": "default"},
          "data": {"app.yaml": "port: 8080\n"}}
    kube.req("POST", "/api/v1/namespaces/default/configmaps", cm)
    for i in range(pods):
        # no ownerReferences: the garbage collector deletes pods whose owner is missing
        # the shape of a typical Deployment's pod: image, command, env, probes, mounts
        container = {"name": "app", "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/shop/web:1.42.7",
                     "command": ["/app/server"], "args": ["--port=8080", "--log-format=json"],
                     "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-" + "x" * 24} for k in range(8)],
                     "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                     "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                     "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                     "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True}}
        # bound to the node at creation, as a scheduler's binding leaves it; the ServiceAccount
        # admission plugin adds the token volume and its mount
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"web-7c9d8f-{i:05d}", "namespace": "default",
                            "labels": {"app": "web", "pod-template-hash": "7c9d8f"}},
               "spec": {"nodeName": node, "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "web-config"}}],
                        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                         "effect": "NoExecute", "tolerationSeconds": 300}]}}
        kube.req("POST", "/api/v1/namespaces/default/pods", pod)
    wait_for(f"{pods} pods Running", lambda: len([p for p in kube.pods(node) if p["status"].get("phase") == "Running"])
             == pods, 120, 0.5)
    return imds, kube, ["--imds-endpoint", f"http://127.0.0.1:{iport}", "--kubeconfig", kube.node_kubeconfig(node),
                        "--logind", "no"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--agents", default="200,1000")
    ap.add_argument("--pods", default="0,20,100")
    ap.add_argument("--transports", default="tls,tcp")
    ap.add_argument("--change-rates", default="0,1", help="fractions of reports whose state changed")
    ap.add_argument("--server", default="coordinator", choices=["coordinator", "nngrep-poll", "nngrep-aio"])
    ap.add_argument("--no-agent", action="store_true", help="skip the agent footprint")
    ap.add_argument("--agent-only", action="store_true", help="only the agent footprint")
    ap.add_argument("--agent-runs", type=int, default=3)
    ap.add_argument("--agent-bin", default=None)
    ap.add_argument("--agent-env", default="", help="environment for the agent, K=V,K=V")
    ap.add_argument("--agent-pods", type=int, default=20, help="pods on the node (--agent-world node)")
    ap.add_argument("--agent-world", default="node", choices=["node", "link"],
                    help="node: IMDS and a Kubernetes API beside the link; link: the link alone")
    ap.add_argument("--floor", action="store_true", help="also measure bench/footprint's levels")
    ap.add_argument("--curve", default=None, help="agent counts, e.g. 1000,5000,10000,20000: the paced curve")
    ap.add_argument("--interval", type=float, default=10, help="--curve: each agent's report interval, seconds")
    ap.add_argument("--per-client", type=int, default=1000, help="--curve: agents per client process")
    ap.add_argument("--curve-pods", type=int, default=20, help="--curve: pods in each agent's report")
    ap.add_argument("--coordinator-arg", action="append", default=[],
                    help="--curve: more coordinator options, e.g. '--idle-timeout 10m' (repeatable)")
    ap.add_argument("--max-unauthenticated", type=int, default=4096,
                    help="--curve: the coordinator's caps on connections not yet authenticated (total, per source)")
    args = ap.parse_args()
    if args.curve:
        if args.seconds < 2 * args.interval:
            args.seconds = 3 * args.interval  # a few reports per agent at least
        curve(args)
        return
    results = {"link": [], "agent": {}}

    with TestDir("bench-link") as d:
        pki = make_pki(d)
        print(f"{'transport':<9} {'agents':>6} {'pods':>5} {'changed':>7} {'bytes':>6} {'reports/s (median)':>19} "
              f"{'min':>8} {'max':>8} {'coord CPU/s':>11} {'per coord core':>15}")
        for transport in ([] if args.agent_only else args.transports.split(",")):
            for agents in [int(x) for x in args.agents.split(",")]:
                for pods, rate in [(p, r) for p in [int(x) for x in args.pods.split(",")]
                                   for r in [float(x) for x in args.change_rates.split(",")]]:
                    name = f"{args.server}-{transport}-{agents}-{pods}-{rate}"
                    if args.server == "coordinator":
                        coord = Coordinator(d, pki, insecure=(transport == "tcp"), interval="10s",
                                            extra=["--log-level", "warning", "--max-nodes", "20000"],
                                            name=name).start()
                    else:
                        coord = NngRep(d, pki, transport == "tcp", args.server.split("-")[1], name)
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
                    results["link"].append({"server": args.server, "transport": transport, "agents": agents, "pods": pods, "change_rate": rate,
                                            "report_bytes": nbytes, "median": med, "runs": rates,
                                            "coordinator_cpu": cpu, "per_coordinator_core": per_core,
                                            "lost_replies": lost})
                    coord.proc.stop()

        if not args.no_agent:
            # the agent's own footprint: a real agent, reporting every second, after 10 s
            env = dict(kv.split("=", 1) for kv in args.agent_env.split(",") if kv)
            coord = Coordinator(d, pki, interval="1s", extra=["--log-level", "warning"], name="coord-rss").start()
            root = make_root(os.path.join(d, "root"), cpus=4, mem_bytes=16 * GiB, eni_max_pods={"m5.xlarge": 58})
            runs, maps = [], []
            world = None
            if args.agent_world == "node":
                world = start_node_world(d, "ip-i-rss", "i-rss", args.agent_pods)
            for i in range(args.agent_runs):
                argv = agent_argv(coord, root, "i-rss", "m5.xlarge", extra=["--log-level", "info"])
                if world:
                    argv[argv.index("--imds") + 1] = "yes"
                    argv += world[2]
                if args.agent_bin:
                    argv[0] = args.agent_bin
                agent = Proc(f"agent-rss-{i}", argv, d, env=env)
                wait_for("agent registered", lambda: "i-rss" in coord.nodes(), 15)
                c0 = cpu_seconds(agent.pid)
                time.sleep(10)
                c1 = cpu_seconds(agent.pid)
                roll = smaps_rollup_kib(agent.pid)
                runs.append({"rss_kib": status_kib(agent.pid, "VmRSS"), "hwm_kib": status_kib(agent.pid, "VmHWM"),
                             "pss_kib": roll["Pss"], "private_kib": roll["Private_Clean"] + roll["Private_Dirty"],
                             "anon_kib": roll["Anonymous"], "threads": status_kib(agent.pid, "Threads"),
                             "cpu_percent_at_1s_reports": (c1 - c0) / 10 * 100})
                maps.append(smaps_by_mapping_kib(agent.pid))
                if world:
                    n = coord.nodes().get("i-rss") or {}
                    assert (n.get("pods") or 0) >= args.agent_pods, f"the agent reported {n.get('pods')} pods of {args.agent_pods}"
                agent.stop()
            if world:
                world[0].stop()
                world[1].stop()
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            results["agent"] = {"binary": argv[0], "env": env, "world": args.agent_world, "runs": runs,
                                "median": med, "mappings_kib": maps}
            print(f"\nagent {argv[0]} {args.agent_env} ({args.agent_world}): median of {len(runs)}: "
                  f"VmRSS {med['rss_kib'] / 1024:.2f} MiB, "
                  f"Pss {med['pss_kib'] / 1024:.2f} MiB, private {med['private_kib'] / 1024:.2f} MiB "
                  f"(anonymous {med['anon_kib'] / 1024:.2f} MiB), {med['threads']:.0f} threads, "
                  f"CPU {med['cpu_percent_at_1s_reports']:.2f}% while reporting every 1 s")
            mid = sorted(range(len(runs)), key=lambda i: runs[i]["rss_kib"])[len(runs) // 2]
            print("  resident by mapping (the median run): " +
                  ", ".join(f"{k} {v}" for k, v in maps[mid][:12]) + " (kB)")
            if args.floor:
                results["floor"] = []
                names = ["libraries mapped, nothing run", "+ sd-event loop", "+ NNG REQ socket dialling"]
                for level, what in enumerate(names):
                    fp = Proc(f"footprint-{level}", [BENCH_FOOTPRINT, str(level), coord.url.replace("tls+", "")], d,
                              env=env)
                    time.sleep(1.5)
                    roll = smaps_rollup_kib(fp.pid)
                    row = {"level": level, "what": what, "rss_kib": status_kib(fp.pid, "VmRSS"),
                           "pss_kib": roll["Pss"], "private_kib": roll["Private_Clean"] + roll["Private_Dirty"],
                           "threads": status_kib(fp.pid, "Threads")}
                    results["floor"].append(row)
                    print(f"footprint {level} ({what}): VmRSS {row['rss_kib'] / 1024:.2f} MiB, Pss "
                          f"{row['pss_kib'] / 1024:.2f} MiB, private {row['private_kib'] / 1024:.2f} MiB, "
                          f"{row['threads']} threads")
                    fp.stop()
            coord.proc.stop()
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    name = "link-agent.json" if args.agent_only else "link.json"
    with open(os.path.join(os.path.dirname(__file__), "results", name), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
