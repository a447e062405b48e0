#!/usr/bin/env bash
# Checks bench/gpu/run_full_build.sh (the GPU session's one-call runbook) as a dry run on the CPU
# (DEVICE=cpu, a plain build folder instead of the carried archive): the stages run in the order
# STAGES lists them, the pretrain curves of stage 3 agree (1 process and, with mpirun, 2 ranks),
# an unknown stage is named, DEADLINE_S skips a stage that no longer has time, and stage 10
# (BEVT) runs its tiny pretrain-bevt pair and bench bevt.
#   bash tests/cli/test_run_full_build.sh BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-build}" && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
has() { grep -qE -- "$1" "$2" && ok || bad "expected /$1/ in $2: $(cat "$2")"; }

# Stages 4 then 3 (the reverse of their numbers), and a stage that does not exist.
# MAX_OUT_FILES=3: the dry run writes ~6 files, so the results are archived as on the GPU.
DEVICE=cpu STAGES='4 3 12' MAX_OUT_FILES=3 OUT="$T/a" bash "$ROOT/bench/gpu/run_full_build.sh" "$BUILD" > "$T/a.log" 2>&1
[ $? = 0 ] && ok || bad "rc $? (want 0): $(tail -5 "$T/a.log")"
S="$T/a/summary.txt"
has '^bench infer --device cpu: rc 0 at [0-9]+s, 2 rows$' "$S"
has '^pretrain cpu vs cpu: rc 0' "$S"
has '^dev vs cpu: loss and grad-norm curves rel diff .*: ok$' "$S"
if command -v mpirun > /dev/null; then has '^ranks vs cpu: loss and grad-norm curves rel diff .*: ok$' "$S"; fi
has '^stage 12: no such stage \(1-10\)$' "$S"
first_infer=$(grep -n '^bench infer' "$S" | head -1 | cut -d: -f1)
first_pretrain=$(grep -n '^pretrain cpu vs' "$S" | head -1 | cut -d: -f1)
[ -n "$first_infer" ] && [ -n "$first_pretrain" ] && [ "$first_infer" -lt "$first_pretrain" ] && ok ||
  bad "stage 4 did not run before stage 3 (lines $first_infer, $first_pretrain)"
# At most 8 files come back from the device: over MAX_OUT_FILES, all of them are in results.tgz,
# and only the summary stays beside it.
n_out=$(find "$T/a" -maxdepth 1 -type f | wc -l)
[ "$n_out" = 2 ] && [ -f "$T/a/results.tgz" ] && ok || bad "want summary.txt + results.tgz, got: $(ls "$T/a")"
mkdir -p "$T/x" && tar -xzf "$T/a/results.tgz" -C "$T/x" && [ -s "$T/x/bench_infer.jsonl" ] &&
  cmp -s "$T/x/summary.txt" "$S" && ok || bad "results.tgz lacks bench_infer.jsonl or the summary"

# A deadline with under 45 s left skips the stage, with a note, and runs nothing of it.
DEVICE=cpu DEADLINE_S=30 STAGES='3' OUT="$T/b" bash "$ROOT/bench/gpu/run_full_build.sh" "$BUILD" > "$T/b.log" 2>&1
[ $? = 0 ] && ok || bad "rc with every stage skipped"
has '^stage 3: skipped, [0-9]+ s left before DEADLINE_S=30$' "$T/b/summary.txt"
[ ! -e "$T/b/pretrain.log" ] && ok || bad "a skipped stage wrote pretrain.log"

# Stage 10 (BEVT) as a dry run: the tiny pretrain-bevt on "both" devices agrees, bench bevt runs.
DEVICE=cpu STAGES='10' OUT="$T/c" bash "$ROOT/bench/gpu/run_full_build.sh" "$BUILD" > "$T/c.log" 2>&1
[ $? = 0 ] && ok || bad "stage 10 rc: $(tail -5 "$T/c.log")"
has '^pretrain-bevt --device cpu: rc 0' "$T/c/summary.txt"
has '^pretrain-bevt bevt_cpu vs cpu: 4 / 4 steps, loss rel diff .*: ok$' "$T/c/summary.txt"
has '^bench bevt --device cpu: rc 0 at [0-9]+s: average iter time: ' "$T/c/summary.txt"
has '^finetune-swin --device cpu: rc 0' "$T/c/summary.txt"
has '^finetune-swin device vs cpu: [0-9]+ / [0-9]+ steps, loss rel diff .*: ok$' "$T/c/summary.txt"

echo "run_full_build (DEVICE=cpu): $pass passed, $fail failed"
[ "$fail" = 0 ]
