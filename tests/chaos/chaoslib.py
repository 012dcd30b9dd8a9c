"""One seeded chaos run on the local stack, and the invariants checked after it.

A run starts the stack (moto behind the EC2 proxy, the fake API server, two coordinators behind
the agents' Service, the node emulator with one real agent and fake IMDS per instance), brings
a workload up, then for a bounded time plays faults drawn from random.Random(seed) while the
workload scales and spot notices arrive. Then every fault is lifted, the system is given a
bounded time to settle, and the invariants are checked against what the fakes recorded: the
API server's eviction/PDB audit and objects, the EC2 proxy's call log, the emulator's timeline.

Standard library only (botocore through tests/pylib/stack.py)."""
import heapq
import json
import os
import random
import re
import threading
import time
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
import sys  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
sys.path.insert(0, os.path.join(HERE, "..", "demo"))
from stack import CLUSTER_TAG, NODEPOOL_TAG, LocalStack  # noqa: E402
from demolib import is_ready, iso_to_unix, workload_state  # noqa: E402
from workload import apply_objs, deployment, node_class_yaml, pdb  # noqa: E402

NS = "default"
DRAIN_TAINT = "nodesmith.io/disrupted"
FINALIZER = "nodesmith.io/termination"

NODEPOOL = """
---
apiVersion: nodesmith.io/v1
kind: NodePool
metadata: {name: general}
spec:
  template:
    spec:
      nodeClassRef: {group: nodesmith.io, kind: EC2NodeClass, name: default}
      requirements:
        - {key: nodesmith.io/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: nodesmith.io/instance-category, operator: In, values: [c, m, r]}
        - {key: nodesmith.io/instance-generation, operator: Gt, values: ["5"]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: nodesmith.io/instance-cpu, operator: Lt, values: ["5"]}
        - {key: nodesmith.io/instance-size, operator: NotIn, values: [metal]}
  limits: {cpu: "64"}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 5s
    budgets: [{nodes: "50%"}]
"""

# name -> (cpu, memory, initial replicas, (min, max) when scaled); web is guarded by a PDB
WORKLOAD = {"web": ("500m", "1Gi", 6, (4, 8)), "api": ("1", "2Gi", 3, (1, 5)),
            "batch": ("250m", "512Mi", 4, (0, 8))}
PDB_APP, PDB_MAX_UNAVAILABLE = "web", 1


def workload_objs():
    return [deployment(name, n, cpu, mem) for name, (cpu, mem, n, _) in WORKLOAD.items()] + \
        [pdb(PDB_APP, maxUnavailable=PDB_MAX_UNAVAILABLE)]


def _req(method, url, body=None, timeout=5):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw[:300].decode(errors="replace")


class Coordinators:
    """Two replicas (identities chaos-a and chaos-b) that keep their ports across restarts, so
    the agents' Service finds a restarted one where it was."""
    ARGS = ("--batch-idle", "500ms", "--lease-duration", "3s", "--consolidation-interval", "2s",
            "--consolidation-validation-delay", "3s", "--log-level", "info")

    def __init__(self, stack):
        self.s = stack
        self.ports = {}      # identity -> (agent port, http port)
        self.procs = {}

    def start(self, ident):
        p = self.s.start_coordinator(*self.ARGS, "--identity", ident, log_level="info",
                                     name=f"coordinator-{ident}", ports=self.ports.get(ident))
        self.ports[ident] = (self.s.coordinator_port, self.s.coordinator_http_port)
        self.procs[ident] = p
        return p

    def http(self, ident):
        return f"http://127.0.0.1:{self.ports[ident][1]}"

    def alive(self, ident):
        p = self.procs.get(ident)
        return p is not None and p.alive()

    def leading(self, ident):
        if not self.alive(ident):
            return False
        try:
            st, out = _req("GET", self.http(ident) + "/api/v1/provisioning", timeout=2)
            return st == 200 and bool(out.get("leading"))
        except (OSError, ValueError):
            return False

    def leader(self):
        return next((i for i in self.procs if self.leading(i)), None)

    def kill(self, ident, hard):
        p = self.procs[ident]
        if hard:
            p.kill()
            p.stop(timeout=1)  # closes its log
        else:
            p.stop(timeout=10)

    def nodes(self):
        """The leader's /api/v1/nodes items, or None when no replica leads."""
        who = self.leader()
        if who is None:
            return None
        st, out = _req("GET", self.http(who) + "/api/v1/nodes", timeout=3)
        return out.get("items", []) if st == 200 else None


