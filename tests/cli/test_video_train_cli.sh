#!/usr/bin/env bash
# End-to-end video training on the synthetic action dataset (make-videos): a tiny VideoMAE
# pretrains with falling reconstruction loss, fine-tunes from that checkpoint to >= 90% top-1 on
# the held-out split (2 segments x 3 crops), and eval-video reproduces the number from the saved
# checkpoint, from HF-named weights and from the list decoded on the fly. Then bad input.
#   bash tests/cli/test_video_train_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
same() { /usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) == float(sys.argv[2]) else 1)" "$1" "$2" 2>/dev/null; }
json() { /usr/bin/python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])[sys.argv[2]])" "$@"; }

# Data: 100 videos per class (75 train, 25 held out), 64x48 VP9, decoded once at short side 32.
"$BIN" make-videos --output "$T/v" --videos-per-class 100 --width 64 --height 48 --frames 32 --seed 5 >/dev/null 2>&1 \
  && ok || bad "make-videos failed"
"$BIN" prepare-video --list "$T/v/train_videomae.txt" --output "$T/train.ucs" --short-side 32 --quiet >/dev/null 2>&1 \
  && ok || bad "prepare-video train failed"
"$BIN" prepare-video --list "$T/v/val_videomae.txt" --output "$T/val.ucs" --short-side 32 --quiet >/dev/null 2>&1 \
  && ok || bad "prepare-video val failed"

# Pretraining (tiny with 8x8 patches: a 4x4 grid, so the tube mask leaves 2 of 16 positions
# visible): the mean loss of the last 50 steps is at least 5% below that of the first 10.
if "$BIN" pretrain-video --data "$T/train.ucs" --output "$T/pt" --preset tiny --patch 8 --batch 16 --steps 400 --lr 1.5e-3 \
     --warmup 0.05 --log-every 100 --seed 1 >"$T/pt.out" 2>"$T/pt.err"; then ok; else bad "pretrain-video failed: $(tail -3 "$T/pt.err")"; fi
read -r first last < <(/usr/bin/python3 - "$T/pt/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
losses = [r["loss"] for r in rows]
assert len(losses) == 400, len(losses)
print(sum(losses[:10]) / 10, sum(losses[-50:]) / 50)
EOF
)
echo "pretrain-video: mean loss of steps 1-10 $first, of steps 351-400 $last"
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) < 0.95 * float(sys.argv[1]) else 1)" "$first" "$last" \
  && ok || bad "pretraining loss did not fall by 5%: $first -> $last"
[ -f "$T/pt/model/model.safetensors" ] && [ -f "$T/pt/model/config.json" ] && ok || bad "no pretrain checkpoint"
# VideoMAE v2 dual masking (running-cell decoder mask 0.5): runs, logs every step
"$BIN" pretrain-video --data "$T/train.ucs" --output "$T/pt2" --preset tiny --patch 8 --batch 8 --steps 20 \
  --decoder-mask-ratio 0.5 --log-every 100 >/dev/null 2>"$T/pt2.err" && [ "$(wc -l < "$T/pt2/metrics.jsonl")" = 20 ] \
  && ok || bad "pretrain-video --decoder-mask-ratio 0.5: $(tail -2 "$T/pt2.err")"
# bf16 block activations (emulated on the CPU): runs to the end, every step logged
"$BIN" pretrain-video --data "$T/train.ucs" --output "$T/pt3" --preset tiny --patch 8 --batch 8 --steps 5 \
  --activations bf16 --log-every 100 >/dev/null 2>"$T/pt3.err" && [ "$(wc -l < "$T/pt3/metrics.jsonl")" = 5 ] \
  && ok || bad "pretrain-video --activations bf16: $(tail -2 "$T/pt3.err")"

# Fine-tuning from the pretrained encoder with VideoMAE's recipe (layer decay 0.75, drop path 0.1,
# mixup 0.8 / cutmix 1.0, smoothing 0.1), evaluated on the held-out split.
if "$BIN" finetune-video --data "$T/train.ucs" --val "$T/val.ucs" --init-from "$T/pt/model" --output "$T/ft" --batch 16 \
     --classes "$T/v/classes.txt" --epochs 30 --lr 2e-3 --warmup 0.05 --log-every 200 --seed 1 >"$T/ft.out" 2>"$T/ft.err"; then ok
else bad "finetune-video failed: $(tail -3 "$T/ft.err")"; fi
top1=$(json "$T/ft/eval.json" top1 2>/dev/null || echo 0)
echo "finetune-video: held-out top-1 $top1 ($(grep -m1 'held-out' "$T/ft.err"))"
/usr/bin/python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.9 else 1)" "$top1" && ok || bad "held-out top-1 $top1 < 0.9"
# make-videos' class names are the model's id2label; its original names keep it out of transformers' way.
/usr/bin/python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if j['id2label'] == {'0': 'left', '1': 'right', '2': 'up', '3': 'down'} and 'model_type' not in j else 1)" "$T/ft/model/config.json" \
  && ok || bad "fine-tuned config.json: id2label / model_type: $(head -c 300 "$T/ft/model/config.json")"
grep -q "dropped" "$T/ft.err" && grep -q "decoder" "$T/ft.err" && ok || bad "the load report does not list the dropped decoder"

