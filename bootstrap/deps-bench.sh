#!/usr/bin/env bash
# Python packages the benchmarks need beyond Debian's: HiGHS (highspy, with numpy) for
# bench/optimum.py's LP bound and integer optimum. Idempotent; run by bench/run.sh.
set -euo pipefail
PY=${PYTHON:-python3}
if "$PY" -c 'import highspy, numpy' 2>/dev/null; then
  exit 0
fi
echo "bootstrap: installing highspy (HiGHS) for bench/optimum.py" >&2
"$PY" -m pip install --quiet 'highspy==1.15.1' || \
  "$PY" -m pip install --quiet --break-system-packages 'highspy==1.15.1'
