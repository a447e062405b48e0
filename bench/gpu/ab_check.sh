#!/usr/bin/env bash
# bench/gpu/ab_check.sh CARRY [OLD_BINS]: one GPU call that tests a new build and measures it
# against the previous one on the same machine (A/B), for changes made without a GPU:
#
#   CARRY     the new build's carry folder (bench/gpu/pack_full_build.sh: bins.tar.xz, libs, stubs)
#   OLD_BINS  optional: a bins.tar.xz of the previous build (its `unmask` is the A side)
#
# In order, each under the call's deadline (DEADLINE_S, default 320; a step with under 20 s left
# is skipped with a note):
#   1. every CUDA test suite, once (run_test_suites.sh; the kernels without a switch of their own
#      are exercised there through test hooks);
#   2. ViT-B batch 128 and BERT-large phase 1 (batch 64, seq 128) steps, bf16 activations: old,
#      new (BERT-large also with 16 micro-batches of gradient accumulation a step), and new with
#      each of ROW_VARIANTS (--deterministic: the recompute dQ instead of the atomic one); then
#      --profile 2 of new, and its GEMMs by shape (--profile-shapes);
#   3. BERT-base inference, bf16 with CUDA graphs, batch 256 and 1 at seq 128: old and new; the
#      op profile at 256x128 and the tanh GELU in the GEMM epilogue; then PyTorch (HF
#      BertModel: eager SDPA and torch.compile, exact GELU; eager with the tanh GELU) on the same
#      two shapes in the same call;
#   4. the PyTorch BERT-large peer again (bench/gpu/torch_bert_train_gpu.py; with and without
#      --accumulate 16), and ViT-B without the GELU recompute;
#   5. Nsight Systems on ViT-B and BERT-large steps (blocking API calls, kernel time), then Nsight
#      Compute on the GELU kernels of a ViT-B step (and on the dK/dV kernels for the modes named
#      in NCU_ATTN_MODES: default, deterministic), when `nsys` / `ncu` are there.
# Everything lands in $OUT: summary.txt (also printed) and results.tgz with the raw files.
#
# QUICK=1 (a call with little device time left, ~4 minutes): the tests, old/new rows (and the
# --deterministic row) and profiles of the two models, old/new inference, its profile, and
# Nsight Compute on NCU_KERNELS; no fast_gelu row, PyTorch peers or ViT-B GELU-keeping row
# (measure those in a full call). NCU_KERNELS: the row kernels for 5b (regexes, space-separated;
# NAME@SKIP skips launches); NCU_INFER_KERNELS: the same on BERT-base inference at 256x128 (e.g.
# "flash_fwd_kernel"); NCU_BERT_KERNELS: on a BERT-large phase-1 training step, with the warp
# stall reasons.
QUICK=${QUICK:-0}
set -u
CARRY=$(cd "${1:?usage: ab_check.sh CARRY [OLD_BINS]}" && pwd)
OLD_BINS=${2:-}
[ -n "$OLD_BINS" ] && OLD_BINS=$(cd "$(dirname "$OLD_BINS")" && pwd)/$(basename "$OLD_BINS")
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
W=$(mktemp -d /tmp/unmask-ab-XXXXXX)
R="$W/results"
mkdir -p "$R"
T0=$(date +%s)
DEADLINE_S=${DEADLINE_S:-320}
at() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( DEADLINE_S - $(at) )); }
lim() { local l=$(( $(left) - 10 )); [ "$l" -lt "$1" ] && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
go() { [ "$(left)" -ge 20 ] || { note "skipped ($(left) s left): $*"; false; }; }
# row FILE TIMEOUT LABEL CMD...: CMD's stdout (JSON rows) appended to FILE, stderr to FILE.err; a
# failure appends {"label", "failed": true, "rc"}; the summary gets the label and the row's key figures.
row() {
  local file=$1 t=$2 label=$3
  shift 3
  local before
  before=$(cat "$file" 2> /dev/null | wc -l)
  timeout -k 5 "$t" "$@" >> "$file" 2>> "${file%.jsonl}.err"
  local rc=$?
  [ "$rc" = 0 ] || echo "{\"label\": \"$label\", \"failed\": true, \"rc\": $rc}" >> "$file"
  note "$label: rc $rc at $(at)s: $(tail -n +$((before + 1)) "$file" | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    keys = ("seq_per_s", "videos_per_s", "step_ms", "mfu_pct", "latency_ms", "peak_gpu_mb", "failed", "rc")
    print(" ".join(f"{k}={r[k]}" for k in keys if k in r), end="; ")
')"
}

BIN=$CARRY
source bench/gpu/unpack_carry.sh  # BIN -> $W/bin, LD_LIBRARY_PATH
OLD=""
if [ -n "$OLD_BINS" ] && [ -f "$OLD_BINS" ]; then
  mkdir -p "$W/old" && tar -xJf "$OLD_BINS" -C "$W/old" unmask && OLD="$W/old/unmask"
fi
{ "$BIN/unmask" version; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv; } \
  > "$R/env.txt" 2>&1
note "machine: $(tr '\n' ' ' < "$R/env.txt" | cut -c1-300)"

# 1. tests
if go "cuda tests"; then
  PER_SUITE_S=$(lim 100) timeout -k 5 "$(lim 170)" bash bench/gpu/run_test_suites.sh "$BIN/unmask_cuda_tests" \
    "$R/cuda_tests.log" "$(lim 140)" > "$R/cuda_suites.txt" 2>&1
  note "cuda tests: rc $? at $(at)s; $(tail -1 "$R/cuda_suites.txt")"
  grep '^suite ' "$R/cuda_suites.txt" | grep -vE '\(ok\), [0-9]+ s$' | head -12 | tee -a "$summary"
  grep -E '^\[  FAILED  \]' "$R/cuda_tests.log" | head -10 | tee -a "$summary"
fi
# The step-time rows beside "new", as extra flags of the same command: --deterministic (the
# recompute dQ kernel, bitwise reproducible attention gradients) against the default atomic dQ.
ROW_VARIANTS=("--deterministic")

# 2. training steps: old / new / new with the variants
model_args() {  # vit | bert: the bench command of that model into A
  case $1 in
    vit) A=(bench videomae --device cuda --precision bf16 --model vit-b --batch 128 --synthetic --activations bf16 --format json) ;;
    bert) A=(bench train --device cuda --precision bf16 --model bert-large --seq 128 --batch 64 --activations bf16
             --optimizer lamb --format json) ;;
  esac
}
# variant_row FLAGS...: a step row of $model (file $f, command A) with FLAGS added
variant_row() {
  go "$model new $*" && row "$f" "$(lim 60)" "$model new $*" "$BIN/unmask" "${A[@]}" --steps 5 --warmup 2 "$@"
}
for model in vit bert; do
  model_args "$model"
  f="$R/train_$model.jsonl"
  [ -n "$OLD" ] && go "$model old" && row "$f" "$(lim 60)" "$model old" "$OLD" "${A[@]}" --steps 5 --warmup 2
  go "$model new" && row "$f" "$(lim 60)" "$model new" "$BIN/unmask" "${A[@]}" --steps 5 --warmup 2
  # BERT-large as DLE's phase 1 runs it: gradient accumulation (128 micro-batches of 64 there; 16
  # here, to fit the call: the LAMB pass, 3.7 of the 46 ms step above, is paid once per 16)
  [ "$model" = bert ] && go "bert new accumulate 16" && row "$f" "$(lim 60)" "bert new --accumulate 16" \
    "$BIN/unmask" "${A[@]}" --steps 3 --warmup 1 --accumulate 16
  for v in "${ROW_VARIANTS[@]}"; do
    variant_row $v
  done