# eval-video on the saved checkpoint reproduces finetune's number exactly (same views, same model).
"$BIN" eval-video --model "$T/ft/model" --data "$T/val.ucs" --test-segments 2 --test-crops 3 >"$T/ev.out" 2>"$T/ev.err" \
  && ok || bad "eval-video failed: $(tail -3 "$T/ev.err")"
same "$(json "$T/ev.out" top1)" "$top1" && ok || bad "eval-video top-1 $(json "$T/ev.out" top1) != finetune's $top1"
[ "$(json "$T/ev.out" views)" = 6 ] && ok || bad "expected 6 views per video"
# ... from HF names (convert-videomae), and from the list file decoded on the fly at the same size.
"$BIN" convert-videomae --in "$T/ft/model" --output "$T/hf" --to hf >/dev/null 2>&1 && ok || bad "convert-videomae to hf failed"
"$BIN" eval-video --model "$T/hf" --data "$T/val.ucs" >"$T/ev2.out" 2>/dev/null
same "$(json "$T/ev2.out" top1 2>/dev/null)" "$top1" && ok || bad "HF-named checkpoint gives a different top-1"
"$BIN" eval-video --model "$T/ft/model" --data "$T/v/val_videomae.txt" --short-side 32 >"$T/ev3.out" 2>/dev/null
same "$(json "$T/ev3.out" top1 2>/dev/null)" "$top1" && ok || bad "list input gives a different top-1 than the store"

# Bad input: non-zero exit and a message naming the problem.
expect_error() {  # expect_error "what" "pattern" cmd...
  local what=$1 pattern=$2; shift 2
  if "$@" >"$T/err" 2>&1; then bad "$what: succeeded"
  elif grep -qi -- "$pattern" "$T/err"; then ok
  else bad "$what: message lacks '$pattern': $(cat "$T/err")"; fi
}
expect_error "missing data" "does not exist" "$BIN" pretrain-video --data "$T/nope" --output "$T/x"
expect_error "eval of a pretrain checkpoint" "not a classification checkpoint" "$BIN" eval-video --model "$T/pt/model" --data "$T/val.ucs"
expect_error "negative lr" "lr" "$BIN" finetune-video --data "$T/train.ucs" --output "$T/x" --lr -1
expect_error "bad mixup value" "finite number" "$BIN" finetune-video --data "$T/train.ucs" --output "$T/x" --mixup abc
expect_error "label beyond --num-classes" "num-classes" "$BIN" finetune-video --data "$T/train.ucs" --output "$T/x" --num-classes 2
expect_error "unknown preset" "preset" "$BIN" pretrain-video --data "$T/train.ucs" --output "$T/x" --preset enormous
expect_error "patch not dividing the crop" "multiple of patch" "$BIN" pretrain-video --data "$T/train.ucs" --output "$T/x" --patch 10
# An --output that holds a run is refused (its model and metrics would be replaced), unless --force.
sum_before=$(md5sum < "$T/pt2/model/model.safetensors" 2>/dev/null || find "$T/pt2/model" -type f -exec md5sum {} + | sort | md5sum)
expect_error "pretrain-video into an earlier run" "already holds a run" "$BIN" pretrain-video --data "$T/train.ucs" --output "$T/pt2" --preset tiny --patch 8 --steps 1
expect_error "finetune-video into an earlier run" "already holds a run" "$BIN" finetune-video --data "$T/train.ucs" --output "$T/ft" --preset tiny --patch 8 --epochs 1
[ "$(md5sum < "$T/pt2/model/model.safetensors" 2>/dev/null || find "$T/pt2/model" -type f -exec md5sum {} + | sort | md5sum)" = "$sum_before" ] && ok || bad "a refused run changed the earlier model"
"$BIN" pretrain-video --data "$T/train.ucs" --output "$T/pt2" --preset tiny --patch 8 --batch 4 --steps 1 --force >/dev/null 2>"$T/force.err" \
  && ok || bad "pretrain-video --force: $(tail -2 "$T/force.err")"
expect_error "decoder mask ratio 1.5" "ratio" "$BIN" pretrain-video --data "$T/train.ucs" --output "$T/x" --decoder-mask-ratio 1.5
# A list with a corrupt video: skipped and counted by default, an error naming it with --strict.
head -c 3000 /dev/urandom >"$T/broken.webm"
{ echo "$T/broken.webm 0"; head -8 "$T/v/val_videomae.txt"; } >"$T/mixed.txt"
"$BIN" eval-video --model "$T/ft/model" --data "$T/mixed.txt" --short-side 32 >"$T/ev4.out" 2>"$T/ev4.err" \
  && [ "$(json "$T/ev4.out" videos)" = 8 ] && [ "$(json "$T/ev4.out" skipped)" = 1 ] && ok \
  || bad "a corrupt video was not skipped and counted: $(cat "$T/ev4.out" "$T/ev4.err" | tail -3)"
expect_error "--strict with a corrupt video" "broken.webm" "$BIN" eval-video --model "$T/ft/model" --data "$T/mixed.txt" --short-side 32 --strict

echo "video training CLI: $pass passed, $fail failed"
[ "$fail" = 0 ]
