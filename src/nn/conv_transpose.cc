// nn/conv_transpose.cc: see conv_transpose.h.
#include "nn/conv_transpose.h"

#include <vector>

#include "nn/window_geometry.h"
#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

// The shuffle as a row map: output token o (volume order of the upsampled volume) takes row
// r K + k of Y viewed as [R K, Cout] (Y's columns in (k, c) order), where r is o's input token
// and k its offset inside the kernel.
std::vector<int32_t> shuffle_rows(int64_t batch, std::array<int64_t, 3> size, std::array<int64_t, 3> kernel) {
  const auto [D, H, W] = size;
  const auto [kd, kh, kw] = kernel;
  const int64_t K = kd * kh * kw, OH = H * kh, OW = W * kw, OD = D * kd;
  UNMASK_CHECK(batch * D * H * W * K < (int64_t(1) << 31), "transposed convolution: ", batch * D * H * W * K,
               " output tokens exceed the i32 row ids");
  std::vector<int32_t> rows(size_t(batch * D * H * W * K));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t r = ((b * D + d) * H + h) * W + w;
          for (int64_t a = 0; a < kd; ++a)
            for (int64_t e = 0; e < kh; ++e)
              for (int64_t f = 0; f < kw; ++f) {
                const int64_t o = ((b * OD + d * kd + a) * OH + h * kh + e) * OW + w * kw + f;
                rows[size_t(o)] = int32_t(r * K + (a * kh + e) * kw + f);
              }
        }
  return rows;
}

}  // namespace

void conv_transpose_forward(Context& ctx, const PV& w, const PV& b, const Tensor& x, int64_t batch,
                            std::array<int64_t, 3> size, std::array<int64_t, 3> kernel, Tensor& y,
                            ConvTransposeSaved& saved) {
  const int64_t R = batch * size[0] * size[1] * size[2], K = kernel[0] * kernel[1] * kernel[2];
  UNMASK_CHECK(x.ndim() == 2 && x.size(0) == R && x.dtype() == DType::f32,
               "transposed convolution: x must be f32 [", R, ", Cin], got ", x.describe());
  const int64_t Cin = x.size(1);
  UNMASK_CHECK(w.value.ndim() == 2 && w.value.size(0) == Cin && w.value.size(1) % K == 0, "transposed convolution: "
               "the weight must be [", Cin, ", Cout x ", K, "], got ", w.value.describe());
  const int64_t Cout = w.value.size(1) / K;
  UNMASK_CHECK(b.value.numel() == Cout, "transposed convolution: the bias must have ", Cout, " values");
  const Device dev = x.device();
  // The weight's columns in (k, c) order, and the bias repeated per k: the GEMM's epilogue adds it.
  Tensor wkc = Tensor::empty({Cin, K, Cout}, DType::f32, dev);
  ops::transpose(ctx, w.value.view({Cin, Cout, K}), wkc);
  Tensor bias = Tensor::empty({K, Cout}, DType::f32, dev);
  for (int64_t k = 0; k < K; ++k) {
    Tensor row = bias.slice(0, k, k + 1);
    ops::copy(ctx, b.value.view({1, Cout}), row);
  }
  Tensor Y = Tensor::empty({R, K * Cout}, DType::f32, dev);
  ops::GemmArgs args;
  const Tensor bias_flat = bias.view({K * Cout});
  args.bias = &bias_flat;
  ops::gemm(ctx, x, ops::Trans::no, wkc.view({Cin, K * Cout}), ops::Trans::no, Y, args);
  y = Tensor::empty({R * K, Cout}, DType::f32, dev);
  const std::vector<int32_t> rows = shuffle_rows(batch, size, kernel);
  ops::embedding(ctx, Y.view({R * K, Cout}), row_ids(rows, dev), y);
  saved.x = x;
  saved.unshuffle = row_ids(inverse_rows(rows), dev);
}

void conv_transpose_backward(Context& ctx, PV& w, PV& b, const ConvTransposeSaved& saved,
                             std::array<int64_t, 3> kernel, const Tensor& dy, Tensor& dx) {
  const int64_t R = saved.x.size(0), K = kernel[0] * kernel[1] * kernel[2], Cout = w.value.size(1) / K;
  UNMASK_CHECK(dy.ndim() == 2 && dy.size(0) == R * K && dy.size(1) == Cout && dy.is_contiguous(),
               "transposed convolution backward: dy must be contiguous [", R * K, ", ", Cout, "], got ", dy.describe());
  const Device dev = dy.device();
  // The shuffle undone (a permutation: its inverse is a gather too), then Y's (c, k) column order.
  Tensor dYkc = Tensor::empty({R * K, Cout}, DType::f32, dev);
  ops::embedding(ctx, dy, saved.unshuffle, dYkc);
  Tensor dY = Tensor::empty({R, Cout, K}, DType::f32, dev);
  ops::transpose(ctx, dYkc.view({R, K, Cout}), dY);
  const Tensor dYm = dY.view({R, Cout * K});
  ops::bias_grad(ctx, dy, b.grad);
  ops::GemmArgs acc;
  acc.beta = 1.0f;
  ops::gemm(ctx, saved.x, ops::Trans::yes, dYm, ops::Trans::no, w.grad, acc);  // dW += X^T dY
  ops::gemm(ctx, dYm, ops::Trans::no, w.value, ops::Trans::yes, dx);          // dX = dY Wmat^T
}

}  // namespace unmask::train
