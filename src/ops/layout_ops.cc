// ops/layout_ops.cc: the small layout and reduction ops of ops.h that BEVT needs on every device
// (transpose, 2 x 2 max pooling, argmax over channels, per-group row scaling). Validation here,
// then the CPU loops on the context's threads or the CUDA kernels (cuda/layout.cu). All four are
// exact: a permutation, a maximum, an index and one multiplication per element, so the CPU and
// CUDA results are bit-identical and the tests compare them to independent index arithmetic.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

namespace {

void check_contiguous_f32(const char* op, const char* name, const Tensor& t) {
  detail::check_f32(op, name, t);
  UNMASK_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe());
}

// The maximum's rule of max_pool2x2 and argmax_channels (PyTorch's): v replaces the running
// maximum m when it is larger or NaN, and a NaN maximum stays.
bool replaces_max(float v, float m) { return !std::isnan(m) && (std::isnan(v) || v > m); }

}  // namespace

void transpose(Context& ctx, const Tensor& x, Tensor& y) {
  detail::OpScope op_scope(ctx, "transpose");
  constexpr const char* op = "transpose";
  check_contiguous_f32(op, "x", x);
  check_contiguous_f32(op, "y", y);
  UNMASK_CHECK(x.ndim() == 2 || x.ndim() == 3, op, ": x must be [R, C] or [B, R, C], got ", x.describe());
  const bool batched = x.ndim() == 3;
  const int64_t B = batched ? x.size(0) : 1, R = x.size(batched ? 1 : 0), C = x.size(batched ? 2 : 1);
  const Shape want = batched ? Shape{B, C, R} : Shape{C, R};
  UNMASK_CHECK(y.shape() == want, op, ": y must be ", want.str(), " for x ", x.describe(), ", got ", y.describe());
  detail::check_device(op, "y", y, x.device());
  detail::check_no_overlap(op, "y", y, "x", x, false);
  if (x.numel() == 0) return;
  if (x.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::transpose(ctx, x.data<float>(), y.data<float>(), B, R, C);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* s = x.data<float>();
  float* d = y.data<float>();
  constexpr int64_t kTile = 32;  // 32 x 32 tiles: the reads and the writes both stay in cache lines
  const int64_t tiles_r = (R + kTile - 1) / kTile, tiles_c = (C + kTile - 1) / kTile;
  ctx.parallel_for(B * tiles_r, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / tiles_r, r0 = (t % tiles_r) * kTile, r1 = std::min(R, r0 + kTile);
      const float* sb = s + b * R * C;
      float* db = d + b * R * C;
      for (int64_t c0 = 0; c0 < tiles_c * kTile; c0 += kTile)
        for (int64_t c = c0; c < std::min(C, c0 + kTile); ++c)
          for (int64_t r = r0; r < r1; ++r) db[c * R + r] = sb[r * C + c];
    }
  }, 1 + 4096 / (kTile * std::max<int64_t>(1, C)));
}

void max_pool2x2(Context& ctx, const Tensor& x, Tensor& y) {
  detail::OpScope op_scope(ctx, "max_pool2x2");
  constexpr const char* op = "max_pool2x2";
  check_contiguous_f32(op, "x", x);
  check_contiguous_f32(op, "y", y);
  UNMASK_CHECK(x.ndim() == 4 && x.size(2) % 2 == 0 && x.size(3) % 2 == 0, op,
               ": x must be [B, C, H, W] with H and W even, got ", x.describe());
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  const Shape want{x.size(0), x.size(1), H / 2, W / 2};
  UNMASK_CHECK(y.shape() == want, op, ": y must be ", want.str(), ", got ", y.describe());
  detail::check_device(op, "y", y, x.device());
  detail::check_no_overlap(op, "y", y, "x", x, false);
  if (x.numel() == 0) return;
  if (x.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::max_pool2x2(ctx, x.data<float>(), y.data<float>(), planes, H, W);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* s = x.data<float>();
  float* d = y.data<float>();
  ctx.parallel_for(planes * (H / 2), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // output row r = (plane, i)
      const float* top = s + (r / (H / 2) * H + 2 * (r % (H / 2))) * W;
      float* out = d + r * (W / 2);
      for (int64_t j = 0; j < W / 2; ++j) {
        const float v[4] = {top[2 * j], top[2 * j + 1], top[W + 2 * j], top[W + 2 * j + 1]};
        float m = v[0];
        for (int k = 1; k < 4; ++k)
          if (replaces_max(v[k], m)) m = v[k];
        out[j] = m;
      }
    }
  }, 1 + 8192 / std::max<int64_t>(1, W));
}

