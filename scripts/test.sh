#!/usr/bin/env bash
# The whole test suite, as CI runs it (`bash .ci/run` calls this):
#   1. Release build + unit tests (ctest: ops vs float64 references, tokenizer, IO, BERT)
#   2. end-to-end parity with PyTorch (tests/python/parity.py, tiny and base checkpoints), training
#      parity with PyTorch autograd (tests/python/train_parity.py), and the command-line scripts
#      (inference, prepare-text, pretrain with SIGINT/resume, finetune/eval)
#   3. WordPiece parity with tokenizers.js (tests/js/run_parity.sh)
#   4. libFuzzer targets for the safetensors parser and the tokenizer, bounded in time
#   5. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   6. the CUDA backend's sources compiled (sm_80, sm_90a) when nvcc is installed; its tests run on
#      a GPU machine (bench/gpu/run_device.sh; without a GPU they print "skipped: no CUDA device")
# Environment: JOBS (build jobs, default 2), FUZZ_SECONDS (per target, default 5),
# UNMASK_SKIP_ASAN=1 / UNMASK_SKIP_FUZZ=1 / UNMASK_SKIP_JS=1 / UNMASK_SKIP_CUDA=1 to leave a stage out locally.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
FUZZ_SECONDS=${FUZZ_SECONDS:-5}

bash scripts/install-deps.sh
STAGES=0
T0=$(date +%s)
# Each stage line carries the minutes:seconds since the start (CI must finish within 30 minutes).
stage() { STAGES=$((STAGES + 1)); local t=$(( $(date +%s) - T0 )); printf '== [%d:%02d] %s\n' $((t / 60)) $((t % 60)) "$*"; }

bash tools/line_budget.sh
python3 tools/gen_unicode_tables.py --check  # the committed Unicode tables are Debian's UCD, regenerated
stage "[1/6] build (Release) and unit tests"
bash scripts/cmake_configure.sh build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$JOBS"
ctest --test-dir build --output-on-failure -j"$JOBS"
bash tests/mpi/run_mpi_tests.sh build  # data parallel: mpirun -np 2/3, faults; "skipped: no MPI" without mpirun
bash tests/mpi/test_dp_pretrain.sh build/unmask  # BERT pretraining: N ranks == 1 rank, resume on another rank count, a killed rank
# Slurm: a single-node Slurm (Debian's, started here when it can be; the test skips without a controller),
# then srun --mpi=pmix launches, the missing-PMI error and srun -n 2/3 == 1 process
timeout 300 bash tests/mpi/slurm_single_node.sh >/tmp/unmask-slurm-setup.log 2>&1 || echo "single-node Slurm not started (see /tmp/unmask-slurm-setup.log)"
bash tests/mpi/test_srun.sh build/unmask

