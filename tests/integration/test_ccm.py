#!/usr/bin/env python3
"""The AWS cloud controller manager (k8s.io/cloud-provider-aws v1.37.1, built from its Go module
by `make aws-tools`) against moto's EC2 behind the project's proxy, with the real control plane
(tests/pylib/cluster.py) and emulated kubelets that register as EKS nodes do: NotReady with
node.cloudprovider.kubernetes.io/uninitialized. What the test shows, all done by the CCM:

  - a Node named after its instance's private DNS name and without a providerID (the CCM finds
    the instance by the private-dns-name filter) and a Node with a providerID: the uninitialized
    taint is removed; the providerID, topology.kubernetes.io/zone and region,
    node.kubernetes.io/instance-type, topology.k8s.aws/zone-id (DescribeAvailabilityZones) and
    the InternalIP / InternalDNS addresses come from EC2;
  - a p5.48xlarge gets topology.k8s.aws/network-node-layer-1..3 from DescribeInstanceTopology
    (which moto lacks; the proxy answers it, tests/fakes/README-aws.md): without an answer the
    CCM would leave that Node tainted;
  - the instance terminated in EC2 and its kubelet gone (NotReady once the node lifecycle
    controller sees no heartbeat): the CCM deletes the Node;
  - the instance stopped: the CCM taints the NotReady Node node.cloudprovider.kubernetes.io/shutdown.

The CCM (tests/pylib/ccm.py) runs as the ServiceAccount and RBAC of the module's own example manifests
(examples/existing-cluster/base in the module, applied as published), with a token per
controller as those manifests configure it; every AWS endpoint it could call (EC2, ELB, ELBv2,
KMS, IMDS) is overridden to 127.0.0.1: EC2, ELB and KMS to the proxy, IMDS to AWS's metadata
mock standing in for the control plane host's."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import ROOT, TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from cluster import Cluster  # noqa: E402
from ccm import REGION, CloudControllerManager, binaries  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "fakes"))
from kubelet import Kubelet  # noqa: E402

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"
SHUTDOWN = "node.cloudprovider.kubernetes.io/shutdown"


def main():
    binaries()
    with TestDir("ccm") as d:
        os.makedirs(os.path.join(d, "stack"))
        # the stack gives EC2 only (moto behind the proxy, its network); the control plane is a
        # bare Cluster: the CCM needs no nodesmith manifest, coordinator or node emulator
        with LocalStack(os.path.join(d, "stack")) as s, Cluster(
                os.path.join(d, "cluster"), node_monitor_grace=8, external_cloud_provider=True) as c:
            run(d, s, c)
    print("test_ccm: OK")
    return 0


def run(d, s, c):
    s.start_ec2()
    net = s.setup_network()
    ec2 = s.ec2

    def launch(itype, zone, owned=True):
        # EKS's node groups and Karpenter tag their instances kubernetes.io/cluster/NAME=owned
        tags = {f"kubernetes.io/cluster/{s.cluster}": "owned"} if owned else {}
        iid = s.run_instance(itype, zone=zone, tags=tags)
        return s.instances()[iid]
    plain = launch("m5.large", "us-east-1a")        # registered by private DNS name only
    named = launch("c6a.2xlarge", "us-east-1b")     # registered with its providerID
    gpu = launch("p5.48xlarge", "us-east-1c")       # has an EC2 instance topology
    stray = launch("m5.large", "us-east-1b", owned=False)  # by name, without the cluster tag
    zone_ids = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()[
        "AvailabilityZones"]}

    t0 = time.monotonic()
    ccm = CloudControllerManager(d, c, s.ec2_endpoint, net, s.cluster).start()
    print(f"CCM: serving after {time.monotonic() - t0:.1f}s")

    # kubelets register the three Nodes as EKS nodes do
    kubelets = {}
    for inst, with_provider_id in ((plain, False), (named, True), (gpu, True), (stray, False)):
        name = inst["PrivateDnsName"]
        node = {"name": name, "external_cloud_provider": True, "internalIP": inst["PrivateIpAddress"],
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"}}
        if with_provider_id:
            node["providerID"] = f"aws:///{inst['Placement']['AvailabilityZone']}/{inst['InstanceId']}"
        ident = c.node_identity(name)
        kubelets[inst["InstanceId"]] = Kubelet(c.server, c.ca, ident.cert, ident.key, node,
                                               boot_delay=60.0 if inst is stray else 1.0,
                                               grace_factor=0.1,
                                               status_interval=5.0, log=print).start()

    def get_node(name):
        st, n = c.api("GET", f"/api/v1/nodes/{name}")
        return n if st == 200 else None

    def taints(n):
        return {t["key"] for t in (n or {}).get("spec", {}).get("taints") or []}

    def initialised(inst):
        n = get_node(inst["PrivateDnsName"])
        return n if n and UNINITIALIZED not in taints(n) else None

    t0 = time.monotonic()
    for inst in (plain, named, gpu):
        n = wait_for(f"{inst['InstanceType']} initialised by the CCM", lambda i=inst: initialised(i),
                     60, 0.2)
        zone = inst["Placement"]["AvailabilityZone"]
        labels = n["metadata"]["labels"]
        want = {"topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": REGION,
                "node.kubernetes.io/instance-type": inst["InstanceType"],
                "topology.k8s.aws/zone-id": zone_ids[zone]}
        got = {k: labels.get(k) for k in want}
        assert got == want, (inst["InstanceType"], got, want)
        assert n["spec"]["providerID"] == f"aws:///{zone}/{inst['InstanceId']}", n["spec"]
        # the CCM removes the taint in one Node update and writes the addresses in a second
        # call after it (k8s.io/cloud-provider's syncNode, then updateNodeAddress): wait for them
        want_addrs = {("InternalIP", inst["PrivateIpAddress"]), ("InternalDNS", inst["PrivateDnsName"])}

        def addresses(i=inst):
            got = {(a["type"], a["address"]) for a in
                   (get_node(i["PrivateDnsName"]) or {}).get("status", {}).get("addresses") or []}
            return got if want_addrs <= got else None
        wait_for(f"{inst['InstanceType']}'s addresses from EC2", addresses, 20, 0.2)
        print(f"{inst['InstanceType']}: uninitialized taint removed, providerID "
              f"{n['spec']['providerID']}, {zone} ({zone_ids[zone]}), addresses from EC2")
    print(f"initialised: 3 Nodes in {time.monotonic() - t0:.1f}s")

    # an instance without kubernetes.io/cluster/NAME is invisible to the lookup by name: the
    # CCM takes the NotReady Node for one whose instance is gone and deletes it
    wait_for("the untagged instance's Node deleted", lambda: get_node(stray["PrivateDnsName"])
             is None, 60, 0.2)
    kubelets.pop(stray["InstanceId"]).stop()
    print(f"untagged: Node {stray['PrivateDnsName']} (instance {stray['InstanceId']} running, no "
          f"kubernetes.io/cluster/{s.cluster} tag) deleted by the CCM while NotReady")

    topo = {t["InstanceId"]: t["NetworkNodes"] for t in ec2.describe_instance_topology(
        InstanceIds=[gpu["InstanceId"]])["Instances"]}
    labels = get_node(gpu["PrivateDnsName"])["metadata"]["labels"]
    layers = [labels.get(f"topology.k8s.aws/network-node-layer-{i}") for i in (1, 2, 3)]
    assert layers == topo[gpu["InstanceId"]], (layers, topo)
    for inst in (plain, named):
        labels = get_node(inst["PrivateDnsName"])["metadata"]["labels"]
        assert not any(k.startswith("topology.k8s.aws/network-node-layer") for k in labels), labels
    print(f"p5.48xlarge: network-node-layer-1..3 = {layers}; none on m5 and c6a")

    # the instance terminated and the kubelet with it: the CCM deletes the Node; a stopped one
    # is tainted shutdown instead
    ec2.terminate_instances(InstanceIds=[plain["InstanceId"]])
    ec2.stop_instances(InstanceIds=[named["InstanceId"]])
    for iid in (plain["InstanceId"], named["InstanceId"]):
        kubelets[iid].die()
    t0 = time.monotonic()
    wait_for("the terminated instance's Node deleted", lambda: get_node(plain["PrivateDnsName"])
             is None, 90, 0.2)
    gone = time.monotonic() - t0
    n = wait_for("the stopped instance's Node tainted shutdown", lambda: (lambda n: n if SHUTDOWN
                 in taints(n) else None)(get_node(named["PrivateDnsName"])), 60, 0.2)
    ready = [x for x in n["status"]["conditions"] if x["type"] == "Ready"][0]
    assert ready["status"] != "True", ready
    assert get_node(gpu["PrivateDnsName"]) is not None  # its instance still runs
    log = ccm.log()
    assert "deleting node since it is no longer present in cloud provider: " + \
        plain["PrivateDnsName"] in log, log[-3000:]
    print(f"terminated: Node {plain['PrivateDnsName']} deleted {gone:.1f}s after the instance "
          f"and its kubelet went; stopped: {named['PrivateDnsName']} tainted {SHUTDOWN}")

    for k in kubelets.values():
        k.stop()
    assert ccm.proc.alive(), log[-3000:]
    rc = ccm.stop()
    assert rc[0] in (0, -15), f"CCM exit {rc}"


if __name__ == "__main__":
    sys.exit(main())
