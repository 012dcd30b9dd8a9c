"""The local stack for integration tests and the demo: the EC2 proxy in front of moto, the real
Kubernetes control plane (tests/pylib/cluster.py), a nodesmith-coordinator and the node emulator
with one emulated kubelet and one real agent per instance, all on 127.0.0.1, all stopped by
stop_all() (or leaving a `with LocalStack(...)` block).

    with LocalStack(workdir) as s:
        s.start_ec2(); s.setup_network(); s.start_kube(grace_scale=0.05)
        s.start_coordinator(); s.start_emulator(boot_delay=0.3, spot_grace=3)
        iid = s.run_instance("m6i.large", spot=True, nodepool="default")
        s.wait_nodes(1); print(s.kubectl("get", "nodes"))

botocore is used for the EC2 side of the tests (the emulator itself speaks plain HTTP).
tests/fakes/README-emu.md describes the emulator and this helper, docs/testing.md the topology."""
import json

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsharness import BUILD, ROOT, Proc, free_port, make_pki, wait_for  # noqa: E402

FAKES = os.path.join(ROOT, "tests", "fakes")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DISCOVERY_TAG = "nodesmith.io/discovery"
NODE_ROLE = "nodesmith-node"  # the role the tests' EC2NodeClasses name
CLUSTER_TAG = "nodesmith.io/cluster"
NODEPOOL_TAG = "nodesmith.io/nodepool"
ACCESS_KEY, SECRET_KEY = "AKIAIOSFODNN7EXAMPLE", "dummy-secret"

# coordinator options filled in from the stack when its --help lists them (and the caller did
# not pass them): option -> attribute of LocalStack (None: that option is left out)
COORDINATOR_WIRING = (("--cluster-name", "cluster"), ("--cluster", "cluster"),
                      ("--region", "region"), ("--ec2-endpoint", "ec2_endpoint"),
                      ("--ssm-endpoint", "ec2_endpoint"), ("--iam-endpoint", "ec2_endpoint"),
                      ("--catalog", "catalog"),
                      ("--kube-server", "kube_server"), ("--kubeconfig", "kubeconfig"),
                      ("--cluster-endpoint", "kube_server"), ("--cluster-ca", "cluster_ca_b64"),
                      ("--agent-endpoint", "agent_endpoint"), ("--agent-ca", "agent_ca"),
                      ("--agent-tls-server-name", "agent_tls_server_name"),
                      ("--attestation-ca", "attestation_ca"))

def _listening(proc, what, timeout):
    def port():
        if not proc.alive():
            raise AssertionError(f"{what} exited: {proc.output()[-1500:]}")
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.output()[proc.log_start:])
        return int(m.group(1)) if m else None
    return wait_for(f"{what} to listen", port, timeout)

