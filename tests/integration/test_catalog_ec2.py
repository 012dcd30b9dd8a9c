#!/usr/bin/env python3
"""The instance catalog built from live EC2 (coordinator/provision/catalog-ec2.c through
tests/tools/catalogprobe) against tests/fakes/ec2proxy.py in front of moto: the same types as the
shipped data/catalog-us-east-1.json (same skip rules as data/gen-catalog.py), zones equal to the
proxy's DescribeInstanceTypeOfferings, spot prices equal to its DescribeSpotPriceHistory (not the
0.35 estimate), on-demand prices equal to the price table, the fallback catalog's prices for
types the table lacks, and a clean error when EC2 cannot be reached.

Run: python3 tests/integration/test_catalog_ec2.py   (exit 0 = pass; about 20 s)
"""
import datetime
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import nsharness  # noqa: E402

import botocore.session  # noqa: E402
from botocore.config import Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PROXY = os.path.join(ROOT, "tests", "fakes", "ec2proxy.py")
TABLE = os.path.join(ROOT, "data", "ec2-on-demand-prices-us-east-1.json")
SHIPPED = os.path.join(ROOT, "data", "catalog-us-east-1.json")
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




def probe(endpoint, *args):
    argv = [nsharness.binary("catalogprobe"), "--ec2-endpoint", endpoint] + list(args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_EC2_METADATA_DISABLED="true")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    try:
        return out.returncode, json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return out.returncode, {"ok": False, "stdout": out.stdout, "stderr": out.stderr[-2000:]}


def boto(port):
    return botocore.session.get_session().create_client(
        "ec2", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{port}",
        aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(retries={"total_max_attempts": 1}))


def proxy_view(port):
    """What the proxy answers through the ordinary API: every type name, zones per type, and the
    latest Linux/UNIX spot price per (type, zone)."""
    ec2 = boto(port)
    names = set()
    for page in ec2.get_paginator("describe_instance_types").paginate():
        names.update(t["InstanceType"] for t in page["InstanceTypes"])
    zones = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
        for o in page["InstanceTypeOfferings"]:
            zones.setdefault(o["InstanceType"], set()).add(o["Location"])
    latest = {}
    now = datetime.datetime.now(datetime.timezone.utc)
    for page in ec2.get_paginator("describe_spot_price_history").paginate(
            ProductDescriptions=["Linux/UNIX"], StartTime=now):
        for h in page["SpotPriceHistory"]:
            key = (h["InstanceType"], h["AvailabilityZone"])
            if key not in latest or latest[key][0] < h["Timestamp"]:
                latest[key] = (h["Timestamp"], float(h["SpotPrice"]))
    return names, zones, {k: p for k, (_, p) in latest.items()}


