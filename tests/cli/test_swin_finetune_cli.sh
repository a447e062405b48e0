#!/usr/bin/env bash
# Video Swin fine-tuning from a BEVT pretraining run: a tiny BEVT pretrains on the synthetic
# source, finetune-swin takes its backbone and reaches >= 90% held-out top-1 (2 segments x 3
# crops) on make-videos' four motion directions; --stop-after + --resume equal the uninterrupted
# run; bad input gets a clear error.
#   bash tests/cli/test_swin_finetune_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
json() { /usr/bin/python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])" "$@"; }
TINY=(--size tiny --embed-dim 32 --depths 2,2,2,2 --heads 1,2,4,8 --window 2,4,4)

"$BIN" make-videos --output "$T/v" --videos-per-class 60 --width 96 --height 64 --frames 24 --seed 5 >/dev/null 2>&1 \
  && ok || bad "make-videos failed"
for split in train val; do
  "$BIN" prepare-video --list "$T/v/${split}_videomae.txt" --output "$T/$split.ucs" --short-side 64 --quiet >/dev/null 2>&1 \
    && ok || bad "prepare-video $split failed"
done

# 1. A short BEVT pretraining (clips + images of the synthetic source; 128^2 so that the image
#    stream's last stage holds whole 4 x 4 windows; the backbone then fine-tunes at 64^2).
"$BIN" pretrain-bevt --output "$T/pt" "${TINY[@]}" --vocab 64 --frames 8 --crop 128 --clips 2 --images 4 --steps 30 \
  --lr 1e-3 --warmup 0.1 --drop-path 0.1 --seed 1 --quiet >"$T/pt.out" 2>"$T/pt.err" && ok || bad "pretrain-bevt: $(tail -3 "$T/pt.err")"

# 2. Fine-tuning from it, then the held-out views.
if "$BIN" finetune-swin --data "$T/train.ucs" --val "$T/val.ucs" --init-from "$T/pt/model" --output "$T/ft" \
     --frames 8 --crop 64 --batch 8 --epochs 30 --lr 5e-4 --warmup 0.1 --drop-path 0.1 --mixup 0 --cutmix 0 \
     --log-every 1000 --seed 1 >"$T/ft.out" 2>"$T/ft.err"; then ok; else bad "finetune-swin: $(tail -3 "$T/ft.err")"; fi
grep -q "loaded" "$T/ft.err" && grep -q "unused tensors" "$T/ft.err" && ok \
  || bad "the pretrained backbone was not loaded (or its necks not reported unused): $(head -5 "$T/ft.err")"
top1=$(json "$T/ft/eval.json" top1 2>/dev/null || echo 0)
echo "finetune-swin: held-out top-1 $top1 ($(grep -m1 'held-out' "$T/ft.err"))"
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.9 else 1)" "$top1" && ok || bad "held-out top-1 $top1 < 0.9"
grep -q '"cls_head.fc_cls.weight"' <(head -c 100000 "$T/ft/model/model.safetensors") \
  && grep -q '"num_classes": 4' "$T/ft/model/config.json" && ok || bad "the fine-tuned model lacks fc_cls or num_classes"

# 3. Interrupted and resumed: the same losses as the uninterrupted run (4 epochs).
FT=(--data "$T/train.ucs" "${TINY[@]}" --frames 8 --crop 64 --batch 8 --epochs 2 --lr 2e-3 --seed 3 --quiet)
"$BIN" finetune-swin --output "$T/r1" "${FT[@]}" >/dev/null 2>"$T/r1.err" && ok || bad "finetune-swin r1: $(tail -2 "$T/r1.err")"
"$BIN" finetune-swin --output "$T/r2" "${FT[@]}" --stop-after 5 >/dev/null 2>"$T/r2.err" && ok || bad "stop-after: $(tail -2 "$T/r2.err")"
"$BIN" finetune-swin --output "$T/r2" "${FT[@]}" --resume >/dev/null 2>"$T/r3.err" && ok || bad "resume: $(tail -2 "$T/r3.err")"
/usr/bin/python3 - "$T/r1/metrics.jsonl" "$T/r2/metrics.jsonl" <<'PY' && ok || bad "the resumed fine-tuning differs"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) > 5 and a == b, (a, b)
PY

# 4. Bad input.
expect_error() {  # expect_error PATTERN ARGS...
  local pat=$1; shift
  "$BIN" "$@" >"$T/e.out" 2>"$T/e.err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -q -e "$pat" "$T/e.err"; then ok; else bad "$* -> rc $rc: $(head -c 300 "$T/e.err")"; fi
}
expect_error "multiple of 32" finetune-swin --data "$T/train.ucs" --output "$T/e1" "${TINY[@]}" --crop 48
cp "$T/pt/model/model.safetensors" "$T/lone.safetensors"  # no config.json beside it: --size decides
expect_error "does not fit the model" finetune-swin --data "$T/train.ucs" --output "$T/e2" --size tiny --frames 8 --crop 64 \
  --init-from "$T/lone.safetensors"
expect_error "num-classes" finetune-swin --data "$T/train.ucs" --output "$T/e3" "${TINY[@]}" --crop 64 --num-classes 2

echo "swin finetune cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