done
for model in vit bert; do
  model_args "$model"
  go "$model profile default" || continue
  timeout -k 5 "$(lim 60)" "$BIN/unmask" "${A[@]}" --steps 1 --warmup 1 --profile 2 \
    > "$R/profile_${model}_default.jsonl" 2>> "$R/profile.err"
  note "profile $model default: rc $? at $(at)s"
  python3 bench/gpu/profile_table.py "$R/profile_${model}_default.jsonl" 2>&1 | head -16 | tee -a "$summary"
done

# 2b. the GEMMs of each step by shape (--profile-shapes; profile_table.py adds TFLOP/s):
#     which of the largest op category's shapes run below the rest (GEMMs were 33 of ViT-B's 111
#     ms and 22.7 of BERT-large's 46 on 2026-11-27)
for model in vit bert; do
  model_args "$model"
  go "gemm shapes $model" || continue
  timeout -k 5 "$(lim 60)" "$BIN/unmask" "${A[@]}" --steps 1 --warmup 1 --profile 2 --profile-shapes \
    > "$R/profile_${model}_shapes.jsonl" 2>> "$R/profile.err"
  note "gemm shapes $model: rc $? at $(at)s"
  python3 bench/gpu/profile_table.py "$R/profile_${model}_shapes.jsonl" 2>&1 | grep -E "^\| gemm" | head -14 |
    tee -a "$summary"
