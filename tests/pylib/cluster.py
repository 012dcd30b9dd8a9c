"""A real Kubernetes control plane on 127.0.0.1 for nodesmith's tests and demo.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, all from the one binary that
`make controlplane` builds from tools/controlplane (the published Go modules, v1.37.2). The API
server serves TLS with a certificate from a throwaway PKI, authenticates client certificates
signed by that PKI's CA and ServiceAccount tokens, and authorises with `Node,RBAC`; the default
admission plugins run plus NodeRestriction. The controller manager runs every default
controller (deployment, replicaset, daemonset, disruption, nodelifecycle, garbagecollector,
serviceaccount-token, podgc, taint-eviction, ...) with its own ServiceAccount per controller and
node-monitor periods short enough for tests. There are no kubelets: tests/fakes/kubelet.py
emulates them (docs/testing.md).

    from cluster import Cluster
    with Cluster(workdir) as c:          # start() on entry, stop() on exit (also on SIGTERM/^C)
        c.kubeconfig                     # admin (group system:masters)
        c.server, c.ca                   # https://127.0.0.1:PORT and the CA that signed it
        c.kubectl("get", "nodes")        # kubectl --kubeconfig ADMIN ...
        c.api("GET", "/api/v1/nodes")    # (status, JSON) as admin; identity=c.node_identity(N)
        ident = c.node_identity("ip-10-0-0-1.ec2.internal")   # CN=system:node:NAME O=system:nodes
        c.write_kubeconfig(path, ident)  # a kubeconfig for that identity
        c.install_packaging()            # kubectl apply -k packaging/kubernetes (as shipped)
        c.install_helm("--set", "k=v")   # or: helm install packaging/helm/nodesmith
        c.service_account_kubeconfig("nodesmith", "nodesmith-coordinator")  # TokenRequest
        c.pause("kube-scheduler"); c.resume("kube-scheduler")   # SIGSTOP / SIGCONT
        c.restart_apiserver(down=2)      # stop it, wait, start it again on the same port
        px = c.start_fault_proxy()       # tests/fakes/kubeproxy.py: px.server, px.fault(...)

Cluster(workdir, node_monitor_grace=10, node_startup_grace=30, external_cloud_provider=False,
        controllers="*", apiserver_args=(), controller_args=(), scheduler_args=())
  - workdir: logs (etcd.log, kube-apiserver.log, ...), pki/, a fresh etcd data directory and the
    kubeconfigs; one Cluster per test module.
  - node_monitor_grace: seconds without a Lease renewal before the node lifecycle controller
    marks a Node Unknown (kube-controller-manager --node-monitor-grace-period).
  - external_cloud_provider: emulated kubelets register with the
    node.cloudprovider.kubernetes.io/uninitialized taint, as on EKS (read by tests/fakes).
  - start() prints and returns the start-up time (also in .startup_seconds): from the first
    process to /readyz of the API server and /healthz of the controller manager and scheduler.

Ports are chosen free on 127.0.0.1. Identities are Identity(cert, key) or Identity(token=...);
.identity_args() gives kubectl's flags. Everything started is stopped by stop(), at interpreter
exit, and on SIGTERM/SIGINT (then the signal's default action runs).
"""
import atexit
import base64
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nsharness import BUILD, ROOT, Proc, free_port, wait_for  # noqa: E402

SERVICE_CIDR = "10.96.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
SA_ISSUER = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
# kube-apiserver's audit log keeps who removed which pod (tests/pylib/kubeaudit.py reads it)
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
    verbs: [create]
    resources: [{group: "", resources: [pods/eviction]}]
  - level: Metadata
    verbs: [delete, deletecollection]
    resources: [{group: "", resources: [pods]}]
  - level: Metadata
    resources: [{group: "", resources: [services/proxy]}]
  - level: None
