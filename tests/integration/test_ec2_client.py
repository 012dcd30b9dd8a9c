#!/usr/bin/env python3
"""The coordinator's EC2 client (coordinator/aws/ec2.c through tests/tools/ec2probe) against
tests/fakes/ec2proxy.py in front of moto: catalogue, offerings, spot prices, subnets and security
groups, the EKS AMI through SSM, launch templates, instant fleets (tags, ClientToken, ICE),
throttling retries checked in the proxy's call log, DescribeInstances by cluster tag, guarded
termination, the credential chain (environment, shared file, web identity through moto's STS,
IMDS through tests/fakes/imds.py) and SigV4 end to end with moto checking signatures.

Run: python3 tests/integration/test_ec2_client.py   (exit 0 = pass; about 30 s)
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import nsharness  # noqa: E402

import botocore.session  # noqa: E402
from botocore.config import Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROXY = os.path.join(HERE, "..", "fakes", "ec2proxy.py")
IMDS = os.path.join(HERE, "..", "fakes", "imds.py")
CLUSTER = "itest"
EKS_PARAM = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)
    else:
        print(f"ok: {what}", flush=True)




def boto(port, service, ak="AKIAIOSFODNN7EXAMPLE", sk="dummy"):
    return botocore.session.get_session().create_client(
        service, region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=ak, aws_secret_access_key=sk,
        config=Config(retries={"total_max_attempts": 1}))


def ctl(port, method, op, obj=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/_fake{op}", method=method,
                                 data=json.dumps(obj).encode() if obj is not None else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def container_credentials_server(token):
    """What the EKS Pod Identity agent serves: credentials for a request carrying the token."""
    import http.server
    import threading
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            ok = self.headers.get("Authorization") == token
            body = json.dumps({"AccessKeyId": "ASIAPODIDENTITY", "SecretAccessKey": "s", "Token": "t",
                               "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))}
                              if ok else {"message": "bad token"}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1], seen


def probe(port, *args, ak="AKIAIOSFODNN7EXAMPLE", sk="dummy", env=None, creds=True):
    argv = [nsharness.binary("ec2probe"), "--endpoint", f"http://127.0.0.1:{port}",
            "--ssm-endpoint", f"http://127.0.0.1:{port}", "--cluster", CLUSTER]
    if creds:
        argv += ["--access-key", ak, "--secret-key", sk]
    e = dict(os.environ)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
              "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_SHARED_CREDENTIALS_FILE",
              "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
              "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_CONTAINER_AUTHORIZATION_TOKEN"):
        e.pop(k, None)
    e.update(env or {})
    out = subprocess.run(argv + list(args), capture_output=True, text=True, timeout=120, env=e)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise AssertionError(f"ec2probe {args}: rc={out.returncode} {out.stdout!r} {out.stderr!r}")


def ids_of(fleet):
    return [i for x in fleet["result"]["instances"] for i in x["ids"]]


def by_tag(ec2, key, value):
    res = ec2.describe_instances(Filters=[{"Name": f"tag:{key}", "Values": [value]}])["Reservations"]
    return {i["InstanceId"]: i for r in res for i in r["Instances"]}


def functional(port):
    ec2 = boto(port, "ec2")

    # ---- catalogue, offerings, spot prices -------------------------------------------------
    r = probe(port, "instance-types", "m5.large", "g4dn.xlarge", "m6g.large")
    t = {x["name"]: x for x in r["result"]}
    check(r["ok"] and t["m5.large"]["vcpus"] == 2 and t["m5.large"]["memoryMiB"] == 8192
          and t["m5.large"]["architectures"] == ["x86_64"] and t["m5.large"]["maxEnis"] == 3
          and t["m5.large"]["ipv4PerEni"] == 10 and t["m5.large"]["hypervisor"] == "nitro",
          f"m5.large specs from the real catalogue ({t.get('m5.large')})")
    check(t["g4dn.xlarge"]["gpus"] == [{"name": "T4", "manufacturer": "NVIDIA", "count": 1, "memoryMiB": 16384}]
          and t["g4dn.xlarge"]["instanceStorageGB"] == 125, "g4dn.xlarge: one T4 GPU and 125 GB instance storage")
    check(t["m6g.large"]["architectures"] == ["arm64"], "m6g.large is arm64")
    r = probe(port, "instance-types")
    names = {x["name"] for x in r["result"]}
    check(r["ok"] and len(names) > 500 and len(names) == len(r["result"]) and "m5.large" in names,
          f"the whole catalogue, no duplicates ({len(names)} types)")
    r = probe(port, "offerings", "--type", "m5.large")
    zones = {x["zone"] for x in r["result"]}
    check(r["ok"] and zones and zones <= {f"us-east-1{c}" for c in "abcdef"}
          and all(x["type"] == "m5.large" for x in r["result"]), f"m5.large offerings by zone ({sorted(zones)})")
    r = probe(port, "spot-prices", "m5.large", "c5.large")
    want = {}
    for it in ("m5.large", "c5.large"):
        for z, p in ctl(port, "GET", f"/prices?instance_type={it}")["spot"].items():
            want[(it, z)] = p
    got = {(x["type"], x["zone"]): x["price"] for x in r["result"]}
    check(r["ok"] and got == want, f"spot prices: one per type and zone, the proxy's values ({len(got)})")

    # ---- subnets and security groups by tag --------------------------------------------------
    vpc = ec2.create_vpc(CidrBlock="10.77.0.0/16")["Vpc"]["VpcId"]
    tagspec = lambda rt: [{"ResourceType": rt, "Tags": [{"Key": "nodesmith.io/discovery", "Value": CLUSTER}]}]
    sa = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.1.0/24", AvailabilityZone="us-east-1a",
                           TagSpecifications=tagspec("subnet"))["Subnet"]["SubnetId"]
    sb = ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.2.0/24", AvailabilityZone="us-east-1b",
                           TagSpecifications=tagspec("subnet"))["Subnet"]["SubnetId"]
    ec2.create_subnet(VpcId=vpc, CidrBlock="10.77.3.0/24", AvailabilityZone="us-east-1c")
    sg = ec2.create_security_group(GroupName="nodes", Description="d", VpcId=vpc,
                                   TagSpecifications=tagspec("security-group"))["GroupId"]
    ec2.create_security_group(GroupName="other", Description="d", VpcId=vpc)
    r = probe(port, "subnets", "--tag", f"nodesmith.io/discovery={CLUSTER}")
    got = {x["id"]: x for x in r["result"]}
    check(r["ok"] and set(got) == {sa, sb} and got[sa]["zone"] == "us-east-1a"
          and got[sa]["zoneId"].startswith("use1-az") and got[sa]["availableIps"] == 251
          and got[sa]["tags"].get("nodesmith.io/discovery") == CLUSTER,
          f"subnets by tag: the two tagged ones with zone, zone id, free IPs ({r['result']})")
    r = probe(port, "subnets", "--id", sb)
    check(r["ok"] and [x["id"] for x in r["result"]] == [sb], "a subnet by id")
    r = probe(port, "security-groups", "--tag", f"nodesmith.io/discovery={CLUSTER}")
    check(r["ok"] and [x["id"] for x in r["result"]] == [sg], f"security groups by tag ({r['result']})")

    # ---- EKS AMI through SSM, then DescribeImages ------------------------------------------
    r = probe(port, "ssm-parameter", EKS_PARAM)
    ami = r.get("result")
    check(r["ok"] and ami and ami.startswith("ami-"), f"SSM EKS AMI parameter ({ami})")
    r = probe(port, "images", "--id", ami)
    check(r["ok"] and len(r["result"]) == 1 and r["result"][0]["architecture"] == "x86_64"
          and r["result"][0]["name"].startswith("amazon-eks-node-al2023-x86_64-standard-1.31-"),
          f"DescribeImages of the SSM AMI ({r.get('result')})")
    r = probe(port, "ssm-parameter", EKS_PARAM.replace("1.31", "1.12"))
    check(not r["ok"] and r["error"]["kind"] == "not-found" and r["error"]["code"] == "ParameterNotFound",
          f"an unknown parameter is not-found ({r.get('error')})")

    # ---- launch template -----------------------------------------------------------------
    r = probe(port, "create-launch-template", "--name", "nodesmith-itest", "--image", ami, "--sg", sg,
              "--user-data", "#!/bin/bash\necho hi\n", "--hop-limit", "2", "--volume-size", "40",
              "--token", "lt-tok-1")
    lt = r.get("result") or {}
    check(r["ok"] and lt.get("id", "").startswith("lt-") and lt.get("name") == "nodesmith-itest",
          f"CreateLaunchTemplate ({r})")
    d = ec2.describe_launch_template_versions(LaunchTemplateId=lt["id"])["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    check(d["ImageId"] == ami and d["MetadataOptions"].get("HttpTokens") == "required"
          and str(d["MetadataOptions"].get("HttpPutResponseHopLimit")) == "2"
          and base64.b64decode(d["UserData"]).decode() == "#!/bin/bash\necho hi\n"
          and d.get("SecurityGroupIds") == [sg]
          and d["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 40,
          f"the template holds image, IMDSv2, user data, SG, volume ({d})")
    r2 = probe(port, "create-launch-template", "--name", "nodesmith-itest", "--image", ami, "--sg", sg,
               "--user-data", "#!/bin/bash\necho hi\n", "--hop-limit", "2", "--volume-size", "40",
               "--token", "lt-tok-1")
    check(r2["ok"] and r2["result"]["id"] == lt["id"], "the same ClientToken returns the same template")

    # ---- CreateFleet instant ----------------------------------------------------------------
    fleet_args = ["create-fleet", "--lt-id", lt["id"], "--nodepool", "general", "--name", "itest-node",
                  "--override", f"m5.large,{sa}", "--override", f"m5.xlarge,{sb}"]
    r = probe(port, *fleet_args, "--count", "2", "--token", "fleet-tok-1")
    ids = ids_of(r) if r["ok"] else []
    check(r["ok"] and len(ids) == 2 and r["result"]["errors"] == []
          and r["result"]["instances"][0]["type"] == "m5.large"
          and r["result"]["instances"][0]["subnet"] == sa and r["result"]["instances"][0]["lifecycle"] == "on-demand",
          f"instant fleet: 2 × m5.large in the first subnet ({r.get('result')})")
    got = by_tag(ec2, "nodesmith.io/cluster", CLUSTER)
    tags = {i: {t["Key"]: t["Value"] for t in got[i].get("Tags", [])} for i in ids if i in got}
    check(set(ids) <= set(got) and all(t.get("nodesmith.io/nodepool") == "general" and t.get("Name") == "itest-node"
                                       for t in tags.values()),
          f"the instances exist with cluster, nodepool and Name tags ({tags})")
    again = probe(port, *fleet_args, "--count", "2", "--token", "fleet-tok-1")
    check(again["ok"] and again["result"]["fleetId"] == r["result"]["fleetId"] and sorted(ids_of(again)) == sorted(ids),
          "the same ClientToken twice: the same fleet and instances")
    check(len(by_tag(ec2, "nodesmith.io/cluster", CLUSTER)) == 2, "… and still only two instances")
    mism = probe(port, *fleet_args, "--count", "3", "--token", "fleet-tok-1")
    check(not mism["ok"] and mism["error"]["kind"] == "idempotent-parameter-mismatch"
          and mism["stats"]["requests"] == 1, f"a changed request with the same token: typed error, no retry ({mism.get('error')})")

    # InsufficientInstanceCapacity on the first override: an Errors entry, the next one used
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "c5.large"})
    r = probe(port, "create-fleet", "--lt-id", lt["id"], "--nodepool", "general", "--count", "1",
              "--token", "fleet-ice", "--capacity-type", "spot",
              "--override", f"c5.large,{sa}", "--override", f"m5.large,{sa}")
    res = r.get("result") or {}
    check(r["ok"] and [e["code"] for e in res.get("errors", [])] == ["InsufficientInstanceCapacity"]
          and res["errors"][0]["type"] == "c5.large" and res["errors"][0]["subnet"] == sa
          and [x["type"] for x in res["instances"]] == ["m5.large"] and res["instances"][0]["lifecycle"] == "spot"
          and res["launched"] == 1, f"ICE on the first override: error entry + next override ({res})")
    ice_id = ids_of(r)[0] if r["ok"] and ids_of(r) else None
    ctl(port, "DELETE", "/rules")

    # RequestLimitExceeded for the next 3 calls: retried with backoff, 4 attempts in all
    since = max([c["seq"] for c in ctl(port, "GET", "/log")["calls"]] or [0])
    ctl(port, "POST", "/rules", {"kind": "throttle", "service": "ec2", "action": "CreateFleet", "count": 3})
    t0 = time.monotonic()
    r = probe(port, "create-fleet", "--lt-id", lt["id"], "--nodepool", "general", "--count", "1",
              "--token", "fleet-thr", "--override", f"m5.large,{sb}", "--backoff-base", "100",
              "--backoff-max", "2000", "--max-attempts", "6")
    elapsed = time.monotonic() - t0
    log = [c for c in ctl(port, "GET", f"/log?action=CreateFleet&since={since}")["calls"]]
    check(r["ok"] and len(ids_of(r)) == 1 and r["stats"]["requests"] == 4 and r["stats"]["throttled"] == 3,
          f"3 throttles then success ({r.get('stats')}, {r.get('error')})")
    check(len(log) == 4 and [c.get("error") for c in log[:3]] == ["RequestLimitExceeded"] * 3
          and log[3]["status"] == 200, f"the proxy saw exactly 4 CreateFleet calls ({[c.get('error') for c in log]})")
    check(elapsed >= 0.35, f"the retries backed off (≥ 50+100+200 ms; took {elapsed:.2f} s)")
    thr_id = ids_of(r)[0] if r["ok"] else None
    ctl(port, "DELETE", "/rules")
    since = max(c["seq"] for c in ctl(port, "GET", "/log")["calls"])
    ctl(port, "POST", "/rules", {"kind": "throttle", "service": "ec2", "action": "CreateFleet", "count": 3})
    r = probe(port, "create-fleet", "--lt-id", lt["id"], "--count", "1", "--token", "fleet-thr2",
              "--override", f"m5.large,{sb}", "--backoff-base", "20", "--max-attempts", "2")
    log = ctl(port, "GET", f"/log?action=CreateFleet&since={since}")["calls"]
    check(not r["ok"] and r["error"]["kind"] == "throttled" and r["error"]["code"] == "RequestLimitExceeded"
          and r["error"]["attempts"] == 2 and len(log) == 2,
          f"the retry bound holds: 2 attempts, then a throttled error ({r.get('error')}, {len(log)} calls)")
    ctl(port, "DELETE", "/rules")
    ctl(port, "POST", "/rules", {"kind": "error", "service": "ec2", "action": "DescribeSubnets", "status": 503, "count": 1})
    r = probe(port, "subnets", "--id", sb, "--backoff-base", "20")
    check(r["ok"] and r["stats"]["requests"] == 2 and [x["id"] for x in r["result"]] == [sb], "a 503 is retried")
    ctl(port, "DELETE", "/rules")

    # ---- DescribeInstances by cluster tag -----------------------------------------------------
    stranger = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.micro")["Instances"][0]["InstanceId"]
    other = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1, InstanceType="t3.micro", TagSpecifications=[
        {"ResourceType": "instance", "Tags": [{"Key": "nodesmith.io/cluster", "Value": "other"}]}])["Instances"][0]["InstanceId"]
    r = probe(port, "instances")
    mine = {x["id"]: x for x in r["result"]}
    expect = set(ids) | {i for i in (ice_id, thr_id) if i}
    check(r["ok"] and set(mine) == expect, f"DescribeInstances by cluster tag: exactly ours ({sorted(mine)} vs {sorted(expect)})")
    check(ice_id in mine and mine[ice_id]["lifecycle"] == "spot" and mine[ids[0]]["lifecycle"] == "on-demand"
          and mine[ids[0]]["zone"] == "us-east-1a" and mine[ids[0]]["state"] == "running"
          and mine[ids[0]]["privateIp"] and mine[ids[0]]["launchTime"] > 0
          and mine[ids[0]]["tags"].get("nodesmith.io/nodepool") == "general",
          "instances carry type, zone, state, lifecycle, IP, launch time, tags")

    # ---- TerminateInstances refuses what is not ours ---------------------------------------
    r = probe(port, "terminate", stranger, ids[0], other, "i-0123456789abcdef0")
    res = r.get("result") or {}
    check(r["ok"] and res.get("terminated") == [ids[0]]
          and sorted(res.get("refused", [])) == sorted([stranger, other, "i-0123456789abcdef0"]),
          f"terminate: ours terminated, untagged / other cluster / unknown refused ({res})")
    states = {i["InstanceId"]: i["State"]["Name"] for res_ in ec2.describe_instances(InstanceIds=[stranger, other, ids[0]])["Reservations"]
              for i in res_["Instances"]}
    check(states[stranger] == "running" and states[other] == "running"
          and states[ids[0]] in ("shutting-down", "terminated"), f"EC2 agrees ({states})")
    term = [c for c in ctl(port, "GET", "/log?action=TerminateInstances")["calls"]]
    check(all(stranger not in c["instance_ids"] and other not in c["instance_ids"] for c in term),
          "no TerminateInstances call ever named a foreign instance")
    r = probe(port, "terminate", stranger)
    check(r["ok"] and r["result"]["terminated"] == [] and r["result"]["refused"] == [stranger],
          "nothing tagged: nothing terminated, no call made")

    # ---- the credential chain ------------------------------------------------------------
    with tempfile.TemporaryDirectory() as d:
        cred = os.path.join(d, "credentials")
        with open(cred, "w") as f:
            f.write("[default]\naws_access_key_id = AKIDEFAULT\naws_secret_access_key = s1\n"
                    "[ops]\naws_access_key_id=AKIDOPS\naws_secret_access_key=s2\naws_session_token=tok\n")
        tokf = os.path.join(d, "token")
        with open(tokf, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9.e30.sig\n")
        base = {"HOME": d, "AWS_SHARED_CREDENTIALS_FILE": cred, "AWS_EC2_METADATA_DISABLED": "true"}
        r = probe(port, "credentials", creds=False, env=dict(base, AWS_ACCESS_KEY_ID="AKIDENV", AWS_SECRET_ACCESS_KEY="x"))
        check(r["ok"] and r["result"]["source"] == "environment" and r["result"]["accessKeyId"] == "AKIDENV",
              "the environment comes first")
        r = probe(port, "credentials", creds=False, env=base)
        check(r["ok"] and r["result"]["source"] == "shared-credentials-file" and r["result"]["accessKeyId"] == "AKIDEFAULT",
              "then the shared file's default profile")
        r = probe(port, "credentials", creds=False, env=dict(base, AWS_PROFILE="ops"))
        check(r["ok"] and r["result"]["accessKeyId"] == "AKIDOPS" and r["result"]["sessionToken"],
              "AWS_PROFILE picks the profile")
        wi = dict(base, AWS_WEB_IDENTITY_TOKEN_FILE=tokf, AWS_ROLE_ARN="arn:aws:iam::123456789012:role/nodesmith")
        r = probe(port, "--sts-endpoint", f"http://127.0.0.1:{port}/", "credentials", creds=False, env=wi)
        check(r["ok"] and r["result"]["source"] == "web-identity" and r["result"]["accessKeyId"].startswith("ASIA")
              and r["result"]["sessionToken"] and r["result"]["expiration"] > time.time(),
              f"web identity through STS AssumeRoleWithWebIdentity ({r.get('result')})")
        r = probe(port, "--sts-endpoint", f"http://127.0.0.1:{port}/", "ssm-parameter", EKS_PARAM, creds=False, env=wi)
        check(r["ok"] and r["result"] == ami, "calls signed with web identity credentials work")
        # EKS Pod Identity: the agent's endpoint, the projected token as the Authorization header
        cport, seen = container_credentials_server("pod-identity-token")
        podtok = os.path.join(d, "eks-pod-identity-token")
        with open(podtok, "w") as f:
            f.write("pod-identity-token\n")
        pi = dict(base, AWS_CONTAINER_CREDENTIALS_FULL_URI=f"http://127.0.0.1:{cport}/v1/credentials",
                  AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=podtok)
        r = probe(port, "credentials", creds=False, env=dict(pi, AWS_SHARED_CREDENTIALS_FILE=os.path.join(d, "none")))
        check(r["ok"] and r["result"]["source"] == "container" and r["result"]["accessKeyId"] == "ASIAPODIDENTITY"
              and r["result"]["sessionToken"] and seen == ["pod-identity-token"],
              f"EKS Pod Identity: container credentials with the token file ({r.get('result') or r.get('error')}, {seen})")
        r = probe(port, "credentials", creds=False, env=dict(pi, AWS_SHARED_CREDENTIALS_FILE=os.path.join(d, "none"),
                                                              AWS_CONTAINER_CREDENTIALS_FULL_URI="http://10.1.2.3/creds"))
        check(not r["ok"], "container credentials over plain http to another host: refused")
        iport = nsharness.start_listening([sys.executable, IMDS, "--port", "0",
                                           "--role", "nodesmith-coordinator"])
        env = {"HOME": d, "AWS_SHARED_CREDENTIALS_FILE": os.path.join(d, "none")}
        r = probe(port, "--imds-endpoint", f"http://127.0.0.1:{iport}", "credentials", creds=False, env=env)
        check(r["ok"] and r["result"]["source"] == "imds" and r["result"]["sessionToken"]
              and r["result"]["expiration"] > time.time(), f"the IMDS role last ({r.get('result') or r.get('error')})")
        r = probe(port, "credentials", creds=False, env=dict(env, AWS_EC2_METADATA_DISABLED="true"))
        check(not r["ok"] and r["error"]["kind"] == "credentials", "no source at all: a credentials error")


def sigv4(port):
    iam = boto(port, "iam")
    # the three actions moto lets through unchecked
    iam.create_user(UserName="coordinator")
    iam.put_user_policy(UserName="coordinator", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["ec2:*", "ssm:*"], "Resource": "*"}]}))
    key = iam.create_access_key(UserName="coordinator")["AccessKey"]
    ak, sk = key["AccessKeyId"], key["SecretAccessKey"]
    bad = "x" + sk[1:]
    r = probe(port, "instance-types", "m5.large", ak=ak, sk=sk)
    check(r["ok"] and r["result"][0]["name"] == "m5.large", f"signed with the real key: DescribeInstanceTypes works ({r.get('error')})")
    r = probe(port, "subnets", ak=ak, sk=sk)
    check(r["ok"] and len(r["result"]) >= 1, "DescribeSubnets with the real key")
    r = probe(port, "instance-types", "m5.large", ak=ak, sk=bad)
    check(not r["ok"] and r["error"]["kind"] == "auth-failure" and r["error"]["code"] == "AuthFailure"
          and r["error"]["status"] == 401 and r["stats"]["requests"] == 1,
          f"a wrong secret: AuthFailure, not retried ({r.get('error')})")
    r = probe(port, "ssm-parameter", EKS_PARAM, ak=ak, sk=sk)
    check(r["ok"] and r["result"].startswith("ami-"), "SSM signed with the real key")
    r = probe(port, "ssm-parameter", EKS_PARAM, ak=ak, sk=bad)
    check(not r["ok"] and r["error"]["kind"] == "auth-failure", f"SSM with a wrong secret ({r.get('error')})")
    r = probe(port, "spot-prices", "m5.large", ak=ak, sk=sk)
    check(r["ok"] and len(r["result"]) == 6, "spot prices (answered by the proxy) with the real key")


def main():
    try:
        port = nsharness.start_listening([sys.executable, PROXY, "--port", "0"])
        functional(port)
        port2 = nsharness.start_listening([sys.executable, PROXY, "--port", "0",
                                           "--moto-no-auth-actions", "3", "--k8s-versions", "1.31"])
        sigv4(port2)
    finally:
        nsharness.stop_listening()
    print(f"{checks} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
