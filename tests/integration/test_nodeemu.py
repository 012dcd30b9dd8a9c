#!/usr/bin/env python3
"""The node emulator (tests/fakes/nodeemu.py) in the local stack (tests/pylib/stack.py).

ec2proxy + moto, the real control plane (tests/pylib/cluster.py), a coordinator (TLS, bootstrap
token) and the emulator (one emulated kubelet and one real agent per instance) on 127.0.0.1.
Three instances are launched with botocore RunInstances: a spot one from a launch
template whose user data is the real AL2023 bootstrap (NodeConfig labels and taint, cloud-config
agent.conf/ca.crt/token), an on-demand one without user data (the emulator's own agent settings,
labels from the nodesmith.io/node-labels tag), and one without this cluster's tag (plus one of
another cluster). Shown: the two register NotReady with node.kubernetes.io/not-ready, as their
own node identity (system:node:NAME), and become Ready Nodes with the right labels, taints (the
node lifecycle controller removes not-ready), providerID, capacity and allocatable, and their agents report to the coordinator with the identity read
from their fake IMDS, allocatable equal to the Node's; the others are ignored; rebalance and
maintenance reach the coordinator; a spot interruption reaches it as KIND_SPOT_INTERRUPTION and,
after --spot-grace, the instance is terminated in EC2, its agent stopped, its Node with a
deletionTimestamp (a finalizer of the test's holds it: the coordinator removes its own once the
instance is gone), Unknown once the node lifecycle controller misses its Lease, and gone once the
finalizer is removed; terminating
the on-demand instance with botocore stops its agent and removes its Node; the timeline holds
every step in order; nothing is left running at the end.

Run: python3 tests/integration/test_nodeemu.py   (BUILD=build/emu to use that build; ~60 s)"""
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import BUILD, MiB, TestDir, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402

HOLD = "nodesmith.test/hold"   # the test's finalizer on the spot Node (the coordinator's is its own)
SPOT_GRACE = 3.0
BOOT_DELAY = 0.3
READY_DELAY = 0.5
MONITOR_GRACE = 6   # node lifecycle controller: seconds without a Lease renewal to Unknown
CATALOG = os.path.join(os.path.dirname(__file__), "..", "..", "data", "catalog-us-east-1.json")
T0 = time.monotonic()


def step(msg):
    print(f"{time.monotonic() - T0:6.1f}s  {msg}", flush=True)


def ready(node):
    return next((c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"), None)


def cpu_m(q):
    return int(q[:-1]) if q.endswith("m") else int(q) * 1000


def ki(q):
    """Bytes of a binary quantity (the API server writes the largest exact suffix: 8Gi, 7712Mi)."""
    for suffix, mult in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40)):
        if q.endswith(suffix):
            return int(q[:-2]) * mult
    return int(q)


def expect_http(fn, status):
    try:
        fn()
    except AssertionError as e:
        assert f"HTTP {status}" in str(e), e
        return
    raise AssertionError(f"expected HTTP {status}")


def main():
    with TestDir("nodeemu") as d:
        s = LocalStack(d, build=BUILD, cluster="emu-test")
        ok = False
        try:
            run(s)
            ok = True
        finally:
            rcs = s.stop_all()
            left = s.leftovers()
            if left:
                s.kill_leftovers()
            if ok:
                assert rcs.get("nodeemu") == 0, rcs
                assert not left, f"still running after stop_all: {left}"
                step(f"stopped: exit codes {rcs}; no process left")
    print("test_nodeemu: OK")
    return 0


