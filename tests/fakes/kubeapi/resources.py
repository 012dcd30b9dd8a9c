"""The built-in resource types: discovery data, defaults, validation, field labels, tables."""

import base64
import ipaddress

from . import podutil
from .selectors import validate_label_selector, selector_from_object
from .util import (FieldError, age, check_label_name, check_label_value, check_qualified_name,
                   check_subdomain, parse_quantity, QuantityError, now_rfc3339)

STD_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
META_FIELDS = ("metadata.name", "metadata.namespace")


class ResourceType:
    """One resource in one group/version."""

    def __init__(self, group, version, plural, singular, kind, namespaced, *, short_names=(),
                 categories=(), verbs=STD_VERBS, subresources=None, status=True,
                 generation=False, storage=None, field_labels=(), fields=None, table=None,
                 defaults=None, validate=None, validate_update=None, prepare_update=None,
                 return_deleted=False, unconditional_update=True, create_on_update=False,
                 strategic=True, crd=None, to_external=None, to_internal=None,
                 graceful=None, storage_version_hash=None):
        self.group, self.version, self.plural = group, version, plural
        self.singular, self.kind, self.namespaced = singular, kind, namespaced
        self.short_names = list(short_names)
        self.categories = list(categories)
        self.verbs = list(verbs)
        self.subresources = subresources or {}
        self.status = status
        self.generation = generation
        self.skey = storage or (group, plural)
        self.gr = (group, plural)
        self.field_labels = set(META_FIELDS) | set(field_labels)
        self._fields = fields
        self._table = table
        self._defaults = defaults
        self._validate = validate
        self._validate_update = validate_update
        self._prepare_update = prepare_update
        self.return_deleted = return_deleted
        self.unconditional_update = unconditional_update
        self.create_on_update = create_on_update
        self.strategic = strategic
        self.crd = crd
        self._to_external = to_external
        self._to_internal = to_internal
        self.graceful = graceful
        self.storage_version_hash = storage_version_hash

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self):
        return self.kind + "List"

    def to_external(self, obj):
        if self._to_external:
            return self._to_external(obj)
        if obj.get("apiVersion") == self.api_version and obj.get("kind") == self.kind:
            return obj
        out = dict(obj)
        out["apiVersion"] = self.api_version
        out["kind"] = self.kind
        return out

    def to_internal(self, obj):
        if self._to_internal:
            return self._to_internal(obj)
        return obj

    def defaults(self, obj):
        if self._defaults:
            self._defaults(obj)

    def validate(self, obj):
        return self._validate(obj) if self._validate else []

    def validate_update(self, new, old):
        errs = self._validate(new) if self._validate else []
        if self._validate_update:
            errs += self._validate_update(new, old)
        return errs

    def prepare_update(self, new, old):
        if self._prepare_update:
            self._prepare_update(new, old)

    def fields(self, obj):
        md = obj.get("metadata") or {}
        f = {"metadata.name": md.get("name", ""), "metadata.namespace": md.get("namespace", "")}
        if self._fields:
            f.update(self._fields(obj))
        return f

    def table(self, objs, now=None):
        """(columnDefinitions, [cells]) for a Table answer."""
        if self._table:
            cols, row = self._table
        else:
            cols, row = DEFAULT_TABLE
        return ([_col(*c) for c in cols], [row(o, now) for o in objs])


def _col(name, typ="string", priority=0, fmt="", desc=""):
    d = {"name": name, "type": typ, "format": fmt,
         "description": desc or f"{name} of the resource", "priority": priority}
    if name == "Name":
        d["format"] = "name"
        d["description"] = ("Name must be unique within a namespace. Is required when creating "
                            "resources, although some resources may allow a client to request "
                            "the generation of an appropriate name automatically.")
    return d


def _name(o):
    return (o.get("metadata") or {}).get("name", "")


def _created(o):
    return (o.get("metadata") or {}).get("creationTimestamp")


DEFAULT_TABLE = ([("Name",), ("Created At", "date")],
                 lambda o, now: [_name(o), _created(o)])


# ---- shared validation --------------------------------------------------------------------

def validate_meta(obj, name_check=check_subdomain, namespaced=True):
    errs = []
    md = obj.get("metadata") or {}
    name = md.get("name")
    if not name and not md.get("generateName"):
        errs.append(FieldError("Required", "metadata.name",
                               detail="name or generateName is required"))
    elif name:
        e = name_check(name)
        if e:
            errs.append(FieldError("Invalid", "metadata.name", name, e))
    for k, v in (md.get("labels") or {}).items():
        e = check_qualified_name(k)
        if e:
            errs.append(FieldError("Invalid", "metadata.labels", k, e))
        e = check_label_value(v)
        if e:
            errs.append(FieldError("Invalid", "metadata.labels", v, e))
    for k, v in (md.get("annotations") or {}).items():
        e = check_qualified_name(k.lower())
        if e:
            errs.append(FieldError("Invalid", "metadata.annotations", k, e))
        if not isinstance(v, str):
            errs.append(FieldError("Invalid", f"metadata.annotations[{k}]", v,
                                   "must be a string"))
    fins = md.get("finalizers") or []
    for i, f in enumerate(fins):
        if not isinstance(f, str) or not f:
            errs.append(FieldError("Invalid", f"metadata.finalizers[{i}]", f,
                                   "must be a non-empty string"))
            continue
        if "/" not in f and f not in ("kubernetes", "orphan", "foregroundDeletion",
                                      "customresourcecleanup.apiextensions.k8s.io"):
            errs.append(FieldError("Invalid", "metadata.finalizers", f,
                                   "name is neither a standard finalizer name nor is it fully "
                                   "qualified"))
        elif check_qualified_name(f):
            errs.append(FieldError("Invalid", "metadata.finalizers", f, check_qualified_name(f)))
    if "orphan" in fins and "foregroundDeletion" in fins:
        errs.append(FieldError("Invalid", "metadata.finalizers", fins,
                               "finalizer orphan and foregroundDeletion cannot be both set"))
    return errs


