"""JSON merge patch (RFC 7386), strategic merge patch, JSON patch (RFC 6902)."""

import json

from .util import deep_copy


class PatchError(Exception):
    """The patch could not be applied (the apiserver answers 422)."""


class PatchDecodeError(Exception):
    """The patch is malformed (the apiserver answers 400)."""


# ---- JSON merge patch -----------------------------------------------------------------------

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return deep_copy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# ---- strategic merge patch ------------------------------------------------------------------

class L:
    """A list field with patchStrategy=merge; merge_key None means a list of primitives."""

    def __init__(self, merge_key=None, item=None, retain_keys=False):
        self.merge_key = merge_key
        self.item = item or {}
        self.retain_keys = retain_keys


class R:
    """A field with patchStrategy=replace: the patch value replaces it whole."""


REPLACE = R()
OBJECT_META = {"finalizers": L(None), "ownerReferences": L("uid")}
CONTAINER = {"ports": L("containerPort"), "env": L("name"), "volumeMounts": L("mountPath"),
             "volumeDevices": L("devicePath")}
POD_SPEC = {
    "containers": L("name", CONTAINER), "initContainers": L("name", CONTAINER),
    "ephemeralContainers": L("name", CONTAINER), "volumes": L("name", retain_keys=True),
    "imagePullSecrets": L("name"), "hostAliases": L("ip"),
    "topologySpreadConstraints": L("topologyKey"), "schedulingGates": L("name"),
    "resourceClaims": L("name"),
}
POD_STATUS = {"conditions": L("type"), "podIPs": L("ip"), "hostIPs": L("ip"),
              "resourceClaimStatuses": L("name")}
POD_TEMPLATE = {"metadata": OBJECT_META, "spec": POD_SPEC}
CONDITIONS_STATUS = {"conditions": L("type")}

SCHEMAS = {
    "Pod": {"metadata": OBJECT_META, "spec": POD_SPEC, "status": POD_STATUS},
    "Node": {"metadata": OBJECT_META, "spec": {"podCIDRs": L(None)},
             "status": {"conditions": L("type"), "addresses": L("type")}},
    "Deployment": {"metadata": OBJECT_META, "spec": {"template": POD_TEMPLATE},
                   "status": CONDITIONS_STATUS},
    "ReplicaSet": {"metadata": OBJECT_META, "spec": {"template": POD_TEMPLATE},
                   "status": CONDITIONS_STATUS},
    "DaemonSet": {"metadata": OBJECT_META, "spec": {"template": POD_TEMPLATE},
                  "status": CONDITIONS_STATUS},
    "PodDisruptionBudget": {"metadata": OBJECT_META, "spec": {"selector": REPLACE},
                            "status": CONDITIONS_STATUS},
    "Service": {"metadata": OBJECT_META, "spec": {"ports": L("port")},
                "status": CONDITIONS_STATUS},
    "Namespace": {"metadata": OBJECT_META, "status": CONDITIONS_STATUS},
    "PersistentVolumeClaim": {"metadata": OBJECT_META, "status": CONDITIONS_STATUS},
    "CustomResourceDefinition": {"metadata": OBJECT_META, "status": CONDITIONS_STATUS},
}
DEFAULT_SCHEMA = {"metadata": OBJECT_META}


def strategic_merge_patch(original, patch, kind):
    if not isinstance(patch, dict):
        raise PatchDecodeError("strategic merge patch must be a JSON object")
    schema = SCHEMAS.get(kind, DEFAULT_SCHEMA)
    out = _merge_map(original if isinstance(original, dict) else {}, patch, schema)
    if out is None:
        raise PatchError("the patch deletes the whole object")
    return out


