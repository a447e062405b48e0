#!/usr/bin/env bash
# Quick start, the main job: pretrain a small BERT on CPU from a real English corpus, then ask it
# to fill in masked words.
#   1. install the Debian dependencies and build `build/unmask`;
#   2. corpus: the reStructuredText sources of the Python documentation, installed by Debian's
#      python3.11-doc (/usr/share/doc/python3.11/html/_sources, 494 prose documents, 1.5M tokens);
#   3. `unmask prepare-text`: WordPiece (the real bert-base-uncased vocabulary) and Google's
#      create_pretraining_data rules -> DLE-format HDF5 shards (seq 128, 20 predictions);
#   4. `unmask pretrain --config configs/quickstart.toml`: BERT-mini (4 x 256) from random weights,
#      MLM + NSP, LAMB, 600 steps of 32 sequences; progress with the loss on stderr, metrics.jsonl
#      and loss.svg in the run directory, HF-layout checkpoints;
#   5. `unmask infer` on the last checkpoint: top-5 fill-mask predictions.
# Environment: UNMASK_QUICKSTART_DIR (default /tmp/unmask-quickstart), UNMASK_QUICKSTART_STEPS,
# UNMASK_VOCAB (default data/bert-base-uncased-vocab.txt, the repository's copy).
set -euo pipefail
cd "$(dirname "$0")/.."
VOCAB=${UNMASK_VOCAB:-data/bert-base-uncased-vocab.txt}
if [ ! -s "$VOCAB" ]; then  # checked first: the install and build below take minutes
  echo "quickstart: error: no WordPiece vocabulary at $VOCAB (hint: set UNMASK_VOCAB to a bert-base-uncased" \
    "vocab.txt, one token per line, e.g. from a Hugging Face checkpoint directory)" >&2
  exit 1
fi
bash scripts/install-deps.sh
bash scripts/cmake_configure.sh build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"${JOBS:-2}" --target unmask

DIR=${UNMASK_QUICKSTART_DIR:-/tmp/unmask-quickstart}
STEPS=${UNMASK_QUICKSTART_STEPS:-600}
mkdir -p "$DIR"
cp "$VOCAB" "$DIR/vocab.txt"  # the real bert-base-uncased vocabulary

echo "== corpus: Python documentation (python3.11-doc)"
[ -s "$DIR/python_docs.txt" ] || bash scripts/corpus_python_docs.sh "$DIR/python_docs.txt"

echo "== unmask prepare-text"
rm -rf "$DIR/shards128"
build/unmask prepare-text --input "$DIR/python_docs.txt" --format documents --vocab "$DIR/vocab.txt" \
  --output "$DIR/shards128" --max-seq 128 --max-pred 20 --shards 4

echo "== unmask pretrain (BERT-mini, MLM + NSP, $STEPS steps)"
rm -rf "$DIR/run"
build/unmask pretrain --config configs/quickstart.toml --set "steps=$STEPS" \
  --set "vocab=\"$DIR/vocab.txt\"" --set "data=\"$DIR/shards128\"" --set "output=\"$DIR/run\""

CKPT=$(ls -d "$DIR"/run/checkpoints/step-* | sort | tail -1)
echo
echo "== unmask infer on $CKPT"
for text in "the [MASK] statement imports a module." \
            "a list is a mutable [MASK] of items." \
            "this function returns true if the object is [MASK] and false otherwise."; do
  build/unmask infer --model "$CKPT" --text "$text" --top-k 5
done
echo
echo "loss curve: $DIR/run/loss.svg   metrics: $DIR/run/metrics.jsonl"
