"""The verbs, with the apiserver's semantics: create, get, list, update, patch, delete,
deletecollection, watch, and the pods/eviction, pods/binding and */scale subresources."""

import base64
import bisect
import json
import logging
import threading
import time

from . import crd as crdmod
from . import podutil
from .patch import (PatchDecodeError, PatchError, json_patch, merge_patch,
                    strategic_merge_patch)
from .resources import builtin_types
from .selectors import parse_field_selector, parse_label_selector, selector_from_object
from .util import (ApiError, FieldError, MODIFIED_MSG, already_exists, bad_request, conflict,
                   deep_copy, expired, forbidden, invalid, new_uid, not_found,
                   now_micro, now_rfc3339, random_suffix, unsupported_media)

log = logging.getLogger("kubeapi")

KEEP_STATUS_ON_CREATE = {("", "nodes")}
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")
DISRUPTION_BUDGET_MSG = "Cannot evict pod as it would violate the pod's disruption budget."
MULTI_PDB_MSG = ("This pod has more than one PodDisruptionBudget, which the eviction "
                 "subresource does not support.")


class Registry:
    """Served group/versions and their resources."""

    def __init__(self):
        self.types = {}          # (group, version, plural) -> ResourceType
        self.group_order = []    # groups in discovery order
        self.group_versions = {}  # group -> [versions], preferred first

    def add(self, rt):
        self.types[(rt.group, rt.version, rt.plural)] = rt
        if rt.group not in self.group_versions:
            self.group_versions[rt.group] = []
            self.group_order.append(rt.group)
        if rt.version not in self.group_versions[rt.group]:
            self.group_versions[rt.group].append(rt.version)

    def remove_group_resource(self, group, plural):
        for k in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[k]
        left = sorted({k[1] for k in self.types if k[0] == group})
        if not left:
            self.group_versions.pop(group, None)
            if group in self.group_order:
                self.group_order.remove(group)
        else:
            self.group_versions[group] = [v for v in self.group_versions[group] if v in left]

    def get(self, group, version, plural):
        return self.types.get((group, version, plural))

    def resources(self, group, version):
        return [rt for (g, v, _), rt in self.types.items() if g == group and v == version]

    def by_skey(self, skey):
        """The preferred ResourceType that stores skey."""
        group, plural = skey
        for v in self.group_versions.get(group, []):
            rt = self.types.get((group, v, plural))
            if rt is not None and rt.skey == skey:
                return rt
        for rt in self.types.values():
            if rt.skey == skey:
                return rt
        return None

    def by_kind(self, api_version, kind):
        group, _, version = api_version.rpartition("/")
        for rt in self.types.values():
            if rt.group == group and rt.kind == kind and (rt.version == version or not version):
                return rt
        for rt in self.types.values():
            if rt.group == group and rt.kind == kind:
                return rt
        return None


def _meta(o):
    return o.get("metadata") or {}


def _key(rt, ns, name):
    return (ns if rt.namespaced else "", name)


def _strip_for_compare(o):
    o = dict(o)
    md = dict(o.get("metadata") or {})
    md.pop("resourceVersion", None)
    md.pop("managedFields", None)
    o["metadata"] = md
    return o


