// app/cmd_make_videos.cc: `unmask make-videos`, a labelled synthetic action dataset (moving
// shapes; the class is the motion direction) encoded with libvpx-vp9 (webm) and/or libx264 (mp4),
// plus train/val list files in the VideoMAE ("path label") and V-SWIFT ("path,label") formats.
#include <cstdio>
#include <string>

#include "cli.h"
#include "unmask/error.h"
#include "data/video/synthetic.h"

namespace unmask::cli {

int cmd_make_videos(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"output", "DIR", "directory for the videos and list files; created if missing", ""},
      {"codec", "C", "vp9 (webm, libvpx-vp9), h264 (mp4, libx264) or both (alternating)", "vp9"},
      {"videos-per-class", "N", "videos of each of the 4 classes (left, right, up, down)", "16"},
      {"val-fraction", "P", "fraction of each class held out for the val lists", "0.25"},
      {"frames", "N", "frames per video", "32"},
      {"width", "W", "frame width (even)", "320"},
      {"height", "H", "frame height (even); 240 = SSv2's 240p", "240"},
      {"fps", "N", "frame rate", "12"},
      {"gop", "N", "keyframe interval in frames", "8"},
      {"seed", "N", "random seed (same seed, same videos)", "1"},
  };
  auto args = Args::parse("make-videos",
                          "Generates a synthetic action-recognition dataset through FFmpeg's encoders: each video "
                          "shows a shape moving left, right, up or down (the label), with random colours, sizes "
                          "and starts; writes train/val lists in VideoMAE and V-SWIFT formats.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  video::SyntheticOptions o;
  o.output_dir = args->require("output");
  o.codec = args->get("codec");
  o.videos_per_class = int(args->get_int("videos-per-class"));
  o.val_fraction = args->get_double("val-fraction");
  o.frames = int(args->get_int("frames"));
  o.width = int(args->get_int("width"));
  o.height = int(args->get_int("height"));
  o.fps = int(args->get_int("fps"));
  o.gop = int(args->get_int("gop"));
  o.seed = uint64_t(args->get_int("seed"));
  const video::SyntheticReport r = video::make_synthetic_dataset(o);
  std::printf("make-videos: %lld train + %lld val videos (%dx%d, %d frames, %s) in %.1f s -> %s\n",
              (long long)r.train_videos, (long long)r.val_videos, o.width, o.height, o.frames, o.codec.c_str(),
              r.seconds, o.output_dir.c_str());
  for (const std::string& f : r.list_files) std::printf("  %s\n", f.c_str());
  return 0;
}

}  // namespace unmask::cli
