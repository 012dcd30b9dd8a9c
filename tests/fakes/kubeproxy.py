#!/usr/bin/env python3
"""A fault-injecting proxy in front of the real kube-apiserver, TLS on both sides.

    python3 tests/fakes/kubeproxy.py --upstream https://127.0.0.1:6443 --upstream-ca ca.crt \
        --tls-cert proxy.crt --tls-key proxy.key --client-ca ca.crt \
        --front-proxy-cert fp.crt --front-proxy-key fp.key [--port 0] [--control-port 0] \
        [--idle-timeout SEC] [--idle-close notify|fin]

Prints `listening on 127.0.0.1:PORT` then `control on 127.0.0.1:CPORT`. Clients speak HTTPS to
PORT exactly as to the API server. Identity passes through as Kubernetes' authenticating proxy
does it: a client certificate (verified against --client-ca) becomes X-Remote-User (its CN) and
X-Remote-Group (each O) on a connection authenticated upstream with the front-proxy client
certificate (kube-apiserver --requestheader-*); a bearer token is passed on as it is. Incoming
X-Remote-* headers are dropped. Watches stream through unchanged.

Control (plain HTTP on CPORT, JSON, never faulted):
  POST   /_fake/faults  {"method"?, "path"? (regexp on the request target), "status"? (4xx/5xx,
                         "retryAfter"? s), "delay"? s, "close"? true, "dropWatchAfter"? events,
                         "count"? (default 1; null: every match), "seconds"? (lapses after)}
                         or a list of them; answers the rule(s) with an id
  GET    /_fake/faults  the rules (with matched counts); DELETE /_fake/faults[/ID]
  POST   /_fake/watches/drop {"path"?: regexp}: cut open watch streams now
  GET    /_fake/stats   requests proxied, faults answered, watches open and dropped
  GET    /_fake/health

A restart of the API server is the harness's (cluster.Cluster.restart_apiserver): while it is
down the proxy refuses (closes) connections, as a client would see. Python standard library only.
"""
import argparse
import http.client
import json
import re
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer",
       "upgrade", "content-length"}
REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
           504: "Timeout", 409: "Conflict", 403: "Forbidden", 404: "NotFound"}
MESSAGES = {429: "Too many requests, please try again later.",
            500: "Internal error occurred: injected failure",
            503: "the server is currently unable to handle the request",
            504: "Timeout: request did not complete within requested timeout"}


