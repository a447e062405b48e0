#!/usr/bin/env bash
# Checks bench/gpu/run_test_suites.sh (the GPU runbook's per-suite test runner) on a fake
# GoogleTest binary whose suites pass, fail, crash, hang and skip: each outcome is named, a crash
# or a hang does not stop the later suites, disabled suites are left out, and the budget holds.
#   bash tests/cli/test_run_test_suites.sh
set -uo pipefail
ulimit -c 0  # the fake crash leaves no core file behind
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
has() { grep -qF -- "$1" "$T/out" && ok || bad "expected '$1' in: $(cat "$T/out")"; }

cat > "$T/fake_tests" <<'FAKE'
#!/usr/bin/env bash
if [ "$1" = --gtest_list_tests ]; then
  printf 'Running main() from gtest_main.cc\nGood.\n  A\n  B\nBad.\n  A\n  B\nCrash.\n  A\nHang.\n  A\nSkip.\n  A\nDISABLED_Slow.\n  A\nTyped/0.  # TypeParam = float\n  A\nKilled.\n  A\nLast.\n  A\n'
  exit 0
fi
case "$1" in
  --gtest_filter=Good.*) printf '[ RUN      ] Good.A\n[       OK ] Good.A (1 ms)\n[ RUN      ] Good.B\n[       OK ] Good.B (2 ms)\n'; exit 0 ;;
  --gtest_filter=Bad.*) printf '[       OK ] Bad.A (1 ms)\n[  FAILED  ] Bad.B (3 ms)\n[  FAILED  ] Bad.B\n'; exit 1 ;;
  --gtest_filter=Crash.*) printf '[ RUN      ] Crash.A\n'; kill -SEGV $$ ;;
  --gtest_filter=Hang.*) sleep 30 ;;
  --gtest_filter=Skip.*) printf '[  SKIPPED ] Skip.A (0 ms)\n'; exit 0 ;;
  --gtest_filter=Typed/0.*) printf '[       OK ] Typed/0.A (1 ms)\n'; exit 0 ;;
  --gtest_filter=Killed.*) kill -KILL $$ ;;
  --gtest_filter=Last.*) printf '[       OK ] Last.A (1 ms)\n'; exit 0 ;;
  *) echo "unexpected $*"; exit 3 ;;
esac
FAKE
chmod +x "$T/fake_tests"

PER_SUITE_S=2 bash "$ROOT/bench/gpu/run_test_suites.sh" "$T/fake_tests" "$T/log" 60 > "$T/out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok || bad "rc $rc with failures (want 1)"
has "suite Good: 2 passed, 0 failed, 0 skipped, rc 0 (ok)"
has "suite Bad: 1 passed, 1 failed, 0 skipped, rc 1 (failed)"
has "suite Crash: 0 passed, 0 failed, 0 skipped, rc 139 (crashed)"
has "suite Hang: 0 passed, 0 failed, 0 skipped, rc 124 (timed out after 2s)"
has "suite Skip: 0 passed, 0 failed, 1 skipped, rc 0 (ok)"
has "suite Last: 1 passed, 0 failed, 0 skipped, rc 0 (ok)"  # ran after the crash and the hang
has "suite Typed/0: 1 passed, 0 failed, 0 skipped, rc 0 (ok)"  # a typed suite's listing line
has "suite Killed: 0 passed, 0 failed, 0 skipped, rc 137 (crashed)"  # a SIGKILL from outside is no timeout
grep -q "DISABLED" "$T/out" && bad "a disabled suite ran: $(cat "$T/out")" || ok
has "suites: 8; tests: 5 passed, 1 failed, 1 skipped; failed: Bad; crashed: Crash Killed; timed out: Hang; not run (budget 60s): none"
grep -q "=== Crash (rc 139)" "$T/log" && grep -q "Crash.A" "$T/log" && ok || bad "the log lacks the crashed suite's output"

# A budget of 0 s starts nothing and says so.
bash "$ROOT/bench/gpu/run_test_suites.sh" "$T/fake_tests" "$T/log" 0 > "$T/out" 2>&1
[ $? = 1 ] && ok || bad "rc with nothing run (want 1)"
has "not run (budget 0s): Good Bad Crash Hang Skip Typed/0 Killed Last"
# All good: exit 0.
sed -i 's/^  --gtest_filter=Bad.*/  --gtest_filter=Bad.*) exit 0 ;;/; s/kill -SEGV \$\$/exit 0/; s/kill -KILL \$\$/exit 0/; s/sleep 30/exit 0/' \
  "$T/fake_tests"
bash "$ROOT/bench/gpu/run_test_suites.sh" "$T/fake_tests" "$T/log" 60 > "$T/out" 2>&1
[ $? = 0 ] && ok || bad "rc when every suite passes: $(cat "$T/out")"
# Not a binary: a clear error.
bash "$ROOT/bench/gpu/run_test_suites.sh" "$T/none" "$T/log" > "$T/out" 2>&1
[ $? = 2 ] && ok || bad "rc for a missing binary"
has "is not an executable"

echo "run_test_suites: $pass passed, $fail failed"
[ "$fail" = 0 ]
