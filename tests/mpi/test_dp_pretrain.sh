#!/usr/bin/env bash
# Data-parallel BERT pretraining under mpirun (issue 5), run by scripts/test.sh:
#   1. equivalence: 2 ranks x batch 3 and 3 ranks x batch 2 give the loss and gradient-norm curves of 1 rank x batch 6
#      (fp32, dropout off, accumulation 2) within 1e-5, and final weights within 1e-5 (per tensor,
#      norm-relative); the all-reduce overlapped with the backward gives exactly the numbers of one
#      after it;
#   2. resume with a different number of ranks: 2 ranks stop after 4 steps, 3 ranks resume to 8 ->
#      the same curve, no "config differs" warning; rank 0 alone writes checkpoints and metrics;
#   3. a rank killed mid-run (SIGKILL): every rank is gone within 60 s, mpirun exits non-zero and
#      names the lost rank; `--resume` then finishes the run from the last complete checkpoint;
#   4. VideoMAE pretraining: 2 ranks x 4 clips == 1 rank x 8 clips (loss and gradient norms, 1e-5), each
#      rank's loader reading only its clips of every global batch; the all-reduce overlapped with the
#      backward gives the bits of one after it; each rank its own store (mode 2); VideoMAE
#      fine-tuning: 2 ranks x 2 clips == 1 rank x 4 clips (loss, grad-norm and accuracy curves,
#      1e-5) with drop path and head dropout on (each rank draws the global batch's masks for its
#      clips), and a 2-rank run with mixup/cutmix (mixed within each rank) finishes and evaluates;
#      BERT fine-tuning (classify, tokens, squad; dropout off): 2 ranks x 2 == 1 x 4 and 3 ranks
#      x 2 == 1 x 6 (loss and grad-norm curves, 1e-5);
#   5. `unmask bench scaling` (BEVT's table) with 1 and 2 ranks;
#   6. per-rank reading (data_sharding = files / local): a 2-rank run stopped and resumed on 2 ranks
#      gives the uninterrupted curve (every rank's loader position is in the checkpoint); resumed on
#      3 ranks it says the data restarts at a new epoch; more ranks than shards is a clear error;
#      local parts of different sizes train, and the ranks' counts are reported.
# Usage: tests/mpi/test_dp_pretrain.sh [build/unmask]. "skipped: no MPI" without mpirun.
set -uo pipefail
source "$(dirname "$0")/../lib/tiny_corpus.sh"
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
if ! command -v mpirun >/dev/null; then echo "dp pretrain: skipped: no MPI (mpirun not found)"; exit 0; fi
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
W=$(mktemp -d /tmp/unmask-dp-XXXXXX)
trap 'rm -rf "$W"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

write_tiny_corpus "$W"
"$U" prepare-text --input "$W/corpus.txt" --vocab "$W/vocab.txt" --output "$W/shards" --max-seq 32 --max-pred 5 \
  --dupe-factor 2 >/dev/null 2>&1 && ok || bad "prepare-text"
write_dp_config "$W"
run() { UNMASK_DIST_TIMEOUT_S=30 timeout 300 "$@"; }

# compare A B: loss curves (metrics.jsonl) and final weights within 1e-5
compare() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests/python")
import st_io
a, b = sys.argv[1], sys.argv[2]
la = [json.loads(l)["loss"] for l in open(os.path.join(a, "metrics.jsonl"))]
lb = [json.loads(l)["loss"] for l in open(os.path.join(b, "metrics.jsonl"))]
assert len(la) == len(lb) == 8, (len(la), len(lb))
worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb))
# the gradient norms too: Adam is nearly scale-invariant, so a wrong gradient scale (e.g. a mean
# instead of the sum of the ranks' global-normalised gradients) barely moves the losses
ga = [json.loads(l)["grad_norm"] for l in open(os.path.join(a, "metrics.jsonl"))]
gb = [json.loads(l)["grad_norm"] for l in open(os.path.join(b, "metrics.jsonl"))]
worst = max([worst] + [abs(x - y) / abs(x) for x, y in zip(ga, gb)])
wa, _ = st_io.read_safetensors(os.path.join(a, "checkpoints/step-000008/model/model.safetensors"))
wb, _ = st_io.read_safetensors(os.path.join(b, "checkpoints/step-000008/model/model.safetensors"))
# per tensor ||a - b|| / (||a|| + 1e-2): the key biases get zero gradient (softmax ignores them),
# so their norm is ~1e-8 of rounding noise and a pure relative error would be meaningless there
wworst = max(np.linalg.norm(wa[k].to_float64() - wb[k].to_float64()) / (np.linalg.norm(wa[k].to_float64()) + 1e-2)
             for k in wa)
