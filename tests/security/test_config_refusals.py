#!/usr/bin/env python3
"""F5, F8, F10: what the shipped defaults refuse.

  F5.  Attestation is on by default: a coordinator without cluster-name (nothing to attest
       against) refuses to start unless attestation=off is given, and then says so at warning.
  F10. A bootstrap token or TLS key that others may read (0644, 0666) or its group may write is
       refused, naming the file, by the coordinator and by the agent; 0600 and 0440 are taken.
  F8.  An EC2 answer carrying a DTD ("billion laughs", 842 bytes that used to become a 1 GB
       string): the coordinator refuses it unread, its memory flat, and keeps serving."""
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
sys.path.insert(0, os.path.dirname(__file__))
from attacklib import MiB, MemoryWatch, agent_report, identity, m, node_state, pod, report  # noqa: E402
from nsharness import (ROOT, Coordinator, TestDir, binary, free_port, make_pki, make_root,  # noqa: E402
                       wait_for, GiB)
from realkube import RealKube  # noqa: E402

LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "' + b"a" * 64 + b'">'
          + b"".join(b'<!ENTITY %c "%s">' % (c, (b"&%c;" % (c - 1)) * 10) for c in range(ord("b"), ord("j")))
          + b']><DescribeInstanceTypesResponse><instanceTypeSet><item><instanceType>&i;</instanceType>'
          + b'</item></instanceTypeSet></DescribeInstanceTypesResponse>')


def run(argv, timeout=20):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def coordinator_argv(d, pki, *extra, token_file=None, key=None):
    return [binary("nodesmith-coordinator"), "--listen", f"tls+tcp://127.0.0.1:{free_port()}",
            "--http-listen", f"http://127.0.0.1:{free_port()}", "--api-listen", f"http://127.0.0.1:{free_port()}",
            "--api-auth", "none", "--tls-cert", pki["cert"],
            "--tls-key", key or pki["key"], "--token-file", token_file or pki["token_file"], *extra]


def f5(d, pki):
    out = run(coordinator_argv(d, pki, "--check-config"))
    assert out.returncode != 0 and "attestation=required needs cluster-name" in out.stderr, out.stderr
    print(f"F5. no cluster-name, attestation not set: refused: {out.stderr.strip().splitlines()[-1][:150]}")
    out = run(coordinator_argv(d, pki, "--attestation", "auto", "--check-config"))
    assert out.returncode != 0 and "attestation 'auto'" in out.stderr, out.stderr
    c = Coordinator(d, pki, extra=["--attestation", "off"], name="coord-off").start()
    assert "Attestation off (set explicitly)" in c.proc.output() and "[warning]" in c.proc.output()
    c.proc.stop()
    print("F5. attestation=off only when given, logged at warning")


def f10(d, pki):
    for mode, ok in ((0o644, False), (0o666, False), (0o620, False), (0o600, True), (0o440, True)):
        tok = os.path.join(d, f"token-{mode:o}")
        key = os.path.join(d, f"key-{mode:o}")
        shutil.copy(pki["token_file"], tok)
        shutil.copy(pki["key"], key)
        os.chmod(tok, mode)
        os.chmod(key, mode)
        out = run(coordinator_argv(d, pki, "--attestation", "off", "--check-config", token_file=tok))
        assert (out.returncode == 0) == ok, (mode, out.stderr)
        if not ok:
            assert f"token-file {tok} may be read or written by others" in out.stderr, out.stderr
        # the key is read when the link starts: a short run
        c = subprocess.Popen(coordinator_argv(d, pki, "--attestation", "off", key=key), stderr=subprocess.PIPE,
                             text=True)
        try:
            rc = c.wait(timeout=3)
        except subprocess.TimeoutExpired:
            rc = None
            c.terminate()
            c.wait(timeout=10)
        err = c.stderr.read()
        assert (rc is None) == ok, (mode, rc, err)
        if not ok:
            assert f"tls-key {key} may be read or written by others" in err, err
        root = make_root(os.path.join(d, f"root-{mode:o}"), cpus=2, mem_bytes=2 * GiB)
        out = run([binary("nodesmith-agent"), "--coordinator", "tcp://127.0.0.1:1", "--insecure", "--root", root,
                   "--token-file", tok, "--instance-id", "i-0x", "--imds", "no", "--check-config"])
        assert (out.returncode == 0) == ok, (mode, out.stderr)
        print(f"F10. token and key with mode {mode:o}: {'taken' if ok else 'refused by the coordinator and the agent'}")