class Run:
    """One seeded run. run() returns a result dict: seed, timings, the actions played, the
    violations found (each with the actions around it), and whether the run got far enough to
    judge (setupError otherwise)."""

    def __init__(self, seed, workdir, build, agent_build=None, chaos_seconds=30.0, settle_seconds=75.0,
                 log=print):
        self.seed = seed
        self.rng = random.Random(seed)
        self.workdir = workdir
        self.build = build
        self.agent_build = agent_build or build
        self.chaos_seconds = chaos_seconds
        self.settle_seconds = settle_seconds
        self.log = log
        self.cluster = "chaos"
        self.s = LocalStack(workdir, build=build, cluster=self.cluster, kube="real")
        self.coord = Coordinators(self.s)
        self.t0 = None
        self.actions = []         # {t, unix, kind, target, detail}
        self.undo = []            # heap of (unix, n, description, fn)
        self._n = 0
        self.decoys = {}
        self.noticed = set()
        self.down_coordinators = set()
        self.launches_checked = 0
        self.cordons = CordonWatch()
        self._sampling = threading.Event()
        self._sampler = None

    # ---- bookkeeping ---------------------------------------------------------------------
    def note(self, kind, target, detail=""):
        now = time.time()
        a = {"t": round(now - self.t0, 2), "unix": round(now, 3), "kind": kind, "target": target,
             "detail": detail}
        self.actions.append(a)
        self.log(f"  {a['t']:6.1f}s  {kind:<18} {target:<28} {detail}")

    def later(self, delay, what, fn):
        self._n += 1
        heapq.heappush(self.undo, (time.time() + delay, self._n, what, fn))

    def run_due(self, everything=False):
        while self.undo and (everything or self.undo[0][0] <= time.time()):
            _, _, what, fn = heapq.heappop(self.undo)
            try:
                fn()
            except Exception as e:  # an undo must not stop the run; the settle check catches it
                self.note("undo-failed", what, f"{type(e).__name__}: {e}")

    # ---- the stack -----------------------------------------------------------------------
    def start(self):
        s = self.s
        s.start_ec2()
        s.setup_network()
        s.start_kube(grace_scale=0.05, fault_proxy=True)
        s.apply(node_class_yaml(self.cluster) + NODEPOOL)
        # instances the coordinators must never terminate: no cluster tag, another cluster's
        self.decoys = {
            s.run_instance("m6i.large", zone="us-east-1a", cluster=False): "no tags",
            s.run_instance("m6i.large", zone="us-east-1b", cluster=False, nodepool="general"):
                "NodePool tag, no cluster tag",
            s.run_instance("c6i.large", zone="us-east-1c", tags={CLUSTER_TAG: "another-cluster",
                                                                 NODEPOOL_TAG: "general"}):
                "another cluster's tag",
        }
        self.coord.start("chaos-a")
        self.coord.start("chaos-b")
        s.start_emulator(boot_delay=0.3, spot_grace=15,
                         agent_args=["--imds-poll-interval", "250ms", "--report-interval", "1s"],
                         extra=["--agent-restart-sec", "1", "--build", self.agent_build])

    def stop(self):
        self.s.stop_all()
        left = self.s.leftovers()
        if left:
            self.s.kill_leftovers()
        return left

    # ---- reading the world ---------------------------------------------------------------
    def nodes(self):
        return {n["metadata"]["name"]: n for n in self.s.kube_get("/api/v1/nodes")["items"]}

    def emu_instances(self):
        return self.s.emu("GET", "state")["instances"]

    def ready_nodes(self, spot=None):
        out = []
        for i in self.emu_instances():
            if i.get("phase") != "ready" or not (i.get("agentAlive") or i.get("agentRestartPending")):
                continue
            if spot is not None and (i.get("lifecycle") == "spot") != spot:
                continue
            out.append(i)
        return out

    def pods_of(self, app):
        items = self.s.kube_get(f"/api/v1/namespaces/{NS}/pods")["items"]
        return [p for p in items if (p["metadata"].get("labels") or {}).get("app") == app and is_ready(p)]

    def _sample(self):
        while not self._sampling.wait(0.5):
            try:
                cnodes = self.coord.nodes()
                if cnodes is not None:
                    self.cordons.observe(time.time(), cnodes, self.nodes())
            except (OSError, ValueError, KeyError):
                pass  # the API server answering 429/500, a coordinator going away: the next look

    def start_sampling(self):
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def stop_sampling(self):
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(timeout=10)

    # ---- the faults ----------------------------------------------------------------------
    def act_spot(self, worst=False):
        cands = [i for i in self.ready_nodes(spot=True) if i["instanceId"] not in self.noticed
                 and not i.get("interruption")]
        if not cands:
            return False
        on = {}
        for p in self.pods_of(PDB_APP):
            on[p["spec"].get("nodeName")] = on.get(p["spec"].get("nodeName"), 0) + 1
        if worst:  # the node holding most pods of the PDB-guarded Deployment
            cands.sort(key=lambda i: (-on.get(i["node"], 0), i["instanceId"]))
            inst = cands[0]
        else:
            inst = self.rng.choice(sorted(cands, key=lambda i: i["instanceId"]))
        grace = self.rng.randint(10, 20)
        st, out = _req("POST", f"{self.s.emulator_url}/_emu/instances/{inst['instanceId']}/spot",
                       {"action": "terminate", "grace": grace})
        if st != 200:
            return False
        self.noticed.add(inst["instanceId"])
        self.note("spot-notice", inst["node"], f"{inst['instanceId']} ({on.get(inst['node'], 0)} {PDB_APP} pod(s)), "
                                               f"reclaimed in {grace}s")
        return True

    def act_scale(self):
        name = self.rng.choice(sorted(WORKLOAD))
        lo, hi = WORKLOAD[name][3]
        n = self.rng.randint(lo, hi)
        self.s.kubectl("scale", f"deployment/{name}", f"--replicas={n}", "-n", NS)
        self.note("scale", f"deployment/{name}", f"replicas {n}")
        return True

    def act_kill_coordinator(self):
        up = [i for i in sorted(self.coord.procs) if self.coord.alive(i) and i not in self.down_coordinators]
        if not up:
            return False
        want_leader = self.rng.random() < 0.6
        leader = self.coord.leader()
        ident = leader if want_leader and leader else self.rng.choice(up)
        role = "leader" if ident == leader else "standby"
        hard = self.rng.random() < 0.7
        back = round(self.rng.uniform(1.0, 4.0), 1)
        self.coord.kill(ident, hard)
        self.down_coordinators.add(ident)
        self.note("kill-coordinator", f"{ident} ({role})", f"{'SIGKILL' if hard else 'SIGTERM'}, back in {back}s")

        def restart():
            self.down_coordinators.discard(ident)
            self.coord.start(ident)
            self.note("coordinator-up", ident, "started again")
        self.later(back, f"restart {ident}", restart)
        return True

    def act_kill_agent(self):
        insts = self.ready_nodes()
        insts = [i for i in insts if i.get("agentAlive")]
        if not insts:
            return False
        nodes = self.nodes()

        def draining(i):
            n = nodes.get(i["node"]) or {}
            return bool(n.get("spec", {}).get("unschedulable")) or any(
                t.get("key") == DRAIN_TAINT for t in n.get("spec", {}).get("taints") or [])
        mid = [i for i in insts if draining(i)]
        inst = self.rng.choice(sorted(mid or insts, key=lambda i: i["instanceId"]))
        sig = "KILL" if self.rng.random() < 0.8 else "TERM"
        st, out = _req("POST", f"{self.s.emulator_url}/_emu/instances/{inst['instanceId']}/agent/kill",
                       {"signal": sig, "restartAfter": 1}, timeout=15)
        if st != 200:
            return False
        self.note("kill-agent", inst["node"], f"SIG{sig}{' mid-drain' if inst in mid else ''}, "
                                              "restarted after 1s (Restart=always)")
        return True

    def act_imds_down(self):
        insts = self.ready_nodes()
        if not insts:
            return False
        inst = self.rng.choice(sorted(insts, key=lambda i: i["instanceId"]))
        secs = round(self.rng.uniform(2, 6), 1)
        base = f"{self.s.emulator_url}/_emu/instances/{inst['instanceId']}/imds"
        st, _ = _req("POST", base + "/down", {})
        if st != 200:
            return False
        self.note("imds-down", inst["node"], f"for {secs}s")
        self.later(secs, f"IMDS up on {inst['node']}", lambda: _req("POST", base + "/up", {}))
        return True

    def act_api_fault(self):
        kube = self.s.kube_control
        kind = self.rng.choice(["evict-429", "node-500", "list-429", "write-500", "drop-watches",
                                "slow", "restart"])
        secs = round(self.rng.uniform(2, 8), 1)
        if kind == "restart":
            if getattr(self, "_restarting", None) and self._restarting.is_alive():
                return False
            down = round(self.rng.uniform(0.5, 3.0), 1)
            self.note("api-restart", "kube-apiserver", f"stopped, started again after {down}s")
            self._restarting = threading.Thread(target=self.s.cluster_cp.restart_apiserver,
                                                kwargs={"down": down}, daemon=True)
            self._restarting.start()
            return True
        if kind == "drop-watches":
            st, out = _req("POST", kube + "/_fake/watches/drop", {})
            self.note("api-drop-watches", "kube-apiserver", f"{len((out or {}).get('dropped', []))} open watch(es) cut")
            return st == 200
        spec = {"evict-429": {"method": "POST", "path": r"/eviction$", "status": 429, "retryAfter": 1},
                "node-500": {"method": "PATCH", "path": r"^/api/v1/nodes/", "status": 500},
                "list-429": {"method": "GET", "path": r"/pods(\?|$)", "status": 429, "retryAfter": 1},
                "write-500": {"method": "*", "path": r"^/api/v1/namespaces/[^/]+/(pods|events)", "status": 500},
                "slow": {"method": "*", "path": ".", "delay": round(self.rng.uniform(0.5, 3.0), 1)}}[kind]
        spec = dict(spec, count=None, seconds=secs)
        st, out = _req("POST", kube + "/_fake/faults", spec)
        self.note("api-fault", "kube-apiserver", f"{kind} for {secs}s")
        return st == 201

    def act_ec2_fault(self):
        kind = self.rng.choice(["ice", "ice", "throttle-fleet", "throttle-terminate", "throttle-describe"])
        if kind == "ice":
            itype = self.rng.choice(["c6*", "m6*", "c7*", "m7*", "r6*", "*.large", "*.xlarge", "*"])
            zone = self.rng.choice(["us-east-1a", "us-east-1b", "us-east-1c", "*"])
            ct = self.rng.choice(["spot", "on-demand", None])
            rule = {"kind": "ice", "instance_type": itype, "zone": zone, "capacity_type": ct,
                    "capacity": 0, "count": None}
            secs = round(self.rng.uniform(4, 12), 1)
            detail = f"{itype} in {zone} ({ct or 'any'}) for {secs}s"
        else:
            action = {"throttle-fleet": "CreateFleet", "throttle-terminate": "TerminateInstances",
                      "throttle-describe": "Describe*"}[kind]
            n = self.rng.randint(1, 4)
            rule = {"kind": "throttle", "service": "ec2", "action": action, "count": n}
            secs = 15.0
            detail = f"RequestLimitExceeded for the next {n} {action}"
        out = self.s.proxy("POST", "rules", rule)
        rid = out.get("id") if isinstance(out, dict) else None
        self.note("ec2-" + kind.split("-")[0], "ec2", detail)
        if rid is not None:
            self.later(secs, f"EC2 rule {rid} removed", lambda: _req("DELETE", f"{self.s.ec2_endpoint}/_fake/rules/{rid}"))
        return True

    def act_cut_link(self):
        if self.s.service.cut:
            return False
        secs = round(self.rng.uniform(2, 6), 1)
        self.s.service.set_cut(True)
        self.note("link-cut", "agents <-> coordinator", f"for {secs}s")

        def restore():
            self.s.service.set_cut(False)
            self.note("link-restored", "agents <-> coordinator", "")
        self.later(secs, "link restored", restore)
        return True

    ACTIONS = (("scale", 3), ("spot", 2), ("kill_coordinator", 2), ("kill_agent", 2), ("imds_down", 1),
               ("api_fault", 2), ("ec2_fault", 2), ("cut_link", 1))

    def chaos(self):
        end = time.time() + self.chaos_seconds
        self.act_spot(worst=True)
        nxt = time.time() + self.rng.uniform(1.0, 2.5)
        names, weights = zip(*self.ACTIONS)
        while time.time() < end:
            self.run_due()
            if time.time() >= nxt:
                name = self.rng.choices(names, weights)[0]
                try:
                    getattr(self, "act_" + name)()
                except Exception as e:  # a fault that could not be injected is only noted
                    self.note("inject-failed", name, f"{type(e).__name__}: {e}")
                nxt = time.time() + self.rng.uniform(1.0, 3.0)
            time.sleep(0.1)

    def lift_all(self):
        """Every fault off, every process that should run running."""
        self.run_due(everything=True)
        _req("DELETE", self.s.kube_control + "/_fake/faults")
        if getattr(self, "_restarting", None):
            self._restarting.join(150)
        _req("DELETE", self.s.ec2_endpoint + "/_fake/rules")
        self.s.service.set_cut(False)
        for i in self.emu_instances():
            if i.get("imdsPort") and i.get("imdsAlive"):
                try:
                    _req("POST", f"http://127.0.0.1:{i['imdsPort']}/_fake/up", {})
                except OSError:
                    pass  # its instance is going away at this very moment
        for ident in sorted(self.coord.procs):
            if not self.coord.alive(ident):
                self.coord.start(ident)
        self.note("faults-lifted", "-", "settling")

    # ---- settling and the invariants -----------------------------------------------------
    def end_state(self):
        """What must hold once the system has settled: {invariant: [problems]}."""
        desired, running, pending, per = workload_state(self.s, NS)
        return end_state_problems(per, pending, self.nodes(), self.coord.nodes(), self.emu_instances())

    def settle(self):
        deadline = time.time() + self.settle_seconds
        last, good = {}, 0
        while time.time() < deadline:
            try:
                last = self.end_state()
            except (OSError, ValueError, KeyError) as e:
                last = {"the system settles": [f"{type(e).__name__}: {e}"]}
            good = good + 1 if not last else 0
            if good >= 3:
                return {}
            time.sleep(1.0)
        return last

    def around(self, unix, before=12.0, after=4.0):
        return [a for a in self.actions if unix - before <= a["unix"] <= unix + after]

    def history_violations(self):
        """Invariants over the whole run, from the fakes' records: [(invariant, unix, text)]."""
        s = self.s
        out = pdb_violations(s.eviction_audit())
        calls = s.proxy("GET", "log")["calls"]
        nominated = {}
        for ev in s.kube_get(f"/api/v1/namespaces/{NS}/events")["items"]:
            m = re.search(r"instance (i-[0-9a-f]+)", ev.get("message") or "")
            uid = (ev.get("involvedObject") or {}).get("uid")
            if ev.get("reason") == "Nominated" and m and uid:
                nominated.setdefault(m.group(1), set()).add(uid)
        found, self.launches_checked = launch_violations(calls, s.emu_events(), nominated)
        out += found
        insts = {iid: ({t["Key"]: t["Value"] for t in i.get("Tags") or []}, (i.get("State") or {}).get("Name"))
                 for iid, i in s.instances().items()}
        return out + termination_violations(calls, insts, self.cluster, self.decoys)

    # ---- the whole run -------------------------------------------------------------------
    def dump_end_state(self):
        """What an unsettled run ended with, for whoever reads its logs: end-state.json in the
        run's directory (pods with their phase, node and conditions; Nodes with their taints and
        conditions; the emulator's instances)."""
        def conds(o):
            return {c["type"]: c.get("status") for c in (o.get("status") or {}).get("conditions") or []}
        try:
            pods = [{"name": p["metadata"]["name"], "phase": (p.get("status") or {}).get("phase"),
                     "node": p["spec"].get("nodeName"), "deleting": p["metadata"].get("deletionTimestamp"),
                     "nominated": (p.get("status") or {}).get("nominatedNodeName"), "conditions": conds(p)}
                    for p in self.s.kube_get(f"/api/v1/namespaces/{NS}/pods")["items"]]
            nodes = [{"name": n, "unschedulable": (o.get("spec") or {}).get("unschedulable"),
                      "taints": [t.get("key") for t in (o.get("spec") or {}).get("taints") or []],
                      "conditions": conds(o)} for n, o in self.nodes().items()]
            state = {"pods": pods, "nodes": nodes, "instances": self.emu_instances()}
        except Exception as e:  # the dump is for reading; the verdict stands without it
            state = {"error": f"{type(e).__name__}: {e}"}
        with open(os.path.join(self.workdir, "end-state.json"), "w") as f:
            json.dump(state, f, indent=1, default=str)

    def run(self):
        res = {"seed": self.seed, "chaosSeconds": self.chaos_seconds, "violations": [], "actions": self.actions}
        self.t0 = time.time()
        try:
            self.log(f"seed {self.seed}: starting the stack")
            self.start()
            res["stackSeconds"] = round(time.time() - self.t0, 1)
            apply_objs(self.s, *workload_objs())

            def up():
                d, r, p, per = workload_state(self.s, NS)
                return d > 0 and r >= d and p == 0
            deadline = time.time() + 60
            while not up():
                if time.time() > deadline:
                    raise RuntimeError("the workload did not come up within 60 s: "
                                       f"{workload_state(self.s, NS)[3]}")
                time.sleep(0.5)
            res["workloadUpSeconds"] = round(time.time() - self.t0, 1)
            self.note("workload-up", "-", f"{len(self.nodes())} node(s)")
            self.start_sampling()
            self.chaos()
            self.lift_all()
            t = time.time()
            unsettled = self.settle()
            res["settleSeconds"] = round(time.time() - t, 1)
            if unsettled:
                self.dump_end_state()
            self.stop_sampling()
            for inv, items in unsettled.items():
                for text in items:
                    res["violations"].append({"invariant": inv, "unix": time.time(), "text": text,
                                              "around": self.actions[-8:]})
            for inv, unix, text in self.history_violations() + self.cordons.found:
                res["violations"].append({"invariant": inv, "unix": unix, "t": round(unix - self.t0, 2),
                                          "text": text, "around": self.around(unix)})
            res["launchesChecked"] = self.launches_checked
            res["drainingLooks"] = self.cordons.looks
            live = {i["instanceId"] for i in self.emu_instances() if i.get("ec2State") in ("pending", "running")}
            res["coordinatorListsGone"] = [{k: n.get(k) for k in ("instanceId", "name", "action", "drainReason",
                                                                  "reports", "lastReportAgeSeconds")}
                                           for n in (self.coord.nodes() or []) if n.get("instanceId") not in live]
            res["instancesLaunched"] = len({i for c in self.s.proxy("GET", "log?action=CreateFleet")["calls"]
                                            if not c.get("replayed") for i in c.get("instance_ids") or []})
            audit = self.s.eviction_audit()
            res["evictions"] = sum(1 for e in audit["evictions"] if e.get("decision") == "evicted")
            res["evictionsRefused"] = sum(1 for e in audit["evictions"] if e.get("decision") != "evicted")
        except Exception as e:
            res["setupError"] = f"{type(e).__name__}: {e}"
            res["traceback"] = traceback.format_exc(limit=6)
        finally:
            self.stop_sampling()
            res["leftovers"] = [str(x) for x in self.stop()]
            res["seconds"] = round(time.time() - self.t0, 1)
        res["ok"] = not res["violations"] and "setupError" not in res
        return res


