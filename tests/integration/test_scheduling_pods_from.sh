#!/usr/bin/env bash
# bench/scheduling --pods-from: the pods file Karpenter's benchmark writes for bench/karpenter
# (bench/pods-file.h). Selectors taken as written (they match pods of other groups), plans
# checked by the bench's own verify, and every member it does not know refused by name.
# BUILD gives the build directory (default build). Exit 0: pass.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
BENCH="$BUILD/benchbin/scheduling"
[ -x "$BENCH" ] || { echo "missing $BENCH (make BUILD=$BUILD $BENCH)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*"; exit 1; }

# pod NAME KIND LABEL-VALUE [EXTRA-JSON]: one pod of 100m / 100Mi labelled app=VALUE
pod() {
  printf '{"name":"%s","kind":"%s","namespace":"default","cpuMillis":100,"memoryBytes":104857600,"labels":{"app":"%s"}%s}' \
    "$1" "$2" "$3" "${4:-}"
}
pods_file() { # FILE POD...
  local f=$1; shift
  { printf '{"source":"tests","seed":7,"pods":['; local IFS=,; printf '%s' "$*"; printf ']}'; } >"$f"
}
# nodes FILE: the node count of the plan bench/scheduling verified
nodes() {
  "$BENCH" --runs 1 --pods-from "$1" >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "bench/scheduling on $1"; }
  awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $4 }' "$tmp/out"
}
expect() { # description got want
  [ "$2" = "$3" ] && echo "ok    $1 ($2)" || fail "$1: got $2, want $3"
}

anti='"podAntiAffinity":[{"topologyKey":"kubernetes.io/hostname","matchLabels":{"app":"b"}}]'
host_b='"topologySpread":[{"topologyKey":"kubernetes.io/hostname","maxSkew":1,"matchLabels":{"app":"b"}}]'
host_c='"topologySpread":[{"topologyKey":"kubernetes.io/hostname","maxSkew":1,"matchLabels":{"app":"c"}}]'
zone_z='"topologySpread":[{"topologyKey":"topology.kubernetes.io/zone","maxSkew":1,"matchLabels":{"app":"z"}}]'

echo "== selectors match the pods they name, whatever group made them"
pods_file "$tmp/anti.json" "$(pod a anti-host a ",$anti")" "$(pod b plain b)"
expect "anti-affinity of an app=a pod to the plain app=b pod: two nodes" "$(nodes "$tmp/anti.json")" 2
pods_file "$tmp/anti-none.json" "$(pod a anti-host a ",$anti")" "$(pod c plain c)"
expect "the same term with no app=b pod: one node" "$(nodes "$tmp/anti-none.json")" 1
pods_file "$tmp/host.json" "$(pod c1 spread-host c ",$host_c")" "$(pod c2 spread-host c ",$host_c")" \
  "$(pod c3 spread-host c ",$host_c")"
expect "three app=c pods spreading over hostnames by app=c (maxSkew 1): three nodes" "$(nodes "$tmp/host.json")" 3
pods_file "$tmp/host-other.json" "$(pod x1 spread-host x ",$host_b")" "$(pod x2 spread-host x ",$host_b")" \
  "$(pod x3 spread-host x ",$host_b")"
expect "the same pods selecting app=b, which none carries: one node" "$(nodes "$tmp/host-other.json")" 1
pods_file "$tmp/zone.json" "$(pod z1 spread-zone z ",$zone_z")" "$(pod z2 spread-zone z ",$zone_z")" \
  "$(pod z3 spread-zone z ",$zone_z")"
expect "three app=z pods spreading over zones (maxSkew 1): one node per zone" "$(nodes "$tmp/zone.json")" 3
grep -q "3 pods from $tmp/zone.json (tests, seed 7): spread-zone 3" "$tmp/out" ||
  { cat "$tmp/out"; fail "the header names the file, its source, seed and kinds"; }
echo "ok    the header names the file, its source, seed and kinds"

echo "== refused, by name"
refused() { # description file-content expected-message
  printf '%s' "$2" >"$tmp/bad.json"
  if "$BENCH" --runs 1 --pods-from "$tmp/bad.json" >"$tmp/out" 2>&1; then fail "$1: accepted"; fi
  grep -qF -- "$3" "$tmp/out" || { cat "$tmp/out"; fail "$1: no \"$3\""; }
  echo "ok    $1"
}
refused "an unknown pod member" "{\"pods\":[$(pod a plain a ',"nodeSelector":{}')]}" 'pod a: unknown member "nodeSelector"'
refused "an unknown top-level member" "{\"pods\":[$(pod a plain a)],\"extra\":1}" 'unknown member "extra"'
refused "an unknown kind" "{\"pods\":[$(pod a batch a)]}" 'unknown kind "batch"'
refused "a topology key other than zone or hostname" \
  "{\"pods\":[$(pod a spread-zone a ',"topologySpread":[{"topologyKey":"rack","maxSkew":1,"matchLabels":{}}]')]}" \
  'topologyKey "rack"'
refused "a spread member it does not know" \
  "{\"pods\":[$(pod a spread-zone a ',"topologySpread":[{"topologyKey":"kubernetes.io/hostname","maxSkew":1,"matchLabels":{},"minDomains":2}]')]}" \
  'unknown member "minDomains"'
refused "a fractional request" '{"pods":[{"name":"a","kind":"plain","namespace":"default","cpuMillis":0.5,"memoryBytes":1}]}' \
  '"cpuMillis" is not an integer'
refused "no pods" '{"pods":[]}' '"pods" is not an array'
if "$BENCH" --pods-from "$tmp/zone.json" --max 5 >"$tmp/out" 2>&1; then fail "--max with --pods-from accepted"; fi
grep -q -- "--pods-from takes them from a file" "$tmp/out" || { cat "$tmp/out"; fail "--max with --pods-from"; }
echo "ok    --max (the bench's own pods) with --pods-from refused"
echo "PASS"