def run(port):
    endpoint = f"http://127.0.0.1:{port}"
    shipped = json.load(open(SHIPPED))
    shipped_types = {t["name"]: t for t in shipped["instance_types"]}
    table = json.load(open(TABLE))["prices"]
    names, zones, spot = proxy_view(port)

    rc, r = probe(endpoint, "--prices", TABLE, "--all")
    check(rc == 0 and r["ok"], f"catalog built from EC2 ({r.get('elapsedMs')} ms, {r.get('stats')}) {r.get('error', '')}")
    if not r["ok"]:
        return
    got = r["instanceTypes"]
    check(r["types"] == len(got) == len(shipped_types) and set(got) == set(shipped_types),
          f"the shipped catalog's types, no more, no fewer ({r['types']} vs {len(shipped_types)}; "
          f"extra {sorted(set(got) - set(shipped_types))[:5]}, missing {sorted(set(shipped_types) - set(got))[:5]})")
    check(sorted(names - set(got)) == sorted(shipped["skipped"]),
          f"left out exactly what gen-catalog.py skips ({len(names - set(got))} types: no price, no zone or Mac)")
    check(r["region"] == "us-east-1" and sorted(r["zones"]) == sorted({z for n in got for z in zones[n]}),
          f"zones: {sorted(r['zones'])}")

    bad_zones = [n for n, t in got.items() if sorted(t["zones"]) != sorted(zones.get(n, ()))]
    check(not bad_zones, f"every type's zones equal the proxy's offerings (wrong: {bad_zones[:5]})")

    bad_od = [n for n, t in got.items() if t["onDemand"] != table.get(n)]
    check(not bad_od, f"every on-demand price equals the price table's (wrong: {bad_od[:5]})")

    bad_spot, estimated, n_prices = [], [], 0
    for n, t in got.items():
        want = {z: spot[(n, z)] for z in t["zones"] if (n, z) in spot}
        n_prices += len(want)
        if not want or t["spot"] != want:
            bad_spot.append(n)
        if any(abs(p - round(table[n] * 0.35, 6)) < 1e-9 for p in t["spot"].values()):
            estimated.append(n)
    check(not bad_spot and n_prices == r["spotZonePrices"],
          f"every type's spot prices equal the proxy's DescribeSpotPriceHistory, zone by zone "
          f"({n_prices} prices; wrong: {bad_spot[:5]})")
    check(len(estimated) <= len(got) // 100,
          f"spot prices are EC2's, not the 0.35 x on-demand estimate ({len(estimated)} coincide)")
    fake = json.load(urllib.request.urlopen(f"{endpoint}/_fake/prices?instance_type=m5.large", timeout=10))["spot"]
    check(got["m5.large"]["spot"] == {z: p for z, p in fake.items() if z in got["m5.large"]["zones"]},
          f"m5.large spot prices are the proxy's own table ({got['m5.large']['spot']})")

    g = got["g4dn.xlarge"]
    sg = shipped_types["g4dn.xlarge"]
    check(g["gpuCount"] == sg["gpu_count"] == 1 and g["gpuName"] == sg["gpu_name"] == "t4"
          and g["gpuManufacturer"] == "nvidia" and g["gpuMemoryMiB"] == 16384,
          f"g4dn.xlarge: one NVIDIA T4, 16 GiB ({g})")
    bad_specs = [n for n, t in got.items()
                 if (t["arch"], t["vcpu"], t["memoryMiB"], t["gpuCount"]) !=
                 (shipped_types[n]["arch"], shipped_types[n]["vcpu"], shipped_types[n]["memory_mib"],
                  shipped_types[n].get("gpu_count", 0))]
    check(not bad_specs, f"architecture, vCPUs, memory and GPUs as in the shipped catalog (differ: {bad_specs[:5]})")
    check(r["gpuTypes"] == sum(1 for t in shipped_types.values() if t.get("gpu_count")),
          f"{r['gpuTypes']} GPU types")

    # ---- types the table lacks: the fallback catalog's price, or left out -------------------
    with tempfile.TemporaryDirectory() as d:
        short = os.path.join(d, "prices.json")
        gone = ("m5.large", "trn1.2xlarge")
        with open(short, "w") as f:
            json.dump({"prices": {k: v for k, v in table.items() if k not in gone}}, f)
        rc, r = probe(endpoint, "--prices", short, "--fallback", SHIPPED, "--type", "m5.large",
                      "--type", "trn1.2xlarge", "--type", "c5.large")
        t = r.get("instanceTypes", {})
        check(rc == 0 and r["types"] == len(shipped_types)
              and t["m5.large"]["onDemand"] == shipped_types["m5.large"]["on_demand_price"]
              and t["trn1.2xlarge"]["onDemand"] == shipped_types["trn1.2xlarge"]["on_demand_price"]
              and t["c5.large"]["onDemand"] == table["c5.large"],
              "types missing from the price table take the fallback catalog's on-demand price")
        check(t.get("trn1.2xlarge", {}).get("neuron") == 1 and t.get("m5.large", {}).get("cpuManufacturer") == "intel",
              "fields EC2's parsed answer lacks come from the fallback (Neuron devices, CPU manufacturer)")
        rc, r = probe(endpoint, "--prices", short, "--type", "m5.large")
        check(rc == 0 and r["types"] == len(shipped_types) - 2 and "m5.large" not in r["instanceTypes"],
              f"without a fallback, types with no price at all are left out ({r.get('types')})")

        # ---- errors ---------------------------------------------------------------------------
        rc, r = probe(endpoint, "--prices", os.path.join(d, "missing.json"))
        check(rc == 2, "an unreadable price table is refused before anything is sent")
    dead = nsharness.free_port()
    rc, r = probe(f"http://127.0.0.1:{dead}", "--prices", TABLE, "--max-attempts", "1")
    check(rc == 1 and not r["ok"] and r["error"]["errno"] < 0,
          f"EC2 unreachable: an error, no catalog ({r.get('error')})")


def main():
    try:
        port = nsharness.start_listening([sys.executable, PROXY, "--port", "0"])
        run(port)
    finally:
        nsharness.stop_listening()
    print(f"{checks} checks, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