# ---- the invariants over the records (pure: the data in, [(invariant, unix, text)] out) ------

class CordonWatch:
    """A draining node stays cordoned: while the agent reports its drain evicting or waiting for
    pods to go, the Node must carry the drain taint and be unschedulable, else the scheduler
    brings evicted pods back. observe() takes one look (the leader's /api/v1/nodes items and the
    Nodes); a lapse longer than `grace` seconds (reports lag the Node by up to an interval) is
    a violation, reported once per node."""
    PHASES = ("PHASE_EVICTING", "PHASE_WAITING")

    def __init__(self, grace=3.0):
        self.grace = grace
        self.since = {}        # node -> first look without the cordon
        self.found = []        # (invariant, unix, text)
        self.reported = set()
        self.looks = 0         # looks at a node while its drain was evicting or waiting

    def observe(self, now, cnodes, nodes):
        draining = {n.get("name") for n in cnodes or [] if (n.get("drain") or {}).get("phase") in self.PHASES
                    and n.get("action") == "drain"}
        for name in list(self.since):
            if name not in draining:
                del self.since[name]
        for name in sorted(draining):
            self.looks += 1
            node = nodes.get(name)
            if node is None or node["metadata"].get("deletionTimestamp"):
                self.since.pop(name, None)
                continue
            spec = node.get("spec") or {}
            # the cordon holds the Node; the taint too where the identity may set it (an agent
            # acting as its node may not: NodeRestriction, docs/security.md)
            held = bool(spec.get("unschedulable"))
            if held:
                self.since.pop(name, None)
                continue
            t0 = self.since.setdefault(name, now)
            if now - t0 >= self.grace and name not in self.reported:
                self.reported.add(name)
                self.found.append(("a draining node stays cordoned", t0,
                                   f"Node {name}: the agent's drain is evicting, the Node is "
                                   "schedulable "
                                   f"for {now - t0:.1f}s"))


