#!/usr/bin/env bash
# fuzz/run_fuzzers.sh: build every fuzz/fuzz_*.cc libFuzzer target and run each for a bounded
# time. Exits non-zero if a target fails to build or the fuzzer finds a crash, a leak, a
# timeout or undefined behaviour (UBSan is made fatal).
#
#   bash fuzz/run_fuzzers.sh [SECONDS_PER_TARGET]     # default 30
#
# Environment: CXX (default clang++), JOBS (compile jobs, default 2), FUZZ_BUILD_DIR (default
# build-fuzz; objects, binaries, the growing corpora and crash artifacts land there).
#
# Each target links the parser-side library sources (src/core, src/io, the tokenizer in src/data/text) compiled with
# the sanitizers. Files that need BLAS or the thread pool (they include cpu/, cblas or the
# context) are left out: no fuzz target needs them and they would drag in OpenBLAS.
# Seeds come from fuzz/corpus_<stem>/ (fuzz_safetensors.cc -> fuzz/corpus_safetensors/) and
# a dictionary from fuzz/fuzz_<stem>.dict when present; the committed seed folders are only
# read, new inputs go to the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-30}
CXX=${CXX:-clang++}
JOBS=${JOBS:-2}
OUT=${FUZZ_BUILD_DIR:-build-fuzz}
FLAGS=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined
       -fno-sanitize-recover=all -Iinclude -Isrc)

if ! command -v "$CXX" >/dev/null; then
  echo "run_fuzzers: $CXX not found (install clang and libclang-rt-14-dev)" >&2
  exit 2
fi
targets=(fuzz/fuzz_*.cc)
if [ ! -e "${targets[0]}" ]; then
  echo "run_fuzzers: no fuzz/fuzz_*.cc targets" >&2
  exit 2
fi
mkdir -p "$OUT/obj"

# ---- library objects, compiled once for all targets ----------------------------------------
sources=()
for f in src/core/*.cc src/ops/device_memory.cc src/io/*.cc src/data/text/wordpiece.cc src/data/text/unicode.cc src/data/text/unicode_decompositions.cc src/data/text/unicode_tables.cc src/data/text/tokenizer_config.cc src/data/text/vocab_trainer.cc src/data/video/sampling.cc src/data/video/video_list.cc src/data/video/clip_store.cc; do  # + the FFmpeg-free video parsers
  [ -e "$f" ] || continue
  if grep -Eq '#include +"(cpu/|core/thread_pool\.h|unmask/context\.h)|cblas' "$f"; then
    continue  # needs BLAS / threads: not part of the fuzzed surface
  fi
  sources+=("$f")
done
echo "== building ${#sources[@]} library sources with $CXX (ASan + UBSan + fuzzer)"
export CXX OUT
printf '%s\n' "${sources[@]}" | xargs -P "$JOBS" -I{} sh -c \
  'o="$OUT/obj/$(echo "{}" | tr / _).o"; $CXX '"${FLAGS[*]}"' -c "{}" -o "$o" || { echo "run_fuzzers: failed to compile {}" >&2; exit 255; }'
objects=()
for f in "${sources[@]}"; do objects+=("$OUT/obj/$(echo "$f" | tr / _).o"); done

# ---- each target: build, then fuzz for the time budget -------------------------------------
failed=()
for src in "${targets[@]}"; do
  name=$(basename "$src" .cc)   # fuzz_safetensors
  stem=${name#fuzz_}            # safetensors
  bin="$OUT/$name"
  echo "== $name: building"
  if ! $CXX "${FLAGS[@]}" -fsanitize=fuzzer "$src" "${objects[@]}" -lz -o "$bin"; then  # zlib: clip store crc32
    echo "run_fuzzers: $name failed to build" >&2
    failed+=("$name (build)")
    continue
  fi
  corpus="$OUT/corpus_$stem"
  mkdir -p "$corpus" "$OUT/artifacts_$stem"
  args=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$OUT/artifacts_$stem/")
  [ -f "fuzz/fuzz_$stem.dict" ] && args+=(-dict="fuzz/fuzz_$stem.dict")
  seeds=()
  [ -d "fuzz/corpus_$stem" ] && seeds+=("fuzz/corpus_$stem")
  echo "== $name: fuzzing for ${SECONDS_PER_TARGET}s"
  log="$OUT/$name.log"
  if "$bin" "${args[@]}" "$corpus" "${seeds[@]}" >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|average_exec_per_sec)|^#[0-9]+ +DONE' "$log" || true
  else
    echo "run_fuzzers: $name FOUND A FAILURE; log $log, reproducer(s):" >&2
    ls "$OUT/artifacts_$stem/" >&2 || true
    tail -n 60 "$log" >&2
    failed+=("$name")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers: FAILED: ${failed[*]} (reproduce with: $OUT/<target> <artifact>)" >&2
  exit 1
fi
echo "== all ${#targets[@]} fuzz target(s) ran ${SECONDS_PER_TARGET}s without failures"
