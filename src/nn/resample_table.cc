// nn/resample_table.cc: separable bicubic (h, w) and linear (t) resampling in double.
#include "nn/resample_table.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "unmask/error.h"

namespace unmask::train {
namespace {

// PyTorch's cubic convolution kernel (A = -0.75) for |x| <= 1 and 1 < |x| < 2.
double cubic1(double x, double a) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
double cubic2(double x, double a) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

// out[o] = sum_k w[o][k] in[idx[o][k]] along one axis of `in_size` -> `out_size` samples.
struct Taps {
  std::vector<std::array<int64_t, 4>> index;
  std::vector<std::array<double, 4>> weight;
};

Taps cubic_taps(int64_t in_size, int64_t out_size) {
  Taps taps;
  const double scale = double(in_size) / double(out_size);
  for (int64_t o = 0; o < out_size; ++o) {
    const double src = (double(o) + 0.5) * scale - 0.5;  // not clamped for cubic (PyTorch)
    const double base = std::floor(src), t = src - base;
    std::array<int64_t, 4> idx;
    for (int k = 0; k < 4; ++k) idx[size_t(k)] = std::clamp<int64_t>(int64_t(base) - 1 + k, 0, in_size - 1);
    const double a = -0.75;
    taps.index.push_back(idx);
    taps.weight.push_back({cubic2(t + 1, a), cubic1(t, a), cubic1(1 - t, a), cubic2(2 - t, a)});
  }
  return taps;
}

Taps linear_taps(int64_t in_size, int64_t out_size) {
  Taps taps;
  const double scale = double(in_size) / double(out_size);
  for (int64_t o = 0; o < out_size; ++o) {
    const double src = std::max(0.0, (double(o) + 0.5) * scale - 0.5);
    const int64_t i0 = std::min(int64_t(src), in_size - 1), i1 = std::min(i0 + 1, in_size - 1);
    const double l = src - double(i0);
    taps.index.push_back({i0, i1, i1, i1});
    taps.weight.push_back({1 - l, l, 0, 0});
  }
  return taps;
}

// Resamples axis `axis` (0 = t, 1 = h, 2 = w) of a [T, H, W, D] double buffer.
std::vector<double> resample_axis(const std::vector<double>& in, const int64_t (&in_dims)[4], int axis,
                                  const Taps& taps, int64_t out_size) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= in_dims[i];
  for (int i = axis + 1; i < 4; ++i) inner *= in_dims[i];
  std::vector<double> out(size_t(outer * out_size * inner), 0.0);
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t o = 0; o < out_size; ++o)
      for (int k = 0; k < 4; ++k) {
        const double w = taps.weight[size_t(o)][size_t(k)];
        if (w == 0) continue;
        const double* src = in.data() + (a * in_dims[axis] + taps.index[size_t(o)][size_t(k)]) * inner;
        double* dst = out.data() + (a * out_size + o) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += w * src[i];
      }
  return out;
}

}  // namespace

Tensor resample_table(const Tensor& table, int64_t from_frames, int64_t from_height, int64_t from_width,
                      int64_t to_frames, int64_t to_height, int64_t to_width) {
  UNMASK_CHECK(
      from_frames >= 1 && from_height >= 1 && from_width >= 1 && to_frames >= 1 && to_height >= 1 && to_width >= 1,
      "resample_table: grids must be positive, got ", from_frames, "x", from_height, "x", from_width,
      " -> ", to_frames, "x", to_height, "x", to_width);
  UNMASK_CHECK(table.dtype() == DType::f32 && table.ndim() == 3 && table.size(0) == 1 &&
                   table.size(1) == from_frames * from_height * from_width,
               "resample_table: table must be f32 [1, ", from_frames * from_height * from_width,
               ", D] for the ", from_frames, "x", from_height, "x", from_width, " grid, got ", table.describe());
  const int64_t d = table.size(2);
  const Tensor c = table.contiguous();
  std::vector<double> buf(c.data<float>(), c.data<float>() + c.numel());
  int64_t dims[4] = {from_frames, from_height, from_width, d};
  // Bicubic over (h, w) is separable: rows then columns, as PyTorch's kernel sums 4 x 4 taps.
  buf = resample_axis(buf, dims, 1, cubic_taps(from_height, to_height), to_height);
  dims[1] = to_height;
  buf = resample_axis(buf, dims, 2, cubic_taps(from_width, to_width), to_width);
  dims[2] = to_width;
  buf = resample_axis(buf, dims, 0, linear_taps(from_frames, to_frames), to_frames);
  Tensor out = Tensor::empty({1, to_frames * to_height * to_width, d}, DType::f32);
  float* p = out.data<float>();
  for (size_t i = 0; i < buf.size(); ++i) p[i] = float(buf[i]);
  return out;
}

}  // namespace unmask::train
