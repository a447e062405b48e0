#!/usr/bin/env bash
# `unmask finetune` / `unmask eval` on good and bad input: exit codes, the words of each message,
# and the files a run writes. Uses the fixtures of tests/data/finetune/ and a tiny random HF
# checkpoint made with PyTorch (tests/python/make_bert_checkpoint.py).
#   bash tests/cli/test_finetune_cli.sh [build/unmask]
set -uo pipefail
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
D=tests/data/finetune
W=$(mktemp -d /tmp/unmask-ft-cli-XXXXXX)
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 tests/python/make_bert_checkpoint.py --out "$W/m" --size tiny --heads pretraining --seed 3 >/dev/null
pass=0; fail=0

# expect CODE SUBSTRING -- command...   (CODE: exact exit code; SUBSTRING: in stdout+stderr)
expect() {
  local code=$1 want=$2; shift 3
  local out rc
  out=$(timeout 120 "$@" 2>&1); rc=$?
  if [[ $rc == "$code" && "$out" == *"$want"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* -> exit $rc (want $code), output:"; echo "$out" | head -8; echo "(wanted: $want)"
  fi
}
# check DESCRIPTION -- test-command...
check() {
  local what=$1; shift 2
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what"; fi
}
FT=("$U" finetune --init-from "$W/m" --threads 2 --epochs 1 --log-every 1)

# ---- good runs: finetune writes an HF directory that eval reads back with the same metrics ----
expect 0 "exact_match" -- "${FT[@]}" --task squad --data $D/squad_train.json --val $D/squad_dev.json --output "$W/squad" --max-seq 64
for f in config.json model.safetensors vocab.txt tokenizer_config.json eval_results.json predictions.json; do
  check "squad output has $f" -- test -s "$W/squad/$f"
done
check "squad config names the QA architecture" -- grep -q BertForQuestionAnswering "$W/squad/config.json"
expect 0 "\"exact_match\"" -- "$U" eval --task squad --model "$W/squad" --data $D/squad_dev.json --max-seq 64 --format json --predictions "$W/p.json"
check "eval predictions equal the finetune dev predictions" -- cmp -s "$W/p.json" "$W/squad/predictions.json"
em_ft=$(grep exact_match "$W/squad/eval_results.json")
em_eval=$("$U" eval --task squad --model "$W/squad" --data $D/squad_dev.json --max-seq 64 --format json | grep exact_match)
check "eval reproduces the finetune dev EM ($em_ft)" -- test "$em_ft" = "$em_eval"
expect 0 "q1000" -- cat "$W/p.json"

expect 0 "accuracy" -- "${FT[@]}" --task classify --data $D/mrpc_train.tsv --val $D/mrpc_dev.tsv --output "$W/mrpc"
check "classify config has id2label from the training labels" -- grep -q '"1": "1"' "$W/mrpc/config.json"
expect 0 "f1" -- "$U" eval --task classify --model "$W/mrpc" --data $D/mrpc_dev.tsv
expect 0 "wrote $W/sst" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --output "$W/sst" --max-steps 2
expect 0 "step 2/2" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --output "$W/sst" --max-steps 2 --text-a sentence --text-b none --label 1
expect 0 "precision" -- "${FT[@]}" --task tokens --data $D/tokens_train.txt --val $D/tokens_dev.txt --output "$W/tok"
check "tokens config is a token classifier with the BIO labels" -- grep -q '"I-PER"' "$W/tok/config.json"
expect 0 "recall" -- "$U" eval --task tokens --model "$W/tok" --data $D/tokens_dev.txt
expect 0 "usage: unmask finetune" -- "$U" finetune --help
expect 0 "usage: unmask eval" -- "$U" eval --help

# ---- bad input ----
# --output equal to (or inside) --init-from: refused before anything is written; the model is intact.
m_sum=$(cat "$W/m"/* | md5sum)
expect 1 "are the same directory" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --output "$W/m" --max-steps 1
expect 1 "are the same directory" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --output "$W/m/../m/" --max-steps 1
expect 1 "are the same directory" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --output "$W/m/sub" --max-steps 1
[[ "$(cat "$W/m"/* | md5sum)" == "$m_sum" ]] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: the refused finetune changed --init-from"; }
expect 1 "--data is required" -- "$U" finetune --task squad --init-from "$W/m" --output "$W/x"
expect 1 "--task is required" -- "$U" eval --model "$W/squad" --data $D/squad_dev.json
expect 1 "did you mean --task squad?" -- "$U" finetune --task sqaud --init-from "$W/m" --data $D/squad_train.json --output "$W/x"
# predict: the dev files with their labels removed give eval's predictions, with probabilities.
/usr/bin/python3 - "$D" "$W" <<'PY'
import json, sys
d, w = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(f"{d}/mrpc_dev.tsv", encoding="utf-8")]
with open(f"{w}/mrpc_unlabelled.tsv", "w", encoding="utf-8") as f:
    for r in rows: f.write("\t".join(r[1:]) + "\n")  # no Quality column
with open(f"{w}/tokens_unlabelled.txt", "w", encoding="utf-8") as f:
    for l in open(f"{d}/tokens_dev.txt", encoding="utf-8"):
        f.write((l.split()[0] if l.strip() else "") + "\n")
sq = json.load(open(f"{d}/squad_dev.json", encoding="utf-8"))
for a in sq["data"]:
    for p in a["paragraphs"]:
        for q in p["qas"]: del q["answers"]
json.dump(sq, open(f"{w}/squad_unlabelled.json", "w", encoding="utf-8"))
PY
expect 0 "" -- "$U" eval --task classify --model "$W/mrpc" --data $D/mrpc_dev.tsv --predictions "$W/mrpc_eval.json"
expect 0 "" -- "$U" eval --task tokens --model "$W/tok" --data $D/tokens_dev.txt --predictions "$W/tok_eval.json"
expect 0 "" -- "$U" eval --task squad --model "$W/squad" --data $D/squad_dev.json --max-seq 64 --predictions "$W/squad_eval.json"
expect 0 "predictions ->" -- "$U" predict --task classify --model "$W/mrpc" --data "$W/mrpc_unlabelled.tsv" --text-a "#1 String" --text-b "#2 String" --output "$W/mrpc_pred.jsonl"
expect 0 "predictions ->" -- "$U" predict --task tokens --model "$W/tok" --data "$W/tokens_unlabelled.txt" --output "$W/tok_pred.jsonl"
expect 0 "predictions ->" -- "$U" predict --task squad --model "$W/squad" --data "$W/squad_unlabelled.json" --max-seq 64 --output "$W/squad_pred.jsonl"
check "predict equals eval's predictions, probabilities consistent" -- /usr/bin/python3 - "$W" <<'PY'
import json, math, sys
w = sys.argv[1]
lines = lambda p: [json.loads(l) for l in open(p, encoding="utf-8")]
ok = True
cls = lines(f"{w}/mrpc_pred.jsonl")
ok &= [c["label"] for c in cls] == json.load(open(f"{w}/mrpc_eval.json"))
ok &= all(abs(sum(c["probabilities"].values()) - 1) < 1e-9 and c["probability"] == max(c["probabilities"].values()) for c in cls)
tok = lines(f"{w}/tok_pred.jsonl")
ok &= [t["tags"] for t in tok] == json.load(open(f"{w}/tok_eval.json"))
ok &= all(len(t["words"]) == len(t["tags"]) == len(t["probabilities"]) and all(0 < p <= 1 for p in t["probabilities"]) for t in tok)
sq = lines(f"{w}/squad_pred.jsonl")
ok &= {s["id"]: s["answer"] for s in sq} == json.load(open(f"{w}/squad_eval.json"))
ok &= all(0 < s["probability"] <= 1 for s in sq)
sys.exit(0 if ok else 1)
PY
expect 1 "has no label" -- "$U" eval --task tokens --model "$W/tok" --data "$W/tokens_unlabelled.txt"
# infer on a classifier / tagger: the class, or every token's tag, with probabilities
expect 0 "class: " -- "$U" infer --model "$W/mrpc" --text "The horse said lovely." --pair "A cat walked."
expect 0 "tags: [CLS]/" -- "$U" infer --model "$W/tok" --text "John lives in Oslo"
expect 1 "did you mean --task tokens?" -- "$U" eval --task ner --model "$W/tok" --data $D/tokens_dev.txt
expect 1 "did you mean --data" -- "$U" finetune --task squad --init-from "$W/m" --dta $D/squad_train.json --output "$W/x"
# one name per concept across commands: the earlier names say what they are called now
expect 1 "it is --data now" -- "${FT[@]}" --task squad --train $D/squad_train.json --output "$W/x"
expect 1 "it is --val now" -- "${FT[@]}" --task squad --data $D/squad_train.json --dev $D/squad_dev.json --output "$W/x"
expect 1 "it is --init-from now" -- "$U" finetune --task squad --model "$W/m" --data $D/squad_train.json --output "$W/x"
expect 1 "unmask calls it --data" -- "${FT[@]}" --task squad --train_file $D/squad_train.json --output "$W/x"
expect 1 "not found" -- "${FT[@]}" --task squad --data "$W/none.json" --output "$W/x"
expect 1 "nomodel does not exist" -- "$U" finetune --task squad --init-from "$W/nomodel" --data $D/squad_train.json --output "$W/x"
printf '{"data": [' > "$W/bad.json"
expect 1 "is not valid JSON" -- "${FT[@]}" --task squad --data "$W/bad.json" --output "$W/x"
printf '{"version": "1.1"}' > "$W/nodata.json"
expect 1 "has no \"data\"" -- "${FT[@]}" --task squad --data "$W/nodata.json" --output "$W/x"
sed 's/"answer_start": [0-9]*/"answer_start": 0/' $D/squad_train.json > "$W/shifted.json"
expect 1 "every question was skipped" -- "${FT[@]}" --task squad --data "$W/shifted.json" --output "$W/x"
printf 'sentence\tlabel\ngood\t1\nbad\t0\textra\n' > "$W/cols.tsv"
expect 1 "cols.tsv:3: 3 tab-separated columns, but the header has 2" -- "${FT[@]}" --task classify --data "$W/cols.tsv" --output "$W/x"
printf 'x\ty\n1\t2\n' > "$W/layout.tsv"
expect 1 "cannot tell the text and label columns" -- "${FT[@]}" --task classify --data "$W/layout.tsv" --output "$W/x"
expect 1 "\"nope\" is not a column" -- "${FT[@]}" --task classify --data $D/sst_train.tsv --label nope --output "$W/x"
printf 'John B-PER\nlonely\n' > "$W/nolabel.txt"
expect 1 "nolabel.txt:2: \"lonely\" has no label" -- "${FT[@]}" --task tokens --data "$W/nolabel.txt" --output "$W/x"
expect 1 "longer than the model's 512 positions" -- "${FT[@]}" --task squad --data $D/squad_train.json --output "$W/x" --max-seq 600
expect 1 "--batch must be at least 1" -- "${FT[@]}" --task squad --data $D/squad_train.json --output "$W/x" --batch 0
expect 1 "--lr must be a number" -- "${FT[@]}" --task squad --data $D/squad_train.json --output "$W/x" --lr fast
expect 1 "no question-answering (qa_outputs) head" -- "$U" eval --task squad --model "$W/m" --data $D/squad_dev.json
expect 1 "no token-classification" -- "$U" eval --task tokens --model "$W/mrpc" --data $D/tokens_dev.txt
printf 'sentence\tlabel\ngood\tmaybe\n' > "$W/labels.tsv"
expect 1 "label \"maybe\" is not one of the model's labels" -- "$U" eval --task classify --model "$W/mrpc" --data "$W/labels.tsv"
expect 1 "--format must be table or json" -- "$U" eval --task squad --model "$W/squad" --data $D/squad_dev.json --format xml
check "no output directory left by failed runs" -- test ! -e "$W/x"

# The training loop: --stop-after leaves a checkpoint in OUTPUT-run (not in the model directory),
# --resume finishes the run, and the model equals the uninterrupted run's byte for byte.
R=(--task classify --data $D/sst_train.tsv --max-steps 6 --batch 4 --checkpoint-every 2)
expect 0 "fine-tuned 6 steps" -- "${FT[@]}" "${R[@]}" --output "$W/ra"
expect 0 "fine-tuned 3 steps (step 0 -> 3 of 6)" -- "${FT[@]}" "${R[@]}" --output "$W/rb" --stop-after 3
check "no model before the run ends" -- test ! -e "$W/rb/model.safetensors"
check "checkpoint beside the output" -- test -f "$W/rb-run/checkpoints/step-000003/trainer_state.json"
expect 0 "fine-tuned 3 steps (step 3 -> 6 of 6)" -- "${FT[@]}" "${R[@]}" --output "$W/rb" --resume
check "resumed model = uninterrupted model" -- cmp "$W/ra/model.safetensors" "$W/rb/model.safetensors"
check "the model directory holds no run state" -- test ! -e "$W/ra/checkpoints" -a ! -e "$W/ra/optimizer.safetensors"
check "metrics.jsonl of the run" -- test "$(wc -l < "$W/rb-run/metrics.jsonl")" = 6

# The same options from a config file: --print-config writes them, --config reads them, --set and
# direct options win; the run equals the flags' run byte for byte.
"${FT[@]}" "${R[@]}" --output "$W/rc" --print-config > "$W/ft.toml"
check "print-config lists the options with their help" -- grep -q '^max_steps = 6$' "$W/ft.toml"
sed -i 's/^max_steps = 6$/max_steps = 2/' "$W/ft.toml"
expect 0 "fine-tuned 6 steps" -- "$U" finetune --config "$W/ft.toml" --set max_steps=6 --output "$W/rc"
check "config run = flags run" -- cmp "$W/ra/model.safetensors" "$W/rc/model.safetensors"
expect 1 "unknown key 'learning-rate'" -- "$U" finetune --config "$W/ft.toml" --set learning_rate=1 --output "$W/rd"

echo "finetune CLI: $pass passed, $fail failed"
[[ $fail == 0 ]]
