"""The control loops a real cluster runs: kube-scheduler, the kubelet (emulated), and
kube-controller-manager's node lifecycle, taint eviction, ReplicaSet, Deployment, DaemonSet,
disruption (PDB status), garbage collector, namespace, pod GC, plus the CRD establishing
controller of kube-apiserver."""

import hashlib
import json
import logging
import random
import threading
import time
from fractions import Fraction

from . import crd as crdmod
from . import podutil
from .selectors import node_matches_pod_affinity_and_selector, selector_from_object
from .util import (ApiError, deep_copy, fnv32a, now_micro, now_rfc3339, parse_time,
                   quantity_or_zero, safe_encode)

log = logging.getLogger("kubeapi.controllers")

PODS = ("", "pods")
NODES = ("", "nodes")
RS = ("apps", "replicasets")
DEPLOY = ("apps", "deployments")
DS = ("apps", "daemonsets")
PDB = ("policy", "poddisruptionbudgets")
NAMESPACES = ("", "namespaces")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
LEASES = ("coordination.k8s.io", "leases")
EVENTS = ("", "events")

FAKE_ANN = "kubeapi.fake/"
CONTROLLER_NAMES = ("crd", "namespace", "nodelifecycle", "taint", "scheduler", "kubelet",
                    "deployment", "replicaset", "daemonset", "disruption", "gc", "podgc",
                    "events", "nodelease")

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

# kube-scheduler's podMaxInUnschedulablePodsDuration: an unschedulable pod is retried at a
# cluster event that may make it fit (a node added or changed, a pod deleted or finished, the
# pod itself updated), else after this long
UNSCHEDULABLE_MAX_SECONDS = 300.0
# Controllers that, like kube-controller-manager's informer-driven ones, reconcile when objects
# of their kinds change (None: any kind but Events), else every resync seconds (time matters to
# minReadySeconds and rollouts; not to the garbage collector or the Event cap).
WATCHED_KINDS = {"deployment": ((DEPLOY, RS, PODS), 1.0), "replicaset": ((RS, PODS), 1.0),
                 "daemonset": ((DS, NODES, PODS), 1.0), "gc": (None, 10.0),
                 "events": ((EVENTS,), 10.0)}


def _md(o):
    return o.get("metadata") or {}


def _scheduling_inputs(pod):
    """What kube-scheduler compares to tell a pod update from a status update: all but the
    status, resourceVersion, generation and managedFields."""
    md = {k: v for k, v in _md(pod).items()
          if k not in ("resourceVersion", "generation", "managedFields")}
    return md, pod.get("spec")


def _owned_by(obj, owner):
    ref = podutil.controller_ref(obj)
    return ref is not None and ref.get("uid") == _md(owner).get("uid")


def _owner_ref(owner, kind, api_version):
    return {"apiVersion": api_version, "kind": kind, "name": _md(owner)["name"],
            "uid": _md(owner)["uid"], "controller": True, "blockOwnerDeletion": True}


