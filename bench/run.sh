#!/usr/bin/env bash
# make bench: every benchmark, one after the other (the machine is small: never in parallel).
# BENCH=name runs one (link, scheduling, ...). Figures go to docs/benchmarks.md by hand, with the
# command that produced them.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-build}
only=${BENCH:-}
run() { [ -z "$only" ] || [ "$only" = "$1" ]; }
if run link; then
  echo "== bench/link"; python3 bench/bench_link.py ${LINK_ARGS:-}
fi
if run notice; then
  echo "== bench/notice"; python3 bench/bench_notice.py ${NOTICE_ARGS:-}
fi
for b in "$BUILD"/benchbin/*; do
  name=$(basename "$b")
  [ "$name" = link ] && continue
  run "$name" || continue
  echo "== bench/$name"; "$b"
done
