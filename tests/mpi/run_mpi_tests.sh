#!/usr/bin/env bash
# The data-parallel layer with several processes (issue 5), run by scripts/test.sh:
#   1. unmask_mpi_tests under mpirun -np 2 and -np 3 (allreduce closed form and rank-order bits,
#      iallreduce in the background, GradientSync with random mark orders, broadcast, allgather)
#   2. faults, each its own mpirun that must FAIL: a rank skipping a collective (rank 0 aborts with a
#      message naming the operation and rank 1, within the 3 s timeout); a rank killed by SIGKILL
#      mid-loop (every rank gone within 60 s, mpirun names rank 1); ranks disagreeing on a size
#   3. `unmask dist-check` with 1, 2 and 3 ranks
# Usage: tests/mpi/run_mpi_tests.sh [BUILD_DIR]   (default: build). Prints "skipped: no MPI" and
# exits 0 when mpirun or the MPI test binary is absent.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
if ! command -v mpirun >/dev/null; then
  echo "mpi tests: skipped: no MPI (mpirun not found; apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi
if [ ! -x "$BUILD/unmask_mpi_tests" ]; then
  echo "mpi tests: skipped: no MPI ($BUILD/unmask_mpi_tests not built: CMake did not find MPI or UNMASK_MPI=OFF)"
  exit 0
fi
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
failures=0
fail() { echo "mpi tests: FAIL: $*"; failures=$((failures + 1)); }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# 1. the gtests, with a short timeout so a broken collective fails fast instead of hanging CI
for np in 2 3; do
  if UNMASK_DIST_TIMEOUT_S=30 timeout 300 "${MPIRUN[@]}" -np $np "$BUILD/unmask_mpi_tests" \
      --gtest_filter='-DistMpiFault.*' --gtest_color=no >"$LOG/np$np.log" 2>&1; then
    echo "mpi tests: -np $np: $(grep -c '^\[       OK \]' "$LOG/np$np.log") tests passed"
  else
    cat "$LOG/np$np.log"
    fail "unmask_mpi_tests -np $np"
  fi
done

# 2. faults
run_fault() {  # name np -> sets rc, secs; output in $LOG/fault_name_np.log
  local t0 t1
  t0=$(now)
  UNMASK_DIST_FAULT=$1 UNMASK_DIST_TIMEOUT_S=3 timeout 60 "${MPIRUN[@]}" -np "$2" "$BUILD/unmask_mpi_tests" \
    --gtest_filter='DistMpiFault.*' --gtest_color=no >"$LOG/fault_$1_$2.log" 2>&1
  rc=$?
  t1=$(now)
  secs=$(elapsed "$t0" "$t1")
}
expect_fault() {  # name np max_seconds pattern...
  local name=$1 np=$2 max=$3 log
  shift 3
  run_fault "$name" "$np"
  log="$LOG/fault_${name}_$np.log"
  if [ "$rc" = 0 ]; then cat "$log"; fail "fault '$name' -np $np exited 0"; return; fi
  if [ "$rc" = 124 ] && ! grep -q "timed out" "$log"; then cat "$log"; fail "fault '$name' -np $np hung (killed by timeout 60)"; return; fi
  if awk -v s="$secs" -v m="$max" 'BEGIN { exit !(s > m) }'; then cat "$log"; fail "fault '$name' -np $np took $secs s (limit $max s)"; return; fi
  for pattern in "$@"; do
    if ! grep -qE "$pattern" "$log"; then cat "$log"; fail "fault '$name' -np $np: no line matches /$pattern/"; return; fi
  done
  printf 'mpi tests: fault %-8s -np %s: exit %s after %.1f s, as expected\n' "$name" "$np" "$rc" "$secs"
}
for np in 2 3; do
  expect_fault skip $np 30 \
    "rank 0: allreduce_sum of 1000 f32 \(the collective rank 1 skips\): timed out after 3.0 s waiting for .*rank.* 1 "
  expect_fault kill $np 60 "rank 1: raising SIGKILL" "process rank 1 .* exited on signal 9"
  expect_fault mismatch $np 30 "the ranks called different operations or sizes"
done

# 3. the launch check
if [ -x "$BUILD/unmask" ]; then
  for np in 1 2 3; do
    if [ $np = 1 ]; then cmd=("$BUILD/unmask"); else cmd=("${MPIRUN[@]}" -np $np "$BUILD/unmask"); fi
    if timeout 120 "${cmd[@]}" dist-check --elements 100003 >"$LOG/check$np.log" 2>&1 &&
       [ "$(grep -c 'allreduce of 100003 f32 ok (.*), broadcast ok, allgather ok' "$LOG/check$np.log")" = $np ] &&
       grep -q "dist-check: $np rank(s), backend $([ $np = 1 ] && echo local || echo mpi)" "$LOG/check$np.log"; then
      echo "mpi tests: dist-check with $np rank(s) ok"
    else
      cat "$LOG/check$np.log"
      fail "dist-check with $np rank(s)"
    fi
  done
fi

if [ $failures -gt 0 ]; then
  echo "mpi tests: $failures failure(s)"
  exit 1
fi
echo "mpi tests: all passed"