"""


def controlplane_binary(build=BUILD):
    p = os.path.join(build, "controlplane", "controlplane")
    if not os.access(p, os.X_OK):
        raise FileNotFoundError(f"{p} not built; run `make controlplane` (docs/testing.md)")
    return p


def _openssl(cwd, *args):
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])}: {r.stderr.strip()[-400:]}")


class Identity:
    """A client identity: a certificate and key signed by the cluster CA, or a bearer token."""

    def __init__(self, cert=None, key=None, token=None, name=None):
        self.cert, self.key, self.token, self.name = cert, key, token, name

    def identity_args(self):
        if self.token:
            return ["--token", self.token]
        return ["--client-certificate", self.cert, "--client-key", self.key]

    def __repr__(self):
        return f"Identity({self.name})"


class PKI:
    """The cluster's CA (signs the serving certificate and every client certificate) and the
    ServiceAccount signing key pair. EC P-256 keys: fast to make, accepted by every client."""

    def __init__(self, d):
        self.dir = d
        os.makedirs(d, exist_ok=True)
        self.ca, self.ca_key = os.path.join(d, "ca.crt"), os.path.join(d, "ca.key")
        _openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "3",
                 "-subj", "/CN=nodesmith-test-kubernetes-ca")
        # the authenticating proxy's own CA (kube-apiserver --requestheader-client-ca-file)
        self.fp_ca, self.fp_ca_key = os.path.join(d, "front-proxy-ca.crt"), os.path.join(d, "front-proxy-ca.key")
        _openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-keyout", self.fp_ca_key, "-out", self.fp_ca, "-days", "3",
                 "-subj", "/CN=nodesmith-test-front-proxy-ca")
        self.sa_key, self.sa_pub = os.path.join(d, "sa.key"), os.path.join(d, "sa.pub")
        _openssl(d, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                 "-out", "sa.key")
        _openssl(d, "pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def issue(self, name, cn, orgs=(), server_names=(), server_ips=()):
        """A certificate for CN=cn, O=orgs (client) or with SANs (server): (cert, key) paths."""
        return issue_cert(self.dir, self.ca, self.ca_key, name, cn, orgs, server_names, server_ips)


def issue_cert(d, ca, ca_key, name, cn, orgs=(), server_names=(), server_ips=()):
    """Signs d/NAME.crt (with a new key d/NAME.key) by the CA: a client certificate for CN=cn,
    O=orgs, or a serving one when names or IPs are given. Returns (cert, key)."""
    subj = "".join(f"/O={o}" for o in orgs) + f"/CN={cn}"
    key, csr, crt = (os.path.join(d, f"{name}.{x}") for x in ("key", "csr", "crt"))
    ext = os.path.join(d, f"{name}.ext")
    with open(ext, "w") as f:
        if server_names or server_ips:
            sans = [f"DNS:{n}" for n in server_names] + [f"IP:{i}" for i in server_ips]
            f.write("extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join(sans) + "\n")
        else:
            f.write("extendedKeyUsage=clientAuth\n")
    _openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", subj)
    serial = int.from_bytes(os.urandom(8), "big") >> 1
    _openssl(d, "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial",
             str(serial), "-out", crt, "-days", "2", "-extfile", ext)
    os.unlink(csr)
    os.unlink(ext)
    return crt, key


_live = []          # clusters to stop at exit or on a signal
_handlers = {}


def _stop_live_and_reraise(signum, frame):
    for c in list(_live):
        c.stop()
    prev = _handlers.get(signum)
    if callable(prev):
        prev(signum, frame)
    else:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers():
    if _handlers or threading.current_thread() is not threading.main_thread():
        return
    for s in (signal.SIGTERM, signal.SIGINT):
        prev = signal.getsignal(s)
        _handlers[s] = prev if prev not in (signal.SIG_DFL, signal.default_int_handler) else None
        signal.signal(s, _stop_live_and_reraise)


atexit.register(lambda: [c.stop() for c in list(_live)])


class Cluster:
    def __init__(self, workdir, build=BUILD, node_monitor_grace=10, node_startup_grace=30,
                 external_cloud_provider=False, controllers="*", apiserver_args=(),
                 controller_args=(), scheduler_args=(), verbose=True):
        self.workdir = os.path.abspath(workdir)
        self.build = build
        self.node_monitor_grace = node_monitor_grace
        self.node_startup_grace = node_startup_grace
        self.external_cloud_provider = external_cloud_provider
        self.controllers = controllers
        self.extra = {"apiserver": list(apiserver_args), "kcm": list(controller_args),
                      "scheduler": list(scheduler_args)}
        self.verbose = verbose
        self.procs = {}
        self.pki = None
        self.port = None
        self.startup_seconds = None
        self.admin = None
        self.kubeconfig = os.path.join(self.workdir, "admin.kubeconfig")
        self.audit_log = os.path.join(self.workdir, "audit.log")
        self._ctx = {}

    # ---- life cycle ------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    @property
    def server(self):
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self):
        return self.pki.ca

    def _log(self, msg):
        if self.verbose:
            print(f"cluster: {msg}", file=sys.stderr, flush=True)

    def start(self, timeout=180):
        binary = controlplane_binary(self.build)
        os.makedirs(self.workdir, exist_ok=True)
        t0 = time.monotonic()
        self.pki = PKI(os.path.join(self.workdir, "pki"))
        pki = self.pki
        self.port = free_port()
        serving = self.serving = pki.issue("apiserver", "kube-apiserver", server_names=(
            "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
            f"kubernetes.default.svc.{CLUSTER_DOMAIN}"), server_ips=("127.0.0.1", "10.96.0.1"))
        self.admin = Identity(*pki.issue("admin", "nodesmith-admin", orgs=("system:masters",)),
                              name="admin")
        self.write_kubeconfig(self.kubeconfig, self.admin)
        kcm_kc = self.write_kubeconfig(os.path.join(self.workdir, "kcm.kubeconfig"), Identity(
            *pki.issue("kcm", "system:kube-controller-manager"), name="kcm"))
        sched_kc = self.write_kubeconfig(os.path.join(self.workdir, "scheduler.kubeconfig"), Identity(
            *pki.issue("scheduler", "system:kube-scheduler"), name="scheduler"))
        _live.append(self)
        _install_signal_handlers()

        etcd_dir = os.path.join(self.workdir, "etcd")
        shutil.rmtree(etcd_dir, ignore_errors=True)  # a fresh etcd every time
        etcd_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn("etcd", [binary, "etcd", "--name", "default", "--data-dir", etcd_dir,
                             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}",
                             "--unsafe-no-fsync", "--log-level", "warn",
                             "--quota-backend-bytes", str(2 << 30)])
        wait_for("etcd /health", lambda: self._alive("etcd") and _plain_get(
            f"http://127.0.0.1:{etcd_port}/health"), 60, 0.1)

        self._spawn("kube-apiserver", [
            binary, "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}", f"--tls-cert-file={serving[0]}",
            f"--tls-private-key-file={serving[1]}", f"--client-ca-file={pki.ca}",
            "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
            f"--service-account-issuer={SA_ISSUER}", f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            # the fault proxy (tests/fakes/kubeproxy.py) passes identities on as an
            # authenticating proxy does
            f"--requestheader-client-ca-file={pki.fp_ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            # the "kubernetes" Service's Endpoints may not name a loopback address
            "--endpoint-reconciler-type=none", "--profiling=false",
            f"--audit-policy-file={self._audit_policy()}", f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json", "--audit-log-mode=blocking",
            f"--cert-dir={os.path.join(self.workdir, 'apiserver-certs')}", "--v=1",
        ] + self.extra["apiserver"])
        wait_for("kube-apiserver /readyz", lambda: self._alive("kube-apiserver") and self.api(
            "GET", "/readyz", raw=True)[0] == 200, timeout, 0.2)
        t_api = time.monotonic() - t0

        kcm_port, sched_port = free_port(), free_port()
        self._spawn("kube-controller-manager", [
            binary, "kube-controller-manager", f"--kubeconfig={kcm_kc}",
            f"--authentication-kubeconfig={kcm_kc}", f"--authorization-kubeconfig={kcm_kc}",
            "--bind-address=127.0.0.1", f"--secure-port={kcm_port}",
            f"--cert-dir={os.path.join(self.workdir, 'kcm-certs')}",
            "--leader-elect=false", "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki.sa_key}", f"--root-ca-file={pki.ca}",
            f"--cluster-signing-cert-file={pki.ca}", f"--cluster-signing-key-file={pki.ca_key}",
            f"--controllers={self.controllers}", f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--node-monitor-period=1s", f"--node-monitor-grace-period={self.node_monitor_grace}s",
            f"--node-startup-grace-period={self.node_startup_grace}s",
            "--kube-api-qps=200", "--kube-api-burst=400", "--concurrent-gc-syncs=5",
            "--v=1"] + self.extra["kcm"])
        self._spawn("kube-scheduler", [
            binary, "kube-scheduler", f"--kubeconfig={sched_kc}",
            f"--authentication-kubeconfig={sched_kc}", f"--authorization-kubeconfig={sched_kc}",
            "--bind-address=127.0.0.1", f"--secure-port={sched_port}",
            f"--cert-dir={os.path.join(self.workdir, 'scheduler-certs')}",
            "--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=400", "--v=1",
        ] + self.extra["scheduler"])
        insecure = ssl._create_unverified_context()
        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", sched_port)):
            wait_for(f"{name} /healthz", lambda n=name, p=port: self._alive(n) and _plain_get(
                f"https://127.0.0.1:{p}/healthz", insecure), timeout, 0.2)
        # the serviceaccount controller has made the default ServiceAccount: controllers run
        wait_for("the default ServiceAccount", lambda: self.api(
            "GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200, 60, 0.2)
        self.startup_seconds = round(time.monotonic() - t0, 2)
        self._log(f"control plane up in {self.startup_seconds}s (API server ready after "
                  f"{t_api:.2f}s) at {self.server}; kubectl --kubeconfig {self.kubeconfig}")
        return self.startup_seconds

    def _audit_policy(self):
        path = os.path.join(self.workdir, "audit-policy.yaml")
        with open(path, "w") as f:
            f.write(AUDIT_POLICY)
        return path

    def _spawn(self, name, argv):
        self.procs[name] = Proc(name, argv, self.workdir)

    def _alive(self, name):
        p = self.procs[name]
        if not p.alive():
            raise AssertionError(f"{name} exited {p.p.returncode}: {p.output()[-2000:]}")
        return True

    def stop(self):
        """Stops the fault proxies, scheduler, controller manager, API server, etcd (in order)."""
        core = ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd")
        for name in [n for n in self.procs if n not in core] + list(core):
            p = self.procs.pop(name, None)
            if p is not None:
                if p.alive():
                    os.kill(p.pid, signal.SIGCONT)  # a paused one must see its SIGTERM
                p.stop(timeout=10)
        if self in _live:
            _live.remove(self)

    def pause(self, name):
        """SIGSTOP a component (e.g. "kube-scheduler": nothing is scheduled until resume())."""
        os.kill(self.procs[name].pid, signal.SIGSTOP)

    def resume(self, name):
        os.kill(self.procs[name].pid, signal.SIGCONT)

    def restart_apiserver(self, down=0.0):
        """Stops the API server (SIGTERM) and starts it again with the same flags after `down`
        seconds; returns when it is ready again. The port stays the same."""
        p = self.procs["kube-apiserver"]
        argv = p.argv
        p.stop(timeout=10)
        time.sleep(down)
        self._spawn("kube-apiserver", argv)
        wait_for("kube-apiserver /readyz after restart", lambda: self._alive("kube-apiserver")
                 and self.api("GET", "/readyz", raw=True)[0] == 200, 120, 0.2)

    def compact_etcd(self):
        """Compacts etcd's history up to its current revision, as kube-apiserver does every 5
        minutes: a list or watch from an older resourceVersion that the API server does not
        answer from its watch cache (--watch-cache-sizes=RESOURCE#0) is then 410 Gone. Through
        etcd's JSON gateway; returns the revision."""
        def post(path, body):
            req = urllib.request.Request(self.etcd_url + path, data=json.dumps(body).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        rev = post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
        post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return int(rev)

    def start_fault_proxy(self, name="kubeproxy", idle_timeout=None, idle_close=None):
        """tests/fakes/kubeproxy.py in front of this API server (TLS both sides, identities
        passed on through the front-proxy headers). Returns a FaultProxy: .server (https URL
        clients use instead of .server here), .control (its /_fake/ endpoint), .fault(...),
        .clear(), .drop_watches(), .stats(). idle_timeout: seconds after which the proxy closes
        a client's idle kept-alive connection (default 120); idle_close: "fin" ends connections
        with only the TCP FIN, no TLS close_notify (default "notify")."""
        cert, key = issue_cert(self.pki.dir, self.pki.fp_ca, self.pki.fp_ca_key,
                               "front-proxy-client", "front-proxy-client")
        p = Proc(name, [sys.executable, os.path.join(ROOT, "tests", "fakes", "kubeproxy.py"),
                        "--upstream", self.server, "--upstream-ca", self.pki.ca,
                        "--tls-cert", self.serving[0], "--tls-key", self.serving[1],
                        "--client-ca", self.pki.ca, "--front-proxy-cert", cert,
                        "--front-proxy-key", key]
                 + ([] if idle_timeout is None else ["--idle-timeout", str(idle_timeout)])
                 + ([] if idle_close is None else ["--idle-close", idle_close]), self.workdir)
        self.procs[name] = p
        ports = wait_for("the fault proxy to listen", lambda: self._alive(name) and (
            lambda m: m and (int(m.group(1)), int(m.group(2))))(re.search(
                r"listening on 127\.0\.0\.1:(\d+)\s+control on 127\.0\.0\.1:(\d+)", p.output())), 30, 0.05)
        return FaultProxy(p, *ports)

    # ---- identities and kubeconfigs --------------------------------------------------------
    def node_identity(self, node_name):
        """The kubelet's client certificate: CN=system:node:NAME, O=system:nodes."""
        safe = node_name.replace("/", "_")
        return Identity(*self.pki.issue(f"node-{safe}", f"system:node:{node_name}",
                                        orgs=("system:nodes",)), name=f"system:node:{node_name}")

    def user_identity(self, user, groups=()):
        safe = user.replace(":", "_").replace("/", "_")
        return Identity(*self.pki.issue(f"user-{safe}", user, orgs=groups), name=user)

    def write_kubeconfig(self, path, ident, server=None, ca=None):
        """A kubeconfig (JSON, which is YAML) for ident against server (default: this one)."""
        user = {"token": ident.token} if ident.token else {
            "client-certificate": ident.cert, "client-key": ident.key}
        cfg = {"apiVersion": "v1", "kind": "Config", "preferences": {},
               # the serving certificate names DNS:localhost besides IP:127.0.0.1: the agent's
               # TLS (mbedTLS 2.28, docs/http.md) matches DNS names only
               "clusters": [{"name": "nodesmith-test", "cluster": {
                   "server": server or self.server, "certificate-authority": ca or self.pki.ca,
                   "tls-server-name": "localhost"}}],
               "contexts": [{"name": "nodesmith-test", "context": {
                   "cluster": "nodesmith-test", "user": ident.name or "user"}}],
               "current-context": "nodesmith-test",
               "users": [{"name": ident.name or "user", "user": user}]}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent=1)
        return path

    def service_account_token(self, namespace, name, seconds=86400, audiences=None):
        """A TokenRequest for the ServiceAccount (as the kubelet projects it into a pod)."""
        spec = {"expirationSeconds": int(seconds)}
        if audiences:
            spec["audiences"] = list(audiences)
        st, out = self.api("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                           {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                            "spec": spec})
        if st != 201:
            raise AssertionError(f"TokenRequest {namespace}/{name}: HTTP {st} {out}")
        return out["status"]["token"]

    def service_account_identity(self, namespace, name, seconds=86400):
        return Identity(token=self.service_account_token(namespace, name, seconds),
                        name=f"system:serviceaccount:{namespace}:{name}")

    def service_account_kubeconfig(self, namespace, name, path=None, server=None, ca=None):
        """A kubeconfig with a fresh token of the ServiceAccount (what its pod would hold)."""
        path = path or os.path.join(self.workdir, f"{namespace}-{name}.kubeconfig")
        return self.write_kubeconfig(path, self.service_account_identity(namespace, name),
                                     server=server, ca=ca)

    CRDS = ("crd/nodepools.nodesmith.io", "crd/ec2nodeclasses.nodesmith.io", "crd/nodeclaims.nodesmith.io")

    def install_packaging(self):
        """`kubectl apply -k packaging/kubernetes`, the shipped manifests as they are, then waits
        for the CRDs to be Established."""
        out = self.kubectl("apply", "-k", os.path.join(ROOT, "packaging", "kubernetes"), timeout=90)
        self.wait_crds_established()
        return out

    def install_helm(self, *values_args, release="nodesmith", namespace="nodesmith"):
        """`helm install` of packaging/helm/nodesmith (helm from $(BUILD)/tools/helm, `make
        helm`) into namespace (created), then waits for the CRDs to be Established. helm's
        cache and configuration stay in the workdir."""
        helm = os.path.join(self.build, "tools", "helm")
        home = os.path.join(self.workdir, "helm")
        env = dict(os.environ, HELM_CACHE_HOME=home + "/cache", HELM_CONFIG_HOME=home + "/config",
                   HELM_DATA_HOME=home + "/data", KUBECONFIG=self.kubeconfig)
        r = subprocess.run([helm, "install", release, os.path.join(ROOT, "packaging", "helm", "nodesmith"),
                            "--namespace", namespace, "--create-namespace", *values_args],
                           capture_output=True, text=True, timeout=180, env=env)
        if r.returncode != 0:
            raise AssertionError(f"helm install: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
        self.wait_crds_established()
        return r.stdout

    def wait_crds_established(self, timeout=60.0):
        """`kubectl wait --for=condition=Established` on the project's CRDs. kubectl 1.32 fails at
        once ("status.conditions accessor error: <nil>") when it reads a CRD the API server has
        not given conditions yet, so that answer is asked again until the time is up."""
        deadline = time.monotonic() + timeout
        while True:
            left = max(1, int(deadline - time.monotonic()))
            r = self.kubectl("wait", "--for=condition=Established", f"--timeout={left}s", *self.CRDS,
                             check=False, timeout=left + 30)
            if r.returncode == 0:
                return
            if "accessor error" not in r.stderr or time.monotonic() >= deadline:
                raise AssertionError(f"kubectl wait for the CRDs: exit {r.returncode}: {r.stderr.strip()}")
            time.sleep(0.2)

    # ---- clients ---------------------------------------------------------------------------
    def kubectl(self, *args, input=None, check=True, timeout=60, identity=None):
        argv = ["kubectl", "--kubeconfig", self.kubeconfig]
        if identity is not None:
            argv += identity.identity_args()
        r = subprocess.run(argv + list(args), input=input, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stdout if check else r

    def ssl_context(self, identity=None):
        ident = identity or self.admin
        key = (ident.cert, ident.key)
        ctx = self._ctx.get(key)
        if ctx is None:
            ctx = ssl.create_default_context(cafile=self.pki.ca)
            if ident.cert:
                ctx.load_cert_chain(ident.cert, ident.key)
            self._ctx[key] = ctx
        return ctx

    def api(self, method, path, body=None, identity=None, ctype="application/json", raw=False,
            timeout=15, base=None):
        """One request as identity (default admin): (HTTP status, parsed JSON or None); raw:
        (status, bytes). Connection errors raise OSError."""
        return api_request(base or self.server, self.ssl_context(identity), method, path, body,
                           token=(identity.token if identity else None), ctype=ctype, raw=raw,
                           timeout=timeout)


def api_request(server, ctx, method, path, body=None, token=None, ctype="application/json",
                raw=False, timeout=15, user_agent=None):
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
    headers = {"Accept": "application/json", "Content-Type": ctype}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if user_agent:
        headers["User-Agent"] = user_agent
    req = urllib.request.Request(server + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    if raw:
        return status, text
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, {"raw": text[:500].decode(errors="replace")}


class Informer(threading.Thread):
    """List, then watch, a collection (path such as /api/v1/pods?fieldSelector=...) and call
    on_event(kind, object) for every object listed (ADDED) and every event after; relists on a
    410 or a broken stream. Stops when stop_evt is set; close() also ends the request in
    flight (an open watch would keep the API server from exiting). .synced is set after the
    first list."""

    def __init__(self, server, ctx, path, on_event, stop_evt, headers=None, on_error=None):
        super().__init__(daemon=True, name=f"informer {path}")
        self.server, self.ctx, self.path = server.rstrip("/"), ctx, path
        self.on_event, self.stop_evt = on_event, stop_evt
        self.headers = dict(headers or {}, Accept="application/json")
        self.on_error = on_error or (lambda what: None)
        self.synced = threading.Event()
        self.known = {}             # uid -> last object seen
        self.conn = None            # the connection in use
        self.conn_lock = threading.Lock()

    def close(self):
        """Ends the list or watch in flight (after stop_evt is set: no new one starts)."""
        import socket
        with self.conn_lock:  # not between a connection's creation and its connect
            sock = self.conn.sock if self.conn is not None else None
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def run(self):
        import http.client
        u = urllib.parse.urlsplit(self.server)
        sep = "&" if "?" in self.path else "?"
        while not self.stop_evt.is_set():
            conn = http.client.HTTPSConnection(u.hostname, u.port, context=self.ctx, timeout=90)
            try:
                with self.conn_lock:
                    if self.stop_evt.is_set():
                        break
                    self.conn = conn
                    conn.connect()
                conn.request("GET", self.path, headers=self.headers)
                resp = conn.getresponse()
                body = resp.read()
                if resp.status != 200:
                    self.on_error(f"list {self.path}: HTTP {resp.status}")
                    self.stop_evt.wait(1.0)
                    continue
                lst = json.loads(body)
                seen = {o["metadata"]["uid"]: o for o in lst.get("items") or []}
                for o in seen.values():
                    self.on_event("ADDED", o)
                for uid in set(self.known) - set(seen):
                    self.on_event("DELETED", self.known[uid])  # gone while we were not watching
                self.known = seen
                self.synced.set()
                conn.request("GET", f"{self.path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=60"
                                    f"&resourceVersion={lst['metadata']['resourceVersion']}",
                             headers=self.headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    self.on_error(f"watch {self.path}: HTTP {resp.status}")
                    continue
                while not self.stop_evt.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        break  # 410 Gone and friends: list again
                    if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        o = ev["object"]
                        if ev["type"] == "DELETED":
                            self.known.pop(o["metadata"]["uid"], None)
                        else:
                            self.known[o["metadata"]["uid"]] = o
                        self.on_event(ev["type"], o)
            except (OSError, ValueError, http.client.HTTPException) as e:
                self.on_error(f"{self.path}: {type(e).__name__}: {e}")
                self.stop_evt.wait(0.5)
            finally:
                conn.close()


class FaultProxy:
    """A running tests/fakes/kubeproxy.py: .server (https://127.0.0.1:PORT), .control."""

    def __init__(self, proc, port, control_port):
        self.proc, self.port = proc, port
        self.server = f"https://127.0.0.1:{port}"
        self.control = f"http://127.0.0.1:{control_port}"

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.control}/_fake/{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def fault(self, **rule):
        """fault(method="POST", path=r"/eviction$", status=429, retryAfter=1, count=None, seconds=5)"""
        return self._call("POST", "faults", rule)

    def clear(self):
        return self._call("DELETE", "faults")

    def drop_watches(self, path=".*"):
        return self._call("POST", "watches/drop", {"path": path})["dropped"]

    def stats(self):
        return self._call("GET", "stats")


def _plain_get(url, ctx=None):
    with urllib.request.urlopen(url, timeout=3, context=ctx) as r:
        return r.status == 200


def b64(path):
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


if __name__ == "__main__":
    # python3 tests/pylib/cluster.py [WORKDIR]: a control plane until Ctrl-C (for poking at it)
    import tempfile
    wd = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="nodesmith-cluster-")
    with Cluster(wd) as c:
        print(f"export KUBECONFIG={c.kubeconfig}   # started in {c.startup_seconds}s; Ctrl-C stops",
              flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