# The weights' spread comes from the ranks' summation order, amplified by LAMB's normalisation
# where second moments are tiny: with the fixed corpus (tests/lib/tiny_corpus.sh) 1.8e-6 to 2.1e-6;
# when the corpus changed from run to run (a bash RANDOM-in-subshell bug, fixed) it reached 1.1e-5.
print(f"loss and grad-norm curves rel diff {worst:.2e}, final weights rel diff {wworst:.2e}")
sys.exit(0 if worst <= 1e-5 and wworst <= 1e-5 and set(wa) == set(wb) else 1)
EOF
}

# 1. equivalence
run "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/r1\"" --quiet >/dev/null 2>&1 && ok || bad "1 rank run"
run "${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/r2\"" --set batch=3 --quiet \
  >"$W/r2.out" 2>&1 && ok || bad "2 rank run: $(tail -3 "$W/r2.out")"
run "${MPIRUN[@]}" -np 3 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/r3\"" --set batch=2 --quiet \
  >"$W/r3.out" 2>&1 && ok || bad "3 rank run: $(tail -3 "$W/r3.out")"
echo -n "2 ranks x 3 vs 1 x 6: "; compare "$W/r1" "$W/r2" && ok || bad "2 ranks differ from 1"
# the all-reduce overlapped with the backward (the default) and after it: the same bits
run "${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/r2s\"" --set batch=3 \
  --set overlap_allreduce=false --quiet >/dev/null 2>&1 && ok || bad "2 rank run without overlap"
/usr/bin/python3 -c "
import json, sys
f = lambda d: [(r['loss'], r['grad_norm']) for r in map(json.loads, open(d + '/metrics.jsonl'))]
sys.exit(0 if f(sys.argv[1]) == f(sys.argv[2]) else 1)" "$W/r2" "$W/r2s" && ok \
  || bad "overlapped and non-overlapped all-reduce give different numbers"
echo -n "3 ranks x 2 vs 1 x 6: "; compare "$W/r1" "$W/r3" && ok || bad "3 ranks differ from 1"
[ "$(grep -c 'pretrained 8 steps' "$W/r2.out")" = 1 ] && ok || bad "expected one summary line (rank 0), got $(grep -c 'pretrained 8 steps' "$W/r2.out")"
[ "$(wc -l < "$W/r2/metrics.jsonl")" = 8 ] && ok || bad "metrics.jsonl should have 8 rows (rank 0 only)"

# 2. resume on another rank count
run "${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/rr\"" --set batch=3 --stop-after 4 \
  --quiet >/dev/null 2>&1 && ok || bad "2 ranks, 4 steps"
run "${MPIRUN[@]}" -np 3 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/rr\"" --set batch=2 --resume \
  >"$W/rr.out" 2>&1 && ok || bad "3 ranks resume: $(tail -3 "$W/rr.out")"
grep -q "config differs" "$W/rr.out" && bad "resuming on 3 ranks warned that the config differs" || ok
echo -n "2 ranks then 3 ranks (resumed) vs 1 x 6: "; compare "$W/r1" "$W/rr" && ok || bad "resumed run differs"

# 3. a rank killed mid-run
"${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/kill\"" --set batch=3 --set steps=100000 \
  --set checkpoint_every=5 --quiet >"$W/kill.out" 2>&1 &
