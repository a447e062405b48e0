#!/usr/bin/env bash
# Side-by-side CPU VideoMAE pretraining-step benchmark: unmask vs PyTorch eager, one run.
#
#   bench/compare_videomae_cpu.sh [--model vit-s] [--batch 4] [--rounds 2] [--steps 3] [--warmup 1]
#                                 [--torch-malloc]
#
# Both engines run the same model (VideoMAE pretraining, 16 x 224^2, 2 x 16 x 16 tubelets, tube
# mask 0.9 = 160 visible / 1408 masked tokens, decoder depth 4), random weights, one fixed random
# clip batch, fp32, THREADS intra-op threads, and time the same thing: zero_grad + forward (with
# the normalised-pixel target) + backward + AdamW step; each reports the median of --steps timed
# steps after --warmup untimed ones.
#   unmask    `unmask bench videomae --synthetic --format json`
#   PyTorch   bench/peers/torch_videomae_train.py (VideoMAE's modules in torch.nn, eager,
#             matmul-softmax-matmul attention as VideoMAE's code; torch 1.13 has no SDPA)
# The engines alternate (unmask, PyTorch, unmask, PyTorch, ... for --rounds rounds) so a change in
# the machine's load hits both; the summary gives every round's figures, the median ratio and
# the spread. --torch-malloc adds a PyTorch row per round run with the glibc malloc settings
# unmask applies to itself (no mmap'd blocks, no heap trimming: GLIBC_TUNABLES), to show how much
# of the gap is the allocator.
# Raw JSON rows go to $UNMASK_BENCH_DIR/videomae-results-<timestamp>.jsonl.
#
# Environment: UNMASK_BIN (default build/unmask), THREADS (default 2), UNMASK_BENCH_DIR
# (default /tmp/unmask-bench). Python: Debian's /usr/bin/python3 (has torch).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
DIR="${UNMASK_BENCH_DIR:-/tmp/unmask-bench}"
UNMASK="${UNMASK_BIN:-$ROOT/build/unmask}"
THREADS="${THREADS:-2}"
MODEL=vit-s BATCH=4 ROUNDS=2 STEPS=3 WARMUP=1 TORCH_MALLOC=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --torch-malloc) TORCH_MALLOC=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ ! -x "$UNMASK" ]]; then
  echo "compare_videomae_cpu.sh: $UNMASK not found; build it first (cmake --build build)" >&2
  exit 2
fi
mkdir -p "$DIR"
OUT="$DIR/videomae-results-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
: > "$OUT"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "# results -> $OUT" >&2

PEAK=""
for round in $(seq 1 "$ROUNDS"); do
  echo "# round $round: unmask bench videomae --model $MODEL --batch $BATCH (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  "$UNMASK" bench videomae --model "$MODEL" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" --synthetic --format json | grep '^{' | sed "s/^{/{\"round\": $round, /" | tee -a "$OUT" >&2
  # MFU of both against the FMA peak unmask measured (the best so far).
  PEAK="$("$PY" -c 'import json,sys; print(max(json.loads(l)["peak_gflops"] for l in open(sys.argv[1]) if "\"unmask\"" in l))' "$OUT")"
  echo "# round $round: PyTorch eager (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  "$PY" "$ROOT/bench/peers/torch_videomae_train.py" --model "$MODEL" --batch "$BATCH" --steps "$STEPS" \
    --warmup "$WARMUP" --threads "$THREADS" --peak-gflops "$PEAK" | sed "s/^{/{\"round\": $round, /" | tee -a "$OUT" >&2
  if [[ "$TORCH_MALLOC" == 1 ]]; then
    echo "# round $round: PyTorch eager with unmask's malloc settings" >&2
    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647 \
      "$PY" "$ROOT/bench/peers/torch_videomae_train.py" --model "$MODEL" --batch "$BATCH" --steps "$STEPS" \
      --warmup "$WARMUP" --threads "$THREADS" --peak-gflops "$PEAK" \
      | sed "s/^{/{\"round\": $round, \"malloc\": \"retain\", /" | tee -a "$OUT" >&2
  fi
done
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"

"$PY" - "$OUT" "$THREADS" "$LOAD_START" "$LOAD_END" "$(nproc)" <<'EOF'
import datetime, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads, load_start, load_end, ncpu = sys.argv[2:6]
cpu = "unknown CPU"
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except (OSError, StopIteration):
    pass
u_rows = [r for r in rows if r["engine"] == "unmask"]
t_rows = [r for r in rows if r["engine"] == "pytorch" and "malloc" not in r]
m_rows = [r for r in rows if r["engine"] == "pytorch" and "malloc" in r]
r0 = rows[0]
print()
print(f"VideoMAE pretraining step, {r0['model']}, {r0['frames']}x{r0['img']}^2, tube mask {r0['mask_ratio']} "
      f"({r0['visible_tokens']} visible / {r0['masked_tokens']} masked tokens), decoder depth {r0['decoder_depth']}, "
      f"batch {r0['batch']}, fp32, AdamW, CPU {threads} threads, {cpu}, "
      f"{datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}")
print()
print("| round | engine | videos/s | step median (ms) | step min..max (ms) | GFLOP/s | MFU | peak RSS (MB) |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    name = "unmask" if r["engine"] == "unmask" else "PyTorch " + r.get("torch", "") + (
        " (unmask's malloc settings)" if "malloc" in r else "")
    print(f"| {r['round']} | {name} | {r['videos_per_s']:.3f} | {r['step_ms']:.0f} | "
          f"{r['step_ms_min']:.0f}..{r['step_ms_max']:.0f} | {r['gflop_per_s']:.1f} | {r['mfu_pct']:.1f}% | "
          f"{r['peak_rss_mb']:.0f} |")
print()
if u_rows and t_rows:
    ratios = [u["videos_per_s"] / t["videos_per_s"] for u, t in zip(u_rows, t_rows)]
    print(f"unmask / PyTorch eager (videos/s, same round): {', '.join(f'{x:.2f}x' for x in ratios)}; "
          f"median {statistics.median(ratios):.2f}x, min {min(ratios):.2f}x, max {max(ratios):.2f}x "
          f"(issue 4 target: >= 2x)")
    best_u = max(r["videos_per_s"] for r in u_rows)
    best_t = max(r["videos_per_s"] for r in t_rows)
    print(f"best of each: unmask {best_u:.3f} videos/s, PyTorch {best_t:.3f} videos/s: {best_u / best_t:.2f}x")
if u_rows and m_rows:
    ratios = [u["videos_per_s"] / t["videos_per_s"] for u, t in zip(u_rows, m_rows)]
    print(f"unmask / PyTorch with the same malloc settings: {', '.join(f'{x:.2f}x' for x in ratios)}")
if u_rows:
    u = u_rows[0]
    print(f"model FLOPs {u['model_gflops_per_clip']:.2f} GFLOP/clip forward ({u['step_gflop']:.1f} GFLOP/step); "
          f"MFU = 3 x model FLOPs x videos/s / {max(r['peak_gflops'] for r in u_rows):.0f} GFLOP/s "
          f"(measured fp32 FMA peak of {threads} threads).")
print(f"Load average (1/5/15 min) at start {load_start}, at end {load_end}, on {ncpu} CPUs: "
      "figures are only comparable when the machine was otherwise idle.")
EOF
