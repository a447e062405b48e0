#!/usr/bin/env bash
# Quick start: install Debian dependencies, build, and run the main job on CPU:
#   - make a random-weight BERT-base checkpoint in Hugging Face layout with PyTorch
#     (no weights can be downloaded here; the real HF loading code reads it),
#   - fill-mask demo on it (`unmask infer`), with HF-named .npy outputs,
#   - the AITemplate-style inference table (`unmask bench infer`) at seq 128.
# The checkpoint has random weights, so the predicted tokens are arbitrary; point --model at a
# real bert-base-uncased directory (config.json, model.safetensors, vocab.txt) for real ones.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2
MODEL=${UNMASK_QUICKSTART_MODEL:-/tmp/unmask-quickstart/bert-base}
if [ ! -f "$MODEL/model.safetensors" ]; then
  /usr/bin/python3 tests/python/make_bert_checkpoint.py --out "$MODEL" --size base --heads pretraining --seed 1
fi
echo
echo "== unmask infer"
build/unmask infer --model "$MODEL" --text "The quick brown fox [MASK] over the lazy dog." \
  --pair "It was not amused." --top-k 5 --dump /tmp/unmask-quickstart/outputs
ls /tmp/unmask-quickstart/outputs
echo
echo "== unmask bench infer (BERT-base, fp32, seq 128)"
build/unmask bench infer --model bert-base --batch 1,8 --seq 128 --min-time 3
build/unmask bench infer --model bert-base --batch 32 --seq 128 --lengths uniform:16:128 --iters 3 --min-time 0
