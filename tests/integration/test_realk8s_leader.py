#!/usr/bin/env python3
"""Two coordinator replicas under a slow or throttling API server never act at once (issue 16,
point 2), on the real control plane.

Each replica reaches kube-apiserver through a tests/fakes/kubeproxy.py of its own (the agents
directly). Each seeded run draws, from random.Random(seed), a workload (a scale-up that launches
nodes, then a scale-down that drains and terminates them) and fault windows: the Lease path or
every path slowed (answers held 1-4 s) or answered 429 with Retry-After, for 3-10 s, at random
moments, on the current leader's connection (mostly), the standby's or both. The Lease lasts 3 s,
so its renew deadline is 2 s and the replicas change hands under these faults.

Checked over all runs, from three records:
  - the coordinators' logs: every CreateFleet, TerminateInstances, disruption decision and proxied
    drain is logged "acting replica ID";
  - the EC2 proxy's log of CreateFleet / RunInstances / TerminateInstances as EC2 received them,
    each attributed to the replica that logged the latest such action before it;
  - kube-apiserver's audit log of evictions: those made with a coordinator's token are attributed
    to the replica by the token's ID (audit user.extra credential-id).
Merged by time, two actions of different replicas are never closer than the Lease duration minus
the renew deadline (1 s): an old leader stops acting at its renew deadline, a new one starts no
earlier than a whole Lease duration after it last saw the old one's renewal
(docs/leader-election.md). Leadership changes are counted, and each seed must see at least one
fault window applied.

    python3 tests/integration/test_realk8s_leader.py [--seeds N] [--first-seed S]

`make test` runs 2 seeds (about 3 minutes with the control plane's start-up); a 20-seed run is
recorded in docs/leader-election.md.
"""
import argparse
import base64
import json
import os
import random
import re
import signal
import sys
import threading
import time
from datetime import datetime

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, http_get, log_time, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import ON_DEMAND_M6I_LARGE, deployment, node_class_yaml, nodepool_yaml  # noqa: E402

CLUSTER = "leader-test"
LEASE, RENEW_DEADLINE = 3.0, 2.0
GAP = LEASE - RENEW_DEADLINE
SLACK = 0.05        # log lines are written just before the request leaves
LEASE_PATH = r"/leases/nodesmith-coordinator"
OBJECTS = node_class_yaml(CLUSTER) + nodepool_yaml(
    requirements=ON_DEMAND_M6I_LARGE,
    spec="  disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, "
         "budgets: [{nodes: '100%'}]}\n")
EC2_WRITES = {"CreateFleet": "CreateFleet", "RunInstances": "CreateFleet",
              "TerminateInstances": "TerminateInstances"}
ACTION = re.compile(r"(CreateFleet|TerminateInstances|Disrupting Node|must drain).*acting replica (\S+?)\.?\s")


def fault_windows(rng):
    """[(start offset s, target, rule)]: two or three windows of slow or throttled answers, on
    the current leader's API connection (most often), the standby's, or both."""
    out = []
    for _ in range(rng.randint(2, 3)):
        seconds = round(rng.uniform(3, 10), 1)
        path = LEASE_PATH if rng.random() < 0.5 else ".*"
        if rng.random() < 0.5:
            rule = {"path": path, "delay": round(rng.uniform(1, 4), 2)}
        else:
            rule = {"path": path, "status": 429, "retryAfter": 1}
        rule.update(count=None, seconds=seconds)
        target = rng.choices(("leader", "standby", "both"), weights=(6, 2, 2))[0]
        out.append((round(rng.uniform(0, 25), 1), target, rule))
    return sorted(out, key=lambda x: x[0])


def leading(http):
    try:
        return json.loads(http_get(http + "/api/v1/provisioning")[1]).get("leading")
    except Exception:
        return False


def apply_faults(replicas, windows, stop, applied):
    """replicas: {identity: (fault proxy, coordinator http)}."""
    t0 = time.monotonic()
    for at, target, rule in windows:
        if stop.wait(max(0.0, at - (time.monotonic() - t0))):
            return
        lead = [r for r, (_, http) in replicas.items() if leading(http)]
        names = (list(replicas) if target == "both" else
                 lead if target == "leader" else [r for r in replicas if r not in lead])
        for r in names:
            replicas[r][0].fault(**rule)
        applied.append((names, rule))