done

# 3. inference (LayerNorm rows now read once): old vs new
for b in 256 1; do
  for side in old new; do
    exe="$BIN/unmask"
    [ "$side" = old ] && { [ -n "$OLD" ] || continue; exe=$OLD; }
    go "infer $side $b" && row "$R/infer.jsonl" "$(lim 40)" "infer ${b}x128 $side" "$exe" bench infer --device cuda \
      --precision bf16 --cuda-graph on --batch "$b" --seq 128 --min-time 0.5 --iters 20 --format json
  done
done

# 3b. where the inference step at batch 256 seq 128 goes (seed 003's 1.2x row)
go "infer profile" && timeout -k 5 "$(lim 40)" "$BIN/unmask" bench infer --device cuda --precision bf16 --cuda-graph off \
  --batch 256 --seq 128 --min-time 0.3 --iters 10 --profile 3 --format json > "$R/profile_infer.jsonl" 2>> "$R/infer.err" &&
  python3 bench/gpu/profile_table.py "$R/profile_infer.jsonl" 2>&1 | head -16 | tee -a "$summary"
if [ "$QUICK" != 1 ]; then  # (up to section 5: the fast_gelu row and the PyTorch peers)
# What the exact-erf GELU's own pass costs at 256x128: the tanh form rides in cuBLASLt's GEMM
# epilogue (--activation fast_gelu, ONNX Runtime's FastGelu; not the HF model's exact GELU)
go "infer fast_gelu" && row "$R/infer.jsonl" "$(lim 40)" "infer 256x128 new --activation fast_gelu" "$BIN/unmask" \
  bench infer --device cuda --precision bf16 --cuda-graph on --batch 256 --seq 128 --min-time 0.5 --iters 20 \
  --activation fast_gelu --format json

# 3c. the PyTorch peer of the same two shapes in the same call (issue 6: 1.5x the best PyTorch at
#     1x128, 1.2x at 256x128): eager SDPA and torch.compile (CUDA graphs), HF's exact GELU; and
#     eager with the tanh GELU (gelu_new), the peer of --activation fast_gelu above
go "pytorch infer gelu" && timeout -k 5 "$(lim 150)" python3 bench/gpu/torch_bert_infer.py --batches 1,256 --seqs 128 \
  --modes eager,compile --compile-shapes 1x128,256x128 --budget-s "$(lim 140)" --json "$R/torch_infer.jsonl" \
  > "$R/torch_infer.log" 2>&1
note "pytorch infer gelu: rc $? at $(at)s"
go "pytorch infer gelu_new" && timeout -k 5 "$(lim 60)" python3 bench/gpu/torch_bert_infer.py --batches 1,256 --seqs 128 \
  --modes eager --act gelu_new --budget-s "$(lim 50)" --json "$R/torch_infer_gelu_new.jsonl" >> "$R/torch_infer.log" 2>&1
note "pytorch infer gelu_new: rc $? at $(at)s"
cat "$R"/torch_infer*.jsonl 2> /dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    print("  pytorch", {k: r[k] for k in ("mode", "impl", "act", "batch", "seq", "latency_ms", "error") if k in r})
' | tee -a "$summary"

# 4. the PyTorch peer of BERT-large, again (it gave 1,067 and 713 seq/s in two calls of 2026-11-26)
go "pytorch bert-large" && row "$R/torch_bert_large.jsonl" "$(lim 60)" "pytorch bert-large bf16 adamw" python3 \
  bench/gpu/torch_bert_train_gpu.py --model large --seq 128 --batch 64 --precision bf16 --mlm-head masked