mpipid=$!
for _ in $(seq 1 600); do
  [[ -f "$W/kill/metrics.jsonl" && $(wc -l < "$W/kill/metrics.jsonl") -ge 12 ]] && break
  sleep 0.1
done
victim=$(pgrep -f "output=\"$W/kill\"" | while read -r p; do
  [ "$(ps -o comm= -p "$p")" = unmask ] && echo "$p"; done | tail -1)
t0=$(date +%s)
if [ -n "$victim" ]; then kill -9 "$victim"; else bad "no rank process found to kill"; fi
for _ in $(seq 1 600); do kill -0 "$mpipid" 2>/dev/null || break; sleep 0.1; done
wait "$mpipid"; rc=$?
dt=$(( $(date +%s) - t0 ))
left=$(pgrep -f "output=\"$W/kill\"" | wc -l)
echo "killed rank: mpirun exit $rc after ${dt}s, $left processes left"
[ "$rc" != 0 ] && [ "$dt" -le 60 ] && [ "$left" = 0 ] && ok || bad "after a SIGKILL: exit $rc in ${dt}s with $left processes left"
grep -qi "rank" "$W/kill.out" && grep -qi "signal 9\|killed" "$W/kill.out" && ok || bad "mpirun did not name the lost rank: $(tail -5 "$W/kill.out")"
last=$(ls "$W/kill/checkpoints" 2>/dev/null | tail -1)
[ -n "$last" ] && ok || bad "no checkpoint before the kill"
run "${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/kill\"" --set batch=3 --set steps=100000 \
  --set checkpoint_every=5 --resume --stop-after 2 >"$W/resume.out" 2>&1 \
  && grep -q "resumed from $W/kill/checkpoints/$last" "$W/resume.out" && ok \
  || bad "resume after the kill: $(tail -3 "$W/resume.out")"

# 4. VideoMAE: 2 ranks x 4 clips give the loss and gradient-norm curves of 1 rank x 8 clips
"$U" make-videos --output "$W/v" --videos-per-class 4 --width 64 --height 48 --frames 16 >/dev/null 2>&1 \
  && "$U" prepare-video --list "$W/v/train_videomae.txt" --output "$W/v.ucs" --short-side 32 --quiet >/dev/null 2>&1 \
  && ok || bad "video data"
vargs=(--data "$W/v.ucs" --preset tiny --patch 8 --steps 6 --lr 1e-3 --threads 1 --log-every 100)
run "$U" pretrain-video "${vargs[@]}" --output "$W/v1" --batch 8 >/dev/null 2>&1 && ok || bad "videomae 1 rank"
run "${MPIRUN[@]}" -np 2 "$U" pretrain-video "${vargs[@]}" --output "$W/v2" --batch 4 >"$W/v2.out" 2>&1 \
  && ok || bad "videomae 2 ranks: $(tail -3 "$W/v2.out")"
