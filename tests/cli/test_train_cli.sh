#!/usr/bin/env bash
# `unmask pretrain` and `unmask bench train` from the command line, end to end:
#   bash tests/cli/test_train_cli.sh [build/unmask]
# Writes a small vocab and corpus, makes shards with `unmask prepare-text`, pretrains a random
# tiny BERT to the end (checkpoints, metrics.jsonl, loss.svg, `unmask infer` on the result),
# interrupts a run with SIGINT (exit 130, a checkpoint) and resumes it to the end, and checks
# the error message of bad configs. No case may crash (exit >= 128 unless expected) or hang
# (each runs under a timeout).
set -uo pipefail
source "$(dirname "$0")/../lib/tiny_corpus.sh"
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
W=$(mktemp -d /tmp/unmask-train-cli-XXXXXX)
trap 'rm -rf "$W"' EXIT
pass=0; fail=0

# expect CODE SUBSTRING -- command...   (CODE: exact exit code; SUBSTRING: in stdout+stderr)
expect() {
  local code=$1 want=$2; shift 3
  local out rc
  out=$(timeout 120 "$@" 2>&1); rc=$?
  if [[ $rc == "$code" && "$out" == *"$want"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* -> exit $rc (want $code), output:"; echo "$out" | tail -5; echo "(wanted: $want)"
  fi
}
check() {  # check DESCRIPTION test-args...
  local what=$1; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}

# ---- vocab, corpus, shards -------------------------------------------------------------------
write_tiny_corpus "$W"
expect 0 "" -- "$U" prepare-text --input "$W/corpus.txt" --vocab "$W/vocab.txt" --output "$W/shards" \
  --max-seq 32 --max-pred 5 --dupe-factor 2

cat > "$W/tiny.toml" <<EOF
# the test's run
model = "random:tiny"
vocab = "$W/vocab.txt"
data = "$W/shards"
output = "$W/run"
steps = 8
batch = 4
accumulation = 2
max_seq = 32
max_pred = 5
lr = 1e-3
warmup = 0.25
checkpoint_every = 3
keep_checkpoints = 2
threads = 2
log_every = 1
peak_gflops = 1

[phase2]
init_checkpoint = "$W/run"
output = "$W/phase2"
steps = 2
lr = 4e-3
EOF

# ---- a run to the end ------------------------------------------------------------------------
expect 0 "pretrained 8 steps (step 0 -> 8 of 8)" -- "$U" pretrain --config "$W/tiny.toml"
check "final checkpoint" test -f "$W/run/checkpoints/step-000008/model/model.safetensors"
check "optimizer state" test -f "$W/run/checkpoints/step-000008/optimizer.safetensors"
check "keep_checkpoints = 2" test "$(ls "$W/run/checkpoints" | tr '\n' ' ')" = "step-000006 step-000008 "
check "metrics.jsonl has 8 rows" test "$(wc -l < "$W/run/metrics.jsonl")" = 8
check "loss.svg" grep -q "</svg>" "$W/run/loss.svg"
expect 0 "[MASK] at position" -- "$U" infer --model "$W/run/checkpoints/step-000008" --text "tok1 tok2 [MASK] tok4"
expect 0 "| unigram (always" -- "$U" eval --task mlm --model "$W/run/checkpoints/step-000008" --data "$W/shards"
expect 0 '"unigram_accuracy"' -- "$U" eval --task mlm --model "$W/run/checkpoints/step-000008" --data "$W/shards" --format json
expect 1 "does not exist" -- "$U" eval --task mlm --model "$W/run/checkpoints/step-000008" --data "$W/none"
check "checkpoint carries its casing" grep -q '"do_lower_case": true' "$W/run/checkpoints/step-000008/model/tokenizer_config.json"
check "checkpoint carries special_tokens_map.json" grep -q '"mask_token": "\[MASK\]"' "$W/run/checkpoints/step-000008/model/special_tokens_map.json"
# Shards made with --cased train a model that stays cased: its checkpoints say do_lower_case false.
expect 0 "" -- "$U" prepare-text --input "$W/corpus.txt" --vocab "$W/vocab.txt" --output "$W/cased_shards" \
  --max-seq 32 --max-pred 5 --dupe-factor 1 --cased --quiet
expect 0 "pretrained 1 steps" -- "$U" pretrain --config "$W/tiny.toml" --set "data=\"$W/cased_shards\"" --output "$W/cased" --steps 1 --quiet
check "a cased run's checkpoint is cased" grep -q '"do_lower_case": false' "$W/cased/checkpoints/step-000001/model/tokenizer_config.json"
expect 1 "already holds checkpoints" -- "$U" pretrain --config "$W/tiny.toml"
expect 1 "has already done 8 of steps = 8" -- "$U" pretrain --config "$W/tiny.toml" --resume
expect 0 "pretrained 4 steps (step 8 -> 12 of 12)" -- "$U" pretrain --config "$W/tiny.toml" --resume --set steps=12 --quiet
expect 0 "steps = 12" -- "$U" pretrain --config "$W/tiny.toml" --steps 12 --print-config
# phase 2 from the latest checkpoint of the run, the optimizer step back at 0
expect 0 "starting from the weights of $W/run/checkpoints/step-000012" -- "$U" pretrain --config "$W/tiny.toml" --phase 2
check "phase 2 optimizer step restarts at 0" grep -q '"optimizer_step": 2,' "$W/phase2/checkpoints/step-000002/trainer_state.json"

# ---- SIGINT mid-run: the step finishes, a checkpoint is written, exit 130; --resume finishes ----
"$U" pretrain --config "$W/tiny.toml" --output "$W/sig" --set steps=100000 --set checkpoint_every=0 \
  > "$W/sig.out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$W/sig/metrics.jsonl" && $(wc -l < "$W/sig/metrics.jsonl") -ge 3 ]] && break
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"; rc=$?
check "SIGINT exits 130 (got $rc)" test "$rc" = 130
check "SIGINT message" grep -q "stopped after" "$W/sig.out"
last=$(ls "$W/sig/checkpoints" 2>/dev/null | tail -1); last=${last:-step-000000}
check "checkpoint after SIGINT ($last)" test -f "$W/sig/checkpoints/$last/trainer_state.json"
done_steps=$((10#${last#step-}))
check "metrics rows = steps done ($done_steps)" test "$(wc -l < "$W/sig/metrics.jsonl")" = "$done_steps"
expect 0 "resumed from $W/sig/checkpoints/$last" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/sig" \
  --set checkpoint_every=0 --set steps=$((done_steps + 3)) --resume
check "metrics rows after resume" test "$(wc -l < "$W/sig/metrics.jsonl")" = $((done_steps + 3))

# ---- a failing checkpoint write: error, nothing half-written ---------------------------------
UNMASK_CHECKPOINT_FAULT=optimizer expect 1 "No space left on device" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/full"
check "no checkpoint after a failed write" test -z "$(ls -A "$W/full/checkpoints" 2>/dev/null)"

# ---- bf16 activations (emulated on the CPU): the same first-step loss within bf16 rounding ----
expect 0 "" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/act32" --set steps=1 --set accumulation=1
expect 0 "" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/act16" --set steps=1 --set accumulation=1 \
  --set 'activations="bf16"'
loss_of() { grep -o '"loss":[-0-9.e+]*' "$1/metrics.jsonl" | head -1 | cut -d: -f2; }
check "bf16-activation loss within 2% of f32 ($(loss_of "$W/act32") vs $(loss_of "$W/act16"))" \
  awk -v a="$(loss_of "$W/act32")" -v b="$(loss_of "$W/act16")" \
  'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && a != b && d < 0.02 * a) }'
expect 1 'activations = "bf16" with precision = "fp16"' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/mix" \
  --set 'activations="bf16"' --set 'precision="fp16"' --set 'device="cuda"' --set 'loss_scaling="dynamic"'
expect 1 'activations must be one of f32,bf16' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/a8" --set 'activations="fp8"'

# ---- bad configs -----------------------------------------------------------------------------
expect 1 'precision = "tf32" needs device = "cuda"' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/tf" --set 'precision="tf32"'
# precision = "bf16" on the CPU: where oneDNN finds a bf16 matrix unit, the run's loss curve stays
# near fp32's (dropout off, the same seed: every step within 2% of fp32's loss); where it finds
# none (or ONEDNN_MAX_CPU_ISA hides it), a clear refusal.
expect 1 'precision = "bf16" on the CPU needs a bf16 matrix unit' -- env ONEDNN_MAX_CPU_ISA=AVX512_CORE "$U" pretrain \
  --config "$W/tiny.toml" --output "$W/bf" --set 'precision="bf16"'
if "$U" version | grep -q "cpu bf16 unit: none"; then
  echo "note: no bf16 matrix unit on this CPU: the bf16 pretraining curve was not run"
else
  for prec in fp32 bf16; do
    expect 0 "" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/curve_$prec" --set "precision=\"$prec\"" \
      --set hidden_dropout=0 --set attention_dropout=0 --set steps=12 --set checkpoint_every=100
  done
  check "bf16 pretraining: every step's loss within 2% of fp32's, and not equal to it" /usr/bin/python3 -c '
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1] + "/curve_fp32/metrics.jsonl")]
b = [json.loads(l)["loss"] for l in open(sys.argv[1] + "/curve_bf16/metrics.jsonl")]
assert len(a) == len(b) == 12, (len(a), len(b))
worst = max(abs(x - y) / x for x, y in zip(a, b))
print(f"bf16 vs fp32 pretraining loss: worst relative difference {worst:.2e} over 12 steps")
assert 0 < worst <= 2e-2, (a, b)
' "$W"
fi
expect 1 'precision = "fp16" needs device = "cuda"' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/fp" --set 'precision="fp16"'
expect 1 'precision = "fp16" needs loss_scaling = "dynamic"' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/fp" \
  --set 'precision="fp16"' --set 'device="cuda"'
