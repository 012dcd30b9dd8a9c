#!/usr/bin/env python3
"""A proxy in front of moto_server that adds what moto lacks for nodesmith's tests.

- Fault rules (InsufficientInstanceCapacity per instance type / zone / capacity type,
  RequestLimitExceeded for the next N calls or above a rate, 5xx), set through /_fake/rules.
- CreateFleet (type instant) allocation as EC2 documents it: pools ordered by the allocation
  strategy with this proxy's prices, the next pool used when one has no capacity, an Errors entry
  per pool that failed, fewer or no instances when capacity runs out.
- ClientToken idempotency for CreateFleet, RunInstances and CreateLaunchTemplate.
- The EKS-optimized AMI SSM parameters (AL2023, Bottlerocket) pointing at AMIs made in moto.
- DescribeSpotPriceHistory and the Price List API GetProducts from the on-demand price table.
- DescribeInstanceTopology, which moto does not implement, from moto's instances.
- On-Demand Capacity Reservations (capres.py): CreateCapacityReservation,
  DescribeCapacityReservations, CancelCapacityReservation, CreateFleet into a reservation its
  launch template targets (ReservationCapacityExceeded when it is used up), the reservation id
  on DescribeInstances, its count given back at TerminateInstances.
- A log of CreateFleet / RunInstances / TerminateInstances calls at /_fake/log (each with `unix`,
  when it was answered, and `received`, when its request came in).

Everything else is forwarded to moto byte for byte (SigV4 headers intact). Requests the proxy
must change (a CreateFleet it allocates, a RunInstances it trims) are re-signed with the caller's
own key, looked up in moto's IAM state, after checking the caller's signature. See
tests/fakes/README-aws.md. Standard library only.
"""

import argparse
import base64
import datetime as dt
import fnmatch
import gzip
import hashlib
import hmac
import http.client
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from capres import EXCEEDED, ParamError, Reservations  # noqa: E402
DEFAULT_PRICES = os.path.normpath(os.path.join(HERE, "..", "..", "data",
                                               "ec2-on-demand-prices-us-east-1.json"))
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
MAX_BODY = 16 << 20
MOTO_TIMEOUT = 60
LOGGED_ACTIONS = ("CreateFleet", "RunInstances", "TerminateInstances")
PRODUCT_DESCRIPTIONS = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
LOCATIONS = {"us-east-1": "US East (N. Virginia)", "us-east-2": "US East (Ohio)",
             "us-west-1": "US West (N. California)", "us-west-2": "US West (Oregon)",
             "eu-west-1": "EU (Ireland)", "eu-central-1": "EU (Frankfurt)"}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "content-length"}
# DescribeInstanceTopology (moto 5.2 answers it with HTTP 500, NotImplementedError): the instance
# types EC2 gives a topology for, and how many network nodes (AWS, "Prerequisites for Amazon EC2
# topology"); only running instances have one.
TOPOLOGY_TYPES = re.compile(
    r"^(g6e\.(x|2x|4x|8x|12x|16x|24x|48x)large|g7e\.(2x|4x|8x|12x|24x|48x)large"
    r"|hpc6a\.48xlarge|hpc6id\.32xlarge|hpc7g\.(4x|8x|16x)large|hpc7a\.(12x|24x|48x|96x)large"
    r"|hpc8a\.96xlarge|p3dn\.24xlarge|p4d\.24xlarge|p4de\.24xlarge|p5\.48xlarge|p5e\.48xlarge"
    r"|p5en\.48xlarge|p6e-gb200\.36xlarge|trn1\.(2x|32x)large|trn1n\.32xlarge|trn2\.48xlarge"
    r"|trn2u\.48xlarge|p6-b200\.48xlarge|p6-b300\.48xlarge)$")
TOPOLOGY_FOUR_LAYERS = ("p6-b200.48xlarge", "p6-b300.48xlarge")
ICE_ERRORS = ("InsufficientInstanceCapacity", "UnfulfillableCapacity",
              "MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InsufficientCapacity")


def log(msg):
    sys.stderr.write(f"ec2proxy: {msg}\n")
    sys.stderr.flush()


def now_iso(ts=None, millis=True):
    d = dt.datetime.fromtimestamp(time.time() if ts is None else ts, dt.timezone.utc)
    return d.strftime("%Y-%m-%dT%H:%M:%S.000Z" if millis else "%Y-%m-%dT%H:%M:%SZ")


def parse_ts(value):
    s = value.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z",
                "%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%d"):
        try:
            d = dt.datetime.strptime(s, fmt)
            if d.tzinfo is None:
                d = d.replace(tzinfo=dt.timezone.utc)
            return d.timestamp()
        except ValueError:
            pass
    try:
        return float(s)
    except ValueError:
        raise ValueError(f"bad timestamp {value!r}")


# ---- query-protocol parameters -------------------------------------------------------------

def unflatten(pairs, prefix):
    """Nested view of EC2 query parameters under prefix ("A.1.B" -> {"A": [{"B": ...}]})."""
    root = {}
    for k, v in pairs:
        if not k.startswith(prefix + ".") and k != prefix:
            continue
        parts = k.split(".")
        node = root
        for i, p in enumerate(parts):
            last = i == len(parts) - 1
            if last:
                node[p] = v
            else:
                node = node.setdefault(p, {})
                if not isinstance(node, dict):
                    break
    return _lists(root.get(prefix))


def _lists(node):
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_lists(node[k]) for k in sorted(node, key=int)]
    return {k: _lists(v) for k, v in node.items()}


def get1(pairs, key, default=None):
    for k, v in pairs:
        if k == key:
            return v
    return default


def getlist(pairs, prefix):
    """InstanceType.1, InstanceType.2 ... (also InstanceId.N)."""
    out = []
    for k, v in pairs:
        if re.fullmatch(re.escape(prefix) + r"\.\d+", k):
            out.append((int(k.rsplit(".", 1)[1]), v))
    return [v for _, v in sorted(out)]


def flatten(prefix, value, out):
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value, 1):
            flatten(f"{prefix}.{i}", v, out)
    else:
        out.append((prefix, value))


def lower_camel(name):
    return name[:1].lower() + name[1:]


def struct_xml(d):
    """Scalars and nested structures of a request structure, as EC2's response XML."""
    parts = []
    for k, v in d.items():
        if isinstance(v, dict):
            parts.append(f"<{lower_camel(k)}>{struct_xml(v)}</{lower_camel(k)}>")
        elif isinstance(v, list):
            continue  # list members use per-shape names; not echoed
        else:
            parts.append(f"<{lower_camel(k)}>{escape(str(v))}</{lower_camel(k)}>")
    return "".join(parts)


def ec2_error(code, message):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message></Error></Errors>"
            f"<RequestID>{uuid.uuid4()}</RequestID></Response>").encode()


# ---- SigV4 (standard library) ---------------------------------------------------------------

def parse_auth(headers, query):
    auth = headers.get("Authorization", "")
    if auth.startswith("AWS4-HMAC-SHA256 "):
        fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(",")
                      if "=" in p)
        cred = fields.get("Credential", "").split("/")
        if len(cred) != 5:
            return None
        return {"akid": cred[0], "date": cred[1], "region": cred[2], "service": cred[3],
                "signed": fields.get("SignedHeaders", "").split(";"),
                "signature": fields.get("Signature", "")}
    q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if "X-Amz-Credential" in q:
        cred = q["X-Amz-Credential"].split("/")
        if len(cred) == 5:
            return {"akid": cred[0], "date": cred[1], "region": cred[2], "service": cred[3],
                    "signed": q.get("X-Amz-SignedHeaders", "").split(";"),
                    "signature": q.get("X-Amz-Signature", ""), "presigned": True}
    return None


def _quote(s):
    return urllib.parse.quote(s, safe="-_.~")


def sigv4_signature(method, path, query, headers, body, auth, secret, amz_date):
    """The signature botocore's SigV4Auth would compute (non-S3, header auth)."""
    cpath = urllib.parse.quote(urllib.parse.unquote(path) or "/", safe="/~")
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    cquery = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(pairs))
    lower = {}
    for k, v in headers.items():
        lower.setdefault(k.lower(), []).append(v)
    signed = sorted(auth["signed"])
    cheaders = "".join(f"{h}:{','.join(' '.join(v.split()) for v in lower.get(h, ['']))}\n"
                       for h in signed)
    phash = lower.get("x-amz-content-sha256", [None])[0]
    if not phash or phash.startswith("STREAMING"):
        phash = hashlib.sha256(body).hexdigest()
    creq = "\n".join([method, cpath, cquery, cheaders, ";".join(signed), phash])
    scope = f"{auth['date']}/{auth['region']}/{auth['service']}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (auth["date"], auth["region"], auth["service"], "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()