class Api:
    def __init__(self, store, opts):
        self.store = store
        self.opts = opts
        self.registry = Registry()
        for rt in builtin_types():
            self.registry.add(rt)
        self.registry.add(crdmod.crd_type())
        self.ctx = threading.local()
        self.audit = []          # eviction decisions
        self.violations = []     # pod deletions that left a PDB short of desiredHealthy
        self.deletions = 0       # pods that started deleting while healthy
        self.wake = threading.Event()
        self.event_index = {}    # (ns, uid, reason, message, type) -> names of Events
        store.before.append(self._before_commit)
        store.listeners.append(self._index_event)
        store.listeners.append(lambda ev: self.wake.set())

    # -- helpers ----------------------------------------------------------------------------
    def rt(self, group, plural, version=None):
        if version:
            return self.registry.get(group, version, plural)
        return self.registry.by_skey((group, plural))

    @property
    def actor(self):
        return getattr(self.ctx, "actor", "client")

    def as_actor(self, name):
        api = self

        class _Ctx:
            def __enter__(self_):
                self_.prev = getattr(api.ctx, "actor", "client")
                api.ctx.actor = name

            def __exit__(self_, *a):
                api.ctx.actor = self_.prev
        return _Ctx()

    def scale_time(self, seconds):
        return seconds * self.opts.grace_scale

    def external(self, rt, obj):
        return rt.to_external(obj)

    def _gk(self, rt):
        return rt.kind, rt.group

    def _check_namespace(self, rt, ns, creating):
        if not rt.namespaced:
            return
        nsobj = self.store.get(("", "namespaces"), ("", ns))
        if nsobj is None:
            raise not_found(("", "namespaces"), ns)
        if creating and podutil.is_deleting(nsobj):
            raise forbidden(rt.gr, "", f"unable to create new content in namespace {ns} because "
                                       "it is being terminated",
                            [{"reason": "NamespaceTerminating",
                              "message": f"namespace {ns} is being terminated",
                              "field": "metadata.namespace"}])

    def _check_type(self, rt, body, expect_kind=None):
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        kind = expect_kind or rt.kind
        av = body.get("apiVersion")
        if body.get("kind") and body["kind"] != kind:
            raise bad_request(f"{body['kind']} in version \"{rt.version}\" cannot be handled as a "
                              f"{kind}: no kind \"{body['kind']}\" is registered for version "
                              f"\"{av or rt.api_version}\"")
        if av and av != rt.api_version and not expect_kind:
            raise bad_request(f"the API version in the data ({av}) does not match the expected "
                              f"API version ({rt.api_version})")

    def _validate_or_raise(self, rt, obj, old=None):
        errs = rt.validate(obj) if old is None else rt.validate_update(obj, old)
        if errs:
            name = _meta(obj).get("name") or _meta(obj).get("generateName") or ""
            raise invalid(rt.kind, rt.group, name, errs)

    # -- create -------------------------------------------------------------------------------
    def create(self, rt, ns, body, dry_run=False, field_validation=None):
        self._check_type(rt, body)
        obj = deep_copy(body)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        md = obj.get("metadata")
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        if rt.namespaced:
            if md.get("namespace") and ns and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if md.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        with self.store.lock:
            self._check_namespace(rt, ns, creating=True)
            if rt.status and rt.skey not in KEEP_STATUS_ON_CREATE:
                obj.pop("status", None)
            if rt.crd is not None:
                self._crd_unknown_fields(rt, obj, field_validation)
                rt.defaults(obj)
                self._validate_or_raise(rt, obj)
            elif rt._to_internal:
                self._validate_or_raise(rt, obj)
                obj = rt.to_internal(obj)
                rt.defaults(obj)
            else:
                rt.defaults(obj)
                self._validate_or_raise(rt, obj)
            md = obj["metadata"]
            for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink",
                      "managedFields"):
                md.pop(k, None)
            md["uid"] = new_uid()
            md["creationTimestamp"] = now_rfc3339()
            if rt.generation:
                md["generation"] = 1
            else:
                md.pop("generation", None)
            if not md.get("name"):
                for _ in range(8):
                    name = md["generateName"] + random_suffix()
                    if self.store.get(rt.skey, _key(rt, ns, name)) is None:
                        break
                md["name"] = name
            key = _key(rt, ns, md["name"])
            if self.store.get(rt.skey, key) is not None:
                raise already_exists(rt.gr, md["name"])
            if rt.skey == ("apiextensions.k8s.io", "customresourcedefinitions"):
                md.setdefault("finalizers", [])
                if "customresourcecleanup.apiextensions.k8s.io" not in md["finalizers"]:
                    md["finalizers"].append("customresourcecleanup.apiextensions.k8s.io")
            if dry_run:
                return rt.to_external(obj)
            stored = self.store.commit(rt.skey, key, obj, "ADDED")
            return rt.to_external(stored)

    def _crd_unknown_fields(self, rt, obj, field_validation):
        """fieldValidation=Strict on a custom resource: unknown fields are a 400."""
        if field_validation != "Strict":
            return []
        schema = (rt.crd_version.get("schema") or {}).get("openAPIV3Schema") or {}
        unknown = []
        _unknown_paths(obj, schema, "", unknown, top=True)
        if unknown:
            raise bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a '
                              f"{rt.kind}: strict decoding error: " +
                              ", ".join(f'unknown field "{p}"' for p in unknown))
        return []

    # -- get / list ---------------------------------------------------------------------------
    def get(self, rt, ns, name):
        with self.store.lock:
            obj = self.store.get(rt.skey, _key(rt, ns, name))
            if obj is None:
                raise not_found(rt.gr, name)
            return rt.to_external(obj)

    def get_internal(self, rt, ns, name):
        return self.store.get(rt.skey, _key(rt, ns, name))

    def parse_selectors(self, rt, q):
        ls = parse_label_selector(q.get("labelSelector"))
        fs = parse_field_selector(q.get("fieldSelector"), rt.field_labels)
        return ls, fs

    def matches(self, rt, obj, ns, ls, fs):
        if rt.namespaced and ns and _meta(obj).get("namespace") != ns:
            return False
        if not ls.empty() and not ls.matches(_meta(obj).get("labels")):
            return False
        if not fs.empty() and not fs.matches(rt.fields(obj)):
            return False
        return True

    def _wait_for_rv(self, rv):
        deadline = time.monotonic() + 3.0
        while self.store.rv < rv:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ApiError(504, "Timeout", f"Too large resource version: {rv}, current: "
                                               f"{self.store.rv}",
                               {"causes": [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}],
                                "retryAfterSeconds": 1})
            self.store.cond.wait(left)

    def list(self, rt, ns, q):
        """Returns (items in storage form, list resourceVersion, continue, remaining)."""
        ls, fs = self.parse_selectors(rt, q)
        limit = q.get("limit")
        try:
            limit = int(limit) if limit not in (None, "") else 0
        except ValueError:
            raise bad_request(f"invalid limit: {limit}")
        cont = q.get("continue") or ""
        rv_param = q.get("resourceVersion") or ""
        match = q.get("resourceVersionMatch") or ""
        if match and not rv_param:
            raise invalid("ListOptions", "meta.k8s.io", "", [FieldError(
                "Forbidden", "resourceVersionMatch",
                detail="resourceVersionMatch is forbidden unless resourceVersion is provided")])
        if cont and rv_param not in ("", "0") and rv_param:
            raise invalid("ListOptions", "meta.k8s.io", "", [FieldError(
                "Forbidden", "resourceVersion",
                detail="specifying resource version is not allowed when using continue")])
        with self.store.lock:
            start = None
            if cont:
                try:
                    tok = json.loads(base64.b64decode(cont + "=" * (-len(cont) % 4)))
                    snap_rv, start = int(tok["rv"]), tok["start"]
                except Exception:
                    raise bad_request("continue key is not valid: illegal base64 data")
                if snap_rv < self.store.compacted:
                    raise expired("The provided continue parameter is too old to display a "
                                  "consistent list result. You can start a new list without the "
                                  "continue parameter, or use the continue token in this "
                                  "response to retrieve the remainder of the results. Continuing "
                                  "with the provided token results in an inconsistent list - "
                                  "objects that were created, modified, or deleted between the "
                                  "time the first chunk was returned and now may show up in the "
                                  "list.")
            elif rv_param and match == "Exact":
                snap_rv = self._parse_rv(rv_param)
                if snap_rv > self.store.rv:
                    self._wait_for_rv(snap_rv)
            else:
                if rv_param and rv_param != "0":
                    want = self._parse_rv(rv_param)
                    if want > self.store.rv:
                        self._wait_for_rv(want)
                snap_rv = self.store.rv
            names, keys, state = self.store.ordered(rt.skey, snap_rv)
            # remainingItemCount only without selectors; with them one more match is enough
            selective = not ls.empty() or not fs.empty()
            items, last, remaining = [], None, 0
            for i in range(bisect.bisect_left(names, start) if start else 0, len(keys)):
                o = state[keys[i]]
                if not self.matches(rt, o, ns, ls, fs):
                    continue
                if limit and len(items) >= limit:
                    remaining += 1
                    if selective:
                        break
                    continue
                items.append(o)
                last = names[i]
            token = ""
            if remaining:
                token = base64.b64encode(json.dumps(
                    {"v": "meta.k8s.io/v1", "rv": snap_rv, "start": last + "\x00"},
                    separators=(",", ":")).encode()).decode()
            rem = remaining if (token and ls.empty() and fs.empty()) else None
            return items, snap_rv, token, rem

    @staticmethod
    def _parse_rv(v):
        try:
            n = int(v)
            if n < 0:
                raise ValueError
            return n
        except ValueError:
            raise bad_request(f"invalid resource version: {v}")

    # -- update -------------------------------------------------------------------------------
    def update(self, rt, ns, name, body, sub=None, dry_run=False, field_validation=None):
        expect = None
        self._check_type(rt, body, expect)
        obj = deep_copy(body)
        md = obj.get("metadata")
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        if md.get("name") and md["name"] != name:
            raise bad_request(f"the name of the object ({md['name']}) does not match the name "
                              f"on the URL ({name})")
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            md["namespace"] = ns
        md["name"] = name
        with self.store.lock:
            old = self.store.get(rt.skey, _key(rt, ns, name))
            if old is None:
                if rt.create_on_update and sub is None:
                    md.pop("resourceVersion", None)
                    return self.create(rt, ns, obj, dry_run), 201
                raise not_found(rt.gr, name)
            if rt.crd is not None and sub is None:
                self._crd_unknown_fields(rt, obj, field_validation)
            new = self._prepare_update(rt, old, obj, sub)
            return self._finish_update(rt, ns, name, old, new, dry_run), 200

    def _prepare_update(self, rt, old, obj, sub):
        """Applies the update strategy to an external object; returns the new storage object."""
        rv = _meta(obj).get("resourceVersion")
        oldmd = _meta(old)
        if rv:
            if rv != oldmd.get("resourceVersion"):
                raise conflict(rt.gr, oldmd.get("name"), MODIFIED_MSG)
        elif not rt.unconditional_update:
            raise invalid(rt.kind, rt.group, oldmd.get("name"), [FieldError(
                "Invalid", "metadata.resourceVersion", "0x0",
                "must be specified for an update")])
        old_ext = rt.to_external(old)
        if sub == "status":
            new = deep_copy(old_ext)
            new["status"] = deep_copy(obj.get("status"))
            if new["status"] is None:
                new.pop("status")
        else:
            new = obj
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if rt.status:
                if "status" in old_ext:
                    new["status"] = deep_copy(old_ext["status"])
                else:
                    new.pop("status", None)
        md = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation", "namespace", "name", "selfLink"):
            if k in oldmd:
                md[k] = oldmd[k]
            else:
                md.pop(k, None)
        if sub == "status":
            new["metadata"] = dict(oldmd)
        md = new["metadata"]
        if oldmd.get("deletionTimestamp"):
            added = [f for f in md.get("finalizers") or [] if f not in (oldmd.get("finalizers")
                                                                         or [])]
            if added:
                raise invalid(rt.kind, rt.group, oldmd.get("name"), [FieldError(
                    "Forbidden", "metadata.finalizers",
                    detail="no new finalizers can be added if the object is being deleted, "
                           "found new finalizers " + "[]string{" +
                           ", ".join(json.dumps(a) for a in added) + "}")])
        if rt.crd is not None:
            rt.defaults(new)
            self._validate_or_raise(rt, new, old_ext)
            internal = new
        elif rt._to_internal:
            self._validate_or_raise(rt, new, old_ext)
            internal = rt.to_internal(new)
            rt.defaults(internal)
        else:
            rt.defaults(new)
            rt.prepare_update(new, old)
            self._validate_or_raise(rt, new, old_ext)
            internal = new
        if rt.generation:
            gen = oldmd.get("generation", 1)
            if self._spec_changed(rt, old, internal):
                gen += 1
            internal["metadata"]["generation"] = gen
        return internal

    @staticmethod
    def _spec_changed(rt, old, new):
        skip = {"metadata", "apiVersion", "kind"}
        if rt.status:
            skip.add("status")
        a = {k: v for k, v in old.items() if k not in skip}
        b = {k: v for k, v in new.items() if k not in skip}
        return a != b

    def _finish_update(self, rt, ns, name, old, new, dry_run):
        key = _key(rt, ns, name)
        md = new["metadata"]
        md["resourceVersion"] = _meta(old).get("resourceVersion")
        if _strip_for_compare(new) == _strip_for_compare(old):
            return rt.to_external(old)
        if dry_run:
            return rt.to_external(new)
        if md.get("deletionTimestamp") and not md.get("finalizers") and \
                not self._namespace_pending(rt, new):
            stored = self.store.commit(rt.skey, key, None, "DELETED")
            self._after_delete(rt, old)
            return rt.to_external(stored)
        stored = self.store.commit(rt.skey, key, new, "MODIFIED")
        return rt.to_external(stored)

    @staticmethod
    def _namespace_pending(rt, obj):
        return rt.skey == ("", "namespaces") and bool((obj.get("spec") or {}).get("finalizers"))

    # -- patch --------------------------------------------------------------------------------
    def patch(self, rt, ns, name, ctype, raw, sub=None, dry_run=False, field_manager=None,
              field_validation=None, force=False):
        ctype = (ctype or "").split(";")[0].strip().lower()
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}")
        with self.store.lock:
            old = self.store.get(rt.skey, _key(rt, ns, name))
            if ctype == "application/apply-patch+yaml":
                if not field_manager:
                    raise bad_request("PATCH, application/apply-patch+yaml requests must have "
                                      "fieldManager set")
                if not isinstance(patch, dict):
                    raise bad_request("error decoding YAML: only JSON-compatible YAML is "
                                      "supported by this server")
                if old is None:
                    if sub:
                        raise not_found(rt.gr, name)
                    body = deep_copy(patch)
                    body.setdefault("metadata", {}).setdefault("name", name)
                    return self.create(rt, ns, body, dry_run, field_validation), 201
                cur = rt.to_external(old)
                patched = _apply_merge(cur, patch)
            else:
                if old is None:
                    raise not_found(rt.gr, name)
                cur = rt.to_external(old)
                if sub == "scale":
                    cur = self._scale_of(rt, old)
                try:
                    if ctype == "application/json-patch+json":
                        patched = json_patch(cur, patch)
                    elif ctype == "application/merge-patch+json":
                        if not isinstance(patch, dict):
                            raise bad_request("error decoding patch: json: cannot unmarshal "
                                              "into Go value of type map[string]interface {}")
                        patched = merge_patch(cur, patch)
                    elif ctype == "application/strategic-merge-patch+json":
                        if not rt.strategic:
                            raise unsupported_media([
                                "application/json-patch+json", "application/merge-patch+json",
                                "application/apply-patch+yaml"])
                        patched = strategic_merge_patch(cur, patch, rt.kind)
                    else:
                        raise unsupported_media([
                            "application/json-patch+json", "application/merge-patch+json",
                            "application/apply-patch+yaml"] +
                            (["application/strategic-merge-patch+json"] if rt.strategic else []))
                except PatchDecodeError as e:
                    raise bad_request(str(e))
                except PatchError as e:
                    log.debug("patch of %s %s/%s failed: %s", rt.plural, ns, name, e)
                    raise ApiError(422, "Invalid", "the server rejected our request due to an "
                                                   "error in our request", {})
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            if sub == "scale":
                return self._apply_scale(rt, ns, name, old, patched, dry_run), 200
            pmd = patched.get("metadata") or {}
            if pmd.get("name") != name:
                raise bad_request(f"the name of the object ({pmd.get('name')}) does not match "
                                  f"the name on the URL ({name})")
            if rt.namespaced and pmd.get("namespace") != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            if patched.get("apiVersion") != rt.api_version or patched.get("kind") != rt.kind:
                raise bad_request(f"the API version in the data ({patched.get('apiVersion')}) "
                                  f"does not match the expected API version ({rt.api_version})")
            if rt.crd is not None and sub is None:
                self._crd_unknown_fields(rt, patched, field_validation)
            new = self._prepare_update(rt, old, patched, sub)
            return self._finish_update(rt, ns, name, old, new, dry_run), 200

    # -- scale --------------------------------------------------------------------------------
    def _scale_of(self, rt, obj):
        md = _meta(obj)
        spec, st = obj.get("spec") or {}, obj.get("status") or {}
        sel = spec.get("selector")
        selstr = ""
        if isinstance(sel, dict):
            from .resources import _selector_string
            selstr = _selector_string(sel)
            if selstr == "<none>":
                selstr = ""
        out = {"kind": "Scale", "apiVersion": "autoscaling/v1",
               "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                               "creationTimestamp") if k in md},
               "spec": {"replicas": spec.get("replicas", 0)},
               "status": {"replicas": st.get("replicas", 0)}}
        if selstr:
            out["status"]["selector"] = selstr
        return out

    def get_scale(self, rt, ns, name):
        with self.store.lock:
            obj = self.store.get(rt.skey, _key(rt, ns, name))
            if obj is None:
                raise not_found(rt.gr, name)
            return self._scale_of(rt, obj)

    def update_scale(self, rt, ns, name, body, dry_run=False):
        with self.store.lock:
            old = self.store.get(rt.skey, _key(rt, ns, name))
            if old is None:
                raise not_found(rt.gr, name)
            return self._apply_scale(rt, ns, name, old, body, dry_run)

    def _apply_scale(self, rt, ns, name, old, scale, dry_run):
        rv = _meta(scale).get("resourceVersion")
        if rv and rv != _meta(old).get("resourceVersion"):
            raise conflict(rt.gr, name, MODIFIED_MSG)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or replicas < 0:
            raise invalid("Scale", "autoscaling", name, [FieldError(
                "Invalid", "spec.replicas", replicas, "must be greater than or equal to 0")])
        new = deep_copy(rt.to_external(old))
        new.setdefault("spec", {})["replicas"] = replicas
        new["metadata"]["resourceVersion"] = _meta(old).get("resourceVersion")
        internal = self._prepare_update(rt, old, new, None)
        out = self._finish_update(rt, ns, name, old, internal, dry_run)
        return self._scale_of(rt, out)

    # -- delete -------------------------------------------------------------------------------
    def delete(self, rt, ns, name, options=None, dry_run=False):
        """Returns (response object, HTTP status)."""
        options = options or {}
        with self.store.lock:
            key = _key(rt, ns, name)
            old = self.store.get(rt.skey, key)
            if old is None:
                raise not_found(rt.gr, name)
            md = _meta(old)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != md.get("uid"):
                raise conflict(rt.gr, name, f"Precondition failed: UID in precondition: "
                                            f"{pre['uid']}, UID in object meta: {md.get('uid')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
                raise conflict(rt.gr, name, "the ResourceVersion in the precondition "
                                            f"({pre['resourceVersion']}) does not match the "
                                            "ResourceVersion in record "
                                            f"({md.get('resourceVersion')}). The object might "
                                            "have been modified")
            if rt.skey == ("", "namespaces") and name in PROTECTED_NAMESPACES:
                raise forbidden(rt.gr, name, "this namespace may not be deleted")
            policy = options.get("propagationPolicy")
            orphan = options.get("orphanDependents")
            if policy is None and orphan is not None:
                policy = "Orphan" if orphan else "Background"
            if policy not in (None, "Orphan", "Background", "Foreground"):
                raise invalid("DeleteOptions", "meta.k8s.io", "", [FieldError(
                    "NotSupported", "propagationPolicy", policy,
                    'supported values: "Foreground", "Background", "Orphan", "nil"')])
            code = 202 if orphan is False else 200
            gp = options.get("gracePeriodSeconds")
            if gp is not None and (not isinstance(gp, int) or isinstance(gp, bool)):
                raise bad_request("gracePeriodSeconds must be an integer")
            new = deep_copy(old)
            nmd = new["metadata"]
            fins = list(nmd.get("finalizers") or [])
            if policy == "Orphan" and "orphan" not in fins:
                fins = [f for f in fins if f != "foregroundDeletion"] + ["orphan"]
            elif policy == "Foreground" and "foregroundDeletion" not in fins:
                fins = [f for f in fins if f != "orphan"] + ["foregroundDeletion"]
            elif policy == "Background":
                fins = [f for f in fins if f not in ("orphan", "foregroundDeletion")]
            if fins:
                nmd["finalizers"] = fins
            else:
                nmd.pop("finalizers", None)
            grace = rt.graceful(old, options) if rt.graceful else 0
            now = time.time()
            if md.get("deletionTimestamp"):
                # already deleting: a pod's grace period may only shrink
                cur = md.get("deletionGracePeriodSeconds")
                if rt.graceful and cur is not None and grace < cur:
                    nmd["deletionTimestamp"] = now_rfc3339(now + grace)
                    nmd["deletionGracePeriodSeconds"] = grace
                if rt.graceful and grace == 0 and not nmd.get("finalizers"):
                    if dry_run:
                        return self._deleted_answer(rt, old), 200
                    return self._remove(rt, key, old), 200
                if dry_run:
                    return rt.to_external(new), code
                if _strip_for_compare(new) != _strip_for_compare(old):
                    return rt.to_external(self.store.commit(rt.skey, key, new, "MODIFIED")), code
                return rt.to_external(old), code
            if rt.skey == ("", "namespaces"):
                if (new.get("spec") or {}).get("finalizers") or nmd.get("finalizers"):
                    nmd["deletionTimestamp"] = now_rfc3339(now)
                    nmd["deletionGracePeriodSeconds"] = 0
                    new.setdefault("status", {})["phase"] = "Terminating"
                    if dry_run:
                        return rt.to_external(new), code
                    return rt.to_external(self.store.commit(rt.skey, key, new, "MODIFIED")), code
            if grace > 0:
                nmd["deletionTimestamp"] = now_rfc3339(now + grace)
                nmd["deletionGracePeriodSeconds"] = grace
                if dry_run:
                    return rt.to_external(new), code
                return rt.to_external(self.store.commit(rt.skey, key, new, "MODIFIED")), code
            if nmd.get("finalizers"):
                nmd["deletionTimestamp"] = now_rfc3339(now)
                nmd["deletionGracePeriodSeconds"] = 0
                if dry_run:
                    return rt.to_external(new), code
                return rt.to_external(self.store.commit(rt.skey, key, new, "MODIFIED")), code
            if dry_run:
                return self._deleted_answer(rt, old), 200
            return self._remove(rt, key, old), 200

    def _remove(self, rt, key, old):
        stored = self.store.commit(rt.skey, key, None, "DELETED")
        self._after_delete(rt, old)
        return self._deleted_answer(rt, stored)

    def _deleted_answer(self, rt, obj):
        if rt.return_deleted:
            return rt.to_external(obj)
        details = {"name": _meta(obj).get("name"), "kind": rt.plural, "uid": _meta(obj).get("uid")}
        if rt.group:
            details["group"] = rt.group
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": details}

    def _after_delete(self, rt, old):
        pass

    def delete_collection(self, rt, ns, q, options, dry_run=False):
        items, _, _, _ = self.list(rt, ns, {k: v for k, v in q.items()
                                           if k in ("labelSelector", "fieldSelector")})
        out = []
        for o in items:
            md = _meta(o)
            try:
                self.delete(rt, md.get("namespace", ""), md.get("name"), options, dry_run)
            except ApiError as e:
                if e.code != 404:
                    raise
            out.append(o)
        return out

    # -- pods/binding -------------------------------------------------------------------------
    def bind(self, ns, name, body):
        pods = self.rt("", "pods")
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        bname = _meta(body).get("name")
        if bname and bname != name:
            raise bad_request(f"the name of the object ({bname}) does not match the name on "
                              f"the URL ({name})")
        target = body.get("target") or {}
        if target.get("kind") not in (None, "", "Node"):
            raise bad_request(f"target kind must be Node, got {target.get('kind')}")
        node = target.get("name")
        if not node:
            raise invalid("Binding", "", name, [FieldError("Required", "target.name")])
        with self.store.lock:
            pod = self.store.get(pods.skey, (ns, name))
            if pod is None:
                raise not_found(pods.gr, name)
            if podutil.is_deleting(pod):
                raise conflict(pods.gr, name, f"pod {name} is being deleted, cannot be assigned "
                                              "to a host")
            cur = (pod.get("spec") or {}).get("nodeName")
            if cur:
                raise conflict(pods.gr, name, f"pod {name} is already assigned to node \"{cur}\"")
            new = deep_copy(pod)
            new["spec"]["nodeName"] = node
            conds = new.setdefault("status", {}).setdefault("conditions", [])
            podutil.set_condition(conds, "PodScheduled", "True", now=now_rfc3339(),
                                  extra={"lastProbeTime": None})
            for c in conds:
                if c.get("type") == "PodScheduled":
                    c.pop("reason", None)
                    c.pop("message", None)
            for a, v in ((body.get("metadata") or {}).get("annotations") or {}).items():
                new["metadata"].setdefault("annotations", {})[a] = v
            self.store.commit(pods.skey, (ns, name), new, "MODIFIED")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    # -- pods/eviction ------------------------------------------------------------------------
    def evict(self, ns, name, body, dry_run=False):
        pods = self.rt("", "pods")
        if not isinstance(body, dict):
            raise bad_request("the body of the request was not a JSON object")
        av = body.get("apiVersion")
        if av not in (None, "policy/v1", "policy/v1beta1") or body.get("kind") not in (None,
                                                                                  "Eviction"):
            raise bad_request(f"{body.get('kind')} in version \"{av}\" cannot be handled as a "
                              "Eviction")
        if _meta(body).get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        opts = dict(body.get("deleteOptions") or {})
        if dry_run:
            opts["dryRun"] = ["All"]
        dry = bool(opts.get("dryRun"))
        entry = {"time": now_micro(), "namespace": ns, "pod": name, "dryRun": dry,
                 "actor": self.actor}
        try:
            with self.store.lock:
                result = self._evict_locked(pods, ns, name, opts, dry, entry)
        except ApiError as e:
            entry.update({"decision": "denied" if e.code in (429, 403) else "error",
                          "code": e.code, "reason": e.reason, "message": e.message})
            if e.details and e.details.get("causes"):
                entry["causes"] = e.details["causes"]
            self.audit.append(entry)
            raise
        code = result.get("code")
        if code == 500:
            entry.update({"decision": "error", "code": 500, "reason": "", "message":
                          result["message"]})
        else:
            entry.update({"decision": "evicted", "code": 201})
        self.audit.append(entry)
        return result

    def _evict_locked(self, pods, ns, name, opts, dry, entry):
        pod = self.store.get(pods.skey, (ns, name))
        if pod is None:
            raise not_found(pods.gr, name)
        entry["node"] = (pod.get("spec") or {}).get("nodeName") or ""
        entry["uid"] = _meta(pod).get("uid")
        pre_rv = (opts.get("preconditions") or {}).get("resourceVersion")
        phase = podutil.pod_phase(pod)
        if phase in ("Succeeded", "Failed", "Pending") or podutil.is_deleting(pod):
            entry["pdbCheck"] = "skipped"
            dopts = dict(opts)
            if phase not in ("Succeeded", "Failed") and not podutil.is_deleting(pod) \
                    and not pre_rv:
                dopts["preconditions"] = dict(opts.get("preconditions") or {},
                                              resourceVersion=_meta(pod).get("resourceVersion"))
            self._delete_evicted(pods, ns, name, pod, dopts, dry)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}
        pdbs = self.pdbs_for_pod(pod)
        if len(pdbs) > 1:
            entry["pdb"] = [_meta(p).get("name") for p in pdbs]
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": MULTI_PDB_MSG, "code": 500}
        update_opts = False
        if pdbs:
            pdb = pdbs[0]
            pname = _meta(pdb).get("name")
            st = pdb.get("status") or {}
            entry.update({"pdb": pname, "disruptionsAllowed": st.get("disruptionsAllowed", 0),
                          "currentHealthy": st.get("currentHealthy", 0),
                          "desiredHealthy": st.get("desiredHealthy", 0)})
            skip = False
            if not podutil.is_pod_ready(pod):
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                if policy == "AlwaysAllow":
                    skip = True
                elif st.get("currentHealthy", 0) >= st.get("desiredHealthy", 0) and \
                        st.get("desiredHealthy", 0) > 0:
                    skip = True
            if skip:
                update_opts = True
                entry["pdbCheck"] = "unhealthy-pod"
            else:
                self._check_and_decrement(pdb, name, dry)
                entry["pdbCheck"] = "decremented"
        else:
            entry["pdbCheck"] = "no-pdb"
        dopts = dict(opts)
        if update_opts:
            dopts["preconditions"] = dict(opts.get("preconditions") or {},
                                          resourceVersion=_meta(pod).get("resourceVersion"))
        try:
            self._delete_evicted(pods, ns, name, pod, dopts, dry)
        except ApiError as e:
            if e.code == 409 and update_opts and not pre_rv:
                raise _too_many_requests_processing(_meta(pdbs[0]).get("name"))
            raise
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    def _check_and_decrement(self, pdb, pod_name, dry):
        pmd = _meta(pdb)
        st = pdb.get("status") or {}
        if st.get("observedGeneration", 0) < pmd.get("generation", 0):
            raise _too_many_requests_processing(pmd.get("name"))
        allowed = st.get("disruptionsAllowed", 0)
        if allowed < 0:
            raise forbidden(("policy", "poddisruptionbudget"), pmd.get("name"),
                            "pdb disruptions allowed is negative")
        if len(st.get("disruptedPods") or {}) > 2000:
            raise forbidden(("policy", "poddisruptionbudget"), pmd.get("name"),
                            "DisruptedPods map too big - too many evictions not confirmed by PDB "
                            "controller")
        if allowed == 0:
            raise ApiError(429, "TooManyRequests", DISRUPTION_BUDGET_MSG, {"causes": [{
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {pmd.get('name')} needs "
                           f"{st.get('desiredHealthy', 0)} healthy pods and has "
                           f"{st.get('currentHealthy', 0)} currently"}]})
        if dry:
            return
        pdbs = self.rt("policy", "poddisruptionbudgets")
        new = deep_copy(pdb)
        nst = new.setdefault("status", {})
        nst["disruptionsAllowed"] = allowed - 1
        if nst["disruptionsAllowed"] == 0:
            podutil.set_condition(nst.setdefault("conditions", []), "DisruptionAllowed", "False",
                                  "InsufficientPods", "", now_rfc3339(),
                                  {"observedGeneration": st.get("observedGeneration", 0)})
        nst.setdefault("disruptedPods", {})[pod_name] = now_rfc3339()
        self.store.commit(pdbs.skey, (pmd.get("namespace"), pmd.get("name")), new, "MODIFIED")

    def _delete_evicted(self, pods, ns, name, pod, opts, dry):
        if not dry and not podutil.is_terminal(pod):
            cur = self.store.get(pods.skey, (ns, name))
            pre = (opts.get("preconditions") or {}).get("resourceVersion")
            if cur is not None and (not pre or pre == _meta(cur).get("resourceVersion")):
                new = deep_copy(cur)
                conds = new.setdefault("status", {}).setdefault("conditions", [])
                if podutil.set_condition(conds, "DisruptionTarget", "True", "EvictionByEvictionAPI",
                                         "Eviction API: evicting", now_rfc3339(),
                                         {"lastProbeTime": None}):
                    stored = self.store.commit(pods.skey, (ns, name), new, "MODIFIED")
                    if pre:
                        opts = dict(opts, preconditions=dict(
                            opts["preconditions"], resourceVersion=_meta(stored)
                            .get("resourceVersion")))
        with self.as_actor("eviction"):
            self.delete(pods, ns, name, opts, dry_run=dry)

    def pdbs_for_pod(self, pod):
        ns = _meta(pod).get("namespace")
        labels = _meta(pod).get("labels") or {}
        out = []
        for pdb in self.store.items(("policy", "poddisruptionbudgets"), ns):
            sel = (pdb.get("spec") or {}).get("selector")
            if sel is None:
                continue
            if selector_from_object(sel).matches(labels):
                out.append(pdb)
        return out

    # -- PDB accounting (independent of the eviction code path) ----------------------------
    def desired_healthy(self, pdb, pods):
        """(expectedCount, desiredHealthy, error) as the disruption controller computes them."""
        spec = pdb.get("spec") or {}
        mina, maxu = spec.get("minAvailable"), spec.get("maxUnavailable")
        if maxu is not None or isinstance(mina, str):
            expected, err = self.expected_scale(pods)
            if err:
                return expected, 0, err
            if maxu is not None:
                mu = _scaled(maxu, expected)
                return expected, max(0, expected - mu), None
            return expected, _scaled(mina, expected), None
        if mina is not None:
            return len(pods), int(mina), None
        return len(pods), 0, None

    def expected_scale(self, pods):
        """Sum of the replicas of the pods' controllers (Deployment through ReplicaSet)."""
        seen = {}
        for p in pods:
            ref = podutil.controller_ref(p)
            if ref is None:
                continue
            ns = _meta(p).get("namespace")
            kind = ref.get("kind")
            if kind == "ReplicaSet":
                rs = self.store.get(("apps", "replicasets"), (ns, ref.get("name")))
                if rs is None or _meta(rs).get("uid") != ref.get("uid"):
                    return 0, f"replicasets.apps \"{ref.get('name')}\" not found"
                dref = podutil.controller_ref(rs)
                if dref is not None and dref.get("kind") == "Deployment":
                    d = self.store.get(("apps", "deployments"), (ns, dref.get("name")))
                    if d is not None and _meta(d).get("uid") == dref.get("uid"):
                        seen[_meta(d)["uid"]] = (d.get("spec") or {}).get("replicas", 1)
                        continue
                seen[_meta(rs)["uid"]] = (rs.get("spec") or {}).get("replicas", 1)
            else:
                rt = self.registry.by_kind(ref.get("apiVersion", ""), kind or "")
                owner = self.store.get(rt.skey, _key(rt, ns, ref.get("name"))) if rt else None
                if owner is None or rt is None or "scale" not in rt.subresources:
                    return 0, f"found no controllers for pod \"{_meta(p).get('name')}\""
                seen[_meta(owner)["uid"]] = (owner.get("spec") or {}).get("replicas", 1)
        return sum(seen.values()), None

    def pods_for_pdb(self, pdb):
        sel = (pdb.get("spec") or {}).get("selector")
        if sel is None:
            return []
        s = selector_from_object(sel)
        return [p for p in self.store.items(("", "pods"), _meta(pdb).get("namespace"))
                if s.matches(_meta(p).get("labels"))]

    def _before_commit(self, skey, key, old, new):
        if skey != ("", "pods") or old is None:
            return
        if podutil.is_deleting(old):
            return
        if new is not None and not podutil.is_deleting(new):
            return
        if not podutil.is_pod_ready(old) or podutil.is_terminal(old):
            return
        self.deletions += 1
        for pdb in self.pdbs_for_pod(old):
            pods = self.pods_for_pdb(pdb)
            healthy = sum(1 for p in pods if podutil.is_pod_ready(p) and
                          not podutil.is_deleting(p) and not podutil.is_terminal(p))
            expected, desired, err = self.desired_healthy(pdb, pods)
            if err:
                continue    # the disruption controller cannot compute this budget either
            after = healthy - 1
            if after < desired:
                v = {"time": now_micro(), "namespace": key[0], "pod": key[1],
                     "node": (old.get("spec") or {}).get("nodeName") or "",
                     "pdb": _meta(pdb).get("name"), "healthyAfter": after,
                     "desiredHealthy": desired, "expectedPods": expected, "via": self.actor}
                self.violations.append(v)
                log.warning("PDB %s/%s violated: deleting pod %s leaves %d healthy, needs %d "
                            "(via %s)", key[0], v["pdb"], key[1], after, desired, self.actor)

    # -- events -------------------------------------------------------------------------------
    def _index_event(self, ev):
        """Keeps event_index in step with the stored Events (a store listener)."""
        if ev.skey != ("", "events"):
            return
        if ev.prev is not None:
            names = self.event_index.get(_event_key(ev.prev))
            if names is not None:
                names.discard(ev.key[1])
                if not names:
                    del self.event_index[_event_key(ev.prev)]
        if ev.type != "DELETED":
            self.event_index.setdefault(_event_key(ev.obj), set()).add(ev.key[1])

    def record_event(self, involved, typ, reason, message, component, host=None):
        """An event as client-go's recorder writes it (aggregating repeats into count)."""
        rt = self.rt("", "events")
        md = _meta(involved)
        ns = md.get("namespace") or "default"
        ref = {"kind": involved.get("kind"), "namespace": md.get("namespace", ""),
               "name": md.get("name"), "uid": md.get("uid"),
               "apiVersion": involved.get("apiVersion"),
               "resourceVersion": md.get("resourceVersion")}
        if not ref["namespace"]:
            ref.pop("namespace")
        now = now_rfc3339()
        with self.store.lock:
            if self.store.get(("", "namespaces"), ("", ns)) is None:
                return
            names = self.event_index.get((ns, ref["uid"], reason, message, typ))
            for name in sorted(names or ()):
                e = self.store.get(rt.skey, (ns, name))
                if e is not None and _event_key(e) == (ns, ref["uid"], reason, message, typ):
                    new = deep_copy(e)
                    new["count"] = (e.get("count") or 1) + 1
                    new["lastTimestamp"] = now
                    self.store.commit(rt.skey, (ns, _meta(e)["name"]), new, "MODIFIED")
                    return
            ev = {"apiVersion": "v1", "kind": "Event",
                  "metadata": {"name": f"{md.get('name')}.{int(time.time() * 1e9):x}",
                               "namespace": ns},
                  "involvedObject": ref, "reason": reason, "message": message,
                  "source": {"component": component} | ({"host": host} if host else {}),
                  "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": typ,
                  "eventTime": None, "reportingComponent": component,
                  "reportingInstance": host or ""}
            try:
                with self.as_actor(component):
                    self.create(rt, ns, ev)
            except ApiError as e:
                log.debug("event not recorded: %s", e.message)


