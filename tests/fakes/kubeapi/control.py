"""The /_fake/ control endpoints (never authenticated, never subject to faults) and the
failure injection they configure."""

import itertools
import json
import re
import socket
import threading
import time

from .util import ApiError

class Faults:
    """Rules: the next `count` requests whose method and request target match answer with an
    error status (optionally with Retry-After), a delay, a dropped connection, or (for watches)
    a stream cut after `dropWatchAfter` events. `count` null: every match; `seconds`: the rule
    lapses that long after it was added (an API server overloaded for a while)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.next_id = 1

    def add(self, spec):
        if not isinstance(spec, dict):
            raise ApiError(400, "BadRequest", "fault must be a JSON object")
        try:
            pat = re.compile(spec.get("path", ".*"))
        except re.error as e:
            raise ApiError(400, "BadRequest", f"bad path regexp: {e}")
        if not any(k in spec for k in ("status", "delay", "close", "dropWatchAfter")):
            raise ApiError(400, "BadRequest",
                           "a fault needs one of status, delay, close, dropWatchAfter")
        if "status" in spec and not (isinstance(spec["status"], int) and
                                     400 <= spec["status"] <= 599):
            raise ApiError(400, "BadRequest", "status must be an HTTP error code")
        rule = dict(spec)
        rule["method"] = (spec.get("method") or "*").upper()
        try:
            rule["count"] = None if spec.get("count", 1) is None else int(spec.get("count", 1))
            seconds = spec.get("seconds")
            rule["_until"] = None if seconds is None else time.monotonic() + float(seconds)
        except (TypeError, ValueError):
            raise ApiError(400, "BadRequest", "count must be an integer or null, seconds a number")
        rule["matched"] = 0
        with self.lock:
            rule["id"] = self.next_id
            self.next_id += 1
            rule["_re"] = pat
            self.rules.append(rule)
        return self._public(rule)

    @staticmethod
    def _live(r, now):
        return (r["count"] is None or r["count"] > 0) and (r["_until"] is None or now < r["_until"])

    @staticmethod
    def _public(r):
        return {k: v for k, v in r.items() if not k.startswith("_")}

    def match(self, method, target):
        now = time.monotonic()
        with self.lock:
            for r in self.rules:
                if not self._live(r, now):
                    continue
                if r["method"] not in ("*", method):
                    continue
                if not r["_re"].search(target):
                    continue
                if r.get("dropWatchAfter") is not None and "watch" not in target:
                    continue
                if r["count"] is not None:
                    r["count"] -= 1
                r["matched"] += 1
                return dict(r)
        return None

    def list(self):
        now = time.monotonic()
        with self.lock:
            return [dict(self._public(r), active=self._live(r, now)) for r in self.rules]

    def remove(self, rid):
        with self.lock:
            n = len(self.rules)
            self.rules = [r for r in self.rules if str(r["id"]) != rid]
            return len(self.rules) < n

    def clear(self):
        with self.lock:
            self.rules = []


class OpenWatches:
    """The watch streams being served, so that they can be cut at once (as an API server
    restart or a load balancer reset does): the client sees its connection end without the
    stream's last chunk and must watch again."""

    def __init__(self):
        self.lock = threading.Lock()
        self.streams = {}   # id -> {"target", "since", "cut": Event, "conn"}
        self.ids = itertools.count(1)
        self.dropped = 0

    def register(self, target, conn):
        w = {"target": target, "since": time.time(), "cut": threading.Event(), "conn": conn}
        with self.lock:
            wid = next(self.ids)
            self.streams[wid] = w
        return wid, w["cut"]

    def unregister(self, wid):
        with self.lock:
            self.streams.pop(wid, None)

    def list(self):
        with self.lock:
            return [{"id": i, "target": w["target"], "since": w["since"]}
                    for i, w in sorted(self.streams.items())]

    def drop(self, pattern):
        cut = []
        with self.lock:
            for i, w in self.streams.items():
                if pattern.search(w["target"]) and not w["cut"].is_set():
                    w["cut"].set()
                    cut.append((i, w))
            self.dropped += len(cut)
        for _, w in cut:
            try:
                w["conn"].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return [{"id": i, "target": w["target"]} for i, w in cut]


