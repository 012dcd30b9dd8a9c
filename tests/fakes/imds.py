#!/usr/bin/env python3
"""Fake EC2 instance metadata service (IMDSv2) for nodesmith's integration tests.

Models the documented behaviour of the real service (see tests/fakes/README-aws.md and
../shared/REFERENCE.md): session tokens from PUT /latest/api/token, 400/401/403/404/405 and their
HTML-ish bodies, text/plain for every item, directory listings, spot instance-action and
termination-time, rebalance recommendations, scheduled maintenance events and their history, the
instance identity document and its three signatures (made with the openssl CLI).

Test control lives on the same port under /_fake/ (never token-protected, never subject to
faults, latency or "down"). Standard library only.
"""

import argparse
import base64
import datetime as dt
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_TTL = 21600
MAX_BODY = 1 << 20
HANG_CAP = 300.0

# Version prefixes the real service answers besides "latest" (GET / lists them).
VERSIONS = [
    "1.0", "2007-01-19", "2007-03-01", "2007-08-29", "2007-10-10", "2007-12-15",
    "2008-02-01", "2008-09-01", "2009-04-04", "2011-01-01", "2011-05-01", "2012-01-12",
    "2014-02-25", "2014-11-05", "2015-10-20", "2016-04-19", "2016-06-30", "2016-09-02",
    "2018-03-28", "2018-08-17", "2018-09-24", "2019-10-01", "2020-10-27", "2021-01-03",
    "2021-03-23", "2021-07-15", "2022-09-24", "latest",
]
VERSIONED_RE = re.compile(r"^/(\d{4}-\d{2}-\d{2}|1\.0)(/.*)?$")

REASONS = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable",
}

SPOT_ACTIONS = ("terminate", "stop", "hibernate")
MAINT_CODES = ("instance-stop", "instance-retirement", "instance-reboot", "system-reboot",
               "system-maintenance")
MAINT_DESCRIPTIONS = {
    "instance-stop": "The instance is scheduled for stop",
    "instance-retirement": "The instance is scheduled for retirement",
    "instance-reboot": "scheduled reboot",
    "system-reboot": "scheduled reboot",
    "system-maintenance": "scheduled maintenance",
}
DIRECTIONS = {"east": "e", "west": "w", "north": "n", "south": "s", "central": "c",
              "southeast": "se", "northeast": "ne", "southwest": "sw", "northwest": "nw"}


def error_body(status):
    reason = REASONS.get(status, "Error")
    return ('<?xml version="1.0" encoding="iso-8859-1"?>\n'
            '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
            '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
            '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
            ' <head>\n'
            f'  <title>{status} - {reason}</title>\n'
            ' </head>\n'
            ' <body>\n'
            f'  <h1>{status} - {reason}</h1>\n'
            ' </body>\n'
            '</html>\n').encode()


def iso(ts):
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def gmt(ts):
    # "21 Jan 2019 09:00:43 GMT", the format the maintenance items use.
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%d %b %Y %H:%M:%S GMT")


def parse_time(value):
    """Accept epoch seconds, ISO 8601 (Z) or the maintenance GMT format."""
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip()
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ", "%d %b %Y %H:%M:%S GMT"):
        try:
            return dt.datetime.strptime(s, fmt).replace(tzinfo=dt.timezone.utc).timestamp()
        except ValueError:
            pass
    raise ValueError(f"unparsable time {value!r}")


def region_of_zone(zone):
    m = re.match(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)", zone)
    if not m:
        raise ValueError(f"cannot derive a region from zone {zone!r}; pass --region")
    return m.group(1)


def zone_id_of(zone, region):
    parts = region.split("-")
    short = parts[0] + "".join(DIRECTIONS.get(p, p[:1]) for p in parts[1:-1]) + parts[-1]
    letter = zone[-1]
    n = ord(letter) - ord("a") + 1 if letter.isalpha() else 1
    return f"{short}-az{n}"


