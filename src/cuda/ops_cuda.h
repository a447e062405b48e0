// cuda/ops_cuda.h: the CUDA backend entry points the op front-ends (src/ops) call when a
// tensor lives on the GPU. Only declared for now: the front-ends call these under
// #ifdef UNMASK_WITH_CUDA and throw Unsupported otherwise. Arguments mirror the CPU kernels
// (src/cpu/kernels.h): validated raw device pointers, sizes and row strides in elements; the
// stream, cuBLASLt handle and workspace come from the Context.
#pragma once
#include <cstdint>

#include "ops/op_params.h"
#include "unmask/context.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

/// c = act(alpha * op(a) @ op(b) + bias + beta * c), batched (cuBLASLt with epilogue).
void gemm(Context& ctx, const ops::GemmParams& p);

/// y = LayerNorm(x + residual) * gamma + beta.  x, residual (may be null), y: [N, C] (ld*).
void layernorm(Context& ctx, const float* x, int64_t ldx, const float* residual, int64_t ldr,
               const float* gamma, const float* beta, float eps, float* y, int64_t ldy, int64_t N,
               int64_t C);

/// y = act(x + bias).  x, y: [N, C] (ld*); bias: [C] or null.
void bias_act(Context& ctx, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy,
              int64_t N, int64_t C, ops::Activation act);

/// y = softmax(x) per row.  x, y: [N, C] (ld*).
void softmax(Context& ctx, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C);

/// out[n, :] = table[ids[n], :] (+ out).  table: [V, C] (ldt); ids: [N] i32 or i64; out: [N, C].
/// Ids are checked on the device (an out-of-range id must be reported, not read).
void embedding(Context& ctx, const float* table, int64_t ldt, int64_t V, const void* ids,
               DType ids_dtype, float* out, int64_t ldo, int64_t N, int64_t C, bool accumulate);

}  // namespace unmask::cuda
