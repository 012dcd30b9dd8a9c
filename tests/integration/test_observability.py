#!/usr/bin/env python3
"""Dashboards, alerting rules and /metrics (docs/observability.md):

  1. `promtool check rules` and `promtool test rules` on packaging/prometheus: every alert has
     unit tests that fire it and keep it quiet.
  2. packaging/grafana/*.json are what packaging/grafana/generate.py writes.
  3. On the local stack, after a scale-up (pods Running on launched nodes) with one pod nothing
     can hold: the coordinator's /metrics passes `promtool check metrics`; every metric a
     dashboard or a rule queries is on it; the fleet series add up to the Nodes that joined,
     with a cost; the registration, round and solver histograms counted the launch; the oldest
     pending pod has an age; the NodePool's disruption budget is there.

promtool comes from Debian's prometheus package (bootstrap/deps-debian.sh); without it the
checks that need it are skipped, except with CI=true, where they fail.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import BUILD, ROOT, Checklist, TestDir, http_get, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import Queue, apply_objs, deployment, node_class_yaml, nodepool_yaml, running_of  # noqa: E402

CLUSTER = "obs-test"
RULES = os.path.join(ROOT, "packaging", "prometheus", "nodesmith-rules.yaml")
RULE_TESTS = os.path.join(ROOT, "packaging", "prometheus", "tests", "nodesmith-rules.test.yaml")
GRAFANA = os.path.join(ROOT, "packaging", "grafana")

NODEPOOLS = node_class_yaml(CLUSTER) + nodepool_yaml(
    "general", spec='  disruption:\n    consolidateAfter: 30s\n    budgets: [{nodes: "3", reasons: [Empty]}, {nodes: "20%"}]\n')

check = Checklist()
HISTOGRAMS = ("nodesmith_node_registration_duration_seconds", "nodesmith_solver_duration_seconds",
              "nodesmith_provisioning_round_duration_seconds")


def promtool():
    p = shutil.which("promtool")
    if not p:
        msg = "promtool not installed (Debian: apt-get install prometheus; bootstrap/deps-debian.sh does)"
        if os.environ.get("CI") == "true":
            check(msg, False)
        else:
            print("skip  " + msg)
    return p


def run(*argv, stdin=None):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, input=stdin)


def queried_metrics(expr):
    """Metric names in a PromQL expression (histogram series named by their family)."""
    names = set(re.findall(r"\b(nodesmith_[a-z0-9_]+)", expr))
    return {re.sub(r"_bucket$", "", n) for n in names}


def families(text):
    """Metric families a scrape declares (# TYPE lines)."""
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def sum_samples(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        key, _, val = line.rpartition(" ")
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += float(val)
    return total


def main():
    pt = promtool()

    # ---- 1. rules ----
    if pt:
        p = run(pt, "check", "rules", RULES)
        check("promtool check rules", p.returncode == 0, p.stdout + p.stderr)
        p = run(pt, "test", "rules", RULE_TESTS)
        check("promtool test rules", p.returncode == 0, p.stdout + p.stderr)
    rules = yaml.safe_load(open(RULES))
    alerts = [r["alert"] for g in rules["groups"] for r in g["rules"]]
    tested = set(re.findall(r"alertname: (\S+)", open(RULE_TESTS).read()))
    check(f"every alert ({len(alerts)}) has unit tests", set(alerts) <= tested, set(alerts) - tested)
    rule_metrics = set().union(*(queried_metrics(r["expr"]) for g in rules["groups"] for r in g["rules"]))

    # ---- 2. dashboards are what the generator writes ----
    sys.path.insert(0, GRAFANA)
    import generate  # noqa: E402
    want = generate.render()
    have = {os.path.basename(f): open(f).read() for f in glob.glob(os.path.join(GRAFANA, "*.json"))}
    check("packaging/grafana/*.json are generate.py's output", want == have,
          f"run python3 packaging/grafana/generate.py; differing: {sorted(set(want.items()) ^ set(have.items()))[:5]}")
    dash_metrics = {}
    for name, text in have.items():
        d = json.loads(text)
        exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
        check(f"{name}: {len(d['panels'])} panels, each with a query", d["panels"] and all(
            p["targets"] for p in d["panels"]))
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                exprs.append(v["definition"])
        for e in exprs:
            for m in queried_metrics(e):
                dash_metrics.setdefault(m, set()).add(name)

    # ---- 3. a real scrape after a scale-up ----
    with TestDir("observability") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            s.start_ec2()
            s.setup_network()
            s.start_kube(grace_scale=0.05)
            s.apply(NODEPOOLS)
            # with an interruption queue: its series are on /metrics only then
            s.start_coordinator("--batch-idle", "700ms", "--interruption-queue", Queue(s).url,
                                "--sqs-endpoint", s.ec2_endpoint)
            s.start_emulator(boot_delay=0.3)
            apply_objs(s, deployment("web", 6, "1", "2Gi"), deployment("huge", 1, "900", "1Ti"))
            wait_for("6 web pods Running", lambda: len(running_of(s, "web")) == 6, 120, interval=0.5)
            nodes = s.nodes()
            text = wait_for("the fleet series to count every Node",
                            lambda: (lambda t: t if sum_samples(t, "nodesmith_fleet_nodes") == len(nodes) else None)(
                                http_get(s.coordinator_http + "/metrics")[1]), 30, interval=0.5)
            time.sleep(1.5)  # the pending pod ages a little

            def counted():  # the round ends after its last launch is answered: allow it a moment
                t = http_get(s.coordinator_http + "/metrics")[1]
                return t if all((metric(t, h + "_count") or 0) >= 1 for h in HISTOGRAMS) else None
            try:
                text = wait_for("the histograms to count the scale-up", counted, 30, interval=0.5)
            except AssertionError:
                text = http_get(s.coordinator_http + "/metrics")[1]  # the checks below say which
    os.makedirs(os.path.join(BUILD, "test-logs"), exist_ok=True)
    with open(os.path.join(BUILD, "test-logs", "observability-metrics.txt"), "w") as f:
        f.write(text)  # the scrape, for a look when a check fails
    if pt:
        p = run(pt, "check", "metrics", stdin=text)
        check("promtool check metrics: the coordinator's /metrics is clean", p.returncode == 0 and not p.stdout.strip()
              and not p.stderr.strip(), p.stdout + p.stderr)
    have_families = families(text)
    missing = {m: sorted(w) for m, w in dash_metrics.items() if m not in have_families}
    check(f"every metric the dashboards query ({len(dash_metrics)}) is on /metrics", not missing, missing)
    missing = sorted(m for m in rule_metrics if m not in have_families)
    check(f"every metric the rules query ({len(rule_metrics)}) is on /metrics", not missing, missing)

    n = len(nodes)
    check(f"nodesmith_fleet_nodes adds up to the {n} Node(s) launched", n >= 1 and sum_samples(text, "nodesmith_fleet_nodes",
                                                                                             nodepool="general", capacity_type="on-demand") == n)
    cost = sum_samples(text, "nodesmith_fleet_cost_dollars_per_hour", nodepool="general")
    check(f"the fleet has a cost from the catalog (${cost:.4f}/h)", cost > 0)
    cpu = sum_samples(text, "nodesmith_fleet_allocatable", resource="cpu")
    req = sum_samples(text, "nodesmith_fleet_requested", resource="cpu")
    check(f"allocatable cpu {cpu:.2f} holds the 6 cores requested ({req:.2f})", cpu >= 6 and req >= 6, (cpu, req))
    for h in HISTOGRAMS:
        c = metric(text, h + "_count") or 0
        check(f"{h} counted the scale-up ({c:.0f})", c >= 1)
    age = metric(text, "nodesmith_pending_pod_oldest_seconds") or 0
    check(f"the unplaceable pod's age is nodesmith_pending_pod_oldest_seconds ({age:.1f}s)", age >= 1)
    b = metric(text, "nodesmith_nodepool_disruption_budget", {"nodepool": "general", "reason": "Empty"})
    check(f"the Empty budget of NodePool general is min(3, 20% of {n}) = {min(3, -(-n * 20 // 100))} ({b})",
          b == min(3, -(-n * 20 // 100)))

    return check.exit_code("test_observability")


if __name__ == "__main__":
    sys.exit(main())
