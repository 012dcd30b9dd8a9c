"""The demo's machinery: the scenario file, an observer that reads the running system, the steps,
the summary and the plot. Standard library only (botocore comes in through tests/pylib/stack.py).

Sources, and nothing else: Kubernetes (a pod watch, node and Deployment lists), the EC2 proxy's
call log (/_fake/log), the coordinator (/api/v1/nodes, /metrics, --help), the fake API server's
eviction audit (/_fake/evictions), the emulator's state and timeline (/_emu/state, /_emu/events)
and the instance catalog's prices (data/catalog-us-east-1.json)."""
import calendar
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from nsharness import ROOT

CATALOG = os.path.join(ROOT, "data", "catalog-us-east-1.json")
NS = "default"


class StepError(Exception):
    pass


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    v = sorted(values)
    if not v:
        return None
    k = max(1, math.ceil(p / 100.0 * len(v)))
    return v[k - 1]


def iso_to_unix(s):
    if not s:
        return None
    s = s.rstrip("Z")
    frac = 0.0
    if "." in s:
        s, f = s.split(".", 1)
        frac = float("0." + f)
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%S")) + frac


def short(node):
    return (node or "-").replace(".ec2.internal", "")


# ---- the scenario file ------------------------------------------------------------------------

STEP_KINDS = ("apply", "wait-running", "spot-interrupt", "delete-node", "scale", "wait-consolidation",
              "sleep")


class Scenario:
    def __init__(self, path, data):
        self.path = os.path.abspath(path)
        self.dir = os.path.dirname(self.path)
        self.name = data.get("name") or os.path.basename(path)
        self.description = data.get("description", "")
        self.cluster = data.get("cluster", "demo")
        self.namespace = data.get("namespace", NS)
        self.nodepools = [self.file(f) for f in _list(data.get("nodepools", []))]
        self.stack = dict(data.get("stack") or {})
        self.steps = data.get("steps") or []
        for i, s in enumerate(self.steps):
            if s.get("do") not in STEP_KINDS:
                raise ValueError(f"{path}: step {i + 1}: 'do' must be one of {', '.join(STEP_KINDS)}")
        self.time_limit = float(data.get("timeLimitSeconds", 170))

    def file(self, f):
        p = f if os.path.isabs(f) else os.path.join(self.dir, f)
        if not os.path.exists(p):
            raise ValueError(f"{self.path}: {f}: no such file")
        return p

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls(path, json.load(f))


def _list(x):
    return x if isinstance(x, list) else [x]


# ---- output -----------------------------------------------------------------------------------

class Printer:
    def __init__(self, quiet=False):
        self.quiet = quiet
        self.t0 = time.time()
        self.lock = threading.Lock()
        self.tty = sys.stdout.isatty()
        self.progress_shown = False

    def elapsed(self, wall=None):
        return (wall or time.time()) - self.t0

    def _clear_progress(self):
        if self.progress_shown and self.tty:
            sys.stdout.write("\r\033[K")
        self.progress_shown = False

    def line(self, text=""):
        with self.lock:
            self._clear_progress()
            print(text, flush=True)

    def header(self, sc):
        if self.quiet:
            return
        self.line(f"nodesmith demo: {sc.name}" + (f" — {sc.description}" if sc.description else ""))
        self.line(f"{'TIME':>8}  {'EVENT':<24} {'NODE':<16} REASON")

    def event(self, wall, event, node, reason):
        if self.quiet:
            return
        self.line(f"{self.elapsed(wall):7.1f}s  {event:<24} {short(node):<16} {reason}")

    def step(self, n, total, title):
        if self.quiet:
            return
        self.line(f"{'':>8}  ── step {n}/{total}: {title}")

    def progress(self, text):
        if self.quiet:
            return
        with self.lock:
            if self.tty:
                sys.stdout.write(f"\r\033[K{self.elapsed():7.1f}s  … {text}")
                sys.stdout.flush()
                self.progress_shown = True
            else:
                print(f"{self.elapsed():7.1f}s  … {text}", flush=True)

    def table(self, result):
        s = result.get("summary") or {}
        if not s:
            return
        L = []
        L.append("")
        L.append(f"Result of '{result.get('name')}'" + ("" if result.get("completed") else "  (INCOMPLETE)"))
        L.append(f"  {'nodes at the end':<28}{'TYPE':<16}{'CAPACITY':<11}{'COUNT':>5}  {'$/h EACH':>9}")
        for n in s["nodesEnd"]:
            L.append(f"  {'':<28}{n['type']:<16}{n['capacityType']:<11}{n['count']:>5}  {n['price']:>9.4f}")
        L.append(f"  {'':<28}{'total':<27}{s['nodesEndCount']:>5}")
        c = s["cost"]
        def money(x):
            return "-" if x is None else f"${x:.4f}/h"
        L.append(f"  {'hourly cost':<28}before {money(c['before'])}  after {money(c['after'])}  "
                 f"(peak {money(c['peak'])}; {c['beforeLabel']} → {c['afterLabel']})")
        L.append(f"  {'nodes launched / removed':<28}{s['instancesLaunched']} / {s['instancesTerminated']}")
        L.append(f"  {'pods disrupted (evicted)':<28}{s['podsDisrupted']}  "
                 f"({s['evictionsRefused']} eviction(s) refused by a PDB, retried)")
        L.append(f"  {'PDB violations':<28}{s['pdbViolations']}")
        L.append(f"  {'pods lost':<28}{s['podsLost']}  (desired {s['podsDesired']}, Running {s['podsRunning']})")
        lat = s["pendingToRunning"]
        if lat["count"]:
            L.append(f"  {'pending → running':<28}p50 {lat['p50']:.1f}s  p99 {lat['p99']:.1f}s  "
                     f"max {lat['max']:.1f}s  ({lat['count']} pods)")
        L.append(f"  {'steps':<28}" + "; ".join(f"{x['do']} {'ok' if x.get('ok', True) else 'FAILED'}"
                                                 + (f" ({x['note']})" if x.get("note") else "")
                                                 for x in result.get("steps", [])))
        L.append(f"  {'wall time':<28}{s['wallSeconds']:.1f}s")
        with self.lock:
            self._clear_progress()
            print("\n".join(L), flush=True)


