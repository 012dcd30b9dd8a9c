#!/usr/bin/env python3
"""Karpenter v1 conformance: Karpenter's published example manifests and the manifests of its
documentation (manifests/*.yaml, each naming its source) through `nodesmithctl convert`,
`nodesmithctl simulate` and an apply to the local stack, each accepted and honoured or refused with
its message, as its "# Expect:" line (and docs/migrating-from-karpenter.md) says.

The apply stage runs on the real control plane (tests/pylib/cluster.py), so the CRDs' schemas
and CEL rules judge every object first, as on a cluster.

Header lines of a manifest:
  # Expect: accepted | refused: MESSAGE     what nodesmith does with it
  # API server: refused: MESSAGE            the apply is refused by the API server (the CRDs'
                                            schema or CEL rules) with MESSAGE, before nodesmith
                                            sees the object (needs Expect: refused)
  # Pod: arm64 | ephemeral-storage 200Gi   the pending pod's shape (default 500m cpu, 1Gi)
  # Apply: plan only                        not launched (e.g. AMIs that exist in no account)
  # Check: ...                              what is read back after the launch (see CHECKS)

  conformance.py [--plan-only] [NAME-FILTER]
Prints one line per manifest and stage, and closes with "N passed, N failed".
"""
import argparse
import base64
import email
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "pylib"))
from nsharness import TestDir, binary  # noqa: E402

CLUSTER = "conformance"
AGENT_IMAGE = "111122223333.dkr.ecr.us-east-1.amazonaws.com/nodesmith-agent:test"  # Bottlerocket's host container
CATALOG = os.path.join(ROOT, "data", "catalog-us-east-1.json")
CANON = {"karpenter.k8s.aws/": "nodesmith.io/", "karpenter.sh/capacity-type": "nodesmith.io/capacity-type",
         "topology.ebs.csi.aws.com/zone": "topology.kubernetes.io/zone"}


class Case:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)[:-5]
        self.id = "c" + self.name.split("-")[0]
        text = open(path).read()
        head = {}
        for line in text.splitlines():
            m = re.match(r"#\s*(Source|Expect|Pod|Apply|Check|API server):\s*(.*)", line)
            if m:
                head.setdefault(m.group(1), []).append(m.group(2).strip())
        assert head.get("Source"), f"{self.name}: no '# Source:' line"
        expect = head["Expect"][0]
        self.accepted = expect == "accepted"
        self.message = None if self.accepted else expect.split(":", 1)[1].strip()
        api = (head.get("API server") or [""])[0]
        assert not api or (api.startswith("refused:") and not self.accepted), \
            f"{self.name}: '# API server:' must say 'refused: MESSAGE' on a refused manifest"
        self.api_message = api.split(":", 1)[1].strip() if api else None
        self.pod = (head.get("Pod") or [""])[0]
        self.apply_note = (head.get("Apply") or [""])[0]
        self.plan_only = self.apply_note.startswith("plan only")
        self.checks = head.get("Check") or []
        self.text = text.replace("${CLUSTER_NAME}", CLUSTER)
        self.converted = None


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


def catalog_types():
    with open(CATALOG) as f:
        return {t["name"]: t for t in json.load(f)["instance_types"]}


