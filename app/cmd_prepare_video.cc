// app/cmd_prepare_video.cc: `unmask prepare-video`, a list file -> a decode-once clip store
// (video/clip_store.h): every listed video is decoded once, resized to a short side and packed
// as uint8 RGB frames in chunk files with an index and per-frame crc32. Bad videos are skipped
// and counted per reason (--strict: the first one fails the run); the first five are named
// and STORE/skipped.tsv lists every one with its reason. `--check STORE` reads every
// frame of an existing store back and verifies its checksums.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli.h"
#include "unmask/error.h"
#include "data/video/clip_store.h"

namespace unmask::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

int check_store(const std::string& dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const video::ClipStore store = video::ClipStore::open(dir);
  int64_t frames = 0;
  double bytes = 0;
  for (int64_t i = 0; i < store.size(); ++i) {
    const video::ClipStoreEntry& e = store.entry(i);
    std::vector<int64_t> all(size_t(e.frames));
    for (size_t f = 0; f < all.size(); ++f) all[f] = int64_t(f);
    store.read_frames(i, all);  // throws on the first checksum mismatch
    frames += e.frames;
    bytes += double(e.frame_bytes()) * double(e.frames);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const video::ClipStoreHeader& h = store.header();
  std::printf(
      "prepare-video --check: %s ok: %lld videos, %lld frames, %s in %zu chunk(s), short side %d, stride %d, "
      "format version %u; every checksum verified in %.2f s\n",
      dir.c_str(), (long long)store.size(), (long long)frames, human_bytes(bytes).c_str(), h.chunk_bytes.size(),
      h.short_side, h.frame_stride, h.version, s);
  return 0;
}

}  // namespace

int cmd_prepare_video(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"list", "FILE", "list file of videos, frame ranges or frame folders (--list-format)", ""},
      {"root", "DIR", "directory joined to relative paths of the list", ""},
      {"list-format", "F", "list format: videomae, vswift, vswift4, vswift6, videomae2, rawframes or auto (first line)",
       "auto"},
      {"fname-tmpl", "T", "file names in frame folders (videomae2, rawframes lists)", "img_{:05}.jpg"},
      {"output", "DIR", "the clip store to create (a directory: index.bin + chunk-*.bin)", ""},
      {"short-side", "N", "resize so the shorter side is N pixels (0 = native size)", "128"},
      {"frame-stride", "N", "keep every N-th source frame", "1"},
      {"max-frames", "N", "keep at most N frames per video (0 = all)", "0"},
      {"min-frames", "N", "skip videos with fewer kept frames (counted as too_short)", "1"},
      {"chunk-mb", "N", "start a new chunk file past N MiB", "256"},
      {"threads", "N", "decoding threads (the output bytes do not depend on it)", "2"},
      {"strict", "", "fail on the first bad video instead of skipping it", ""},
      {"force", "", "replace an existing store (atomically, once the new one is complete)", ""},
      {"keep-truncated", "", "keep the complete frames of truncated files instead of skipping them", ""},
      {"quiet", "", "no progress line", ""},
      {"check", "DIR", "verify an existing store instead: read every frame and check its crc32", ""},
  };
  auto args = Args::parse("prepare-video",
                          "Decodes every video of a list file once (FFmpeg, short-side resize) into a packed clip "
                          "store of uint8 RGB frames with an index and per-frame checksums, so training samples "
                          "clips without decoding. Corrupt, truncated, zero-length, audio-only, unsupported-codec "
                          "and too-short videos are skipped, counted and listed with their reasons in "
                          "OUT/skipped.tsv (--strict fails instead).",
                          specs, argc, argv, 2);
  if (!args) return 0;
  if (args->has("check")) return check_store(args->get("check"));

  video::PrepareOptions o;
  o.list = args->require("list");
  o.root = args->get("root");
  o.format = video::parse_list_format(args->get("list-format"));
  o.frame_template = args->get("fname-tmpl");
  o.out = args->require("output");
  o.short_side = int(args->get_int("short-side"));
  o.frame_stride = int(args->get_int("frame-stride"));
  o.max_frames = int(args->get_int("max-frames"));
  o.min_frames = int(args->get_int("min-frames"));
  const int64_t chunk_mb = args->get_int("chunk-mb");
  if (chunk_mb < 1 || chunk_mb > (int64_t(1) << 20)) throw Error("--chunk-mb must be in [1, 1048576], got ", chunk_mb);
  o.chunk_bytes = chunk_mb << 20;
  o.threads = int(args->get_int("threads"));
  o.strict = args->has("strict");
  o.force = args->has("force");
  o.keep_truncated = args->has("keep-truncated");
  const bool tty = ::isatty(2);
  double last_print = -1;
  if (!args->has("quiet"))
    o.progress = [&](const video::PrepareProgress& p) {
      const bool last = p.done == p.total;
      if (!last && p.seconds - last_print < (tty ? 0.5 : 10.0)) return;
      last_print = p.seconds;
      const double rate = p.seconds > 0 ? double(p.done) / p.seconds : 0;
      const double eta = rate > 0 ? double(p.total - p.done) / rate : 0;
      std::fprintf(stderr, "%sprepare-video: %lld/%lld videos (%.0f%%), %lld skipped, %.1f videos/s, ETA %.0f s%s",
                   tty ? "\r" : "", (long long)p.done, (long long)p.total, 100.0 * double(p.done) / double(p.total),
                   (long long)p.skipped, rate, eta, tty ? (last ? "\n" : "   ") : "\n");
      std::fflush(stderr);
    };
  const video::PrepareReport r = video::prepare_clip_store(o);
  std::printf(
      "prepare-video: %lld ok, %lld skipped (%s), %lld frames, %s in %lld chunk(s), %.1f s (%.1f videos/s) -> %s\n",
      (long long)r.ok, (long long)r.skipped.total(), r.skipped.summary().c_str(), (long long)r.frames,
      human_bytes(double(r.bytes)).c_str(), (long long)r.chunks, r.seconds,
      r.seconds > 0 ? double(r.listed) / r.seconds : 0.0, o.out.c_str());
  for (const std::string& e : r.skipped.examples) std::printf("  skipped: %s\n", e.c_str());
  if (r.skipped.total() > int64_t(r.skipped.examples.size()))
    std::printf("  ... and %lld more skipped\n", (long long)(r.skipped.total() - int64_t(r.skipped.examples.size())));
  if (r.skipped.total() > 0)
    std::printf("  every skipped video with its reason: %s\n", r.skipped_report.c_str());
  return 0;
}

}  // namespace unmask::cli
