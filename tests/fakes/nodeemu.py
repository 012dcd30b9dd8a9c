#!/usr/bin/env python3
"""Node emulator for nodesmith's local stack: plays EC2's hypervisor and each node's boot.

    python3 tests/fakes/nodeemu.py --port 0 --ec2-endpoint http://127.0.0.1:P1 \
        --kube-server https://127.0.0.1:P2 --kube-ca ca.crt --kube-client-cert c.crt \
        --kube-client-key c.key --node-ca ca.crt --node-ca-key ca.key --cluster NAME \
        --coordinator tls+tcp://127.0.0.1:P3 --tls-ca ca.crt --token-file token \
        [--tls-server-name localhost] [--boot-delay 1] [--spot-grace 120] [--build build] \
        [--workdir DIR] [--agent-arg ARG ...]

Polls EC2 (DescribeInstances through the EC2 proxy, filter tag:nodesmith.io/cluster=NAME) every
--poll-interval, or twice as long as the last poll took if that is longer (moto is one Python
process). For each instance that is pending or running it starts a fake IMDS, waits the
boot delay, starts an emulated kubelet (tests/fakes/kubelet.py) that registers the Node with the
node's own client certificate on the real API server, and starts a real nodesmith-agent with a
fake node root. When the instance is going away (shutting-down, terminated, stopping, stopped,
or gone from the answer) it stops the agent (SIGTERM), the IMDS and the kubelet (graceful node
shutdown when the user data sets one) and deletes the Node as the cloud node lifecycle
controller does (finalizers keep the object; the node lifecycle controller marks it Unknown once
its Lease is no longer renewed). Spot interruptions, rebalance recommendations and maintenance
events are sent through /_emu/.

Prints `listening on 127.0.0.1:PORT` first. SIGTERM or SIGINT stop every agent and IMDS it
started. tests/fakes/README-emu.md ("Node emulator") describes the conventions it reads (tags,
user data) and its endpoints. Python 3.11 standard library only; EC2 is spoken as the Query API
over plain HTTP, signed with SigV4 (credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
dummy ones otherwise).
"""
import argparse
import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from email import message_from_string
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
from nsharness import MiB, GiB, Proc, make_root  # noqa: E402
from kubelet import Kubelet  # noqa: E402

CLUSTER_TAG = "nodesmith.io/cluster"
NODEPOOL_TAG = "nodesmith.io/nodepool"
LABELS_TAG = "nodesmith.io/node-labels"      # JSON object, used when there is no user data
TAINTS_TAG = "nodesmith.io/node-taints"      # JSON list of {key, value, effect}
LT_ID_TAG = "aws:ec2launchtemplate:id"
LT_VERSION_TAG = "aws:ec2launchtemplate:version"
LIVE = ("pending", "running")
GOING = ("shutting-down", "terminated", "stopping", "stopped")
NODECONFIG_TYPE = "application/node.eks.aws"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
EPHEMERAL_BYTES = 20 * GiB                   # root volume the emulated kubelet reports
MAX_EVENTS = 10000
AGENT_LOG_LINES = (("Connected to coordinator", "agent-connected"),
                   ("Coordinator directs: drain", "drain-directed"))

T0 = time.monotonic()


def log(msg):
    print(f"nodeemu {time.monotonic() - T0:8.2f}s {msg}", file=sys.stderr, flush=True)


def iso_now(ts=None):
    t = dt.datetime.fromtimestamp(time.time() if ts is None else ts, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


# ---- quantities -----------------------------------------------------------------------------

_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
           "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15,
           "m": 0.001, "": 1}