stage "[2/6] parity with PyTorch (python3-torch)"
/usr/bin/python3 tests/python/parity.py --unmask build/unmask --base
/usr/bin/python3 tests/python/embed_parity.py --unmask build/unmask  # `unmask embed`, CLS and mean pooling
# bf16 on the CPU: within twice PyTorch's bf16 autocast error (the refusal where there is no bf16 unit)
/usr/bin/python3 tests/python/cpu_bf16_accuracy.py --unmask build/unmask
ONEDNN_MAX_CPU_ISA=AVX512_CORE /usr/bin/python3 tests/python/cpu_bf16_accuracy.py --unmask build/unmask --size tiny
stage "[2a/6] training parity with PyTorch autograd (losses, every gradient, 10 AdamW steps)"
/usr/bin/python3 tests/python/train_parity.py --unmask build/unmask
stage "[2a'/6] VideoMAE pretraining parity with a PyTorch implementation (loss, every gradient)"
/usr/bin/python3 tests/python/videomae_parity.py --unmask build/unmask
/usr/bin/python3 tests/python/videomae_checkpoint_check.py --unmask build/unmask
stage "[2a''/6] BEVT pretraining parity with a PyTorch implementation (token ids, both losses, every gradient)"
/usr/bin/python3 tests/python/bevt_parity.py --unmask build/unmask
stage "[2b/6] command line: good and bad input"
bash tests/cli/test_plain_clone.sh  # no path outside the checkout; build/ shared by the README's two commands
bash tests/cli/test_cli.sh build/unmask
bash tests/cli/test_data_cli.sh build/unmask
bash tests/cli/test_train_cli.sh build/unmask
bash tests/cli/test_signal_stress.sh build/unmask 20  # SIGINT/SIGTERM at random moments: exit 130/143, a checkpoint, --resume
bash tests/cli/test_finetune_cli.sh build/unmask
bash tests/cli/test_checkpoint_layouts.sh build/unmask  # pytorch_model.bin (zip, legacy, shards), DLE ckpt_*.pt, tokenizer.json
bash tests/cli/test_video_cli.sh build/unmask
bash tests/cli/test_convert_videomae_cli.sh build/unmask
bash tests/cli/test_prepare_video_cli.sh build/unmask
bash tests/cli/test_video_train_cli.sh build/unmask
bash tests/cli/test_video_resume.sh build/unmask  # VideoMAE: SIGKILL + --resume equals the uninterrupted run bit for bit
bash tests/cli/test_bevt_cli.sh build/unmask  # BEVT: pretrain-bevt, --resume bit for bit, mmcv .pth weights, bench bevt, bad input
bash tests/cli/test_swin_finetune_cli.sh build/unmask  # BEVT pretrained -> finetune-swin >= 90% held-out top-1, resume
bash tests/cli/test_run_test_suites.sh  # the GPU runbook's per-suite runner, on a fake test binary
bash tests/cli/test_run_full_build.sh build  # the GPU runbook as a dry run on the CPU (stage order, deadline)

if [ "${UNMASK_SKIP_JS:-0}" != 1 ]; then
  stage "[3/6] WordPiece parity with tokenizers.js"
  bash tests/js/run_parity.sh
fi

if [ "${UNMASK_SKIP_FUZZ:-0}" != 1 ]; then
  stage "[4/6] fuzzing (${FUZZ_SECONDS}s per target)"
  bash fuzz/run_fuzzers.sh "$FUZZ_SECONDS"
fi

if [ "${UNMASK_SKIP_ASAN:-0}" != 1 ]; then
  stage "[5/6] unit tests under ASan + UBSan"
  # -O1 -g1: line tables are all the sanitizer reports need, and the build is the stage's cost.
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DUNMASK_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$JOBS" --target unmask_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j"$JOBS"
fi
if [ "${UNMASK_SKIP_CUDA:-0}" != 1 ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  stage "[6/6] CUDA backend: its sources compile for sm_80 and sm_90a (its tests run on a GPU machine)"
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DUNMASK_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc >/dev/null
  # Compile what the CUDA build changes: every CUDA source and CUDA test, the NCCL communicator and
  # the C++ files with CUDA dispatch (UNMASK_WITH_CUDA). The rest of the core is the code the
  # Release build above compiled and tested; linking and running unmask_cuda_tests (which prints
  # "skipped: no CUDA device" here) happens on GPU machines (bench/gpu/run_device.sh).
  pattern="src/cuda/|tests/cuda/|src/dist/comm_nccl|$(grep -rl UNMASK_WITH_CUDA src app | grep -v '^src/cuda/' | paste -sd'|' -)"
  mapfile -t cuda_objects < <(ninja -C build-cuda -t targets all | sed -n 's/^\(CMakeFiles\/[^:]*\.o\): .*/\1/p' | grep -E "$pattern")
  ninja -C build-cuda -j"$JOBS" "${cuda_objects[@]}"
  echo "CUDA: ${#cuda_objects[@]} objects compiled for sm_80 and sm_90a"
  # The tensor-core attention's fragment index math, emulated per lane on the CPU (forward and
  # training backward), since the kernels themselves run only on GPU machines.
  /usr/bin/python3 tests/cuda/check_fragment_layout.py
  /usr/bin/python3 tests/cuda/check_flash_bwd.py
  /usr/bin/python3 src/cuda/flash/gen/generate.py --check
fi
t=$(( $(date +%s) - T0 )); printf '== [%d:%02d] all tests passed\n' $((t / 60)) $((t % 60))
# One plain closing line over the stages that ran (each stage above exits non-zero on failure).
echo "stages: $STAGES passed, 0 failed"