class Ec2Laughs(http.server.BaseHTTPRequestHandler):
    served = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Ec2Laughs.served += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(LAUGHS)))
        self.end_headers()
        self.wfile.write(LAUGHS)

    def log_message(self, *a):
        pass


def f8(d, pki):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ec2Laughs)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    # the coordinator needs a Kubernetes API to start: the real control plane, as admin
    kube = RealKube(d, log=None).start(packaging=False, fault_proxy=False, audit=False)
    try:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_EC2_METADATA_DISABLED": "true"}
        c = Coordinator(d, pki, name="coord-laughs", env=env, extra=[
            "--cluster-name", "laughs", "--attestation", "off", "--kubeconfig", kube.c.kubeconfig, "--leader-elect", "no",
            "--ec2-endpoint", f"http://127.0.0.1:{srv.server_port}", "--catalog-refresh", "1h",
            "--catalog", os.path.join(ROOT, "data", "catalog-us-east-1.json"),
            "--price-table", os.path.join(ROOT, "data", "ec2-on-demand-prices-us-east-1.json")]).start()
        mem = MemoryWatch(c.proc.pid)
        wait_for("EC2 asked (and answered with entities)", lambda: Ec2Laughs.served >= 1 and mem.sample(), 30, 0.2)
        time.sleep(3)
        assert c.proc.alive()
        now = mem.report(f"F8. {len(LAUGHS)}-byte EC2 answer with a DTD of nested entities, {Ec2Laughs.served} served")
        assert now < mem.base + 64 * MiB, now
        line = [x for x in c.proc.output().splitlines() if "DescribeInstanceTypes" in x or "catalog" in x.lower()]
        assert line and "Bad message" in line[-1], line
        print("F8. coordinator: " + line[-1].strip()[:170])
        c.proc.stop()
    finally:
        srv.shutdown()
        kube.stop()


def f5_state_budget(d, pki):
    """50 fake nodes each storing a ~0.9 MiB report, against max-state-memory 32Mi (attestation off,
    as only an explicit setting allows): the budget holds, the rest are refused as overloaded."""
    c = Coordinator(d, pki, name="coord-budget", extra=["--attestation", "off", "--max-state-memory", "32Mi"]).start()
    mem = MemoryWatch(c.proc.pid)
    token = open(pki["token_file"]).read().strip()
    results = {}
    for i in range(50):
        iid = f"i-0fake{i:012d}"
        st = node_state(identity(iid, "b", f"fake-{i}"), pods=[pod("t", "p", "u", "x" * (900 * 1024))])
        r = report(c.url, pki["ca"], agent_report(token, iid, "b", 1, st))
        results[r["status"]] = results.get(r["status"], 0) + 1
        mem.sample()
    text = c.metrics()
    assert results.get("OVERLOADED", 0) >= 10 and results.get("OK", 0) >= 10, results
    assert m(text, "nodesmith_reports_total", {"result": "overloaded"}) == results["OVERLOADED"]
    now = mem.report(f"F5. 50 fake nodes x 0.9 MiB against max-state-memory 32Mi: {results.get('OK', 0)} stored, "
                     f"{results['OVERLOADED']} refused (overloaded)")
    assert now < mem.base + 96 * MiB, now
    c.proc.stop()


def main():
    with TestDir("sec-config") as d:
        pki = make_pki(d)
        f5(d, pki)
        f5_state_budget(d, pki)
        f10(d, pki)
        f8(d, pki)
    print("test_config_refusals: OK")


if __name__ == "__main__":
    main()
