#!/usr/bin/env python3
"""make chaos: seeded chaos runs of nodesmith on the local stack, each checked against the
invariants (docs/chaos.md).

    python3 tests/chaos/chaos.py [--runs N] [--seed S] [--chaos-seconds D] [--settle-seconds T]
                                 [--out-dir DIR] [--agent-build DIR] [--json OUT] [--keep-logs]

Run k uses seed S+k. Each run starts its own stack, brings a workload up, plays faults drawn
from its seed for D seconds while the workload scales and spot notices arrive, lifts every
fault, lets the system settle (at most T seconds) and checks the invariants. Every violation is
printed with its seed and the faults played around it; the logs of a failed run are kept in
OUT-DIR/seed-S/. Exit status: 0 when every invariant held in every run, 1 when one broke, 2
when a run could not be judged (the stack or the workload did not come up). Ctrl-C or SIGTERM
stop everything started."""
import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from nsharness import BUILD  # noqa: E402
import chaoslib  # noqa: E402


class Stop(BaseException):
    """Ctrl-C or SIGTERM: not an error of the run, so no handler of Exception takes it."""


def _on_signal(signum, frame):
    raise Stop(signal.Signals(signum).name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chaos-seconds", type=float, default=30.0, help="faults are played this long [30]")
    ap.add_argument("--settle-seconds", type=float, default=75.0,
                    help="longest wait for the system to settle once the faults stop [75]")
    ap.add_argument("--out-dir", default=os.path.join(BUILD, "chaos-out"))
    ap.add_argument("--agent-build", help="take nodesmith-agent from this build directory")
    ap.add_argument("--json", help="write every run's result there (default OUT-DIR/chaos.json)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the logs of passing runs too")
    args = ap.parse_args()
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    os.makedirs(args.out_dir, exist_ok=True)
    results, code = [], 0
    t_all = time.time()
    for k in range(args.runs):
        seed = args.seed + k
        workdir = tempfile.mkdtemp(prefix=f"nodesmith-chaos-{seed}-")
        run = chaoslib.Run(seed, workdir, BUILD, agent_build=args.agent_build,
                           chaos_seconds=args.chaos_seconds, settle_seconds=args.settle_seconds)
        print(f"== run {k + 1}/{args.runs}, seed {seed}", flush=True)
        try:
            res = run.run()
        except Stop as e:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print(f"{e.args[0]}: stopping everything", flush=True)
            run.stop()
            shutil.rmtree(workdir, ignore_errors=True)
            return 130
        results.append(res)
        for v in res["violations"]:
            print(chaoslib.format_violation(seed, v), flush=True)
        if res.get("setupError"):
            print(f"RUN NOT JUDGED seed {seed}: {res['setupError']}\n{res.get('traceback', '')}", flush=True)
        verdict = "ok" if res["ok"] else ("VIOLATIONS" if res["violations"] else "NOT JUDGED")
        print(f"== seed {seed}: {verdict} in {res['seconds']:.0f}s ({len(res['actions'])} actions, "
              f"{res.get('instancesLaunched', '?')} instances launched ({res.get('launchesChecked', '?')} with their pods "
              f"known), {res.get('evictions', '?')} evictions, {res.get('drainingLooks', '?')} looks at draining nodes, "
              f"{res.get('evictionsRefused', '?')} refused; settled in {res.get('settleSeconds', '?')}s)"
              + (f"; leftovers killed: {res['leftovers']}" if res["leftovers"] else ""), flush=True)
        if res.get("coordinatorListsGone"):
            print(f"   note: the leader still lists {len(res['coordinatorListsGone'])} instance(s) that are gone: "
                  + "; ".join(f"{n['instanceId']} ({n['name']}, action {n['action']}, last report "
                              f"{n['lastReportAgeSeconds']:.0f}s ago)" for n in res["coordinatorListsGone"]),
                  flush=True)
        if not res["ok"] or args.keep_logs:
            dst = os.path.join(args.out_dir, f"seed-{seed}")
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(workdir, dst, ignore=shutil.ignore_patterns("*.sock", "imds-signer", "root"),
                            ignore_dangling_symlinks=True, dirs_exist_ok=True)
            res["logs"] = dst
            print(f"   logs: {dst}", flush=True)
        shutil.rmtree(workdir, ignore_errors=True)
        if res["violations"]:
            code = 1
        elif not res["ok"] and code == 0:
            code = 2
    with open(args.json or os.path.join(args.out_dir, "chaos.json"), "w") as f:
        json.dump(results, f, indent=1)
    bad = [r["seed"] for r in results if r["violations"]]
    unjudged = [r["seed"] for r in results if not r["violations"] and not r["ok"]]
    by_inv = {}
    for r in results:
        for v in r["violations"]:
            by_inv[v["invariant"]] = by_inv.get(v["invariant"], 0) + 1
    print(f"\nchaos: {len(results)} run(s), seeds {args.seed}..{args.seed + len(results) - 1}, "
          f"{time.time() - t_all:.0f}s: {len(results) - len(bad) - len(unjudged)} passed every invariant, "
          f"{len(bad)} with violations{' ' + str(bad) if bad else ''}, "
          f"{len(unjudged)} not judged{' ' + str(unjudged) if unjudged else ''}")
    for inv, n in sorted(by_inv.items()):
        print(f"  {inv}: {n} violation(s)")
    return code


if __name__ == "__main__":
    sys.exit(main())
