"""CustomResourceDefinitions and the custom resources they serve.

Custom resources are validated against the version's openAPIV3Schema the way the apiserver's
structural schema code does: type checks, required, enum, bounds, lengths, patterns, item
counts; unknown fields are pruned unless x-kubernetes-preserve-unknown-fields; defaults are
applied; x-kubernetes-int-or-string is honoured. CEL rules (x-kubernetes-validations) are not
evaluated.
"""

import re

from .resources import ResourceType, validate_meta
from .util import FieldError, age, check_subdomain, go_value

CRD_GROUP = "apiextensions.k8s.io"


# ---- the CRD resource itself ----------------------------------------------------------------

def crd_defaults(crd):
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        if isinstance(v, dict):
            sch = (v.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(sch, dict):
                _schema_defaults(sch)
    crd.setdefault("status", {})


def _schema_defaults(s):
    if not isinstance(s, dict):
        return
    for p in (s.get("properties") or {}).values():
        _schema_defaults(p)
    if isinstance(s.get("items"), dict):
        _schema_defaults(s["items"])
    if isinstance(s.get("additionalProperties"), dict):
        _schema_defaults(s["additionalProperties"])


def validate_crd(crd):
    errs = validate_meta(crd, namespaced=False)
    spec = crd.get("spec") or {}
    group = spec.get("group") or ""
    names = spec.get("names") or {}
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name") or ""
    if not group:
        errs.append(FieldError("Required", "spec.group"))
    elif check_subdomain(group):
        errs.append(FieldError("Invalid", "spec.group", group, check_subdomain(group)))
    elif "." not in group:
        errs.append(FieldError("Invalid", "spec.group", group,
                               "should be a domain with at least one dot"))
    if not plural:
        errs.append(FieldError("Required", "spec.names.plural"))
    if not names.get("kind"):
        errs.append(FieldError("Required", "spec.names.kind"))
    for k in ("plural", "singular"):
        v = names.get(k)
        if v and (v != v.lower() or not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", v)):
            errs.append(FieldError("Invalid", f"spec.names.{k}", v,
                                   "a lowercase RFC 1123 label must consist of lower case "
                                   "alphanumeric characters or '-', and must start and end with "
                                   "an alphanumeric character"))
    if plural and group and name != f"{plural}.{group}":
        errs.append(FieldError("Invalid", "metadata.name", name,
                               "must be spec.names.plural+\".\"+spec.group"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        errs.append(FieldError("NotSupported", "spec.scope", spec.get("scope"),
                               'supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        errs.append(FieldError("Invalid", "spec.versions", versions,
                               "must have exactly one version marked as storage version"))
    storage = [v for v in versions if v.get("storage")]
    if versions and len(storage) != 1:
        errs.append(FieldError("Invalid", "spec.versions", versions,
                               "must have exactly one version marked as storage version"))
    seen = set()
    for i, v in enumerate(versions):
        p = f"spec.versions[{i}]"
        vn = v.get("name")
        if not vn:
            errs.append(FieldError("Required", f"{p}.name"))
        elif vn in seen:
            errs.append(FieldError("Invalid", f"spec.versions", versions,
                                   "must contain unique version names"))
        seen.add(vn)
        if "served" not in v:
            errs.append(FieldError("Required", f"{p}.served"))
        sch = (v.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(sch, dict):
            errs.append(FieldError("Required", f"{p}.schema.openAPIV3Schema",
                                   detail="schemas are required"))
        elif sch.get("type") != "object":
            errs.append(FieldError("Invalid", f"{p}.schema.openAPIV3Schema.type",
                                   sch.get("type"), "must be object at the root"))
    return errs


def validate_crd_update(new, old):
    errs = []
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    if ns.get("group") != os_.get("group"):
        errs.append(FieldError("Invalid", "spec.group", ns.get("group"), "field is immutable"))
    if ns.get("scope") != os_.get("scope"):
        errs.append(FieldError("Invalid", "spec.scope", ns.get("scope"), "field is immutable"))
    if (ns.get("names") or {}).get("plural") != (os_.get("names") or {}).get("plural"):
        errs.append(FieldError("Invalid", "spec.names.plural",
                               (ns.get("names") or {}).get("plural"), "field is immutable"))
    return errs


CRD_TABLE = ([("Name",), ("Created At", "date")],
             lambda o, now: [(o.get("metadata") or {}).get("name", ""),
                             (o.get("metadata") or {}).get("creationTimestamp")])


def crd_type():
    return ResourceType(
        CRD_GROUP, "v1", "customresourcedefinitions", "customresourcedefinition",
        "CustomResourceDefinition", False, short_names=["crd", "crds"],
        categories=["api-extensions"],
        subresources={"status": {"kind": "CustomResourceDefinition",
                                 "verbs": ["get", "patch", "update"]}},
        table=CRD_TABLE, defaults=crd_defaults, validate=validate_crd,
        validate_update=validate_crd_update)


# ---- custom resources -----------------------------------------------------------------------

def version_of(crd, name):
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == name:
            return v
    return None


def storage_version(crd):
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("storage"):
            return v.get("name")
    return None


def types_for(crd):
    """ResourceTypes for every served version of an established CRD."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec["group"]
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served"):
            continue
        subs = {}
        vsubs = v.get("subresources") or {}
        if "status" in vsubs:
            subs["status"] = {"kind": names["kind"], "verbs": ["get", "patch", "update"]}
        if "scale" in vsubs:
            subs["scale"] = {"kind": "Scale", "group": "autoscaling", "version": "v1",
                             "verbs": ["get", "patch", "update"]}
        schema = (v.get("schema") or {}).get("openAPIV3Schema") or {}
        cols = v.get("additionalPrinterColumns")
        sel_fields = [f.get("jsonPath", "").lstrip(".") for f in v.get("selectableFields") or []]
        rt = ResourceType(
            group, v["name"], names["plural"], names.get("singular") or names["kind"].lower(),
            names["kind"], spec.get("scope") == "Namespaced",
            short_names=names.get("shortNames") or [], categories=names.get("categories") or [],
            subresources=subs, status="status" in vsubs, generation=True,
            field_labels=sel_fields,
            fields=(lambda o, sf=sel_fields: {f: _str(_jsonpath(o, "." + f)) for f in sf}),
            table=_cr_table(cols), return_deleted=True, unconditional_update=False,
            strategic=False, crd=crd,
            defaults=lambda o, s=schema: apply_defaults(o, s),
            validate=lambda o, s=schema, k=names["kind"], g=group: validate_cr(o, s))
        rt.skey = (group, names["plural"])
        rt.crd_version = v
        out.append(rt)
    return out


def _str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _cr_table(cols):
    if not cols:
        return ([("Name",), ("Age", "date")],
                lambda o, now: [(o.get("metadata") or {}).get("name", ""),
                                age((o.get("metadata") or {}).get("creationTimestamp"), now)])
    defs = [("Name",)] + [(c.get("name"), c.get("type", "string"), c.get("priority", 0),
                           c.get("format", ""), c.get("description", "")) for c in cols]

    def row(o, now):
        cells = [(o.get("metadata") or {}).get("name", "")]
        for c in cols:
            v = _jsonpath(o, c.get("jsonPath", ""))
            if c.get("type") == "date" and isinstance(v, str):
                v = age(v, now)
            elif isinstance(v, (dict, list)):
                import json
                v = json.dumps(v, separators=(",", ":"))
            cells.append(v)
        return cells
    return (defs, row)


_JP_TOKEN = re.compile(r"\.((?:[A-Za-z0-9_\-/]|\\\.)+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)"
                       r"\s*==\s*[\"']([^\"']*)[\"']\)\]")


def _jsonpath(obj, path):
    """A subset of kubectl JSONPath: .a.b (a dot in a key escaped: .labels.a\\.b/c), [N], [*],
    [?(@.k=="v")]; first match."""
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    cur = [obj]
    pos = 0
    while pos < len(path):
        m = _JP_TOKEN.match(path, pos)
        if not m:
            return None
        pos = m.end()
        nxt = []
        for c in cur:
            if m.group(1) is not None:
                key = m.group(1).replace("\\.", ".")
                if isinstance(c, dict) and key in c:
                    nxt.append(c[key])
            elif m.group(2) is not None:
                if isinstance(c, list):
                    if m.group(2) == "*":
                        nxt.extend(c)
                    elif int(m.group(2)) < len(c):
                        nxt.append(c[int(m.group(2))])
            else:
                if isinstance(c, list):
                    for it in c:
                        val = it
                        for part in m.group(3).split("."):
                            val = val.get(part) if isinstance(val, dict) else None
                        if _str(val) == m.group(4):
                            nxt.append(it)
        cur = nxt
    return cur[0] if cur else None


# ---- structural schema: pruning, defaults, validation -----------------------------------------

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
               float: "number", type(None): "null"}


def _type_name(v):
    return _TYPE_NAMES.get(type(v), "unknown")


def apply_defaults(obj, schema):
    """Prunes unknown fields and null non-nullable fields, then applies defaults (in place)."""
    for k in list(obj.keys()):
        if k in ("apiVersion", "kind", "metadata"):
            continue
        props = schema.get("properties") or {}
        if k in props:
            obj[k] = _default_value(obj[k], props[k])
            if obj[k] is _PRUNE:
                del obj[k]
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            del obj[k]
    for k, p in (schema.get("properties") or {}).items():
        if k in ("apiVersion", "kind", "metadata"):
            continue
        if k not in obj and "default" in p:
            obj[k] = _default_value(_copy(p["default"]), p)


_PRUNE = object()


def _copy(v):
    import copy
    return copy.deepcopy(v)


def _default_value(v, s):
    if not isinstance(s, dict):
        return v
    if v is None:
        if s.get("nullable"):
            return None
        if "default" in s:
            return _default_value(_copy(s["default"]), s)
        return _PRUNE
    if isinstance(v, dict) and (s.get("type") == "object" or "properties" in s
                                or "additionalProperties" in s):
        if s.get("x-kubernetes-embedded-resource"):
            pass
        props = s.get("properties")
        addl = s.get("additionalProperties")
        out = {}
        for k, x in v.items():
            if props is not None and k in props:
                nv = _default_value(x, props[k])
            elif isinstance(addl, dict):
                nv = _default_value(x, addl)
            elif addl is True or s.get("x-kubernetes-preserve-unknown-fields"):
                nv = x
            elif props is None and addl is None:
                nv = x if s.get("x-kubernetes-preserve-unknown-fields") else _PRUNE
            else:
                nv = _PRUNE
            if nv is not _PRUNE:
                out[k] = nv
        for k, p in (props or {}).items():
            if k not in out and isinstance(p, dict) and "default" in p:
                out[k] = _default_value(_copy(p["default"]), p)
        return out
    if isinstance(v, list) and isinstance(s.get("items"), dict):
        out = []
        for x in v:
            nv = _default_value(x, s["items"])
            out.append(None if nv is _PRUNE else nv)
        return out
    return v


def validate_cr(obj, schema):
    errs = []
    md = obj.get("metadata") or {}
    if not md.get("name") and not md.get("generateName"):
        errs.append(FieldError("Required", "metadata.name",
                               detail="name or generateName is required"))
    elif md.get("name") and check_subdomain(md["name"]):
        errs.append(FieldError("Invalid", "metadata.name", md["name"],
                               check_subdomain(md["name"])))
    props = schema.get("properties") or {}
    for k, p in props.items():
        if k in ("apiVersion", "kind", "metadata"):
            continue
        if k in obj:
            _validate(obj[k], p, k, errs)
    for r in schema.get("required") or []:
        if r not in obj and r not in ("apiVersion", "kind", "metadata"):
            errs.append(FieldError("Required", r))
    return errs


def _validate(v, s, path, errs):
    if not isinstance(s, dict):
        return
    if v is None:
        if not s.get("nullable"):
            errs.append(FieldError("Invalid", path, "null",
                                   f"{path} in body must be of type {s.get('type', 'object')}: "
                                   "\"null\""))
        return
    t = s.get("type")
    ios = s.get("x-kubernetes-int-or-string")
    actual = _type_name(v)
    if ios:
        if actual not in ("integer", "string"):
            errs.append(FieldError("Invalid", path, actual,
                                   f"{path} in body must be of type integer,string: "
                                   f"\"{actual}\""))
            return
    elif t:
        ok = (actual == t or (t == "number" and actual == "integer")
              or (t == "integer" and isinstance(v, float) and v.is_integer()))
        if not ok:
            errs.append(FieldError("Invalid", path, actual,
                                   f"{path} in body must be of type {t}: \"{actual}\""))
            return
    if "enum" in s and v not in s["enum"]:
        errs.append(FieldError("NotSupported", path, v, "supported values: " +
                               ", ".join(go_value(e) for e in s["enum"])))
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if "minimum" in s:
            if s.get("exclusiveMinimum") and v <= s["minimum"]:
                errs.append(FieldError("Invalid", path, v,
                                       f"{path} in body should be greater than {s['minimum']}"))
            elif v < s["minimum"]:
                errs.append(FieldError("Invalid", path, v, f"{path} in body should be greater "
                                                           f"than or equal to {s['minimum']}"))
        if "maximum" in s:
            if s.get("exclusiveMaximum") and v >= s["maximum"]:
                errs.append(FieldError("Invalid", path, v,
                                       f"{path} in body should be less than {s['maximum']}"))
            elif v > s["maximum"]:
                errs.append(FieldError("Invalid", path, v, f"{path} in body should be less "
                                                           f"than or equal to {s['maximum']}"))
    if isinstance(v, str):
        if "maxLength" in s and len(v) > s["maxLength"]:
            errs.append(FieldError("TooLong", path, v,
                                   f"may not be more than {s['maxLength']} bytes"))
        if "minLength" in s and len(v) < s["minLength"]:
            errs.append(FieldError("Invalid", path, v,
                                   f"{path} in body should be at least {s['minLength']} chars "
                                   "long"))
        if "pattern" in s:
            try:
                if not re.search(s["pattern"], v):
                    errs.append(FieldError("Invalid", path, v,
                                           f"{path} in body should match '{s['pattern']}'"))
            except re.error:
                pass
    if isinstance(v, list):
        if "maxItems" in s and len(v) > s["maxItems"]:
            errs.append(FieldError("TooMany", path, len(v),
                                   f"must have at most {s['maxItems']} items"))
        if "minItems" in s and len(v) < s["minItems"]:
            errs.append(FieldError("Invalid", path, len(v),
                                   f"{path} in body should have at least {s['minItems']} items"))
        if isinstance(s.get("items"), dict):
            for i, x in enumerate(v):
                _validate(x, s["items"], f"{path}[{i}]", errs)
        lt = s.get("x-kubernetes-list-type")
        if lt == "set":
            seen = []
            for i, x in enumerate(v):
                if x in seen:
                    errs.append(FieldError("Duplicate", f"{path}[{i}]", x))
                seen.append(x)
        elif lt == "map":
            keys = s.get("x-kubernetes-list-map-keys") or []
            seen = []
            for i, x in enumerate(v):
                k = tuple((x or {}).get(kk) for kk in keys) if isinstance(x, dict) else None
                if k in seen:
                    errs.append(FieldError("Duplicate", f"{path}[{i}]", x))
                seen.append(k)
    if isinstance(v, dict):
        props = s.get("properties") or {}
        for k, x in v.items():
            if k in props:
                _validate(x, props[k], f"{path}.{k}", errs)
            elif isinstance(s.get("additionalProperties"), dict):
                _validate(x, s["additionalProperties"], f"{path}[{k}]", errs)
        for r in s.get("required") or []:
            if r not in v:
                errs.append(FieldError("Required", f"{path}.{r}"))
        if "maxProperties" in s and len(v) > s["maxProperties"]:
            errs.append(FieldError("TooMany", path, len(v),
                                   f"must have at most {s['maxProperties']} items"))
        if "minProperties" in s and len(v) < s["minProperties"]:
            errs.append(FieldError("Invalid", path, len(v),
                                   f"{path} in body should have at least "
                                   f"{s['minProperties']} properties"))


def established_status(crd, now, conflict=None):
    spec = crd.get("spec") or {}
    names = dict(spec.get("names") or {})
    conds = [
        {"type": "NamesAccepted", "status": "False" if conflict else "True",
         "reason": "NameConflict" if conflict else "NoConflicts",
         "message": conflict or "no conflicts found", "lastTransitionTime": now},
        {"type": "Established", "status": "False" if conflict else "True",
         "reason": "NotAccepted" if conflict else "InitialNamesAccepted",
         "message": "not all names are accepted" if conflict else
         "the initial names have been accepted", "lastTransitionTime": now},
    ]
    st = {"conditions": conds, "acceptedNames": {} if conflict else names,
          "storedVersions": [storage_version(crd)]}
    return st


__all__ = ["crd_type", "types_for", "validate_cr", "apply_defaults", "established_status",
           "storage_version", "CRD_GROUP"]