class Control:
    def __init__(self, api, controllers, opts, bootstrap):
        self.api = api
        self.controllers = controllers
        self.opts = opts
        self.faults = Faults()
        self.watches = OpenWatches()
        self.bootstrap = bootstrap

    def handle(self, method, path, q, body):
        try:
            data = json.loads(body) if body else {}
        except ValueError as e:
            return 400, _err(400, f"invalid JSON: {e}")
        parts = [p for p in path.split("/") if p][1:]
        try:
            return self._route(method, parts, q, data)
        except ApiError as e:
            return e.code, e.status()

    def _route(self, method, parts, q, data):
        api, ctl = self.api, self.controllers
        head = parts[0] if parts else ""
        if head == "nodes":
            if len(parts) == 1 and method == "POST":
                return 201, ctl.register_node(data)
            if len(parts) == 1 and method == "GET":
                return 200, {"managed": sorted(ctl.managed_nodes),
                             "stoppedKubelets": sorted(ctl.stopped_kubelets)}
            if len(parts) == 3 and parts[2] == "ready" and method in ("POST", "PUT"):
                st = data.get("status")
                if st is None and "ready" in data:
                    st = "True" if data["ready"] is True else (
                        "False" if data["ready"] is False else str(data["ready"]))
                if st not in ("True", "False", "Unknown"):
                    raise ApiError(400, "BadRequest", "status must be True, False or Unknown")
                return 200, ctl.set_node_ready(parts[1], st, data.get("reason"),
                                               data.get("message"))
            if len(parts) == 2 and method == "DELETE":
                ctl.remove_node(parts[1], q.get("deleteObject", "true") != "false")
                return 200, {"removed": parts[1]}
        elif head in ("evictions", "audit"):
            if method == "GET":
                return 200, self.audit()
            if method == "DELETE":
                with api.store.lock:
                    api.audit.clear()
                    api.violations.clear()
                    api.deletions = 0
                return 200, self.audit()
        elif head == "faults":
            if method == "POST":
                if isinstance(data, list):
                    return 201, {"faults": [self.faults.add(f) for f in data]}
                return 201, self.faults.add(data)
            if method == "GET":
                return 200, {"faults": self.faults.list()}
            if method == "DELETE" and len(parts) == 2:
                if not self.faults.remove(parts[1]):
                    raise ApiError(404, "NotFound", f"no fault {parts[1]}")
                return 200, {"faults": self.faults.list()}
            if method == "DELETE":
                self.faults.clear()
                return 200, {"faults": []}
        elif head == "watches":
            if len(parts) == 1 and method == "GET":
                return 200, {"watches": self.watches.list(), "dropped": self.watches.dropped}
            if len(parts) == 2 and parts[1] == "drop" and method == "POST":
                try:
                    pat = re.compile(data.get("path", ".*") if isinstance(data, dict) else ".*")
                except re.error as e:
                    raise ApiError(400, "BadRequest", f"bad path regexp: {e}")
                return 200, {"dropped": self.watches.drop(pat)}
        elif head == "compact" and method == "POST":
            api.store.compact()
            return 200, {"compactedResourceVersion": str(api.store.compacted)}
        elif head == "controllers":
            if method in ("POST", "PUT"):
                from .controllers import CONTROLLER_NAMES
                for n in (data.get("pause") or []) + (data.get("resume") or []):
                    if n not in CONTROLLER_NAMES:
                        raise ApiError(400, "BadRequest", f"unknown controller {n}; known: "
                                                          + ", ".join(CONTROLLER_NAMES))
                ctl.paused |= set(data.get("pause") or [])
                ctl.paused -= set(data.get("resume") or [])
            return 200, {"paused": sorted(ctl.paused)}
        elif head == "reset" and method == "POST":
            with api.store.lock:
                api.store.reset()
                api.event_index.clear()
                api.audit.clear()
                api.violations.clear()
                api.deletions = 0
                self.faults.clear()
                ctl.paused.clear()
                ctl.managed_nodes.clear()
                ctl.stopped_kubelets.clear()
                ctl.bound.clear()
                ctl.crd_registered.clear()
                for key in list(api.registry.types):
                    rt = api.registry.types[key]
                    if rt.crd is not None:
                        api.registry.remove_group_resource(rt.group, rt.plural)
                self.bootstrap()
            return 200, {"resourceVersion": str(api.store.rv)}
        elif head == "state" and method == "GET":
            return 200, self.state()
        elif head == "" and method == "GET":
            return 200, {"endpoints": ["/_fake/nodes", "/_fake/nodes/NAME/ready",
                                       "/_fake/evictions", "/_fake/faults", "/_fake/compact",
                                       "/_fake/watches", "/_fake/controllers", "/_fake/reset", "/_fake/state"]}
        raise ApiError(404, "NotFound", f"no control endpoint {method} /_fake/{'/'.join(parts)}")

    def audit(self):
        api = self.api
        with api.store.lock:
            return {"evictions": list(api.audit), "violations": list(api.violations),
                    "violationCount": len(api.violations),
                    "healthyPodDeletions": api.deletions}

    def state(self):
        api = self.api
        with api.store.lock:
            objs = {}
            for skey, d in api.store.data.items():
                rt = api.registry.by_skey(skey)
                if rt is None or not d:
                    continue
                name = f"{skey[1]}.{skey[0]}" if skey[0] else skey[1]
                objs[name] = [rt.to_external(d[k]) for k in sorted(d, key="/".join)]
            return {"resourceVersion": str(api.store.rv),
                    "compactedResourceVersion": str(api.store.compacted),
                    "objects": objs, "evictions": list(api.audit),
                    "violations": list(api.violations),
                    "violationCount": len(api.violations),
                    "faults": self.faults.list(),
                    "pausedControllers": sorted(self.controllers.paused),
                    "managedNodes": sorted(self.controllers.managed_nodes)}


def _err(code, msg):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": msg, "reason": "BadRequest", "code": code}


__all__ = ["Control", "Faults"]
