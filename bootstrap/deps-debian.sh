#!/usr/bin/env bash
# Install (idempotently) every Debian package nodesmith's build, tests, benchmarks and demo need.
# Safe to run repeatedly; does nothing when everything is present.
set -euo pipefail

PKGS=(
  build-essential pkg-config clang
  libnng-dev libmbedtls-dev
  libprotobuf-c-dev protobuf-c-compiler
  libcjson-dev libcurl4-openssl-dev libxml2-dev libyaml-dev libssl-dev
  libsystemd-dev libcmocka-dev libtomlplusplus-dev
  openssl curl python3 iproute2 procps dbus-daemon
)
# Optional: plots in the demo, packaging checks. Missing ones never fail the build; with CI=true,
# tests/integration/test_packaging.sh fails without rpm (rpmbuild, the AL2023 rpm) and packer
# (Debian 12: 1.6.6, which validates bootstrap/packer/nodesmith-al2023.json), and
# tests/integration/test_observability.py without prometheus (its promtool checks the alerting
# rules and the /metrics output).
OPTIONAL=(gnuplot-nox rpm packer libclang-rt-14-dev prometheus)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
opt_missing=()
for p in "${OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || opt_missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ] && [ ${#opt_missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
echo "bootstrap: installing ${missing[*]} ${opt_missing[*]}" >&2
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#opt_missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${opt_missing[@]}" || \
    echo "bootstrap: optional packages unavailable: ${opt_missing[*]}" >&2
fi