/usr/bin/python3 - "$W/v1/metrics.jsonl" "$W/v2/metrics.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 6, (len(a), len(b))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "grad_norm"))
print(f"VideoMAE 2 ranks x 4 vs 1 x 8: loss and grad-norm curves rel diff {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
EOF
[ $? = 0 ] && ok || bad "VideoMAE 2 ranks differ from 1"
# the all-reduce overlapped with the backward (the default) and after it: the same bits
run "${MPIRUN[@]}" -np 2 "$U" pretrain-video "${vargs[@]}" --output "$W/v2s" --batch 4 --no-overlap >/dev/null 2>&1 \
  && /usr/bin/python3 -c "
import json, sys
f = lambda p: [(r['loss'], r['grad_norm']) for r in map(json.loads, open(p))]
sys.exit(0 if f(sys.argv[1]) == f(sys.argv[2]) and len(f(sys.argv[1])) == 6 else 1)" "$W/v2/metrics.jsonl" "$W/v2s/metrics.jsonl" \
  && ok || bad "VideoMAE: overlapped and non-overlapped all-reduce give different numbers"
# mode 2: each rank its own store (different sizes), resampled to the larger count
head -n 5 "$W/v/train_videomae.txt" > "$W/vpart0.txt" && tail -n +6 "$W/v/train_videomae.txt" > "$W/vpart1.txt" \
  && "$U" prepare-video --list "$W/vpart0.txt" --output "$W/vl0.ucs" --short-side 32 --quiet >/dev/null 2>&1 \
  && "$U" prepare-video --list "$W/vpart1.txt" --output "$W/vl1.ucs" --short-side 32 --quiet >/dev/null 2>&1 \
  && ok || bad "video parts"
nv1=$(wc -l < "$W/vpart1.txt")
run "${MPIRUN[@]}" -np 2 "$U" pretrain-video "${vargs[@]}" --data "$W/vl{rank}.ucs" --data-sharding local --output "$W/vl" \
  --batch 4 >"$W/vl.out" 2>&1 && grep -q "the ranks hold 5, $nv1 videos; each epoch visits $nv1 on every rank" "$W/vl.out" \
  && [ "$(wc -l < "$W/vl/metrics.jsonl")" = 6 ] && ok || bad "VideoMAE local sharding: $(tail -3 "$W/vl.out")"

# 4b. VideoMAE fine-tuning: 2 ranks x 2 clips give the curves of 1 rank x 4 clips
fargs_v=(--data "$W/v.ucs" --preset tiny --patch 8 --epochs 3 --lr 1e-3 --threads 1 --log-every 100
         --mixup 0 --cutmix 0 --drop-path 0.2 --head-dropout 0.5 --smoothing 0.1)
run "$U" finetune-video "${fargs_v[@]}" --output "$W/fv1" --batch 4 >"$W/fv1.out" 2>&1 \
  && ok || bad "finetune-video 1 rank: $(tail -3 "$W/fv1.out")"
run "${MPIRUN[@]}" -np 2 "$U" finetune-video "${fargs_v[@]}" --output "$W/fv2" --batch 2 >"$W/fv2.out" 2>&1 \
  && grep -q "data parallel over 2 ranks" "$W/fv2.out" && ok || bad "finetune-video 2 ranks: $(tail -3 "$W/fv2.out")"
/usr/bin/python3 - "$W/fv1/metrics.jsonl" "$W/fv2/metrics.jsonl" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) >= 3, (len(a), len(b))
assert all(x["samples"] == y["samples"] for x, y in zip(a, b)), "the ranks' samples do not add up to the batch"
worst = max(abs(x[k] - y[k]) / max(abs(x[k]), 1e-12) for x, y in zip(a, b) for k in ("loss", "grad_norm"))
acc = max(abs(x["accuracy"] - y["accuracy"]) for x, y in zip(a, b))
print(f"finetune-video 2 ranks x 2 vs 1 x 4 ({len(a)} steps): loss and grad-norm rel diff {worst:.2e}, accuracy diff {acc}")
sys.exit(0 if worst <= 1e-5 and acc == 0 else 1)
EOF
[ $? = 0 ] && ok || bad "finetune-video: 2 ranks differ from 1"
run "${MPIRUN[@]}" -np 2 "$U" finetune-video --data "$W/v.ucs" --val "$W/v.ucs" --preset tiny --patch 8 --epochs 1 \
  --threads 1 --batch 2 --test-segments 1 --test-crops 1 --output "$W/fvm" >"$W/fvm.out" 2>&1 \
  && [ "$(grep -c '"top1"' "$W/fvm.out")" = 1 ] && [ -f "$W/fvm/model/config.json" ] \
  && ok || bad "finetune-video 2 ranks with mixup: $(tail -3 "$W/fvm.out")"

# 4c. BERT fine-tuning (dropout off): 2 ranks x 2 features and 3 ranks x 2 give the curves of one
# rank x 4 / x 6, every task (the label counts of each global batch divide every rank's loss)
/usr/bin/python3 tests/python/make_bert_checkpoint.py --out "$W/bm" --size tiny --heads pretraining --seed 3 >/dev/null \
  && ok || bad "tiny BERT checkpoint"
