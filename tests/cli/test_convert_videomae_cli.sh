#!/usr/bin/env bash
# Command-line checks of `unmask convert-videomae`: round trips and bad input (exit codes and messages).
# Needs no Python: the checkpoints come from `unmask videomae-step` (a random tiny model's params
# in original names). The PyTorch-written inputs are checked by tests/python/videomae_checkpoint_check.py.
#   bash tests/cli/test_convert_videomae_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
conv() { "$BIN" convert-videomae "$@"; }

# expect_error "what" "message part" args...: non-zero exit and the message on stderr.
expect_error() {
  local what=$1 msg=$2
  shift 2
  if conv "$@" >"$T/out" 2>"$T/err"; then
    bad "$what: succeeded"
  elif grep -q -- "$msg" "$T/err"; then
    ok
  else
    bad "$what: expected '$msg' in: $(cat "$T/err")"
  fi
}

"$BIN" videomae-step --output "$T/pt" >/dev/null 2>&1 || bad "videomae-step (pretraining params) failed"
"$BIN" videomae-step --classify 3 --output "$T/ft" >/dev/null 2>&1 || bad "videomae-step --classify failed"
PT=$T/pt/params.safetensors FT=$T/ft/params.safetensors

# ---- round trips --------------------------------------------------------------------------------
if conv --in "$PT" --output "$T/hf" --to hf --config tiny >"$T/out" 2>&1; then ok; else bad "orig -> hf: $(cat "$T/out")"; fi
grep -q "read 49 tensors" "$T/out" && grep -q "wrote $T/hf/model.safetensors (hf names)" "$T/out" && ok ||
  bad "orig -> hf: unexpected report: $(cat "$T/out")"
grep -q '"model_type": "videomae"' "$T/hf/config.json" && grep -q '"layer_norm_eps": 1e-06' "$T/hf/config.json" && ok ||
  bad "hf config.json lacks model_type / layer_norm_eps 1e-06"
grep -q 'attention.attention.query.weight' "$T/hf/model.safetensors" && ! grep -q 'attn.qkv.weight' "$T/hf/model.safetensors" && ok ||
  bad "hf model.safetensors does not hold split query/key/value names"
# hf -> original (config from the directory) equals the direct orig -> original, byte for byte.
if conv --in "$T/hf" --output "$T/back" --to original >"$T/out" 2>&1; then ok; else bad "hf -> orig: $(cat "$T/out")"; fi
grep -q "read 55 tensors from $T/hf/model.safetensors (safetensors, HF names): 49 in original names" "$T/out" && ok ||
  bad "hf -> orig: unexpected report: $(cat "$T/out")"
conv --in "$PT" --output "$T/direct" --to original --config tiny >/dev/null 2>&1 || bad "orig -> orig failed"
cmp -s "$T/back/model.safetensors" "$T/direct/model.safetensors" && ok || bad "orig -> hf -> orig is not byte-identical to orig -> orig"
cmp -s "$T/back/config.json" "$T/direct/config.json" && ok || bad "the two config.json files differ"
# Classifier: num_labels from the head.
conv --in "$FT" --output "$T/fthf" --to hf --config tiny >/dev/null 2>&1 && ok || bad "classifier orig -> hf failed"
grep -q '"num_labels": 3' "$T/fthf/config.json" && grep -q VideoMAEForVideoClassification "$T/fthf/config.json" && ok ||
  bad "classifier config.json lacks num_labels 3 / VideoMAEForVideoClassification"
grep -q 'classifier.weight' "$T/fthf/model.safetensors" && ok || bad "classifier hf names lack classifier.weight"
# Converting over an existing output directory replaces it.
conv --in "$T/fthf" --output "$T/hf" --to hf >/dev/null 2>&1 && ok || bad "replacing an existing model directory failed"
grep -q '"num_labels": 3' "$T/hf/config.json" && ok || bad "the replaced directory does not hold the new model"
if "$BIN" convert-videomae --help >"$T/out" 2>&1 && grep -q -- "--to NAMING" "$T/out"; then ok; else bad "--help"; fi
ls -a "$T" | grep -q '^\.tmp-' && bad "temporary directories left behind" || ok

# ---- bad input ----------------------------------------------------------------------------------
expect_error "no --in" "--in is required" --output "$T/x" --to hf
expect_error "no --to" "--to is required" --in "$PT" --output "$T/x"
expect_error "bad --to" "must be hf or original, got 'onnx'" --in "$PT" --output "$T/x" --to onnx
expect_error "missing input" "does not exist" --in "$T/nope.pth" --output "$T/x" --to hf --config tiny
expect_error "no config anywhere" "no config.json beside it" --in "$PT" --output "$T/x" --to hf
expect_error "unknown preset" "unknown VideoMAE preset 'medium'" --in "$PT" --output "$T/x" --to hf --config medium
expect_error "wrong size" "do not match the config" --in "$PT" --output "$T/x" --to hf --config small
expect_error "preset contradicts config.json" "contradicts the checkpoint's config.json" --in "$T/hf" --output "$T/x" --to hf --config base
: >"$T/empty.pth"
expect_error "empty file" "empty" --in "$T/empty.pth" --output "$T/x" --to hf --config tiny
echo "just some text, not a checkpoint at all" >"$T/text.pth"
expect_error "text file" "safetensors" --in "$T/text.pth" --output "$T/x" --to hf --config tiny
head -c 300 "$PT" >"$T/trunc.safetensors"
expect_error "truncated safetensors" "truncated" --in "$T/trunc.safetensors" --output "$T/x" --to hf --config tiny
printf '\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.' >"$T/legacy.pth"
expect_error "legacy torch format cut after its magic number" "runs past the end" --in "$T/legacy.pth" --output "$T/x" --to hf --config tiny
printf 'PK\x03\x04 a zip archive that was cut off before its directory' >"$T/broken.pth"
expect_error "broken zip" "no zip end-of-central-directory record" --in "$T/broken.pth" --output "$T/x" --to hf --config tiny
mkdir -p "$T/emptydir"
expect_error "directory without weights" "has no model.safetensors" --in "$T/emptydir" --output "$T/x" --to hf --config tiny
mkdir -p "$T/precious" && echo keep >"$T/precious/notes.txt"
expect_error "output holds other files" "holds other files (notes.txt)" --in "$PT" --output "$T/precious" --to hf --config tiny
[ -f "$T/precious/notes.txt" ] && ok || bad "a refused output directory lost its files"
echo file >"$T/afile"
expect_error "output is a file" "is not a directory" --in "$PT" --output "$T/afile" --to hf --config tiny
[ -e "$T/x" ] && bad "a failed conversion left $T/x behind" || ok

echo "convert-videomae CLI: $pass passed, $fail failed"
[ "$fail" = 0 ]
