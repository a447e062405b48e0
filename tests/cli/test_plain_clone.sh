#!/usr/bin/env bash
# A plain clone is enough: no script, test or source reaches outside the checkout (../shared is
# the developers' and is absent from a clone), and the README's two commands share build/ in
# either order (a directory configured with one CMake generator is reconfigured with it).
#   bash tests/cli/test_plain_clone.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
fail=0
# 1. Paths outside the checkout, in anything a user or CI runs.
hits=$(git ls-files -- scripts tests fuzz app src bench cmake CMakeLists.txt configs tools |
  xargs grep -n -E '\.\./shared/|/work/shared' 2>/dev/null | grep -v '^tests/cli/test_plain_clone.sh:' |
  grep -v -E 'reference/|seeds/|STYLE\.md' || true)
if [[ -n "$hits" ]]; then
  echo "FAIL: these lines reach outside the checkout:"; echo "$hits"; fail=1
fi
[[ $(wc -l < data/bert-base-uncased-vocab.txt) == 30522 ]] || { echo "FAIL: data/bert-base-uncased-vocab.txt is not the 30,522-token list"; fail=1; }
# 2. The generator: configure with Unix Makefiles (a plain `cmake -S . -B build`), then the
#    scripts' configure step must reuse it; and a fresh directory gets Ninja.
W=$(mktemp -d /tmp/unmask-clone-XXXXXX)
trap 'rm -rf "$W"' EXIT
if ! cmake -S . -B "$W/make" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release >/dev/null 2>"$W/err"; then
  echo "FAIL: plain configure failed:"; head -5 "$W/err"; fail=1
elif ! bash scripts/cmake_configure.sh "$W/make" -DCMAKE_BUILD_TYPE=Release 2>"$W/err"; then
  echo "FAIL: cmake_configure.sh on a Makefiles build directory:"; head -5 "$W/err"; fail=1
fi
if ! bash scripts/cmake_configure.sh "$W/new" -DCMAKE_BUILD_TYPE=Release 2>"$W/err" ||
   ! grep -q 'CMAKE_GENERATOR:INTERNAL=Ninja' "$W/new/CMakeCache.txt"; then
  echo "FAIL: a new build directory is not configured with Ninja"; head -5 "$W/err"; fail=1
elif ! bash scripts/cmake_configure.sh "$W/new" -DCMAKE_BUILD_TYPE=Release 2>"$W/err"; then
  echo "FAIL: reconfiguring a Ninja directory:"; head -5 "$W/err"; fail=1
fi
# 3. The scripts configure through the helper, never with a generator of their own.
for s in scripts/quickstart.sh scripts/quickstart_video.sh scripts/test.sh; do
  if grep -n -E '^[^#]*cmake -S \. -B build ' "$s"; then echo "FAIL: $s configures build/ itself"; fail=1; fi
done
if [[ $fail == 0 ]]; then echo "test_plain_clone: all passed"; else exit 1; fi