def end_state_problems(per, pending, nodes, cnodes, insts):
    """The end-state invariants, and whether the system is quiet: per = {deployment: (desired,
    Running and Ready)}, pending = Pending pods, nodes = {name: Node}, cnodes = the leader's
    /api/v1/nodes items (None: no leader), insts = the emulator's instances. {invariant: [problems]}."""
    problems = {}
    lost = {k: v for k, v in per.items() if v[1] < v[0]}
    if lost or pending:
        problems["no pod lost"] = [f"deployment/{k}: {r} of {d} replicas Running and Ready"
                                   for k, (d, r) in sorted(lost.items())] + \
                                  ([f"{pending} pod(s) Pending"] if pending else [])
    live = {i["node"] for i in insts if i.get("ec2State") in ("pending", "running")}
    # a drain directed to a node whose instance is gone is no activity (the coordinator may
    # list an instance it has not yet seen terminated)
    directed = {n.get("name") for n in (cnodes or []) if n.get("action") == "drain" and n.get("name") in live}
    going = {i["node"] for i in insts if i.get("ec2State") not in ("pending", "running")}
    # quiet: no reclaim to come, no instance booting or going, no drain directed, a leader
    busy = [f"{i['instanceId']}: {why}" for i, why in (
        (i, "spot reclaim pending" if i.get("interruption") and i.get("ec2State") in ("pending", "running")
         else f"phase {i.get('phase')}" if i.get("phase") in ("launched", "booting", "going")
         else "agent restart pending" if i.get("agentRestartPending") else None) for i in insts) if why]
    busy += [f"Node {n}: drain directed" for n in sorted(directed)]
    if cnodes is None:
        busy.append("no coordinator leads")
    if busy:
        problems["the system settles"] = busy
    cordoned, stuck = [], []
    for name, n in sorted(nodes.items()):
        md, spec = n["metadata"], n.get("spec") or {}
        tainted = any(t.get("key") == DRAIN_TAINT for t in spec.get("taints") or [])
        if md.get("deletionTimestamp"):
            stuck.append(f"Node {name}: deleting since {md['deletionTimestamp']}, finalizers "
                         f"{md.get('finalizers')}")
            continue
        if (spec.get("unschedulable") or tainted) and name not in directed and name not in going:
            what = " and ".join(x for x in ("cordoned" if spec.get("unschedulable") else "",
                                            f"tainted {DRAIN_TAINT}" if tainted else "") if x)
            cordoned.append(f"Node {name}: {what}, no drain directed, instance running")
    if cordoned:
        problems["no node left cordoned without a reason"] = cordoned
    if stuck:
        problems["every finalizer eventually removed"] = stuck
    return problems


