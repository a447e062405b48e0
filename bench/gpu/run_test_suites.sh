#!/usr/bin/env bash
# bench/gpu/run_test_suites.sh BIN LOG [BUDGET_S]: runs a GoogleTest binary one test suite per
# process, so that a crash (a segfault, or an illegal address that leaves the CUDA context
# unusable for every later test of the process) or a hang costs that suite, not all the others.
# A GPU session has minutes of device time; one bad kernel must not hide the rest of the results.
#
#   BIN       the test binary (unmask_cuda_tests)
#   LOG       every suite's output, one after the other, each after a "=== Suite" line
#   BUDGET_S  no suite starts after this many seconds (default 300); those left are named "not run"
#   PER_SUITE_S (environment) the timeout of one suite (default 150)
#
# Prints one line per suite ("suite S: P passed, F failed, K skipped, rc R (status), T s") and a
# last line with the totals and the suites that crashed, timed out or were not run. Exits 0 when
# every suite ran and passed, 1 otherwise.
set -u
BIN=$1
LOG=$2
BUDGET=${3:-300}
PER_SUITE=${PER_SUITE_S:-150}
[ -x "$BIN" ] || { echo "run_test_suites: $BIN is not an executable" >&2; exit 2; }
# The listing has a timeout too: the CUDA test binary asks the driver for devices before it lists.
listing=$(timeout -k 5 60 "$BIN" --gtest_list_tests 2>&1) \
  || { echo "run_test_suites: $BIN --gtest_list_tests failed: $listing" >&2; exit 2; }
# Suite lines start in column 0 and end with '.' ("Suite.", "Prefix/Suite.", or a typed suite's
# "Typed/0.  # TypeParam = float"); tests are indented.
mapfile -t suites < <(printf '%s\n' "$listing" | sed -nE 's/^([^ ][^ ]*)\.( +#.*)?$/\1/p' | grep -v '^DISABLED_')
[ "${#suites[@]}" -gt 0 ] || { echo "run_test_suites: $BIN lists no test suites" >&2; exit 2; }

: > "$LOG"
one=$(mktemp)
trap 'rm -f "$one"' EXIT
start=$(date +%s)
total_pass=0 total_fail=0 total_skip=0
crashed=() timed_out=() failed=() not_run=()
for s in "${suites[@]}"; do
  if (( $(date +%s) - start >= BUDGET )); then
    not_run+=("$s")
    continue
  fi
  t0=$(date +%s)
  timeout -k 10 "$PER_SUITE" "$BIN" --gtest_filter="$s.*" > "$one" 2>&1
  rc=$?
  took=$(( $(date +%s) - t0 ))
  { echo "=== $s (rc $rc)"; cat "$one"; } >> "$LOG"
  pass=$(grep -cE '^\[ +OK \]' "$one")
  fail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$one")
  skip=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$one")
  if [ "$rc" = 0 ]; then status=ok
  elif [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "$took" -ge "$PER_SUITE" ]; }; then  # 137: killed after -k
    status="timed out after ${PER_SUITE}s"; timed_out+=("$s")
  elif [ "$fail" -gt 0 ] && [ "$rc" = 1 ]; then status=failed; failed+=("$s")
  else status="crashed"; crashed+=("$s")  # a signal (a SIGKILL from outside too), an abort, or no failed test
  fi
  total_pass=$((total_pass + pass)) total_fail=$((total_fail + fail)) total_skip=$((total_skip + skip))
  echo "suite $s: $pass passed, $fail failed, $skip skipped, rc $rc ($status), $took s"
done
join() { local IFS=' '; echo "${*:-none}"; }
echo "suites: ${#suites[@]}; tests: $total_pass passed, $total_fail failed, $total_skip skipped;" \
  "failed: $(join "${failed[@]}"); crashed: $(join "${crashed[@]}"); timed out: $(join "${timed_out[@]}");" \
  "not run (budget ${BUDGET}s): $(join "${not_run[@]}")"
[ "${#failed[@]}" -eq 0 ] && [ "${#crashed[@]}" -eq 0 ] && [ "${#timed_out[@]}" -eq 0 ] && [ "${#not_run[@]}" -eq 0 ]
