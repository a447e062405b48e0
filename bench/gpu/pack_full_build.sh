#!/usr/bin/env bash
# bench/gpu/pack_full_build.sh [DIR]: puts the full CUDA build into DIR (default: carry/, which
# must be git-ignored: echo /carry/ >> .git/info/exclude) for bench/gpu/run_full_build.sh on the GPU
# machine: bins.tar.xz (unmask, unmask_cuda_tests), and libs.tar.xz with the shared libraries that machine was
# found to lack on 2026-11-22 (oneDNN, OpenBLAS and their Fortran/OpenMP/OpenCL runtimes; it had
# HDF5, FFmpeg and the rest). run_full_build.sh reports any library still missing there;
# bench/gpu/unpack_carry.sh unpacks both there.
# Build first: cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DUNMASK_CUDA=ON \
#   -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc && cmake --build build-cuda -j2
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=${1:-carry}
mkdir -p "$DIR"
# xz: the two binaries are 63 MB plain, ~10 MB packed (the carry limit is 64 MiB).
tar -cJf "$DIR/bins.tar.xz" -C build-cuda unmask unmask_cuda_tests
libs=()
for name in libdnnl.so libopenblas.so libgfortran.so libquadmath.so libgomp.so libOpenCL.so; do
  path=$(ldd build-cuda/unmask build-cuda/unmask_cuda_tests | awk -v n="$name" 'index($1, n) == 1 && $3 ~ /^\// {print $3}' | head -1)
  [ -n "$path" ] && libs+=("$path")
done
tar -cJf "$DIR/libs.tar.xz" --transform 's|.*/||' -h "${libs[@]}"
# stand-ins for the video-input libraries, used there only where the machine lacks them (2026-11-26)
stubs=$(mktemp -d)
bash bench/gpu/make_video_lib_stubs.sh build-cuda/unmask "$stubs" >/dev/null
tar -cJf "$DIR/stubs.tar.xz" -C "$stubs" .
rm -rf "$stubs"
du -ch "$DIR"/* | tail -1
