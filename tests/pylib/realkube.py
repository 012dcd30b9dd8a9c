"""The real control plane (cluster.Cluster) as tests that drive Kubernetes objects themselves use
it: Nodes registered by emulated kubelets (tests/fakes/kubelet.py), workloads created as admin,
the eviction audit (kubeaudit.PodAudit), the fault proxy (tests/fakes/kubeproxy.py) and
kubeconfigs for the agents.

    k = RealKube(workdir, grace_factor=0.05).start(packaging=True, fault_proxy=True)
    k.register_nodes("n1", "n2", instances={"n1": "i-1"}, capacity={...}, labels={...})
    k.deployment("ns", "web", 3, ready_after=40); k.pdb("ns", "web", {"app": "web"}, min_available=2)
    k.audit.evictions(node, decision); k.proxy.fault(...)
    k.agent_kubeconfig(name, via_proxy=False)   # the coordinator's ServiceAccount (packaging)
    k.node_kubeconfig(node)                      # the node's own kubelet identity
    k.stop()

Kubelets register NotReady and tainted, go Ready after `boot_delay`, and finish pods in their
grace period × grace_factor; register_nodes() returns once the real node lifecycle controller
has removed the not-ready taint (the scheduler then places pods there).
"""
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fakes"))
from cluster import Cluster  # noqa: E402
from kubeaudit import PodAudit  # noqa: E402
from kubelet import Kubelet  # noqa: E402
from nsharness import wait_for  # noqa: E402

PAUSE = "registry.k8s.io/pause:3.10"


