// data/video/augment.cc: multi-scale crop, flip, resize and normalisation (see augment.h).
#include "data/video/augment.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "unmask/error.h"

namespace unmask::video {

std::vector<std::pair<int, int>> multiscale_crop_sizes(int image_w, int image_h, const AugmentOptions& o) {
  UNMASK_CHECK(image_w > 0 && image_h > 0, "multiscale crop: image is ", image_w, "x", image_h);
  UNMASK_CHECK(!o.scales.empty(), "multiscale crop: no scales");
  const int base = std::min(image_w, image_h);
  std::vector<int> sizes;
  for (const double s : o.scales) {
    const int v = int(base * s);
    sizes.push_back(std::abs(v - o.input_size) < 3 ? o.input_size : v);
  }
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < sizes.size(); ++i)      // i: height
    for (size_t j = 0; j < sizes.size(); ++j)    // j: width
      if (std::abs(int(i) - int(j)) <= o.max_distort) pairs.emplace_back(sizes[j], sizes[i]);
  return pairs;
}

std::vector<std::pair<int, int>> fixed_crop_offsets(int image_w, int image_h, int crop_w, int crop_h,
                                                    bool more_fix_crop) {
  const int ws = (image_w - crop_w) / 4, hs = (image_h - crop_h) / 4;
  std::vector<std::pair<int, int>> r = {{0, 0}, {4 * ws, 0}, {0, 4 * hs}, {4 * ws, 4 * hs}, {2 * ws, 2 * hs}};
  if (more_fix_crop)
    r.insert(r.end(), {{0, 2 * hs}, {4 * ws, 2 * hs}, {2 * ws, 4 * hs}, {2 * ws, 0},
                       {ws, hs}, {3 * ws, hs}, {ws, 3 * hs}, {3 * ws, 3 * hs}});
  return r;
}

CropBox sample_multiscale_crop(int image_w, int image_h, const AugmentOptions& o, SampleRng& rng) {
  const auto pairs = multiscale_crop_sizes(image_w, image_h, o);
  const auto [cw, ch] = pairs[size_t(rng.below(int64_t(pairs.size())))];
  UNMASK_CHECK(cw > 0 && ch > 0 && cw <= image_w && ch <= image_h, "multiscale crop: crop ", cw, "x", ch,
               " does not fit a ", image_w, "x", image_h, " frame");
  const auto offsets = fixed_crop_offsets(image_w, image_h, cw, ch, o.more_fix_crop);
  const auto [x, y] = offsets[size_t(rng.below(int64_t(offsets.size())))];
  return CropBox{x, y, cw, ch};
}

std::vector<CropBox> test_crop_boxes(int image_w, int image_h, int s, int num_crops) {
  UNMASK_CHECK(num_crops > 0 && s > 0 && s <= image_w && s <= image_h, "test crops: ", num_crops, " crops of ", s,
               "x", s, " do not fit a ", image_w, "x", image_h, " frame");
  std::vector<CropBox> boxes;
  if (num_crops == 1) return {CropBox{(image_w - s) / 2, (image_h - s) / 2, s, s}};
  const bool wide = image_w >= image_h;
  const double step = double((wide ? image_w : image_h) - s) / (num_crops - 1);
  for (int i = 0; i < num_crops; ++i) {
    const int start = int(i * step);
    boxes.push_back(wide ? CropBox{start, (image_h - s) / 2, s, s} : CropBox{(image_w - s) / 2, start, s, s});
  }
  return boxes;
}

namespace {

void check_box(const Clip& clip, const CropBox& b, int out_size) {
  UNMASK_CHECK(out_size > 0, "crop_resize_normalize: out_size must be positive, got ", out_size);
  UNMASK_CHECK(b.width > 0 && b.height > 0 && b.x >= 0 && b.y >= 0 && b.x + b.width <= clip.width &&
                   b.y + b.height <= clip.height,
               "crop_resize_normalize: box (", b.x, ",", b.y, " ", b.width, "x", b.height, ") outside the ",
               clip.width, "x", clip.height, " frame");
}

// Source taps for bilinear resize along one axis (half-pixel centres, edge clamped).
struct Taps { std::vector<int> i0, i1; std::vector<float> w1; };
Taps taps(int in, int out) {
  Taps t;
  for (int o = 0; o < out; ++o) {
    double s = (o + 0.5) * double(in) / out - 0.5;
    s = std::clamp(s, 0.0, double(in - 1));
    const int a = int(std::floor(s));
    t.i0.push_back(a);
    t.i1.push_back(std::min(a + 1, in - 1));
    t.w1.push_back(float(s - a));
  }
  return t;
}

}  // namespace