expect 1 'device must be one of cpu,cuda, got "gpu"' -- "$U" pretrain --config "$W/tiny.toml" --output "$W/gpu" --set 'device="gpu"'
if ! "$U" version 2>/dev/null | grep -q "cuda backend: yes"; then  # a CPU-only build says so
  expect 1 'device = "cuda" but this unmask was built without the CUDA backend' -- \
    "$U" pretrain --config "$W/tiny.toml" --output "$W/cu" --set 'device="cuda"'
fi
printf 'steps = 5\nwarmpu = 0.1\n' > "$W/bad1.toml"
expect 1 "bad1.toml:2: unknown key 'warmpu' (hint: did you mean 'warmup'?)" -- "$U" pretrain --config "$W/bad1.toml"
printf 'data = "x"\noutput = "y"\nlr = fast\n' > "$W/bad2.toml"
expect 1 "bad2.toml:3: lr: cannot read the value fast" -- "$U" pretrain --config "$W/bad2.toml"
printf 'steps = 2.5\n' > "$W/bad3.toml"
expect 1 "bad3.toml:1: steps must be an integer >= 1, got 2.5" -- "$U" pretrain --config "$W/bad3.toml"
expect 1 "config file $W/nope.toml not found" -- "$U" pretrain --config "$W/nope.toml"
expect 1 "--config is required" -- "$U" pretrain
expect 1 "did you mean 'batch'" -- "$U" pretrain --config "$W/tiny.toml" --set bach=4
expect 1 "max_seq = 64 but the shards" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/o2" --set max_seq=64
expect 1 "cannot resume from $W/empty: no such directory" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/empty" --resume
mkdir -p "$W/empty"
expect 1 "holds no complete checkpoint" -- "$U" pretrain --config "$W/tiny.toml" --output "$W/empty" --resume
expect 1 "--phase must be 1 or 2" -- "$U" pretrain --config "$W/tiny.toml" --phase 3
expect 0 "config keys" -- "$U" pretrain --help

