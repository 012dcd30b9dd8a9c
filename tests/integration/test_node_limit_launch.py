#!/usr/bin/env python3
"""Karpenter v1 scheduling fields at launch (issue 17), on the local stack (moto behind the EC2
proxy): a NodePool with `limits: {nodes: 2}` and three pending pods that each need their own node
(hostname anti-affinity) and ask for `vpc.amazonaws.com/pod-eni` (security groups for pods).

Two instances are launched, of a type that offers branch interfaces, and no third however many
rounds pass; the coordinator says why the third pod waits (the pool's node limit).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

CLUSTER = "node-limit"
ROLE = "KarpenterNodeRole-node-limit"

CLASS = {"apiVersion": "nodesmith.io/v1", "kind": "EC2NodeClass", "metadata": {"name": "default"},
         "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": ROLE,
                  "subnetSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
                  "securityGroupSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}]}}
POOL = {"apiVersion": "nodesmith.io/v1", "kind": "NodePool", "metadata": {"name": "capped"},
        "spec": {"limits": {"nodes": 2},
                 "template": {"spec": {
                     "nodeClassRef": {"group": "nodesmith.io", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                                      {"key": "karpenter.k8s.aws/instance-category", "operator": "In",
                                       "values": ["c", "m", "t"]}]}}}}
SGP = {"cpu": "500m", "memory": "512Mi", "vpc.amazonaws.com/pod-eni": "1"}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ha", "namespace": "default"},
          "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "ha"}},
                   "template": {"metadata": {"labels": {"app": "ha"}}, "spec": {
                       "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                           {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "ha"}}}]}},
                       "containers": [{"name": "a", "image": "registry.example/a",
                                       "resources": {"requests": SGP, "limits": {"vpc.amazonaws.com/pod-eni": "1"}}}]}}}}


def docs(*objs):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def main():
    with TestDir("node-limit-launch") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            s.start_ec2()
            s.setup_network()
            s.client("iam").create_role(RoleName=ROLE, AssumeRolePolicyDocument="{}")
            s.start_kube(grace_scale=0.05)
            s.apply(docs(CLASS, POOL))
            coord = s.start_coordinator("--batch-idle", "300ms")
            s.apply(docs(DEPLOY))
            wait_for("two instances launched", lambda: len(s.instances(cluster_only=True)) >= 2, 120, interval=0.5)
            wait_for("the coordinator says the third pod waits on the node limit",
                     lambda: "has reached its limit of 2 nodes" in coord.output(), 60, interval=0.5)
            time.sleep(5)  # more rounds: still two
            insts = s.instances(cluster_only=True)
            types = sorted(i["InstanceType"] for i in insts.values())
            print(f"instances: {types}")
            assert len(insts) == 2, types
            # t (burstable) types have no branch interfaces: the pod-eni pods cannot go there
            assert not any(t.startswith("t") for t in types), types
            line = next(l for l in coord.output().splitlines() if "has reached its limit of 2 nodes" in l)
            print(line.split("] ", 1)[-1])
    print("test_node_limit_launch: OK")


if __name__ == "__main__":
    main()
