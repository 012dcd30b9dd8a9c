"""What integration tests on the local stack (stack.LocalStack) do again and again: workloads
and PDBs, the eviction audit (tests/pylib/kubeaudit.py), API faults, metrics, emulated instances, and an SQS
interruption queue in moto with EventBridge events for it.

    from workload import Queue, deployment, pdb, apply_objs, running_of, wait_registered
    q = Queue(s); q.send(spot_warning(iid))
"""
import json
import urllib.request
import uuid
from datetime import datetime, timezone

from nsharness import http_get, metric, wait_for


def node_class_yaml(cluster, name="default"):
    """An EC2NodeClass selecting the stack's discovery-tagged subnets and security group."""
    return f"""apiVersion: nodesmith.io/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  amiFamily: AL2023
  amiSelectorTerms: [{{alias: al2023@latest}}]
  role: nodesmith-node
  subnetSelectorTerms: [{{tags: {{nodesmith.io/discovery: {cluster}}}}}]
  securityGroupSelectorTerms: [{{tags: {{nodesmith.io/discovery: {cluster}}}}}]
"""


# on-demand m6i.large only (2 vCPU, 1930m allocatable): tests that count pods per node
ON_DEMAND_M6I_LARGE = ("{key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}",
                       "{key: node.kubernetes.io/instance-type, operator: In, values: [m6i.large]}")
# consolidation off: nodes stay while a test watches them
NO_CONSOLIDATION = "  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: Never}\n"

# small on-demand amd64 nodes of the c and m families
ON_DEMAND_CM = ("{key: nodesmith.io/capacity-type, operator: In, values: [on-demand]}",
                "{key: nodesmith.io/instance-category, operator: In, values: [c, m]}",
                "{key: kubernetes.io/arch, operator: In, values: [amd64]}",
                "{key: nodesmith.io/instance-size, operator: NotIn, values: [metal]}")


def nodepool_yaml(name="general", node_class="default", requirements=ON_DEMAND_CM, spec=""):
    """A NodePool of node_class with these requirements (YAML flow mappings) and more of its
    spec (YAML, indented two spaces)."""
    reqs = "".join(f"\n        - {r}" for r in requirements)
    return f"""---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{spec}  template:
    spec:
      nodeClassRef: {{group: nodesmith.io, kind: EC2NodeClass, name: {node_class}}}
      requirements:{reqs}
"""


def start_real(s, objects, coordinator=(), kube=None, emulator=None):
    """A LocalStack started for a test: EC2 and its network, the control plane
    (grace factor 0.05, plus kube), objects applied, one coordinator (700 ms batches, a 3 s
    Lease, identity coord-a, plus coordinator) and the node emulator (plus emulator).
    Returns the coordinator's Proc."""
    s.start_ec2()
    s.setup_network()
    s.start_kube(**dict({"grace_scale": 0.05}, **(kube or {})))
    s.apply(objects)
    coord = s.start_coordinator("--batch-idle", "700ms", "--lease-duration", "3s", "--identity", "coord-a",
                                *coordinator)
    s.start_emulator(**dict({"boot_delay": 0.3, "ready_delay": 0.5}, **(emulator or {})))
    return coord


def apply_objs(s, *objs):
    s.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def deployment(name, replicas, cpu, memory="128Mi", annotations=None, ready_after=None):
    """ready_after: whole seconds from Running to Ready, as a readiness probe's
    initialDelaySeconds (the emulated kubelets scale it by their grace factor)."""
    container = {"name": name, "image": "registry.example/app",
                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    if ready_after:
        if ready_after != int(ready_after) or ready_after < 0:
            raise ValueError(f"ready_after={ready_after}: initialDelaySeconds is a whole number of seconds")
        container["readinessProbe"] = {"exec": {"command": ["true"]},
                                       "initialDelaySeconds": int(ready_after)}
    spec = {"terminationGracePeriodSeconds": 30, "containers": [container]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                                  "spec": spec}}}


def pdb(name, **spec):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": "default"},
            "spec": dict(spec, selector={"matchLabels": {"app": name}})}


def fake_api(s, method, path, body=None):
    """The fault proxy's control endpoint /_fake/PATH (tests/fakes/kubeproxy.py, with
    start_kube(fault_proxy=True)): faults and watches."""
    req = urllib.request.Request(f"{s.kube_control}/_fake/{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        raw = r.read()
        return json.loads(raw) if raw else None


def evictions(s, node, decision=None):
    """The eviction audit for pods of node: [{pod, uid, node, decision, pdb, ...}], from
    kube-apiserver's audit log (tests/pylib/kubeaudit.py)."""
    return s.audit.evictions(node, decision)


def violations(s):
    """Evictions or deletions that broke a PDB."""
    return len(s.audit.violations())


def running_of(s, app):
    return [p for p in s.pods("default") if p["metadata"].get("labels", {}).get("app") == app
            and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def on_node(pods, node):
    return [p for p in pods if p["spec"].get("nodeName") == node]


def coordinator_metric(s, name, labels=None):
    return metric(http_get(s.coordinator_http + "/metrics")[1], name, labels) or 0


def instance(s, ref):
    """The emulator's view of an instance (by id or Node name)."""
    return s.emu("GET", f"instances/{ref}")


def instance_state(s, iid):
    return s.instances()[iid]["State"]["Name"]


def wait_registered(s, iids, timeout=60):
    """Wait until each instance's agent runs and reports; {instance id: Node name}."""
    def ok():
        st = {i["instanceId"]: i for i in s.emu_state()["instances"]}
        nodes = s.coordinator_nodes()
        return all(st.get(i, {}).get("agentAlive") and i in nodes for i in iids)
    wait_for(f"agents of {iids} reporting", ok, timeout, 0.3)
    return {i: instance(s, i)["node"] for i in iids}


class Queue:
    """An SQS queue in moto (through the EC2 proxy, which forwards SQS untouched), for the
    coordinator's --interruption-queue (and --sqs-endpoint s.ec2_endpoint)."""

    def __init__(self, s, name="nodesmith-interruptions", visibility_timeout=5):
        self.sqs = s.client("sqs")
        self.url = self.sqs.create_queue(QueueName=name, Attributes={
            "VisibilityTimeout": str(visibility_timeout)})["QueueUrl"]

    def send(self, event):
        self.sqs.send_message(QueueUrl=self.url, MessageBody=json.dumps(event))

    def send_spot_warning(self, iid, zone="us-east-1a"):
        self.send(spot_warning(iid, zone))

    def depth(self):
        """Messages in the queue, visible or in flight."""
        a = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])


def spot_warning(iid, zone="us-east-1a", event_id=None):
    """An EventBridge EC2 Spot Instance Interruption Warning as it reaches the queue."""
    return {"version": "0", "id": event_id or str(uuid.uuid4()),
            "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
            "account": "123456789012", "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": "us-east-1", "resources": [f"arn:aws:ec2:{zone}:instance/{iid}"],
            "detail": {"instance-id": iid, "instance-action": "terminate"}}
