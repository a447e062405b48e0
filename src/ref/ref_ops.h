// ref/ref_ops.h: the oracle. Naive scalar forward and backward of every op except attention.
//
// These are the dumb references beside the fast kernels in src/cpu (and later src/cuda): no
// SIMD, no threads, no blocking, the formula written as plainly as possible. They are templated
// on the scalar type and instantiated for double; tests round their fp32 inputs to double, run
// these and compare the fast kernels against the result (tests/test_ops.cc). Backward functions
// are checked against central finite differences of the forward functions in float64.
//
// Layout: row-major, contiguous, dimension names from ops.h (N rows, C channels, V vocabulary,
// M/N/K for GEMM). Every gradient output is OVERWRITTEN (not accumulated) unless it says so.
//
//   std::vector<double> y(N * C);
//   ref::layernorm_forward<double>(x.data(), nullptr, g.data(), b.data(), 1e-12, y.data(), N, C);
#pragma once
#include <cstdint>

#include "ops/ops.h"

namespace unmask::ref {

// ---- activation --------------------------------------------------------------------------

/// act(x) for one scalar (gelu exact / tanh approximation / tanh / identity).
template <typename T> T activation_scalar(T x, ops::Activation act);
/// d act(x) / dx for one scalar.
template <typename T> T activation_scalar_grad(T x, ops::Activation act);

/// y[i] = act(x[i]).  x, y: [n]
template <typename T> void activation_forward(const T* x, T* y, int64_t n, ops::Activation act);
/// dx[i] = dy[i] * act'(x[i]).  x, dy, dx: [n]
template <typename T>
void activation_backward(const T* x, const T* dy, T* dx, int64_t n, ops::Activation act);

// ---- gemm --------------------------------------------------------------------------------

/// c = act(alpha * op(a) @ op(b) + bias + beta * c), one matrix.
///   a: [M, K] (stored [K, M] if ta), b: [K, N] (stored [N, K] if tb), bias: [N] or null,
///   c: [M, N] in/out (read only when beta != 0).
template <typename T>
void gemm_forward(const T* a, bool ta, const T* b, bool tb, T* c, int64_t M, int64_t N, int64_t K,
                  T alpha, T beta, const T* bias, ops::Activation act);

/// Backward of c = act(alpha * op(a) @ op(b) + bias) (beta = 0).
///   pre: [M, N] the pre-activation z = alpha * op(a) @ op(b) + bias (saved by the forward),
///   dc:  [M, N] gradient of the output,
///   da:  [M, K] stored like a (i.e. [K, M] if ta), db: stored like b, dbias: [N] (may be null).
template <typename T>
void gemm_backward(const T* a, bool ta, const T* b, bool tb, const T* pre, const T* dc, T* da,
                   T* db, T* dbias, int64_t M, int64_t N, int64_t K, T alpha, ops::Activation act);

// ---- layernorm ---------------------------------------------------------------------------

/// s = x + residual (residual may be null); y = (s - mean(s)) / sqrt(var(s) + eps) * gamma + beta.
///   x, residual, y: [N, C]; gamma, beta: [C]. The variance is the biased (1/C) one.
template <typename T>
void layernorm_forward(const T* x, const T* residual, const T* gamma, const T* beta, T eps, T* y,
                       int64_t N, int64_t C);

/// Backward of layernorm_forward. dx is also the gradient of the residual (they are summed).
///   x, residual (may be null), dy, dx: [N, C]; gamma: [C]; dgamma, dbeta: [C].
template <typename T>
void layernorm_backward(const T* x, const T* residual, const T* gamma, T eps, const T* dy, T* dx,
                        T* dgamma, T* dbeta, int64_t N, int64_t C);

// ---- softmax -----------------------------------------------------------------------------

/// y[n, :] = exp(x[n, :] - max) / sum(exp(x[n, :] - max)).  x, y: [N, C]
template <typename T> void softmax_forward(const T* x, T* y, int64_t N, int64_t C);

/// dx[n, c] = y[n, c] * (dy[n, c] - sum_j dy[n, j] y[n, j]).  y, dy, dx: [N, C]
template <typename T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C);

// ---- embedding ---------------------------------------------------------------------------

/// out[n, :] = table[ids[n], :] (+ out[n, :] when accumulate).  table: [V, C]; ids: [N]; out: [N, C]
template <typename T>
void embedding_forward(const T* table, const int64_t* ids, T* out, int64_t N, int64_t C,
                       bool accumulate);

/// dtable[ids[n], :] += dout[n, :] (ACCUMULATES; repeated ids sum).  dout: [N, C]; dtable: [V, C]
template <typename T>
void embedding_backward(const int64_t* ids, const T* dout, T* dtable, int64_t N, int64_t C);

}  // namespace unmask::ref
