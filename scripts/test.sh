#!/usr/bin/env bash
# The whole test suite, as CI runs it (`bash .ci/run` calls this):
#   1. Release build + unit tests (ctest: ops vs float64 references, tokenizer, IO, BERT)
#   2. end-to-end parity with PyTorch (tests/python/parity.py, tiny and base checkpoints)
#   3. WordPiece parity with tokenizers.js (tests/js/run_parity.sh)
#   4. libFuzzer targets for the safetensors parser and the tokenizer, bounded in time
#   5. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
# Environment: JOBS (build jobs, default 2), FUZZ_SECONDS (per target, default 30),
# UNMASK_SKIP_ASAN=1 / UNMASK_SKIP_FUZZ=1 / UNMASK_SKIP_JS=1 to leave a stage out locally.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}

bash scripts/install-deps.sh

bash tools/line_budget.sh
echo "== [1/5] build (Release) and unit tests"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure -j"$JOBS"

echo "== [2/5] parity with PyTorch (python3-torch)"
/usr/bin/python3 tests/python/parity.py --unmask build/unmask --base
echo "== [2b/5] command line: good and bad input"
bash tests/cli/test_cli.sh build/unmask

if [ "${UNMASK_SKIP_JS:-0}" != 1 ]; then
  echo "== [3/5] WordPiece parity with tokenizers.js"
  bash tests/js/run_parity.sh
fi

if [ "${UNMASK_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== [4/5] fuzzing (${FUZZ_SECONDS}s per target)"
  bash fuzz/run_fuzzers.sh "$FUZZ_SECONDS"
fi

if [ "${UNMASK_SKIP_ASAN:-0}" != 1 ]; then
  echo "== [5/5] unit tests under ASan + UBSan"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUNMASK_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$JOBS" --target unmask_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j"$JOBS"
fi
echo "== all tests passed"
