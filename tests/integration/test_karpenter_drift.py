#!/usr/bin/env python3
"""Drift on the image behind an AMI alias (issue 17), as Karpenter's drift documentation has it:
the EC2NodeClass says al2023@latest and does not change; AWS publishes a new EKS AMI under the
SSM parameter the alias reads. The coordinator looks the alias up again (--image-refresh), its
next launches use the new image, and the node that boots the old one is drifted: replaced by a
node on the new image, its pod moved, the old instance terminated.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

CLUSTER = "karp-drift"

OBJECTS = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "nodesmith.io/v1", "kind": "EC2NodeClass", "metadata": {"name": "latest"},
     "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "drift-node-role",
              "subnetSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
              "securityGroupSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}]}},
    {"apiVersion": "nodesmith.io/v1", "kind": "NodePool", "metadata": {"name": "latest"},
     "spec": {"template": {"spec": {
         "nodeClassRef": {"group": "nodesmith.io", "kind": "EC2NodeClass", "name": "latest"},
         "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                          {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                          {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}]}},
              "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "0s",
                             "budgets": [{"nodes": "100%"}]}}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
              "template": {"metadata": {"labels": {"app": "web"}},
                           "spec": {"containers": [{"name": "web", "image": "registry.example/web",
                                                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}},
]}


def running(s):
    return {i: x for i, x in s.instances(cluster_only=True, states=["running", "pending"]).items()}


def main():
    with TestDir("karpenter-drift") as d:
        with LocalStack(d, cluster=CLUSTER) as s:
            run(s)
    print("test_karpenter_drift: OK")


def run(s):
    s.start_ec2()
    s.setup_network()
    s.client("iam").create_role(RoleName="drift-node-role", AssumeRolePolicyDocument="{}")
    s.start_kube(grace_scale=0.05)
    coord = s.start_coordinator("--batch-idle", "500ms", "--image-refresh", "2s", "--consolidation-interval", "2s")
    s.start_emulator(boot_delay=0.3)
    s.apply(json.dumps(OBJECTS))
    wait_for("the pod Running", lambda: [p for p in s.pods("default") if p["status"].get("phase") == "Running"], 90,
             interval=0.5)
    first = running(s)
    assert len(first) == 1, first
    old_id, old = next(iter(first.items()))
    node = next(iter(s.nodes().values()))
    print(f"launched {old_id} on {old['ImageId']}; node label nodesmith.io/image-id="
          f"{node['metadata']['labels'].get('nodesmith.io/image-id')}")
    assert node["metadata"]["labels"].get("nodesmith.io/image-id") == old["ImageId"]

    # a new EKS AMI release behind the same parameter; the class does not change
    param = next(n for n, v in s.proxy("GET", "ssm")["parameters"].items()
                 if n.endswith("/amazon-linux-2023/x86_64/standard/recommended/image_id") and v == old["ImageId"])
    new = s.ec2.copy_image(SourceImageId=old["ImageId"], SourceRegion=s.region, Name="al2023-new-release")["ImageId"]
    t0 = time.monotonic()
    s.proxy("POST", "ssm", {param: new})
    print(f"{param} -> {new}")

    def replaced():
        now = running(s)
        return old_id not in now and any(x["ImageId"] == new for x in now.values())
    wait_for("the node on the old image replaced by one on the new image", replaced, 150, interval=1)
    took = time.monotonic() - t0
    wait_for("the pod Running again", lambda: [p for p in s.pods("default") if p["status"].get("phase") == "Running"],
             60, interval=0.5)
    log = coord.output()
    line = next(l for l in log.splitlines() if "replaces" in l and new in l)
    print(line.split("] ", 1)[-1])
    drift = [l for l in log.splitlines() if "image is now" in l]
    assert drift, "no drift decision in the coordinator's log"
    print(drift[0].split("] ", 1)[-1][:300])
    now = running(s)
    print(f"replaced in {took:.1f}s: {sorted((i, x['ImageId']) for i, x in now.items())}")
    assert all(x["ImageId"] == new for x in now.values()), now


if __name__ == "__main__":
    main()
