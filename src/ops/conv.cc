// ops/conv.cc: the 2-D convolution front-end (semantics in ops.h): validate, then per image the
// pixels unfolded (im2col: [Cin k k, OH OW], row segments copied whole; a 1 x 1 convolution at
// stride 1 reads the image itself) and one GEMM with the weight [Cout, Cin k k] into the image's
// NCHW output (the GEMM is oneDNN's matmul where the build has it), bias added after. On a CUDA
// context: cuDNN (cuda/conv_cudnn.cc).
#include <algorithm>
#include <string>

#include "ops/op_common.h"
#include "ops/op_params.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

void conv2d(Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, const Conv2dArgs& a) {
  detail::OpScope op_scope(ctx, "conv2d");
  constexpr const char* op = "conv2d";
  detail::check_f32(op, "x", x);
  detail::check_f32(op, "w", w);
  detail::check_f32(op, "y", y);
  UNMASK_CHECK(x.ndim() == 4 && x.is_contiguous(), op, ": x must be contiguous NCHW [B, Cin, H, W], got ", x.describe());
  UNMASK_CHECK(w.ndim() == 4 && w.is_contiguous() && w.size(1) == x.size(1) && w.size(2) == w.size(3), op,
               ": w must be contiguous [Cout, ", x.size(1), ", k, k], got ", w.describe());
  UNMASK_CHECK(a.stride >= 1 && a.padding >= 0, op, ": stride ", a.stride, " and padding ", a.padding,
               " must be >= 1 and >= 0");
  const int64_t B = x.size(0), Cin = x.size(1), H = x.size(2), W = x.size(3), Cout = w.size(0), k = w.size(2);
  const int64_t OH = (H + 2 * a.padding - k) / a.stride + 1, OW = (W + 2 * a.padding - k) / a.stride + 1;
  UNMASK_CHECK(H + 2 * a.padding >= k && W + 2 * a.padding >= k, op, ": a ", k, " x ", k, " kernel on a ", H, " x ", W,
               " image with padding ", a.padding);
  UNMASK_CHECK(y.ndim() == 4 && y.is_contiguous() && y.size(0) == B && y.size(1) == Cout && y.size(2) == OH &&
                   y.size(3) == OW,
               op, ": y must be contiguous [", B, ", ", Cout, ", ", OH, ", ", OW, "], got ", y.describe());
  if (a.bias) {
    detail::check_f32(op, "bias", *a.bias);
    UNMASK_CHECK(a.bias->numel() == Cout && a.bias->is_contiguous(), op, ": bias must have ", Cout, " values, got ",
                 a.bias->describe());
  }
  const Device dev = x.device();
  for (const Tensor* t : {&w, static_cast<const Tensor*>(&y)}) detail::check_device(op, "x, w, y", *t, dev);
  if (a.bias) detail::check_device(op, "bias", *a.bias, dev);
  detail::check_no_overlap(op, "y", y, "x", x, false);
  if (dev == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    Conv2dParams p;
    p.x = x.data<float>(), p.w = w.data<float>(), p.bias = a.bias ? a.bias->data<float>() : nullptr;
    p.y = y.data<float>();
    p.B = B, p.Cin = Cin, p.H = H, p.W = W, p.Cout = Cout, p.k = k, p.OH = OH, p.OW = OW;
    p.stride = a.stride, p.padding = a.padding;
    if (B > 0 && Cout > 0 && OH > 0 && OW > 0) cuda::conv2d(ctx, p);
    return;
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const int64_t K = Cin * k * k, P = OH * OW;
  // A 1 x 1 convolution at stride 1 without padding is the GEMM on the image itself.
  const bool pointwise = k == 1 && a.stride == 1 && a.padding == 0;
  Tensor cols = pointwise ? Tensor() : Tensor::empty({K, P}, DType::f32);
  const Tensor wm = w.view({Cout, K});
  for (int64_t b = 0; b < B; ++b) {
    const float* xb = x.data<float>() + b * Cin * H * W;
    if (pointwise) {
      cols = x.slice(0, b, b + 1).view({K, P});
    } else {
      float* c = cols.data<float>();
      ctx.parallel_for(K, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t ch = r / (k * k), u = (r / k) % k, v = r % k;
          // output columns j whose input column j stride - padding + v lies inside [0, W)
          const int64_t j0 = std::clamp<int64_t>((a.padding - v + a.stride - 1) / a.stride, 0, OW);
          const int64_t last = W - 1 + a.padding - v;  // j stride <= last
          const int64_t j1 = last < 0 ? j0 : std::clamp<int64_t>(last / a.stride + 1, j0, OW);
          float* row = c + r * P;
          for (int64_t i = 0; i < OH; ++i) {
            float* out = row + i * OW;
            const int64_t h = i * a.stride - a.padding + u;
            if (h < 0 || h >= H) {
              std::fill_n(out, OW, 0.0f);
              continue;
            }
            std::fill_n(out, j0, 0.0f);
            const float* in = xb + (ch * H + h) * W + j0 * a.stride - a.padding + v;
            if (a.stride == 1) {
              std::copy_n(in, j1 - j0, out + j0);
            } else {
              for (int64_t j = j0; j < j1; ++j) out[j] = in[(j - j0) * a.stride];
            }
            std::fill_n(out + j1, OW - j1, 0.0f);
          }
        }
      });
    }
    Tensor yb = y.slice(0, b, b + 1).view({Cout, P});
    gemm(ctx, wm, Trans::no, cols, Trans::no, yb);
    if (a.bias) {
      const float* bias = a.bias->data<float>();
      float* yp = yb.data<float>();
      ctx.parallel_for(Cout, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          for (int64_t p = 0; p < P; ++p) yp[o * P + p] += bias[o];
      });
    }
  }
}

}  // namespace unmask::ops
