#!/usr/bin/env bash
# VideoMAE pretraining on the one training loop: killed with SIGKILL and resumed, it ends with
# the same weights, optimizer moments and per-step losses as the uninterrupted run, bit for bit;
# SIGINT saves a checkpoint and exits 130; --stop-after stops with one; the resumed invocation's
# summary reports its own steps; the plot and the progress line with ETA are there.
#   bash tests/cli/test_video_resume.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

"$BIN" make-videos --output "$T/v" --videos-per-class 6 --width 48 --height 32 --frames 16 --seed 3 >/dev/null 2>&1 \
  && ok || bad "make-videos failed"
"$BIN" prepare-video --list "$T/v/train_videomae.txt" --output "$T/store" --short-side 32 --quiet >/dev/null 2>&1 \
  && ok || bad "prepare-video failed"
STEPS=120
run=("$BIN" pretrain-video --data "$T/store" --preset tiny --img 32 --patch 8 --frames 4 --batch 4 --accumulation 2
     --steps $STEPS --lr 1e-3 --warmup 0.1 --threads 2 --seed 7 --checkpoint-every 5 --log-every 1000)

# The uninterrupted run.
"${run[@]}" --output "$T/a" >"$T/a.out" 2>"$T/a.err" && ok || bad "uninterrupted run: $(tail -3 "$T/a.err")"
final=$(printf "step-%06d" $STEPS)
[ -f "$T/a/checkpoints/$final/optimizer.safetensors" ] && [ -f "$T/a/checkpoints/$final/trainer_state.json" ] \
  && [ -f "$T/a/model/model.safetensors" ] && ok || bad "no final checkpoint / model in $T/a"
grep -q "</svg>" "$T/a/loss.svg" && grep -q ">learning rate<" "$T/a/loss.svg" && ok || bad "no loss.svg with the four panels"
grep -q "ETA" "$T/a.err" && ok || bad "no progress line with ETA: $(tail -2 "$T/a.err")"
grep -q "pretrained $STEPS steps (step 0 -> $STEPS of $STEPS)" "$T/a.out" && ok || bad "summary: $(cat "$T/a.out")"

# The same run killed with SIGKILL once a checkpoint exists, then resumed.
"${run[@]}" --output "$T/b" >"$T/b1.out" 2>"$T/b1.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ -n "$(ls "$T/b/checkpoints" 2>/dev/null | grep step-)" ] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
killed_at=$(ls "$T/b/checkpoints" 2>/dev/null | grep step- | tail -1)
[ -n "$killed_at" ] && [ "$killed_at" != "$final" ] && ok || bad "SIGKILL did not land mid-run (latest: '$killed_at')"
# A new run into the same directory is refused (it would overwrite the run).
"${run[@]}" --output "$T/b" >"$T/b2.out" 2>&1 && bad "a second run into a run directory was not refused" \
  || { grep -q "already holds" "$T/b2.out" && ok || bad "refusal message: $(tail -2 "$T/b2.out")"; }