# ---- HTTP -------------------------------------------------------------------------------------

def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def get_text(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode(errors="replace")


# ---- the observer -----------------------------------------------------------------------------

class Observer:
    """Reads the running system in two threads: a pod watch (exact creation and Running times)
    and a poller (emulator events, EC2 calls, coordinator drains, Nodes, evictions, cost)."""

    def __init__(self, stack, out, namespace=NS):
        self.s = stack
        self.out = out
        self.ns = namespace
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        with open(CATALOG) as f:
            self.catalog = {t["name"]: t for t in json.load(f)["instance_types"]}
        self.pods = {}             # uid -> {name, app, created, running, node, deleted}
        self.nodes = {}            # name -> Node as last listed
        self.node_first = {}       # name -> wall time first seen
        self.node_gone = {}        # name -> wall time no longer listed
        self.node_deleting = {}    # name -> wall time deletionTimestamp first seen
        self.node_finalizers_while_deleting = {}  # name -> finalizers seen with a deletionTimestamp
        self.instances = {}        # id -> {type, lifecycle, zone, node, launched, ready, terminated}
        self.node_of = {}          # instance id -> node name
        self.coord = {}            # instance id -> last /api/v1/nodes item
        self.drain_seen = {}       # instance id -> {"directed": t, "reason", "drained": t}
        self.fleets = []           # CreateFleet log entries (with wall time)
        self.terminations = []     # TerminateInstances log entries
        self.evictions = []        # audit entries
        self.violations = []
        self.emu_events = []
        self.samples = []          # {t, nodes, cost, spot, onDemand}
        self.timeline = []
        self._emu_seq = 0
        self.registered_at = {}  # instance -> (unix, node) of its registration, seen by the emulator
        self._log_seq = 0
        self._audit_n = 0
        self._threads = []
        self._buffer = []

    # timeline
    def note(self, wall, event, node="-", reason="", buffered=False):
        e = {"t": round(self.out.elapsed(wall), 2), "unix": round(wall, 3), "event": event,
             "node": node, "reason": reason}
        if buffered:   # the poller prints a cycle's events sorted by time
            self._buffer.append(e)
            return
        with self.lock:
            self.timeline.append(e)
        self.out.event(wall, event, node, reason)

    def _flush(self):
        buf, self._buffer = sorted(self._buffer, key=lambda e: e["unix"]), []
        for e in buf:
            with self.lock:
                self.timeline.append(e)
            self.out.event(e["unix"], e["event"], e["node"], e["reason"])

    def price(self, itype, lifecycle):
        t = self.catalog.get(itype) or {}
        return float(t.get("spot_price" if lifecycle == "spot" else "on_demand_price") or 0.0)

    def start(self):
        for fn in (self._watch_pods, self._poll_loop):
            th = threading.Thread(target=fn, daemon=True)
            th.start()
            self._threads.append(th)

    def stop(self):
        self.stopping.set()
        for th in self._threads:
            th.join(timeout=8)

    # -- pods --
    def _watch_pods(self):
        c = self.s.cluster_cp
        if c is not None:  # the real API server: TLS, a client certificate
            from cluster import Informer
            first = []
            inf = Informer(c.server, c.ssl_context(), f"/api/v1/namespaces/{self.ns}/pods",
                           lambda kind, p: self._pod_event(kind, p, time.time(), initial=not first),
                           self.stopping)
            threading.Thread(target=lambda: (inf.synced.wait(60), first.append(1)), daemon=True).start()
            inf.run()
            return
        rv = None
        base = f"{self.s.kube_server}/api/v1/namespaces/{self.ns}/pods"
        while not self.stopping.is_set():
            try:
                if rv is None:
                    lst = get_json(base)
                    now = time.time()
                    for p in lst["items"]:
                        self._pod_event("ADDED", p, now, initial=True)
                    rv = lst["metadata"]["resourceVersion"]
                req = f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds=2&allowWatchBookmarks=true"
                with urllib.request.urlopen(req, timeout=10) as r:
                    for raw in r:
                        if not raw.strip():
                            continue
                        ev = json.loads(raw)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            rv = None
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if ev.get("type") != "BOOKMARK":
                            self._pod_event(ev["type"], obj, time.time())
                        if self.stopping.is_set():
                            return
            except Exception:
                if self.stopping.wait(0.3):
                    return

    def _pod_event(self, kind, p, now, initial=False):
        md, st = p["metadata"], p.get("status") or {}
        uid = md["uid"]
        with self.lock:
            rec = self.pods.get(uid)
            if rec is None:
                created = iso_to_unix(md.get("creationTimestamp")) if initial else now
                rec = self.pods[uid] = {"name": md["name"], "app": (md.get("labels") or {}).get("app"),
                                        "created": created, "running": None, "node": None, "deleted": None}
            rec["node"] = p["spec"].get("nodeName") or rec["node"]
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            if rec["running"] is None and st.get("phase") == "Running" and ready:
                rec["running"] = now
            if (kind == "DELETED" or md.get("deletionTimestamp")) and rec["deleted"] is None:
                rec["deleted"] = now

    # -- polling --
    def _poll_loop(self):
        last_sample = 0.0
        while not self.stopping.is_set():
            t = time.time()
            for fn in (self._poll_coordinator, self._poll_emu, self._poll_ec2, self._poll_nodes,
                       self._poll_evictions):
                try:
                    fn()
                except Exception:
                    pass
            self._flush()
            if t - last_sample >= 1.0:
                try:
                    self._sample()
                    last_sample = t
                except Exception:
                    pass
            self.stopping.wait(max(0.05, 0.2 - (time.time() - t)))

    def _poll_emu(self):
        evs = self.s.emu("GET", f"events?since={self._emu_seq}")
        for e in evs["events"]:
            self._emu_seq = max(self._emu_seq, e["seq"])
            with self.lock:
                self.emu_events.append(e)
            inst, node, kind = e.get("instance"), e.get("node"), e["event"]
            if inst and node:
                self.node_of[inst] = node
            i = self.instances.get(inst)
            if kind == "registered":
                # the node may register before its CreateFleet shows in the EC2 log polled next
                self.registered_at[inst] = (e["unix"], node)
                if i is not None:
                    i["ready"] = e["unix"]
                    i["node"] = node
                itype = i["type"] if i else "?"
                cap = i["lifecycle"] if i else "?"
                self.note(e["unix"], "node Ready", node, f"{inst} {itype} {cap}"
                          + (f" {i['zone']}" if i else "") + " — agent started with its own IMDS", buffered=True)
            elif kind == "interrupted":
                self.note(e["unix"], "spot interruption", node, f"{inst}: {e['detail']}", buffered=True)
            elif kind in ("shutting-down", "terminated") and i is not None and not i.get("gone"):
                i["gone"] = e["unix"]
                self.note(e["unix"], f"instance {kind}", node, inst, buffered=True)
            elif kind == "reclaimed":
                self.note(e["unix"], "spot reclaimed", node, f"{inst}: EC2 took it back at the deadline", buffered=True)
            elif kind == "node-deleted":
                self.note(e["unix"], "Node removed", node, e.get("detail") or "", buffered=True)
            elif kind in ("boot-failed", "agent-exited", "reclaim-failed"):
                self.note(e["unix"], kind, node, e.get("detail") or "", buffered=True)

    def _poll_ec2(self):
        calls = self.s.proxy("GET", f"log?since={self._log_seq}")["calls"]
        for c in calls:
            self._log_seq = max(self._log_seq, c["seq"])
            wall = iso_to_unix(c.get("time")) or time.time()
            c["unix"] = wall
            if c.get("action") == "CreateFleet" and c.get("instance_ids") and not c.get("replayed"):
                with self.lock:
                    self.fleets.append(c)
                for pool in c.get("pools", []):
                    for iid in pool.get("instances", []):
                        ready, node = self.registered_at.get(iid, (None, None))
                        self.instances[iid] = {"type": pool["instance_type"], "zone": pool.get("zone"),
                                               "lifecycle": c.get("capacity_type") or "on-demand",
                                               "launched": wall, "ready": ready, "node": node}
                        self.note(wall, "launch (CreateFleet)", iid,
                                  f"{pool['instance_type']} {c.get('capacity_type')} {pool.get('zone')} "
                                  f"${self.price(pool['instance_type'], c.get('capacity_type')):.4f}/h", buffered=True)
            elif c.get("action") == "CreateFleet" and c.get("errors"):
                self.note(wall, "CreateFleet error", "-", "; ".join(
                    f"{e.get('instance_type')}: {e.get('error_code')}" for e in c["errors"][:3]), buffered=True)
            elif c.get("action") == "TerminateInstances" and c.get("instance_ids"):
                with self.lock:
                    self.terminations.append(c)
                for iid in c["instance_ids"]:
                    self.note(wall, "TerminateInstances", self.node_of.get(iid, iid), iid, buffered=True)

    def _poll_coordinator(self):
        items = get_json(self.s.coordinator_http + "/api/v1/nodes", timeout=3)["items"]
        now = time.time()
        for n in items:
            iid = n["instanceId"]
            self.coord[iid] = n
            d = self.drain_seen.setdefault(iid, {})
            phase = (n.get("drain") or {}).get("phase")
            if n.get("action") == "drain" and "directed" not in d:
                d["directed"] = now
                d["reason"] = n.get("drainReason")
            if phase and phase != "PHASE_NONE" and "started" not in d:
                # the agent's own start time of the drain, when it reports one
                d["started"] = float((n.get("drain") or {}).get("startedUnixMs") or 0) / 1000 or now
                d.setdefault("reason", n.get("drainReason") or (n.get("drain") or {}).get("reason"))
                self.note(d["started"], "draining", n.get("name"),
                          f"reason {n.get('drainReason') or (n.get('drain') or {}).get('reason')}: "
                          "cordon, taint, evict through the Eviction API", buffered=True)
            if phase == "PHASE_DRAINED" and "drained" not in d:
                d["drained"] = now
                d.setdefault("reason", n.get("drainReason"))
                self.note(now, "drained", n.get("name"), f"{n.get('drainReason') or ''}: reported by the "
                          f"agent, {n.get('pods', 0)} pod(s) left", buffered=True)

    def _poll_nodes(self):
        items = self.s.kube_get("/api/v1/nodes")["items"]
        now = time.time()
        seen = set()
        for n in items:
            name = n["metadata"]["name"]
            seen.add(name)
            self.node_first.setdefault(name, now)
            iid = (n["spec"].get("providerID") or "").rsplit("/", 1)[-1]
            lab = n["metadata"].get("labels") or {}
            if iid in self.instances:
                self.instances[iid].update(node=name, arch=lab.get("kubernetes.io/arch"),
                                           nodepool=lab.get("nodesmith.io/nodepool"))
            if n["metadata"].get("deletionTimestamp"):
                if name not in self.node_deleting:
                    self.node_deleting[name] = now
                    self.note(now, "Node deleting", name, "deletionTimestamp set; finalizers "
                              f"{n['metadata'].get('finalizers') or []} hold it", buffered=True)
                self.node_finalizers_while_deleting.setdefault(name, set()).update(
                    n["metadata"].get("finalizers") or [])
        with self.lock:
            for name in list(self.nodes):
                if name not in seen and name not in self.node_gone:
                    self.node_gone[name] = now
            self.nodes = {n["metadata"]["name"]: n for n in items}

    def _poll_evictions(self):
        a = self.s.eviction_audit()
        new = a["evictions"][self._audit_n:]
        self._audit_n = len(a["evictions"])
        with self.lock:
            self.evictions.extend(new)
            self.violations = a.get("violations") or []
        by_node = {}
        for e in new:
            if e.get("dryRun"):
                continue
            by_node.setdefault((e.get("node"), e.get("decision")), []).append(e)
        for (node, decision), es in by_node.items():
            apps = {}
            for e in es:
                app = e["pod"].rsplit("-", 2)[0]
                apps[app] = apps.get(app, 0) + 1
            what = ", ".join(f"{a}×{k}" for a, k in sorted(apps.items()))
            wall = iso_to_unix(es[0].get("time")) or time.time()
            if decision == "evicted":
                self.note(wall, f"evicted {len(es)} pod(s)", node, what, buffered=True)
            else:
                pdbs = sorted({e.get("pdb") or "-" for e in es})
                self.note(wall, "eviction refused", node, f"{what}: PDB {','.join(pdbs)} "
                          f"(HTTP {es[0].get('code')}), the agent retries", buffered=True)

    def _sample(self):
        st = self.s.emu("GET", "state")
        now = time.time()
        running = [i for i in st["instances"] if i.get("ec2State") in ("pending", "running")]
        cost = sum(self.price(i["instanceType"], i.get("lifecycle")) for i in running)
        ready = [n for n in self.nodes.values() if not n["metadata"].get("deletionTimestamp")]
        with self.lock:
            self.samples.append({"t": round(self.out.elapsed(now), 2), "unix": round(now, 3),
                                 "instances": len(running),
                                 "spot": sum(1 for i in running if i.get("lifecycle") == "spot"),
                                 "nodes": len(ready), "cost": round(cost, 4),
                                 "types": sorted(f"{i['instanceType']}/{i.get('lifecycle')}" for i in running)})
        for i in st["instances"] + st.get("earlierBoots", []):
            self.s.seen_pids.update(p for p in (i.get("agentPid"), i.get("imdsPid")) if p)

    # -- snapshots for the steps --
    def running_instances(self):
        st = self.s.emu("GET", "state")
        return [i for i in st["instances"] if i.get("ec2State") in ("pending", "running")]

    def cost_now(self):
        return round(sum(self.price(i["instanceType"], i.get("lifecycle")) for i in self.running_instances()), 4)


# ---- Kubernetes helpers -----------------------------------------------------------------------

def deployments(s, ns):
    return s.kube_get(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]


def pod_list(s, ns):
    return s.kube_get(f"/api/v1/namespaces/{ns}/pods")["items"]


def is_ready(p):
    return p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or [])


