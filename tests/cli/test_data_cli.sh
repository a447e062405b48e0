#!/usr/bin/env bash
# `unmask prepare-text` on good and bad input: exit codes and the words of each message.
#   bash tests/cli/test_data_cli.sh [build/unmask]
# Uses the repository's bert-base-uncased vocab (data/bert-base-uncased-vocab.txt). Every case
# must exit as expected and print the expected text; no case may crash (exit >= 128) or hang
# (each runs under a 60 s timeout). With /usr/bin/python3 + h5py the shards are also checked
# by tests/python/check_shards.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
U=$(readlink -f "${1:-build/unmask}")
V=$(readlink -f data/bert-base-uncased-vocab.txt)
[[ -f "$V" ]] || { echo "test_data_cli: data/bert-base-uncased-vocab.txt not found (it is part of the repository)"; exit 1; }
W=$(mktemp -d /tmp/unmask-data-cli-XXXXXX)
trap 'chmod -R u+w "$W" 2>/dev/null; rm -rf "$W"' EXIT
pass=0; fail=0

# expect CODE SUBSTRING -- command...   (CODE: exact exit code; SUBSTRING: in stdout+stderr)
expect() {
  local code=$1 want=$2; shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1); rc=$?
  if [[ $rc == "$code" && "$out" == *"$want"* ]]; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $* -> exit $rc (want $code), output:"; echo "$out" | head -5; echo "(wanted: $want)"
  fi
}
check() {  # check NAME CONDITION...: a plain assertion
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}

{
  for d in 1 2 3 4 5 6 7 8; do
    for s in 1 2 3 4 5 6; do echo "document $d has sentence number $s with some words in it about topic $d."; done
    echo
  done
} > "$W/corpus.txt"
printf 'The first document. It has sentences! Does it? Yes.\nMr. Smith wrote the second one. It is short.\n' > "$W/docs.txt"
P=(prepare-text --vocab "$V" --quiet)

