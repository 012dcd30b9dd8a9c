#!/usr/bin/env python3
"""Checks tests/fakes/ec2proxy.py with botocore clients (dummy credentials, us-east-1).

Run: python3 tests/integration/test_ec2proxy.py   (exit 0 = pass; about 15 s)
Starts two proxies (one starting its own moto_server, one in front of a moto_server this test
starts with INITIAL_NO_AUTH_ACTION_COUNT) on 127.0.0.1 and stops everything at the end.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError

HERE = os.path.dirname(os.path.abspath(__file__))
PROXY = os.path.join(HERE, "..", "fakes", "ec2proxy.py")
PRICES = os.path.join(HERE, "..", "..", "data", "ec2-on-demand-prices-us-east-1.json")

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def start_proxy(args):
    p = subprocess.Popen([sys.executable, PROXY, "--port", "0"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"proxy did not start: {line!r} {p.stderr.read()}")
    return p, int(m.group(1))


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def client(port, service, ak="AKIAIOSFODNN7EXAMPLE", sk="dummy-secret"):
    return botocore.session.get_session().create_client(
        service, region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id=ak, aws_secret_access_key=sk,
        config=Config(retries={"total_max_attempts": 1}))


def ctl(port, method, op, obj=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/_fake{op}", method=method,
                                 data=json.dumps(obj).encode() if obj is not None else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def err(fn, *a, **kw):
    try:
        fn(*a, **kw)
    except ClientError as e:
        return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
    return None, 200


def main():
    procs = []
    try:
        p1, port = start_proxy([])
        procs.append(p1)
        moto_port = ctl(port, "GET", "/health")["moto_port"]
        functional(port)
        topology(port)
        reservations(port)
        moto = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(mport := free_port())],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3"))
        procs.append(moto)
        for _ in range(100):
            if port_open(mport):
                break
            time.sleep(0.1)
        p2, port2 = start_proxy(["--moto-port", str(mport), "--k8s-versions", "1.31"])
        procs.append(p2)
        sigv4(port2)
        stop(p1)
        check(p1.returncode == 0, f"proxy exits cleanly on SIGTERM ({p1.returncode})")
        time.sleep(0.3)
        check(not port_open(moto_port), "the moto the proxy started is stopped with it")
    finally:
        for p in reversed(procs):
            stop(p)
    print(f"{checks} checks, {len(failures)} failed")
    return 1 if failures else 0


def functional(port):
    ec2, ssm, pricing = client(port, "ec2"), client(port, "ssm"), client(port, "pricing")
    with open(PRICES) as f:
        od = json.load(f)["prices"]

    # ---- SSM: EKS-optimized AMI parameters -------------------------------------------------
    for ver in ("1.29", "1.31", "1.34"):
        for arch in ("x86_64", "arm64"):
            for name in (f"/aws/service/eks/optimized-ami/{ver}/amazon-linux-2023/{arch}/standard/recommended/image_id",
                         f"/aws/service/bottlerocket/aws-k8s-{ver}/{arch}/latest/image_id"):
                p = ssm.get_parameter(Name=name)["Parameter"]
                img = ec2.describe_images(ImageIds=[p["Value"]])["Images"]
                check(p["Name"] == name and p["Type"] == "String"
                      and p["ARN"] == f"arn:aws:ssm:us-east-1::parameter{name}",
                      f"SSM parameter shape for {name}")
                check(len(img) == 1 and img[0]["Architecture"] == arch,
                      f"{name} -> an {arch} AMI that exists in moto")
    al = ssm.get_parameter(Name="/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id")["Parameter"]["Value"]
    img = ec2.describe_images(ImageIds=[al])["Images"][0]
    check(img["Name"].startswith("amazon-eks-node-al2023-x86_64-standard-1.31-"), f"AL2023 AMI name {img['Name']}")
    code, st = err(ssm.get_parameter, Name="/aws/service/eks/optimized-ami/1.12/amazon-linux-2023/x86_64/standard/recommended/image_id")
    check(code == "ParameterNotFound" and st == 400, f"unknown version is ParameterNotFound ({code})")
    ssm.put_parameter(Name="/nodesmith/test", Value="v", Type="String")
    r = ssm.get_parameters(Names=["/nodesmith/test", "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id",
                                  "/aws/service/bottlerocket/aws-k8s-0.1/arm64/latest/image_id"])
    check(sorted(p["Name"] for p in r["Parameters"]) == ["/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id", "/nodesmith/test"]
          and r["InvalidParameters"] == ["/aws/service/bottlerocket/aws-k8s-0.1/arm64/latest/image_id"],
          f"GetParameters mixes moto's and public parameters ({r.get('InvalidParameters')})")
    check(ssm.get_parameter(Name="/nodesmith/test")["Parameter"]["Value"] == "v", "other SSM calls reach moto")

    # ---- spot price history ------------------------------------------------------------
    h = ec2.describe_spot_price_history(InstanceTypes=["m5.large", "c5.large"],
                                        ProductDescriptions=["Linux/UNIX"])["SpotPriceHistory"]
    check(len(h) == 12 and {x["AvailabilityZone"] for x in h} == {f"us-east-1{c}" for c in "abcdef"},
          f"one record per type and zone ({len(h)})")
    for x in h:
        ratio = float(x["SpotPrice"]) / od[x["InstanceType"]]
        check(0.30 <= ratio <= 0.45 and x["ProductDescription"] == "Linux/UNIX",
              f"spot price of {x['InstanceType']} in {x['AvailabilityZone']} is 30-45 % of on-demand ({ratio:.3f})")
    h2 = ec2.describe_spot_price_history(InstanceTypes=["m5.large", "c5.large"],
                                         ProductDescriptions=["Linux/UNIX"])["SpotPriceHistory"]
    check([x["SpotPrice"] for x in h] == [x["SpotPrice"] for x in h2], "spot prices are deterministic")
    check(len({x["SpotPrice"] for x in h if x["InstanceType"] == "m5.large"}) > 1, "spot prices differ per zone")
    h = ec2.describe_spot_price_history(Filters=[{"Name": "availability-zone", "Values": ["us-east-1c"]},
                                                 {"Name": "instance-type", "Values": ["m5.*"]}])["SpotPriceHistory"]
    check(h and all(x["AvailabilityZone"] == "us-east-1c" and x["InstanceType"].startswith("m5.") for x in h)
          and {x["ProductDescription"] for x in h} == {"Linux/UNIX", "Linux/UNIX (Amazon VPC)"},
          "filters on zone and type (wildcard), both Linux product descriptions")
    page = ec2.describe_spot_price_history(InstanceTypes=["m5.large"], MaxResults=5)
    rest = ec2.describe_spot_price_history(InstanceTypes=["m5.large"], MaxResults=5, NextToken=page["NextToken"])
    check(len(page["SpotPriceHistory"]) == 5 and page["NextToken"]
          and len(rest["SpotPriceHistory"]) == 5, "pagination with NextToken")
    old = ec2.describe_spot_price_history(InstanceTypes=["m5.large"], EndTime="2001-01-01T00:00:00Z")
    check(old["SpotPriceHistory"] == [], "no records before the price history starts")

    # ---- Price List GetProducts ----------------------------------------------------------
    flt = [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in (
        ("instanceType", "m5.large"), ("regionCode", "us-east-1"), ("operatingSystem", "Linux"),
        ("tenancy", "Shared"), ("preInstalledSw", "NA"), ("capacitystatus", "Used"),
        ("location", "US East (N. Virginia)"))]
    r = pricing.get_products(ServiceCode="AmazonEC2", Filters=flt, FormatVersion="aws_v1")
    check(len(r["PriceList"]) == 1 and isinstance(r["PriceList"][0], str), "one product, as a JSON string")
    doc = json.loads(r["PriceList"][0])
    dims = [d for t in doc["terms"]["OnDemand"].values() for d in t["priceDimensions"].values()]
    check(doc["product"]["attributes"]["instanceType"] == "m5.large"
          and float(dims[0]["pricePerUnit"]["USD"]) == od["m5.large"] and dims[0]["unit"] == "Hrs",
          f"m5.large on-demand price from the table ({dims[0]['pricePerUnit']})")
    r = pricing.get_products(ServiceCode="AmazonEC2", Filters=flt[:1] + [
        {"Type": "TERM_MATCH", "Field": "operatingSystem", "Value": "Windows"}])
    check(r["PriceList"] == [], "only Linux is modelled")
    r = pricing.get_products(ServiceCode="AmazonEC2", Filters=flt[1:])
    check(len(r["PriceList"]) == 100 and r.get("NextToken"), "pages of 100 with NextToken")
    r2 = pricing.get_products(ServiceCode="AmazonEC2", Filters=flt[1:], NextToken=r["NextToken"])
    check(json.loads(r2["PriceList"][0]) != json.loads(r["PriceList"][0]), "the next page differs")

    # ---- CreateFleet -------------------------------------------------------------------
    subnets = {s["AvailabilityZone"]: s["SubnetId"] for s in ec2.describe_subnets()["Subnets"]}
    lt = ec2.create_launch_template(LaunchTemplateName="nodesmith-test",
                                    LaunchTemplateData={"ImageId": al})["LaunchTemplate"]
    lt_id = lt["LaunchTemplateId"]
    types = ["m5.xlarge", "m5.large", "c5.large", "r5.large"]
    cheapest = sorted(types, key=lambda t: od[t])

    def fleet(n=1, ctype="on-demand", token=None, zones=("us-east-1b",), tag="a", strategy=None, tlist=types):
        kw = dict(Type="instant",
                  TargetCapacitySpecification={"TotalTargetCapacity": n, "DefaultTargetCapacityType": ctype},
                  LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": lt_id, "Version": "$Latest"},
                                          "Overrides": [{"InstanceType": t, "SubnetId": subnets[z]}
                                                        for z in zones for t in tlist]}],
                  TagSpecifications=[{"ResourceType": "instance",
                                      "Tags": [{"Key": "nodesmith.io/cluster", "Value": "test"},
                                               {"Key": "case", "Value": tag}]}])
        if strategy:
            kw["SpotOptions" if ctype == "spot" else "OnDemandOptions"] = {"AllocationStrategy": strategy}
        if token:
            kw["ClientToken"] = token
        return ec2.create_fleet(**kw)

    def instances(tag):
        res = ec2.describe_instances(Filters=[{"Name": "tag:case", "Values": [tag]}])["Reservations"]
        return {i["InstanceId"]: i for r in res for i in r["Instances"]}

    r = fleet(2, tag="basic")
    ids = [i for x in r["Instances"] for i in x["InstanceIds"]]
    check(r["FleetId"].startswith("fleet-") and r["Errors"] == [] and len(ids) == 2,
          "instant fleet launches the target capacity")
    check(r["Instances"][0]["InstanceType"] == cheapest[0]
          and r["Instances"][0]["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"] == cheapest[0],
          f"lowest-price picks the cheapest override {cheapest[0]} (got {r['Instances'][0]['InstanceType']})")
    got = instances("basic")
    check(set(got) == set(ids) and all(i["InstanceType"] == cheapest[0] and i["Placement"]["AvailabilityZone"] == "us-east-1b"
                                       and i["State"]["Name"] == "running" for i in got.values()),
          "the instances exist in moto with the chosen type and zone")

    # idempotency
    r1 = fleet(1, token="tok-1", tag="idem")
    r2 = fleet(1, token="tok-1", tag="idem")
    check(r1["FleetId"] == r2["FleetId"] and r1["Instances"] == r2["Instances"], "same ClientToken, same answer")
    check(len(instances("idem")) == 1, "same ClientToken launches once")
    # concurrent retries with one token (a client timing out and retrying) launch once
    import threading
    results = []

    def racer():
        c = client(port, "ec2")
        results.append(c.create_fleet(
            Type="instant", ClientToken="tok-race",
            TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
            LaunchTemplateConfigs=[{"LaunchTemplateSpecification": {"LaunchTemplateId": lt_id, "Version": "1"},
                                    "Overrides": [{"InstanceType": "m5.large", "SubnetId": subnets["us-east-1a"]}]}],
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "case", "Value": "race"}]}]))

    threads = [threading.Thread(target=racer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    check(len(results) == 4 and len({r["FleetId"] for r in results}) == 1 and len(instances("race")) == 1,
          f"4 concurrent calls with one token: one fleet, one instance ({len(instances('race'))})")
    code, st = err(fleet, 2, token="tok-1", tag="idem")
    check(code == "IdempotentParameterMismatch" and st == 400, f"changed request, same token ({code})")
    check(len(instances("idem")) == 1, "a mismatch launches nothing")

    rr1 = ec2.run_instances(ImageId=al, MinCount=1, MaxCount=1, InstanceType="t3.micro", ClientToken="run-1",
                            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "case", "Value": "run"}]}])
    rr2 = ec2.run_instances(ImageId=al, MinCount=1, MaxCount=1, InstanceType="t3.micro", ClientToken="run-1",
                            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "case", "Value": "run"}]}])
    check(rr1["ReservationId"] == rr2["ReservationId"] and len(instances("run")) == 1, "RunInstances idempotent")
    code, _ = err(ec2.run_instances, ImageId=al, MinCount=1, MaxCount=1, InstanceType="t3.small", ClientToken="run-1")
    check(code == "IdempotentParameterMismatch", f"RunInstances mismatch ({code})")
    l1 = ec2.create_launch_template(LaunchTemplateName="idem-lt", LaunchTemplateData={"ImageId": al}, ClientToken="lt-1")
    l2 = ec2.create_launch_template(LaunchTemplateName="idem-lt", LaunchTemplateData={"ImageId": al}, ClientToken="lt-1")
    check(l1["LaunchTemplate"]["LaunchTemplateId"] == l2["LaunchTemplate"]["LaunchTemplateId"], "CreateLaunchTemplate idempotent")
    code, _ = err(ec2.create_launch_template, LaunchTemplateName="idem-lt2", LaunchTemplateData={"ImageId": al}, ClientToken="lt-1")
    check(code == "IdempotentParameterMismatch", f"CreateLaunchTemplate mismatch ({code})")

    # InsufficientInstanceCapacity on the cheapest override: the next pool is used
    rule = ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": cheapest[0]})["rules"][0]
    r = fleet(1, tag="ice1")
    check(len(r["Errors"]) == 1 and r["Errors"][0]["ErrorCode"] == "InsufficientInstanceCapacity"
          and r["Errors"][0]["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"] == cheapest[0]
          and r["Errors"][0]["Lifecycle"] == "on-demand"
          and r["Errors"][0]["LaunchTemplateAndOverrides"]["LaunchTemplateSpecification"]["LaunchTemplateId"] == lt_id,
          f"Errors entry for the cheapest override ({r['Errors']})")
    check([x["InstanceType"] for x in r["Instances"]] == [cheapest[1]],
          f"the next-cheapest override launches ({[x['InstanceType'] for x in r['Instances']]})")
    check({i["InstanceType"] for i in instances("ice1").values()} == {cheapest[1]}, "moto holds that instance")
    # every pool out of capacity: an empty instant fleet with one error per pool
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "*"})
    r = fleet(1, tag="ice-all")
    check(r["FleetId"].startswith("fleet-") and r.get("Instances", []) == [] and len(r["Errors"]) == len(types),
          f"no capacity anywhere: no instances, {len(types)} errors ({len(r['Errors'])})")
    check(instances("ice-all") == {}, "nothing launched")
    ctl(port, "DELETE", "/rules")
    # spot, zone-scoped rule, limited capacity
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "c5.large", "zone": "us-east-1b",
                                 "capacity_type": "spot"})
    r = fleet(1, ctype="spot", zones=("us-east-1b", "us-east-1c"), tag="spot", tlist=["c5.large"],
              strategy="price-capacity-optimized")
    check([x["Lifecycle"] for x in r["Instances"]] == ["spot"]
          and r["Instances"][0]["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == subnets["us-east-1c"]
          and all(e["LaunchTemplateAndOverrides"]["Overrides"]["SubnetId"] == subnets["us-east-1b"] for e in r["Errors"]),
          f"spot ICE in one zone moves the launch to the other zone ({r['Instances']}, {r['Errors']})")
    got = instances("spot")
    check(len(got) == 1 and list(got.values())[0].get("InstanceLifecycle") == "spot"
          and list(got.values())[0]["Placement"]["AvailabilityZone"] == "us-east-1c", "a spot instance in us-east-1c")
    r = fleet(1, ctype="on-demand", zones=("us-east-1b",), tag="od-b", tlist=["c5.large"])
    check(len(r["Instances"]) == 1 and r["Errors"] == [], "the spot-only rule leaves on-demand alone")
    ctl(port, "DELETE", "/rules")
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "r5.large", "capacity": 2})
    r = fleet(3, tag="cap", tlist=["r5.large"])
    check(sum(len(x["InstanceIds"]) for x in r["Instances"]) == 2 and len(r["Errors"]) == 1,
          "a pool with capacity for 2 gives 2 of 3 and an error")
    r = fleet(1, tag="cap2", tlist=["r5.large"])
    check(r.get("Instances", []) == [] and len(r["Errors"]) == 1, "the pool's capacity is used up")
    ctl(port, "DELETE", "/rules")
    # a fleet spread over two pools by capacity: instances map to the right pools
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": cheapest[0], "capacity": 1})
    r = fleet(3, tag="split")
    by_type = {x["InstanceType"]: x["InstanceIds"] for x in r["Instances"]}
    got = instances("split")
    check(len(by_type.get(cheapest[0], [])) == 1 and len(by_type.get(cheapest[1], [])) == 2
          and all(got[i]["InstanceType"] == t for t, ids in by_type.items() for i in ids),
          f"1 + 2 instances over two pools, each the type the answer says ({by_type})")
    ctl(port, "DELETE", "/rules")

    # RunInstances ICE
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "m5.large", "zone": "us-east-1a"})
    code, st = err(ec2.run_instances, ImageId=al, MinCount=1, MaxCount=1, InstanceType="m5.large",
                   Placement={"AvailabilityZone": "us-east-1a"},
                   TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "case", "Value": "run-ice"}]}])
    check(code == "InsufficientInstanceCapacity" and st == 500 and instances("run-ice") == {},
          f"RunInstances ICE is an error and launches nothing ({code} {st})")
    ok = ec2.run_instances(ImageId=al, MinCount=1, MaxCount=1, InstanceType="m5.large",
                           SubnetId=subnets["us-east-1d"])
    check(len(ok["Instances"]) == 1, "RunInstances in another zone works")
    ctl(port, "DELETE", "/rules")
    many = ec2.run_instances(ImageId=al, MinCount=1, MaxCount=3, InstanceType="t3.micro")
    check(len(many["Instances"]) == 3, f"RunInstances launches MaxCount when capacity allows ({len(many['Instances'])})")
    ctl(port, "POST", "/rules", {"kind": "ice", "instance_type": "t3.nano", "capacity": 2})
    few = ec2.run_instances(ImageId=al, MinCount=1, MaxCount=5, InstanceType="t3.nano")
    check(len(few["Instances"]) == 2, f"RunInstances gets what capacity is left ({len(few['Instances'])})")
    check(err(ec2.run_instances, ImageId=al, MinCount=1, MaxCount=1, InstanceType="t3.nano")[0]
          == "InsufficientInstanceCapacity", "then none")
    ctl(port, "DELETE", "/rules")
    r = fleet(3, ctype="spot", tag="div", strategy="diversified", tlist=["m5.large", "c5.large", "r5.large"])
    got = instances("div")
    check(sorted(x["InstanceType"] for x in r["Instances"]) == ["c5.large", "m5.large", "r5.large"]
          and sorted(i["InstanceType"] for i in got.values()) == ["c5.large", "m5.large", "r5.large"],
          "diversified spreads one instance per pool")

    # RequestLimitExceeded and 5xx
    ctl(port, "POST", "/rules", {"kind": "throttle", "action": "CreateFleet", "count": 2})
    codes = [err(fleet, 1, tag="thr") for _ in range(3)]
    check(codes == [("RequestLimitExceeded", 503)] * 2 + [(None, 200)], f"next 2 CreateFleet throttled ({codes})")
    check(len(instances("thr")) == 1, "throttled calls launch nothing")
    req = urllib.request.Request(f"http://127.0.0.1:{port}/", method="POST",
                                 data=b"Action=DescribeRegions&Version=2016-11-15",
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    ctl(port, "POST", "/rules", {"kind": "throttle", "action": "DescribeRegions", "count": 1})
    try:
        urllib.request.urlopen(req, timeout=10)
        check(False, "raw throttled call fails")
    except urllib.error.HTTPError as e:
        body = e.read().decode()
        check(e.code == 503 and "<Response><Errors><Error><Code>RequestLimitExceeded</Code>" in body
              and "<RequestID>" in body, f"the EC2 XML error body ({body[:120]})")
    ctl(port, "POST", "/rules", {"kind": "throttle", "action": "DescribeAvailabilityZones", "rate": 0.2, "burst": 2})
    codes = [err(ec2.describe_availability_zones)[0] for _ in range(6)]
    check(codes[:2] == [None, None] and codes.count("RequestLimitExceeded") >= 3,
          f"a rate limit throttles a burst ({codes})")
    ctl(port, "DELETE", "/rules")
    check(err(ec2.describe_availability_zones)[0] is None, "rules removed, calls pass")
    rid = ctl(port, "POST", "/rules", {"kind": "error", "action": "DescribeInstances", "status": 503})["rules"][0]["id"]
    check(err(ec2.describe_instances) == ("Unavailable", 503), "5xx injection")
    ctl(port, "DELETE", f"/rules/{rid}")
    check(err(ec2.describe_instances)[0] is None, "a deleted rule stops")

    # TerminateInstances and the call log
    ec2.terminate_instances(InstanceIds=ids)
    calls = ctl(port, "GET", "/log")["calls"]
    term = [c for c in calls if c["action"] == "TerminateInstances"]
    check(term and term[-1]["instance_ids"] == ids and term[-1]["status"] == 200, "TerminateInstances logged")
    launched = [i for c in calls if c["action"] in ("CreateFleet", "RunInstances") and not c.get("replayed")
                for i in c.get("instance_ids", [])]
    check(len(launched) == len(set(launched)) and len(launched) >= 23, f"no instance launched twice ({len(launched)})")
    check(any(c.get("replayed") for c in calls if c["action"] == "CreateFleet"), "replays are logged as such")
    check(sum(1 for c in calls if c["action"] == "CreateFleet" and c.get("error") == "RequestLimitExceeded") == 2,
          "throttled CreateFleet calls are logged")
    fl = ctl(port, "GET", "/log?action=CreateFleet")["calls"]
    check(fl and all(c["action"] == "CreateFleet" for c in fl), "the log filters by action")


def topology(port):
    """DescribeInstanceTopology: moto 5.2 answers HTTP 500 (NotImplementedError); the proxy
    answers from moto's instances as EC2 documents it."""
    ec2, ssm = client(port, "ec2"), client(port, "ssm")
    ami = ssm.get_parameter(Name="/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/"
                            "standard/recommended/image_id")["Parameter"]["Value"]

    def run(itype, n=1):
        return [i["InstanceId"] for i in ec2.run_instances(
            ImageId=ami, MinCount=n, MaxCount=n, InstanceType=itype)["Instances"]]
    p5, m5, b200 = run("p5.48xlarge", 2), run("m5.large"), run("p6-b200.48xlarge")
    got = {t["InstanceId"]: t for t in
           ec2.describe_instance_topology(InstanceIds=p5 + m5 + b200)["Instances"]}
    check(set(got) == set(p5 + b200), f"topology only for supported types ({sorted(got)})")
    check(all(len(got[i]["NetworkNodes"]) == 3 for i in p5) and
          len(got[b200[0]]["NetworkNodes"]) == 4, "3 network nodes, 4 for p6-b200")
    check(got[p5[0]]["NetworkNodes"][:2] == got[p5[1]]["NetworkNodes"][:2] and
          got[p5[0]]["NetworkNodes"][2] != got[p5[1]]["NetworkNodes"][2],
          "same zone: upper layers shared, bottom layer per instance")
    check(all(got[i]["InstanceType"] == "p5.48xlarge" and got[i]["AvailabilityZone"] for i in p5),
          "instance type and zone")
    ec2.stop_instances(InstanceIds=p5[1:])
    got = ec2.describe_instance_topology(Filters=[{"Name": "instance-type", "Values": ["p5.*"]}])
    check([t["InstanceId"] for t in got["Instances"]] == p5[:1], "only running instances")
    page = ec2.describe_instance_topology(MaxResults=1)
    check(len(page["Instances"]) == 1 and page.get("NextToken"), "pages")
    check(err(ec2.describe_instance_topology, InstanceIds=["i-0123456789abcdef0"]) ==
          ("InvalidInstanceID.NotFound", 400), "unknown instance refused")
    check(err(ec2.describe_instance_topology, Filters=[{"Name": "zone-id", "Values": ["x"]}]) ==
          ("InvalidParameterValue", 400), "a filter not emulated is refused, not ignored")
    ec2.terminate_instances(InstanceIds=p5 + m5 + b200)


