#!/usr/bin/env bash
# Command-line checks of `unmask prepare-video`: exit codes, messages, bad videos skipped and
# counted (cut and damaged WebM and MP4 too, every one listed in STORE/skipped.tsv; a list read
# directly by the loader applies the same rule), --strict, --force, atomic replacement (an
# existing store survives a failed run), the same bytes for any thread count, and --check
# finding a corrupted frame.
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
if "$BIN" prepare-video --list "$T/all.txt" --output "$T/s.ucs" --short-side 32 --threads 2 >"$T/out" 2>"$T/progress"; then ok
else bad "prepare-video failed: $(cat "$T/out" "$T/progress")"; fi
grep -q "prepare-video: $n ok, 0 skipped (none), $((n * 12)) frames" "$T/out" && ok || bad "summary: $(cat "$T/out")"
grep -q "ETA" "$T/progress" && ok || bad "no progress line with ETA: $(cat "$T/progress")"
[ -f "$T/s.ucs/index.bin" ] && [ -f "$T/s.ucs/chunk-00000.bin" ] && ok || bad "store files missing: $(ls "$T/s.ucs")"
"$BIN" prepare-video --check "$T/s.ucs" >"$T/out" 2>&1 && grep -q "every checksum verified" "$T/out" && ok \
  || bad "--check: $(cat "$T/out")"

# Same bytes for 1 and 3 threads, with several chunks.
"$BIN" prepare-video --list "$T/all.txt" --output "$T/t1.ucs" --short-side 32 --threads 1 --chunk-mb 1 --quiet >/dev/null 2>&1
"$BIN" prepare-video --list "$T/all.txt" --output "$T/t3.ucs" --short-side 32 --threads 3 --chunk-mb 1 --quiet >/dev/null 2>&1
diff -r "$T/t1.ucs" "$T/t3.ucs" >/dev/null && ok || bad "1 and 3 threads wrote different stores"

# An existing store: refused without --force, untouched.
cp "$T/s.ucs/index.bin" "$T/index.before"
expect_fail "overwrite without --force" "already exists" "$BIN" prepare-video --list "$T/all.txt" --output "$T/s.ucs"
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && ok || bad "refused run changed the store"

# Bad videos: skipped and counted per reason, the first few named; exit 0.
cp "$T/all.txt" "$T/mixed.txt"
echo "$T/missing.mp4 1" >>"$T/mixed.txt"
: >"$T/empty.webm"
echo "$T/empty.webm 2" >>"$T/mixed.txt"
echo "not a video" >"$T/text.mp4"
echo "$T/text.mp4 3" >>"$T/mixed.txt"
if "$BIN" prepare-video --list "$T/mixed.txt" --output "$T/m.ucs" --short-side 32 --quiet >"$T/out" 2>&1; then ok
else bad "bad videos made the run fail: $(cat "$T/out")"; fi
grep -q "$n ok, 3 skipped (1 missing, 1 zero_length, 1 corrupt)" "$T/out" && ok || bad "skip summary: $(cat "$T/out")"
grep -q "skipped: video: $T/missing.mp4: no such file" "$T/out" && ok || bad "missing file not named: $(cat "$T/out")"
# --min-frames: every video is too short.
expect_fail "all too short" "8 too_short" "$BIN" prepare-video --list "$T/mixed.txt" --output "$T/short.ucs" --min-frames 13 --quiet
[ ! -e "$T/short.ucs" ] && ok || bad "a failed run left $T/short.ucs"