def arch_of(instance_type):
    family = instance_type.split(".")[0]
    if family == "a1" or re.match(r"^[a-z]+\d+g", family):
        return "arm64"
    return "x86_64"


def hostname_of(ip, region):
    name = "ip-" + ip.replace(".", "-")
    return f"{name}.ec2.internal" if region == "us-east-1" else f"{name}.{region}.compute.internal"


def random_hex(n):
    return secrets.token_hex((n + 1) // 2)[:n]


class Signer:
    """Makes the identity document's signatures with the openssl CLI."""

    def __init__(self, cert, key, dsa_cert, dsa_key, log):
        self.tmp = tempfile.mkdtemp(prefix="fake-imds-")
        self.log = log
        if not cert or not key:
            cert = os.path.join(self.tmp, "rsa2048-cert.pem")
            key = os.path.join(self.tmp, "rsa2048-key.pem")
            self._run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                       "-out", cert, "-days", "3650", "-sha256",
                       "-subj", "/C=US/O=nodesmith test/CN=fake imds rsa2048 signer"])
        if not dsa_cert or not dsa_key:
            dsa_cert = os.path.join(self.tmp, "dsa-cert.pem")
            dsa_key = os.path.join(self.tmp, "dsa-key.pem")
            self._run(["openssl", "dsaparam", "-genkey", "-out", dsa_key, "1024"])
            self._run(["openssl", "req", "-x509", "-new", "-key", dsa_key, "-out", dsa_cert,
                       "-days", "3650", "-sha1",
                       "-subj", "/C=US/O=nodesmith test/CN=fake imds dsa signer"])
        self.cert, self.key, self.dsa_cert, self.dsa_key = cert, key, dsa_cert, dsa_key

    def _run(self, argv, stdin=None):
        p = subprocess.run(argv, input=stdin, capture_output=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:3])} failed: {p.stderr.decode(errors='replace')}")
        return p.stdout

    def _pkcs7(self, doc, cert, key, md):
        # Attached content, no certificates inside (verifiers pass the certificate with
        # -certfile), body only: the item carries no BEGIN/END lines, like the real one.
        path = os.path.join(self.tmp, "document")
        with open(path, "wb") as f:
            f.write(doc)
        pem = self._run(["openssl", "smime", "-sign", "-binary", "-nodetach", "-nocerts",
                         "-md", md, "-in", path, "-signer", cert, "-inkey", key,
                         "-outform", "PEM"]).decode()
        return "\n".join(l for l in pem.strip().splitlines() if not l.startswith("-----"))

    def sign(self, doc):
        path = os.path.join(self.tmp, "document")
        with open(path, "wb") as f:
            f.write(doc)
        raw = self._run(["openssl", "dgst", "-sha256", "-sign", self.key, path])
        b64 = base64.b64encode(raw).decode()
        signature = "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
        return {
            "signature": signature,
            "pkcs7": self._pkcs7(doc, self.dsa_cert, self.dsa_key, "sha1"),
            "rsa2048": self._pkcs7(doc, self.cert, self.key, "sha256"),
        }

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


