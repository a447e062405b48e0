// ops/dropout.cc: counter-based dropout (Philox-4x32-10, core/philox.h) and its backward.
//
// Element i (flat row-major index over the logical shape) uses counter offset + i, so the
// mask is a pure function of (seed, offset, i): the same for any thread split or device, and
// the backward recomputes it instead of storing it. Float64 reference: ref::dropout_forward
// (src/ref/train_ref.h), which draws from the same philox_uniform.
#include <cmath>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

// y = x * mask / (1 - p) for the named op ("dropout" or "dropout_backward").
void dropout_impl(const char* op, const char* in_name, const char* out_name, Context& ctx,
                  const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t offset) {
  const bool half = detail::check_float_train(op, in_name, x);  // bf16 / f16: CUDA, emulated on the CPU
  detail::check_same_dtype(op, x.dtype(), {{out_name, &y}});
  detail::check_same_shape(op, in_name, x, out_name, y);
  const Device dev = x.device();
  detail::check_device(op, out_name, y, dev);
  UNMASK_CHECK(p >= 0.0f && p < 1.0f, op, ": p must be in [0, 1), got ", p);
  detail::check_no_overlap(op, out_name, y, in_name, x, true);
  if (x.numel() == 0) return;
  if (half && dev == Device::cpu) {  // emulation: the same mask on f32 copies, one rounding
    const Tensor xf = detail::widen_for_cpu(x);
    Tensor yf = Tensor::empty(y.shape(), DType::f32);
    dropout_impl(op, in_name, out_name, ctx, xf, yf, p, seed, offset);
    return detail::narrow_into(yf, y);
  }
  const detail::Rows rx = detail::as_rows(op, in_name, x), ry = detail::as_rows(op, out_name, y);
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        if (p == 0.0f) {  // identity: no random numbers needed
          if (!detail::same_view(x, y)) y.copy_from(x);
          return;
        }
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        float* yp = y.data<float>();
        const float scale = 1.0f / (1.0f - p);
        ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
          k.dropout_rows(xp + b * rx.ld, rx.ld, yp + b * ry.ld, ry.ld, e - b, rx.C, p, scale, seed,
                         offset + uint64_t(b) * uint64_t(rx.C));
        }, 1 + 8192 / rx.C);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      if (p == 0.0f && detail::same_view(x, y)) return;
      return cuda::dropout(ctx, x.raw(), rx.ld, y.raw(), ry.ld, rx.N, rx.C, p, seed, offset, x.dtype());
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

}  // namespace

void dropout(Context& ctx, const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t offset) {
  detail::OpScope op_scope(ctx, "dropout");
  dropout_impl("dropout", "x", "y", ctx, x, y, p, seed, offset);
}

void dropout_backward(Context& ctx, const Tensor& dy, Tensor& dx, float p, uint64_t seed,
                      uint64_t offset) {
  detail::OpScope op_scope(ctx, "dropout_backward");
  dropout_impl("dropout_backward", "dy", "dx", ctx, dy, dx, p, seed, offset);
}

}  // namespace unmask::ops