go "pytorch bert-large accumulate 16" && row "$R/torch_bert_large.jsonl" "$(lim 90)" \
  "pytorch bert-large bf16 adamw --accumulate 16" python3 bench/gpu/torch_bert_train_gpu.py --model large --seq 128 \
  --batch 64 --precision bf16 --mlm-head masked --accumulate 16 --steps 3 --warmup 1

# 4a. ViT-B keeping each block's GELU output instead of recomputing it (more memory, one pass less)
model_args vit
go "vit new recompute-gelu off" && row "$R/train_vit.jsonl" "$(lim 60)" "vit new --recompute-gelu off" "$BIN/unmask" \
  "${A[@]}" --steps 5 --warmup 2 --recompute-gelu off
fi  # QUICK

# 5a. Nsight Systems on ViT-B batch 128 and BERT-large (when `nsys` is there): the CUDA API calls
#     that block the host (synchronisations, allocations, pageable copies) and the kernels' share
#     of the step, to explain the profile's "outside any op" time (7.4 ms of ViT-B's 143 and 2.3 of
#     BERT-large's 55 on 2026-11-26)
for model in vit bert; do
  command -v nsys > /dev/null && go "nsys $model" || continue
  model_args "$model"
  timeout -k 5 "$(lim 90)" nsys profile -t cuda --sample=none --cpuctxsw=none -o "$R/${model}_nsys" --force-overwrite true \
    "$BIN/unmask" "${A[@]}" --steps 3 --warmup 1 > "$R/nsys_run_$model.txt" 2>&1
  note "nsys $model: rc $? at $(at)s"
  timeout -k 5 "$(lim 60)" nsys stats -r cuda_api_sum,cuda_gpu_kern_sum -f csv "$R/${model}_nsys.nsys-rep" \
    > "$R/nsys_stats_$model.csv" 2>&1
  head -14 "$R/nsys_stats_$model.csv" | cut -c1-160 | tee -a "$summary"
  rm -f "$R/${model}_nsys.sqlite"
done

