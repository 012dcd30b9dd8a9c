#!/usr/bin/env python3
"""Checks tests/fakes/kubeapi.py against documented Kubernetes API behaviour, with kubectl
(v1.32, a real client) and urllib.

Run: python3 tests/integration/test_kubeapi.py   (exit 0 = pass; about 35 s)
Starts two fake API servers on 127.0.0.1 and stops them at the end.
"""

import json
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "fakes", "kubeapi.py")
DEADLINE = time.monotonic() + 58
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

failures = []
checks = 0
procs = []


def check(cond, what, detail=None):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}" + (f"\n      {detail}" if detail is not None else ""), flush=True)
    return cond


def left():
    return DEADLINE - time.monotonic()


def start(args):
    p = subprocess.Popen([sys.executable, FAKE, "--port", "0"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    procs.append(p)
    line = p.stdout.readline().strip()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"fake did not start: {line!r} {p.stderr.read()}")
    return p, int(m.group(1))


class Client:
    def __init__(self, port, token=None, tmp=None, cafile=None):
        self.port = port
        self.token = token
        self.home = tmp
        self.cafile = cafile
        self.scheme = "https" if cafile else "http"
        self.ctx = ssl.create_default_context(cafile=cafile) if cafile else None
        self.kubeconfig = os.path.join(tmp, "kubeconfig")
        user = f"{{token: {token}}}" if token else "{}"
        ca = f", certificate-authority: {cafile}" if cafile else ""
        with open(self.kubeconfig, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- cluster: {{server: "{self.scheme}://127.0.0.1:{port}"{ca}}}
  name: fake
contexts:
- context: {{cluster: fake, user: tester}}
  name: fake
current-context: fake
users:
- name: tester
  user: {user}
""")

    def req(self, method, path, body=None, ctype="application/json", headers=None,
            timeout=10, raw=False):
        """(status, headers lower-cased, parsed JSON or bytes)."""
        h = dict(headers or {})
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            h.setdefault("Content-Type", ctype)
        if self.token:
            h.setdefault("Authorization", f"Bearer {self.token}")
        r = urllib.request.Request(f"{self.scheme}://127.0.0.1:{self.port}{path}",
                                   method=method, headers=h, data=data)
        try:
            with urllib.request.urlopen(r, timeout=timeout, context=self.ctx) as resp:
                st, hd, b = resp.status, {k.lower(): v for k, v in resp.headers.items()}, \
                    resp.read()
        except urllib.error.HTTPError as e:
            st, hd, b = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
        if raw:
            return st, hd, b
        try:
            return st, hd, json.loads(b) if b else None
        except ValueError:
            return st, hd, b

    def kubectl(self, *args, stdin=None, timeout=30):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        p = subprocess.run([KUBECTL] + list(args), input=stdin, capture_output=True, text=True,
                           env=env, timeout=max(1, min(timeout, left())))
        return p.returncode, p.stdout, p.stderr

    def kjson(self, *args):
        rc, out, err = self.kubectl(*args, "-o", "json")
        if rc != 0:
            return None
        return json.loads(out)

    def popen_kubectl(self, *args):
        env = dict(os.environ, HOME=self.home, KUBECONFIG=self.kubeconfig)
        p = subprocess.Popen([KUBECTL] + list(args), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        procs.append(p)
        return p


def wait_for(fn, timeout=10.0, interval=0.1):
    end = time.monotonic() + min(timeout, max(0.5, left()))
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= end:
            return v
        time.sleep(interval)


def cond(obj, typ):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return c
    return {}


WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {pool: general}
      terminationGracePeriodSeconds: 30
      containers:
      - name: app
        image: nginx:1.27
        resources: {requests: {cpu: 100m, memory: 64Mi}}
        volumeMounts: [{name: scratch, mountPath: /scratch}]
      volumes: [{name: scratch, emptyDir: {}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {pool: general}
      containers: [{name: agent, image: "nodesmith/agent:dev"}]
"""

CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: nodepools.nodesmith.io}
spec:
  group: nodesmith.io
  scope: Cluster
  names: {kind: NodePool, listKind: NodePoolList, plural: nodepools, singular: nodepool}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: NodeClass, type: string, jsonPath: .spec.template.spec.nodeClassRef.name}
    - {name: Weight, type: integer, jsonPath: .spec.weight}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [template]
            properties:
              weight: {type: integer, minimum: 1, maximum: 100}
              disruption:
                type: object
                default: {consolidateAfter: 0s}
                properties:
                  consolidateAfter: {type: string}
                  consolidationPolicy:
                    type: string
                    enum: [WhenEmpty, WhenEmptyOrUnderutilized]
                    default: WhenEmptyOrUnderutilized
              template:
                type: object
                properties:
                  spec:
                    type: object
                    properties:
                      nodeClassRef:
                        type: object
                        required: [name]
                        properties:
                          group: {type: string}
                          kind: {type: string}
                          name: {type: string}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""

NODEPOOL = """
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: default}
spec:
  weight: WEIGHT
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
"""


