#!/usr/bin/env python3
"""User data (TOML settings) for a Bottlerocket EKS node launched by nodesmith.

Bottlerocket has a read-only root and no custom systemd units: the agent runs as a superpowered
host container, settings.host-containers.nodesmith, whose user-data (base64) is the agent's
configuration followed by the coordinator's CA in PEM (packaging/bottlerocket/entrypoint.sh
splits them). The kubelet's graceful node shutdown is settings.kubernetes.shutdown-grace-period.

Example:
  bottlerocket-userdata.py --cluster-name prod --api-server https://ABC.gr7.us-east-1.eks.amazonaws.com \
      --cluster-certificate-file ca.b64 --cluster-dns-ip 10.100.0.10 \
      --image 111122223333.dkr.ecr.us-east-1.amazonaws.com/nodesmith-agent:0.1.0 \
      --coordinator tls+tcp://nodesmith.internal.example:7400 --coordinator-ca coordinator-ca.crt \
      --token-file token --nodepool default > user-data.toml
"""
import argparse
import base64
import ipaddress
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nodesmith_bootstrap import (USER_DATA_MAX, BootstrapError, check_ca, check_coordinator,  # noqa: E402
                                 check_token, parse_label, parse_taint, render_agent_conf)

HOST_ROOT = "/.bottlerocket/rootfs"


def s(value):
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster-name", required=True)
    ap.add_argument("--api-server", required=True, help="https://...")
    ca = ap.add_mutually_exclusive_group(required=True)
    ca.add_argument("--cluster-certificate", help="the cluster CA, base64")
    ca.add_argument("--cluster-certificate-file", help="file: the cluster CA, PEM or base64")
    ap.add_argument("--cluster-dns-ip", help="kube-dns service address")
    ap.add_argument("--max-pods", type=int, default=0)
    ap.add_argument("--label", action="append", default=[], help="KEY=VALUE (repeatable)")
    ap.add_argument("--taint", action="append", default=[], help="KEY[=VALUE]:EFFECT (repeatable)")
    ap.add_argument("--shutdown-grace-period", default="150s", help="[150s]")
    ap.add_argument("--shutdown-grace-period-critical-pods", default="30s", help="[30s]")
    ap.add_argument("--image", required=True, help="the agent host container image (ECR)")
    ap.add_argument("--coordinator", required=True, help="tls+tcp://HOST:PORT")
    ap.add_argument("--coordinator-ca", required=True, help="PEM file")
    ap.add_argument("--tls-server-name")
    tok = ap.add_mutually_exclusive_group(required=True)
    tok.add_argument("--token-file")
    tok.add_argument("--token")
    ap.add_argument("--nodepool")
    ap.add_argument("--agent-setting", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("-o", "--output")
    args = ap.parse_args(argv)

    try:
        if args.cluster_certificate_file:
            with open(args.cluster_certificate_file, "rb") as fh:
                raw = fh.read().strip()
            args.cluster_certificate = (base64.b64encode(raw).decode() if raw.startswith(b"-----BEGIN")
                                        else raw.decode())
        try:
            if not base64.b64decode(args.cluster_certificate, validate=True).startswith(b"-----BEGIN CERTIFICATE-----"):
                raise BootstrapError("cluster certificate: base64 of a PEM certificate expected")
        except ValueError:
            raise BootstrapError("cluster certificate: not base64")
        if not args.api_server.startswith("https://"):
            raise BootstrapError("api-server: https:// URL expected")
        if args.cluster_dns_ip:
            ipaddress.ip_address(args.cluster_dns_ip)
        labels = [parse_label(x) for x in args.label]
        if args.nodepool:
            labels.append(("nodesmith.io/nodepool", args.nodepool))
        taints = [parse_taint(x) for x in args.taint]
        token = check_token(open(args.token_file).read() if args.token_file else args.token)
        with open(args.coordinator_ca) as fh:
            coord_ca = check_ca(fh.read())
        settings = [("coordinator", check_coordinator(args.coordinator)),
                    ("tls-server-name", args.tls_server_name),
                    ("token", token),  # the user-data is private to the host container
                    ("nodepool", args.nodepool),
                    ("root", HOST_ROOT),
                    ("kubelet-config", "/etc/kubernetes/kubelet/config"),
                    ("max-pods", args.max_pods or None)]
        for kv in args.agent_setting:
            if "=" not in kv:
                raise BootstrapError("agent-setting %r: expected KEY=VALUE" % kv)
            k, v = kv.split("=", 1)
            settings.append((k.strip(), v.strip()))
        host_user_data = render_agent_conf(settings) + coord_ca

        out = ["# Bottlerocket settings written by nodesmith (bootstrap/userdata/bottlerocket-userdata.py).",
               "[settings.kubernetes]",
               "cluster-name = " + s(args.cluster_name),
               "api-server = " + s(args.api_server),
               "cluster-certificate = " + s(args.cluster_certificate)]
        if args.cluster_dns_ip:
            out.append("cluster-dns-ip = " + s(args.cluster_dns_ip))
        if args.max_pods:
            out.append("max-pods = %d" % args.max_pods)
        if args.shutdown_grace_period:
            out.append("shutdown-grace-period = " + s(args.shutdown_grace_period))
            out.append("shutdown-grace-period-for-critical-pods = " + s(args.shutdown_grace_period_critical_pods))
        if labels:
            out += ["", "[settings.kubernetes.node-labels]"] + ["%s = %s" % (s(k), s(v)) for k, v in labels]
        if taints:
            grouped = {}
            for t in taints:
                grouped.setdefault(t["key"], []).append("%s:%s" % (t["value"], t["effect"]))
            out += ["", "[settings.kubernetes.node-taints]"]
            out += ["%s = [%s]" % (s(k), ", ".join(s(v) for v in vs)) for k, vs in grouped.items()]
        out += ["", "[settings.host-containers.nodesmith]",
                "source = " + s(args.image),
                "enabled = true",
                "superpowered = true",
                "user-data = " + s(base64.b64encode(host_user_data.encode()).decode()), ""]
        doc = "\n".join(out)
        if len(doc.encode()) > USER_DATA_MAX:
            raise BootstrapError("user data is %d bytes; EC2 takes at most %d" % (len(doc.encode()), USER_DATA_MAX))
    except (BootstrapError, OSError, ValueError) as e:
        print("bottlerocket-userdata: %s" % e, file=sys.stderr)
        return 2

    if args.output:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(doc)
    else:
        sys.stdout.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
