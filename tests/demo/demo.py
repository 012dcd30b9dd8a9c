#!/usr/bin/env python3
"""make demo: the whole of nodesmith running on 127.0.0.1, as a user first meets it.

It starts moto behind tests/fakes/ec2proxy.py, the fake Kubernetes API server (scheduler and
kubelet emulation included), a nodesmith-coordinator (the leader, behind a Service-like
forwarder) and the node emulator, which boots one real nodesmith-agent with its own fake IMDS
for every instance the coordinator launches. Then it plays a scenario (tests/demo/
scenario-default.json unless --scenario names another; the format is in docs/demo.md) and prints
a timeline, then a table; the same goes to a JSON file, and a PNG plot of nodes and hourly cost
over time when gnuplot is installed.

Every figure printed is read from the running system: Kubernetes objects and watches, the EC2
proxy's call log, the coordinator's /api/v1/nodes and /metrics, the fake API server's eviction
audit (/_fake/evictions) and the emulator's timeline (/_emu/events).

    python3 tests/demo/demo.py [--scenario FILE] [--quiet] [--json OUT] [--plot OUT.png]
                               [--out-dir DIR] [--keep-logs]

Ctrl-C (SIGINT) or SIGTERM stop everything it started."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, HERE)
from nsharness import BUILD, ROOT  # noqa: E402
from stack import LocalStack  # noqa: E402
import demolib  # noqa: E402
from demolib import Observer, Scenario, StepError, percentile  # noqa: E402


class Stop(Exception):
    """Ctrl-C or SIGTERM."""


def _on_signal(signum, frame):
    raise Stop(signal.Signals(signum).name)


def check_prerequisites(build):
    missing = []
    for tool, hint in (("kubectl", "kubectl 1.32 (https://kubernetes.io/docs/tasks/tools/)"),
                       ("moto_server", "moto's server: python3 -m pip install 'moto[server]'")):
        if not shutil.which(tool) and not (tool == "moto_server" and os.environ.get("MOTO_SERVER")):
            missing.append(hint)
    try:
        import botocore  # noqa: F401
    except ImportError:
        missing.append("botocore: python3 -m pip install botocore")
    for b in ("nodesmith-coordinator", "nodesmith-agent", "nodesmithctl"):
        if not os.access(os.path.join(build, b), os.X_OK):
            missing.append(f"{b} in {build}: run make BUILD={os.path.relpath(build, ROOT)} all")
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default=os.path.join(HERE, "scenario-default.json"),
                    help="scenario file (JSON; docs/demo.md)")
    ap.add_argument("--quiet", action="store_true", help="no timeline, only the final table")
    ap.add_argument("--json", help="write the results there (default OUT-DIR/demo.json)")
    ap.add_argument("--plot", help="write the plot there (default OUT-DIR/demo.png)")
    ap.add_argument("--out-dir", default=os.path.join(BUILD, "demo-out"),
                    help="where results, the plot and (with --keep-logs) the logs go")
    ap.add_argument("--keep-logs", action="store_true", help="keep every process's log in OUT-DIR/logs")
    args = ap.parse_args()

    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    missing = check_prerequisites(BUILD)
    if missing:
        print("make demo needs:\n  " + "\n  ".join(missing), file=sys.stderr)
        return 2
    scenario = Scenario.load(args.scenario)
    os.makedirs(args.out_dir, exist_ok=True)
    json_out = args.json or os.path.join(args.out_dir, "demo.json")
    plot_out = args.plot or os.path.join(args.out_dir, "demo.png")

    out = demolib.Printer(quiet=args.quiet)
    workdir = tempfile.mkdtemp(prefix="nodesmith-demo-")
    stack = LocalStack(workdir, build=BUILD, cluster=scenario.cluster,
                       report_interval=scenario.stack.get("reportInterval", "1s"), kube="real")
    stack.demo_kubeconfig = os.path.join(os.path.abspath(args.out_dir), "kubeconfig")
    obs = None
    result = {"scenario": scenario.path, "name": scenario.name, "steps": [], "completed": False}
    code = 1
    try:
        out.header(scenario)
        obs = demolib.run(scenario, stack, out, result)
        result["completed"] = all(s.get("ok", True) for s in result["steps"])
        code = 0 if result["completed"] else 1
    except Stop as e:
        out.line(f"{e.args[0]}: stopping everything")
        result["interrupted"] = e.args[0]
        code = 130
    except StepError as e:
        out.line(f"FAILED: {e}")
        result["error"] = str(e)
    except Exception as e:  # a process failed to start, a wait on the stack timed out...
        out.line(f"FAILED: {type(e).__name__}: {e}")
        result["error"] = f"{type(e).__name__}: {e}"
    finally:
        # further Ctrl-C while we stop is ignored: stopping must finish
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if obs is not None:
            obs.stop()
        t = time.monotonic()
        stack.stop_all()
        left = stack.leftovers()
        if left:
            stack.kill_leftovers()
        result["shutdown"] = {"seconds": round(time.monotonic() - t, 2), "leftovers": [str(x) for x in left]}
        if args.keep_logs or code not in (0, 130):
            dst = os.path.join(args.out_dir, "logs")
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(workdir, dst, ignore=shutil.ignore_patterns("*.sock", "imds-signer"),
                            ignore_dangling_symlinks=True, dirs_exist_ok=True)
            result["logs"] = dst
        shutil.rmtree(workdir, ignore_errors=True)
        if "summary" in result or obs is not None:
            if obs is not None and "summary" not in result:
                result["summary"] = demolib.summarize(obs, scenario, result)
            with open(json_out, "w") as f:
                json.dump(result, f, indent=2, sort_keys=False)
            out.table(result)
            png = demolib.plot(result, plot_out)
            out.line(f"results: {json_out}" + (f"   plot: {png}" if png else
                                               "   plot: skipped (gnuplot not installed)"))
        out.line(f"stopped: every process ended ({result['shutdown']['seconds']:.1f}s)"
                 + (f"; {len(left)} had to be killed: {left}" if left else ""))
        if result.get("logs"):
            out.line(f"logs: {result['logs']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
