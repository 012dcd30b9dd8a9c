#!/usr/bin/env bash
# Check that a Go toolchain new enough for tools/*/go.mod is present and print its path.
# Go is not taken from Debian (bookworm ships 1.19; the Kubernetes modules need the version in
# tools/controlplane/go.mod) and nothing is downloaded outside the package clients, so a missing
# or older Go is an error that says what to install. Looks at $GO, then PATH, then /usr/local/go.
#   bash bootstrap/go.sh            prints e.g. /usr/local/go/bin/go
set -euo pipefail
cd "$(dirname "$0")/.."

need=$(sed -n 's/^go \([0-9][0-9.]*\).*/\1/p' tools/controlplane/go.mod | head -n1)
[ -n "$need" ] || { echo "bootstrap/go.sh: no 'go' line in tools/controlplane/go.mod" >&2; exit 1; }

version_ge() { # a b: a >= b for dotted versions
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

for go in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go; do
  [ -n "$go" ] && [ -x "$go" ] || continue
  have=$(GOTOOLCHAIN=local "$go" env GOVERSION 2>/dev/null | sed 's/^go//') || continue
  if version_ge "$have" "$need"; then
    echo "$go"
    exit 0
  fi
  echo "bootstrap/go.sh: $go is Go $have; tools/controlplane needs Go $need or newer" >&2
done
cat >&2 <<MSG
bootstrap/go.sh: no Go $need or newer found (looked at \$GO, PATH and /usr/local/go/bin/go).
The tests build etcd and the Kubernetes control plane from Go modules (tools/controlplane).
Install Go $need+ from https://go.dev/dl/ into /usr/local/go (or set GO=/path/to/bin/go),
then run make again; the modules themselves come from the Go module proxy.
MSG
exit 1
