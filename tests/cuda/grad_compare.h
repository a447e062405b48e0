// tests/cuda/grad_compare.h: the gradient comparison of the CUDA model tests (BERT, VideoMAE):
// every parameter gradient computed on the GPU against the same model's on the CPU.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "test_harness.h"
#include "unmask/tensor.h"
#include "unmask/train.h"

namespace unmask::cuda_test {

/// The values of t (any device) as doubles.
inline std::vector<double> host_values(const Tensor& t) {
  const Tensor h = t.device() == Device::cpu ? t.contiguous() : t.to(Device::cpu);
  const float* p = h.data<float>();
  return std::vector<double>(p, p + h.numel());
}

inline double l2(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

/// Every gradient of `got` (on CUDA) against `want` (CPU): ||g - w|| / max(||w||, 1e-3 ||W||) <= tol,
/// W all the CPU gradients (a gradient whose exact value is 0 is rounding noise on both sides, so it
/// is measured against the global norm). `extra(i, w, g)` may check more of parameter i. Prints the
/// worst error; fails when the CPU gradients are all zero (the comparison would prove nothing).
inline void expect_grads_close(std::vector<Param>& want, std::vector<Param>& got, double tol, const std::string& what,
                               const std::string& seed_note,
                               const std::function<void(size_t, const std::vector<double>&, const std::vector<double>&)>&
                                   extra = {}) {
  ASSERT_EQ(want.size(), got.size()) << what;
  std::vector<std::vector<double>> w(want.size()), g(want.size());
  double global = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].name, got[i].name) << what;
    ASSERT_EQ(got[i].grad.device(), Device::cuda) << what << ": " << got[i].name;
    w[i] = host_values(want[i].grad);
    g[i] = host_values(got[i].grad);
    global += l2(w[i]) * l2(w[i]);
  }
  global = std::sqrt(global);
  ASSERT_GT(global, 0.0) << what << ": the CPU gradients are all zero (the test would prove nothing)";
  double worst = 0;
  std::string worst_name;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = 0;
    for (size_t k = 0; k < w[i].size(); ++k) d += (g[i][k] - w[i][k]) * (g[i][k] - w[i][k]);
    const double err = std::sqrt(d) / std::max(l2(w[i]), 1e-3 * global);
    EXPECT_LE(err, tol) << what << ": " << want[i].name << " |grad cpu| " << l2(w[i]) << ", |grad cuda| " << l2(g[i])
                        << ", global " << global << "; " << seed_note;
    if (err > worst) worst = err, worst_name = want[i].name;
    if (extra) extra(i, w[i], g[i]);
  }
  std::printf("[ %s ] worst gradient error %.3g (%s), global norm %.4g\n", what.c_str(), worst, worst_name.c_str(),
              global);
}

}  // namespace unmask::cuda_test