def workload_state(s, ns, exclude_node=None):
    """(desired, running, pending, per-deployment {name: (desired, running)}): pods of the
    namespace's Deployments Running and Ready, not deleting, not on exclude_node."""
    deps = deployments(s, ns)
    pods = pod_list(s, ns)
    per = {}
    for d in deps:
        sel = d["spec"]["selector"].get("matchLabels") or {}
        mine = [p for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())]
        run = [p for p in mine if is_ready(p) and (exclude_node is None or p["spec"].get("nodeName") != exclude_node)]
        per[d["metadata"]["name"]] = (int(d["spec"].get("replicas", 1)), len(run))
    pending = sum(1 for p in pods if p.get("status", {}).get("phase") == "Pending"
                  and not p["metadata"].get("deletionTimestamp"))
    return (sum(v[0] for v in per.values()), sum(min(v[0], v[1]) for v in per.values()), pending, per)


def node_is_ready(n):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or [])


def wait(out, what, fn, timeout, every=2.0):
    """fn() -> (done, status text). Progress every `every` seconds; returns (done, seconds, status)."""
    t0 = time.monotonic()
    last = -every
    status = ""
    while True:
        try:
            done, status = fn()
        except (urllib.error.URLError, OSError, KeyError, ValueError) as e:
            done, status = False, f"({type(e).__name__})"
        el = time.monotonic() - t0
        if done:
            return True, el, status
        if el >= timeout:
            return False, el, status
        if el - last >= every:
            out.progress(f"{what}: {status} ({el:.0f}s of at most {timeout:.0f}s)")
            last = el
        time.sleep(0.2)


