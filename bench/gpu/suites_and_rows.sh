#!/usr/bin/env bash
# bench/gpu/suites_and_rows.sh CARRY "SUITE ..." ["FLAGS" ...]: a short follow-up GPU call after
# ab_check.sh: runs the named CUDA test suites (one process each), then ViT-B batch 128 and
# BERT-large phase 1 steps (bf16 activations) by default and with each FLAGS argument added to
# the command (e.g. "--deterministic").
# For a fix made after a full call, when little device time is left. Prints a summary; the
# test log and the JSON rows land in $OUT.
set -u
CARRY=$(cd "${1:?usage: suites_and_rows.sh CARRY \"SUITE ...\" [\"FLAGS\" ...]}" && pwd)
SUITES=${2:?usage: suites_and_rows.sh CARRY \"SUITE ...\" [\"FLAGS\" ...]}
shift 2
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
W=$(mktemp -d /tmp/unmask-quick-XXXXXX)
BIN=$CARRY
source bench/gpu/unpack_carry.sh  # BIN -> $W/bin, LD_LIBRARY_PATH
for s in $SUITES; do
  timeout -k 5 120 "$BIN/unmask_cuda_tests" --gtest_filter="$s.*" >> "$OUT/tests.log" 2>&1
  echo "suite $s: rc $? $(grep -cE '^\[ +OK +\]' <(sed -n "/Running.*$s/,\$p" "$OUT/tests.log")) ok"
done
grep -E '^\[  FAILED  \]|Failure' "$OUT/tests.log" | head -20
for model in vit bert; do
  case $model in
    vit) A=(bench videomae --device cuda --precision bf16 --model vit-b --batch 128 --synthetic --activations bf16
            --format json) ;;
    bert) A=(bench train --device cuda --precision bf16 --model bert-large --seq 128 --batch 64 --activations bf16
             --optimizer lamb --format json) ;;
  esac
  for v in "" "$@"; do
    timeout -k 5 60 "$BIN/unmask" "${A[@]}" --steps 5 --warmup 2 $v > "$OUT/row.json" 2>> "$OUT/rows.err"
    echo "$model ${v:-default}: rc $? $(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print({k: round(r[k], 2) for k in ("seq_per_s","videos_per_s","step_ms","mfu_pct") if k in r})' "$OUT/row.json" 2>&1)"
    cat "$OUT/row.json" >> "$OUT/rows.jsonl"
  done
done