std::vector<float> crop_resize_normalize(const Clip& clip, const CropBox& b, int S, bool flip, const float mean[3],
                                         const float std[3]) {
  check_box(clip, b, S);
  const Taps tx = taps(b.width, S), ty = taps(b.height, S);
  const int64_t T = clip.frames, plane = int64_t(S) * S;
  std::vector<float> out(size_t(3 * T * plane));
  float scale[3], shift[3];  // (p / 255 - mean) / std = p * scale + shift
  for (int c = 0; c < 3; ++c) { scale[c] = 1.0f / (255.0f * std[c]); shift[c] = -mean[c] / std[c]; }
  std::vector<float> row(size_t(b.width) * 3 * 2);
  for (int64_t t = 0; t < T; ++t) {
    const uint8_t* f = clip.frame(t);
    for (int oy = 0; oy < S; ++oy) {
      const uint8_t* r0 = f + (int64_t(b.y + ty.i0[size_t(oy)]) * clip.width + b.x) * 3;
      const uint8_t* r1 = f + (int64_t(b.y + ty.i1[size_t(oy)]) * clip.width + b.x) * 3;
      const float wy = ty.w1[size_t(oy)];
      // Vertical pass into one float row, then the horizontal taps.
      for (int k = 0; k < b.width * 3; ++k) row[size_t(k)] = float(r0[k]) + wy * (float(r1[k]) - float(r0[k]));
      for (int ox = 0; ox < S; ++ox) {
        const int sx = flip ? S - 1 - ox : ox;
        const float* p0 = &row[size_t(tx.i0[size_t(sx)]) * 3];
        const float* p1 = &row[size_t(tx.i1[size_t(sx)]) * 3];
        const float wx = tx.w1[size_t(sx)];
        for (int c = 0; c < 3; ++c)
          out[size_t((c * T + t) * plane + int64_t(oy) * S + ox)] = (p0[c] + wx * (p1[c] - p0[c])) * scale[c] + shift[c];
      }
    }
  }
  return out;
}

std::vector<double> crop_resize_normalize_reference(const Clip& clip, const CropBox& b, int S, bool flip,
                                                    const float mean[3], const float std[3]) {
  check_box(clip, b, S);
  const int64_t T = clip.frames;
  std::vector<double> out(size_t(3 * T * S * S));
  auto coord = [](int o, int in, int out_n, int* a, int* a1, double* w) {
    double s = std::clamp((o + 0.5) * in / out_n - 0.5, 0.0, double(in - 1));
    *a = int(std::floor(s));
    *a1 = std::min(*a + 1, in - 1);
    *w = s - *a;
  };
  for (int64_t t = 0; t < T; ++t)
    for (int oy = 0; oy < S; ++oy)
      for (int ox = 0; ox < S; ++ox) {
        int x0, x1, y0, y1;
        double wx, wy;
        coord(flip ? S - 1 - ox : ox, b.width, S, &x0, &x1, &wx);
        coord(oy, b.height, S, &y0, &y1, &wy);
        for (int c = 0; c < 3; ++c) {
          auto px = [&](int x, int y) { return double(clip.frame(t)[((b.y + y) * clip.width + b.x + x) * 3 + c]); };
          const double v = (1 - wy) * ((1 - wx) * px(x0, y0) + wx * px(x1, y0)) + wy * ((1 - wx) * px(x0, y1) + wx * px(x1, y1));
          out[size_t(((c * T + t) * S + oy) * S + ox)] = (v / 255.0 - double(mean[c])) / double(std[c]);
        }
      }
  return out;
}

std::vector<float> augment_clip(const Clip& clip, const AugmentOptions& o, SampleRng& rng) {
  const CropBox box = sample_multiscale_crop(clip.width, clip.height, o, rng);
  const bool flip = o.flip && (rng.next() & 1);
  return crop_resize_normalize(clip, box, o.input_size, flip, o.mean, o.std);
}

}  // namespace unmask::video