expect 0 "usage: unmask prepare-text" -- "$U" prepare-text --help
expect 0 "8 documents, 48 sentences" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/out" --shards 2
check "two shards written" test -f "$W/out/shard_00000.hdf5" -a -f "$W/out/shard_00001.hdf5"
expect 0 "2 documents, 6 sentences" -- "$U" "${P[@]}" --input "$W/docs.txt" --output "$W/docs" --format documents
expect 0 "3 file(s), 24 documents" -- "$U" "${P[@]}" --input "$W/corpus.txt" --input "$W/corpus.txt,$W/corpus.txt" --output "$W/rep"
# Into a directory with shards of an earlier run: refused (they would mix), untouched; --force clears them.
sum_before=$(cat "$W/out"/*.hdf5 | md5sum)
expect 1 "already holds 2 shard file(s)" -- "$U" "${P[@]}" --input "$W/docs.txt" --output "$W/out" --format documents
check "refused run left the shards" test "$(cat "$W/out"/*.hdf5 | md5sum)" = "$sum_before"
expect 0 "removed 2 shard file(s)" -- "$U" "${P[@]}" --input "$W/docs.txt" --output "$W/out" --format documents --force
check "--force: only the new shard" test "$(cd "$W/out" && ls *.hdf5)" = "shard_00000.hdf5"
expect 1 "overlap: the shards would be written among" -- "$U" "${P[@]}" --input "$W" --output "$W/inside"
check "the shards' casing beside them" grep -q '"do_lower_case": true' "$W/out/tokenizer_config.json"
# train-vocab: a vocabulary from the corpus that prepare-text can use; refusals.
expect 0 "train-vocab: 60 tokens" -- "$U" train-vocab --input "$W/corpus.txt" --output "$W/tv" --vocab-size 60 --min-frequency 1
expect 0 "stopped early: every word is one token" -- "$U" train-vocab --input "$W/corpus.txt" --output "$W/tvall" --vocab-size 500 --min-frequency 1
check "trained vocab: special tokens first" test "$(head -5 "$W/tv/vocab.txt" | tr '\n' ' ')" = "[PAD] [UNK] [CLS] [SEP] [MASK] "
check "trained vocab: 60 lines" test "$(wc -l < "$W/tv/vocab.txt")" = 60
expect 0 "1 file(s), 8 documents" -- "$U" prepare-text --vocab "$W/tv/vocab.txt" --quiet --input "$W/corpus.txt" --output "$W/tvshards"
expect 1 "vocab.txt exists" -- "$U" train-vocab --input "$W/corpus.txt" --output "$W/tv" --vocab-size 60
expect 0 "train-vocab" -- "$U" train-vocab --input "$W/corpus.txt" --output "$W/tv" --vocab-size 60 --force
expect 1 "--vocab-size must be in [6, 10000000]" -- "$U" train-vocab --input "$W/corpus.txt" --output "$W/tv2" --vocab-size 3
expect 1 "does not exist" -- "$U" train-vocab --input "$W/nope.txt" --output "$W/tv3"
mkdir -p "$W/dir/sub" && cp "$W/corpus.txt" "$W/dir/a.txt" && cp "$W/corpus.txt" "$W/dir/sub/b.txt" && echo "hidden" > "$W/dir/.hidden"
expect 0 "2 file(s), 16 documents" -- "$U" "${P[@]}" --input "$W/dir" --output "$W/fromdir"
# determinism: 1 and 2 threads write the same bytes; another seed does not
"$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/t1" --threads 1 --seed 3 >/dev/null 2>&1
"$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/t2" --threads 2 --seed 3 >/dev/null 2>&1
"$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/t3" --threads 2 --seed 4 >/dev/null 2>&1
check "same seed, 1 vs 2 threads: identical shards" cmp -s "$W/t1/shard_00000.hdf5" "$W/t2/shard_00000.hdf5"
differ() { ! cmp -s "$1" "$2"; }
check "another seed: different shards" differ "$W/t1/shard_00000.hdf5" "$W/t3/shard_00000.hdf5"
# invalid UTF-8 lines are skipped and counted, with the first file:line
printf 'good line one\nbad \xff line\ngood line two\n\nnext doc\n' > "$W/bad_line.txt"
expect 0 "skipped 1 line(s) of invalid UTF-8 (the first at $W/bad_line.txt:2)" -- "$U" "${P[@]}" --input "$W/bad_line.txt" --output "$W/bl"
if /usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1; then
  expect 0 "check_shards: OK" -- /usr/bin/python3 tests/python/check_shards.py check "$W/out/shard_00000.hdf5" --seq 128 --pred 20
fi

# bad input
: > "$W/empty.txt"
expect 1 "empty.txt is empty" -- "$U" "${P[@]}" --input "$W/empty.txt" --output "$W/o"
printf '\n  \n\n' > "$W/blank.txt"
expect 1 "blank.txt is empty" -- "$U" "${P[@]}" --input "$W/blank.txt" --output "$W/o"
head -c 4096 "$U" > "$W/binary.bin"
expect 1 "binary.bin looks binary: NUL byte" -- "$U" "${P[@]}" --input "$W/binary.bin" --output "$W/o"
printf 'caf\xe9\nna\xefve\nok\n' > "$W/latin1.txt"
expect 1 "latin1.txt looks binary or is not UTF-8: 2 of 3 non-blank lines" -- "$U" "${P[@]}" --input "$W/latin1.txt" --output "$W/o"
expect 1 "missing.txt does not exist" -- "$U" "${P[@]}" --input "$W/missing.txt" --output "$W/o"
mkdir -p "$W/emptydir"
expect 1 "emptydir holds no files" -- "$U" "${P[@]}" --input "$W/emptydir" --output "$W/o"
expect 1 "cannot open $W/no-vocab.txt" -- "$U" prepare-text --input "$W/corpus.txt" --vocab "$W/no-vocab.txt" --output "$W/o"
expect 1 "--input is required" -- "$U" prepare-text --vocab "$V" --output "$W/o"
expect 1 "--vocab is required" -- "$U" prepare-text --input "$W/corpus.txt" --output "$W/o"
expect 1 "cannot create output directory $W/corpus.txt/sub" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/corpus.txt/sub"
if [[ $(id -u) != 0 ]]; then  # root writes anywhere: only a non-root user sees a read-only directory
  mkdir -p "$W/ro" && chmod 555 "$W/ro"
  expect 1 "is not writable" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/ro"
fi
expect 1 "--format must be sentences or documents" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --format xml
expect 1 "max_seq_length must be in [5, 4096]" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --max-seq 3
expect 1 "max_predictions_per_seq must be in [1, max_seq_length = 128]" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --max-pred 0
expect 1 "--masked-lm-prob must be a number" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --masked-lm-prob abc
expect 1 "masked_lm_prob must be in (0, 1]" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --masked-lm-prob 1.5
expect 1 "dupe_factor must be >= 1" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --dupe-factor 0
expect 1 "instances for 5000 shards" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --shards 5000
expect 1 "did you mean --shards" -- "$U" "${P[@]}" --input "$W/corpus.txt" --output "$W/o" --shard 2

echo "$pass passed, $fail failed"
[[ $fail == 0 ]]
