"""Who removed which pod, and did it break a PodDisruptionBudget: the record the old fake API
server kept at /_fake/audit, rebuilt for the real control plane from kube-apiserver's own audit
log (pods/eviction create and pods delete, cluster.AUDIT_POLICY) plus a watch of pods and PDBs.

    a = PodAudit(cluster).start()     # before the workload exists
    a.evictions(node=None, decision=None)   # [{time, unix, namespace, pod, uid, node, decision,
                                            #   code, user, via, pdb, healthyAfter, desiredHealthy}]
    a.violations()                    # the records that left a PDB below its desiredHealthy
    a.stop()

decision: "evicted" (Eviction API, 201), "denied" (Eviction API, 429 or other error),
"deleted" (DELETE of the pod, 200, by anyone but a kubelet (system:node:*) removing a pod that
was no longer healthy, the control plane's controllers (system:serviceaccount:kube-system:*,
system:kube-*) and the admin: those are the final removal of a terminated pod, a ReplicaSet
scaling down or pod GC, or the test itself, and are not recorded; a node identity deleting a
healthy pod is recorded: the agent acts with its node's identity). A violation is a deletion after which fewer pods of a PDB were healthy
(Ready, not terminating) than its desiredHealthy, judged on the pods' states as watched at the
time the API server received the request. An eviction the API server accepted is never one: the
server checked the budget itself (counting pods from a watch would only add the watch's lag).
"""
import json
import os
import threading
import time
from datetime import datetime

from cluster import Informer

EXEMPT_PREFIXES = ("system:node:", "system:serviceaccount:kube-system:", "system:kube-",
                   "nodesmith-admin")


def _unix(ts):
    if not ts:
        return time.time()
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _selected(selector, labels):
    ml = (selector or {}).get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in ml.items()):
        return False
    for e in (selector or {}).get("matchExpressions") or []:
        v, op = labels.get(e["key"]), e["operator"]
        if op == "In" and v not in e.get("values", []):
            return False
        if op == "NotIn" and v in e.get("values", []):
            return False
        if op == "Exists" and e["key"] not in labels:
            return False
        if op == "DoesNotExist" and e["key"] in labels:
            return False
    return True


def _healthy(pod):
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