def pdb_violations(audit):
    """The API server's own accounting at every pod deletion (/_fake/evictions)."""
    return [("no PDB ever violated", iso_to_unix(v.get("time")) or time.time(),
             f"deleting pod {v.get('namespace')}/{v.get('pod')} on {v.get('node') or '-'} left "
             f"{v.get('healthyAfter')} healthy of PDB {v.get('pdb')} (needs {v.get('desiredHealthy')}), "
             f"done by {v.get('via')}") for v in audit.get("violations") or []]


def launch_violations(calls, emu_events, nominated):
    """No instance launched twice, from the EC2 proxy's call log: an instance ID returned by two
    launches, a ClientToken that launched twice, or a fleet launched only for pods that all had
    an instance on the way already (launched, neither registered as a Node nor gone), by the
    Nominated Events the coordinator posts on each pod ({instance: {pod uid}}). Returns
    (violations, launches whose pods were known)."""
    out, seen, tokens, launched_at = [], {}, {}, {}
    for c in calls:
        if c.get("action") not in ("CreateFleet", "RunInstances") or c.get("replayed"):
            continue
        t = c.get("unix") or iso_to_unix(c.get("time")) or time.time()
        for iid in c.get("instance_ids") or []:
            if iid in seen:
                out.append(("no instance launched twice", t, f"{iid} returned by launches #{seen[iid]} and #{c['seq']}"))
            seen[iid] = c["seq"]
            if c["action"] == "CreateFleet":
                launched_at.setdefault(iid, t)
        if c.get("instance_ids") and c.get("client_token"):
            if c["client_token"] in tokens:
                out.append(("no instance launched twice", t, f"ClientToken {c['client_token']} launched "
                                                             f"twice (#{tokens[c['client_token']]} and #{c['seq']})"))
            tokens[c["client_token"]] = c["seq"]
    settled_at = {}   # instance -> when it registered or started going away
    for e in emu_events:
        if e["event"] in ("registered", "shutting-down", "terminated", "stopping", "boot-failed"):
            settled_at.setdefault(e["instance"], e["unix"])
    order = sorted((t, i) for i, t in launched_at.items() if nominated.get(i))
    for k, (tb, b) in enumerate(order):
        inflight = {}
        for ta, a in order[:k]:
            if ta < tb and settled_at.get(a, float("inf")) > tb + 0.5:
                for uid in nominated[a]:
                    inflight.setdefault(uid, a)
        if all(u in inflight for u in nominated[b]):
            others = sorted({inflight[u] for u in nominated[b]})
            out.append(("no instance launched twice for the same pods", tb,
                        f"{b} launched for {len(nominated[b])} pod(s) that {', '.join(others)} "
                        "(launched, not yet registered) was already launched for"))
    return out, len(order)


