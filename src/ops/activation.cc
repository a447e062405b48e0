// ops/activation.cc: y = act(x), elementwise (GELU exact / tanh-approximated, tanh).
#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::none: return "none";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::tanh: return "tanh";
  }
  return "?";
}

void activation(Context& ctx, const Tensor& x, Tensor& y, Activation act) {
  constexpr const char* op = "activation";
  detail::check_f32(op, "x", x);
  detail::check_f32(op, "y", y);
  detail::check_same_shape(op, "x", x, "y", y);
  detail::check_device(op, "y", y, x.device());
  if (x.numel() == 0) return;
  const detail::Rows rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  switch (x.device()) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        float* yp = y.data<float>();
        if (x.is_contiguous() && y.is_contiguous()) {
          // One flat range, cut into chunks of whole cache lines.
          ctx.parallel_for(x.numel(), [&](int64_t b, int64_t e) {
            k.bias_act_rows(xp + b, 0, nullptr, yp + b, 0, 1, e - b, act);
          }, 16384);
        } else {
          ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
            k.bias_act_rows(xp + b * rx.ld, rx.ld, nullptr, yp + b * ry.ld, ry.ld, e - b, rx.C, act);
          }, 1 + 16384 / rx.C);
        }
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::bias_act(ctx, x.data<float>(), rx.ld, nullptr, y.data<float>(), ry.ld, rx.N, rx.C, act);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

}  // namespace unmask::ops