def _quantity_errs(res, path):
    errs = []
    for section in ("requests", "limits"):
        for k, v in ((res or {}).get(section) or {}).items():
            try:
                q = parse_quantity(v)
                if q < 0:
                    errs.append(FieldError("Invalid", f"{path}.{section}[{k}]", v,
                                           "must be greater than or equal to 0"))
            except QuantityError as e:
                errs.append(FieldError("Invalid", f"{path}.{section}[{k}]", v, str(e)))
    req, lim = (res or {}).get("requests") or {}, (res or {}).get("limits") or {}
    for k, v in req.items():
        if k in lim:
            try:
                if parse_quantity(v) > parse_quantity(lim[k]):
                    errs.append(FieldError("Invalid", f"{path}.requests", v,
                                           f"must be less than or equal to {k} limit of "
                                           f"{lim[k]}"))
            except QuantityError:
                pass
    return errs


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _toleration_errs(tols, path):
    errs = []
    for i, t in enumerate(tols or []):
        p = f"{path}[{i}]"
        op = t.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            errs.append(FieldError("NotSupported", f"{p}.operator", op,
                                   'supported values: "Equal", "Exists"'))
        if op == "Exists" and t.get("value"):
            errs.append(FieldError("Invalid", f"{p}.operator", t.get("value"),
                                   "value must be empty when `operator` is 'Exists'"))
        if not t.get("key") and op != "Exists":
            errs.append(FieldError("Invalid", f"{p}.operator", op,
                                   "operator must be Exists when `key` is empty, which means "
                                   "\"match all values and all keys\""))
        eff = t.get("effect")
        if eff and eff not in TAINT_EFFECTS:
            errs.append(FieldError("NotSupported", f"{p}.effect", eff,
                                   'supported values: "NoExecute", "NoSchedule", '
                                   '"PreferNoSchedule"'))
        if t.get("tolerationSeconds") is not None and eff != "NoExecute":
            errs.append(FieldError("Invalid", f"{p}.effect", eff,
                                   "effect must be 'NoExecute' when `tolerationSeconds` is set"))
    return errs


def validate_pod_spec(spec, path="spec", template=False):
    errs = []
    if not isinstance(spec, dict):
        return [FieldError("Required", path)]
    containers = spec.get("containers")
    if not containers:
        errs.append(FieldError("Required", f"{path}.containers"))
    names = set()
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            p = f"{path}.{group}[{i}]"
            n = c.get("name")
            if not n:
                errs.append(FieldError("Required", f"{p}.name"))
            else:
                e = check_label_name(n)
                if e:
                    errs.append(FieldError("Invalid", f"{p}.name", n, e))
                if n in names:
                    errs.append(FieldError("Duplicate", f"{p}.name", n))
                names.add(n)
            if not c.get("image") and not template:
                errs.append(FieldError("Required", f"{p}.image"))
            errs += _quantity_errs(c.get("resources"), f"{p}.resources")
    rp = spec.get("restartPolicy", "Always")
    if rp not in ("Always", "OnFailure", "Never"):
        errs.append(FieldError("NotSupported", f"{path}.restartPolicy", rp,
                               'supported values: "Always", "OnFailure", "Never"'))
    errs += _toleration_errs(spec.get("tolerations"), f"{path}.tolerations")
    vols = set()
    for i, v in enumerate(spec.get("volumes") or []):
        n = v.get("name")
        if not n:
            errs.append(FieldError("Required", f"{path}.volumes[{i}].name"))
        elif n in vols:
            errs.append(FieldError("Duplicate", f"{path}.volumes[{i}].name", n))
        vols.add(n)
    tgp = spec.get("terminationGracePeriodSeconds")
    if tgp is not None and not isinstance(tgp, int):
        errs.append(FieldError("Invalid", f"{path}.terminationGracePeriodSeconds", tgp,
                               "must be an integer"))
    return errs


# ---- pods -----------------------------------------------------------------------------------

