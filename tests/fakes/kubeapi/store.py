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
        self.skey_changes = collections.Counter()   # skey -> commits
        self.last_rv = {}       # skey -> revision of its last commit
        self._sorted = {}       # skey -> (names "ns/name", keys) in list order, until a key
                                # comes or goes

    # -- reads --------------------------------------------------------------------------------
    def get(self, skey, key):
        return self.data.get(skey, {}).get(key)

    def _index(self, skey):
        """(names, keys) of skey in list order; kept until a key is added or removed."""
        ix = self._sorted.get(skey)
        if ix is None:
            keys = sorted(self.data.get(skey, {}), key="/".join)
            ix = self._sorted[skey] = (["/".join(k) for k in keys], keys)
        return ix

    def items(self, skey, ns=None):
        d = self.data.get(skey, {})
        keys = self._index(skey)[1]
        if ns is None:
            return [d[k] for k in keys]
        return [d[k] for k in keys if k[0] == ns]

    def ordered(self, skey, rv):
        """(names, keys, objects by key) of skey as at revision rv, names and keys in list
        order ("ns/name"). Raises 410 if rv is compacted."""
        if self.last_rv.get(skey, 0) > rv:
            state = self.snapshot(skey, rv)
            keys = sorted(state, key="/".join)
            return ["/".join(k) for k in keys], keys, state
        if rv < self.compacted:
            raise expired("The resourceVersion for the provided list is too old.")
        names, keys = self._index(skey)
        return names, keys, self.data.get(skey, {})

    def snapshot(self, skey, rv):
        """The objects of skey as they were at revision rv, by key."""
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
        self.last_rv[skey] = rv
        if new is not None:
            md = dict(new.get("metadata") or {})
            md["resourceVersion"] = str(rv)
            new["metadata"] = md
            if old is None:
                self._sorted.pop(skey, None)
            self.data[skey][key] = new
            evobj = new
        else:
            self._sorted.pop(skey, None)
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
        self.skey_changes[skey] += 1
        for cb in self.listeners:
            cb(ev)
        self.cond.notify_all()
        return evobj

    def drop(self, skey):
        """Forgets every object of skey without events (a resource no longer served)."""
        self.data.pop(skey, None)
        self._sorted.pop(skey, None)

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
            self._sorted.clear()
            self.history.clear()
            self.compacted = self.rv
            self.cond.notify_all()
