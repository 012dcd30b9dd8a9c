#!/usr/bin/env python3
"""Agent attestation (strong mode) end to end on 127.0.0.1.

The local stack's EC2 (moto behind tests/fakes/ec2proxy.py), its fake API server and a
coordinator with cluster-name set (attestation auto = required) that trusts the stack's test
signing certificate in place of AWS's regional one. Each agent has its own fake IMDS
(tests/fakes/imds.py) serving an identity document signed with that certificate, or with another
key, and its own root (so its own boot id). Shown:
  - a valid document: the agent registers, "Attestation accepted" is logged;
  - a forged signature (a key the coordinator does not trust), another instance's document, an
    untagged instance, a replayed document (the same document from a second agent boot while the
    first is alive), a stale pendingTime and a terminated instance are all refused: a log line
    naming the reason, nodesmith_attestation_refused_total{reason=...} counts it, the agent gets
    the refusal a wrong token gets, and the coordinator's model does not change (no node, the
    first agent's registration kept);
  - once accepted, the agent leaves its document out of its reports; a restarted coordinator
    refuses that once (no_document), gets the document with the next report and accepts it."""
import calendar
import json
import os
import re
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from nsharness import GiB, Proc, TestDir, make_root, metric, wait_for  # noqa: E402
from stack import FAKES, LocalStack  # noqa: E402


