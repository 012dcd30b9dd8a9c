"""Emulated kubelets for the real control plane (tests/pylib/cluster.py), as KWOK does it: no
containers, only what a kubelet says to the API server, under the node's own identity.

    k = Kubelet(server, ca, cert, key, node, boot_delay=1.0, grace_factor=0.1, log=print)
    k.start()        # register the Node (NotReady, tainted), Lease heartbeats, pods
    k.die()          # the kubelet crashes: nothing more is written (heartbeats stop)
    k.shutdown(30)   # graceful node shutdown: NotReady, pods killed within 30 s × factor, Failed
    k.stop()         # stop the threads (as die(), without a log line)

`node` is {"name", "labels", "taints", "capacity", "allocatable", "providerID", "internalIP",
"arch", "external_cloud_provider"}. What it does, with the client certificate
CN=system:node:NAME, O=system:nodes (so the Node authorizer and NodeRestriction apply):

  - POST /api/v1/nodes: the Node with its labels, the given taints (startup taints from the
    user data) plus `node.kubernetes.io/not-ready:NoSchedule` as a kubelet registers, and
    `node.cloudprovider.kubernetes.io/uninitialized:NoSchedule` with an external cloud
    provider; Ready False (KubeletNotReady). A 409 for a Node still being deleted is retried.
  - A Lease in kube-node-lease (owner: the Node) renewed every `renew_interval` seconds; the node
    lifecycle controller reads it (a dead kubelet's Node goes Unknown after its grace period).
  - After `boot_delay` seconds, Ready True (KubeletReady); the node lifecycle controller then
    removes the not-ready taint. Conditions are sent again every `status_interval`.
  - Pods bound to the Node (list + watch, fieldSelector spec.nodeName=NAME): Pending -> Running
    and Ready after `start_delay` (a readiness probe's initialDelaySeconds × `grace_factor` before
    Ready); each pod's steps run on a pool of 8 workers, as the kubelet's pod workers do; a pod being deleted is finished (containers terminated, then
    DELETE with gracePeriodSeconds 0 and the pod's UID as precondition) after its
    deletionGracePeriodSeconds × `grace_factor` (factor > 0: the grace always shows). As the
    kubelet's status manager does, a Running pod the API shows not Ready while this kubelet has it
    Ready (the node lifecycle controller marks a NotReady node's pods so) is written Ready again.
  - shutdown(period): the kubelet's graceful node shutdown: Ready False ("node is shutting
    down"), every running pod gets min(its grace, period) × factor and then phase Failed,
    reason Terminated, with a DisruptionTarget condition; the pods are not deleted. With
    period 0 (shutdownGracePeriod 0s: the shutdown manager off) nothing is written: the node
    just goes.

Python standard library only.
"""
import concurrent.futures
import heapq
import http.client
import itertools
import os
import ssl
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timezone

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from cluster import Informer, api_request  # noqa: E402

KUBELET_VERSION = "v1.37.2"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
UNINITIALIZED_TAINT = {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true",
                       "effect": "NoSchedule"}
LEASE_NS = "kube-node-lease"
USER_AGENT = f"kubelet/{KUBELET_VERSION} (linux/amd64) nodesmith-test-emulation"