def pick_node(obs, s, ns, spec, exclude=()):
    """A Ready, not-deleting Node matching spec: {name, capacityType, nodepool, arch, mostPodsOf}."""
    nodes = s.kube_get("/api/v1/nodes")["items"]
    pods = pod_list(s, ns)
    cands = []
    for n in nodes:
        md = n["metadata"]
        lab = md.get("labels") or {}
        if md.get("deletionTimestamp") or not node_is_ready(n) or md["name"] in exclude:
            continue
        if spec.get("name") and md["name"] != spec["name"]:
            continue
        if spec.get("capacityType") and lab.get("karpenter.sh/capacity-type") != spec["capacityType"]:
            continue
        if spec.get("nodepool") and lab.get("nodesmith.io/nodepool") != spec["nodepool"]:
            continue
        if spec.get("arch") and lab.get("kubernetes.io/arch") != spec["arch"]:
            continue
        on = [p for p in pods if p["spec"].get("nodeName") == md["name"] and is_ready(p)]
        app = spec.get("mostPodsOf")
        mine = sum(1 for p in on if (p["metadata"].get("labels") or {}).get("app") == app) if app else 0
        cands.append((-mine, -len(on), md["name"], n))
    if not cands:
        return None
    cands.sort(key=lambda c: c[:3])
    return cands[0][3]


# ---- the run ------------------------------------------------------------------------------------

