#!/usr/bin/env bash
# Quick start, the main job: pretrain a small BERT on CPU from a real English corpus, show on
# held-out text that it learned more than word frequencies, then ask it to fill in masked words.
#   1. install the Debian dependencies and build `build/unmask` (both skipped when done);
#   2. corpus: the reStructuredText sources of the Python documentation, installed by Debian's
#      python3.11-doc (494 prose documents, 1.4M words); every 20th document is held out;
#   3. `unmask train-vocab`: an 8,192-token WordPiece vocabulary trained on the training part
#      (UNMASK_VOCAB=FILE uses a vocab.txt of yours instead, e.g. data/bert-base-uncased-vocab.txt);
#   4. `unmask prepare-text`: Google's create_pretraining_data rules -> DLE-format HDF5 shards
#      (seq 64, 10 predictions) of the training part, and held-out shards;
#   5. `unmask pretrain --config configs/quickstart.toml`: a BERT from random weights, MLM + NSP,
#      LAMB; progress on stderr, metrics.jsonl and loss.svg in the run directory;
#   6. `unmask eval --task mlm` on the held-out shards, beside the unigram baseline;
#   7. `unmask infer`: top-5 fill-mask predictions for a few sentences.
# Environment: UNMASK_QUICKSTART_DIR (default /tmp/unmask-quickstart), UNMASK_QUICKSTART_STEPS
# (default: the config's), UNMASK_VOCAB (a vocab.txt to use instead of training one), JOBS (build
# jobs, default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/cmake_configure.sh build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"${JOBS:-2}" --target unmask

DIR=${UNMASK_QUICKSTART_DIR:-/tmp/unmask-quickstart}
mkdir -p "$DIR"
STEPS=()
[ -n "${UNMASK_QUICKSTART_STEPS:-}" ] && STEPS=(--set "steps=$UNMASK_QUICKSTART_STEPS")

echo "== corpus: Python documentation (python3.11-doc), every 20th document held out"
[ -s "$DIR/python_docs.txt" ] || bash scripts/corpus_python_docs.sh "$DIR/python_docs.txt"
awk 'NR % 20 != 0' "$DIR/python_docs.txt" > "$DIR/train.txt"
awk 'NR % 20 == 0' "$DIR/python_docs.txt" > "$DIR/heldout.txt"

if [ -n "${UNMASK_VOCAB:-}" ]; then
  echo "== vocabulary: $UNMASK_VOCAB"
  cp "$UNMASK_VOCAB" "$DIR/vocab.txt"
else
  echo "== unmask train-vocab"
  build/unmask train-vocab --input "$DIR/train.txt" --output "$DIR/vocab" --vocab-size 8192 --force
  cp "$DIR/vocab/vocab.txt" "$DIR/vocab.txt"
fi

echo "== unmask prepare-text"
build/unmask prepare-text --input "$DIR/train.txt" --format documents --vocab "$DIR/vocab.txt" \
  --output "$DIR/shards" --max-seq 64 --max-pred 10 --shards 4 --force
build/unmask prepare-text --input "$DIR/heldout.txt" --format documents --vocab "$DIR/vocab.txt" \
  --output "$DIR/heldout" --max-seq 64 --max-pred 10 --dupe-factor 1 --force --quiet

echo "== unmask pretrain"
rm -rf "$DIR/run"
build/unmask pretrain --config configs/quickstart.toml "${STEPS[@]}" \
  --set "vocab=\"$DIR/vocab.txt\"" --set "data=\"$DIR/shards\"" --set "output=\"$DIR/run\""

CKPT=$(ls -d "$DIR"/run/checkpoints/step-* | sort | tail -1)
echo
echo "== unmask eval --task mlm on the held-out documents ($CKPT)"
build/unmask eval --task mlm --model "$CKPT" --data "$DIR/heldout"
echo
echo "== unmask infer on $CKPT"
for text in "if the argument is omitted, it defaults to [MASK]." \
            "the function returns a [MASK] of strings." \
            "raise a [MASK] if the value is out of range." \
            "a list is a mutable [MASK] of items."; do
  build/unmask infer --model "$CKPT" --text "$text" --top-k 5
done
echo
echo "loss curve: $DIR/run/loss.svg   metrics: $DIR/run/metrics.jsonl"