def instances_running(s):
    return len(s.instances(cluster_only=True, states=["pending", "running"]))


def seeded_run(s, replicas, seed):
    rng = random.Random(seed)
    up = rng.randint(2, 4)
    windows = fault_windows(rng)
    stop, applied = threading.Event(), []
    t = threading.Thread(target=apply_faults, args=(replicas, windows, stop, applied), daemon=True)
    t.start()
    t0 = time.monotonic()
    try:
        s.kubectl("scale", "deployment", "w", f"--replicas={up}")
        up_ok = wait_for_quietly(lambda: instances_running(s) >= up and len(running(s)) == up, 75)
        s.kubectl("scale", "deployment", "w", "--replicas=0")
        down_ok = wait_for_quietly(lambda: instances_running(s) == 0, 75)
    finally:
        stop.set()
        t.join(5)
        for px, _ in replicas.values():
            px.clear()
    desc = ", ".join(f"{'slow ' + str(r['delay']) + 's' if 'delay' in r else '429'} on "
                     f"{'the Lease' if r['path'] == LEASE_PATH else 'everything'} for {r['seconds']}s "
                     f"to {'+'.join(names) or 'nobody'}" for names, r in applied)
    print(f"seed {seed}: {up} node(s) up {'ok' if up_ok else 'late'}, down {'ok' if down_ok else 'late'}, "
          f"{time.monotonic() - t0:.0f}s; faults: {desc}", flush=True)
    assert applied, seed
    if not down_ok:   # the next seed starts from nothing
        wait_for("every instance gone before the next seed", lambda: instances_running(s) == 0, 120, 1)


def wait_for_quietly(fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if fn():
                return True
        except Exception:
            pass
        time.sleep(0.5)
    return False


def running(s):
    return [p for p in s.pods("default") if p["metadata"]["labels"].get("app") == "w"
            and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def token_id(kubeconfig):
    """The jti of the ServiceAccount token in a kubeconfig (the audit log's credential-id)."""
    with open(kubeconfig) as f:
        tok = json.load(f)["users"][0]["user"]["token"]
    payload = tok.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"]


def coordinator_actions(procs, near):
    out = []
    for name, p in procs.items():
        for line in p.output().splitlines():
            m = ACTION.search(line)
            if m:
                out.append((log_time(line, near), m.group(2), m.group(1), "log"))
    return out


def leadership_changes(procs):
    return sum(p.output().count("Leading: holding Lease") for p in procs.values())


def ec2_writes(s, actions):
    """EC2 writes as EC2 got them, each attributed to the replica whose log shows the latest
    action of that kind before it."""
    out = []
    for e in s.proxy("GET", "log")["calls"]:
        kind = EC2_WRITES.get(e.get("action"))
        if not kind or e.get("replayed"):
            continue
        at = e.get("received", e["unix"])
        before = [a for a in actions if a[2] == kind and a[0] <= at + SLACK]
        assert before, f"EC2 {e['action']} at {at} with no replica's log line before it"
        who = max(before)[1]
        out.append((at, who, "EC2 " + e["action"], "ec2"))
    return out


def coordinator_evictions(cluster, jtis):
    """Evictions kube-apiserver accepted from a coordinator's token: (time, replica)."""
    out = []
    with open(cluster.audit_log) as f:
        for line in f:
            ev = json.loads(line)
            ref = ev.get("objectRef") or {}
            if ref.get("subresource") != "eviction" or ev.get("stage") != "ResponseComplete":
                continue
            user = ev.get("user") or {}
            if not user.get("username", "").endswith(":nodesmith-coordinator"):
                continue
            cred = " ".join((user.get("extra") or {}).get("authentication.kubernetes.io/credential-id", []))
            who = next((r for r, j in jtis.items() if j in cred), "unknown")
            t = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            out.append((t, who, "eviction " + ref.get("name", ""), "audit"))
    return out


def check_overlap(events):
    """Consecutive events (by time) of different replicas are at least GAP apart."""
    events = sorted(events)
    handovers, worst = 0, None
    for a, b in zip(events, events[1:]):
        if a[1] == b[1]:
            continue
        handovers += 1
        gap = b[0] - a[0]
        worst = gap if worst is None else min(worst, gap)
        assert gap >= GAP - SLACK, f"replicas {a[1]} and {b[1]} acted {gap:.3f}s apart: {a} then {b}"
    return handovers, worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=1)
    args = ap.parse_args(argv)
    with TestDir("realk8s-leader") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s, d, range(args.first_seed, args.first_seed + args.seeds))
    print("test_realk8s_leader: OK")


