#!/usr/bin/env python3
"""The local stack with the real AWS cloud controller manager in place of the node emulator's
own Node deletion (LocalStack.start_ccm(), tests/pylib/ccm.py; docs/testing-aws.md): the real
control plane with an external cloud provider, the EC2 proxy and moto, the CCM, a coordinator
for the agents, and tests/fakes/nodeemu.py started with --cloud-controller-manager.

An instance launched in EC2 boots in the emulator (kubelet and agent); its Node registers
tainted uninitialized and the CCM initialises it from EC2 (taint gone, zone and instance-type
labels, providerID as the kubelet gave it). The instance terminated: the emulator shuts the
node down and leaves the Node alone (its event says so); the Node goes NotReady and the CCM
deletes it."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from ccm import binaries  # noqa: E402

UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"


def main():
    binaries()
    with TestDir("ccm-stack") as d:
        with LocalStack(d, cluster="ccm-stack", kube="real") as s:
            run(s)
            rcs = s.stop_all()
            assert rcs.get("nodeemu") == 0 and rcs.get("aws-cloud-controller-manager") in (0, -15), rcs
            assert not s.leftovers(), s.leftovers()
    print("test_ccm_stack: OK")
    return 0


def run(s):
    s.start_ec2()
    s.setup_network()
    s.start_kube(grace_scale=0.05, node_monitor_grace=8, external_cloud_provider=True)
    t0 = time.monotonic()
    s.start_ccm()
    print(f"CCM serving {time.monotonic() - t0:.1f}s after start")
    s.start_coordinator("--drain-on", "none")  # the agents' coordinator; it launches nothing here
    s.start_emulator(boot_delay=0.3)
    c = s.cluster_cp

    iid = s.run_instance("m5.xlarge", zone="us-east-1b")
    inst = s.instances()[iid]

    def node():
        for n in c.api("GET", "/api/v1/nodes")[1]["items"]:
            if n["spec"].get("providerID", "").endswith("/" + iid):
                return n
        return None

    def initialised():
        failed = [e for e in s.emu_events() if e["event"] == "boot-failed"]
        assert not failed, failed
        n = node()
        taints = {t["key"] for t in (n or {}).get("spec", {}).get("taints") or []}
        return n if n and UNINITIALIZED not in taints else None
    t0 = time.monotonic()
    n = wait_for("the emulated node initialised by the CCM", initialised, 90, 0.2)
    labels = n["metadata"]["labels"]
    assert labels.get("topology.kubernetes.io/zone") == "us-east-1b", labels
    assert labels.get("node.kubernetes.io/instance-type") == "m5.xlarge", labels
    assert n["spec"]["providerID"] == f"aws:///us-east-1b/{iid}", n["spec"]
    addrs = {(a["type"], a["address"]) for a in n["status"]["addresses"]}
    assert ("InternalIP", inst["PrivateIpAddress"]) in addrs, addrs
    name = n["metadata"]["name"]
    print(f"{iid}: Node {name} initialised by the CCM {time.monotonic() - t0:.1f}s after launch")

    since = max([e["seq"] for e in s.emu_events()] or [0])
    s.ec2.terminate_instances(InstanceIds=[iid])
    t0 = time.monotonic()
    wait_for("the emulator leaving the Node to the CCM", lambda: any(
        e["event"] == "node-left" for e in s.emu_events(since)), 60, 0.2)
    assert not any(e["event"] == "node-deleted" for e in s.emu_events(since)), s.emu_events(since)
    wait_for("the Node deleted by the CCM", lambda: c.api("GET", f"/api/v1/nodes/{name}")[0] == 404,
             90, 0.2)
    assert f"deleting node since it is no longer present in cloud provider: {name}" in s.ccm.log()
    print(f"terminated: Node {name} deleted by the CCM {time.monotonic() - t0:.1f}s after "
          "TerminateInstances; the emulator left it alone")


if __name__ == "__main__":
    sys.exit(main())
