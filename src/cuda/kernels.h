// cuda/kernels.h: the launchers of the CUDA backend's elementwise and row kernels.
//
// Kernel layer (STYLE.md §2.1): raw device pointers, explicit sizes and row strides (ld*, in
// elements; the innermost stride is always 1), an explicit stream. Each launcher checks its
// preconditions (throws Error naming the values), picks the template instance for the runtime
// dtype (one switch per family), computes the grid with ceil_div and checks the launch.
// Tensor-level validation happens in the op front-ends (src/ops) and ops_cuda.cc.
//
// Storage dtypes: f32, bf16, f16 (`dtype`); all arithmetic in fp32. Parameter vectors
// (bias, gamma, beta) are f32 or `dtype` (`param_dtype`).
//
// Dimensions: N rows, C columns (channels), V vocabulary rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/ops.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

/// y[n, :] = act(x[n, :] + bias) (activation.cu). The activation op and the GEMM epilogue
/// fallback (exact GELU, tanh).
///   x: [N, C] (ldx); bias: [C] or null; y: [N, C] (ldy), may alias x.
/// y = act(x + bias) with x in f32 and y in `dtype` (one rounding of the pre-activation).
void bias_act_forward_from_f32(void* y, int64_t ldy, const float* x, int64_t ldx, const void* bias, DType bias_dtype,
                               int64_t N, int64_t C, ops::Activation act, DType dtype, cudaStream_t stream);
void bias_act_forward(void* y, int64_t ldy, const void* x, int64_t ldx, const void* bias, DType bias_dtype,
                      int64_t N, int64_t C, ops::Activation act, DType dtype, cudaStream_t stream);

/// y = LayerNorm(x + residual) * gamma + beta per row, fp32 statistics, two-pass (mean, then
/// centred variance) (layernorm.cu).
///   x: [N, C] (ldx); residual: [N, C] (ldr) or null; gamma, beta: [C]; y: [N, C] (ldy).
///   y may alias x or residual.
void layernorm_forward(void* y, int64_t ldy, const void* x, int64_t ldx, const void* residual, int64_t ldr,
                       const void* gamma, const void* beta, DType param_dtype, float eps, int64_t N, int64_t C,
                       DType dtype, cudaStream_t stream);

/// y[n, :] = softmax(x[n, :]) over C, max-subtracted, fp32 (softmax.cu). y may alias x.
void softmax_forward(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int64_t C, DType dtype,
                     cudaStream_t stream);

/// out[n, :] = table[ids[n], :] (+ out[n, :] when accumulate) (embedding.cu).
///   table: [V, C] (ldt); ids: i32 or i64 [N], trusted to lie in [0, V); out: [N, C] (ldo).
void embedding_forward(void* out, int64_t ldo, const void* table, int64_t ldt, const void* ids, DType id_dtype,
                       int64_t N, int64_t C, bool accumulate, DType dtype, cudaStream_t stream);

/// BERT's embedding block in one pass (embedding.cu):
///   out[n, :] = LayerNorm(word[ids[n]] + pos[pos_ids[n]] + type[type_ids[n]]) * gamma + beta
/// the sum formed in fp32 (not rounded to `dtype` between the adds).
///   ids, pos_ids: i32 [N]; type_ids: i32 [N] or null (type 0); word: [V, C], pos: [P, C],
///   type: [TT, C], all contiguous rows of `dtype`; gamma, beta: [C]; out: [N, C] (ldo).
void embedding_layernorm_forward(void* out, int64_t ldo, const int32_t* ids, const int32_t* pos_ids,
                                 const int32_t* type_ids, const void* word, const void* pos, const void* type,
                                 const void* gamma, const void* beta, DType param_dtype, float eps, int64_t N,
                                 int64_t C, DType dtype, cudaStream_t stream);

/// dst = dtype(src), round to nearest even (cast.cu): the bf16 autocast of f32 GEMMs.
///   src: f32 [batches][rows, cols] with row stride lds and batch stride batch_stride (0: one
///   matrix shared by the batches: pass batches = 1); dst: `dtype` (bf16 or f16), packed
///   [batches, rows, cols].
void cast_f32_2d(void* dst, DType dtype, const float* src, int64_t lds, int64_t batch_stride, int64_t rows,
                 int64_t cols, int64_t batches, cudaStream_t stream);

/// dst[r, c] = dst_dtype(src[r, c]) for rows x cols elements, any of f32, bf16, f16 on either
/// side (cast.cu; widening is exact, narrowing rounds to nearest even). Row strides ldd, lds in
/// elements; dst must not overlap src.
void cast_rows(void* dst, DType dst_dtype, int64_t ldd, const void* src, DType src_dtype, int64_t lds, int64_t rows,
               int64_t cols, cudaStream_t stream);

/// Fills n elements of `dtype` at p with a quiet NaN (tests poison outputs with it).
void fill_nan(void* p, int64_t n, DType dtype, cudaStream_t stream);

}  // namespace unmask::cuda