# 5b. Nsight Compute on the attention backward kernels (ViT-B batch 32, bf16 activations)
if command -v ncu > /dev/null; then
  # NCU_ATTN_MODES: "default" (atomic dQ) and/or "deterministic" (--deterministic: recompute dQ).
  # 16 launches: a step's 4 decoder blocks (1,568 tokens, where the time goes) and 12 encoder ones
  # (160 tokens); the kernel lines carry the grid: 25 x 6 x 32 is the decoder's, 3 x 12 x 32 an
  # encoder's. The stall breakdown: the average warps stalled per issued instruction, by reason
  # (raw file; the summary keeps the headline figures).
  for mode in ${NCU_ATTN_MODES:-}; do
    case $mode in
      default) flag="" ;;
      deterministic) flag=--deterministic ;;
      *) note "ncu $mode: unknown NCU_ATTN_MODES entry (default, deterministic)"; continue ;;
    esac
    go "ncu $mode" || continue
    timeout -k 5 "$(lim 60)" ncu --clock-control none --kernel-name regex:flash_bwd_dkdv \
      --launch-skip 0 --launch-count 16 --section SpeedOfLight --section Occupancy --section WarpStateStats \
      --section LaunchStats --metrics 'regex:smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio' \
      "$BIN/unmask" bench videomae --device cuda --precision bf16 --model vit-b --batch 32 \
      --synthetic --activations bf16 --steps 1 --warmup 0 $flag > "$R/ncu_$mode.txt" 2>&1
    note "ncu $mode: rc $? at $(at)s"
    grep -E "flash_bwd|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued" \
      "$R/ncu_$mode.txt" | head -35 | tee -a "$summary"
  done
  # The row kernels of the same step: achieved bandwidth of the first two launches of each (the
  # backward's first are the decoder's, 32 x 1,568 = 50,176 rows of 384 or 1,536 columns; the
  # forward's first LayerNorms are the encoder's, 32 x 160 rows of 768)
  # (changed since 2026-11-26 22:31 UTC: the GELU backward, tubelet_target, the LayerNorm dx kernel's
  # register cache, the optimizer passes' loads (AdamW in this step); bias_act_kernel is the GELU forward)
  # NCU_EXTRA_SECTIONS: more ncu sections for both loops, e.g. "WarpStateStats MemoryWorkloadAnalysis"
  # (why a kernel waits: tubelet_target's compute-bound 75% SM is not its float64 division)
  EXTRA_SECTIONS=""
  for sec in ${NCU_EXTRA_SECTIONS:-}; do EXTRA_SECTIONS="$EXTRA_SECTIONS --section $sec"; done
  # NCU_KERNELS entries are NAME or NAME@SKIP (launches of it to skip first: @25 reaches the
  # decoder's LayerNorms, after the encoder's 12 blocks x 2 and its final norm; @12 the decoder's
  # forward attention).
  for spec in ${NCU_KERNELS:-activation_backward bias_act_kernel tubelet_target_kernel layernorm_backward_dx adamw_many_kernel}; do
    k=${spec%@*}
    skip=0
    [[ "$spec" == *@* ]] && skip=${spec#*@}
    go "ncu $k" || continue
    timeout -k 5 "$(lim 40)" ncu --clock-control none --kernel-name "regex:$k" --launch-skip "$skip" --launch-count 2 \
      --section SpeedOfLight --section LaunchStats $EXTRA_SECTIONS "$BIN/unmask" bench videomae --device cuda --precision bf16 \
      --model vit-b --batch 32 --synthetic --activations bf16 --steps 1 --warmup 0 > "$R/ncu_$k.txt" 2>&1
    note "ncu $k: rc $? at $(at)s"
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Grid Size" "$R/ncu_$k.txt" |
      head -14 | tee -a "$summary"
  done
  # NCU_BERT_KERNELS: the same for a BERT-large phase-1 training step (batch 64, seq 128, bf16
  # activations), with the stall reasons: e.g. "flash_bwd_dkdv attn_train_delta dq_from_accum
  # flash_fwd" (the attention backward took ~220 us a layer there on 2026-11-27, ~10x its MMA time)
  for spec in ${NCU_BERT_KERNELS:-}; do
    k=${spec%@*}
    skip=0
    [[ "$spec" == *@* ]] && skip=${spec#*@}
    go "ncu bert $k" || continue
    timeout -k 5 "$(lim 50)" ncu --clock-control none --kernel-name "regex:$k" --launch-skip "$skip" --launch-count 2 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats $EXTRA_SECTIONS \
      --metrics 'regex:smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio' "$BIN/unmask" bench train \
      --device cuda --precision bf16 --model bert-large --seq 128 --batch 64 --activations bf16 --optimizer lamb \
      --steps 1 --warmup 0 > "$R/ncu_bert_$k.txt" 2>&1
    note "ncu bert $k: rc $? at $(at)s"
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Grid Size|Achieved Occupancy|Warp Cycles Per Issued" \
      "$R/ncu_bert_$k.txt" | head -18 | tee -a "$summary"
  done
  # NCU_INFER_KERNELS: the same for BERT-base inference at batch 256 seq 128 (bf16, eager: no
  # graph, so ncu sees each launch): the forward attention and the LayerNorm rows there
  for spec in ${NCU_INFER_KERNELS:-}; do
    k=${spec%@*}
    skip=0
    [[ "$spec" == *@* ]] && skip=${spec#*@}
    go "ncu infer $k" || continue
    timeout -k 5 "$(lim 40)" ncu --clock-control none --kernel-name "regex:$k" --launch-skip "$skip" --launch-count 2 \
      --section SpeedOfLight --section LaunchStats --section Occupancy $EXTRA_SECTIONS "$BIN/unmask" bench infer --device cuda \
      --precision bf16 --cuda-graph off --batch 256 --seq 128 --iters 1 --min-time 0 > "$R/ncu_infer_$k.txt" 2>&1
    note "ncu infer $k: rc $? at $(at)s"
    grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Grid Size|Achieved Occupancy|Theoretical Occupancy" \
      "$R/ncu_infer_$k.txt" | head -18 | tee -a "$summary"
  done
else
  note "ncu: not on this machine"
fi

rm -rf "$W/bin" "$W/old" "$W/lib" "$W/stubs"
tar -czf "$OUT/results.tgz" -C "$R" . && note "raw files: results.tgz ($(ls "$R" | wc -l) files) at $(at)s"
rm -rf "$W"
