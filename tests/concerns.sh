#!/usr/bin/env bash
# Every product source file says its one concern in its first comment (CONVENTIONS.md, "one
# concern per file"): after the SPDX line and "#pragma once", the first thing is a comment.
# Prints the files that do not and exits 1 when there are any.
#   tests/concerns.sh [ROOT]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
bad=0
while IFS= read -r f; do
  if ! awk 'NR == 1 && /SPDX/ { next } /^#pragma once/ { next } /^[[:space:]]*$/ { next }
            { ok = ($0 ~ /^\/\*/); exit } END { exit ok ? 0 : 1 }' "$f"; then
    echo "$f: no comment saying its concern before the first line of code"
    bad=$((bad + 1))
  fi
done < <(find lib node agent coordinator -name '*.[ch]' | sort)
if [ $bad -gt 0 ]; then
  echo "concerns: $bad file(s) do not say their concern first"; exit 1
fi
echo "concerns: every product file says its concern first"