def type_labels(t, capacity_type, zone):
    """The well-known labels a node of type t carries (the catalog's, as nodesmith derives them)."""
    family, _, size = t["name"].partition(".")
    m = re.match(r"([a-z]+?)(\d+)", family)
    labels = {"kubernetes.io/arch": t["arch"], "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": t["name"], "nodesmith.io/capacity-type": capacity_type,
              "nodesmith.io/instance-family": family, "nodesmith.io/instance-size": size,
              "nodesmith.io/instance-cpu": str(t["vcpu"]), "nodesmith.io/instance-memory": str(t["memory_mib"]),
              "nodesmith.io/instance-hypervisor": t.get("hypervisor", ""),
              "nodesmith.io/instance-local-nvme": str(int(t.get("local_nvme_gib") or 0)),
              "nodesmith.io/instance-tenancy": "default",
              "nodesmith.io/instance-capability-flex": "true" if "-flex" in family else "false"}
    for key, field in (("cpu-sustained-clock-speed-mhz", "sustained_clock_mhz"), ("ebs-bandwidth", "ebs_bandwidth_mbps"),
                       ("accelerator-name", "accelerator_name"), ("accelerator-count", "accelerator_count"),
                       ("accelerator-manufacturer", "accelerator_manufacturer")):
        if t.get(field) is not None:
            labels["nodesmith.io/instance-" + key] = str(t[field])
    if m:
        labels["nodesmith.io/instance-category"], labels["nodesmith.io/instance-generation"] = m.group(1), m.group(2)
    if zone:
        labels["topology.kubernetes.io/zone"] = zone
    return labels


def canon(key):
    for a, b in CANON.items():
        if key.startswith(a):
            return b + key[len(a):]
    return key


def unmet(requirements, labels):
    """The requirements a node with these labels does not meet (Karpenter's operators)."""
    out = []
    for r in requirements:
        k, op, vals = canon(r["key"]), r["operator"], r.get("values") or []
        v = labels.get(k)
        if v is None and op not in ("DoesNotExist", "NotIn"):
            continue  # a label this check does not model
        ok = {"In": lambda: v in vals, "NotIn": lambda: v not in vals, "Exists": lambda: v is not None,
              "DoesNotExist": lambda: v is None,
              "Gt": lambda: int(v) > int(vals[0]), "Lt": lambda: int(v) < int(vals[0]),
              "Gte": lambda: int(v) >= int(vals[0]), "Lte": lambda: int(v) <= int(vals[0])}[op]()
        if not ok:
            out.append(r)
    return out


def pod_doc(case, name, pool=None):
    req = {"cpu": "500m", "memory": "1Gi"}
    sel = {}
    m = re.match(r"ephemeral-storage (\S+)", case.pod)
    if m:
        req["ephemeral-storage"] = m.group(1)
    if case.pod.startswith("arm64"):
        sel["kubernetes.io/arch"] = "arm64"
    if pool:
        sel["nodesmith.io/nodepool"] = pool
    spec = {"containers": [{"name": "app", "image": "registry.example/app", "resources": {"requests": req}}]}
    if sel:
        spec["nodeSelector"] = sel
    tol = [{"key": "example.com/special-taint", "operator": "Exists", "effect": "NoSchedule"}]
    spec["tolerations"] = tol
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


class Report:
    def __init__(self):
        self.passed = self.failed = 0

    def result(self, case, stage, ok, detail):
        print(f"{'PASS' if ok else 'FAIL'}  {case.name:<40} {stage:<9} {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed += 1


def objects(converted, kind):
    return [o for o in converted if o.get("kind") == kind]


def stage_convert(case, d, rep):
    src = os.path.join(d, case.name + ".yaml")
    with open(src, "w") as f:
        f.write(case.text)
    out = run([binary("nodesmithctl"), "convert", src, "-o", "json"])
    if out.returncode != 0:
        rep.result(case, "convert", False, out.stderr.strip()[-300:])
        return False
    conv = json.loads(out.stdout)
    case.converted = conv if isinstance(conv, list) else [conv]
    case.converted_path = os.path.join(d, case.name + ".nodesmith.json")
    with open(case.converted_path, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "List", "items": case.converted}, f)
    notes = [l[6:] for l in out.stderr.splitlines() if l.startswith("note: ")]
    apis = sorted({o["apiVersion"] for o in case.converted})
    rep.result(case, "convert", apis == ["nodesmith.io/v1"], f"{len(case.converted)} object(s) {apis}"
               + (f"; notes: {'; '.join(notes)}" if notes else ""))
    return True