# ---- bench train -----------------------------------------------------------------------------
expect 0 "| devices | seq | batch |" -- "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1
expect 0 "\"seq_per_s\"" -- "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --format json
expect 0 "fp32 (act bf16)" -- "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --activations bf16
# --profile: the time per op after the row (table) or in the row (json): the GEMMs, the optimizer's
# ops and the rest add up to the profiled step.
expect 0 "| gemm | " -- "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --profile 2
"$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --profile 2 --format json \
  > "$W/profile.json" 2>&1
check "bench train --profile json: gemm 2 x 3 x layers + heads calls a step, ops + other = the step" /usr/bin/python3 -c '
import json, sys
r = json.loads(open(sys.argv[1]).read())
p = r["profile"]
ops = {o["op"]: o for o in p["ops"]}
assert p["steps"] == 2, p["steps"]
assert ops["gemm"]["calls_per_step"] >= 12, ops["gemm"]  # 2 layers x (4 forward + 8 backward) at least
assert "lamb_update_many" in ops and "attention_forward_train" in ops and "cross_entropy" in ops, sorted(ops)
total = sum(o["ms_per_step"] for o in p["ops"]) + p["other_ms_per_step"]
assert abs(total - p["step_ms"]) < 1e-6 * max(1.0, p["step_ms"]), (total, p["step_ms"])
' "$W/profile.json"
expect 1 "--profile must be >= 0" -- "$U" bench train --model random:tiny --profile -1
# --accumulate N: a timed step is N forward + backward passes and one optimizer update (DLE's
# phase 1 accumulates 128 micro-batches of 64): 3x the GEMMs of a step, the same one LAMB call,
# and sequences/s counting all 3 micro-batches.
for n in 1 3; do
  "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --profile 1 \
    --format json --accumulate $n > "$W/accum$n.json" 2>&1
