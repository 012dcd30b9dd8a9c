#!/usr/bin/env python3
"""User data for an Amazon Linux 2023 EKS node launched by nodesmith.

Prints a MIME multipart document (RFC 2046) holding, in this order:
  1. the parts of --extra-user-data, if any (the EC2NodeClass's userData: a NodeConfig, a shell
     script, a cloud-config or a whole MIME document), unchanged;
  2. nodesmith's NodeConfig (node.eks.aws/v1alpha1) as Content-Type application/node.eks.aws:
     cluster name, API server endpoint, certificate authority, service CIDR, kubelet settings
     (maxPods, graceful shutdown, taints) and flags (node labels). nodeadm merges NodeConfig
     parts in order, so nodesmith's values win over the user's;
  3. a text/cloud-config part whose write_files puts /etc/nodesmith/agent.conf, ca.crt and token
     in place, root-owned, mode 0600. cloud-init runs it in cloud-init.service, before
     network-online.target, so the agent (ordered after it) starts with its configuration.
nodeadm reads only application/node.eks.aws parts and cloud-init ignores them (REFERENCE: order
nodeadm-config -> cloud-init -> nodeadm-run -> kubelet).

Example:
  al2023-userdata.py --cluster-name prod --api-server-endpoint https://ABC.gr7.us-east-1.eks.amazonaws.com \
      --certificate-authority-file ca.b64 --cidr 10.100.0.0/16 --max-pods 58 \
      --label team=web --taint dedicated=web:NoSchedule \
      --coordinator tls+tcp://nodesmith.internal.example:7400 --coordinator-ca coordinator-ca.crt \
      --token-file token --nodepool default > user-data.mime
"""
import argparse
import base64
import ipaddress
import json
import os
import sys
from email import message_from_string

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodesmith_bootstrap import (USER_DATA_MAX, BootstrapError, check_ca, check_coordinator,  # noqa: E402
                                 check_token, parse_label, parse_taint, render_agent_conf)

BOUNDARY = "==NODESMITH-BOUNDARY=="
NODECONFIG_TYPE = "application/node.eks.aws"


def nodeconfig(args, labels, taints):
    kubelet_config = {}
    if args.max_pods:
        kubelet_config["maxPods"] = args.max_pods
    if args.shutdown_grace_period:
        kubelet_config["shutdownGracePeriod"] = args.shutdown_grace_period
        kubelet_config["shutdownGracePeriodCriticalPods"] = args.shutdown_grace_period_critical_pods
    if taints:
        kubelet_config["registerWithTaints"] = taints
    flags = list(args.kubelet_flag)
    if labels:
        flags.append("--node-labels=" + ",".join("%s=%s" % kv for kv in labels))
    spec = {
        "cluster": {
            "name": args.cluster_name,
            "apiServerEndpoint": args.api_server_endpoint,
            "certificateAuthority": args.certificate_authority,
            "cidr": args.cidr,
        },
    }
    if kubelet_config or flags:
        spec["kubelet"] = {}
        if kubelet_config:
            spec["kubelet"]["config"] = kubelet_config
        if flags:
            spec["kubelet"]["flags"] = flags
    # JSON is YAML: nodeadm reads it as is.
    return json.dumps({"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": spec}, indent=2) + "\n"


LOGIND_DROPIN = "/etc/systemd/logind.conf.d/50-nodesmith-shutdown.conf"


def cloud_config(conf, ca, token, shutdown_delay=0):
    """write_files for the agent; with shutdown_delay, logind's InhibitDelayMaxSec raised to it
    (a drop-in, then logind told to read it again) so the agent's delay lock holds a shutdown
    that long while it drains (docs/drain.md)."""
    def f(path, text):
        return {"path": path, "owner": "root:root", "permissions": "0600", "encoding": "b64",
                "content": base64.b64encode(text.encode()).decode()}
    doc = {"write_files": [f("/etc/nodesmith/agent.conf", conf), f("/etc/nodesmith/ca.crt", ca),
                           f("/etc/nodesmith/token", token + "\n")]}
    if shutdown_delay:
        doc["write_files"].append(f(LOGIND_DROPIN, "# nodesmith-agent drains the node at a shutdown "
                                    "(docs/drain.md)\n[Login]\nInhibitDelayMaxSec=%d\n" % shutdown_delay))
        doc["runcmd"] = ["systemctl kill --signal=SIGHUP systemd-logind.service"]
    return "#cloud-config\n" + json.dumps(doc, indent=2) + "\n"


def extra_parts(text):
    """The EC2NodeClass's userData as a list of (content type, body)."""
    stripped = text.lstrip()
    if stripped.startswith("MIME-Version:") or stripped.lower().startswith("content-type: multipart/"):
        msg = message_from_string(text)
        if not msg.is_multipart():
            raise BootstrapError("extra user data: MIME document is not multipart")
        return [(p.get_content_type(), p.get_payload(decode=True).decode()) for p in msg.walk()
                if not p.is_multipart()]
    if stripped.startswith("#!"):
        return [("text/x-shellscript", text)]
    if stripped.startswith("#cloud-config"):
        return [("text/cloud-config", text)]
    if "node.eks.aws/" in text and "NodeConfig" in text:
        return [(NODECONFIG_TYPE, text)]
    raise BootstrapError("extra user data: not a NodeConfig, a shell script, a cloud-config or MIME")


