// ref/train_ref.cc: naive float64 references for cross-entropy and dropout (see the header).
#include "ref/train_ref.h"

#include <cmath>

#include "core/philox.h"

namespace unmask::ref {

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* loss, int64_t* argmax,
                           int64_t M, int64_t V) {
  for (int64_t m = 0; m < M; ++m) {
    const T* x = logits + m * V;
    if (targets[m] < 0) {
      loss[m] = 0;
      argmax[m] = -1;
      continue;
    }
    int64_t best = 0;
    for (int64_t j = 1; j < V; ++j)
      if (x[j] > x[best]) best = j;
    T sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - x[best]);
    loss[m] = x[best] + std::log(sum) - x[targets[m]];
    argmax[m] = best;
  }
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, T grad_scale, T* dlogits,
                            int64_t M, int64_t V) {
  for (int64_t m = 0; m < M; ++m) {
    const T* x = logits + m * V;
    T* d = dlogits + m * V;
    if (targets[m] < 0) {
      for (int64_t j = 0; j < V; ++j) d[j] = 0;
      continue;
    }
    T mx = x[0];
    for (int64_t j = 1; j < V; ++j) mx = x[j] > mx ? x[j] : mx;
    T sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(x[j] - mx);
    for (int64_t j = 0; j < V; ++j)
      d[j] = grad_scale * (std::exp(x[j] - mx) / sum - (j == targets[m] ? T(1) : T(0)));
  }
}

bool dropout_keep(float p, uint64_t seed, uint64_t counter) {
  return philox_uniform(seed, counter) >= p;
}

template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t offset) {
  const T scale = T(1) / (T(1) - T(p));
  for (int64_t i = 0; i < n; ++i)
    y[i] = dropout_keep(p, seed, offset + uint64_t(i)) ? x[i] * scale : T(0);
}

template void cross_entropy_forward<double>(const double*, const int32_t*, double*, int64_t*,
                                            int64_t, int64_t);
template void cross_entropy_backward<double>(const double*, const int32_t*, double, double*,
                                             int64_t, int64_t);
template void dropout_forward<double>(const double*, double*, int64_t, float, uint64_t, uint64_t);

}  // namespace unmask::ref
