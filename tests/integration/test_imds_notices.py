#!/usr/bin/env python3
"""IMDSv2 identity and interruption notices, end to end on 127.0.0.1.

The fake IMDS (tests/fakes/imds.py) behind a small pass-through proxy owned by this test (it can
replace one item's body, which the fake cannot), a coordinator, and an agent given no identity
flags. Shown: the identity from IMDS reaches `nodesmithctl nodes`; a spot notice reaches the
coordinator with its deadline within about one poll interval although the report interval is
long; the same notice is never new twice; short token lifetimes and revoked tokens are survived;
IMDS down for 30 s then back: the agent keeps running and catches the next notice; malformed,
mistyped, absurd and oversized bodies of each endpoint are rejected, logged once, and change
nothing; a canceled maintenance event is withdrawn."""
import calendar
import http.client
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import (GiB, Coordinator, Proc, TestDir, binary, make_pki, make_root,  # noqa: E402
                       wait_for)

POLL = 0.25          # --imds-poll-interval
REPORT = "5s"        # the coordinator's report interval: notices must not wait for it
INSTANCE = "i-0a1b2c3d4e5f60718"


class Rewriter:
    """Pass-through HTTP proxy in front of the fake; overrides[path] = (status, body) replaces
    the answer to a GET of that path. An upstream failure closes the connection unanswered,
    like the fake's own 'down'."""

    def __init__(self, upstream_port):
        self.upstream = upstream_port
        self.overrides = {}
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def relay(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                ov = outer.overrides.get(self.path) if self.command == "GET" else None
                try:
                    c = http.client.HTTPConnection("127.0.0.1", outer.upstream, timeout=5)
                    hdrs = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                    c.request(self.command, self.path, body=body, headers=hdrs)
                    r = c.getresponse()
                    data = r.read()
                    status, headers = r.status, r.getheaders()
                    c.close()
                except Exception:
                    self.close_connection = True
                    return
                if ov and status in (200, 404):
                    status, data = ov[0], ov[1].encode() if isinstance(ov[1], str) else ov[1]
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("content-length", "connection", "server", "date",
                                         "transfer-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = relay

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.srv.handle_error = lambda request, address: None  # the agent hangs up on huge bodies
        self.port = self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def ctl(base, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read() or b"null")


def iso_ms(s):
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")) * 1000


def gmt_ms(s):
    return calendar.timegm(time.strptime(s, "%d %b %Y %H:%M:%S GMT")) * 1000


def main():
    with TestDir("imds") as d:
        pki = make_pki(d)
        fake = Proc("imds", [sys.executable, os.path.join(os.path.dirname(__file__), "..", "fakes",
                                                          "imds.py"),
                             "--port", "0", "--instance-id", INSTANCE, "--instance-type",
                             "m5.xlarge", "--zone", "us-west-2b", "--life-cycle", "spot",
                             "--local-ipv4", "10.0.1.23"], d)
        port = int(wait_for("fake IMDS port", lambda: re.search(
            r"listening on 127\.0\.0\.1:(\d+)", fake.output()).group(1), 15))
        fk = f"http://127.0.0.1:{port}/_fake"
        proxy = Rewriter(port)
        try:
            run(d, pki, fake, fk, proxy)
        finally:
            proxy.stop()
    print("test_imds_notices: OK")
    return 0


def run(d, pki, fake, fk, proxy):
    coord = Coordinator(d, pki, insecure=True, interval=REPORT).start()
    root = make_root(os.path.join(d, "root"), cpus=4, mem_bytes=16 * GiB)
    agent = Proc("agent", [binary("nodesmith-agent"), "--coordinator", coord.url, "--insecure",
                           "--root", root, "--token-file", pki["token_file"], "--node-name",
                           "node-imds", "--report-interval", REPORT, "--log-level", "debug",
                           "--imds-endpoint", f"http://127.0.0.1:{proxy.port}",
                           "--imds-poll-interval", f"{int(POLL * 1000)}ms"], d)

    def node():
        return coord.nodes().get(INSTANCE)

    def notices(kind=None):
        n = node() or {}
        return [x for x in n.get("notices", []) if kind is None or x.get("kind") == kind]

    def log_count(pattern):
        return len(re.findall(pattern, agent.output()))

    # --- identity from IMDS --------------------------------------------------------------------
    n = wait_for("node identified from IMDS", node, 10)
    assert n["instanceType"] == "m5.xlarge", n
    assert n["zone"] == "us-west-2b", n
    assert "SPOT" in n["capacityType"].upper(), n
    assert n["notices"] == [], n
    table = subprocess.run([binary("nodesmithctl"), "nodes", "--coordinator", coord.http],
                           capture_output=True, text=True, timeout=10, check=True).stdout
    row = [line for line in table.splitlines() if INSTANCE in line]
    assert row and "m5.xlarge" in row[0] and "us-west-2b" in row[0], table
    print("identity: instance id, type, zone and capacity type from IMDS")

    # --- spot notice: arrives within about one poll interval, with the right deadline ----------
    time.sleep(1.0)  # let the first report be answered: what follows is a change, not a start
    spot = ctl(fk, "POST", "/spot", {"action": "terminate", "in_seconds": 120})
    t0 = time.monotonic()
    got = wait_for("spot notice at the coordinator", lambda: notices("KIND_SPOT_INTERRUPTION"), 5,
                   0.02)
    delay = time.monotonic() - t0
    s = got[0]
    assert s["deadlineUnixMs"] == iso_ms(spot["time"]), (s, spot)
    assert s["eventId"] == f"terminate@{spot['time']}", s
    assert s["action"] == "terminate", s
    assert abs(s["firstSeenUnixMs"] / 1000 - time.time()) < 5, s
    assert delay < POLL + 1.0, f"spot notice took {delay:.2f}s (poll {POLL}s, report {REPORT})"
    print(f"spot notice: at the coordinator {delay:.2f}s after publication (poll {POLL}s)")
    first_seen = s["firstSeenUnixMs"]
    # policy: a spot notice drains the node, by its deadline, forced
    n = wait_for("drain directive", lambda: (lambda x: x if x["action"] == "drain" else None)(node()), 5)
    assert n["drainReason"] == "spot-interruption" and n["drainDeadlineUnixMs"] == s["deadlineUnixMs"], n
    wait_for("the agent told to drain", lambda: "Coordinator directs: drain (reason spot-interruption"
             in agent.output(), 5)

    # --- token: short TTLs are refreshed before expiry; a revoked token is replaced once -------
    ctl(fk, "DELETE", "/counters")
    ctl(fk, "POST", "/token-ttl-cap", {"seconds": 2, "apply_to_existing": True})
    # the cut token is refused once (401), then a 2 s token replaces it
    wait_for("a token with the capped TTL", lambda: ctl(fk, "GET", "/counters")["token_puts"] >= 1,
             5)
    time.sleep(0.5)
    ctl(fk, "DELETE", "/counters")
    time.sleep(4.0)
    c = ctl(fk, "GET", "/counters")
    assert c["token_puts"] >= 2, c
    gets = sum(v for k, v in c["by_path"].items() if k.startswith("GET "))
    assert gets >= 8, c
    assert c["by_status"].get("401", 0) == 0, c  # refreshed at half the TTL: never late
    # back to long tokens, then revoke the one in use: a 401, a new token, the same requests again
    ctl(fk, "POST", "/token-ttl-cap", {"seconds": None})
    ctl(fk, "DELETE", "/counters")
    wait_for("a long token", lambda: ctl(fk, "GET", "/counters")["token_puts"] >= 1, 5)
    time.sleep(0.5)
    ctl(fk, "DELETE", "/counters")
    ctl(fk, "DELETE", "/tokens")

    def renewed():
        c = ctl(fk, "GET", "/counters")
        return c["by_status"].get("401", 0) >= 1 and c["token_puts"] == 1
    wait_for("401 answered with a new token", renewed, 5)
    before = sum(v for k, v in ctl(fk, "GET", "/counters")["by_status"].items() if k == "200")
    wait_for("polling goes on after the 401", lambda: ctl(fk, "GET", "/counters")["by_status"]
             .get("200", 0) > before + 4, 5)
    assert ctl(fk, "GET", "/counters")["by_status"].get("401", 0) <= 3  # one per poll, once
    assert agent.alive()
    assert [x["firstSeenUnixMs"] for x in notices("KIND_SPOT_INTERRUPTION")] == [first_seen]
    print(f"token: {c['token_puts']} tokens in 4 s with a 2 s TTL; revoked token replaced")

    # --- IMDS down for 30 s, then back ---------------------------------------------------------
    ctl(fk, "DELETE", "/spot")
    wait_for("spot notice withdrawn", lambda: not notices("KIND_SPOT_INTERRUPTION"), 5, 0.05)
    ctl(fk, "POST", "/down")
    time.sleep(30.0)  # IMDS gone for 30 s: the agent backs off (at most 10 s) and stays up
    assert agent.alive(), agent.output()[-2000:]
    ctl(fk, "POST", "/up")
    reb = ctl(fk, "POST", "/rebalance", {})
    t0 = time.monotonic()
    got = wait_for("rebalance notice after IMDS came back", lambda: notices("KIND_REBALANCE"), 15)
    assert got[0]["eventId"] == f"rebalance@{reb['noticeTime']}", got
    # policy: the spot notice is gone, so is its drain; a rebalance recommendation only reports
    assert node()["action"] == "run", node()
    assert "Coordinator directs: run (drain withdrawn)" in agent.output()
    assert agent.alive()
    assert log_count(r"IMDS answering again") >= 1, agent.output()[-3000:]
    print(f"down 30 s then up: agent kept running, rebalance caught {time.monotonic() - t0:.1f}s after up")

    # --- throttled (429): back off, no busy loop, carry on afterwards --------------------------
    ctl(fk, "POST", "/faults", {"path": "spot/instance-action", "status": 429, "count": None})
    ctl(fk, "DELETE", "/counters")
    time.sleep(3.0)
    c = ctl(fk, "GET", "/counters")
    ctl(fk, "DELETE", "/faults")
    throttled = c["by_status"].get("429", 0)
    # without back-off the agent would poll about 3 s / 0.25 s = 12 times
    assert 1 <= throttled <= 6, c
    assert agent.alive()
    assert log_count(r"IMDS meta-data/spot/instance-action: HTTP 429; retrying with back-off") >= 1
    print(f"throttled: {throttled} spot polls in 3 s of 429s (poll every {POLL}s without them)")

    # --- malformed answers of each endpoint: rejected, logged once, nothing changes ------------
    spot = ctl(fk, "POST", "/spot", {"action": "stop", "in_seconds": 600})
    wait_for("stop notice", lambda: notices("KIND_SPOT_INTERRUPTION"), 5)
    ev = ctl(fk, "POST", "/maintenance", {"code": "system-reboot", "not_before_in": 3600,
                                          "duration": 7200})
    wait_for("maintenance notice", lambda: notices("KIND_MAINTENANCE"), 5)
    baseline = sorted((x["kind"], x["eventId"], x["firstSeenUnixMs"]) for x in notices())
    assert len(baseline) == 3, baseline

    huge = '{"action": "terminate", "time": "2030-01-01T00:00:00Z", "pad": "' + "x" * 100000 + '"}'
    bad = {
        "/latest/meta-data/spot/instance-action": [
            "not json", '{"action": "terminate", "time": 1700000000}',
            '{"action": "explode", "time": "2030-01-01T00:00:00Z"}',
            '{"action": "terminate", "time": "1970-01-01T00:00:00Z"}',
            '{"action": "terminate", "time": "2030-02-31T00:00:00Z"}', '[]', huge],
        "/latest/meta-data/events/recommendations/rebalance": [
            "{", '{"noticeTime": null}', '{"noticeTime": "yesterday"}',
            '{"noticeTime": "9999-01-01T00:00:00Z"}'],
        "/latest/meta-data/events/maintenance/scheduled": [
            '{"EventId": "x"}', '[{"EventId": 5}]', '[1, 2]',
            '[{"NotBefore": "31 Feb 2030 09:00:43 GMT", "Code": "system-reboot", "EventId": '
            '"instance-event-0bad", "NotAfter": "1 Mar 2030 09:00:43 GMT", "State": "active"}]',
            '[{"NotBefore": "21 Jan 2030 09:00:43", "Code": "system-reboot", "EventId": '
            '"instance-event-0bad", "NotAfter": "21 Jan 2030 11:00:43 GMT", "State": "active"}]'],
    }
    names = {"/latest/meta-data/spot/instance-action": "spot/instance-action",
             "/latest/meta-data/events/recommendations/rebalance":
                 "events/recommendations/rebalance",
             "/latest/meta-data/events/maintenance/scheduled": "events/maintenance/scheduled"}
    for path, bodies in bad.items():
        for body in bodies:
            proxy.overrides[path] = (200, body)
            time.sleep(3 * POLL)
            assert agent.alive(), agent.output()[-2000:]
            now = sorted((x["kind"], x["eventId"], x["firstSeenUnixMs"]) for x in notices())
            assert now == baseline, (path, body[:80], now, baseline)
        del proxy.overrides[path]
        name = re.escape(names[path])
        assert log_count(rf"\[warning\] IMDS {name}: answer rejected \(") == 1, agent.output()[-4000:]
        wait_for(f"{names[path]} valid again", lambda: log_count(rf"IMDS {name}: answers valid again")
                 >= 1, 5)
    print(f"malformed: {sum(len(v) for v in bad.values())} bad bodies over 3 endpoints rejected, "
          "each endpoint logged once, notices unchanged")

    # --- each notice was new exactly once ------------------------------------------------------
    assert log_count(r"IMDS: spot interruption stop@") == 1, agent.output()[-3000:]
    assert log_count(r"IMDS: scheduled maintenance " + re.escape(ev["EventId"]) + r" \(") == 1

    # --- maintenance canceled: withdrawn -------------------------------------------------------
    m = notices("KIND_MAINTENANCE")[0]
    assert m["eventId"] == ev["EventId"], m
    assert m["action"] == "system-reboot", m
    assert m["deadlineUnixMs"] == gmt_ms(ev["NotBefore"]), (m, ev)
    assert m["notAfterUnixMs"] == gmt_ms(ev["NotAfter"]), (m, ev)
    ctl(fk, "POST", f"/maintenance/{ev['EventId']}/cancel")
    t0 = time.monotonic()
    wait_for("maintenance notice withdrawn", lambda: not notices("KIND_MAINTENANCE"), 5, 0.05)
    print(f"maintenance: canceled event withdrawn after {time.monotonic() - t0:.2f}s")
    assert len(notices("KIND_SPOT_INTERRUPTION")) == 1 and len(notices("KIND_REBALANCE")) == 1

    assert agent.alive()
    assert agent.stop() == 0, agent.output()[-2000:]
    assert coord.proc.stop() == 0
    assert fake.stop() in (0, -15)


if __name__ == "__main__":
    sys.exit(main())
