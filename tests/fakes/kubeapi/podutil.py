"""Pod and node helpers shared by the strategies and the controllers."""

from fractions import Fraction

from .util import quantity_or_zero


def is_pod_ready(pod):
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def pod_phase(pod):
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_terminal(pod):
    return pod_phase(pod) in ("Succeeded", "Failed")


def is_deleting(obj):
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def controller_ref(obj):
    for r in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if r.get("controller"):
            return r
    return None


def _add(total, reqs):
    for k, v in (reqs or {}).items():
        total[k] = total.get(k, Fraction(0)) + quantity_or_zero(v)


def _max(total, reqs):
    for k, v in (reqs or {}).items():
        q = quantity_or_zero(v)
        if q > total.get(k, Fraction(0)):
            total[k] = q


def pod_requests(pod_or_spec):
    """Effective requests: max(sum of containers + sidecars, each init container) + overhead."""
    spec = pod_or_spec.get("spec", pod_or_spec) if "spec" in pod_or_spec else pod_or_spec
    total = {}
    for c in spec.get("containers") or []:
        _add(total, (c.get("resources") or {}).get("requests"))
    sidecars = {}
    init_max = {}
    for c in spec.get("initContainers") or []:
        reqs = (c.get("resources") or {}).get("requests") or {}
        if c.get("restartPolicy") == "Always":
            _add(sidecars, reqs)
            _add(total, reqs)
        else:
            cur = dict(sidecars)
            _add(cur, reqs)
            _max(init_max, {k: v for k, v in cur.items()})
    for k, v in init_max.items():
        if v > total.get(k, Fraction(0)):
            total[k] = v
    _add(total, spec.get("overhead"))
    return total


def qos_class(spec):
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or r not in req or quantity_or_zero(req[r]) != quantity_or_zero(lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def tolerates(tolerations, taint):
    for t in tolerations or []:
        effect = t.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        op = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if op == "Exists":
            if key == "" or key == taint.get("key"):
                return True
            continue
        if key != taint.get("key"):
            continue
        if (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def toleration_for(tolerations, taint):
    for t in tolerations or []:
        if tolerates([t], taint):
            return t
    return None


def node_condition(node, typ):
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == typ:
            return c
    return None


def node_ready_status(node):
    c = node_condition(node, "Ready")
    return c.get("status") if c else "Unknown"


def set_condition(conds, typ, status, reason=None, message=None, now=None, extra=None):
    """Sets a condition; lastTransitionTime moves only when the status changes. True if changed."""
    for c in conds:
        if c.get("type") == typ:
            changed = False
            if c.get("status") != status:
                c["status"] = status
                c["lastTransitionTime"] = now
                changed = True
            for k, v in (("reason", reason), ("message", message)):
                if v is not None and c.get(k) != v:
                    c[k] = v
                    changed = True
            for k, v in (extra or {}).items():
                if c.get(k) != v:
                    c[k] = v
                    changed = True
            return changed
    c = {"type": typ, "status": status}
    c.update(extra or {})
    c["lastTransitionTime"] = now
    if reason is not None:
        c["reason"] = reason
    if message is not None:
        c["message"] = message
    conds.append(c)
    return True
