#!/usr/bin/env bash
# Runs every libFuzzer target in $BUILD/fuzz for SECONDS each (default 20) on its corpus in
# tests/fuzz/corpus/NAME (read only: what a run finds goes to $BUILD/fuzz/corpus/NAME; copy what is
# worth keeping into the tree by hand); a crash fails the run and is kept in
# $BUILD/fuzz/crashes. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/fuzz}
secs=${1:-20}
mkdir -p "$BUILD/fuzz/crashes"
passed=0 failed=0
for t in "$BUILD"/fuzz/fuzz-*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  corpus=tests/fuzz/corpus/$name
  grown=$BUILD/fuzz/corpus/$name
  mkdir -p "$corpus" "$grown"
  log="$BUILD/fuzz/$name.log"
  # FUZZ_SEED fixes libFuzzer's seed (CI: the same run every time)
  if "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 ${FUZZ_SEED:+-seed=$FUZZ_SEED} \
       -artifact_prefix="$BUILD/fuzz/crashes/$name-" "$grown" "$corpus" >"$log" 2>&1; then
    passed=$((passed + 1))
    printf 'PASS  %-22s %s\n' "$name" "$(grep -E '^#[0-9]+.*DONE' "$log" | tail -1 | sed 's/ *$//')"
  else
    failed=$((failed + 1))
    printf 'FAIL  %-22s see %s\n' "$name" "$log"
    grep -E 'ERROR|SUMMARY' "$log" | head -5
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
