#!/usr/bin/env bash
# Runs nodesmith's tests: the layer check (tests/layers.sh), every cmocka unit binary, then every
# integration script in tests/integration (test_*.py with $PYTHON, test_*.sh with bash), each
# under a time limit.
# tests/security/test_*.py run with the integration tests. Prints one line per test and closes with "N passed, N failed". Exit status 1 on any failure.
#   tests/run.sh [--unit|--integration] [NAME-FILTER]
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-python3}
export BUILD=$(cd "$BUILD" && pwd) PYTHON
mode=all
filter=
for a in "$@"; do
  case "$a" in
    --unit) mode=unit ;;
    --integration) mode=integration ;;
    *) filter=$a ;;
  esac
done

logdir=$BUILD/test-logs
mkdir -p "$logdir"
passed=0 failed=0 failures=()

run_one() { # name timeout cmd...
  local name=$1 limit=$2; shift 2
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && return 0
  local log="$logdir/$name.log" t0=$(date +%s.%N) rc
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-40s %6ss\n' "$name" "$dt"
  else
    failed=$((failed + 1)); failures+=("$name")
    [ $rc -eq 124 ] && printf 'FAIL  %-40s %6ss (timed out after %ss)\n' "$name" "$dt" "$limit" \
                    || printf 'FAIL  %-40s %6ss (exit %d)\n' "$name" "$dt" "$rc"
    echo "----- last lines of $log -----"; tail -n 60 "$log"; echo "-----"
  fi
}

if [ "$mode" != integration ]; then
  # which layer may include which (docs/architecture.md); static, no build needed
  run_one "layers-self-test" 120 bash tests/layers.sh --self-test
  run_one "layers" 300 bash tests/layers.sh
  for t in "$BUILD"/unit/test-*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" 300 "$t"
  done
fi
if [ "$mode" != unit ]; then
  # tests/security: each row of docs/security.md's threat model played as an attack
  for t in tests/integration/test_* tests/security/test_*; do
    [ -f "$t" ] || continue
    case "$t" in
      *.py) run_one "$(basename "$t")" 600 "$PYTHON" "$t" ;;
      *.sh) run_one "$(basename "$t")" 600 bash "$t" ;;
    esac
  done
fi

echo
if [ $failed -gt 0 ]; then
  echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ $passed -gt 0 ]