void argmax_channels(Context& ctx, const Tensor& x, Tensor& ids) {
  detail::OpScope op_scope(ctx, "argmax_channels");
  constexpr const char* op = "argmax_channels";
  check_contiguous_f32(op, "x", x);
  UNMASK_CHECK(x.ndim() == 3 && x.size(1) >= 1, op, ": x must be [B, C, P] with C >= 1, got ", x.describe());
  const int64_t B = x.size(0), C = x.size(1), P = x.size(2);
  UNMASK_CHECK(ids.dtype() == DType::i32 && ids.is_contiguous() && ids.shape() == Shape({B, P}), op,
               ": ids must be contiguous i32 [", B, ", ", P, "], got ", ids.describe());
  detail::check_device(op, "ids", ids, x.device());
  if (B * P == 0) return;
  if (x.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::argmax_channels(ctx, x.data<float>(), ids.data<int32_t>(), B, C, P);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* s = x.data<float>();
  int32_t* d = ids.data<int32_t>();
  ctx.parallel_for(B, [&](int64_t b0, int64_t b1) {
    std::vector<float> best(static_cast<size_t>(P));
    for (int64_t b = b0; b < b1; ++b) {
      // Channel by channel over the whole plane: each step reads P contiguous floats.
      const float* xb = s + b * C * P;
      int32_t* ib = d + b * P;
      std::copy_n(xb, P, best.data());
      std::fill_n(ib, P, 0);
      for (int64_t c = 1; c < C; ++c)
        for (int64_t p = 0; p < P; ++p) {
          const float v = xb[c * P + p];
          if (replaces_max(v, best[size_t(p)])) best[size_t(p)] = v, ib[p] = int32_t(c);
        }
    }
  }, 1);
}

void scale_rows(Context& ctx, const Tensor& x, const Tensor& scales, int64_t rows_per_group, Tensor& y) {
  detail::OpScope op_scope(ctx, "scale_rows");
  constexpr const char* op = "scale_rows";
  detail::check_f32(op, "x", x);
  detail::check_f32(op, "y", y);
  const detail::Rows rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  detail::check_same_shape(op, "x", x, "y", y);
  UNMASK_CHECK(rows_per_group >= 1 && rx.N % rows_per_group == 0, op, ": ", rx.N, " rows are not whole groups of ",
               rows_per_group);
  detail::check_vector(op, "scales", scales, rx.N / rows_per_group, x.device());
  detail::check_device(op, "y", y, x.device());
  detail::check_no_overlap(op, "y", y, "x", x, true);
  if (x.numel() == 0) return;
  if (x.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::scale_rows(ctx, x.data<float>(), rx.ld, scales.data<float>(), rows_per_group, y.data<float>(), ry.ld,
                            rx.N, rx.C);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* s = x.data<float>();
  const float* g = scales.data<float>();
  float* d = y.data<float>();
  ctx.parallel_for(rx.N, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float f = g[r / rows_per_group];
      for (int64_t c = 0; c < rx.C; ++c) d[r * ry.ld + c] = f * s[r * rx.ld + c];
    }
  }, 1 + 16384 / std::max<int64_t>(1, rx.C));
}

}  // namespace unmask::ops