def stage_simulate(case, d, types, rep):
    pods = os.path.join(d, case.name + ".pods.json")
    with open(pods, "w") as f:
        json.dump(pod_doc(case, "app"), f)
    out = run([binary("nodesmithctl"), "simulate", "--catalog", CATALOG, "--pods", pods,
               "--nodepools", case.converted_path, "-o", "json"])
    if not case.accepted:
        ok = out.returncode != 0 and case.message in out.stderr
        rep.result(case, "simulate", ok, "refused: " + out.stderr.strip().splitlines()[-1][:400]
                   if out.stderr.strip() else f"exit {out.returncode}, no message")
        return
    if out.returncode != 0:
        rep.result(case, "simulate", False, out.stderr.strip()[-400:])
        return
    plan = json.loads(out.stdout)
    pools = {p["metadata"]["name"]: p for p in objects(case.converted, "NodePool")}
    problems = []
    if not plan["launches"]:
        problems.append(f"nothing planned: {plan.get('unschedulable')}")
    for l in plan["launches"]:
        pool = pools.get(l["nodepool"])
        if not pool:
            problems.append(f"launch for unknown pool {l['nodepool']}")
            continue
        labels = type_labels(types[l["instanceType"]], l["capacityType"], l.get("zone"))
        bad = unmet(pool["spec"]["template"]["spec"].get("requirements") or [], labels)
        if bad:
            problems.append(f"{l['instanceType']} breaks {bad}")
        if any(c.startswith("plan pods") for c in case.checks):
            t = types[l["instanceType"]]
            want = min(20, 2 * t["vcpu"])
            if int(l["allocatable"]["pods"]) != want:
                problems.append(f"pods {l['allocatable']['pods']}, want min(20, 2 x {t['vcpu']}) = {want}")
    l0 = plan["launches"][0] if plan["launches"] else {}
    rep.result(case, "simulate", not problems,
               "; ".join(problems) if problems else
               f"{l0.get('nodepool')}: {l0.get('instanceType')} {l0.get('capacityType')} "
               f"(allocatable {l0.get('allocatable', {}).get('ephemeral-storage')} ephemeral, "
               f"{l0.get('allocatable', {}).get('pods')} pods)")


# ---- apply: every manifest on one local stack ---------------------------------------------------

def renamed(case):
    """The converted objects with the case's prefix on every NodePool and EC2NodeClass name."""
    out = []
    for o in json.loads(json.dumps(case.converted)):
        if o.get("kind") in ("NodePool", "EC2NodeClass"):
            o["metadata"]["name"] = f"{case.id}-{o['metadata']['name']}"
            o["metadata"].pop("annotations", None)
        if o.get("kind") == "NodePool":
            ref = o["spec"]["template"]["spec"].get("nodeClassRef") or {}
            if ref.get("name"):
                ref["name"] = f"{case.id}-{ref['name']}"
        out.append(o)
    return out