def pod(name, ns="default", labels=None, node=None, cpu=None, extra=None):
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
         "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    if node:
        p["spec"]["nodeName"] = node
    if cpu:
        p["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    if extra:
        p["spec"].update(extra)
    return p


def test_discovery(c):
    rc, out, err = c.kubectl("version", "-o", "json")
    v = json.loads(out) if rc == 0 else {}
    check(v.get("serverVersion", {}).get("minor") == "32", "kubectl version sees 1.32", err)
    st, _, body = c.req("GET", "/api/v1")
    subs = {r["name"]: r for r in body.get("resources", [])}
    ev = subs.get("pods/eviction", {})
    check(ev.get("group") == "policy" and ev.get("version") == "v1" and
          ev.get("kind") == "Eviction" and ev.get("verbs") == ["create"],
          "/api/v1 advertises pods/eviction as policy/v1 Eviction (kubectl drain needs it)", ev)
    check("pods/binding" in subs and "nodes/status" in subs and "pods/status" in subs,
          "/api/v1 lists pods/binding, pods/status, nodes/status")
    check(subs.get("pods", {}).get("shortNames") == ["po"] and subs["pods"]["namespaced"],
          "pods are namespaced with short name po")
    st, _, body = c.req("GET", "/apis")
    groups = {g["name"] for g in body.get("groups", [])}
    check({"apps", "policy", "coordination.k8s.io", "events.k8s.io",
           "apiextensions.k8s.io"} <= groups, "/apis lists the served groups", groups)
    st, hd, body = c.req("GET", "/api/v1/namespaces/default",
                         headers={"Accept": "application/vnd.kubernetes.protobuf"})
    check(st == 200 and hd.get("content-type", "").startswith("application/json") and
          body.get("kind") == "Namespace", "a protobuf Accept is answered with JSON")
    st, _, body = c.req("GET", "/api/v1/nosuchthing")
    check(st == 404 and body.get("kind") == "Status" and body.get("reason") == "NotFound",
          "unknown resource is a 404 Status")
    st, _, body = c.req("GET", "/healthz", raw=True)
    check(st == 200 and body == b"ok", "/healthz answers ok")


def test_scheduler(c):
    c.req("POST", "/_fake/nodes", {"name": "gpu1", "capacity": {
        "cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]})
    for p in (pod("big", "sched", cpu="100"),
              pod("picky", "sched", extra={"nodeSelector": {"disk": "ssd"}}),
              pod("gpu", "sched", extra={
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                  "containers": [{"name": "c", "image": "cuda:12",
                                  "resources": {"limits": {"nvidia.com/gpu": "2"}}}]})):
        st, _, b = c.req("POST", "/api/v1/namespaces/sched/pods", p)
        check(st == 201, f"create pod {p['metadata']['name']}", b)
    want = {
        "big": "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint "
               "{nvidia.com/gpu: true}. preemption: 0/2 nodes are available: 1 No preemption "
               "victims found for incoming pod, 1 Preemption is not helpful for scheduling.",
        "picky": "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
                 "1 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/2 nodes "
                 "are available: 2 Preemption is not helpful for scheduling.",
        "gpu": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes "
               "are available: 2 No preemption victims found for incoming pod.",
    }
    for name, msg in want.items():
        got = wait_for(lambda: cond(c.req("GET", f"/api/v1/namespaces/sched/pods/{name}")[2],
                                    "PodScheduled").get("message"), 5)
        ps = cond(c.req("GET", f"/api/v1/namespaces/sched/pods/{name}")[2], "PodScheduled")
        check(ps.get("status") == "False" and ps.get("reason") == "Unschedulable" and
              got == msg, f"pod {name} is Unschedulable with kube-scheduler's message",
              f"{ps}\n      want {msg}")
    rc, out, _ = c.kubectl("get", "events", "-n", "sched", "--field-selector",
                           "reason=FailedScheduling,involvedObject.name=big", "-o", "json")
    evs = json.loads(out).get("items", []) if rc == 0 else []
    check(evs and evs[0].get("type") == "Warning" and
          evs[0]["source"]["component"] == "default-scheduler",
          "a FailedScheduling Warning event is recorded (field selector on events)")
    # a node that fits arrives: the scheduler retries and binds; the kubelet starts the pod
    c.req("POST", "/_fake/nodes", {"name": "huge", "labels": {"pool": "huge"},
                                   "capacity": {"cpu": "192", "memory": "768Gi", "pods": "110"}})
    p = wait_for(lambda: (lambda b: b if (b.get("status") or {}).get("phase") == "Running"
                          else None)(c.req("GET", "/api/v1/namespaces/sched/pods/big")[2]), 8)
    check(bool(p) and p["spec"].get("nodeName") == "huge" and
          cond(p, "PodScheduled").get("status") == "True" and cond(p, "Ready").get("status")
          == "True", "the unschedulable pod is bound once a node fits, then Running and Ready")
    st, _, b = c.req("POST", "/api/v1/namespaces/sched/pods/picky/binding",
                     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "picky"},
                      "target": {"apiVersion": "v1", "kind": "Node", "name": "huge"}})
    check(st == 201 and b.get("status") == "Success", "POST pods/NAME/binding binds", b)
    st, _, b = c.req("POST", "/api/v1/namespaces/sched/pods/picky/binding",
                     {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "picky"},
                      "target": {"kind": "Node", "name": "gpu1"}})
    check(st == 409, "binding an already bound pod is a 409", b)
    rc, out, err = c.kubectl("delete", "namespace", "sched", "--timeout=15s")
    check(rc == 0, "kubectl delete namespace waits until its pods are gone", err)
    c.req("DELETE", "/_fake/nodes/huge")
    c.req("DELETE", "/_fake/nodes/gpu1")


def test_workloads(c):
    rc, out, err = c.kubectl("apply", "-f", "-", stdin=WEB)
    check(rc == 0 and "deployment.apps/web created" in out and
          "poddisruptionbudget.policy/web created" in out, "kubectl apply -f creates", err)
    rc, out, err = c.kubectl("rollout", "status", "deployment/web", "--timeout=20s")
    check(rc == 0 and "successfully rolled out" in out, "kubectl rollout status deployment", err)
    rc, out, err = c.kubectl("rollout", "status", "-n", "kube-system", "daemonset/agent",
                             "--timeout=10s")
    check(rc == 0, "kubectl rollout status daemonset", err)
    pods = c.kjson("get", "pods", "-l", "app=web")
    items = pods["items"] if pods else []
    check(len(items) == 3 and all(p["status"]["phase"] == "Running" and
                                  cond(p, "Ready").get("status") == "True" and
                                  p["spec"]["nodeName"] == "n1" for p in items),
          "3 web pods Running and Ready on n1", [(p["metadata"]["name"], p["status"]["phase"])
                                                  for p in items])
    check(all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" and
              p["metadata"]["ownerReferences"][0]["controller"] is True and
              p["metadata"]["name"].startswith(p["metadata"]["generateName"]) and
              p["metadata"]["generateName"].startswith("web-") for p in items),
          "pods are owned by the ReplicaSet and named from generateName")
    pdb = wait_for(lambda: (lambda b: b if (b or {}).get("status", {}).get("currentHealthy") == 3
                            else None)(c.kjson("get", "pdb", "web")), 5)
    st = (pdb or {}).get("status", {})
    check(st.get("desiredHealthy") == 2 and st.get("expectedPods") == 3 and
          st.get("disruptionsAllowed") == 1 and st.get("observedGeneration") == 1,
          "PDB status: currentHealthy 3, desiredHealthy 2, expectedPods 3, allowed 1", st)
    rc, out, _ = c.kubectl("get", "nodes")
    check(rc == 0 and re.search(r"^n1\s+Ready\s+<none>\s+\S+\s+v1\.32", out, re.M),
          "kubectl get nodes prints the server-side table", out)
    nodes = c.kjson("get", "nodes")
    n1 = [n for n in nodes["items"] if n["metadata"]["name"] == "n1"][0]
    check(n1["spec"]["providerID"].startswith("aws:///us-east-1a/i-") and
          cond(n1, "Ready").get("status") == "True", "kubectl get nodes -o json: providerID and "
                                                       "Ready", n1["spec"])
    # paginated list through kubectl and through the API
    rc, out, err = c.kubectl("get", "pods", "-A", "--chunk-size=1", "-o", "name")
    check(rc == 0 and out.count("pod/") == 4, "kubectl get --chunk-size=1 follows continue",
          out + err)
    st, _, b = c.req("GET", "/api/v1/pods?limit=2")
    meta = b.get("metadata", {})
    _, _, b2 = c.req("GET", "/api/v1/pods?limit=2&continue=" +
                       urllib.request.quote(meta.get("continue", "")))
    check(len(b["items"]) == 2 and meta.get("remainingItemCount") == 2 and
          len(b2["items"]) == 2 and not b2["metadata"].get("continue") and
          b2["metadata"]["resourceVersion"] == meta["resourceVersion"],
          "limit/continue pages at one resourceVersion", meta)
    rc, out, err = c.kubectl("get", "pods", "-A", "-l", "app in (web,agent),app!=agent",
                             "--field-selector", "spec.nodeName=n1,status.phase=Running",
                             "-o", "name")
    check(rc == 0 and out.count("pod/web-") == 3 and "agent" not in out,
          "label (in, !=) and field selectors", out + err)
    st, _, b = c.req("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3D")
    check(st == 200 and b["items"] == [], "fieldSelector spec.nodeName= (unbound pods)")
    st, _, b = c.req("GET", "/api/v1/pods?fieldSelector=spec.foo%3Dbar")
    check(st == 400 and "field label not supported: spec.foo" in b.get("message", ""),
          "unsupported field selector is a 400", b)


