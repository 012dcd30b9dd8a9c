#!/usr/bin/env python3
# test-run: alone (thousands of connections and RSS figures: nothing runs beside it)
"""F2, F9: what anyone who can reach the agent port (the pod network) can do before presenting the
token. A coordinator with the shipped defaults (TLS, max-message 1Mi, 64 unauthenticated
connections, 8 per source, auth-timeout 10s) on 127.0.0.1; attackers from 127.0.x.y.

  1. 3 000 TCP connections that never send a TLS hello: beyond 64 shut down at once, the rest
     when auth-timeout passes; memory stays flat.
  2. 160 connections (20 sources x 8) each announcing a max-message report and withholding its
     last byte: 64 admitted, the rest refused as they arrive (per source, in total); the 64 closed
     at auth-timeout; memory bounded by 64 x max-message.
  3. A message larger than max-message: the connection is closed, nothing allocated.
  4. 30 reports of 1 MiB of unknown fields with a wrong token: refused before anything is
     unpacked; memory back where it was (the scratch arena does not keep them).
  5. F9: an instance id carrying a newline and a priority prefix, with no token: logged on one line,
     escaped; no forged line.
Throughout, a real agent keeps reporting (it registers once the flood's connections are gone) and
the coordinator's RSS stays under the Deployment's 512Mi limit; each figure is printed."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
from attacklib import (MiB, Link, MemoryWatch, agent_report, identity, m, node_state, report,  # noqa: E402
                       rss, unknown_fields)
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, make_pki, make_root, wait_for  # noqa: E402

AUTH_TIMEOUT = 10.0


def source(i):
    return f"127.0.{1 + i // 250}.{2 + i % 250}"


def open_quietly(url, ca, src, **kw):
    try:
        return Link(url, ca, source=src, **kw)
    except OSError:
        return None  # refused at the handshake: what the limits are for


def still_open(links):
    return [x for x in links if x and not x.closed()]


def no_tls_hello(coord, mem):
    links = [open_quietly(coord.url, None, source(i), handshake=False) for i in range(3000)]
    mem.sample()
    wait_for("all but 64 hello-less connections shut down",
             lambda: mem.sample() and len(still_open(links)) <= 64, 10, 0.5)
    kept = len(still_open(links))
    t0 = time.time()
    wait_for("the rest shut down at auth-timeout", lambda: mem.sample() and not still_open(links),
             AUTH_TIMEOUT + 10, 0.5)
    took = time.time() - t0
    text = coord.metrics()
    assert m(text, "nodesmith_link_connections_closed_total", {"reason": "handshake-limit"}) + \
        m(text, "nodesmith_link_connections_closed_total", {"reason": "handshake-timeout"}) >= 2990, \
        [x for x in text.splitlines() if "link" in x]
    assert m(text, "nodesmith_link_connections_closed_total", {"reason": "handshake-timeout"}) >= 1
    for x in links:
        x and x.close()
    mem.report(f"1. 3000 connections without a TLS hello: {kept} kept past the first sweep, closed "
               f"{took:.1f}s later")


def refused_or_shut(text):
    return m(text, "nodesmith_link_connections_refused_total", {"limit": "max-unauthenticated"}) + \
        m(text, "nodesmith_link_connections_refused_total", {"limit": "max-unauthenticated-per-source"}) + \
        m(text, "nodesmith_link_connections_closed_total", {"reason": "handshake-limit"})


def partial_messages(coord, mem):
    before = refused_or_shut(coord.metrics())
    links = []
    for s in range(20):
        for k in range(8):
            x = open_quietly(coord.url, coord.pki["ca"], source(s))
            if x is None:
                continue
            try:
                x.send_partial(1 * MiB, 1 * MiB - 1)
            except OSError:
                x.close()
                continue
            links.append(x)
        mem.sample()
    time.sleep(1.5)
    mem.sample()
    text = coord.metrics()
    unauth = m(text, "nodesmith_link_connections", {"state": "unauthenticated"})
    refused = refused_or_shut(text) - before  # at admission, or still in their handshake
    alive = len(still_open(links))
    assert unauth <= 64, [x for x in text.splitlines() if "link" in x]
    assert refused >= 160 - 64 - 8, (refused, text)  # a handful may still sit in their handshake
    assert alive <= 64, alive
    # a ninth from one source is refused even with room in total
    wait_for("the 64 closed at auth-timeout", lambda: mem.sample() and not still_open(links), AUTH_TIMEOUT + 10, 0.5)
    text = coord.metrics()
    assert m(text, "nodesmith_link_connections_closed_total", {"reason": "auth-timeout"}) >= 1, text
    for x in links:
        x.close()
    mem.report(f"2. 160 connections each holding a 1 MiB report short of its last byte: {unauth:.0f} admitted, "
               f"{refused:.0f} refused or shut at once (caps), all closed at auth-timeout")

    same = [open_quietly(coord.url, coord.pki["ca"], source(401)) for k in range(12)]
    for x in same:
        if x:
            try:
                x.send_partial(100, 10)
            except OSError:
                pass
    time.sleep(2)
    kept = len(still_open(same))
    text = coord.metrics()
    assert kept <= 8, kept
    assert m(text, "nodesmith_link_connections_refused_total", {"limit": "max-unauthenticated-per-source"}) + \
        m(text, "nodesmith_link_connections_closed_total", {"reason": "handshake-limit"}) >= 4, \
        [x for x in text.splitlines() if "link" in x]
    for x in same:
        x and x.close()
    print(f"2. 12 unauthenticated connections from one address: {kept} kept (max-unauthenticated-per-source 8)")


def oversized(coord, mem):
    x = Link(coord.url, coord.pki["ca"], source=source(500))
    x.send_partial(64 * MiB, 1000)
    assert x.closed(5), "a 64 MiB announcement was not refused"
    x.close()
    mem.report("3. a message announced at 64 MiB (over max-message): connection closed")


def unknown_field_reports(coord, mem):
    rss_before = rss(coord.proc.pid)[0]
    before = m(coord.metrics(), "nodesmith_reports_total", {"result": "unauthenticated"})
    body = agent_report("not-the-token-at-all", "i-0flood", "b", 1, extra=unknown_fields(MiB - 4096))
    for i in range(30):
        d = report(coord.url, coord.pki["ca"], body, source=source(600 + i))
        assert d["status"] == "UNAUTHENTICATED", d
        mem.sample()
    after = mem.report("4. 30 wrong-token reports of 1 MiB of unknown fields")
    assert m(coord.metrics(), "nodesmith_reports_total", {"result": "unauthenticated"}) - before == 30
    assert after < rss_before + 24 * MiB, f"memory kept: {rss_before / MiB:.0f} MiB before, {after / MiB:.0f} MiB after"
    print(f"4. RSS {rss_before / MiB:.0f} MiB before these reports, {after / MiB:.0f} MiB after")


def forged_log_line(coord):
    evil = "i-0evil\n<0>nodesmith-coordinator[emerg] FORGED"
    d = report(coord.url, coord.pki["ca"], agent_report("wrong-token-wrong-token", evil, "b", 1,
                                                        node_state(identity(evil, "b", "n"))))
    assert d["status"] == "UNAUTHENTICATED", d
    wait_for("the refusal logged", lambda: "i-0evil" in coord.proc.output(), 15, 0.2)
    out = coord.proc.output()
    assert not any(line.startswith("<0>") or line.startswith("nodesmith-coordinator[emerg] FORGED")
                   for line in out.splitlines()), "a forged log line"
    line = next(x for x in out.splitlines() if "i-0evil" in x)
    assert "\\x0a<0>" in line, line
    print(f"5. an instance id with a newline and a priority prefix, no token: one line, escaped: {line.strip()[:110]}")


def main():
    with TestDir("sec-preauth") as d:
        pki = make_pki(d)
        # JOURNAL_STREAM: the coordinator writes "<N>" priority prefixes as under systemd/journald
        coord = Coordinator(d, pki, interval="1s", env={**os.environ, "JOURNAL_STREAM": "8:1"}).start()
        coord.pki = pki
        mem = MemoryWatch(coord.proc.pid)
        root = make_root(os.path.join(d, "root-a"), cpus=2, mem_bytes=4 * GiB)
        agent = Proc("agent-a", agent_argv(coord, root, "i-0aaaa"), d)

        forged_log_line(coord)  # first: refusals are logged at most once every 10 s
        no_tls_hello(coord, mem)
        partial_messages(coord, mem)
        oversized(coord, mem)
        unknown_field_reports(coord, mem)

        wait_for("the real agent registered and reporting", lambda: "i-0aaaa" in coord.nodes() and
                 coord.nodes()["i-0aaaa"]["lastReportAgeSeconds"] < 3, 30, 0.5)
        assert agent.alive() and coord.proc.alive()
        mem.report("after every flood, the real agent reporting")

        # F4: the boot secret survives an agent restart within the boot (kept 0600 under its root)
        secret_file = os.path.join(root, "run", "nodesmith", "boot-secret")
        assert oct(os.stat(secret_file).st_mode & 0o777) == "0o600", oct(os.stat(secret_file).st_mode)
        agent.kill()
        refused = m(coord.metrics(), "nodesmith_reports_total", {"result": "unauthenticated"})
        t0 = time.time()
        again = Proc("agent-a2", agent_argv(coord, root, "i-0aaaa"), d)
        wait_for("the restarted agent accepted", lambda: "Connected to coordinator" in again.output(), 20, 0.2)
        assert m(coord.metrics(), "nodesmith_reports_total", {"result": "unauthenticated"}) == refused
        print(f"F4. agent restarted within the boot: accepted again after {time.time() - t0:.1f}s with the secret "
              f"it kept in {secret_file} (0600), no refusal")
    print("test_preauth_flood: OK")


if __name__ == "__main__":
    main()