FD=tests/data/finetune
ft_curves() {  # A B: loss and grad-norm curves equal within 1e-5
  /usr/bin/python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) and len(a) >= 2, (len(a), len(b))
assert all(x["samples"] == y["samples"] for x, y in zip(a, b)), "the ranks' features do not add up to the batch"
worst = max(abs(x[k] - y[k]) / max(abs(x[k]), 1e-12) for x, y in zip(a, b) for k in ("loss", "grad_norm"))
print(f"finetune {sys.argv[3]} ({len(a)} steps): loss and grad-norm rel diff {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
EOF
}
for spec in "classify:$FD/mrpc_train.tsv" "tokens:$FD/tokens_train.txt" "squad:$FD/squad_train.json"; do
  task=${spec%%:*} data=${spec#*:}
  bargs=(--task "$task" --init-from "$W/bm" --data "$data" --epochs 2 --threads 1 --log-every 100 --lr 1e-4
         --hidden-dropout 0 --attention-dropout 0 --warmup 0)
  [ "$task" = squad ] && bargs+=(--max-seq 64)
  run "$U" finetune "${bargs[@]}" --batch 4 --output "$W/b1_$task" >"$W/b1_$task.out" 2>&1 \
    && ok || bad "finetune $task 1 rank: $(tail -3 "$W/b1_$task.out")"
  run "${MPIRUN[@]}" -np 2 "$U" finetune "${bargs[@]}" --batch 2 --output "$W/b2_$task" >"$W/b2_$task.out" 2>&1 \
    && grep -q "data parallel over 2 ranks" "$W/b2_$task.out" && ok || bad "finetune $task 2 ranks: $(tail -3 "$W/b2_$task.out")"
  ft_curves "$W/b1_$task-run" "$W/b2_$task-run" "$task 2 ranks x 2 vs 1 x 4" && ok || bad "finetune $task: 2 ranks differ from 1"
done
# 3 ranks x 2 = 6 on 32 features: the epoch's last batch of 2 leaves ranks 1 and 2 none
bargs=(--task classify --init-from "$W/bm" --data "$FD/sst_train.tsv" --epochs 2 --threads 1 --log-every 100
       --lr 1e-4 --hidden-dropout 0 --attention-dropout 0 --warmup 0)
run "$U" finetune "${bargs[@]}" --batch 6 --output "$W/b6" >/dev/null 2>&1 \
  && run "${MPIRUN[@]}" -np 3 "$U" finetune "${bargs[@]}" --batch 2 --output "$W/b32" >"$W/b32.out" 2>&1 \
  && ft_curves "$W/b6-run" "$W/b32-run" "classify 3 ranks x 2 vs 1 x 6" && ok || bad "finetune 3 ranks: $(tail -3 "$W/b32.out")"

# 5. bench scaling: one JSON row per rank count, global batch = ranks x mini-batch, positive times
run "$U" bench scaling --model videomae-tiny --ranks 1,2 --batch 4 --steps 3 --warmup 1 --format json >"$W/sc.json" 2>"$W/sc.err" \
  && /usr/bin/python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r['devices'] for r in rows] == [1, 2], rows
assert [r['global_batch'] for r in rows] == [4, 8], rows
assert all(r['s_per_it'] > 0 and r['samples_per_s'] > 0 for r in rows), rows
assert abs(rows[0]['efficiency'] - 1) < 1e-12, rows
" "$W/sc.json" && ok || bad "bench scaling: $(cat "$W/sc.err" "$W/sc.json" | tail -3)"

# 6. per-rank reading
"$U" prepare-text --input "$W/corpus.txt" --vocab "$W/vocab.txt" --output "$W/shards4" --max-seq 32 --max-pred 5 \
  --dupe-factor 2 --shards 4 >/dev/null 2>&1 && ok || bad "prepare-text --shards 4"
