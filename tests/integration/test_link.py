#!/usr/bin/env python3
"""The agent <-> coordinator link, end to end over TLS on 127.0.0.1.

A coordinator and three agents with fake node roots of different sizes: all three appear in
`nodesmithctl nodes` with the allocatable the kubelet would compute; a wrong token is refused,
logged, counted and changes nothing; garbage, truncated, oversized and wrong-version messages are
refused while the coordinator keeps serving the others; a coordinator killed and restarted has
every agent back within two report intervals."""
import math
import os
import resource
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import (GiB, MiB, Coordinator, Proc, TestDir, agent_argv, binary, make_pki,  # noqa: E402
                       free_port, http_get, make_root, metric, wait_for)

INTERVAL = 1.0


def eks_cpu_reserved(cores):
    m = 0.0
    for c in range(1, cores + 1):
        m += 60 if c == 1 else 10 if c == 2 else 5 if c <= 4 else 2.5
    return math.ceil(m)


def ephemeral(root):
    st = os.statvfs(os.path.join(root, "var/lib/kubelet"))
    return st.f_blocks * st.f_frsize


def poke(coord, mode, *extra):
    out = subprocess.run([binary("linkpoke"), coord.url, mode, "--ca", coord.pki["ca"],
                          "--server-name", "localhost", *extra], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def main():
    with TestDir("link") as d:
        pki = make_pki(d)
        coord = Coordinator(d, pki, interval="1s").start()

        # --- three nodes of different sizes -------------------------------------------------
        ra = make_root(os.path.join(d, "root-a"), cpus=2, mem_bytes=4 * GiB,
                       kubelet_config={"apiVersion": "kubelet.config.k8s.io/v1beta1",
                                       "kind": "KubeletConfiguration", "maxPods": 29})
        rb = make_root(os.path.join(d, "root-b"), cpus=4, mem_bytes=16 * GiB,
                       eni_max_pods={"m5.large": 29, "m5.xlarge": 58})
        rc = make_root(os.path.join(d, "root-c"), cpus=8, mem_bytes=32 * GiB, hugepages_2m=512,
                       gpus=1, kubelet_config="""\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
maxPods: 50
kubeReserved:
  cpu: 200m
  memory: 1Gi
  ephemeral-storage: 2Gi
systemReserved:
  cpu: 100m
  memory: 512Mi
evictionHard:
  memory.available: 200Mi
  nodefs.available: "15%"
""", dropins={"10-max-pods.conf": '{"kind": "KubeletConfiguration", "maxPods": 110}'})

        expect = {
            "i-aaaa": {"cpuMillis": 2000 - eks_cpu_reserved(2),
                       "memoryBytes": 4 * GiB - (11 * 29 + 255) * MiB - 100 * MiB,
                       "pods": 29,
                       "ephemeralStorageBytes": ephemeral(ra) - GiB - ephemeral(ra) // 10},
            "i-bbbb": {"cpuMillis": 4000 - eks_cpu_reserved(4),
                       "memoryBytes": 16 * GiB - (11 * 58 + 255) * MiB - 100 * MiB,
                       "pods": 58,
                       "ephemeralStorageBytes": ephemeral(rb) - GiB - ephemeral(rb) // 10},
            "i-cccc": {"cpuMillis": 8000 - 200 - 100,
                       "memoryBytes": 32 * GiB - GiB - 512 * MiB - 200 * MiB - 512 * 2 * MiB,
                       "pods": 110, "gpus": 1,
                       "ephemeralStorageBytes": ephemeral(rc) - 2 * GiB - int(ephemeral(rc) * 15 / 100.0)},
        }
        assert expect["i-aaaa"]["cpuMillis"] == 1930 and expect["i-bbbb"]["cpuMillis"] == 3920

        agents = {
            "i-aaaa": Proc("agent-a", agent_argv(coord, ra, "i-aaaa", "t3.medium"), d),
            "i-bbbb": Proc("agent-b", agent_argv(coord, rb, "i-bbbb", "m5.xlarge", "us-east-1b"), d),
            "i-cccc": Proc("agent-c", agent_argv(coord, rc, "i-cccc", "g4dn.2xlarge", "us-east-1c"), d),
        }
        nodes = wait_for("three nodes in nodesmithctl nodes",
                         lambda: (lambda n: n if set(expect) <= set(n) else None)(coord.nodes()), 15)
        for iid, want in expect.items():
            got = nodes[iid]["allocatable"]
            for k, v in want.items():
                assert got.get(k, 0) == v, f"{iid} allocatable {k}: got {got.get(k)} want {v}"
        assert nodes["i-bbbb"]["zone"] == "us-east-1b"
        assert nodes["i-cccc"]["instanceType"] == "g4dn.2xlarge"
        table = subprocess.run([binary("nodesmithctl"), "nodes", "--coordinator", coord.http],
                               capture_output=True, text=True, check=True).stdout
        print(table)
        for iid in expect:
            assert f"ip-{iid}" in table and iid in table, table
        assert "1930m/3422Mi/29" in table, table
        print("three agents registered with the expected allocatable")

        def all_fresh():
            n = coord.nodes()
            return all(iid in n and n[iid]["lastReportAgeSeconds"] < 2.5 * INTERVAL for iid in expect)

        # --- a wrong token is refused, logged, counted, and changes nothing --------------------
        bad_token = os.path.join(d, "bad-token")
        with open(bad_token, "w") as f:
            f.write("this-is-not-the-right-token\n")
        os.chmod(bad_token, 0o600)  # a token others may read is refused before it is ever sent
        rbad = make_root(os.path.join(d, "root-bad"), cpus=2, mem_bytes=2 * GiB)
        bad = Proc("agent-bad", agent_argv(coord, rbad, "i-bad0", token_file=bad_token), d)
        wait_for("unauthenticated counter",
                 lambda: (metric(coord.metrics(), "nodesmith_reports_total",
                                 {"result": "unauthenticated"}) or 0) >= 1, 10)
        wait_for("refusal in the coordinator log", lambda: "wrong bootstrap token" in coord.proc.output(), 5)
        wait_for("refusal in the agent log", lambda: "refused this agent" in bad.output(), 5)
        assert "i-bad0" not in coord.nodes()
        assert poke(coord, "report", "--token", "nope", "--instance-id", "i-poke1").startswith(
            "status=STATUS_UNAUTHENTICATED")
        assert "i-poke1" not in coord.nodes()
        bad.stop()
        print("wrong token refused")

        # --- garbage, truncated, wrong version, oversized: refused, others keep being served ----
        before = metric(coord.metrics(), "nodesmith_reports_total", {"result": "ok"})
        assert poke(coord, "garbage", "--size", "300").startswith("status=STATUS_INVALID")
        assert poke(coord, "truncated", "--token", pki["token"]).startswith("status=STATUS_INVALID")
        assert poke(coord, "version", "--token", pki["token"]).startswith("status=STATUS_VERSION_MISMATCH")
        assert poke(coord, "oversized", "--size", str(5 * 1024 * 1024), "--timeout", "2000") == "timeout"
        # raw bytes that are not even the SP handshake
        for payload in (b"\x00SP\x00\x00\x10\x00\x00" + os.urandom(64), os.urandom(4096), b"GET / HTTP/1.1\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", coord.port), timeout=2) as s:
                try:
                    s.sendall(payload)
                    s.settimeout(1)
                    s.recv(100)
                except OSError:
                    pass
        assert coord.proc.alive()
        assert poke(coord, "report", "--token", pki["token"], "--instance-id", "i-poke2").startswith(
            "status=STATUS_OK")
        time.sleep(2 * INTERVAL)
        wait_for("agents still reporting", all_fresh, 5)
        after = metric(coord.metrics(), "nodesmith_reports_total", {"result": "ok"})
        assert after > before + 3, (before, after)
        assert (metric(coord.metrics(), "nodesmith_reports_total", {"result": "invalid"}) or 0) >= 2
        print("garbage, truncated, oversized and wrong-version messages refused; service unaffected")

        # --- coordinator killed and restarted: agents back within two report intervals ---------
        coord.proc.kill()
        time.sleep(3)
        for iid, p in agents.items():
            assert p.alive(), f"agent {iid} exited while the coordinator was down"
        coord.proc.stop()
        coord.start()  # returns once /healthz answers: the coordinator is serving again
        t0 = time.monotonic()
        wait_for("agents back after restart",
                 lambda: set(expect) <= set(coord.nodes()), 2 * INTERVAL + 1.0, interval=0.02)
        took = time.monotonic() - t0
        print(f"agents back {took:.2f}s after the restarted coordinator was serving (limit {2 * INTERVAL:.0f}s)")
        assert took <= 2 * INTERVAL, took

        for p in agents.values():
            assert p.stop() == 0, f"{p.name} did not stop cleanly"
        assert coord.proc.stop() == 0

        # --- the soft file limit: raised to the hard one, and a hard one short of the fleet said --
        # (systemd services and containerd 2 containers start at a soft 1024)
        http = f"http://127.0.0.1:{free_port()}"
        argv = [binary("nodesmith-coordinator"), "--listen", f"tls+tcp://127.0.0.1:{free_port()}",
                "--http-listen", http, "--token-file", pki["token_file"], "--tls-cert", pki["cert"],
                "--tls-key", pki["key"], "--attestation", "off", "--max-connections", "4000",
                "--api-listen", http, "--api-auth", "none"]
        log_path = os.path.join(d, "coordinator-nofile.log")
        with open(log_path, "w") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (512, 2048)))
        try:
            wait_for("coordinator /healthz", lambda: http_get(http + "/healthz")[0] == 200, 10)
            text = http_get(http + "/metrics")[1]
            assert metric(text, "process_max_fds") == 2048, metric(text, "process_max_fds")
            assert 0 < metric(text, "process_open_fds") < 2048
            assert metric(text, "process_resident_memory_bytes") > 1 << 20
        finally:
            p.terminate()
            assert p.wait(timeout=30) == 0
        logged = open(log_path).read()
        assert "File limit raised from 512 to 2048 descriptors" in logged, logged
        assert "below max-connections (4000)" in logged, logged
        print("soft file limit 512 raised to the hard 2048; 2048 < max-connections 4000 + 256 logged")
    print("test_link: OK")


if __name__ == "__main__":
    main()
