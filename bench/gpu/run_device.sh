#!/usr/bin/env bash
# bench/gpu/run_device.sh: everything the GPU machine runs in one call (<= 9 minutes), from the
# repository root:   bash bench/gpu/run_device.sh
#
#   1. configure + build the GPU-only project (bench/gpu/CMakeLists.txt: src/core + src/cuda,
#      tests with the built-in harness; no OpenBLAS/gtest/nlohmann needed), sm_90a only
#   2. unmask_cuda_tests (every kernel against float64)
#   3. unmask_gpu_bench (BERT-base bf16, CUDA graphs) and the PyTorch peer, side by side
#   4. a summary table
# Each stage runs under its own timeout; a failing stage does not stop the later ones. Logs go
# to $OUT (the device tool's output folder; ./gpu_out when unset), at most 8 files.
# Nothing needs carrying: the build happens here from the working tree.
set -x
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
export PATH="$PATH:/usr/local/cuda/bin"
JOBS=$(nproc 2>/dev/null || echo 8)
T0=$(date +%s)
stage_time() { echo $(( $(date +%s) - T0 )); }

{
  date; nvidia-smi; nvcc --version; cmake --version; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} > "$OUT/env.txt" 2>&1

# 1. build (Release, sm_90a)
timeout 200 bash -c "cmake -S bench/gpu -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DUNMASK_CUDA_ARCHS=90a && cmake --build build-gpu -j $JOBS" > "$OUT/build.log" 2>&1
BUILD_RC=$?
BUILD_T=$(stage_time)

# 2. tests
TEST_RC=skipped
if [ -x build-gpu/unmask_cuda_tests ]; then
  timeout 100 build-gpu/unmask_cuda_tests > "$OUT/tests.log" 2>&1
  TEST_RC=$?
fi
TEST_T=$(stage_time)

# 3a. unmask bench (budget inside the program, timeout outside)
BENCH_RC=skipped
if [ -x build-gpu/unmask_gpu_bench ]; then
  timeout 140 build-gpu/unmask_gpu_bench --budget-s 110 --json "$OUT/bench_unmask.jsonl" > "$OUT/bench_unmask.txt" 2>&1
  BENCH_RC=$?
fi
BENCH_T=$(stage_time)

# 3b. PyTorch peer: remaining time minus a margin
LEFT=$(( 520 - $(stage_time) ))
[ $LEFT -lt 60 ] && LEFT=60
PYTHONUNBUFFERED=1 timeout $LEFT python3 bench/gpu/torch_bert_infer.py --ids device --budget-s $(( LEFT - 25 )) \
  --json "$OUT/bench_torch.jsonl" > "$OUT/bench_torch.txt" 2>&1
TORCH_RC=$?
TORCH_T=$(stage_time)

# 4. summary
{
  echo "stage      rc        at_s"
  echo "build      $BUILD_RC  $BUILD_T"
  echo "tests      $TEST_RC  $TEST_T"
  echo "bench      $BENCH_RC  $BENCH_T"
  echo "torch      $TORCH_RC  $TORCH_T"
  echo
  echo "== tests =="
  grep -E "^\[ *(OK|FAILED|SKIPPED) *\]|passed|seed|device" "$OUT/tests.log" 2>/dev/null | tail -30
  echo
  echo "== build errors (first 20) =="
  grep -E "error|FAILED" "$OUT/build.log" 2>/dev/null | head -20
  echo
  echo "== BERT-base bf16 forward: unmask vs PyTorch (latency ms, TFLOP/s) =="
  python3 bench/gpu/summarize.py "$OUT/bench_unmask.jsonl" "$OUT/bench_torch.jsonl"
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
exit 0