def start_stack(sc, s, out):
    st = sc.stack
    t = time.time()
    s.start_ec2()
    s.setup_network()
    out.event(time.time(), "EC2 ready", "-", f"moto behind ec2proxy {s.ec2_endpoint}; VPC, 3 subnets "
              f"and a security group tagged nodesmith.io/discovery={s.cluster}")
    s.start_kube(grace_scale=float(st.get("graceScale", 0.05)))
    if s.cluster_cp is not None:
        out.event(time.time(), "Kubernetes ready", "-", f"{s.kube_server}: etcd, kube-apiserver, "
                  f"kube-controller-manager, kube-scheduler v1.37.2 up in {s.cluster_cp.startup_seconds}s; "
                  "packaging/kubernetes applied")
        kc = getattr(s, "demo_kubeconfig", None)
        if kc:
            shutil.copyfile(s.kubeconfig, kc)
            os.chmod(kc, 0o600)
            out.event(time.time(), "kubectl", "-", f"while the demo runs: kubectl --kubeconfig "
                      f"{os.path.relpath(kc, os.getcwd())} get nodes,pods,nodepools -A")
    else:
        out.event(time.time(), "Kubernetes API ready", "-", f"{s.kube_server} (scheduler, kubelets, "
                  "controllers emulated); nodesmith CRDs Established")
    for f in sc.nodepools:
        objs = [l for l in s.kubectl("apply", "-f", f).splitlines() if l.strip()]
        out.event(time.time(), "applied", "-", f"{os.path.relpath(f, ROOT)}: " + ", ".join(
            o.split(" ")[0] for o in objs))
    extra = ["--batch-idle", st.get("batchIdle", "500ms"), "--lease-duration", st.get("leaseDuration", "3s"),
             "--identity", "coordinator-0"] + list(st.get("coordinatorArgs", []))
    s.start_coordinator(*extra, log_level=st.get("coordinatorLogLevel", "info"))
    out.event(time.time(), "coordinator ready", "-", f"leader; agents dial {s.agent_endpoint} (TLS, "
              f"bootstrap token); http {s.coordinator_http}")
    s.start_emulator(boot_delay=float(st.get("bootDelay", 0.3)), spot_grace=float(st.get("spotGrace", 20)),
                     agent_args=list(st.get("agentArgs", ["--imds-poll-interval", "250ms"])))
    out.event(time.time(), "node emulator ready", "-", "boots each instance the coordinator launches: "
              "fake IMDS + Node + real nodesmith-agent")
    return time.time() - t


def consolidation_in_build(s):
    """Whether this coordinator build has consolidation: its --help or /metrics name it."""
    try:
        helptext = subprocess.run([s.binary("nodesmith-coordinator"), "--help"], capture_output=True,
                                  text=True, timeout=10).stdout
    except Exception:
        helptext = ""
    try:
        metrics = get_text(s.coordinator_http + "/metrics")
    except Exception:
        metrics = ""
    return "consolidat" in (helptext + metrics).lower()


def run(sc, s, out, result):
    """Start the stack, play the steps; returns the Observer (the caller stops it)."""
    t0 = time.time()
    result["startedUnix"] = round(t0, 3)
    result["stackStartSeconds"] = round(start_stack(sc, s, out), 2)
    obs = Observer(s, out, sc.namespace)
    obs.start()
    result["consolidationInBuild"] = consolidation_in_build(s)
    ctx = {"victims": [], "snapshots": {}, "consolidationInBuild": result["consolidationInBuild"]}
    total = len(sc.steps)
    for i, step in enumerate(sc.steps, 1):
        rec = {"do": step["do"], "title": step.get("title", step["do"])}
        out.step(i, total, rec["title"])
        rec["startUnix"] = round(time.time(), 3)
        STEPS[step["do"]](sc, s, out, obs, step, rec, ctx)
        rec["seconds"] = round(time.time() - rec["startUnix"], 2)
        result["steps"].append(rec)
        if rec.get("ok") is False and step.get("stopOnFailure", True):
            out.line(f"step {i} failed: {rec.get('note', '')}; stopping the scenario")
            break
    time.sleep(1.2)  # one more sample and poll of everything
    result["summary"] = summarize(obs, sc, result, ctx)
    return obs


def step_apply(sc, s, out, obs, step, rec, ctx):
    files = [sc.file(f) for f in _list(step.get("file", []))]
    objs = []
    for f in files:
        objs += [l.split(" ")[0] for l in s.kubectl("apply", "-f", f).splitlines() if l.strip()]
    time.sleep(0.3)
    desired, running, pending, per = workload_state(s, sc.namespace)
    rec.update(objects=objs, podsDesired=desired)
    obs.note(time.time(), "applied", "-", f"{', '.join(objs)} — {desired} pods wanted")


def _wait_running(sc, s, out, obs, timeout, what="pods Running", exclude_node=None):
    def fn():
        desired, running, pending, per = workload_state(s, sc.namespace, exclude_node)
        nodes = sum(1 for n in obs.nodes.values() if not n["metadata"].get("deletionTimestamp"))
        return desired > 0 and running >= desired and pending == 0, \
            f"{running}/{desired} pods Running, {pending} Pending, {nodes} node(s)"
    return wait(out, what, fn, timeout)


def step_wait_running(sc, s, out, obs, step, rec, ctx):
    ok, took, status = _wait_running(sc, s, out, obs, float(step.get("timeout", 60)))
    rec.update(ok=ok, waitedSeconds=round(took, 2), status=status)
    cost = obs.cost_now()
    n = len(obs.running_instances())
    rec.update(instances=n, cost=cost)
    ctx["snapshots"][step.get("snapshot", f"step{len(ctx['snapshots'])}")] = {"instances": n, "cost": cost}
    obs.note(time.time(), "all Running" if ok else "still not Running", "-",
             f"{status} after {took:.1f}s; {n} instance(s), ${cost:.4f}/h")
    if not ok:
        rec["note"] = f"timed out: {status}"


def _instance_of(obs, node):
    for iid, n in list(obs.node_of.items()):
        if n == node:
            return iid
    return None


