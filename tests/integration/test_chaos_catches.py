#!/usr/bin/env python3
"""The chaos runner's invariants catch a broken product.

The agent is built with BROKEN_PDB=1 (in $BUILD/broken-pdb): its drain deletes pods instead of
evicting them through the Eviction API, so PodDisruptionBudgets are ignored. One short chaos run
(tests/chaos/chaos.py, seed 1) with that agent must end with exit status 1 and report "no PDB
ever violated" with the seed, the pods deleted by the drain's client and the faults around it.
A run can pass without the broken drain ever deleting a pod (on a loaded machine the spot
notice's node may be reclaimed before its agent drains it): then the next seed is tried, up to
three; none catching it fails the test.
The normal build passing the same invariants is `make chaos` (CI runs a few seeds).

Run: python3 tests/integration/test_chaos_catches.py   (~60 s, with the agent's build)"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import BUILD, ROOT  # noqa: E402

SEEDS = (1, 2, 3)


def main():
    broken = os.path.join(BUILD, "broken-pdb")
    t0 = time.monotonic()
    r = subprocess.run(["make", "--no-print-directory", "-j2", f"BUILD={broken}", "BROKEN_PDB=1",
                        os.path.join(broken, "nodesmith-agent")], cwd=ROOT, capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    print(f"agent built with BROKEN_PDB=1 in {time.monotonic() - t0:.0f}s", flush=True)
    for seed in SEEDS:
        with tempfile.TemporaryDirectory(prefix="nodesmith-chaos-catches-") as out:
            js = os.path.join(out, "chaos.json")
            p = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "chaos", "chaos.py"), "--runs", "1",
                                "--seed", str(seed), "--chaos-seconds", "15", "--agent-build", broken,
                                "--out-dir", out, "--json", js], cwd=ROOT, capture_output=True, text=True,
                               timeout=420, env=dict(os.environ, BUILD=BUILD))
            print(p.stdout[-6000:], p.stderr[-2000:], flush=True)
            if p.returncode == 0 and seed != SEEDS[-1]:
                print(f"seed {seed}: no violation (the broken drain did not run into a PDB); the next seed",
                      flush=True)
                continue
            assert p.returncode == 1, f"the runner's exit status was {p.returncode}, not 1 (a violation)"
            check(p, js, seed)
            return


def check(p, js, seed):
    with open(js) as f:
        res = json.load(f)[0]
    pdb = [v for v in res["violations"] if v["invariant"] == "no PDB ever violated"]
    assert pdb, res["violations"]
    # the record names the broken drain's client: a DELETE by the agent, which acts with its
    # node's kubelet identity
    assert all("done by delete by system:node:" in v["text"] for v in pdb), pdb
    assert f"VIOLATION seed {seed}: no PDB ever violated" in p.stdout
    # the report names the faults around it: at least the spot notice that started the drain
    assert any(a["kind"] == "spot-notice" for v in pdb for a in v["around"]), pdb
    print(f"test_chaos_catches: OK ({len(pdb)} PDB violation(s) reported for seed {seed})")


if __name__ == "__main__":
    main()
