// cuda/ops_cuda.h: the CUDA backend's op entry points, called by the op front-ends
// (src/ops/*.cc) under #ifdef UNMASK_WITH_CUDA once they have validated the tensors.
//
// Same semantics as the ops of ops/ops.h, for tensors on Device::cuda, run on the context's
// stream (asynchronously: errors of the kernels themselves surface at the next synchronising
// call). Element types: f32, bf16 and f16 for every op, with fp32 arithmetic inside; GEMMs
// take bf16/f16 (fp32 accumulation) or f32 (TF32 only when CudaState::allow_tf32). Parameter
// vectors (bias, gamma, beta) may be f32 or the activations' dtype.
//
// Each function re-checks what the kernels rely on (devices, dtypes agreeing, innermost
// stride 1) and throws Error / Unsupported with the actual values; the shape validation
// itself belongs to the front-ends.
//
//   Context ctx({.device = Device::cuda});
//   Tensor x = Tensor::empty({N, C}, DType::bf16, Device::cuda);
//   cuda::layernorm(ctx, x, &res, gamma, beta, 1e-12f, x);
#pragma once
#include <cstdint>
#include <string_view>

#include "ops/op_params.h"
#include "ops/ops.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::cuda {

/// Whether the CUDA backend implements `op` for `dtype` (ops::supports answers for cuda
/// with this). Ops: gemm, layernorm, activation, softmax, embedding, attention,
/// embedding_layernorm.
bool supports(std::string_view op, DType dtype);

/// c = act(alpha * op(a) @ op(b) + bias + beta * c); 2-D or 3-D (batched, b may have batch 1).
/// cuBLASLt (gemm_cublaslt.h), epilogues fused where cuBLASLt can.
void gemm(Context& ctx, const Tensor& a, ops::Trans ta, const Tensor& b, ops::Trans tb, Tensor& c,
          const ops::GemmArgs& args);

/// y = LayerNorm(x + residual) * gamma + beta over the last dim. y may alias x or residual.
void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor& beta,
               float eps, Tensor& y);

/// y = act(x); y may alias x.
void activation(Context& ctx, const Tensor& x, Tensor& y, ops::Activation act);

/// Row softmax over the last dim; y may alias x.
void softmax(Context& ctx, const Tensor& x, Tensor& y);

/// out[i, :] = table[ids[i], :] (+ out when accumulate). ids on the device are trusted; ids on
/// the host are range-checked and uploaded.
void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out, bool accumulate);

/// out = LayerNorm(word[ids] + pos[pos_ids] + type[type_ids]) * gamma + beta, one kernel
/// (BERT's embedding block). ids, pos_ids, type_ids: i32 [N] on the device (type_ids may be
/// null: all type 0); tables [*, C] contiguous of out's dtype; out [N, C].
void embedding_layernorm(Context& ctx, const Tensor& ids, const Tensor& pos_ids, const Tensor* type_ids,
                         const Tensor& word, const Tensor& pos, const Tensor& type, const Tensor& gamma,
                         const Tensor& beta, float eps, Tensor& out);

/// Multi-head attention (ops::attention semantics): flash kernel for bf16/f16 with HS in
/// {64, 80, 88, 128}, naive kernel otherwise. cu_seqlens / key_padding_mask may live on the
/// host (uploaded) or the device. Packed mode needs the longest sequence to size the grid:
/// pass max_seqlen when cu_seqlens is on the device, else it is read back (a stream sync).
void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const ops::AttentionArgs& args, int64_t max_seqlen = 0);

// ---- f32 raw-pointer forms, called by the current op front-ends (src/ops/*.cc) ----------
// Device pointers of f32 rows (ld = row stride in elements), sizes already validated.

/// ops::GemmParams (f32 a, b, c, bias) through cuBLASLt.
void gemm(Context& ctx, const ops::GemmParams& p);
/// y = act(x + bias), x/y [N, C]; bias [C] or null.
void bias_act(Context& ctx, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy, int64_t N,
              int64_t C, ops::Activation act);
/// y = LayerNorm(x + residual) * gamma + beta; residual may be null.
void layernorm(Context& ctx, const float* x, int64_t ldx, const float* residual, int64_t ldr, const float* gamma,
               const float* beta, float eps, float* y, int64_t ldy, int64_t N, int64_t C);
/// Row softmax of x [N, C] into y.
void softmax(Context& ctx, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C);
/// out[n] = table[ids[n]] (+ out[n]); table [V, C]; ids i32/i64 [N] in host memory
/// (range-checked, uploaded) or device memory (trusted).
void embedding(Context& ctx, const float* table, int64_t ldt, int64_t V, const void* ids, DType id_dtype, float* out,
               int64_t ldo, int64_t N, int64_t C, bool accumulate);

}  // namespace unmask::cuda
