"""Shared pieces for nodesmith's integration tests and the local demo: free ports, a throwaway
PKI, fake node roots, processes that are always stopped, and bounded waits. Standard library
only; everything listens on 127.0.0.1."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build")))
MiB = 1024 * 1024
GiB = 1024 * MiB


def binary(name):
    for p in (os.path.join(BUILD, name), os.path.join(BUILD, "tools", name)):
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{name} not built in {BUILD}; run make first")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kube_list(*objs):
    """Objects as one `kubectl apply` document (a v1 List)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def wait_for(what, fn, timeout=10.0, interval=0.05):
    """Poll fn until it returns a truthy value; fail with 'what' after timeout seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # the thing may not be up yet
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last})")


def log_time(line, near=None):
    """When a daemon logged a line ("HH:MM:SS.mmm ...", UTC): seconds of the day, or the Unix
    time when near (a Unix time within hours of it) is given. None for other lines."""
    m = re.match(r"(\d\d):(\d\d):(\d\d)\.(\d\d\d) ", line)
    if not m:
        return None
    h, mi, s, ms = map(int, m.groups())
    t = h * 3600 + mi * 60 + s + ms / 1000
    if near is None:
        return t
    day = near - near % 86400
    return min((day + t + k * 86400 for k in (-1, 0, 1)), key=lambda u: abs(u - near))


_listeners = []


def start_listening(argv, env=None):
    """Start a fake that prints "listening on 127.0.0.1:PORT" as its first line; return PORT.
    stop_listening() stops every one started so far, newest first."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, **(env or {})))
    _listeners.append(p)
    line = p.stdout.readline().strip()
    prefix = "listening on 127.0.0.1:"
    if not line.startswith(prefix) or not line[len(prefix):].isdigit():
        raise SystemExit(f"{argv[1]} did not start: {line!r}")
    return int(line[len(prefix):])


def stop_listening():
    while _listeners:
        p = _listeners.pop()
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

class Proc:
    """A child process with its output in a log file; stopped (TERM, then KILL) by stop()."""
    live = []

    def __init__(self, name, argv, logdir, env=None):
        self.name = name
        self.argv = argv
        self.log_path = os.path.join(logdir, name + ".log")
        self.log = open(self.log_path, "ab")
        e = dict(os.environ)
        if env:
            e.update(env)
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=e,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        Proc.live.append(self)

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            os.killpg(self.p.pid, sig) if sig == signal.SIGKILL else self.p.send_signal(sig)
        try:
            self.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=5)

    def stop(self, timeout=5):
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=5)
        self.log.close()
        if self in Proc.live:
            Proc.live.remove(self)
        return self.p.returncode

    def output(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    @classmethod
    def stop_all(cls):
        for p in list(cls.live):
            try:
                p.stop(timeout=3)
            except Exception:
                pass


def make_pki(d):
    """A CA, a server certificate for DNS:localhost signed by it, and a bootstrap token."""
    def run(*a):
        subprocess.run(a, cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
        "ca.crt", "-subj", "/CN=nodesmith-test-ca", "-days", "2")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
        "-subj", "/CN=localhost")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "ext")
    token = os.urandom(16).hex()
    with open(os.path.join(d, "token"), "w") as f:
        f.write(token + "\n")
    os.chmod(os.path.join(d, "token"), 0o600)
    return {"ca": os.path.join(d, "ca.crt"), "cert": os.path.join(d, "tls.crt"),
            "key": os.path.join(d, "tls.key"), "token_file": os.path.join(d, "token"),
            "token": token}


