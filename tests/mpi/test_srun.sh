#!/usr/bin/env bash
# Data-parallel runs started by Slurm (issue 5: "mpirun -np N ...; also started under srun"):
#   1. `srun -n 2 --mpi=pmix unmask dist-check`: 2 ranks meet through MPI (backend mpi, the
#      all-reduce, broadcast and allgather right on both); `srun -n 1` runs the local backend;
#   2. `srun -n 2 --mpi=none`: Debian's Open MPI has no PMI-2/PMI-1 client, so without the pmix
#      plugin the ranks cannot meet; unmask must fail quickly (never hang) saying there is no PMI/PMIx;
#   3. inside an allocation, Open MPI's mpirun uses Slurm's launcher: `salloc -n 2 mpirun ... dist-check`;
#   4. equivalence: `srun -n 2 --mpi=pmix unmask pretrain` at batch 3 and `srun -n 3` at batch 2 give the
#      loss and gradient-norm curves and final weights of 1 process at batch 6 within 1e-5 (the
#      recipe of test_dp_pretrain.sh); rank 0 alone prints the summary and writes metrics.
# Usage: tests/mpi/test_srun.sh [build/unmask]. Prints "srun: skipped: no Slurm (...)" and exits 0
# without srun or when no Slurm controller answers within 5 s (tests/mpi/slurm_single_node.sh
# starts a single-node Slurm on this machine). Jobs use -O (overcommit) so 3 ranks fit on 2 cores.
set -uo pipefail
source "$(dirname "$0")/../lib/tiny_corpus.sh"
cd "$(dirname "$0")/../.." || exit 1
U=$(readlink -f "${1:-build/unmask}")
if ! command -v srun >/dev/null; then echo "srun: skipped: no Slurm (srun not found)"; exit 0; fi
if ! timeout 5 sinfo -h >/dev/null 2>&1; then
  echo "srun: skipped: no Slurm (no controller answers within 5 s; tests/mpi/slurm_single_node.sh starts one)"
  exit 0
fi
if ! srun --mpi=list 2>&1 | grep -qw pmix; then
  echo "srun: skipped: this Slurm has no mpi/pmix plugin (srun --mpi=list: $(srun --mpi=list 2>&1 | tr -s '\n\t ' ' '))"
  exit 0
fi
W=$(mktemp -d /tmp/unmask-srun-XXXXXX)
trap 'rm -rf "$W"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
run() { UNMASK_DIST_TIMEOUT_S=30 timeout 300 "$@"; }
SRUN=(srun -O --mpi=pmix)

# 1. dist-check: 2 ranks through MPI; 1 task is the local backend
run "${SRUN[@]}" -n 2 "$U" dist-check >"$W/dc2.out" 2>&1
rc=$?
if grep -q "built without MPI" "$W/dc2.out"; then
  echo "srun: skipped: $U was built without MPI"
  exit 0
fi
cat "$W/dc2.out"
[ "$rc" = 0 ] && grep -q '^dist-check: 2 rank(s), backend mpi' "$W/dc2.out" \
  && [ "$(grep -c 'rank [01] of 2 .*allreduce of 1048576 f32 ok .*broadcast ok, allgather ok' "$W/dc2.out")" = 2 ] \
  && ok || bad "srun -n 2 --mpi=pmix dist-check (exit $rc)"
run "${SRUN[@]}" -n 1 "$U" dist-check >"$W/dc1.out" 2>&1 && grep -q '^dist-check: 1 rank(s), backend local' "$W/dc1.out" \
  && ok || bad "srun -n 1 dist-check: $(tail -3 "$W/dc1.out")"

