#!/usr/bin/env python3
"""EC2NodeClass capacityReservationSelectorTerms on the local stack (issue 17), as Karpenter v1
documents them: a reservation the class selects is launched into first, up to the instances it
has left; what does not fit falls back to the NodePool's on-demand or spot offerings.

Real control plane, moto behind ec2proxy (which models On-Demand Capacity Reservations), the
coordinator, emulated kubelets with real agents. In EC2: a targeted reservation of 2 m5.large in
us-east-1b tagged team=ml (selected by a tags term), one of 5 m5.large in us-east-1c tagged
team=web (selected by nothing: left alone), a capacity block tagged team=ml (selected, refused:
not launched into), and an id term naming a reservation that does not exist (selects nothing).
Three pods that each need their own m5.large give 2 nodes in the reservation and a third outside
it. Checked: the Nodes' labels (karpenter.sh/capacity-type reserved, capacity-reservation-id and
-type, the NodePool's name), the instances' CapacityReservationId read back from EC2, the
reservations' counts, the launch templates' CapacityReservationSpecification, and the class's
status.capacityReservations with CapacityReservationsReady. `nodesmithctl simulate
--reservations` (EC2's answer as the AWS CLI prints it) plans the same two reserved nodes.

Then a reservation used up behind the coordinator's back: a new one (1 instance, team=ml) is
seen in the class's status, an instance outside the cluster takes it, a 4th pod comes; the
coordinator plans it into the reservation, CreateFleet answers ReservationCapacityExceeded, and
the pod runs on a node outside any reservation at once. Last, the class's terms change so that
the first reservation is no longer selected: its nodes drift, with that reason.

Run: python3 tests/integration/test_capacity_reservations.py   (about 2 minutes)
"""
import datetime as dt
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, TestDir, binary, kube_list, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

CLUSTER = "odcr"
FAILED = []
MISSING_ID = "cr-0123456789abcdef0"


def check(what, got, want):
    print(f"  {what:<58} {got!r}")
    if got != want:
        FAILED.append(f"{what}: {got!r}, expected {want!r}")