def termination_violations(calls, instances, cluster, decoys):
    """No instance terminated that lacks the cluster tag: every TerminateInstances in the call
    log, and the decoys ({id: why}) still running. instances: {id: (tags, state)}."""
    out = []
    for c in calls:
        if c.get("action") != "TerminateInstances" or c.get("status") != 200:
            continue
        for iid in c.get("instance_ids") or []:
            tags = (instances.get(iid) or ({}, None))[0]
            if tags.get(CLUSTER_TAG) != cluster:
                out.append(("no instance terminated that lacks the cluster tag",
                            c.get("unix") or iso_to_unix(c.get("time")) or time.time(),
                            f"{iid} terminated (tags {tags})"))
    for iid, why in sorted(decoys.items()):
        state = (instances.get(iid) or ({}, None))[1]
        if state != "running":
            out.append(("no instance terminated that lacks the cluster tag", time.time(),
                        f"decoy {iid} ({why}) is {state}"))
    return out


def format_violation(seed, v):
    at = f" (at {v['t']:.1f}s)" if v.get("t") is not None else " (at the end)"
    lines = [f"VIOLATION seed {seed}: {v['invariant']}{at}: {v['text']}"]
    for a in v.get("around") or []:
        lines.append(f"    {a['t']:6.1f}s  {a['kind']:<18} {a['target']:<28} {a['detail']}")
    return "\n".join(lines)
