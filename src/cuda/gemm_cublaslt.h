// cuda/gemm_cublaslt.h: the one GEMM of the CUDA backend, through cuBLASLt.
//
// Row-major semantics (like ops::GemmParams), for each batch i:
//   c_i = act(alpha * op(a_i) @ op(b_i) + bias + beta * c_i)
//   op(a_i): [M, K] (a stored [M, K], or [K, M] when ta == yes), row stride lda
//   op(b_i): [K, N] (b stored [K, N], or [N, K] when tb == yes), row stride ldb
//   c_i:     [M, N], row stride ldc; x_i = x + i * batch_stride_x (0 shares the operand)
//   bias:    [N] or null, f32 or the dtype of c
//
// cuBLASLt is column-major. A row-major [R, C] matrix with row stride ld is the column-major
// [C, R] matrix with leading dimension ld, i.e. its transpose, so we ask cuBLASLt for
//   c^T = op(b)^T @ op(a)^T      (A' = b, B' = a, D = c as an N x M column-major matrix)
// and the bias, a vector over the N output columns of c, is a vector over the rows of D, which
// is exactly cuBLASLt's bias layout.
//
// Types: a and b share one dtype, bf16/f16 (fp32 accumulation, CUBLAS_COMPUTE_32F) or f32
// (exact fp32 unless CudaState::allow_tf32, then CUBLAS_COMPUTE_32F_FAST_TF32); c is that dtype
// or f32.
//
// Epilogues: none -> DEFAULT; bias -> BIAS; gelu_tanh (+bias) -> GELU(_BIAS). cuBLASLt's GELU
// is the tanh approximation, so exact-erf GELU (HF "gelu", BERT's default) and tanh take one
// more read and write of c (activation.cu): on a bf16/f16 c with beta 0, the GEMM with the bias
// epilogue (product + bias rounded to c's type) and then the activation in place, PyTorch
// eager's roundings; otherwise the GEMM alone and then bias + activation in place. A bias the
// epilogue cannot take (f32 on a bf16/f16 c: cuBLASLt's bias has D's dtype; or not 16-byte
// aligned) on a bf16/f16 c with beta 0: the GEMM into an fp32 workspace, then bias + activation
// while converting.
//
// Plans (descriptors, layouts and the heuristic's first algorithm) are cached per shape, dtype,
// epilogue and pointer alignment in the CudaState; the workspace is the context's. (Timing the
// heuristic's other candidates tied with its first choice: BENCHMARKS.md.)
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/ops.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

class CudaState;

struct GemmLtParams {
  const void* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  ops::Trans ta = ops::Trans::no;
  const void* b = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  ops::Trans tb = ops::Trans::no;
  void* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  // Optional: the C operand read by beta (D = c is written): c's layout, not partly overlapping
  // it; null reads c (in place). ops::GemmArgs::addend.
  const void* c_in = nullptr;
  int64_t batch = 1, M = 0, N = 0, K = 0;
  DType ab_dtype = DType::bf16;  // a and b
  DType c_dtype = DType::bf16;
  float alpha = 1.0f, beta = 0.0f;
  const void* bias = nullptr;    // [N]
  DType bias_dtype = DType::f32;
  ops::Activation act = ops::Activation::none;
};

/// Runs one (batched) GEMM on `stream` with st's cuBLASLt handle and workspace. Checks the
/// preconditions (dtypes, sizes, strides) and throws Error with the values on violation.
void gemm_lt(CudaState& st, const GemmLtParams& p, cudaStream_t stream);

/// How the last gemm_lt call ran (for tests and the bench): true when the activation/bias went
/// through cuBLASLt's epilogue, false when through the separate kernel.
bool gemm_lt_last_used_fused_epilogue(const CudaState& st);

}  // namespace unmask::cuda
