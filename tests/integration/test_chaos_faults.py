#!/usr/bin/env python3
"""The faults the chaos runner (tests/chaos/) injects, each shown on its own.

The Kubernetes API faults (a 429 or 5xx window that lapses, one rule removed by its id, slow
answers, watch streams cut on demand or after N events, the API server restarted) come from
the fault proxy in front of the real kube-apiserver and are shown in test_kubeproxy.py.

1. The agents' Service (stack.ServiceProxy): set_cut(True) resets open connections and refuses
   new ones; set_cut(False) lets them through again.
2. Node emulator: `POST /_emu/instances/REF/agent/kill` kills an agent and starts it again after
   `restartAfter` (it reconnects to the coordinator), or leaves it down (`restartAfter: null`)
   until `agent/start`; with `--agent-restart-sec`, an agent that dies on its own is started
   again, as systemd's Restart=always does.

Run: python3 tests/integration/test_chaos_faults.py"""
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import TestDir, wait_for  # noqa: E402
from stack import LocalStack, ServiceProxy  # noqa: E402

T0 = time.monotonic()


def step(msg):
    print(f"{time.monotonic() - T0:6.1f}s  {msg}", flush=True)


class Ready(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/readyz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def link_cut():
    http_srv = ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    threading.Thread(target=http_srv.serve_forever, daemon=True).start()
    echo = socket.socket()
    echo.bind(("127.0.0.1", 0))
    echo.listen(8)

    def serve():
        while True:
            try:
                c, _ = echo.accept()
            except OSError:
                return

            def one(c=c):
                while True:
                    try:
                        data = c.recv(4096)
                    except OSError:
                        return
                    if not data:
                        return c.close()
                    c.sendall(data)
            threading.Thread(target=one, daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    svc = ServiceProxy()
    svc.add(echo.getsockname()[1], f"http://127.0.0.1:{http_srv.server_address[1]}")
    try:
        a = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
        a.sendall(b"ping")
        assert a.recv(4) == b"ping"
        svc.set_cut(True)
        assert a.recv(4) == b"", "an open connection survived the cut"
        b = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
        b.sendall(b"x")
        try:
            got = b.recv(1)
        except ConnectionError:
            got = b""
        assert got == b"", got
        svc.set_cut(False)
        c = socket.create_connection(("127.0.0.1", svc.port), timeout=5)
        c.sendall(b"pong")
        assert c.recv(4) == b"pong"
        for x in (a, b, c):
            x.close()
    finally:
        svc.stop()
        echo.close()
        http_srv.shutdown()
    step("link cut: open connection reset, new ones refused; restored: echoed again")


def agent_restarts(d):
    with LocalStack(os.path.join(d, "stack"), cluster="chaos-faults") as s:
        os.makedirs(s.workdir, exist_ok=True)
        s.start_ec2()
        s.setup_network()
        s.start_kube(grace_scale=0.05)
        s.start_coordinator()
        s.start_emulator(boot_delay=0.2, agent_args=["--report-interval", "1s"],
                         extra=["--agent-restart-sec", "0.5"])
        iid = s.run_instance("m6i.large", nodepool="p")

        def connected():
            return sum(1 for e in s.emu_events() if e["event"] == "agent-connected" and e["instance"] == iid)

        def inst():
            return s.emu("GET", f"instances/{iid}")
        wait_for("agent connected", lambda: connected() >= 1, 30, 0.2)
        pid1 = inst()["agentPid"]
        # killed, started again after restartAfter, reconnects
        out = s.emu("POST", f"instances/{iid}/agent/kill", {"signal": "KILL", "restartAfter": 0.5})
        assert out["agentAlive"] is False and out["agentRestartPending"], out
        i = wait_for("agent restarted", lambda: (lambda x: x if x["agentAlive"] else None)(inst()), 10, 0.1)
        assert i["agentPid"] != pid1 and i["agentRestarts"] == 1, i
        wait_for("the restarted agent reconnects", lambda: connected() >= 2, 20, 0.2)
        # killed and left down until started
        s.emu("POST", f"instances/{iid}/agent/kill", {"signal": "TERM", "restartAfter": None})
        time.sleep(1.5)
        i = inst()
        assert not i["agentAlive"] and not i["agentRestartPending"] and i["agentExit"] == 0, i
        try:
            s.emu("POST", f"instances/{iid}/agent/kill", {})
            raise AssertionError("killing a stopped agent was accepted")
        except AssertionError as e:
            assert "HTTP 409" in str(e), e
        s.emu("POST", f"instances/{iid}/agent/start", {})
        i = inst()
        assert i["agentAlive"] and i["agentRestarts"] == 2, i
        # dies on its own: Restart=always
        os.kill(i["agentPid"], signal.SIGKILL)
        i2 = wait_for("agent started again after dying", lambda: (lambda x: x if x["agentAlive"] and
                                                                  x["agentPid"] != i["agentPid"] else None)(inst()), 10, 0.1)
        assert i2["agentRestarts"] == 3, i2
        names = [e["event"] for e in s.emu_events() if e["instance"] == iid]
        assert names.count("agent-killed") == 2 and names.count("agent-restarted") == 3 \
            and "agent-exited" in names, names
    step("agent killed: restarted after restartAfter and reconnected; left down until started; "
         "restarted after dying on its own (--agent-restart-sec)")


def main():
    with TestDir("chaos-faults") as d:
        link_cut()
        agent_restarts(d)
    print("test_chaos_faults: OK")


if __name__ == "__main__":
    main()
