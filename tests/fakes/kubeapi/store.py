"""Object storage with a global resourceVersion (like etcd's revision) and an event history.

Stored objects are never mutated in place: every change stores a new dict, so readers and the
history may share references. Everything runs under one re-entrant lock; `cond` wakes watchers
and the controllers on each commit.
"""

import collections
import threading

from .util import expired


class HistEvent:
    __slots__ = ("rv", "skey", "key", "type", "obj", "prev")

    def __init__(self, rv, skey, key, typ, obj, prev):
        self.rv, self.skey, self.key, self.type, self.obj, self.prev = rv, skey, key, typ, obj, prev


class Store:
    def __init__(self, history_size=10000):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 0
        self.data = collections.defaultdict(dict)   # skey -> {(ns, name): obj}
        self.history = collections.deque()
        self.history_size = max(1, int(history_size))
        self.compacted = 0      # the history holds every event with rv > compacted
        self.listeners = []     # called under the lock with each HistEvent, after the commit
        self.before = []        # called under the lock with (skey, key, old, new) before commit
        self.changes = 0

    # -- reads --------------------------------------------------------------------------------
    def get(self, skey, key):
        return self.data.get(skey, {}).get(key)

    def items(self, skey, ns=None):
        d = self.data.get(skey, {})
        keys = sorted(d, key="/".join)
        if ns is None:
            return [d[k] for k in keys]
        return [d[k] for k in keys if k[0] == ns]

    def snapshot(self, skey, rv):
        """The objects of skey as they were at revision rv, keyed and sorted."""
        if rv < self.compacted:
            raise expired("The resourceVersion for the provided list is too old.")
        state = dict(self.data.get(skey, {}))
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            if ev.skey != skey:
                continue
            if ev.type == "ADDED":
                state.pop(ev.key, None)
            else:
                state[ev.key] = ev.prev
        return state

    # -- writes -------------------------------------------------------------------------------
    def commit(self, skey, key, new, typ):
        """Stores new (a fresh dict owned by the store from now on) or deletes (new None)."""
        old = self.data.get(skey, {}).get(key)
        for cb in self.before:
            cb(skey, key, old, new)
        self.rv += 1
        rv = self.rv
        if new is not None:
            md = dict(new.get("metadata") or {})
            md["resourceVersion"] = str(rv)
            new["metadata"] = md
            self.data[skey][key] = new
            evobj = new
        else:
            self.data[skey].pop(key, None)
            evobj = dict(old)
            md = dict(old.get("metadata") or {})
            md["resourceVersion"] = str(rv)
            evobj["metadata"] = md
        ev = HistEvent(rv, skey, key, typ, evobj, old)
        self.history.append(ev)
        while len(self.history) > self.history_size:
            self.compacted = self.history.popleft().rv
        self.changes += 1
        for cb in self.listeners:
            cb(ev)
        self.cond.notify_all()
        return evobj

    def compact(self):
        """Forgets the whole history: every older resourceVersion becomes too old."""
        with self.lock:
            self.history.clear()
            self.compacted = self.rv
            self.cond.notify_all()

    def events_after(self, rv):
        """History events with revision > rv (caller holds the lock). Raises 410 if compacted."""
        if rv < self.compacted:
            raise expired(f"too old resource version: {rv} ({self.compacted})")
        if not self.history or self.history[-1].rv <= rv:
            return []
        out = []
        for ev in reversed(self.history):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def reset(self):
        with self.lock:
            self.data.clear()
            self.history.clear()
            self.compacted = self.rv
            self.cond.notify_all()
