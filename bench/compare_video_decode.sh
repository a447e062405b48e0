#!/usr/bin/env bash
# bench/compare_video_decode.sh: clip throughput of three ways to feed VideoMAE, side by side on
# the same synthetic videos (unmask make-videos: 240p, VP9 webm and H.264 mp4 alternating) and
# the same clips (num_frames x sampling_rate dense clips, short side resized):
#   (a) the ffmpeg CLI: one process per clip, input seek (-ss) to the clip start, every RATE-th
#       frame (select filter), scale to the same short side, rgb24 to /dev/null; THREADS
#       processes in parallel, one decoder thread each;
#   (b) unmask's ClipLoader from the list (FFmpeg libraries, decode on the fly, THREADS workers);
#   (c) unmask's ClipLoader from a clip store (after `unmask prepare-video`, timed separately);
#   (d) unmask's ClipLoader from JPEG frame folders (a rawframes list, VideoMAE v2 / mmaction2's
#       layout; the frames extracted once by the ffmpeg CLI at -q:v 2, timed separately).
# (b), (c) and (d) also crop, resize to CROP x CROP and normalise (the loader's full work); their
# time split (read/decode, augment, copy; thread-seconds) is printed so the decode part can be
# compared with (a) directly.
#
#   bash bench/compare_video_decode.sh [build/unmask]
# Environment: VIDEOS (64), FRAMES per video (72), WIDTH x HEIGHT (320 x 240), GOP (12), SHORT
# (short side, 128), T (16), RATE (4), CROP (224), THREADS (2), EPOCHS (clips per video, 2),
# WORK (scratch dir, default a temp dir), BENCH_LOADER (the loader benchmark command, default
# "$BIN bench loader").
set -euo pipefail
BIN=${1:-build/unmask}
VIDEOS=${VIDEOS:-64} FRAMES=${FRAMES:-72} WIDTH=${WIDTH:-320} HEIGHT=${HEIGHT:-240} GOP=${GOP:-12}
SHORT=${SHORT:-128} T=${T:-16} RATE=${RATE:-4} CROP=${CROP:-224} THREADS=${THREADS:-2} EPOCHS=${EPOCHS:-2}
BENCH_LOADER=${BENCH_LOADER:-"$BIN bench loader"}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; else WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT; fi
command -v ffmpeg >/dev/null || { echo "compare_video_decode: the ffmpeg CLI is not installed" >&2; exit 2; }
if ! $BENCH_LOADER --help >/dev/null 2>&1; then
  echo "compare_video_decode: '$BENCH_LOADER' does not run (is 'loader' dispatched in app/cmd_bench.cc?)" >&2
  exit 2
fi
(( FRAMES >= T * RATE )) || { echo "compare_video_decode: FRAMES must be >= T * RATE" >&2; exit 2; }
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }

echo "== data: $VIDEOS videos ${WIDTH}x${HEIGHT}, $FRAMES frames, GOP $GOP, VP9 + H.264 (unmask make-videos)"
"$BIN" make-videos --output "$WORK/videos" --codec both --videos-per-class $((VIDEOS / 4)) --val-fraction 0 \
  --frames "$FRAMES" --width "$WIDTH" --height "$HEIGHT" --gop "$GOP" --seed 1 >/dev/null
LIST="$WORK/videos/train_videomae.txt"
n=$(wc -l <"$LIST")
clips=$((n * EPOCHS))
# The resized size, as VideoReader computes it (the long side truncated).
if (( WIDTH >= HEIGHT )); then SH=$SHORT; SW=$((SHORT * WIDTH / HEIGHT)); else SW=$SHORT; SH=$((SHORT * HEIGHT / WIDTH)); fi
FPS=12  # make-videos' default frame rate

# ---- (a) the ffmpeg CLI --------------------------------------------------------------------------
: >"$WORK/ffmpeg_cmds"
i=0
for e in $(seq 1 "$EPOCHS"); do
  while read -r path label; do
    start=$(( (i * 7919 + e * 104729) % (FRAMES - T * RATE + 1) ))  # a spread of clip starts
    ss=$(printf "%.6f" "$(echo "$start / $FPS" | bc -l)")
    echo "ffmpeg -nostdin -hide_banner -loglevel error -threads 1 -ss $ss -i $path -filter_threads 1 -vf \"select='not(mod(n\\,$RATE))',scale=$SW:$SH:flags=bicubic\" -fps_mode passthrough -frames:v $T -f rawvideo -pix_fmt rgb24 -y /dev/null" >>"$WORK/ffmpeg_cmds"
    i=$((i + 1))
  done <"$LIST"
