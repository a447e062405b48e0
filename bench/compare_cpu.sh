#!/usr/bin/env bash
# Side-by-side CPU benchmark: unmask vs onnxruntime (node) vs PyTorch eager, BERT-base, random weights.
#
#   bench/compare_cpu.sh                 # needs build/unmask (this script builds nothing)
#   bench/compare_cpu.sh --peers-only    # ORT + PyTorch only (no unmask binary needed)
#
# Environment:
#   UNMASK_BENCH_DIR   cache dir for the checkpoint, ONNX and results (default /tmp/unmask-bench)
#   UNMASK_BIN         unmask binary (default build/unmask)
#   THREADS            intra-op threads for every engine (default 2)
#   PEER_ITERS         timed iterations per setting for ORT/PyTorch (default 10, after PEER_WARMUP=1
#                      warm-up runs; each setting stops after PEER_MAX_SECONDS=15 once 3 runs are done)
#   UNMASK_EXTRA       extra arguments appended to every `unmask bench infer` call
#
# Settings (all seq 128): batch 1 and batch 8 full batches; batch 32 with lengths uniform in
# [16, 128] padded to the longest (`--lengths uniform:16:128`).  Engines are interleaved per
# setting (unmask, ORT, PyTorch for setting 1, then setting 2, ...) to reduce drift.  Raw JSON rows
# go to $UNMASK_BENCH_DIR/results-<timestamp>.jsonl; a markdown table with the speedups
# (peer latency / unmask latency, >1 = unmask faster) is printed at the end.
# Python: Debian's /usr/bin/python3 (has torch); node + npm onnxruntime-node for ORT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY=/usr/bin/python3
DIR="${UNMASK_BENCH_DIR:-/tmp/unmask-bench}"
UNMASK="${UNMASK_BIN:-$ROOT/build/unmask}"
THREADS="${THREADS:-2}"
PEER_ITERS="${PEER_ITERS:-10}"
PEER_MAX_SECONDS="${PEER_MAX_SECONDS:-15}"
PEER_WARMUP="${PEER_WARMUP:-1}"
PEERS_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --peers-only) PEERS_ONLY=1 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

if [[ $PEERS_ONLY == 0 && ! -x "$UNMASK" ]]; then
  echo "compare_cpu.sh: $UNMASK not found; build it first (cmake --build build) or use --peers-only" >&2
  exit 2
fi
mkdir -p "$DIR"
CKPT="$DIR/bert-base"
ONNX="$DIR/bert-base.onnx"

# 1. checkpoint (BertModel with pooler, "bert." prefix, f32) and its ONNX export, cached
if [[ ! -f "$CKPT/model.safetensors" ]]; then
  echo "# making BERT-base checkpoint in $CKPT" >&2
  "$PY" "$ROOT/tests/python/make_bert_checkpoint.py" --out "$CKPT" --size base --heads model --seed 0 >&2
fi
if [[ ! -f "$ONNX" || "$CKPT/model.safetensors" -nt "$ONNX" ]]; then
  echo "# exporting ONNX to $ONNX" >&2
  "$PY" "$ROOT/bench/peers/export_onnx.py" --model "$CKPT" --out "$ONNX" >&2
fi

# 2. onnxruntime-node (CPU binary shipped in the package; --ignore-scripts skips the CUDA download)
if [[ ! -d "$ROOT/bench/peers/node_modules/onnxruntime-node" ]]; then
  echo "# installing onnxruntime-node" >&2
  (cd "$ROOT/bench/peers" && npm install --ignore-scripts --no-audit --no-fund >&2)
fi

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
OUT="$DIR/results-$STAMP.jsonl"
: > "$OUT"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "# results -> $OUT" >&2

# tag each JSON row of a command's stdout with the engine and setting
run_engine() {  # engine setting cmd...
  local engine="$1" setting="$2"; shift 2
  echo "# [$setting] $engine: $*" >&2
  local lines
  if ! lines="$("$@")"; then
    echo "# [$setting] $engine FAILED" >&2
    echo "{\"engine\":\"$engine\",\"setting\":\"$setting\",\"error\":true}" >> "$OUT"
    return 0
  fi
  printf '%s\n' "$lines" | "$PY" -c '
import json, sys
engine, setting = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        row = json.loads(line)
    except ValueError:
        continue
    row["engine"] = engine
    row["setting"] = setting
    print(json.dumps(row))
' "$engine" "$setting" >> "$OUT"
  tail -n 1 "$OUT" >&2
}

SETTINGS=("b1-s128|--batch 1 --seq 128" "b8-s128|--batch 8 --seq 128" "b32-mixed|--batch 32 --seq 128 --lengths uniform:16:128")
for s in "${SETTINGS[@]}"; do
  name="${s%%|*}"; args="${s#*|}"
  # shellcheck disable=SC2086
  {
    if [[ $PEERS_ONLY == 0 ]]; then
      run_engine unmask "$name" "$UNMASK" bench infer --model "$CKPT" $args --threads "$THREADS" --format json ${UNMASK_EXTRA:-}
    fi
    run_engine onnxruntime "$name" node "$ROOT/bench/peers/ort_bench.mjs" --model "$ONNX" $args \
      --threads "$THREADS" --iters "$PEER_ITERS" --warmup "$PEER_WARMUP" --max-seconds "$PEER_MAX_SECONDS"
    run_engine pytorch "$name" "$PY" "$ROOT/bench/peers/torch_bench.py" --model "$CKPT" $args \
      --threads "$THREADS" --iters "$PEER_ITERS" --warmup "$PEER_WARMUP" --max-seconds "$PEER_MAX_SECONDS"
  }
done

# 3. markdown table
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
"$PY" - "$OUT" "$THREADS" "$LOAD_START" "$LOAD_END" "$(nproc)" <<'EOF'
import json, sys, platform, datetime
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
threads, load_start, load_end, ncpu = sys.argv[2:6]
settings = ["b1-s128", "b8-s128", "b32-mixed"]
labels = {"b1-s128": "batch 1, seq 128", "b8-s128": "batch 8, seq 128",
          "b32-mixed": "batch 32, seq uniform 16..128"}
def get(engine, setting):
    for r in rows:
        if r.get("engine") == engine and r.get("setting") == setting and not r.get("error"):
            return r
    return None
def fmt(r, k):
    return "n/a" if r is None or k not in r else f"{float(r[k]):.1f}"
def ratio(u, p):
    if u is None or p is None:
        return "n/a"
    return f"{float(p['latency_ms']) / float(u['latency_ms']):.2f}x"
cpu = "unknown CPU"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip(); break
except OSError:
    pass
print()
print(f"BERT-base (random weights), CPU, {threads} threads, {cpu}, "
      f"{datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M UTC')}")
print()
print("| setting | unmask ms | unmask seq/s | ORT ms | ORT seq/s | PyTorch ms | PyTorch seq/s | vs ORT | vs PyTorch |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in settings:
    u, o, p = get("unmask", s), get("onnxruntime", s), get("pytorch", s)
    print(f"| {labels[s]} | {fmt(u,'latency_ms')} | {fmt(u,'qps')} | {fmt(o,'latency_ms')} | {fmt(o,'qps')} | "
          f"{fmt(p,'latency_ms')} | {fmt(p,'qps')} | {ratio(u,o)} | {ratio(u,p)} |")
print()
print("ms = median latency per batch; seq/s = batch / latency; vs X = X latency / unmask latency (>1: unmask faster).")
print(f"Load average (1/5/15 min) at start {load_start}, at end {load_end}, on {ncpu} CPUs: "
      "figures are only comparable when the machine was otherwise idle.")
EOF
