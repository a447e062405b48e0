// ops/layernorm.cc: y = LayerNorm(x + residual) * gamma + beta over the last dim.
#include <cmath>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma,
               const Tensor& beta, float eps, Tensor& y, Tensor* mean, Tensor* rstd) {
  constexpr const char* op = "layernorm";
  UNMASK_CHECK(!mean && !rstd, op, ": statistics outputs (training) are not implemented yet");
  detail::check_f32(op, "x", x);
  detail::check_f32(op, "gamma", gamma);
  detail::check_f32(op, "beta", beta);
  detail::check_f32(op, "y", y);
  detail::check_same_shape(op, "x", x, "y", y);
  const Device dev = x.device();
  detail::check_device(op, "gamma", gamma, dev);
  detail::check_device(op, "beta", beta, dev);
  detail::check_device(op, "y", y, dev);
  if (residual) {
    detail::check_f32(op, "residual", *residual);
    detail::check_same_shape(op, "x", x, "residual", *residual);
    detail::check_device(op, "residual", *residual, dev);
  }
  UNMASK_CHECK(std::isfinite(eps) && eps >= 0.0f, op, ": eps must be finite and >= 0, got ", eps);
  const detail::Rows rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  const detail::Rows rr = residual ? detail::as_rows(op, "residual", *residual) : detail::Rows{};
  UNMASK_CHECK(gamma.ndim() == 1 && gamma.size(0) == rx.C && (gamma.stride(0) == 1 || rx.C <= 1),
               op, ": gamma must be contiguous [", rx.C, "], got ", gamma.describe());
  UNMASK_CHECK(beta.ndim() == 1 && beta.size(0) == rx.C && (beta.stride(0) == 1 || rx.C <= 1), op,
               ": beta must be contiguous [", rx.C, "], got ", beta.describe());
  if (x.numel() == 0) return;
  const float* rp = residual ? residual->data<float>() : nullptr;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        const float* g = gamma.data<float>();
        const float* bt = beta.data<float>();
        float* yp = y.data<float>();
        ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
          k.layernorm_rows(xp + b * rx.ld, rx.ld, rp ? rp + b * rr.ld : nullptr, rr.ld, g, bt, eps,
                           yp + b * ry.ld, ry.ld, e - b, rx.C);
        }, 1 + 8192 / rx.C);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::layernorm(ctx, x.data<float>(), rx.ld, rp, rr.ld, gamma.data<float>(),
                             beta.data<float>(), eps, y.data<float>(), ry.ld, rx.N, rx.C);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

}  // namespace unmask::ops
