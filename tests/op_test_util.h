// tests/op_test_util.h: shared helpers for op tests (STYLE.md §3).
//
//   TestRng rng;                              // seed from UNMASK_TEST_SEED or the default
//   SCOPED_TRACE(rng.note());                 // every failure names the seed to rerun with
//   Tensor x = random_tensor(rng, {N, C}, Fill::normal);
//   EXPECT_TRUE(all_close(x_f32, ref_f64, n, {.atol = 1e-6, .rtol = 1e-5}));
//
// Tolerances follow llm.c's validate_result: |got - ref| <= atol + rtol * |ref| elementwise,
// reporting the worst element (index, values) and the aggregate NMSE.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "unmask/tensor.h"

namespace unmask::test {

/// The base seed: UNMASK_TEST_SEED if set (decimal or 0x hex), else a fixed default.
inline uint64_t test_seed() {
  const char* env = std::getenv("UNMASK_TEST_SEED");
  if (env && *env) return std::strtoull(env, nullptr, 0);
  return 0x5eed2026ull;
}

enum class Fill : uint8_t {
  uniform,  // U(-1, 1)
  normal,   // N(0, 1)
  outlier,  // N(0, 1) with ~2% of values scaled by 50 and a constant offset of 3
};

inline const char* fill_name(Fill f) {
  return f == Fill::uniform ? "uniform" : f == Fill::normal ? "normal" : "outlier";
}

/// A 64-bit seeded generator whose seed is printed on failure (note()).
class TestRng {
 public:
  TestRng() : seed_(test_seed()), gen_(seed_) {}
  uint64_t seed() const { return seed_; }
  std::string note() const {
    std::ostringstream os;
    os << "seed=" << seed_ << " (rerun with UNMASK_TEST_SEED=" << seed_ << ")";
    return os.str();
  }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen_); }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  float value(Fill f) {
    switch (f) {
      case Fill::uniform: return float(uniform(-1.0, 1.0));
      case Fill::normal: return float(normal());
      case Fill::outlier: return float(3.0 + normal() * (uniform(0.0, 1.0) < 0.02 ? 50.0 : 1.0));
    }
    return 0.0f;
  }
  void fill(float* p, int64_t n, Fill f) {
    for (int64_t i = 0; i < n; ++i) p[i] = value(f);
  }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

/// A fresh [N, C] f32 tensor; with ld > C it is a column slice of an [N, ld] buffer (row
/// stride ld), and the padding holds NaN so a kernel that reads or keeps it is caught.
inline Tensor make_rows(int64_t N, int64_t C, int64_t ld = 0) {
  if (ld <= C) return Tensor::empty({N, C}, DType::f32);
  Tensor wide = Tensor::empty({N, ld}, DType::f32);
  float* p = wide.data<float>();
  for (int64_t i = 0; i < N * ld; ++i) p[i] = std::nanf("");
  return wide.slice(1, 0, C);
}

/// Fills a (possibly row-strided) 2-D f32 tensor with random values.
inline void fill_rows(TestRng& rng, Tensor& t, Fill f) {
  for (int64_t n = 0; n < t.size(0); ++n) rng.fill(t.data<float>() + n * t.stride(0), t.size(1), f);
}

/// The (possibly row-strided) 2-D f32 tensor's values as a dense double vector [N * C].
inline std::vector<double> to_f64(const Tensor& t) {
  std::vector<double> out;
  out.reserve(size_t(t.numel()));
  for (int64_t n = 0; n < t.size(0); ++n)
    for (int64_t c = 0; c < t.size(1); ++c) out.push_back(t.data<float>()[n * t.stride(0) + c]);
  return out;
}

struct Tol {
  double atol = 1e-6;
  double rtol = 1e-5;
};

/// fp32 tolerance for an output that sums K products: 1e-5 scaled by sqrt(K) (random-walk
/// rounding error), never below the elementwise 1e-5.
inline Tol reduction_tol(int64_t K) {
  double t = 1e-5 * std::sqrt(double(K > 1 ? K : 1));
  return {t, 1e-5 > t ? 1e-5 : t};
}

/// Checks |got - ref| <= atol + rtol |ref| for all n values; on failure reports the worst
/// element (by excess over its tolerance), the number of failures and the NMSE.
inline ::testing::AssertionResult all_close(const std::vector<double>& got,
                                            const std::vector<double>& ref, Tol tol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs reference " << ref.size();
  size_t worst = 0, bad = 0;
  double worst_excess = -1e300, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - ref[i]);
    if (std::isnan(got[i]) != std::isnan(ref[i])) err = INFINITY;
    double excess = err - (tol.atol + tol.rtol * std::fabs(ref[i]));
    if (excess > 0 || std::isnan(err)) ++bad;
    if (excess > worst_excess || std::isnan(err)) worst_excess = excess, worst = i;
    if (std::isfinite(err)) err2 += err * err, ref2 += ref[i] * ref[i];
  }
  double nmse = ref2 > 0 ? err2 / ref2 : err2;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " values outside atol " << tol.atol << " + rtol "
         << tol.rtol << "; worst at index " << worst << ": got " << got[worst] << ", reference "
         << ref[worst] << " (|err| " << std::fabs(got[worst] - ref[worst]) << "); NMSE " << nmse;
}

// Central difference of `loss` in the element of `value` whose analytic gradient (`grad`, same
// shape, f32) is largest, a well-conditioned quotient: (loss(w + h) - loss(w - h)) / 2h, with the
// element restored after. Returns {element index, analytic gradient, numeric gradient}.
struct FiniteDifference {
  int64_t index = 0;
  double analytic = 0, numeric = 0;
};
template <typename LossFn>
FiniteDifference central_difference_at_largest_grad(Tensor& value, const Tensor& grad, LossFn&& loss, float h = 1e-2f) {
  FiniteDifference fd;
  const float* g = grad.data<float>();
  for (int64_t i = 0; i < grad.numel(); ++i)
    if (std::fabs(g[i]) > std::fabs(g[fd.index])) fd.index = i;
  float* w = value.data<float>() + fd.index;
  const float orig = *w;
  *w = orig + h;
  const double plus = loss();
  *w = orig - h;
  const double minus = loss();
  *w = orig;
  fd.analytic = g[fd.index];
  fd.numeric = (plus - minus) / (2.0 * double(h));
  return fd;
}

}  // namespace unmask::test