def check_launch(s, case, inst, types):
    problems, checked = [], []
    ec2 = s.ec2
    pool = next(p for p in renamed(case) if p["kind"] == "NodePool" and
                p["metadata"]["name"] == inst["Tags_"]["nodesmith.io/nodepool"])
    labels = type_labels(types[inst["InstanceType"]], inst.get("InstanceLifecycle") or "on-demand",
                         inst["Placement"]["AvailabilityZone"])
    bad = unmet(pool["spec"]["template"]["spec"].get("requirements") or [], labels)
    if bad:
        problems.append(f"{inst['InstanceType']} breaks {bad}")
    # the template the instance was launched from (EC2 tags the instance with its id and
    # version); else the newest of its pool's, by name (the name carries the pool's; moto
    # answers at most 15 templates and no NextToken)
    lt_id, lt_version = inst["Tags_"].get("aws:ec2launchtemplate:id"), inst["Tags_"].get("aws:ec2launchtemplate:version")
    if not lt_id:
        lts = [t for t in ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": [
               f"*-{pool['metadata']['name']}-*"]}])["LaunchTemplates"] if f"-{pool['metadata']['name']}-" in t["LaunchTemplateName"]]
        lt_id = lts[-1]["LaunchTemplateId"] if lts else None
    versions = ec2.describe_launch_template_versions(
        LaunchTemplateId=lt_id, **({"Versions": [lt_version]} if lt_version else {}))["LaunchTemplateVersions"] if lt_id else []
    data = versions[-1]["LaunchTemplateData"] if versions else None
    if case.checks and not data:
        problems.append(f"no launch template found for the pool (instance tags {sorted(inst['Tags_'])})")
    for c in case.checks:
        if c.startswith("user data parts") and data:
            msg = email.message_from_string(base64.b64decode(data["UserData"]).decode())
            types_ = [p.get_content_type() for p in msg.walk() if not p.is_multipart()]
            if types_[:2] != ["application/node.eks.aws", "text/x-shellscript"] or len(types_) != 4:
                problems.append(f"user data parts {types_}")
            else:
                checked.append(f"user data parts {types_}")
        if c.startswith("user data localStorage") and data:
            msg = email.message_from_string(base64.b64decode(data["UserData"]).decode())
            nc = next(json.loads(p.get_payload()) for p in msg.walk() if p.get_content_type() == "application/node.eks.aws")
            got = nc["spec"].get("instance", {}).get("localStorage", {}).get("strategy")
            (checked if got == c.split()[-1] else problems).append(f"NodeConfig localStorage strategy {got}")
        if c.startswith("user data bottlerocket") and data:
            problems_, seen = bottlerocket_user_data(base64.b64decode(data["UserData"]).decode(), c.split()[3:])
            problems += problems_
            checked += seen
        if c.startswith("volumes") and data:
            want = {m.group(1): int(m.group(2)) for m in re.finditer(r"(/dev/\w+) (\d+)", c)}
            got = {b["DeviceName"]: b["Ebs"].get("VolumeSize") for b in data.get("BlockDeviceMappings", [])}
            if got != want:
                problems.append(f"volumes {got}, want {want}")
            else:
                checked.append(f"volumes {got}")
    return problems, checked


def bottlerocket_user_data(text, want):
    """The TOML settings nodesmith wrote for a Bottlerocket node: its own (cluster, agent host
    container) and, for want ([key value]...), the user's settings kept where Karpenter keeps them."""
    import tomllib
    problems, checked = [], []
    try:
        k8s_ = tomllib.loads(text)["settings"]["kubernetes"]
        hc = tomllib.loads(text)["settings"]["host-containers"]["nodesmith"]
    except (tomllib.TOMLDecodeError, KeyError) as e:
        return [f"Bottlerocket user data: {e!r}"], []
    conf = base64.b64decode(hc["user-data"]).decode()
    if k8s_.get("cluster-name") != CLUSTER or not k8s_.get("api-server") or not k8s_.get("cluster-certificate"):
        problems.append(f"settings.kubernetes {k8s_.get('cluster-name')} {k8s_.get('api-server')}")
    elif hc.get("source") != AGENT_IMAGE or hc.get("superpowered") is not True or "coordinator = " not in conf \
            or "BEGIN CERTIFICATE" not in conf:
        problems.append(f"host container {hc.get('source')} superpowered={hc.get('superpowered')}")
    else:
        checked.append(f"TOML: cluster {CLUSTER}, agent host container {AGENT_IMAGE}")
    flat = dict(k8s_, **k8s_.get("eviction-hard", {}))
    for key, value in zip(want[::2], want[1::2]):
        got = str(flat.get(key))
        (checked if got == value else problems).append(f"{key} = {got}")
    return problems, checked