def make_root(d, cpus, mem_bytes, kubelet_config=None, kubelet_config_name="config.json",
              hugepages_2m=0, gpus=0, eni_max_pods=None, dropins=None):
    """A fake node root: proc/meminfo, sys cpu list, hugepages, kubelet config, GPUs."""
    os.makedirs(os.path.join(d, "proc/sys/kernel/random"), exist_ok=True)
    os.makedirs(os.path.join(d, "sys/devices/system/cpu"), exist_ok=True)
    os.makedirs(os.path.join(d, "var/lib/kubelet"), exist_ok=True)
    with open(os.path.join(d, "proc/meminfo"), "w") as f:
        f.write(f"MemTotal:       {mem_bytes // 1024} kB\nMemFree:        {mem_bytes // 2048} kB\n"
                f"HugePages_Total:       {hugepages_2m}\nHugepagesize:       2048 kB\n")
    with open(os.path.join(d, "sys/devices/system/cpu/online"), "w") as f:
        f.write(f"0-{cpus - 1}\n" if cpus > 1 else "0\n")
    with open(os.path.join(d, "proc/sys/kernel/random/boot_id"), "w") as f:
        f.write(f"{os.urandom(16).hex()}\n")
    if hugepages_2m:
        hp = os.path.join(d, "sys/kernel/mm/hugepages/hugepages-2048kB")
        os.makedirs(hp, exist_ok=True)
        with open(os.path.join(hp, "nr_hugepages"), "w") as f:
            f.write(f"{hugepages_2m}\n")
    for i in range(gpus):
        os.makedirs(os.path.join(d, f"proc/driver/nvidia/gpus/0000:00:1{i}.0"), exist_ok=True)
    if kubelet_config is not None:
        kd = os.path.join(d, "etc/kubernetes/kubelet")
        os.makedirs(kd, exist_ok=True)
        with open(os.path.join(kd, kubelet_config_name), "w") as f:
            f.write(kubelet_config if isinstance(kubelet_config, str) else json.dumps(kubelet_config))
    if dropins:
        dd = os.path.join(d, "etc/kubernetes/kubelet/config.json.d")
        os.makedirs(dd, exist_ok=True)
        for name, text in dropins.items():
            with open(os.path.join(dd, name), "w") as f:
                f.write(text)
    if eni_max_pods:
        ed = os.path.join(d, "etc/eks")
        os.makedirs(ed, exist_ok=True)
        with open(os.path.join(ed, "eni-max-pods.txt"), "w") as f:
            f.write("# Mapping is calculated from AWS EC2 API using the following formula:\n")
            for t, n in eni_max_pods.items():
                f.write(f"{t} {n}\n")
    return d


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def metric(text, name, labels=None):
    """The value of one Prometheus sample, or None."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, val = line.rpartition(" ")
        if labels is None and key == name:
            return float(val)
        if labels is not None and key.startswith(name + "{") and all(
                f'{k}="{v}"' in key for k, v in labels.items()):
            return float(val)
    return None


class Coordinator:
    def __init__(self, workdir, pki=None, insecure=False, interval="1s", extra=(), name="coordinator", env=None):
        self.workdir = workdir
        self.pki = pki
        self.port = free_port()
        self.http_port = free_port()
        self.interval = interval
        self.insecure = insecure
        self.extra = list(extra)
        self.name = name
        self.env = env
        self.proc = None

    @property
    def url(self):
        return f"{'tcp' if self.insecure else 'tls+tcp'}://127.0.0.1:{self.port}"

    @property
    def http(self):
        return f"http://127.0.0.1:{self.http_port}"

    def start(self):
        argv = [binary("nodesmith-coordinator"), "--listen", self.url, "--http-listen", self.http,
                "--report-interval", self.interval, "--token-file", self.pki["token_file"],
                "--log-level", "debug"]
        if self.insecure:
            argv.append("--insecure")
        else:
            argv += ["--tls-cert", self.pki["cert"], "--tls-key", self.pki["key"]]
        if "--api-listen" not in self.extra:
            # /api/v1 beside the metrics, no authentication (tests/security/test_http_api.py tests it)
            argv += ["--api-listen", self.http, "--api-auth", "none"]
        if not any(a.startswith("--attestation") for a in self.extra) and "--cluster-name" not in self.extra:
            # no EC2 here to attest against: say so (attestation is required by default)
            argv += ["--attestation", "off"]
        self.proc = Proc(self.name, argv + self.extra, self.workdir, env=self.env)
        wait_for("coordinator /healthz", lambda: http_get(self.http + "/healthz")[0] == 200, 10)
        return self

    def nodes(self):
        out = subprocess.run([binary("nodesmithctl"), "nodes", "--coordinator", self.http, "-o",
                              "json"], check=True, capture_output=True, text=True, timeout=10).stdout
        return {n["instanceId"]: n for n in json.loads(out)["items"]}

    def metrics(self):
        return http_get(self.http + "/metrics")[1]


def agent_argv(coord, root, instance_id, instance_type="m5.large", zone="us-east-1a",
               token_file=None, extra=()):
    argv = [binary("nodesmith-agent"), "--coordinator", coord.url, "--root", root,
            "--instance-id", instance_id, "--instance-type", instance_type, "--zone", zone,
            "--region", "us-east-1", "--capacity-type", "on-demand", "--node-name",
            f"ip-{instance_id}", "--report-interval", coord.interval,
            "--token-file", token_file or coord.pki["token_file"], "--log-level", "debug",
            "--imds", "no"]
    if coord.insecure:
        argv.append("--insecure")
    else:
        argv += ["--tls-ca", coord.pki["ca"], "--tls-server-name", "localhost"]
    return argv + list(extra)


class TestDir:
    """A temporary directory that is kept (and named) when the test fails."""
    def __init__(self, name):
        self.path = tempfile.mkdtemp(prefix=f"nodesmith-{name}-")

    def __enter__(self):
        return self.path

    def __exit__(self, et, ev, tb):
        Proc.stop_all()
        if et is None:
            shutil.rmtree(self.path, ignore_errors=True)
        else:
            print(f"logs kept in {self.path}", file=sys.stderr)
            for f in sorted(os.listdir(self.path)):
                if f.endswith(".log"):
                    print(f"===== {f} (tail) =====", file=sys.stderr)
                    with open(os.path.join(self.path, f), errors="replace") as fh:
                        print("".join(fh.readlines()[-40:]), file=sys.stderr)
        return False


class Checklist:
    """Named checks that all run: "ok    WHAT" or "FAIL  WHAT" with the detail, and a summary."""

    def __init__(self):
        self.failed = []

    def __call__(self, what, ok, detail=""):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            self.failed.append(what)
            if detail:
                print("      " + str(detail).replace("\n", "\n      ")[:4000])
        return ok

    def exit_code(self, name):
        print(f"{name}: {len(self.failed)} failed" if self.failed else f"{name}: OK")
        return 1 if self.failed else 0
