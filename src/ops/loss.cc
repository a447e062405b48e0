// ops/loss.cc: softmax cross-entropy over rows of logits (fused log-softmax + NLL + gradient).
//
// CPU: cpu::kernels().cross_entropy_rows over row ranges (cpu/kernels_train_impl.inc). The
// kernel writes one loss and one argmax per row; the sums are formed here afterwards, in row
// order, so loss_sum is bitwise the same for any thread count. Float64 reference:
// ref::cross_entropy_forward / cross_entropy_backward (src/ref/train_ref.h).
#include <cmath>
#include <vector>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

CrossEntropyStats cross_entropy(Context& ctx, const Tensor& logits, const Tensor& targets,
                                Tensor* losses, Tensor* dlogits, float grad_scale) {
  detail::OpScope op_scope(ctx, "cross_entropy");
  constexpr const char* op = "cross_entropy";
  detail::check_f32(op, "logits", logits);
  const Device dev = logits.device();
  const detail::Rows rl = detail::as_rows(op, "logits", logits);
  const int64_t M = rl.N, V = rl.C;
  UNMASK_CHECK(targets.dtype() == DType::i32, op, ": targets must be i32, got ", targets.describe());
  detail::check_device(op, "targets", targets, dev);
  UNMASK_CHECK(targets.numel() == M && targets.is_contiguous(), op, ": targets must be contiguous [",
               M, "] (one per row of logits ", logits.shape().str(), "), got ", targets.describe());
  if (losses) {
    detail::check_f32(op, "losses", *losses);
    detail::check_device(op, "losses", *losses, dev);
    UNMASK_CHECK(losses->numel() == M && losses->is_contiguous(), op,
                 ": losses must be contiguous [", M, "], got ", losses->describe());
  }
  detail::Rows rd;
  if (dlogits) {
    detail::check_f32(op, "dlogits", *dlogits);
    detail::check_device(op, "dlogits", *dlogits, dev);
    detail::check_same_shape(op, "logits", logits, "dlogits", *dlogits);
    detail::check_no_overlap(op, "dlogits", *dlogits, "logits", logits, true);
    rd = detail::as_rows(op, "dlogits", *dlogits);
  }
  UNMASK_CHECK(std::isfinite(grad_scale), op, ": grad_scale must be finite, got ", grad_scale);
  UNMASK_CHECK(M == 0 || V >= 1, op, ": logits need at least one class, got ", logits.describe());
  CrossEntropyStats stats;
  if (M == 0) return stats;
  switch (dev) {
    case Device::cpu: {
      const int32_t* tp = targets.data<int32_t>();
      for (int64_t m = 0; m < M; ++m)
        UNMASK_CHECK(tp[m] < V, op, ": targets[", m, "] = ", tp[m], " is not a class of logits with V = ",
                     V, " columns", Hint("targets must be in [0, V), or negative to ignore the row"));
      std::vector<float> own_losses;
      float* lp = nullptr;
      if (losses) {
        lp = losses->data<float>();
      } else {
        own_losses.resize(size_t(M));
        lp = own_losses.data();
      }
      std::vector<int32_t> argmax(static_cast<size_t>(M));
      detail::dispatch_float(op, Device::cpu, logits.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = logits.data<float>();
        float* dp = dlogits ? dlogits->data<float>() : nullptr;
        ctx.parallel_for(M, [&](int64_t b, int64_t e) {
          k.cross_entropy_rows(xp + b * rl.ld, rl.ld, tp + b, dp ? dp + b * rd.ld : nullptr, rd.ld,
                               grad_scale, lp + b, argmax.data() + b, e - b, V);
        }, 1 + 65536 / V);
      });
      for (int64_t m = 0; m < M; ++m) {
        if (tp[m] < 0) continue;
        ++stats.count;
        stats.loss_sum += double(lp[m]);
        if (argmax[size_t(m)] == tp[m]) ++stats.correct;
      }
      return stats;
    }
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::cross_entropy(ctx, logits.data<float>(), rl.ld, targets.data<int32_t>(),
                                 losses ? losses->data<float>() : nullptr,
                                 dlogits ? dlogits->data<float>() : nullptr, rd.ld, grad_scale, M, V);
#else
      detail::throw_unsupported(op, Device::cuda, logits.dtype());
#endif
  }
  return stats;
}

}  // namespace unmask::ops