def _pods_on(s, ns, node):
    return [p for p in pod_list(s, ns) if p["spec"].get("nodeName") == node and not p["metadata"].get(
        "deletionTimestamp") and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]


def step_spot_interrupt(sc, s, out, obs, step, rec, ctx):
    spec = dict(step.get("node") or {})
    spec.setdefault("capacityType", "spot")
    n = pick_node(obs, s, sc.namespace, spec, ctx["victims"])
    if n is None:
        rec.update(ok=False, note=f"no Ready node matches {spec}")
        return
    name = n["metadata"]["name"]
    iid = _instance_of(obs, name)
    ctx["victims"].append(name)
    pods = _pods_on(s, sc.namespace, name)
    grace = float(step.get("grace", 20))
    t_notice = time.time()
    r = s.spot_interrupt(name, grace=grace)
    deadline = iso_to_unix((r.get("interruption") or {}).get("time")) or (t_notice + grace)
    lab = n["metadata"]["labels"]
    rec.update(node=name, instance=iid, instanceType=lab.get("node.kubernetes.io/instance-type"),
               capacityType=lab.get("karpenter.sh/capacity-type"), noticeUnix=round(t_notice, 3),
               deadlineUnix=deadline, graceSeconds=grace, podsOnNode=len(pods),
               podsOnNodeByApp=_by_app(pods))
    obs.note(t_notice, "spot notice sent", name, f"{iid} {rec['instanceType']}: {len(pods)} pod(s) "
             f"({_fmt_apps(pods)}); EC2 takes it back in {deadline - t_notice:.0f}s")

    t_all = {}

    def fn():
        desired, running, pending, per = workload_state(s, sc.namespace, exclude_node=name)
        if running >= desired and pending == 0 and "t" not in t_all:
            t_all["t"] = time.time()
            obs.note(t_all["t"], "pods Running elsewhere", "-",
                     f"{running}/{desired}, {deadline - t_all['t']:.1f}s before the deadline")
        gone = name in obs.node_gone
        left = deadline - time.time()
        return ("t" in t_all and gone), (f"{running}/{desired} pods Running off the node, node "
                                         f"{'gone' if gone else 'still there'}, deadline in {left:.0f}s")
    ok, took, status = wait(out, "interruption handled", fn, float(step.get("timeout", grace + 25)))
    d = obs.drain_seen.get(iid, {})
    launches = [f for f in obs.fleets if f["unix"] >= t_notice - 0.5]
    repl = [i for f in launches for p in f.get("pools", []) for i in p.get("instances", [])]
    repl_ready = [obs.instances[i]["ready"] for i in repl if obs.instances.get(i, {}).get("ready")]
    term = [t for t in obs.terminations if iid in (t.get("instance_ids") or [])]
    drained = _drained_time(s, d, name)
    rec.update(drainReason=d.get("reason"), drainDirectedUnix=d.get("directed"), drainedUnix=drained,
               allRunningElsewhereUnix=t_all.get("t"), nodeGoneUnix=obs.node_gone.get(name),
               replacementInstances=[{"instance": i, "type": obs.instances[i]["type"],
                                      "capacityType": obs.instances[i]["lifecycle"],
                                      "readyUnix": obs.instances[i].get("ready")} for i in repl],
               replacementReadyUnix=max(repl_ready) if repl_ready else None,
               terminatedUnix=term[0]["unix"] if term else None,
               terminatedBy="coordinator" if term and (not drained or term[0]["unix"] >= drained - 1)
               and term[0]["unix"] < deadline else ("EC2 reclaim at the deadline" if term else None))
    before_deadline = (rec["allRunningElsewhereUnix"] or math.inf) <= deadline
    drained_in_time = (rec["drainedUnix"] or math.inf) <= deadline
    repl_in_time = not repl or (rec["replacementReadyUnix"] or math.inf) <= deadline
    rec["ok"] = bool(ok and before_deadline and repl_in_time)
    rec["drainedBeforeDeadline"] = drained_in_time
    rec["replacedBeforeDeadline"] = bool(before_deadline and repl_in_time)
    margin = deadline - (rec["allRunningElsewhereUnix"] or deadline)
    rec["note"] = (f"pods Running elsewhere {margin:.1f}s before the deadline" if rec["ok"]
                   else f"not handled in time: {status}")