class Faults:
    """Rules matched in order; each answers `count` requests (None: all) while not lapsed."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.next_id = 1

    def add(self, spec):
        if not isinstance(spec, dict):
            raise ValueError("a fault is a JSON object")
        if not any(k in spec for k in ("status", "delay", "close", "dropWatchAfter")):
            raise ValueError("a fault needs one of status, delay, close, dropWatchAfter")
        if "status" in spec and not (isinstance(spec["status"], int) and 400 <= spec["status"] <= 599):
            raise ValueError("status must be an HTTP error code")
        unknown = set(spec) - {"method", "path", "status", "retryAfter", "delay", "close",
                               "dropWatchAfter", "count", "seconds", "message", "reason"}
        if unknown:
            raise ValueError(f"unknown fault field(s): {', '.join(sorted(unknown))}")
        rule = dict(spec)
        rule["_re"] = re.compile(spec.get("path", ".*"))
        rule["method"] = (spec.get("method") or "*").upper()
        rule["count"] = None if spec.get("count", 1) is None else int(spec.get("count", 1))
        rule["_until"] = None if spec.get("seconds") is None else time.monotonic() + float(spec["seconds"])
        rule["matched"] = 0
        with self.lock:
            rule["id"] = self.next_id
            self.next_id += 1
            self.rules.append(rule)
        return self.public(rule)

    @staticmethod
    def public(r):
        return {k: v for k, v in r.items() if not k.startswith("_")}

    def match(self, method, target, watch):
        now = time.monotonic()
        with self.lock:
            for r in self.rules:
                live = (r["count"] is None or r["count"] > 0) and (r["_until"] is None or now < r["_until"])
                if not live or r["method"] not in ("*", method) or not r["_re"].search(target):
                    continue
                if r.get("dropWatchAfter") is not None and not watch:
                    continue
                if r["count"] is not None:
                    r["count"] -= 1
                r["matched"] += 1
                return dict(r)
        return None

    def list(self):
        with self.lock:
            return [self.public(r) for r in self.rules]

    def remove(self, rid=None):
        with self.lock:
            n = len(self.rules)
            self.rules = [] if rid is None else [r for r in self.rules if str(r["id"]) != rid]
            return n - len(self.rules)


class Proxy:
    def __init__(self, args):
        self.args = args
        u = urllib.parse.urlsplit(args.upstream)
        self.host, self.port = u.hostname, u.port or 443
        self.up_ctx = ssl.create_default_context(cafile=args.upstream_ca)
        self.up_ctx.load_cert_chain(args.front_proxy_cert, args.front_proxy_key)
        self.faults = Faults()
        self.lock = threading.Lock()
        self.watches = set()             # (handler) streaming now
        self.stats = {"requests": 0, "faulted": 0, "watchesDropped": 0, "upstreamErrors": 0}

    def count(self, key, n=1):
        with self.lock:
            self.stats[key] += n

    def drop_watches(self, pattern):
        with self.lock:
            victims = [h for h in self.watches if pattern.search(h.path)]
        for h in victims:
            h.cut()
        self.count("watchesDropped", len(victims))
        return [h.path for h in victims]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nodesmith-kubeproxy"
    timeout = 120

    def log_message(self, fmt, *a):
        pass

    def setup(self):
        super().setup()
        self.upstream = None
        self.identity = None
        self.failed = False
        self.cut_done = False
        try:
            self.connection.settimeout(30)
            self.connection.do_handshake()
            self.connection.settimeout(self.server.px.args.idle_timeout or self.timeout)
            cert = self.connection.getpeercert()
        except (OSError, ssl.SSLError):
            self.failed = True
            return
        if cert:
            cn, orgs = None, []
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        cn = v
                    elif k == "organizationName":
                        orgs.append(v)
            self.identity = (cn, orgs)

    def handle(self):
        if self.failed:
            return
        try:
            super().handle()
            # the connection ends (idle, or a Connection: close): with TLS's close_notify first,
            # as kube-apiserver's Go server closes it, unless --idle-close fin (only the TCP FIN,
            # as from a killed server or some middleboxes); a cut (fault, dropped watch) sends none
            if not self.cut_done and self.server.px.args.idle_close == "notify":
                self.connection.settimeout(1.0)
                self.connection.unwrap()
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            if self.upstream is not None:
                self.upstream.close()

    def finish(self):
        try:
            super().finish()
        except (OSError, ssl.SSLError):
            pass

    def cut(self):
        self.cut_done = True
        for s in (self.connection, getattr(self.upstream, "sock", None)):
            try:
                if s is not None:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def send_status(self, code, message, retry_after=None, reason=None):
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason or REASONS.get(code, ""), "code": code}
        if retry_after:
            body["details"] = {"retryAfterSeconds": int(retry_after)}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after:
            self.send_header("Retry-After", str(int(retry_after)))
        self.end_headers()
        self.wfile.write(data)

    def proxy(self):
        px = self.server.px
        px.count("requests")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else None
        watch = bool(re.search(r"[?&]watch=(1|true)(&|$)", self.path))
        drop_after = None
        f = px.faults.match(self.command, self.path, watch)
        if f is not None:
            px.count("faulted")
            if f.get("delay"):
                time.sleep(min(float(f["delay"]), 60.0))
            if f.get("close"):
                self.close_connection = True
                self.cut()
                return
            if f.get("status"):
                return self.send_status(int(f["status"]), f.get("message") or MESSAGES.get(
                    int(f["status"]), "injected failure"), f.get("retryAfter"), f.get("reason"))
            if f.get("dropWatchAfter") is not None:
                drop_after = int(f["dropWatchAfter"])
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in HOP and not k.lower().startswith(("x-remote-", "impersonate-"))
                   and k.lower() != "host"}
        if self.identity and self.identity[0]:
            headers["X-Remote-User"] = self.identity[0]
            headers.pop("Authorization", None)
            headers.pop("authorization", None)
        hdr_items = list(headers.items()) + [("X-Remote-Group", g) for g in (self.identity or (None, []))[1]]
        try:
            if self.upstream is None:
                self.upstream = http.client.HTTPSConnection(px.host, px.port, context=px.up_ctx, timeout=120)
            self.upstream.putrequest(self.command, self.path, skip_accept_encoding=True)
            for k, v in hdr_items:
                self.upstream.putheader(k, v)
            if body is not None:
                self.upstream.putheader("Content-Length", str(len(body)))
            self.upstream.endheaders(body)
            resp = self.upstream.getresponse()
        except (OSError, http.client.HTTPException):
            # the API server is down or restarting: the client sees the connection go
            px.count("upstreamErrors")
            if self.upstream is not None:
                self.upstream.close()
                self.upstream = None
            self.close_connection = True
            self.cut()
            return
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        length = resp.getheader("Content-Length")
        if length is not None and not watch:
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        # HTTP/1.1: chunked; HTTP/1.0 (the agent's watches, docs/http.md): the body ends with
        # the connection, as the API server answers it
        chunked = self.request_version != "HTTP/1.0"
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.close_connection = True
        self.end_headers()
        with px.lock:
            px.watches.add(self)
        try:
            events = 0
            while True:
                chunk = resp.readline() if watch else resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                self.wfile.flush()
                events += 1
                if drop_after is not None and events >= drop_after:
                    self.close_connection = True
                    self.cut()
                    return
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        finally:
            with px.lock:
                px.watches.discard(self)
            if watch or resp.getheader("Content-Length") is None:
                # the upstream stream is consumed or cut: do not reuse that connection
                self.upstream.close()
                self.upstream = None

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = proxy


class Control(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        pass

    def reply(self, code, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def any(self):
        px = self.server.px
        n = int(self.headers.get("Content-Length") or 0)
        try:
            data = json.loads(self.rfile.read(n) or b"null") if n else None
        except ValueError as e:
            return self.reply(400, {"error": f"invalid JSON: {e}"})
        parts = [p for p in urllib.parse.urlsplit(self.path).path.split("/") if p]
        m = self.command
        try:
            if parts[:1] != ["_fake"]:
                return self.reply(404, {"error": "only /_fake/ here"})
            p = parts[1:]
            if p == ["health"]:
                return self.reply(200, {"ok": True, "upstream": px.args.upstream})
            if p == ["stats"]:
                with px.lock:
                    return self.reply(200, dict(px.stats, watchesOpen=len(px.watches)))
            if p == ["faults"] and m == "POST":
                if isinstance(data, list):
                    return self.reply(201, {"faults": [px.faults.add(f) for f in data]})
                return self.reply(201, px.faults.add(data))
            if p == ["faults"] and m == "GET":
                return self.reply(200, {"faults": px.faults.list()})
            if p[:1] == ["faults"] and m == "DELETE" and len(p) <= 2:
                removed = px.faults.remove(p[1] if len(p) == 2 else None)
                if len(p) == 2 and not removed:
                    return self.reply(404, {"error": f"no fault {p[1]}"})
                return self.reply(200, {"faults": px.faults.list()})
            if p == ["watches", "drop"] and m == "POST":
                pat = re.compile((data or {}).get("path", ".*"))
                return self.reply(200, {"dropped": px.drop_watches(pat)})
            return self.reply(404, {"error": f"no endpoint {m} {self.path}"})
        except (ValueError, TypeError, re.error) as e:
            return self.reply(400, {"error": str(e)})

    do_GET = do_POST = do_DELETE = any


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--upstream", required=True, help="the API server, https://127.0.0.1:PORT")
    ap.add_argument("--upstream-ca", required=True, help="CA of the API server's certificate")
    ap.add_argument("--tls-cert", required=True, help="the proxy's serving certificate")
    ap.add_argument("--tls-key", required=True)
    ap.add_argument("--client-ca", required=True, help="CA of the clients' certificates")
    ap.add_argument("--front-proxy-cert", required=True,
                    help="client certificate the API server trusts for X-Remote-User/Group")
    ap.add_argument("--front-proxy-key", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--control-port", type=int, default=0)
    ap.add_argument("--idle-timeout", type=float, default=None,
                    help="close a client connection idle this long, seconds (default 120)")
    ap.add_argument("--idle-close", choices=("notify", "fin"), default="notify",
                    help="end a connection with TLS close_notify (as Go's server), or with only the TCP FIN")
    args = ap.parse_args(argv)
    px = Proxy(args)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.tls_cert, args.tls_key)
    ctx.load_verify_locations(args.client_ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler, bind_and_activate=True)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    srv.daemon_threads = True
    srv.px = px
    ctl = ThreadingHTTPServer(("127.0.0.1", args.control_port), Control)
    ctl.daemon_threads = True
    ctl.px = px
    print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)
    print(f"control on 127.0.0.1:{ctl.server_address[1]}", flush=True)

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=ctl.serve_forever, daemon=True).start()
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        ctl.shutdown()
        with px.lock:
            open_watches = list(px.watches)
        for h in open_watches:
            h.cut()
    return 0


if __name__ == "__main__":
    sys.exit(main())
