#!/usr/bin/env bash
# Ctrl-C never loses a run: SIGINT and SIGTERM at random moments of 20 short BERT-mini
# pretraining runs (seq 128, batch 32: GEMMs big enough for oneDNN's AVX-512 sgemm kernels,
# whose rsp points into the heap; a signal handled on a thread inside one corrupted the heap,
# see src/core/signals.h). Every run must exit 130/143 with a complete checkpoint that
# `--resume` continues by one step, and no run may abort (134) or print a garbage-id error.
#   bash tests/cli/test_signal_stress.sh [build/unmask] [RUNS]
set -uo pipefail
source "$(dirname "$0")/../lib/tiny_corpus.sh"
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
RUNS=${2:-20}
W=$(mktemp -d /tmp/unmask-signal-XXXXXX)
trap 'rm -rf "$W"' EXIT
V=$(readlink -f data/bert-base-uncased-vocab.txt)
write_tiny_corpus "$W"
"$U" prepare-text --input "$W/corpus.txt" --vocab "$V" --output "$W/shards" --max-seq 128 --max-pred 20 \
  --dupe-factor 2 --quiet >/dev/null || { echo "FAIL: prepare-text"; exit 1; }
cat > "$W/c.toml" <<EOT
model = "random:mini"
vocab = "$V"
data = "$W/shards"
steps = 100000
batch = 32
max_seq = 128
max_pred = 20
lr = 1e-3
checkpoint_every = 0
threads = 2
log_every = 1
peak_gflops = 1
EOT
pass=0; fail=0
RANDOM=11  # the same moments every time
for i in $(seq 1 "$RUNS"); do
  run="$W/run$i"
  sig=$([ $((i % 2)) = 0 ] && echo INT || echo TERM)
  want=$([ "$sig" = INT ] && echo 130 || echo 143)
  "$U" pretrain --config "$W/c.toml" --output "$run" --quiet > "$W/out" 2>&1 &
  pid=$!
  # after the first step (a run stopped earlier has nothing to save), then 0-5 s more
  for _ in $(seq 1 300); do [[ -s "$run/metrics.jsonl" ]] && break; sleep 0.05; done
  sleep "$((RANDOM % 5)).$((RANDOM % 10))"
  kill -"$sig" "$pid"
  timeout 120 tail --pid="$pid" -f /dev/null; wait "$pid"; rc=$?
  last=$(ls "$run/checkpoints" 2>/dev/null | tail -1)
  if [[ $rc != "$want" ]] || grep -q -E "corrupted|free\(\)|outside \[0" "$W/out"; then
    fail=$((fail + 1)); echo "FAIL: run $i, SIG$sig: exit $rc (want $want):"; tail -3 "$W/out"; continue
  fi
  if [[ -z "$last" || ! -f "$run/checkpoints/$last/trainer_state.json" || ! -f "$run/checkpoints/$last/model/model.safetensors" ]]; then
    fail=$((fail + 1)); echo "FAIL: run $i, SIG$sig: no complete checkpoint ($last)"; continue
  fi
  done_steps=$((10#${last#step-}))
  if out=$(timeout 120 "$U" pretrain --config "$W/c.toml" --output "$run" --resume --set steps=$((done_steps + 1)) --quiet 2>&1) &&
     [[ "$out" == *"pretrained 1 steps (step $done_steps -> $((done_steps + 1))"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1)); echo "FAIL: run $i: --resume from $last:"; echo "$out" | tail -3
  fi
  rm -rf "$run"
done
echo "signal stress: $pass passed, $fail failed (of $RUNS runs)"
[[ $fail == 0 ]]