done
# Sanity: one clip yields exactly T frames of the resized size.
first=$(head -1 "$WORK/ffmpeg_cmds" | sed 's#-y /dev/null#-#')
bytes=$(sh -c "$first" | wc -c)
[ "$bytes" = $((T * SW * SH * 3)) ] || { echo "compare_video_decode: ffmpeg CLI clip is $bytes bytes, expected $((T * SW * SH * 3))" >&2; exit 1; }
t0=$(now)
xargs -P "$THREADS" -I{} sh -c '{}' <"$WORK/ffmpeg_cmds"
ffmpeg_s=$(elapsed "$t0" "$(now)")
# What one ffmpeg process costs before decoding anything (start-up, library loading): 8 runs on
# a one-frame synthetic source, one at a time.
t0=$(now)
for _ in 1 2 3 4 5 6 7 8; do
  ffmpeg -nostdin -hide_banner -loglevel error -f lavfi -i "color=c=black:s=${SW}x${SH}" -frames:v 1 -f rawvideo -pix_fmt rgb24 -y /dev/null
done
startup_s=$(echo "($(now) - $t0) / 8" | bc -l)

# ---- (b) the loader decoding the list on the fly --------------------------------------------------
common="--frames $T --rate $RATE --crop $CROP --threads $THREADS --batch 8 --epochs $EPOCHS --mode pretrain --json"
$BENCH_LOADER --list "$LIST" --short-side "$SHORT" $common >"$WORK/list.json"

# ---- (c) prepare once, then the loader from the store --------------------------------------------
t0=$(now)
"$BIN" prepare-video --list "$LIST" --output "$WORK/store.ucs" --short-side "$SHORT" --threads "$THREADS" --quiet >"$WORK/prepare.txt"
prepare_s=$(elapsed "$t0" "$(now)")
store_mb=$(du -sm "$WORK/store.ucs" | cut -f1)
$BENCH_LOADER --store "$WORK/store.ucs" $common >"$WORK/store.json"

# ---- (d) the loader over JPEG frame folders (extracted once by the ffmpeg CLI) --------------------
t0=$(now)
: >"$WORK/rawframes.txt"
while read -r path label; do
  d="$WORK/frames/$(basename "${path%.*}")"
  mkdir -p "$d"
  ffmpeg -nostdin -hide_banner -loglevel error -i "$path" -q:v 2 "$d/img_%05d.jpg"
  echo "$d $(find "$d" -name 'img_*.jpg' | wc -l) $label" >>"$WORK/rawframes.txt"
done <"$LIST"
extract_s=$(elapsed "$t0" "$(now)")
frames_mb=$(du -sm "$WORK/frames" | cut -f1)
$BENCH_LOADER --list "$WORK/rawframes.txt" --list-format rawframes --short-side "$SHORT" $common >"$WORK/frames.json"

field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
row() {  # name json
  local cps read aug copy wait wall
  cps=$(field "$2" clips_per_s); read=$(field "$2" read_s); aug=$(field "$2" augment_s); copy=$(field "$2" copy_s)
  wait=$(field "$2" wait_s); wall=$(field "$2" wall_s)
  printf "| %-34s | %6s | %8.2f | %9.1f | %8.2f / %.2f / %.2f thread-s, consumer wait %.2f s; read-only ceiling %.0f clips/s |\n" \
    "$1" "$(field "$2" clips)" "$wall" "$cps" "$read" "$aug" "$copy" "$wait" "$(echo "$(field "$2" clips) * $THREADS / $read" | bc -l)"
}
echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%d)"
echo "clips: $T frames x rate $RATE, short side $SHORT (${SW}x${SH}), $THREADS threads, $clips clips ($EPOCHS per video)"
echo
echo "| path                               |  clips | wall (s) |   clips/s | split: read / augment / copy (to ${CROP}x${CROP}) |"
echo "|------------------------------------|--------|----------|-----------|------------------------------------|"
printf "| %-34s | %6s | %8.2f | %9.1f | decode + scale only (no crop/normalise) |\n" "(a) ffmpeg CLI, $THREADS procs" "$clips" "$ffmpeg_s" "$(echo "$clips / $ffmpeg_s" | bc -l)"
row "(b) ClipLoader from_list (FFmpeg)" "$WORK/list.json"
row "(c) ClipLoader from_store" "$WORK/store.json"
row "(d) ClipLoader from_list (JPEG folders)" "$WORK/frames.json"
echo
echo "ffmpeg CLI start-up alone: $(printf '%.3f' "$startup_s") s per process (so at most $(echo "$THREADS / $startup_s" | bc -l | xargs printf '%.1f') clips/s with $THREADS processes before any decoding)"
echo "prepare-video (decode once): $(printf '%.2f' "$prepare_s") s for $n videos ($(echo "$n / $prepare_s" | bc -l | xargs printf '%.1f') videos/s), store $store_mb MiB"
sed 's/^/  /' "$WORK/prepare.txt"
echo "frame folders (ffmpeg CLI, once): $(printf '%.2f' "$extract_s") s for $n videos, $(find "$WORK/frames" -name '*.jpg' | wc -l) JPEGs, $frames_mb MiB"