def mime(parts):
    out = ["MIME-Version: 1.0", 'Content-Type: multipart/mixed; boundary="%s"' % BOUNDARY, ""]
    for ctype, body in parts:
        if BOUNDARY in body:
            raise BootstrapError("a user data part contains the MIME boundary")
        if not body.endswith("\n"):
            body += "\n"
        header = ctype if ctype == NODECONFIG_TYPE or "charset" in ctype else ctype + '; charset="us-ascii"'
        out += ["--" + BOUNDARY, "Content-Type: " + header, "MIME-Version: 1.0",
                "Content-Transfer-Encoding: 7bit", "", body]
    out += ["--" + BOUNDARY + "--", ""]
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    c = ap.add_argument_group("cluster (NodeConfig)")
    c.add_argument("--cluster-name", required=True)
    c.add_argument("--api-server-endpoint", required=True, help="https://...")
    ca = c.add_mutually_exclusive_group(required=True)
    ca.add_argument("--certificate-authority", help="the cluster CA, base64 (as EKS DescribeCluster returns it)")
    ca.add_argument("--certificate-authority-file", help="file holding the cluster CA, PEM or base64")
    c.add_argument("--cidr", required=True, help="the cluster's service CIDR")
    c.add_argument("--max-pods", type=int, default=0, help="kubelet maxPods (0: nodeadm's default)")
    c.add_argument("--label", action="append", default=[], help="node label KEY=VALUE (repeatable)")
    c.add_argument("--taint", action="append", default=[], help="KEY[=VALUE]:EFFECT (repeatable)")
    c.add_argument("--kubelet-flag", action="append", default=[], help="extra kubelet flag (repeatable)")
    c.add_argument("--shutdown-grace-period", default="0s",
                   help="kubelet graceful node shutdown: 0s leaves shutdowns to the agent's drain, "
                        "which honours PDBs (docs/drain.md); empty: leave unset [0s]")
    c.add_argument("--shutdown-grace-period-critical-pods", default="0s", help="[0s]")
    c.add_argument("--shutdown-delay", type=int, default=150,
                   help="logind InhibitDelayMaxSec: how long the agent's drain may hold a shutdown "
                        "(0: leave logind's setting) [150]")
    n = ap.add_argument_group("nodesmith agent")
    n.add_argument("--coordinator", required=True, help="tls+tcp://HOST:PORT")
    n.add_argument("--coordinator-ca", required=True, help="PEM file: the CA that signed the coordinator")
    n.add_argument("--tls-server-name", help="name to verify in the coordinator's certificate")
    tok = n.add_mutually_exclusive_group(required=True)
    tok.add_argument("--token-file", help="file holding the bootstrap token")
    tok.add_argument("--token", help="the bootstrap token (prefer --token-file)")
    n.add_argument("--nodepool", help="NodePool of the node")
    n.add_argument("--agent-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="any other agent.conf setting (repeatable)")
    ap.add_argument("--extra-user-data", help="file: the EC2NodeClass's userData, merged first")
    ap.add_argument("--base64", action="store_true", help="print base64, as EC2 RunInstances takes it")
    ap.add_argument("-o", "--output", help="write here instead of standard output")
    args = ap.parse_args(argv)

    try:
        if args.certificate_authority_file:
            with open(args.certificate_authority_file, "rb") as fh:
                raw = fh.read().strip()
            args.certificate_authority = (base64.b64encode(raw).decode() if raw.startswith(b"-----BEGIN")
                                          else raw.decode())
        try:
            pem = base64.b64decode(args.certificate_authority, validate=True)
        except ValueError:
            raise BootstrapError("certificate authority: not base64")
        if not pem.startswith(b"-----BEGIN CERTIFICATE-----"):
            raise BootstrapError("certificate authority: base64 of a PEM certificate expected")
        if not args.api_server_endpoint.startswith("https://"):
            raise BootstrapError("api-server-endpoint: https:// URL expected")
        try:
            ipaddress.ip_network(args.cidr)
        except ValueError:
            raise BootstrapError("cidr: %r is not a CIDR" % args.cidr)
        if args.max_pods < 0:
            raise BootstrapError("max-pods: must not be negative")
        labels = [parse_label(x) for x in args.label]
        taints = [parse_taint(x) for x in args.taint]
        if args.nodepool:
            labels.append(("nodesmith.io/nodepool", args.nodepool))
        token = check_token(open(args.token_file).read() if args.token_file else args.token)
        with open(args.coordinator_ca) as fh:
            coord_ca = check_ca(fh.read())
        settings = [("coordinator", check_coordinator(args.coordinator)),
                    ("tls-ca", "/etc/nodesmith/ca.crt"),
                    ("tls-server-name", args.tls_server_name),
                    ("token-file", "/etc/nodesmith/token"),
                    ("nodepool", args.nodepool),
                    ("max-pods", args.max_pods or None)]
        for kv in args.agent_setting:
            if "=" not in kv:
                raise BootstrapError("agent-setting %r: expected KEY=VALUE" % kv)
            k, v = kv.split("=", 1)
            settings.append((k.strip(), v.strip()))
        conf = render_agent_conf(settings)

        parts = []
        if args.extra_user_data:
            with open(args.extra_user_data) as fh:
                parts += extra_parts(fh.read())
        parts.append((NODECONFIG_TYPE, nodeconfig(args, labels, taints)))
        parts.append(("text/cloud-config", cloud_config(conf, coord_ca, token, args.shutdown_delay)))
        doc = mime(parts)
        if len(doc.encode()) > USER_DATA_MAX:
            raise BootstrapError("user data is %d bytes; EC2 takes at most %d" % (len(doc.encode()), USER_DATA_MAX))
    except (BootstrapError, OSError) as e:
        print("al2023-userdata: %s" % e, file=sys.stderr)
        return 2

    out = base64.b64encode(doc.encode()).decode() + "\n" if args.base64 else doc
    if args.output:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(out)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
