#!/usr/bin/env python3
"""A launch carries the whole EC2NodeClass (issue 17), read back from EC2 (moto) and IAM.

A NodePool and an EC2NodeClass written as a Karpenter v1 user writes them, setting every field
that shapes a launch: role (an instance profile is made for it), blockDeviceMappings (two
volumes, the first marked rootVolume), metadataOptions, tags, detailedMonitoring,
associatePublicIPAddress, userData (a shell script), kubelet settings (maxPods, clusterDNS,
kubeReserved, systemReserved, evictionHard with a percentage, evictionSoft with its grace
periods, image GC thresholds, cpuCFSQuota). One pending pod makes the coordinator launch; then
the instance, its volumes, tags, metadata options, monitoring, network interface, instance
profile (and its role and tags), launch template and decoded user data are read back and each
is checked against the class.

Then `nodesmithctl simulate` for the same objects and the node the agent reports agree on
allocatable (cpu, memory, pods, ephemeral-storage).
"""
import base64
import email
import json
import math
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, TestDir, binary, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

CLUSTER = "karp-launch"
CATALOG = os.path.join(ROOT, "data", "catalog-us-east-1.json")
ROLE = "KarpenterNodeRole-karp-launch"
SCRIPT = "#!/bin/bash\necho from-the-class > /etc/class-marker\n"

CLASS = {
    "apiVersion": "nodesmith.io/v1", "kind": "EC2NodeClass", "metadata": {"name": "everything"},
    "spec": {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": ROLE,
        "subnetSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"nodesmith.io/discovery": CLUSTER}}],
        "tags": {"team": "payments", "cost-center": "cc-1234"},
        "detailedMonitoring": True,
        "associatePublicIPAddress": False,
        "ipPrefixCount": 2,
        "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                            "httpPutResponseHopLimit": 2, "httpTokens": "required"},
        "blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "rootVolume": True,
             "ebs": {"volumeSize": "30Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}},
            {"deviceName": "/dev/xvdb",
             "ebs": {"volumeSize": "120Gi", "volumeType": "io2", "iops": 4000, "deleteOnTermination": True}},
        ],
        "userData": SCRIPT,
        "kubelet": {
            "maxPods": 42, "clusterDNS": ["10.100.0.10"],
            "kubeReserved": {"cpu": "250m", "memory": "1Gi", "ephemeral-storage": "2Gi"},
            "systemReserved": {"cpu": "100m", "memory": "256Mi"},
            "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
            "evictionSoft": {"memory.available": "500Mi"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "evictionMaxPodGracePeriod": 60,
            "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80,
            "cpuCFSQuota": True,
        },
    },
}

POOL = {
    "apiVersion": "nodesmith.io/v1", "kind": "NodePool", "metadata": {"name": "everything"},
    "spec": {"template": {"metadata": {"annotations": {"example.com/owner": "my-team"}}, "spec": {
        "nodeClassRef": {"group": "nodesmith.io", "kind": "EC2NodeClass", "name": "everything"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                         {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}]}}},
}

POD = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "web", "image": "registry.example/web",
                                                      "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]}}}}

GI = 1 << 30
FAILED = []


def docs(*objs):
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def check(what, got, want):
    print(f"  {what:<44} {got!r}")
    if got != want:
        FAILED.append(f"{what}: {got!r}, the class says {want!r}")


def quantity(s):
    s = str(s)
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 1000, "M": 10**6, "G": 10**9, "m": 0.001}
    for u, f in sorted(units.items(), key=lambda x: -len(x[0])):
        if s.endswith(u):
            return float(s[:-len(u)]) * f
    return float(s)


def main():
    with TestDir("karpenter-launch") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s, d)
    print("test_karpenter_launch: OK")