# 2. no PMI: a clean, fast failure
t0=$(date +%s)
UNMASK_DIST_TIMEOUT_S=30 timeout 120 srun -O --mpi=none -n 2 "$U" dist-check >"$W/none.out" 2>&1
rc=$? dt=$(( $(date +%s) - t0 ))
echo "srun --mpi=none: exit $rc after ${dt}s ($(grep -m1 -o 'without a PMI/PMIx interface' "$W/none.out" || tail -1 "$W/none.out"))"
[ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "without a PMI/PMIx interface" "$W/none.out" && ok || bad "srun --mpi=none should fail naming the missing PMI, not hang or pass (exit $rc)"

# 3. salloc + mpirun (Open MPI's plm/slurm starts the ranks with srun itself)
if command -v mpirun >/dev/null; then
  MPIRUN=(mpirun)
  [ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
  run salloc -O -n 2 "${MPIRUN[@]}" "$U" dist-check >"$W/sa.out" 2>&1 && grep -q '^dist-check: 2 rank(s), backend mpi' "$W/sa.out" \
    && [ "$(grep -c 'allreduce of 1048576 f32 ok' "$W/sa.out")" = 2 ] && ok || bad "salloc -n 2 mpirun dist-check: $(tail -3 "$W/sa.out")"
fi

# 4. equivalence (the corpus, shards and config of test_dp_pretrain.sh)
write_tiny_corpus "$W"
"$U" prepare-text --input "$W/corpus.txt" --vocab "$W/vocab.txt" --output "$W/shards" --max-seq 32 --max-pred 5 \
  --dupe-factor 2 >/dev/null 2>&1 && ok || bad "prepare-text"
write_dp_config "$W"
compare() {
  /usr/bin/python3 - "$1" "$2" <<'EOF'
import json, os, sys
import numpy as np
sys.path.insert(0, "tests/python")
import st_io
a, b = sys.argv[1], sys.argv[2]
ra = [json.loads(l) for l in open(os.path.join(a, "metrics.jsonl"))]
rb = [json.loads(l) for l in open(os.path.join(b, "metrics.jsonl"))]
assert len(ra) == len(rb) == 8, (len(ra), len(rb))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(ra, rb) for k in ("loss", "grad_norm"))
wa, _ = st_io.read_safetensors(os.path.join(a, "checkpoints/step-000008/model/model.safetensors"))
wb, _ = st_io.read_safetensors(os.path.join(b, "checkpoints/step-000008/model/model.safetensors"))
# per tensor ||a - b|| / (||a|| + 1e-2), as test_dp_pretrain.sh (the key biases' norms are rounding noise)
wworst = max(np.linalg.norm(wa[k].to_float64() - wb[k].to_float64()) / (np.linalg.norm(wa[k].to_float64()) + 1e-2)
             for k in wa)
print(f"losses {ra[0]['loss']:.6f} .. {ra[-1]['loss']:.6f}: loss and grad-norm curves rel diff {worst:.2e}, "
      f"final weights rel diff {wworst:.2e}")
sys.exit(0 if worst <= 1e-5 and wworst <= 1e-5 and set(wa) == set(wb) else 1)
EOF
}
run "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/r1\"" --quiet >/dev/null 2>&1 && ok || bad "1 process run"
for spec in 2:3 3:2; do
  n=${spec%:*} b=${spec#*:}
  run "${SRUN[@]}" -n "$n" "$U" pretrain --config "$W/dp.toml" --set "output=\"$W/s$n\"" --set batch="$b" --quiet \
    >"$W/s$n.out" 2>&1 && ok || bad "srun -n $n pretrain: $(tail -3 "$W/s$n.out")"
  [ "$(grep -c 'pretrained 8 steps' "$W/s$n.out")" = 1 ] && ok \
    || bad "srun -n $n: expected one summary line (rank 0), got $(grep -c 'pretrained 8 steps' "$W/s$n.out")"
  echo -n "srun -n $n x batch $b vs 1 x 6: "; compare "$W/r1" "$W/s$n" && ok || bad "srun -n $n differs from 1 process"
done

echo "srun: $pass passed, $fail failed"
[ "$fail" = 0 ]
