"""The Helm chart packaging/helm/nodesmith, with the helm built from tools/helm ($BUILD/tools/helm):
`helm lint --strict`; `helm template` with the default values renders the same objects as the
kustomize base packaging/kubernetes (`kubectl kustomize`), once the differences listed in
EXPECTED_DIFFERENCES are normalised; every setting of `nodesmith-coordinator --help` is a value of
the chart or named in docs/helm.md's "Not exposed" table; the rendered command line and
coordinator.conf are accepted by `nodesmith-coordinator --check-config`, with the defaults and
with every setting given; the toggles (cert-manager, ServiceMonitor, PrometheusRule, IRSA) render
what they promise, and bad values are refused with a message naming them."""
import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from nsharness import BUILD, ROOT, Checklist  # noqa: E402

CHART = os.path.join(ROOT, "packaging", "helm", "nodesmith")
BASE = os.path.join(ROOT, "packaging", "kubernetes")
HELM = os.path.join(BUILD, "tools", "helm")
COORD = os.path.join(BUILD, "nodesmith-coordinator")
NS = "nodesmith"

# What differs between the chart (defaults, release "nodesmith" in namespace "nodesmith") and
# the kustomize base, on purpose; each is normalised away below, and nothing else may differ.
EXPECTED_DIFFERENCES = (
    "Namespace nodesmith: in the base; the chart installs into the release's namespace "
    "(helm install --create-namespace)",
    "Secret nodesmith-bootstrap-token: the chart creates it (bootstrapToken.create); with the "
    "base the operator does",
    "labels helm.sh/chart, app.kubernetes.io/managed-by, app.kubernetes.io/instance, "
    "app.kubernetes.io/version: only the chart's",
    "the pod template's checksum/config annotation: only the chart's (restarts on a config change)",
    "ConfigMap name: the base's carries kustomize's content hash suffix",
    "coordinator.conf: comments; the chart writes lease-namespace and lease-name, which the base "
    "leaves at their defaults (nodesmith, nodesmith-coordinator); cluster-name, which the chart "
    "requires and the base leaves to an overlay",
)
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")

check = Checklist()


def run(*argv, ok=True, stdin=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, input=stdin)
    if ok and p.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


CLUSTER_NAME = ("--set", "config.cluster-name=test-cluster")  # the one value the chart requires


def helm_template(*values_args, ok=True, cluster=True):
    return run(HELM, "template", "nodesmith", CHART, "--namespace", NS, "--kube-version", "1.32.0",
               *(CLUSTER_NAME if cluster else ()), *values_args, ok=ok)


def docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def conf_settings(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        k, _, v = line.partition("=")
        out[k.strip()] = v.strip()
    return out


def msec(v):
    """A duration as --check-config prints it ("20000ms") or as given ("20s") in ms, a size
    ("128Mi") in bytes; other values unchanged."""
    units = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    m = re.fullmatch(r"(\d+)(ms|s|m|h|Ki|Mi|Gi)?", v or "")
    return int(m.group(1)) * units.get(m.group(2) or "", 1) if m else v


def normalise(objs, source):
    out = {}
    for d in copy.deepcopy(objs):
        kind, md = d["kind"], d["metadata"]
        if source == "kustomize" and kind == "Namespace":
            continue
        if source == "helm" and kind == "Secret" and md["name"] == "nodesmith-bootstrap-token":
            continue
        for lbl in HELM_LABELS:
            md.get("labels", {}).pop(lbl, None)
        if kind == "ConfigMap":
            md["name"] = re.sub(r"-[a-z0-9]{10}$", "", md["name"]) if source == "kustomize" else md["name"]
            s = conf_settings(d["data"]["coordinator.conf"])
            if s.get("lease-namespace") == NS:
                s.pop("lease-namespace")
            if s.get("lease-name") == "nodesmith-coordinator":
                s.pop("lease-name")
            if s.get("cluster-name") == "test-cluster":
                s.pop("cluster-name")
            d["data"]["coordinator.conf"] = s
        if kind == "Deployment":
            tmpl = d["spec"]["template"]
            tmpl["metadata"].get("annotations", {}).pop("checksum/config", None)
            if not tmpl["metadata"].get("annotations"):
                tmpl["metadata"].pop("annotations", None)
            for v in tmpl["spec"]["volumes"]:
                if "configMap" in v:
                    v["configMap"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", v["configMap"]["name"])
        out[(kind, md.get("namespace", ""), md["name"])] = d
    return out


def diff(a, b, path=""):
    """Paths where a and b differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: {'only in helm' if k in a else 'only in kustomize'}")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [x for i in range(len(a)) for x in diff(a[i], b[i], f"{path}[{i}]")]
    return [] if a == b else [f"{path}: helm {json.dumps(a)[:200]} != kustomize {json.dumps(b)[:200]}"]


def find(objs, kind, name=None):
    for d in objs:
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name):
            return d
    return None


def coordinator_options():
    out = run(COORD, "--help").stdout
    opts = re.findall(r"^  --([a-z0-9-]+)", out, re.M)
    return [o for o in opts if o not in ("config", "check-config", "help", "version")]


def not_exposed():
    """docs/helm.md: the table under "## Not exposed", first column `--name`."""
    text = open(os.path.join(ROOT, "docs", "helm.md")).read()
    sect = text.split("## Not exposed", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `--([a-z0-9-]+)`", sect, re.M))


def check_config_accepted(what, objs, tmp):
    """The Deployment's args and the ConfigMap's coordinator.conf, with /etc/nodesmith moved to
    a scratch directory holding a certificate and a token."""
    dep = find(objs, "Deployment")
    cm = find(objs, "ConfigMap")
    etc = os.path.join(tmp, what.replace(" ", "-"))
    os.makedirs(os.path.join(etc, "tls"))
    os.makedirs(os.path.join(etc, "bootstrap"))
    conf = cm["data"]["coordinator.conf"].replace("/etc/nodesmith", etc)
    open(os.path.join(etc, "coordinator.conf"), "w").write(conf)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "1", "-subj", "/CN=nodesmith-coordinator", "-keyout", os.path.join(etc, "tls", "tls.key"),
        "-out", os.path.join(etc, "tls", "tls.crt"))
    open(os.path.join(etc, "tls", "ca.crt"), "w").write(open(os.path.join(etc, "tls", "tls.crt")).read())
    for f, src in (("catalog.json", "catalog-us-east-1.json"), ("prices.json", "ec2-on-demand-prices-us-east-1.json")):
        if os.path.exists(os.path.join(ROOT, "data", src)):
            shutil.copy(os.path.join(ROOT, "data", src), os.path.join(etc, "tls", f))
    open(os.path.join(etc, "bootstrap", "token"), "w").write("0123456789abcdef0123\n")
    os.chmod(os.path.join(etc, "bootstrap", "token"), 0o600)
    args = [a.replace("/etc/nodesmith", etc) for a in dep["spec"]["template"]["spec"]["containers"][0]["args"]]
    if "attestation-ca" not in conf_settings(conf):  # the image's file, from the source tree
        args += ["--attestation-ca", os.path.join(ROOT, "data", "aws-identity-rsa2048.pem")]
    p = run(COORD, "--check-config", *args, ok=False)
    check(f"coordinator --check-config accepts the chart's args and coordinator.conf ({what})",
          p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:])
    return conf_settings(p.stdout)


def main():
    if not os.access(HELM, os.X_OK):
        print(f"FAIL  {HELM} not built: make {os.path.relpath(HELM, ROOT)} (the Makefile's helm target)")
        return 1
    print("helm:", run(HELM, "version", "--short").stdout.strip())
    tmp = tempfile.mkdtemp(prefix="nodesmith-helm.")

    p = run(HELM, "lint", "--strict", CHART, "--namespace", NS, *CLUSTER_NAME, ok=False)
    check("helm lint --strict", p.returncode == 0, p.stdout + p.stderr)

    # ---- the default render against the kustomize base ----
    chart = docs(helm_template().stdout)
    base = docs(run("kubectl", "kustomize", BASE).stdout)
    crds = [d for d in chart if d["kind"] == "CustomResourceDefinition"]
    check("helm template renders objects", len(chart) > 10, len(chart))
    check("the chart's CRDs are the base's (crds/ links to packaging/kubernetes)",
          len(crds) == 0 and all(os.path.realpath(os.path.join(CHART, "crds", f)) ==
                                 os.path.join(BASE, f) for f in os.listdir(os.path.join(CHART, "crds"))),
          "crds/ must hold links only; helm template leaves CRDs out without --include-crds")
    chart = docs(helm_template("--include-crds").stdout)
    h, k = normalise(chart, "helm"), normalise(base, "kustomize")
    check("the same objects (kind, namespace, name) as kustomize",
          set(h) == set(k), f"only in helm: {sorted(set(h) - set(k))}\nonly in kustomize: {sorted(set(k) - set(h))}")
    for key in sorted(set(h) & set(k)):
        d = diff(h[key], k[key])
        check(f"{key[0]} {key[2]}: same as kustomize", not d, "\n".join(d[:30]))
    for src, objs in (("kustomize", base), ("helm", chart)):
        role = find(objs, "Role", "nodesmith-coordinator-leader-election")
        check(f"{src}: the leader-election Role names the Lease nodesmith-coordinator",
              role["rules"][1]["resourceNames"] == ["nodesmith-coordinator"], role["rules"])
    print("differences normalised (expected):\n  - " + "\n  - ".join(EXPECTED_DIFFERENCES))
    secret = find(chart, "Secret", "nodesmith-bootstrap-token")
    token = base64.b64decode(secret["data"]["token"]).decode() if secret else ""
    check("a generated bootstrap token of 32 characters", len(token) == 32, token)
    check_config_accepted("defaults", chart, tmp)

    # ---- every coordinator setting is a value or documented as not exposed ----
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))
    opts, hidden = coordinator_options(), not_exposed()
    missing = [o for o in opts if o not in values["config"] and o not in hidden]
    both = [o for o in opts if o in values["config"] and o in hidden]
    unknown = [o for o in values["config"] if o not in opts] + [o for o in hidden if o not in opts]
    check(f"each of the coordinator's {len(opts)} settings is a value or 'not exposed' in docs/helm.md",
          not missing and not both and not unknown,
          f"neither: {missing}; both: {both}; not a setting of the coordinator: {unknown}")

    # ---- every setting given: rendered into coordinator.conf and accepted ----
    full = {"cluster-name": "prod", "region": "eu-west-1", "ec2-endpoint": "https://ec2.eu-west-1.amazonaws.com",
            "ssm-endpoint": "https://ssm.eu-west-1.amazonaws.com", "iam-endpoint": "https://iam.amazonaws.com",
            "sqs-endpoint": "https://sqs.eu-west-1.amazonaws.com",
            "interruption-queue": "https://sqs.eu-west-1.amazonaws.com/123456789012/q",
            "max-notices-per-node": "32", "fast-answers": "no", "drain-on": "spot,rebalance,maintenance",
            "catalog-refresh": "12h", "image-refresh": "10m", "batch-idle": "2s", "batch-max": "20s",
            "registration-timeout": "10m",
            "termination-grace-period": "5m", "agent-silent-intervals": "4", "max-proxy-drains": "8",
            "consolidation-interval": "30s", "consolidation-validation-delay": "20s",
            "spot-to-spot-consolidation": "yes", "kubernetes-version": "1.32",
            "instance-profile": "nodesmith-nodes", "agent-image": "registry.example/nodesmith-agent:1",
            "cluster-endpoint": "https://api.example:443",
            "cluster-ca": "Y2E=", "cluster-cidr": "172.20.0.0/16", "agent-endpoint": "tls+tcp://ns.example:7400",
            "agent-ca": "/etc/nodesmith/tls/ca.crt", "agent-tls-server-name": "ns.example",
            "leader-elect": "yes", "lease-name": "ns-leader", "lease-duration": "20s", "attestation": "warn",
            "attestation-ca": "/etc/nodesmith/tls/ca.crt", "log-level": "debug",
            "catalog": "/etc/nodesmith/tls/catalog.json", "price-table": "/etc/nodesmith/tls/prices.json",
            "max-connections": "5000", "max-connections-per-source": "128", "max-unauthenticated": "32",
            "max-unauthenticated-per-source": "4", "auth-timeout": "5s", "idle-timeout": "2m",
            "max-state-memory": "128Mi", "iam-endpoint": "https://iam.amazonaws.com", "solver-budget": "50ms",
            "lease-renew-deadline": "10s", "lease-retry-period": "2s", "image-refresh": "30m",
            "dead-node-after": "10m"}
    unset = [o for o in values["config"] if values["config"][o] == "" and o not in full and o != "lease-namespace"]
    check("the full-values case sets every setting left empty by default", not unset, unset)
    vf = os.path.join(tmp, "full.yaml")
    yaml.safe_dump({"config": full}, open(vf, "w"))
    objs = docs(helm_template("-f", vf, cluster=False).stdout)
    got = check_config_accepted("every setting given", objs, tmp)
    wrong = {k: (v, got.get(k)) for k, v in full.items() if "/etc/nodesmith" not in v and msec(got.get(k)) != msec(v)}
    check("the coordinator reads every given value back (--check-config prints them)", not wrong, wrong)
    role = find(objs, "Role", "nodesmith-coordinator-leader-election")
    check("the leader-election Role follows config.lease-name",
          role["rules"][1]["resourceNames"] == ["ns-leader"], role["rules"])

    # ---- toggles ----
    objs = docs(helm_template(
        "--set", "tls.certManager.enabled=true", "--set", "tls.certManager.issuerRef.name=ca",
        "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true",
        "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::123456789012:role/ns",
        "--set", "bootstrapToken.create=false", "--set", "replicas=3").stdout)
    cert = find(objs, "Certificate")
    check("cert-manager: a Certificate writing the TLS Secret, with the Service's DNS names",
          cert is not None and cert["spec"]["secretName"] == "nodesmith-coordinator-tls"
          and "nodesmith-coordinator.nodesmith.svc" in cert["spec"]["dnsNames"], cert)
    sm = find(objs, "ServiceMonitor")
    check("ServiceMonitor scrapes the http port's /metrics",
          sm is not None and sm["spec"]["endpoints"][0]["port"] == "http"
          and sm["spec"]["selector"]["matchLabels"] == find(objs, "Service")["spec"]["selector"], sm)
    pr = find(objs, "PrometheusRule")
    plain = yaml.safe_load(open(os.path.join(ROOT, "packaging", "prometheus", "nodesmith-rules.yaml")))
    check("PrometheusRule holds the plain rules file's groups",
          pr is not None and pr["spec"]["groups"] == plain["groups"], pr and pr["spec"])
    sa = find(objs, "ServiceAccount", "nodesmith-coordinator")
    check("IRSA: the role ARN annotates the coordinator's ServiceAccount",
          sa["metadata"].get("annotations", {}).get("eks.amazonaws.com/role-arn") ==
          "arn:aws:iam::123456789012:role/ns", sa)
    check("bootstrapToken.create=false: no Secret rendered, the named one mounted",
          find(objs, "Secret") is None and any(v.get("secret", {}).get("secretName") == "nodesmith-bootstrap-token"
                                               for v in find(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]))
    check("replicas", find(objs, "Deployment")["spec"]["replicas"] == 3)

    # ---- refused values, with a message naming them ----
    for what, args, needle in (
            ("a token shorter than 16", ("--set", "bootstrapToken.value=short"), "bootstrapToken.value"),
            ("cert-manager without an issuer", ("--set", "tls.certManager.enabled=true"), "tls.certManager.issuerRef.name"),
            ("a value with a line break", ("--set-string", "config.region=a\nb"), "config.region"),
            ("a setting the coordinator does not have", ("--set", "config.no-such-thing=1"), "no-such-thing"),
            ("a misspelt top-level value", ("--set", "replica=3"), "replica")):
        p = helm_template(*args, ok=False)
        check(f"refused: {what}", p.returncode != 0 and needle in p.stderr, p.stderr[-800:])
    for what, args, needle in (("no cluster-name", (), "config.cluster-name"),):
        p = helm_template(*args, ok=False, cluster=False)
        check(f"refused: {what}", p.returncode != 0 and needle in p.stderr, p.stderr[-800:])

    return check.exit_code("test_helm")


if __name__ == "__main__":
    sys.exit(main())