def test_evictions(c):
    c.req("POST", "/_fake/nodes", {"name": "ev1", "labels": {"pool": "eviction"}})
    rc, out, err = c.kubectl("create", "namespace", "ev")
    check(rc == 0 and "namespace/ev created" in out,
          "kubectl create namespace (a protobuf request body)", err)
    base = "/api/v1/namespaces/ev/pods"
    for name, labels in (("solo", {"app": "solo"}), ("duo", {"app": "duo"}),
                         ("free", {"app": "free"})):
        c.req("POST", base, pod(name, "ev", labels, node="ev1"))
    c.req("POST", base, pod("waiting", "ev", {"app": "solo"},
                            extra={"nodeSelector": {"pool": "nowhere"}}))
    for name, sel, spec in (("solo", {"app": "solo"}, {"minAvailable": 1}),
                            ("duo-a", {"app": "duo"}, {"maxUnavailable": 0}),
                            ("duo-b", {"app": "duo"}, {"minAvailable": "50%"})):
        st, _, b = c.req("POST", "/apis/policy/v1/namespaces/ev/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name}, "spec": dict(spec, selector={"matchLabels": sel})})
        check(st == 201, f"create PDB {name}", b)
    wait_for(lambda: all(cond(c.req("GET", f"{base}/{n}")[2], "Ready").get("status") == "True"
                         for n in ("solo", "duo", "free")), 5)
    wait_for(lambda: c.req("GET", "/apis/policy/v1/namespaces/ev/poddisruptionbudgets/solo")[2]
             .get("status", {}).get("currentHealthy") == 1, 5)

    def evict(name, body_name=None, av="policy/v1", grace=None):
        body = {"apiVersion": av, "kind": "Eviction",
                "metadata": {"name": body_name or name, "namespace": "ev"}}
        if grace is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace}
        return c.req("POST", f"{base}/{name}/eviction", body)

    st, hd, b = evict("solo")
    causes = (b.get("details") or {}).get("causes") or []
    check(st == 429 and b.get("reason") == "TooManyRequests" and
          b.get("message") == "Cannot evict pod as it would violate the pod's disruption budget."
          and causes and causes[0].get("reason") == "DisruptionBudget" and
          "needs 1 healthy pods and has 1 currently" in causes[0].get("message", ""),
          "eviction under a PDB with no disruptions allowed is 429 DisruptionBudget", b)
    st, hd, b = evict("duo")
    check(st == 500 and b.get("message") == "This pod has more than one PodDisruptionBudget, "
                                             "which the eviction subresource does not support.",
          "eviction of a pod matched by two PDBs is 500", b)
    st, _, b = evict("solo", body_name="other")
    check(st == 400 and "does not match" in b.get("message", ""),
          "eviction whose body names another pod is 400", b)
    st, _, b = evict("ghost")
    check(st == 404, "eviction of a missing pod is 404", b)
    st, _, b = evict("waiting")
    check(st == 201 and b.get("status") == "Success",
          "a Pending pod skips the PDB check: 201 Success", b)
    check(c.req("GET", f"{base}/waiting")[0] == 404, "the evicted Pending pod is gone")
    st, _, b = evict("free", av="policy/v1beta1", grace=0)
    check(st == 201, "a policy/v1beta1 Eviction is accepted", b)
    # 403 and 'still being processed' need a PDB status the disruption controller would fix:
    # pause it for the check
    c.req("POST", "/_fake/controllers", {"pause": ["disruption"]})
    path = "/apis/policy/v1/namespaces/ev/poddisruptionbudgets/solo"
    cur = c.req("GET", path)[2]
    cur["status"]["disruptionsAllowed"] = -1
    st, _, b = c.req("PUT", path + "/status", cur)
    check(st == 200, "PUT poddisruptionbudgets/status", b)
    st, _, b = evict("solo")
    check(st == 403 and "pdb disruptions allowed is negative" in b.get("message", ""),
          "a negative disruptionsAllowed is 403", b)
    st, _, b = c.req("PATCH", path, {"spec": {"minAvailable": 0}},
                     "application/merge-patch+json")
    check(st == 200 and b["metadata"]["generation"] == 2, "spec change bumps generation", b)
    st, hd, b = evict("solo")
    causes = (b.get("details") or {}).get("causes") or []
    check(st == 429 and hd.get("retry-after") == "10" and causes and
          "is still being processed" in causes[0].get("message", ""),
          "a PDB not yet observed by the controller is 429 with Retry-After 10", (hd, b))
    c.req("POST", "/_fake/controllers", {"resume": ["disruption"]})
    pdb = wait_for(lambda: (lambda b: b if b["status"].get("observedGeneration") == 2 else None)(
        c.req("GET", path)[2]), 5)
    check(bool(pdb) and pdb["status"]["disruptionsAllowed"] == 1,
          "the disruption controller catches up (minAvailable 0 allows 1)")
    st, _, b = evict("solo", grace=0)
    check(st == 201, "eviction allowed once the budget permits it", b)
    pdb = c.req("GET", path)[2]
    check(pdb["status"]["disruptionsAllowed"] == 0 or "solo" in pdb["status"].get(
        "disruptedPods", {}), "the eviction decremented the budget / recorded disruptedPods",
        pdb["status"])
    audit = c.req("GET", "/_fake/evictions")[2]
    decisions = [(e["pod"], e["code"]) for e in audit["evictions"]]
    check(("solo", 429) in decisions and ("duo", 500) in decisions and ("solo", 201) in
          decisions and audit["violationCount"] == 0, "the eviction audit records each "
                                                      "decision and no violation", decisions)
    c.req("DELETE", "/_fake/evictions")


