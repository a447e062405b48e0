#!/usr/bin/env bash
# WordPiece parity with tokenizers.js: regenerate the reference ids with
# @huggingface/transformers, check they equal the committed tests/js/expected_*.txt, and run
# the C++ WordPieceParity.* tests against the fresh references. Exits non-zero on any
# mismatch.
#
#   bash tests/js/run_parity.sh                    # builds a small test binary with g++
#   UNMASK_TEST_BIN=build/unmask_tests bash tests/js/run_parity.sh   # reuse a built binary
#
# Needs node + npm (npm ci --ignore-scripts runs here when node_modules is missing) and the
# vocab at data/bert-base-uncased-vocab.txt (UNMASK_VOCAB overrides).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
vocab="${UNMASK_VOCAB:-$root/data/bert-base-uncased-vocab.txt}"
if [[ ! -f "$vocab" ]]; then
  echo "run_parity: vocab not found at $vocab (hint: set UNMASK_VOCAB=/path/to/vocab.txt)" >&2
  exit 2
fi

if [[ ! -d "$here/node_modules/@huggingface/transformers" ]]; then
  (cd "$here" && npm ci --ignore-scripts --no-audit --no-fund)
fi

fresh="$(mktemp -d)"
trap 'rm -rf "$fresh"' EXIT

echo "== tokenizers.js $(node -p "require('$here/node_modules/@huggingface/transformers/package.json').version")," \
     "node $(node --version), Unicode $(node -p process.versions.unicode)"
node "$here/unicode_versions.mjs" | head -1
node "$here/tokenize_ref.mjs" "$vocab" "$here/corpus.txt" "$fresh"

status=0
for f in expected_uncased.txt expected_cased.txt expected_pairs_uncased.txt; do
  if cmp -s "$fresh/$f" "$here/$f"; then
    echo "committed $f matches tokenizers.js ($(wc -l < "$here/$f") lines)"
  else
    echo "MISMATCH: committed $f differs from tokenizers.js output:" >&2
    diff <(nl -ba "$here/$f") <(nl -ba "$fresh/$f") | head -20 >&2 || true
    status=1
  fi
done

bin="${UNMASK_TEST_BIN:-}"
if [[ -z "$bin" ]]; then
  bin="$fresh/test_wordpiece"
  echo "== compiling $bin"
  "${CXX:-g++}" -std=c++20 -O2 -I"$root/include" -I"$root/src" \
    -DUNMASK_SOURCE_DIR="\"$root\"" $(for f in wordpiece unicode unicode_decompositions unicode_tables tokenizer_config vocab_trainer; do echo "$root/src/data/text/$f.cc"; done) "$root/src/io/file.cc" "$root/tests/test_wordpiece.cc" \
    -lgtest -lgtest_main -pthread -o "$bin"
fi
echo "== C++ tokenizer against the fresh references"
UNMASK_PARITY_DIR="$fresh" "$bin" --gtest_filter='WordPieceParity.*' || status=1

# A vocabulary `unmask train-vocab` trained on the corpus (4,000 tokens: most words split into
# pieces, the hard case for the longest-match search), tokenized by both.
unmask="${UNMASK_BIN:-$root/build/unmask}"
if [[ ! -x "$unmask" ]]; then
  echo "run_parity: $unmask not found (build it first, or set UNMASK_BIN)" >&2
  exit 1
fi
"$unmask" train-vocab --input "$here/corpus.txt" --output "$fresh/trained" --vocab-size 4000 --min-frequency 2 || status=1
mkdir -p "$fresh/trained_refs"
node "$here/tokenize_ref.mjs" "$fresh/trained/vocab.txt" "$here/corpus.txt" "$fresh/trained_refs" || status=1
echo "== C++ tokenizer against tokenizers.js on the trained vocabulary"
UNMASK_PARITY_VOCAB="$fresh/trained/vocab.txt" UNMASK_PARITY_DIR="$fresh/trained_refs" "$bin" \
  --gtest_filter='WordPieceParity.*' || status=1

if [[ $status -ne 0 ]]; then
  echo "run_parity: FAILED" >&2
else
  echo "run_parity: OK"
fi
exit $status
