// ops/activation.cc: y = act(x), elementwise (GELU exact / tanh-approximated, tanh); its
// backward and the bias gradient (training).
#include <algorithm>
#include <utility>

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
    case Activation::relu: return "relu";
  }
  return "?";
}

void activation(Context& ctx, const Tensor& x, Tensor& y, Activation act) {
  detail::OpScope op_scope(ctx, "activation");
  constexpr const char* op = "activation";
  const bool half = detail::check_float_train(op, "x", x);
  UNMASK_CHECK(y.dtype() == x.dtype(), op, ": y must have x's dtype ", dtype_name(x.dtype()), ", got ", y.describe());
  detail::check_same_shape(op, "x", x, "y", y);
  detail::check_device(op, "y", y, x.device());
  if (x.numel() == 0) return;
  if (half && x.device() == Device::cpu) {  // emulation: f32 copies, the f32 kernel, one rounding
    const Tensor xf = detail::widen_for_cpu(x);
    Tensor yf = Tensor::empty(y.shape(), DType::f32);
    activation(ctx, xf, yf, act);
    return detail::narrow_into(yf, y);
  }
  if (half) {  // bf16 / f16 on CUDA
#ifdef UNMASK_WITH_CUDA
    return cuda::activation(ctx, x, y, act);
#else
    detail::throw_unsupported(op, x.device(), x.dtype());
#endif
  }
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

void activation_backward(Context& ctx, const Tensor& x, const Tensor& dy, Tensor& dx,
                         Activation act, Tensor* y, Tensor* dbias) {
  detail::OpScope op_scope(ctx, "activation_backward");
  constexpr const char* op = "activation_backward";
  const Device dev = x.device();
  if (dbias) {
    detail::check_vector(op, "dbias", *dbias, detail::as_rows(op, "dx", dx).C, dev);
    if (dev != Device::cuda) {  // the two ops: the bits of the CUDA pass
      activation_backward(ctx, x, dy, dx, act, y);
      return bias_grad(ctx, dx, *dbias);
    }
  }
  const bool half = detail::check_float_train(op, "x", x);  // bf16 / f16: CUDA, emulated on the CPU
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"dy", &dy}, {"dx", &dx}, {"y", y}}) {
    if (!t) continue;
    detail::check_same_dtype(op, x.dtype(), {{name, t}});
    detail::check_device(op, name, *t, dev);
    detail::check_same_shape(op, "x", x, name, *t);
  }
  detail::check_no_overlap(op, "dx", dx, "dy", dy, true);
  detail::check_no_overlap(op, "dx", dx, "x", x, true);  // elementwise: the same view is fine
  if (y) {  // written beside dx from x and dy: it may share memory with none of them
    detail::check_no_overlap(op, "y", *y, "x", x, false);
    detail::check_no_overlap(op, "y", *y, "dy", dy, false);
    detail::check_no_overlap(op, "y", *y, "dx", dx, false);
  }
  if (x.numel() == 0) return;
  if (y && dev == Device::cpu) {  // the two ops, in this order: y is read from x before dx may overwrite it
    activation(ctx, x, *y, act);
    return activation_backward(ctx, x, dy, dx, act);
  }
  if (half && dev == Device::cpu) {
    const Tensor xf = detail::widen_for_cpu(x), dyf = detail::widen_for_cpu(dy);
    Tensor dxf = Tensor::empty(dx.shape(), DType::f32);
    activation_backward(ctx, xf, dyf, dxf, act);
    return detail::narrow_into(dxf, dx);
  }
  const detail::Rows rx = detail::as_rows(op, "x", x), rdy = detail::as_rows(op, "dy", dy),
                     rdx = detail::as_rows(op, "dx", dx);
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        const float* dyp = dy.data<float>();
        float* dxp = dx.data<float>();
        if (x.is_contiguous() && dy.is_contiguous() && dx.is_contiguous()) {
          ctx.parallel_for(x.numel(), [&](int64_t b, int64_t e) {
            k.act_backward_rows(xp + b, 0, dyp + b, 0, dxp + b, 0, 1, e - b, act);
          }, 16384);
        } else {
          ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
            k.act_backward_rows(xp + b * rx.ld, rx.ld, dyp + b * rdy.ld, rdy.ld, dxp + b * rdx.ld,
                                rdx.ld, e - b, rx.C, act);
          }, 1 + 16384 / rx.C);
        }
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::activation_backward(ctx, x.raw(), rx.ld, dy.raw(), rdy.ld, dx.raw(), rdx.ld, rx.N, rx.C, act,
                                       x.dtype(), y ? y->raw() : nullptr, y ? detail::as_rows(op, "y", *y).ld : 0,
                                       dbias ? dbias->data<float>() : nullptr);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

// Threads own column blocks and sum every column over all rows in row order, so the result is
// the same for any thread count.
void bias_grad(Context& ctx, const Tensor& dy, Tensor& dbias) {
  detail::OpScope op_scope(ctx, "bias_grad");
  constexpr const char* op = "bias_grad";
  const bool half = detail::check_float_train(op, "dy", dy);  // bf16 / f16: CUDA, emulated on the CPU
  const Device dev = dy.device();
  const detail::Rows r = detail::as_rows(op, "dy", dy);
  detail::check_vector(op, "dbias", dbias, r.C, dev);
  if (r.N == 0 || r.C == 0) return;
  if (half && dev == Device::cpu) return bias_grad(ctx, detail::widen_for_cpu(dy), dbias);
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, dy.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        constexpr int64_t kBlock = 64;  // columns per block: four AVX-512 vectors
        const int64_t blocks = (r.C + kBlock - 1) / kBlock;
        const float* dyp = dy.data<float>();
        float* db = dbias.data<float>();
        ctx.parallel_for(blocks, [&](int64_t b, int64_t e) {
          const int64_t c0 = b * kBlock, c1 = std::min(r.C, e * kBlock);
          k.bias_grad_cols(dyp + c0, r.ld, db + c0, r.N, c1 - c0);
        }, 1 + 16384 / (kBlock * r.N));
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::bias_grad(ctx, dy.raw(), r.ld, dbias.data<float>(), r.N, r.C, dy.dtype());
#else
      detail::throw_unsupported(op, Device::cuda, dy.dtype());
#endif
  }
}

}  // namespace unmask::ops