def _container_defaults(c):
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = ("Always" if (":" not in tag or tag.endswith(":latest"))
                                and "@" not in image else "IfNotPresent")
    res = c.setdefault("resources", {})
    lim = res.get("limits") or {}
    if lim:
        req = res.setdefault("requests", {})
        for k, v in lim.items():
            req.setdefault(k, v)
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def pod_spec_defaults(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _container_defaults(c)


DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def pod_defaults(pod):
    spec = pod.setdefault("spec", {})
    pod_spec_defaults(spec)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    # DefaultTolerationSeconds admission
    tols = spec.setdefault("tolerations", [])
    for dt in DEFAULT_TOLERATIONS:
        if not any((t.get("key") == dt["key"] or (not t.get("key") and
                                                   t.get("operator") == "Exists"))
                   and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append(dict(dt))
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status["qosClass"] = podutil.qos_class(spec)
    if spec.get("schedulingGates"):
        status.setdefault("conditions", [{
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}])


def validate_pod(pod):
    errs = validate_meta(pod)
    errs += validate_pod_spec(pod.get("spec"))
    return errs


_POD_MUTABLE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                    "`spec.tolerations` (only additions to existing tolerations),"
                    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                    "previously negative)")


def _pod_spec_comparable(spec):
    s = {k: v for k, v in (spec or {}).items()
         if k not in ("activeDeadlineSeconds", "tolerations", "schedulingGates")}
    for group in ("containers", "initContainers"):
        if s.get(group):
            s[group] = [{k: v for k, v in c.items() if k != "image"} for c in s[group]]
    return s


def validate_pod_update(new, old):
    errs = []
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    if _pod_spec_comparable(ns) != _pod_spec_comparable(os_):
        errs.append(FieldError("Forbidden", "spec", detail=_POD_MUTABLE_MSG))
    old_tols = os_.get("tolerations") or []
    new_tols = ns.get("tolerations") or []
    if any(t not in new_tols for t in old_tols):
        errs.append(FieldError("Forbidden", "spec.tolerations", detail="existing toleration can "
                                                                      "not be modified except "
                                                                      "its tolerationSeconds"))
    old_gates = [g.get("name") for g in os_.get("schedulingGates") or []]
    new_gates = [g.get("name") for g in ns.get("schedulingGates") or []]
    if any(g not in old_gates for g in new_gates):
        errs.append(FieldError("Forbidden", "spec.schedulingGates",
                               detail="only deletion is allowed, but found new scheduling "
                                      "gate '%s'" % next(g for g in new_gates
                                                          if g not in old_gates)))
    return errs


def pod_fields(p):
    spec, st = p.get("spec") or {}, p.get("status") or {}
    return {
        "spec.nodeName": spec.get("nodeName") or "",
        "spec.restartPolicy": spec.get("restartPolicy") or "",
        "spec.schedulerName": spec.get("schedulerName") or "",
        "spec.serviceAccountName": spec.get("serviceAccountName") or "",
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": st.get("phase") or "",
        "status.podIP": st.get("podIP") or "",
        "status.nominatedNodeName": st.get("nominatedNodeName") or "",
    }


def pod_graceful(pod, options):
    """Pod strategy CheckGracefulDelete: the grace period in seconds."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    g = options.get("gracePeriodSeconds")
    if g is None:
        g = spec.get("terminationGracePeriodSeconds")
        if g is None:
            g = 0
    if not spec.get("nodeName"):
        g = 0
    if st.get("phase") in ("Failed", "Succeeded"):
        g = 0
    if g < 0:
        g = 1
    return int(g)


def pod_status_reason(p):
    st = p.get("status") or {}
    reason = st.get("reason") or st.get("phase") or "Pending"
    ready = 0
    restarts = 0
    cstats = st.get("containerStatuses") or []
    for cs in cstats:
        restarts += cs.get("restartCount") or 0
        state = cs.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state:
            t = state["terminated"]
            reason = t.get("reason") or ("Completed" if t.get("exitCode", 0) == 0 else "Error")
        if cs.get("ready"):
            ready += 1
    if podutil.is_deleting(p) and st.get("reason") != "NodeLost":
        reason = "Terminating"
    return reason, ready, restarts


def _pod_row(p, now):
    reason, ready, restarts = pod_status_reason(p)
    total = len((p.get("spec") or {}).get("containers") or [])
    st = p.get("status") or {}
    gates = (p.get("spec") or {}).get("readinessGates") or []
    return [_name(p), f"{ready}/{total}", reason, restarts, age(_created(p), now),
            st.get("podIP") or "<none>", (p.get("spec") or {}).get("nodeName") or "<none>",
            st.get("nominatedNodeName") or "<none>",
            f"0/{len(gates)}" if gates else "<none>"]


POD_TABLE = ([("Name",), ("Ready",), ("Status",), ("Restarts", "string"), ("Age",),
              ("IP", "string", 1), ("Node", "string", 1), ("Nominated Node", "string", 1),
              ("Readiness Gates", "string", 1)], _pod_row)


# ---- nodes ----------------------------------------------------------------------------------

def node_defaults(node):
    st = node.setdefault("status", {})
    cap = st.get("capacity")
    if cap and "allocatable" not in st:
        st["allocatable"] = dict(cap)


def validate_node(node):
    errs = validate_meta(node, namespaced=False)
    spec = node.get("spec") or {}
    seen = set()
    for i, t in enumerate(spec.get("taints") or []):
        p = f"spec.taints[{i}]"
        k = t.get("key")
        if not k:
            errs.append(FieldError("Required", f"{p}.key"))
        else:
            e = check_qualified_name(k)
            if e:
                errs.append(FieldError("Invalid", f"{p}.key", k, e))
        if t.get("value"):
            e = check_label_value(t["value"])
            if e:
                errs.append(FieldError("Invalid", f"{p}.value", t["value"], e))
        eff = t.get("effect")
        if eff not in TAINT_EFFECTS:
            errs.append(FieldError("NotSupported", f"{p}.effect", eff,
                                   'supported values: "NoSchedule", "PreferNoSchedule", '
                                   '"NoExecute"'))
        if (k, eff) in seen:
            errs.append(FieldError("Duplicate", f"{p}", t,
                                   "taints must be unique by key and effect pair"))
        seen.add((k, eff))
    for sec in ("capacity", "allocatable"):
        for k, v in ((node.get("status") or {}).get(sec) or {}).items():
            try:
                parse_quantity(v)
            except QuantityError as e:
                errs.append(FieldError("Invalid", f"status.{sec}[{k}]", v, str(e)))
    return errs


def validate_node_update(new, old):
    errs = []
    op = (old.get("spec") or {}).get("providerID")
    np_ = (new.get("spec") or {}).get("providerID")
    if op and op != np_:
        errs.append(FieldError("Forbidden", "spec.providerID",
                               detail="node updates may not change providerID except from \"\" "
                                      "to valid"))
    ocidr = (old.get("spec") or {}).get("podCIDR")
    if ocidr and ocidr != (new.get("spec") or {}).get("podCIDR"):
        errs.append(FieldError("Forbidden", "spec.podCIDR",
                               detail="node updates may not change podCIDR except from \"\" to "
                                      "valid"))
    return errs


def node_roles(n):
    roles = []
    for k, v in ((n.get("metadata") or {}).get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            roles.append(k[len("node-role.kubernetes.io/"):])
        elif k == "kubernetes.io/role":
            roles.append(v)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_row(n, now):
    st = n.get("status") or {}
    ready = podutil.node_ready_status(n)
    status = {"True": "Ready", "False": "NotReady"}.get(ready, "Unknown")
    parts = [status]
    if (n.get("spec") or {}).get("unschedulable"):
        parts.append("SchedulingDisabled")
    addrs = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
    info = st.get("nodeInfo") or {}
    return [_name(n), ",".join(parts), node_roles(n), age(_created(n), now),
            info.get("kubeletVersion", ""), addrs.get("InternalIP", "<none>"),
            addrs.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion",
                                                             "<unknown>")]


NODE_TABLE = ([("Name",), ("Status",), ("Roles",), ("Age",), ("Version",),
               ("Internal-IP", "string", 1), ("External-IP", "string", 1),
               ("OS-Image", "string", 1), ("Kernel-Version", "string", 1),
               ("Container-Runtime", "string", 1)], _node_row)


# ---- namespaces -----------------------------------------------------------------------------

def namespace_defaults(ns):
    ns.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    ns.setdefault("status", {}).setdefault("phase", "Active")
    labels = ns.setdefault("metadata", {}).setdefault("labels", {})
    labels["kubernetes.io/metadata.name"] = ns["metadata"].get("name", "")


def validate_namespace(ns):
    return validate_meta(ns, name_check=check_label_name, namespaced=False)


NAMESPACE_TABLE = ([("Name",), ("Status",), ("Age",)],
                   lambda o, now: [_name(o), (o.get("status") or {}).get("phase", ""),
                                   age(_created(o), now)])


# ---- workloads ------------------------------------------------------------------------------

def _template_defaults(obj):
    tmpl = (obj.get("spec") or {}).get("template")
    if isinstance(tmpl, dict):
        pod_spec_defaults(tmpl.setdefault("spec", {}))


def deployment_defaults(d):
    spec = d.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strat = spec.setdefault("strategy", {"type": "RollingUpdate"})
    strat.setdefault("type", "RollingUpdate")
    if strat["type"] == "RollingUpdate":
        ru = strat.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template_defaults(d)
    d.setdefault("status", {})


def replicaset_defaults(rs):
    rs.setdefault("spec", {}).setdefault("replicas", 1)
    _template_defaults(rs)
    rs.setdefault("status", {"replicas": 0})


def daemonset_defaults(ds):
    spec = ds.setdefault("spec", {})
    us = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    us.setdefault("type", "RollingUpdate")
    if us["type"] == "RollingUpdate":
        ru = us.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _template_defaults(ds)
    ds.setdefault("status", {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                             "desiredNumberScheduled": 0, "numberReady": 0})


def _validate_workload(obj, kind):
    errs = validate_meta(obj)
    spec = obj.get("spec") or {}
    sel = spec.get("selector")
    if sel is None:
        errs.append(FieldError("Required", "spec.selector"))
    else:
        errs += validate_label_selector(sel, "spec.selector")
        if not sel.get("matchLabels") and not sel.get("matchExpressions"):
            errs.append(FieldError("Invalid", "spec.selector", sel,
                                   "empty selector is invalid for deployment"
                                   if kind == "Deployment" else "empty selector is not valid "
                                   "for a " + kind.lower()))
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        errs.append(FieldError("Required", "spec.template"))
        return errs
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    if sel is not None and not selector_from_object(sel).matches(labels):
        errs.append(FieldError("Invalid", "spec.template.metadata.labels", labels,
                               "`selector` does not match template `labels`"))
    errs += validate_pod_spec(tmpl.get("spec"), "spec.template.spec")
    rp = (tmpl.get("spec") or {}).get("restartPolicy", "Always")
    if rp != "Always":
        errs.append(FieldError("NotSupported", "spec.template.spec.restartPolicy", rp,
                               'supported values: "Always"'))
    r = spec.get("replicas")
    if r is not None and (not isinstance(r, int) or r < 0):
        errs.append(FieldError("Invalid", "spec.replicas", r,
                               "must be greater than or equal to 0"))
    return errs


def _selector_immutable(new, old):
    if (new.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector"):
        return [FieldError("Invalid", "spec.selector", (new.get("spec") or {}).get("selector"),
                           "field is immutable")]
    return []


def _containers_images(o):
    cs = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _selector_string(sel):
    if not sel:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op = e.get("operator")
        if op in ("In", "NotIn"):
            parts.append(f"{e.get('key')} {op.lower()} ({','.join(e.get('values') or [])})")
        elif op == "Exists":
            parts.append(e.get("key"))
        else:
            parts.append("!" + e.get("key"))
    return ",".join(parts)


def _deploy_row(d, now):
    st, spec = d.get("status") or {}, d.get("spec") or {}
    c, i = _containers_images(d)
    return [_name(d), f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age(_created(d), now),
            c, i, _selector_string(spec.get("selector"))]


DEPLOYMENT_TABLE = ([("Name",), ("Ready",), ("Up-to-date", "integer"), ("Available", "integer"),
                     ("Age",), ("Containers", "string", 1), ("Images", "string", 1),
                     ("Selector", "string", 1)], _deploy_row)


def _rs_row(r, now):
    st, spec = r.get("status") or {}, r.get("spec") or {}
    c, i = _containers_images(r)
    return [_name(r), spec.get("replicas", 0), st.get("replicas", 0), st.get("readyReplicas", 0),
            age(_created(r), now), c, i, _selector_string(spec.get("selector"))]


RS_TABLE = ([("Name",), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"),
             ("Age",), ("Containers", "string", 1), ("Images", "string", 1),
             ("Selector", "string", 1)], _rs_row)


def _ds_row(d, now):
    st, spec = d.get("status") or {}, d.get("spec") or {}
    c, i = _containers_images(d)
    nsel = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [_name(d), st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0),
            st.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in sorted(nsel.items())) or "<none>",
            age(_created(d), now), c, i, _selector_string(spec.get("selector"))]


DS_TABLE = ([("Name",), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"),
             ("Up-to-date", "integer"), ("Available", "integer"), ("Node Selector",), ("Age",),
             ("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)],
            _ds_row)


# ---- PodDisruptionBudgets -------------------------------------------------------------------

def pdb_defaults(pdb):
    st = pdb.setdefault("status", {})
    for k in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        st.setdefault(k, 0)


def _intstr_errs(v, path):
    if v is None:
        return []
    if isinstance(v, bool):
        return [FieldError("Invalid", path, v, "must be an integer or percentage (e.g '5%')")]
    if isinstance(v, int):
        if v < 0:
            return [FieldError("Invalid", path, v, "must be greater than or equal to 0")]
        return []
    if isinstance(v, str):
        if v.endswith("%") and v[:-1].isdigit():
            if int(v[:-1]) > 100:
                return [FieldError("Invalid", path, v, "must not be greater than 100%")]
            return []
        return [FieldError("Invalid", path, v, "a valid percent string must be a numeric "
                                               "string followed by an ending '%' (e.g. '1%',  "
                                               "or '93%', regex used for validation is "
                                               "'[0-9]+%')")]
    return [FieldError("Invalid", path, v, "must be an integer or percentage (e.g '5%')")]


def validate_pdb(pdb):
    errs = validate_meta(pdb)
    spec = pdb.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.append(FieldError("Invalid", "spec", spec,
                               "minAvailable and maxUnavailable cannot be both set"))
    errs += _intstr_errs(spec.get("minAvailable"), "spec.minAvailable")
    errs += _intstr_errs(spec.get("maxUnavailable"), "spec.maxUnavailable")
    errs += validate_label_selector(spec.get("selector"), "spec.selector")
    uhp = spec.get("unhealthyPodEvictionPolicy")
    if uhp is not None and uhp not in ("IfHealthyBudget", "AlwaysAllow"):
        errs.append(FieldError("NotSupported", "spec.unhealthyPodEvictionPolicy", uhp,
                               'supported values: "AlwaysAllow", "IfHealthyBudget"'))
    return errs


def _pdb_row(p, now):
    spec, st = p.get("spec") or {}, p.get("status") or {}
    mina, maxu = spec.get("minAvailable"), spec.get("maxUnavailable")
    return [_name(p), "N/A" if mina is None else str(mina), "N/A" if maxu is None else str(maxu),
            st.get("disruptionsAllowed", 0), age(_created(p), now)]


PDB_TABLE = ([("Name",), ("Min Available",), ("Max Unavailable",),
              ("Allowed Disruptions", "integer"), ("Age",)], _pdb_row)


# ---- leases ---------------------------------------------------------------------------------

def validate_lease(lease):
    errs = validate_meta(lease)
    spec = lease.get("spec") or {}
    d = spec.get("leaseDurationSeconds")
    if d is not None and (not isinstance(d, int) or d <= 0):
        errs.append(FieldError("Invalid", "spec.leaseDurationSeconds", d, "must be greater than 0"))
    t = spec.get("leaseTransitions")
    if t is not None and (not isinstance(t, int) or t < 0):
        errs.append(FieldError("Invalid", "spec.leaseTransitions", t,
                               "must be greater than or equal to 0"))
    return errs


LEASE_TABLE = ([("Name",), ("Holder",), ("Age",)],
               lambda o, now: [_name(o), (o.get("spec") or {}).get("holderIdentity") or "",
                               age(_created(o), now)])


# ---- events ---------------------------------------------------------------------------------

def event_fields(e):
    io = e.get("involvedObject") or {}
    return {
        "involvedObject.kind": io.get("kind") or "",
        "involvedObject.namespace": io.get("namespace") or "",
        "involvedObject.name": io.get("name") or "",
        "involvedObject.uid": io.get("uid") or "",
        "involvedObject.apiVersion": io.get("apiVersion") or "",
        "involvedObject.resourceVersion": io.get("resourceVersion") or "",
        "involvedObject.fieldPath": io.get("fieldPath") or "",
        "reason": e.get("reason") or "",
        "reportingComponent": e.get("reportingComponent") or "",
        "source": (e.get("source") or {}).get("component") or "",
        "type": e.get("type") or "",
    }


EVENT_FIELDS = tuple(event_fields({}).keys())


def event_defaults(e):
    e.setdefault("involvedObject", {})
    e.setdefault("source", {})
    e.setdefault("reportingComponent", "")
    e.setdefault("reportingInstance", "")


def validate_event(e):
    errs = validate_meta(e)
    ns = (e.get("metadata") or {}).get("namespace") or ""
    io = e.get("involvedObject") or {}
    ions = io.get("namespace") or ""
    if ions and ions != ns:
        errs.append(FieldError("Invalid", "involvedObject.namespace", ions,
                               "does not match event.namespace"))
    t = e.get("type")
    if t and t not in ("Normal", "Warning"):
        errs.append(FieldError("Invalid", "type", t, f"has invalid value: {t}"))
    return errs


def event_to_v1(e):
    """core/v1 Event (storage) to events.k8s.io/v1 Event."""
    out = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": e.get("metadata", {})}
    if e.get("eventTime"):
        out["eventTime"] = e["eventTime"]
    else:
        out["eventTime"] = None
    if e.get("series"):
        out["series"] = {"count": e["series"].get("count"),
                         "lastObservedTime": e["series"].get("lastObservedTime")}
    for src, dst in (("reportingComponent", "reportingController"),
                     ("reportingInstance", "reportingInstance"), ("action", "action"),
                     ("reason", "reason"), ("involvedObject", "regarding"),
                     ("related", "related"), ("message", "note"), ("type", "type"),
                     ("source", "deprecatedSource"), ("firstTimestamp", "deprecatedFirstTimestamp"),
                     ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount")):
        if e.get(src) not in (None, "", {}):
            out[dst] = e[src]
    return out


def event_from_v1(e):
    out = {"apiVersion": "v1", "kind": "Event", "metadata": e.get("metadata", {})}
    for dst, src in (("reportingComponent", "reportingController"),
                     ("reportingInstance", "reportingInstance"), ("action", "action"),
                     ("reason", "reason"), ("involvedObject", "regarding"),
                     ("related", "related"), ("message", "note"), ("type", "type"),
                     ("source", "deprecatedSource"), ("firstTimestamp", "deprecatedFirstTimestamp"),
                     ("lastTimestamp", "deprecatedLastTimestamp"), ("count", "deprecatedCount"),
                     ("eventTime", "eventTime")):
        if e.get(src) is not None:
            out[dst] = e[src]
    if e.get("series"):
        out["series"] = dict(e["series"])
    return out


def validate_event_v1(e):
    errs = validate_meta(e)
    if not e.get("eventTime"):
        errs.append(FieldError("Required", "eventTime"))
    t = e.get("type")
    if t not in ("Normal", "Warning"):
        errs.append(FieldError("Invalid", "type", "", f"has invalid value: {t or ''}"))
    if e.get("deprecatedFirstTimestamp"):
        errs.append(FieldError("Invalid", "deprecatedFirstTimestamp", "", "needs to be unset"))
    if e.get("deprecatedLastTimestamp"):
        errs.append(FieldError("Invalid", "deprecatedLastTimestamp", "", "needs to be unset"))
    if e.get("deprecatedCount"):
        errs.append(FieldError("Invalid", "deprecatedCount", 0, "needs to be unset"))
    if not e.get("reportingController"):
        errs.append(FieldError("Required", "reportingController"))
    if not e.get("reportingInstance"):
        errs.append(FieldError("Required", "reportingInstance"))
    if not e.get("action"):
        errs.append(FieldError("Required", "action"))
    if not e.get("reason"):
        errs.append(FieldError("Required", "reason"))
    return errs


def _event_row(e, now):
    io = e.get("involvedObject") or {}
    last = e.get("lastTimestamp") or (e.get("series") or {}).get("lastObservedTime") or \
        e.get("eventTime") or _created(e)
    first = e.get("firstTimestamp") or e.get("eventTime") or _created(e)
    src = (e.get("source") or {}).get("component") or e.get("reportingComponent") or ""
    host = (e.get("source") or {}).get("host")
    if host:
        src = f"{src}, {host}"
    return [age(last, now), e.get("type", ""), e.get("reason", ""),
            f"{(io.get('kind') or '').lower()}/{io.get('name', '')}", io.get("fieldPath", ""),
            src, (e.get("message") or "").strip(), age(first, now), e.get("count") or 1, _name(e)]


EVENT_TABLE = ([("Last Seen",), ("Type",), ("Reason",), ("Object",), ("Subobject", "string", 1),
                ("Source", "string", 1), ("Message",), ("First Seen", "string", 1),
                ("Count", "string", 1), ("Name", "string", 1)], _event_row)


# ---- config and storage ---------------------------------------------------------------------

def secret_defaults(s):
    s.setdefault("type", "Opaque")
    sd = s.pop("stringData", None)
    if sd:
        data = s.setdefault("data", {})
        for k, v in sd.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def validate_secret(s):
    errs = validate_meta(s)
    for k, v in (s.get("data") or {}).items():
        try:
            base64.b64decode(v, validate=True)
        except Exception:
            errs.append(FieldError("Invalid", f"data[{k}]", "<secret contents redacted>",
                                   "illegal base64 data"))
    return errs


CONFIGMAP_TABLE = ([("Name",), ("Data", "integer"), ("Age",)],
                   lambda o, now: [_name(o), len(o.get("data") or {}) +
                                   len(o.get("binaryData") or {}), age(_created(o), now)])
SECRET_TABLE = ([("Name",), ("Type",), ("Data", "integer"), ("Age",)],
                lambda o, now: [_name(o), o.get("type", ""), len(o.get("data") or {}),
                                age(_created(o), now)])


class IPAllocator:
    def __init__(self, cidr="10.96.0.0/12"):
        self.net = ipaddress.ip_network(cidr)
        self.next = 1

    def allocate(self):
        self.next += 1
        return str(self.net.network_address + self.next)


SERVICE_IPS = IPAllocator()


def service_defaults(s):
    spec = s.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = SERVICE_IPS.allocate()
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))
    s.setdefault("status", {"loadBalancer": {}})


def validate_service(s):
    errs = validate_meta(s, name_check=check_label_name)
    spec = s.get("spec") or {}
    if spec.get("type", "ClusterIP") not in ("ClusterIP", "NodePort", "LoadBalancer",
                                             "ExternalName"):
        errs.append(FieldError("NotSupported", "spec.type", spec.get("type"),
                               'supported values: "ClusterIP", "ExternalName", "LoadBalancer", '
                               '"NodePort"'))
    if spec.get("type", "ClusterIP") != "ExternalName" and not spec.get("ports") \
            and spec.get("clusterIP") != "None":
        errs.append(FieldError("Required", "spec.ports"))
    return errs


def _svc_row(s, now):
    spec = s.get("spec") or {}
    ports = ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or [])
    ext = ",".join(i.get("ip") or i.get("hostname") or "" for i in
                   ((s.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []) \
        or ("<pending>" if spec.get("type") == "LoadBalancer" else "<none>")
    return [_name(s), spec.get("type", ""), spec.get("clusterIP") or "<none>", ext,
            ports or "<none>", age(_created(s), now),
            ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items()))
            or "<none>"]


SERVICE_TABLE = ([("Name",), ("Type",), ("Cluster-IP",), ("External-IP",), ("Port(s)",),
                  ("Age",), ("Selector", "string", 1)], _svc_row)


def pvc_defaults(p):
    p.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
    p.setdefault("status", {}).setdefault("phase", "Pending")


def validate_pvc(p):
    errs = validate_meta(p)
    spec = p.get("spec") or {}
    if not spec.get("accessModes"):
        errs.append(FieldError("Required", "spec.accessModes",
                               detail="at least 1 access mode is required"))
    if "storage" not in ((spec.get("resources") or {}).get("requests") or {}):
        errs.append(FieldError("Required", "spec.resources[storage]"))
    return errs


def pv_defaults(p):
    spec = p.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")
    p.setdefault("status", {}).setdefault("phase", "Pending")


def validate_pv(p):
    errs = validate_meta(p, namespaced=False)
    spec = p.get("spec") or {}
    if not spec.get("accessModes"):
        errs.append(FieldError("Required", "spec.accessModes"))
    if "storage" not in (spec.get("capacity") or {}):
        errs.append(FieldError("Required", "spec.capacity"))
    return errs


PVC_TABLE = ([("Name",), ("Status",), ("Volume",), ("Capacity",), ("Access Modes",),
              ("StorageClass",), ("Age",)],
             lambda o, now: [_name(o), (o.get("status") or {}).get("phase", ""),
                             (o.get("spec") or {}).get("volumeName", ""),
                             ((o.get("status") or {}).get("capacity") or {}).get("storage", ""),
                             ",".join((o.get("spec") or {}).get("accessModes") or []),
                             (o.get("spec") or {}).get("storageClassName") or "<unset>",
                             age(_created(o), now)])
PV_TABLE = ([("Name",), ("Capacity",), ("Access Modes",), ("Reclaim Policy",), ("Status",),
             ("Claim",), ("StorageClass",), ("Age",)],
            lambda o, now: [_name(o),
                            ((o.get("spec") or {}).get("capacity") or {}).get("storage", ""),
                            ",".join((o.get("spec") or {}).get("accessModes") or []),
                            (o.get("spec") or {}).get("persistentVolumeReclaimPolicy", ""),
                            (o.get("status") or {}).get("phase", ""),
                            "/".join(x for x in (((o.get("spec") or {}).get("claimRef") or {})
                                                 .get(k, "") for k in ("namespace", "name")) if x),
                            (o.get("spec") or {}).get("storageClassName", ""),
                            age(_created(o), now)])


# ---- registry of built-ins --------------------------------------------------------------------

def _status_sub(kind, group=None, version=None):
    return {"status": {"kind": kind, "verbs": ["get", "patch", "update"]}}


def builtin_types(graceful_pod=pod_graceful):
    """Every built-in ResourceType."""
    scale = {"kind": "Scale", "group": "autoscaling", "version": "v1",
             "verbs": ["get", "patch", "update"]}
    T = ResourceType
    types = [
        T("", "v1", "pods", "pod", "Pod", True, short_names=["po"], categories=["all"],
          subresources={"status": {"kind": "Pod", "verbs": ["get", "patch", "update"]},
                        "binding": {"kind": "Binding", "verbs": ["create"]},
                        "eviction": {"kind": "Eviction", "group": "policy", "version": "v1",
                                     "verbs": ["create"]}},
          field_labels=pod_fields({}).keys(), fields=pod_fields, table=POD_TABLE,
          defaults=pod_defaults, validate=validate_pod, validate_update=validate_pod_update,
          return_deleted=True, graceful=graceful_pod),
        T("", "v1", "bindings", "binding", "Binding", True, verbs=["create"], status=False),
        T("", "v1", "nodes", "node", "Node", False, short_names=["no"],
          subresources={"status": {"kind": "Node", "verbs": ["get", "patch", "update"]}},
          field_labels=["spec.unschedulable"],
          fields=lambda n: {"spec.unschedulable":
                            "true" if (n.get("spec") or {}).get("unschedulable") else "false"},
          table=NODE_TABLE, defaults=node_defaults, validate=validate_node,
          validate_update=validate_node_update),
        T("", "v1", "namespaces", "namespace", "Namespace", False, short_names=["ns"],
          verbs=["create", "delete", "get", "list", "patch", "update", "watch"],
          subresources={"status": {"kind": "Namespace", "verbs": ["get", "patch", "update"]},
                        "finalize": {"kind": "Namespace", "verbs": ["update"]}},
          field_labels=["status.phase"],
          fields=lambda n: {"status.phase": (n.get("status") or {}).get("phase") or ""},
          table=NAMESPACE_TABLE, defaults=namespace_defaults, validate=validate_namespace),
        T("", "v1", "events", "event", "Event", True, short_names=["ev"], status=False,
          field_labels=EVENT_FIELDS, fields=event_fields, table=EVENT_TABLE,
          defaults=event_defaults, validate=validate_event, create_on_update=True),
        T("", "v1", "services", "service", "Service", True, short_names=["svc"],
          categories=["all"],
          subresources={"status": {"kind": "Service", "verbs": ["get", "patch", "update"]}},
          field_labels=["spec.clusterIP", "spec.type"],
          fields=lambda s: {"spec.clusterIP": (s.get("spec") or {}).get("clusterIP") or "",
                            "spec.type": (s.get("spec") or {}).get("type") or ""},
          table=SERVICE_TABLE, defaults=service_defaults, validate=validate_service),
        T("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True,
          short_names=["sa"], status=False, validate=validate_meta),
        T("", "v1", "configmaps", "configmap", "ConfigMap", True, short_names=["cm"],
          status=False, table=CONFIGMAP_TABLE, validate=validate_meta),
        T("", "v1", "secrets", "secret", "Secret", True, status=False, field_labels=["type"],
          fields=lambda s: {"type": s.get("type") or ""}, table=SECRET_TABLE,
          defaults=secret_defaults, validate=validate_secret),
        T("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim",
          True, short_names=["pvc"], subresources=_status_sub("PersistentVolumeClaim"),
          table=PVC_TABLE, defaults=pvc_defaults, validate=validate_pvc),
        T("", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", False,
          short_names=["pv"], subresources=_status_sub("PersistentVolume"), table=PV_TABLE,
          defaults=pv_defaults, validate=validate_pv),
        T("apps", "v1", "deployments", "deployment", "Deployment", True, short_names=["deploy"],
          categories=["all"],
          subresources={"status": {"kind": "Deployment", "verbs": ["get", "patch", "update"]},
                        "scale": scale},
          generation=True, table=DEPLOYMENT_TABLE, defaults=deployment_defaults,
          validate=lambda d: _validate_workload(d, "Deployment"),
          validate_update=_selector_immutable),
        T("apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, short_names=["rs"],
          categories=["all"],
          subresources={"status": {"kind": "ReplicaSet", "verbs": ["get", "patch", "update"]},
                        "scale": scale},
          generation=True, field_labels=["status.replicas"],
          fields=lambda r: {"status.replicas": str((r.get("status") or {}).get("replicas", 0))},
          table=RS_TABLE, defaults=replicaset_defaults,
          validate=lambda d: _validate_workload(d, "ReplicaSet"),
          validate_update=_selector_immutable),
        T("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, short_names=["ds"],
          categories=["all"], subresources=_status_sub("DaemonSet"), generation=True,
          table=DS_TABLE, defaults=daemonset_defaults,
          validate=lambda d: _validate_workload(d, "DaemonSet"),
          validate_update=_selector_immutable),
        T("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget",
          True, short_names=["pdb"], subresources=_status_sub("PodDisruptionBudget"),
          generation=True, table=PDB_TABLE, defaults=pdb_defaults, validate=validate_pdb),
        T("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, status=False,
          table=LEASE_TABLE, validate=validate_lease, create_on_update=True),
        T("events.k8s.io", "v1", "events", "event", "Event", True, short_names=["ev"],
          status=False, storage=("", "events"), field_labels=EVENT_FIELDS, fields=event_fields,
          table=EVENT_TABLE, defaults=event_defaults, validate=validate_event_v1,
          to_external=event_to_v1, to_internal=event_from_v1, create_on_update=True),
    ]
    return types