def iso(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def main():
    with TestDir("attestation") as d:
        with LocalStack(d, report_interval="1s", kube="real") as s:
            run(d, s)
    print("test_attestation: OK")
    return 0


def run(d, s):
    s.start_ec2()
    s.start_kube()
    fast = ("--stale-after", "30s", "--lease-duration", "2s")
    clog = s.start_coordinator(*fast)
    assert re.search(r"Attestation required: \d+ trusted signer", clog.output()), clog.output()[-2000:]

    ok_id = s.run_instance("m5.large")
    forged_id = s.run_instance("m5.large")
    other_id = s.run_instance("m5.large")
    untagged_id = s.run_instance("m5.large", cluster=False)
    stale_id = s.run_instance("m5.large")
    gone_id = s.run_instance("m5.large")
    s.terminate(gone_id)
    desc = s.instances()
    assert desc[gone_id]["State"]["Name"] in ("shutting-down", "terminated"), desc[gone_id]["State"]
    assert not any(t["Key"] == "nodesmith.io/cluster" for t in desc[untagged_id].get("Tags", []))

    def launched(iid):
        return iso(calendar.timegm(desc[iid]["LaunchTime"].utctimetuple()))

    signer = s.imds_signer
    n_imds = [0]

    def imds(iid, pending=None, signed=True):
        """A fake IMDS for instance iid whose document carries pendingTime (default: its EC2
        LaunchTime), signed with the stack's test certificate or, signed=False, a throwaway key."""
        n_imds[0] += 1
        cfg = {"instance_id": iid, "instance_type": "m5.large", "zone": "us-east-1a",
               "region": s.region, "pending_time": pending or launched(iid)}
        if signed:
            cfg.update(signer)
        path = os.path.join(d, f"imds-{n_imds[0]}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = Proc(f"imds-{n_imds[0]}", [sys.executable, os.path.join(FAKES, "imds.py"), "--port", "0",
                                       "--config", path], d)
        port = wait_for("fake IMDS port", lambda: (lambda m: int(m.group(1)) if m else None)(
            re.search(r"listening on 127\.0\.0\.1:(\d+)", p.output())), 20)
        return f"http://127.0.0.1:{port}"

    n_agents = [0]

    def agent(endpoint, instance_id=None):
        n_agents[0] += 1
        name = f"agent-{n_agents[0]}"
        root = make_root(os.path.join(d, name), cpus=2, mem_bytes=8 * GiB)
        argv = [s.binary("nodesmith-agent"), "--coordinator", s.agent_endpoint, "--root", root,
                "--token-file", s.pki["token_file"], "--tls-ca", s.pki["ca"], "--tls-server-name",
                "localhost", "--node-name", name, "--report-interval", "1s", "--log-level", "debug",
                "--imds-endpoint", endpoint, "--imds-poll-interval", "500ms", "--logind", "no",
                "--kubeconfig", os.path.join(d, "no-kubeconfig")]
        if instance_id:
            argv += ["--instance-id", instance_id]
        p = Proc(name, argv, d)
        with open(os.path.join(root, "proc/sys/kernel/random/boot_id")) as f:
            p.boot_id = f.read().strip()
        return p

    def nodes():
        return s.coordinator_nodes()

    def s_metrics():
        with urllib.request.urlopen(s.coordinator_http + "/metrics", timeout=5) as r:
            return r.read().decode()

    def refused(reason):
        return metric(s_metrics(), "nodesmith_attestation_refused_total", {"reason": reason}) or 0

    def expect_refused(what, agent_proc, instance_id, reason):
        line = wait_for(f"{what}: refusal logged", lambda: re.search(
            rf"Attestation refused for {instance_id} \(agent boot {agent_proc.boot_id[:8]}\.\.\.\): [^\n]*\[{reason}\]",
            clog.output()), 20)
        wait_for(f"{what}: nodesmith_attestation_refused_total{{reason={reason}}}",
                 lambda: refused(reason) >= 1, 10)
        wait_for(f"{what}: the agent told", lambda: "Coordinator refused this agent: attestation refused"
                 in agent_proc.output(), 10)
        print(f"{what}: refused [{reason}]: {line.group(0)[:160]}")

    # --- a valid document: accepted, the node registers ------------------------------------
    ok_imds = imds(ok_id)
    first = agent(ok_imds)
    wait_for("the attested agent registered", lambda: ok_id in nodes(), 30)
    assert re.search(rf"Attestation accepted for {ok_id} \(agent boot {first.boot_id[:8]}\.\.\.\)", clog.output())
    assert metric(s_metrics(), "nodesmith_attestation_accepted_total") >= 1
    assert "Coordinator refused this agent" not in first.output(), first.output()[-1500:]
    print(f"valid document: {ok_id} accepted and registered")
    unauth0 = metric(s_metrics(), "nodesmith_reports_total", {"result": "unauthenticated"}) or 0

    # --- forged signature: a key the coordinator does not trust -----------------------------
    forged = agent(imds(forged_id, signed=False))
    expect_refused("forged signature", forged, forged_id, "bad_signature")

    # --- another instance's document: the agent claims other_id with ok_id's document -------
    thief = agent(ok_imds, instance_id=other_id)
    expect_refused("another instance's document", thief, other_id, "instance_mismatch")

    # --- an instance without this cluster's tag ---------------------------------------------
    untagged = agent(imds(untagged_id))
    expect_refused("untagged instance", untagged, untagged_id, "untagged")

    # --- replay: ok_id's document from a second agent boot while the first is alive ---------
    replay = agent(ok_imds)
    expect_refused("replayed document", replay, ok_id, "replay")

    # --- a document from an earlier boot (pendingTime is not the instance's LaunchTime) -----
    stale = agent(imds(stale_id, pending=iso(time.time() - 7200)))
    expect_refused("stale pendingTime", stale, stale_id, "stale_document")

    # --- a terminated instance -------------------------------------------------------------
    gone = agent(imds(gone_id))
    expect_refused("terminated instance", gone, gone_id, "not_running")

    # --- nothing refused changed the model ---------------------------------------------------
    time.sleep(2.5)  # a few more report rounds of every agent
    n = nodes()
    assert set(n) == {ok_id}, sorted(n)
    assert ok_id in nodes() and re.search(rf"Attestation accepted for {ok_id} ", clog.output())
    assert len(re.findall(rf"Attestation accepted for {ok_id} ", clog.output())) == 1, \
        "the replaying boot was never accepted"
    m = s_metrics()
    assert (metric(m, "nodesmith_reports_total", {"result": "unauthenticated"}) or 0) >= unauth0 + 6, m
    for p in (first, forged, thief, untagged, replay, stale, gone):
        assert p.alive(), f"{p.name} exited: {p.output()[-800:]}"
    assert "Connected to coordinator" in first.output()
    for p in (forged, thief, untagged, replay, stale, gone):
        assert "Connected to coordinator" not in p.output(), f"{p.name} was let in: {p.output()[-800:]}"
    # one log line per instance and reason, not one per report
    assert len(re.findall(rf"Attestation refused for {forged_id} ", clog.output())) == 1, clog.output()[-3000:]
    print("refused agents changed nothing: one node, the first boot's; refusals logged once each")

    # --- once accepted, the agent leaves its document out; a restarted coordinator, which holds
    # no attestation, refuses that and gets the document with the next report --------------------
    wait_for("the accepted agent leaves its document out",
             lambda: "attestation: the identity document is left out" in first.output(), 10)
    for p in (forged, thief, untagged, replay, stale, gone):
        p.stop()
    clog.kill()
    clog2 = s.start_coordinator(*fast, name="coordinator-2")
    wait_for("re-attested by the restarted coordinator", lambda: re.search(
        rf"Attestation accepted for {ok_id} \(agent boot {first.boot_id[:8]}\.\.\.\)", clog2.output()), 30)
    assert re.search(rf"Attestation refused for {ok_id} \(agent boot {first.boot_id[:8]}\.\.\.\): [^\n]*\[no_document\]",
                     clog2.output()), clog2.output()[-3000:]
    wait_for("registered again", lambda: ok_id in nodes(), 10)
    print("restarted coordinator: the document left out is asked for again; the agent re-attested")


if __name__ == "__main__":
    sys.exit(main())