def _event_key(e):
    """What client-go's recorder aggregates repeats by (record_event)."""
    return (_meta(e).get("namespace"), (e.get("involvedObject") or {}).get("uid"),
            e.get("reason"), e.get("message"), e.get("type"))


def _scaled(v, total):
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true."""
    if isinstance(v, int):
        return v
    s = str(v)
    if s.endswith("%"):
        pct = int(s[:-1])
        return -(-pct * total // 100)
    return int(s)


def _too_many_requests_processing(name):
    return ApiError(429, "TooManyRequests", DISRUPTION_BUDGET_MSG, {"causes": [{
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {name} is still being processed by the server."}]},
        retry_after=10)


def _apply_merge(cur, patch):
    """Server-side apply, simplified: the applied configuration merged over the live object."""
    return merge_patch(cur, patch)


def _unknown_paths(v, s, path, out, top=False):
    if not isinstance(s, dict) or s.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(v, dict):
        props = s.get("properties")
        addl = s.get("additionalProperties")
        for k, x in v.items():
            if top and k in ("apiVersion", "kind", "metadata"):
                continue
            p = f"{path}.{k}" if path else k
            if props is not None and k in props:
                _unknown_paths(x, props[k], p, out)
            elif isinstance(addl, dict):
                _unknown_paths(x, addl, p, out)
            elif addl is True:
                continue
            else:
                out.append(p)
    elif isinstance(v, list) and isinstance(s.get("items"), dict):
        for i, x in enumerate(v):
            _unknown_paths(x, s["items"], f"{path}[{i}]", out)
