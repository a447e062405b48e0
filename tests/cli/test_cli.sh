#!/usr/bin/env bash
# CLI behaviour on good and bad input: exit codes and the words of each error message.
#   bash tests/cli/test_cli.sh [build/unmask]
# Makes a tiny random HF checkpoint with PyTorch (tests/python/make_bert_checkpoint.py), then
# damages copies of it. Every case must exit as expected and print the expected text; no case
# may crash (exit >= 128) or hang (each runs under a 60 s timeout).
set -uo pipefail
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
W=$(mktemp -d /tmp/unmask-cli-XXXXXX)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 tests/python/make_bert_checkpoint.py --out "$W/m" --size tiny --heads pretraining --seed 3 >/dev/null
pass=0; fail=0

# expect CODE SUBSTRING -- command...   (CODE: exact exit code; SUBSTRING: in stdout+stderr)
expect() {
  local code=$1 want=$2; shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1); rc=$?
  if [[ $rc == "$code" && "$out" == *"$want"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* -> exit $rc (want $code), output:"; echo "$out" | head -5; echo "(wanted: $want)"
  fi
}
damaged() {  # copy of the model dir for damage
  rm -rf "$W/d"; cp -r "$W/m" "$W/d"
}

expect 0 "[MASK] at position" -- "$U" infer --model "$W/m" --text "paris is the [MASK] of france ."
expect 0 "usage: unmask infer" -- "$U" infer --help
expect 0 "usage: unmask bench infer" -- "$U" bench infer --help
expect 0 "usage: unmask forward" -- "$U" forward --help
expect 2 "unknown command" -- "$U" frobnicate
expect 2 "did you mean \`unmask pretrain\`" -- "$U" pretrian
expect 2 "did you mean \`unmask finetune-video\`" -- "$U" finetune_video
# --version names the commit the binary was built from (this checkout's HEAD, maybe -dirty)
expect 0 "unmask $(git rev-parse --short=12 HEAD)" -- "$U" --version
expect 0 "cpu kernels" -- "$U" version
# the option names Hugging Face's Trainer and DLE's scripts use get unmask's name
expect 1 "unmask calls it --lr" -- "$U" finetune --learning_rate 3e-5
expect 1 "unmask calls it --output" -- "$U" pretrain-video --output_dir x
expect 1 "unmask calls it --steps" -- "$U" pretrain --max_steps 10
expect 1 "unmask calls it --max-steps" -- "$U" finetune --max_steps 10
expect 1 "unmask calls it --accumulation" -- "$U" pretrain-video --gradient_accumulation_steps 2
expect 1 "unmask calls it --resume" -- "$U" finetune --resume_from_checkpoint x
expect 1 "did you mean --weight-decay" -- "$U" finetune --weight_decay 0.01
expect 1 "did you mean --output" -- "$U" prepare-video --out x
expect 1 "did you mean --text" -- "$U" infer --model "$W/m" --txt hi
expect 1 "--model is required" -- "$U" infer --text hi
expect 1 "--device must be cpu or cuda, got 'gpu'" -- "$U" infer --model "$W/m" --text "a [MASK] ." --device gpu
expect 1 "--precision fp16 needs --device cuda" -- "$U" infer --model "$W/m" --text "a [MASK] ." --precision fp16
expect 0 "[MASK] at position" -- "$U" infer --model "$W/m" --text "paris is the [MASK] of france ." --device cpu
if ! "$U" version | grep -q "cuda backend: yes"; then  # a CPU-only build says how to get CUDA
  expect 1 "built without the CUDA backend" -- "$U" infer --model "$W/m" --text "a [MASK] ." --device cuda
  expect 1 "built without the CUDA backend" -- "$U" bench infer --device cuda --batch 1 --seq 8
  expect 1 "built without the CUDA backend" -- "$U" bench videomae --device cuda --model tiny --synthetic
  expect 1 "built without the CUDA backend" -- "$U" pretrain-video --device cuda --data "$W/none" --output "$W/v"
fi
# --precision bf16 on the CPU: refused without a bf16 matrix unit (ONEDNN_MAX_CPU_ISA hides it),
# bf16 GEMMs where oneDNN finds one; tf32 stays CUDA-only.
expect 1 "--precision bf16 on the CPU needs a bf16 matrix unit" -- env ONEDNN_MAX_CPU_ISA=AVX512_CORE "$U" bench videomae \
  --model tiny --synthetic --precision bf16
if ! "$U" version | grep -q "cpu bf16 unit: none"; then
  expect 0 "bf16 GEMMs" -- "$U" bench videomae --model tiny --synthetic --batch 2 --steps 1 --warmup 0 --peak-gflops 1 \
    --precision bf16
fi
expect 1 "--precision tf32 needs --device cuda" -- "$U" bench videomae --model tiny --synthetic --precision tf32
expect 0 "fp32 (act bf16)" -- "$U" bench videomae --model tiny --synthetic --batch 2 --steps 1 --warmup 0 \
  --peak-gflops 1 --activations bf16
expect 1 "--activations must be f32 or bf16" -- "$U" bench videomae --model tiny --synthetic --activations fp8
# V-SWIFT's architecture table, counted as V-SWIFT counted it (decoder depth 8, its tube count).
expect 0 "| S/16 | 25.808M | 17.896G | 384 | 12 | 1536 | 4.0 | 6 | 192 | 8 | 3 | 152 |" -- "$U" bench videomae --arch \
  --decoder-depth 8 --tube-count vswift
expect 1 "--tube-count must be videomae or vswift" -- "$U" bench videomae --arch --tube-count fvcore
expect 1 "--precision must be fp32, tf32 or bf16, got 'fp8'" -- "$U" bench train --precision fp8
expect 1 "model $W/nope does not exist" -- "$U" infer --model "$W/nope" --text hi
expect 1 "--text is empty" -- "$U" infer --model "$W/m" --text "   "
expect 1 "invalid UTF-8 at byte offset 3" -- "$U" infer --model "$W/m" --text $'abc\xff def'
long=$(printf 'word %.0s' $(seq 1 600))
expect 0 "warning: input truncated" -- "$U" infer --model "$W/m" --text "$long"
expect 1 "longer than the model's 512 positions" -- "$U" infer --model "$W/m" --text "$long" --no-truncate
expect 1 "--top-k must be at least 1" -- "$U" infer --model "$W/m" --text hi --top-k 0

damaged; rm "$W/d/model.safetensors"
expect 1 "model.safetensors" -- "$U" infer --model "$W/d" --text hi
damaged; head -c 1000 "$W/m/model.safetensors" > "$W/d/model.safetensors"
expect 1 "runs past the end of the file" -- "$U" infer --model "$W/d" --text hi
damaged; printf '\x10\x00\x00\x00\x00\x00\x00\x00not json at all!' > "$W/d/model.safetensors"
expect 1 "not valid JSON" -- "$U" infer --model "$W/d" --text hi
damaged; : > "$W/d/model.safetensors"
expect 1 "empty" -- "$U" infer --model "$W/d" --text hi
damaged; sed -i 's/"num_attention_heads": [0-9]*/"num_attention_heads": 5/' "$W/d/config.json"
expect 1 "does not divide hidden_size" -- "$U" infer --model "$W/d" --text hi
damaged; sed -i 's/"hidden_size": [0-9]*/"hidden_size": -64/' "$W/d/config.json"
expect 1 "hidden_size = -64" -- "$U" infer --model "$W/d" --text hi
damaged; sed -i 's/"num_hidden_layers": [0-9]*,//' "$W/d/config.json"
expect 1 "missing required key \"num_hidden_layers\"" -- "$U" infer --model "$W/d" --text hi
damaged; sed -i 's/"num_hidden_layers": [0-9]*/"num_hidden_layers": 3/' "$W/d/config.json"
expect 1 "missing:" -- "$U" infer --model "$W/d" --text hi
damaged; grep -v '^\[SEP\]$' "$W/m/vocab.txt" > "$W/d/vocab.txt"
expect 1 "has no [SEP] line" -- "$U" infer --model "$W/d" --text hi
damaged; head -n 28996 "$W/m/vocab.txt" > "$W/d/vocab.txt"  # a bert-base-cased-sized list beside an uncased model
expect 1 "holds 28996 tokens but the model's config.json says vocab_size = 30522" -- "$U" infer --model "$W/d" --text hi
damaged; sed -i 's/"position_embedding_type": "absolute"/"position_embedding_type": "relative_key_query"/' "$W/d/config.json"
expect 1 "position_embedding_type is \"relative_key_query\"" -- "$U" infer --model "$W/d" --text hi
expect 1 "cut off by truncation" -- "$U" infer --model "$W/m" --text "$long [MASK] ."
damaged; rm "$W/d/vocab.txt"
expect 1 "no vocab.txt" -- "$U" infer --model "$W/d" --text hi
expect 1 "--batch must be a comma-separated list" -- "$U" bench infer --batch 0
expect 1 "--format must be" -- "$U" bench infer --format xml
expect 1 "--precision bf16 on the CPU needs a bf16 matrix unit" -- env ONEDNN_MAX_CPU_ISA=AVX512_CORE "$U" bench infer \
  --precision bf16 --batch 1 --seq 8
if ! "$U" version | grep -q "cpu bf16 unit: none"; then
  expect 0 "bf16 products on" -- "$U" bench infer --precision bf16 --batch 1 --seq 8 --iters 1 --warmup 1 --min-time 0
fi
expect 1 "--precision fp16 needs --device cuda" -- "$U" bench infer --precision fp16 --batch 1 --seq 8
expect 1 "--precision must be fp32, tf32, bf16 or fp16" -- "$U" bench infer --precision fp8 --batch 1 --seq 8
expect 1 "--cuda-graph must be on or off" -- "$U" bench infer --cuda-graph maybe --batch 1 --seq 8
# Seed 003's side-by-side columns from a peer's JSON rows: the fastest row per shape, "OOM" where
# the peer ran out of memory (as the seed prints it), "-" where it has no row.
printf '%s\n' 'progress text' '{"impl": "torch-eager", "batch": 1, "seq": 8, "latency_ms": 7.96}' \
  '{"impl": "torch-compile", "batch": 1, "seq": 8, "latency_ms": 4.00}' '{"impl": "torch-eager", "batch": 2, "seq": 8, "error": "OOM"}' > "$W/peer.jsonl"
expect 0 "| Batch size | PT Latency (ms) | PT QPS (seq/s) | unmask Latency (ms) | unmask QPS (seq/s) | Speedup |" -- \
  "$U" bench infer --model "$W/m" --batch 1,2 --seq 8 --iters 1 --min-time 0 --peer "$W/peer.jsonl"
expect 0 "| 1          | 4.00            | 250.00         |" -- "$U" bench infer --model "$W/m" --batch 1 --seq 8 --iters 1 --min-time 0 --peer "$W/peer.jsonl"
expect 0 "| 2          | OOM             | OOM            |" -- "$U" bench infer --model "$W/m" --batch 2 --seq 8 --iters 1 --min-time 0 --peer "$W/peer.jsonl"
expect 0 "| 3          | -               | -              |" -- "$U" bench infer --model "$W/m" --batch 3 --seq 8 --iters 1 --min-time 0 --peer "$W/peer.jsonl"
echo '{"impl": "torch-eager", "batch": 2, "seq": 8, "error": "OOM"}' > "$W/peer_oom.jsonl"
expect 1 "peer_oom.jsonl: no benchmark rows" -- "$U" bench infer --model "$W/m" --batch 2 --seq 8 --peer "$W/peer_oom.jsonl"
expect 0 '"peer": "torch-compile", "peer_latency_ms": 4.000000' -- "$U" bench infer --model "$W/m" --batch 1 --seq 8 --iters 1 --min-time 0 --peer "$W/peer.jsonl" --format json
echo '{"batch": 1, "seq": 8}' > "$W/peer_bad.jsonl"
expect 1 "peer_bad.jsonl:1: a row needs numeric batch, seq and latency_ms" -- "$U" bench infer --model "$W/m" --batch 1 --seq 8 --peer "$W/peer_bad.jsonl"
echo '{"batch": 1, "seq": ' > "$W/peer_bad.jsonl"
expect 1 "peer_bad.jsonl:1: not JSON" -- "$U" bench infer --model "$W/m" --batch 1 --seq 8 --peer "$W/peer_bad.jsonl"
expect 1 "--peer: cannot open" -- "$U" bench infer --model "$W/m" --batch 1 --seq 8 --peer "$W/missing.jsonl"
expect 1 "exceeds the model's max_position_embeddings" -- "$U" bench infer --model "$W/m" --seq 1024 --iters 1 --min-time 0
expect 1 "--mode must be padded or packed" -- "$U" forward --model "$W/m" --input-ids x.npy --dump "$W/o" --mode diagonal

echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
