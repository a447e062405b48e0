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

/// One convolution (ops::conv2d, validated): x [B, Cin, H, W], w [Cout, Cin, k, k], y [B, Cout,
/// OH, OW], NCHW contiguous; bias [Cout] or null.
struct Conv2dParams {
  const float *x = nullptr, *w = nullptr, *bias = nullptr;
  float* y = nullptr;
  int64_t B = 0, Cin = 0, H = 0, W = 0, Cout = 0, k = 0, OH = 0, OW = 0, stride = 1, padding = 0;
};

/// One windowed attention (ops::window_attention / window_attention_backward, validated): the
/// rows come in W windows of N tokens; window w uses mask[w mod M].
struct WindowAttentionParams {
  const float *q = nullptr, *k = nullptr, *v = nullptr;  // [R, NH HS] each, row strides ldq, ldk, ldv
  float* out = nullptr;                                   // forward: written; backward: read
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  const float* bias = nullptr;  // [NH, N, N] contiguous
  const float* mask = nullptr;  // [M, N, N] contiguous, or null
  int64_t masks = 0;            // M
  float* lse = nullptr;         // [NH, R]: forward output (optional there), backward input
  int64_t num_heads = 0, head_size = 0, window = 0, windows = 0;  // NH, HS, N, W (R = W N)
  float scale = 0.0f;
  // Backward only.
  const float* dout = nullptr;  // [R, NH HS], row stride lddo
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // overwritten; row strides lddq, lddk, lddv
  int64_t lddo = 0, lddq = 0, lddk = 0, lddv = 0;
  float* dbias = nullptr;       // [NH, N, N], accumulated (+=); null: not wanted
};

}  // namespace unmask::ops