def reservations(port):
    """On-Demand Capacity Reservations (moto has none): created, described with EC2's filters,
    launched into by a CreateFleet whose launch template targets one, used up
    (ReservationCapacityExceeded), given back when an instance terminates."""
    ec2 = client(port, "ec2")
    cr = ec2.create_capacity_reservation(
        InstanceType="m5.large", InstancePlatform="Linux/UNIX", AvailabilityZone="us-east-1b", InstanceCount=2,
        InstanceMatchCriteria="targeted", TagSpecifications=[{"ResourceType": "capacity-reservation", "Tags": [
            {"Key": "team", "Value": "ml"}]}])["CapacityReservation"]
    rid = cr["CapacityReservationId"]
    check(rid.startswith("cr-") and cr["AvailableInstanceCount"] == 2 and cr["State"] == "active" and
          cr["ReservationType"] == "default", f"created ({cr})")
    other = ec2.create_capacity_reservation(InstanceType="c5.large", InstancePlatform="Linux/UNIX",
                                            AvailabilityZone="us-east-1a", InstanceCount=1)["CapacityReservation"]
    check(other["InstanceMatchCriteria"] == "open", "open by default")

    def ids(**kw):
        return sorted(r["CapacityReservationId"] for r in ec2.describe_capacity_reservations(**kw)["CapacityReservations"])
    check(ids(CapacityReservationIds=[rid]) == [rid], "by id")
    check(ids(Filters=[{"Name": "tag:team", "Values": ["ml"]}]) == [rid], "by tag")
    check(ids(Filters=[{"Name": "tag-key", "Values": ["team"]}, {"Name": "state", "Values": ["active"]}]) == [rid],
          "by tag key and state")
    check(ids(Filters=[{"Name": "instance-match-criteria", "Values": ["open"]}]) == [other["CapacityReservationId"]],
          "by match criteria")
    check(ids(Filters=[{"Name": "owner-id", "Values": ["210987654321"]}]) == [], "by owner")
    check(err(ec2.describe_capacity_reservations, CapacityReservationIds=["cr-0123456789abcdef0"]) ==
          ("InvalidCapacityReservationId.NotFound", 400), "an unknown id is NotFound")
    page = ec2.describe_capacity_reservations(MaxResults=1)
    check(len(page["CapacityReservations"]) == 1 and page.get("NextToken"), "pages")

    subnet = next(s["SubnetId"] for s in ec2.describe_subnets()["Subnets"] if s["AvailabilityZone"] == "us-east-1b")
    lt = ec2.create_launch_template(LaunchTemplateName="odcr", LaunchTemplateData={
        "ImageId": "ami-12c6146b", "CapacityReservationSpecification": {
            "CapacityReservationTarget": {"CapacityReservationId": rid}}})["LaunchTemplate"]

    def fleet(n=1, itype="m5.large"):
        return ec2.create_fleet(Type="instant", TargetCapacitySpecification={
            "TotalTargetCapacity": n, "DefaultTargetCapacityType": "on-demand"}, LaunchTemplateConfigs=[{
                "LaunchTemplateSpecification": {"LaunchTemplateId": lt["LaunchTemplateId"], "Version": "$Latest"},
                "Overrides": [{"InstanceType": itype, "SubnetId": subnet}]}])
    r = fleet()
    launched = [i for x in r["Instances"] for i in x["InstanceIds"]]
    check(len(launched) == 1, f"one instance into the reservation ({r})")
    got = ec2.describe_instances(InstanceIds=launched)["Reservations"][0]["Instances"][0]
    check(got.get("CapacityReservationId") == rid, f"DescribeInstances names the reservation ({got.get('CapacityReservationId')})")
    check(ids(Filters=[{"Name": "tag:team", "Values": ["ml"]}]) == [rid] and
          ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"][0][
              "AvailableInstanceCount"] == 1, "one instance counted")
    r = fleet(2)
    more = [i for x in r["Instances"] for i in x["InstanceIds"]]
    check(len(more) == 1 and [e["ErrorCode"] for e in r["Errors"]] == ["ReservationCapacityExceeded"],
          f"two asked, one left: one launched and ReservationCapacityExceeded ({r['Errors']})")
    r = fleet()
    check(not r["Instances"] and [e["ErrorCode"] for e in r["Errors"]] == ["ReservationCapacityExceeded"],
          "used up: nothing launched, ReservationCapacityExceeded")
    r = fleet(itype="c5.large")
    check(not r["Instances"] and r["Errors"] and r["Errors"][0]["ErrorCode"] == "InvalidParameterCombination",
          "another instance type than the reservation's is refused")
    ec2.terminate_instances(InstanceIds=launched)
    check(ec2.describe_capacity_reservations(CapacityReservationIds=[rid])["CapacityReservations"][0][
        "AvailableInstanceCount"] == 1, "a terminated instance gives its count back")
    check(len([i for x in fleet()["Instances"] for i in x["InstanceIds"]]) == 1, "and it is used again")
    ec2.cancel_capacity_reservation(CapacityReservationId=other["CapacityReservationId"])
    check(ids(Filters=[{"Name": "state", "Values": ["active"]}]) == [rid], "a cancelled reservation is not active")
    blk = ctl(port, "POST", "/capacity-reservations", {"instance_type": "p5.48xlarge", "zone": "us-east-1a",
                                                         "count": 1, "reservation_type": "capacity-block",
                                                         "end": time.time() + 3600})["reservation"]
    got = ec2.describe_capacity_reservations(CapacityReservationIds=[blk["id"]])["CapacityReservations"][0]
    check(got["ReservationType"] == "capacity-block" and got["EndDateType"] == "limited",
          "a capacity block from the control API")


