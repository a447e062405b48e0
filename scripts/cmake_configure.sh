#!/usr/bin/env bash
# Configures a CMake build directory: with Ninja when the directory is new, else with the
# generator it was first configured with (CMake refuses a second generator in one directory, so
# a build/ made by a plain `cmake -S . -B build` keeps Unix Makefiles and still works).
#   usage: bash scripts/cmake_configure.sh DIR [cmake options ...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
if [ -f "$dir/CMakeCache.txt" ]; then
  cmake -S . -B "$dir" "$@" >/dev/null
else
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
fi
