#!/usr/bin/env python3
"""The agent against AWS's own IMDS mock, amazon-ec2-metadata-mock v1.13.0 (the one the Node
Termination Handler is tested with; built from its Go module by `make aws-tools`), IMDSv2 only,
on 127.0.0.1, beside the project's fake (test_imds_notices.py).

The mock has no control API: what it serves is fixed when it starts (subcommand, delays, config
file). So the test runs three mocks one after the other on the same port, as one instance's IMDS
whose answers change, with one coordinator and one agent throughout:

  A `spot --action terminate`, rebalance recommendation after 8 s, interruption after 16 s:
    the identity from the mock reaches the coordinator; the recommendation is reported and only
    reported; the interruption drains the node by its deadline (now + 2 min, as the mock says).
    The mock answers a new `time` (request time + 2 min) and `noticeTime` (request time) on every
    request: shown here, and the agent still holds one notice each, first seen once, with the
    deadline first announced.
  B `events --code instance-stop --state active`, NotBefore on a single-digit day (the mock
    writes "5 Mar 2027 09:00:43 GMT", not zero-padded): the spot notice and the recommendation are
    withdrawn, the maintenance event is reported with the mock's EventId, code and both times, and
    drains the node by NotBefore. The new mock does not know the agent's token: it answers 401,
    the agent takes a new token and carries on.
  C the same event `--state canceled`: withdrawn, the drain withdrawn with it."""
import calendar
import datetime as dt
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import (BUILD, GiB, Coordinator, Proc, TestDir, binary, free_port,  # noqa: E402
                       make_pki, make_root, wait_for)

AEMM = os.path.join(BUILD, "ec2-metadata-mock", "ec2-metadata-mock")
POLL = 0.25
REPORT = "5s"
INSTANCE = "i-0c1d2e3f4a5b60718"
EVENT_ID = "instance-event-0c1d2e3f4a5b6071"
REBALANCE_DELAY, SPOT_DELAY = 8, 16


def iso_ms(s):
    return calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ")) * 1000


def mock_config(path):
    """Overrides of the mock's default metadata: one instance, consistent everywhere."""
    doc = {"accountId": "123456789012", "architecture": "x86_64", "availabilityZone": "us-west-2b",
           "imageId": "ami-0b69ea66ff7391e80", "instanceId": INSTANCE, "instanceType": "c6a.2xlarge",
           "pendingTime": "2026-11-26T09:00:00Z", "privateIp": "10.0.1.23", "region": "us-west-2",
           "version": "2017-09-30"}
    values = {"instance-id": INSTANCE, "instance-type": "c6a.2xlarge",
              "placement-availability-zone": "us-west-2b", "placement-availability-zone-id":
              "usw2-az2", "placement-region": "us-west-2", "instance-life-cycle": "spot",
              "local-ipv4": "10.0.1.23", "event-id": EVENT_ID}
    with open(path, "w") as f:
        json.dump({"metadata": {"values": values},
                   "dynamic": {"values": {"instance-identity-document": doc}}}, f)


