// data/video/augment.h: VideoMAE's clip augmentation: multi-scale crop, optional horizontal flip,
// resize to the input size, scale to [0, 1] and ImageNet mean/std normalisation, producing the
// model's float [3, T, S, S] layout (C, T, H, W). One crop box and one flip decision per clip:
// every frame gets the same geometry (tube masking relies on it).
//
// Multi-scale crop (TSN's GroupMultiScaleCrop as VideoMAE configures it: scales
// {1, .875, .75, .66}, max_distort 1, fix_crop, more_fix_crop):
//   base = min(W, H); sizes = int(base * s) for each scale; a size within 3 px of the input size
//   snaps to it; (crop_w, crop_h) is drawn uniformly among pairs (sizes[j], sizes[i]) with
//   |i - j| <= max_distort; the offset is drawn uniformly from the 13 fixed positions on a grid
//   of steps ((W - crop_w) // 4, (H - crop_h) // 4): 4 corners, centre, 4 edge middles, 4
//   quarter points (duplicates kept, as TSN keeps them).
// Resize is bilinear with half-pixel centres (align_corners = false, no antialiasing), a
// documented difference from PIL's antialiased downscale VideoMAE uses.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "data/video/decode.h"
#include "data/video/sampling.h"

namespace unmask::video {

struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
};

struct AugmentOptions {
  int input_size = 224;
  std::vector<double> scales = {1.0, 0.875, 0.75, 0.66};
  int max_distort = 1;
  bool more_fix_crop = true;
  bool flip = false;  // random horizontal flip with probability 0.5 (off for SSv2, where direction is the label)
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

/// The (crop_w, crop_h) pairs the multi-scale crop chooses among.
std::vector<std::pair<int, int>> multiscale_crop_sizes(int image_w, int image_h, const AugmentOptions& options);
/// The fixed offsets (x, y) for a crop size (5, or 13 with more_fix_crop).
std::vector<std::pair<int, int>> fixed_crop_offsets(int image_w, int image_h, int crop_w, int crop_h,
                                                    bool more_fix_crop);
CropBox sample_multiscale_crop(int image_w, int image_h, const AugmentOptions& options, SampleRng& rng);

/// Crops `box` from every frame, resizes it to out_size x out_size, flips if asked, and writes
/// (pixel / 255 - mean) / std as float [3, T, out_size, out_size].
std::vector<float> crop_resize_normalize(const Clip& clip, const CropBox& box, int out_size, bool flip,
                                         const float mean[3], const float std[3]);
/// float64 reference of crop_resize_normalize (tests).
std::vector<double> crop_resize_normalize_reference(const Clip& clip, const CropBox& box, int out_size, bool flip,
                                                    const float mean[3], const float std[3]);

/// Test-time spatial views (VideoMAE kinetics.py test mode, after the short-side resize to
/// crop_size): num_crops == 1 -> the centre crop ((W - s) / 2, (H - s) / 2); num_crops > 1 -> s x s
/// crops along the long side starting at int(i * (long - s) / (num_crops - 1)).
std::vector<CropBox> test_crop_boxes(int image_w, int image_h, int crop_size, int num_crops);

/// The whole training transform: sample a crop (and a flip), then crop_resize_normalize.
std::vector<float> augment_clip(const Clip& clip, const AugmentOptions& options, SampleRng& rng);

}  // namespace unmask::video
