#!/usr/bin/env python3
"""bench/karpenter: nodesmith's bench/scheduling and Karpenter's own scheduling benchmark, side by side.

Karpenter's side is its released module (bench/karpenter/go.mod pins sigs.k8s.io/karpenter), run
here: the module is copied from Go's module cache into $BUILD/karpenter-src (never into the
repository), bench/karpenter/overlay/zz_nodesmith_sidebyside_test.go is added to its
pkg/controllers/provisioning/scheduling, and `go test -tags test_performance` runs it: Karpenter's
setupScheduler (one NodePool, fake.InstanceTypes(400)) and makeDiversePods (the five groups),
timing Scheduler.Solve per size and pricing the plan (each NodeClaim at its cheapest compatible
offering). The same test writes each size's pods, as makeDiversePods drew them (Go's math/rand
reseeded with 42 per size), to $BUILD/karpenter-pods/pods-N.json. nodesmith's side runs after it,
in the same run: build/benchbin/scheduling --pods-from that file (400 types of i+1 vCPU, 2(i+1)
GiB, 10(i+1) pods, 100m/10Mi kube-reserved, as fake.InstanceTypes(400)), so both plan the very
same pods, with the same labels and selectors (Karpenter's selectors match across its groups).

Prices: Karpenter's fake types cost 0.1/vCPU + 0.1/GB (10^9 bytes), nodesmith's bench 0.1/vCPU +
0.1/GiB; both are proportional to the type's size (i+1), so nodesmith's cost is converted to
Karpenter's prices exactly (x 0.3147483648 / 0.3) before the ratio.

    python3 bench/bench_karpenter.py [--sizes 1,50,...] [--runs N] [--json FILE] [--nodesmith-only]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GO = shutil.which("go") or "/usr/local/go/bin/go"
PKG = "pkg/controllers/provisioning/scheduling"
OVERLAY = "zz_nodesmith_sidebyside_test.go"
TO_KARPENTER_PRICES = (0.1 + 0.2 * 2**30 / 1e9) / 0.3


def go_env():
    env = dict(os.environ)
    env.setdefault("GOTOOLCHAIN", "local")
    env["GOFLAGS"] = "-mod=mod"
    env["PATH"] = os.path.dirname(GO) + os.pathsep + env.get("PATH", "")
    return env


def karpenter_source(build):
    mod = os.path.join(ROOT, "bench", "karpenter")
    env = go_env()
    subprocess.run([GO, "mod", "download", "sigs.k8s.io/karpenter"], cwd=mod, env=env, check=True, timeout=900)
    out = subprocess.run([GO, "list", "-m", "-f", "{{.Dir}} {{.Version}}", "sigs.k8s.io/karpenter"], cwd=mod, env=env,
                         check=True, capture_output=True, text=True, timeout=900).stdout.split()
    src, version = out[0], out[1]
    dst = os.path.join(build, "karpenter-src")
    stamp = os.path.join(dst, ".nodesmith-version")
    if not (os.path.exists(stamp) and open(stamp).read() == version):
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        for d, dirs, files in os.walk(dst):
            for n in dirs + files:
                os.chmod(os.path.join(d, n), 0o755 if n in dirs else 0o644)
        with open(stamp, "w") as f:
            f.write(version)
    shutil.copy(os.path.join(mod, "overlay", OVERLAY), os.path.join(dst, PKG, OVERLAY))
    return dst, version


def run_karpenter(src, sizes, runs, budget, pods_dir):
    env = go_env()
    env.update(SIDE_BY_SIDE_SIZES=",".join(map(str, sizes)), SIDE_BY_SIDE_RUNS=str(runs),
               SIDE_BY_SIDE_BUDGET_SECONDS=str(budget), SIDE_BY_SIDE_PODS_DIR=pods_dir)
    p = subprocess.run([GO, "test", "-tags", "test_performance", "-run", "TestNodesmithSideBySide", "-count", "1",
                        "-timeout", "3h", "-v", "./" + PKG], cwd=src, env=env, capture_output=True, text=True)
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("KARPENTER_SIDE_BY_SIDE "):
            r = json.loads(line.split(" ", 1)[1])
            rows[r["pods"]] = r
    if p.returncode != 0 or (runs > 0 and not rows):
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit("Karpenter's benchmark failed (exit %d)" % p.returncode)
    return rows


def run_nodesmith(build, sizes, runs, pods_dir):
    """bench/scheduling on each size's pods as Karpenter's benchmark wrote them."""
    exe = os.path.join(build, "benchbin", "scheduling")
    rows = {}
    for n in sizes:
        path = os.path.join(pods_dir, "pods-%d.json" % n)
        p = subprocess.run([exe, "--runs", str(runs), "--pods-from", path], capture_output=True, text=True,
                           timeout=1800)
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
            raise SystemExit("bench/scheduling failed on %s (exit %d)" % (path, p.returncode))
        for line in p.stdout.splitlines():
            f = line.split()
            if len(f) >= 8 and f[0] == str(n):
                rows[n] = {"pods": n, "seconds": float(f[1]) / 1000, "cpu_seconds": float(f[10]) / 1000,
                           "nodes": int(f[3]), "cost": float(f[4]) * TO_KARPENTER_PRICES, "unschedulable": int(f[7])}
        if n not in rows:
            sys.stderr.write(p.stdout[-4000:])
            raise SystemExit("bench/scheduling printed no row for %s" % path)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1,50,100,500,1000,2000,5000,10000,20000")
    ap.add_argument("--runs", type=int, default=3, help="runs per size, medians (fewer for Karpenter when slow)")
    ap.add_argument("--karpenter-budget", type=int, default=120, help="seconds per size before Karpenter's runs are cut")
    ap.add_argument("--json", help="write both sides' rows here")
    ap.add_argument("--nodesmith-only", action="store_true",
                    help="Karpenter's benchmark only writes the pods (nothing solved); nodesmith's rows alone")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    build = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
    src, version = karpenter_source(build)
    pods_dir = os.path.join(build, "karpenter-pods")
    shutil.rmtree(pods_dir, ignore_errors=True)
    os.makedirs(pods_dir)
    t0 = time.time()
    load0 = open("/proc/loadavg").read().split()[:3]
    ka = run_karpenter(src, sizes, 0 if a.nodesmith_only else a.runs, a.karpenter_budget, pods_dir)
    ns = run_nodesmith(build, sizes, a.runs, pods_dir)
    load1 = open("/proc/loadavg").read().split()[:3]
    if a.nodesmith_only:
        print("nodesmith bench/scheduling on the pods of Karpenter %s's makeDiversePods (seed 42), medians of %d; "
              "cost at Karpenter's fake prices (load average %s at the start, %s at the end)" % (
                  version, a.runs, " ".join(load0), " ".join(load1)))
        print("%6s %12s %12s %10s %7s %10s %7s" % ("pods", "nodesmith ms", "cpu ms", "pods/s", "nodes", "$/h",
                                                    "unsched"))
        for n in sizes:
            x = ns[n]
            print("%6d %12.2f %12.2f %10.0f %7d %10.2f %7d" % (n, x["seconds"] * 1000, x["cpu_seconds"] * 1000,
                                                               n / x["seconds"], x["nodes"], x["cost"],
                                                               x["unschedulable"]))
        return
    print("nodesmith bench/scheduling vs Karpenter %s scheduling benchmark on the same pods (makeDiversePods, "
          "seed 42), same machine, one run (%.0f s, load average %s at the start, %s at the end), medians; "
          "cost at Karpenter's fake prices" % (version, time.time() - t0, " ".join(load0), " ".join(load1)))
    print("%6s %12s %9s %12s %10s %8s %8s %10s %10s %7s %7s %10s %10s %6s %6s" % (
        "pods", "nodesmith ms", "(cpu ms)", "Karpenter ms", "(cpu ms)", "speedup", "(cpu)", "ns pods/s", "K pods/s",
        "ns n", "K n", "ns $/h", "K $/h", "nodes", "cost"))
    rows = []
    for n in sizes:
        x, k = ns.get(n), ka.get(n)
        if not k:
            print("%6d: no row from Karpenter's benchmark" % n)
            continue
        rows.append({"pods": n, "nodesmith": x, "karpenter": k})
        print("%6d %12.2f %9.2f %12.1f %10.1f %7.0fx %7.0fx %10.0f %10.0f %7d %7d %10.2f %10.2f %6.3f %6.3f%s" % (
            n, x["seconds"] * 1000, x["cpu_seconds"] * 1000, k["seconds"] * 1000, k["cpu_seconds"] * 1000,
            k["seconds"] / x["seconds"], k["cpu_seconds"] / x["cpu_seconds"], n / x["seconds"],
            n / k["seconds"], x["nodes"], k["nodes"], x["cost"], k["cost"], x["nodes"] / k["nodes"],
            x["cost"] / k["cost"],
            "" if x["unschedulable"] == 0 and k["unschedulable"] == 0 else
            "  unschedulable %d / %d" % (x["unschedulable"], k["unschedulable"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"karpenter": version, "loadavg": [load0, load1], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