# --strict: the first bad video fails the run, naming it; with --force the old store survives.
expect_fail "--strict" "missing.mp4" "$BIN" prepare-video --list "$T/mixed.txt" --output "$T/s.ucs" --force --strict --quiet
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && ok || bad "a failed --force run changed the existing store"
"$BIN" prepare-video --check "$T/s.ucs" >/dev/null 2>&1 && ok || bad "the existing store no longer checks"
ls -d "$T"/*.tmp-* >/dev/null 2>&1 && bad "temp directories left: $(ls -d "$T"/*.tmp-*)" || ok
# --force with a good run replaces it.
head -2 "$T/all.txt" >"$T/two.txt"
"$BIN" prepare-video --list "$T/two.txt" --output "$T/s.ucs" --force --quiet >"$T/out" 2>&1 && grep -q "2 ok" "$T/out" && ok \
  || bad "--force replace: $(cat "$T/out")"
cmp -s "$T/s.ucs/index.bin" "$T/index.before" && bad "--force did not replace the store" || ok
# --force never replaces a directory that is not a clip store.
mkdir -p "$T/precious" && echo x >"$T/precious/keep.txt"
expect_fail "--force on a non-store" "not a clip store" "$BIN" prepare-video --list "$T/two.txt" --output "$T/precious" --force
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

# Truncated and damaged files in every container (issue 28): a WebM cut in half (an interrupted
# download) or with 2 KiB overwritten in the middle still holds some whole frames, and WebM stores
# no frame count; the container's duration, the gaps and the bytes left unread give them away.
# The same damage to an MP4. prepare-video skips them (--strict fails), skipped.tsv lists every
# one with its reason, and a list read directly (bench loader --list, pretrain-video --data LIST)
# applies the same rule.
"$BIN" make-videos --output "$T/dv" --codec both --videos-per-class 1 --frames 48 --width 160 --height 120 --seed 7 \
  >/dev/null 2>&1 || bad "make-videos for the damaged files"
python3 -c 'import hashlib, sys; sys.stdout.buffer.write(b"".join(hashlib.sha256(b"unmask %d" % i).digest() for i in range(64)))' \
  >"$T/noise.bin"  # 2048 fixed bytes
for f in left_00000.webm right_00001.mp4; do
  size=$(stat -c %s "$T/dv/$f")
  head -c $((size / 2)) "$T/dv/$f" >"$T/cut_$f"
  cp "$T/dv/$f" "$T/bad_$f"
  dd if="$T/noise.bin" of="$T/bad_$f" bs=1 seek=$((size / 2 - 1024)) count=2048 conv=notrunc status=none
done
printf '%s 2\n%s 0\n%s 0\n%s 1\n%s 1\n%s 3\n' "$T/dv/up_00002.webm" "$T/cut_left_00000.webm" "$T/bad_left_00000.webm" \
  "$T/cut_right_00001.mp4" "$T/bad_right_00001.mp4" "$T/dv/down_00003.mp4" >"$T/damaged.txt"
"$BIN" prepare-video --list "$T/damaged.txt" --output "$T/d.ucs" --short-side 32 --quiet >"$T/out" 2>&1 && ok \
  || bad "damaged files made the run fail: $(cat "$T/out")"
grep -q "prepare-video: 2 ok, 4 skipped (3 corrupt, 1 truncated), 96 frames" "$T/out" && ok || bad "damaged summary: $(cat "$T/out")"
grep -q "every skipped video with its reason: $T/d.ucs/skipped.tsv" "$T/out" && ok || bad "report not named: $(cat "$T/out")"
# skipped.tsv: a header, then list line, path, reason and the error of each skipped video.
[ "$(head -1 "$T/d.ucs/skipped.tsv")" = "$(printf 'line\tpath\treason\tdetail')" ] && ok \
  || bad "skipped.tsv header: $(head -1 "$T/d.ucs/skipped.tsv")"
[ "$(wc -l <"$T/d.ucs/skipped.tsv")" = 5 ] && ok || bad "skipped.tsv lines: $(cat "$T/d.ucs/skipped.tsv")"
expect_row() {  # expect_row LINE FILE REASON DETAIL-FRAGMENT
  if awk -F'\t' -v l="$1" -v p="$T/$2" -v r="$3" -v d="$4" '$1 == l && $2 == p && $3 == r && index($4, d) { found = 1 }
      END { exit !found }' "$T/d.ucs/skipped.tsv"; then ok
  else bad "skipped.tsv has no row '$1 $2 $3 ...$4...': $(cat "$T/d.ucs/skipped.tsv")"; fi
}
expect_row 2 cut_left_00000.webm truncated "truncated: the frames end"
expect_row 3 bad_left_00000.webm corrupt "corrupt data: reading stopped"
expect_row 4 cut_right_00001.mp4 corrupt "cannot open as a media file"
expect_row 5 bad_right_00001.mp4 corrupt "corrupt"
# A store with nothing skipped still has the report (the header alone), and nothing names it.
[ "$(cat "$T/s.ucs/skipped.tsv")" = "$(printf 'line\tpath\treason\tdetail')" ] && ok \
  || bad "skipped.tsv of a clean store: $(cat "$T/s.ucs/skipped.tsv")"
# --strict: the cut WebM (the first bad one) fails the run; --keep-truncated keeps its 24 frames.
expect_fail "--strict on a cut webm" "cut_left_00000.webm: truncated" \
  "$BIN" prepare-video --list "$T/damaged.txt" --output "$T/x.ucs" --strict --quiet
"$BIN" prepare-video --list "$T/damaged.txt" --output "$T/k.ucs" --short-side 32 --keep-truncated --quiet >"$T/out" 2>&1 \
  && grep -q "3 ok, 3 skipped (3 corrupt), 120 frames" "$T/out" && ok || bad "--keep-truncated: $(cat "$T/out")"
# The list read directly: the same rule (every frame sampled, so the damaged MP4 frames are decoded).
loader=("$BIN" bench loader --list "$T/damaged.txt" --short-side 32 --batch 1 --frames 48 --rate 1 --crop 16 --warmup 0 --threads 1)
"${loader[@]}" --json >"$T/out" 2>&1 && grep -q '"skipped": 4}' "$T/out" && ok || bad "bench loader --list skips: $(cat "$T/out")"
"${loader[@]}" >"$T/out" 2>&1 && grep -q "skipped videos: 3 corrupt, 1 truncated" "$T/out" && ok \
  || bad "bench loader --list reasons: $(cat "$T/out")"
# --strict on the WebM files alone (an MP4 cut in half never opened, so it failed before too).
head -3 "$T/damaged.txt" >"$T/damaged_webm.txt"
webm_strict_names_one() {
  grep -qE "(cut_left_00000.webm: truncated|bad_left_00000.webm: corrupt data).*strict]" "$T/err" && ok \
    || bad "$1 --strict names no damaged webm: $(cat "$T/err")"
}
expect_fail "bench loader --list --strict" "strict]" "${loader[@]/damaged.txt/damaged_webm.txt}" --strict
webm_strict_names_one "bench loader"
"${loader[@]}" --keep-truncated --json >"$T/out" 2>&1 && grep -q '"skipped": 3}' "$T/out" && ok \
  || bad "bench loader --list --keep-truncated: $(cat "$T/out")"
pretrain=("$BIN" pretrain-video --data "$T/damaged.txt" --short-side 32 --preset tiny --img 32 --frames 4 --batch 2 --steps 1
  --log-every 1 --loader-threads 1)
expect_fail "pretrain-video --data LIST --strict" "strict]" "${pretrain[@]/damaged.txt/damaged_webm.txt}" \
  --output "$T/run_strict" --strict
webm_strict_names_one "pretrain-video"
"${pretrain[@]}" --output "$T/run" >"$T/out" 2>&1 && ok || bad "pretrain-video on a list with damaged files: $(cat "$T/out")"
grep -qE "skipped videos: [0-9]+ (corrupt|truncated)" "$T/out" && ok || bad "pretrain-video reports no skipped video: $(cat "$T/out")"
rm -rf "$T/x.ucs"

# List formats beyond 'path label' (video_list.h).
# V-SWIFT frame ranges 'path label sframe eframe' (found by auto): the store keeps each range;
# a range past the end of the 12-frame video is skipped as too short.
first=$(head -1 "$T/all.txt" | cut -d' ' -f1)
printf '%s 1 2 10\n%s 0 6 -1\n%s 2 8 20\n' "$first" "$first" "$first" >"$T/ranges.txt"
"$BIN" prepare-video --list "$T/ranges.txt" --output "$T/r.ucs" --short-side 32 --quiet >"$T/out" 2>&1 && ok \
  || bad "range list: $(cat "$T/out")"
grep -q "prepare-video: 2 ok, 1 skipped (1 too_short), 14 frames" "$T/out" && ok || bad "range summary: $(cat "$T/out")"
grep -q "frame range \[8, 20) (list line 3) does not fit its 12 frames" "$T/out" && ok || bad "bad range not explained: $(cat "$T/out")"
# The same clips through the loader, decoded on the fly.
head -2 "$T/ranges.txt" >"$T/ranges2.txt"
"$BIN" bench loader --list "$T/ranges2.txt" --short-side 32 --batch 1 --frames 4 --rate 2 --crop 16 --warmup 0 --json \
  >"$T/out" 2>&1 && grep -q '"clips": 2' "$T/out" && ok || bad "loader over a range list: $(cat "$T/out")"
# V-SWIFT's six columns, comma-separated.
printf 'k400,%s,1,2,10,12\n' "$first" >"$T/six.csv"
"$BIN" prepare-video --list "$T/six.csv" --output "$T/six.ucs" --short-side 32 --quiet >"$T/out" 2>&1 \
  && grep -q "1 ok, 0 skipped (none), 8 frames" "$T/out" && ok || bad "six-column list: $(cat "$T/out")"
printf 'k400,%s,1,2,10,8\n' "$first" >"$T/six_bad.csv"
expect_fail "eframe past nframes" "six_bad.csv:1" "$BIN" prepare-video --list "$T/six_bad.csv" --output "$T/x.ucs"
printf '%s 1 2 10\n%s 1 9 4\n' "$first" "$first" >"$T/bad_range.txt"
expect_fail "empty range" "bad_range.txt:2: the frame range \[9, 4) is empty" \
  "$BIN" prepare-video --list "$T/bad_range.txt" --output "$T/x.ucs"
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
  "$BIN" prepare-video --list "$T/raw.txt" --root "$T/raw" --list-format rawframes --output "$T/raw.ucs" --short-side 0 \
    --quiet >"$T/out" 2>&1 && grep -q "1 ok, 0 skipped (none), 12 frames" "$T/out" && ok || bad "rawframes: $(cat "$T/out")"
  echo "b 4 6" >"$T/v2.txt"  # frames 4..9 of frame_0.jpg ..
  "$BIN" prepare-video --list "$T/v2.txt" --root "$T/raw" --list-format videomae2 --fname-tmpl "frame_{}.jpg" \
    --output "$T/v2.ucs" --quiet >"$T/out" 2>&1 && grep -q "1 ok, 0 skipped (none), 6 frames" "$T/out" && ok \
    || bad "videomae2 frame folder: $(cat "$T/out")"
  echo "a 13 3" >"$T/raw13.txt"  # the folder holds 12
  "$BIN" prepare-video --list "$T/raw13.txt" --root "$T/raw" --list-format rawframes --output "$T/x.ucs" --quiet \
    >"$T/out" 2>&1; grep -q "the list says 13 frames, the folder has 12" "$T/out" && ok || bad "short folder: $(cat "$T/out")"
  expect_fail "ambiguous two-number list" "--list-format videomae2 or --list-format rawframes" \
    "$BIN" prepare-video --list "$T/raw.txt" --root "$T/raw" --output "$T/x.ucs"
fi
expect_fail "bad --fname-tmpl" "has no {} field" "$BIN" prepare-video --list "$T/ranges.txt" --output "$T/x.ucs" \
  --fname-tmpl img.jpg
rm -rf "$T/x.ucs"

# Bad arguments: non-zero exit with an error message.
expect_fail "no --list" "--list is required" "$BIN" prepare-video --output "$T/x.ucs"
expect_fail "no --output" "--output is required" "$BIN" prepare-video --list "$T/all.txt"
expect_fail "missing list" "cannot open" "$BIN" prepare-video --list "$T/nope.txt" --output "$T/x.ucs"
expect_fail "bad format" "--list-format must be" "$BIN" prepare-video --list "$T/all.txt" --output "$T/x.ucs" --list-format json
expect_fail "negative short side" "short-side" "$BIN" prepare-video --list "$T/all.txt" --output "$T/x.ucs" --short-side -1
expect_fail "zero chunk" "chunk-mb" "$BIN" prepare-video --list "$T/all.txt" --output "$T/x.ucs" --chunk-mb 0
expect_fail "zero stride" "frame-stride" "$BIN" prepare-video --list "$T/all.txt" --output "$T/x.ucs" --frame-stride 0
expect_fail "--check on a non-store" "not a directory" "$BIN" prepare-video --check "$T/all.txt"
[ ! -e "$T/x.ucs" ] && ok || bad "a failed run left $T/x.ucs"

echo "prepare-video CLI: $pass passed, $fail failed"
[ "$fail" = 0 ]