done
check "bench train --accumulate 3: 3x the forward/backward ops, one optimizer update, 3 micro-batches counted" \
  /usr/bin/python3 -c '
import json, sys
one, three = (json.loads(open(f).read()) for f in sys.argv[1:3])
assert one["accumulation"] == 1 and three["accumulation"] == 3, (one.get("accumulation"), three.get("accumulation"))
ops1 = {o["op"]: o["calls_per_step"] for o in one["profile"]["ops"]}
ops3 = {o["op"]: o["calls_per_step"] for o in three["profile"]["ops"]}
assert ops3["gemm"] == 3 * ops1["gemm"], (ops1["gemm"], ops3["gemm"])
assert ops3["attention_backward"] == 3 * ops1["attention_backward"], (ops1, ops3)
assert ops1["lamb_update_many"] == ops3["lamb_update_many"] == 1, (ops1, ops3)
assert abs(three["seq_per_s"] - 2 * 3 / (three["step_ms"] / 1e3)) < 1e-3 * three["seq_per_s"], three
# FLOPs a sequence are the same either way (2% for the printed figures: gflop_per_s has two
# decimals, ~1.2 on a loaded 2-core machine)
per_seq = lambda r: r["gflop_per_s"] / r["seq_per_s"]
assert abs(per_seq(three) - per_seq(one)) < 0.02 * per_seq(one), (per_seq(one), per_seq(three))
' "$W/accum1.json" "$W/accum3.json"
expect 1 "--accumulate must be in [1, 65536]" -- "$U" bench train --model random:tiny --accumulate 0
expect 0 "| 2 | 2 | 5 |" -- "$U" bench train --model random:tiny --seq 32 --batch 2 --steps 1 --warmup 0 --peak-gflops 1 --accumulate 2
expect 0 "| gemm_packed | " -- "$U" bench infer --batch 1 --seq 16 --iters 1 --min-time 0 --profile 1 --threads 2
expect 1 "--activations must be f32 or bf16" -- "$U" bench train --activations f16
expect 1 "--optimizer must be adamw or lamb" -- "$U" bench train --optimizer sgd
expect 1 "exceeds the model's max_position_embeddings" -- "$U" bench train --model random:tiny --seq 1024 --peak-gflops 1
# a bad --seq is refused before the table's header is printed (stdout stays empty)
check "bad --seq: nothing on stdout" test -z "$("$U" bench train --model random:tiny --seq 32,1024 --peak-gflops 1 2> /dev/null)"

echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
