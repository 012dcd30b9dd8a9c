#!/usr/bin/env python3
"""The agent and systemd-logind's shutdown delay lock, on a private D-Bus system bus.

A dbus-daemon of our own plays the system bus and tests/tools/fakelogind plays logind (the
Manager's Inhibit, InhibitDelayMaxUSec and PrepareForShutdown). The agent takes a delay lock at
start; when a shutdown is announced it reports a shutdown notice at once, and releases the lock
once the coordinator has it, well before the delay is over; a cancelled shutdown withdraws the
notice and the agent takes the lock again. Without any system bus the agent runs on and says so
once."""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import GiB, Coordinator, Proc, TestDir, agent_argv, binary, make_pki, make_root, wait_for  # noqa: E402

DBUS_CONF = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
  </policy>
</busconfig>
"""

DELAY_MS = 8000


def main():
    with TestDir("logind") as d:
        sock = os.path.join(d, "system_bus_socket")
        conf = os.path.join(d, "dbus.conf")
        with open(conf, "w") as f:
            f.write(DBUS_CONF.format(path=sock))
        bus = Proc("dbus-daemon", ["dbus-daemon", "--config-file", conf, "--nofork", "--nopidfile"], d)
        wait_for("system bus socket", lambda: os.path.exists(sock), 10)
        address = f"unix:path={sock}"
        logind = Proc("fakelogind", [binary("fakelogind"), address, "--delay-ms", str(DELAY_MS)], d)
        wait_for("fake logind ready", lambda: "ready" in logind.output(), 10)

        pki = make_pki(d)
        coord = Coordinator(d, pki, interval="5s").start()
        root = make_root(os.path.join(d, "root"), cpus=2, mem_bytes=4 * GiB)
        argv = agent_argv(coord, root, "i-logind")
        agent = Proc("agent", argv, d, env={"DBUS_SYSTEM_BUS_ADDRESS": address})
        wait_for("delay lock taken", lambda: "inhibit who=nodesmith-agent what=shutdown mode=delay" in logind.output(), 10)
        wait_for("node registered", lambda: "i-logind" in coord.nodes(), 10)

        # --- a shutdown: notice at once, lock released once the coordinator has it ----------------
        t0 = time.time()
        logind.p.send_signal(signal.SIGUSR1)

        def shutdown_notice():
            n = coord.nodes()["i-logind"]
            return [x for x in n.get("notices", []) if x.get("kind") == "KIND_SHUTDOWN"]
        notes = wait_for("shutdown notice at the coordinator", shutdown_notice, 4, interval=0.02)
        took = time.time() - t0
        deadline = notes[0]["deadlineUnixMs"] / 1000
        assert abs(deadline - (t0 + DELAY_MS / 1000)) < 1.0, (deadline, t0)
        n = wait_for("drain directive", lambda: (lambda x: x if x["action"] == "drain" else None)(
            coord.nodes()["i-logind"]), 5)
        assert n["drainReason"] == "shutdown", n
        out = wait_for("logind proceeds", lambda: re.search(r"proceeding: (.*) after ([0-9.]+)s", logind.output()), 8)
        assert out.group(1) == "locks released", logind.output()
        assert float(out.group(2)) < DELAY_MS / 1000 / 2, out.group(0)
        print(f"shutdown: notice at the coordinator after {took:.2f}s; lock released after {out.group(2)}s "
              f"of {DELAY_MS / 1000:.0f}s")
        assert agent.alive()

        # --- cancelled: notice withdrawn, lock taken again ---------------------------------------
        logind.p.send_signal(signal.SIGUSR2)
        wait_for("shutdown notice withdrawn", lambda: not shutdown_notice(), 5, interval=0.05)
        wait_for("drain withdrawn", lambda: coord.nodes()["i-logind"]["action"] == "run", 5)
        wait_for("lock taken again", lambda: logind.output().count("inhibit who=nodesmith-agent") == 2, 5)
        print("cancelled: notice withdrawn and the delay lock taken again")
        assert agent.stop() == 0

        # --- no system bus at all: the agent runs on and says so once -----------------------------
        lonely = Proc("agent-nobus", argv[:], d, env={"DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={d}/none"})
        wait_for("agent reports without a bus", lambda: "Connected to coordinator" in lonely.output(), 10)
        time.sleep(1)
        assert lonely.alive()
        assert lonely.output().count("running without a shutdown delay lock") == 1, lonely.output()
        assert lonely.stop() == 0
        print("no system bus: agent runs on, one notice in its log")
        coord.proc.stop()
        logind.stop()
        bus.stop()
    print("test_logind: OK")


if __name__ == "__main__":
    main()