def running(s):
    return len([p for p in s.pods("default") if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")])


def fleets(s):
    with urllib.request.urlopen(f"{s.ec2_endpoint}/_fake/log?action=CreateFleet", timeout=10) as r:
        return json.load(r)["calls"]


def main():
    with TestDir("capacity-reservations") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s)
        if FAILED:  # inside TestDir: its logs are kept and their tails printed
            print("FAILED:\n  " + "\n  ".join(FAILED))
            sys.exit(1)
    print("test_capacity_reservations: OK")


def run(s):
    s.start_ec2()
    s.setup_network()
    ec2 = s.ec2

    def reserve(zone, count, team):
        return ec2.create_capacity_reservation(
            InstanceType="m5.large", InstancePlatform="Linux/UNIX", AvailabilityZone=zone, InstanceCount=count,
            InstanceMatchCriteria="targeted", TagSpecifications=[{"ResourceType": "capacity-reservation",
                                                                  "Tags": [{"Key": "team", "Value": team}]}],
        )["CapacityReservation"]["CapacityReservationId"]
    ml = reserve("us-east-1b", 2, "ml")
    web = reserve("us-east-1c", 5, "web")
    req = urllib.request.Request(f"{s.ec2_endpoint}/_fake/capacity-reservations", method="POST", data=json.dumps(
        {"instance_type": "m5.large", "zone": "us-east-1a", "count": 4, "reservation_type": "capacity-block",
         "tags": {"team": "ml"}, "end": time.time() + 86400}).encode())
    with urllib.request.urlopen(req, timeout=10) as r:
        block = json.load(r)["reservation"]["id"]
    print(f"reservations: {ml} (2, team=ml), {web} (5, team=web), capacity block {block} (team=ml)")

    cls = {"apiVersion": "nodesmith.io/v1", "kind": "EC2NodeClass", "metadata": {"name": "reserved"},
           "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "nodesmith-node",
                    "subnetSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
                    "securityGroupSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
                    "capacityReservationSelectorTerms": [{"tags": {"team": "ml"}}, {"id": MISSING_ID}]}}
    pool = {"apiVersion": "nodesmith.io/v1", "kind": "NodePool", "metadata": {"name": "gpu-train"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "nodesmith.io", "kind": "EC2NodeClass", "name": "reserved"},
                "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In",
                                  "values": ["reserved", "on-demand", "spot"]},
                                 {"key": "node.kubernetes.io/instance-type", "operator": "In",
                                  "values": ["m5.large"]}]}}}}
    # three pods that cannot share an m5.large (1500m of its 2 vCPU each)
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "train", "namespace": "default"},
           "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "train"}},
                    "template": {"metadata": {"labels": {"app": "train"}},
                                 "spec": {"containers": [{"name": "t", "image": "registry.example/train",
                                                          "resources": {"requests": {"cpu": "1500m",
                                                                                     "memory": "1Gi"}}}]}}}}
    s.start_kube(grace_scale=0.05)
    s.apply(kube_list(cls, pool))
    coord = s.start_coordinator("--batch-idle", "500ms", "--image-refresh", "2s", "--consolidation-interval", "2s")
    s.start_emulator(boot_delay=2.0)
    s.apply(kube_list(dep))

    wait_for("3 pods Running", lambda: running(s) == 3, 120, interval=0.5)
    nodes = {name: n["metadata"]["labels"] for name, n in s.nodes().items()}
    insts = s.instances(cluster_only=True)
    check("nodes", len(nodes), 3)
    check("instances", len(insts), 3)

    print("nodes:")
    reserved = [lb for lb in nodes.values() if lb.get("karpenter.k8s.aws/capacity-reservation-id")]
    other = [lb for lb in nodes.values() if not lb.get("karpenter.k8s.aws/capacity-reservation-id")]
    check("nodes in a reservation", len(reserved), 2)
    for lb in reserved:
        check("  karpenter.sh/capacity-type", lb.get("karpenter.sh/capacity-type"), "reserved")
        check("  karpenter.k8s.aws/capacity-reservation-id", lb.get("karpenter.k8s.aws/capacity-reservation-id"), ml)
        check("  karpenter.k8s.aws/capacity-reservation-type", lb.get("karpenter.k8s.aws/capacity-reservation-type"),
              "default")
        check("  topology.kubernetes.io/zone (the reservation's)", lb.get("topology.kubernetes.io/zone"), "us-east-1b")
        check("  nodesmith.io/nodepool", lb.get("nodesmith.io/nodepool"), "gpu-train")
    check("nodes outside any reservation", len(other), 1)
    for lb in other:
        check("  karpenter.sh/capacity-type on-demand or spot",
              lb.get("karpenter.sh/capacity-type") in ("on-demand", "spot"), True)
        check("  nodesmith.io/nodepool", lb.get("nodesmith.io/nodepool"), "gpu-train")

    print("EC2:")
    by_cr = sorted((i.get("CapacityReservationId") or "-") for i in insts.values())
    check("instances' CapacityReservationId", by_cr, sorted([ml, ml, "-"]))
    crs = {r["CapacityReservationId"]: r for r in ec2.describe_capacity_reservations(
        CapacityReservationIds=[ml, web, block])["CapacityReservations"]}
    check(f"{ml} available", crs[ml]["AvailableInstanceCount"], 0)
    check(f"{web} (not selected) available", crs[web]["AvailableInstanceCount"], 5)
    check(f"{block} (capacity block) available", crs[block]["AvailableInstanceCount"], 4)
    # the launch templates nodesmith made (moto does not tag instances with theirs)
    targets, prefs = set(), set()
    for lt in ec2.describe_launch_templates(Filters=[{"Name": "tag:nodesmith.io/cluster",
                                                      "Values": [CLUSTER]}])["LaunchTemplates"]:
        data = ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])[
            "LaunchTemplateVersions"][-1]["LaunchTemplateData"]
        spec = data.get("CapacityReservationSpecification") or {}
        targets.add(spec.get("CapacityReservationTarget", {}).get("CapacityReservationId"))
        prefs.add(spec.get("CapacityReservationPreference"))
    check("templates' CapacityReservationTarget", sorted(t for t in targets if t), [ml])
    check("the other template: CapacityReservationPreference none", "none" in prefs, True)
    into = [p["capacity_reservation_id"] for c in fleets(s) if c.get("status") == 200 for p in c.get("pools", [])
            if p.get("instances")]
    check("CreateFleet launches per reservation", sorted(x or "-" for x in into), sorted([ml, ml, "-"]))
    if FAILED:
        for c in fleets(s):
            print(f"  CreateFleet {json.dumps(c, sort_keys=True)[:600]}")

    print("EC2NodeClass status:")

    def status():
        return json.loads(s.kubectl("get", "ec2nodeclass", "reserved", "-o", "json")).get("status") or {}

    def ready():
        st = status()
        return st if any(c["type"] == "CapacityReservationsReady" and c["status"] == "True"
                         for c in st.get("conditions", [])) and st.get("capacityReservations") else None
    st = wait_for("status.capacityReservations", ready, 30, interval=0.5)
    listed = {r["id"]: r for r in st["capacityReservations"]}
    check("status.capacityReservations ids", sorted(listed), sorted([ml, block]))
    r = listed.get(ml, {})
    check("  instanceType, availabilityZone, instanceMatchCriteria, ownerID",
          (r.get("instanceType"), r.get("availabilityZone"), r.get("instanceMatchCriteria"), r.get("ownerID")),
          ("m5.large", "us-east-1b", "targeted", "123456789012"))
    check("  reservationType of the block", listed.get(block, {}).get("reservationType"), "capacity-block")
    msg = next(c.get("message", "") for c in st["conditions"] if c["type"] == "CapacityReservationsReady")
    check("  CapacityReservationsReady says the block is not launched into",
          f"{block} not launched into: a capacity block" in msg, True)

    print("simulate --reservations (EC2's answer as the AWS CLI prints it):")
    answer = ec2.describe_capacity_reservations(CapacityReservationIds=[ml, web, block])
    # what it was before the launches: the plan is for the same three pods
    for r in answer["CapacityReservations"]:
        if r["CapacityReservationId"] == ml:
            r["AvailableInstanceCount"] = 2
    d = s.workdir
    paths = {}
    for name, text in (("crs.json", json.dumps(answer, default=lambda v: v.isoformat() if isinstance(v, dt.datetime)
                                                else str(v))),
                       ("objs.json", kube_list(cls, pool)), ("pods.json", kube_list(dep))):
        paths[name] = os.path.join(d, name)
        with open(paths[name], "w") as f:
            f.write(text)
    out = subprocess.run([binary("nodesmithctl"), "simulate", "--catalog", os.path.join(ROOT, "data", "catalog-us-east-1.json"),
                          "--pods", paths["pods.json"], "--nodepools", paths["objs.json"], "--reservations",
                          paths["crs.json"], "-o", "json"], capture_output=True, text=True, timeout=60)
    check("simulate exit status", (out.returncode, out.stderr.strip()), (0, ""))
    plan = json.loads(out.stdout or "{}").get("launches", [])
    check("planned reserved nodes: reservation, zone, type",
          sorted((x.get("capacityReservationId"), x["zone"], x["instanceType"]) for x in plan
                 if x["capacityType"] == "reserved"), [(ml, "us-east-1b", "m5.large")] * 2)
    check("planned outside reservations", len([x for x in plan if not x.get("capacityReservationId")]), 1)

    print("a reservation used up behind the coordinator's back:")
    late = reserve("us-east-1c", 1, "ml")
    st = wait_for(f"{late} in the class's status", lambda: (lambda st: st if any(
        r["id"] == late and r.get("availableInstanceCount") == 1 for r in st.get("capacityReservations", []))
        else None)(status()), 120, interval=1)
    lt = ec2.create_launch_template(LaunchTemplateName="someone-else", LaunchTemplateData={
        "ImageId": s.image_id(), "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": late}}})["LaunchTemplate"]["LaunchTemplateId"]
    taken = ec2.create_fleet(Type="instant", TargetCapacitySpecification={
        "TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"}, LaunchTemplateConfigs=[{
            "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Latest"},
            "Overrides": [{"InstanceType": "m5.large", "SubnetId": s.network["subnets"]["us-east-1c"]}]}])
    check("another account's launch takes it", len(taken["Instances"]), 1)
    before = {c["seq"] for c in fleets(s)}
    dep["spec"]["replicas"] = 4
    s.apply(kube_list(dep))
    wait_for("4 pods Running", lambda: running(s) == 4, 120, interval=0.5)
    tried = [c for c in fleets(s) if c["seq"] not in before]
    exceeded = [e for c in tried for e in c.get("errors", []) if e.get("error_code") == "ReservationCapacityExceeded"]
    check("the coordinator tried the reservation: ReservationCapacityExceeded", len(exceeded) >= 1, True)
    lines = [ln for ln in coord.output().splitlines() if "ReservationCapacityExceeded" in ln]
    check("the coordinator logged it", bool(lines), True)
    insts = s.instances(cluster_only=True, states=["pending", "running"])
    check("the 4th instance outside any reservation",
          sorted((i.get("CapacityReservationId") or "-") for i in insts.values()), sorted([ml, ml, "-", "-"]))

    print("the class no longer selects the first reservation:")
    cls["spec"]["capacityReservationSelectorTerms"] = [{"tags": {"team": "ml"}, "instanceMatchCriteria": "open"}]
    s.apply(kube_list(cls))
    reason = f"its capacity reservation {ml} is no longer selected by EC2NodeClass reserved"
    wait_for("a reserved node drifted", lambda: [ln for ln in coord.output().splitlines() if reason in ln], 120,
             interval=1)
    print(f"  drift: {[ln for ln in coord.output().splitlines() if reason in ln][0].split('] ', 1)[-1][:200]}")


if __name__ == "__main__":
    main()