class PodAudit:
    def __init__(self, cluster):
        self.c = cluster
        self.lock = threading.Lock()
        self.pods = {}       # (ns, name) -> {"uid", "node", "labels", "history": [(unix, healthy)]}
        self.pdbs = {}       # (ns, name) -> PDB
        self.records = []
        self.removed = set()  # (namespace, name, uid) of pods the audit log saw evicted or deleted
        self.pos = 0
        self.stop_evt = threading.Event()
        self.informers = []

    def start(self):
        ctx = self.c.ssl_context()
        self.informers = [Informer(self.c.server, ctx, "/api/v1/pods", self._pod, self.stop_evt),
                          Informer(self.c.server, ctx, "/apis/policy/v1/poddisruptionbudgets",
                                   self._pdb, self.stop_evt)]
        for i in self.informers:
            i.start()
        for i in self.informers:
            i.synced.wait(30)
        return self

    def stop(self):
        self.stop_evt.set()
        for i in self.informers:
            i.close()
        for i in self.informers:
            i.join(5)

    def _pod(self, kind, pod):
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        now = time.time()
        with self.lock:
            cur = self.pods.get(key)
            if cur is None or cur["uid"] != md["uid"]:
                cur = self.pods[key] = {"uid": md["uid"], "history": []}
            cur["node"] = pod["spec"].get("nodeName")
            cur["labels"] = md.get("labels") or {}
            h = False if kind == "DELETED" else _healthy(pod)
            if not cur["history"] or cur["history"][-1][1] != h:
                cur["history"].append((now, h))

    def _pdb(self, kind, pdb):
        key = (pdb["metadata"]["namespace"], pdb["metadata"]["name"])
        with self.lock:
            if kind == "DELETED":
                self.pdbs.pop(key, None)
            else:
                self.pdbs[key] = pdb

    @staticmethod
    def _healthy_at(p, t):
        state = False
        for when, h in p["history"]:
            if when > t:
                break
            state = h
        return state

    def _read_log(self):
        path = self.c.audit_log
        if not os.path.exists(path):
            return
        with open(path, "rb") as f:
            f.seek(self.pos)
            chunk = f.read()
        cut = chunk.rfind(b"\n") + 1
        self.pos += cut
        for line in chunk[:cut].splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete":
                continue
            self._record(ev)

    def _record(self, ev):
        ref = ev.get("objectRef") or {}
        if ref.get("resource") != "pods":
            return
        via = "eviction" if ref.get("subresource") == "eviction" else "delete"
        if via == "delete" and (ev.get("verb") != "delete" or ref.get("subresource")):
            return
        code = (ev.get("responseStatus") or {}).get("code", 0)
        user = (ev.get("user") or {}).get("username", "")
        t = _unix(ev.get("requestReceivedTimestamp"))
        ns, name = ref.get("namespace"), ref.get("name")
        # a node's own identity (the kubelet's, which the agent uses too) deleting a pod that was
        # still healthy is no kubelet's final removal of a terminated pod: it is recorded; a pod
        # the audit log saw evicted already is that final removal, however late the watch told
        # that it was terminating
        by_node = user.startswith("system:node:")
        if by_node and via == "delete":
            with self.lock:
                p = self.pods.get((ns, name))
                by_node = p is not None and self._healthy_at(p, t) and (ns, name, p["uid"]) not in self.removed
        exempt = user.startswith(EXEMPT_PREFIXES) and not by_node
        if via == "eviction":
            decision = "evicted" if code in (200, 201) else "denied"
        elif code in (200, 202) and not exempt:
            decision = "deleted"
        else:
            return  # a kubelet's, a controller's or the test's own deletion: not recorded
        rec = {"time": ev.get("requestReceivedTimestamp"), "unix": t, "namespace": ns, "pod": name,
               "decision": decision, "code": code, "user": user, "via": f"{via} by {user}", "uid": None,
               "node": None, "pdb": None, "healthyAfter": None, "desiredHealthy": None,
               "violation": False}
        with self.lock:
            p = self.pods.get((ns, name))
            if p is not None:
                rec["uid"], rec["node"] = p["uid"], p["node"]
            if p is not None:
                for (pns, pname), pdb in self.pdbs.items():
                    if pns != ns or not _selected(pdb["spec"].get("selector"), p["labels"]):
                        continue
                    # a pod the audit log already saw removed is not healthy any more, even
                    # when the watch has not told it yet (deletions a few ms apart)
                    healthy = sum(1 for (qns, qname), q in self.pods.items() if qns == ns
                                  and _selected(pdb["spec"].get("selector"), q["labels"])
                                  and self._healthy_at(q, t)
                                  and not (qns, qname, q["uid"]) in self.removed)
                    after = healthy - (1 if self._healthy_at(p, t) else 0)
                    desired = (pdb.get("status") or {}).get("desiredHealthy")
                    rec.update(pdb=pname, healthyAfter=after, desiredHealthy=desired)
                    # an eviction the API server accepted was within the budget by its own
                    # account (the disruption controller's status): only a DELETE can bypass it
                    if decision == "deleted" and desired is not None and after < desired and \
                            not exempt and self._healthy_at(p, t):
                        rec["violation"] = True
            if p is not None and decision in ("evicted", "deleted"):
                self.removed.add((ns, name, p["uid"]))
            self.records.append(rec)

    def sync(self):
        """Reads the audit log up to now (the API server writes each event as it completes)."""
        self._read_log()

    def evictions(self, node=None, decision=None):
        self.sync()
        return [r for r in self.records if r["via"].startswith("eviction")
                if (node is None or r["node"] == node) and (decision is None or r["decision"] == decision)]

    def violations(self):
        self.sync()
        return [r for r in self.records if r["violation"]]