def _die_with_parent():
    """moto_server gets SIGTERM if the proxy dies without cleaning up (Linux prctl)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# ---- moto ---------------------------------------------------------------------------------

class Moto:
    def __init__(self, port=None, no_auth_actions=None):
        self.proc = None
        self.port = port
        self.no_auth_actions = no_auth_actions

    def start(self):
        if self.port:
            self.wait()
            return
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        env = dict(os.environ)
        if self.no_auth_actions is not None:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self.no_auth_actions)
        exe = os.environ.get("MOTO_SERVER", "moto_server")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        self.wait()

    def wait(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
            try:
                st, _, _ = self.request("GET", "/moto-api/reset-auth", timeout=2)
                if st:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("moto_server did not come up")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def request(self, method, path, body=b"", headers=None, timeout=MOTO_TIMEOUT):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.getheaders(), r.read()
        finally:
            conn.close()

    def data(self):
        # moto builds data.json by walking its backends while other requests may change them
        # (a launch in another thread): the walk then fails with a 500 ("dictionary changed size
        # during iteration"). It is a read; ask again, a few times.
        for attempt in range(5):
            st, _, b = self.request("GET", "/moto-api/data.json")
            if st == 200:
                return json.loads(b)
            time.sleep(0.05 * (attempt + 1))
        raise RuntimeError(f"moto data.json: {st}")


_moto_clients = {}
_moto_clients_lock = threading.Lock()


def moto_ec2(moto):
    """A botocore EC2 client straight to moto (the proxy's own reads and repairs), made once
    per moto port: a new session and client cost 0.1-0.15 s of CPU each, twice per CreateFleet
    (botocore clients are thread-safe, sessions are not: made under a lock)."""
    with _moto_clients_lock:
        c = _moto_clients.get(moto.port)
        if c is None:
            import botocore.config
            import botocore.session
            c = _moto_clients[moto.port] = botocore.session.get_session().create_client(
                "ec2", region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
                endpoint_url=f"http://127.0.0.1:{moto.port}", aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
                aws_secret_access_key="dummy", config=botocore.config.Config(max_pool_connections=32))
        return c


def launch_template_data(ec2, spec):
    """LaunchTemplateData of a fleet's launch template specification (either spelling)."""
    lt_id = spec.get("launchTemplateId") or spec.get("LaunchTemplateId")
    kw = {"LaunchTemplateId": lt_id} if lt_id else {"LaunchTemplateName": spec.get("LaunchTemplateName")}
    version = str(spec.get("version") or spec.get("Version") or "$Latest")
    return ec2.describe_launch_template_versions(Versions=[version], **kw)["LaunchTemplateVersions"][0][
        "LaunchTemplateData"]


def reservation_target(moto, spec):
    """The capacity reservation id the launch template targets, or None."""
    try:
        data = launch_template_data(moto_ec2(moto), spec)
    except Exception as e:  # no such template: moto's CreateFleet says so
        log(f"CreateFleet: reading launch template {spec}: {type(e).__name__}: {str(e)[:200]}")
        return None
    crs = data.get("CapacityReservationSpecification") or {}
    return (crs.get("CapacityReservationTarget") or {}).get("CapacityReservationId")


def apply_launch_template(moto, ids, spec, fleet_tags, before_each=None):
    """What EC2 takes from a launch template at CreateFleet and moto's CreateFleet drops: the
    instance profile, metadata options, monitoring, security groups (also from the network
    interface), block devices (the root volume resized, the others made and attached) and the
    template's and the fleet's tags on volumes and network interfaces."""
    ec2 = moto_ec2(moto)
    data = launch_template_data(ec2, spec)
    tag_sets = {}
    for t in data.get("TagSpecifications", []) + [
            {"ResourceType": f.get("ResourceType"), "Tags": [{"Key": x.get("Key"), "Value": x.get("Value", "")}
                                                             for x in f.get("Tag", [])]} for f in fleet_tags]:
        tag_sets.setdefault(t["ResourceType"], {}).update({x["Key"]: x["Value"] for x in t.get("Tags", [])})

    def tags_of(kind):
        return [{"Key": k, "Value": v} for k, v in tag_sets.get(kind, {}).items()]
    nics = data.get("NetworkInterfaces") or []
    groups = data.get("SecurityGroupIds") or (nics[0].get("Groups") if nics else None)

    def step(what, fn, *a, **kw):  # one part failing (moto lacks MonitorInstances) spares the rest
        try:
            return fn(*a, **kw)
        except Exception as e:
            log(f"CreateFleet: {what} not applied to {ids}: {type(e).__name__}: {str(e)[:200]}")
    # one DescribeInstances and one CreateTags per kind for the fleet's instances (moto serves
    # them all from one Python process)
    insts = {i["InstanceId"]: i for r in ec2.describe_instances(InstanceIds=list(ids))["Reservations"]
             for i in r["Instances"]}
    tagged = {"volume": [], "network-interface": []}
    for iid in ids:
        if before_each:
            before_each()
        inst = insts[iid]
        md = data.get("MetadataOptions") or {}
        if md:
            step("metadata options", ec2.modify_instance_metadata_options, InstanceId=iid, **{k: md[k] for k in (
                "HttpTokens", "HttpPutResponseHopLimit", "HttpEndpoint", "HttpProtocolIpv6") if k in md})
        prof = data.get("IamInstanceProfile") or {}
        if prof:
            step("instance profile", ec2.associate_iam_instance_profile, InstanceId=iid, IamInstanceProfile=prof)
        if (data.get("Monitoring") or {}).get("Enabled"):
            step("monitoring", ec2.monitor_instances, InstanceIds=[iid])
        if groups:
            step("security groups", ec2.modify_instance_attribute, InstanceId=iid, Groups=groups)
        zone = inst["Placement"]["AvailabilityZone"]
        root_dev = inst.get("RootDeviceName") or "/dev/xvda"
        attached = {b["DeviceName"]: b["Ebs"]["VolumeId"] for b in inst.get("BlockDeviceMappings", [])}
        vols = []
        for bd in data.get("BlockDeviceMappings") or []:
            ebs, dev = bd.get("Ebs") or {}, bd["DeviceName"]
            opts = {k: ebs[k] for k in ("VolumeType", "Iops", "Throughput") if k in ebs}
            # moto's images have their root at /dev/sda1 where EKS's have /dev/xvda: the same disk
            if dev == root_dev or (dev in ("/dev/xvda", "/dev/sda1") and root_dev in ("/dev/xvda", "/dev/sda1")
                                   and root_dev in attached):
                vid = attached.get(root_dev)
                if vid and ebs.get("VolumeSize"):
                    step("root volume", ec2.modify_volume, VolumeId=vid, Size=ebs["VolumeSize"], **opts)
            else:
                vid = (step("volume", ec2.create_volume, AvailabilityZone=zone, Size=ebs.get("VolumeSize", 8),
                            Encrypted=bool(ebs.get("Encrypted")), **opts) or {}).get("VolumeId")
                if vid:
                    step("volume attachment", ec2.attach_volume, VolumeId=vid, InstanceId=iid, Device=dev)
            if vid:
                vols.append(vid)
        tagged["volume"] += vols or list(attached.values())
        tagged["network-interface"] += [n["NetworkInterfaceId"] for n in inst.get("NetworkInterfaces", [])]
    for kind, resources in tagged.items():
        if resources and tags_of(kind):
            step(f"{kind} tags", ec2.create_tags, Resources=resources, Tags=tags_of(kind))


# ---- the proxy's state ---------------------------------------------------------------------

class Proxy:
    def __init__(self, args, moto):
        self.args = args
        self.moto = moto
        self.region = args.region
        self.lock = threading.Lock()
        self.rules = []
        self.rule_seq = 0
        self.calls = []
        self.call_seq = 0
        self.received = threading.local()
        self.idem = {}           # (region, action, token) -> {"params", "status", "body", "event"}
        self.secrets = {}        # access key id -> secret
        self.fetch_lock = threading.Lock()
        # CreateFleet calls not yet through moto's CreateFleet: launch template applications
        # (five moto calls per instance) wait for them, as EC2 launches an instant fleet in a
        # second or two whatever else it is doing, and moto answers one call at a time
        self.launching = 0
        self.launching_cv = threading.Condition()
        self.iam_epoch = 0
        self.fetched_at = (-1, 0.0)
        self.subnets = {}        # subnet id -> zone
        self.default_subnets = {}  # zone -> subnet id
        self.auth_threshold = float("inf")
        self.action_count = 0
        with open(args.prices) as f:
            table = json.load(f)
        self.price_region = table.get("region", "us-east-1")
        self.prices = {k: float(v) for k, v in table["prices"].items()}
        self.zones = [z for z in args.zones.split(",") if z]
        self.price_epoch = float(args.price_epoch) if args.price_epoch else \
            (int(time.time()) // 3600) * 3600.0
        self.specs = self._instance_specs()
        self.ssm = {}            # parameter name -> value (image id)
        self.reservations = Reservations(self.region, self.zones)

    @staticmethod
    def _instance_specs():
        """vCPU and memory per type from moto's catalogue, when moto is importable here."""
        try:
            spec = importlib.util.find_spec("moto")
            if not spec or not spec.origin:
                return {}
            path = os.path.join(os.path.dirname(spec.origin), "ec2", "resources",
                                "instance_types.json.gz")
            with gzip.open(path) as f:
                data = json.load(f)
            return {k: (v.get("VCpuInfo", {}).get("DefaultVCpus"),
                        v.get("MemoryInfo", {}).get("SizeInMiB")) for k, v in data.items()}
        except (OSError, ValueError, ImportError):
            return {}

    # -- prices
    def od_price(self, itype):
        return self.prices.get(itype)

    def spot_price(self, itype, zone):
        od = self.prices.get(itype)
        if od is None:
            return None
        h = int(hashlib.sha256(f"{itype}/{zone}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return round(od * (0.30 + 0.15 * h), 6)

    # -- moto state through /moto-api/data.json (no action is spent, no signature needed).
    # A dump costs about half a second once moto holds its AMI catalogue, so lookups are
    # cached: found keys and subnets for good, misses until IAM traffic passes (or 30 s).
    # Callers that wait for the dump another caller is making are served by it when it began
    # after they asked (four CreateFleet calls at once each waited for their own dump, one after
    # the other: up to 16 s before moto's CreateFleet on a loaded machine, bench/scaleout).
    def refresh_from_moto(self):
        asked = time.monotonic()
        with self.fetch_lock:
            with self.lock:
                epoch, at = self.fetched_at
                if at >= asked and epoch == self.iam_epoch:
                    return
                epoch, began = self.iam_epoch, time.monotonic()
            data = self.moto.data()
            with self.lock:
                for k in data.get("iam", {}).get("AccessKey", []):
                    if k.get("status", "Active") == "Active":
                        self.secrets[k["access_key_id"]] = k["secret_access_key"]
                    else:
                        self.secrets.pop(k["access_key_id"], None)
                for s in data.get("ec2", {}).get("Subnet", []):
                    self.subnets[s["id"]] = s["availability_zone"]
                    if s.get("default_for_az"):
                        self.default_subnets.setdefault(s["availability_zone"], s["id"])
                # what IAM did during the dump may be missing from it: dated from its start
                self.fetched_at = (epoch, began)

    def _fresh(self):
        epoch, at = self.fetched_at
        return epoch == self.iam_epoch and time.monotonic() - at < 30

    def secret_for(self, akid):
        with self.lock:
            if akid in self.secrets or self._fresh():
                return self.secrets.get(akid)
        self.refresh_from_moto()
        with self.lock:
            return self.secrets.get(akid)

    def zone_of_subnet(self, subnet):
        with self.lock:
            if subnet in self.subnets or self._fresh():
                return self.subnets.get(subnet)
        self.refresh_from_moto()
        with self.lock:
            return self.subnets.get(subnet)

    def note_iam_traffic(self):
        with self.lock:
            self.iam_epoch += 1

    def auth_armed(self):
        with self.lock:
            return self.action_count >= self.auth_threshold

    def launch_begin(self):
        with self.launching_cv:
            self.launching += 1

    def launch_end(self):
        with self.launching_cv:
            self.launching -= 1
            self.launching_cv.notify_all()

    def launches_wait(self, timeout=30.0):
        """Until no CreateFleet is on its way to moto's (at most timeout seconds)."""
        with self.launching_cv:
            self.launching_cv.wait_for(lambda: self.launching == 0, timeout)

    def count_forwarded_action(self):
        with self.lock:
            if self.action_count < self.auth_threshold:
                self.action_count += 1

    # -- setup: AMIs for the SSM parameters
    def setup(self):
        st, _, b = self.moto.request("POST", "/moto-api/reset-auth", b"inf")
        previous = json.loads(b)["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"] if st == 200 else "inf"
        try:
            self._register_amis()
        finally:
            self.moto.request("POST", "/moto-api/reset-auth", str(previous).encode())
        with self.lock:
            self.auth_threshold = float(previous)
            self.action_count = 0
        # made now rather than by the first CreateFleet, which waited for it: a botocore client
        # loads EC2's service model (about a second of CPU on a loaded machine; no request)
        moto_ec2(self.moto)

    def _ec2_setup_call(self, params):
        """A signed EC2 call from the proxy itself (only while moto's auth is off)."""
        body = urllib.parse.urlencode(params).encode()
        host = f"127.0.0.1:{self.moto.port}"
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        headers = {"Host": host, "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                   "X-Amz-Date": amz_date}
        auth = {"akid": "AKIAIOSFODNN7EXAMPLE", "date": amz_date[:8], "region": self.region,
                "service": "ec2", "signed": ["content-type", "host", "x-amz-date"]}
        sig = sigv4_signature("POST", "/", "", headers, body, auth, "nodesmith-ec2proxy-setup",
                              amz_date)
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={auth['akid']}/{auth['date']}/"
                                    f"{self.region}/ec2/aws4_request, SignedHeaders="
                                    f"content-type;host;x-amz-date, Signature={sig}")
        st, _, b = self.moto.request("POST", "/", body, headers)
        if st != 200:
            raise RuntimeError(f"moto {params.get('Action')}: {st} {b[:300]!r}")
        return ET.fromstring(b)

    def _register_amis(self):
        def find(params):
            root = self._ec2_setup_call(params)
            out = []
            for item in root.iter():
                if item.tag.endswith("item") and item.find("{*}imageId") is not None:
                    out.append((item.findtext("{*}name") or "", item.findtext("{*}imageId"),
                                item.findtext("{*}architecture")))
            return out

        existing = {name: iid for name, iid, _ in find({
            "Action": "DescribeImages", "Version": "2016-11-15", "Owner.1": "self",
            "Filter.1.Name": "name", "Filter.1.Value.1": "amazon-eks-node-al2023-*",
            "Filter.1.Value.2": "bottlerocket-aws-k8s-*"})}
        sources = {}
        for arch in ("x86_64", "arm64"):
            found = sorted(find({"Action": "DescribeImages", "Version": "2016-11-15",
                                 "Filter.1.Name": "architecture", "Filter.1.Value.1": arch,
                                 "Filter.2.Name": "name", "Filter.2.Value.1": "al2023-ami-2023*"}))
            if not found:
                found = sorted(find({"Action": "DescribeImages", "Version": "2016-11-15",
                                     "Filter.1.Name": "architecture", "Filter.1.Value.1": arch}))
            if not found:
                raise RuntimeError(f"moto has no {arch} AMI to copy")
            sources[arch] = found[-1][1]
        stamp = self.args.ami_release
        for ver in self.args.k8s_versions.split(","):
            ver = ver.strip()
            if not ver:
                continue
            for arch in ("x86_64", "arm64"):
                names = {
                    f"/aws/service/eks/optimized-ami/{ver}/amazon-linux-2023/{arch}/standard/"
                    "recommended/image_id": f"amazon-eks-node-al2023-{arch}-standard-{ver}-v{stamp}",
                    f"/aws/service/bottlerocket/aws-k8s-{ver}/{arch}/latest/image_id":
                        f"bottlerocket-aws-k8s-{ver}-{arch}-v1.30.0-{hashlib.sha1(ver.encode()).hexdigest()[:8]}",
                }
                for param, name in names.items():
                    iid = existing.get(name)
                    if not iid:
                        root = self._ec2_setup_call({
                            "Action": "CopyImage", "Version": "2016-11-15",
                            "SourceImageId": sources[arch], "SourceRegion": self.region,
                            "Name": name, "Description": f"EKS node image {name} (test copy)"})
                        iid = root.findtext("{*}imageId")
                    self.ssm[param] = iid

    # -- rules
    def add_rule(self, r):
        kind = r.get("kind")
        if kind not in ("ice", "throttle", "error"):
            raise ValueError("kind must be ice, throttle or error")
        rule = {"kind": kind, "count": r.get("count"), "hits": 0}
        if kind == "ice":
            rule.update({
                "instance_type": r.get("instance_type", "*"), "zone": r.get("zone", "*"),
                "capacity_type": r.get("capacity_type"), "capacity": int(r.get("capacity", 0)),
                "error_code": r.get("error_code", "InsufficientInstanceCapacity"),
                "actions": r.get("actions", ["CreateFleet", "RunInstances"])})
            if rule["capacity_type"] not in (None, "spot", "on-demand"):
                raise ValueError("capacity_type must be spot or on-demand")
        else:
            rule.update({"service": r.get("service", "ec2"), "action": r.get("action", "*")})
            if kind == "throttle":
                if r.get("rate") is not None:
                    rate = float(r["rate"])
                    if rate <= 0:
                        raise ValueError("rate must be > 0")
                    burst = float(r.get("burst", max(1.0, rate)))
                    rule.update({"rate": rate, "burst": burst, "tokens": burst,
                                 "stamp": time.monotonic()})
                elif r.get("count") is None:
                    raise ValueError("a throttle rule needs count or rate")
            else:
                status = int(r.get("status", 500))
                if status < 500 or status > 599:
                    raise ValueError("status must be 5xx")
                rule["status"] = status
                rule["code"] = r.get("code") or ("InternalError" if status == 500 else "Unavailable")
        with self.lock:
            self.rule_seq += 1
            rule["id"] = self.rule_seq
            self.rules.append(rule)
            return dict(rule)

    def front_door_fault(self, service, action):
        """Throttle / 5xx rule that hits this call, consumed; None if none does."""
        with self.lock:
            for rule in self.rules:
                if rule["kind"] not in ("throttle", "error"):
                    continue
                if rule["service"] not in ("*", service):
                    continue
                if not fnmatch.fnmatchcase(action or "", rule["action"]):
                    continue
                if rule["kind"] == "throttle" and "rate" in rule:
                    t = time.monotonic()
                    rule["tokens"] = min(rule["burst"], rule["tokens"] + (t - rule["stamp"]) * rule["rate"])
                    rule["stamp"] = t
                    if rule["tokens"] >= 1:
                        rule["tokens"] -= 1
                        continue
                elif rule["count"] is not None:
                    if rule["count"] <= 0:
                        continue
                    rule["count"] -= 1
                rule["hits"] += 1
                return dict(rule)
        return None

    def ice_rule(self, action, itype, zone, ctype):
        """The ICE rule for a pool (not consumed), or None."""
        with self.lock:
            for rule in self.rules:
                if rule["kind"] != "ice" or action not in rule["actions"]:
                    continue
                if rule["count"] is not None and rule["count"] <= 0:
                    continue
                if not fnmatch.fnmatchcase(itype or "", rule["instance_type"]):
                    continue
                if rule["zone"] != "*" and (zone is None or not fnmatch.fnmatchcase(zone, rule["zone"])):
                    continue
                if rule["capacity_type"] and rule["capacity_type"] != ctype:
                    continue
                return rule
        return None

    def note_ice(self, rule, launched):
        with self.lock:
            rule["hits"] += 1
            rule["capacity"] = max(0, rule["capacity"] - launched)
            if rule["count"] is not None:
                rule["count"] -= 1

    def record(self, entry):
        with self.lock:
            self.call_seq += 1
            t = time.time()
            entry = dict(entry, seq=self.call_seq, time=now_iso(t), unix=round(t, 3),
                         received=round(getattr(self.received, "t", t), 3))
            self.calls.append(entry)
            if len(self.calls) > 10000:
                del self.calls[:1000]
            return entry


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        if self.server.proxy.args.verbose:
            log(fmt % args)

    # ---- plumbing ----------------------------------------------------------------------
    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
                if len(out) > MAX_BODY:
                    raise ValueError("body too large")
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(n) if n else b""

    def _send(self, status, body, headers=()):
        self.send_response(status)
        sent = set()
        for k, v in headers:
            if k.lower() in HOP_BY_HOP or k.lower() in ("server", "date"):
                continue
            self.send_header(k, v)
            sent.add(k.lower())
        if "content-type" not in sent:
            self.send_header("Content-Type", "text/xml;charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _xml(self, status, body):
        self._send(status, body, [("Content-Type", "text/xml;charset=UTF-8"),
                                  ("x-amzn-RequestId", str(uuid.uuid4()))])

    def _amz_json(self, status, obj):
        self._send(status, json.dumps(obj).encode(),
                   [("Content-Type", "application/x-amz-json-1.1"),
                    ("x-amzn-RequestId", str(uuid.uuid4()))])

    def _json_error(self, status, code, message):
        self._amz_json(status, {"__type": code, "message": message})

    def do_GET(self):
        self._handle()

    def do_POST(self):
        self._handle()

    def do_PUT(self):
        self._handle()

    def do_DELETE(self):
        self._handle()

    def do_HEAD(self):
        self._handle()

    def do_PATCH(self):
        self._handle()

    def _handle(self):
        self.server.proxy.received.t = time.time()   # when this request came in (its calls' "received")
        try:
            body = self._read_body()
        except ValueError:
            self._send(413, b"request too large", [("Content-Type", "text/plain")])
            self.close_connection = True
            return
        path, _, query = self.path.partition("?")
        if path.startswith("/_fake/") or path == "/_fake":
            return self._control(path, query, body)
        try:
            self._route(path, query, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a proxy bug must surface as a 500, not a hang
            log(f"internal error: {e!r}")
            self._xml(500, ec2_error("InternalError", f"ec2proxy: {e}"))

    def _classify(self, path, query, body):
        """(service, action, query parameters or None, parsed Authorization)."""
        auth = parse_auth(self.headers, query)
        target = self.headers.get("X-Amz-Target", "")
        service = auth["service"] if auth else None
        if target.startswith("AmazonSSM."):
            return "ssm", target.split(".", 1)[1], None, auth
        if target.startswith("AWSPriceListService."):
            return "pricing", target.split(".", 1)[1], None, auth
        ctype = self.headers.get("Content-Type", "")
        pairs = None
        if self.command == "POST" and "x-www-form-urlencoded" in ctype:
            pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        elif self.command == "GET" and query:
            pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
        action = get1(pairs, "Action") if pairs else None
        if service is None and action and get1(pairs, "Version") == "2016-11-15":
            service = "ec2"
        return service, action, pairs, auth

    def _route(self, path, query, body):
        px = self.server.proxy
        if path.startswith("/moto-api/"):
            return self._forward(path, query, body, count=False,
                                 on_reset=path.startswith("/moto-api/reset-auth") and self.command == "POST")
        service, action, pairs, auth = self._classify(path, query, body)
        if service in ("iam", "sts"):
            px.note_iam_traffic()
        if service is None:
            return self._forward(path, query, body)
        fault = px.front_door_fault(service, action)
        if fault:
            if not self._self_auth(service, auth, path, query, body):
                return
            return self._inject(fault, service, action, pairs)
        if service == "ec2" and pairs is not None:
            if action == "CreateFleet":
                return self._create_fleet(path, query, body, pairs, auth)
            if action == "RunInstances":
                return self._run_instances(path, query, body, pairs, auth)
            if action == "CreateLaunchTemplate":
                return self._idempotent(path, query, body, pairs, auth, "CreateLaunchTemplate",
                                        lambda: self._forward_capture(path, query, body))
            if action == "TerminateInstances":
                st, hdrs, rb = self._forward_capture(path, query, body)
                ids = getlist(pairs, "InstanceId")
                px.record({"action": "TerminateInstances", "status": st, "instance_ids": ids})
                if st == 200:
                    px.reservations.released(ids)
                return self._send(st, rb, hdrs)
            if action == "DescribeInstances":
                st, hdrs, rb = self._forward_capture(path, query, body)
                if st == 200:
                    rb = px.reservations.with_reservation_ids(rb)
                return self._send(st, rb, hdrs)
            if action in ("CreateCapacityReservation", "DescribeCapacityReservations",
                          "CancelCapacityReservation"):
                if not self._self_auth(service, auth, path, query, body):
                    return
                return self._capacity_reservations(action, pairs)
            if action == "DescribeSpotPriceHistory":
                if not self._self_auth(service, auth, path, query, body):
                    return
                return self._spot_prices(pairs, auth["region"] if auth else px.region)
            if action == "DescribeInstanceTopology":
                if not self._self_auth(service, auth, path, query, body):
                    return
                return self._instance_topology(pairs, auth["region"] if auth else px.region)
        if service == "ssm" and action in ("GetParameter", "GetParameters"):
            return self._ssm(path, query, body, action, auth)
        if service == "pricing":
            if not self._self_auth(service, auth, path, query, body):
                return
            return self._pricing(action, body)
        return self._forward(path, query, body)

    # ---- forwarding --------------------------------------------------------------------
    def _forward_capture(self, path, query, body, headers=None, count=True):
        px = self.server.proxy
        hdrs = headers if headers is not None else [(k, v) for k, v in self.headers.items()]
        conn = http.client.HTTPConnection("127.0.0.1", px.moto.port, timeout=MOTO_TIMEOUT)
        try:
            conn.putrequest(self.command, path + ("?" + query if query else ""),
                            skip_host=True, skip_accept_encoding=True)
            for k, v in hdrs:
                if k.lower() in HOP_BY_HOP or k.lower() == "expect":
                    continue
                conn.putheader(k, v)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            r = conn.getresponse()
            rb = r.read()
            if count:
                px.count_forwarded_action()
            return r.status, r.getheaders(), rb
        finally:
            conn.close()

    def _forward(self, path, query, body, count=True, on_reset=False):
        st, hdrs, rb = self._forward_capture(path, query, body, count=count)
        if on_reset and st == 200:
            px = self.server.proxy
            try:
                value = float(body.decode().strip())
                with px.lock:
                    px.auth_threshold = value
                    px.action_count = 0
            except ValueError:
                pass
        self._send(st, rb, hdrs)

    # ---- authentication for what the proxy answers or changes ------------------------------
    def _sig_ok(self, auth, path, query, body):
        """True / False when the key is known to moto's IAM; None when it is not."""
        if not auth or auth.get("presigned"):
            return None
        secret = self.server.proxy.secret_for(auth["akid"])
        if secret is None:
            return None
        amz_date = self.headers.get("X-Amz-Date", "")
        expect = sigv4_signature(self.command, path, query, dict(self.headers.items()), body, auth,
                                 secret, amz_date)
        return hmac.compare_digest(expect, auth["signature"])

    def _self_auth(self, service, auth, path, query, body):
        """Authenticate a request the proxy answers without moto; answer the error if it fails."""
        px = self.server.proxy
        if not px.auth_armed():
            return True  # moto checks nothing yet either
        ok = self._sig_ok(auth, path, query, body)
        if ok is True:
            return True
        if service == "ec2":
            self._xml(401, ec2_error("AuthFailure",
                                     "AWS was not able to validate the provided access credentials"))
        elif ok is False:
            self._json_error(403, "SignatureDoesNotMatch",
                             "The request signature we calculated does not match the signature "
                             "you provided.")
        else:
            self._json_error(403, "UnrecognizedClientException",
                             "The security token included in the request is invalid.")
        return False

    def _rewritten_headers(self, path, query, new_body, auth, body):
        """Headers for a changed body: re-signed with the caller's key when it is known and the
        caller's signature was valid; otherwise the caller's headers unchanged (moto then
        judges the request exactly as it would have judged the original)."""
        hdrs = [(k, v) for k, v in self.headers.items()]
        ok = self._sig_ok(auth, path, query, body)
        if ok is not True:
            return hdrs
        secret = self.server.proxy.secret_for(auth["akid"])
        hmap = {k: v for k, v in hdrs}
        for k in list(hmap):
            if k.lower() == "x-amz-content-sha256" and not hmap[k].startswith("UNSIGNED"):
                hmap[k] = hashlib.sha256(new_body).hexdigest()
            if k.lower() == "content-length":
                hmap[k] = str(len(new_body))
        sig = sigv4_signature(self.command, path, query, hmap, new_body, auth, secret,
                              hmap.get("X-Amz-Date", self.headers.get("X-Amz-Date", "")))
        old = hmap["Authorization"]
        hmap["Authorization"] = re.sub(r"Signature=[0-9a-f]+", "Signature=" + sig, old)
        return list(hmap.items())

    # ---- injected faults ---------------------------------------------------------------
    def _inject(self, rule, service, action, pairs):
        px = self.server.proxy
        if rule["kind"] == "throttle":
            status = 503 if service == "ec2" else 400
            code = "RequestLimitExceeded" if service == "ec2" else "ThrottlingException"
            msg = "Request limit exceeded." if service == "ec2" else "Rate exceeded"
        else:
            status, code = rule["status"], rule["code"]
            msg = "An internal error has occurred" if status == 500 else \
                "The service is unavailable. Please try again shortly."
        if action in LOGGED_ACTIONS:
            px.record({"action": action, "status": status, "error": code, "injected": True,
                       "client_token": get1(pairs or [], "ClientToken")})
        if service == "ec2":
            return self._xml(status, ec2_error(code, msg))
        return self._json_error(status, code, msg)

    # ---- idempotency -------------------------------------------------------------------
    def _idempotent(self, path, query, body, pairs, auth, action, execute):
        """Run execute() once per ClientToken; replay its answer for the same request."""
        px = self.server.proxy
        token = get1(pairs, "ClientToken")
        if not token:
            st, hdrs, rb = execute()
            return self._send(st, rb, hdrs)
        region = auth["region"] if auth else px.region
        key = (region, action, token)
        params = sorted((k, v) for k, v in pairs)
        while True:
            with px.lock:
                entry = px.idem.get(key)
                if entry is None:
                    entry = {"params": params, "done": threading.Event(), "result": None}
                    px.idem[key] = entry
                    mine = True
                else:
                    mine = False
            if mine:
                break
            if entry["params"] != params:
                if not self._self_auth("ec2", auth, path, query, body):
                    return
                return self._xml(400, ec2_error(
                    "IdempotentParameterMismatch",
                    "The request uses the same client token as a previous, but non-identical "
                    "request. Do not reuse a client token with different requests, unless the "
                    "requests are identical."))
            if not entry["done"].wait(MOTO_TIMEOUT):
                return self._xml(503, ec2_error("Unavailable", "previous request still running"))
            if entry["result"] is not None:
                if not self._self_auth("ec2", auth, path, query, body):
                    return
                st, hdrs, rb = entry["result"]
                if action in LOGGED_ACTIONS:
                    px.record({"action": action, "status": st, "client_token": token,
                               "replayed": True})
                return self._send(st, rb, hdrs)
            # the first attempt failed: it left no record, try again as a new request
        result = None
        try:
            result = execute()
        finally:
            with px.lock:
                if result is not None and result[0] == 200:
                    entry["result"] = result
                else:
                    px.idem.pop(key, None)
                entry["done"].set()
        st, hdrs, rb = result
        return self._send(st, rb, hdrs)

    # ---- RunInstances ------------------------------------------------------------------
    def _run_instances(self, path, query, body, pairs, auth):
        px = self.server.proxy

        def execute():
            itype = get1(pairs, "InstanceType") or ("m1.small" if not get1(
                pairs, "LaunchTemplate.LaunchTemplateId") and not get1(
                pairs, "LaunchTemplate.LaunchTemplateName") else None)
            zone = get1(pairs, "Placement.AvailabilityZone")
            subnet = get1(pairs, "SubnetId") or get1(pairs, "NetworkInterface.1.SubnetId")
            if not zone and subnet:
                zone = px.zone_of_subnet(subnet)
            ctype = "spot" if get1(pairs, "InstanceMarketOptions.MarketType") == "spot" else "on-demand"
            min_c = int(get1(pairs, "MinCount", "1"))
            max_c = int(get1(pairs, "MaxCount", "1"))
            rule = px.ice_rule("RunInstances", itype, zone, ctype)
            new_body, hdrs = body, None
            if rule is not None:
                if rule["capacity"] < min_c:
                    if px.auth_armed() and self._sig_ok(auth, path, query, body) is not True:
                        return 401, [("Content-Type", "text/xml;charset=UTF-8")], ec2_error(
                            "AuthFailure", "AWS was not able to validate the provided access credentials")
                    px.note_ice(rule, 0)
                    msg = (f"We currently do not have sufficient {itype} capacity in the "
                           f"Availability Zone you requested ({zone}). Our system will be working "
                           f"on provisioning additional capacity. You can currently get {itype} "
                           "capacity by not specifying an Availability Zone in your request or "
                           "choosing " + ", ".join(z for z in px.zones if z != zone) + "."
                           if ctype == "on-demand" else
                           "There is no Spot capacity available that matches your request.")
                    px.record({"action": "RunInstances", "status": 500, "error": rule["error_code"],
                               "client_token": get1(pairs, "ClientToken"),
                               "instance_type": itype, "zone": zone, "capacity_type": ctype})
                    return 500, [("Content-Type", "text/xml;charset=UTF-8")], \
                        ec2_error(rule["error_code"], msg)
            # EC2 launches as many as it can up to MaxCount; moto launches MinCount. Ask moto
            # for the number EC2 would launch.
            n = max_c if rule is None else min(max_c, rule["capacity"])
            if n != min_c and "MinCount" in dict(pairs):
                new_pairs = [(k, str(n) if k in ("MinCount", "MaxCount") else v) for k, v in pairs]
                new_body = urllib.parse.urlencode(new_pairs).encode()
                hdrs = self._rewritten_headers(path, query, new_body, auth, body)
            st, rh, rb = self._forward_capture(path, query, new_body, headers=hdrs)
            ids = re.findall(rb"<instanceId>([^<]+)</instanceId>", rb) if st == 200 else []
            ids = [i.decode() for i in ids]
            if rule is not None and st == 200:
                px.note_ice(rule, len(ids))
            px.record({"action": "RunInstances", "status": st, "instance_ids": ids,
                       "client_token": get1(pairs, "ClientToken"), "instance_type": itype,
                       "zone": zone, "capacity_type": ctype})
            return st, rh, rb

        return self._idempotent(path, query, body, pairs, auth, "RunInstances", execute)

    # ---- CreateFleet -------------------------------------------------------------------
    def _create_fleet(self, path, query, body, pairs, auth):
        return self._idempotent(path, query, body, pairs, auth, "CreateFleet",
                                lambda: self._create_fleet_tracked(path, query, body, pairs, auth))

    def _create_fleet_tracked(self, path, query, body, pairs, auth):
        """_create_fleet_once, counted as launching until moto's CreateFleet answered."""
        self.server.proxy.launch_begin()
        self._launch_pending = True
        try:
            return self._create_fleet_once(path, query, body, pairs, auth)
        finally:
            self._launched()

    def _launched(self):
        if getattr(self, "_launch_pending", False):
            self._launch_pending = False
            self.server.proxy.launch_end()

    def _pools(self, configs, ctype):
        px = self.server.proxy
        pools = []
        for ci, cfg in enumerate(configs or []):
            spec = cfg.get("LaunchTemplateSpecification") or {}
            overrides = cfg.get("Overrides") or [{}]
            for oi, ov in enumerate(overrides):
                itype = ov.get("InstanceType")
                zone = ov.get("AvailabilityZone")
                if not zone and ov.get("SubnetId"):
                    zone = px.zone_of_subnet(ov["SubnetId"])
                weight = float(ov.get("WeightedCapacity", 1) or 1)
                if ctype == "spot":
                    price = px.spot_price(itype, zone) if zone else min(
                        (p for p in (px.spot_price(itype, z) for z in px.zones) if p is not None),
                        default=None)
                else:
                    price = px.od_price(itype)
                pools.append({"config": ci, "override": oi, "spec": spec, "ov": ov, "type": itype,
                              "zone": zone, "weight": weight, "price": price,
                              "unit_price": price / weight if price is not None else float("inf"),
                              "priority": float(ov.get("Priority", "inf") or "inf"),
                              "max_price": ov.get("MaxPrice")})
        return pools

    def _create_fleet_once(self, path, query, body, pairs, auth):
        px = self.server.proxy
        t_start = time.monotonic()
        fleet_type = get1(pairs, "Type", "maintain")
        tcs = unflatten(pairs, "TargetCapacitySpecification") or {}
        total = int(float(tcs.get("TotalTargetCapacity", "0")))
        od_t = int(float(tcs.get("OnDemandTargetCapacity", "0") or 0))
        sp_t = int(float(tcs.get("SpotTargetCapacity", "0") or 0))
        default = tcs.get("DefaultTargetCapacityType", "on-demand")
        token = get1(pairs, "ClientToken")
        if fleet_type != "instant" or (od_t > 0 and sp_t > 0):
            # maintain / request fleets and mixed fleets: moto's own behaviour (see README)
            st, rh, rb = self._forward_capture(path, query, body)
            px.record({"action": "CreateFleet", "status": st, "client_token": token,
                       "fleet_type": fleet_type, "passthrough": True,
                       "instance_ids": [i.decode() for i in re.findall(rb"<item>(i-[0-9a-f]+)</item>", rb)]})
            return st, rh, rb
        ctype = "spot" if sp_t > 0 else "on-demand" if od_t > 0 else default
        configs = unflatten(pairs, "LaunchTemplateConfigs") or []
        pools = self._pools(configs, ctype)
        opts = unflatten(pairs, "SpotOptions" if ctype == "spot" else "OnDemandOptions") or {}
        strategy = opts.get("AllocationStrategy") or "lowest-price"
        strategy = {"lowestPrice": "lowest-price", "capacityOptimized": "capacity-optimized",
                    "capacityOptimizedPrioritized": "capacity-optimized-prioritized",
                    "priceCapacityOptimized": "price-capacity-optimized"}.get(strategy, strategy)
        order = list(range(len(pools)))
        if strategy in ("lowest-price", "price-capacity-optimized"):
            order.sort(key=lambda i: (pools[i]["unit_price"], i))
        elif strategy in ("prioritized", "capacity-optimized-prioritized"):
            order.sort(key=lambda i: (pools[i]["priority"], i))
        # capacity-optimized and diversified keep the request's order (capacity is not modelled)

        errors, alloc = [], {}   # pool index -> instances
        remaining = float(total)
        rules_used = {}
        available = {}
        targets = {}             # launch template config -> capacity reservation id
        for ci, cfg in enumerate(configs):
            targets[ci] = reservation_target(px.moto, cfg.get("LaunchTemplateSpecification") or {})
        for i in order:
            p = pools[i]
            if ctype == "spot" and p["max_price"] and p["price"] is not None and \
                    float(p["max_price"]) < p["price"]:
                errors.append((i, "SpotMaxPriceTooLow",
                               f"Your Spot request price of {p['max_price']} is lower than the "
                               f"minimum required Spot request fulfillment price of {p['price']}."))
                continue
            rid = targets.get(p["config"])
            if rid:
                count, err = px.reservations.check(rid, p["type"], p["zone"])
                if err:
                    errors.append((i, err[0], err[1]))
                    continue
            rule = px.ice_rule("CreateFleet", p["type"], p["zone"], ctype)
            available[i] = float("inf") if rule is None else rule["capacity"]
            if rid:
                available[i] = min(available[i], count)
            if rule is not None:
                rules_used[i] = rule
        if strategy == "diversified":
            live = [i for i in order if i in available]
            progress = True
            while remaining > 0 and progress:
                progress = False
                for i in live:
                    if remaining <= 0:
                        break
                    if alloc.get(i, 0) < available[i]:
                        alloc[i] = alloc.get(i, 0) + 1
                        remaining -= pools[i]["weight"]
                        progress = True
        else:
            for i in order:
                if remaining <= 0:
                    break
                if i not in available:
                    continue
                need = int(-(-remaining // pools[i]["weight"]))
                n = int(min(need, available[i]))
                rid = targets.get(pools[i]["config"])
                if rid:  # the reservation's count is taken now (others launch meanwhile)
                    n = px.reservations.take(rid, n) if n > 0 else 0
                    if n < need:
                        errors.append((i, EXCEEDED, f"Insufficient capacity in the targeted Capacity "
                                                    f"Reservation {rid}."))
                if n > 0:
                    alloc[i] = n
                    remaining -= n * pools[i]["weight"]
        # From here on the reservation counts taken above are owed: given back when EC2 (moto)
        # fails or when anything here raises, bound to the instances when it launches.
        settled = False
        try:
            # An ICE entry for every pool that was tried and could not give what was still needed.
            tried_remaining = float(total)
            for i in order:
                if tried_remaining <= 0:
                    break
                if i in rules_used and alloc.get(i, 0) * pools[i]["weight"] < tried_remaining:
                    p = pools[i]
                    zone = p["zone"]
                    msg = ("There is no Spot capacity available that matches your request."
                           if ctype == "spot" else
                           f"We currently do not have sufficient {p['type']} capacity in the "
                           f"Availability Zone you requested ({zone}). Our system will be working on "
                           f"provisioning additional capacity. You can currently get {p['type']} "
                           "capacity by not specifying an Availability Zone in your request or "
                           "choosing " + ", ".join(z for z in px.zones if z != zone) + ".")
                    errors.append((i, rules_used[i]["error_code"], msg))
                tried_remaining -= alloc.get(i, 0) * pools[i]["weight"]

            # Rewrite for moto: the single pool with its instance count, or (several pools) one
            # override per instance under the diversified strategy, which makes moto launch exactly
            # one instance per override, in order; zero target capacity when nothing can launch.
            keep = [(k, v) for k, v in pairs
                    if not k.startswith("LaunchTemplateConfigs.")
                    and not k.startswith("TargetCapacitySpecification.")
                    and k != "SpotOptions.AllocationStrategy"]
            new = []
            chosen = sorted(alloc, key=order.index)
            if chosen:
                launch = [i for i in chosen for _ in range(alloc[i])] if len(chosen) > 1 else chosen
                groups = {}
                for i in launch:
                    groups.setdefault(pools[i]["config"], []).append(i)
                pool_seq = [i for idxs in groups.values() for i in idxs]
                cfg_out = []
                for ci, idxs in groups.items():
                    ovs = []
                    for i in idxs:
                        ov = dict(pools[i]["ov"])
                        if ov.get("AvailabilityZone") and not ov.get("SubnetId"):
                            sub = px.default_subnets.get(ov["AvailabilityZone"])
                            if sub is None:
                                px.refresh_from_moto()
                                sub = px.default_subnets.get(ov["AvailabilityZone"])
                            if sub:
                                ov["SubnetId"] = sub
                        ovs.append(ov)
                    cfg_out.append({"LaunchTemplateSpecification": pools[idxs[0]]["spec"],
                                    "Overrides": ovs})
                flatten("LaunchTemplateConfigs", cfg_out, new)
                units = sum(pools[i]["weight"] for i in launch) if len(chosen) > 1 else \
                    alloc[chosen[0]] * pools[chosen[0]]["weight"]
                units = int(units) if float(units).is_integer() else units
                new += [("TargetCapacitySpecification.TotalTargetCapacity", str(units)),
                        ("TargetCapacitySpecification.DefaultTargetCapacityType", ctype)]
                if len(chosen) > 1:
                    new.append(("SpotOptions.AllocationStrategy", "diversified"))
            else:
                flatten("LaunchTemplateConfigs", configs, new)
                new += [("TargetCapacitySpecification.TotalTargetCapacity", "0"),
                        ("TargetCapacitySpecification.DefaultTargetCapacityType", ctype)]
                pool_seq = []
            new_body = urllib.parse.urlencode(keep + new).encode()
            t_sign = time.monotonic()
            hdrs = self._rewritten_headers(path, query, new_body, auth, body)
            t_moto = time.monotonic()
            st, rh, rb = self._forward_capture(path, query, new_body, headers=hdrs)
            t_moto_done = time.monotonic()
            self._launched()
            if st != 200:  # what was taken is given back below
                px.record({"action": "CreateFleet", "status": st, "client_token": token,
                           "error": (re.search(rb"<Code>([^<]+)</Code>", rb) or [b"", b""])[1].decode()})
                return st, rh, rb
            root = ET.fromstring(rb)
            fleet_id = root.findtext("{*}fleetId")
            items = root.findall("{*}fleetInstanceSet/{*}item")
            per_pool = {}
            lt_specs = {}
            for n, item in enumerate(items):
                if not pool_seq or (len(pool_seq) > 1 and n >= len(pool_seq)):
                    raise RuntimeError("moto launched more instances than asked")
                i = pool_seq[n] if len(pool_seq) > 1 else pool_seq[0]
                per_pool.setdefault(i, []).extend(x.text for x in item.findall("{*}instanceIds/{*}item"))
                spec_el = item.find("{*}launchTemplateAndOverrides/{*}launchTemplateSpecification")
                if spec_el is not None:
                    lt_specs[pools[i]["config"]] = {c.tag.split("}")[1]: c.text for c in spec_el}
            for i in alloc:
                if len(per_pool.get(i, [])) != alloc[i]:
                    log(f"CreateFleet: expected {alloc[i]} instances in pool {i}, moto gave "
                        f"{len(per_pool.get(i, []))}")
            for i, rule in rules_used.items():
                px.note_ice(rule, len(per_pool.get(i, [])))
            for i, n in alloc.items():
                rid = targets.get(pools[i]["config"])
                if rid:
                    px.reservations.bind(rid, per_pool.get(i, []))
                    px.reservations.give_back(rid, n - len(per_pool.get(i, [])))
            settled = True
        finally:
            if not settled:
                for i, n in alloc.items():
                    if targets.get(pools[i]["config"]):
                        px.reservations.give_back(targets[pools[i]["config"]], n)
        fleet_tags = unflatten(pairs, "TagSpecification") or []
        for i, ids in per_pool.items():
            try:
                apply_launch_template(px.moto, ids, lt_specs.get(pools[i]["config"]) or pools[i]["spec"], fleet_tags,
                                      before_each=px.launches_wait)
            except Exception as e:  # the launch stands; what could not be applied is logged
                log(f"CreateFleet: applying the launch template to {ids}: {type(e).__name__}: {e}")

        t_applied = time.monotonic()

        def spec_xml(p):
            s = lt_specs.get(p["config"])
            if s is None:
                s = lt_specs[p["config"]] = self._resolve_lt(p["spec"])
            return "<launchTemplateSpecification>" + "".join(
                f"<{k}>{escape(str(v))}</{k}>" for k, v in s.items() if v is not None) + \
                "</launchTemplateSpecification>"

        def lto(p):
            ov = struct_xml(p["ov"])
            return ("<launchTemplateAndOverrides>" + spec_xml(p) +
                    (f"<overrides>{ov}</overrides>" if ov else "") + "</launchTemplateAndOverrides>")

        out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<CreateFleetResponse xmlns="{EC2_NS}">',
               f"<requestId>{uuid.uuid4()}</requestId>", f"<fleetId>{escape(fleet_id)}</fleetId>"]
        out.append("<errorSet>")
        for i, code, msg in errors:
            out.append(f"<item>{lto(pools[i])}<lifecycle>{ctype}</lifecycle>"
                       f"<errorCode>{code}</errorCode><errorMessage>{escape(msg)}</errorMessage></item>")
        out.append("</errorSet><fleetInstanceSet>")
        launched = []
        for i in sorted(per_pool, key=order.index):
            ids = per_pool[i]
            launched += ids
            out.append(f"<item>{lto(pools[i])}<lifecycle>{ctype}</lifecycle><instanceIds>" +
                       "".join(f"<item>{x}</item>" for x in ids) +
                       f"</instanceIds><instanceType>{escape(pools[i]['type'] or '')}</instanceType></item>")
        out.append("</fleetInstanceSet></CreateFleetResponse>")
        px.record({"action": "CreateFleet", "status": 200, "client_token": token,
                   "fleet_id": fleet_id, "capacity_type": ctype, "strategy": strategy,
                   "instance_ids": launched,
                   "pools": [{"instance_type": pools[i]["type"], "zone": pools[i]["zone"],
                              "instances": per_pool.get(i, []),
                              "capacity_reservation_id": targets.get(pools[i]["config"])} for i in order],
                   "errors": [{"instance_type": pools[i]["type"], "zone": pools[i]["zone"],
                               "error_code": c} for i, c, _ in errors],
                   # seconds spent: choosing pools (reading the templates), moto's CreateFleet,
                   # applying the launch template to the instances (moto, instance by instance)
                   # (of before_moto: re-signing for the rewritten body, which may wait for a
                   # dump of moto's keys)
                   "seconds": {"before_moto": round(t_moto - t_start, 3), "signing": round(t_moto - t_sign, 3),
                               "moto": round(t_moto_done - t_moto, 3),
                               "launch_template": round(t_applied - t_moto_done, 3)}})
        return 200, [("Content-Type", "text/xml;charset=UTF-8")], "".join(out).encode()

    # ---- capacity reservations ---------------------------------------------------------
    def _capacity_reservations(self, action, pairs):
        rs = self.server.proxy.reservations
        rid = uuid.uuid4()
        try:
            if action == "CreateCapacityReservation":
                r = rs.create(lambda k: get1(pairs, k), lambda k: unflatten(pairs, k))
                out = (f"<capacityReservation>{rs.item_xml(r)}</capacityReservation>")
            elif action == "CancelCapacityReservation":
                rs.cancel(get1(pairs, "CapacityReservationId") or "")
                out = "<return>true</return>"
            else:
                items, token = rs.describe(getlist(pairs, "CapacityReservationId"),
                                           unflatten(pairs, "Filter") or [], get1(pairs, "MaxResults"),
                                           get1(pairs, "NextToken"))
                out = ("<capacityReservationSet>" + "".join(f"<item>{rs.item_xml(r)}</item>" for r in items) +
                       "</capacityReservationSet>" + (f"<nextToken>{token}</nextToken>" if token else ""))
        except ParamError as e:
            return self._xml(400, ec2_error(e.code, e.message))
        except ValueError as e:
            return self._xml(400, ec2_error("InvalidParameterValue", str(e)))
        return self._xml(200, (f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{EC2_NS}">'
                               f"<requestId>{rid}</requestId>{out}</{action}Response>").encode())

    def _resolve_lt(self, spec):
        """LaunchTemplateId and numeric Version for an error entry, from moto's state."""
        px = self.server.proxy
        out = {"launchTemplateId": spec.get("LaunchTemplateId"),
               "launchTemplateName": None, "version": spec.get("Version")}
        try:
            data = px.moto.data()
        except (OSError, RuntimeError, ValueError):
            return out
        for lt in data.get("ec2", {}).get("LaunchTemplate", []):
            if lt.get("id") == spec.get("LaunchTemplateId") or lt.get("name") == spec.get("LaunchTemplateName"):
                v = spec.get("Version") or "$Default"
                if v == "$Latest":
                    v = lt.get("latest_version_number")
                elif v == "$Default":
                    v = lt.get("default_version_number")
                return {"launchTemplateId": lt["id"], "version": str(v)}
        return out

    # ---- DescribeSpotPriceHistory ------------------------------------------------------
    def _spot_prices(self, pairs, region):
        px = self.server.proxy
        types = set(getlist(pairs, "InstanceType"))
        pds = set(getlist(pairs, "ProductDescription"))
        zone = get1(pairs, "AvailabilityZone")
        filters = unflatten(pairs, "Filter") or []
        end = get1(pairs, "EndTime")
        start = get1(pairs, "StartTime")
        try:
            end_ts = parse_ts(end) if end else None
            start_ts = parse_ts(start) if start else None
            max_results = int(get1(pairs, "MaxResults", "1000"))
            offset = int(base64.b64decode(get1(pairs, "NextToken")).decode()) \
                if get1(pairs, "NextToken") else 0
        except (ValueError, TypeError):
            return self._xml(400, ec2_error("InvalidParameterValue", "bad parameter"))
        if start_ts and end_ts and end_ts < start_ts:
            return self._xml(400, ec2_error("InvalidParameterValue",
                                            "EndTime must be later than StartTime"))
        if not 5 <= max_results <= 1000:
            return self._xml(400, ec2_error("InvalidParameterValue",
                                            "MaxResults must be between 5 and 1000"))
        zones = [z for z in px.zones if z.startswith(region)]
        records = []
        if px.price_region == region and (end_ts is None or px.price_epoch <= end_ts):
            for itype in sorted(px.prices):
                if types and itype not in types:
                    continue
                for z in zones:
                    if zone and z != zone:
                        continue
                    for pd in PRODUCT_DESCRIPTIONS:
                        if pds and pd not in pds:
                            continue
                        records.append({"instance-type": itype, "availability-zone": z,
                                        "product-description": pd,
                                        "spot-price": "%.6f" % px.spot_price(itype, z),
                                        "timestamp": now_iso(px.price_epoch)})
        for f in filters:
            name, values = f.get("Name"), f.get("Value") or []
            if isinstance(values, str):
                values = [values]
            if name not in ("availability-zone", "instance-type", "product-description",
                            "spot-price", "timestamp"):
                return self._xml(400, ec2_error("InvalidParameterValue",
                                                f"The filter '{name}' is invalid"))
            records = [r for r in records
                       if any(fnmatch.fnmatchcase(r[name], v) for v in values)]
        page = records[offset:offset + max_results]
        nxt = base64.b64encode(str(offset + max_results).encode()).decode() \
            if offset + max_results < len(records) else ""
        out = [f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeSpotPriceHistoryResponse xmlns="{EC2_NS}">',
               f"<requestId>{uuid.uuid4()}</requestId><spotPriceHistorySet>"]
        for r in page:
            out.append(f"<item><instanceType>{r['instance-type']}</instanceType>"
                       f"<productDescription>{escape(r['product-description'])}</productDescription>"
                       f"<spotPrice>{r['spot-price']}</spotPrice><timestamp>{r['timestamp']}</timestamp>"
                       f"<availabilityZone>{r['availability-zone']}</availabilityZone></item>")
        out.append(f"</spotPriceHistorySet><nextToken>{nxt}</nextToken></DescribeSpotPriceHistoryResponse>")
        return self._xml(200, "".join(out).encode())

    # ---- DescribeInstanceTopology ------------------------------------------------------
    def _instance_topology(self, pairs, region):
        """EC2's answer from moto's instances (read from /moto-api/data.json): supported types
        that are running, each with 3 network nodes (4 for p6-b200/p6-b300), top layer first.
        The node ids are made up but stable: layer 1 per zone, layer 2 per zone and placement
        group, the bottom layer per instance. zoneId is left out (optional; moto's zone ids are
        not in its state dump)."""
        ids = getlist(pairs, "InstanceId")
        groups = getlist(pairs, "GroupName")
        filters = unflatten(pairs, "Filter") or []
        try:
            max_results = int(get1(pairs, "MaxResults", "20"))
            offset = int(base64.b64decode(get1(pairs, "NextToken")).decode()) \
                if get1(pairs, "NextToken") else 0
        except (ValueError, TypeError):
            return self._xml(400, ec2_error("InvalidParameterValue", "bad parameter"))
        if get1(pairs, "MaxResults") is not None and ids:
            return self._xml(400, ec2_error("InvalidParameterCombination",
                                            "MaxResults cannot be used with InstanceIds"))
        if not 1 <= max_results <= 100 or len(ids) > 100 or len(groups) > 100:
            return self._xml(400, ec2_error("InvalidParameterValue",
                                            "MaxResults must be 1..100; at most 100 InstanceIds "
                                            "and 100 GroupNames"))
        fields = {"availability-zone": "availability_zone", "instance-type": "instance_type",
                  "zone-id": None}
        for f in filters:
            if f.get("Name") not in fields:
                return self._xml(400, ec2_error("InvalidParameterValue",
                                                f"The filter '{f.get('Name')}' is invalid"))
            if f.get("Name") == "zone-id":
                return self._xml(400, ec2_error("InvalidParameterValue",
                                                "The filter 'zone-id' is not emulated"))
        instances = [i for i in self.server.proxy.moto.data().get("ec2", {}).get("Instance", [])
                     if i.get("region_name", region) == region]
        known = {i["id"] for i in instances}
        missing = [x for x in ids if x not in known]
        if missing:
            return self._xml(400, ec2_error("InvalidInstanceID.NotFound",
                                            f"The instance IDs '{', '.join(missing)}' do not exist"))
        out = []
        for i in sorted(instances, key=lambda i: i["id"]):
            if ids and i["id"] not in ids or groups and i.get("group_name") not in groups:
                continue
            if i.get("state") != "running" or not TOPOLOGY_TYPES.match(i["instance_type"]):
                continue
            if all(any(fnmatch.fnmatchcase(i[fields[f["Name"]]], x) for x in
                       ([f["Value"]] if isinstance(f.get("Value"), str) else f.get("Value") or []))
                   for f in filters):
                out.append(i)
        page = out if ids else out[offset:offset + max_results]
        nxt = base64.b64encode(str(offset + max_results).encode()).decode() \
            if not ids and offset + max_results < len(out) else ""

        def nn(*key):
            return "nn-" + hashlib.sha256("/".join(key).encode()).hexdigest()[:17]
        xml = [f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceTopologyResponse '
               f'xmlns="{EC2_NS}"><requestId>{uuid.uuid4()}</requestId><instanceSet>']
        for i in page:
            zone, group = i["availability_zone"], i.get("group_name") or ""
            nodes = [nn(zone), nn(zone, group), nn(zone, group, i["id"])]
            if i["instance_type"] in TOPOLOGY_FOUR_LAYERS:
                nodes.insert(2, nn(zone, group, "layer-3"))
            xml.append(f"<item><instanceId>{i['id']}</instanceId>"
                       f"<instanceType>{i['instance_type']}</instanceType>"
                       + (f"<groupName>{escape(group)}</groupName>" if group else "")
                       + "<networkNodeSet>" + "".join(f"<item>{n}</item>" for n in nodes)
                       + f"</networkNodeSet><availabilityZone>{zone}</availabilityZone></item>")
        xml.append("</instanceSet>" + (f"<nextToken>{nxt}</nextToken>" if nxt else "")
                   + "</DescribeInstanceTopologyResponse>")
        return self._xml(200, "".join(xml).encode())

    # ---- SSM ---------------------------------------------------------------------------
    SSM_PUBLIC = re.compile(r"^/aws/service/(eks/optimized-ami|bottlerocket)/")

    def _ssm_param(self, name, region):
        px = self.server.proxy
        value = px.ssm.get(name) if region == px.region else None
        if value is None:
            return None
        return {"Name": name, "Type": "String", "Value": value, "Version": 1,
                "LastModifiedDate": px.price_epoch, "ARN": f"arn:aws:ssm:{region}::parameter{name}",
                "DataType": "text"}

    def _ssm(self, path, query, body, action, auth):
        px = self.server.proxy
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return self._json_error(400, "SerializationException", "bad JSON")
        region = auth["region"] if auth else px.region
        names = [req.get("Name")] if action == "GetParameter" else list(req.get("Names") or [])
        ours = [n for n in names if isinstance(n, str) and self.SSM_PUBLIC.match(n)]
        if not ours:
            return self._forward(path, query, body)
        if not self._self_auth("ssm", auth, path, query, body):
            return
        if action == "GetParameter":
            p = self._ssm_param(names[0], region)
            if p is None:
                return self._json_error(400, "ParameterNotFound", "")
            return self._amz_json(200, {"Parameter": p})
        if len(ours) != len(names):
            # Mixed public and private names: moto answers the private ones.
            sub = json.dumps(dict(req, Names=[n for n in names if n not in ours])).encode()
            st, hdrs, rb = self._forward_capture(
                path, query, sub, headers=self._rewritten_headers(path, query, sub, auth, body))
            if st != 200:
                return self._send(st, rb, hdrs)
            res = json.loads(rb)
        else:
            res = {"Parameters": [], "InvalidParameters": []}
        for n in ours:
            p = self._ssm_param(n, region)
            if p is None:
                res.setdefault("InvalidParameters", []).append(n)
            else:
                res.setdefault("Parameters", []).append(p)
        return self._amz_json(200, res)

    # ---- Price List API ----------------------------------------------------------------
    def _products(self):
        px = self.server.proxy
        region = px.price_region
        for itype in sorted(px.prices):
            price = px.prices[itype]
            sku = "".join("ABCDEFGHJKMNPQRSTUVWXYZ23456789"[b % 31]
                          for b in hashlib.sha256(f"{region}/{itype}".encode()).digest()[:16])
            attrs = {
                "servicecode": "AmazonEC2", "servicename": "Amazon Elastic Compute Cloud",
                "location": LOCATIONS.get(region, region), "locationType": "AWS Region",
                "regionCode": region, "instanceType": itype,
                "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
                "capacitystatus": "Used", "licenseModel": "No License required",
                "marketoption": "OnDemand", "operation": "RunInstances",
                "usagetype": ("BoxUsage:" if region == "us-east-1" else "USE2-BoxUsage:") + itype,
                "currentGeneration": "Yes", "vpcnetworkingsupport": "true",
            }
            vcpu, mem = px.specs.get(itype, (None, None))
            if vcpu:
                attrs["vcpu"] = str(vcpu)
            if mem:
                gib = mem / 1024
                attrs["memory"] = (f"{gib:g} GiB")
            term = "JRTCKXETXF"
            rate = f"{sku}.{term}.6YS6EN2CT7"
            doc = {
                "product": {"productFamily": "Compute Instance", "attributes": attrs, "sku": sku},
                "serviceCode": "AmazonEC2",
                "terms": {"OnDemand": {f"{sku}.{term}": {
                    "priceDimensions": {rate: {
                        "unit": "Hrs", "endRange": "Inf",
                        "description": f"${price:g} per On Demand Linux {itype} Instance Hour",
                        "appliesTo": [], "rateCode": rate, "beginRange": "0",
                        "pricePerUnit": {"USD": f"{price:.10f}"}}},
                    "sku": sku, "effectiveDate": now_iso(px.price_epoch, millis=False),
                    "offerTermCode": term, "termAttributes": {}}}},
                "version": time.strftime("%Y%m%d%H%M%S", time.gmtime(px.price_epoch)),
                "publicationDate": now_iso(px.price_epoch, millis=False),
            }
            yield attrs, doc

    def _pricing(self, action, body):
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            return self._json_error(400, "SerializationException", "bad JSON")
        if action != "GetProducts":
            return self._json_error(400, "UnknownOperationException",
                                    f"{action} is not served by this fake")
        svc = req.get("ServiceCode")
        if not svc:
            return self._json_error(400, "InvalidParameterException", "ServiceCode is required")
        if req.get("FormatVersion", "aws_v1") != "aws_v1":
            return self._json_error(400, "InvalidParameterException", "FormatVersion must be aws_v1")
        try:
            max_results = int(req.get("MaxResults", 100))
            offset = int(base64.b64decode(req["NextToken"]).decode()) if req.get("NextToken") else 0
        except (ValueError, TypeError):
            return self._json_error(400, "InvalidNextTokenException", "bad NextToken")
        if not 1 <= max_results <= 100:
            return self._json_error(400, "InvalidParameterException", "MaxResults must be 1..100")
        filters = []
        for f in req.get("Filters") or []:
            ftype = f.get("Type", "TERM_MATCH")
            if ftype not in ("TERM_MATCH", "EQUALS", "CONTAINS", "ANY_OF", "NONE_OF"):
                return self._json_error(400, "InvalidParameterException", f"bad filter type {ftype}")
            filters.append((f.get("Field", "").lower(), ftype, f.get("Value", "")))
        out = []
        if svc == "AmazonEC2":
            for attrs, doc in self._products():
                lattrs = {k.lower(): v for k, v in attrs.items()}
                lattrs["productfamily"] = doc["product"]["productFamily"]
                lattrs["servicecode"] = "AmazonEC2"
                ok = True
                for field, ftype, value in filters:
                    have = lattrs.get(field)
                    if ftype in ("TERM_MATCH", "EQUALS"):
                        ok = have is not None and have.lower() == value.lower()
                    elif ftype == "CONTAINS":
                        ok = have is not None and value.lower() in have.lower()
                    elif ftype == "ANY_OF":
                        ok = have is not None and have.lower() in [v.strip().lower() for v in value.split(",")]
                    else:
                        ok = have is None or have.lower() not in [v.strip().lower() for v in value.split(",")]
                    if not ok:
                        break
                if ok:
                    out.append(json.dumps(doc))
        page = out[offset:offset + max_results]
        res = {"FormatVersion": "aws_v1", "PriceList": page}
        if offset + max_results < len(out):
            res["NextToken"] = base64.b64encode(str(offset + max_results).encode()).decode()
        return self._amz_json(200, res)

    # ---- control -----------------------------------------------------------------------
    def _control(self, path, query, body):
        px = self.server.proxy
        op = path[len("/_fake"):]
        q = dict(urllib.parse.parse_qsl(query))
        try:
            args = json.loads(body) if body.strip() else {}
            status, obj = 404, {"error": f"unknown control operation {self.command} {path}"}
            if op == "/health":
                status, obj = 200, {"moto_port": px.moto.port, "region": px.region}
            elif op == "/rules" and self.command == "GET":
                with px.lock:
                    status, obj = 200, {"rules": [dict(r) for r in px.rules]}
            elif op == "/rules" and self.command == "POST":
                rules = args if isinstance(args, list) else [args]
                status, obj = 200, {"rules": [px.add_rule(r) for r in rules]}
            elif op == "/rules" and self.command == "DELETE":
                with px.lock:
                    px.rules = []
                status, obj = 200, {"rules": []}
            elif re.fullmatch(r"/rules/\d+", op) and self.command == "DELETE":
                rid = int(op.rsplit("/", 1)[1])
                with px.lock:
                    before = len(px.rules)
                    px.rules = [r for r in px.rules if r["id"] != rid]
                    status = 200 if len(px.rules) < before else 404
                obj = {"deleted": rid}
            elif op == "/log" and self.command == "GET":
                with px.lock:
                    calls = [c for c in px.calls if not q.get("action") or c["action"] == q["action"]]
                    since = int(q.get("since", 0))
                    calls = [c for c in calls if c["seq"] > since]
                status, obj = 200, {"calls": calls}
            elif op == "/log" and self.command == "DELETE":
                with px.lock:
                    px.calls = []
                status, obj = 200, {"calls": []}
            elif op == "/ssm" and self.command == "GET":
                status, obj = 200, {"parameters": px.ssm}
            elif op == "/ssm" and self.command == "POST":
                # {name: image id}: AWS publishing a new EKS AMI release behind a parameter
                with px.lock:
                    px.ssm.update({str(k): str(v) for k, v in args.items()})
                status, obj = 200, {"parameters": px.ssm}
            elif op == "/capacity-reservations" and self.command == "POST":
                # a reservation EC2 would sell outside CreateCapacityReservation (a capacity block)
                status, obj = 200, {"reservation": px.reservations.add(args)}
            elif op == "/capacity-reservations" and self.command == "GET":
                items, _ = px.reservations.describe([], [])
                status, obj = 200, {"reservations": items, "instances": dict(px.reservations.instances)}
            elif op == "/prices" and self.command == "GET":
                itype = q.get("instance_type")
                if itype not in px.prices:
                    status, obj = 404, {"error": f"no price for {itype}"}
                else:
                    status, obj = 200, {"instance_type": itype, "on_demand": px.prices[itype],
                                        "spot": {z: px.spot_price(itype, z) for z in px.zones}}
        except (ValueError, KeyError, TypeError) as e:
            status, obj = 400, {"error": str(e)}
        self._send(status, (json.dumps(obj, indent=1) + "\n").encode(),
                   [("Content-Type", "application/json")])


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="JSON file with any of the options below")
    ap.add_argument("--port", type=int)
    ap.add_argument("--moto-port", type=int, help="use a moto_server already on 127.0.0.1:PORT")
    ap.add_argument("--start-moto", action="store_const", const=True,
                    help="start moto_server on a free port (the default without --moto-port)")
    ap.add_argument("--moto-no-auth-actions", type=int,
                    help="INITIAL_NO_AUTH_ACTION_COUNT for the moto this proxy starts")
    ap.add_argument("--region")
    ap.add_argument("--zones", help="comma-separated zones that get spot prices")
    ap.add_argument("--prices", help="on-demand price table (JSON)")
    ap.add_argument("--price-epoch", help="timestamp of the spot price records (epoch seconds); "
                    "default: the start of the current hour")
    ap.add_argument("--k8s-versions", help="Kubernetes versions with EKS AMI parameters")
    ap.add_argument("--ami-release", help="release stamp in the AL2023 AMI names")
    ap.add_argument("--verbose", action="store_const", const=True)
    ns = ap.parse_args(argv)
    cfg = {}
    if ns.config:
        with open(ns.config) as f:
            cfg = {k.replace("-", "_"): v for k, v in json.load(f).items()}
    for k, v in vars(ns).items():
        if v is not None and k != "config":
            cfg[k] = v
    defaults = {"port": 0, "moto_port": None, "start_moto": False, "moto_no_auth_actions": None,
                "region": "us-east-1", "prices": DEFAULT_PRICES, "price_epoch": None,
                "k8s_versions": "1.29,1.30,1.31,1.32,1.33,1.34", "ami_release": "20250101",
                "verbose": False, "zones": None}
    for k, v in defaults.items():
        cfg.setdefault(k, v)
    if not cfg["zones"]:
        cfg["zones"] = ",".join(f"{cfg['region']}{c}" for c in "abcdef") \
            if cfg["region"] == "us-east-1" else ",".join(f"{cfg['region']}{c}" for c in "abc")
    args = argparse.Namespace(**cfg)
    if args.moto_port and args.start_moto:
        raise SystemExit("--moto-port and --start-moto exclude each other")
    moto = Moto(port=args.moto_port, no_auth_actions=args.moto_no_auth_actions)
    srv = None
    try:
        moto.start()
        proxy = Proxy(args, moto)
        proxy.setup()
        srv = Server(("127.0.0.1", int(args.port)), Handler)
        srv.proxy = proxy
        print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)
        log(f"moto on 127.0.0.1:{moto.port}; {len(proxy.ssm)} SSM parameters; "
            f"auth after {proxy.auth_threshold} actions")

        def stop(signum, frame):
            threading.Thread(target=srv.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        srv.serve_forever(poll_interval=0.2)
    finally:
        if srv:
            srv.server_close()
        moto.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