def _scaled(v, total, round_up):
    if isinstance(v, int):
        return v
    s = str(v)
    if s.endswith("%"):
        pct = int(s[:-1])
        return -(-pct * total // 100) if round_up else pct * total // 100
    return int(s)


class Controllers:
    def __init__(self, api, opts):
        self.api = api
        self.store = api.store
        self.opts = opts
        self.paused = set()
        self.stop = threading.Event()
        self.thread = None
        self.pod_state = {}       # pod uid -> kubelet bookkeeping
        self.sched_state = {}     # unschedulable pod uid -> (epoch, retry time)
        self.sched_epoch = 0
        self.taint_seen = {}      # (node, key, effect) -> first seen
        self.orphan_seen = {}     # pod uid -> first seen without its node
        self.crd_registered = {}  # crd name -> resourceVersion registered
        self.node_ips = {}
        self.lease_renewed = {}
        self.managed_nodes = set()   # nodes registered through the kubelet emulation
        self.stopped_kubelets = set()
        self.last_tick = 0.0
        self.synced = {}          # controller -> (changes it saw, when) for WATCHED_KINDS
        self.bound = set()        # keys of the pods bound to a node
        self.sched_seen = None    # (pod and node changes, epoch) at the last scheduler pass
        self.sched_next = 0.0     # the earliest retry of an unschedulable pod
        store_listener = self._on_event
        self.store.listeners.append(store_listener)

    # -- loop ---------------------------------------------------------------------------------
    def start(self):
        self.thread = threading.Thread(target=self._run, name="controllers", daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            self.api.wake.wait(0.1)
            self.api.wake.clear()
            dt = time.monotonic() - self.last_tick
            if dt < 0.02:
                time.sleep(0.02 - dt)
            self.last_tick = time.monotonic()
            self.tick()

    def _changes(self, name):
        kinds = WATCHED_KINDS[name][0]
        ch = self.store.skey_changes
        if kinds is None:
            return self.store.changes - ch[EVENTS]
        return tuple(ch[k] for k in kinds)

    def _needs_sync(self, name):
        """For WATCHED_KINDS: whether objects of its kinds changed since its last pass (which
        its own writes do too), or its resync is due."""
        if name not in WATCHED_KINDS:
            return True
        seen = self._changes(name)
        last = self.synced.get(name)
        now = time.monotonic()
        if last is not None and last[0] == seen and now - last[1] < WATCHED_KINDS[name][1]:
            return False
        self.synced[name] = (seen, now)
        return True

    def tick(self):
        for name in CONTROLLER_NAMES:
            if name in self.paused or self.stop.is_set():
                continue
            try:
                with self.store.lock:
                    if self._needs_sync(name):
                        getattr(self, "c_" + name)()
            except Exception:
                log.exception("controller %s failed", name)

    def _on_event(self, ev):
        if ev.skey == NODES:
            self.sched_epoch += 1
        elif ev.skey == PODS:
            if ev.type == "DELETED":
                self.bound.discard(ev.key)
            elif (ev.obj.get("spec") or {}).get("nodeName"):
                self.bound.add(ev.key)
            if ev.type == "MODIFIED" and ev.prev is not None and \
                    _md(ev.prev).get("uid") in self.sched_state and \
                    _scheduling_inputs(ev.prev) != _scheduling_inputs(ev.obj):
                del self.sched_state[_md(ev.prev)["uid"]]
            if ev.type == "DELETED" or (ev.type == "MODIFIED" and not podutil.is_deleting(ev.prev)
                                        and podutil.is_deleting(ev.obj)) or \
                    (ev.type == "MODIFIED" and podutil.is_terminal(ev.obj)
                     and not podutil.is_terminal(ev.prev)):
                self.sched_epoch += 1

    def now(self):
        return time.time()

    def _rt(self, skey):
        return self.api.registry.by_skey(skey)

    def _mutate(self, skey, obj, fn, sub=None, actor="controller"):
        """Applies fn to a copy of the current object and writes it back (status via sub)."""
        rt = self._rt(skey)
        md = _md(obj)
        cur = self.store.get(skey, (md.get("namespace", "") if rt.namespaced else "",
                                    md.get("name")))
        if cur is None or _md(cur).get("uid") != md.get("uid"):
            return None
        new = deep_copy(rt.to_external(cur))
        if fn(new) is False:
            return None
        try:
            with self.api.as_actor(actor):
                if sub == "status":
                    out, _ = self.api.update(rt, md.get("namespace", ""), md["name"], new,
                                             sub="status")
                else:
                    out, _ = self.api.update(rt, md.get("namespace", ""), md["name"], new)
            return out
        except ApiError as e:
            log.debug("%s: update of %s %s failed: %s", actor, rt.plural, md.get("name"),
                      e.message)
            return None

    def _delete(self, skey, obj, actor, options=None):
        rt = self._rt(skey)
        md = _md(obj)
        opts = dict(options or {})
        opts.setdefault("preconditions", {"uid": md.get("uid")})
        try:
            with self.api.as_actor(actor):
                self.api.delete(rt, md.get("namespace", ""), md.get("name"), opts)
            return True
        except ApiError as e:
            log.debug("%s: delete of %s %s failed: %s", actor, rt.plural, md.get("name"),
                      e.message)
            return False

    def _create(self, skey, ns, obj, actor):
        rt = self._rt(skey)
        try:
            with self.api.as_actor(actor):
                return self.api.create(rt, ns, obj)
        except ApiError as e:
            log.info("%s: create of %s in %s failed: %s", actor, rt.plural, ns, e.message)
            return None

    def nodes(self):
        return self.store.items(NODES)

    def pods(self, ns=None):
        return self.store.items(PODS, ns)

    def bound_pods(self):
        """The pods bound to a node, in list order: what kubelets and node controllers see."""
        out = []
        for k in sorted(self.bound, key="/".join):
            p = self.store.get(PODS, k)
            if p is None:
                self.bound.discard(k)
            else:
                out.append(p)
        return out

    # -- CRDs ---------------------------------------------------------------------------------
    def c_crd(self):
        present = set()
        for c in self.store.items(CRDS):
            name = _md(c)["name"]
            present.add(name)
            if podutil.is_deleting(c):
                self._crd_cleanup(c)
                continue
            rv = _md(c).get("resourceVersion")
            if self.crd_registered.get(name) == rv:
                continue
            established = any(x.get("type") == "Established" and x.get("status") == "True"
                              for x in (c.get("status") or {}).get("conditions") or [])
            conflict = self._crd_conflict(c)
            if not established or conflict:
                st = crdmod.established_status(c, now_rfc3339(), conflict)
                out = self._mutate(CRDS, c, lambda o: o.__setitem__("status", st), "status",
                                   "apiextensions-controller")
                if out is not None:
                    c = self.store.get(CRDS, ("", name))
            if conflict:
                self.crd_registered[name] = _md(c).get("resourceVersion")
                continue
            spec = c.get("spec") or {}
            self.api.registry.remove_group_resource(spec["group"], spec["names"]["plural"])
            for rt in crdmod.types_for(c):
                self.api.registry.add(rt)
            self.crd_registered[name] = _md(c).get("resourceVersion")
        for name in list(self.crd_registered):
            if name not in present:
                plural, _, group = name.partition(".")
                self.api.registry.remove_group_resource(group, plural)
                self.store.drop((group, plural))
                del self.crd_registered[name]

    def _crd_conflict(self, c):
        spec = c.get("spec") or {}
        names = spec.get("names") or {}
        for other in self.store.items(CRDS):
            if _md(other)["name"] == _md(c)["name"]:
                continue
            ospec = other.get("spec") or {}
            if ospec.get("group") != spec.get("group"):
                continue
            on = ospec.get("names") or {}
            if on.get("kind") == names.get("kind") and \
                    _md(other)["creationTimestamp"] <= _md(c)["creationTimestamp"]:
                return f"\"{names.get('kind')}\" is already in use"
        return None

    def _crd_cleanup(self, c):
        spec = c.get("spec") or {}
        skey = (spec.get("group"), (spec.get("names") or {}).get("plural"))
        items = self.store.items(skey)
        for o in items:
            if not podutil.is_deleting(o):
                self._delete(skey, o, "apiextensions-controller")
        if not self.store.items(skey):
            self._mutate(CRDS, c, lambda o: o["metadata"].__setitem__(
                "finalizers", [f for f in o["metadata"].get("finalizers") or []
                               if f != "customresourcecleanup.apiextensions.k8s.io"]),
                actor="apiextensions-controller")

    # -- namespaces ---------------------------------------------------------------------------
    def c_namespace(self):
        for ns in self.store.items(NAMESPACES):
            if not podutil.is_deleting(ns):
                continue
            name = _md(ns)["name"]
            left = 0
            for skey in list(self.store.data.keys()):
                rt = self._rt(skey)
                if rt is None or not rt.namespaced:
                    continue
                for o in self.store.items(skey, name):
                    left += 1
                    if not podutil.is_deleting(o):
                        self._delete(skey, o, "namespace-controller")
            if left == 0 and (ns.get("spec") or {}).get("finalizers"):
                self._mutate(NAMESPACES, ns, lambda o: o["spec"].__setitem__("finalizers", []),
                             actor="namespace-controller")

    # -- node lifecycle -----------------------------------------------------------------------
    def c_nodelifecycle(self):
        now = now_rfc3339()
        for n in self.nodes():
            ready = podutil.node_ready_status(n)
            want = []
            if ready == "False":
                want = [(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")]
            elif ready != "True":
                want = [(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")]
            if (n.get("spec") or {}).get("unschedulable"):
                want.append((UNSCHEDULABLE_TAINT, "NoSchedule"))
            managed = {(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute"),
                       (UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute"),
                       (UNSCHEDULABLE_TAINT, "NoSchedule")}
            taints = (n.get("spec") or {}).get("taints") or []
            have = {(t.get("key"), t.get("effect")) for t in taints}
            if have & managed != set(want):
                def fix(o, want=want):
                    ts = [t for t in (o.get("spec") or {}).get("taints") or []
                          if (t.get("key"), t.get("effect")) not in managed or
                          (t.get("key"), t.get("effect")) in want]
                    cur = {(t.get("key"), t.get("effect")) for t in ts}
                    for k, e in want:
                        if (k, e) not in cur:
                            t = {"key": k, "effect": e}
                            if e == "NoExecute":
                                t["timeAdded"] = now
                            ts.append(t)
                    spec = o.setdefault("spec", {})
                    if ts:
                        spec["taints"] = ts
                    else:
                        spec.pop("taints", None)
                self._mutate(NODES, n, fix, actor="node-lifecycle-controller")
            if ready != "True":
                for p in self.bound_pods():
                    if (p.get("spec") or {}).get("nodeName") != _md(n)["name"]:
                        continue
                    if not podutil.is_pod_ready(p) or podutil.is_terminal(p):
                        continue

                    def unready(o):
                        conds = o.setdefault("status", {}).setdefault("conditions", [])
                        podutil.set_condition(conds, "Ready", "False", now=now,
                                              extra={"lastProbeTime": None})
                        for cs in o["status"].get("containerStatuses") or []:
                            cs["ready"] = False
                    self._mutate(PODS, p, unready, "status", "node-lifecycle-controller")

    # -- taint-based eviction -----------------------------------------------------------------
    def c_taint(self):
        nodes = {_md(n)["name"]: n for n in self.nodes()}
        now = self.now()
        for p in self.bound_pods():
            nn = (p.get("spec") or {}).get("nodeName")
            if not nn or nn not in nodes or podutil.is_deleting(p) or podutil.is_terminal(p):
                continue
            node = nodes[nn]
            taints = [t for t in (node.get("spec") or {}).get("taints") or []
                      if t.get("effect") == "NoExecute"]
            if not taints:
                continue
            tols = (p.get("spec") or {}).get("tolerations") or []
            deadline = None
            for t in taints:
                tol = podutil.toleration_for(tols, t)
                if tol is None:
                    deadline = now
                    break
                secs = tol.get("tolerationSeconds")
                if secs is None:
                    continue
                key = (nn, t.get("key"), "NoExecute")
                added = parse_time(t.get("timeAdded")) or self.taint_seen.setdefault(key, now)
                d = added + self.api.scale_time(max(0, secs))
                deadline = d if deadline is None else min(deadline, d)
            if deadline is not None and now >= deadline:
                def mark(o):
                    conds = o.setdefault("status", {}).setdefault("conditions", [])
                    podutil.set_condition(conds, "DisruptionTarget", "True",
                                          "DeletionByTaintManager",
                                          "Taint manager: deleting due to NoExecute taint",
                                          now_rfc3339(), {"lastProbeTime": None})
                self._mutate(PODS, p, mark, "status", "taint-eviction-controller")
                self.api.record_event(p, "Normal", "TaintManagerEviction",
                                      f"Marking for deletion Pod {_md(p)['namespace']}/"
                                      f"{_md(p)['name']}", "taint-eviction-controller")
                self._delete(PODS, p, "taint-eviction-controller")

    # -- scheduler ----------------------------------------------------------------------------
    def c_scheduler(self):
        seen = (self.store.skey_changes[PODS], self.store.skey_changes[NODES], self.sched_epoch)
        if seen == self.sched_seen and self.now() < self.sched_next:
            return
        self.sched_seen = seen
        self.sched_next = float("inf")
        pending = []
        for p in self.pods():
            spec = p.get("spec") or {}
            if spec.get("nodeName") or podutil.is_deleting(p) or podutil.is_terminal(p):
                continue
            if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            if spec.get("schedulingGates"):
                continue
            pending.append(p)
        if not pending:
            return
        now = self.now()
        ready = []
        for p in pending:
            st = self.sched_state.get(_md(p)["uid"])
            if st is not None and st[0] == self.sched_epoch and now < st[1]:
                self.sched_next = min(self.sched_next, st[1])
                continue
            ready.append(p)
        if not ready:
            return
        ready.sort(key=lambda p: (-((p.get("spec") or {}).get("priority") or 0),
                                  _md(p).get("creationTimestamp", ""), _md(p)["name"]))
        nodes = self.nodes()
        usage = self._node_usage(nodes)
        for p in ready:
            chosen, reasons = self._schedule_one(p, nodes, usage)
            uid = _md(p)["uid"]
            if chosen is not None:
                self.sched_state.pop(uid, None)
                nn = _md(chosen)["name"]
                try:
                    with self.api.as_actor("default-scheduler"):
                        self.api.bind(_md(p)["namespace"], _md(p)["name"], {
                            "apiVersion": "v1", "kind": "Binding",
                            "metadata": {"name": _md(p)["name"]},
                            "target": {"kind": "Node", "name": nn}})
                except ApiError as e:
                    log.debug("bind failed: %s", e.message)
                    continue
                u = usage[nn]
                for k, v in podutil.pod_requests(p).items():
                    u["req"][k] = u["req"].get(k, Fraction(0)) + v
                u["pods"] += 1
                u["ports"] |= self._host_ports(p)
                self.api.record_event(p, "Normal", "Scheduled",
                                      f"Successfully assigned {_md(p)['namespace']}/"
                                      f"{_md(p)['name']} to {nn}", "default-scheduler")
            else:
                self.sched_state[uid] = (self.sched_epoch, now + UNSCHEDULABLE_MAX_SECONDS)
                self.sched_next = min(self.sched_next, now + UNSCHEDULABLE_MAX_SECONDS)
                msg = self._fit_error(len(nodes), reasons)
                self._mark_unschedulable(p, msg)
        live = {_md(p)["uid"] for p in pending}
        for uid in list(self.sched_state):
            if uid not in live:
                del self.sched_state[uid]

    def _node_usage(self, nodes):
        usage = {_md(n)["name"]: {"req": {}, "pods": 0, "ports": set()} for n in nodes}
        for p in self.bound_pods():
            nn = (p.get("spec") or {}).get("nodeName")
            if not nn or nn not in usage or podutil.is_terminal(p):
                continue
            u = usage[nn]
            for k, v in podutil.pod_requests(p).items():
                u["req"][k] = u["req"].get(k, Fraction(0)) + v
            u["pods"] += 1
            u["ports"] |= self._host_ports(p)
        return usage

    @staticmethod
    def _host_ports(p):
        out = set()
        for c in ((p.get("spec") or {}).get("containers") or []):
            for port in c.get("ports") or []:
                if port.get("hostPort"):
                    out.add((port.get("protocol", "TCP"), port.get("hostIP") or "0.0.0.0",
                             port["hostPort"]))
        return out

    def _filter(self, p, n, usage):
        """The first failing filter plugin's reasons, and whether preemption could help."""
        spec = p.get("spec") or {}
        nspec = n.get("spec") or {}
        tols = spec.get("tolerations") or []
        if nspec.get("unschedulable") and not podutil.tolerates(
                tols, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
            return ["node(s) were unschedulable"], False
        for t in nspec.get("taints") or []:
            if t.get("effect") not in ("NoSchedule", "NoExecute"):
                continue
            if not podutil.tolerates(tols, t):
                return [f"node(s) had untolerated taint {{{t.get('key')}: "
                        f"{t.get('value', '')}}}"], False
        if not node_matches_pod_affinity_and_selector(spec, n):
            return ["node(s) didn't match Pod's node affinity/selector"], False
        u = usage[_md(n)["name"]]
        ports = self._host_ports(p)
        for proto, ip, port in ports:
            for (p2, ip2, port2) in u["ports"]:
                if proto == p2 and port == port2 and (ip == ip2 or "0.0.0.0" in (ip, ip2)):
                    return ["node(s) didn't have free ports for the requested pod ports"], False
        alloc = (n.get("status") or {}).get("allocatable") or \
            (n.get("status") or {}).get("capacity") or {}
        reasons = []
        max_pods = quantity_or_zero(alloc.get("pods", 0))
        if u["pods"] + 1 > max_pods:
            reasons.append("Too many pods")
        reqs = podutil.pod_requests(p)
        for r in ("cpu", "memory", "ephemeral-storage"):
            want = reqs.get(r, Fraction(0))
            if want and want > quantity_or_zero(alloc.get(r, 0)) - u["req"].get(r, Fraction(0)):
                reasons.append(f"Insufficient {r}")
        for r, want in sorted(reqs.items()):
            if r in ("cpu", "memory", "ephemeral-storage", "pods") or not want:
                continue
            # extended resources and hugepages: a node that lacks one has none of it
            if want > quantity_or_zero(alloc.get(r, 0)) - u["req"].get(r, Fraction(0)):
                reasons.append(f"Insufficient {r}")
        if reasons:
            return reasons, True
        return None, False

    def _schedule_one(self, p, nodes, usage):
        feasible = []
        reasons = {}
        for n in nodes:
            r, resolvable = self._filter(p, n, usage)
            if r is None:
                feasible.append(n)
            else:
                reasons[_md(n)["name"]] = (r, resolvable)
        if not feasible:
            return None, reasons
        # score: least allocated cpu+memory (NodeResourcesFit LeastAllocated), then name
        def score(n):
            alloc = (n.get("status") or {}).get("allocatable") or {}
            u = usage[_md(n)["name"]]
            req = podutil.pod_requests(p)
            s = 0.0
            for r in ("cpu", "memory"):
                cap = quantity_or_zero(alloc.get(r, 0))
                if cap > 0:
                    used = u["req"].get(r, Fraction(0)) + req.get(r, Fraction(0))
                    s += float((cap - used) / cap)
            return (-s, _md(n)["name"])
        feasible.sort(key=score)
        return feasible[0], reasons

    @staticmethod
    def _fit_error(num_nodes, reasons):
        if num_nodes == 0:
            return "no nodes available to schedule pods"
        hist = {}
        post = {}
        for _, (rs, resolvable) in reasons.items():
            for r in rs:
                hist[r] = hist.get(r, 0) + 1
            k = "No preemption victims found for incoming pod." if resolvable else \
                "Preemption is not helpful for scheduling."
            post[k] = post.get(k, 0) + 1
        parts = sorted(f"{v} {k}" for k, v in hist.items())
        msg = f"0/{num_nodes} nodes are available: " + ", ".join(parts) + "."
        pparts = sorted(f"{v} {k.rstrip('.')}" for k, v in post.items())
        msg += f" preemption: 0/{num_nodes} nodes are available: " + ", ".join(pparts) + "."
        return msg

    def _mark_unschedulable(self, p, msg):
        conds = (p.get("status") or {}).get("conditions") or []
        cur = next((c for c in conds if c.get("type") == "PodScheduled"), None)
        if cur is None or cur.get("status") != "False" or cur.get("reason") != "Unschedulable" \
                or cur.get("message") != msg:
            def fn(o):
                cs = o.setdefault("status", {}).setdefault("conditions", [])
                podutil.set_condition(cs, "PodScheduled", "False", "Unschedulable", msg,
                                      now_rfc3339(), {"lastProbeTime": None})
            self._mutate(PODS, p, fn, "status", "default-scheduler")
        self.api.record_event(p, "Warning", "FailedScheduling", msg, "default-scheduler")

    # -- kubelet ------------------------------------------------------------------------------
    def kubelet_alive(self, node):
        if node is None:
            return False
        name = _md(node)["name"]
        if name in self.stopped_kubelets:
            return False
        return podutil.node_ready_status(node) == "True"

    def c_kubelet(self):
        nodes = {_md(n)["name"]: n for n in self.nodes()}
        now = self.now()
        live = set()
        for p in self.bound_pods():
            spec = p.get("spec") or {}
            nn = spec.get("nodeName")
            uid = _md(p)["uid"]
            live.add(uid)
            if not nn:
                continue
            node = nodes.get(nn)
            if not self.kubelet_alive(node):
                continue
            st = self.pod_state.setdefault(uid, {"seen": now})
            if podutil.is_deleting(p):
                if "term" not in st:
                    st["term"] = now
                    for c in spec.get("containers") or []:
                        self.api.record_event(p, "Normal", "Killing",
                                              f"Stopping container {c.get('name')}", "kubelet",
                                              nn)
                grace = _md(p).get("deletionGracePeriodSeconds") or 0
                wait = min(self.api.scale_time(grace), self.opts.grace_cap)
                if now >= st["term"] + wait:
                    self._delete(PODS, p, "kubelet", {"gracePeriodSeconds": 0})
                continue
            phase = podutil.pod_phase(p)
            ann = _md(p).get("annotations") or {}
            if phase == "Pending":
                delay = self._ann_float(ann, "start-delay-seconds", self.opts.ready_delay,
                                        scaled=False)
                if now >= st["seen"] + delay:
                    self._start_pod(p, node, st, now)
            elif phase == "Running":
                self._running_pod(p, st, now, ann)
        for uid in list(self.pod_state):
            if uid not in live:
                del self.pod_state[uid]

    def _ann_float(self, ann, key, default, scaled=True):
        v = ann.get(FAKE_ANN + key)
        if v is None:
            return default
        try:
            f = float(v)
        except ValueError:
            return default
        return self.api.scale_time(f) if scaled else f

    def _pod_ip(self, node):
        name = _md(node)["name"]
        base = self.node_ips.setdefault(name, {"n": len(self.node_ips) + 1, "next": 1})
        base["next"] += 1
        return f"10.{244 + base['n'] // 256}.{base['n'] % 256}.{base['next'] % 250 + 2}"

    def _start_pod(self, p, node, st, now):
        ts = now_rfc3339()
        addrs = {a.get("type"): a.get("address")
                 for a in (node.get("status") or {}).get("addresses") or []}
        ip = self._pod_ip(node)

        def fn(o):
            s = o.setdefault("status", {})
            s["phase"] = "Running"
            s["hostIP"] = addrs.get("InternalIP", "")
            s["hostIPs"] = [{"ip": s["hostIP"]}] if s["hostIP"] else []
            s["podIP"] = ip
            s["podIPs"] = [{"ip": ip}]
            s["startTime"] = ts
            conds = s.setdefault("conditions", [])
            for t in ("PodReadyToStartContainers", "Initialized"):
                podutil.set_condition(conds, t, "True", now=ts, extra={"lastProbeTime": None})
            podutil.set_condition(conds, "ContainersReady", "False", now=ts,
                                  reason="ContainersNotReady",
                                  extra={"lastProbeTime": None})
            podutil.set_condition(conds, "Ready", "False", now=ts, reason="ContainersNotReady",
                                  extra={"lastProbeTime": None})
            podutil.set_condition(conds, "PodScheduled", "True", now=ts,
                                  extra={"lastProbeTime": None})
            s["containerStatuses"] = [{
                "name": c.get("name"), "image": c.get("image"),
                "imageID": "sha256:" + hashlib.sha256((c.get("image") or "").encode())
                .hexdigest(),
                "containerID": "containerd://" + hashlib.sha256(
                    f"{_md(o)['uid']}/{c.get('name')}".encode()).hexdigest(),
                "ready": False, "started": True, "restartCount": 0,
                "state": {"running": {"startedAt": ts}}, "lastState": {}}
                for c in (o.get("spec") or {}).get("containers") or []]
            if o["spec"].get("initContainers"):
                s["initContainerStatuses"] = [{
                    "name": c.get("name"), "image": c.get("image"), "ready": True,
                    "restartCount": 0, "started": False,
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                             "startedAt": ts, "finishedAt": ts}}}
                    for c in o["spec"]["initContainers"]]
        if self._mutate(PODS, p, fn, "status", "kubelet") is not None:
            st["running"] = now
            for c in (p.get("spec") or {}).get("containers") or []:
                self.api.record_event(p, "Normal", "Started",
                                      f"Started container {c.get('name')}", "kubelet",
                                      _md(node)["name"])

    def _running_pod(self, p, st, now, ann):
        started = st.setdefault("running", now)
        spec = p.get("spec") or {}
        exit_after = ann.get(FAKE_ANN + "exit-after-seconds")
        if exit_after is not None and spec.get("restartPolicy") in ("Never", "OnFailure"):
            if now >= started + self._ann_float(ann, "exit-after-seconds", 0):
                code = int(ann.get(FAKE_ANN + "exit-code", "0") or 0)
                ts = now_rfc3339()

                def done(o):
                    s = o.setdefault("status", {})
                    s["phase"] = "Succeeded" if code == 0 else "Failed"
                    conds = s.setdefault("conditions", [])
                    for t in ("Ready", "ContainersReady"):
                        podutil.set_condition(conds, t, "False", "PodCompleted", None, ts,
                                              {"lastProbeTime": None})
                    for cs in s.get("containerStatuses") or []:
                        cs["ready"] = False
                        cs["started"] = False
                        cs["state"] = {"terminated": {
                            "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                            "startedAt": (cs.get("state") or {}).get("running", {})
                            .get("startedAt", ts), "finishedAt": ts}}
                self._mutate(PODS, p, done, "status", "kubelet")
                return
        if (ann.get(FAKE_ANN + "ready") or "").lower() == "false":
            want_ready = False
        else:
            want_ready = True
        ready_at = {}
        for c in spec.get("containers") or []:
            probe = c.get("readinessProbe") or {}
            d = self.api.scale_time(probe.get("initialDelaySeconds") or 0)
            ready_at[c.get("name")] = started + d
        ann_delay = self._ann_float(ann, "ready-after-seconds", None)
        if ann_delay is not None:
            ready_at = {k: started + ann_delay for k in ready_at}
        statuses = (p.get("status") or {}).get("containerStatuses") or []
        desired = {c: (want_ready and now >= t) for c, t in ready_at.items()}
        current = {cs.get("name"): bool(cs.get("ready")) for cs in statuses}
        if desired == current:
            return
        ts = now_rfc3339()

        def fn(o):
            s = o.setdefault("status", {})
            for cs in s.get("containerStatuses") or []:
                cs["ready"] = desired.get(cs.get("name"), False)
            all_ready = all(desired.values()) and bool(desired)
            conds = s.setdefault("conditions", [])
            for t in ("ContainersReady", "Ready"):
                if all_ready:
                    podutil.set_condition(conds, t, "True", now=ts,
                                          extra={"lastProbeTime": None})
                    for c in conds:
                        if c.get("type") == t:
                            c.pop("reason", None)
                            c.pop("message", None)
                else:
                    notready = sorted(k for k, v in desired.items() if not v)
                    podutil.set_condition(conds, t, "False", "ContainersNotReady",
                                          f"containers with unready status: [{' '.join(notready)}]",
                                          ts, {"lastProbeTime": None})
        self._mutate(PODS, p, fn, "status", "kubelet")

    def c_nodelease(self):
        now = self.now()
        for n in self.nodes():
            name = _md(n)["name"]
            if name not in self.managed_nodes or not self.kubelet_alive(n):
                continue
            if now - self.lease_renewed.get(name, 0) < 10.0:
                continue
            self.lease_renewed[name] = now
            cur = self.store.get(LEASES, ("kube-node-lease", name))
            if cur is None:
                if self.store.get(NAMESPACES, ("", "kube-node-lease")) is None:
                    continue
                self._create(LEASES, "kube-node-lease", {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": "kube-node-lease",
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                      "name": name, "uid": _md(n)["uid"]}]},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": 40,
                             "renewTime": now_micro()}}, "kubelet")
            else:
                self._mutate(LEASES, cur, lambda o: o.setdefault("spec", {}).__setitem__(
                    "renewTime", now_micro()), actor="kubelet")

    # -- ReplicaSets --------------------------------------------------------------------------
    def c_replicaset(self):
        for rs in self.store.items(RS):
            self._sync_rs(rs)

    def _available(self, p, min_ready, now):
        if not podutil.is_pod_ready(p) or podutil.is_deleting(p):
            return False
        if not min_ready:
            return True
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Ready":
                t = parse_time(c.get("lastTransitionTime"))
                return t is not None and t + min_ready <= now
        return False

    def _sync_rs(self, rs):
        md = _md(rs)
        ns = md["namespace"]
        spec = rs.get("spec") or {}
        sel = selector_from_object(spec.get("selector"))
        owned = []
        for p in self.pods(ns):
            ref = podutil.controller_ref(p)
            labels = _md(p).get("labels") or {}
            if ref is not None and ref.get("uid") == md["uid"]:
                if sel.matches(labels):
                    owned.append(p)
                elif not podutil.is_deleting(rs):
                    self._mutate(PODS, p, lambda o: o["metadata"].__setitem__(
                        "ownerReferences", [r for r in o["metadata"].get("ownerReferences", [])
                                            if r.get("uid") != md["uid"]]),
                        actor="replicaset-controller")
            elif ref is None and sel.matches(labels) and not podutil.is_deleting(rs) \
                    and not podutil.is_deleting(p) and not podutil.is_terminal(p):
                def adopt(o):
                    o["metadata"].setdefault("ownerReferences", []).append(
                        _owner_ref(rs, "ReplicaSet", "apps/v1"))
                if self._mutate(PODS, p, adopt, actor="replicaset-controller") is not None:
                    owned.append(self.store.get(PODS, (ns, _md(p)["name"])))
        active = [p for p in owned if not podutil.is_deleting(p) and not podutil.is_terminal(p)]
        want = spec.get("replicas", 1)
        if not podutil.is_deleting(rs):
            diff = want - len(active)
            if diff > 0:
                for _ in range(min(diff, 500)):
                    pod = self._pod_from_template(rs, "ReplicaSet", f"{md['name']}-")
                    out = self._create(PODS, ns, pod, "replicaset-controller")
                    if out is not None:
                        active.append(out)
                        self.api.record_event(rs, "Normal", "SuccessfulCreate",
                                              f"Created pod: {_md(out)['name']}",
                                              "replicaset-controller")
            elif diff < 0:
                def rank(p):
                    assigned = 1 if (p.get("spec") or {}).get("nodeName") else 0
                    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(podutil.pod_phase(p), 1)
                    ready = 1 if podutil.is_pod_ready(p) else 0
                    restarts = sum(c.get("restartCount", 0) for c in
                                   (p.get("status") or {}).get("containerStatuses") or [])
                    created = parse_time(_md(p).get("creationTimestamp")) or 0
                    return (assigned, phase, ready, -restarts, -created)
                for p in sorted(active, key=rank)[:-diff]:
                    if self._delete(PODS, p, "replicaset-controller"):
                        self.api.record_event(rs, "Normal", "SuccessfulDelete",
                                              f"Deleted pod: {_md(p)['name']}",
                                              "replicaset-controller")
        pods_now = [self.store.get(PODS, (ns, _md(p)["name"])) for p in owned]
        pods_now = [p for p in pods_now if p is not None and _owned_by(p, rs)]
        act = [p for p in pods_now if not podutil.is_deleting(p) and not podutil.is_terminal(p)]
        now = self.now()
        min_ready = spec.get("minReadySeconds") or 0
        tmpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        status = {
            "replicas": len(act),
            "fullyLabeledReplicas": sum(1 for p in act if all(
                (_md(p).get("labels") or {}).get(k) == v for k, v in tmpl_labels.items())),
            "readyReplicas": sum(1 for p in act if podutil.is_pod_ready(p)),
            "availableReplicas": sum(1 for p in act if self._available(p, min_ready, now)),
            "observedGeneration": md.get("generation", 1),
        }
        if not status["readyReplicas"]:
            status.pop("readyReplicas")
        if not status["availableReplicas"]:
            status.pop("availableReplicas")
        cur = rs.get("status") or {}
        merged = dict(status)
        if cur.get("conditions"):
            merged["conditions"] = cur["conditions"]
        if merged != cur:
            self._mutate(RS, rs, lambda o: o.__setitem__("status", merged), "status",
                         "replicaset-controller")

    def _pod_from_template(self, owner, kind, generate_name, api_version="apps/v1"):
        tmpl = deep_copy((owner.get("spec") or {}).get("template") or {})
        tmd = tmpl.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": generate_name,
                            "namespace": _md(owner)["namespace"],
                            "labels": dict(tmd.get("labels") or {}),
                            "ownerReferences": [_owner_ref(owner, kind, api_version)]},
               "spec": tmpl.get("spec") or {}}
        if tmd.get("annotations"):
            pod["metadata"]["annotations"] = dict(tmd["annotations"])
        if tmd.get("finalizers"):
            pod["metadata"]["finalizers"] = list(tmd["finalizers"])
        return pod

    # -- Deployments --------------------------------------------------------------------------
    @staticmethod
    def _template_hash(template, collisions=0):
        data = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
        if collisions:
            data += str(collisions).encode()
        return safe_encode(str(fnv32a(data)))

    @staticmethod
    def _without_hash(tmpl):
        t = deep_copy(tmpl or {})
        labels = (t.get("metadata") or {}).get("labels")
        if labels:
            labels.pop("pod-template-hash", None)
        return t

    def c_deployment(self):
        for d in self.store.items(DEPLOY):
            try:
                self._sync_deployment(d)
            except ApiError as e:
                log.debug("deployment sync: %s", e.message)

    def _sync_deployment(self, d):
        md = _md(d)
        ns = md["namespace"]
        spec = d.get("spec") or {}
        sel = selector_from_object(spec.get("selector"))
        owned = []
        for rs in self.store.items(RS, ns):
            ref = podutil.controller_ref(rs)
            if ref is not None and ref.get("uid") == md["uid"]:
                owned.append(rs)
            elif ref is None and sel.matches(_md(rs).get("labels") or {}) and \
                    not podutil.is_deleting(d):
                def adopt(o):
                    o["metadata"].setdefault("ownerReferences", []).append(
                        _owner_ref(d, "Deployment", "apps/v1"))
                out = self._mutate(RS, rs, adopt, actor="deployment-controller")
                if out is not None:
                    owned.append(self.store.get(RS, (ns, _md(rs)["name"])))
        if podutil.is_deleting(d):
            return
        tmpl = spec.get("template") or {}
        new_rs = None
        for rs in owned:
            if self._without_hash((rs.get("spec") or {}).get("template")) == \
                    self._without_hash(tmpl):
                new_rs = rs
                break
        olds = [rs for rs in owned if rs is not new_rs]
        desired = spec.get("replicas", 1)
        strategy = spec.get("strategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        ru = strategy.get("rollingUpdate") or {}
        max_surge = _scaled(ru.get("maxSurge", "25%"), desired, True) if rolling else 0
        max_unavail = _scaled(ru.get("maxUnavailable", "25%"), desired, False) if rolling else 0
        if rolling and max_surge == 0 and max_unavail == 0:
            max_unavail = 1

        def revision(rs):
            try:
                return int((_md(rs).get("annotations") or {}).get(
                    "deployment.kubernetes.io/revision", "0"))
            except ValueError:
                return 0
        if new_rs is None and not spec.get("paused"):
            h = self._template_hash(tmpl, (d.get("status") or {}).get("collisionCount", 0))
            ntmpl = deep_copy(tmpl)
            ntmpl.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            nsel = deep_copy(spec.get("selector") or {})
            nsel.setdefault("matchLabels", {})["pod-template-hash"] = h
            if not olds:
                initial = desired
            elif rolling:
                total = sum((rs.get("spec") or {}).get("replicas", 0) for rs in olds)
                initial = max(0, min(desired, desired + max_surge - total))
            else:
                initial = 0
            rev = max([revision(rs) for rs in olds] + [0]) + 1
            body = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": f"{md['name']}-{h}", "namespace": ns,
                                 "labels": dict(ntmpl["metadata"]["labels"]),
                                 "annotations": {
                                     "deployment.kubernetes.io/desired-replicas": str(desired),
                                     "deployment.kubernetes.io/max-replicas":
                                         str(desired + max_surge),
                                     "deployment.kubernetes.io/revision": str(rev)},
                                 "ownerReferences": [_owner_ref(d, "Deployment", "apps/v1")]},
                    "spec": {"replicas": initial, "minReadySeconds":
                             spec.get("minReadySeconds", 0), "selector": nsel,
                             "template": ntmpl}}
            new_rs = self._create(RS, ns, body, "deployment-controller")
            if new_rs is None:
                return
            new_rs = self.store.get(RS, (ns, _md(new_rs)["name"]))
            self.api.record_event(d, "Normal", "ScalingReplicaSet",
                                  f"Scaled up replica set {_md(new_rs)['name']} from 0 to "
                                  f"{initial}", "deployment-controller")
        if new_rs is None:
            return

        def set_replicas(rs, n):
            cur = (rs.get("spec") or {}).get("replicas", 0)
            if cur == n:
                return
            def fn(o):
                o["spec"]["replicas"] = n
                ann = o["metadata"].setdefault("annotations", {})
                ann["deployment.kubernetes.io/desired-replicas"] = str(desired)
                ann["deployment.kubernetes.io/max-replicas"] = str(desired + max_surge)
            if self._mutate(RS, rs, fn, actor="deployment-controller") is not None:
                self.api.record_event(d, "Normal", "ScalingReplicaSet",
                                      f"Scaled {'up' if n > cur else 'down'} replica set "
                                      f"{_md(rs)['name']} from {cur} to {n}",
                                      "deployment-controller")
        active_olds = [rs for rs in olds if (rs.get("spec") or {}).get("replicas", 0) > 0]
        if not spec.get("paused"):
            if not active_olds:
                set_replicas(new_rs, desired)
            elif not rolling:
                for rs in active_olds:
                    set_replicas(rs, 0)
                old_pods = [p for p in self.pods(ns) if any(_owned_by(p, rs) for rs in olds)]
                if not old_pods:
                    set_replicas(new_rs, desired)
            else:
                all_rs = [new_rs] + olds
                total = sum((rs.get("spec") or {}).get("replicas", 0) for rs in all_rs)
                nrep = (new_rs.get("spec") or {}).get("replicas", 0)
                if nrep < desired and total < desired + max_surge:
                    set_replicas(new_rs, min(nrep + (desired + max_surge - total), desired))
                elif nrep > desired:
                    set_replicas(new_rs, desired)
                new_rs = self.store.get(RS, (ns, _md(new_rs)["name"])) or new_rs
                min_avail = desired - max_unavail
                nst = new_rs.get("status") or {}
                new_unavail = (new_rs.get("spec") or {}).get("replicas", 0) - \
                    nst.get("availableReplicas", 0)
                all_pods = sum((rs.get("status") or {}).get("replicas", 0) for rs in all_rs)
                max_down = all_pods - min_avail - new_unavail
                olds_sorted = sorted(active_olds, key=lambda r: _md(r).get("creationTimestamp"))
                if max_down > 0:
                    for rs in olds_sorted:
                        if max_down <= 0:
                            break
                        rep = (rs.get("spec") or {}).get("replicas", 0)
                        unhealthy = rep - (rs.get("status") or {}).get("availableReplicas", 0)
                        down = min(max_down, unhealthy)
                        if down > 0:
                            set_replicas(rs, rep - down)
                            max_down -= down
                    avail = sum((self.store.get(RS, (ns, _md(rs)["name"])) or rs)
                                .get("status", {}).get("availableReplicas", 0) for rs in all_rs)
                    total_down = avail - min_avail
                    for rs in olds_sorted:
                        if total_down <= 0:
                            break
                        cur = self.store.get(RS, (ns, _md(rs)["name"])) or rs
                        rep = (cur.get("spec") or {}).get("replicas", 0)
                        down = min(rep, total_down)
                        if down > 0:
                            set_replicas(cur, rep - down)
                            total_down -= down
        # history limit
        limit = spec.get("revisionHistoryLimit", 10)
        dead = sorted([rs for rs in olds if (rs.get("spec") or {}).get("replicas", 0) == 0 and
                       (rs.get("status") or {}).get("replicas", 0) == 0],
                      key=lambda r: revision(r))
        for rs in dead[:max(0, len(dead) - limit)]:
            self._delete(RS, rs, "deployment-controller")
        # status
        owned = [self.store.get(RS, (ns, _md(rs)["name"])) for rs in [new_rs] + olds]
        owned = [rs for rs in owned if rs is not None]
        new_rs = owned[0]
        sts = [rs.get("status") or {} for rs in owned]
        avail = sum(s.get("availableReplicas", 0) for s in sts)
        status = {"observedGeneration": md.get("generation", 1),
                  "replicas": sum(s.get("replicas", 0) for s in sts),
                  "updatedReplicas": (new_rs.get("status") or {}).get("replicas", 0),
                  "readyReplicas": sum(s.get("readyReplicas", 0) for s in sts),
                  "availableReplicas": avail,
                  "unavailableReplicas": max(0, desired - avail)}
        for k in ("readyReplicas", "availableReplicas", "unavailableReplicas", "replicas",
                  "updatedReplicas"):
            if not status[k]:
                status.pop(k)
        cur = d.get("status") or {}
        conds = deep_copy(cur.get("conditions") or [])
        ts = now_rfc3339()
        ok = avail >= desired - max_unavail
        podutil.set_condition(conds, "Available", "True" if ok else "False",
                              "MinimumReplicasAvailable" if ok else "MinimumReplicasUnavailable",
                              "Deployment has minimum availability." if ok else
                              "Deployment does not have minimum availability.", ts,
                              {"lastUpdateTime": ts} if not any(
                                  c.get("type") == "Available" for c in conds) else None)
        done = (status.get("updatedReplicas", 0) == desired and
                status.get("replicas", 0) == desired and avail == desired)
        reason = "NewReplicaSetAvailable" if done else "ReplicaSetUpdated"
        msg = (f"ReplicaSet \"{_md(new_rs)['name']}\" has successfully progressed." if done else
               f"ReplicaSet \"{_md(new_rs)['name']}\" is progressing.")
        prog = next((c for c in conds if c.get("type") == "Progressing"), None)
        if prog is None or prog.get("reason") != reason or prog.get("message") != msg:
            podutil.set_condition(conds, "Progressing", "True", reason, msg, ts,
                                  {"lastUpdateTime": ts})
        avail_c = next(c for c in conds if c.get("type") == "Available")
        avail_c.setdefault("lastUpdateTime", ts)
        conds.sort(key=lambda c: 0 if c.get("type") == "Available" else 1)
        status["conditions"] = conds
        if cur.get("collisionCount"):
            status["collisionCount"] = cur["collisionCount"]
        if status != cur:
            self._mutate(DEPLOY, d, lambda o: o.__setitem__("status", status), "status",
                         "deployment-controller")

    # -- DaemonSets ---------------------------------------------------------------------------
    DS_TOLERATIONS = [
        {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute"},
        {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists",
         "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists",
         "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
        {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
    ]

    def _ds_tolerations(self, tspec):
        tols = list(tspec.get("tolerations") or [])
        extra = list(self.DS_TOLERATIONS)
        if tspec.get("hostNetwork"):
            extra.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                          "effect": "NoSchedule"})
        for t in extra:
            if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tols):
                tols.append(t)
        return tols

    def _ds_should_run(self, ds, node):
        tspec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if not node_matches_pod_affinity_and_selector(tspec, node):
            return False
        tols = self._ds_tolerations(tspec)
        for t in (node.get("spec") or {}).get("taints") or []:
            if t.get("effect") in ("NoSchedule", "NoExecute") and not podutil.tolerates(tols, t):
                return False
        return True

    def c_daemonset(self):
        nodes = self.nodes()
        for ds in self.store.items(DS):
            self._sync_ds(ds, nodes)

    def _sync_ds(self, ds, nodes):
        md = _md(ds)
        ns = md["namespace"]
        spec = ds.get("spec") or {}
        gen = md.get("generation", 1)
        owned = [p for p in self.pods(ns) if _owned_by(p, ds)]
        by_node = {}
        for p in owned:
            nn = self._ds_pod_node(p)
            by_node.setdefault(nn, []).append(p)
        tmpl_hash = self._template_hash(spec.get("template") or {})
        desired = 0
        if not podutil.is_deleting(ds):
            for n in nodes:
                nn = _md(n)["name"]
                pods = [p for p in by_node.get(nn, []) if not podutil.is_deleting(p)]
                run = self._ds_should_run(ds, n)
                if run:
                    desired += 1
                    failed = [p for p in pods if podutil.pod_phase(p) == "Failed"]
                    for p in failed:
                        self._delete(PODS, p, "daemonset-controller")
                    pods = [p for p in pods if p not in failed]
                    if not pods and not podutil.is_deleting(n):
                        pod = self._pod_from_template(ds, "DaemonSet", f"{md['name']}-")
                        pod["metadata"]["labels"]["controller-revision-hash"] = tmpl_hash
                        pod["metadata"]["labels"]["pod-template-generation"] = str(gen)
                        ps = pod["spec"]
                        ps["tolerations"] = self._ds_tolerations(ps)
                        aff = ps.setdefault("affinity", {}).setdefault("nodeAffinity", {})
                        aff["requiredDuringSchedulingIgnoredDuringExecution"] = {
                            "nodeSelectorTerms": [{"matchFields": [{
                                "key": "metadata.name", "operator": "In", "values": [nn]}]}]}
                        out = self._create(PODS, ns, pod, "daemonset-controller")
                        if out is not None:
                            self.api.record_event(ds, "Normal", "SuccessfulCreate",
                                                  f"Created pod: {_md(out)['name']}",
                                                  "daemonset-controller")
                    elif len(pods) > 1:
                        for p in sorted(pods, key=lambda p: _md(p).get("creationTimestamp"))[1:]:
                            self._delete(PODS, p, "daemonset-controller")
                    else:
                        # rolling update: replace one outdated pod at a time
                        p = pods[0]
                        if (_md(p).get("labels") or {}).get("pod-template-generation") != \
                                str(gen) and (spec.get("updateStrategy") or {}).get(
                                    "type", "RollingUpdate") == "RollingUpdate":
                            others_ok = all(podutil.is_pod_ready(x) for x in owned
                                            if x is not p and not podutil.is_deleting(x))
                            updating = any(podutil.is_deleting(x) for x in owned)
                            if others_ok and not updating:
                                self._delete(PODS, p, "daemonset-controller")
                else:
                    for p in pods:
                        self._delete(PODS, p, "daemonset-controller")
        owned = [p for p in self.pods(ns) if _owned_by(p, ds)]
        node_names = {_md(n)["name"]: n for n in nodes}
        cur_sched = mis = ready = avail = updated = 0
        for p in owned:
            if podutil.is_deleting(p):
                continue
            nn = self._ds_pod_node(p)
            n = node_names.get(nn)
            if n is None:
                continue
            if self._ds_should_run(ds, n):
                cur_sched += 1
                if podutil.is_pod_ready(p):
                    ready += 1
                    avail += 1
                if (_md(p).get("labels") or {}).get("pod-template-generation") == str(gen):
                    updated += 1
            else:
                mis += 1
        status = {"currentNumberScheduled": cur_sched, "numberMisscheduled": mis,
                  "desiredNumberScheduled": desired, "numberReady": ready,
                  "observedGeneration": gen, "updatedNumberScheduled": updated,
                  "numberAvailable": avail, "numberUnavailable": max(0, desired - avail)}
        for k in ("updatedNumberScheduled", "numberAvailable", "numberUnavailable"):
            if not status[k]:
                status.pop(k)
        if status != (ds.get("status") or {}):
            self._mutate(DS, ds, lambda o: o.__setitem__("status", status), "status",
                         "daemonset-controller")

    @staticmethod
    def _ds_pod_node(p):
        nn = (p.get("spec") or {}).get("nodeName")
        if nn:
            return nn
        aff = (((p.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
        req = aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        for t in req.get("nodeSelectorTerms") or []:
            for f in t.get("matchFields") or []:
                if f.get("key") == "metadata.name" and f.get("values"):
                    return f["values"][0]
        return None

    # -- disruption controller ----------------------------------------------------------------
    def c_disruption(self):
        now = self.now()
        timeout = max(1.0, self.api.scale_time(120.0))
        for pdb in self.store.items(PDB):
            md = _md(pdb)
            pods = self.api.pods_for_pdb(pdb)
            expected, desired, err = self.api.desired_healthy(pdb, pods)
            cur = pdb.get("status") or {}
            ts = now_rfc3339()
            if err:
                st = deep_copy(cur)
                st["disruptionsAllowed"] = 0
                st["observedGeneration"] = md.get("generation", 1)
                conds = st.setdefault("conditions", [])
                podutil.set_condition(conds, "DisruptionAllowed", "False", "SyncFailed", err, ts,
                                      {"observedGeneration": md.get("generation", 1)})
            else:
                by_name = {_md(p)["name"]: p for p in pods}
                disrupted = {}
                for name, t in (cur.get("disruptedPods") or {}).items():
                    p = by_name.get(name)
                    tt = parse_time(t) or 0
                    if p is None or podutil.is_deleting(p):
                        continue
                    if tt + timeout < now:
                        continue
                    disrupted[name] = t
                healthy = sum(1 for p in pods if podutil.is_pod_ready(p) and
                              not podutil.is_deleting(p) and _md(p)["name"] not in disrupted)
                allowed = max(0, healthy - desired)
                st = {"observedGeneration": md.get("generation", 1),
                      "disruptionsAllowed": allowed, "currentHealthy": healthy,
                      "desiredHealthy": desired, "expectedPods": expected}
                if disrupted:
                    st["disruptedPods"] = disrupted
                conds = deep_copy(cur.get("conditions") or [])
                if allowed > 0:
                    podutil.set_condition(conds, "DisruptionAllowed", "True", "SufficientPods", "",
                                          ts, {"observedGeneration": st["observedGeneration"]})
                else:
                    podutil.set_condition(conds, "DisruptionAllowed", "False", "InsufficientPods",
                                          "", ts, {"observedGeneration": st["observedGeneration"]})
                st["conditions"] = conds
            if st != cur:
                self._mutate(PDB, pdb, lambda o: o.__setitem__("status", st), "status",
                             "disruption-controller")

    # -- garbage collector --------------------------------------------------------------------
    def c_gc(self):
        index = {}
        for skey in list(self.store.data.keys()):
            for o in self.store.items(skey):
                index[_md(o).get("uid")] = (skey, o)
        dependents = {}
        for uid, (skey, o) in index.items():
            for ref in _md(o).get("ownerReferences") or []:
                dependents.setdefault(ref.get("uid"), []).append((skey, o, ref))
        for uid, (skey, o) in list(index.items()):
            refs = _md(o).get("ownerReferences") or []
            if not refs:
                continue
            if podutil.is_deleting(o) and "foregroundDeletion" not in \
                    (_md(o).get("finalizers") or []):
                continue
            owners = [(r, index.get(r.get("uid"))) for r in refs]
            present = [(r, x) for r, x in owners if x is not None]
            orphaning = [r for r, x in present if podutil.is_deleting(x[1]) and
                         "orphan" in (_md(x[1]).get("finalizers") or [])]
            if orphaning:
                drop = {r.get("uid") for r in orphaning}
                self._mutate(skey, o, lambda n: n["metadata"].__setitem__(
                    "ownerReferences", [r for r in n["metadata"].get("ownerReferences") or []
                                        if r.get("uid") not in drop]) or None,
                    actor="garbage-collector")
                continue
            if not present:
                if not podutil.is_deleting(o):
                    self._delete(skey, o, "garbage-collector",
                                 {"propagationPolicy": "Background"})
                continue
            foreground = [x for r, x in present if podutil.is_deleting(x[1]) and
                          "foregroundDeletion" in (_md(x[1]).get("finalizers") or [])]
            if foreground and len(foreground) == len(present) and not podutil.is_deleting(o):
                self._delete(skey, o, "garbage-collector", {"propagationPolicy": "Foreground"})
                continue
            dangling = [r for r, x in owners if x is None]
            if dangling:
                gone = {r.get("uid") for r in dangling}
                self._mutate(skey, o, lambda n: n["metadata"].__setitem__(
                    "ownerReferences", [r for r in n["metadata"].get("ownerReferences") or []
                                        if r.get("uid") not in gone]) or None,
                    actor="garbage-collector")
        for uid, (skey, o) in list(index.items()):
            if not podutil.is_deleting(o):
                continue
            fins = _md(o).get("finalizers") or []
            deps = dependents.get(uid, [])
            live_deps = [d for d in deps if self.store.get(d[0], self._key_of(d[0], d[1]))]
            if "orphan" in fins and not live_deps:
                self._mutate(skey, o, lambda n: n["metadata"].__setitem__(
                    "finalizers", [f for f in n["metadata"].get("finalizers") or []
                                   if f != "orphan"]), actor="garbage-collector")
            elif "foregroundDeletion" in fins and not any(
                    r.get("blockOwnerDeletion") for _, _, r in live_deps):
                self._mutate(skey, o, lambda n: n["metadata"].__setitem__(
                    "finalizers", [f for f in n["metadata"].get("finalizers") or []
                                   if f != "foregroundDeletion"]), actor="garbage-collector")

    def _key_of(self, skey, o):
        rt = self._rt(skey)
        md = _md(o)
        return (md.get("namespace", "") if rt is not None and rt.namespaced else "", md["name"])

    # -- pod GC -------------------------------------------------------------------------------
    def c_podgc(self):
        nodes = {_md(n)["name"] for n in self.nodes()}
        now = self.now()
        quarantine = self.api.scale_time(40.0)
        live = set()
        for p in self.bound_pods():
            nn = (p.get("spec") or {}).get("nodeName")
            if not nn or nn in nodes:
                continue
            uid = _md(p)["uid"]
            live.add(uid)
            first = self.orphan_seen.setdefault(uid, now)
            if now - first < quarantine:
                continue
            def mark(o):
                s = o.setdefault("status", {})
                if s.get("phase") not in ("Succeeded", "Failed"):
                    s["phase"] = "Failed"
                podutil.set_condition(s.setdefault("conditions", []), "DisruptionTarget", "True",
                                      "DeletionByPodGC", "PodGC: node no longer exists",
                                      now_rfc3339(), {"lastProbeTime": None})
            self._mutate(PODS, p, mark, "status", "pod-garbage-collector")
            self._delete(PODS, p, "pod-garbage-collector", {"gracePeriodSeconds": 0})
        for uid in list(self.orphan_seen):
            if uid not in live:
                del self.orphan_seen[uid]

    # -- events -------------------------------------------------------------------------------
    def c_events(self):
        evs = self.store.data.get(EVENTS, {})
        over = len(evs) - self.opts.max_events
        if over <= 0:
            return
        oldest = sorted(evs.values(), key=lambda e: (_md(e).get("creationTimestamp", ""),
                                                     int(_md(e).get("resourceVersion", "0"))))
        for e in oldest[:over]:
            self.store.commit(EVENTS, (_md(e)["namespace"], _md(e)["name"]), None, "DELETED")

    # -- kubelet registration -----------------------------------------------------------------
    def register_node(self, spec):
        """Creates a Node the way a kubelet registers itself; returns the stored object."""
        name = spec.get("name")
        if not name:
            raise ApiError(400, "BadRequest", "name is required")
        zone = spec.get("zone", "us-east-1a")
        region = spec.get("region") or (zone[:-1] if zone and zone[-1].isalpha() else zone)
        iid = spec.get("instanceID") or "i-" + "".join(random.choice("0123456789abcdef")
                                                        for _ in range(17))
        itype = spec.get("instanceType", "m5.large")
        cap = dict(spec.get("capacity") or {"cpu": "2", "memory": "8Gi", "pods": "110",
                                            "ephemeral-storage": "20Gi"})
        cap.setdefault("pods", "110")
        alloc = dict(spec.get("allocatable") or cap)
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": spec.get("arch", "amd64"),
                  "beta.kubernetes.io/os": "linux",
                  "beta.kubernetes.io/arch": spec.get("arch", "amd64"),
                  "node.kubernetes.io/instance-type": itype,
                  "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": region}
        labels.update(spec.get("labels") or {})
        ready = spec.get("ready", True)
        ready_s = "True" if ready is True else ("False" if ready is False else str(ready))
        ts = now_rfc3339()
        idx = len(self.node_ips) + 1
        ip = spec.get("internalIP") or f"10.0.{idx // 250}.{idx % 250 + 4}"
        conds = [
            {"type": t, "status": "False", "reason": r, "message": m,
             "lastHeartbeatTime": ts, "lastTransitionTime": ts}
            for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory",
                             "kubelet has sufficient memory available"),
                            ("DiskPressure", "KubeletHasNoDiskPressure",
                             "kubelet has no disk pressure"),
                            ("PIDPressure", "KubeletHasSufficientPID",
                             "kubelet has sufficient PID available"))]
        conds.append({"type": "Ready", "status": ready_s,
                      "reason": "KubeletReady" if ready_s == "True" else "KubeletNotReady",
                      "message": "kubelet is posting ready status" if ready_s == "True" else
                      "container runtime network not ready", "lastHeartbeatTime": ts,
                      "lastTransitionTime": ts})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": dict(spec.get("annotations") or {})},
                "spec": {"providerID": spec.get("providerID") or f"aws:///{zone}/{iid}"},
                "status": {"capacity": cap, "allocatable": alloc, "conditions": conds,
                           "addresses": [{"type": "InternalIP", "address": ip},
                                         {"type": "Hostname", "address": name},
                                         {"type": "InternalDNS", "address":
                                          f"ip-{ip.replace('.', '-')}.ec2.internal"}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                           "nodeInfo": {"machineID": iid, "systemUUID": iid, "bootID": iid,
                                        "kernelVersion": "6.1.0-amzn2023",
                                        "osImage": "Amazon Linux 2023",
                                        "containerRuntimeVersion": "containerd://1.7.22",
                                        "kubeletVersion": spec.get("kubeletVersion",
                                                                   self.opts.kube_version),
                                        "kubeProxyVersion": "",
                                        "operatingSystem": "linux",
                                        "architecture": spec.get("arch", "amd64")}}}
        if spec.get("taints"):
            node["spec"]["taints"] = spec["taints"]
        if spec.get("unschedulable"):
            node["spec"]["unschedulable"] = True
        if spec.get("finalizers"):
            node["metadata"]["finalizers"] = list(spec["finalizers"])
        if spec.get("podCIDR"):
            node["spec"]["podCIDR"] = spec["podCIDR"]
            node["spec"]["podCIDRs"] = [spec["podCIDR"]]
        rt = self._rt(NODES)
        with self.store.lock:
            with self.api.as_actor("kubelet"):
                out = self.api.create(rt, "", node)
            self.managed_nodes.add(name)
            self.stopped_kubelets.discard(name)
            self.lease_renewed.pop(name, None)
            self.node_ips.setdefault(name, {"n": len(self.node_ips) + 1, "next": 1})
        return out

    def set_node_ready(self, name, status, reason=None, message=None):
        with self.store.lock:
            node = self.store.get(NODES, ("", name))
            if node is None:
                raise ApiError(404, "NotFound", f'nodes "{name}" not found')
            if status == "True":
                self.stopped_kubelets.discard(name)
            ts = now_rfc3339()

            def fn(o):
                conds = o.setdefault("status", {}).setdefault("conditions", [])
                r = reason or {"True": "KubeletReady", "False": "KubeletNotReady"}.get(
                    status, "NodeStatusUnknown")
                m = message or {"True": "kubelet is posting ready status",
                                "False": "kubelet stopped posting ready status"}.get(
                    status, "Kubelet stopped posting node status.")
                podutil.set_condition(conds, "Ready", status, r, m, ts,
                                      {"lastHeartbeatTime": ts})
            out = self._mutate(NODES, node, fn, "status", "kubelet")
            return out if out is not None else self.api.get(self._rt(NODES), "", name)

    def remove_node(self, name, delete_object=True):
        """The instance is gone: the kubelet stops, and the Node is deleted like the cloud
        node lifecycle controller does (finalizers keep it until they are removed)."""
        with self.store.lock:
            node = self.store.get(NODES, ("", name))
            if node is None:
                raise ApiError(404, "NotFound", f'nodes "{name}" not found')
            self.stopped_kubelets.add(name)
            self.set_node_ready(name, "Unknown")
            if delete_object:
                with self.api.as_actor("cloud-node-lifecycle-controller"):
                    self.api.delete(self._rt(NODES), "", name, {})
            return True
