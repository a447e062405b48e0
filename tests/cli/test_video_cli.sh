#!/usr/bin/env bash
# Command-line checks of the video commands: good and bad input.
#   bash tests/cli/test_video_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# make-videos: 4 classes x 2 videos, both codecs; lists in both formats, deterministic.
if "$BIN" make-videos --output "$T/a" --codec both --videos-per-class 2 --frames 8 --width 64 --height 48 --seed 3 >"$T/out" 2>&1; then ok; else bad "make-videos failed: $(cat "$T/out")"; fi
n=$(cat "$T"/a/train_videomae.txt "$T"/a/val_videomae.txt 2>/dev/null | wc -l)
[ "$n" = 8 ] && ok || bad "expected 8 listed videos, got $n"
n=$(cat "$T"/a/train_vswift.csv "$T"/a/val_vswift.csv 2>/dev/null | grep -c ',')
[ "$n" -ge 8 ] && ok || bad "expected V-SWIFT lists with 8 rows, got $n"
ls "$T"/a | grep -q '\.webm$' && ls "$T"/a | grep -q '\.mp4$' && ok || bad "expected both webm and mp4 files"
# Every listed video decodes with the ffmpeg CLI to 8 frames.
if command -v ffprobe >/dev/null; then
  first=$(head -1 "$T/a/train_videomae.txt" | awk '{print $1}')
  [ -f "$first" ] || first="$T/a/$first"
  frames=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 "$first")
  [ "$frames" = 8 ] && ok || bad "ffprobe counted $frames frames in $first, expected 8"
fi
"$BIN" make-videos --output "$T/b" --codec both --videos-per-class 2 --frames 8 --width 64 --height 48 --seed 3 >/dev/null 2>&1
# Same seed: the same lists (up to the output directory in the paths) and byte-identical videos.
[ "$(sed "s#$T/a#D#" "$T/a/train_videomae.txt")" = "$(sed "s#$T/b#D#" "$T/b/train_videomae.txt")" ] && ok || bad "same seed gave different lists"
v=$(ls "$T/a" | grep -m1 '\.webm$')
cmp -s "$T/a/$v" "$T/b/$v" && ok || bad "same seed gave different bytes for $v"

# Bad input: unknown codec, odd size, missing output -> non-zero exit with a message.
for args in "--codec av2" "--width 63" "--frames 0"; do
  if "$BIN" make-videos --output "$T/c" $args >"$T/err" 2>&1; then bad "make-videos $args succeeded"
  elif grep -qi "error" "$T/err"; then ok; else bad "make-videos $args: no error message"; fi
done
if "$BIN" make-videos >"$T/err" 2>&1; then bad "make-videos without --output succeeded"; else ok; fi
# Into a non-empty directory: refused, and the videos there are untouched.
sum_before=$(cat "$T/a"/* | md5sum)
if "$BIN" make-videos --output "$T/a" --videos-per-class 1 --frames 8 --width 64 --height 48 --seed 9 >"$T/err" 2>&1; then
  bad "make-videos into a non-empty directory succeeded"
elif grep -q "is not empty" "$T/err" && [ "$(cat "$T/a"/* | md5sum)" = "$sum_before" ]; then ok
else bad "make-videos into a non-empty directory: $(cat "$T/err")"; fi

echo "video CLI: $pass passed, $fail failed"
[ "$fail" = 0 ]
