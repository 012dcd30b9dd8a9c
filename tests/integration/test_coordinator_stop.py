#!/usr/bin/env python3
"""The coordinator stops cleanly on SIGTERM while its HTTP endpoints are being polled.

Four threads poll /metrics, /healthz and /api/v1/nodes as fast as they can; the coordinator gets
SIGTERM and must exit 0 within 5 s, 15 times over. Before the fix in coordinator/http/httpd.c a
request queued for the loop as it ended deadlocked nng_http_server_stop() (about one stop in
five hung)."""
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import Coordinator, TestDir, make_pki  # noqa: E402

ROUNDS = 15


def main():
    with TestDir("coordinator-stop") as d:
        pki = make_pki(d)
        answered = 0
        for i in range(ROUNDS):
            c = Coordinator(d, pki, interval="1s", extra=["--log-level", "warning"], name=f"coord-{i}").start()
            stop = threading.Event()
            counts = []

            def poll(path):
                n = 0
                while not stop.is_set():
                    try:
                        urllib.request.urlopen(c.http + path, timeout=2).read()
                        n += 1
                    except Exception:
                        pass
                counts.append(n)

            threads = [threading.Thread(target=poll, args=(p,)) for p in
                       ("/metrics", "/metrics", "/healthz", "/api/v1/nodes")]
            for t in threads:
                t.start()
            time.sleep(0.3)
            t0 = time.monotonic()
            c.proc.p.send_signal(signal.SIGTERM)
            try:
                rc = c.proc.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - t0
            stop.set()
            for t in threads:
                t.join()
            c.proc.stop(timeout=1)
            answered += sum(counts)
            assert rc == 0, f"round {i}: the coordinator did not exit within 5 s of SIGTERM (rc {rc})"
            assert took < 5, took
        assert answered > ROUNDS * 4, f"the pollers were answered only {answered} times"
        print(f"{ROUNDS} stops under HTTP polling ({answered} answers): each exited 0 at once")
    print("test_coordinator_stop: OK")


if __name__ == "__main__":
    main()