def _merge_map(orig, patch, schema):
    patch = dict(patch)
    directive = patch.pop("$patch", None)
    if directive == "replace":
        return _strip(patch, schema)
    if directive == "delete":
        return None
    if directive not in (None, "merge"):
        raise PatchDecodeError(f"Unknown patch type: {directive}")
    retain = patch.pop("$retainKeys", None)
    result = dict(orig) if isinstance(orig, dict) else {}
    orders = {}
    for k in list(patch.keys()):
        if k.startswith("$setElementOrder/"):
            orders[k[len("$setElementOrder/"):]] = patch.pop(k)
        elif k.startswith("$deleteFromPrimitiveList/"):
            field = k[len("$deleteFromPrimitiveList/"):]
            drop = patch.pop(k) or []
            if isinstance(result.get(field), list):
                result[field] = [v for v in result[field] if v not in drop]
    for k, pv in patch.items():
        sub = schema.get(k) if isinstance(schema, dict) else None
        if pv is None:
            result.pop(k, None)
            continue
        ov = result.get(k)
        if isinstance(sub, R):
            result[k] = _strip(deep_copy(pv), {})
        elif isinstance(pv, dict):
            merged = _merge_map(ov if isinstance(ov, dict) else {}, pv,
                                sub if isinstance(sub, dict) else {})
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(pv, list) and isinstance(sub, L):
            result[k] = _merge_list(ov if isinstance(ov, list) else [], pv, sub)
        else:
            result[k] = _strip(deep_copy(pv), sub if isinstance(sub, dict) else {})
    for field, order in orders.items():
        sub = schema.get(field) if isinstance(schema, dict) else None
        if isinstance(result.get(field), list) and isinstance(order, list):
            result[field] = _apply_order(result[field], order,
                                         sub.merge_key if isinstance(sub, L) else None)
    if retain is not None:
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _strip(v, schema):
    """Removes directive keys from a value that replaces what was there."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k.startswith("$"):
                continue
            sub = schema.get(k) if isinstance(schema, dict) else None
            out[k] = _strip(x, sub.item if isinstance(sub, L) else (sub or {}))
        return out
    if isinstance(v, list):
        return [_strip(x, schema) for x in v
                if not (isinstance(x, dict) and x.get("$patch") in ("delete", "replace"))]
    return v


def _merge_list(orig, patch, spec):
    key = spec.merge_key
    if key is None:
        # list of primitives with the merge strategy: union, original order first
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [x for x in patch if not isinstance(x, dict)]
        out = list(orig)
        for x in patch:
            if isinstance(x, dict):
                continue
            if x not in out:
                out.append(x)
        return out
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [_strip(x, spec.item) for x in patch
                if isinstance(x, dict) and x.get("$patch") != "replace"]
    out = [x for x in orig]
    for x in patch:
        if not isinstance(x, dict):
            raise PatchError(f"expected a map in the list merged by key {key}, got {x!r}")
        if key not in x:
            raise PatchError(f"map: {x} does not contain declared merge key: {key}")
        kv = x[key]
        idx = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(key) == kv),
                   None)
        if x.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(_strip(x, spec.item))
        else:
            merged = _merge_map(out[idx], x, spec.item)
            if merged is None:
                out.pop(idx)
            else:
                out[idx] = merged
    return out


def _apply_order(items, order, key):
    """$setElementOrder: listed elements first, in that order, then the others as they were."""
    def ident(x):
        if key is None:
            return json.dumps(x, sort_keys=True)
        return json.dumps(x.get(key), sort_keys=True) if isinstance(x, dict) else None
    pos = {}
    for i, o in enumerate(order):
        pos.setdefault(ident(o), i)
    ordered = sorted((x for x in items if ident(x) in pos), key=lambda x: pos[ident(x)])
    rest = [x for x in items if ident(x) not in pos]
    return ordered + rest


# ---- JSON patch -----------------------------------------------------------------------------

def _pointer(path):
    if not isinstance(path, str):
        raise PatchError("path is missing or not a string")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must be empty or start with a \"/\": {path}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(token, length, allow_end):
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index: {token}")
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchError(f"array index out of bounds: {i}")
    return i


def _parent(doc, parts, path):
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"doc is missing path: \"{path}\": missing value")
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(p, len(cur), False)]
        else:
            raise PatchError(f"doc is missing path: \"{path}\"")
    return cur


def _get(doc, path):
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise KeyError(path)
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(last, len(parent), False)]
    raise PatchError(f"doc is missing path: \"{path}\"")


def _add(doc, path, value):
    parts = _pointer(path)
    if not parts:
        return deep_copy(value)
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = deep_copy(value)
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), True), deep_copy(value))
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: \"{path}\"")
    return doc


def _remove(doc, path, op="remove"):
    parts = _pointer(path)
    if not parts:
        raise PatchError(f"{op} operation does not apply: cannot remove the whole document")
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), False))
    raise PatchError(f"{op} operation does not apply: doc is missing path: \"{path}\"")


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise PatchDecodeError("json: cannot unmarshal object into Go value of type "
                               "jsonpatch.Patch")
    doc = deep_copy(doc)
    for op in ops:
        if not isinstance(op, dict):
            raise PatchDecodeError("json: cannot unmarshal into Go value of type "
                                   "jsonpatch.Operation")
        kind = op.get("op")
        path = op.get("path")
        if kind == "add":
            if "value" not in op:
                raise PatchError("add operation, missing value field")
            doc = _add(doc, path, op["value"])
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            if "value" not in op:
                raise PatchError("replace operation, missing value field")
            parts = _pointer(path)
            if not parts:
                doc = deep_copy(op["value"])
                continue
            parent = _parent(doc, parts, path)
            last = parts[-1]
            if isinstance(parent, dict):
                if last not in parent:
                    raise PatchError(f"replace operation does not apply: doc is missing key: "
                                     f"{path}: missing value")
                parent[last] = deep_copy(op["value"])
            elif isinstance(parent, list):
                parent[_index(last, len(parent), False)] = deep_copy(op["value"])
            else:
                raise PatchError(f"replace operation does not apply: doc is missing path: {path}")
        elif kind == "move":
            frm = op.get("from")
            try:
                val = _get(doc, frm)
            except KeyError:
                raise PatchError(f"move operation does not apply: doc is missing from path: {frm}")
            _remove(doc, frm, "move")
            doc = _add(doc, path, val)
        elif kind == "copy":
            frm = op.get("from")
            try:
                val = _get(doc, frm)
            except KeyError:
                raise PatchError(f"copy operation does not apply: doc is missing from path: {frm}")
            doc = _add(doc, path, val)
        elif kind == "test":
            try:
                val = _get(doc, path)
            except KeyError:
                val = None
                if op.get("value") is None:
                    continue
                raise PatchError(f"testing value {path} failed: test failed")
            if not _equal(val, op.get("value")):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _equal(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