def stage_apply(cases, d, types, rep):
    from stack import LocalStack
    with LocalStack(d, cluster=CLUSTER) as s:
        s.start_ec2()
        net = s.setup_network()
        tag = [{"Key": "karpenter.sh/discovery", "Value": CLUSTER}]
        s.ec2.create_tags(Resources=list(net["subnets"].values()) + [net["security_group"]], Tags=tag)
        s.client("iam").create_role(RoleName=f"KarpenterNodeRole-{CLUSTER}", AssumeRolePolicyDocument="{}")
        s.start_kube(grace_scale=0.05)
        applied = {}
        for c in cases:
            objs = renamed(c)
            r = subprocess.run(["kubectl", "--kubeconfig", s.kubeconfig, "apply", "-f", "-"], capture_output=True,
                               text=True, timeout=60,
                               input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
            applied[c.name] = r
        coord = s.start_coordinator("--batch-idle", "500ms", "--agent-image", AGENT_IMAGE)
        want = {}
        for c in cases:
            pools = [o["metadata"]["name"] for o in renamed(c) if o["kind"] == "NodePool"]
            if not pools or c.plan_only and c.accepted:
                continue
            s.apply(json.dumps(pod_doc(c, c.id + "-app", pools[-1] if c.pod.startswith("arm64") else pools[0])))
            want[c.name] = pools
        deadline = time.monotonic() + 240  # every pool's launch, one after the other, on a loaded machine
        done = {}
        while time.monotonic() < deadline and len(done) < len(want):
            insts = s.instances(cluster_only=True)
            log = coord.output()
            for c in cases:
                if c.name in done or c.name not in want:
                    continue
                if c.accepted:
                    mine = [i for i in insts.values() if any(t["Key"] == "nodesmith.io/nodepool" and t["Value"] in
                                                             want[c.name] for t in i.get("Tags", []))]
                    if mine:
                        done[c.name] = mine[0]
                elif c.message in log or applied[c.name].returncode != 0:
                    done[c.name] = True
            time.sleep(1)
        log = coord.output()
        for c in cases:
            r = applied[c.name]
            if c.plan_only and c.accepted:
                rep.result(c, "apply", r.returncode == 0, f"applied, not launched: {c.apply_note}"
                           if r.returncode == 0 else r.stderr.strip()[-300:])
                continue
            if not c.accepted:
                line = next((l for l in log.splitlines() if c.message in l), None)
                if r.returncode != 0:
                    # the API server refused it: with the message the manifest names
                    want = c.api_message or c.message
                    rep.result(c, "apply", want in r.stderr, ("refused by the API server: " if want in r.stderr
                               else f"refused by the API server without \"{want}\": ") + r.stderr.strip()[-300:])
                elif c.api_message:
                    rep.result(c, "apply", False, f"the API server accepted it; expected \"{c.api_message}\"")
                else:
                    rep.result(c, "apply", line is not None, ("refused by the coordinator: " +
                               line.split("] ", 1)[-1][:400]) if line else "no refusal in the coordinator's log")
                continue
            inst = done.get(c.name)
            if r.returncode != 0 or not inst:
                pools = want.get(c.name) or []
                said = [l.split("] ", 1)[-1][:300] for l in log.splitlines()
                        if any(p in l for p in pools) or "Launch step failed" in l][-5:]
                rep.result(c, "apply", False, r.stderr.strip()[-300:] if r.returncode != 0 else
                           "nothing launched; the coordinator said: " + " | ".join(said))
                continue
            inst["Tags_"] = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
            problems, checked = check_launch(s, c, inst, types)
            rep.result(c, "apply", not problems, "; ".join(problems) if problems else
                       f"launched {inst['InstanceType']} in {inst['Placement']['AvailabilityZone']} for "
                       f"{inst['Tags_']['nodesmith.io/nodepool']}" + "".join(f"; {x}" for x in checked))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plan-only", action="store_true", help="convert and simulate; no apply")
    ap.add_argument("filter", nargs="?", default="")
    args = ap.parse_args()
    cases = [Case(p) for p in sorted(glob.glob(os.path.join(HERE, "manifests", "*.yaml"))) if args.filter in p]
    types = catalog_types()
    rep = Report()
    with TestDir("conformance") as d:
        for c in cases:
            if stage_convert(c, d, rep):
                stage_simulate(c, d, types, rep)
        if not args.plan_only:
            stage_apply([c for c in cases if c.converted], d, types, rep)
    print(f"\n{rep.passed} passed, {rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
