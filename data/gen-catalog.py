#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Generate nodesmith's offline instance catalog (data/catalog-REGION.json).

Instance types and where they are offered come from EC2 DescribeInstanceTypes and
DescribeInstanceTypeOfferings (location type availability-zone). By default they are read from
moto's server, which serves AWS's real catalogue: the script starts `moto_server` on 127.0.0.1
itself and stops it when done. --endpoint points it at another EC2 endpoint instead.

Prices:
  on-demand  the AWS Price List API (GetProducts) with --pricing-api when credentials and the
             network allow it; otherwise the captured table data/ec2-on-demand-prices-REGION.json.
  spot       DescribeSpotPriceHistory when it returns real data (recent timestamps, plausible
             prices); otherwise an estimate: SPOT_FACTOR x the on-demand price, the same in every
             zone. moto's history is a placeholder (0.00001 USD, dated 2006), so the offline
             catalog always carries the estimate, and says so in its "sources".

Types without an on-demand price (Mac dedicated hosts, types newer than the table) are left
out and listed under "skipped": nothing can be launched without a price to rank it.

    data/gen-catalog.py [--region us-east-1] [--out data/catalog-us-east-1.json]
                         [--prices data/ec2-on-demand-prices-us-east-1.json]
                         [--endpoint URL] [--pricing-api]
"""

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import time

# Spot instances have historically cost 60-70 % less than on-demand for common current
# families; 0.35 x on-demand (a 65 % discount) sits in that range. It is an estimate for offline
# use (tests, benchmarks, the local demo), never a quote.
SPOT_FACTOR = 0.35

ARCH = {"x86_64": "amd64", "arm64": "arm64"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_moto():
    port = free_port()
    proc = subprocess.Popen(["moto_server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit("gen-catalog: moto_server exited early")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, "http://127.0.0.1:%d" % port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("gen-catalog: moto_server did not start")


def ec2_client(endpoint, region):
    import botocore.session
    session = botocore.session.get_session()
    kw = {"region_name": region}
    if endpoint:
        kw.update(endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing")
    return session.create_client("ec2", **kw)


def describe_types(ec2):
    out = []
    for page in ec2.get_paginator("describe_instance_types").paginate():
        out.extend(page["InstanceTypes"])
    return out


def describe_offerings(ec2):
    zones = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(LocationType="availability-zone"):
        for o in page["InstanceTypeOfferings"]:
            zones.setdefault(o["InstanceType"], set()).add(o["Location"])
    return zones


def real_spot_prices(ec2, names):
    """{type: {zone: price}} from DescribeSpotPriceHistory, or None when the answer is not real
    data (too old, or implausibly cheap placeholders)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    result = {}
    try:
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
            StartTime=now - datetime.timedelta(hours=6))
        for page in pages:
            for h in page["SpotPriceHistory"]:
                ts = h["Timestamp"]
                if ts.tzinfo is None:
                    ts = ts.replace(tzinfo=datetime.timezone.utc)
                price = float(h["SpotPrice"])
                if now - ts > datetime.timedelta(days=30) or price < 0.0005:
                    return None
                t = result.setdefault(h["InstanceType"], {})
                # keep the latest per zone
                z = h["AvailabilityZone"]
                if z not in t or t[z][0] < ts:
                    t[z] = (ts, price)
    except Exception as e:  # noqa: BLE001 - any failure means "not available"
        print("gen-catalog: spot price history unavailable (%s); using the estimate" % e, file=sys.stderr)
        return None
    if not result:
        return None
    return {k: {z: p for z, (_, p) in v.items()} for k, v in result.items() if k in names}


