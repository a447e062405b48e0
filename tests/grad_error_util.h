// tests/grad_error_util.h: comparing every parameter gradient of a low-precision step with the
// f32 step's (the bf16-activation tests of BERT and VideoMAE).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "unmask/train.h"

namespace unmask::test {

/// The gradients of `params` as float vectors (host tensors), in parameter order.
inline std::vector<std::vector<float>> grads_of(const std::vector<Param>& params) {
  std::vector<std::vector<float>> out;
  for (const Param& p : params) out.emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  return out;
}

/// Per gradient i: ||got_i - want_i|| / max(||want_i||, floor x ||want||), ||want|| the norm of all
/// the wanted gradients together. A gradient that is exactly 0 in exact arithmetic (a key bias: a
/// shift shared by a row's scores) keeps only rounding noise on both sides, so it is measured
/// against that share of the global norm instead of its own.
inline std::vector<double> grad_errors(const std::vector<std::vector<float>>& got,
                                       const std::vector<std::vector<float>>& want, double floor) {
  double global = 0;
  for (const auto& g : want)
    for (const float v : g) global += double(v) * v;
  global = std::sqrt(global);
  std::vector<double> errors;
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = 0, own = 0;
    for (size_t j = 0; j < want[i].size(); ++j) {
      const double d = double(got[i][j]) - want[i][j];
      diff += d * d;
      own += double(want[i][j]) * want[i][j];
    }
    errors.push_back(std::sqrt(diff) / std::max(std::sqrt(own), floor * global));
  }
  return errors;
}

}  // namespace unmask::test