def run(s, d):
    s.start_ec2()
    net = s.setup_network()
    iam = s.client("iam")
    iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                 "Action": "sts:AssumeRole"}]}))
    # selector terms ORed: a subnet by id or by a tag nothing has; the group by its name
    CLASS["spec"]["subnetSelectorTerms"] = [{"id": net["subnets"]["us-east-1b"]}, {"tags": {"no-such-tag": "*"}}]
    CLASS["spec"]["securityGroupSelectorTerms"] = [{"name": f"{CLUSTER}-nodes"}, {"id": "sg-0000000000"}]
    s.start_kube(grace_scale=0.05)
    s.apply(docs(CLASS, POOL))
    s.start_coordinator("--batch-idle", "500ms")
    s.start_emulator(boot_delay=3.0)  # EC2 (the proxy) finishes the launch first

    # what simulate plans for the same objects, before anything launches
    objs = os.path.join(d, "objects.json")
    with open(objs, "w") as f:
        f.write(docs(CLASS, POOL))
    pods = os.path.join(d, "pods.json")
    with open(pods, "w") as f:
        f.write(docs(POD))
    out = subprocess.run([binary("nodesmithctl"), "simulate", "--catalog", CATALOG, "--pods", pods,
                          "--nodepools", objs, "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert len(plan["launches"]) == 1, plan
    planned = plan["launches"][0]

    s.apply(docs(POD))
    wait_for("the pod Running", lambda: [p for p in s.pods("default") if p["status"].get("phase") == "Running"], 90,
             interval=0.5)
    insts = s.instances(cluster_only=True)
    assert len(insts) == 1, insts
    inst = next(iter(insts.values()))
    iid = inst["InstanceId"]
    ec2 = s.ec2
    print(f"launched {iid} ({inst['InstanceType']})")

    print("instance:")
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    check("tag team", tags.get("team"), "payments")
    check("tag cost-center", tags.get("cost-center"), "cc-1234")
    check("tag nodesmith.io/nodepool", tags.get("nodesmith.io/nodepool"), "everything")
    # as Karpenter tags its instances; the AWS cloud controller manager finds an instance by name
    # only among those carrying kubernetes.io/cluster/NAME (test_ccm.py)
    check("tag kubernetes.io/cluster/…", tags.get(f"kubernetes.io/cluster/{CLUSTER}"), "owned")
    check("tag eks:eks-cluster-name", tags.get("eks:eks-cluster-name"), CLUSTER)
    md = inst["MetadataOptions"]
    check("metadata HttpPutResponseHopLimit", md["HttpPutResponseHopLimit"], 2)
    check("metadata HttpTokens", md["HttpTokens"], "required")
    check("metadata HttpEndpoint", md["HttpEndpoint"], "enabled")
    check("subnet (by the id term)", inst["SubnetId"], net["subnets"]["us-east-1b"])
    check("security group", sorted(g["GroupId"] for g in inst["SecurityGroups"]), [net["security_group"]])
    check("public address", inst.get("PublicIpAddress"), None)

    print("instance profile:")
    arn = inst["IamInstanceProfile"]["Arn"]
    name = arn.rsplit("/", 1)[1]
    prof = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"]
    check("role in the profile", [r["RoleName"] for r in prof["Roles"]], [ROLE])
    check("profile path", prof["Path"], f"/nodesmith/us-east-1/{CLUSTER}/")
    ptags = {t["Key"]: t["Value"] for t in prof.get("Tags", [])}
    check("profile tag nodesmith.io/ec2nodeclass", ptags.get("nodesmith.io/ec2nodeclass"), "everything")
    check("profile tag kubernetes.io/cluster/…", ptags.get(f"kubernetes.io/cluster/{CLUSTER}"), "owned")
    check("profile tag team", ptags.get("team"), "payments")

    print("launch template:")
    lt_id = tags.get("aws:ec2launchtemplate:id")
    lts = ec2.describe_launch_templates(Filters=[{"Name": "tag:nodesmith.io/cluster", "Values": [CLUSTER]}])
    lt = lts["LaunchTemplates"][-1]
    if lt_id:
        lt = next(x for x in lts["LaunchTemplates"] if x["LaunchTemplateId"] == lt_id)
    lttags = {t["Key"]: t["Value"] for t in lt.get("Tags", [])}
    check("template tag team", lttags.get("team"), "payments")
    data = ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])[
        "LaunchTemplateVersions"][-1]["LaunchTemplateData"]
    bdm = {b["DeviceName"]: b["Ebs"] for b in data["BlockDeviceMappings"]}
    check("template /dev/xvda size, type, encrypted",
          (bdm["/dev/xvda"]["VolumeSize"], bdm["/dev/xvda"]["VolumeType"], bdm["/dev/xvda"]["Encrypted"]),
          (30, "gp3", True))
    check("template /dev/xvdb size, type, iops",
          (bdm["/dev/xvdb"]["VolumeSize"], bdm["/dev/xvdb"]["VolumeType"], bdm["/dev/xvdb"]["Iops"]), (120, "io2", 4000))
    # moto keeps no monitoring state for a fleet's instances (it lacks MonitorInstances): the
    # template is what EC2 applies
    check("template monitoring (detailedMonitoring)", data.get("Monitoring", {}).get("Enabled"), True)
    nic = data["NetworkInterfaces"][0]
    check("template interface public address", nic.get("AssociatePublicIpAddress"), False)
    check("template interface groups", nic.get("Groups"), [net["security_group"]])
    check("template interface Ipv4PrefixCount (ipPrefixCount)", nic.get("Ipv4PrefixCount"), 2)
    specs = {t["ResourceType"]: {x["Key"]: x["Value"] for x in t["Tags"]} for t in data.get("TagSpecifications", [])}
    check("template tags on network interfaces", specs.get("network-interface", {}).get("team"), "payments")

    print("volumes:")
    vols = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [iid]}])["Volumes"]
    by_dev = {v["Attachments"][0]["Device"]: v for v in vols}
    # moto's images keep their root at /dev/sda1 (EKS's at /dev/xvda): the template's /dev/xvda
    # is that root disk
    root = inst["RootDeviceName"]
    check("volumes attached", sorted(by_dev), sorted([root, "/dev/xvdb"]))
    check("root volume size, type", (by_dev[root]["Size"], by_dev[root]["VolumeType"]), (30, "gp3"))
    check("/dev/xvdb size, type", (by_dev["/dev/xvdb"]["Size"], by_dev["/dev/xvdb"]["VolumeType"]), (120, "io2"))
    for dev, v in sorted(by_dev.items()):
        vt = {t["Key"]: t["Value"] for t in v.get("Tags", [])}
        check(f"{dev} tags team, nodesmith.io/cluster", (vt.get("team"), vt.get("nodesmith.io/cluster")),
              ("payments", CLUSTER))
    eni = inst["NetworkInterfaces"][0]["NetworkInterfaceId"]
    et = {t["Key"]: t["Value"] for t in ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])[
        "NetworkInterfaces"][0].get("TagSet", [])}
    check("network interface tag team", et.get("team"), "payments")

    print("user data:")
    raw = ec2.describe_launch_template_versions(LaunchTemplateId=lt["LaunchTemplateId"])[
        "LaunchTemplateVersions"][-1]["LaunchTemplateData"]["UserData"]
    msg = email.message_from_string(base64.b64decode(raw).decode())
    parts = [(p.get_content_type(), p.get_payload()) for p in msg.walk() if not p.is_multipart()]
    check("part types, the class's first", [t for t, _ in parts],
          ["text/x-shellscript", "application/node.eks.aws", "text/cloud-config"])
    check("the class's script, unchanged", parts[0][1].strip(), SCRIPT.strip())
    nodeconfig = json.loads(parts[1][1])
    kc = nodeconfig["spec"]["kubelet"]["config"]
    for k, v in CLASS["spec"]["kubelet"].items():
        check(f"NodeConfig kubelet.config.{k}", kc.get(k), v)

    # ---- the node joins: what the agent reports against the plan -----------------------------
    wait_for("the NodePool's template annotations on the node", lambda: next(iter(s.nodes().values()))[
        "metadata"].get("annotations", {}).get("example.com/owner") == "my-team", 30, interval=0.5)
    node = next(iter(s.nodes().values()))
    print(f"node annotation example.com/owner={node['metadata']['annotations']['example.com/owner']}")
    alloc = node["status"]["allocatable"]
    print("allocatable: plan (nodesmithctl simulate) vs the node as its agent reports it:")
    want = planned["allocatable"]
    # The plan keeps Karpenter's VM overhead (7.5 % of the nominal memory, in whole MiB) until
    # a node of the type has reported; the node reports what the hypervisor left. That share,
    # less the 5 % memory.available threshold taken on it, is the one difference allowed.
    with open(CATALOG) as f:
        nominal_mib = next(t["memory_mib"] for t in json.load(f)["instance_types"] if t["name"] == planned["instanceType"])
    overhead = math.ceil(nominal_mib * 0.075) * (1 << 20) * (1 - 0.05)
    for r in ("cpu", "memory", "pods", "ephemeral-storage"):
        a, b = quantity(want[r]), quantity(alloc[r])
        expect = a + overhead if r == "memory" else a
        print(f"  {r:<20} plan {want[r]:<14} node {alloc[r]:<14}" +
              (f" (plan + VM overhead less eviction: {int(expect) >> 10}Ki)" if r == "memory" else ""))
        assert abs(expect - b) <= (1 << 20 if r == "memory" else 1), (r, want[r], alloc[r])
    print(f"simulate and the launched node agree (instance type {planned['instanceType']})")
    assert not FAILED, "\n".join(["launch differs from the class:"] + FAILED)


if __name__ == "__main__":
    main()
