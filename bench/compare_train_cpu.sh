#!/usr/bin/env bash
# Side-by-side CPU pretraining-step benchmark: unmask vs PyTorch eager, random weights, one run.
#
#   bench/compare_train_cpu.sh [--model bert-base] [--seq 128] [--batch 8] [--steps 3] [--warmup 1]
#
# Engines (same model size, batch, DLE-layout synthetic batch with 20 / 80 masked positions at
# seq 128 / 512, MLM + NSP loss, dropout 0.1, AdamW, fp32, THREADS intra-op threads):
#   unmask            `unmask bench train --optimizer adamw` (MLM head on the masked rows)
#   PyTorch full      BertForPreTraining as HF runs it: MLM logits for every position [B, T, V]
#   PyTorch masked    the same model with the MLM head on the masked rows only (DLE's dense
#                     sequence output): the fair algorithmic comparison
# A step = zero_grad + forward + backward + optimizer update; each engine reports the median of
# --steps timed steps after --warmup untimed ones. Raw JSON rows go to
# $UNMASK_BENCH_DIR/train-results-<timestamp>.jsonl; a markdown table with the ratios
# (unmask seq/s / peer seq/s, > 1 = unmask faster) is printed at the end.
#
# Environment: UNMASK_BIN (default build/unmask), THREADS (default 2), UNMASK_BENCH_DIR
# (default /tmp/unmask-bench), UNMASK_EXTRA (extra arguments for `unmask bench train`).
# Python: Debian's /usr/bin/python3 (has torch).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
DIR="${UNMASK_BENCH_DIR:-/tmp/unmask-bench}"
UNMASK="${UNMASK_BIN:-$ROOT/build/unmask}"
THREADS="${THREADS:-2}"
MODEL=bert-base SEQ=128 BATCH=8 STEPS=3 WARMUP=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --seq) SEQ="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [[ ! -x "$UNMASK" ]]; then
  echo "compare_train_cpu.sh: $UNMASK not found; build it first (cmake --build build)" >&2
  exit 2
fi
mkdir -p "$DIR"
OUT="$DIR/train-results-$(date -u +%Y%m%dT%H%M%SZ).jsonl"
: > "$OUT"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "# results -> $OUT" >&2

echo "# unmask bench train --model $MODEL --seq $SEQ --batch $BATCH" >&2
# shellcheck disable=SC2086
"$UNMASK" bench train --model "$MODEL" --seq "$SEQ" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
  --threads "$THREADS" --optimizer adamw --format json ${UNMASK_EXTRA:-} | grep '^{' | tee -a "$OUT" >&2
for head in full masked; do
  echo "# PyTorch, MLM head: $head" >&2
  "$PY" "$ROOT/bench/peers/torch_bert_train.py" --model "$MODEL" --seq "$SEQ" --batch "$BATCH" --mlm-head "$head" \
    --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" | tee -a "$OUT" >&2
done
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"

"$PY" - "$OUT" "$THREADS" "$LOAD_START" "$LOAD_END" "$(nproc)" <<'EOF'
import datetime, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads, load_start, load_end, ncpu = sys.argv[2:6]
u = next((r for r in rows if r["engine"] == "unmask"), None)
cpu = "unknown CPU"
try:
    cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
except (OSError, StopIteration):
    pass
r0 = rows[0]
print()
print(f"BERT pretraining step, {r0['model']}, seq {r0['seq']}, batch {r0['batch']}, {r0['masked']} masked/seq, fp32, "
      f"AdamW, CPU {threads} threads, {cpu}, {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}")
print()
print("| engine | MLM head | sequences/s | step (ms) | unmask speedup |")
print("|---|---|---:|---:|---:|")
for r in rows:
    name = "unmask" if r["engine"] == "unmask" else "PyTorch " + r.get("torch", "")
    ratio = "1.00x" if r is u else (f"{u['seq_per_s'] / r['seq_per_s']:.2f}x" if u else "n/a")
    print(f"| {name} | {r.get('mlm_head', 'masked')} rows | {r['seq_per_s']:.3f} | {r['step_ms']:.0f} | {ratio} |")
if u:
    print()
    print(f"unmask: {u['gflop_per_s']:.1f} GFLOP/s (model FLOPs, MLM head on masked rows), MFU {u['mfu_pct']:.1f}% "
          f"of a measured {u['peak_gflops']:.0f} GFLOP/s fp32 peak; peak RSS {u['peak_rss_mb']:.0f} MB.")
print(f"Load average (1/5/15 min) at start {load_start}, at end {load_end}, on {ncpu} CPUs: "
      "figures are only comparable when the machine was otherwise idle.")
EOF
