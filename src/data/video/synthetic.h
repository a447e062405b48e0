// data/video/synthetic.h: a labelled synthetic action dataset, encoded through FFmpeg's encoders.
//
//   video::SyntheticOptions o; o.output_dir = "videos"; o.videos_per_class = 8; o.seed = 1;
//   video::SyntheticReport r = video::make_synthetic_dataset(o);
//   // videos/train_videomae.txt ("path label"), videos/train_vswift.csv ("path,label"), val_* too
//
// Each video shows three copies of one filled shape (rectangle or disc; random colour and size;
// one start in each third of the frame across the motion, so any crop shows one) moving together
// over a random plain background plus a few static distractor blobs. The class is the motion
// direction: 0 left, 1 right, 2 up, 3 down; over the whole video it travels a random 35-70% of
// the frame's width (left/right) or height (up/down), and its half size is 20-36 px at 240p
// (scaled with the height); the shape wraps around the edges so it never leaves the frame. Everything
// is a function of (seed, video number): the same seed gives the same pixels and files.
//
// Encoders (Debian's FFmpeg 5.1 build has both): "vp9" -> libvpx-vp9 in .webm (SSv2's format),
// "h264" -> libx264 in .mp4. Both are encoded yuv420p with a fixed GOP (keyframe every `gop`
// frames) so decoders must seek to earlier keyframes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace unmask::video {

constexpr int kSyntheticClasses = 4;
const char* synthetic_class_name(int label);  // "left", "right", "up", "down"

/// Encodes RGB24 frames [T, H, W, 3] to `path` with codec "vp9" (webm) or "h264" (mp4).
/// Width and height must be even (yuv420p).
void encode_rgb_video(const std::string& path, const std::string& codec, const std::vector<uint8_t>& rgb,
                      int frames, int width, int height, int fps, int gop);

/// Renders video `number` of class `label` (deterministic in seed, number): RGB [T, H, W, 3].
std::vector<uint8_t> render_synthetic_video(uint64_t seed, int64_t number, int label, int frames, int width,
                                            int height);

struct SyntheticOptions {
  std::string output_dir;
  std::string codec = "vp9";     // "vp9" (webm), "h264" (mp4) or "both" (alternating per video)
  int videos_per_class = 16;     // split into train/val by val_fraction
  double val_fraction = 0.25;
  int frames = 32;
  int width = 320, height = 240; // 240p, like SSv2
  int fps = 12;
  int gop = 8;
  uint64_t seed = 1;
};

struct SyntheticReport {
  int64_t train_videos = 0, val_videos = 0;
  std::vector<std::string> list_files;  // train/val in both list formats
  double seconds = 0;
};

SyntheticReport make_synthetic_dataset(const SyntheticOptions& options);

}  // namespace unmask::video
