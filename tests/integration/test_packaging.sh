#!/usr/bin/env bash
# Packaging and node bootstrap: `make packages` builds the .deb (and the .rpm when rpmbuild is
# installed); the .deb installs into a scratch root with its maintainer scripts (user, enabled
# unit); the unit passes `systemd-analyze verify` and keeps its security exposure low; the shipped
# agent.conf is accepted by the agent and documents the real defaults; the Kubernetes base renders
# to the expected objects, and the coordinator accepts the Deployment's command line; the rpm's
# agent needs only libraries of Amazon Linux 2023's base image and reports over TLS; the Packer
# template validates as shipped and its IMDSv2 step works (Packer against moto); the AL2023 user
# data is MIME with the right parts; the Bottlerocket settings parse as TOML and their user-data
# is accepted by the agent through the host container's entrypoint. Only a missing tool skips a
# check, and it says so (in CI, rpmbuild and packer must be there). Exit 0 on success.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BUILD=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
PYTHON=${PYTHON:-python3}
AGENT=$BUILD/nodesmith-agent
COORD=$BUILD/nodesmith-coordinator
T=$(mktemp -d "${TMPDIR:-/tmp}/nodesmith-pkg.XXXXXX")
trap 'rm -rf "$T"' EXIT
fails=0 checks=0
ok()   { checks=$((checks + 1)); echo "ok    $*"; }
bad()  { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL  $*"; }
skip() { echo "skip  $*"; }
check() { local what=$1; shift; if "$@" >"$T/out" 2>&1; then ok "$what"; else bad "$what"; sed 's/^/      /' "$T/out" | tail -30; fi; }

# ---- build ---------------------------------------------------------------------------------
mk=(make --no-print-directory BUILD="$BUILD")
grep -q '^include packaging/packages.mk' Makefile || mk+=(-f Makefile -f packaging/packages.mk)
"${mk[@]}" all >"$T/make-all.log" 2>&1 || { cat "$T/make-all.log"; echo "FAIL  make all"; exit 1; }
check "make packages" "${mk[@]}" packages
VERSION=$(sed -n 's/^#define AGENT_VERSION "\(.*\)"/\1/p' agent/agent.h)
DEB=$BUILD/nodesmith-agent_${VERSION}_$(dpkg --print-architecture).deb
RPM=$BUILD/nodesmith-agent-${VERSION}-1.$(uname -m).rpm
[ -f "$DEB" ] && ok "deb built: $(basename "$DEB")" || bad "no $DEB"

# ---- the .deb, installed into a scratch root with its maintainer scripts -------------------
R=$T/root
mkdir -p "$R/var/lib/dpkg/info" "$R/var/lib/dpkg/updates" "$R/etc"
: > "$R/var/lib/dpkg/status"
# --force-depends: the scratch root holds no libraries; dependencies are checked below instead.
check "dpkg -i into a scratch root (postinst with DPKG_ROOT)" \
  dpkg --root="$R" --force-script-chrootless --force-depends --force-not-root -i "$DEB"
for f in usr/bin/nodesmith-agent lib/systemd/system/nodesmith-agent.service \
         usr/lib/sysusers.d/nodesmith.conf usr/lib/tmpfiles.d/nodesmith.conf etc/nodesmith/agent.conf; do
  [ -f "$R/$f" ] && ok "installed /$f" || bad "missing /$f"
done
[ "$(stat -c %a "$R/etc/nodesmith/agent.conf")" = 600 ] && ok "agent.conf is 0600" || bad "agent.conf mode $(stat -c %a "$R/etc/nodesmith/agent.conf")"
grep -q '^/etc/nodesmith/agent.conf$' "$R/var/lib/dpkg/info/nodesmith-agent.conffiles" && ok "agent.conf is a conffile" || bad "agent.conf not a conffile"
grep -q '^nodesmith:' "$R/etc/passwd" && ok "postinst created the nodesmith user" || bad "no nodesmith user"
L=$R/etc/systemd/system/multi-user.target.wants/nodesmith-agent.service
[ -L "$L" ] && ok "postinst enabled the unit ($(readlink "$L"))" || bad "unit not enabled"
"$R/usr/bin/nodesmith-agent" --version | grep -qx "nodesmith-agent $VERSION" && ok "packaged agent runs ($VERSION)" || bad "packaged agent --version"
deps=$(dpkg-deb -f "$DEB" Depends)
for lib in libnng1 libsystemd0 libc6; do
  [[ "$deps" == *"$lib"* ]] && ok "Depends names $lib" || bad "Depends lacks $lib: $deps"
done
# the agent's HTTP is NNG's (docs/http.md): no libcurl, no OpenSSL on the node for it
[[ "$deps" != *libcurl* && "$deps" != *libssl* ]] && ok "Depends names neither libcurl nor libssl" || bad "Depends: $deps"
if [ -d /run/systemd/system ]; then skip "systemd is PID 1 here: install tested in a scratch root only"; fi
check "systemctl --root disable/enable round trip" bash -c "
  systemctl --root='$R' disable nodesmith-agent.service && ! test -e '$L' &&
  systemctl --root='$R' enable nodesmith-agent.service && test -L '$L'"

# ---- the unit ------------------------------------------------------------------------------
# verify resolves units and binaries under --root: give the scratch root the host's unit tree
# (sysinit.target, dbus.service, ...) and kill (ExecReload=).
V=$T/vroot
cp -a "$R" "$V"
mkdir -p "$V/usr/lib/systemd/system" "$V/usr/bin"
cp -a /usr/lib/systemd/system/. "$V/usr/lib/systemd/system/"
cp /usr/bin/kill "$V/usr/bin/kill"
check "systemd-analyze verify (packaged unit, scratch root)" \
  systemd-analyze verify --root="$V" "$V/lib/systemd/system/nodesmith-agent.service"
# The same check must fail when the agent is missing: verify really looks at the root.
mv "$V/usr/bin/nodesmith-agent" "$V/usr/bin/nodesmith-agent.away"
if systemd-analyze verify --root="$V" "$V/lib/systemd/system/nodesmith-agent.service" >/dev/null 2>&1; then
  bad "verify passed without the binary"; else ok "verify fails without the binary"; fi
mv "$V/usr/bin/nodesmith-agent.away" "$V/usr/bin/nodesmith-agent"
U=packaging/systemd/nodesmith-agent.service
for d in Type=notify WatchdogSec= Restart=always NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
         SystemCallFilter=@system-service CapabilityBoundingSet= Before=kubelet.service \
         After=network-online.target StateDirectory=nodesmith PrivateTmp=yes OOMScoreAdjust=-; do
  grep -q "^$d" "$U" && ok "unit has $d" || bad "unit lacks $d"
done
score=$(systemd-analyze security --offline=yes "$U" 2>/dev/null | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
if [ -n "$score" ] && awk -v s="$score" 'BEGIN{exit !(s <= 2.0)}'; then ok "systemd-analyze security exposure $score (<= 2.0)"
else bad "systemd-analyze security exposure '${score:-?}' (want <= 2.0)"; fi
grep -q "exposure.*$score" docs/packaging.md && ok "docs/packaging.md records exposure $score" || bad "docs/packaging.md does not record $score"
check "sysusers.d entry creates the user" bash -c "mkdir -p '$T/su/etc' && systemd-sysusers --root='$T/su' '$PWD/packaging/systemd/nodesmith.sysusers' && grep -q '^nodesmith:' '$T/su/etc/passwd'"
check "tmpfiles.d entry applies" bash -c "systemd-tmpfiles --root='$T/su' --create '$PWD/packaging/systemd/nodesmith.tmpfiles' && test -d '$T/su/etc/nodesmith'"

# ---- the shipped configuration -------------------------------------------------------------
C=packaging/etc/agent.conf
if "$AGENT" --check-config --config "$C" >/dev/null 2>&1; then bad "agent accepted agent.conf without a coordinator"
else ok "agent refuses agent.conf until the coordinator is set"; fi
sed 's|^#coordinator = |coordinator = |' "$C" > "$T/agent.conf"
check "agent --check-config accepts agent.conf (coordinator filled in)" "$AGENT" --check-config --config "$T/agent.conf"
# Every key of --help is documented, and every documented default is the real one.
undocumented=()
for k in $("$AGENT" --help | sed -n 's/^  --\([a-z0-9-]*\) VALUE.*/\1/p; s/^  --\([a-z0-9-]*\)  .*/\1/p' |
           grep -vx 'config\|check-config\|help\|version\|once'); do
  grep -Eq "^#$k =( |\$)" "$C" || undocumented+=("$k")
done
[ ${#undocumented[@]} -eq 0 ] && ok "agent.conf documents every option of --help" || bad "agent.conf does not document: ${undocumented[*]}"
{ grep -E '^#[a-z0-9-]+ = .+' "$C" | sed 's/^#//' | grep -v '^coordinator = '; echo "coordinator = tls+tcp://x.example:7400"; } > "$T/defaults.conf"
echo "coordinator = tls+tcp://x.example:7400" > "$T/minimal.conf"
"$AGENT" --check-config --config "$T/defaults.conf" > "$T/a" 2>&1 || true
"$AGENT" --check-config --config "$T/minimal.conf" > "$T/b" 2>&1 || true
if diff "$T/a" "$T/b" >/dev/null && grep -q "configuration OK" "$T/a"; then ok "documented defaults equal the agent's defaults"
else bad "documented defaults differ:"; diff "$T/a" "$T/b" | sed 's/^/      /'; fi

# ---- the rpm -------------------------------------------------------------------------------
# Amazon Linux 2023 has no NNG, mbedTLS or cJSON: the rpm's agent links them (and protobuf-c,
# libyaml) statically and may need only these libraries of AL2023's base image: glibc (symbols up
# to GLIBC_2.34) and systemd-libs (systemd 252). Its HTTP is NNG's: no libcurl, no OpenSSL.
AL2023_LIBS="libc.so.6 libsystemd.so.0"
al2023_foreign_needed() {  # the DT_NEEDED entries of $1 that AL2023's base image does not provide
  readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | while read -r lib; do
    [[ " $AL2023_LIBS " == *" $lib "* ]] || echo "$lib"
  done
}
al2023_foreign_requires() {  # the requirements of rpm $1 that AL2023 does not provide
  rpm -qpR "$1" | sed 's/ *$//' | grep -Ev '^(/bin/sh|shadow-utils|systemd|config\(nodesmith-agent\) = .*|rpmlib\(.*|rtld\(GNU_HASH\))$' |
    grep -Ev '^(libc\.so\.6|libsystemd\.so\.0)\(\)(\(64bit\))?$' |
    grep -Ev '^libc\.so\.6\(GLIBC_2\.[0-9.]+\)(\(64bit\))?$' | grep -Ev '^libsystemd\.so\.0\(LIBSYSTEMD_[0-9]+\)(\(64bit\))?$' || true
}
if command -v rpmbuild >/dev/null; then
  [ -f "$RPM" ] && ok "rpm built: $(basename "$RPM")" || bad "no $RPM"
  files=$(rpm -qlp "$RPM" 2>/dev/null)
  for f in /usr/bin/nodesmith-agent /usr/lib/systemd/system/nodesmith-agent.service /etc/nodesmith/agent.conf \
           /usr/lib/sysusers.d/nodesmith.conf; do
    grep -qx "$f" <<<"$files" && ok "rpm holds $f" || bad "rpm lacks $f"
  done
  rpm -qp --scripts "$RPM" 2>/dev/null | grep -q 'useradd -r -g nodesmith' && ok "rpm %pre creates the user" || bad "rpm %pre"
  mkdir -p "$T/rpmx" && rpm2archive - < "$RPM" | tar xzf - -C "$T/rpmx" &&
    cmp -s "$T/rpmx/usr/lib/systemd/system/nodesmith-agent.service" "$U" && ok "rpm carries the same unit" || bad "rpm unit differs"
  RA=$T/rpmx/usr/bin/nodesmith-agent
  # Requirements: rpm -qpR and the packaged binary's own view (readelf, ldd).
  foreign=$(al2023_foreign_requires "$RPM")
  [ -z "$foreign" ] && ok "rpm -qpR names only what AL2023 provides" || bad "rpm requires what AL2023 lacks: $(echo $foreign)"
  rpm -qpR "$RPM" | grep -Eq '^lib(curl|ssl|crypto)\.so' && bad "rpm requires libcurl or OpenSSL" || ok "rpm requires neither libcurl nor OpenSSL"
  glibc=$(rpm -qpR "$RPM" | sed -n 's/^libc\.so\.6(GLIBC_\([0-9.]*\)).*/\1/p' | sort -V | tail -1)
  [ -n "$glibc" ] && [ "$(printf '%s\n2.34\n' "$glibc" | sort -V | tail -1)" = 2.34 ] &&
    ok "rpm needs glibc symbols up to GLIBC_$glibc (AL2023: 2.34)" || bad "rpm needs GLIBC_$glibc (AL2023 has 2.34)"
  sd=$(rpm -qpR "$RPM" | sed -n 's/^libsystemd\.so\.0(LIBSYSTEMD_\([0-9]*\)).*/\1/p' | sort -n | tail -1)
  [ -n "$sd" ] && [ "$sd" -le 252 ] && ok "rpm needs libsystemd up to LIBSYSTEMD_$sd (AL2023: systemd 252)" ||
    bad "rpm needs LIBSYSTEMD_${sd:-?} (AL2023 has 252)"
  foreign=$(al2023_foreign_needed "$RA")
  [ -z "$foreign" ] && ok "packaged agent: readelf -d NEEDED is within $AL2023_LIBS" || bad "packaged agent needs $(echo $foreign)"
  # The same checks flag the .deb's agent, which links NNG, cJSON, ... dynamically.
  foreign=$(al2023_foreign_needed "$AGENT")
  [[ "$foreign" == *libnng.so.1* && "$foreign" == *libcjson.so.1* ]] && ok "the check flags the dynamic agent ($(echo $foreign))" ||
    bad "the NEEDED check misses the dynamic agent's libnng/libcjson: '$foreign'"
  if ldd "$RA" > "$T/ldd" 2>&1 && ! grep -Eq 'not found|libnng|libmbed|libcjson|libprotobuf-c|libyaml' "$T/ldd"; then
    ok "ldd: packaged agent resolves, no NNG/mbedTLS/cJSON/protobuf-c/libyaml"
  else bad "ldd of the packaged agent:"; sed 's/^/      /' "$T/ldd"; fi
  check "third_party/cjson/cJSON.h is the header the agent is compiled against" cmp third_party/cjson/cJSON.h /usr/include/cjson/cJSON.h
  check "packaged agent --check-config accepts agent.conf (coordinator filled in)" "$RA" --check-config --config "$T/agent.conf"
  # The statically linked NNG + mbedTLS + protobuf-c work: the packaged agent reports over TLS.
  check "packaged agent reports to a coordinator over TLS" env BUILD="$BUILD" "$PYTHON" - "$RA" "$T/link" <<'PY'
import os, sys
sys.path.insert(0, "tests/pylib")
from nsharness import GiB, Coordinator, Proc, agent_argv, make_pki, make_root, wait_for
agent, d = sys.argv[1:]
os.makedirs(d)
try:
    pki = make_pki(d)
    coord = Coordinator(d, pki).start()
    root = make_root(os.path.join(d, "node"), 2, 8 * GiB)
    argv = agent_argv(coord, root, "i-0rpm0agent0static")
    assert argv[0].endswith("/nodesmith-agent")
    Proc("agent", [agent] + argv[1:], d)
    wait_for("the rpm's agent registered", lambda: "i-0rpm0agent0static" in coord.nodes(), 20)
    print("registered:", coord.nodes()["i-0rpm0agent0static"].get("instanceType"))
finally:
    Proc.stop_all()
PY
elif [ "${CI:-}" = true ]; then
  bad "rpmbuild not installed: bootstrap/deps-debian.sh installs rpm in CI"
else
  skip "rpmbuild not installed (Debian: apt-get install rpm): no .rpm"
fi

# ---- Kubernetes ----------------------------------------------------------------------------
if command -v kubectl >/dev/null; then
  check "kubectl kustomize packaging/kubernetes" bash -c "kubectl kustomize packaging/kubernetes > '$T/k8s.yaml'"
  check "rendered objects are what the base promises" "$PYTHON" - "$T/k8s.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by = {}
for d in docs:
    assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), d
    by[(d["kind"], d["metadata"]["name"])] = d
def get(kind, name):
    for (k, n), d in by.items():
        if k == kind and (n == name or n.startswith(name + "-")):
            return d
    raise AssertionError("missing %s %s" % (kind, name))
for kind, name in by:
    if kind not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
        assert by[(kind, name)]["metadata"].get("namespace") == "nodesmith", (kind, name)
# CRDs: Karpenter v1's fields under nodesmith.io/v1, plus nodesmith's additions.
np = get("CustomResourceDefinition", "nodepools.nodesmith.io")
assert np["spec"]["group"] == "nodesmith.io" and np["spec"]["versions"][0]["name"] == "v1"
s = np["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
t = s["template"]["properties"]["spec"]["properties"]
req = t["requirements"]["items"]["properties"]
assert req["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]
assert req["minValues"]["maximum"] == 50
for f in ("taints", "startupTaints", "nodeClassRef", "expireAfter", "terminationGracePeriod"):
    assert f in t, f
assert "labels" in s["template"]["properties"]["metadata"]["properties"]
for f in ("limits", "weight", "disruption", "headroom"):
    assert f in s, f
d = s["disruption"]["properties"]
for f in ("consolidationPolicy", "consolidateAfter", "budgets", "consolidationThreshold"):
    assert f in d, f
assert set(d["budgets"]["items"]["properties"]) == {"nodes", "schedule", "duration", "reasons"}
assert set(s["headroom"]["properties"]) == {"cpu", "memory", "pods"}
nc = get("CustomResourceDefinition", "ec2nodeclasses.nodesmith.io")
ns = nc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
for f in ("amiSelectorTerms", "subnetSelectorTerms", "securityGroupSelectorTerms", "role", "instanceProfile",
          "kubelet", "blockDeviceMappings", "metadataOptions", "userData", "tags", "amiFamily"):
    assert f in ns["properties"], f
assert ns["properties"]["metadataOptions"]["default"]["httpTokens"] == "required"
# No YAML leftovers (anchors) and structural: every property schema has a type or int-or-string.
def walk(x, path):
    if isinstance(x, dict):
        if "properties" in x:
            for k, v in x["properties"].items():
                assert "type" in v or v.get("x-kubernetes-int-or-string"), path + "." + k
        for k, v in x.items():
            walk(v, path + "." + k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            walk(v, "%s[%d]" % (path, i))
walk(np, "nodepools"); walk(nc, "ec2nodeclasses")
# Deployment.
dep = get("Deployment", "nodesmith-coordinator")
ps = dep["spec"]["template"]["spec"]
c = ps["containers"][0]
assert dep["spec"]["replicas"] == 2
assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
assert c["securityContext"]["readOnlyRootFilesystem"] is True and ps["securityContext"]["runAsNonRoot"] is True
assert c["securityContext"]["capabilities"]["drop"] == ["ALL"] and c["securityContext"]["allowPrivilegeEscalation"] is False
assert c["resources"]["requests"]["cpu"] and ps["topologySpreadConstraints"]
cm = ps["volumes"][0]["configMap"]["name"]
get("ConfigMap", cm)
svc = get("Service", "nodesmith-coordinator")
assert sorted(p["port"] for p in svc["spec"]["ports"]) == [7400, 8080, 8081]
# /api/v1 on its own port, authenticated; only labelled namespaces reach it (docs/security.md)
assert "--api-auth" in c["args"] and c["args"][c["args"].index("--api-auth") + 1] == "kubernetes"
pol = get("NetworkPolicy", "nodesmith-coordinator")["spec"]["ingress"]
assert [r for r in pol if any(p["port"] == "api" for p in r["ports"])][0]["from"][0]["namespaceSelector"]
assert any(r.get("nonResourceURLs") for r in get("ClusterRole", "nodesmith-api-reader")["rules"])
assert get("PodDisruptionBudget", "nodesmith-coordinator")["spec"]["maxUnavailable"] == 1
# The leader-election Role names the Lease itself (kustomize once rewrote it to the ConfigMap's
# hashed name, which a real API server then refused).
le = get("Role", "nodesmith-coordinator-leader-election")["rules"]
assert any(r.get("resourceNames") == ["nodesmith-coordinator"] and "leases" in r["resources"]
           and "update" in r["verbs"] for r in le), le
# RBAC: no cluster-wide rights for the agents; each uses its node's kubelet identity (the Node
# authorizer and NodeRestriction keep it to its own Node and pods, docs/security.md).
def allows(rules, group, res, verb):
    return any(group in r["apiGroups"] and res in r["resources"] and verb in r["verbs"] for r in rules)
assert not [x for x in docs if "agent" in x["metadata"]["name"]], [x["metadata"]["name"] for x in docs if "agent" in x["metadata"]["name"]]
for x in docs:
    if x["kind"] in ("ClusterRoleBinding", "RoleBinding"):
        assert not [s for s in x.get("subjects") or [] if s.get("name") == "system:nodes"], x
coord = get("ClusterRole", "nodesmith-coordinator")["rules"]
# the coordinator evicts only when it drains for a silent agent (docs/drain.md); it never reads secrets
assert allows(coord, "", "pods/eviction", "create") and not allows(coord, "", "pods", "delete")
assert not allows(coord, "", "secrets", "get")
assert allows(get("Role", "nodesmith-coordinator-leader-election")["rules"], "coordination.k8s.io", "leases", "update")
print(len(docs), "objects")
PY
  # The coordinator accepts the Deployment's command line (paths moved under a scratch dir).
  "$PYTHON" -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "Deployment":
        print("\n".join(d["spec"]["template"]["spec"]["containers"][0]["args"]))' "$T/k8s.yaml" > "$T/args"
  E=$T/etc-nodesmith; mkdir -p "$E/tls" "$E/bootstrap"
  cp packaging/kubernetes/coordinator.conf "$E/coordinator.conf"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=nodesmith-coordinator \
    -addext subjectAltName=DNS:nodesmith-coordinator.nodesmith.svc -keyout "$E/tls/tls.key" -out "$E/tls/tls.crt" 2>/dev/null
  head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$E/bootstrap/token"
  chmod 0400 "$E/bootstrap/token"  # the Secret volume's defaultMode: others may not read it
  mapfile -t args < <(sed "s|^/etc/nodesmith|$E|" "$T/args")
  # plus what an overlay must add: cluster-name (agents are attested against it; the image ships
  # AWS's certificates where attestation-ca points by default)
  check "coordinator --check-config accepts the Deployment's args" "$COORD" --check-config "${args[@]}" \
    --cluster-name prod --attestation-ca data/aws-identity-rsa2048.pem
  if "$COORD" --check-config "${args[@]}" >/dev/null 2>&1; then
    bad "the base without cluster-name started (attestation has nothing to check against)"
  else ok "the base without an overlay's cluster-name is refused"; fi
else
  skip "kubectl not installed: Kubernetes base not rendered"
fi

# ---- Packer --------------------------------------------------------------------------------
# The template itself, as shipped, is what Packer validates: it must hold for Debian 12's packer
# 1.6.6, whose amazon-ebs has no metadata_options/imds_support. IMDSv2 (hop limit 1) is required
# on the bake instance by the first provisioner, before anything is copied to it, and checked on
# the instance by the second; nodes launched by the coordinator get it from its launch template.
P=bootstrap/packer/nodesmith-al2023.json
check "packer template: IMDSv2 on the bake instance first, rpm installed, unit enabled" "$PYTHON" - "$P" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))
e = b["builders"][0]
assert e["type"] == "amazon-ebs"
assert "metadata_options" not in e and "imds_support" not in e, "keys Packer 1.6.6 rejects"
p = b["provisioners"]
assert p[0]["type"] == "shell-local", p[0]
cmd = " ".join(p[0]["inline"])
for w in ("aws ec2 modify-instance-metadata-options", "--instance-id '{{build `ID`}}'", "--region '{{user `region`}}'",
          "--http-tokens required", "--http-put-response-hop-limit 1", "--http-endpoint enabled"):
    assert w in cmd, w
assert p[1]["type"] == "shell" and "http://169.254.169.254/latest/meta-data/" in p[1]["inline"][0]
assert p[1]["inline"][-1] == 'test "$code" = 401', p[1]["inline"]
assert all(x["type"] != "file" for x in p[:2]), "nothing reaches the instance before IMDSv2 is required"
inl = " ".join(x.get("inline") and " ".join(x["inline"]) or "" for x in p)
assert "dnf install -y /tmp/nodesmith-agent.rpm" in inl and "systemctl enable nodesmith-agent.service" in inl
assert [x["type"] for x in b["post-processors"]] == ["manifest"]
PY
export CHECKPOINT_DISABLE=1  # Packer asks for nothing on the network
if command -v packer >/dev/null; then
  src=$RPM; [ -f "$src" ] || src=$DEB
  pv=$(packer version | sed -n 's/^Packer v\([0-9.]*\).*/\1/p')
  check "packer validate $P (Packer $pv)" packer validate -var "rpm=$src" "$P"
  if packer validate -var "rpm=$T/no-such.rpm" "$P" >/dev/null 2>&1; then
    bad "packer validate accepted a missing rpm"; else ok "packer validate rejects a missing rpm"; fi
  "$PYTHON" -c '
import json, sys
b = json.load(open(sys.argv[1]))
b["builders"][0]["no_such_option"] = True
json.dump(b, open(sys.argv[2], "w"))' "$P" "$T/packer-bad.json"
  if packer validate -var "rpm=$src" "$T/packer-bad.json" >/dev/null 2>&1; then
    bad "packer validate accepted an unknown amazon-ebs key"; else ok "packer validate rejects an unknown amazon-ebs key"; fi
  # Packer itself runs the template's first step: the amazon-ebs builder, as written, against moto
  # (EC2 on 127.0.0.1), with no SSH (the later provisioners need the instance), and the step's
  # aws CLI call must leave the bake instance with IMDSv2 required, hop limit 1.
  if command -v moto_server >/dev/null && command -v aws >/dev/null; then
    check "packer build (moto): the first step requires IMDSv2 on the bake instance" "$PYTHON" - "$P" "$T/pkmoto" <<'PY'
import json, os, re, socket, subprocess, sys, time, urllib.request
tmpl, d = sys.argv[1:]
os.makedirs(d)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = "http://127.0.0.1:%d" % port
moto = subprocess.Popen(["moto_server", "-p", str(port)], stdout=open(os.path.join(d, "moto.log"), "w"),
                        stderr=subprocess.STDOUT)
try:
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/moto-api/", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL=url, AWS_CONFIG_FILE="/dev/null", AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    def ec2(*a):
        r = subprocess.run(["aws", "ec2", *a, "--output", "json"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    ami = ec2("describe-images", "--owners", "amazon")["Images"][0]["ImageId"]
    b = json.load(open(tmpl))
    e = b["builders"][0]
    for k in ("source_ami_filter", "ssh_username", "ssh_pty"):
        del e[k]
    e.update(custom_endpoint_ec2=url, skip_credential_validation=True, skip_metadata_api_check=True,
             skip_region_validation=True, source_ami=ami, communicator="none")
    b["provisioners"] = b["provisioners"][:1]
    del b["post-processors"]
    json.dump(b, open(os.path.join(d, "moto.json"), "w"))
    out = subprocess.run(["packer", "build", "-machine-readable", "moto.json"], cwd=d, env=env,
                         capture_output=True, text=True, timeout=300).stdout
    assert "Build 'amazon-ebs' finished" in out, out[-3000:]
    ids = set(re.findall(r"Instance ID: (i-[0-9a-f]+)", out))
    assert len(ids) == 1, ids
    iid = ids.pop()
    md = ec2("describe-instances", "--instance-ids", iid)["Reservations"][0]["Instances"][0]["MetadataOptions"]
    assert (md["HttpTokens"], md["HttpPutResponseHopLimit"], md["HttpEndpoint"]) == ("required", 1, "enabled"), md
    # Without the step an instance keeps EC2's default: tokens optional.
    ctl = ec2("run-instances", "--image-id", ami, "--instance-type", e["instance_type"])["Instances"][0]
    assert ctl["MetadataOptions"]["HttpTokens"] == "optional", ctl["MetadataOptions"]
    print(iid, md)
finally:
    moto.terminate()
    moto.wait(timeout=15)
PY
  else
    skip "moto_server or the aws CLI not installed: the template's IMDSv2 step not run"
  fi
elif [ "${CI:-}" = true ]; then
  bad "packer not installed: bootstrap/deps-debian.sh installs it in CI"
else
  skip "packer not installed (Debian: apt-get install packer): template not validated"
fi

# ---- AL2023 user data ----------------------------------------------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=eks \
  -keyout "$T/eks.key" -out "$T/eks.crt" 2>/dev/null
base64 -w0 "$T/eks.crt" > "$T/eks.b64"
TOKEN=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
echo "$TOKEN" > "$T/token"
printf '#!/bin/bash\necho user-script\n' > "$T/extra.sh"
check "al2023-userdata.py generates" "$PYTHON" bootstrap/userdata/al2023-userdata.py \
  --cluster-name prod --api-server-endpoint https://ABC.gr7.us-east-1.eks.amazonaws.com \
  --certificate-authority-file "$T/eks.b64" --cidr 10.100.0.0/16 --max-pods 58 \
  --label team=web --taint dedicated=web:NoSchedule --nodepool default \
  --coordinator tls+tcp://nodesmith.internal.example:7400 --coordinator-ca "$E/tls/tls.crt" \
  --token-file "$T/token" --extra-user-data "$T/extra.sh" -o "$T/ud.mime"
check "AL2023 user data: MIME parts, NodeConfig, write_files, agent accepts its config" \
  "$PYTHON" - "$T/ud.mime" "$AGENT" "$T/eks.b64" "$TOKEN" "$E/tls/tls.crt" "$T" <<'PY'
import base64, email, json, os, subprocess, sys
path, agent, ca_b64, token, coord_ca, tmp = sys.argv[1:]
raw = open(path).read()
assert len(raw.encode()) <= 16384
msg = email.message_from_string(raw)
assert msg.get_content_type() == "multipart/mixed" and msg["MIME-Version"] == "1.0"
parts = [p for p in msg.walk() if not p.is_multipart()]
types = [p.get_content_type() for p in parts]
assert types == ["text/x-shellscript", "application/node.eks.aws", "text/cloud-config"], types
nc = json.loads(parts[1].get_payload(decode=True))
assert nc["apiVersion"] == "node.eks.aws/v1alpha1" and nc["kind"] == "NodeConfig"
cl = nc["spec"]["cluster"]
assert cl == {"name": "prod", "apiServerEndpoint": "https://ABC.gr7.us-east-1.eks.amazonaws.com",
              "certificateAuthority": open(ca_b64).read().strip(), "cidr": "10.100.0.0/16"}, cl
k = nc["spec"]["kubelet"]
assert k["config"]["maxPods"] == 58 and k["config"]["shutdownGracePeriod"] == "0s"
assert k["config"]["registerWithTaints"] == [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
assert "--node-labels=team=web,nodesmith.io/nodepool=default" in k["flags"]
cc = parts[2].get_payload(decode=True).decode()
assert cc.startswith("#cloud-config\n")
files = {f["path"]: f for f in json.loads(cc.split("\n", 1)[1])["write_files"]}
assert set(files) == {"/etc/nodesmith/agent.conf", "/etc/nodesmith/ca.crt", "/etc/nodesmith/token",
                      "/etc/systemd/logind.conf.d/50-nodesmith-shutdown.conf"}
for f in files.values():
    assert f["permissions"] == "0600" and f["owner"] == "root:root" and f["encoding"] == "b64"
body = {p: base64.b64decode(f["content"]).decode() for p, f in files.items()}
assert body["/etc/nodesmith/token"].strip() == token
assert body["/etc/nodesmith/ca.crt"] == open(coord_ca).read()
# graceful shutdown is the agent's: the kubelet's is off, logind's delay raised for the drain
assert "InhibitDelayMaxSec=150" in body["/etc/systemd/logind.conf.d/50-nodesmith-shutdown.conf"]
assert json.loads(cc.split("\n", 1)[1])["runcmd"] == ["systemctl kill --signal=SIGHUP systemd-logind.service"]
# Lay the files out as cloud-init would and let the agent judge its configuration.
root = os.path.join(tmp, "node")
for p, text in body.items():
    os.makedirs(os.path.dirname(root + p), exist_ok=True)
    open(root + p, "w").write(text.replace("/etc/nodesmith/", root + "/etc/nodesmith/"))
    os.chmod(root + p, int(files[p]["permissions"], 8))  # as write_files sets them
out = subprocess.run([agent, "--check-config", "--config", root + "/etc/nodesmith/agent.conf"],
                     capture_output=True, text=True)
assert out.returncode == 0, out.stderr
assert "coordinator = tls+tcp://nodesmith.internal.example:7400" in out.stdout
assert "nodepool = default" in out.stdout and "max-pods = 58" in out.stdout
print("parts:", types)
PY
if "$PYTHON" bootstrap/userdata/al2023-userdata.py --cluster-name p --api-server-endpoint https://x \
     --certificate-authority-file "$T/eks.b64" --cidr 10.100.0.0/16 --coordinator tcp://x:1 \
     --coordinator-ca "$T/eks.crt" --token-file "$T/token" >/dev/null 2>&1; then
  bad "al2023-userdata.py accepted a plain tcp:// coordinator"; else ok "al2023-userdata.py refuses tcp://"; fi

# ---- Bottlerocket --------------------------------------------------------------------------
check "bottlerocket-userdata.py generates" "$PYTHON" bootstrap/userdata/bottlerocket-userdata.py \
  --cluster-name prod --api-server https://ABC.gr7.us-east-1.eks.amazonaws.com \
  --cluster-certificate-file "$T/eks.b64" --cluster-dns-ip 10.100.0.10 \
  --image 111122223333.dkr.ecr.us-east-1.amazonaws.com/nodesmith-agent:0.1.0 \
  --coordinator tls+tcp://nodesmith.internal.example:7400 --coordinator-ca "$E/tls/tls.crt" \
  --token-file "$T/token" --nodepool default --taint dedicated=web:NoSchedule -o "$T/br.toml"
PY311=$(command -v python3.11 || true)
[ -n "$PY311" ] || PY311=$PYTHON
if "$PY311" -c 'import tomllib' 2>/dev/null; then
  for f in "$T/br.toml" bootstrap/bottlerocket/settings.toml; do
    check "Bottlerocket TOML parses: $(basename "$f")" "$PY311" - "$f" "$T/ud-$(basename "$f")" <<'PY'
import base64, sys, tomllib
s = tomllib.load(open(sys.argv[1], "rb"))["settings"]
k = s["kubernetes"]
assert k["shutdown-grace-period"] == "150s" and k["shutdown-grace-period-for-critical-pods"] == "30s"
assert k["cluster-name"] and k["api-server"].startswith("https://")
hc = s["host-containers"]["nodesmith"]
assert hc["enabled"] is True and hc["superpowered"] is True and hc["source"]
open(sys.argv[2], "wb").write(base64.b64decode(hc["user-data"], validate=True))
PY
  done
  # The generated user-data goes through the host container's entrypoint to the agent.
  check "entrypoint splits the user-data and the agent accepts it" env \
    NODESMITH_USER_DATA="$T/ud-br.toml" NODESMITH_RUN_DIR="$T/run" PATH="$BUILD:$PATH" \
    sh packaging/bottlerocket/entrypoint.sh --check-config
  check "host container config: CA split out, host root, token" bash -c "
    cmp -s '$T/run/ca.crt' '$E/tls/tls.crt' && grep -qx 'root = /.bottlerocket/rootfs' '$T/run/agent.conf' &&
    grep -qx 'tls-ca = $T/run/ca.crt' '$T/run/agent.conf' && ! grep -q BEGIN '$T/run/agent.conf' &&
    grep -qx 'token = $TOKEN' '$T/run/agent.conf'"
else
  skip "no Python with tomllib (3.11+): Bottlerocket TOML not parsed"
fi

echo
echo "packaging: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
