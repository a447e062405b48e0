#!/usr/bin/env bash
# Checkpoints as users have them load, each giving the same fill-mask output as the safetensors
# original (tests/python/make_checkpoint_layouts.py writes them with PyTorch's torch.save):
# pytorch_model.bin (zip and legacy formats, sharded with its index), NVIDIA DLE's bert_config.json
# + ckpt_<step>.pt (dense_act names, DDP prefixes, the newest step), a weights file
# named directly, tokenizer.json without vocab.txt (its casing honoured). A run directory, a Hub id
# and a directory without a config are refused with what to pass instead.
#   bash tests/cli/test_checkpoint_layouts.sh [build/unmask]
set -uo pipefail
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
W=$(mktemp -d /tmp/unmask-layouts-XXXXXX)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 tests/python/make_checkpoint_layouts.py "$W" >/dev/null || { echo "FAIL: make_checkpoint_layouts.py"; exit 1; }
pass=0; fail=0
T="the capital of france is [MASK] ."
want=$("$U" infer --model "$W/hf" --text "$T" --top-k 3 2>&1)
[[ "$want" == *"[MASK] at position 6"* ]] || { echo "FAIL: the reference did not run: $want"; exit 1; }
for m in bin_zip bin_legacy bin_sharded dle tok_json hf/model.safetensors bin_zip/pytorch_model.bin \
         bin_legacy/pytorch_model.bin dle/ckpt_20.pt; do
  got=$("$U" infer --model "$W/$m" --text "$T" --top-k 3 2>&1)
  if [[ "$got" == "$want" ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: --model $m:"; echo "$got" | head -4; fi
done
# DLE's older ckpt_10.pt holds zeros: it must not be the one read.
got=$("$U" infer --model "$W/dle/ckpt_10.pt" --text "$T" --top-k 3 2>&1)
[[ "$got" != "$want" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: ckpt_10.pt gave the newest checkpoint's output"; }
# tokenizer.json's normalizer: cased keeps "Paris" (not in the uncased vocabulary: [UNK]).
got=$("$U" infer --model "$W/tok_json_cased" --text "Paris is [MASK] ." 2>&1 | head -1)
[[ "$got" == "tokens (6): [CLS] [UNK] is [MASK] . [SEP]" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: cased tokenizer.json: $got"; }
got=$("$U" infer --model "$W/tok_json" --text "Paris is [MASK] ." 2>&1 | head -1)
[[ "$got" == "tokens (6): [CLS] paris is [MASK] . [SEP]" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: uncased tokenizer.json: $got"; }
# fine-tuning from a tokenizer.json-only model writes vocab.txt and keeps the casing
printf 'sentence\tlabel\nparis is nice\t1\nrain is bad\t0\nthe sun\t1\nthe fog\t0\n' > "$W/train.tsv"
if "$U" finetune --task classify --init-from "$W/tok_json_cased" --data "$W/train.tsv" --output "$W/ft" --max-steps 1 \
     --batch 2 --threads 2 >/dev/null 2>&1 && [[ $(wc -l < "$W/ft/vocab.txt") == 30522 ]] &&
   grep -q '"do_lower_case": false' "$W/ft/tokenizer_config.json"; then pass=$((pass + 1))
else fail=$((fail + 1)); echo "FAIL: finetune from tokenizer.json: $(ls "$W/ft" 2>&1)"; fi

# expect SUBSTRING -- args...: exit 1 and the message
expect() {
  local want=$1; shift 2
  local out rc
  out=$("$U" infer "$@" --text "$T" 2>&1); rc=$?
  if [[ $rc == 1 && "$out" == *"$want"* ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: infer $* -> $rc: $out"; fi
}
expect "is a training run directory, not a model: its checkpoints are in $W/run/checkpoints" -- --model "$W/run"
expect "pass one of them, e.g. --model $W/run/checkpoints/step-000003" -- --model "$W/run"
expect "downloads nothing; 'google-bert/bert-base-uncased' looks like a Hugging Face Hub id" -- --model google-bert/bert-base-uncased
expect "huggingface-cli download bert-base-uncased --local-dir models/bert-base-uncased" -- --model bert-base-uncased
mkdir -p "$W/empty"
expect "holds no config.json (Hugging Face) or bert_config.json (NVIDIA DLE)" -- --model "$W/empty"
echo "not weights" > "$W/hf/notes.pt"
expect "are neither safetensors nor a torch.save file" -- --model "$W/hf/notes.pt"
head -c 3000 "$W/bin_legacy/pytorch_model.bin" > "$W/bin_legacy/cut.bin"
expect "runs past the end" -- --model "$W/bin_legacy/cut.bin"
echo "checkpoint layouts: $pass passed, $fail failed"
[[ $fail == 0 ]]
