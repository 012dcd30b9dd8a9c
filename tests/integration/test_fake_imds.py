#!/usr/bin/env python3
"""Checks tests/fakes/imds.py against the documented IMDSv2 behaviour.

Run: python3 tests/integration/test_fake_imds.py   (exit 0 = pass; about 5 s)
Starts two fake instances on 127.0.0.1 and stops them at the end.
"""

import base64
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "..", "fakes", "imds.py")
DEADLINE = time.monotonic() + 55

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def start(args):
    p = subprocess.Popen([sys.executable, FAKE] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"fake did not start: {line!r} {p.stderr.read()}")
    return p, int(m.group(1))


def req(port, method, path, headers=None, body=None, timeout=5):
    """Returns (status, headers dict lower-cased, body bytes)."""
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                               headers=headers or {}, data=body)
    try:
        with urllib.request.urlopen(r, timeout=timeout) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def ctl(port, method, op, obj=None):
    body = json.dumps(obj).encode() if obj is not None else None
    st, _, b = req(port, method, "/_fake" + op, {"Content-Type": "application/json"}, body)
    return st, json.loads(b)


def token(port, ttl="21600"):
    st, h, b = req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": ttl})
    assert st == 200, st
    return b.decode(), h


def get(port, path, tok):
    return req(port, "GET", path, {"X-aws-ec2-metadata-token": tok} if tok else {})


def openssl(*args, stdin=None):
    p = subprocess.run(["openssl"] + list(args), input=stdin, capture_output=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def make_ca(tmp):
    """A test CA and a leaf certificate signed by it, for --sign-cert/--sign-key."""
    ca_key, ca_crt = os.path.join(tmp, "ca.key"), os.path.join(tmp, "ca.pem")
    key, csr, crt = (os.path.join(tmp, n) for n in ("leaf.key", "leaf.csr", "leaf.pem"))
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca_crt,
         "-days", "30", "-subj", "/CN=nodesmith test IMDS CA",
         "-addext", "basicConstraints=critical,CA:true", "-addext", "keyUsage=keyCertSign"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=nodesmith test instance identity"],
        ["x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
         "-out", crt, "-days", "30", "-sha256"],
    ):
        rc, _, err = openssl(*argv)
        if rc != 0:
            raise SystemExit(f"openssl {argv[0]} failed: {err.decode()}")
    return ca_crt, crt, key


def main():
    tmp = tempfile.mkdtemp(prefix="test-fake-imds-")
    procs = []
    try:
        ca, leaf, leaf_key = make_ca(tmp)
        spot, sport = start(["--port", "0", "--instance-id", "i-0123456789abcdef0",
                             "--instance-type", "m6g.large", "--zone", "us-west-2b",
                             "--region", "us-west-2", "--life-cycle", "spot",
                             "--local-ipv4", "10.1.2.3", "--ami-id", "ami-0abcdef1234567890",
                             "--account-id", "111122223333", "--role", "nodesmith-node",
                             "--sign-cert", leaf, "--sign-key", leaf_key])
        procs.append(spot)
        cfg = os.path.join(tmp, "imds.json")
        with open(cfg, "w") as f:
            json.dump({"instance-id": "i-0fedcba9876543210", "instance_type": "c5.xlarge",
                       "zone": "us-east-1-bos-1a", "life_cycle": "on-demand",
                       "v1_allowed": True, "local_ipv4": "10.9.8.7"}, f)
        od, oport = start(["--config", cfg, "--port", "0"])
        procs.append(od)
        run(sport, oport, ca, leaf, tmp)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks} checks, {len(failures)} failed")
    return 1 if failures else 0


