// data/video/bevt_data.h: BEVT's two input streams (reference/bevt.md 2.1, 2.10): clips and
// images, each with its tokenizer copy at half the side and its BEiT block masks.
//
//   BevtDataOptions o; o.crop = 224; o.frames = 16; o.seed = 1;
//   BevtBatch b = synthetic_bevt_batch(o, first_clip, 4, first_image, 32);   // one iteration
//
// Per clip (the video pipeline): frames at a random short side U{rescale_min..rescale_max}
// (scaled by crop / 224), a uniform crop x crop box, a horizontal flip with p 0.5 (the whole
// clip), then (a) normalised with ImageNet's mean / std into [3, T, crop, crop] and (b) a
// crop / 2 copy by Lanczos-4 resampling (OpenCV's INTER_LANCZOS4: 8 x 8 taps of
// sinc(x) sinc(x / 4), no widening when shrinking; rounded to 0..255 as cv2 returns uint8)
// mapped by x / 255 0.8 + 0.1 (DALL-E's map_pixels) for the tokenizer. Images run the same with one frame, after colour jitter
// (brightness, contrast, saturation each by a factor U[0.6, 1.4], in one fixed random order,
// clipped to 0..255) before the crop.
// Masks: BEiT's block generator on the crop / 16 grid (half the cells; blocks of at least 16 of
// 196 cells, scaled to the grid), video tubes over T / 2 slices (block_masks.h).
//
// The synthetic source renders data/video/synthetic.h's moving shapes in memory (clip i shows
// class i mod 4; an image is one frame of such a video), so the pipeline runs with no files.
// Everything is a function of (seed, sample index): a resumed run sees the same samples.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/video/block_masks.h"
#include "unmask/tensor.h"

namespace unmask::video {

/// One iteration's input. A stream with no samples (undefined tensors) is skipped.
struct BevtBatch {
  Tensor videos;                     // f32 [Bv, 3, T, H, W], normalised
  Tensor video_frames;               // f32 [Bv T, 3, H/2, W/2]: the tokenizer's copies, 0.8 x + 0.1
  std::vector<uint8_t> video_masks;  // [Bv, T/2, H/16, W/16], 1 = masked
  Tensor images;                     // f32 [Bi, 3, H', W'], normalised
  Tensor image_frames;               // f32 [Bi, 3, H'/2, W'/2]
  std::vector<uint8_t> image_masks;  // [Bi, H'/16, W'/16]
  int64_t clips() const { return videos.defined() ? videos.size(0) : 0; }
  int64_t image_count() const { return images.defined() ? images.size(0) : 0; }
};

struct BevtDataOptions {
  int64_t frames = 16;                         // clip length (even)
  int64_t frame_interval = 8;                  // list videos: every 8th frame (a 128-frame span)
  int64_t crop = 224;                          // side of clips and images (a multiple of 32)
  int64_t rescale_min = 256, rescale_max = 320;  // short side before the crop, at crop 224
  bool flip = true;
  double jitter = 0.4;                         // images: brightness / contrast / saturation
  uint64_t seed = 0;
  int64_t workers = 1;                         // threads decoding a batch's samples (the batch is the same for any)
  /// The mask grid's options: crop / 16 on a side, half the cells, blocks >= 16 / 196 of the grid.
  BlockMaskOptions masks() const;
};

/// Clips [first_clip, first_clip + clips) and images [first_image, ...) of the synthetic source.
BevtBatch synthetic_bevt_batch(const BevtDataOptions& o, uint64_t first_clip, int64_t clips, uint64_t first_image,
                               int64_t images);

/// Masks only (the benchmark's default input: random pixels, BEVT's masks).
void draw_bevt_masks(const BevtDataOptions& o, uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images,
                     BevtBatch& batch);

/// One image of an image source.
struct ImageEntry {
  std::string path;
  int64_t label = 0;
};
/// An image list ("path label" lines; relative paths from `root`, else the list's folder) or an
/// ImageNet-style folder (one subfolder per class, sorted names = labels 0, 1, ...; the .jpg /
/// .jpeg / .JPEG files in each). Errors name the file:line or the folder and what is wrong.
std::vector<ImageEntry> read_image_source(const std::string& path, const std::string& root = "");

/// BEVT's input from files, through the project's decoders: clips from a video list
/// (video_list.h's formats: mmaction's "path label" is "videomae") sampled as mmaction's
/// SampleFrames does in training (frames offset + k interval, k < frames, the offset uniform in
/// [0, n - frames interval], indices past the end wrapping), decoded at the rescaled short side
/// (swscale bicubic); images from read_image_source, decoded likewise, colour-jittered. Either
/// source may be empty: that stream is the synthetic one. Sample i of a stream is entry
/// perm_e[i mod n] of epoch e = i / n (a seeded shuffle per epoch), so batches are functions of
/// (seed, index) as the synthetic ones are. A video or image that fails to decode is skipped
/// (the next entry of the order takes its place; counted in skipped()).
/// What a BevtSource did: batches made (by batch() or in the background), their samples and the
/// seconds spent making them, and the seconds batch() callers waited (for a prefetched batch,
/// only what was left of it).
struct BevtLoaderStats {
  int64_t batches = 0, clips = 0, images = 0, prefetched = 0;
  double make_s = 0, wait_s = 0;
};

class BevtSource {
 public:
  BevtSource(const BevtDataOptions& options, const std::string& video_list, const std::string& images,
             const std::string& root = "");
  ~BevtSource();
  BevtBatch batch(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images);
  /// Starts making that batch on a background thread; the batch() call with the same arguments
  /// returns it (any other call first lets it finish, then drops it). One batch ahead at most.
  void prefetch(uint64_t first_clip, int64_t clips, uint64_t first_image, int64_t images);
  BevtLoaderStats stats() const;
  int64_t videos() const;       // 0: synthetic clips
  int64_t image_files() const;  // 0: synthetic images
  int64_t skipped() const;
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Lanczos-4 resize of an RGB24 image [h, w, 3] to [3, oh, ow], the uint8 values cv2.resize
/// (INTER_LANCZOS4) gives, as floats: source x = (dst x + 0.5) w / ow - 0.5, 8 taps, weights
/// normalised then in OpenCV's 8-bit fixed point (x 2048 per pass), edges replicated.
std::vector<float> lanczos4_resize(const uint8_t* rgb, int h, int w, int oh, int ow);

/// mmaction's ColorJitter on an RGB24 image in place: factors {brightness, contrast, saturation}
/// applied in `order` (a permutation of 0, 1, 2), in float, clipped to 0..255 at the end.
void color_jitter(uint8_t* rgb, int64_t pixels, const double factors[3], const int order[3]);

}  // namespace unmask::video