def ready(obj):
    """The object's Ready condition is True (a Node or a Pod)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def node_spec(name, instance=None, capacity=None, labels=None, zone="us-east-1a"):
    """What tests/fakes/kubelet.py registers for a node."""
    capacity = capacity or {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"name": name,
            "labels": dict({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": zone,
                            "node.kubernetes.io/instance-type": "m5.large"}, **(labels or {})),
            "capacity": capacity, "allocatable": capacity,
            "providerID": f"aws:///{zone}/{instance or 'i-' + name}", "internalIP": "10.0.0.1"}


def pdb_object(ns, name, match_labels, min_available=None, max_unavailable=None):
    """A policy/v1 PodDisruptionBudget selecting match_labels."""
    spec = {"selector": {"matchLabels": match_labels}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def daemonset_object(ns, name, image, cpu="10m", tolerations=None):
    """An apps/v1 DaemonSet of one container (pods labelled ds=NAME)."""
    spec = {"containers": [{"name": "c", "image": image, "resources": {"requests": {"cpu": cpu}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": spec}}}


class RealKube:
    def __init__(self, workdir, grace_factor=0.05, boot_delay=0.3, apiserver_args=(), log=print):
        self.d = workdir
        self.c = Cluster(os.path.join(workdir, "cluster"), apiserver_args=apiserver_args)
        self.grace_factor = grace_factor
        self.boot_delay = boot_delay
        self.log = log
        self.kubelets = {}
        self.audit = self.proxy = None

    def start(self, packaging=True, fault_proxy=True, audit=True, proxy_idle_timeout=None):
        """The control plane; packaging: the shipped manifests (`kubectl apply -k`), with the
        in-cluster coordinator scaled to 0 (tests run it as a local process)."""
        print(f"control plane start-up: {self.c.start()}s", flush=True)
        if audit:
            self.audit = PodAudit(self.c).start()
        if packaging:
            self.c.install_packaging()
            self.c.kubectl("-n", "nodesmith", "scale", "deployment/nodesmith-coordinator", "--replicas=0")
            wait_for("no coordinator pod", lambda: not self.get("/api/v1/namespaces/nodesmith/pods")["items"],
                     30, 0.2)
        if fault_proxy:
            self.proxy = self.c.start_fault_proxy(idle_timeout=proxy_idle_timeout)
        return self

    def stop(self):
        for k in self.kubelets.values():
            k.stop()
        if self.audit:
            self.audit.stop()
        self.c.stop()

    # ---- identities ------------------------------------------------------------------------
    def agent_kubeconfig(self, name, via_proxy=False):
        """A kubeconfig with a token of the coordinator's ServiceAccount (RBAC as shipped: it
        may cordon, taint, evict and remove finalizers, as the coordinator's own drain does)."""
        return self.c.service_account_kubeconfig(
            "nodesmith", "nodesmith-coordinator", path=os.path.join(self.d, f"{name}.kubeconfig"),
            server=self.proxy.server if via_proxy else None)

    def node_kubeconfig(self, node):
        """The node's kubelet kubeconfig (CN=system:node:NODE), what the agent uses on a node."""
        return self.c.write_kubeconfig(os.path.join(self.d, f"node-{node}.kubeconfig"),
                                       self.c.node_identity(node))

    # ---- requests as admin -----------------------------------------------------------------
    def req(self, method, path, body=None, ctype="application/json", ok=(200, 201, 202)):
        st, obj = self.c.api(method, path, body, ctype=ctype)
        if ok and st not in ok:
            raise AssertionError(f"{method} {path}: HTTP {st}: {obj}")
        return obj

    def get(self, path):
        return self.req("GET", path)

    def node(self, name):
        st, n = self.c.api("GET", f"/api/v1/nodes/{name}")
        return n if st == 200 else None

    def pods(self, node=None, ns=None):
        path = f"/api/v1/namespaces/{ns}/pods" if ns else "/api/v1/pods"
        if node:
            path += "?fieldSelector=" + urllib.parse.quote(f"spec.nodeName={node}")
        return self.get(path)["items"]

    # ---- nodes -----------------------------------------------------------------------------
    def register_nodes(self, *names, instances=None, capacity=None, labels=None):
        """Each Node registered by its own emulated kubelet (NotReady, tainted, then Ready);
        returns once the node lifecycle controller has removed the not-ready taint from each."""
        for name in names:
            ident = self.c.node_identity(name)
            spec = node_spec(name, (instances or {}).get(name), capacity, labels)
            self.kubelets[name] = Kubelet(self.c.server, self.c.ca, ident.cert, ident.key, spec,
                                          boot_delay=self.boot_delay, grace_factor=self.grace_factor,
                                          log=self.log).start()

        def usable(name):
            n = self.node(name)
            return n and ready(n) and not any(t["key"] == "node.kubernetes.io/not-ready"
                                              for t in n["spec"].get("taints") or [])
        for name in names:
            wait_for(f"{name} Ready and untainted", lambda n=name: usable(n), 60, 0.2)

    # ---- workloads -------------------------------------------------------------------------
    def namespace(self, ns):
        self.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                 ok=(200, 201, 409))
        # pods need the namespace's default ServiceAccount (the ServiceAccount admission plugin)
        wait_for(f"{ns}'s default ServiceAccount", lambda: self.c.api(
            "GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200, 30, 0.1)

    def deployment(self, ns, name, replicas, cpu="50m", memory="64Mi", grace=30, annotations=None,
                   node_selector=None, priority_class=None, ready_after=None):
        """ready_after: seconds from Running to Ready (a readiness probe's initialDelaySeconds,
        times the kubelets' grace factor)."""
        container = {"name": "c", "image": PAUSE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        if ready_after:
            container["readinessProbe"] = {"exec": {"command": ["true"]}, "initialDelaySeconds": int(ready_after)}
        spec = {"terminationGracePeriodSeconds": grace, "containers": [container]}
        if node_selector:
            spec["nodeSelector"] = node_selector
        if priority_class:
            spec["priorityClassName"] = priority_class
        body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                                      "spec": spec}}}
        return self.req("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body)

    def daemonset(self, ns, name, cpu="10m", tolerations=None):
        return self.req("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets",
                        daemonset_object(ns, name, PAUSE, cpu, tolerations))

    def mirror_pod(self, ns, name, node):
        """A static pod's mirror, created as the kubelet does: by the node itself, owned by its
        Node (NodeRestriction allows a node no other pod)."""
        k = self.kubelets[node]
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns,
                             "annotations": {"kubernetes.io/config.mirror": "0123456789abcdef",
                                             "kubernetes.io/config.source": "file"},
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                  "uid": k.node_uid, "controller": True}]},
                "spec": {"nodeName": node, "containers": [{"name": "c", "image": PAUSE}]}}
        st, out = k.req("POST", f"/api/v1/namespaces/{ns}/pods", body)
        assert st == 201, (st, out)
        return out

    def pdb(self, ns, name, match_labels, min_available=None, max_unavailable=None):
        """A PodDisruptionBudget; returns once the disruption controller has computed it."""
        path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
        self.req("POST", path, pdb_object(ns, name, match_labels, min_available, max_unavailable))
        wait_for(f"PDB {ns}/{name} observed", lambda: (lambda p: (p.get("status") or {}).get(
            "observedGeneration") == p["metadata"]["generation"])(self.get(f"{path}/{name}")), 30, 0.2)
