#!/usr/bin/env python3
"""Drift when EC2 changes under an unchanged EC2NodeClass (issue 17), as Karpenter's drift
documentation lists it, on the real control plane:

1. image: the class selects its image by `name` (no alias); a newer image of that name is
   registered; the node on the older one is replaced by one on the newer;
2. subnet: the node's subnet loses the tag the class's subnetSelectorTerms select; the node is
   replaced by one in a subnet that still matches;
3. security groups: a second group is tagged as the class's securityGroupSelectorTerms select;
   the node (with the first group only) is replaced by one carrying both.

Each phase checks the coordinator's drift reason, that the old instance is terminated and that
the pod runs again on the new node. The objects never change.

Run time here: about 4 minutes (control plane start-up included).
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import DISCOVERY_TAG, LocalStack  # noqa: E402
from workload import apply_objs, deployment, start_real  # noqa: E402

CLUSTER = "drift-ec2"
IMAGE = "drift-node-image"

OBJECTS = f"""apiVersion: nodesmith.io/v1
kind: EC2NodeClass
metadata: {{name: named}}
spec:
  amiFamily: AL2023
  amiSelectorTerms: [{{name: "{IMAGE}-*"}}]
  role: nodesmith-node
  subnetSelectorTerms: [{{tags: {{{DISCOVERY_TAG}: {CLUSTER}}}}}]
  securityGroupSelectorTerms: [{{tags: {{{DISCOVERY_TAG}: {CLUSTER}}}}}]
---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {{name: drift}}
spec:
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
    budgets: [{{nodes: "100%"}}]
  template:
    spec:
      nodeClassRef: {{group: nodesmith.io, kind: EC2NodeClass, name: named}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
"""


def running(s):
    return s.instances(cluster_only=True, states=["running", "pending"])


def pod_running(s):
    return [p for p in s.pods("default") if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def the_one(s):
    now = running(s)
    assert len(now) == 1, sorted(now)
    return next(iter(now.items()))


def replaced(s, coord, old_id, what, reason, check):
    """Waits until old_id is gone and one new instance runs that passes check; the coordinator
    logged reason for old_id's node. Returns the new (id, instance)."""
    t0 = time.monotonic()

    def done():
        now = running(s)
        return old_id not in now and len(now) == 1 and check(next(iter(now.values())))
    wait_for(f"{what}: the node replaced", done, 180, interval=1)
    took = time.monotonic() - t0
    wait_for(f"{what}: the pod Running again", lambda: pod_running(s), 90, interval=0.5)
    lines = [ln for ln in coord.output().splitlines() if reason in ln]
    assert lines, f"{what}: no '{reason}' in the coordinator's log"
    print(f"{what}: replaced in {took:.1f}s; {lines[0].split('] ', 1)[-1][:240]}")
    return the_one(s)


def main():
    with TestDir("karpenter-drift-ec2") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s)
    print("test_karpenter_drift_ec2: OK")


def run(s):
    coord = start_real(s, OBJECTS, coordinator=("--image-refresh", "2s", "--consolidation-interval", "2s"))
    ec2 = s.ec2
    base = s.image_id()
    v1 = ec2.copy_image(SourceImageId=base, SourceRegion=s.region, Name=f"{IMAGE}-v1")["ImageId"]
    apply_objs(s, deployment("web", 1, "500m", "1Gi"))
    wait_for("the pod Running", lambda: pod_running(s), 120, interval=0.5)
    old_id, old = the_one(s)
    print(f"launched {old_id} on {old['ImageId']} in {old['SubnetId']}")
    assert old["ImageId"] == v1, (old["ImageId"], v1)

    # 1. a newer image matching the class's name term
    time.sleep(1.1)  # a later creation date than v1's (seconds)
    v2 = ec2.copy_image(SourceImageId=base, SourceRegion=s.region, Name=f"{IMAGE}-v2")["ImageId"]
    old_id, old = replaced(s, coord, old_id, "image", f"image is now {v2}", lambda x: x["ImageId"] == v2)

    # 2. the node's subnet no longer carries the tag the class selects
    gone = old["SubnetId"]
    ec2.delete_tags(Resources=[gone], Tags=[{"Key": DISCOVERY_TAG}])
    old_id, old = replaced(s, coord, old_id, "subnet", f"its subnet {gone} no longer matches",
                           lambda x: x["SubnetId"] != gone)
    assert old["SubnetId"] in s.network["subnets"].values()

    # 3. a second security group tagged for the class
    first = s.network["security_group"]
    assert [g["GroupId"] for g in old["SecurityGroups"]] == [first], old["SecurityGroups"]
    second = ec2.create_security_group(GroupName=f"{CLUSTER}-extra", VpcId=s.network["vpc"],
                                       Description="a second group for the nodes")["GroupId"]
    ec2.create_tags(Resources=[second], Tags=[{"Key": DISCOVERY_TAG, "Value": CLUSTER}])
    old_id, old = replaced(s, coord, old_id, "security groups", "are not those EC2NodeClass named selects now",
                           lambda x: sorted(g["GroupId"] for g in x["SecurityGroups"]) == sorted([first, second]))
    assert old["ImageId"] == v2 and old["SubnetId"] != gone


if __name__ == "__main__":
    main()