def test_drain(c):
    c.req("POST", "/_fake/nodes", {"name": "n2", "labels": {"pool": "general"},
                                   "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}})
    wait_for(lambda: len([p for p in c.kjson("get", "pods", "-n", "kube-system")["items"]
                          if cond(p, "Ready").get("status") == "True"]) == 2, 5)
    t0 = time.monotonic()
    rc, out, err = c.kubectl("drain", "n1", "--ignore-daemonsets", "--delete-emptydir-data",
                             "--timeout=30s", timeout=40)
    took = time.monotonic() - t0
    check(rc == 0 and "node/n1 drained" in out, "kubectl drain succeeds", out + err)
    check("Cannot evict pod as it would violate the pod's disruption budget." in err and
          "will retry after 5s" in err, "drain was held back by the PDB (429) and retried",
          err)
    check(took >= 5, f"drain waited for replacements ({took:.1f}s)")
    node = c.kjson("get", "node", "n1")
    check(node["spec"].get("unschedulable") is True and any(
        t["key"] == "node.kubernetes.io/unschedulable" for t in node["spec"].get("taints", [])),
        "drain cordoned n1 (spec.unschedulable and the unschedulable taint)")
    pods = c.kjson("get", "pods", "-l", "app=web")["items"]
    check(len(pods) == 3 and all(p["spec"]["nodeName"] == "n2" and
                                 cond(p, "Ready").get("status") == "True" for p in pods),
          "the 3 web pods now run Ready on n2",
          [(p["metadata"]["name"], p["spec"].get("nodeName")) for p in pods])
    ds = c.kjson("get", "pods", "-n", "kube-system", "-l", "app=agent",
                 "--field-selector", "spec.nodeName=n1")["items"]
    check(len(ds) == 1, "the DaemonSet pod stays on the drained node")
    audit = c.req("GET", "/_fake/evictions")[2]
    ev = [e for e in audit["evictions"] if e["namespace"] == "default"]
    check(sum(1 for e in ev if e["code"] == 201) == 3 and
          any(e["code"] == 429 and e["pdb"] == "web" for e in ev),
          "audit: 3 evictions granted, some denied by PDB web", [(e["pod"], e["code"])
                                                                 for e in ev])
    check(audit["violationCount"] == 0, "no PDB was violated during the drain",
          audit["violations"])
    rc, out, err = c.kubectl("uncordon", "n1")
    node = c.kjson("get", "node", "n1")
    check(rc == 0 and not node["spec"].get("unschedulable") and
          not node["spec"].get("taints"), "kubectl uncordon clears it", err)


def test_graceful_and_violation(c):
    pods = c.kjson("get", "pods", "-l", "app=web")["items"]
    victim = pods[0]["metadata"]["name"]
    # a plain DELETE bypasses the PDB: the independent accounting must notice
    c.req("POST", "/_fake/controllers", {"pause": ["replicaset"]})
    st, _, b = c.req("DELETE", f"/api/v1/namespaces/default/pods/{victim}")
    check(st == 200 and b.get("metadata", {}).get("deletionTimestamp") and
          b["metadata"].get("deletionGracePeriodSeconds") == 30,
          "pod DELETE sets deletionTimestamp with the 30 s grace period", b.get("metadata"))
    st2, _, _ = c.req("DELETE", f"/api/v1/namespaces/default/pods/{pods[1]['metadata']['name']}")
    audit = c.req("GET", "/_fake/evictions")[2]
    check(st2 == 200 and audit["violationCount"] == 1 and audit["violations"][0]["pdb"] == "web" and
          audit["violations"][0]["via"] == "client" and
          audit["violations"][0]["healthyAfter"] == 1,
          "deleting a second pod past minAvailable counts one PDB violation",
          audit["violations"])
    gone = wait_for(lambda: c.req("GET", f"/api/v1/namespaces/default/pods/{victim}")[0] == 404,
                    5)
    check(gone, "the kubelet removes the pod after its (scaled) grace period")
    c.req("POST", "/_fake/controllers", {"resume": ["replicaset"]})
    ok = wait_for(lambda: len([p for p in c.kjson("get", "pods", "-l", "app=web")["items"]
                               if cond(p, "Ready").get("status") == "True"]) == 3, 6)
    check(ok, "the ReplicaSet replaces deleted pods")
    c.req("DELETE", "/_fake/evictions")


def test_finalizers(c):
    c.req("POST", "/_fake/nodes", {"name": "n3", "finalizers": ["nodesmith.io/termination"]})
    p = c.popen_kubectl("delete", "node", "n3", "--timeout=25s")
    n = wait_for(lambda: (lambda b: b if b.get("metadata", {}).get("deletionTimestamp")
                          else None)(c.req("GET", "/api/v1/nodes/n3")[2]), 5)
    check(bool(n) and n["metadata"]["finalizers"] == ["nodesmith.io/termination"],
          "kubectl delete node: the node stays with a deletionTimestamp")
    time.sleep(0.5)
    check(p.poll() is None and c.req("GET", "/api/v1/nodes/n3")[0] == 200,
          "kubectl delete waits while the finalizer is there")
    bad = [{"op": "test", "path": "/metadata/finalizers/0", "value": "other.io/x"},
           {"op": "remove", "path": "/metadata/finalizers/0"}]
    rc, out, err = c.kubectl("patch", "node", "n3", "--type=json", "-p", json.dumps(bad))
    check(rc != 0 and "the server rejected our request due to an error in our request" in err,
          "kubectl patch --type=json with a failing test is refused", err)
    st, _, b = c.req("PATCH", "/api/v1/nodes/n3", bad, "application/json-patch+json")
    check(st == 422 and b.get("reason") == "Invalid", "a failed JSON patch test is 422", b)
    st, _, b = c.req("PATCH", "/api/v1/nodes/n3", {"metadata": {"finalizers": ["new.io/x"]}},
                     "application/merge-patch+json")
    check(st == 422 and "no new finalizers can be added" in b.get("message", ""),
          "no new finalizers on an object being deleted", b)
    good = [{"op": "test", "path": "/metadata/finalizers/0",
             "value": "nodesmith.io/termination"},
            {"op": "remove", "path": "/metadata/finalizers/0"}]
    st, _, b = c.req("PATCH", "/api/v1/nodes/n3", good, "application/json-patch+json")
    check(st == 200, "the JSON patch with a passing test removes the finalizer", b)
    try:
        rc = p.wait(timeout=max(1, min(10, left())))
    except subprocess.TimeoutExpired:
        p.kill()
        rc = -1
    check(rc == 0, "kubectl delete node returns once the node is gone", p.stderr.read())
    check(c.req("GET", "/api/v1/nodes/n3")[0] == 404, "the node is gone")
    # the same rules on any object, and the answers' codes
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"a": "1"}}
    c.req("POST", "/api/v1/namespaces/default/configmaps", cm)
    st, _, b = c.req("DELETE", "/api/v1/namespaces/default/configmaps/held")
    check(st == 200 and b["metadata"].get("deletionTimestamp") and
          b["metadata"].get("deletionGracePeriodSeconds") == 0,
          "DELETE of an object with finalizers answers it with a deletionTimestamp", b)
    st, _, b = c.req("DELETE", "/api/v1/namespaces/default/configmaps/held",
                     {"kind": "DeleteOptions", "apiVersion": "v1", "orphanDependents": False})
    check(st == 202, "DELETE with orphanDependents=false of a pending object is 202", st)
    st, _, b = c.req("PATCH", "/api/v1/namespaces/default/configmaps/held",
                     {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    check(st == 200 and c.req("GET", "/api/v1/namespaces/default/configmaps/held")[0] == 404,
          "removing the last finalizer removes the object")


def test_conflicts(c):
    path = "/api/v1/namespaces/default/configmaps"
    st, _, cm = c.req("POST", path, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"generateName": "cfg-"}, "data": {"k": "1"}})
    name = cm["metadata"]["name"]
    check(st == 201 and re.fullmatch(r"cfg-[a-z0-9]{5}", name) and cm["metadata"].get("uid")
          and cm["metadata"].get("creationTimestamp") and cm["metadata"].get("resourceVersion"),
          "create with generateName fills name, uid, creationTimestamp, resourceVersion", cm)
    st, _, b = c.req("POST", path, {"metadata": {"name": name}})
    check(st == 409 and b.get("reason") == "AlreadyExists", "create of an existing name is 409",
          b)
    stale = dict(cm, data={"k": "2"})
    st, _, fresh = c.req("PUT", f"{path}/{name}", stale)
    check(st == 200 and int(fresh["metadata"]["resourceVersion"]) >
          int(cm["metadata"]["resourceVersion"]), "PUT with the current resourceVersion")
    st, _, b = c.req("PUT", f"{path}/{name}", dict(cm, data={"k": "3"}))
    check(st == 409 and b.get("reason") == "Conflict" and "the object has been modified" in
          b.get("message", ""), "PUT with a stale resourceVersion is 409 Conflict", b)
    st, _, b = c.req("DELETE", f"{path}/{name}", {"preconditions": {"uid": "nope"}})
    check(st == 409, "DELETE with a wrong uid precondition is 409", b)
    st, _, b = c.req("PATCH", f"{path}/{name}", {"data": {"k": "4"}},
                     "application/strategic-merge-patch+json")
    check(st == 200 and b["data"] == {"k": "4"}, "strategic merge patch", b)
    # a Lease updated with resourceVersion preconditions, as leader election does
    lp = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    st, _, lease = c.req("POST", lp, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                      "metadata": {"name": "nodesmith"},
                                      "spec": {"holderIdentity": "a",
                                               "leaseDurationSeconds": 15}})
    lease["spec"]["holderIdentity"] = "b"
    st1, _, _ = c.req("PUT", f"{lp}/nodesmith", lease)
    lease["spec"]["holderIdentity"] = "c"
    st2, _, _ = c.req("PUT", f"{lp}/nodesmith", lease)
    check(st == 201 and st1 == 200 and st2 == 409, "Lease: the second writer of a version "
                                                   "loses with 409", (st, st1, st2))