fargs=(--config "$W/dp.toml" --set "data=\"$W/shards4\"" --set 'data_sharding="files"' --set batch=3)
run "${MPIRUN[@]}" -np 2 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f1\"" --quiet >"$W/f1.out" 2>&1 \
  && ok || bad "files sharding, 2 ranks: $(tail -3 "$W/f1.out")"
run "${MPIRUN[@]}" -np 2 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f2\"" --stop-after 4 --quiet >/dev/null 2>&1 \
  && run "${MPIRUN[@]}" -np 2 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f2\"" --resume >"$W/f2.out" 2>&1 \
  && ok || bad "files sharding, stop + resume: $(tail -3 "$W/f2.out")"
/usr/bin/python3 - "$W/f1" "$W/f2" "$W/r1" <<'EOF'
import json, sys
f = lambda d: [(r["loss"], r["grad_norm"]) for r in map(json.loads, open(d + "/metrics.jsonl"))]
a, b, one = f(sys.argv[1]), f(sys.argv[2]), f(sys.argv[3])
assert len(a) == len(b) == 8, (len(a), len(b))
assert a == b, f"stopped + resumed differs from uninterrupted: {a} vs {b}"
assert a != one, "per-rank file reading gave exactly the batch-sharded curve: are the ranks reading their own shards?"
st = json.load(open(sys.argv[1] + "/checkpoints/step-000008/trainer_state.json"))
assert st["data_sharding"] == "files" and len(st["rank_loaders"]) == 2, st
assert all(p["sample_index"] > 0 or p["file_index"] > 0 or p["epoch"] > 0 for p in st["rank_loaders"]), st["rank_loaders"]
print("files sharding: stopped at 4 + resumed == uninterrupted (8 steps, bitwise); positions", st["rank_loaders"])
EOF
[ $? = 0 ] && ok || bad "files sharding resume"
run "${MPIRUN[@]}" -np 2 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f3\"" --stop-after 4 --quiet >/dev/null 2>&1 \
  && run "${MPIRUN[@]}" -np 3 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f3\"" --set batch=2 --resume >"$W/f3.out" 2>&1 \
  && grep -q 'every rank starts data epoch' "$W/f3.out" && ok || bad "files sharding, 2 -> 3 ranks: $(tail -3 "$W/f3.out")"
run "${MPIRUN[@]}" -np 5 "$U" pretrain "${fargs[@]}" --set "output=\"$W/f5\"" --set batch=1 >"$W/f5.out" 2>&1 \
  && bad "5 ranks on 4 shards should fail" || { grep -q '4 shard(s) for 5 ranks' "$W/f5.out" && ok || bad "5 ranks on 4 shards: $(tail -3 "$W/f5.out")"; }
mkdir -p "$W/loc0" "$W/loc1"
cp "$W"/shards4/shard_0000[012].hdf5 "$W/loc0/" && cp "$W/shards4/shard_00003.hdf5" "$W/loc1/"
run "${MPIRUN[@]}" -np 2 "$U" pretrain --config "$W/dp.toml" --set "data=\"$W/loc{rank}\"" --set 'data_sharding="local"' \
  --set batch=3 --set "output=\"$W/l1\"" >"$W/l1.out" 2>&1 && ok || bad "local sharding: $(tail -3 "$W/l1.out")"
count() { /usr/bin/python3 -c "import h5py,glob,sys; print(sum(len(h5py.File(f)['next_sentence_labels']) for f in glob.glob(sys.argv[1] + '/*.hdf5')))" "$1"; }
n0=$(count "$W/loc0") n1=$(count "$W/loc1")
grep -q "the ranks hold $n0, $n1 instances" "$W/l1.out" && [ "$(wc -l < "$W/l1/metrics.jsonl")" = 8 ] && ok \
  || bad "local sharding should report $n0, $n1 instances and train 8 steps: $(grep 'ranks hold' "$W/l1.out")"

echo "dp pretrain: $pass passed, $fail failed"
[ "$fail" = 0 ]