def run(s):
    with open(CATALOG) as f:
        cat = {t["name"]: t for t in json.load(f)["instance_types"]}

    s.start_ec2()
    net = s.setup_network()
    s.start_kube(grace_scale=0.05, node_monitor_grace=MONITOR_GRACE)
    # This test is about the emulator, so the coordinator only watches: notices drain nothing
    # (a drained node would be terminated by the coordinator before EC2 reclaims it), and no
    # disruption pass runs (the test's NodePools exist only as tags: a pass would drain their
    # nodes as "NodePool deleted").
    s.start_coordinator("--drain-on", "none", "--consolidation-interval", "0")
    s.start_emulator(boot_delay=BOOT_DELAY, spot_grace=SPOT_GRACE, ready_delay=READY_DELAY,
                     agent_args=["--imds-poll-interval", "250ms"])
    step(f"stack up: EC2 {s.ec2_endpoint}, API {s.kube_server}, coordinator {s.coordinator_url}, "
         f"emulator {s.emulator_url}")
    subnets = s.ec2.describe_subnets(Filters=[{"Name": "tag:nodesmith.io/discovery",
                                               "Values": [s.cluster]}])["Subnets"]
    assert sorted(x["AvailabilityZone"] for x in subnets) == ["us-east-1a", "us-east-1b",
                                                              "us-east-1c"], subnets
    sgs = s.ec2.describe_security_groups(Filters=[{"Name": "tag:nodesmith.io/discovery",
                                                   "Values": [s.cluster]}])["SecurityGroups"]
    assert [g["GroupId"] for g in sgs] == [net["security_group"]], sgs

    # ---- launch ---------------------------------------------------------------------------
    ud = s.user_data(nodepool="spot-pool", labels=["team=web"], taints=["dedicated=web:NoSchedule"])
    lt = s.launch_template("emu-spot", user_data=ud)
    spot = s.run_instance("m6i.large", zone="us-east-1b", spot=True, nodepool="spot-pool",
                          launch_template=lt)
    od = s.run_instance("c6g.xlarge", zone="us-east-1c", nodepool="general",
                        tags={"nodesmith.io/node-labels": json.dumps({"tier": "batch"})})
    stray = s.run_instance("m5.large", zone="us-east-1a", cluster=False, nodepool="general")
    other = s.run_instance("m5.large", zone="us-east-1a", tags={"nodesmith.io/cluster": "other"})
    polls0 = s.emu_state()["polls"]
    insts = s.instances()
    assert insts[spot].get("InstanceLifecycle") == "spot", insts[spot]
    assert insts[od].get("InstanceLifecycle") in (None, "on-demand"), insts[od]
    step(f"launched spot {spot} (launch template {lt}), on-demand {od}, untagged {stray}, "
         f"other cluster {other}")

    # ---- Nodes ----------------------------------------------------------------------------
    s.wait_nodes(2, timeout=30)
    # three whole polls after every launch (and a boot delay): all there is to see has been seen
    st = wait_for("three more EC2 polls", lambda: (lambda x: x if x["polls"] >= polls0 + 4 else None)(
        s.emu_state()), 10)
    names = {insts[spot]["PrivateDnsName"]: spot, insts[od]["PrivateDnsName"]: od}
    want_taints = {spot: [("dedicated", "web", "NoSchedule")], od: []}

    def taints_of(n):
        return sorted((x["key"], x.get("value"), x["effect"]) for x in n["spec"].get("taints") or [])
    # each kubelet registered its Node NotReady with the not-ready taint, as itself
    for name, iid in names.items():
        reg = [e["detail"] for e in s.emu_events() if e["instance"] == iid and e["event"] == "kubelet"
               and "registered Node" in e["detail"]]
        assert reg and "NotReady" in reg[0] and "node.kubernetes.io/not-ready:NoSchedule" in reg[0], reg
    # once Ready, the real node lifecycle controller takes the not-ready taint away
    nodes = wait_for("the not-ready taints removed", lambda: (lambda ns: ns if set(ns) == set(names) and all(
        taints_of(ns[n]) == want_taints[i] for n, i in names.items()) else None)(s.nodes()), 30, 0.3)
    table = s.kubectl("get", "nodes")
    for name in names:
        row = [line for line in table.splitlines() if line.startswith(name)]
        assert row and row[0].split()[1] == "Ready", table
    known = {i["instanceId"] for i in st["instances"]}
    assert known == {spot, od}, known
    for name, iid in names.items():
        n, i = nodes[name], insts[iid]
        t = cat[i["InstanceType"]]
        zone = i["Placement"]["AvailabilityZone"]
        ctype = "spot" if iid == spot else "on-demand"
        lab = n["metadata"]["labels"]
        want = {"node.kubernetes.io/instance-type": i["InstanceType"],
                "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-east-1",
                "kubernetes.io/arch": "arm64" if t["arch"] == "arm64" else "amd64",
                "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
                "nodesmith.io/capacity-type": ctype, "karpenter.sh/capacity-type": ctype,
                "nodesmith.io/nodepool": "spot-pool" if iid == spot else "general"}
        want.update({"team": "web"} if iid == spot else {"tier": "batch"})
        assert {k: lab.get(k) for k in want} == want, (name, lab)
        assert n["spec"]["providerID"] == f"aws:///{zone}/{iid}", n["spec"]
        assert taints_of(n) == want_taints[iid], n["spec"]
        cap, alloc = n["status"]["capacity"], n["status"]["allocatable"]
        pods = t["enis"] * (t["ipv4_per_eni"] - 1) + 2
        assert cap["cpu"] == str(t["vcpu"]) and ki(cap["memory"]) == t["memory_mib"] * MiB, cap
        assert cap["pods"] == alloc["pods"] == str(pods), (cap, alloc)
        reserved = {2: 70, 4: 80}[t["vcpu"]]  # EKS tiers: 6 % + 1 % (+ 0.5 % + 0.5 %)
        assert cpu_m(alloc["cpu"]) == t["vcpu"] * 1000 - reserved, alloc
        assert ki(alloc["memory"]) == (t["memory_mib"] - (11 * pods + 255) - 100) * MiB, alloc
    assert insts[stray]["PrivateDnsName"] not in nodes and insts[other]["PrivateDnsName"] not in nodes
    step(f"Nodes Ready with labels, taints, providerID, capacity and allocatable: {sorted(nodes)}; "
         f"untagged and other-cluster instances ignored")

    # the user data reached the node: IMDS serves it, the agent runs with its agent.conf
    spot_state = next(i for i in st["instances"] if i["instanceId"] == spot)
    od_state = next(i for i in st["instances"] if i["instanceId"] == od)
    assert spot_state["userData"] == "instance" and od_state["userData"] is None, st
    c = http.client.HTTPConnection("127.0.0.1", spot_state["imdsPort"], timeout=5)
    c.request("PUT", "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    tok = c.getresponse().read().decode()
    c.request("GET", "/latest/user-data", headers={"X-aws-ec2-metadata-token": tok})
    assert c.getresponse().read().decode() == ud
    c.close()
    with open(os.path.join(spot_state["dir"], "root", "etc", "nodesmith", "agent.conf")) as f:
        conf = f.read()
    assert f"coordinator = {s.coordinator_url}" in conf and "tls-server-name = localhost" in conf, conf
    assert f"tls-ca = {os.path.join(spot_state['dir'], 'root', 'etc', 'nodesmith', 'ca.crt')}" in conf

    # ---- the coordinator sees both agents, identity from IMDS --------------------------------
    cn = wait_for("both agents at the coordinator", lambda: (lambda x: x if set(x) >= {spot, od}
                                                             else None)(s.coordinator_nodes()), 20)
    assert set(cn) == {spot, od}, sorted(cn)
    for name, iid in names.items():
        x, i, n = cn[iid], insts[iid], nodes[name]
        assert x["name"] == name, x
        assert x["instanceType"] == i["InstanceType"], x
        assert x["zone"] == i["Placement"]["AvailabilityZone"], x
        assert x["capacityType"].lower().replace("_", "-").endswith(
            "spot" if iid == spot else "on-demand"), x
        assert x["nodepool"] == ("spot-pool" if iid == spot else "general"), x
        assert x["arch"] == n["metadata"]["labels"]["kubernetes.io/arch"], x
        a = n["status"]["allocatable"]
        assert (x["allocatable"]["cpuMillis"], x["allocatable"]["memoryBytes"], x["allocatable"]["pods"]) \
            == (cpu_m(a["cpu"]), ki(a["memory"]), int(a["pods"])), (x["allocatable"], a)
    step("both agents registered with the coordinator: identity from IMDS, allocatable = the Node's")

    # ---- rebalance and maintenance are forwarded ---------------------------------------------
    # (the emulator notices "agent-connected" in the agent's log a moment after the coordinator
    # has the report: wait for it, so the timeline's order below is the order of events)
    wait_for("agent-connected in the timeline", lambda: sum(
        1 for e in s.emu_events() if e["event"] == "agent-connected") >= 2, 10)
    s.emu("POST", f"instances/{spot}/rebalance", {})
    s.emu("POST", f"instances/{insts[od]['PrivateDnsName']}/maintenance",
          {"code": "system-reboot", "not_before_in": 3600})

    def notices(iid, kind):
        return [n for n in s.coordinator_nodes().get(iid, {}).get("notices", []) if n["kind"] == kind]
    wait_for("rebalance at the coordinator", lambda: notices(spot, "KIND_REBALANCE"), 10)
    wait_for("maintenance at the coordinator", lambda: notices(od, "KIND_MAINTENANCE"), 10)
    expect_http(lambda: s.spot_interrupt(od), 409)          # on-demand: no spot notices
    expect_http(lambda: s.spot_interrupt("i-00000000000000000"), 404)
    expect_http(lambda: s.emu("POST", f"instances/{spot}/spot", {"action": "explode"}), 400)
    step("rebalance and maintenance reached the coordinator; bad requests refused")

    # ---- spot interruption -------------------------------------------------------------------
    spot_node = insts[spot]["PrivateDnsName"]
    s.kubectl("patch", "node", spot_node, "--type=strategic", "-p", json.dumps({"metadata": {"finalizers": [HOLD]}}))
    spot_agent_pid = spot_state["agentPid"]
    t_notice = time.time()
    s.spot_interrupt(spot)
    expect_http(lambda: s.spot_interrupt(spot), 409)       # one notice per instance
    sn = wait_for("spot notice at the coordinator", lambda: notices(spot, "KIND_SPOT_INTERRUPTION"), 5)
    assert sn[0]["action"] == "terminate", sn
    deadline = sn[0]["deadlineUnixMs"] / 1000
    # the notice's time is whole seconds, rounded up: grace <= deadline - notice < grace + 1
    assert SPOT_GRACE - 0.2 <= deadline - t_notice <= SPOT_GRACE + 1.2, (deadline - t_notice, sn)
    step(f"spot notice at the coordinator, deadline in {deadline - t_notice:.1f}s")

    def ec2_state(iid):
        return s.instances()[iid]["State"]["Name"]
    wait_for("spot instance terminated in EC2", lambda: ec2_state(spot) in ("shutting-down",
                                                                           "terminated"),
             SPOT_GRACE + 10, 0.1)
    t_term = time.time()
    assert t_term >= deadline - 0.05, f"terminated {t_term - deadline:.2f}s after the notice's time"

    def agent_stopped(iid):
        i = next((x for x in s.emu_state()["instances"] if x["instanceId"] == iid), None)
        return i if i and not i["agentAlive"] and i["agentExit"] is not None and \
            not i["imdsAlive"] and i["phase"] == "gone" else None
    gone = wait_for("spot agent and IMDS stopped", lambda: agent_stopped(spot), 15)
    assert gone["agentPid"] == spot_agent_pid and gone["agentExit"] == 0, gone
    try:
        os.kill(spot_agent_pid, 0)
        raise AssertionError(f"agent {spot_agent_pid} still exists")
    except ProcessLookupError:
        pass

    def held():
        n = s.nodes().get(spot_node)
        return n if n and n["metadata"].get("deletionTimestamp") else None
    wait_for("spot Node deleting (finalizer holds it)", held, 10)
    # its kubelet is gone with the instance: the node lifecycle controller marks it Unknown
    # once the Lease is MONITOR_GRACE seconds old
    n = wait_for("spot Node Unknown", lambda: (lambda x: x if x and ready(x) == "Unknown" else None)(
        held()), MONITOR_GRACE + 20, 0.3)
    assert HOLD in n["metadata"]["finalizers"], n["metadata"]
    row = s.kubectl("get", "node", spot_node).splitlines()[1].split()
    assert row[0] == spot_node and row[1] != "Ready", row
    step(f"spot instance terminated {t_term - t_notice:.1f}s after the notice (grace {SPOT_GRACE}s); "
         f"agent stopped; Node NotReady (Unknown) with a deletionTimestamp")
    fins = n["metadata"]["finalizers"]
    s.kubectl("patch", "node", spot_node, "--type=json", "-p", json.dumps([
        {"op": "test", "path": f"/metadata/finalizers/{fins.index(HOLD)}", "value": HOLD},
        {"op": "remove", "path": f"/metadata/finalizers/{fins.index(HOLD)}"}]))
    wait_for("spot Node gone once its finalizer is removed", lambda: spot_node not in s.nodes(), 10)

    # ---- on-demand terminated with botocore --------------------------------------------------
    od_node = insts[od]["PrivateDnsName"]
    s.terminate(od)
    wait_for("on-demand agent stopped", lambda: agent_stopped(od), 15)
    wait_for("on-demand Node removed", lambda: od_node not in s.nodes(), 10)
    assert s.nodes() == {}
    step("on-demand instance terminated via botocore: agent stopped, Node removed")

    # ---- the timeline -----------------------------------------------------------------------
    ev = s.emu_events()
    seqs = [e["seq"] for e in ev]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert not [e for e in ev if e["instance"] in (stray, other)], "ignored instances in the timeline"
    for iid, order in ((spot, ["launched", "imds-started", "booted", "registered", "agent-started",
                               "agent-connected", "rebalance", "interrupted", "reclaimed",
                               "agent-stopped", "node-deleted"]),
                       (od, ["launched", "imds-started", "booted", "registered", "agent-started",
                             "agent-connected", "maintenance", "agent-stopped", "node-deleted"])):
        names_seen = [e["event"] for e in ev if e["instance"] == iid]
        pos = [names_seen.index(x) if x in names_seen else -1 for x in order]
        assert -1 not in pos and pos == sorted(pos), (iid, names_seen)
        assert "terminated" in names_seen or "shutting-down" in names_seen, names_seen
        assert names_seen.index("agent-stopped") > max(
            names_seen.index(x) for x in ("terminated", "shutting-down") if x in names_seen)
    recl = next(e for e in ev if e["instance"] == spot and e["event"] == "reclaimed")
    intr = next(e for e in ev if e["instance"] == spot and e["event"] == "interrupted")
    assert SPOT_GRACE - 0.3 <= recl["unix"] - intr["unix"] <= SPOT_GRACE + 1.5, (intr, recl)
    print("\n".join(f"   {e['elapsed']:7.2f}s {e['event']:<18} {e['instance']:<20} {e['detail'][:70]}"
                    for e in ev))
    step(f"timeline: {len(ev)} events, in order")


if __name__ == "__main__":
    sys.exit(main())
