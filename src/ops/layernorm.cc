// ops/layernorm.cc: y = LayerNorm(x + residual) * gamma + beta over the last dim, and its
// backward (training).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma,
               const Tensor& beta, float eps, Tensor& y, Tensor* mean, Tensor* rstd) {
  detail::OpScope op_scope(ctx, "layernorm");
  constexpr const char* op = "layernorm";
  UNMASK_CHECK(!mean == !rstd, op, ": give both statistics outputs mean and rstd (training) or "
               "neither, got ", mean ? "mean only" : "rstd only");
  // f32 anywhere; bf16 / f16 on CUDA and emulated on the CPU (gamma and beta f32 or that dtype;
  // f32 in the training form with statistics). x, residual and y share the dtype; the arithmetic
  // is fp32.
  const bool stats = mean != nullptr;
  const bool half = detail::check_float_train(op, "x", x);
  if (half) {
    UNMASK_CHECK(y.dtype() == x.dtype() && (!residual || residual->dtype() == x.dtype()), op,
                 ": x, residual and y must share a dtype, got x ", x.describe(), ", y ", y.describe());
    if (stats) {
      detail::check_f32(op, "gamma", gamma);
      detail::check_f32(op, "beta", beta);
    }
  } else {
    detail::check_f32(op, "gamma", gamma);
    detail::check_f32(op, "beta", beta);
    detail::check_f32(op, "y", y);
    if (residual) detail::check_f32(op, "residual", *residual);
  }
  detail::check_same_shape(op, "x", x, "y", y);
  const Device dev = x.device();
  detail::check_device(op, "y", y, dev);
  if (residual) {
    detail::check_same_shape(op, "x", x, "residual", *residual);
    detail::check_device(op, "residual", *residual, dev);
  }
  UNMASK_CHECK(std::isfinite(eps) && eps >= 0.0f, op, ": eps must be finite and >= 0, got ", eps);
  const detail::Rows rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  const detail::Rows rr = residual ? detail::as_rows(op, "residual", *residual) : detail::Rows{};
  detail::check_param(op, "gamma", gamma, rx.C, x.dtype(), dev);
  detail::check_param(op, "beta", beta, rx.C, x.dtype(), dev);
  if (half && !stats && dev == Device::cuda) {
    if (x.numel() == 0) return;
#ifdef UNMASK_WITH_CUDA
    return cuda::layernorm(ctx, x, residual, gamma, beta, eps, y);
#else
    detail::throw_unsupported(op, dev, x.dtype());
#endif
  }
  if (stats) {
    for (const auto& [name, t] : {std::pair<const char*, Tensor*>{"mean", mean}, {"rstd", rstd}}) {
      detail::check_f32(op, name, *t);
      detail::check_device(op, name, *t, dev);
      UNMASK_CHECK(t->numel() == rx.N && t->is_contiguous(), op, ": ", name, " must be contiguous [",
                   rx.N, "] (one value per row of x ", x.shape().str(), "), got ", t->describe());
    }
    detail::check_no_overlap(op, "y", y, "x", x, false);
    if (residual) detail::check_no_overlap(op, "y", y, "residual", *residual, false);
  }
  if (x.numel() == 0) return;
  if (half && dev == Device::cpu) {  // emulation: f32 copies, the f32 kernel, one rounding
    const Tensor xf = detail::widen_for_cpu(x);
    const Tensor rf = residual ? detail::widen_for_cpu(*residual) : Tensor();
    Tensor yf = Tensor::empty(y.shape(), DType::f32);
    layernorm(ctx, xf, residual ? &rf : nullptr, detail::widen_for_cpu(gamma), detail::widen_for_cpu(beta), eps, yf,
              mean, rstd);
    return detail::narrow_into(yf, y);
  }
  const void* rp = residual ? residual->raw() : nullptr;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        const float* g = gamma.data<float>();
        const float* bt = beta.data<float>();
        float* yp = y.data<float>();
        float* mp = stats ? mean->data<float>() : nullptr;
        float* sp = stats ? rstd->data<float>() : nullptr;
        ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
          if (stats)
            k.layernorm_stats_rows(xp + b * rx.ld, rx.ld, rp ? static_cast<const float*>(rp) + b * rr.ld : nullptr, rr.ld, g,
                                   bt, eps, yp + b * ry.ld, ry.ld, mp + b, sp + b, e - b, rx.C);
          else
            k.layernorm_rows(xp + b * rx.ld, rx.ld, rp ? static_cast<const float*>(rp) + b * rr.ld : nullptr, rr.ld, g, bt,
                             eps, yp + b * ry.ld, ry.ld, e - b, rx.C);
        }, 1 + 8192 / rx.C);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      if (stats)
        return cuda::layernorm_stats(ctx, x.raw(), rx.ld, rp, rr.ld, gamma.data<float>(), beta.data<float>(), eps,
                                     y.raw(), ry.ld, mean->data<float>(), rstd->data<float>(), rx.N, rx.C, x.dtype());
      return cuda::layernorm(ctx, x.data<float>(), rx.ld, static_cast<const float*>(rp), rr.ld, gamma.data<float>(),
                             beta.data<float>(), eps, y.data<float>(), ry.ld, rx.N, rx.C);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

