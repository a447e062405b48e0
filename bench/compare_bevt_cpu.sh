#!/usr/bin/env bash
# Side-by-side CPU BEVT training-iteration benchmark: unmask vs PyTorch eager, one run.
#
#   bench/compare_bevt_cpu.sh [--size tiny|small|base] [--batch-size 2] [--frames 16] [--crop 224]
#                             [--iters 3] [--rounds 2]
#
# Both engines run BEVT's iteration at the same shapes, fp32, THREADS threads: BS/2 clips + 4 BS
# images, the DALL-E-sized tokenizer (random weights), both streams with drop path 0.3, CE on
# the masked tokens, backward, AdamW + clip 3.0 every second iteration; each reports the mean
# iteration time over iterations 1 .. iters - 1 and its process's peak RSS.
#   unmask    `unmask bench bevt` (the neck and head at the masked positions, the tokenizer on
#             the frames with a masked cell: what unmask runs)
#   PyTorch   bench/peers/torch_bevt_train.py (BEVT's modules in torch, eager, as BEVT runs them:
#             neck and head at every position, the tokenizer on every frame)
# The engines alternate (unmask, PyTorch, unmask, PyTorch, ...) so the machine's load hits both;
# the summary prints each round and the median ratio.
# Environment: UNMASK_BIN (default build/unmask), THREADS (default 2).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
UNMASK="${UNMASK_BIN:-$ROOT/build/unmask}"
THREADS="${THREADS:-2}"
SIZE=tiny BS=2 FRAMES=16 CROP=224 ITERS=3 ROUNDS=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --size) SIZE="$2"; shift 2 ;;
    --batch-size) BS="$2"; shift 2 ;;
    --frames) FRAMES="$2"; shift 2 ;;
    --crop) CROP="$2"; shift 2 ;;
    --iters) ITERS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
echo "# BEVT iteration, Swin-$SIZE, BS $BS ($((BS / 2)) clips x $FRAMES x ${CROP}^2 + $((4 * BS)) images), $THREADS threads, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
rows=()
for r in $(seq 1 "$ROUNDS"); do
  u=$("$UNMASK" bench bevt --size "$SIZE" --batch-size "$BS" --frames "$FRAMES" --crop "$CROP" --max-steps "$ITERS" \
        --skip 1 --threads "$THREADS" 2>/dev/null)
  us=$(sed -n 's/^average iter time: \([0-9.]*\) s\/iter/\1/p' <<<"$u")
  umem=$(sed -n 's/.*peak RSS \([0-9]*\) MiB.*/\1/p' <<<"$u")
  upeak=$(sed -n 's/.*= \([0-9.]*\)% of the.*/\1/p' <<<"$u")
  t=$("$PY" "$ROOT/bench/peers/torch_bevt_train.py" --size "$SIZE" --batch-size "$BS" --frames "$FRAMES" --crop "$CROP" \
        --iters "$ITERS" --skip 1 --threads "$THREADS" 2>/dev/null | tail -1)
  ts=$("$PY" -c "import json,sys; print(json.loads(sys.argv[1])['s_per_it'])" "$t")
  tmem=$("$PY" -c "import json,sys; print(round(json.loads(sys.argv[1])['peak_rss_mb']))" "$t")
  ratio=$("$PY" -c "import sys; print(f'{float(sys.argv[2]) / float(sys.argv[1]):.2f}')" "$us" "$ts")
  echo "round $r: unmask $us s/it (${upeak}% of peak, peak RSS $umem MiB) | PyTorch $ts s/it (peak RSS $tmem MiB) | unmask ${ratio}x faster"
  rows+=("$ratio")
done
"$PY" -c "import statistics,sys; r=[float(x) for x in sys.argv[1:]]; print(f'median speed-up {statistics.median(r):.2f}x over {len(r)} rounds (range {min(r):.2f}-{max(r):.2f})')" "${rows[@]}"