class RawWatch:
    """A watch read straight off the socket: status, headers, then chunked JSON lines."""

    def __init__(self, port, path, token=None, ctx=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if ctx is not None:
            self.sock = ctx.wrap_socket(self.sock, server_hostname="127.0.0.1")
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
                          "Accept: application/json\r\n\r\n".encode())
        self.buf = b""
        self.closed = False
        self.ended = False
        while b"\r\n\r\n" not in self.buf and self._fill(5):
            pass
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {k.strip().lower(): v.strip() for k, v in
                        (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        self.data = b""

    def _fill(self, timeout):
        pending = getattr(self.sock, "pending", lambda: 0)()
        if not pending:
            r, _, _ = select.select([self.sock], [], [], max(0, timeout))
            if not r:
                return False
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def _parse(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i < 0:
                return
            size = int(self.buf[:i].split(b";")[0] or b"0", 16)
            if size == 0:
                if len(self.buf) >= i + 4:
                    self.ended = True
                    self.buf = self.buf[i + 4:]
                return
            if len(self.buf) < i + 2 + size + 2:
                return
            self.data += self.buf[i + 2:i + 2 + size]
            self.buf = self.buf[i + 2 + size + 2:]

    def events(self, n, timeout):
        out = []
        end = time.monotonic() + min(timeout, max(0.1, left()))
        while len(out) < n:
            self._parse()
            while b"\n" in self.data and len(out) < n:
                line, self.data = self.data.split(b"\n", 1)
                if line.strip():
                    out.append(json.loads(line))
            if len(out) >= n or self.ended or self.closed:
                break
            if not self._fill(end - time.monotonic()):
                if self.closed or time.monotonic() >= end:
                    break
        return out

    def close(self):
        self.sock.close()


def test_watch(c):
    path = "/api/v1/namespaces/default/configmaps"
    _, _, lst = c.req("GET", path)
    rv = lst["metadata"]["resourceVersion"]
    w = RawWatch(c.port, f"{path}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
                         f"&labelSelector=w%3D1&timeoutSeconds=5")
    check(w.status == 200 and w.headers.get("transfer-encoding") == "chunked",
          "watch answers 200 with chunked transfer-encoding")
    c.req("POST", path, {"metadata": {"name": "w1", "labels": {"w": "1"}}})
    c.req("PATCH", f"{path}/w1", {"data": {"x": "y"}}, "application/merge-patch+json")
    c.req("PATCH", f"{path}/w1", {"metadata": {"labels": {"w": "2"}}},
          "application/merge-patch+json")
    c.req("DELETE", f"{path}/w1")
    evs = w.events(4, 4)
    types = [e["type"] for e in evs if e["type"] != "BOOKMARK"]
    check(types == ["ADDED", "MODIFIED", "DELETED"],
          "watch: ADDED, MODIFIED, then DELETED when the object leaves the label selector",
          types)
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs if e["type"] !=
           "BOOKMARK"]
    check(rvs == sorted(rvs) and rvs and rvs[0] > int(rv), "watch events carry increasing "
                                                            "resourceVersions", rvs)
    more = w.events(1, 2)
    check(more and more[0]["type"] == "BOOKMARK" and
          more[0]["object"]["metadata"]["resourceVersion"],
          "allowWatchBookmarks brings BOOKMARK events", more)
    w.close()
    w = RawWatch(c.port, "/api/v1/namespaces?watch=true&resourceVersion=0&timeoutSeconds=1")
    evs = w.events(100, 3)
    names = {e["object"]["metadata"]["name"] for e in evs if e["type"] == "ADDED"}
    check({"default", "kube-system"} <= names,
          "resourceVersion=0 starts with synthetic ADDED events for what exists", names)
    check(w.ended, "a watch ends cleanly (terminating chunk) after timeoutSeconds")
    w.close()
    # failure injection: a watch cut after 1 event
    c.req("POST", "/_fake/faults", {"path": "/namespaces\\?watch", "dropWatchAfter": 1})
    w = RawWatch(c.port, "/api/v1/namespaces?watch=true&timeoutSeconds=3")
    evs = w.events(10, 2)
    check(len(evs) == 1 and w.closed and not w.ended,
          "a watch dropped by failure injection is cut after 1 event", len(evs))
    w.close()
    c.req("POST", "/_fake/faults", {"method": "GET", "path": "/api/v1/nodes\\?", "count": 1,
                                    "status": 429, "retryAfter": 1})
    rc, out, err = c.kubectl("get", "nodes", "-o", "name")
    faults = c.req("GET", "/_fake/faults")[2]["faults"]
    check(rc == 0 and "node/n1" in out and faults[-1]["matched"] == 1,
          "kubectl retries an injected 429 with Retry-After", err)
    c.req("DELETE", "/_fake/faults")


def test_pending_burst(c):
    """A burst of pods no node can hold, as before a launch: each is tried once and waits for a
    cluster event (kube-scheduler's unschedulable queue), repeated FailedScheduling events
    aggregate, paged lists with selectors stay consistent, every watch gets every event."""
    ns, n = "burst", 60
    c.req("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    c.req("POST", "/_fake/nodes", {"name": "tainted", "labels": {"pool": "batch"}, "taints": [
        {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]})
    rv = c.req("GET", f"/api/v1/namespaces/{ns}/pods")[2]["metadata"]["resourceVersion"]
    base = f"/api/v1/namespaces/{ns}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=20"
    watches = [RawWatch(c.port, base), RawWatch(c.port, base),
               RawWatch(c.port, base + "&labelSelector=app%3Dodd")]
    st, _, b = c.req("POST", f"/api/v1/namespaces/{ns}/pods",
                     pod("tol", ns, cpu="100m", extra={"nodeSelector": {"pool": "batch"}}))
    check(st == 201, "create a pod for the tainted node", b)
    for i in range(n):
        c.req("POST", f"/api/v1/namespaces/{ns}/pods",
              pod(f"p{i:03d}", ns, labels={"app": "odd" if i % 2 else "even"}, cpu="100"))

    def unschedulable():
        items = c.req("GET", f"/api/v1/namespaces/{ns}/pods")[2]["items"]
        return len([p for p in items if cond(p, "PodScheduled").get("reason") ==
                    "Unschedulable"]) == n + 1
    check(wait_for(unschedulable, 10), f"{n + 1} pods are Unschedulable")
    marked = time.monotonic()
    # every watch sees every event: ADDED then MODIFIED (Unschedulable) for each pod
    evs = [w.events(2 * (n + 1), 5) for w in watches[:2]]
    odd = watches[2].events(n, 5)
    check(len(evs[0]) == 2 * (n + 1) and evs[0] == evs[1],
          "two watches of the same pods get the same events", (len(evs[0]), len(evs[1])))
    check(len(odd) == n and all(e["object"]["metadata"]["labels"]["app"] == "odd" for e in odd),
          "a watch with a label selector gets its pods' events only", len(odd))
    for w in watches:
        w.close()

    def failed_scheduling():
        evs = c.req("GET", f"/api/v1/namespaces/{ns}/events"
                           "?fieldSelector=reason%3DFailedScheduling")[2]
        return {e["involvedObject"]["name"]: e.get("count") for e in evs["items"]}
    # tried once: no retry without a cluster event (a backoff would have retried after 1 s)
    time.sleep(max(0, 1.2 - (time.monotonic() - marked)))
    counts = failed_scheduling()
    check(len(counts) == n + 1 and set(counts.values()) == {1},
          "an unschedulable pod is tried once, then waits for a cluster event",
          sorted(set(counts.values())))
    # pages with a selector: one resourceVersion, no remainingItemCount, a pod deleted between
    # pages still listed (the list is a snapshot)
    names, pages, cont, rvs = [], 0, "", set()
    while pages < 20:
        st, _, b = c.req("GET", f"/api/v1/namespaces/{ns}/pods?limit=12&labelSelector=app%3Dodd"
                                f"&fieldSelector=spec.nodeName%3D" +
                         (f"&continue={urllib.request.quote(cont)}" if cont else ""))
        names += [p["metadata"]["name"] for p in b["items"]]
        rvs.add(b["metadata"]["resourceVersion"])
        check("remainingItemCount" not in b["metadata"], "no remainingItemCount with selectors",
              b["metadata"])
        pages += 1
        if pages == 1:
            c.req("DELETE", f"/api/v1/namespaces/{ns}/pods/p{n - 1:03d}")
        cont = b["metadata"].get("continue")
        if not cont:
            break
    want = [f"p{i:03d}" for i in range(1, n, 2)]
    check(names == want and pages == 3 and len(rvs) == 1,
          "limit/continue with selectors pages through one snapshot, in order", (pages, names[-3:]))
    # a cluster event (the pod deleted above) tries them all again: the same FailedScheduling
    # event aggregates (count 2)
    counts = wait_for(lambda: (lambda k: k if all(k.get(f"p{i:03d}") == 2 for i in range(n - 1))
                               else None)(failed_scheduling()), 5)
    check(bool(counts), "a pod deleted retries the unschedulable pods; FailedScheduling repeats "
                        "aggregate into count", sorted(set((counts or {}).values())))
    # the pod itself updated (a toleration added) is tried again at once
    t0 = time.monotonic()
    st, _, b = c.req("PATCH", f"/api/v1/namespaces/{ns}/pods/tol", {"spec": {"tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}]}},
        "application/strategic-merge-patch+json")
    bound = wait_for(lambda: c.req("GET", f"/api/v1/namespaces/{ns}/pods/tol")[2]["spec"].get(
        "nodeName"), 5)
    check(st == 200 and bound == "tainted" and time.monotonic() - t0 < 3,
          "an unschedulable pod updated with a toleration is bound at once", b)
    st, _, b = c.req("DELETE", f"/api/v1/namespaces/{ns}")
    check(st == 200, "delete the burst namespace", b)
    c.req("DELETE", "/_fake/nodes/tainted")


def test_watch_expired(port, tmp, cafile):
    c = Client(port, token="s3cret", tmp=tmp, cafile=cafile)
    st, _, b = c.req("GET", "/api/v1/namespaces", headers={"Authorization": "Bearer wrong"})
    check(st == 401 and b.get("reason") == "Unauthorized", "a bad bearer token is 401", b)
    rc, out, err = c.kubectl("get", "namespaces", "-o", "name")
    check(rc == 0 and "namespace/default" in out, "kubectl over TLS with the bearer token", err)
    path = "/api/v1/namespaces/default/configmaps"
    st, _, cm = c.req("POST", path, {"metadata": {"name": "churn"}, "data": {"n": "0"}})
    old_rv = cm["metadata"]["resourceVersion"]
    for i in range(30):
        c.req("PATCH", f"{path}/churn", {"data": {"n": str(i)}}, "application/merge-patch+json")
    w = RawWatch(port, f"{path}?watch=1&resourceVersion={old_rv}", "s3cret", c.ctx)
    evs = w.events(1, 3)
    w.close()
    ok = evs and evs[0]["type"] == "ERROR"
    obj = evs[0]["object"] if ok else {}
    check(ok and obj.get("code") == 410 and obj.get("reason") == "Expired" and
          obj.get("message", "").startswith(f"too old resource version: {old_rv} ("),
          "a watch from a compacted resourceVersion gets ERROR 410 Expired", evs)
    st, _, b = c.req("GET", f"{path}?resourceVersion={old_rv}&resourceVersionMatch=Exact")
    check(st == 410 and b.get("reason") == "Expired", "an Exact list at a compacted version is "
                                                        "410", b)
    st, _, lst = c.req("GET", path)
    w = RawWatch(port, f"{path}?watch=1&resourceVersion={lst['metadata']['resourceVersion']}"
                       "&timeoutSeconds=2", "s3cret", c.ctx)
    c.req("PATCH", f"{path}/churn", {"data": {"n": "last"}}, "application/merge-patch+json")
    evs = w.events(1, 2)
    w.close()
    check(evs and evs[0]["type"] == "MODIFIED" and evs[0]["object"]["data"]["n"] == "last",
          "a watch from the list's resourceVersion continues with MODIFIED", evs)


def test_crd(c):
    rc, out, err = c.kubectl("apply", "-f", "-", stdin=CRD)
    check(rc == 0, "kubectl apply CRD", err)
    rc, out, err = c.kubectl("wait", "--for=condition=Established",
                             "crd/nodepools.nodesmith.io", "--timeout=10s")
    check(rc == 0, "kubectl wait for the CRD to be Established", err)
    st, _, b = c.req("GET", "/apis/nodesmith.io/v1")
    res = {r["name"]: r for r in (b or {}).get("resources", [])}
    check("nodepools" in res and not res["nodepools"]["namespaced"] and
          "nodepools/status" in res, "the CRD's group/version is served with discovery", b)
    rc, out, err = c.kubectl("apply", "-f", "-", stdin=NODEPOOL.replace("WEIGHT", "10"))
    check(rc == 0 and "nodepool.nodesmith.io/default created" in out, "create a NodePool", err)
    lst = c.kjson("get", "nodepools")
    items = (lst or {}).get("items", [])
    check(len(items) == 1 and items[0]["spec"]["disruption"] == {
        "consolidateAfter": "0s", "consolidationPolicy": "WhenEmptyOrUnderutilized"},
        "kubectl get nodepools lists it, with schema defaults applied", items)
    rc, out, err = c.kubectl("get", "nodepools")
    check(rc == 0 and re.search(r"^NAME\s+NODECLASS\s+WEIGHT\s+AGE", out, re.M) and
          re.search(r"^default\s+default\s+10\s+", out, re.M),
          "additionalPrinterColumns in the table", out)
    rc, out, err = c.kubectl("apply", "-f", "-", stdin=NODEPOOL.replace("WEIGHT", "1000"))
    check(rc != 0 and "spec.weight in body should be less than or equal to 100" in err,
          "schema validation rejects an out-of-range weight", err)
    st, _, b = c.req("PATCH", "/apis/nodesmith.io/v1/nodepools/default", {"spec": {}},
                     "application/strategic-merge-patch+json")
    check(st == 415, "strategic merge patch on a custom resource is 415", b)
    st, _, np = c.req("PATCH", "/apis/nodesmith.io/v1/nodepools/default/status",
                      {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                      "application/merge-patch+json")
    check(st == 200 and np["status"]["conditions"][0]["type"] == "Ready" and
          np["metadata"]["generation"] == 1, "status subresource update keeps generation", np)


def main():
    if not os.access(KUBECTL, os.X_OK) or not shutil.which("openssl"):
        print("FAIL: this test needs kubectl (1.32) and the openssl CLI")
        return 1
    tmp = tempfile.mkdtemp(prefix="kubeapi-test-")
    try:
        _, port = start(["--grace-scale", "0.05", "--ready-delay", "0.2",
                         "--bookmark-interval", "0.5",
                         "--node", json.dumps({"name": "n1", "labels": {"pool": "general"},
                                               "capacity": {"cpu": "2", "memory": "8Gi",
                                                            "pods": "110"}})])
        cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
                        "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True,
                       timeout=20)
        _, port2 = start(["--watch-history", "20", "--token", "s3cret", "--tls-cert", cert,
                          "--tls-key", key])
        c = Client(port, tmp=tmp)
        tmp2 = os.path.join(tmp, "second")
        os.makedirs(tmp2)
        c.req("POST", "/api/v1/namespaces", {"metadata": {"name": "sched"}})
        for t in (test_discovery, test_scheduler, test_workloads, test_evictions, test_drain,
                  test_graceful_and_violation, test_finalizers, test_conflicts, test_watch,
                  test_crd, test_pending_burst):
            if left() <= 0:
                check(False, f"time budget exhausted before {t.__name__}")
                break
            t0 = time.monotonic()
            t(c)
            print(f"{t.__name__}: {time.monotonic() - t0:.1f}s", flush=True)
        test_watch_expired(port2, tmp2, cert)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
