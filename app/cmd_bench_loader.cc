// app/cmd_bench_loader.cc: `unmask bench loader`, the clip loader's throughput (clips/s) and
// its time split (read or decode / augment / copy on the workers, the consumer's wait), from a
// clip store (--store) or a list decoded on the fly (--list; bad videos are skipped by
// prepare-video's rule, or fail the run with --strict). The consumer does no compute, so
// clips/s is the loader's ceiling; bench/compare_video_decode.sh sets it beside the ffmpeg CLI.
#include <cstdio>
#include <string>

#include "cli.h"
#include "unmask/error.h"
#include "data/video/clip_loader.h"

namespace unmask::cli {

int bench_loader(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"store", "DIR", "a clip store (unmask prepare-video)", ""},
      {"list", "FILE", "a list file decoded on the fly with FFmpeg instead", ""},
      {"root", "DIR", "directory joined to relative paths of --list", ""},
      {"list-format", "F", "list format: videomae, vswift, vswift4, vswift6, videomae2, rawframes or auto", "auto"},
      {"fname-tmpl", "T", "--list: file names in frame folders (videomae2, rawframes)", "img_{:05}.jpg"},
      {"short-side", "N", "--list: resize so the shorter side is N (as prepare-video does)", "128"},
      {"strict", "", "--list: a bad video (prepare-video's rule) is an error instead of skipped and counted", ""},
      {"keep-truncated", "", "--list: use the complete frames of truncated files", ""},
      {"mode", "M", "pretrain (multi-scale crop), train (+ h-flip) or test (views)", "pretrain"},
      {"batch", "N", "clips per batch", "8"},
      {"frames", "N", "frames per clip", "16"},
      {"rate", "N", "dense sampling rate (source frames between clip frames)", "4"},
      {"segments", "", "TSN segment sampling instead of dense", ""},
      {"crop", "N", "output size", "224"},
      {"test-views", "SxC", "test mode: temporal segments x spatial crops", "1x1"},
      {"threads", "N", "loader worker threads", "2"},
      {"queue", "N", "batches prefetched ahead of the consumer", "4"},
      {"epochs", "N", "epochs to time (each is every video once)", "1"},
      {"warmup", "N", "untimed epochs first (fills the loader's buffer pool: first-touch page faults)", "1"},
      {"seed", "N", "sampling/augmentation seed", "1"},
      {"json", "", "one JSON object instead of the table", ""},
  };
  auto args = Args::parse("bench loader",
                          "Clip loader throughput: clips/s and where the time goes (read/decode, augment, copy, "
                          "consumer wait), from a clip store or a list decoded on the fly.",
                          specs, argc, argv, 3);
  if (!args) return 0;
  if (args->has("store") == args->has("list")) throw Error("pass exactly one of --store and --list");
  video::ClipLoaderOptions o;
  const std::string mode = args->get("mode");
  if (mode == "pretrain")
    o.mode = video::ClipLoaderOptions::Mode::pretrain;
  else if (mode == "train")
    o.mode = video::ClipLoaderOptions::Mode::train;
  else if (mode == "test")
    o.mode = video::ClipLoaderOptions::Mode::test;
  else
    throw Error("--mode must be pretrain, train or test, got '", mode, "'");
  o.batch = int(args->get_int("batch"));
  o.num_frames = int(args->get_int("frames"));
  o.sampling_rate = int(args->get_int("rate"));
  o.segments = args->has("segments");
  o.crop = int(args->get_int("crop"));
  const std::string views = args->get("test-views");
  if (std::sscanf(views.c_str(), "%dx%d", &o.test_segments, &o.test_crops) != 2)
    throw Error("--test-views must look like 5x3, got '", views, "'");
  o.threads = int(args->get_int("threads"));
  o.queue_depth = int(args->get_int("queue"));
  o.seed = uint64_t(args->get_int("seed"));
  const int64_t epochs = args->get_int("epochs"), warmup = args->get_int("warmup");
  if (epochs < 1) throw Error("--epochs must be >= 1, got ", epochs);
  if (warmup < 0) throw Error("--warmup must be >= 0, got ", warmup);

  std::string source;
  video::ClipLoader loader = [&] {
    if (args->has("store")) {
      source = "store " + args->get("store");
      return video::ClipLoader::from_store(args->get("store"), o);
    }
    const video::ListFormat fmt = video::parse_list_format(args->get("list-format"));
    o.frame_template = args->get("fname-tmpl");
    o.strict = args->has("strict");
    o.keep_truncated = args->has("keep-truncated");
    source = "list " + args->get("list");
    return video::ClipLoader::from_list(args->get("list"), args->get("root"), fmt, int(args->get_int("short-side")), o);
  }();
  video::ClipBatch b;
  for (int64_t e = 0; e < warmup; ++e)
    while (loader.next(b)) {
    }
  const video::LoaderTimes t0 = loader.times();
  for (int64_t e = 0; e < epochs; ++e)
    while (loader.next(b)) {
    }
  video::LoaderTimes t = loader.times();  // the timed epochs only
  t.read_s -= t0.read_s;
  t.augment_s -= t0.augment_s;
  t.copy_s -= t0.copy_s;
  t.wait_s -= t0.wait_s;
  t.wall_s -= t0.wall_s;
  t.clips -= t0.clips;
  t.batches -= t0.batches;
  const double worker_s = t.read_s + t.augment_s + t.copy_s;
  auto pct = [&](double x) { return worker_s > 0 ? 100.0 * x / worker_s : 0.0; };
  const double cps = t.wall_s > 0 ? double(t.clips) / t.wall_s : 0;
  if (args->has("json")) {
    std::printf(
        "{\"source\": \"%s\", \"mode\": \"%s\", \"videos\": %lld, \"clips\": %lld, \"batches\": %lld, "
        "\"wall_s\": %.4f, \"clips_per_s\": %.2f, \"read_s\": %.4f, \"augment_s\": %.4f, \"copy_s\": %.4f, "
        "\"wait_s\": %.4f, \"warmup_epochs\": %lld, \"threads\": %d, \"frames\": %d, \"crop\": %d, \"skipped\": "
        "%lld}\n",
        source.c_str(), mode.c_str(), (long long)loader.size(), (long long)t.clips, (long long)t.batches, t.wall_s, cps,
        t.read_s, t.augment_s, t.copy_s, t.wait_s, (long long)warmup, o.threads, o.num_frames, o.crop,
        (long long)t.skipped.total());
    return 0;
  }
  std::printf("bench loader: %s, mode %s, %d threads, %d x %dx%d clips, batch %d\n", source.c_str(), mode.c_str(),
              o.threads, o.num_frames, o.crop, o.crop, o.batch);
  std::printf("  %lld clips in %lld batches, %.3f s: %.1f clips/s\n", (long long)t.clips, (long long)t.batches,
              t.wall_s, cps);
  std::printf("  worker time %.3f thread-s: read/decode %.3f (%.0f%%), augment %.3f (%.0f%%), copy %.3f (%.0f%%)\n",
              worker_s, t.read_s, pct(t.read_s), t.augment_s, pct(t.augment_s), t.copy_s, pct(t.copy_s));
  std::printf("  consumer wait %.3f s (%.0f%% of wall)\n", t.wait_s, t.wall_s > 0 ? 100.0 * t.wait_s / t.wall_s : 0);
  if (t.skipped.total()) {
    std::printf("  skipped videos: %s\n", t.skipped.summary().c_str());
    for (const auto& m : t.skipped.examples) std::printf("    %s\n", m.c_str());
  }
  return 0;
}

}  // namespace unmask::cli
