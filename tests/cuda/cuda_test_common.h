// tests/cuda/cuda_test_common.h: what every CUDA test file needs: the device check behind
// REQUIRE_CUDA_DEVICE (the tests skip on a machine without a GPU, as CI's is), one CUDA and one
// CPU Context shared by a test binary, and the base seed (UNMASK_TEST_SEED or a fixed default).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::cuda_test {

inline bool has_cuda() {
  static const bool ok = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && count > 0;
  }();
  return ok;
}

/// The CUDA context of the test binary (2 host threads for the host-side packing work).
inline Context& gpu() {
  static Context ctx(ContextOptions{.num_threads = 2, .device = Device::cuda});
  return ctx;
}
/// The CPU context the CUDA results are compared against.
inline Context& cpu() {
  static Context ctx(ContextOptions{.num_threads = 2});
  return ctx;
}

/// max |a - b| / max |b| over the elements (at least 1e-6 in the denominator); a and b of any
/// float dtype (f32, bf16, f16) on any device, compared as f32 on the host.
inline double max_relative_error(const Tensor& a, const Tensor& b) {
  const Tensor ha = (a.device() == Device::cpu ? a : a.to(Device::cpu)).cast(DType::f32);
  const Tensor hb = (b.device() == Device::cpu ? b : b.to(Device::cpu)).cast(DType::f32);
  EXPECT_EQ(ha.shape(), hb.shape());
  if (ha.shape() != hb.shape()) return INFINITY;
  double worst = 0, scale = 1e-6;
  for (int64_t i = 0; i < hb.numel(); ++i) scale = std::max(scale, std::fabs(double(hb.data<float>()[i])));
  for (int64_t i = 0; i < hb.numel(); ++i)
    worst = std::max(worst, std::fabs(double(ha.data<float>()[i]) - double(hb.data<float>()[i])));
  return worst / scale;
}

/// The elements of dw += dy^T x and db += colsum(dy) (ops::linear_param_grads; dy [N, N_out], x
/// [N, K], from dw0 [N_out, K] and db0 [N_out]) that miss their float64 sum by more than 1e-5 of
/// the sum of the terms' magnitudes plus 1e-6 (fp32 accumulation of exact bf16 products), in
/// every dw_row_step-th row of dw and all of db.
inline int64_t linear_param_grads_misses(const std::vector<double>& dy, const std::vector<double>& x,
                                         const std::vector<double>& dw0, const std::vector<double>& db0,
                                         const std::vector<double>& got_dw, const std::vector<double>& got_db,
                                         int64_t N, int64_t N_out, int64_t K, int64_t dw_row_step = 1) {
  // dy^T [N_out, N] and x^T [K, N], so that each float64 dot product reads two contiguous rows
  // (BERT-large's FFN shape, 512 x 3072 x 1024, took ~10 s with strided reads).
  std::vector<double> dyt(size_t(N * N_out)), xt(size_t(N * K));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < N_out; ++o) dyt[size_t(o * N + n)] = dy[size_t(n * N_out + o)];
    for (int64_t k = 0; k < K; ++k) xt[size_t(k * N + n)] = x[size_t(n * K + k)];
  }
  int64_t misses = 0;
  for (int64_t o = 0; o < N_out; ++o) {
    const double* dy_o = dyt.data() + o * N;
    double sum = db0[size_t(o)], mag = std::fabs(sum);
    for (int64_t n = 0; n < N; ++n) sum += dy_o[n], mag += std::fabs(dy_o[n]);
    misses += !(std::fabs(got_db[size_t(o)] - sum) <= 1e-5 * mag + 1e-6);
    if (o % dw_row_step != 0) continue;
    for (int64_t k = 0; k < K; ++k) {
      const double* x_k = xt.data() + k * N;
      double s = dw0[size_t(o * K + k)], m = std::fabs(s);
      for (int64_t n = 0; n < N; ++n) {
        const double t = dy_o[n] * x_k[n];
        s += t, m += std::fabs(t);
      }
      misses += !(std::fabs(got_dw[size_t(o * K + k)] - s) <= 1e-5 * m + 1e-6);
    }
  }
  return misses;
}

/// max |a_i - b_i| over two equally long vectors; a NaN anywhere gives +inf (std::max would drop
/// it, and a kernel writing NaN would pass).
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::fabs(a[i] - b[i]);
    if (!(e <= m)) m = std::isnan(e) ? INFINITY : e;
  }
  return m;
}

inline uint64_t base_seed() {
  const char* env = std::getenv("UNMASK_TEST_SEED");
  return env && *env ? std::strtoull(env, nullptr, 0) : 0x7a1a5eedull;
}

}  // namespace unmask::cuda_test

#define REQUIRE_CUDA_DEVICE() \
  if (!::unmask::cuda_test::has_cuda()) GTEST_SKIP() << "no CUDA device"
