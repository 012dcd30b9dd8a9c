#!/usr/bin/env bash
# make bench: every benchmark, one after the other (the machine is small: never in parallel).
# BENCH=name runs one (link, link-curve, scaleout, scheduling, ...). Figures go to docs/benchmarks.md by hand, with the
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
if run drain; then
  echo "== bench/drain"; python3 bench/bench_drain.py ${DRAIN_ARGS:---runs 3 --grace-scale 0.05}
fi
if run stall; then
  echo "== bench/stall"; python3 bench/bench_stall.py ${STALL_ARGS:-}
fi
if run provision; then
  echo "== bench/provision"; python3 bench/bench_provision.py ${PROVISION_ARGS:---sizes 1000,10000 --runs 3}
fi
if run scaleout; then
  echo "== bench/scaleout: Karpenter's basic scale-out (1 000 pods) on the real control plane"
  python3 bench/bench_scaleout.py ${SCALEOUT_ARGS:-}
fi
if run link-curve; then
  # 19 500 at the top: 20 000 agents need a file limit above 20 000 in the coordinator (the build
  # machine's hard limit is 20 000); LINK_CURVE=1000,5000,10000,20000 where the limit allows it
  echo "== bench/link --curve: 1k to 19.5k agents over TLS, each reporting every 10 s"
  python3 bench/bench_link.py --curve ${LINK_CURVE:-1000,5000,10000,19500} ${LINK_CURVE_ARGS:-}
fi
if run karpenter; then
  echo "== bench/karpenter: bench/scheduling and Karpenter's own scheduling benchmark in one run"
  python3 bench/bench_karpenter.py ${KARPENTER_ARGS:-}
fi
if run optimum; then
  echo "== bench/optimum: plan cost against the optimum on the solver's own model"
  bash bootstrap/deps-bench.sh
  python3 bench/optimum.py ${OPTIMUM_ARGS:-}
fi
for b in "$BUILD"/benchbin/*; do
  name=$(basename "$b")
  [ "$name" = link ] && continue  # driven by bench_link.py
  run "$name" || continue
  echo "== bench/$name"; "$b"
done