def pricing_api_prices(region):
    """On-demand Linux shared-tenancy prices from the Price List API, or None."""
    try:
        import botocore.session
        c = botocore.session.get_session().create_client("pricing", region_name="us-east-1")
        prices = {}
        pages = c.get_paginator("get_products").paginate(
            ServiceCode="AmazonEC2",
            Filters=[{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in (
                ("regionCode", region), ("operatingSystem", "Linux"), ("tenancy", "Shared"),
                ("preInstalledSw", "NA"), ("capacitystatus", "Used"), ("licenseModel", "No License required"))])
        for page in pages:
            for item in page["PriceList"]:
                p = json.loads(item)
                it = p["product"]["attributes"].get("instanceType")
                for term in p.get("terms", {}).get("OnDemand", {}).values():
                    for dim in term["priceDimensions"].values():
                        usd = float(dim["pricePerUnit"].get("USD", "0"))
                        if usd > 0:
                            prices[it] = usd
        return prices or None
    except Exception as e:  # noqa: BLE001
        print("gen-catalog: Price List API unavailable (%s); using the table" % e, file=sys.stderr)
        return None


def type_entry(t, zones, od, spot, spot_is_estimate):
    arch = next((ARCH[a] for a in t["ProcessorInfo"]["SupportedArchitectures"] if a in ARCH), None)
    if not arch:
        return None
    net = t.get("NetworkInfo", {})
    cards = net.get("NetworkCards") or []
    default_card = net.get("DefaultNetworkCardIndex", 0)
    enis = net.get("MaximumNetworkInterfaces", 0)
    for c in cards:
        if c.get("NetworkCardIndex") == default_card and c.get("MaximumNetworkInterfaces"):
            enis = c["MaximumNetworkInterfaces"]
    e = {
        "name": t["InstanceType"],
        "arch": arch,
        "vcpu": t["VCpuInfo"]["DefaultVCpus"],
        "memory_mib": t["MemoryInfo"]["SizeInMiB"],
        "enis": enis,
        "ipv4_per_eni": net.get("Ipv4AddressesPerInterface", 0),
        "hypervisor": t.get("Hypervisor", "") or "",
        "bare_metal": bool(t.get("BareMetal")),
        "current_generation": bool(t.get("CurrentGeneration")),
        "cpu_manufacturer": (t["ProcessorInfo"].get("Manufacturer") or "").lower(),
        "encryption_in_transit": bool(net.get("EncryptionInTransitSupported")),
    }
    bw = [c.get("BaselineBandwidthInGbps") for c in cards if c.get("BaselineBandwidthInGbps")]
    if bw:
        e["network_bandwidth_mbps"] = int(round(sum(bw) * 1000))
    gpus = (t.get("GpuInfo") or {}).get("Gpus") or []
    if gpus:
        g = gpus[0]
        e["gpu_count"] = sum(x.get("Count", 0) for x in gpus)
        e["gpu_name"] = g.get("Name", "").lower()
        e["gpu_manufacturer"] = g.get("Manufacturer", "").lower()
        e["gpu_memory_mib"] = (g.get("MemoryInfo") or {}).get("SizeInMiB", 0)
    neuron = (t.get("NeuronInfo") or {}).get("NeuronDevices") or []
    if neuron:
        e["neuron_count"] = sum(x.get("Count", 0) for x in neuron)
    clock = (t.get("ProcessorInfo") or {}).get("SustainedClockSpeedInGhz")
    if clock:
        e["sustained_clock_mhz"] = int(round(clock * 1000))
    ebs = ((t.get("EbsInfo") or {}).get("EbsOptimizedInfo") or {}).get("BaselineBandwidthInMbps")
    if ebs:
        e["ebs_bandwidth_mbps"] = ebs
    acc = (t.get("InferenceAcceleratorInfo") or {}).get("Accelerators") or []
    if acc:
        e["accelerator_name"] = acc[0].get("Name", "").lower()
        e["accelerator_manufacturer"] = acc[0].get("Manufacturer", "").lower()
        e["accelerator_count"] = sum(x.get("Count", 0) for x in acc)
    storage = t.get("InstanceStorageInfo") or {}
    if storage.get("NvmeSupport") in ("required", "supported") and storage.get("TotalSizeInGB"):
        e["local_nvme_gib"] = storage["TotalSizeInGB"]
    e["on_demand_price"] = od
    e["zones"] = sorted(zones)
    if spot_is_estimate:
        if "spot" in t.get("SupportedUsageClasses", []):
            e["spot_price"] = round(od * SPOT_FACTOR, 6)
    elif spot:
        e["spot_prices"] = {z: p for z, p in sorted(spot.items()) if z in zones}
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--out")
    ap.add_argument("--prices")
    ap.add_argument("--endpoint", help="EC2 endpoint (default: start moto_server on 127.0.0.1)")
    ap.add_argument("--pricing-api", action="store_true", help="try the AWS Price List API first")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = args.out or os.path.join(root, "data", "catalog-%s.json" % args.region)
    table_path = args.prices or os.path.join(root, "data", "ec2-on-demand-prices-%s.json" % args.region)

    proc = None
    endpoint = args.endpoint
    if not endpoint:
        proc, endpoint = start_moto()
    try:
        ec2 = ec2_client(endpoint, args.region)
        types = describe_types(ec2)
        offerings = describe_offerings(ec2)
        names = {t["InstanceType"] for t in types}
        spot = real_spot_prices(ec2, names)
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()

    od_source = None
    od = pricing_api_prices(args.region) if args.pricing_api else None
    if od:
        od_source = "AWS Price List API (GetProducts), %s" % datetime.date.today().isoformat()
    else:
        with open(table_path) as f:
            table = json.load(f)
        od = table["prices"]
        od_source = "%s (captured %s)" % (os.path.relpath(table_path, root), table.get("captured_at", "?"))

    entries, skipped = [], []
    for t in sorted(types, key=lambda x: x["InstanceType"]):
        name = t["InstanceType"]
        zones = offerings.get(name)
        if name not in od or not zones:
            skipped.append(name)
            continue
        e = type_entry(t, zones, od[name], (spot or {}).get(name), spot is None)
        if e is None:
            skipped.append(name)
            continue
        entries.append(e)

    all_zones = sorted({z for e in entries for z in e["zones"]})
    doc = {
        "region": args.region,
        "generated_by": "data/gen-catalog.py",
        "sources": {
            "instance_types": "EC2 DescribeInstanceTypes and DescribeInstanceTypeOfferings (%s)" %
                              ("moto_server" if proc else endpoint),
            "on_demand": od_source,
            "spot": ("estimate: %.2f x on-demand in every zone (DescribeSpotPriceHistory gave no real data)" % SPOT_FACTOR
                     if spot is None else "EC2 DescribeSpotPriceHistory"),
        },
        "zones": all_zones,
        "skipped": skipped,
        "instance_types": entries,
    }
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("{\n")
        keys = [k for k in doc if k != "instance_types"]
        for k in keys:
            f.write(" %s: %s,\n" % (json.dumps(k), json.dumps(doc[k], sort_keys=False)))
        f.write(' "instance_types": [\n')
        for i, e in enumerate(entries):
            f.write("  %s%s\n" % (json.dumps(e, separators=(",", ":")), "," if i + 1 < len(entries) else ""))
        f.write(" ]\n}\n")
    os.replace(tmp, out)
    print("gen-catalog: %d instance types in %d zones, %d skipped -> %s" %
          (len(entries), len(all_zones), len(skipped), os.path.relpath(out)), file=sys.stderr)


if __name__ == "__main__":
    main()
