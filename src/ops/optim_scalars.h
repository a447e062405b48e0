// ops/optim_scalars.h: the per-step scalars of the AdamW and LAMB updates, computed once on the
// host in double and rounded to f32, shared by the CPU kernels (ops/optim_ops.cc) and the CUDA
// kernels (cuda/optim.cu) so both backends apply bit-identical constants. Plain structs, no
// includes beyond <cstdint>: nvcc compiles this header in the .cu file.
#pragma once
#include <cstdint>

namespace unmask::ops {

struct AdamArgs;  // ops/ops.h

/// AdamW (torch.optim.AdamW rounds its Python-float scalars the same way):
///   g' = gs g;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g' g'
///   p = p (1 - lr wd) - step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
struct AdamWScalars {
  float grad_scale;   // g' = grad_scale * g
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float decay;        // 1 - lr * wd
  float step_size;    // lr / (1 - beta1^step)
  float bias2_sqrt;   // sqrt(1 - beta2^step)
  float eps;
};
AdamWScalars adamw_scalars(float lr, const AdamArgs& args);

/// LAMB stage 1 (apex multi_tensor_lamb: bias corrections in double on the host, used as f32).
struct LambScalars {
  float grad_scale;
  float beta1, beta3, beta2, one_minus_beta2;  // beta3 = 1 - beta1 (grad averaging)
  float bias1, bias2;                          // 1 - beta^step
  float eps, weight_decay;
};
LambScalars lamb_scalars(const AdamArgs& args);

}  // namespace unmask::ops