def run(port, oport, ca, leaf, tmp):
    # ---- tokens ------------------------------------------------------------------------
    tok, h = token(port, "300")
    check(len(tok) >= 40, "PUT /latest/api/token returns a token body")
    check(h.get("x-aws-ec2-metadata-token-ttl-seconds") == "300", "PUT echoes the granted TTL")
    for bad in (None, "0", "21601", "abc", "-5", ""):
        hdr = {} if bad is None else {"X-aws-ec2-metadata-token-ttl-seconds": bad}
        st, h2, b = req(port, "PUT", "/latest/api/token", hdr)
        check(st == 400, f"PUT with TTL {bad!r} is 400 (got {st})")
    st, _, _ = req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "1"})
    check(st == 200, "TTL 1 is accepted")
    st, _, _ = req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
    check(st == 200, "TTL 21600 is accepted")
    st, _, _ = req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60",
                                                      "X-Forwarded-For": "10.0.0.9"})
    check(st == 403, f"PUT with X-Forwarded-For is 403 (got {st})")
    st, _, _ = req(port, "PUT", "/2021-01-03/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    check(st == 403, f"PUT to a versioned token path is 403 (got {st})")

    st, h, b = get(port, "/latest/meta-data/instance-id", None)
    check(st == 401, f"v2-only: GET without token is 401 (got {st})")
    check(b"401 - Unauthorized" in b and h.get("content-type") == "text/html",
          "401 carries the HTML error page")
    st, _, _ = get(port, "/latest/meta-data/instance-id", "AQAEAnotarealtoken==")
    check(st == 401, "unknown token is 401")
    st, h, b = get(port, "/latest/meta-data/instance-id", tok)
    check(st == 200 and b == b"i-0123456789abcdef0", "GET with token returns instance-id")
    ttl_left = int(h.get("x-aws-ec2-metadata-token-ttl-seconds", "-1"))
    check(0 < ttl_left <= 300, f"GET carries the remaining TTL ({ttl_left})")
    st, h, b = req(port, "HEAD", "/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": tok})
    check(st == 200 and b == b"" and h.get("content-length") == "19", "HEAD answers like GET, no body")
    st, _, _ = req(port, "POST", "/latest/meta-data/instance-id", {"X-aws-ec2-metadata-token": tok}, b"")
    check(st == 405, f"POST to an item is 405 (got {st})")

    # TTL that really expires, through the control cap.
    st, r = ctl(port, "POST", "/token-ttl-cap", {"seconds": 1})
    check(st == 200 and r["ttl_cap"] == 1, "control sets the TTL cap")
    short, h = token(port, "21600")
    check(h.get("x-aws-ec2-metadata-token-ttl-seconds") == "1", "the cap limits the granted TTL")
    st, _, _ = get(port, "/latest/meta-data/instance-id", short)
    check(st == 200, "a fresh short token works")
    time.sleep(1.2)
    st, _, _ = get(port, "/latest/meta-data/instance-id", short)
    check(st == 401, f"an expired token is 401 (got {st})")
    st, _, _ = get(port, "/latest/meta-data/instance-id", tok)
    check(st == 200, "a token issued before the cap keeps its TTL")
    ctl(port, "POST", "/token-ttl-cap", {"seconds": None})
    st, r = ctl(port, "DELETE", "/tokens")
    st, _, _ = get(port, "/latest/meta-data/instance-id", tok)
    check(st == 401, "revoked tokens are 401")
    tok, _ = token(port)

    # ---- items -------------------------------------------------------------------------
    want = {
        "instance-id": "i-0123456789abcdef0", "instance-type": "m6g.large",
        "ami-id": "ami-0abcdef1234567890", "local-ipv4": "10.1.2.3",
        "local-hostname": "ip-10-1-2-3.us-west-2.compute.internal",
        "hostname": "ip-10-1-2-3.us-west-2.compute.internal",
        "placement/availability-zone": "us-west-2b", "placement/availability-zone-id": "usw2-az2",
        "placement/region": "us-west-2", "instance-life-cycle": "spot",
    }
    for item, value in want.items():
        st, h, b = get(port, "/latest/meta-data/" + item, tok)
        check(st == 200 and b.decode() == value, f"{item} = {value} (got {st} {b[:60]!r})")
        check(h.get("content-type") == "text/plain", f"{item} is text/plain")
    st, _, mac = get(port, "/latest/meta-data/mac", tok)
    check(st == 200 and re.fullmatch(rb"[0-9a-f]{2}(:[0-9a-f]{2}){5}", mac), "mac looks like a MAC")
    st, _, b = get(port, f"/latest/meta-data/network/interfaces/macs/{mac.decode()}/local-ipv4s", tok)
    check(st == 200 and b == b"10.1.2.3", "network/interfaces/macs/MAC/local-ipv4s")

    st, h, b = get(port, "/latest/meta-data/spot/instance-action", tok)
    check(st == 404, f"spot/instance-action is 404 before a notice (got {st})")
    check(b"404 - Not Found" in b, "404 carries the HTML error page")
    st, _, _ = get(port, "/latest/meta-data/nonexistent-item", tok)
    check(st == 404, "absent item is 404")
    st, _, _ = get(port, "/latest/meta-data/events/recommendations/rebalance", tok)
    check(st == 404, "rebalance is 404 before emission")

    # listings
    st, _, b = get(port, "/", tok)
    check(st == 200 and b"latest" in b.split(b"\n") and b"2021-01-03" in b.split(b"\n"),
          "GET / lists the versions")
    st, _, b = get(port, "/latest/", tok)
    check(st == 200 and set(b.split(b"\n")) == {b"dynamic", b"meta-data"}, f"/latest/ lists {b!r}")
    st, h, b = get(port, "/latest/meta-data/", tok)
    lines = b.decode().split("\n")
    check(st == 200 and h.get("content-type") == "text/plain", "meta-data/ listing is text/plain")
    for entry in ("instance-id", "placement/", "events/", "iam/", "local-ipv4", "instance-life-cycle"):
        check(entry in lines, f"meta-data/ lists {entry}")
    check("spot/" not in lines, "no spot/ directory before a notice")
    st, _, b = get(port, "/latest/meta-data/placement/", tok)
    check(set(b.decode().split("\n")) == {"availability-zone", "availability-zone-id", "region"},
          f"placement/ listing ({b!r})")
    st, _, b = get(port, "/latest/meta-data/placement", tok)
    check(st == 200 and b"availability-zone" in b, "a directory without trailing slash lists too")
    st, _, b = get(port, "/2021-01-03/meta-data/instance-id", tok)
    check(st == 200 and b == b"i-0123456789abcdef0", "versioned GET path works")
    st, _, _ = get(port, "/1999-01-01/meta-data/instance-id", tok)
    check(st == 404, "unknown version is 404")
    st, _, b = get(port, "/latest/dynamic/instance-identity/", tok)
    check(set(b.decode().split("\n")) == {"document", "signature", "pkcs7", "rsa2048"},
          f"instance-identity/ listing ({b!r})")

    # IAM
    st, _, b = get(port, "/latest/meta-data/iam/security-credentials/", tok)
    check(st == 200 and b == b"nodesmith-node", "security-credentials/ lists the role")
    st, h, b = get(port, "/latest/meta-data/iam/security-credentials/nodesmith-node", tok)
    creds = json.loads(b)
    check(h.get("content-type") == "text/plain" and creds["Code"] == "Success"
          and creds["Type"] == "AWS-HMAC" and creds["AccessKeyId"].startswith("ASIA")
          and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", creds["Expiration"]),
          "role credentials JSON as text/plain")

    # identity document
    st, h, docb = get(port, "/latest/dynamic/instance-identity/document", tok)
    doc = json.loads(docb)
    check(h.get("content-type") == "text/plain", "document is text/plain")
    for k, v in {"accountId": "111122223333", "architecture": "arm64",
                 "availabilityZone": "us-west-2b", "imageId": "ami-0abcdef1234567890",
                 "instanceId": "i-0123456789abcdef0", "instanceType": "m6g.large",
                 "privateIp": "10.1.2.3", "region": "us-west-2", "version": "2017-09-30"}.items():
        check(doc.get(k) == v, f"document {k} = {v} (got {doc.get(k)!r})")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc.get("pendingTime", "")) is not None,
          "document pendingTime is ISO 8601")
    check("billingProducts" in doc and doc["kernelId"] is None, "document keeps null fields")

    docf = os.path.join(tmp, "document")
    with open(docf, "wb") as f:
        f.write(docb)
    st, _, rsa = get(port, "/latest/dynamic/instance-identity/rsa2048", tok)
    check(st == 200 and b"BEGIN" not in rsa, "rsa2048 is the bare base64 body")
    pem = os.path.join(tmp, "rsa2048.pem")
    with open(pem, "wb") as f:
        f.write(b"-----BEGIN PKCS7-----\n" + rsa + b"\n-----END PKCS7-----\n")
    out = os.path.join(tmp, "out")
    rc, _, err = openssl("smime", "-verify", "-in", pem, "-inform", "PEM", "-certfile", leaf,
                         "-CAfile", ca, "-purpose", "any", "-out", out)
    check(rc == 0, f"rsa2048 verifies against the test CA: {err.decode()[:200]}")
    check(rc == 0 and open(out, "rb").read() == docb, "rsa2048 embeds exactly the document")
    rc, _, _ = openssl("smime", "-verify", "-in", pem, "-inform", "PEM", "-certfile", leaf,
                       "-noverify", "-content", docf, "-out", os.devnull)
    check(rc == 0, "rsa2048 verifies with -content document, as AWS documents it")
    rc, txt, _ = openssl("cms", "-cmsout", "-print", "-in", pem, "-inform", "PEM")
    check(rc == 0 and b"sha256" in txt and b"rsaEncryption" in txt, "rsa2048 is SHA256 with RSA")
    rc, txt, _ = openssl("x509", "-in", leaf, "-noout", "-text")
    check(b"Public-Key: (2048 bit)" in txt, "the rsa2048 signer key is 2048-bit")
    # a tampered document must not verify
    bad = os.path.join(tmp, "bad")
    with open(bad, "wb") as f:
        f.write(docb.replace(b"m6g.large", b"m6g.metal"))
    rc, _, _ = openssl("smime", "-verify", "-in", pem, "-inform", "PEM", "-certfile", leaf,
                       "-noverify", "-content", bad, "-out", os.devnull)
    check(rc != 0, "rsa2048 does not verify a tampered document")

    st, certs = ctl(port, "GET", "/signing-certs")
    dsa_pem = os.path.join(tmp, "dsa.pem")
    with open(dsa_pem, "w") as f:
        f.write(certs["pkcs7"])
    st, _, p7 = get(port, "/latest/dynamic/instance-identity/pkcs7", tok)
    p7pem = os.path.join(tmp, "pkcs7.pem")
    with open(p7pem, "wb") as f:
        f.write(b"-----BEGIN PKCS7-----\n" + p7 + b"\n-----END PKCS7-----\n")
    rc, _, err = openssl("smime", "-verify", "-in", p7pem, "-inform", "PEM", "-certfile", dsa_pem,
                         "-noverify", "-content", docf, "-out", os.devnull)
    check(rc == 0, f"pkcs7 verifies with the DSA certificate: {err.decode()[:200]}")
    rc, txt, _ = openssl("cms", "-cmsout", "-print", "-in", p7pem, "-inform", "PEM")
    check(b"sha1" in txt and b"dsa" in txt.lower(), "pkcs7 is SHA1 with DSA")
    st, _, sig = get(port, "/latest/dynamic/instance-identity/signature", tok)
    sigf, pub = os.path.join(tmp, "sig.bin"), os.path.join(tmp, "pub.pem")
    with open(sigf, "wb") as f:
        f.write(base64.b64decode(sig))
    rc, pubpem, _ = openssl("x509", "-pubkey", "-noout", "-in", leaf)
    with open(pub, "wb") as f:
        f.write(pubpem)
    rc, _, _ = openssl("dgst", "-sha256", "-verify", pub, "-signature", sigf, docf)
    check(rc == 0, "signature is base64 RSA-SHA256 over the document")

    # ---- spot, rebalance, maintenance ------------------------------------------------------
    t0 = time.time()
    st, r = ctl(port, "POST", "/spot", {"action": "terminate", "publish_in": 1})
    check(st == 200, "control schedules a spot notice")
    st, _, _ = get(port, "/latest/meta-data/spot/instance-action", tok)
    check(st == 404, "a notice published in the future is still 404")
    time.sleep(1.1)
    st, h, b = get(port, "/latest/meta-data/spot/instance-action", tok)
    check(st == 200 and h.get("content-type") == "text/plain", "instance-action appears, text/plain")
    ia = json.loads(b)
    check(set(ia) == {"action", "time"} and ia["action"] == "terminate", f"instance-action {ia}")
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", ia["time"]) is not None, "time format")
    from datetime import datetime, timezone
    when = datetime.strptime(ia["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    check(abs(when - (t0 + 1 + 120)) <= 3, f"default time is publish + 120 s ({when - t0:.1f})")
    st, _, b = get(port, "/latest/meta-data/spot/termination-time", tok)
    check(st == 200 and b.decode() == ia["time"], "termination-time matches a terminate notice")
    st, _, b = get(port, "/latest/meta-data/", tok)
    check("spot/" in b.decode().split("\n"), "meta-data/ lists spot/ once a notice exists")
    st, r = ctl(port, "POST", "/spot", {"action": "stop", "time": "2030-01-02T03:04:05Z"})
    st, _, b = get(port, "/latest/meta-data/spot/instance-action", tok)
    check(json.loads(b) == {"action": "stop", "time": "2030-01-02T03:04:05Z"}, "explicit stop time")
    st, _, _ = get(port, "/latest/meta-data/spot/termination-time", tok)
    check(st == 404, "no termination-time for a stop notice")
    st, r = ctl(port, "POST", "/spot", {"action": "hibernate"})
    st, _, b = get(port, "/latest/meta-data/spot/instance-action", tok)
    hib = json.loads(b)
    hw = datetime.strptime(hib["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    check(hib["action"] == "hibernate" and abs(hw - time.time()) <= 3, "hibernate has no warning")
    st, r = ctl(port, "POST", "/spot", {"action": "reboot"})
    check(st == 400, "an unknown spot action is refused")
    ctl(port, "DELETE", "/spot")
    st, _, _ = get(port, "/latest/meta-data/spot/instance-action", tok)
    check(st == 404, "a cleared notice is 404 again")

    st, r = ctl(port, "POST", "/rebalance", {})
    st, h, b = get(port, "/latest/meta-data/events/recommendations/rebalance", tok)
    rb = json.loads(b) if st == 200 else {}
    check(st == 200 and list(rb) == ["noticeTime"]
          and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rb["noticeTime"]) is not None,
          f"rebalance after emission: {b!r}")

    st, h, b = get(port, "/latest/meta-data/events/maintenance/scheduled", tok)
    check(st == 200 and json.loads(b) == [] and h.get("content-type") == "text/plain",
          "scheduled is [] with no events")
    st, e1 = ctl(port, "POST", "/maintenance", {"code": "system-reboot", "not_before_in": 3600})
    st, e2 = ctl(port, "POST", "/maintenance", {"code": "instance-retirement",
                                                  "not_before": "21 Jan 2019 09:00:43 GMT",
                                                  "not_after": "2019-01-21T11:00:43Z"})
    st, _, b = get(port, "/latest/meta-data/events/maintenance/scheduled", tok)
    evs = json.loads(b)
    check(len(evs) == 2, "two scheduled events")
    gmt = r"\d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT"
    for ev in evs:
        check(set(ev) >= {"NotBefore", "NotAfter", "Code", "Description", "EventId", "State"}
              and ev["State"] == "active" and re.fullmatch(gmt, ev["NotBefore"])
              and re.fullmatch(gmt, ev["NotAfter"]) and ev["EventId"].startswith("instance-event-"),
              f"event shape {ev}")
    check(evs[1]["NotBefore"] == "21 Jan 2019 09:00:43 GMT" and evs[1]["NotAfter"] == "21 Jan 2019 11:00:43 GMT",
          "explicit NotBefore/NotAfter in the documented format")
    st, c = ctl(port, "POST", f"/maintenance/{e1['EventId']}/cancel")
    check(st == 200 and c["State"] == "canceled", "cancel")
    st, c = ctl(port, "POST", f"/maintenance/{e2['EventId']}/complete")
    check(st == 200 and c["State"] == "completed", "complete")
    st, _, b = get(port, "/latest/meta-data/events/maintenance/scheduled", tok)
    check(json.loads(b) == [], "finished events leave scheduled")
    st, _, b = get(port, "/latest/meta-data/events/maintenance/history", tok)
    hist = {e["EventId"]: e["State"] for e in json.loads(b)}
    check(hist == {e1["EventId"]: "canceled", e2["EventId"]: "completed"}, f"history {hist}")
    st, _ = ctl(port, "POST", f"/maintenance/{e1['EventId']}/cancel")
    check(st == 404, "cancelling a finished event is 404")

    # ---- faults, latency, down -----------------------------------------------------------
    ctl(port, "DELETE", "/counters")
    st, rule = ctl(port, "POST", "/faults", {"path": r"/meta-data/instance-id$", "status": 503, "count": 2})
    codes = [get(port, "/latest/meta-data/instance-id", tok)[0] for _ in range(3)]
    check(codes == [503, 503, 200], f"503 twice then OK ({codes})")
    st, _, b = get(port, "/latest/meta-data/instance-type", tok)
    check(st == 200, "faults only hit matching paths")
    ctl(port, "POST", "/faults", {"path": "instance-type", "status": 429, "count": 1})
    codes = [get(port, "/latest/meta-data/instance-type", tok)[0] for _ in range(2)]
    check(codes == [429, 200], f"429 throttling once ({codes})")
    ctl(port, "POST", "/faults", {"path": "api/token", "status": 500, "count": 1})
    st, _, _ = req(port, "PUT", "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    check(st == 500, "faults can hit the token PUT")
    ctl(port, "POST", "/faults", {"path": "local-ipv4", "hang": 1.0, "count": 1})
    t = time.monotonic()
    try:
        get_timeout = req(port, "GET", "/latest/meta-data/local-ipv4",
                          {"X-aws-ec2-metadata-token": tok}, timeout=0.4)
        check(False, f"a hang answers nothing ({get_timeout[0]})")
    except (socket.timeout, TimeoutError, urllib.error.URLError, ConnectionError) as e:
        check(time.monotonic() - t < 1.0, f"a hang makes the client time out ({e})")
    st, c = ctl(port, "GET", "/counters")
    check(c["faults_injected"] == 5, f"counters count injected faults ({c['faults_injected']})")
    check(c["by_status"].get("503") == 2 and c["by_status"].get("429") == 1, "counters by status")
    check(c["by_path"].get("GET /latest/meta-data/instance-id") == 3, "counters by path")
    ctl(port, "DELETE", "/faults")

    ctl(port, "POST", "/latency", {"seconds": 0.3})
    t = time.monotonic()
    st, _, _ = get(port, "/latest/meta-data/instance-id", tok)
    check(st == 200 and time.monotonic() - t >= 0.3, "latency is added")
    ctl(port, "POST", "/latency", {"seconds": 0})

    ctl(port, "POST", "/down")
    try:
        st = get(port, "/latest/meta-data/instance-id", tok)[0]
        check(False, f"down drops connections (got {st})")
    except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as e:
        check(True, "down drops connections")
    st, r = ctl(port, "POST", "/up")
    check(st == 200 and get(port, "/latest/meta-data/instance-id", tok)[0] == 200, "up again")
    ctl(port, "POST", "/disabled", {"disabled": True})
    check(get(port, "/latest/meta-data/instance-id", tok)[0] == 403, "disabled endpoint is 403")
    ctl(port, "POST", "/disabled", {"disabled": False})

    # keep-alive: several requests over one connection
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("PUT", "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    r1 = conn.getresponse()
    t2 = r1.read().decode()
    sock = conn.sock
    conn.request("GET", "/latest/meta-data/instance-id", headers={"X-aws-ec2-metadata-token": t2})
    r2 = conn.getresponse()
    b2 = r2.read()
    conn.request("GET", "/latest/meta-data/nope", headers={"X-aws-ec2-metadata-token": t2})
    r3 = conn.getresponse()
    r3.read()
    check(r1.version == 11 and r2.status == 200 and b2 == b"i-0123456789abcdef0" and r3.status == 404
          and conn.sock is sock, "HTTP/1.1 keep-alive over one connection")
    conn.close()

    # ---- second instance: --config, on-demand, v1 allowed -----------------------------------
    st, h, b = get(oport, "/latest/meta-data/instance-id", None)
    check(st == 200 and b == b"i-0fedcba9876543210", "v1 mode answers tokenless GETs")
    check("x-aws-ec2-metadata-token-ttl-seconds" not in h, "no TTL header without a token")
    st, _, _ = get(oport, "/latest/meta-data/instance-id", "bogus")
    check(st == 401, "v1 mode still refuses an invalid token")
    otok, _ = token(oport)
    st, h, b = get(oport, "/latest/meta-data/instance-type", otok)
    check(b == b"c5.xlarge" and "x-aws-ec2-metadata-token-ttl-seconds" in h, "--config values apply")
    st, _, b = get(oport, "/latest/meta-data/placement/region", otok)
    check(b == b"us-east-1", f"region of a Local Zone is derived, not truncated ({b!r})")
    st, _, b = get(oport, "/latest/meta-data/instance-life-cycle", otok)
    check(b == b"on-demand", "instance-life-cycle on-demand")
    st, r = ctl(oport, "POST", "/spot", {})
    check(st == 409, "no spot notice for an on-demand instance")
    st, _, _ = get(oport, "/latest/meta-data/iam/security-credentials/", otok)
    check(st == 404, "no role, no security-credentials/")
    st, _, b = get(oport, "/latest/dynamic/instance-identity/document", otok)
    check(json.loads(b)["architecture"] == "x86_64", "x86_64 for c5")
    check(time.monotonic() < DEADLINE, "finished within the time budget")


if __name__ == "__main__":
    sys.exit(main())