class State:
    def __init__(self, cfg, signer):
        self.lock = threading.Lock()
        self.cfg = cfg
        self.v1_allowed = bool(cfg["v1_allowed"])
        self.ttl_cap = int(cfg["max_ttl"])
        self.latency = float(cfg.get("latency") or 0)
        self.down = False
        self.disabled = False
        self.tokens = {}  # token -> expiry (monotonic)
        self.faults = []
        self.fault_seq = 0
        self.counters = self._zero_counters()
        self.spot = None        # {"action", "time", "publish"}
        self.rebalance = None   # {"noticeTime", "publish"}
        self.scheduled = []
        self.history = []
        self.user_data = cfg.get("user_data")
        self.started = time.time()
        self.doc = self._document()
        self.sigs = signer.sign(self.doc)

    @staticmethod
    def _zero_counters():
        return {"requests": 0, "token_puts": 0, "tokens_issued": 0, "faults_injected": 0,
                "dropped": 0, "by_path": {}, "by_status": {}}

    def _document(self):
        c = self.cfg
        doc = {
            "accountId": c["account_id"],
            "architecture": c["architecture"],
            "availabilityZone": c["zone"],
            "billingProducts": None,
            "devpayProductCodes": None,
            "marketplaceProductCodes": None,
            "imageId": c["ami_id"],
            "instanceId": c["instance_id"],
            "instanceType": c["instance_type"],
            "kernelId": None,
            "pendingTime": c["pending_time"],
            "privateIp": c["local_ipv4"],
            "ramdiskId": None,
            "region": c["region"],
            "version": "2017-09-30",
        }
        # The real document is pretty-printed with " : " separators.
        return json.dumps(doc, indent=2, separators=(",", " : ")).encode()

    # ---- items -------------------------------------------------------------------------
    def leaves(self, now):
        """Every item that exists right now, path (relative to a version) -> bytes."""
        c = self.cfg
        md = {
            "ami-id": c["ami_id"],
            "ami-launch-index": "0",
            "ami-manifest-path": "(unknown)",
            "block-device-mapping/ami": "/dev/xvda",
            "block-device-mapping/root": "/dev/xvda",
            "hostname": c["hostname"],
            "instance-action": "none",
            "instance-id": c["instance_id"],
            "instance-life-cycle": c["life_cycle"],
            "instance-type": c["instance_type"],
            "local-hostname": c["hostname"],
            "local-ipv4": c["local_ipv4"],
            "mac": c["mac"],
            "placement/availability-zone": c["zone"],
            "placement/availability-zone-id": c["zone_id"],
            "placement/region": c["region"],
            "profile": "default-hvm",
            "reservation-id": c["reservation_id"],
            "security-groups": c["security_group_name"],
            "services/domain": "amazonaws.com",
            "services/partition": "aws",
        }
        mac = f"network/interfaces/macs/{c['mac']}/"
        md.update({
            mac + "device-number": "0",
            mac + "interface-id": c["eni_id"],
            mac + "local-hostname": c["hostname"],
            mac + "local-ipv4s": c["local_ipv4"],
            mac + "mac": c["mac"],
            mac + "owner-id": c["account_id"],
            mac + "security-group-ids": c["security_group_id"],
            mac + "security-groups": c["security_group_name"],
            mac + "subnet-id": c["subnet_id"],
            mac + "vpc-id": c["vpc_id"],
        })
        if c.get("role"):
            role = c["role"]
            md["iam/info"] = json.dumps({
                "Code": "Success",
                "LastUpdated": iso(self.started),
                "InstanceProfileArn": f"arn:aws:iam::{c['account_id']}:instance-profile/{role}",
                "InstanceProfileId": c["instance_profile_id"],
            }, indent=2)
            md["iam/security-credentials/" + role] = json.dumps({
                "Code": "Success",
                "LastUpdated": iso(self.started),
                "Type": "AWS-HMAC",
                "AccessKeyId": c["role_access_key_id"],
                "SecretAccessKey": c["role_secret_access_key"],
                "Token": c["role_session_token"],
                "Expiration": iso(self.started + 6 * 3600),
            }, indent=2)
        md["events/maintenance/scheduled"] = json.dumps(self.scheduled, indent=2)
        md["events/maintenance/history"] = json.dumps(self.history, indent=2)
        if self.rebalance and now >= self.rebalance["publish"]:
            md["events/recommendations/rebalance"] = json.dumps(
                {"noticeTime": iso(self.rebalance["noticeTime"])})
        if self.spot and now >= self.spot["publish"]:
            md["spot/instance-action"] = json.dumps(
                {"action": self.spot["action"], "time": iso(self.spot["time"])})
            if self.spot["action"] == "terminate":
                md["spot/termination-time"] = iso(self.spot["time"])
        out = {"meta-data/" + k: v for k, v in md.items()}
        out["dynamic/instance-identity/document"] = self.doc.decode()
        for k, v in self.sigs.items():
            out["dynamic/instance-identity/" + k] = v
        if self.user_data is not None:
            out["user-data"] = self.user_data
        return {k: (v if isinstance(v, bytes) else v.encode()) for k, v in out.items()}

    def lookup(self, rel, now):
        """rel: path below the version ('' is the version root). Returns bytes or None."""
        leaves = self.leaves(now)
        key = rel.lstrip("/")
        if key in leaves and not rel.endswith("/"):
            return leaves[key]
        prefix = key.rstrip("/")
        prefix = prefix + "/" if prefix else ""
        children = []
        for k in leaves:
            if k.startswith(prefix) and k != prefix:
                rest = k[len(prefix):]
                child = rest.split("/", 1)[0] + ("/" if "/" in rest else "")
                if child not in children:
                    children.append(child)
        if not children:
            return None
        if prefix == "":
            children = [c.rstrip("/") for c in children]  # /latest/ lists "dynamic", "meta-data"
        return "\n".join(sorted(children)).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "EC2ws"
    sys_version = ""

    def version_string(self):
        return "EC2ws"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("imds: " + (fmt % args) + "\n")

    # ---- plumbing ----------------------------------------------------------------------
    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(n) if n else b""

    def _send(self, status, body=b"", ctype="text/plain", headers=None, head=False):
        self.send_response(status, REASONS.get(status))
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)

    def _error(self, status, head=False, headers=None):
        self._send(status, error_body(status), "text/html", headers=headers, head=head)

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _count(self, status):
        st = self.server.state
        with st.lock:
            key = f"{self.command} {self.path.split('?')[0]}"
            st.counters["by_path"][key] = st.counters["by_path"].get(key, 0) + 1
            st.counters["by_status"][str(status)] = st.counters["by_status"].get(str(status), 0) + 1

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def _dispatch(self):
        try:
            body = self._body()
        except ValueError:
            self._error(400)
            self.close_connection = True
            return
        path = self.path.split("?", 1)[0]
        if path == "/_fake" or path.startswith("/_fake/"):
            self._control(path, body)
            return
        st = self.server.state
        with st.lock:
            st.counters["requests"] += 1
            down, latency = st.down, st.latency
            fault = self._match_fault(path)
        if down:
            with st.lock:
                st.counters["dropped"] += 1
            self._drop()
            return
        if latency > 0:
            time.sleep(latency)
        if fault is not None:
            with st.lock:
                st.counters["faults_injected"] += 1
            if fault.get("delay"):
                time.sleep(min(float(fault["delay"]), HANG_CAP))
            if fault.get("hang") is not None:
                time.sleep(min(float(fault["hang"]), HANG_CAP))
                self._drop()
                return
            if fault.get("drop"):
                self._drop()
                return
            if fault.get("status"):
                status = int(fault["status"])
                self._count(status)
                self._error(status, head=self.command == "HEAD")
                return
        status = self._serve(path)
        self._count(status)

    def _match_fault(self, path):
        st = self.server.state
        for rule in st.faults:
            if rule.get("method") and rule["method"].upper() != self.command:
                continue
            if not re.search(rule["path"], path):
                continue
            if rule.get("remaining") is not None:
                if rule["remaining"] <= 0:
                    continue
                rule["remaining"] -= 1
            rule["hits"] += 1
            return dict(rule)
        return None

    # ---- the metadata service ----------------------------------------------------------
    def _serve(self, path):
        st = self.server.state
        head = self.command == "HEAD"
        if st.disabled:
            self._error(403, head=head)
            return 403
        if self.command == "PUT":
            return self._put(path)
        if self.command not in ("GET", "HEAD"):
            self._error(405, head=head, headers={"Allow": "GET, HEAD, PUT"})
            return 405
        # Token check first: with a token header present the token must be valid, in
        # either mode; without one only v1 mode answers.
        token = self.headers.get("X-aws-ec2-metadata-token")
        remaining = None
        if token is not None:
            now_m = time.monotonic()
            with st.lock:
                exp = st.tokens.get(token)
                if exp is not None and exp <= now_m:
                    del st.tokens[token]
                    exp = None
            if exp is None:
                self._error(401, head=head)
                return 401
            remaining = max(0, math.ceil(exp - now_m))
        elif not st.v1_allowed:
            self._error(401, head=head)
            return 401
        extra = {"X-aws-ec2-metadata-token-ttl-seconds": str(remaining)} if remaining is not None else {}
        if path == "/":
            self._send(200, "\n".join(VERSIONS).encode(), headers=extra, head=head)
            return 200
        m = re.match(r"^/(latest|\d{4}-\d{2}-\d{2}|1\.0)(/.*)?$", path)
        if not m or m.group(1) not in VERSIONS:
            self._error(404, head=head, headers=extra)
            return 404
        rel = m.group(2) or ""
        if rel.startswith("/api/"):
            self._error(405 if rel == "/api/token" else 404, head=head, headers=extra)
            return 405 if rel == "/api/token" else 404
        with st.lock:
            data = st.lookup(rel, time.time())
        if data is None:
            self._error(404, head=head, headers=extra)
            return 404
        ctype = "application/octet-stream" if rel.lstrip("/") == "user-data" else "text/plain"
        self._send(200, data, ctype, headers=extra, head=head)
        return 200

    def _put(self, path):
        st = self.server.state
        with st.lock:
            st.counters["token_puts"] += 1
        if self.headers.get("X-Forwarded-For") is not None:
            self._error(403)
            return 403
        if VERSIONED_RE.match(path) and path.endswith("/api/token"):
            self._error(403)
            return 403
        if path != "/latest/api/token":
            self._error(405, headers={"Allow": "GET, HEAD"})
            return 405
        raw = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if raw is None or not re.fullmatch(r"\s*\d{1,9}\s*", raw):
            self._error(400)
            return 400
        ttl = int(raw)
        if ttl < 1 or ttl > MAX_TTL:
            self._error(400)
            return 400
        with st.lock:
            ttl = min(ttl, st.ttl_cap)
            token = base64.b64encode(b"\x01\x00\x04\x00" + secrets.token_bytes(38)).decode()
            now_m = time.monotonic()
            # Drop expired tokens so a long run does not grow without bound.
            for t in [t for t, e in st.tokens.items() if e <= now_m]:
                del st.tokens[t]
            st.tokens[token] = now_m + ttl
            st.counters["tokens_issued"] += 1
        self._send(200, token.encode(), headers={"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})
        return 200

    # ---- control -----------------------------------------------------------------------
    def _json(self, status, obj):
        self._send(status, (json.dumps(obj, indent=1) + "\n").encode(), "application/json")

    def _control(self, path, body):
        try:
            args = json.loads(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("body must be a JSON object")
            status, obj = self._control_op(self.command, path[len("/_fake"):], args)
        except (ValueError, KeyError, TypeError, re.error) as e:
            status, obj = 400, {"error": str(e)}
        self._json(status, obj)

    def _control_op(self, method, op, a):
        st = self.server.state
        now = time.time()
        with st.lock:
            if op == "/state" and method == "GET":
                return 200, {
                    "config": {k: v for k, v in st.cfg.items() if not k.startswith("role_")},
                    "v1_allowed": st.v1_allowed, "ttl_cap": st.ttl_cap, "latency": st.latency,
                    "down": st.down, "disabled": st.disabled, "live_tokens": len(st.tokens),
                    "spot": st.spot and {"action": st.spot["action"], "time": iso(st.spot["time"]),
                                         "publish": iso(st.spot["publish"])},
                    "rebalance": st.rebalance and {"noticeTime": iso(st.rebalance["noticeTime"]),
                                                   "publish": iso(st.rebalance["publish"])},
                    "scheduled": st.scheduled, "history": st.history, "faults": st.faults,
                    "counters": st.counters,
                    "signing": {"rsa2048_cert": self.server.signer.cert,
                                "dsa_cert": self.server.signer.dsa_cert},
                }
            if op == "/signing-certs" and method == "GET":
                sg = self.server.signer
                with open(sg.cert) as f1, open(sg.dsa_cert) as f2:
                    rsa, dsa = f1.read(), f2.read()
                # "signature" is made with the rsa2048 signer's key.
                return 200, {"rsa2048": rsa, "signature": rsa, "pkcs7": dsa}
            if op == "/counters":
                if method == "GET":
                    return 200, st.counters
                if method == "DELETE":
                    st.counters = st._zero_counters()
                    return 200, st.counters
            if op == "/spot":
                if method == "DELETE":
                    st.spot = None
                    return 200, {"spot": None}
                if method == "POST":
                    if st.cfg["life_cycle"] != "spot":
                        return 409, {"error": "instance-life-cycle is on-demand: no spot notices"}
                    action = a.get("action", "terminate")
                    if action not in SPOT_ACTIONS:
                        raise ValueError(f"action must be one of {SPOT_ACTIONS}")
                    publish = self._when(a, "publish", now)
                    if "time" in a:
                        when = parse_time(a["time"])
                    else:
                        # hibernate starts at once: no two-minute warning.
                        default = 0 if action == "hibernate" else 120
                        when = publish + float(a.get("in_seconds", default))
                    st.spot = {"action": action, "time": when, "publish": publish}
                    return 200, {"action": action, "time": iso(when), "publish": iso(publish)}
            if op == "/rebalance":
                if method == "DELETE":
                    st.rebalance = None
                    return 200, {"rebalance": None}
                if method == "POST":
                    if st.cfg["life_cycle"] != "spot":
                        return 409, {"error": "instance-life-cycle is on-demand: no rebalance"}
                    publish = self._when(a, "publish", now)
                    notice = parse_time(a["noticeTime"]) if "noticeTime" in a else publish
                    st.rebalance = {"noticeTime": notice, "publish": publish}
                    return 200, {"noticeTime": iso(notice), "publish": iso(publish)}
            if op == "/maintenance" and method == "GET":
                return 200, {"scheduled": st.scheduled, "history": st.history}
            if op == "/maintenance" and method == "POST":
                code = a.get("code", "system-reboot")
                if code not in MAINT_CODES:
                    raise ValueError(f"code must be one of {MAINT_CODES}")
                nb = parse_time(a["not_before"]) if "not_before" in a else \
                    now + float(a.get("not_before_in", 7 * 86400))
                na = parse_time(a["not_after"]) if "not_after" in a else \
                    nb + float(a.get("duration", 2 * 3600))
                ev = {
                    "NotBefore": gmt(nb),
                    "Code": code,
                    "Description": a.get("description", MAINT_DESCRIPTIONS[code]),
                    "EventId": a.get("event_id") or "instance-event-0" + random_hex(16),
                    "NotAfter": gmt(na),
                    "State": "active",
                }
                if "not_before_deadline" in a:
                    ev["NotBeforeDeadline"] = gmt(parse_time(a["not_before_deadline"]))
                if any(e["EventId"] == ev["EventId"] for e in st.scheduled + st.history):
                    return 409, {"error": "duplicate EventId"}
                st.scheduled.append(ev)
                return 200, ev
            m = re.fullmatch(r"/maintenance/([^/]+)/(cancel|complete)", op)
            if m and method == "POST":
                eid, verb = m.groups()
                for ev in st.scheduled:
                    if ev["EventId"] == eid:
                        st.scheduled.remove(ev)
                        ev = dict(ev, State="canceled" if verb == "cancel" else "completed")
                        st.history.append(ev)
                        return 200, ev
                return 404, {"error": f"no scheduled event {eid}"}
            if op == "/token-ttl-cap" and method == "POST":
                cap = a.get("seconds")
                cap = MAX_TTL if cap is None else int(cap)
                if cap < 1 or cap > MAX_TTL:
                    raise ValueError("seconds must be 1..21600")
                st.ttl_cap = cap
                if a.get("apply_to_existing"):
                    limit = time.monotonic() + cap
                    for t, e in st.tokens.items():
                        st.tokens[t] = min(e, limit)
                return 200, {"ttl_cap": st.ttl_cap}
            if op == "/tokens" and method == "DELETE":
                n = len(st.tokens)
                st.tokens.clear()
                return 200, {"revoked": n}
            if op in ("/down", "/up") and method == "POST":
                st.down = op == "/down"
                return 200, {"down": st.down}
            if op == "/disabled" and method == "POST":
                st.disabled = bool(a.get("disabled", True))
                return 200, {"disabled": st.disabled}
            if op == "/v1" and method == "POST":
                st.v1_allowed = bool(a["allowed"])
                return 200, {"v1_allowed": st.v1_allowed}
            if op == "/latency" and method == "POST":
                st.latency = max(0.0, float(a.get("seconds", 0)))
                return 200, {"latency": st.latency}
            if op == "/user-data" and method == "POST":
                st.user_data = a.get("user_data")
                return 200, {"user_data": st.user_data}
            if op == "/faults":
                if method == "GET":
                    return 200, {"faults": st.faults}
                if method == "DELETE":
                    st.faults = []
                    return 200, {"faults": []}
                if method == "POST":
                    rule = self._fault(a)
                    st.faults.append(rule)
                    return 200, rule
            m = re.fullmatch(r"/faults/(\d+)", op)
            if m and method == "DELETE":
                before = len(st.faults)
                st.faults = [r for r in st.faults if r["id"] != int(m.group(1))]
                return (200 if len(st.faults) < before else 404), {"faults": st.faults}
        return 404, {"error": f"unknown control operation {method} /_fake{op}"}

    @staticmethod
    def _when(a, name, now):
        if name + "_at" in a:
            return parse_time(a[name + "_at"])
        return now + float(a.get(name + "_in", 0))

    def _fault(self, a):
        st = self.server.state
        re.compile(a["path"])
        kinds = [k for k in ("status", "hang", "drop") if a.get(k) is not None]
        if len(kinds) > 1 or (not kinds and not a.get("delay")):
            raise ValueError("a fault needs exactly one of status, hang, drop (or only delay)")
        if a.get("status") is not None and int(a["status"]) not in (429, 500, 502, 503):
            raise ValueError("status must be 429, 500, 502 or 503")
        st.fault_seq += 1
        count = a.get("count")
        return {"id": st.fault_seq, "path": a["path"], "method": a.get("method"),
                "status": a.get("status"), "hang": a.get("hang"), "drop": bool(a.get("drop")),
                "delay": a.get("delay"), "count": count,
                "remaining": None if count is None else int(count), "hits": 0}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


def build_config(ns):
    cfg = {}
    if ns.config:
        with open(ns.config) as f:
            loaded = json.load(f)
        cfg.update({k.replace("-", "_"): v for k, v in loaded.items()})
    for k, v in vars(ns).items():
        if k != "config" and v is not None:
            cfg[k] = v
    cfg.setdefault("port", 0)
    cfg.setdefault("instance_id", "i-0" + random_hex(16))
    cfg.setdefault("instance_type", "m5.large")
    cfg.setdefault("zone", "us-east-1a")
    cfg.setdefault("region", region_of_zone(cfg["zone"]))
    cfg.setdefault("zone_id", zone_id_of(cfg["zone"], cfg["region"]))
    cfg.setdefault("life_cycle", "on-demand")
    if cfg["life_cycle"] not in ("spot", "on-demand"):
        raise SystemExit("--life-cycle must be spot or on-demand")
    cfg.setdefault("local_ipv4", "10.0.%d.%d" % (secrets.randbelow(255), 1 + secrets.randbelow(253)))
    cfg.setdefault("ami_id", "ami-0" + random_hex(16))
    cfg.setdefault("account_id", "123456789012")
    cfg.setdefault("v1_allowed", False)
    cfg.setdefault("max_ttl", MAX_TTL)
    if not 1 <= int(cfg["max_ttl"]) <= MAX_TTL:
        raise SystemExit("--max-ttl must be 1..21600")
    cfg.setdefault("architecture", arch_of(cfg["instance_type"]))
    cfg.setdefault("hostname", hostname_of(cfg["local_ipv4"], cfg["region"]))
    cfg.setdefault("pending_time", iso(time.time()))
    h = hashlib.sha256(cfg["instance_id"].encode()).hexdigest()
    cfg.setdefault("mac", "0e:" + ":".join(h[i:i + 2] for i in range(0, 10, 2)))
    cfg.setdefault("reservation_id", "r-0" + h[10:26])
    cfg.setdefault("eni_id", "eni-0" + h[26:42])
    cfg.setdefault("subnet_id", "subnet-0" + h[42:58])
    cfg.setdefault("vpc_id", "vpc-0" + h[:16])
    cfg.setdefault("security_group_id", "sg-0" + h[16:32])
    cfg.setdefault("security_group_name", "default")
    cfg.setdefault("instance_profile_id", "AIPA" + h[:17].upper())
    cfg.setdefault("role_access_key_id", "ASIA" + h[17:33].upper())
    cfg.setdefault("role_secret_access_key", base64.b64encode(bytes.fromhex(h[:60])).decode()[:40])
    cfg.setdefault("role_session_token", base64.b64encode(hashlib.sha512(h.encode()).digest()).decode())
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="JSON file with any of the options below (keys as the "
                    "long option names, - or _); options given on the command line win")
    ap.add_argument("--port", type=int, help="0 (default) picks a free port")
    ap.add_argument("--instance-id")
    ap.add_argument("--instance-type")
    ap.add_argument("--zone")
    ap.add_argument("--zone-id")
    ap.add_argument("--region")
    ap.add_argument("--life-cycle", choices=["spot", "on-demand"])
    ap.add_argument("--local-ipv4")
    ap.add_argument("--ami-id")
    ap.add_argument("--account-id")
    ap.add_argument("--architecture", choices=["x86_64", "arm64"])
    ap.add_argument("--role", help="IAM role name behind iam/security-credentials/")
    ap.add_argument("--user-data", help="served at /latest/user-data")
    ap.add_argument("--pending-time", help="the identity document's pendingTime, e.g. the "
                    "instance's EC2 LaunchTime (default: now)")
    ap.add_argument("--v1-allowed", action="store_const", const=True,
                    help="answer GETs without a token (IMDSv1 optional mode)")
    ap.add_argument("--max-ttl", type=int, help="cap on granted token TTLs (seconds)")
    ap.add_argument("--latency", type=float, help="seconds added to every metadata request")
    ap.add_argument("--sign-cert", help="PEM certificate for the rsa2048 signature")
    ap.add_argument("--sign-key", help="PEM private key for the rsa2048 and base64 signatures")
    ap.add_argument("--dsa-cert", help="PEM DSA certificate for the pkcs7 signature")
    ap.add_argument("--dsa-key", help="PEM DSA private key for the pkcs7 signature")
    ap.add_argument("--verbose", action="store_const", const=True)
    ns = ap.parse_args(argv)
    cfg = build_config(ns)
    if bool(cfg.get("sign_cert")) != bool(cfg.get("sign_key")):
        raise SystemExit("--sign-cert and --sign-key go together")
    signer = Signer(cfg.get("sign_cert"), cfg.get("sign_key"), cfg.get("dsa_cert"),
                    cfg.get("dsa_key"), sys.stderr)
    try:
        state = State(cfg, signer)
        srv = Server(("127.0.0.1", int(cfg["port"])), Handler)
        srv.state, srv.signer, srv.verbose = state, signer, bool(cfg.get("verbose"))
        print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)

        def stop(signum, frame):
            threading.Thread(target=srv.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        srv.serve_forever(poll_interval=0.2)
        srv.server_close()
    finally:
        signer.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