class Mock:
    """One amazon-ec2-metadata-mock process on 127.0.0.1:port, IMDSv2 only."""

    def __init__(self, d, name, port, cfg, args):
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.proc = Proc(name, [AEMM, "--imdsv2", "--hostname", "127.0.0.1", "--port", str(port),
                                "--config-file", cfg] + args, d, env={"HOME": d})
        self.log_path = self.proc.log_path
        self.started = time.monotonic()
        # one token for the test's own reads: the mock keeps tokens in a map without a lock, so
        # the test takes it once (for the first mock, before the agent starts polling)
        self.tok = wait_for(f"{name} answering", self.token, 15, 0.05)

    def token(self):
        req = urllib.request.Request(self.base + "/latest/api/token", method="PUT", data=b"",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.read().decode()

    def get(self, path):
        req = urllib.request.Request(self.base + "/latest/" + path,
                                     headers={"X-aws-ec2-metadata-token": self.tok})
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        rc = self.proc.stop()
        assert rc in (0, -15, 2), f"mock exit {rc}"  # Go's default SIGTERM: killed by the signal


def main():
    if not os.access(AEMM, os.X_OK):
        raise SystemExit(f"{AEMM} not built: run make aws-tools")
    with TestDir("imds-mock") as d:
        run(d)
    print("test_imds_mock: OK")
    return 0


def run(d):
    pki = make_pki(d)
    cfg = os.path.join(d, "aemm-config.json")
    mock_config(cfg)
    port = free_port()
    coord = Coordinator(d, pki, insecure=True, interval=REPORT).start()
    root = make_root(os.path.join(d, "root"), cpus=8, mem_bytes=16 * GiB)

    # --- A: spot subcommand: rebalance recommendation, then the interruption ------------------
    mock = Mock(d, "aemm-spot", port, cfg, ["spot", "--action", "terminate", "--mock-delay-sec",
                                             str(SPOT_DELAY), "--rebalance-delay-sec",
                                             str(REBALANCE_DELAY)])
    agent = Proc("agent", [binary("nodesmith-agent"), "--coordinator", coord.url, "--insecure",
                           "--root", root, "--token-file", pki["token_file"], "--node-name",
                           "node-aemm", "--report-interval", REPORT, "--log-level", "debug",
                           "--imds-endpoint", mock.base,
                           "--imds-poll-interval", f"{int(POLL * 1000)}ms"], d)

    def agent_log():
        with open(agent.log_path, errors="replace") as f:
            return f.read()

    def node():
        return coord.nodes().get(INSTANCE)

    def notices(kind=None):
        n = node() or {}
        return [x for x in n.get("notices", []) if kind is None or x.get("kind") == kind]

    n = wait_for("node identified from the mock", node, 10)
    identified_after = time.monotonic() - mock.started
    assert n["instanceType"] == "c6a.2xlarge" and n["zone"] == "us-west-2b", n
    assert "SPOT" in n["capacityType"].upper(), n
    assert identified_after < REBALANCE_DELAY, f"identity took {identified_after:.1f}s"
    assert n["notices"] == [] and n["action"] == "run", n
    print(f"identity: {INSTANCE}, c6a.2xlarge in us-west-2b, spot, from the mock "
          f"{identified_after:.1f}s after it started; no notice yet")

    reb = wait_for("rebalance recommendation", lambda: notices("KIND_REBALANCE"),
                   REBALANCE_DELAY + 10)[0]
    seen_at = time.monotonic() - mock.started
    assert seen_at >= REBALANCE_DELAY - 1, f"recommendation before the mock served it ({seen_at:.1f}s)"
    assert reb["eventId"].startswith("rebalance@") and reb["action"] == "rebalance", reb
    assert not notices("KIND_SPOT_INTERRUPTION")
    assert node()["action"] == "run", node()  # a recommendation is reported, not acted on
    print(f"rebalance: reported {seen_at:.1f}s after the mock started (delay {REBALANCE_DELAY}s); "
          "the node keeps running")

    spot = wait_for("spot interruption", lambda: notices("KIND_SPOT_INTERRUPTION"),
                    SPOT_DELAY + 10, 0.05)[0]
    seen_at = time.monotonic() - mock.started
    assert seen_at >= SPOT_DELAY - 1, seen_at
    assert spot["action"] == "terminate", spot
    assert spot["eventId"] == "terminate@" + time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(spot["deadlineUnixMs"] / 1000)), spot
    lead = (spot["deadlineUnixMs"] - spot["firstSeenUnixMs"]) / 1000
    assert 115 <= lead <= 121, f"deadline {lead:.1f}s after first seen (the mock: now + 2 min)"
    n = wait_for("drain directive",
                 lambda: (lambda x: x if x["action"] == "drain" else None)(node()), 10)
    assert n["drainReason"] == "spot-interruption", n
    assert n["drainDeadlineUnixMs"] == spot["deadlineUnixMs"], n
    wait_for("the agent told to drain",
             lambda: "Coordinator directs: drain (reason spot-interruption" in agent_log(), 10)
    print(f"spot: terminate notice {seen_at:.1f}s after the mock started, deadline first seen + "
          f"{lead:.0f}s; the coordinator drains the node by it")

    # the mock re-stamps both notices on every request ...
    st, a1 = mock.get("meta-data/spot/instance-action")
    _, r1 = mock.get("meta-data/events/recommendations/rebalance")
    time.sleep(2.2)
    _, a2 = mock.get("meta-data/spot/instance-action")
    _, r2 = mock.get("meta-data/events/recommendations/rebalance")
    assert st == 200 and json.loads(a1)["time"] != json.loads(a2)["time"], (a1, a2)
    assert json.loads(r1)["noticeTime"] != json.loads(r2)["noticeTime"], (r1, r2)
    # ... and the agent still holds the notices as first seen, the drain deadline unchanged
    time.sleep(4 * POLL)
    now = {x["kind"]: x for x in notices()}
    assert set(now) == {"KIND_SPOT_INTERRUPTION", "KIND_REBALANCE"}, now
    for k, first in (("KIND_SPOT_INTERRUPTION", spot), ("KIND_REBALANCE", reb)):
        for f in ("eventId", "deadlineUnixMs", "firstSeenUnixMs"):
            assert now[k].get(f) == first.get(f), (k, f, now[k], first)
    assert node()["drainDeadlineUnixMs"] == spot["deadlineUnixMs"], node()
    log = agent_log()
    assert len(re.findall(r"\[notice\] IMDS: spot interruption terminate@", log)) == 1, log[-3000:]
    assert len(re.findall(r"\[notice\] IMDS: rebalance recommendation rebalance@", log)) == 1, log[-3000:]
    assert "withdrawn" not in log, log[-3000:]
    print(f"moving times: the mock said {json.loads(a1)['time']} then {json.loads(a2)['time']}; "
          f"the agent kept {spot['eventId']}, new once, never withdrawn")
    mock.stop()

    # --- B: events subcommand: an active instance-stop on a single-digit day -------------------
    today = dt.date.today()
    nb_date = (today.replace(day=1) + dt.timedelta(days=40)).replace(day=5)
    not_before = f"{nb_date.isoformat()}T09:00:43Z"
    not_after = f"{nb_date.isoformat()}T11:00:43Z"
    event_args = ["events", "--code", "instance-stop", "--not-before", not_before,
                  "--not-after", not_after, "--not-before-deadline", not_after]
    tokens_before = agent_log().count("IMDS token obtained")
    mock = Mock(d, "aemm-events", port, cfg, event_args + ["--state", "active"])
    st, body = mock.get("meta-data/events/maintenance/scheduled")
    assert st == 200 and f'"NotBefore": "{nb_date.day} ' in body, body  # not zero-padded

    m = wait_for("maintenance event", lambda: notices("KIND_MAINTENANCE"), 20)[0]
    wait_for("spot notice and recommendation withdrawn",
             lambda: [x["kind"] for x in notices()] == ["KIND_MAINTENANCE"], 10)
    assert m["eventId"] == EVENT_ID and m["action"] == "instance-stop", m
    assert m["deadlineUnixMs"] == iso_ms(not_before), (m, not_before)
    assert m["notAfterUnixMs"] == iso_ms(not_after), (m, not_after)
    assert m["description"] == "The instance is scheduled for instance-stop", m
    n = wait_for("drain for the maintenance", lambda: (lambda x: x if x.get("drainReason") ==
                                                       "scheduled-maintenance" else None)(node()), 10)
    assert n["action"] == "drain" and n["drainDeadlineUnixMs"] == iso_ms(not_before), n
    assert "Invalid token provided" in mock.log(), mock.log()[-2000:]
    assert agent_log().count("IMDS token obtained") > tokens_before
    print(f"maintenance: {EVENT_ID} instance-stop, NotBefore {not_before} read from the mock's "
          f"'{nb_date.day} ...' date; spot and rebalance withdrawn; the old token refused (401) "
          "and replaced")
    mock.stop()

    # --- C: the same event canceled ---------------------------------------------------------------
    mock = Mock(d, "aemm-canceled", port, cfg, event_args + ["--state", "canceled"])
    t0 = time.monotonic()
    wait_for("maintenance withdrawn", lambda: not notices(), 20, 0.05)
    wait_for("drain withdrawn", lambda: node()["action"] == "run", 10)
    wait_for("the agent told to run",
             lambda: "Coordinator directs: run (drain withdrawn)" in agent_log(), 10)
    print(f"canceled: event withdrawn {time.monotonic() - t0:.2f}s after the mock said so; the "
          "node runs again")

    assert agent.alive()
    assert agent.stop() == 0, agent_log()[-2000:]
    mock.stop()
    assert coord.proc.stop() == 0


if __name__ == "__main__":
    sys.exit(main())