def step_delete_node(sc, s, out, obs, step, rec, ctx):
    spec = dict(step.get("node") or {})
    n = pick_node(obs, s, sc.namespace, spec, ctx["victims"])
    if n is None:
        rec.update(ok=False, note=f"no Ready node matches {spec}")
        return
    name = n["metadata"]["name"]
    iid = _instance_of(obs, name)
    ctx["victims"].append(name)
    pods = _pods_on(s, sc.namespace, name)
    lab = n["metadata"]["labels"]
    rec.update(node=name, instance=iid, instanceType=lab.get("node.kubernetes.io/instance-type"),
               capacityType=lab.get("karpenter.sh/capacity-type"), podsOnNode=len(pods),
               podsOnNodeByApp=_by_app(pods), finalizersAtStart=n["metadata"].get("finalizers") or [])
    t_del = time.time()
    outp = s.kubectl("delete", "node", name, "--wait=false").strip()
    rec.update(deleteUnix=round(t_del, 3), kubectl=f"kubectl delete node {name} --wait=false: {outp}")
    obs.note(t_del, "kubectl delete node", name, f"{iid} {rec['instanceType']} {rec['capacityType']}: "
             f"{len(pods)} pod(s) ({_fmt_apps(pods)})")
    t_all = {}

    def fn():
        desired, running, pending, per = workload_state(s, sc.namespace, exclude_node=name)
        if running >= desired and pending == 0 and "t" not in t_all:
            t_all["t"] = time.time()
        gone = name in obs.node_gone
        held = name in obs.node_deleting and not gone
        return ("t" in t_all and gone), (f"{running}/{desired} pods Running off the node, Node "
                                         f"{'gone' if gone else 'held by its finalizer' if held else 'present'}")
    ok, took, status = wait(out, "node deletion", fn, float(step.get("timeout", 45)))
    d = obs.drain_seen.get(iid, {})
    ev = [e for e in obs.evictions if e.get("node") == name and e.get("decision") == "evicted"]
    last_ev = max((iso_to_unix(e["time"]) for e in ev), default=None)
    gone = obs.node_gone.get(name)
    emu_gone = [e["unix"] for e in obs.emu_events if e["event"] == "node-deleted" and e.get("node") == name]
    term = [t for t in obs.terminations if iid in (t.get("instance_ids") or [])]
    drained = _drained_time(s, d, name)
    rec.update(drainReason=d.get("reason"), drainedUnix=drained, lastEvictionUnix=last_ev,
               evicted=len(ev), nodeGoneUnix=gone, nodeDeletedEventUnix=emu_gone[0] if emu_gone else None,
               terminatedUnix=term[0]["unix"] if term else None,
               finalizersWhileDeleting=sorted(obs.node_finalizers_while_deleting.get(name, [])),
               allRunningElsewhereUnix=t_all.get("t"))
    held = "nodesmith.io/termination" in rec["finalizersWhileDeleting"]
    order = gone is not None and (rec["drainedUnix"] or math.inf) <= gone and (last_ev or 0) <= gone \
        and (rec["terminatedUnix"] or math.inf) <= gone
    rec["goneAfterDrain"] = bool(order)
    rec["ok"] = bool(ok and held and order)
    rec["note"] = (f"held by its finalizer {gone - t_del:.1f}s, gone after its drain" if rec["ok"]
                   else f"finalizer seen: {held}, drained before gone: {order}; {status}")


def _drained_time(s, seen, node):
    """When the node's drain finished. The coordinator forgets a node once its instance is
    terminated, so a quick drain may end between two looks at its state; the agent's
    NodesmithDrained Event on the Node (seconds resolution) says it too."""
    return seen.get("drained") or _drained_event_time(s, node)


def _drained_event_time(s, node):
    """When the node's agent posted its NodesmithDrained Event (seconds resolution), or None."""
    try:
        items = json.loads(s.kubectl("get", "events", "-A", "-o", "json"))["items"]
    except Exception:
        return None
    times = []
    for e in items:
        if e.get("reason") == "NodesmithDrained" and (e.get("involvedObject") or {}).get("name") == node:
            t = e.get("firstTimestamp") or e.get("lastTimestamp") or e.get("eventTime")
            if t:
                times.append(iso_to_unix(t))
    return min(times) if times else None


def step_scale(sc, s, out, obs, step, rec, ctx):
    done = {}
    for name, n in (step.get("replicas") or {}).items():
        s.kubectl("scale", f"deployment/{name}", f"--replicas={int(n)}", "-n", sc.namespace)
        done[name] = int(n)
    rec["replicas"] = done
    cost = obs.cost_now()
    ctx["snapshots"]["beforeScaleIn"] = {"instances": len(obs.running_instances()), "cost": cost}
    obs.note(time.time(), "kubectl scale", "-", ", ".join(f"{k}→{v}" for k, v in done.items())
             + f"; ${cost:.4f}/h now")


def step_wait_consolidation(sc, s, out, obs, step, rec, ctx):
    before = obs.running_instances()
    cost0 = obs.cost_now()
    timeout = float(step.get("timeout", 40))
    rec.update(instancesBefore=len(before), costBefore=cost0,
               typesBefore=sorted(f"{i['instanceType']}/{i.get('lifecycle')}" for i in before))

    def cheaper(now, cost):
        # fewer nodes (a delete), or as many but cheaper (a replace) with the old one gone
        return len(now) < len(before) or (len(now) <= len(before) and cost < cost0 - 1e-6)

    def fn():
        now = obs.running_instances()
        desired, running, pending, per = workload_state(s, sc.namespace)
        return (cheaper(now, obs.cost_now()) and running >= desired and pending == 0), \
            f"{len(now)} instance(s) (was {len(before)}), ${obs.cost_now():.4f}/h, {running}/{desired} pods Running"
    ok, took, status = wait(out, "consolidation", fn, timeout)
    if ok:
        # let a multi-node consolidation finish: until the count holds still for a few seconds
        stable, last = time.time(), len(obs.running_instances())
        limit = time.time() + float(step.get("settle", 15))
        while time.time() < limit and time.time() - stable < 4:
            time.sleep(0.5)
            k = len(obs.running_instances())
            if k != last:
                stable, last = time.time(), k
    after = obs.running_instances()
    cost1 = obs.cost_now()
    rec.update(instancesAfter=len(after), costAfter=cost1, consolidated=cheaper(after, cost1),
               typesAfter=sorted(f"{i['instanceType']}/{i.get('lifecycle')}" for i in after),
               consolidationInBuild=ctx.get("consolidationInBuild"))
    if rec["consolidated"]:
        rec["note"] = f"{len(before)} → {len(after)} nodes, ${cost0:.4f} → ${cost1:.4f}/h"
        obs.note(time.time(), "consolidated", "-", rec["note"])
    else:
        rec["note"] = f"no consolidation happened within {timeout:.0f}s"
        obs.note(time.time(), "no consolidation", "-", f"{rec['note']} ({len(after)} node(s), ${cost1:.4f}/h)")
    rec["ok"] = True  # the outcome is reported as it is; the test compares it with the build


def step_sleep(sc, s, out, obs, step, rec, ctx):
    secs = float(step.get("seconds", 1))
    wait(out, "sleeping", lambda: (False, ""), secs)


STEPS = {"apply": step_apply, "wait-running": step_wait_running, "spot-interrupt": step_spot_interrupt,
         "delete-node": step_delete_node, "scale": step_scale, "wait-consolidation": step_wait_consolidation,
         "sleep": step_sleep}


