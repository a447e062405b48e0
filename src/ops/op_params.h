// ops/op_params.h: plain parameter structs the op front-ends fill after validation and pass to
// a backend (src/cpu, later src/cuda). Raw pointers, sizes and strides in elements; no Tensor
// (flash-attention `Flash_fwd_params` style). Backends trust these values.
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace unmask::ops {

/// One strided, batched GEMM with its fused epilogue:
///   for each i in [0, batch): c_i = act(alpha * op(a_i) @ op(b_i) + bias + beta * c_i)
/// op(a_i) is [M, K]: stored [M, K] with row stride lda, or [K, M] (lda) when ta == yes.
/// op(b_i) is [K, N]: stored [K, N] (ldb), or [N, K] (ldb) when tb == yes.
/// c_i is [M, N] with row stride ldc. x_i = x + i * batch_stride_x; batch_stride_b = 0 shares b.
struct GemmParams {
  const float* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  Trans ta = Trans::no;
  const float* b = nullptr;
  int64_t ldb = 0, batch_stride_b = 0;
  Trans tb = Trans::no;
  float* c = nullptr;
  int64_t ldc = 0, batch_stride_c = 0;
  int64_t batch = 1, M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // [N] or null
  Activation act = Activation::none;
};

}  // namespace unmask::ops
