#!/usr/bin/env python3
"""On the real control plane of the tests (tests/pylib/cluster.py), with nodesmith installed by
`helm install` of packaging/helm/nodesmith: a coordinator with the chart's configuration
(its ConfigMap) and the chart's ServiceAccount (a token of it, so exactly the chart's RBAC)
leads and provisions; what it writes is seen through kubectl:

  1. Before any launch: NodePool `general` has ValidationSucceeded=True and NodeClassReady and
     Ready Unknown (its class is not looked up in EC2 yet); NodePool `orphan` names a missing
     EC2NodeClass: NodeClassReady=False NodeClassNotFound, Ready=False; status.resources counts
     0 nodes.
  2. A scale-up (the first CreateFleet without capacity): a failed NodeClaim with EC2's error;
     the launched instance's NodeClaim in kubectl before its Node exists (type, zone, capacity
     type, the pods it is for), then naming its Node, Ready. The EC2NodeClass is Ready with the subnets, security groups and AMI it
     resolved and the instance profile; `general` is Ready and status.resources has the node's
     capacity; `kubectl get nodepools` shows the Nodes and Ready columns filled, and
     `kubectl get ec2nodeclasses` Ready True.
  3. Someone overwrites the status: the leader writes it back (level-triggered); an unchanged
     status is not written again (lastTransitionTime kept, no write counted).
  4. Events: kubectl describe pod shows Nominated on a placed pod and FailedScheduling with the
     solver's reason in words on a pod nothing can hold (once, not every round); a spot
     interruption notice and the drain it calls for show on kubectl describe node; once the
     instance is gone, its NodeClaim is deleted.
  5. A second coordinator, standing by, writes nothing; the leader keeps writing.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import Checklist, TestDir, http_get, metric, wait_for  # noqa: E402
from stack import LocalStack  # noqa: E402
from workload import Queue, apply_objs, deployment, node_class_yaml, nodepool_yaml, running_of  # noqa: E402

CLUSTER = "status-test"
POOLS = node_class_yaml(CLUSTER) + nodepool_yaml("general") + nodepool_yaml(
    "orphan", node_class="missing", requirements=("{key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}",))

check = Checklist()


def get(s, kind, name):
    return json.loads(s.kubectl("get", kind, name, "-o", "json"))


def cond(obj, type_):
    for c in (obj.get("status") or {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return {}


def conds(obj):
    return {c["type"]: (c["status"], c.get("reason")) for c in (obj.get("status") or {}).get("conditions", [])}


def claims(s):
    return json.loads(s.kubectl("get", "nodeclaims", "-o", "json"))["items"]


def writes(url):
    return metric(http_get(url + "/metrics")[1], "nodesmith_status_writes_total", {"result": "written"}) or 0


def main():
    with TestDir("status") as d:
        with LocalStack(d, cluster=CLUSTER, kube="real") as s:
            run(s, d)
    return check.exit_code("test_status")


def run(s, d):
    s.start_ec2()
    s.setup_network()
    s.start_kube(grace_scale=0.05, helm=["--set", f"config.cluster-name={CLUSTER}"])
    out = s.kubectl("get", "crd,clusterrole,deployment,service,secret,configmap,pdb", "-A", "-l",
                    "app.kubernetes.io/part-of=nodesmith", "-o", "name")
    print("helm installed:", " ".join(sorted(out.split())))
    check("helm install: the CRDs, the coordinator's Deployment, Service, PDB, config and token Secret",
          all(x in out for x in ("customresourcedefinition.apiextensions.k8s.io/nodeclaims.nodesmith.io",
                                 "deployment.apps/nodesmith-coordinator", "service/nodesmith-coordinator",
                                 "poddisruptionbudget.policy/nodesmith-coordinator",
                                 "configmap/nodesmith-coordinator-config", "secret/nodesmith-bootstrap-token")), out)
    conf = os.path.join(d, "chart-coordinator.conf")
    with open(conf, "w") as f:
        f.write(s.kubectl("-n", "nodesmith", "get", "configmap", "nodesmith-coordinator-config",
                          "-o", r"jsonpath={.data.coordinator\.conf}"))
    s.apply(POOLS)
    queue = Queue(s)
    s.start_coordinator("--config", conf, "--batch-idle", "700ms", "--identity", "leader", "--lease-duration", "3s",
                        "--interruption-queue", queue.url,
                        "--sqs-endpoint", s.ec2_endpoint)
    leader = s.coordinator_http
    s.start_emulator(boot_delay=4)  # a window in which launched instances are not Nodes yet
    wait_for("the coordinator to lead", lambda: metric(http_get(leader + "/metrics")[1], "nodesmith_leader") == 1, 30, 0.3)

    # ---- 1. before any launch ----
    wait_for("NodePool general to get conditions", lambda: cond(get(s, "nodepool", "general"), "Ready"), 30, 0.3)
    g, o = get(s, "nodepool", "general"), get(s, "nodepool", "orphan")
    print("general:", conds(g), "\norphan:", conds(o))
    check("general: ValidationSucceeded True", conds(g).get("ValidationSucceeded", ("",))[0] == "True", conds(g))
    check("general: Ready not True before its class is resolved", conds(g).get("Ready", ("",))[0] in ("Unknown", "False"), conds(g))
    check("orphan: NodeClassReady False NodeClassNotFound, Ready False",
          conds(o).get("NodeClassReady") == ("False", "NodeClassNotFound") and conds(o).get("Ready", ("",))[0] == "False", conds(o))
    check("orphan: the message names the missing class", "missing" in cond(o, "NodeClassReady").get("message", ""), cond(o, "NodeClassReady"))
    check("status.resources counts 0 nodes", g["status"].get("resources", {}).get("nodes") == "0", g["status"].get("resources"))
    check("conditions carry observedGeneration and lastTransitionTime",
          all(c.get("observedGeneration") == g["metadata"].get("generation") and c.get("lastTransitionTime")
              for c in g["status"]["conditions"]), g["status"]["conditions"])

    # ---- 2. after a scale-up: NodeClaims in flight, then the Node they became ----
    # the first two CreateFleets find no capacity at all: one failed NodeClaim for the pool (the
    # latest failure), then a launch
    s.proxy("POST", "rules", {"kind": "ice", "instance_type": "*", "zone": "*", "count": 2})
    apply_objs(s, deployment("web", 4, "1", "2Gi"))
    def in_flight():
        """Claims launched whose instance had no Node when we looked (Nodes read first)."""
        ids = [n["spec"].get("providerID", "").rsplit("/", 1)[-1] for n in s.nodes().values()]
        return [(c, ids) for c in claims(s) if cond(c, "Launched").get("status") == "True"
                and not c["status"].get("nodeName") and c["status"].get("instanceID") not in ids]
    inflight = wait_for("a NodeClaim launched and not registered", in_flight, 60, 0.2)
    c, node_ids = inflight[0]
    inflight = [c]
    out = s.kubectl("get", "nodeclaims", "-o", "wide")
    print(out)
    lbl = c["metadata"]["labels"]
    check("in flight before its Node exists: a NodeClaim with type, zone, capacity type and the pods it is for",
          c["status"]["instanceID"] not in node_ids and lbl.get("node.kubernetes.io/instance-type") and lbl.get("topology.kubernetes.io/zone")
          and lbl.get("nodesmith.io/capacity-type") == "on-demand" and c["status"].get("providerID", "").startswith("aws:///")
          and 1 <= c["status"].get("nominatedPodCount", 0) <= 4 and len(c["status"]["nominatedPods"]) == c["status"]["nominatedPodCount"]
          and all(p.startswith("default/web-") for p in c["status"]["nominatedPods"])
          and cond(c, "Registered").get("status") == "Unknown", (node_ids, c))
    row = next(l.split() for l in out.splitlines() if l.startswith(c["metadata"]["name"]))
    check("kubectl get nodeclaims: Type, Capacity, Zone filled, no Node yet",
          row[1:4] == [lbl["node.kubernetes.io/instance-type"], "on-demand", lbl["topology.kubernetes.io/zone"]], row)
    failed = [c for c in claims(s) if cond(c, "Launched").get("status") == "False"]
    check("the failed launches: one NodeClaim for the pool with Launched=False and EC2's error",
          len(failed) == 1 and "InsufficientInstanceCapacity" in cond(failed[0], "Launched").get("reason", "") +
          cond(failed[0], "Launched").get("message", ""), failed)
    wait_for("4 web pods Running", lambda: len(running_of(s, "web")) == 4, 120, 0.5)
    node_of = {n: s.nodes()[n]["spec"]["providerID"].rsplit("/", 1)[-1] for n in s.nodes()}
    wait_for("the NodeClaim names its Node and is Ready", lambda: [c for c in claims(s) if c["status"].get("nodeName") in node_of
                                                                  and cond(c, "Ready").get("status") == "True"], 30, 0.3)
    c = next(c for c in claims(s) if c["metadata"]["name"] == inflight[0]["metadata"]["name"])
    check("the same NodeClaim, registered: nodeName and Ready", c["status"].get("nodeName") in node_of
          and node_of[c["status"]["nodeName"]] == c["status"]["instanceID"], c)
    n_nodes = len(s.nodes())
    wait_for("EC2NodeClass default Ready", lambda: cond(get(s, "ec2nodeclass", "default"), "Ready").get("status") == "True", 30, 0.3)
    nc = get(s, "ec2nodeclass", "default")
    st = nc["status"]
    print("default:", conds(nc), json.dumps({k: v for k, v in st.items() if k != "conditions"}))
    check("EC2NodeClass: subnets with their zones", st.get("subnets") and all(x["id"].startswith("subnet-") and x["zone"].startswith("us-east-1")
                                                                              for x in st["subnets"]), st.get("subnets"))
    check("EC2NodeClass: security groups", st.get("securityGroups") and all(x["id"].startswith("sg-") for x in st["securityGroups"]),
          st.get("securityGroups"))
    check("EC2NodeClass: the amd64 AMI with its requirement", any(
        a["id"].startswith("ami-") and a["requirements"] == [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]
        for a in st.get("amis", [])), st.get("amis"))
    inst = s.ec2.describe_instances(InstanceIds=[c["status"]["instanceID"]])["Reservations"][0]["Instances"][0]
    check("EC2NodeClass: instanceProfile, the one the instance got (made for spec.role)",
          st.get("instanceProfile") and inst.get("IamInstanceProfile", {}).get("Arn", "").endswith("/" + st["instanceProfile"]),
          (st.get("instanceProfile"), inst.get("IamInstanceProfile")))
    wait_for("general Ready with its node counted", lambda: cond(get(s, "nodepool", "general"), "Ready").get("status") == "True"
             and get(s, "nodepool", "general")["status"]["resources"]["nodes"] == str(n_nodes), 30, 0.3)
    res = get(s, "nodepool", "general")["status"]["resources"]
    print("general resources:", res)
    check(f"status.resources: {n_nodes} node(s) with their cpu, memory and pods",
          res["nodes"] == str(n_nodes) and res.get("cpu") not in (None, "0") and res.get("memory", "0") != "0"
          and int(res.get("pods", "0")) > 0, res)
    out = s.kubectl("get", "nodepools")
    print(out)
    row = next(l.split() for l in out.splitlines() if l.startswith("general"))
    check("kubectl get nodepools: NodeClass, Nodes and Ready filled", row[1:4] == ["default", str(n_nodes), "True"], row)
    row = next(l.split() for l in out.splitlines() if l.startswith("orphan"))
    check("kubectl get nodepools: orphan not Ready", row[1:4] == ["missing", "0", "False"], row)
    out = s.kubectl("get", "ec2nodeclasses")
    print(out)
    check("kubectl get ec2nodeclasses: Ready True", next(l.split() for l in out.splitlines() if l.startswith("default"))[1] == "True", out)
    out = s.kubectl("get", "nodepools", "-o", "wide")
    row = next(l.split() for l in out.splitlines() if l.startswith("general"))
    check("kubectl get nodepools -o wide: CPU and Memory filled", row[-2:] == [res["cpu"], res["memory"]], out)

    # ---- 3. overwritten: written back; unchanged: not written ----
    before = get(s, "nodepool", "general")
    since = cond(before, "Ready")["lastTransitionTime"]
    n0 = writes(leader)
    time.sleep(6)  # a tick or more with nothing changed
    n1 = writes(leader)
    after = get(s, "nodepool", "general")
    # the NodePool whose status did not change is not written again (other objects, NodeClaims of
    # nodes still settling, may be: the counter counts every status write)
    check(f"an unchanged status is not written again (resourceVersion "
          f"{before['metadata']['resourceVersion']} -> {after['metadata']['resourceVersion']}; "
          f"{n0:.0f} -> {n1:.0f} writes in all)",
          after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"])
    s.kubectl("patch", "nodepool", "general", "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Tampered",
                                                           "message": "x", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}}))
    wait_for("the leader to write the status back", lambda: cond(get(s, "nodepool", "general"), "Ready").get("status") == "True"
             and cond(get(s, "nodepool", "general"), "ValidationSucceeded"), 15, 0.3)
    check("Ready back to True after the overwrite", True)
    check("lastTransitionTime of an unchanged condition kept", cond(after, "Ready")["lastTransitionTime"] == since,
          (since, cond(after, "Ready")))

    # ---- 4. events a person reads ----
    web = running_of(s, "web")[0]["metadata"]["name"]
    out = wait_for("Nominated on a web pod", lambda: (lambda o: o if "Nominated" in o else None)(
        s.kubectl("describe", "pod", web)), 15, 0.5)
    check("kubectl describe pod (placed): Nominated to the launched instance",
          "Pod should schedule on instance i-" in out, out[-800:])
    apply_objs(s, deployment("huge", 1, "900", "1Ti"))
    huge = wait_for("the huge pod", lambda: [p["metadata"]["name"] for p in s.pods("default")
                                             if p["metadata"]["labels"].get("app") == "huge"], 15, 0.3)[0]
    out = wait_for("nodesmith's reason on the huge pod", lambda: (lambda o: o if "nodesmith cannot launch" in o else None)(
        s.kubectl("describe", "pod", huge)), 30, 0.5)
    print(out[out.find("Events:"):])
    check("kubectl describe pod (unplaceable): FailedScheduling with the solver's reason in words",
          "FailedScheduling" in out and "nodesmith cannot launch a node for this pod" in out, out[-800:])
    time.sleep(4)  # more rounds: the same reason is not posted again
    events = json.loads(s.kubectl("get", "events", "--field-selector", f"involvedObject.name={huge}", "-o", "json"))["items"]
    mine = [e for e in events if "nodesmith cannot launch" in e.get("message", "")]
    check(f"the reason is posted once, not every round ({len(mine)})", len(mine) == 1, [e["message"] for e in mine])
    node = next(iter(s.nodes()))
    iid = s.nodes()[node]["spec"]["providerID"].rsplit("/", 1)[-1]
    queue.send_spot_warning(iid)
    out = wait_for("the spot notice on the Node", lambda: (lambda o: o if "NodesmithInterruptionNotice" in o else None)(
        s.kubectl("describe", "node", node)), 30, 0.5)
    print(out[out.find("Events:"):])
    check("kubectl describe node: the interruption notice and the drain decided",
          f"Instance {iid} has a spot_interruption notice" in out and "NodesmithDrainDecided" in out, out[-1200:])

    # EC2 takes the instance back: its Node goes (the emulated cloud node lifecycle controller),
    # and so does its NodeClaim
    claim = next(c["metadata"]["name"] for c in claims(s) if c["status"].get("instanceID") == iid)
    s.terminate(iid)
    wait_for("the instance's NodeClaim deleted with its Node", lambda: claim not in
             [c["metadata"]["name"] for c in claims(s)] and node not in s.nodes(), 90, 0.5)
    check("garbage-collected with the instance", True)

    # ---- 5. a standby writes nothing ----
    s.start_coordinator("--config", conf, "--batch-idle", "700ms", "--identity", "standby", "--lease-duration", "3s",
                        name="standby")
    standby = s.coordinator_http
    s.kubectl("patch", "nodepool", "orphan", "--subresource=status", "--type=merge", "-p", '{"status": {"conditions": []}}')
    time.sleep(7)
    text = http_get(standby + "/metrics")[1]
    check("the standby does not lead and wrote no status",
          metric(text, "nodesmith_leader") == 0 and (metric(text, "nodesmith_status_writes_total", {"result": "written"}) or 0) == 0, text[-300:])
    check("the leader restored the orphan's conditions", cond(get(s, "nodepool", "orphan"), "Ready").get("status") == "False")


if __name__ == "__main__":
    sys.exit(main())
