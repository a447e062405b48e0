#!/usr/bin/env bash
# bench/gpu/crash_probe.sh CARRY "TEST ..." [ROWS]: a short GPU call for tests that crashed in a
# full call: each named test (Suite.Name) runs alone under cuda-gdb in batch mode and prints the
# faulting thread's backtrace; then, unless ROWS=0, ViT-B and BERT-large step rows with the
# candidate's extra flags (CANDIDATE_VIT / CANDIDATE_BERT, e.g. "--deterministic") against the
# defaults, alternating.
set -u
CARRY=$(cd "${1:?usage: crash_probe.sh CARRY \"TEST ...\"}" && pwd)
TESTS=${2:-}
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
W=$(mktemp -d /tmp/unmask-probe-XXXXXX)
BIN=$CARRY
source bench/gpu/unpack_carry.sh
for t in $TESTS; do
  echo "== $t"
  timeout -k 5 60 cuda-gdb -q -batch -ex run -ex bt -ex "info threads" --args "$BIN/unmask_cuda_tests" --gtest_filter="$t" \
    2>&1 | grep -vE '^\[(New|Thread .* exited)|^warning: ' | tail -40 | tee -a "$OUT/probe.log"
done
[ "${ROWS:-1}" = 0 ] && exit 0
for round in 1 2; do
  for side in today candidate; do
    for model in vit bert; do
      case $model in
        vit) A=(bench videomae --device cuda --precision bf16 --model vit-b --batch 128 --synthetic --activations bf16 --format json)
             flags=${CANDIDATE_VIT:-} ;;
        bert) A=(bench train --device cuda --precision bf16 --model bert-large --seq 128 --batch 64 --activations bf16
                 --optimizer lamb --format json)
              flags=${CANDIDATE_BERT:-} ;;
      esac
      [ "$side" = today ] && flags=""
      timeout -k 5 60 "$BIN/unmask" "${A[@]}" --steps 5 --warmup 2 $flags > "$OUT/row.json" 2>> "$OUT/rows.err"
      echo "round $round $model $side (${flags:-defaults}): rc $? $(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print({k: round(r[k], 2) for k in ("seq_per_s","videos_per_s","step_ms","mfu_pct") if k in r})' "$OUT/row.json" 2>&1)" | tee -a "$OUT/rows.txt"
    done
  done
done
