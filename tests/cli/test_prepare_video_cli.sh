#!/usr/bin/env bash
# Command-line checks of `unmask prepare-video`: exit codes, messages, bad videos skipped and
# counted, --strict, --force, atomic replacement (an existing store survives a failed run), the
# same bytes for any thread count, and --check finding a corrupted frame.
#   bash tests/cli/test_prepare_video_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# expect_fail "what" "message fragment" cmd...: non-zero exit and the fragment on stderr/stdout.
expect_fail() {
  local what=$1 frag=$2
  shift 2
  if "$@" >"$T/err" 2>&1; then bad "$what succeeded"
  elif grep -q -- "$frag" "$T/err"; then ok
  else bad "$what: expected '$frag' in: $(cat "$T/err")"; fi
}

"$BIN" make-videos --output "$T/v" --codec both --videos-per-class 2 --frames 12 --width 64 --height 48 --seed 5 >/dev/null 2>&1 \
  || { echo "FAIL: make-videos"; exit 1; }
cat "$T/v/train_videomae.txt" "$T/v/val_videomae.txt" >"$T/all.txt"
n=$(wc -l <"$T/all.txt")

# A good run: every video ok, a summary line, a store that --check verifies.
if "$BIN" prepare-video --list "$T/all.txt" --out "$T/s.ucs" --short-side 32 --threads 2 >"$T/out" 2>"$T/progress"; then ok
else bad "prepare-video failed: $(cat "$T/out" "$T/progress")"; fi
grep -q "prepare-video: $n ok, 0 skipped (none), $((n * 12)) frames" "$T/out" && ok || bad "summary: $(cat "$T/out")"
grep -q "ETA" "$T/progress" && ok || bad "no progress line with ETA: $(cat "$T/progress")"
[ -f "$T/s.ucs/index.bin" ] && [ -f "$T/s.ucs/chunk-00000.bin" ] && ok || bad "store files missing: $(ls "$T/s.ucs")"
"$BIN" prepare-video --check "$T/s.ucs" >"$T/out" 2>&1 && grep -q "every checksum verified" "$T/out" && ok \
  || bad "--check: $(cat "$T/out")"

# Same bytes for 1 and 3 threads, with several chunks.
"$BIN" prepare-video --list "$T/all.txt" --out "$T/t1.ucs" --short-side 32 --threads 1 --chunk-mb 1 --quiet >/dev/null 2>&1
"$BIN" prepare-video --list "$T/all.txt" --out "$T/t3.ucs" --short-side 32 --threads 3 --chunk-mb 1 --quiet >/dev/null 2>&1
diff -r "$T/t1.ucs" "$T/t3.ucs" >/dev/null && ok || bad "1 and 3 threads wrote different stores"

# An existing store: refused without --force, untouched.
cp "$T/s.ucs/index.bin" "$T/index.before"
expect_fail "overwrite without --force" "already exists" "$BIN" prepare-video --list "$T/all.txt" --out "$T/s.ucs"
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && ok || bad "refused run changed the store"

# Bad videos: skipped and counted per reason, the first few named; exit 0.
cp "$T/all.txt" "$T/mixed.txt"
echo "$T/missing.mp4 1" >>"$T/mixed.txt"
: >"$T/empty.webm"
echo "$T/empty.webm 2" >>"$T/mixed.txt"
echo "not a video" >"$T/text.mp4"
echo "$T/text.mp4 3" >>"$T/mixed.txt"
if "$BIN" prepare-video --list "$T/mixed.txt" --out "$T/m.ucs" --short-side 32 --quiet >"$T/out" 2>&1; then ok
else bad "bad videos made the run fail: $(cat "$T/out")"; fi
grep -q "$n ok, 3 skipped (1 missing, 1 zero_length, 1 corrupt)" "$T/out" && ok || bad "skip summary: $(cat "$T/out")"
grep -q "skipped: video: $T/missing.mp4: no such file" "$T/out" && ok || bad "missing file not named: $(cat "$T/out")"
# --min-frames: every video is too short.
expect_fail "all too short" "8 too_short" "$BIN" prepare-video --list "$T/mixed.txt" --out "$T/short.ucs" --min-frames 13 --quiet
[ ! -e "$T/short.ucs" ] && ok || bad "a failed run left $T/short.ucs"

# --strict: the first bad video fails the run, naming it; with --force the old store survives.
expect_fail "--strict" "missing.mp4" "$BIN" prepare-video --list "$T/mixed.txt" --out "$T/s.ucs" --force --strict --quiet
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && ok || bad "a failed --force run changed the existing store"
"$BIN" prepare-video --check "$T/s.ucs" >/dev/null 2>&1 && ok || bad "the existing store no longer checks"
ls -d "$T"/*.tmp-* >/dev/null 2>&1 && bad "temp directories left: $(ls -d "$T"/*.tmp-*)" || ok
# --force with a good run replaces it.
head -2 "$T/all.txt" >"$T/two.txt"
"$BIN" prepare-video --list "$T/two.txt" --out "$T/s.ucs" --force --quiet >"$T/out" 2>&1 && grep -q "2 ok" "$T/out" && ok \
  || bad "--force replace: $(cat "$T/out")"
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && bad "--force did not replace the store" || ok
# --force never replaces a directory that is not a clip store.
mkdir -p "$T/precious" && echo x >"$T/precious/keep.txt"
expect_fail "--force on a non-store" "not a clip store" "$BIN" prepare-video --list "$T/two.txt" --out "$T/precious" --force
[ -f "$T/precious/keep.txt" ] && ok || bad "--force destroyed a non-store directory"

# A corrupted frame: --check names the store, the video and the frame.
python3 - "$T/t1.ucs/chunk-00000.bin" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[5000] ^= 0xFF
open(p, "wb").write(b)
EOF
expect_fail "--check on a corrupted chunk" "checksum mismatch in video 0" "$BIN" prepare-video --check "$T/t1.ucs"
grep -q "frame 1 " "$T/err" && ok || bad "frame not named: $(cat "$T/err")"
# A truncated chunk: caught when opening.
truncate -s -10 "$T/t3.ucs/chunk-00000.bin"
expect_fail "--check on a truncated chunk" "truncated" "$BIN" prepare-video --check "$T/t3.ucs"

# Bad arguments: non-zero exit with an error message.
expect_fail "no --list" "--list is required" "$BIN" prepare-video --out "$T/x.ucs"
expect_fail "no --out" "--out is required" "$BIN" prepare-video --list "$T/all.txt"
expect_fail "missing list" "cannot open" "$BIN" prepare-video --list "$T/nope.txt" --out "$T/x.ucs"
expect_fail "bad format" "--format must be" "$BIN" prepare-video --list "$T/all.txt" --out "$T/x.ucs" --format json
expect_fail "negative short side" "short-side" "$BIN" prepare-video --list "$T/all.txt" --out "$T/x.ucs" --short-side -1
expect_fail "zero chunk" "chunk-mb" "$BIN" prepare-video --list "$T/all.txt" --out "$T/x.ucs" --chunk-mb 0
expect_fail "zero stride" "frame-stride" "$BIN" prepare-video --list "$T/all.txt" --out "$T/x.ucs" --frame-stride 0
expect_fail "--check on a non-store" "not a directory" "$BIN" prepare-video --check "$T/all.txt"
[ ! -e "$T/x.ucs" ] && ok || bad "a failed run left $T/x.ucs"

echo "prepare-video CLI: $pass passed, $fail failed"
[ "$fail" = 0 ]