def run(s, d, seeds):
    t_start = time.monotonic()
    s.start_ec2()
    s.setup_network()
    s.start_kube(grace_scale=0.05, fault_proxy=True)
    s.apply(OBJECTS)
    s.apply(json.dumps(deployment("w", 0, "1200m", memory="1Gi")))
    opts = ("--batch-idle", "700ms", "--lease-duration", f"{LEASE:g}s", "--consolidation-interval", "2s",
            "--consolidation-validation-delay", "2s")
    kc = {"coord-a": s.coordinator_kubeconfig}
    procs = {"coord-a": s.start_coordinator(*opts, "--identity", "coord-a")}
    replicas = {"coord-a": (s.fault_proxy, s.coordinator_http)}
    # the second replica through a fault proxy of its own (faults hit one replica or both), with
    # a token of its own (to tell its evictions apart in the audit log)
    pb = s.cluster_cp.start_fault_proxy(name="kubeproxy-b")
    s.procs["kubeproxy-b"] = pb.proc
    s.seen_pids.add(pb.proc.pid)
    kc["coord-b"] = s.cluster_cp.service_account_kubeconfig(
        "nodesmith", "nodesmith-coordinator", path=os.path.join(d, "coord-b.kubeconfig"), server=pb.server)
    s.coordinator_kubeconfig = kc["coord-b"]
    procs["coord-b"] = s.start_coordinator(*opts, "--identity", "coord-b", name="coordinator-b")
    replicas["coord-b"] = (pb, s.coordinator_http)
    # the agents reach the API server directly: the faults are the coordinators' (an agent's drain
    # through the fault proxy stalls, a separate finding)
    s.agent_kube_server = s.cluster_cp.server
    s.start_emulator(boot_delay=0.3, ready_delay=0.5)
    for seed in seeds:
        seeded_run(s, replicas, seed)
    near = time.time()
    actions = coordinator_actions(procs, near)
    writes = ec2_writes(s, actions)
    evictions = coordinator_evictions(s.cluster_cp, {r: token_id(k) for r, k in kc.items()})
    handovers, worst = check_overlap(actions + writes + evictions)
    by = {r: sum(1 for a in actions if a[1] == r) for r in procs}
    print(f"{len(list(seeds))} seeded run(s): {len(actions)} logged actions {by}, {len(writes)} EC2 writes, "
          f"{len(evictions)} coordinator evictions; {leadership_changes(procs)} times leading; "
          f"{handovers} hand-over(s) between replicas, closest {worst if worst is None else round(worst, 3)}s "
          f"apart (at least {GAP:g}s allowed); no overlap")
    assert len(writes) >= 2, writes
    assert all(by.values()), f"both replicas must have acted in {len(list(seeds))} runs: {by}"

    # a clean stop hands the Lease over: the leader releases it on SIGTERM (client-go's
    # ReleaseOnCancel) and the standby leads at its next look (retry period 0.4 s), not a whole
    # lease duration (3 s) after it last saw a renewal
    wait_for_quietly(lambda: sum(1 for r in replicas.values() if leading(r[1])) == 1, 30)
    old = next(n for n, r in replicas.items() if leading(r[1]))
    new = next(n for n in replicas if n != old)
    t0 = time.monotonic()
    procs[old].p.send_signal(signal.SIGTERM)
    took = None
    while time.monotonic() - t0 < 3 * LEASE:
        if leading(replicas[new][1]):
            took = time.monotonic() - t0
            break
        time.sleep(0.05)
    assert procs[old].p.wait(timeout=10) == 0, f"{old} did not exit 0 after SIGTERM"
    assert "Released Lease" in open(procs[old].log_path, errors="replace").read(), f"{old} did not release the Lease"
    assert took is not None and took < LEASE - 0.5, f"{new} led {took}s after {old} stopped (lease {LEASE:g}s)"
    print(f"{old} stopped cleanly and released the Lease; {new} led {took:.2f}s later (lease {LEASE:g}s)")
    print(f"test_realk8s_leader: {time.monotonic() - t_start:.0f}s in all")


if __name__ == "__main__":
    main()
