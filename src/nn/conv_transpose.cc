// nn/conv_transpose.cc: see conv_transpose.h.
#include "nn/conv_transpose.h"

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

// Calls fn(input row r, output row o, kernel offset k) for every output token.
template <typename Fn>
void for_each_output(int64_t batch, std::array<int64_t, 3> size, std::array<int64_t, 3> kernel, Fn&& fn) {
  const auto [D, H, W] = size;
  const auto [kd, kh, kw] = kernel;
  const int64_t OH = H * kh, OW = W * kw, OD = D * kd;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const int64_t r = ((b * D + d) * H + h) * W + w;
          for (int64_t a = 0; a < kd; ++a)
            for (int64_t e = 0; e < kh; ++e)
              for (int64_t f = 0; f < kw; ++f) {
                const int64_t o = ((b * OD + d * kd + a) * OH + h * kh + e) * OW + w * kw + f;
                fn(r, o, (a * kh + e) * kw + f);
              }
        }
}

}  // namespace

void conv_transpose_forward(Context& ctx, const PV& w, const PV& b, const Tensor& x, int64_t batch,
                            std::array<int64_t, 3> size, std::array<int64_t, 3> kernel, Tensor& y,
                            ConvTransposeSaved& saved) {
  const int64_t R = batch * size[0] * size[1] * size[2], K = kernel[0] * kernel[1] * kernel[2];
  UNMASK_CHECK(x.ndim() == 2 && x.size(0) == R && x.device() == Device::cpu && x.dtype() == DType::f32,
               "transposed convolution: x must be host f32 [", R, ", Cin], got ", x.describe());
  const int64_t Cin = x.size(1);
  UNMASK_CHECK(w.value.ndim() == 2 && w.value.size(0) == Cin && w.value.size(1) % K == 0, "transposed convolution: "
               "the weight must be [", Cin, ", Cout x ", K, "], got ", w.value.describe());
  const int64_t Cout = w.value.size(1) / K;
  UNMASK_CHECK(b.value.numel() == Cout, "transposed convolution: the bias must have ", Cout, " values");
  Tensor Y = Tensor::empty({R, Cout * K}, DType::f32);
  ops::gemm(ctx, x, ops::Trans::no, w.value, ops::Trans::no, Y);
  y = Tensor::empty({R * K, Cout}, DType::f32);
  const float* ys = Y.data<float>();
  const float* bias = b.value.data<float>();
  float* out = y.data<float>();
  for_each_output(batch, size, kernel, [&](int64_t r, int64_t o, int64_t k) {
    for (int64_t c = 0; c < Cout; ++c) out[o * Cout + c] = ys[r * Cout * K + c * K + k] + bias[c];
  });
  saved.x = x;
}

void conv_transpose_backward(Context& ctx, PV& w, PV& b, const ConvTransposeSaved& saved, int64_t batch,
                             std::array<int64_t, 3> size, std::array<int64_t, 3> kernel, const Tensor& dy, Tensor& dx) {
  const int64_t R = saved.x.size(0), K = kernel[0] * kernel[1] * kernel[2], Cout = w.value.size(1) / K;
  UNMASK_CHECK(dy.ndim() == 2 && dy.size(0) == R * K && dy.size(1) == Cout && dy.is_contiguous(),
               "transposed convolution backward: dy must be contiguous [", R * K, ", ", Cout, "], got ", dy.describe());
  Tensor dY = Tensor::empty({R, Cout * K}, DType::f32);  // the shuffle undone
  const float* g = dy.data<float>();
  float* d = dY.data<float>();
  for_each_output(batch, size, kernel, [&](int64_t r, int64_t o, int64_t k) {
    for (int64_t c = 0; c < Cout; ++c) d[r * Cout * K + c * K + k] = g[o * Cout + c];
  });
  ops::bias_grad(ctx, dy, b.grad);
  ops::GemmArgs acc;
  acc.beta = 1.0f;
  ops::gemm(ctx, saved.x, ops::Trans::yes, dY, ops::Trans::no, w.grad, acc);  // dW += X^T dY
  ops::gemm(ctx, dY, ops::Trans::no, w.value, ops::Trans::yes, dx);          // dX = dY Wmat^T
}

}  // namespace unmask::train