def _json(method, url, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{method} {url}: HTTP {e.code} {e.read()[:500]!r}") from None

class ServiceProxy:
    """What a Kubernetes Service with readiness does for the coordinators' agent port: one
    stable address; each connection goes to a coordinator whose /readyz answers 200 (the
    leader: a standby is not ready). TLS passes through untouched."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.backends = []          # (agent port, http url)
        self.stopping = False
        self.cut = False            # the link is down: connections refused and reset
        self.conns = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def set_cut(self, cut):
        """Cut (True) or restore (False) the agents' link: when cut, every open connection is
        reset and new ones are closed at once, as a network partition seen by the agents."""
        with self.lock:
            self.cut = cut
            conns = list(self.conns) if cut else []
        for x in conns:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def add(self, port, http):
        with self.lock:
            self.backends.append((port, http))

    def _ready(self):
        with self.lock:
            backends = list(self.backends)
        for port, http in reversed(backends):
            try:
                with urllib.request.urlopen(http + "/readyz", timeout=0.5) as r:
                    if r.status == 200:
                        return port
            except Exception:
                pass
        return None

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        port = None if self.cut else self._ready()
        if port is None or self.cut:
            c.close()
            return
        try:
            b = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError:
            c.close()
            return
        b.settimeout(None)
        with self.lock:
            if self.cut:
                c.close()
                b.close()
                return
            self.conns.update((c, b))

        def pump(src, dst):
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            for x in (src, dst):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        t = threading.Thread(target=pump, args=(b, c), daemon=True)
        t.start()
        pump(c, b)
        t.join(timeout=5)
        for x in (c, b):
            x.close()
        with self.lock:
            self.conns.discard(c)
            self.conns.discard(b)

    def stop(self):
        self.stopping = True
        self.sock.close()
        with self.lock:
            for x in list(self.conns):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

class LocalStack:
    def __init__(self, workdir, build=BUILD, cluster="nodesmith-test", region="us-east-1",
                 insecure=False, report_interval="1s", kube="real"):
        # kube names the Kubernetes under the stack; the real control plane is the only one
        # (the project's Python API server no longer backs a stack): "real" is accepted so that
        # callers naming it keep working, anything else is refused
        if kube != "real":
            raise ValueError(f"LocalStack(kube={kube!r}): the stack runs on the real control "
                             "plane only (tests/pylib/cluster.py); leave kube out")
        self.cluster_cp = None          # cluster.Cluster after start_kube()
        self.audit = None               # kubeaudit.PodAudit on the real control plane
        self.fault_proxy = None         # cluster.FaultProxy: the product's clients go through it
        self.ccm = None                 # ccm.CloudControllerManager after start_ccm()
        self.coordinator_kubeconfig = None
        self.agent_kube_server = None
        self.grace_scale = 1.0
        self.workdir = os.path.abspath(workdir)
        self.build = os.path.abspath(build)
        self.cluster = cluster
        self.region = region
        self.insecure = insecure
        self.report_interval = report_interval
        self.procs = {}                 # name -> Proc, in start order
        self.ports = {}
        self._pki = None
        self._ec2 = None
        self.network = None
        self.kubeconfig = os.path.join(self.workdir, "kubeconfig")
        self.coordinator_port = None
        self.coordinator_http_port = None
        self.service = None             # the coordinators' Service for agents
        self.moto_port = None
        self.seen_pids = set()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        return False

    # ---- endpoints -----------------------------------------------------------------------
    @property
    def pki(self):
        """CA, coordinator certificate for DNS:localhost, bootstrap token (nsharness.make_pki)."""
        if self._pki is None:
            d = os.path.join(self.workdir, "pki")
            os.makedirs(d, exist_ok=True)
            self._pki = make_pki(d)
        return self._pki

    @property
    def ec2_endpoint(self):
        return f"http://127.0.0.1:{self.ports['ec2']}"

    @property
    def kube_server(self):
        if self.cluster_cp is None:
            raise AssertionError("start_kube() first: no API server yet")
        return self.cluster_cp.server

    @property
    def coordinator_url(self):
        return f"{'tcp' if self.insecure else 'tls+tcp'}://127.0.0.1:{self.coordinator_port}"

    @property
    def coordinator_http(self):
        return f"http://127.0.0.1:{self.coordinator_http_port}"

    @property
    def emulator_url(self):
        return f"http://127.0.0.1:{self.ports['emulator']}"

    def binary(self, name):
        p = os.path.join(self.build, name)
        if not os.access(p, os.X_OK):
            raise FileNotFoundError(f"{name} not built in {self.build}; run make BUILD={self.build}")
        return p

    def _proc(self, name, argv, env=None):
        log = os.path.join(self.workdir, name + ".log")
        start = os.path.getsize(log) if os.path.exists(log) else 0  # a restart appends
        p = Proc(name, argv, self.workdir, env=env)
        p.log_start = start
        self.procs[name] = p
        self.seen_pids.add(p.pid)
        return p

    # ---- EC2 (ec2proxy + moto) -----------------------------------------------------------
    def start_ec2(self, moto_port=None, extra=()):
        argv = [sys.executable, os.path.join(FAKES, "ec2proxy.py"), "--port", "0"]
        if moto_port:
            argv += ["--moto-port", str(moto_port)]
        p = self._proc("ec2proxy", argv + list(extra))
        self.ports["ec2"] = _listening(p, "ec2proxy", 60)
        self.moto_port = _json("GET", self.ec2_endpoint + "/_fake/health").get("moto_port")
        return self.ec2_endpoint

    def client(self, service="ec2"):
        import botocore.session
        from botocore.config import Config
        return botocore.session.get_session().create_client(
            service, region_name=self.region, endpoint_url=self.ec2_endpoint,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            config=Config(retries={"total_max_attempts": 2}))

    @property
    def ec2(self):
        if self._ec2 is None:
            self._ec2 = self.client("ec2")
        return self._ec2

    def setup_network(self, cidr="10.20.0.0/16", zones=ZONES, node_role=NODE_ROLE):
        """A VPC, one subnet per zone and a security group, each tagged
        nodesmith.io/discovery=CLUSTER (and Name), as an EC2NodeClass's selectors find them; and
        the IAM role the nodes use (an EC2NodeClass's spec.role), as an EKS account has it."""
        if node_role:
            iam = self.client("iam")
            try:
                iam.get_role(RoleName=node_role)
            except iam.exceptions.NoSuchEntityException:
                iam.create_role(RoleName=node_role, AssumeRolePolicyDocument=json.dumps({
                    "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                            "Principal": {"Service": "ec2.amazonaws.com"}}]}))
        ec2 = self.ec2
        tags = [{"Key": DISCOVERY_TAG, "Value": self.cluster}]
        vpc = ec2.create_vpc(CidrBlock=cidr)["Vpc"]["VpcId"]
        ec2.create_tags(Resources=[vpc], Tags=tags + [{"Key": "Name", "Value": self.cluster}])
        base = cidr.split(".")
        subnets = {}
        for i, z in enumerate(zones):
            sn = ec2.create_subnet(VpcId=vpc, AvailabilityZone=z,
                                   CidrBlock=f"{base[0]}.{base[1]}.{i * 32}.0/19")["Subnet"]["SubnetId"]
            ec2.create_tags(Resources=[sn], Tags=tags + [
                {"Key": "Name", "Value": f"{self.cluster}-private-{z}"},
                {"Key": "kubernetes.io/role/internal-elb", "Value": "1"}])
            subnets[z] = sn
        sg = ec2.create_security_group(GroupName=f"{self.cluster}-nodes", VpcId=vpc,
                                       Description=f"nodes of {self.cluster}")["GroupId"]
        ec2.create_tags(Resources=[sg], Tags=tags + [{"Key": "Name", "Value": f"{self.cluster}-nodes"}])
        self.network = {"vpc": vpc, "subnets": subnets, "security_group": sg}
        return self.network

    def image_id(self, arch="x86_64", k8s_version="1.31"):
        """The EKS AL2023 AMI the proxy publishes in SSM, as the coordinator would resolve it."""
        name = (f"/aws/service/eks/optimized-ami/{k8s_version}/amazon-linux-2023/{arch}"
                "/standard/recommended/image_id")
        return self.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]

    def instances(self, cluster_only=False, states=None):
        """DescribeInstances through the proxy: {id: instance dict as botocore returns it}."""
        filters = []
        if cluster_only:
            filters.append({"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]})
        if states:
            filters.append({"Name": "instance-state-name", "Values": list(states)})
        out = {}
        for page in self.ec2.get_paginator("describe_instances").paginate(Filters=filters):
            for r in page["Reservations"]:
                for i in r["Instances"]:
                    out[i["InstanceId"]] = i
        return out

    def user_data(self, nodepool=None, labels=(), taints=(), max_pods=0, extra=()):
        """AL2023 user data from bootstrap/userdata/al2023-userdata.py for this stack's
        coordinator (TLS only: the generator accepts tls+tcp:// addresses only)."""
        if self.insecure:
            raise ValueError("the AL2023 user data names a tls+tcp:// coordinator; use insecure=False")
        ca_b64 = os.path.join(self.workdir, "cluster-ca.b64")
        if not os.path.exists(ca_b64):
            import base64
            with open(self.pki["ca"], "rb") as f, open(ca_b64, "w") as g:
                g.write(base64.b64encode(f.read()).decode())
        argv = [sys.executable, os.path.join(ROOT, "bootstrap", "userdata", "al2023-userdata.py"),
                "--cluster-name", self.cluster, "--api-server-endpoint", "https://127.0.0.1:6443",
                "--certificate-authority-file", ca_b64, "--cidr", "172.20.0.0/16",
                "--coordinator", self.coordinator_url, "--coordinator-ca", self.pki["ca"],
                "--tls-server-name", "localhost", "--token-file", self.pki["token_file"]]
        if nodepool:
            argv += ["--nodepool", nodepool]
        if max_pods:
            argv += ["--max-pods", str(max_pods)]
        for kv in labels:
            argv += ["--label", kv]
        for t in taints:
            argv += ["--taint", t]
        return subprocess.run(argv + list(extra), check=True, capture_output=True, text=True,
                              timeout=30).stdout

    def launch_template(self, name, user_data=None, image_id=None, instance_type=None, tags=None):
        import base64
        data = {"ImageId": image_id or self.image_id()}
        if instance_type:
            data["InstanceType"] = instance_type
        if user_data:
            data["UserData"] = base64.b64encode(user_data.encode()).decode()
        if self.network:
            data["SecurityGroupIds"] = [self.network["security_group"]]
        if tags:
            data["TagSpecifications"] = [{"ResourceType": "instance", "Tags": [
                {"Key": k, "Value": v} for k, v in tags.items()]}]
        return self.ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)[
            "LaunchTemplate"]["LaunchTemplateId"]

    def run_instance(self, instance_type, zone="us-east-1a", spot=False, nodepool=None,
                     cluster=True, tags=None, launch_template=None, user_data=None):
        """RunInstances of one instance in the zone's discovery subnet; tagged with this
        stack's cluster unless cluster=False or tags names another; returns the instance id."""
        t = dict(tags or {})
        if cluster:
            t.setdefault(CLUSTER_TAG, self.cluster)
        if nodepool:
            t[NODEPOOL_TAG] = nodepool
        kw = {"MinCount": 1, "MaxCount": 1, "InstanceType": instance_type}
        if launch_template:
            kw["LaunchTemplate"] = {"LaunchTemplateId": launch_template, "Version": "$Latest"}
        else:
            arch = "arm64" if re.match(r"^(a1|[a-z]+\d+g)", instance_type.split(".")[0]) else "x86_64"
            kw["ImageId"] = self.image_id(arch)
        if self.network:
            kw["SubnetId"] = self.network["subnets"][zone]
            if not launch_template:
                kw["SecurityGroupIds"] = [self.network["security_group"]]
        else:
            kw["Placement"] = {"AvailabilityZone": zone}
        if spot:
            kw["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        if user_data:
            kw["UserData"] = user_data
        if t:
            kw["TagSpecifications"] = [{"ResourceType": "instance", "Tags": [
                {"Key": k, "Value": v} for k, v in t.items()]}]
        return self.ec2.run_instances(**kw)["Instances"][0]["InstanceId"]

    def terminate(self, *instance_ids):
        return self.ec2.terminate_instances(InstanceIds=list(instance_ids))

    # ---- Kubernetes ----------------------------------------------------------------------
    def start_kube(self, grace_scale=0.05, extra=(), node_monitor_grace=10,
                   external_cloud_provider=False, fault_proxy=False, helm=None):
        """The real control plane of tests/pylib/cluster.py (etcd, kube-apiserver,
        kube-controller-manager, kube-scheduler) in WORKDIR/cluster, the shipped manifests
        applied with `kubectl apply -k packaging/kubernetes` (the in-cluster coordinator
        Deployment scaled to 0: the test runs the coordinator here), kubeconfigs for the
        coordinator's ServiceAccount (TokenRequest); the agents use their node's kubelet
        identity. grace_scale becomes the emulated kubelets' grace factor (above 0); extra goes
        to kube-apiserver; node_monitor_grace to the node lifecycle controller. With
        fault_proxy, the coordinator and the agents reach the API server through
        tests/fakes/kubeproxy.py (s.fault_proxy.fault(...), s.kube_control); a PodAudit
        (s.audit) records evictions. helm (a list of helm install arguments, [] for the
        defaults): the Helm chart packaging/helm/nodesmith is installed instead of the
        kustomize base."""
        if not grace_scale > 0:
            raise ValueError(f"start_kube(grace_scale={grace_scale}): must be above 0 (pods take "
                             "their grace period x this to go)")
        self.grace_scale = grace_scale
        from cluster import Cluster
        from kubeaudit import PodAudit
        c = self.cluster_cp = Cluster(os.path.join(self.workdir, "cluster"), build=self.build,
                                      node_monitor_grace=node_monitor_grace,
                                      external_cloud_provider=external_cloud_provider,
                                      apiserver_args=extra)
        c.start()
        self.kubeconfig = c.kubeconfig
        self.ports["kube"] = c.port
        for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            self.procs[name] = c.procs[name]
            self.seen_pids.add(c.procs[name].pid)
        self.audit = PodAudit(c).start()
        if helm is None:
            c.install_packaging()
        else:
            c.install_helm(*helm)
        self.kubectl("-n", "nodesmith", "scale", "deployment/nodesmith-coordinator", "--replicas=0")
        server = None
        if fault_proxy:
            self.fault_proxy = c.start_fault_proxy()
            self.procs["kubeproxy"] = self.fault_proxy.proc
            self.seen_pids.add(self.fault_proxy.proc.pid)
            server = self.fault_proxy.server
        self.coordinator_kubeconfig = c.service_account_kubeconfig(
            "nodesmith", "nodesmith-coordinator", server=server)
        # agents use their node's kubelet identity (the emulator writes each node's kubeconfig)
        self.agent_kube_server = server or c.server
        return self.kube_server

    def kube_get(self, path, timeout=10):
        """GET path from the API server as admin (TLS and a client certificate): the parsed
        JSON; an error status raises."""
        st, out = self.api("GET", path, timeout=timeout)
        if st != 200:
            raise urllib.error.HTTPError(self.kube_server + path, st, str(out)[:300], None, None)
        return out

    def eviction_audit(self):
        """{"evictions": [...], "violations": [...], "violationCount": N}: every eviction and
        pod deletion with its PDB accounting, from kube-apiserver's audit log
        (tests/pylib/kubeaudit.py)."""
        if self.audit is None:
            raise AssertionError("start_kube() first: the eviction audit reads its audit log")
        v = self.audit.violations()
        return {"evictions": self.audit.evictions(), "violations": v, "violationCount": len(v)}

    @property
    def kube_control(self):
        """Where /_fake/faults and /_fake/watches/drop are served: the fault proxy's control
        port (start_kube(fault_proxy=True))."""
        if self.fault_proxy is None:
            raise AssertionError("start_kube(fault_proxy=True) for API faults")
        return self.fault_proxy.control

    def kubectl(self, *args, input=None, check=True, timeout=30):
        r = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], input=input,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout

    def apply(self, yaml_text):
        return self.kubectl("apply", "-f", "-", input=yaml_text)

    def nodes(self):
        """{name: Node} as kubectl get nodes -o json gives them."""
        return {n["metadata"]["name"]: n for n in json.loads(
            self.kubectl("get", "nodes", "-o", "json"))["items"]}

    def pods(self, namespace=None):
        args = ["get", "pods", "-o", "json"] + (["-n", namespace] if namespace else ["-A"])
        return json.loads(self.kubectl(*args))["items"]

    # ---- the coordinator -----------------------------------------------------------------
    def api(self, method, path, body=None, identity=None, ctype="application/json", timeout=15):
        """One request to the API server (admin unless identity): (status, JSON)."""
        if self.cluster_cp is None:
            raise AssertionError("start_kube() first: no API server yet")
        return self.cluster_cp.api(method, path, body, identity=identity, ctype=ctype,
                                   timeout=timeout)

    def proxy(self, method, path, body=None):
        """The EC2 proxy's control endpoint: proxy("POST", "rules", {...}), proxy("GET", "log")."""
        return _json(method, f"{self.ec2_endpoint}/_fake/{path}", body)

    def start_coordinator(self, *extra, interval=None, log_level="debug", wire=True, name="coordinator",
                          ports=None):
        """nodesmith-coordinator with this stack's PKI (TLS unless insecure). With wire=True the
        options in COORDINATOR_WIRING its --help lists are filled in from the stack. ports:
        (agent port, http port) to reuse, e.g. to start a replica again where it was."""
        coord = self.binary("nodesmith-coordinator")
        self.coordinator_port, self.coordinator_http_port = ports or (free_port(), free_port())
        argv = [coord, "--listen", self.coordinator_url, "--http-listen", self.coordinator_http,
                "--report-interval", interval or self.report_interval,
                "--token-file", self.pki["token_file"], "--log-level", log_level]
        if "--max-unauthenticated-per-source" not in extra:
            # every emulated agent reaches the coordinator through the stack's Service proxy, from
            # 127.0.0.1: one address for the whole fleet (on EKS each node has its own)
            argv += ["--max-unauthenticated-per-source", "64"]
        if "--api-listen" not in extra:
            # /api/v1 beside the metrics, no authentication (tests/security/test_http_api.py tests it)
            argv += ["--api-listen", self.coordinator_http, "--api-auth", "none"]
        if self.insecure:
            argv.append("--insecure")
        else:
            argv += ["--tls-cert", self.pki["cert"], "--tls-key", self.pki["key"]]
        if wire:
            helptext = subprocess.run([coord, "--help"], capture_output=True, text=True,
                                      timeout=10).stdout
            opts = set(re.findall(r"^\s+(--[a-z0-9-]+)", helptext, re.M))
            given = {a.split("=")[0] for a in extra if a.startswith("--")}
            for opt, attr in COORDINATOR_WIRING:
                if opt not in opts or opt in given:
                    continue
                if opt == "--kube-server" and self.coordinator_kubeconfig:
                    continue  # the ServiceAccount's kubeconfig names the server
                if opt == "--kubeconfig" and "--kube-server" in given:
                    continue
                value = self._wiring_value(attr)
                if value is not None:
                    argv += [opt, str(value)]
                    given.add(opt)
            if "--lease-namespace" in opts and "kube" in self.ports:
                # the namespace of the leader Lease, as the coordinator's manifests create it
                m = re.search(r"--lease-namespace\s+VALUE.*\[([^\]]+)\]", helptext)
                ns = next((extra[i + 1] for i, a in enumerate(extra[:-1]) if a == "--lease-namespace"),
                          m.group(1) if m else "nodesmith")
                self.kubectl("create", "namespace", ns, check=False)
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
               "AWS_EC2_METADATA_DISABLED": "true"}
        if "ec2" in self.ports:
            env["AWS_ENDPOINT_URL_EC2"] = self.ec2_endpoint
        p = self._proc(name, argv + list(extra), env=env)

        def healthy():
            if not p.alive():
                raise AssertionError(f"coordinator exited: {p.output()[-1500:]}")
            with urllib.request.urlopen(self.coordinator_http + "/healthz", timeout=2) as r:
                return r.status == 200
        wait_for("coordinator /healthz", healthy, 15)
        if self.service is None:
            self.service = ServiceProxy()
        if (self.coordinator_port, self.coordinator_http) not in self.service.backends:
            self.service.add(self.coordinator_port, self.coordinator_http)
        return p

    def _wiring_value(self, attr):
        if attr in ("ec2_endpoint",) and "ec2" not in self.ports:
            return None
        if attr in ("kube_server", "kubeconfig") and "kube" not in self.ports:
            return None
        if attr == "kubeconfig" and self.coordinator_kubeconfig:
            return self.coordinator_kubeconfig
        if attr in ("agent_endpoint", "agent_ca", "agent_tls_server_name", "cluster_ca_b64") \
                and self.insecure:
            return None  # node user data names tls+tcp:// coordinators only
        return getattr(self, attr)

    @property
    def catalog(self):
        return os.path.join(ROOT, "data", "catalog-us-east-1.json")

    @property
    def agent_endpoint(self):
        """Where agents dial: the Service in front of the coordinators."""
        if self.service is None:
            self.service = ServiceProxy()
        return f"{'tcp' if self.insecure else 'tls+tcp'}://127.0.0.1:{self.service.port}"

    @property
    def imds_signer(self):
        """The stack's stand-in for AWS's regional RSA-2048 certificate: the node emulator's
        fake IMDS sign identity documents with it (nodeemu reuses NODES/imds-signer), and the
        coordinator trusts it for attestation. {"sign_cert": PEM path, "sign_key": PEM path}."""
        d = os.path.join(self.workdir, "nodes", "imds-signer")
        cert, key = os.path.join(d, "rsa2048-cert.pem"), os.path.join(d, "rsa2048-key.pem")
        if not (os.path.exists(cert) and os.path.exists(key)):
            os.makedirs(d, exist_ok=True)
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                            key, "-out", cert, "-days", "3650", "-sha256", "-subj",
                            f"/C=US/O=nodesmith test/CN=fake imds rsa2048 signer {self.region}"],
                           check=True, capture_output=True, timeout=60)
        return {"sign_cert": cert, "sign_key": key}

    @property
    def attestation_ca(self):
        return self.imds_signer["sign_cert"]

    @property
    def agent_ca(self):
        return self.pki["ca"]

    @property
    def agent_tls_server_name(self):
        return "localhost"

    @property
    def cluster_ca_b64(self):
        import base64
        with open(self.pki["ca"], "rb") as f:
            return base64.b64encode(f.read()).decode()

    def coordinator_nodes(self):
        """{instanceId: node} from `nodesmithctl nodes -o json`."""
        out = subprocess.run([self.binary("nodesmithctl"), "nodes", "--coordinator",
                              self.coordinator_http, "-o", "json"], check=True,
                             capture_output=True, text=True, timeout=10).stdout
        return {n["instanceId"]: n for n in json.loads(out)["items"]}

    # ---- the AWS cloud controller manager ------------------------------------------------
    def start_ccm(self):
        """The real AWS cloud controller manager (tests/pylib/ccm.py, docs/testing-aws.md): it
        initialises the Nodes (with start_kube(external_cloud_provider=True) they register
        tainted uninitialized) and deletes those whose instances are gone; the node emulator,
        started after this, leaves that to it. Needs start_ec2(), setup_network() and
        start_kube()."""
        if self.cluster_cp is None or self.network is None:
            raise ValueError("start_ccm() needs start_kube() and setup_network()")
        from ccm import CloudControllerManager
        d = os.path.join(self.workdir, "ccm")
        os.makedirs(d, exist_ok=True)
        self.ccm = CloudControllerManager(d, self.cluster_cp, self.ec2_endpoint, self.network,
                                          self.cluster, build=self.build).start()
        for name, p in (("aws-cloud-controller-manager", self.ccm.proc),
                        ("aemm-control-plane", self.ccm.imds)):
            self.procs[name] = p
            self.seen_pids.add(p.pid)
        return self.ccm

    # ---- the node emulator ---------------------------------------------------------------
    def start_emulator(self, boot_delay=0.3, spot_grace=120.0, agent_args=(), extra=(),
                       ready_delay=0.5):
        """tests/fakes/nodeemu.py (after start_kube()). Each node gets an emulated kubelet
        (tests/fakes/kubelet.py): registered NotReady boot_delay after launch, Ready ready_delay
        later; pods go in their grace period x the grace_scale of start_kube()."""
        c = self.cluster_cp
        if c is None:
            raise AssertionError("start_kube() before start_emulator(): the kubelets register there")
        argv = [sys.executable, os.path.join(FAKES, "nodeemu.py"), "--port", "0",
                "--ec2-endpoint", self.ec2_endpoint, "--kube-server", self.kube_server,
                "--cluster", self.cluster, "--region", self.region, "--build", self.build,
                "--workdir", os.path.join(self.workdir, "nodes"),
                "--boot-delay", str(boot_delay), "--spot-grace", str(spot_grace)]
        if self.coordinator_port:
            argv += ["--coordinator", self.agent_endpoint, "--token-file", self.pki["token_file"]]
            if not self.insecure:
                argv += ["--tls-ca", self.pki["ca"], "--tls-server-name", "localhost"]
        emu_id = c.user_identity("nodesmith-test-cloud-node-lifecycle", groups=("system:masters",))
        argv += ["--kube-ca", c.ca, "--kube-client-cert", emu_id.cert,
                 "--kube-client-key", emu_id.key, "--node-ca", c.pki.ca,
                 "--node-ca-key", c.pki.ca_key, "--ready-delay", str(ready_delay),
                 "--grace-factor", str(self.grace_scale),
                 "--agent-kube-server", self.agent_kube_server]
        if c.external_cloud_provider:
            argv.append("--external-cloud-provider")
        if self.ccm is not None:
            argv.append("--cloud-controller-manager")
        argv += [f"--agent-arg={a}" for a in agent_args] + list(extra)
        p = self._proc("nodeemu", argv, env={"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                             "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
        self.ports["emulator"] = _listening(p, "node emulator", 60)
        return self.emulator_url

    def emu(self, method, path, body=None):
        return _json(method, self.emulator_url + "/_emu/" + path.lstrip("/"), body)

    def emu_state(self):
        st = self.emu("GET", "state")
        for i in st["instances"] + st["earlierBoots"]:
            self.seen_pids.update(p for p in (i["agentPid"], i["imdsPid"]) if p)
        return st

    def emu_events(self, since=0):
        return self.emu("GET", f"events?since={since}")["events"]

    def spot_interrupt(self, ref, action="terminate", grace=None):
        body = {"action": action}
        if grace is not None:
            body["grace"] = grace
        return self.emu("POST", f"instances/{ref}/spot", body)

    def wait_nodes(self, n, timeout=30, ready=True):
        def ok():
            ns = self.nodes()
            good = [x for x in ns.values() if not ready or any(
                c["type"] == "Ready" and c["status"] == "True" for c in x["status"]["conditions"])]
            return ns if len(good) >= n else None
        return wait_for(f"{n} Ready node(s)", ok, timeout, 0.2)

    # ---- stopping ------------------------------------------------------------------------
    def stop_all(self):
        """Emulator first (it stops its agents and kubelets), then coordinator, the cloud
        controller manager, EC2 proxy (which stops moto), the control plane. Returns {name:
        exit code}."""
        if "emulator" in self.ports and self.procs.get("nodeemu") and self.procs["nodeemu"].alive():
            try:
                self.emu_state()  # learn the pids of agents and IMDS to check them afterwards
            except Exception:
                pass
        rcs = {}
        for name in ("nodeemu", "coordinator", "aws-cloud-controller-manager", "aemm-control-plane",
                     "ec2proxy"):
            p = self.procs.get(name)
            if p is not None:
                rcs[name] = p.stop(timeout=45 if name == "nodeemu" else 15)
        if self.audit is not None:
            self.audit.stop()
        if self.cluster_cp is not None:
            self.cluster_cp.stop()
            for name in ("kubeproxy", "etcd", "kube-apiserver", "kube-controller-manager",
                         "kube-scheduler"):
                if name in self.procs:
                    rcs[name] = self.procs[name].p.returncode
        for name, p in list(self.procs.items()):
            if name not in rcs:
                rcs[name] = p.stop(timeout=10)
        if self.service is not None:
            self.service.stop()
        return rcs

    def leftovers(self):
        """Processes still alive that this stack started: the pids it knows of, any process
        whose command line names the stack's work directory, and a moto still listening."""
        alive = []
        for pid in sorted(self.seen_pids):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        alive.append(pid)
            except (FileNotFoundError, IndexError, ProcessLookupError):
                pass
        me = os.getpid()
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == me:
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.workdir in cmd and int(d) not in alive:
                alive.append(int(d))
        if self.moto_port:
            import socket
            try:
                socket.create_connection(("127.0.0.1", self.moto_port), timeout=0.5).close()
                alive.append(f"moto on port {self.moto_port}")
            except OSError:
                pass
        return alive

    def kill_leftovers(self):
        for x in self.leftovers():
            if isinstance(x, int):
                try:
                    os.kill(x, signal.SIGKILL)
                except ProcessLookupError:
                    pass