def sigv4(port):
    iam = client(port, "iam")
    # moto lets INITIAL_NO_AUTH_ACTION_COUNT=3 actions through unchecked; the proxy's own setup
    # does not spend them. These three are the free ones.
    iam.create_user(UserName="nodesmith")
    iam.put_user_policy(UserName="nodesmith", PolicyName="all", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["ec2:*", "ssm:*"], "Resource": "*"}]}))
    key = iam.create_access_key(UserName="nodesmith")["AccessKey"]
    good = client(port, "ec2", key["AccessKeyId"], key["SecretAccessKey"])
    bad = client(port, "ec2", key["AccessKeyId"], "x" + key["SecretAccessKey"][1:])
    unknown = client(port, "ec2")
    check(isinstance(good.describe_instances()["Reservations"], list), "a correctly signed EC2 call succeeds")
    check(err(bad.describe_instances) == ("AuthFailure", 401), "a wrong secret is AuthFailure")
    check(err(unknown.describe_instances) == ("AuthFailure", 401), "an unknown key is AuthFailure")
    check(err(iam.list_users)[0] == "InvalidClientTokenId", "IAM with an unknown key fails too")
    # CreateFleet goes through the proxy's rewrite and is re-signed with the caller's key
    subnet = good.describe_subnets()["Subnets"][0]["SubnetId"]
    lt = good.create_launch_template(LaunchTemplateName="sig", LaunchTemplateData={"ImageId": "ami-12c6146b"})
    spec = {"LaunchTemplateId": lt["LaunchTemplate"]["LaunchTemplateId"], "Version": "$Latest"}
    kw = dict(Type="instant", TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": "on-demand"},
              LaunchTemplateConfigs=[{"LaunchTemplateSpecification": spec, "Overrides": [
                  {"InstanceType": "m5.large", "SubnetId": subnet}, {"InstanceType": "c5.large", "SubnetId": subnet}]}])
    r = good.create_fleet(**kw)
    check(len(r["Instances"]) == 1 and r["Instances"][0]["InstanceType"] == "c5.large",
          "a rewritten CreateFleet, re-signed with the caller's key, is accepted by moto")
    before = len(good.describe_instances()["Reservations"])
    check(err(bad.create_fleet, **kw) == ("AuthFailure", 401), "CreateFleet with a wrong secret is AuthFailure")
    check(len(good.describe_instances()["Reservations"]) == before, "and launches nothing")
    check(err(bad.describe_spot_price_history, InstanceTypes=["m5.large"])[0] == "AuthFailure",
          "the proxy's own answers check signatures (wrong secret)")
    check(err(unknown.describe_spot_price_history, InstanceTypes=["m5.large"])[0] == "AuthFailure",
          "the proxy's own answers refuse unknown keys once moto checks signatures")
    check(len(good.describe_spot_price_history(InstanceTypes=["m5.large"])["SpotPriceHistory"]) > 0,
          "and accept the right key")
    ssm_bad = client(port, "ssm", key["AccessKeyId"], "x" + key["SecretAccessKey"][1:])
    name = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
    check(err(ssm_bad.get_parameter, Name=name)[0] == "SignatureDoesNotMatch", "SSM wrong secret refused")
    ssm_good = client(port, "ssm", key["AccessKeyId"], key["SecretAccessKey"])
    check(ssm_good.get_parameter(Name=name)["Parameter"]["Value"].startswith("ami-"), "SSM with the right key")
    ssm_good.put_parameter(Name="/nodesmith/sig", Value="s", Type="String")
    r = ssm_good.get_parameters(Names=["/nodesmith/sig", name])
    check(len(r["Parameters"]) == 2, "GetParameters split between moto and the proxy is re-signed")
    check(err(ssm_bad.get_parameters, Names=["/nodesmith/sig", name])[0] == "SignatureDoesNotMatch",
          "and refused with a wrong secret")


if __name__ == "__main__":
    sys.exit(main())
