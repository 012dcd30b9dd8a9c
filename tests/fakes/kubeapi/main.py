"""Command line: python3 tests/fakes/kubeapi.py --port 0 [options]."""

import argparse
import json
import logging
import signal
import ssl
import sys
import threading

from .api import Api
from .control import Control
from .controllers import Controllers
from .server import Handler, KubeServer
from .store import Store

KUBE_VERSION = "v1.32.0"


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="kubeapi.py",
        description="A fake Kubernetes API server (HTTP/1.1, JSON) with a scheduler, an "
                    "emulated kubelet and the controllers nodesmith's tests need.")
    p.add_argument("--port", type=int, default=0,
                   help="TCP port on 127.0.0.1 (0 picks a free one); the first stdout line is "
                        "'listening on 127.0.0.1:PORT'")
    p.add_argument("--token", help="require 'Authorization: Bearer TOKEN' (401 otherwise)")
    p.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate")
    p.add_argument("--tls-key", help="private key for --tls-cert")
    p.add_argument("--grace-scale", type=float, default=1.0,
                   help="multiplies every emulated duration: pod termination grace periods, "
                        "NoExecute tolerationSeconds, readiness probe delays, pod GC "
                        "quarantine, the PDB disruptedPods timeout (default 1.0)")
    p.add_argument("--grace-cap", type=float, default=1.0,
                   help="longest a pod takes to terminate, in real seconds, after scaling "
                        "(default 1.0)")
    p.add_argument("--ready-delay", type=float, default=0.5,
                   help="seconds from binding until the kubelet starts a pod (default 0.5)")
    p.add_argument("--watch-history", type=int, default=10000,
                   help="events kept for watch resumption; older resourceVersions get 410 Gone "
                        "(default 10000)")
    p.add_argument("--watch-timeout", type=float, default=1800.0,
                   help="longest watch in seconds when the client sets no timeoutSeconds")
    p.add_argument("--idle-timeout", type=float, default=90.0,
                   help="seconds a kept-alive connection may wait for its next request before the "
                        "server closes it (the API server's http.Server IdleTimeout, 90 s)")
    p.add_argument("--bookmark-interval", type=float, default=1.0,
                   help="seconds between BOOKMARK events on watches that allow them")
    p.add_argument("--max-events", type=int, default=2000,
                   help="Event objects kept (the oldest are removed beyond this)")
    p.add_argument("--node", action="append", default=[],
                   help="register a node at start: a name, or a JSON object as accepted by "
                        "POST /_fake/nodes (repeatable)")
    p.add_argument("--state-file", help="write the /_fake/state dump here at exit")
    p.add_argument("--log-level", default="warning",
                   choices=["debug", "info", "warning", "error"])
    p.add_argument("--kube-version", default=KUBE_VERSION,
                   help="gitVersion answered on /version and used as kubelet version")
    o = p.parse_args(argv)
    if bool(o.tls_cert) != bool(o.tls_key):
        p.error("--tls-cert and --tls-key go together")
    return o


class Options:
    def __init__(self, a):
        self.__dict__.update(vars(a))

    def version_info(self):
        v = self.kube_version.lstrip("v").split("-")[0].split("+")[0]
        major, minor = (v.split(".") + ["0"])[:2]
        return {"major": major, "minor": minor, "emulationMajor": major,
                "emulationMinor": minor, "minCompatibilityMajor": major,
                "minCompatibilityMinor": str(max(0, int(minor) - 1)) if minor.isdigit() else "0",
                "gitVersion": self.kube_version, "gitCommit": "0" * 40,
                "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z",
                "goVersion": "go1.23.4", "compiler": "gc", "platform": "linux/amd64"}


def bootstrap(api, store):
    """What a fresh cluster has: the system namespaces and the kubernetes Service."""
    with store.lock:
        ns = api.rt("", "namespaces")
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            if api.get_internal(ns, "", name) is None:
                api.create(ns, "", {"metadata": {"name": name}})
        svc = api.rt("", "services")
        if api.get_internal(svc, "default", "kubernetes") is None:
            api.create(svc, "default", {
                "metadata": {"name": "kubernetes", "labels": {
                    "component": "apiserver", "provider": "kubernetes"}},
                "spec": {"clusterIP": "10.96.0.1", "ports": [{
                    "name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}})


def main(argv=None):
    done = threading.Event()

    def stop(signum, frame):
        done.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    opts = Options(args)
    store = Store(args.watch_history)
    api = Api(store, opts)
    controllers = Controllers(api, opts)
    bootstrap(api, store)
    control = Control(api, controllers, opts, lambda: bootstrap(api, store))
    for spec in args.node:
        s = spec.strip()
        controllers.register_node(json.loads(s) if s.startswith("{") else {"name": s})
    srv = KubeServer(("127.0.0.1", args.port), Handler, api, controllers, control, opts)
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    controllers.start()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                         name="http", daemon=True)
    t.start()
    scheme = "https" if args.tls_cert else "http"
    print(f"listening on 127.0.0.1:{srv.server_address[1]}", flush=True)
    logging.getLogger("kubeapi").info("serving %s://127.0.0.1:%d", scheme,
                                      srv.server_address[1])
    while not done.wait(0.5):
        pass
    srv.stopping = True
    controllers.stop.set()
    api.wake.set()
    with store.lock:
        store.cond.notify_all()
    srv.shutdown()
    srv.server_close()
    if args.state_file:
        with open(args.state_file, "w") as f:
            json.dump(control.state(), f, indent=1)
    return 0
