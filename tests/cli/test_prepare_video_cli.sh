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

# List formats beyond 'path label' (video_list.h).
# V-SWIFT frame ranges 'path label sframe eframe' (found by auto): the store keeps each range;
# a range past the end of the 12-frame video is skipped as too short.
first=$(head -1 "$T/all.txt" | cut -d' ' -f1)
printf '%s 1 2 10\n%s 0 6 -1\n%s 2 8 20\n' "$first" "$first" "$first" >"$T/ranges.txt"
"$BIN" prepare-video --list "$T/ranges.txt" --out "$T/r.ucs" --short-side 32 --quiet >"$T/out" 2>&1 && ok \
  || bad "range list: $(cat "$T/out")"
grep -q "prepare-video: 2 ok, 1 skipped (1 too_short), 14 frames" "$T/out" && ok || bad "range summary: $(cat "$T/out")"
grep -q "frame range \[8, 20) (list line 3) does not fit its 12 frames" "$T/out" && ok || bad "bad range not explained: $(cat "$T/out")"
# The same clips through the loader, decoded on the fly.
head -2 "$T/ranges.txt" >"$T/ranges2.txt"
"$BIN" bench loader --list "$T/ranges2.txt" --short-side 32 --batch 1 --frames 4 --rate 2 --crop 16 --warmup 0 --json \
  >"$T/out" 2>&1 && grep -q '"clips": 2' "$T/out" && ok || bad "loader over a range list: $(cat "$T/out")"
# V-SWIFT's six columns, comma-separated.
printf 'k400,%s,1,2,10,12\n' "$first" >"$T/six.csv"
"$BIN" prepare-video --list "$T/six.csv" --out "$T/six.ucs" --short-side 32 --quiet >"$T/out" 2>&1 \
  && grep -q "1 ok, 0 skipped (none), 8 frames" "$T/out" && ok || bad "six-column list: $(cat "$T/out")"
printf 'k400,%s,1,2,10,8\n' "$first" >"$T/six_bad.csv"
expect_fail "eframe past nframes" "six_bad.csv:1" "$BIN" prepare-video --list "$T/six_bad.csv" --out "$T/x.ucs"
printf '%s 1 2 10\n%s 1 9 4\n' "$first" "$first" >"$T/bad_range.txt"
expect_fail "empty range" "bad_range.txt:2: the frame range \[9, 4) is empty" \
  "$BIN" prepare-video --list "$T/bad_range.txt" --out "$T/x.ucs"
# Frame folders extracted by the ffmpeg CLI (as mmaction2's rawframes are): 'folder total_frames
# label' (rawframes), 'folder start_idx total_frames' (VideoMAE v2), another --fname-tmpl.
if ! command -v ffmpeg >/dev/null; then
  bad "the ffmpeg CLI is not installed (scripts/install-deps.sh installs it): frame-folder lists untested"
else
  mkdir -p "$T/raw/a" "$T/raw/b"
  ffmpeg -loglevel error -i "$first" -q:v 2 "$T/raw/a/img_%05d.jpg" && ok || bad "ffmpeg could not extract frames"
  ffmpeg -loglevel error -i "$first" -q:v 2 -start_number 0 "$T/raw/b/frame_%d.jpg" && ok \
    || bad "ffmpeg could not extract frames"
  echo "a 12 3" >"$T/raw.txt"
  "$BIN" prepare-video --list "$T/raw.txt" --root "$T/raw" --format rawframes --out "$T/raw.ucs" --short-side 0 \
    --quiet >"$T/out" 2>&1 && grep -q "1 ok, 0 skipped (none), 12 frames" "$T/out" && ok || bad "rawframes: $(cat "$T/out")"
  echo "b 4 6" >"$T/v2.txt"  # frames 4..9 of frame_0.jpg ..
  "$BIN" prepare-video --list "$T/v2.txt" --root "$T/raw" --format videomae2 --fname-tmpl "frame_{}.jpg" \
    --out "$T/v2.ucs" --quiet >"$T/out" 2>&1 && grep -q "1 ok, 0 skipped (none), 6 frames" "$T/out" && ok \
    || bad "videomae2 frame folder: $(cat "$T/out")"
  echo "a 13 3" >"$T/raw13.txt"  # the folder holds 12
  "$BIN" prepare-video --list "$T/raw13.txt" --root "$T/raw" --format rawframes --out "$T/x.ucs" --quiet \
    >"$T/out" 2>&1; grep -q "the list says 13 frames, the folder has 12" "$T/out" && ok || bad "short folder: $(cat "$T/out")"
  expect_fail "ambiguous two-number list" "--format videomae2 or --format rawframes" \
    "$BIN" prepare-video --list "$T/raw.txt" --root "$T/raw" --out "$T/x.ucs"
fi
expect_fail "bad --fname-tmpl" "has no {} field" "$BIN" prepare-video --list "$T/ranges.txt" --out "$T/x.ucs" \
  --fname-tmpl img.jpg
rm -rf "$T/x.ucs"

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