def quantity(text):
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)([a-zA-Z]{0,2})\s*", str(text))
    if not m or m.group(2) not in _SUFFIX:
        raise ValueError(f"bad quantity {text!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def eks_cpu_reserved_millis(vcpu):
    """EKS AMI kube-reserved CPU: 6 % of the first core, 1 % of the second, 0.5 % of the next
    two, 0.25 % of every core above four."""
    r = 0.0
    for c in range(1, vcpu + 1):
        r += 60 if c == 1 else 10 if c == 2 else 5 if c <= 4 else 2.5
    return int(-(-r // 1))


def duration_seconds(text):
    """A Go duration as the kubelet config writes it ("150s", "2m30s", "1h"): seconds; 0 for
    none or an unparsable value (graceful node shutdown off)."""
    total, pos = 0.0, 0
    text = str(text or "")
    for m in re.finditer(r"([0-9.]+)(h|ms|m|s)", text):
        if m.start() != pos:
            return 0.0
        total += float(m.group(1)) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[m.group(2)]
        pos = m.end()
    return total if pos == len(text) else 0.0


def eni_max_pods(enis, ipv4_per_eni):
    return enis * (ipv4_per_eni - 1) + 2


# ---- EC2 over the Query API ----------------------------------------------------------------

class EC2Error(Exception):
    def __init__(self, status, code, message):
        super().__init__(f"{code}: {message} (HTTP {status})")
        self.status, self.code, self.message = status, code, message


class EC2:
    VERSION = "2016-11-15"

    def __init__(self, endpoint, region, access_key, secret_key, timeout=10.0):
        self.endpoint = endpoint.rstrip("/")
        u = urllib.parse.urlsplit(self.endpoint)
        self.host = u.netloc
        self.path = u.path or "/"
        self.region = region
        self.ak, self.sk = access_key, secret_key
        self.timeout = timeout

    def _sign(self, body):
        amz = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        day = amz[:8]
        ctype = "application/x-www-form-urlencoded; charset=utf-8"
        hdrs = {"content-type": ctype, "host": self.host, "x-amz-date": amz}
        signed = ";".join(sorted(hdrs))
        canon = "\n".join(["POST", self.path, "", "".join(f"{k}:{hdrs[k]}\n" for k in sorted(hdrs)),
                           signed, hashlib.sha256(body).hexdigest()])
        scope = f"{day}/{self.region}/ec2/aws4_request"
        sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canon.encode()).hexdigest()])
        k = ("AWS4" + self.sk).encode()
        for part in (day, self.region, "ec2", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        return {"Content-Type": ctype, "X-Amz-Date": amz,
                "Authorization": f"AWS4-HMAC-SHA256 Credential={self.ak}/{scope}, "
                                 f"SignedHeaders={signed}, Signature={sig}"}

    def call(self, action, params=None):
        q = {"Action": action, "Version": self.VERSION}
        q.update(params or {})
        body = urllib.parse.urlencode(q).encode()
        req = urllib.request.Request(self.endpoint + self.path if self.path != "/" else
                                     self.endpoint + "/", data=body, headers=self._sign(body))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                data = r.read()
        except urllib.error.HTTPError as e:
            data = e.read()
            code, msg = "HTTP", data[:200].decode(errors="replace")
            try:
                root = _strip_ns(ET.fromstring(data))
                code = root.findtext(".//Error/Code") or code
                msg = root.findtext(".//Error/Message") or msg
            except ET.ParseError:
                pass
            raise EC2Error(e.code, code, msg) from None
        return _strip_ns(ET.fromstring(data))

    def describe_instances(self, filters):
        params = {}
        for i, (name, values) in enumerate(filters, 1):
            params[f"Filter.{i}.Name"] = name
            for j, v in enumerate(values, 1):
                params[f"Filter.{i}.Value.{j}"] = v
        out, token = [], None
        for _ in range(100):  # pages
            p = dict(params)
            if token:
                p["NextToken"] = token
            root = self.call("DescribeInstances", p)
            for res in root.findall("reservationSet/item"):
                owner = res.findtext("ownerId") or ""
                rid = res.findtext("reservationId") or ""
                for el in res.findall("instancesSet/item"):
                    out.append(_instance(el, owner, rid))
            token = root.findtext("nextToken")
            if not token:
                break
        return out

    def user_data(self, instance_id):
        root = self.call("DescribeInstanceAttribute", {"InstanceId": instance_id,
                                                       "Attribute": "userData"})
        return root.findtext("userData/value") or ""

    def launch_template_user_data(self, lt_id, version):
        root = self.call("DescribeLaunchTemplateVersions", {
            "LaunchTemplateId": lt_id, "LaunchTemplateVersion.1": version or "$Default"})
        return root.findtext("launchTemplateVersionSet/item/launchTemplateData/userData") or ""

    def launch_template_root_bytes(self, lt_id, version, devices=("/dev/xvda", "/dev/sda1")):
        """The root volume size the instance's launch template asks for (EC2 makes the root volume
        from it at launch), or None."""
        root = self.call("DescribeLaunchTemplateVersions", {
            "LaunchTemplateId": lt_id, "LaunchTemplateVersion.1": version or "$Default"})
        for m in root.findall("launchTemplateVersionSet/item/launchTemplateData/blockDeviceMappingSet/item"):
            if (m.findtext("deviceName") or "") in devices and m.findtext("ebs/volumeSize"):
                return int(m.findtext("ebs/volumeSize")) * GiB
        return None

    def root_volume_bytes(self, instance_id, devices=("/dev/xvda", "/dev/sda1")):
        """Size of the volume attached at the root device (what the kubelet's file system holds),
        or None when EC2 lists none there. moto's images have their root at /dev/sda1."""
        root = self.call("DescribeVolumes", {"Filter.1.Name": "attachment.instance-id",
                                             "Filter.1.Value.1": instance_id})
        for v in root.findall("volumeSet/item"):
            if any((a.findtext("device") or "") in devices for a in v.findall("attachmentSet/item")):
                return int(v.findtext("size") or 0) * GiB or None
        return None

    def instance_type(self, name):
        root = self.call("DescribeInstanceTypes", {"InstanceType.1": name})
        el = root.find("instanceTypeSet/item")
        if el is None:
            return None
        archs = [a.text for a in el.findall("processorInfo/supportedArchitectures/item")]
        return {"name": name, "vcpu": int(el.findtext("vCpuInfo/defaultVCpus") or 1),
                "memory_mib": int(el.findtext("memoryInfo/sizeInMiB") or 1024),
                "enis": int(el.findtext("networkInfo/maximumNetworkInterfaces") or 2),
                "ipv4_per_eni": int(el.findtext("networkInfo/ipv4AddressesPerInterface") or 4),
                "arch": "arm64" if "arm64" in archs else "x86_64"}

    def terminate(self, instance_id):
        self.call("TerminateInstances", {"InstanceId.1": instance_id})

    def stop(self, instance_id, hibernate=False):
        p = {"InstanceId.1": instance_id}
        if hibernate:
            p["Hibernate"] = "true"
        self.call("StopInstances", p)


def _strip_ns(root):
    for el in root.iter():
        if isinstance(el.tag, str) and "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]
    return root


def _instance(el, owner, reservation):
    def g(path):
        return (el.findtext(path) or "").strip()
    tags = {(t.findtext("key") or ""): (t.findtext("value") or "") for t in el.findall("tagSet/item")}
    return {"id": g("instanceId"), "state": g("instanceState/name"), "type": g("instanceType"),
            "zone": g("placement/availabilityZone"), "lifecycle": g("instanceLifecycle") or "on-demand",
            "privateIp": g("privateIpAddress"), "privateDns": g("privateDnsName"),
            "launchTime": g("launchTime"), "imageId": g("imageId"), "subnetId": g("subnetId"),
            "vpcId": g("vpcId"), "architecture": g("architecture"), "tags": tags,
            "capacityReservationId": g("capacityReservationId"),
            "ownerId": owner, "reservationId": reservation}


# ---- user data ------------------------------------------------------------------------------

def _deep_merge(a, b):
    """NodeConfig parts merge in order: objects key by key, kubelet flags appended, other
    lists and scalars replaced."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        elif k == "flags" and isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = out[k] + v
        else:
            out[k] = v
    return out


def parse_user_data(text):
    """The user data as a node's bootstrap reads it. Returns {"parts": [content types],
    "nodeconfig": merged NodeConfig spec or None, "files": {path: bytes} from cloud-config
    write_files, "warnings": [...]}. JSON NodeConfig and cloud-config bodies are read (both
    generators in bootstrap/userdata/ write JSON, which is YAML); other YAML is not parsed."""
    res = {"parts": [], "nodeconfig": None, "files": {}, "warnings": []}
    stripped = text.lstrip()
    parts = []
    if stripped.startswith("MIME-Version:") or stripped.lower().startswith("content-type:"):
        msg = message_from_string(stripped)
        for p in msg.walk():
            if p.is_multipart():
                continue
            payload = p.get_payload(decode=True) or b""
            parts.append((p.get_content_type(), payload.decode(errors="replace")))
    elif stripped.startswith("#cloud-config"):
        parts.append(("text/cloud-config", stripped))
    elif stripped.startswith("#!"):
        parts.append(("text/x-shellscript", stripped))
    elif "node.eks.aws/" in stripped and "NodeConfig" in stripped:
        parts.append((NODECONFIG_TYPE, stripped))
    else:
        res["warnings"].append("user data is neither MIME, cloud-config, a script nor a NodeConfig")
    for ctype, body in parts:
        res["parts"].append(ctype)
        if ctype == NODECONFIG_TYPE:
            try:
                doc = json.loads(body)
            except ValueError:
                res["warnings"].append("NodeConfig part is not JSON; ignored")
                continue
            if doc.get("kind") != "NodeConfig" or not isinstance(doc.get("spec"), dict):
                res["warnings"].append("NodeConfig part without kind NodeConfig and a spec; ignored")
                continue
            res["nodeconfig"] = _deep_merge(res["nodeconfig"] or {}, doc["spec"])
        elif ctype == "text/cloud-config":
            body = body.split("\n", 1)[1] if body.startswith("#cloud-config") else body
            try:
                doc = json.loads(body)
            except ValueError:
                res["warnings"].append("cloud-config part is not JSON; ignored")
                continue
            for f in doc.get("write_files") or []:
                path, content = f.get("path"), f.get("content", "")
                if not path:
                    continue
                enc = (f.get("encoding") or "").lower()
                try:
                    data = (base64.b64decode(content) if enc in ("b64", "base64")
                            else content.encode())
                except (binascii.Error, ValueError):
                    res["warnings"].append(f"cloud-config {path}: bad {enc}; ignored")
                    continue
                res["files"][path] = data
    return res


def kubelet_settings(nodeconfig):
    """Labels, taints, maxPods and the reservation overrides a NodeConfig gives the kubelet."""
    out = {"labels": {}, "taints": [], "maxPods": None, "config": {}}
    kub = (nodeconfig or {}).get("kubelet") or {}
    cfg = kub.get("config") or {}
    out["config"] = cfg
    if isinstance(cfg.get("maxPods"), int):
        out["maxPods"] = cfg["maxPods"]
    for t in cfg.get("registerWithTaints") or []:
        if isinstance(t, dict) and t.get("key") and t.get("effect") in TAINT_EFFECTS:
            out["taints"].append({"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]})
    for flag in kub.get("flags") or []:
        name, _, value = str(flag).partition("=")
        if name == "--node-labels":
            for kv in filter(None, value.split(",")):
                k, _, v = kv.partition("=")
                out["labels"][k.strip()] = v.strip()
        elif name == "--register-with-taints":
            for t in filter(None, value.split(",")):
                m = re.fullmatch(r"([^=:]+)(?:=([^:]*))?:(\w+)", t.strip())
                if m and m.group(3) in TAINT_EFFECTS:
                    out["taints"].append({"key": m.group(1), "value": m.group(2) or "",
                                          "effect": m.group(3)})
        elif name == "--max-pods" and value.isdigit():
            out["maxPods"] = int(value)
    return out


def node_resources(spec, max_pods, cfg, eph=EPHEMERAL_BYTES):
    """Capacity and allocatable as the kubelet on an EKS AMI reports them: kube-reserved from
    the EKS formulas (CPU tiers, 11 x maxPods + 255 MiB, 1 GiB ephemeral storage) unless the
    kubelet config sets kubeReserved, systemReserved if set, evictionHard memory.available
    (100Mi) and nodefs.available (10 %). Also returns the kubelet config to write on the node,
    the way nodeadm writes it."""
    cpu_m = spec["vcpu"] * 1000
    mem = spec["memory_mib"] * MiB
    kr = {"cpu": f"{eks_cpu_reserved_millis(spec['vcpu'])}m",
          "memory": f"{11 * max_pods + 255}Mi", "ephemeral-storage": "1Gi"}
    kr.update(cfg.get("kubeReserved") or {})
    sr = dict(cfg.get("systemReserved") or {})
    ev = {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
          "imagefs.available": "15%"}
    ev.update(cfg.get("evictionHard") or {})

    def res(d, key, total=None):
        v = d.get(key)
        if v is None:
            return 0
        if isinstance(v, str) and v.endswith("%"):
            return int(total * float(v[:-1]) / 100)
        return int(quantity(v))
    a_cpu = max(0, cpu_m - round(quantity(kr.get("cpu", "0")) * 1000)
                - round(quantity(sr.get("cpu", "0")) * 1000))
    a_mem = max(0, mem - res(kr, "memory") - res(sr, "memory") - res(ev, "memory.available", mem))
    a_eph = max(0, eph - res(kr, "ephemeral-storage") - res(sr, "ephemeral-storage")
                - res(ev, "nodefs.available", eph))
    capacity = {"cpu": str(spec["vcpu"]), "memory": f"{mem // 1024}Ki", "pods": str(max_pods),
                "ephemeral-storage": f"{eph // 1024}Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    allocatable = {"cpu": f"{a_cpu}m", "memory": f"{a_mem // 1024}Ki", "pods": str(max_pods),
                   "ephemeral-storage": str(a_eph), "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    kubelet_cfg = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   "maxPods": max_pods, "kubeReserved": kr, "evictionHard": ev}
    if sr:
        kubelet_cfg["systemReserved"] = sr
    for k, v in cfg.items():
        kubelet_cfg.setdefault(k, v)
    # the NVIDIA device plugin advertises the GPUs as an extended resource
    gpus = int(spec.get("gpu_count") or 0) if str(spec.get("gpu_manufacturer", "")).lower() == "nvidia" else 0
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
        allocatable["nvidia.com/gpu"] = str(gpus)
    return capacity, allocatable, kubelet_cfg


# ---- HTTP helpers ---------------------------------------------------------------------------

def http_json(method, url, body=None, timeout=5.0, ctx=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json",
                                          "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw) if raw else None
        except ValueError:
            return e.code, {"error": raw[:300].decode(errors="replace")}


# ---- the emulator ---------------------------------------------------------------------------

class Instance:
    def __init__(self, desc, boot):
        self.id = desc["id"]
        self.desc = desc
        self.boot = boot                 # 1 for the first boot, 2 after a stop/start...
        self.first_seen = time.monotonic()
        self.phase = "launched"          # launched, booting, ready, going, gone, failed
        self.ec2_state = desc["state"]
        self.gone = threading.Event()
        self.lock = threading.Lock()
        self.thread = None
        self.teardown_thread = None
        self.dir = None
        self.imds = None
        self.imds_port = None
        self.agent = None
        self.agent_argv = None
        self.agent_exit = None
        self.agent_log_pos = 0
        self.agent_restart_at = None     # monotonic time systemd starts the agent again
        self.agent_restarts = 0
        self.node = None
        self.node_registered = False
        self.spec = None
        self.labels = {}
        self.taints = []
        self.user_data_source = None
        self.user_data_warnings = []
        self.coordinator = None
        self.interruption = None         # {"action", "noticeTime", "deadline", "reclaimAt"...}
        self.reclaim_at = None
        self.reclaim_tries = 0
        self.kubelet = None              # the emulated kubelet on a real API server
        self.shutdown_grace = 0.0        # kubelet shutdownGracePeriod (s) from the user data

    @property
    def nodepool(self):
        return self.desc["tags"].get(NODEPOOL_TAG) or self.labels.get("nodesmith.io/nodepool")

    def public(self):
        a = self.agent
        return {"instanceId": self.id, "ec2State": self.ec2_state, "phase": self.phase,
                "boot": self.boot, "instanceType": self.desc["type"], "zone": self.desc["zone"],
                "lifecycle": self.desc["lifecycle"], "privateIp": self.desc["privateIp"],
                "node": self.node, "nodeRegistered": self.node_registered,
                "nodepool": self.nodepool, "labels": self.labels, "taints": self.taints,
                "userData": self.user_data_source, "userDataWarnings": self.user_data_warnings,
                "coordinator": self.coordinator,
                "imdsPort": self.imds_port, "imdsPid": self.imds.pid if self.imds else None,
                "imdsAlive": bool(self.imds and self.imds.alive()),
                "agentPid": a.pid if a else None, "agentAlive": bool(a and a.alive()),
                "agentExit": self.agent_exit, "agentRestarts": self.agent_restarts,
                "agentRestartPending": self.agent_restart_at is not None,
                "agentLog": a.log_path if a else None, "dir": self.dir,
                "kubeletAlive": bool(self.kubelet and not self.kubelet.dead.is_set()),
                "interruption": self.interruption,
                "launchTime": self.desc["launchTime"], "tags": self.desc["tags"]}


class Emulator:
    def __init__(self, args):
        self.args = args
        self.ec2 = EC2(args.ec2_endpoint, args.region,
                       os.environ.get("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE"),
                       os.environ.get("AWS_SECRET_ACCESS_KEY", "dummy-secret"))
        # the real API server: each node gets a kubelet (tests/fakes/kubelet.py) with its own
        # certificate, signed here as the cluster's CA would sign the kubelet's CSR
        self.kube = args.kube_server.rstrip("/")
        self.kube_ctx = ssl.create_default_context(cafile=args.kube_ca)
        self.kube_ctx.load_cert_chain(args.kube_client_cert, args.kube_client_key)
        self.lock = threading.RLock()
        self.instances = {}          # id -> Instance (the current boot)
        self.history = []            # earlier boots of restarted instances
        self.events = []
        self.seq = 0
        self.stop_evt = threading.Event()
        self.catalog = self._load_catalog(args.catalog)
        self.type_cache = {}
        self.agent_bin = os.path.join(args.build, "nodesmith-agent")
        if not os.access(self.agent_bin, os.X_OK):
            raise SystemExit(f"nodeemu: {self.agent_bin} not found; build it first (make)")
        helptext = subprocess.run([self.agent_bin, "--help"], capture_output=True, text=True,
                                  timeout=10).stdout
        self.agent_opts = set(re.findall(r"^\s+(--[a-z0-9-]+)", helptext, re.M))
        self.last_poll_error = None
        self.polls = 0
        self.signing = None

    # -- bookkeeping --------------------------------------------------------------------------
    def event(self, name, inst=None, detail=""):
        with self.lock:
            self.seq += 1
            ts = time.time()
            e = {"seq": self.seq, "time": iso_now(ts), "unix": round(ts, 3),
                 "elapsed": round(time.monotonic() - T0, 3), "event": name,
                 "instance": inst.id if inst else None, "node": inst.node if inst else None,
                 "detail": detail}
            self.events.append(e)
            del self.events[:-MAX_EVENTS]
        log(f"{name:<22} {e['instance'] or '-':<20} {detail}")

    @staticmethod
    def _load_catalog(path):
        with open(path) as f:
            doc = json.load(f)
        return {t["name"]: t for t in doc.get("instance_types", [])}

    def type_spec(self, name):
        t = self.catalog.get(name) or self.type_cache.get(name)
        if t is None:
            t = self.ec2.instance_type(name)
            if t is None:
                raise RuntimeError(f"instance type {name} is in neither the catalog nor EC2")
            self.type_cache[name] = t
        return t

    def make_signing_keys(self):
        """One regional signer for every fake IMDS, like AWS's per-region certificate."""
        d = os.path.join(self.args.workdir, "imds-signer")
        os.makedirs(d, exist_ok=True)
        cert, key = os.path.join(d, "rsa2048-cert.pem"), os.path.join(d, "rsa2048-key.pem")
        dcert, dkey = os.path.join(d, "dsa-cert.pem"), os.path.join(d, "dsa-key.pem")

        def run(*a):
            subprocess.run(a, check=True, capture_output=True, timeout=60)
        if not (os.path.exists(cert) and os.path.exists(key)):
            run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
                cert, "-days", "3650", "-sha256", "-subj",
                f"/C=US/O=nodesmith test/CN=fake imds rsa2048 signer {self.args.region}")
        if not (os.path.exists(dcert) and os.path.exists(dkey)):
            run("openssl", "dsaparam", "-genkey", "-out", dkey, "1024")
            run("openssl", "req", "-x509", "-new", "-key", dkey, "-out", dcert, "-days", "3650",
                "-sha1", "-subj", f"/C=US/O=nodesmith test/CN=fake imds dsa signer {self.args.region}")
        self.signing = {"sign_cert": cert, "sign_key": key, "dsa_cert": dcert, "dsa_key": dkey}

    # -- the EC2 poll loop --------------------------------------------------------------------
    def poll_loop(self):
        while not self.stop_evt.is_set():
            t = time.monotonic()
            try:
                self.poll_once()
                if self.last_poll_error:
                    log(f"EC2 answering again ({self.last_poll_error})")
                self.last_poll_error = None
            except (EC2Error, OSError, ET.ParseError) as e:
                if str(e) != self.last_poll_error:
                    log(f"DescribeInstances failed: {e}; retrying")
                self.last_poll_error = str(e)
            try:
                self.reclaim_due()
                self.scan_agents()
            except Exception as e:  # never let the loop die
                log(f"housekeeping failed: {e!r}")
            self.polls += 1
            # moto answers from one Python process, and DescribeInstances of 40 instances costs
            # it 0.15-0.2 s: polling every 0.2 s took nearly all of it, and CreateFleet calls
            # waited behind the polls (bench/scaleout). The poll waits at least twice as long as
            # it took, leaving moto two thirds of its time for everyone else.
            took = time.monotonic() - t
            self.stop_evt.wait(max(0.0, self.args.poll_interval - took, 2 * took))

    def poll_once(self):
        found = self.ec2.describe_instances([(f"tag:{CLUSTER_TAG}", [self.args.cluster])])
        seen = set()
        for d in found:
            if d["tags"].get(CLUSTER_TAG) != self.args.cluster:
                continue  # the filter is the contract; a proxy that ignores it must not fool us
            seen.add(d["id"])
            with self.lock:
                inst = self.instances.get(d["id"])
                if inst is None or (inst.gone.is_set() and d["state"] in LIVE):
                    if d["state"] not in LIVE:
                        continue  # already gone when first seen: nothing ever booted
                    boot = 1
                    if inst is not None:
                        self.history.append(inst)
                        boot = inst.boot + 1
                    inst = Instance(d, boot)
                    self.instances[d["id"]] = inst
                    self.event("launched", inst, f"{d['type']} {d['lifecycle']} in {d['zone']} "
                                                 f"({d['state']}; EC2 launch time {d['launchTime']})"
                               + (f", boot {boot}" if boot > 1 else ""))
                    inst.thread = threading.Thread(target=self.boot, args=(inst,), daemon=True,
                                                   name=f"boot-{inst.id}")
                    inst.thread.start()
                    continue
            inst.desc = d
            if d["state"] != inst.ec2_state:
                inst.ec2_state = d["state"]
                if d["state"] in GOING:
                    self.event(d["state"], inst, f"EC2 state {d['state']}")
                    if not inst.gone.is_set():
                        self.begin_teardown(inst)
        with self.lock:
            missing = [i for iid, i in self.instances.items() if iid not in seen and not i.gone.is_set()]
        for inst in missing:  # no longer described at all: as terminated
            inst.ec2_state = "terminated"
            self.event("terminated", inst, "no longer described by EC2")
            self.begin_teardown(inst)

    def begin_teardown(self, inst):
        with inst.lock:
            inst.gone.set()
            inst.phase = "going"
            if inst.teardown_thread is None:
                inst.teardown_thread = threading.Thread(target=self.teardown, args=(inst,),
                                                        daemon=True, name=f"teardown-{inst.id}")
                inst.teardown_thread.start()

    # -- boot ---------------------------------------------------------------------------------
    def boot(self, inst):
        try:
            self._boot(inst)
        except Exception as e:
            inst.phase = "failed" if not inst.gone.is_set() else inst.phase
            self.event("boot-failed", inst, f"{type(e).__name__}: {e}")

    def _boot(self, inst):
        d = inst.desc
        spec = inst.spec = self.type_spec(d["type"])
        inst.dir = os.path.join(self.args.workdir, inst.id + (f"-boot{inst.boot}" if inst.boot > 1 else ""))
        os.makedirs(inst.dir, exist_ok=True)
        ud_text = self.fetch_user_data(inst)
        ud = parse_user_data(ud_text) if ud_text else None
        if ud:
            inst.user_data_warnings = ud["warnings"]
            for w in ud["warnings"]:
                self.event("user-data-warning", inst, w)

        # the hypervisor side: metadata exists as soon as the instance runs
        ip = d["privateIp"] or "10.0.%d.%d" % (int(inst.id[-4:-2], 16) % 250, int(inst.id[-2:], 16) % 250 + 4)
        cfg = {"instance_id": inst.id, "instance_type": d["type"], "zone": d["zone"],
               "region": self.args.region, "life_cycle": "spot" if d["lifecycle"] == "spot" else "on-demand",
               "local_ipv4": ip, "architecture": spec["arch"]}
        if d["imageId"]:
            cfg["ami_id"] = d["imageId"]
        if d["ownerId"]:
            cfg["account_id"] = d["ownerId"]
        if d["reservationId"]:
            cfg["reservation_id"] = d["reservationId"]
        if d["launchTime"]:
            cfg["pending_time"] = d["launchTime"].split(".")[0].rstrip("Z") + "Z"
        if ud_text:
            cfg["user_data"] = ud_text
        cfg.update(self.signing or {})
        cfg_path = os.path.join(inst.dir, "imds.json")
        fd = os.open(cfg_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        with inst.lock:
            if inst.gone.is_set():
                return
            inst.imds = Proc("imds", [sys.executable, os.path.join(HERE, "imds.py"), "--port", "0",
                                      "--config", cfg_path], inst.dir)
        port = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not inst.gone.is_set():
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", inst.imds.output())
            if m:
                port = int(m.group(1))
                break
            if not inst.imds.alive():
                raise RuntimeError(f"fake IMDS exited: {inst.imds.output()[-500:]}")
            time.sleep(0.05)
        if inst.gone.is_set():
            return
        if port is None:
            raise RuntimeError("fake IMDS did not start within 20 s")
        inst.imds_port = port
        inst.phase = "booting"
        self.event("imds-started", inst, f"127.0.0.1:{port}, life cycle {cfg['life_cycle']}, "
                                         f"local-ipv4 {ip}")

        # the OS boots: what its bootstrap prepares (the node root, the kubelet's credentials) is
        # made meanwhile, so that the Node registers when the boot delay is over, not that plus
        # the emulator's own work for it (1-3 s with 40 instances at once: bench/scaleout)
        name = d["privateDns"] or ("ip-" + ip.replace(".", "-") + (
            ".ec2.internal" if self.args.region == "us-east-1" else f".{self.args.region}.compute.internal"))
        inst.node = name
        ks = kubelet_settings(ud["nodeconfig"] if ud else None)
        labels, taints = {}, []
        if ud and ud["nodeconfig"]:
            labels.update(ks["labels"])
            taints = ks["taints"]
        else:
            try:
                tl = json.loads(d["tags"].get(LABELS_TAG) or "{}")
                if isinstance(tl, dict):
                    labels.update({str(k): str(v) for k, v in tl.items()})
                tt = json.loads(d["tags"].get(TAINTS_TAG) or "[]")
                if isinstance(tt, list):
                    taints = [{"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]}
                              for t in tt if isinstance(t, dict) and t.get("key")
                              and t.get("effect") in TAINT_EFFECTS]
            except (ValueError, KeyError, TypeError) as e:
                self.event("tag-warning", inst, f"{LABELS_TAG}/{TAINTS_TAG}: {e}")
        max_pods = ks["maxPods"] or eni_max_pods(spec["enis"], spec["ipv4_per_eni"])
        try:
            lt = d["tags"].get(LT_ID_TAG)
            eph = (lt and self.ec2.launch_template_root_bytes(lt, d["tags"].get(LT_VERSION_TAG))) or \
                self.ec2.root_volume_bytes(inst.id) or EPHEMERAL_BYTES
        except Exception as e:  # an older fake without DescribeVolumes: the default disk
            self.event("volume-warning", inst, f"DescribeVolumes: {e}")
            eph = EPHEMERAL_BYTES
        capacity, allocatable, kubelet_cfg = node_resources(spec, max_pods, ks["config"], eph)
        arch = "arm64" if spec["arch"] == "arm64" else "amd64"
        # an on-demand instance in a capacity reservation is reserved capacity (Karpenter's label)
        ctype = "spot" if d["lifecycle"] == "spot" else "reserved" if d.get("capacityReservationId") else "on-demand"
        region = self.args.region
        labels.update({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": arch, "node.kubernetes.io/instance-type": d["type"],
                       "topology.kubernetes.io/zone": d["zone"],
                       "topology.kubernetes.io/region": region,
                       "nodesmith.io/capacity-type": ctype, "karpenter.sh/capacity-type": ctype})
        if d["tags"].get(NODEPOOL_TAG):
            labels["nodesmith.io/nodepool"] = d["tags"][NODEPOOL_TAG]
        inst.labels, inst.taints = labels, taints

        # the node root: what cloud-init and nodeadm leave on disk
        root = os.path.join(inst.dir, "root")
        if os.path.isdir(root):
            shutil.rmtree(root)
        make_root(root, cpus=spec["vcpu"], mem_bytes=spec["memory_mib"] * MiB,
                  gpus=int(capacity.get("nvidia.com/gpu", 0)),
                  kubelet_config=kubelet_cfg, eni_max_pods={d["type"]: eni_max_pods(
                      spec["enis"], spec["ipv4_per_eni"])})
        conf = self.write_agent_files(inst, root, ud)
        self.kubelet_credentials(inst, name)
        left = self.args.boot_delay - (time.monotonic() - inst.first_seen)
        if left > 0 and inst.gone.wait(left):
            return
        if inst.gone.is_set():
            return
        self.event("booted", inst, f"{spec['vcpu']} vCPU, {spec['memory_mib']} MiB, maxPods "
                                   f"{max_pods}; user data: {inst.user_data_source or 'none'}")

        self.start_kubelet(inst, name, labels, taints, capacity, allocatable, ip, arch, ks["config"])
        if inst.gone.is_set():
            return
        self.start_agent(inst, conf, root, port, name, arch)

    def kubelet_credentials(self, inst, name):
        """The kubelet's client certificate (system:node:NAME), as the node's bootstrap gets it."""
        from cluster import issue_cert
        inst.kubelet_cred = issue_cert(inst.dir, self.args.node_ca, self.args.node_ca_key, "kubelet",
                                       f"system:node:{name}", orgs=("system:nodes",))

    def start_kubelet(self, inst, name, labels, taints, capacity, allocatable, ip, arch, kcfg):
        """The emulated kubelet (tests/fakes/kubelet.py) registers the Node as itself."""
        d = inst.desc
        cert, key = inst.kubelet_cred
        inst.shutdown_grace = duration_seconds(kcfg.get("shutdownGracePeriod"))
        k = Kubelet(self.kube, self.args.kube_ca, cert, key, {
            "name": name, "labels": labels, "taints": taints, "capacity": capacity,
            "allocatable": allocatable, "providerID": f"aws:///{d['zone']}/{inst.id}",
            "internalIP": ip, "arch": arch,
            "external_cloud_provider": self.args.external_cloud_provider},
            boot_delay=self.args.ready_delay, grace_factor=self.args.grace_factor,
            start_delay=self.args.pod_start_delay, renew_interval=self.args.lease_renew_interval,
            log=lambda msg: self.event("kubelet", inst, msg))
        with inst.lock:
            if inst.gone.is_set():
                return
            inst.kubelet = k
            k.start()
        if not k.registered.wait(90) or k.dead.is_set():
            raise RuntimeError(f"Node {name} not registered by its kubelet")
        inst.node_registered = True
        self.event("registered", inst, f"Node {name} NotReady (Ready in {self.args.ready_delay:g}s), "
                                       f"allocatable cpu {allocatable['cpu']} memory "
                                       f"{allocatable['memory']} pods {allocatable['pods']}")

    def start_agent(self, inst, conf, root, port, name, arch):
        """systemd starts nodesmith-agent after cloud-init."""
        argv = [self.agent_bin, "--config", conf, "--root", root,
                "--imds-endpoint", f"http://127.0.0.1:{port}", "--node-name", name,
                "--log-level", "info"]
        if "--arch" in self.agent_opts:
            argv += ["--arch", arch]
        if "--logind" in self.agent_opts:
            argv += ["--logind", "no"]  # no per-node logind; the host's must not be touched
        if self.args.agent_kubeconfig:
            argv += ["--kubeconfig", self.args.agent_kubeconfig]
        else:
            # the kubelet's kubeconfig as nodeadm leaves it, with the node's client certificate:
            # the agent acts as its node (Node authorizer, NodeRestriction; docs/security.md)
            kc = os.path.join(root, "var", "lib", "kubelet", "kubeconfig")
            os.makedirs(os.path.dirname(kc), exist_ok=True)
            cert, key = inst.kubelet_cred
            with open(kc, "w") as f:
                json.dump({"apiVersion": "v1", "kind": "Config",
                           "clusters": [{"name": "kubernetes", "cluster": {
                               "server": self.args.agent_kube_server or self.kube,
                               "certificate-authority": self.args.kube_ca, "tls-server-name": "localhost"}}],
                           "contexts": [{"name": "kubelet", "context": {"cluster": "kubernetes",
                                                                        "user": "kubelet"}}],
                           "current-context": "kubelet", "users": [{"name": "kubelet", "user": {
                               "client-certificate": cert, "client-key": key}}]}, f)
            argv += ["--kubeconfig", kc]
        if inst.coordinator and re.match(r"^(tcp|ipc)[46]?://", inst.coordinator) \
                and "--insecure" in self.agent_opts:
            argv.append("--insecure")
        argv += list(self.args.agent_arg or [])
        with inst.lock:
            if inst.gone.is_set():
                return
            inst.agent_argv = argv
            inst.agent = Proc("agent", argv, inst.dir)
        inst.phase = "ready"
        self.event("agent-started", inst, f"pid {inst.agent.pid}, coordinator {inst.coordinator}")

    def fetch_user_data(self, inst):
        """What the node's bootstrap would read: the instance's user data (what IMDS serves),
        else its launch template's."""
        raw, src = "", None
        try:
            raw = self.ec2.user_data(inst.id)
            src = "instance"
        except EC2Error as e:
            self.event("user-data-warning", inst, f"DescribeInstanceAttribute: {e}")
        if not raw and inst.desc["tags"].get(LT_ID_TAG):
            try:
                raw = self.ec2.launch_template_user_data(inst.desc["tags"][LT_ID_TAG],
                                                         inst.desc["tags"].get(LT_VERSION_TAG))
                src = "launch template " + inst.desc["tags"][LT_ID_TAG]
            except EC2Error as e:
                self.event("user-data-warning", inst, f"DescribeLaunchTemplateVersions: {e}")
        if not raw:
            return ""
        try:
            text = base64.b64decode(raw, validate=True).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            text = raw  # moto may hold it undecoded
        inst.user_data_source = src
        return text

    def write_agent_files(self, inst, root, ud):
        """agent.conf, ca.crt and token under ROOT/etc/nodesmith: from the user data's
        cloud-config part when it has agent.conf (absolute paths it wrote are moved under the
        root), else from the emulator's own options. Returns agent.conf's path."""
        etc = os.path.join(root, "etc", "nodesmith")
        os.makedirs(etc, exist_ok=True)

        def put(path, data):
            full = os.path.join(root, path.lstrip("/"))
            os.makedirs(os.path.dirname(full), exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return full
        conf_path = os.path.join(etc, "agent.conf")
        files = (ud or {}).get("files") or {}
        if "/etc/nodesmith/agent.conf" in files:
            for path, data in files.items():
                put(path, data)
            lines = []
            for line in files["/etc/nodesmith/agent.conf"].decode(errors="replace").splitlines():
                m = re.match(r"^\s*([A-Za-z0-9-]+)\s*=\s*(.*?)\s*$", line)
                if m and m.group(2).startswith("/") and (m.group(2) in files or m.group(1) in (
                        "tls-ca", "token-file")):
                    line = f"{m.group(1)} = {os.path.join(root, m.group(2).lstrip('/'))}"
                if m and m.group(1) == "coordinator":
                    inst.coordinator = m.group(2)
                lines.append(line)
            put("/etc/nodesmith/agent.conf", ("\n".join(lines) + "\n").encode())
            return conf_path
        a = self.args
        if not a.coordinator:
            raise RuntimeError("no agent.conf in the user data and no --coordinator")
        settings = [("coordinator", a.coordinator)]
        if a.tls_ca:
            with open(a.tls_ca, "rb") as f:
                settings.append(("tls-ca", put("/etc/nodesmith/ca.crt", f.read())))
        if a.tls_server_name:
            settings.append(("tls-server-name", a.tls_server_name))
        if a.token_file:
            with open(a.token_file, "rb") as f:
                settings.append(("token-file", put("/etc/nodesmith/token", f.read())))
        if inst.desc["tags"].get(NODEPOOL_TAG):
            settings.append(("nodepool", inst.desc["tags"][NODEPOOL_TAG]))
        inst.coordinator = a.coordinator
        text = "# Written by nodeemu (no agent.conf in the user data).\n" + "".join(
            f"{k} = {v}\n" for k, v in settings)
        put("/etc/nodesmith/agent.conf", text.encode())
        return conf_path

    # -- teardown -----------------------------------------------------------------------------
    def teardown(self, inst, delete_node=True):
        if inst.thread is not None and inst.thread is not threading.current_thread():
            inst.thread.join(timeout=30)
        with inst.lock:
            agent, imds, kubelet = inst.agent, inst.imds, inst.kubelet
        shutdown = None
        if kubelet is not None and delete_node:
            # the OS shuts down: the kubelet's graceful node shutdown beside the agent's stop
            shutdown = threading.Thread(target=kubelet.shutdown, args=(inst.shutdown_grace,),
                                        daemon=True)
            shutdown.start()
        elif kubelet is not None:
            kubelet.stop()
        if agent is not None and inst.agent_exit is None:
            rc = agent.stop(timeout=5)
            inst.agent_exit = rc
            self.event("agent-stopped", inst, f"pid {agent.pid}, exit {rc}")
        if imds is not None and imds.alive():
            imds.stop(timeout=5)
            self.event("imds-stopped", inst, f"pid {imds.pid}")
        elif imds is not None:
            imds.stop(timeout=1)
        if shutdown is not None:
            shutdown.join(timeout=inst.shutdown_grace * self.args.grace_factor + 30)
            kubelet.stop()
            self.event("kubelet-stopped", inst, f"graceful shutdown of {inst.shutdown_grace:g}s "
                                                f"x {self.args.grace_factor:g} done")
        if delete_node and inst.node_registered and self.args.cloud_controller_manager:
            self.event("node-left", inst, f"Node {inst.node} left to the cloud controller manager")
        elif delete_node and inst.node_registered:
            # as the cloud node lifecycle controller deletes the Node of a gone instance
            try:
                st, out = http_json("DELETE", f"{self.kube}/api/v1/nodes/{urllib.parse.quote(inst.node)}",
                                    ctx=self.kube_ctx)
            except OSError as e:
                st, out = 0, str(e)
            if st == 200:
                remains = ""
                try:
                    s2, obj = http_json("GET", f"{self.kube}/api/v1/nodes/{urllib.parse.quote(inst.node)}",
                                        ctx=self.kube_ctx)
                    if s2 == 200 and (obj or {}).get("metadata", {}).get("deletionTimestamp"):
                        remains = (" (kept by finalizers "
                                   f"{obj['metadata'].get('finalizers')}, deletionTimestamp set)")
                except OSError:
                    pass
                self.event("node-deleted", inst, f"Node {inst.node} deleted{remains}")
            elif st == 404:
                self.event("node-deleted", inst, f"Node {inst.node} was already gone")
            else:
                self.event("node-delete-failed", inst, f"HTTP {st} {str(out)[:200]}")
        inst.phase = "gone"

    # -- interruptions ------------------------------------------------------------------------
    def reclaim_due(self):
        now = time.monotonic()
        with self.lock:
            due = [i for i in self.instances.values() if i.reclaim_at is not None
                   and now >= i.reclaim_at and not i.gone.is_set()]
        for inst in due:
            action = inst.interruption["action"]
            try:
                if action == "terminate":
                    self.ec2.terminate(inst.id)
                else:
                    self.ec2.stop(inst.id, hibernate=(action == "hibernate"))
                inst.reclaim_at = None
                inst.interruption["reclaimedAt"] = iso_now()
                call = "TerminateInstances" if action == "terminate" else "StopInstances"
                self.event("reclaimed", inst, f"spot {action}: {call}")
            except (EC2Error, OSError) as e:
                inst.reclaim_tries += 1
                if inst.reclaim_tries >= 20:
                    inst.reclaim_at = None
                    self.event("reclaim-failed", inst, f"gave up: {e}")
                else:
                    inst.reclaim_at = now + 0.5

    def scan_agents(self):
        with self.lock:
            live = [i for i in self.instances.values() if i.agent is not None]
        for inst in live:
            a = inst.agent
            try:
                with open(a.log_path, "rb") as f:
                    f.seek(inst.agent_log_pos)
                    chunk = f.read(1 << 20)
            except OSError:
                continue
            cut = chunk.rfind(b"\n") + 1
            inst.agent_log_pos += cut
            for line in chunk[:cut].decode(errors="replace").splitlines():
                for needle, name in AGENT_LOG_LINES:
                    if needle in line:
                        self.event(name, inst, line.strip()[-160:])
            if not a.alive() and inst.agent_exit is None and not inst.gone.is_set():
                inst.agent_exit = a.p.returncode
                self.event("agent-exited", inst, f"pid {a.pid} exited {a.p.returncode} on its own")
                if self.args.agent_restart_sec >= 0 and inst.agent_restart_at is None:
                    inst.agent_restart_at = time.monotonic() + self.args.agent_restart_sec
            if inst.agent_restart_at is not None and time.monotonic() >= inst.agent_restart_at:
                self.restart_agent(inst)

    # -- the agent's unit: kill, and start again as systemd does (Restart=always) -------------
    def kill_agent(self, inst, body):
        sig = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}.get(
            str(body.get("signal", "KILL")).upper().replace("SIG", ""))
        if sig is None:
            return 400, {"error": "signal must be KILL, TERM or INT"}
        after = body.get("restartAfter", self.args.agent_restart_sec)
        with inst.lock:
            a = inst.agent
            if inst.gone.is_set() or a is None:
                return 409, {"error": f"{inst.id} has no agent to kill (phase {inst.phase})"}
            if not a.alive():
                return 409, {"error": f"{inst.id}'s agent is not running"}
            if sig == signal.SIGKILL:
                a.kill(signal.SIGKILL)
            else:
                a.stop(timeout=10)
            inst.agent_exit = a.p.returncode
            restart = after is not None and float(after) >= 0
            inst.agent_restart_at = time.monotonic() + float(after) if restart else None
        self.event("agent-killed", inst, f"pid {a.pid} {sig.name}, exit {a.p.returncode}"
                   + (f"; restarted in {float(after):g}s" if restart else "; not restarted"))
        return 200, inst.public()

    def restart_agent(self, inst):
        with inst.lock:
            inst.agent_restart_at = None
            if inst.gone.is_set() or inst.agent_argv is None or (inst.agent and inst.agent.alive()):
                return 409, {"error": f"{inst.id}: no agent to start (phase {inst.phase})"}
            inst.agent = Proc("agent", inst.agent_argv, inst.dir)
            inst.agent_exit = None
            inst.agent_restarts += 1
        self.event("agent-restarted", inst, f"pid {inst.agent.pid} (start {inst.agent_restarts + 1})")
        return 200, inst.public()

    def find(self, ref):
        with self.lock:
            if ref in self.instances:
                return self.instances[ref]
            for i in self.instances.values():
                if i.node == ref:
                    return i
        return None

    def imds_control(self, inst, method, path, body):
        if not inst.imds_port:
            return 409, {"error": f"{inst.id} has no IMDS yet (phase {inst.phase})"}
        if not inst.imds.alive():
            return 409, {"error": f"{inst.id}'s IMDS is stopped (phase {inst.phase})"}
        return http_json(method, f"http://127.0.0.1:{inst.imds_port}/_fake/{path.lstrip('/')}", body)

    def spot(self, inst, body):
        action = body.get("action", "terminate")
        if action not in ("terminate", "stop", "hibernate"):
            return 400, {"error": "action must be terminate, stop or hibernate"}
        grace = float(body.get("grace", self.args.spot_grace))
        if inst.gone.is_set():
            return 409, {"error": f"{inst.id} is {inst.ec2_state}"}
        if inst.interruption and inst.interruption.get("kind") == "spot":
            return 409, {"error": f"{inst.id} already has a spot interruption notice",
                         "interruption": inst.interruption}
        # The notice's time is whole seconds; the instance goes at that very time. EC2 gives no
        # warning before hibernating (the notice's time is its publication).
        now = time.time()
        when = now if action == "hibernate" else float(int(now + grace + 0.999))
        req = {"action": action} if action == "hibernate" else {"action": action, "time": int(when)}
        st, out = self.imds_control(inst, "POST", "spot", req)
        if st != 200:
            return st, out
        delay = max(0.0, when - now)
        inst.interruption = {"kind": "spot", "action": action, "noticeTime": iso_now(now),
                             "time": out.get("time") if isinstance(out, dict) else None,
                             "graceSeconds": round(delay, 3)}
        inst.reclaim_at = time.monotonic() + delay
        inst.reclaim_tries = 0
        self.event("interrupted", inst, f"spot {action} notice; instance reclaimed in {delay:.1f}s "
                                        f"(at {inst.interruption['time']})")
        return 200, inst.public()

    def withdraw_spot(self, inst):
        st, out = self.imds_control(inst, "DELETE", "spot", None)
        if st == 200:
            inst.reclaim_at = None
            inst.interruption = None
            self.event("interruption-withdrawn", inst, "spot notice cleared, no reclaim")
        return st, out if st != 200 else inst.public()

    # -- state --------------------------------------------------------------------------------
    def state(self):
        with self.lock:
            insts = [i.public() for i in self.instances.values()]
            hist = [i.public() for i in self.history]
        nodes, err = [], None
        try:
            st, out = http_json("GET", self.kube + "/api/v1/nodes", ctx=self.kube_ctx, timeout=3)
            if st == 200:
                for n in out.get("items", []):
                    md = n.get("metadata", {})
                    ready = next((c.get("status") for c in n.get("status", {}).get("conditions", [])
                                  if c.get("type") == "Ready"), None)
                    nodes.append({"name": md.get("name"), "ready": ready,
                                  "providerID": n.get("spec", {}).get("providerID"),
                                  "unschedulable": bool(n.get("spec", {}).get("unschedulable")),
                                  "taints": n.get("spec", {}).get("taints", []),
                                  "deletionTimestamp": md.get("deletionTimestamp"),
                                  "finalizers": md.get("finalizers", [])})
            else:
                err = f"HTTP {st}"
        except OSError as e:
            err = str(e)
        return {"cluster": self.args.cluster, "polls": self.polls, "ec2Error": self.last_poll_error,
                "instances": insts, "earlierBoots": hist, "nodes": nodes, "nodesError": err,
                "agents": {i["instanceId"]: {"pid": i["agentPid"], "alive": i["agentAlive"]}
                           for i in insts if i["agentPid"]},
                "workdir": self.args.workdir}

    # -- shutdown -----------------------------------------------------------------------------
    def shutdown(self):
        """Stops every agent and IMDS (the Nodes are left as they are)."""
        self.stop_evt.set()
        with self.lock:
            insts = list(self.instances.values()) + list(self.history)
        ts = []
        for i in insts:
            with i.lock:
                i.gone.set()
                if i.teardown_thread is None:
                    i.teardown_thread = threading.Thread(target=self.teardown, args=(i,),
                                                         kwargs={"delete_node": False}, daemon=True)
                    i.teardown_thread.start()
                ts.append(i.teardown_thread)
        for t in ts:
            t.join(timeout=40)
        Proc.stop_all()  # anything a boot thread started after all


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "nodeemu"

    def log_message(self, fmt, *a):
        if self.server.emu.args.verbose:
            log("http " + fmt % a)

    def send_json(self, status, obj):
        data = (json.dumps(obj, indent=1) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        emu = self.server.emu
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError as e:
            return self.send_json(400, {"error": f"invalid JSON: {e}"})
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        parts = [urllib.parse.unquote(p) for p in u.path.split("/") if p]
        m = self.command
        try:
            if parts[:1] != ["_emu"]:
                return self.send_json(404, {"error": "only /_emu/ here"})
            p = parts[1:]
            if p in ([], ["healthz"]) and m == "GET":
                return self.send_json(200, {"ok": True, "endpoints": [
                    "/_emu/state", "/_emu/events?since=SEQ", "/_emu/settings",
                    "/_emu/instances/REF",
                    "/_emu/instances/REF/spot", "/_emu/instances/REF/rebalance",
                    "/_emu/instances/REF/maintenance", "/_emu/instances/REF/terminate",
                    "/_emu/instances/REF/agent/kill", "/_emu/instances/REF/agent/start",
                    "/_emu/instances/REF/kubelet/kill",
                    "/_emu/instances/REF/imds/PATH"]})
            if p == ["state"] and m == "GET":
                return self.send_json(200, emu.state())
            if p == ["settings"] and m == "POST":
                # what later boots use: {"readyDelay": s} (registration NotReady -> Ready)
                unknown = set(body) - {"readyDelay"}
                if unknown:
                    return self.send_json(400, {"error": f"unknown setting(s) {sorted(unknown)}"})
                if "readyDelay" in body:
                    v = body["readyDelay"]
                    if not isinstance(v, (int, float)) or v < 0:
                        return self.send_json(400, {"error": "readyDelay: seconds >= 0"})
                    emu.args.ready_delay = float(v)
                    emu.event("settings", None, f"ready delay {v:g}s for later boots")
                return self.send_json(200, {"readyDelay": emu.args.ready_delay})
            if p == ["events"] and m == "GET":
                since = int(q.get("since", 0))
                with emu.lock:
                    ev = [e for e in emu.events if e["seq"] > since]
                return self.send_json(200, {"events": ev, "last": emu.seq})
            if len(p) >= 2 and p[0] == "instances":
                inst = emu.find(p[1])
                if inst is None:
                    return self.send_json(404, {"error": f"no instance or node {p[1]} known here"})
                rest = p[2:]
                if rest == [] and m == "GET":
                    return self.send_json(200, inst.public())
                if rest == ["spot"] and m == "POST":
                    return self.send_json(*emu.spot(inst, body))
                if rest == ["spot"] and m == "DELETE":
                    return self.send_json(*emu.withdraw_spot(inst))
                if rest == ["rebalance"] and m == "POST":
                    st, out = emu.imds_control(inst, "POST", "rebalance", body)
                    if st == 200:
                        emu.event("rebalance", inst, f"rebalance recommendation {out.get('noticeTime')}")
                    return self.send_json(st, out)
                if rest == ["maintenance"] and m == "POST":
                    st, out = emu.imds_control(inst, "POST", "maintenance", body)
                    if st in (200, 201):
                        emu.event("maintenance", inst, f"{out.get('Code')} {out.get('EventId')} "
                                                       f"not before {out.get('NotBefore')}")
                    return self.send_json(st, out)
                if len(rest) == 3 and rest[0] == "maintenance" and rest[2] in ("cancel", "complete") \
                        and m == "POST":
                    st, out = emu.imds_control(inst, "POST", f"maintenance/{rest[1]}/{rest[2]}", body)
                    if st == 200:
                        emu.event(f"maintenance-{rest[2]}", inst, rest[1])
                    return self.send_json(st, out)
                if rest == ["terminate"] and m == "POST":
                    emu.ec2.terminate(inst.id)
                    emu.event("terminate-requested", inst, "TerminateInstances")
                    return self.send_json(200, inst.public())
                if rest == ["agent", "kill"] and m == "POST":
                    return self.send_json(*emu.kill_agent(inst, body))
                if rest == ["agent", "start"] and m == "POST":
                    return self.send_json(*emu.restart_agent(inst))
                if rest == ["kubelet", "kill"] and m == "POST":
                    if inst.kubelet is None or inst.kubelet.dead.is_set():
                        return self.send_json(409, {"error": f"{inst.id} has no running kubelet"})
                    inst.kubelet.die()
                    emu.event("kubelet-killed", inst, "heartbeats and pod updates stop")
                    return self.send_json(200, inst.public())
                if rest[:1] == ["imds"] and len(rest) >= 2:
                    return self.send_json(*emu.imds_control(inst, m, "/".join(rest[1:]),
                                                            body if raw.strip() else None))
            return self.send_json(404, {"error": f"no endpoint {m} {u.path}"})
        except EC2Error as e:
            return self.send_json(502, {"error": str(e)})
        except (OSError, ValueError) as e:
            return self.send_json(500, {"error": f"{type(e).__name__}: {e}"})

    do_GET = do_POST = do_DELETE = do_PUT = handle_any


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ec2-endpoint", required=True, help="the EC2 proxy, http://127.0.0.1:PORT")
    ap.add_argument("--kube-server", required=True, help="the API server, https://127.0.0.1:PORT")
    ap.add_argument("--kube-ca", required=True, help="CA of the API server's certificate")
    ap.add_argument("--kube-client-cert", required=True,
                    help="the emulator's own client certificate (it deletes the Nodes of gone "
                         "instances and lists Nodes for /_emu/state)")
    ap.add_argument("--kube-client-key", required=True)
    ap.add_argument("--node-ca", required=True,
                    help="CA certificate that signs each kubelet's client certificate (kubelets "
                         "emulated by tests/fakes/kubelet.py)")
    ap.add_argument("--node-ca-key", required=True)
    ap.add_argument("--ready-delay", type=float, default=1.0,
                    help="seconds from the Node's registration (NotReady) to Ready [1]")
    ap.add_argument("--grace-factor", type=float, default=1.0,
                    help="pods take deletionGracePeriodSeconds x this to go (> 0) [1]")
    ap.add_argument("--pod-start-delay", type=float, default=0.2,
                    help="seconds from a pod's binding to Running [0.2]")
    ap.add_argument("--lease-renew-interval", type=float, default=2.0,
                    help="seconds between the kubelets' Lease renewals [2]")
    ap.add_argument("--external-cloud-provider", action="store_true",
                    help="kubelets register with node.cloudprovider.kubernetes.io/uninitialized")
    ap.add_argument("--cloud-controller-manager", action="store_true",
                    help="the real AWS cloud controller manager runs (tests/pylib/ccm.py): it "
                         "deletes the Nodes of gone instances, the emulator does not")
    ap.add_argument("--agent-kubeconfig", help="kubeconfig every agent gets (--kubeconfig); without it, "
                    "each agent gets its node's kubelet kubeconfig")
    ap.add_argument("--agent-kube-server", help="API server URL in the kubelet kubeconfig the agents use "
                    "(default: --kube-server)")
    ap.add_argument("--cluster", required=True, help="value of the nodesmith.io/cluster tag")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--coordinator", help="agents' coordinator address when the user data has none")
    ap.add_argument("--tls-ca", help="CA of the coordinator's certificate (same condition)")
    ap.add_argument("--token-file", help="bootstrap token file (same condition)")
    ap.add_argument("--tls-server-name", help="name in the coordinator's certificate (same condition)")
    ap.add_argument("--catalog", default=os.path.join(ROOT, "data", "catalog-us-east-1.json"))
    ap.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")),
                    help="directory holding nodesmith-agent")
    ap.add_argument("--workdir", help="per-instance roots, configs and logs (default: a temporary "
                                      "directory removed at exit)")
    ap.add_argument("--boot-delay", type=float, default=1.0,
                    help="seconds from first sight of an instance to Node and agent [1]")
    ap.add_argument("--spot-grace", type=float, default=120.0,
                    help="seconds from a spot interruption notice to the instance's end [120]")
    ap.add_argument("--poll-interval", type=float, default=0.2, help="EC2 poll period [0.2]")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--agent-arg", action="append", default=[],
                    help="extra nodesmith-agent argument (repeatable; use --agent-arg=--x)")
    ap.add_argument("--agent-restart-sec", type=float, default=-1.0,
                    help="an agent that exits while its instance runs is started again after this "
                         "many seconds, as the unit's Restart=always/RestartSec do (< 0: never) [-1]")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if not args.grace_factor > 0:
        ap.error("--grace-factor must be above 0")
    if not args.kube_server.startswith("https://"):
        ap.error(f"--kube-server {args.kube_server}: the API server speaks https")
    args.build = os.path.abspath(args.build)
    tmp = None
    if not args.workdir:
        tmp = args.workdir = tempfile.mkdtemp(prefix="nodeemu-")
    args.workdir = os.path.abspath(args.workdir)
    os.makedirs(args.workdir, exist_ok=True)

    emu = Emulator(args)
    emu.make_signing_keys()
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    srv.emu = emu
    print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)

    def stop(signum, frame):
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    poller = threading.Thread(target=emu.poll_loop, daemon=True, name="poll")
    poller.start()
    log(f"cluster {args.cluster}: EC2 {args.ec2_endpoint}, Kubernetes {args.kube_server}, "
        f"boot delay {args.boot_delay:g}s, spot grace {args.spot_grace:g}s, workdir {args.workdir}")
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        emu.stop_evt.set()
        poller.join(timeout=15)
        emu.shutdown()
        srv.server_close()
        log("stopped every agent and IMDS")
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
