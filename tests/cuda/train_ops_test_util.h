// tests/cuda/train_ops_test_util.h: the helpers of the CUDA training-op tests
// (test_cuda_train_ops.cc, test_cuda_optim.cc): a seeded Rng per test, device values read back,
// NaN-poisoned outputs, tolerance and bitwise comparisons, a strided view.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_test_common.h"
#include "unmask/tensor.h"

namespace unmask::train_ops_test {

using cuda_test::base_seed;


struct Rng {
  std::mt19937_64 gen;
  uint64_t seed;
  explicit Rng(const char* test) {
    uint64_t h = base_seed();
    for (const char* c = test; *c; ++c) h = (h ^ uint64_t(uint8_t(*c))) * 0x100000001b3ull;
    seed = h;
    gen.seed(h);
  }
  std::string note() const { return "seed " + std::to_string(base_seed()) + " (UNMASK_TEST_SEED)"; }
  float normal(float sd = 1.0f) { return std::normal_distribution<float>(0.0f, sd)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  /// A host f32 tensor of N(mean, sd) values, every 13th value x6 (ranges).
  Tensor tensor(const Shape& shape, float sd = 1.0f, float mean = 0.0f) {
    Tensor t = Tensor::empty(shape, DType::f32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = mean + normal(sd) * (i % 13 == 4 ? 6.0f : 1.0f);
    return t;
  }
};

/// The values of a (possibly strided, device) tensor of any float dtype, row-major, as floats
/// (bf16 / f16 widen exactly).
inline std::vector<float> values(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  h.copy_from(t);
  if (h.dtype() != DType::f32) h = h.cast(DType::f32);
  const float* p = h.data<float>();
  return std::vector<float>(p, p + h.numel());
}

/// A device tensor of t's shape filled with NaN (a kernel that skips an element fails).
inline Tensor nan_device(const Shape& shape) {
  Tensor h = Tensor::empty(shape, DType::f32);
  std::fill(h.data<float>(), h.data<float>() + h.numel(), std::numeric_limits<float>::quiet_NaN());
  return h.to(Device::cuda);
}

/// |got - want| <= atol + rtol |want| elementwise (NaN never passes); reports the worst.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0, worst = -1;
  double worst_excess = 0.0, max_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(double(got[i]) - double(want[i])), tol = atol + rtol * std::fabs(double(want[i]));
    if (!(err <= tol)) {
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - tol;
      if (worst < 0 || excess > worst_excess) worst = int64_t(i), worst_excess = excess;
    }
    if (err > max_err) max_err = err;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements off; worst ["
                    << worst << "] got " << (worst >= 0 ? got[size_t(worst)] : 0.0f) << " want "
                    << (worst >= 0 ? want[size_t(worst)] : 0.0f) << " (max err " << max_err << ")";
}

/// Bitwise equality of two float vectors; reports the first difference.
inline void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      EXPECT_EQ(a, b) << what << ": first difference at [" << i << "]: got " << got[i] << " want " << want[i];
      return;
    }
  }
}

/// t as a [N, C] column slice at column 3 of a wider [N, C + 5] buffer (a row stride).
inline Tensor strided(const Tensor& t) {
  const int64_t N = t.size(0), C = t.size(1);
  Tensor wide = Tensor::zeros({N, C + 5}, DType::f32, t.device());
  Tensor view = wide.slice(1, 3, 3 + C);
  view.copy_from(t);
  return view;
}


}  // namespace unmask::train_ops_test