def _by_app(pods):
    out = {}
    for p in pods:
        a = (p["metadata"].get("labels") or {}).get("app", "-")
        out[a] = out.get(a, 0) + 1
    return out


def _fmt_apps(pods):
    return ", ".join(f"{a}×{k}" for a, k in sorted(_by_app(pods).items())) or "none"


# ---- summary and plot ---------------------------------------------------------------------------

def summarize(obs, sc, result, ctx=None):
    s = obs.s
    now = time.time()
    ctx = ctx or {"snapshots": {}}
    try:
        running = obs.running_instances()
    except Exception:
        running = []
    groups = {}
    for i in running:
        k = (i["instanceType"], i.get("lifecycle") or "on-demand")
        groups[k] = groups.get(k, 0) + 1
    nodes_end = [{"type": t, "capacityType": c, "count": k, "price": obs.price(t, c)}
                 for (t, c), k in sorted(groups.items())]
    try:
        desired, ready, pending, per = workload_state(s, sc.namespace)
    except Exception:
        desired, ready, pending, per = 0, 0, 0, {}
    try:
        audit = s.eviction_audit()
    except Exception:
        audit = {"evictions": obs.evictions, "violations": obs.violations,
                 "violationCount": len(obs.violations)}
    evicted = [e for e in audit["evictions"] if e.get("decision") == "evicted" and not e.get("dryRun")]
    refused = [e for e in audit["evictions"] if e.get("decision") not in ("evicted",) and not e.get("dryRun")]
    lat = [p["running"] - p["created"] for p in obs.pods.values() if p["running"] and p["created"]]
    never = [p["name"] for p in obs.pods.values() if not p["running"] and not p["deleted"]]
    samples = obs.samples
    snaps = ctx["snapshots"]
    before = snaps.get("beforeScaleIn") or (snaps and list(snaps.values())[-1]) or {}
    end_cost = round(sum(n["price"] * n["count"] for n in nodes_end), 4)
    try:
        metrics = get_text(s.coordinator_http + "/metrics")
        coord_metrics = {l.split(" ")[0]: float(l.split(" ")[1]) for l in metrics.splitlines()
                         if l.startswith("nodesmith_") and " " in l and "{" not in l.split(" ")[0]}
    except Exception:
        coord_metrics = {}
    return {
        "nodesEnd": nodes_end,
        "nodesEndCount": sum(n["count"] for n in nodes_end),
        "nodesPeak": max((x["instances"] for x in samples), default=0),
        "cost": {"before": before.get("cost"), "after": end_cost,
                 "beforeLabel": "before scale-in" if "beforeScaleIn" in snaps else "after the last wait",
                 "afterLabel": "end", "peak": max((x["cost"] for x in samples), default=None),
                 "afterBurst": (snaps.get("burst") or {}).get("cost")},
        "instances": obs.instances,
        "instancesLaunched": len({i for f in obs.fleets for i in f.get("instance_ids", [])}),
        "instancesTerminated": len({i for t in obs.terminations for i in t.get("instance_ids", [])}),
        "podsDisrupted": len(evicted),
        "evictionsRefused": len(refused),
        "pdbViolations": int(audit.get("violationCount", len(audit.get("violations") or []))),
        "violations": audit.get("violations") or [],
        "podsDesired": desired, "podsRunning": ready, "podsPending": pending,
        "podsLost": sum(max(0, d - r) for d, r in per.values()),
        "deployments": {k: {"desired": d, "running": r} for k, (d, r) in per.items()},
        "podsNeverRunning": never,
        "pendingToRunning": {"count": len(lat), "p50": percentile(lat, 50), "p99": percentile(lat, 99),
                             "max": max(lat) if lat else None},
        "wallSeconds": round(now - result.get("startedUnix", now), 1),
        "coordinatorMetrics": coord_metrics,
        "samples": samples,
        "timeline": obs.timeline,
    }


def plot(result, png):
    """nodes and hourly cost over time, with gnuplot; returns the PNG path or None."""
    gp = shutil.which("gnuplot")
    samples = (result.get("summary") or {}).get("samples") or []
    if not gp or len(samples) < 2:
        return None
    data = png + ".dat"
    with open(data, "w") as f:
        f.write("# t_seconds instances cost_per_hour\n")
        for x in samples:
            f.write(f"{x['t']} {x['instances']} {x['cost']}\n")
    marks = []
    t0 = result.get("startedUnix", 0)
    for st in result.get("steps", []):
        if st["do"] in ("spot-interrupt", "delete-node", "scale", "apply"):
            marks.append((st["startUnix"] - t0 + 0.0, st["do"]))
    # the Printer's clock starts a little before startedUnix; samples use the Printer's clock
    off = samples[0]["t"] - (samples[0]["unix"] - t0)
    arrows = "\n".join(
        f'set arrow from {t + off:.1f}, graph 0 to {t + off:.1f}, graph 1 nohead dt 2 lc rgb "#888888"\n'
        f'set label "{name}" at {t + off + 0.4:.1f}, graph {0.96 - 0.06 * (k % 3):.2f} font ",9" '
        'textcolor rgb "#555555"' for k, (t, name) in enumerate(marks))
    script = f"""
set terminal pngcairo size 1000,520 font ",10"
set output "{png}"
set title "nodesmith demo: {result.get('name', '')}"
set xlabel "seconds"
set ylabel "instances running"
set y2label "hourly cost (USD)"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key outside bottom center horizontal
set grid
{arrows}
plot "{data}" using 1:2 with steps lw 2 title "instances", \\
     "{data}" using 1:3 axes x1y2 with steps lw 2 title "$/h"
"""
    try:
        r = subprocess.run([gp], input=script, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            script = script.replace("pngcairo size 1000,520 font \",10\"", "png size 1000,520")
            r = subprocess.run([gp], input=script, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return png if r.returncode == 0 and os.path.exists(png) else None
