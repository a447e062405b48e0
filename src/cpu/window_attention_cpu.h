// cpu/window_attention_cpu.h: windowed attention with an additive bias and mask on the CPU (fp32),
// the kernels behind ops::window_attention / window_attention_backward (semantics in ops.h and
// ref/window_attention_ref.h, the float64 oracle).
//
// One work item is a (window, head), handed out dynamically to the pool's threads. Forward:
// S = scale Q K^T (a single-threaded sgemm on the head's column blocks) + bias (+ mask), the
// row softmax with its lse (the vectorised row kernels of cpu/kernels.h), O = P V (sgemm). The
// backward recomputes P from the lse and runs dV = P^T dO, dP = dO V^T, dS = P (dP - delta),
// dQ = scale dS K, dK = scale dS^T Q as GEMMs; the bias gradient, a sum over windows, is reduced
// in window order from a bounded buffer of the windows' dS, so its bits do not depend on the
// thread count. Scratch per thread: N^2 + N floats forward, 2 N^2 + N backward.
// (A scalar kernel streaming one query row at a time ran Swin-T's 392-token windows at about
// 5 GFLOP/s on two AVX-512 cores: 39% of a BEVT iteration.)
//
// Trusts its inputs: src/ops/window_attention.cc validates them.
#pragma once
#include <cstdint>

#include "ops/op_params.h"
#include "unmask/context.h"

namespace unmask::cpu {

using ops::WindowAttentionParams;  // ops/op_params.h

void window_attention_forward(Context& ctx, const WindowAttentionParams& p);
void window_attention_backward(Context& ctx, const WindowAttentionParams& p);

}  // namespace unmask::cpu
