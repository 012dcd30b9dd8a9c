"""HTTP/1.1 front end: routing, discovery, content negotiation, tables, watch streaming."""

import base64
import collections
import hashlib
import json
import logging
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import protobuf
from .util import (ApiError, bad_request, dumps, method_not_allowed, not_found_path,
                   unsupported_media)
from .watch import Watch

log = logging.getLogger("kubeapi.http")

MAX_BODY = 3 * 1024 * 1024
JSON_TYPES = ("application/json", "*/*", "application/*", "")


def _media_types(accept):
    out = []
    for part in (accept or "").split(","):
        part = part.strip()
        if not part:
            continue
        fields = [f.strip() for f in part.split(";")]
        params = {}
        for f in fields[1:]:
            if "=" in f:
                k, v = f.split("=", 1)
                params[k.strip().lower()] = v.strip()
        out.append((fields[0].lower(), params))
    return out


def negotiate(accept):
    """'table', 'partial' or 'json' (protobuf and anything else are answered as JSON)."""
    for mt, params in _media_types(accept):
        if mt == "application/json" and params.get("g") == "meta.k8s.io" and \
                params.get("v") in ("v1", "v1beta1"):
            if params.get("as") == "Table":
                return "table", params.get("v")
            if params.get("as") in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                return "partial", params.get("v")
        if mt in ("application/json", "*/*", "application/*", "application/yaml"):
            return "json", None
    return "json", None


def _first(q):
    return {k: v[0] for k, v in q.items()}


class WatchLines:
    """Encoded watch events shared by every watch: stored objects never change, so an event is
    encoded once however many watches send it. Keyed by object identity (the entry keeps the
    object alive, so the identity stays its own), for the most recent `size` events."""

    def __init__(self, size=4096):
        self.lock = threading.Lock()
        self.lines = collections.OrderedDict()
        self.size = size

    def get(self, typ, obj, rt, encode):
        key = (typ, id(obj), id(rt))
        with self.lock:
            hit = self.lines.get(key)
            if hit is not None and hit[0] is obj and hit[1] is rt:
                self.lines.move_to_end(key)
                return hit[2]
        line = encode()
        with self.lock:
            self.lines[key] = (obj, rt, line)
            self.lines.move_to_end(key)
            while len(self.lines) > self.size:
                self.lines.popitem(last=False)
        return line


class KubeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024   # a real apiserver takes thousands of connections at once

    def __init__(self, addr, handler, api, controllers, control, opts):
        self.api = api
        self.controllers = controllers
        self.control = control
        self.opts = opts
        self.stopping = False
        self.watch_lines = WatchLines()
        super().__init__(addr, handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubeapi-fake"
    sys_version = ""

    def log_message(self, fmt, *args):
        log.debug("%s - " + fmt, self.address_string(), *args)

    # Go's http.Server IdleTimeout: a kept-alive connection that brings no new request within it
    # is closed (the API server sets 90 s); a request being served has no such limit.
    def handle_one_request(self):
        idle = getattr(self.server.opts, "idle_timeout", 0) or None
        self.connection.settimeout(idle)
        super().handle_one_request()

    def parse_request(self):
        self.connection.settimeout(None)
        return super().parse_request()

    # -- plumbing -----------------------------------------------------------------------------
    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def _read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            total = 0
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    raise ApiError(413, "RequestEntityTooLarge",
                                   f"Request entity too large: limit is {MAX_BODY}")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(3)
            return b"".join(chunks)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge",
                           f"Request entity too large: limit is {MAX_BODY}")
        return self.rfile.read(n) if n > 0 else b""

    def _send(self, code, body, ctype="application/json", headers=None):
        if isinstance(body, (dict, list)):
            data = dumps(body).encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        # Go's net/http, as the API server writes objects: a body that outgrows its 2048-byte
        # buffer before the handler returns goes out chunked to an HTTP/1.1 client (no length)
        chunked = len(data) > 2048 and self.request_version == "HTTP/1.1" and self.command != "HEAD"
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if chunked:
            for i in range(0, len(data), 32768):
                part = data[i:i + 32768]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif self.command != "HEAD":
            self.wfile.write(data)
        self._code = code

    def _send_error(self, e):
        st = e.status()
        headers = {}
        ra = (st.get("details") or {}).get("retryAfterSeconds")
        if ra:
            headers["Retry-After"] = str(ra)
        self._send(e.code, st, headers=headers)

    def _dispatch(self, method):
        t0 = time.monotonic()
        self._code = 0
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        q = _first(urllib.parse.parse_qs(url.query, keep_blank_values=True))
        try:
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
            if path.startswith("/_fake/") or path == "/_fake":
                code, obj = srv.control.handle(method, path, q, body)
                self._send(code, obj)
                return
            if srv.opts.token and path not in ("/healthz", "/livez", "/readyz", "/version") \
                    and not path.startswith(("/healthz/", "/livez/", "/readyz/")):
                auth = self.headers.get("Authorization") or ""
                if auth != f"Bearer {srv.opts.token}":
                    raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = srv.control.faults.match(method, self.path)
            self._drop_after = None
            if fault is not None:
                if fault.get("delay"):
                    time.sleep(min(float(fault["delay"]), 60.0))
                if fault.get("close"):
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    self._code = -1
                    return
                if fault.get("status"):
                    raise fault_error(fault)
                if fault.get("dropWatchAfter") is not None:
                    self._drop_after = int(fault["dropWatchAfter"])
            self._route(method, path, q, body)
        except ApiError as e:
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # an unexpected failure is a 500, as the apiserver does
            log.exception("internal error on %s %s", method, self.path)
            try:
                self._send_error(ApiError(500, "InternalError",
                                          f"Internal error occurred: {e}",
                                          {"causes": [{"message": str(e)}]}))
            except OSError:
                self.close_connection = True
        finally:
            log.info("%s %s -> %s (%.1f ms)", method, self.path, self._code,
                     (time.monotonic() - t0) * 1000)

    # -- routing ------------------------------------------------------------------------------
    def _route(self, method, path, q, body):
        srv = self.server
        api = srv.api
        if path in ("/healthz", "/livez", "/readyz") or \
                path.startswith(("/healthz/", "/livez/", "/readyz/")):
            if method not in ("GET", "HEAD"):
                raise method_not_allowed()
            if "verbose" in q:
                self._send(200, f"[+]ping ok\n[+]etcd ok\n{path.strip('/')} check passed\n",
                           "text/plain; charset=utf-8")
            else:
                self._send(200, "ok", "text/plain; charset=utf-8")
            return
        if path == "/version" or path == "/version/":
            self._send(200, srv.opts.version_info())
            return
        if path == "/openapi/v2":
            self._openapi_v2()
            return
        if path.startswith("/openapi/"):
            raise not_found_path()
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            if not parts:
                self._send(200, {"paths": sorted(self._root_paths())})
                return
            raise not_found_path()
        if parts[0] == "api":
            group = ""
            if len(parts) == 1:
                if method != "GET":
                    raise method_not_allowed()
                self._send(200, {"kind": "APIVersions", "versions": ["v1"],
                                 "serverAddressByClientCIDRs": [{
                                     "clientCIDR": "0.0.0.0/0",
                                     "serverAddress": f"127.0.0.1:{srv.server_address[1]}"}]})
                return
            version, rest = parts[1], parts[2:]
        else:
            if len(parts) == 1:
                if method != "GET":
                    raise method_not_allowed()
                self._send(200, self._group_list())
                return
            group = parts[1]
            if group not in api.registry.group_versions:
                raise not_found_path()
            if len(parts) == 2:
                self._send(200, self._group(group))
                return
            version, rest = parts[2], parts[3:]
        if version not in api.registry.group_versions.get(group, []):
            raise not_found_path()
        if not rest:
            if method != "GET":
                raise method_not_allowed()
            self._send(200, self._resource_list(group, version))
            return
        watch_prefix = False
        if rest[0] == "watch":
            watch_prefix = True
            rest = rest[1:]
            if not rest:
                raise not_found_path()
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            cand = api.registry.get(group, version, rest[2])
            if cand is not None and cand.namespaced:
                ns = rest[1]
                rest = rest[2:]
        if len(rest) > 3:
            raise not_found_path()
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        rt = api.registry.get(group, version, plural)
        if rt is None:
            raise not_found_path()
        if ns is not None and not rt.namespaced:
            raise not_found_path()
        if rt.namespaced and ns is None and name is not None:
            raise not_found_path()
        if sub is not None and sub not in rt.subresources:
            raise not_found_path()
        if name is not None and name == "":
            raise not_found_path()
        self._resource(method, rt, ns, name, sub, q, body, watch_prefix)

    def _openapi_v2(self):
        """An OpenAPI v2 document without definitions: this server publishes no schemas, so
        clients that validate against them (kubectl apply) find none and skip the check."""
        title, version = "Kubernetes", self.server.opts.kube_version
        accept = self.headers.get("Accept") or ""
        if "protobuf" in accept:
            def ld(field, payload):
                return bytes([(field << 3) | 2]) + _varint(len(payload)) + payload
            info = ld(1, title.encode()) + ld(2, version.encode())
            doc = ld(1, b"2.0") + ld(2, info) + ld(8, b"")
            self._send(200, doc, "application/octet-stream")
            return
        self._send(200, {"swagger": "2.0", "info": {"title": title, "version": version},
                         "paths": {}, "definitions": {}})

    def _root_paths(self):
        api = self.server.api
        out = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version",
               "/openapi/v2"]
        for g, vs in api.registry.group_versions.items():
            if g:
                out.append(f"/apis/{g}")
                out += [f"/apis/{g}/{v}" for v in vs]
        return out

    # -- discovery ----------------------------------------------------------------------------
    def _gv(self, group, version):
        return {"groupVersion": f"{group}/{version}", "version": version}

    def _group(self, group):
        vs = self.server.api.registry.group_versions[group]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                "versions": [self._gv(group, v) for v in vs],
                "preferredVersion": self._gv(group, vs[0])}

    def _group_list(self):
        api = self.server.api
        groups = [self._group(g) for g in api.registry.group_order
                  if g and g in api.registry.group_versions]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group, version):
        api = self.server.api
        res = []
        for rt in sorted(api.registry.resources(group, version), key=lambda r: r.plural):
            e = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                 "kind": rt.kind, "verbs": rt.verbs}
            if rt.short_names:
                e["shortNames"] = rt.short_names
            if rt.categories:
                e["categories"] = rt.categories
            h = hashlib.sha256(f"{rt.skey[0]}/{rt.version}/{rt.kind}".encode()).digest()[:8]
            e["storageVersionHash"] = base64.b64encode(h).decode()
            res.append(e)
            for sub, spec in sorted(rt.subresources.items()):
                s = {"name": f"{rt.plural}/{sub}", "singularName": "",
                     "namespaced": rt.namespaced, "kind": spec["kind"], "verbs": spec["verbs"]}
                if spec.get("group") is not None:
                    s["group"] = spec["group"]
                    s["version"] = spec["version"]
                res.append(s)
        out = {"kind": "APIResourceList", "groupVersion": f"{group}/{version}" if group
               else version, "resources": res}
        if group:
            out["apiVersion"] = "v1"
        return out

    # -- resources ----------------------------------------------------------------------------
    def _json_body(self, body):
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype == "application/vnd.kubernetes.protobuf":
            try:
                return protobuf.decode(body)
            except protobuf.ProtobufError as e:
                log.info("protobuf body not decoded: %s", e)
                raise unsupported_media(["application/json"])
        if ctype not in ("application/json", "", "*/*") and not ctype.endswith("+json"):
            raise unsupported_media(["application/json"])
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError as e:
            raise bad_request(f"the object provided is unrecognized: {e}")

    def _dry_run(self, q):
        v = q.get("dryRun")
        if v is None or v == "":
            return False
        if v != "All":
            raise bad_request(f"Invalid dryRun value: {v}. Only \"All\" is supported")
        return True

    def _answer(self, code, rt, obj, q):
        """Writes an object (external form) honouring Table / PartialObjectMetadata Accept."""
        mode, v = negotiate(self.headers.get("Accept"))
        if obj.get("kind") == "Status" or mode == "json":
            self._send(code, obj)
            return
        if mode == "partial":
            self._send(code, {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{v}",
                              "metadata": obj.get("metadata", {})})
            return
        self._send(code, self._table(rt, [rt.to_internal(obj) if rt._to_internal else obj], q,
                                     {"resourceVersion": (obj.get("metadata") or {})
                                      .get("resourceVersion", "")}, v))

    def _table(self, rt, items, q, meta, v="v1"):
        cols, rows = rt.table(items, time.time())
        inc = q.get("includeObject") or "Metadata"
        out_rows = []
        for o, cells in zip(items, rows):
            row = {"cells": cells}
            ext = rt.to_external(o)
            if inc == "Object":
                row["object"] = ext
            elif inc == "Metadata":
                row["object"] = {"kind": "PartialObjectMetadata",
                                 "apiVersion": f"meta.k8s.io/{v}",
                                 "metadata": ext.get("metadata", {})}
            out_rows.append(row)
        return {"kind": "Table", "apiVersion": f"meta.k8s.io/{v}", "metadata": meta,
                "columnDefinitions": cols, "rows": out_rows}

    def _delete_options(self, q, body):
        opts = {}
        if body:
            try:
                b = json.loads(body)
            except ValueError as e:
                raise bad_request(f"the object provided is unrecognized: {e}")
            if isinstance(b, dict):
                opts.update(b)
        for k in ("gracePeriodSeconds",):
            if q.get(k) not in (None, ""):
                try:
                    opts[k] = int(q[k])
                except ValueError:
                    raise bad_request(f"invalid {k}: {q[k]}")
        if q.get("propagationPolicy"):
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("orphanDependents") in ("true", "false"):
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        if opts.get("dryRun") == ["All"]:
            q = dict(q, dryRun="All")
        return opts, self._dry_run(q)

    def _resource(self, method, rt, ns, name, sub, q, body, watch_prefix):
        api = self.server.api
        is_watch = watch_prefix or (q.get("watch") or "").lower() in ("1", "true")
        ns_or_empty = ns or ""
        if method in ("GET", "HEAD"):
            if is_watch:
                if "watch" not in rt.verbs:
                    raise method_not_allowed()
                if name is not None:
                    if sub is not None:
                        raise method_not_allowed()
                    fs = q.get("fieldSelector")
                    q = dict(q, fieldSelector=f"metadata.name={name}" +
                             (f",{fs}" if fs else ""))
                self._watch(rt, ns, q)
                return
            if name is None:
                if "list" not in rt.verbs:
                    raise method_not_allowed()
                self._list(rt, ns, q)
                return
            if sub is None or sub == "status":
                if sub and "get" not in rt.subresources[sub]["verbs"]:
                    raise method_not_allowed()
                self._answer(200, rt, api.get(rt, ns_or_empty, name), q)
                return
            if sub == "scale":
                self._send(200, api.get_scale(rt, ns_or_empty, name))
                return
            raise method_not_allowed()
        if method == "POST":
            data = self._json_body(body)
            dry = self._dry_run(q)
            if name is None:
                if "create" not in rt.verbs:
                    raise method_not_allowed()
                if rt.plural == "bindings" and rt.group == "":
                    bname = ((data or {}).get("metadata") or {}).get("name") or ""
                    self._send(201, api.bind(ns_or_empty, bname, data))
                    return
                if data is None:
                    raise bad_request("the body of the request was empty")
                obj = api.create(rt, ns_or_empty, data, dry, q.get("fieldValidation"))
                self._answer(201, rt, obj, q)
                return
            if sub == "eviction" and rt.plural == "pods":
                st = api.evict(ns_or_empty, name, data, dry)
                code = st.get("code") or 201
                self._send(code if code >= 400 else 201, st)
                return
            if sub == "binding" and rt.plural == "pods":
                self._send(201, api.bind(ns_or_empty, name, data))
                return
            raise method_not_allowed()
        if method == "PUT":
            if name is None:
                raise method_not_allowed()
            data = self._json_body(body)
            if data is None:
                raise bad_request("the body of the request was empty")
            dry = self._dry_run(q)
            if sub == "scale":
                self._send(200, api.update_scale(rt, ns_or_empty, name, data, dry))
                return
            if sub == "finalize":
                obj, code = self._finalize_namespace(rt, name, data, dry)
                self._answer(code, rt, obj, q)
                return
            if sub is not None and "update" not in rt.subresources[sub]["verbs"]:
                raise method_not_allowed()
            obj, code = api.update(rt, ns_or_empty, name, data, sub, dry,
                                   q.get("fieldValidation"))
            self._answer(code, rt, obj, q)
            return
        if method == "PATCH":
            if name is None or "patch" not in rt.verbs:
                raise method_not_allowed()
            if sub is not None and "patch" not in rt.subresources[sub]["verbs"]:
                raise method_not_allowed()
            dry = self._dry_run(q)
            obj, code = api.patch(rt, ns_or_empty, name, self.headers.get("Content-Type"), body,
                                  sub, dry, q.get("fieldManager"), q.get("fieldValidation"),
                                  q.get("force") == "true")
            self._answer(code, rt, obj, q)
            return
        if method == "DELETE":
            opts, dry = self._delete_options(q, body)
            if name is None:
                if "deletecollection" not in rt.verbs:
                    raise method_not_allowed()
                items = api.delete_collection(rt, ns, q, opts, dry)
                self._send(200, {"kind": rt.list_kind, "apiVersion": rt.api_version,
                                 "metadata": {"resourceVersion": str(api.store.rv)},
                                 "items": [rt.to_external(o) for o in items]})
                return
            if sub is not None:
                raise method_not_allowed()
            obj, code = api.delete(rt, ns_or_empty, name, opts, dry)
            self._answer(code, rt, obj, q)
            return
        raise method_not_allowed()

    def _finalize_namespace(self, rt, name, data, dry):
        api = self.server.api
        if rt.plural != "namespaces":
            raise method_not_allowed()
        with api.store.lock:
            cur = api.get(rt, "", name)
            new = json.loads(json.dumps(cur))
            new.setdefault("spec", {})["finalizers"] = (data.get("spec") or {}).get(
                "finalizers") or []
            new["metadata"]["resourceVersion"] = (data.get("metadata") or {}).get(
                "resourceVersion") or cur["metadata"]["resourceVersion"]
            old = api.get_internal(rt, "", name)
            internal = api._prepare_update(rt, old, new, None)
            internal["spec"] = new["spec"]
            return api._finish_update(rt, "", name, old, internal, dry), 200

    def _list(self, rt, ns, q):
        api = self.server.api
        items, rv, cont, remaining = api.list(rt, ns, q)
        meta = {"resourceVersion": str(rv)}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        mode, v = negotiate(self.headers.get("Accept"))
        if mode == "table":
            self._send(200, self._table(rt, items, q, meta, v))
            return
        if mode == "partial":
            self._send(200, {"kind": "PartialObjectMetadataList",
                             "apiVersion": f"meta.k8s.io/{v}", "metadata": meta,
                             "items": [{"kind": "PartialObjectMetadata",
                                        "apiVersion": f"meta.k8s.io/{v}",
                                        "metadata": o.get("metadata", {})} for o in items]})
            return
        self._send(200, {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta,
                         "items": [rt.to_external(o) for o in items]})

    # -- watch --------------------------------------------------------------------------------
    def _watch(self, rt, ns, q):
        srv = self.server
        w = Watch(srv.api, rt, ns, q)
        mode, v = negotiate(self.headers.get("Accept"))
        timeout = srv.opts.watch_timeout
        if q.get("timeoutSeconds") not in (None, ""):
            try:
                timeout = min(timeout, max(0, int(q["timeoutSeconds"])))
            except ValueError:
                raise bad_request(f"invalid timeoutSeconds: {q['timeoutSeconds']}")
        # Go's net/http (RFC 9112 §6.1): an HTTP/1.0 client gets the stream unchunked, ended by
        # closing the connection; HTTP/1.1 gets chunks.
        chunked = self.request_version != "HTTP/1.0"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._code = 200
        end = b"0\r\n\r\n" if chunked else b""
        sent = 0
        drop = self._drop_after

        def emit(typ, obj):
            nonlocal sent
            if drop is not None and sent >= drop:
                raise _Dropped()
            if typ == "ERROR":
                payload = obj
            elif typ == "BOOKMARK":
                payload = {"kind": rt.kind, "apiVersion": rt.api_version,
                           "metadata": obj["metadata"]}
            elif mode == "table":
                payload = self._table(rt, [obj], q, {"resourceVersion": (obj.get("metadata")
                                                                         or {}).get(
                    "resourceVersion", "")}, v)
            elif mode == "partial":
                payload = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{v}",
                           "metadata": obj.get("metadata", {})}
            else:
                payload = None
            if payload is None:
                line = srv.watch_lines.get(typ, obj, rt, lambda: (dumps(
                    {"type": typ, "object": rt.to_external(obj)}) + "\n").encode())
            else:
                line = (dumps({"type": typ, "object": payload}) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line) if chunked else line)
            self.wfile.flush()
            sent += 1

        deadline = time.monotonic() + timeout
        interval = srv.opts.bookmark_interval
        last_bm = time.monotonic()
        wid, cut = srv.control.watches.register(self.path, self.connection)
        try:
            for typ, obj in w.start():
                emit(typ, obj)
                if typ == "ERROR":
                    raise _Done()
            while not srv.stopping:
                if cut.is_set():
                    raise _Dropped()
                now = time.monotonic()
                if now >= deadline:
                    break
                wait = min(deadline - now, 0.5)
                if w.bookmarks:
                    wait = min(wait, max(0.01, last_bm + interval - now))
                for typ, obj in w.next(wait):
                    emit(typ, obj)
                    if typ == "ERROR":
                        raise _Done()
                if w.bookmarks and time.monotonic() - last_bm >= interval:
                    emit(*w.bookmark())
                    last_bm = time.monotonic()
            self.wfile.write(end)
            self.wfile.flush()
        except _Done:
            self.wfile.write(end)
            self.wfile.flush()
        except _Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            srv.control.watches.unregister(wid)


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


class _Done(Exception):
    pass


class _Dropped(Exception):
    pass


REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
           409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
           500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def fault_error(f):
    code = int(f["status"])
    msg = f.get("message") or {
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected failure",
        503: "the server is currently unable to handle the request",
        504: "Timeout: request did not complete within requested timeout"}.get(
        code, "injected failure")
    details = {}
    if f.get("retryAfter"):
        details["retryAfterSeconds"] = int(f["retryAfter"])
    return ApiError(code, f.get("reason") or REASONS.get(code, ""), msg, details or None)