// The parameter gradients are summed over fixed chunks of rows (chunk size from N only), each
// chunk into its own partial row, and the partials are added in chunk order: dgamma and dbeta
// do not depend on the thread count.
void layernorm_backward(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma,
                        const Tensor& mean, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, bool accumulate_dx) {
  detail::OpScope op_scope(ctx, "layernorm_backward");
  constexpr const char* op = "layernorm_backward";
  const Device dev = x.device();
  // Activations x, residual, dy, dx: f32, or one of bf16 / f16 (CUDA; emulated on the CPU).
  const bool half = detail::check_float_train(op, "x", x);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"dy", &dy}, {"dx", &dx}}) {
    detail::check_same_dtype(op, x.dtype(), {{name, t}});
    detail::check_device(op, name, *t, dev);
    detail::check_same_shape(op, "x", x, name, *t);
  }
  if (residual) {
    detail::check_same_dtype(op, x.dtype(), {{"residual", residual}});
    detail::check_device(op, "residual", *residual, dev);
    detail::check_same_shape(op, "x", x, "residual", *residual);
  }
  const detail::Rows rx = detail::as_rows(op, "x", x), rdy = detail::as_rows(op, "dy", dy),
                     rdx = detail::as_rows(op, "dx", dx);
  const detail::Rows rr = residual ? detail::as_rows(op, "residual", *residual) : detail::Rows{};
  const int64_t N = rx.N, C = rx.C;
  detail::check_vector(op, "gamma", gamma, C, dev);
  detail::check_vector(op, "dgamma", dgamma, C, dev);
  detail::check_vector(op, "dbeta", dbeta, C, dev);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"mean", &mean}, {"rstd", &rstd}}) {
    detail::check_f32(op, name, *t);
    detail::check_device(op, name, *t, dev);
    UNMASK_CHECK(t->numel() == N && t->is_contiguous(), op, ": ", name, " must be contiguous [", N,
                 "] (from the forward over x ", x.shape().str(), "), got ", t->describe());
  }
  detail::check_no_overlap(op, "dx", dx, "dy", dy, !accumulate_dx);  // dx += ...: dy must stay intact
  detail::check_no_overlap(op, "dx", dx, "x", x, false);
  if (residual) detail::check_no_overlap(op, "dx", dx, "residual", *residual, false);
  if (N == 0 || C == 0) return;
  if (half && dev == Device::cpu) {  // emulation (see layernorm)
    const Tensor xf = detail::widen_for_cpu(x), dyf = detail::widen_for_cpu(dy);
    const Tensor rf = residual ? detail::widen_for_cpu(*residual) : Tensor();
    // accumulate_dx: the old dx widened, the gradient added in f32, one rounding (as CUDA)
    Tensor dxf = accumulate_dx ? detail::widen_for_cpu(dx) : Tensor::empty(dx.shape(), DType::f32);
    layernorm_backward(ctx, xf, residual ? &rf : nullptr, gamma, mean, rstd, dyf, dxf, dgamma, dbeta, accumulate_dx);
    return detail::narrow_into(dxf, dx);
  }
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const int64_t chunk_rows = std::max<int64_t>(16, (N + 63) / 64);
        const int64_t chunks = (N + chunk_rows - 1) / chunk_rows;
        std::vector<float> partial(size_t(chunks * 2 * C), 0.0f);  // [chunks][dgamma C | dbeta C]
        const float* xp = x.data<float>();
        const float* rp = residual ? residual->data<float>() : nullptr;
        const float* dyp = dy.data<float>();
        float* dxp = dx.data<float>();
        ctx.parallel_for(chunks, [&](int64_t cb, int64_t ce) {
          for (int64_t ch = cb; ch < ce; ++ch) {
            const int64_t r0 = ch * chunk_rows, r1 = std::min(N, r0 + chunk_rows);
            float* pg = partial.data() + ch * 2 * C;
            k.layernorm_backward_rows(xp + r0 * rx.ld, rx.ld, rp ? rp + r0 * rr.ld : nullptr, rr.ld,
                                      gamma.data<float>(), mean.data<float>() + r0,
                                      rstd.data<float>() + r0, dyp + r0 * rdy.ld, rdy.ld,
                                      dxp + r0 * rdx.ld, rdx.ld, pg, pg + C, r1 - r0, C, accumulate_dx);
          }
        }, 1 + 16384 / (chunk_rows * C));
        float* dg = dgamma.data<float>();
        float* db = dbeta.data<float>();
        ctx.parallel_for(C, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            float sg = 0.0f, sb = 0.0f;
            for (int64_t ch = 0; ch < chunks; ++ch) {
              sg += partial[size_t(ch * 2 * C + c)];
              sb += partial[size_t(ch * 2 * C + C + c)];
            }
            dg[c] += sg;
            db[c] += sb;
          }
        }, 4096);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::layernorm_backward(ctx, x.raw(), rx.ld, residual ? residual->raw() : nullptr, rr.ld,
                                      gamma.data<float>(), mean.data<float>(), rstd.data<float>(), dy.raw(), rdy.ld,
                                      dx.raw(), rdx.ld, dgamma.data<float>(), dbeta.data<float>(), N, C, x.dtype(),
                                      accumulate_dx);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

}  // namespace unmask::ops
