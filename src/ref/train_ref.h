// ref/train_ref.h: float64 oracles for the training-only ops that ref_ops.h lacks: softmax
// cross-entropy (forward and backward) and counter-based dropout.
//
// Plain loops, no SIMD, no threads (see ref_ops.h). Tests compare ops::cross_entropy and
// ops::dropout against these, and check cross_entropy_backward against central finite
// differences of cross_entropy_forward (tests/test_train_ops.cc).
//
//   std::vector<double> loss(M), dl(M * V);
//   ref::cross_entropy_forward(x.data(), t.data(), loss.data(), argmax.data(), M, V);
//   ref::cross_entropy_backward(x.data(), t.data(), 1.0 / count, dl.data(), M, V);
#pragma once
#include <cstdint>

namespace unmask::ref {

/// loss[m] = log(sum_j exp(x[m, j])) - x[m, t_m] and argmax[m] = the first index of the row
/// maximum, for t_m = targets[m] >= 0; loss 0 and argmax -1 for a negative (ignored) target.
///   logits: [M, V]; targets: [M]; loss: [M]; argmax: [M].
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* loss, int64_t* argmax,
                           int64_t M, int64_t V);

/// dlogits = grad_scale * (softmax(row) - onehot(t)), zeros for an ignored row: the gradient
/// of grad_scale * sum_m loss[m] (overwritten).  logits, dlogits: [M, V]; targets: [M].
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, T grad_scale, T* dlogits,
                            int64_t M, int64_t V);

/// Whether dropout keeps the element with counter `counter`: philox_uniform(seed, counter) >= p
/// (core/philox.h; the comparison in float, as the ops define it).
bool dropout_keep(float p, uint64_t seed, uint64_t counter);

/// y[i] = x[i] / (1 - p) if dropout_keep(p, seed, offset + i) else 0, for i in [0, n).
/// The backward is the same map applied to dy.
template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t offset);

}  // namespace unmask::ref