def now_rfc3339(micro=False):
    t = datetime.now(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if micro else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(pod):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class Kubelet:
    def __init__(self, server, ca, cert, key, node, boot_delay=1.0, grace_factor=1.0,
                 start_delay=0.2, renew_interval=2.0, lease_seconds=40, status_interval=30.0,
                 log=None):
        if not grace_factor > 0:
            raise ValueError("grace_factor must be above 0: pods take their grace period to go")
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)
        self.node = node
        self.name = node["name"]
        self.boot_delay = boot_delay
        self.grace_factor = grace_factor
        self.start_delay = start_delay
        self.renew_interval = renew_interval
        self.lease_seconds = lease_seconds
        self.status_interval = status_interval
        self.log = log or (lambda msg: None)
        self.dead = threading.Event()        # no more writes: died, stopped or shut down
        self.ready = False
        self.registered = threading.Event()
        self.shutting_down = False
        self.node_uid = None
        self.lock = threading.Lock()
        self.pods = {}                       # uid -> {"ns", "name", "started", "finishing"}
        self.timers = []                     # heap of (due, seq, fn)
        self.seq = itertools.count()
        self.wake = threading.Condition(self.lock)
        self.threads = []
        self.informer = None
        self.workers = concurrent.futures.ThreadPoolExecutor(max_workers=8,
                                                             thread_name_prefix=f"kubelet-pod-{self.name}")
        self.errors = 0

    # ---- HTTP as the node ------------------------------------------------------------------
    def req(self, method, path, body=None, ctype="application/json", timeout=10):
        """(status, JSON) as the node; a connection error is status 0."""
        try:
            return api_request(self.server, self.ctx, method, path, body, ctype=ctype,
                               timeout=timeout, user_agent=USER_AGENT)
        except (OSError, http.client.HTTPException) as e:
            return 0, {"message": str(e)}

    # ---- life cycle ------------------------------------------------------------------------
    def start(self):
        for fn, name in ((self._main, "main"), (self._timer_loop, "timers")):
            t = threading.Thread(target=fn, daemon=True, name=f"kubelet-{name}-{self.name}")
            t.start()
            self.threads.append(t)
        return self

    def die(self):
        """The kubelet process dies: heartbeats, status and pod handling stop at once."""
        if not self.dead.is_set():
            self.log(f"kubelet on {self.name} died: heartbeats stop")
        self.stop()

    def stop(self):
        self.dead.set()
        with self.lock:
            self.wake.notify_all()
        self.workers.shutdown(wait=False, cancel_futures=True)
        if self.informer is not None:
            self.informer.close()  # its open watch would keep the API server from exiting

    def join(self, timeout=10):
        for t in self.threads:
            t.join(timeout)

    def shutdown(self, period):
        """Graceful node shutdown (the instance stops or terminates): returns when every pod
        is terminated or the period × factor has passed, then the kubelet is gone. A period of 0
        is the kubelet's shutdownGracePeriod 0: its shutdown manager is off (no logind lock, no
        pod touched), so the node just goes, as a dead kubelet's."""
        if self.dead.is_set() or not self.registered.is_set() or period <= 0:
            if period <= 0 and not self.dead.is_set():
                self.log(f"kubelet on {self.name}: node shutting down; graceful node shutdown off "
                         "(shutdownGracePeriod 0): pods left to the agent's drain")
            self.stop()
            return
        self.shutting_down = True
        self.log(f"kubelet on {self.name}: node shutting down, grace period {period}s")
        self._set_ready(False, "KubeletNotReady", "node is shutting down")
        deadline = time.monotonic() + period * self.grace_factor
        with self.lock:
            pods = [(uid, p) for uid, p in self.pods.items() if not p.get("finished")]
        ends = []
        for uid, p in pods:
            g = min(p.get("grace", 30), period) * self.grace_factor
            ends.append((time.monotonic() + g, uid, p))
        for end, uid, p in sorted(ends, key=lambda x: x[0]):
            left = min(end, deadline) - time.monotonic()
            if left > 0 and self.dead.wait(left):
                return
            if p.get("finishing"):  # already being deleted: the kubelet finishes the deletion
                self._finish_pod(uid, p)
            else:
                self._terminate_status(p, uid, phase="Failed", reason="Terminated",
                                       message="Pod was terminated in response to imminent node shutdown.")
        self.stop()

    # ---- the main thread: register, lease, status, pods ------------------------------------
    def _main(self):
        try:
            if not self._register():
                return
            self._renew_lease()
            t_boot = time.monotonic() + self.boot_delay
            self._after(self.boot_delay, lambda: self._set_ready(True, "KubeletReady",
                                                                 "kubelet is posting ready status"))
            w = threading.Thread(target=self._pods_loop, daemon=True, name=f"kubelet-pods-{self.name}")
            w.start()
            self.threads.append(w)
            last_status = time.monotonic()
            while not self.dead.wait(self.renew_interval):
                self._renew_lease()
                if time.monotonic() - last_status >= self.status_interval and time.monotonic() > t_boot:
                    self._set_ready(self.ready and not self.shutting_down, "KubeletReady",
                                    "kubelet is posting ready status", quiet=True)
                    last_status = time.monotonic()
        except Exception as e:  # a bug here must show, not hang the node silently
            self.log(f"kubelet on {self.name}: {type(e).__name__}: {e}")

    def _node_object(self):
        n = self.node
        taints = [dict(t) for t in n.get("taints") or []]
        keys = {(t["key"], t["effect"]) for t in taints}
        extra = [NOT_READY_TAINT] + ([UNINITIALIZED_TAINT] if n.get("external_cloud_provider") else [])
        taints += [dict(t) for t in extra if (t["key"], t["effect"]) not in keys]
        ts = now_rfc3339()
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": dict(n.get("labels") or {}),
                             "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                             "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
                "spec": {"providerID": n.get("providerID", ""), "taints": taints},
                "status": {"capacity": n.get("capacity", {}), "allocatable": n.get("allocatable", {}),
                           "conditions": self._conditions(False, "KubeletNotReady",
                                                          "container runtime network not ready", ts),
                           "addresses": [{"type": "InternalIP", "address": n.get("internalIP", "127.0.0.1")},
                                         {"type": "Hostname", "address": self.name}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                                        "kernelVersion": "6.1.0", "osImage": "Amazon Linux 2023",
                                        "containerRuntimeVersion": "containerd://1.7.0",
                                        "kubeletVersion": KUBELET_VERSION,
                                        "kubeProxyVersion": "", "operatingSystem": "linux",
                                        "architecture": n.get("arch", "amd64")}}}

    @staticmethod
    def _conditions(ready, reason, message, ts):
        out = [{"type": t, "status": "False", "reason": r, "message": m,
                "lastHeartbeatTime": ts, "lastTransitionTime": ts}
               for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                               ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                               ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))]
        out.append({"type": "Ready", "status": "True" if ready else "False", "reason": reason,
                    "message": message, "lastHeartbeatTime": ts, "lastTransitionTime": ts})
        return out

    def _register(self):
        body = self._node_object()
        deadline = time.monotonic() + 60
        while not self.dead.is_set():
            st, out = self.req("POST", "/api/v1/nodes", body)
            if st == 201:
                self.node_uid = out["metadata"]["uid"]
                break
            if st == 409:
                st2, cur = self.req("GET", f"/api/v1/nodes/{self.name}")
                if st2 == 200 and not cur["metadata"].get("deletionTimestamp"):
                    # our own earlier registration (a kubelet restart): take it over
                    self.node_uid = cur["metadata"]["uid"]
                    break
            if time.monotonic() > deadline:
                self.log(f"kubelet on {self.name}: registration failed: HTTP {st} {str(out)[:300]}")
                return False
            self.dead.wait(0.5)
        else:
            return False
        self.registered.set()
        self.log(f"kubelet registered Node {self.name} NotReady, taints "
                 f"{[t['key'] + ':' + t['effect'] for t in body['spec']['taints']]}")
        return True

    def _renew_lease(self):
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{self.name}"
        st, cur = self.req("GET", path)
        if self.dead.is_set():
            return
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": self.lease_seconds,
                "renewTime": now_rfc3339(micro=True)}
        if st == 404:
            st, out = self.req("POST", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": LEASE_NS, "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.node_uid}]},
                "spec": spec})
        elif st == 200:
            cur["spec"].update(spec)
            st, out = self.req("PUT", path, cur)
        if st not in (200, 201):
            self.errors += 1

    def _set_ready(self, ready, reason, message, quiet=False):
        if self.dead.is_set():
            return
        if ready and self.shutting_down:
            return
        ts = now_rfc3339()
        patch = {"status": {"conditions": self._conditions(ready, reason, message, ts)}}
        if quiet and ready == self.ready:
            for c in patch["status"]["conditions"]:
                c.pop("lastTransitionTime")
        st, out = self.req("PATCH", f"/api/v1/nodes/{self.name}/status", patch,
                           ctype="application/strategic-merge-patch+json")
        if st == 200:
            if ready != self.ready:
                self.log(f"kubelet: Node {self.name} {'Ready' if ready else 'NotReady'} ({reason})")
            self.ready = ready
        else:
            self.errors += 1
            if not quiet:
                self.log(f"kubelet on {self.name}: status update: HTTP {st} {str(out)[:200]}")

    # ---- timers ----------------------------------------------------------------------------
    def _after(self, delay, fn):
        with self.lock:
            heapq.heappush(self.timers, (time.monotonic() + delay, next(self.seq), fn))
            self.wake.notify()

    def _timer_loop(self):
        while True:
            with self.lock:
                while not self.dead.is_set() and (not self.timers or self.timers[0][0] > time.monotonic()):
                    self.wake.wait(None if not self.timers else max(0.0, self.timers[0][0] - time.monotonic()))
                if self.dead.is_set():
                    return
                _, _, fn = heapq.heappop(self.timers)
            # each pod's work on its own worker, as the kubelet's pod workers do: a node finishing
            # 100 pods at once does not take 100 round trips in a row
            try:
                self.workers.submit(self._run, fn)
            except RuntimeError:  # stopped meanwhile
                return

    def _run(self, fn):
        if self.dead.is_set():
            return
        try:
            fn()
        except Exception as e:
            self.log(f"kubelet on {self.name}: {type(e).__name__}: {e}")

    # ---- pods ------------------------------------------------------------------------------
    def _pods_loop(self):
        sel = urllib.parse.quote(f"spec.nodeName={self.name}")
        inf = self.informer = Informer(self.server, self.ctx, f"/api/v1/pods?fieldSelector={sel}",
                                       self._pod_event, self.dead, headers={"User-Agent": USER_AGENT},
                                       on_error=self._count_error)
        if not self.dead.is_set():
            inf.run()

    def _count_error(self, what):
        self.errors += 1

    def _pod_event(self, kind, pod):
        md, uid = pod["metadata"], pod["metadata"]["uid"]
        if self.dead.is_set():
            return
        with self.lock:
            if kind == "DELETED":
                self.pods.pop(uid, None)
                return
            p = self.pods.setdefault(uid, {"ns": md["namespace"], "name": md["name"]})
            p["grace"] = pod["spec"].get("terminationGracePeriodSeconds", 30)
            phase = (pod.get("status") or {}).get("phase", "Pending")
            deleting = md.get("deletionTimestamp") is not None
            if deleting and not p.get("finishing"):
                p["finishing"] = True
                g = md.get("deletionGracePeriodSeconds")
                g = p["grace"] if g is None else g
                delay = 0.0 if phase in ("Succeeded", "Failed") else g * self.grace_factor
                action = ("finish", delay)
            elif not deleting and phase == "Pending" and not p.get("started") and not self.shutting_down:
                p["started"] = True
                action = ("start", self.start_delay)
            elif not deleting and phase == "Running" and p.get("ready") and not p.get("finishing") and \
                    not p.get("resyncing") and not self.shutting_down and not _ready(pod):
                # the kubelet's status manager: the API's status differs from the kubelet's (the
                # node lifecycle controller marks pods not ready while their node is NotReady or
                # Unknown); it is written again
                p["resyncing"] = True
                action = ("resync", 0.0)
            else:
                action = None
        if action and action[0] == "start":
            self._after(action[1], lambda: self._start_pod(uid, p))
        elif action and action[0] == "resync":
            self._after(action[1], lambda: self._resync(uid, p))
        elif action:
            self._after(action[1], lambda: self._finish_pod(uid, p))

    def _start_again(self, uid, p, st, out):
        """The kubelet's pod worker syncs again, as long as the pod exists: a timed-out or refused
        request (a loaded API server), and a 403 from the Node authorizer, whose graph of which
        pod is bound to which node follows the binding a moment behind the kubelet's own watch,
        do not leave the pod Pending for good (they did: 6 of 1 000 pods in bench/scaleout)."""
        if st != 404:
            if not p.get("start_failures"):
                self.log(f"kubelet on {self.name}: starting {p['ns']}/{p['name']}: HTTP {st} "
                         f"{str(out)[:160]}; trying again")
            p["start_failures"] = p.get("start_failures", 0) + 1
            self._after(1.0, lambda: self._start_pod(uid, p))

    def _start_pod(self, uid, p):
        if self.dead.is_set() or p.get("finishing") or self.shutting_down:
            return
        st, pod = self.req("GET", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}")
        if st != 200:
            return self._start_again(uid, p, st, pod)
        if pod["metadata"]["uid"] != uid:
            return
        # a readiness probe's initialDelaySeconds (x the factor) before the pod is Ready
        delay = max([((c.get("readinessProbe") or {}).get("initialDelaySeconds") or 0)
                     for c in pod["spec"].get("containers", [])] + [0]) * self.grace_factor
        st = self._running_status(uid, p, pod, ready=delay <= 0, start=True)
        if st is not None and st != 200:
            return self._start_again(uid, p, st, None)
        if delay > 0:
            self._after(delay, lambda: self._running_status(uid, p, None, ready=True))

    def _resync(self, uid, p):
        try:
            self._running_status(uid, p, None, ready=True)
        finally:
            p["resyncing"] = False

    def _running_status(self, uid, p, pod, ready, start=False):
        if self.dead.is_set() or p.get("finishing") or self.shutting_down:
            return
        if pod is None:
            st, pod = self.req("GET", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}")
            if st != 200 or pod["metadata"]["uid"] != uid:
                return
        ts = now_rfc3339()
        started = (pod.get("status") or {}).get("startTime") or ts
        cstat = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": ready,
                  "started": True, "restartCount": 0, "containerID": f"containerd://{uid}-{i}",
                  "state": {"running": {"startedAt": started}}}
                 for i, c in enumerate(pod["spec"].get("containers", []))]
        conds = [{"type": t, "status": "True" if ready or t not in ("Ready", "ContainersReady") else "False",
                  "lastTransitionTime": ts}
                 for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                           "PodScheduled")]
        ip = self.node.get("internalIP", "127.0.0.1")
        patch = {"status": {"phase": "Running", "conditions": conds, "containerStatuses": cstat}}
        if start:
            patch["status"].update({"hostIP": ip, "hostIPs": [{"ip": ip}], "podIP": ip,
                                    "podIPs": [{"ip": ip}], "startTime": started})
        st, out = self.req("PATCH", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}/status", patch,
                           ctype="application/strategic-merge-patch+json")
        if st != 200:
            self.errors += 1
        elif ready:
            p["ready"] = True
        return st

    def _terminate_status(self, p, uid, phase, reason=None, message=None):
        ts = now_rfc3339()
        st, pod = self.req("GET", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}")
        if st != 200 or pod["metadata"]["uid"] != uid:
            return None
        cstat = [{"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                  "started": False, "restartCount": 0, "containerID": f"containerd://{uid}-{i}",
                  "state": {"terminated": {"exitCode": 143 if phase == "Failed" else 0,
                                           "reason": "Error" if phase == "Failed" else "Completed",
                                           "finishedAt": ts}}}
                 for i, c in enumerate(pod["spec"].get("containers", []))]
        status = {"phase": phase, "containerStatuses": cstat, "conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": ts, "reason": "PodCompleted"},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": ts,
             "reason": "PodCompleted"}]}
        if reason:
            status["reason"], status["message"] = reason, message
            status["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                         "lastTransitionTime": ts, "reason": "TerminationByKubelet",
                                         "message": message})
        st, out = self.req("PATCH", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}/status",
                           {"status": status}, ctype="application/strategic-merge-patch+json")
        p["finished"] = True
        return pod

    def _finish_pod(self, uid, p):
        if self.dead.is_set():
            return
        pod = self._terminate_status(p, uid, phase="Succeeded")
        if pod is None:
            return
        st, out = self.req("DELETE", f"/api/v1/namespaces/{p['ns']}/pods/{p['name']}",
                           {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                            "preconditions": {"uid": uid}})
        if st not in (200, 404, 409):
            self.errors += 1
            self.log(f"kubelet on {self.name}: delete {p['ns']}/{p['name']}: HTTP {st} {str(out)[:200]}")

