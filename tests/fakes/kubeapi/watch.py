"""Watch: initial events, history replay from a resourceVersion, selector transitions."""

from .util import ApiError, FieldError, invalid


class Watch:
    """One watch request. start() then next() repeatedly; events carry storage objects."""

    def __init__(self, api, rt, ns, q):
        self.api, self.rt, self.ns = api, rt, ns
        self.store = api.store
        self.ls, self.fs = api.parse_selectors(rt, q)
        self.rv_param = q.get("resourceVersion") or ""
        sie = q.get("sendInitialEvents")
        self.bookmarks = (q.get("allowWatchBookmarks") or "").lower() in ("true", "1")
        errs = []
        if sie is not None:
            if sie not in ("true", "false"):
                raise ApiError(400, "BadRequest", f"invalid sendInitialEvents: {sie}")
            if q.get("resourceVersionMatch") != "NotOlderThan":
                errs.append(FieldError("Forbidden", "resourceVersionMatch",
                                       detail="sendInitialEvents requires setting "
                                              "resourceVersionMatch to NotOlderThan"))
            if sie == "true" and not self.bookmarks:
                errs.append(FieldError("Forbidden", "allowWatchBookmarks",
                                       detail="sendInitialEvents requires setting "
                                              "allowWatchBookmarks to true"))
        elif q.get("resourceVersionMatch"):
            errs.append(FieldError("Forbidden", "resourceVersionMatch",
                                   detail="resourceVersionMatch is forbidden for watch unless "
                                          "sendInitialEvents is provided"))
        if errs:
            raise invalid("ListOptions", "meta.k8s.io", "", errs)
        self.initial_end = sie == "true"
        self.send_initial = sie == "true" or (sie is None and self.rv_param in ("", "0"))
        self.rv = 0

    def _match(self, obj):
        return obj is not None and self.api.matches(self.rt, obj, self.ns, self.ls, self.fs)

    def start(self):
        """Initial events as (type, obj) pairs; ("ERROR", status) for a stale version."""
        with self.store.lock:
            if self.rv_param not in ("", "0"):
                try:
                    want = self.api._parse_rv(self.rv_param)
                except ApiError as e:
                    return [("ERROR", e.status())]
                if want > self.store.rv:
                    try:
                        self.api._wait_for_rv(want)
                    except ApiError as e:
                        return [("ERROR", e.status())]
                if not self.send_initial:
                    if want < self.store.compacted:
                        return [("ERROR", ApiError(
                            410, "Expired", f"too old resource version: {want} "
                                            f"({self.store.compacted})").status())]
                    self.rv = want
                    return []
            self.rv = self.store.rv
            if not self.send_initial:
                return []
            evs = [("ADDED", o) for o in self.store.items(self.rt.skey)
                   if self._match(o)]
            if self.initial_end:
                evs.append(("BOOKMARK", {"metadata": {
                    "resourceVersion": str(self.rv),
                    "annotations": {"k8s.io/initial-events-end": "true"}}}))
            return evs

    def next(self, timeout):
        """Events after the last one delivered, waiting up to timeout. ERROR ends the watch."""
        with self.store.cond:
            if self.store.rv <= self.rv:
                self.store.cond.wait(timeout)
            try:
                hist = self.store.events_after(self.rv)
            except ApiError as e:
                return [("ERROR", e.status())]
            if hist:
                self.rv = hist[-1].rv
        out = []
        for ev in hist:
            if ev.skey != self.rt.skey:
                continue
            if ev.type == "ADDED":
                if self._match(ev.obj):
                    out.append(("ADDED", ev.obj))
            elif ev.type == "MODIFIED":
                was, now = self._match(ev.prev), self._match(ev.obj)
                if was and now:
                    out.append(("MODIFIED", ev.obj))
                elif was:
                    out.append(("DELETED", ev.obj))
                elif now:
                    out.append(("ADDED", ev.obj))
            elif ev.type == "DELETED":
                if self._match(ev.prev):
                    out.append(("DELETED", ev.obj))
        return out

    def bookmark(self):
        return ("BOOKMARK", {"metadata": {"resourceVersion": str(self.rv)}})
