#!/usr/bin/env bash
# bench/gpu/compare_videomae_gpu.sh [BIN_DIR]: VideoMAE ViT-B pretraining on one GPU, unmask vs
# PyTorch, side by side in one run (issue 6, item 5, third benchmark; item 6, memory).
#
#   there:  run(command="bash bench/gpu/compare_videomae_gpu.sh carry", carry=["carry"])
#           (BIN_DIR holds the full CUDA build: bench/gpu/pack_full_build.sh)
#
# Both engines: VideoMAE ViT-B (768/12/12, decoder 384/4/6), 16 x 224^2 clips, tubelet 2 x 16 x 16,
# tube mask 0.9 (160 visible of 1568 tokens), decoder on all 1568 tokens, normalised-pixel MSE on
# the 1408 masked, AdamW (0.9, 0.95, wd 0.05), random weights, one synthetic clip batch already on
# the GPU, a fresh tube mask per step; a timed step = zero_grad + forward + loss + backward +
# optimizer step, bracketed by device synchronisation; median of STEPS after WARMUP.
#   unmask    `unmask bench videomae --device cuda --precision P --synthetic --format json`; for bf16
#             first with --activations bf16 (bf16 blocks end to end), then with f32 activations,
#             autocast GEMMs and the tensor-core attention (both come with bf16)
#   PyTorch   bench/peers/torch_videomae_train.py --device cuda --precision P --attention sdpa
#             (VideoMAE's modules in torch.nn, F.scaled_dot_product_attention, torch.autocast bf16),
#             and the same under torch.compile for the bf16 rows.
# The engines alternate per row. MFU = 3 x model FLOPs x clips/s / the H100 SXM dense peak of the
# precision (bf16 989.4 TFLOP/s); the memory column is each engine's allocator peak over the row.
# Environment: BATCHES (default "32 128"), MEM_BATCH (default 256: the memory row, unmask and
# PyTorch bf16), PRECISIONS (default "bf16 fp32"), STEPS (5), WARMUP (2), OUT (default ./gpu_out),
# LIMIT (default 480: seconds after which no new row starts, so that the summary is written
# within one 10-minute `run` call). torch.compile runs at the largest batch only.
set -u
BIN=$(cd "${1:-carry}" && pwd)
OUT=${OUT:-$PWD/gpu_out}
BATCHES=${BATCHES:-32 128}
LIMIT=${LIMIT:-480}
MEM_BATCH=${MEM_BATCH:-256}
PRECISIONS=${PRECISIONS:-bf16 fp32}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-2}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
W=$(mktemp -d /tmp/unmask-vmae-XXXXXX)
source bench/gpu/unpack_carry.sh
ROWS="$OUT/videomae_gpu.jsonl"
: > "$ROWS"
T0=$(date +%s)
at() { echo $(( $(date +%s) - T0 )); }
in_time() { [ "$(at)" -lt "$LIMIT" ] || { echo "time limit ($LIMIT s): skipping $*"; false; }; }
# A row's timeout: N seconds, or what is left before LIMIT + 45 s (a row started just before LIMIT
# ends in time for the summary; a caller's outer timeout does not reach the row's own process group).
END=$((LIMIT + 45))
row_t() { local l=$((END - $(at))); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
largest=$(echo $BATCHES | tr ' ' '\n' | sort -n | tail -1)

# measured_rows: ROWS' lines with a measurement; added_rows N: whether there are more than N now
# (a command that printed its row and then exited non-zero, e.g. at teardown, keeps that row and
# gets no second, "failed" one; one that printed no measurement does get it)
measured_rows() { grep -c '"videos_per_s"' "$ROWS"; }
added_rows() { [ "$(measured_rows)" -gt "$1" ]; }
unmask_row() {  # precision batch [f32 (default) | act = bf16 activations]; bf16 brings the tensor-core attention
  local n
  n=$(measured_rows)
  timeout "$(row_t 300)" "$BIN/unmask" bench videomae --device cuda --precision "$1" --model vit-b --batch "$2" --synthetic \
    --activations $([ "${3:-f32}" = act ] && echo bf16 || echo f32) --steps "$STEPS" --warmup "$WARMUP" --format json >> "$ROWS" 2>> "$OUT/videomae_unmask.err" || added_rows "$n" ||
    echo "{\"engine\": \"unmask\", \"dtype\": \"$1\", \"batch\": $2, \"activations\": \"$([ "${3:-f32}" = act ] && echo bf16 || echo f32)\", \"attention\": \"$([ "$1" = bf16 ] && echo bf16-tc || echo f32)\", \"failed\": true}" >> "$ROWS"
}
torch_row() {  # precision batch [--compile]
  local n
  n=$(measured_rows)
  timeout "$(row_t 400)" python3 bench/peers/torch_videomae_train.py --device cuda --precision "$1" --attention sdpa \
    --model vit-b --batch "$2" --steps "$STEPS" --warmup "$WARMUP" ${3:-} >> "$ROWS" 2>> "$OUT/videomae_torch.err" || added_rows "$n" ||
    echo "{\"engine\": \"pytorch\", \"dtype\": \"$1\", \"batch\": $2, \"compile\": $([ -n "${3:-}" ] && echo true || echo false), \"failed\": true}" >> "$ROWS"
}

for prec in $PRECISIONS; do
  for b in $BATCHES; do
    [ "$prec" = bf16 ] && in_time "$prec $b act" && unmask_row "$prec" "$b" act
    in_time "$prec $b" && unmask_row "$prec" "$b"
    in_time "torch $prec $b" && torch_row "$prec" "$b"
    [ "$prec" = bf16 ] && [ "$b" = "$largest" ] && in_time "torch compile $b" && torch_row "$prec" "$b" --compile
    echo "videomae $prec batch $b done at $(at)s"
  done
done
in_time "memory row" && unmask_row bf16 "$MEM_BATCH" act
in_time "memory row (f32 activations)" && unmask_row bf16 "$MEM_BATCH"
in_time "torch memory row" && torch_row bf16 "$MEM_BATCH"
echo "memory rows (batch $MEM_BATCH) done at $(at)s"
# Where a bf16-activation step goes, every op timed over 2 steps (bench_profile.h), at the largest batch
in_time "profile row" && timeout "$(row_t 200)" "$BIN/unmask" bench videomae --device cuda --precision bf16 --model vit-b \
  --batch "$largest" --synthetic --activations bf16 --steps 1 --warmup 1 --profile 2 --format json \
  > "$OUT/videomae_profile.jsonl" 2>> "$OUT/videomae_unmask.err" &&
  python3 bench/gpu/profile_table.py "$OUT/videomae_profile.jsonl" > "$OUT/videomae_profile.md"

python3 - "$ROWS" <<'EOF' | tee "$OUT/videomae_gpu_summary.md"
import json, sys
rows = []
for line in open(sys.argv[1]):
    try:
        rows.append(json.loads(line))
    except ValueError:  # a stray non-JSON line on a program's stdout: skipped, not fatal
        if line.strip():
            print(f"(skipped a non-JSON line: {line.strip()[:80]})")
peak = {"bf16": 989.4e3, "tf32": 494.7e3, "fp32": 67.0e3}
def key(r):
    eng = r.get("engine", "?") + (" compile" if r.get("compile") else "")
    d = r.get("dtype")
    if r.get("activations") == "bf16":
        eng += " (bf16 activations)"
        d = "bf16"
    elif r.get("attention") == "bf16-tc":
        eng += " (tensor-core attention)"
    return (d, r.get("batch"), eng)
best = {}
# Memory: unmask's peak of requested bytes beside PyTorch's max_memory_allocated (both as the
# code asked for them; unmask's size classes add up to 25% in its own peak_gpu_mb, which the
# JSON rows keep, with the bytes held from cudaMalloc).
print("| precision | batch | engine | clips/s | step (ms) | MFU | MFU executed | peak GPU memory (MiB) |")
print("|---|---:|---|---:|---:|---:|---:|---:|")
for r in rows:
    d, b, eng = key(r)
    if r.get("failed"):
        print(f"| {d} | {b} | {eng} | failed | | | | |")
        continue
    vps = r["videos_per_s"]
    mfu = 100.0 * 3.0 * r["model_gflops_per_clip"] * vps / peak.get(d, 1e300)
    # MFU executed: the FLOPs the engine ran (unmask embeds the visible tubelets only, 4.7% less
    # than the model count for ViT-B at mask 0.9); PyTorch rows run the model count.
    exe = r.get("executed_step_gflop")
    mfu_exe = f"{100.0 * exe * 1e3 / r['step_ms'] / peak.get(d, 1e300):.1f}%" if exe else f"{mfu:.1f}%"
    print(f"| {d} | {b} | {eng} | {vps:.1f} | {r['step_ms']:.1f} | {mfu:.1f}% | {mfu_exe} | {r.get('peak_gpu_requested_mb') or r.get('peak_gpu_mb', 0):.0f} |")
    if eng.startswith("pytorch"):
        best[(d, b)] = max(best.get((d, b), 0.0), vps)
print()
print("| precision | batch | unmask | unmask / best PyTorch |")
print("|---|---:|---|---:|")
for r in rows:
    d, b, eng = key(r)
    if eng.startswith("unmask") and not r.get("failed") and best.get((d, b)):
        print(f"| {d} | {b} | {eng} | {r['videos_per_s'] / best[(d, b)]:.2f}x |")
EOF
rm -rf "$W"
exit 0
