#!/usr/bin/env bash
# Runs nodesmith's tests: the layer check (tests/layers.sh), the concern check (tests/concerns.sh),
# every cmocka unit binary, then every integration script in tests/integration (test_*.py with
# $PYTHON, test_*.sh with bash), each under a time limit; tests/security/test_*.py run with the
# integration tests.
# The integration tests spend most of their time waiting (boot delays, grace periods, report
# intervals), so TEST_JOBS of them (default 3) run at once, the longest first (each test's last
# wall time is kept in $BUILD/test-logs/durations; tests/durations.tsv before the first run). A test whose file says "test-run: alone"
# (a load or timing measurement) runs afterwards with nothing beside it. TEST_JOBS=1: one by one.
# Prints one line per test (wall and CPU seconds) and closes with "N passed, N failed".
# Exit status 1 on any failure.
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
jobs=${TEST_JOBS:-3}
durations=$logdir/durations

# One test, in the background: its log, then NAME.result = "rc wall cpu".
start_one() { # name timeout cmd...
  local name=$1 limit=$2; shift 2
  rm -f "$logdir/$name.result"
  (
    t0=$(date +%s.%N)
    timeout --kill-after=10 "$limit" "$@" </dev/null >"$logdir/$name.log" 2>&1
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    # the children's user and system time (the second line of `times`)
    # (written to a file first: `times` in a pipe would run in a new process, with no children)
    times >"$logdir/$name.times"
    cpu=$(awk 'NR==2{split($1,u,/[ms]/); split($2,y,/[ms]/); printf "%.1f", u[1]*60+u[2]+y[1]*60+y[2]}' "$logdir/$name.times")
    echo "$rc $dt $cpu $limit" >"$logdir/$name.result"
  ) &
}

# The result of a finished test: one line, the log's tail on failure.
report_one() { # name
  local name=$1 rc dt cpu limit
  read -r rc dt cpu limit <"$logdir/$name.result"
  printf '%s\t%s\n' "$name" "$dt" >>"$durations.new"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-40s %6ss  (cpu %ss)\n' "$name" "$dt" "$cpu"
  else
    failed=$((failed + 1)); failures+=("$name")
    [ "$rc" -eq 124 ] && printf 'FAIL  %-40s %6ss (timed out after %ss)\n' "$name" "$dt" "$limit" \
                      || printf 'FAIL  %-40s %6ss (exit %d)\n' "$name" "$dt" "$rc"
    echo "----- last lines of $logdir/$name.log -----"; tail -n 60 "$logdir/$name.log"; echo "-----"
  fi
}

selected() { [ -z "$filter" ] || [[ "$1" == *"$filter"* ]]; }

run_one() { # name timeout cmd...: in the foreground
  selected "$1" || return 0
  start_one "$@"
  wait $!
  report_one "$1"
}

# Runs "name<TAB>timeout<TAB>cmd" lines, up to $1 at a time.
run_parallel() { # max < lines
  local max=$1 line name limit cmd pid done_pid
  declare -A running=()
  while IFS=$'\t' read -r name limit cmd; do
    while [ ${#running[@]} -ge "$max" ]; do
      wait -n -p done_pid "${!running[@]}"
      report_one "${running[$done_pid]}"; unset "running[$done_pid]"
    done
    # shellcheck disable=SC2086 # cmd is "interpreter path"
    start_one "$name" "$limit" $cmd
    running[$!]=$name
  done
  while [ ${#running[@]} -gt 0 ]; do
    wait -n -p done_pid "${!running[@]}"
    report_one "${running[$done_pid]}"; unset "running[$done_pid]"
  done
}

rm -f "$durations.new"
if [ "$mode" != integration ]; then
  # which layer may include which (docs/architecture.md); static, no build needed
  run_one "layers-self-test" 120 bash tests/layers.sh --self-test
  run_one "layers" 300 bash tests/layers.sh
  # every product file says its concern in its first comment; static
  run_one "concerns" 120 bash tests/concerns.sh
  for t in "$BUILD"/unit/test-*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" 300 "$t"
  done
fi
if [ "$mode" != unit ]; then
  # tests/security: each row of docs/security.md's threat model played as an attack
  shared=() alone=()
  # a fresh build directory orders by tests/durations.tsv (a recent run's times, committed)
  known=$durations; [ -f "$known" ] || known=tests/durations.tsv
  for t in tests/integration/test_* tests/security/test_*; do
    [ -f "$t" ] || continue
    name=$(basename "$t")
    selected "$name" || continue
    case "$t" in
      *.py) cmd="$PYTHON $t" ;;
      *.sh) cmd="bash $t" ;;
      *) continue ;;
    esac
    # the last known wall time orders the queue, longest first (unknown: 60 s)
    last=$(awk -F'\t' -v n="$name" '$1 == n { t = $2 } END { print (t == "" ? 60 : t) }' "$known" 2>/dev/null || echo 60)
    if grep -q "test-run: alone" "$t"; then
      alone+=("$name"$'\t'600$'\t'"$cmd")
    else
      shared+=("$last"$'\t'"$name"$'\t'600$'\t'"$cmd")
    fi
  done
  if [ ${#shared[@]} -gt 0 ]; then
    run_parallel "$jobs" < <(printf '%s\n' "${shared[@]}" | sort -t$'\t' -k1,1 -g -r | cut -f2-)
  fi
  if [ ${#alone[@]} -gt 0 ]; then
    run_parallel 1 < <(printf '%s\n' "${alone[@]}")
  fi
fi

# what this run measured replaces what the last one did, test by test
if [ -f "$durations.new" ]; then
  touch "$durations"
  awk -F'\t' 'NR == FNR { seen[$1] = 1; print; next } !($1 in seen)' "$durations.new" "$durations" \
    >"$durations.tmp" && mv -f "$durations.tmp" "$durations"
  rm -f "$durations.new"
fi

echo
if [ $failed -gt 0 ]; then
  echo "failed: ${failures[*]}"
fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ] && [ $passed -gt 0 ]