"${run[@]}" --output "$T/b" --resume >"$T/b3.out" 2>"$T/b3.err" && ok || bad "resume: $(tail -3 "$T/b3.err")"
k=$((10#${killed_at#step-}))
grep -q "pretrained $((STEPS - k)) steps (step $k -> $STEPS of $STEPS)" "$T/b3.out" && grep -q "resumed from" "$T/b3.out" \
  && ok || bad "resumed summary does not report this invocation's steps: $(cat "$T/b3.out")"
for f in model/model.safetensors optimizer.safetensors; do
  cmp -s "$T/a/checkpoints/$final/$f" "$T/b/checkpoints/$final/$f" && ok || bad "$f differs after SIGKILL + --resume"
done
cmp -s "$T/a/model/model.safetensors" "$T/b/model/model.safetensors" && ok || bad "final model differs"
/usr/bin/python3 - "$T/a/metrics.jsonl" "$T/b/metrics.jsonl" "$STEPS" <<'EOF' && ok || bad "per-step losses differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
n = int(sys.argv[3])
assert [r["step"] for r in a] == list(range(1, n + 1)), "uninterrupted steps"
assert [r["step"] for r in b] == list(range(1, n + 1)), "resumed steps"
for x, y in zip(a, b):
    assert x["loss"] == y["loss"] and x["lr"] == y["lr"] and x["grad_norm"] == y["grad_norm"], (x, y)
# the same keys as BERT's metrics.jsonl, in the same order
keys = list(a[0].keys())
assert keys[:13] == ["step", "loss", "accuracy", "lr", "grad_norm", "samples_per_s", "tokens_per_s", "flops_per_s",
                     "mfu", "step_s", "elapsed", "samples", "tokens"], keys
assert a[0]["samples"] == 8, a[0]  # batch 4 x accumulation 2
EOF

# SIGINT: the step finishes, a checkpoint is written, exit 130; then --stop-after and --resume.
"${run[@]}" --output "$T/c" --steps 100000 --checkpoint-every 0 >"$T/c1.out" 2>"$T/c1.err" &
pid=$!
for _ in $(seq 1 1200); do
  [ -f "$T/c/metrics.jsonl" ] && [ "$(wc -l < "$T/c/metrics.jsonl")" -ge 3 ] && break
  sleep 0.02
done
kill -INT "$pid"
wait "$pid"; rc=$?
[ "$rc" = 130 ] && ok || bad "SIGINT exit $rc"
grep -q "SIGINT: finishing this step" "$T/c1.err" && grep -q "stopped after" "$T/c1.out" && ok || bad "SIGINT messages"
last=$(ls "$T/c/checkpoints" 2>/dev/null | grep step- | tail -1)
[ -n "$last" ] && [ -f "$T/c/checkpoints/$last/trainer_state.json" ] && ok || bad "no checkpoint after SIGINT"
n=$((10#${last#step-}))
[ "$(wc -l < "$T/c/metrics.jsonl")" = "$n" ] && ok || bad "metrics rows != steps done ($n)"
"${run[@]}" --output "$T/c" --steps 100000 --checkpoint-every 0 --resume --stop-after 2 >"$T/c2.out" 2>"$T/c2.err" \
  && ok || bad "--resume --stop-after: $(tail -2 "$T/c2.err")"
[ -f "$T/c/checkpoints/$(printf "step-%06d" $((n + 2)))/trainer_state.json" ] && ok || bad "--stop-after 2 left no checkpoint"
# A resume with nothing to resume from says so.
"${run[@]}" --output "$T/none" --resume >"$T/n.out" 2>&1 && bad "resume of an empty directory succeeded" \
  || { grep -q "cannot resume" "$T/n.out" && ok || bad "resume message: $(tail -2 "$T/n.out")"; }

# Fine-tuning on the same loop: SIGKILL + --resume gives the uninterrupted run's model and
# held-out result bit for bit.
ft=("$BIN" finetune-video --data "$T/store" --val "$T/store" --preset tiny --img 32 --patch 8 --frames 4 --batch 4
    --epochs 40 --lr 1e-3 --threads 2 --seed 5 --checkpoint-every 4 --test-segments 1 --test-crops 1 --log-every 1000)
"${ft[@]}" --output "$T/fa" >"$T/fa.out" 2>"$T/fa.err" && ok || bad "finetune-video: $(tail -3 "$T/fa.err")"
"${ft[@]}" --output "$T/fb" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [ -n "$(ls "$T/fb/checkpoints" 2>/dev/null | grep step-)" ] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ ! -f "$T/fb/eval.json" ] && [ -n "$(ls "$T/fb/checkpoints" 2>/dev/null | grep step-)" ] && ok \
  || bad "finetune-video SIGKILL did not land mid-run"
"${ft[@]}" --output "$T/fb" --resume >"$T/fb.out" 2>"$T/fb.err" && ok || bad "finetune-video --resume: $(tail -3 "$T/fb.err")"
cmp -s "$T/fa/model/model.safetensors" "$T/fb/model/model.safetensors" && ok || bad "fine-tuned model differs after resume"
/usr/bin/python3 - "$T/fa/eval.json" "$T/fb/eval.json" "$T/fa/metrics.jsonl" <<'EOF2' && ok || bad "held-out results differ"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["top1"] == b["top1"] and a["top5"] == b["top5"], (a, b)
row = json.loads(open(sys.argv[3]).readline())
assert row["accuracy"] is not None and "epoch" in row and "mix_lam" in row, row
EOF2

# A config file of the command's options: --print-config writes one (every option with its help),
# --config reads it, --set and then options given directly win over it, and the run it describes
# is the run the same flags give, bit for bit. A wrong key or value names its line.
"$BIN" pretrain-video --data "$T/store" --preset tiny --img 32 --patch 8 --frames 4 --batch 4 --steps 3 --threads 2 \
  --seed 9 --print-config > "$T/pv.toml" && grep -q "^mask_ratio = 0.9$" "$T/pv.toml" && grep -q "^# tube mask ratio$" "$T/pv.toml" \
  && ok || bad "--print-config: $(head -5 "$T/pv.toml")"
sed -i 's/^steps = 3$/steps = 50/; s/^seed = 9$/seed = 1/' "$T/pv.toml"
"$BIN" pretrain-video --config "$T/pv.toml" --set steps=4 --seed 9 --print-config | grep -q "^steps = 4$" \
  && "$BIN" pretrain-video --config "$T/pv.toml" --set steps=4 --seed 9 --print-config | grep -q "^seed = 9$" \
  && ok || bad "--set / a direct option do not win over --config"
"$BIN" pretrain-video --config "$T/pv.toml" --set steps=3 --seed 9 --output "$T/cfg" --quiet >/dev/null 2>&1 \
  && "$BIN" pretrain-video --data "$T/store" --preset tiny --img 32 --patch 8 --frames 4 --batch 4 --steps 3 --threads 2 \
       --seed 9 --output "$T/flags" --quiet >/dev/null 2>&1 \
  && cmp -s "$T/cfg/model/model.safetensors" "$T/flags/model/model.safetensors" && ok || bad "the config's run differs from the flags' run"
printf 'batch = 4\nmask_ratoi = 0.5\n' > "$T/bad.toml"
"$BIN" pretrain-video --config "$T/bad.toml" --data "$T/store" --output "$T/x" >"$T/bad.out" 2>&1 && bad "a bad key was accepted" \
  || { grep -q "bad.toml:2: unknown key 'mask-ratoi'.*did you mean mask-ratio" "$T/bad.out" && ok || bad "bad key message: $(cat "$T/bad.out")"; }
printf 'quiet = "maybe"\n' > "$T/bad2.toml"
"$BIN" pretrain-video --config "$T/bad2.toml" >"$T/bad2.out" 2>&1 && bad "a bad switch value was accepted" \
  || { grep -q "bad2.toml:1: quiet is a switch: true or false" "$T/bad2.out" && ok || bad "switch message: $(cat "$T/bad2.out")"; }

echo "test_video_resume: $pass passed, $fail failed"
[ "$fail" = 0 ]
