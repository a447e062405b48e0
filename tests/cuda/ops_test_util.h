// tests/cuda/ops_test_util.h: the helpers of the CUDA kernel tests (test_cuda_ops.cc, whose
// main() sets g_has_cuda and g_seed, and test_cuda_attention.cc): values stored in a dtype,
// host and device tensors from doubles, NaN-poisoned outputs, a seeded Rng per test, tolerance
// comparisons, the activations' float64 references, the tests' CUDA context.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cuda/kernels.h"
#include "ops/ops.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/error.h"
#include "unmask/tensor.h"

namespace unmask::ops_test {

using ops::Activation;

/// Set by main() (test_cuda_ops.cc) before the tests run.
inline bool g_has_cuda = false;
inline uint64_t g_seed = 0;


// ---- values stored in a dtype --------------------------------------------------------------

/// Unit roundoff of a storage dtype.
inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::bf16: return std::ldexp(1.0, -8);
    case DType::f16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

/// x as stored in dt (round to nearest even), back as double.
inline double round_to(DType dt, double x) {
  const float f = float(x);
  switch (dt) {
    case DType::bf16: return bf16_to_f32(f32_to_bf16(f));
    case DType::f16: return f16_to_f32(f32_to_f16(f));
    default: return f;
  }
}

/// A host tensor of dt holding v (rounded).
inline Tensor host_tensor(const std::vector<double>& v, const Shape& shape, DType dt) {
  Tensor t = Tensor::empty(shape, dt);
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = float(v[i]);
    switch (dt) {
      case DType::f32: static_cast<float*>(t.raw())[i] = f; break;
      case DType::bf16: static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(f); break;
      case DType::f16: static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(f); break;
      case DType::i32: static_cast<int32_t*>(t.raw())[i] = int32_t(v[i]); break;
      case DType::i64: static_cast<int64_t*>(t.raw())[i] = int64_t(v[i]); break;
      case DType::u8: static_cast<uint8_t*>(t.raw())[i] = uint8_t(v[i]); break;
      default: throw Error("host_tensor: dtype ", dtype_name(dt));
    }
  }
  return t;
}

inline Tensor device_tensor(const std::vector<double>& v, const Shape& shape, DType dt) {
  return host_tensor(v, shape, dt).to(Device::cuda);
}

/// All elements of a (possibly strided, device) tensor as doubles, row-major.
inline std::vector<double> to_host(const Tensor& t) {
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  h.copy_from(t);
  std::vector<double> out(size_t(h.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    switch (h.dtype()) {
      case DType::f32: out[i] = static_cast<const float*>(h.raw())[i]; break;
      case DType::bf16: out[i] = bf16_to_f32(static_cast<const uint16_t*>(h.raw())[i]); break;
      case DType::f16: out[i] = f16_to_f32(static_cast<const uint16_t*>(h.raw())[i]); break;
      default: throw Error("to_host: dtype ", dtype_name(h.dtype()));
    }
  }
  return out;
}

/// Fills a device tensor (contiguous or 2-D row view) with NaN.
inline void poison(Context& ctx, Tensor& t) {
  cudaStream_t s = static_cast<cudaStream_t>(ctx.cuda_stream());
  if (t.is_contiguous()) {
    cuda::fill_nan(t.raw(), t.numel(), t.dtype(), s);
  } else {
    for (int64_t r = 0; r < t.size(0); ++r) {
      Tensor row = t.select(0, r);
      cuda::fill_nan(row.raw(), row.numel(), t.dtype(), s);
    }
  }
}

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(const char* test) {
    uint64_t h = g_seed;
    for (const char* c = test; *c; ++c) h = (h ^ uint64_t(*c)) * 0x100000001b3ull;
    gen.seed(h);
  }
  double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(gen); }
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
  /// n values ~ N(0, sd), rounded to dt; every 17th an outlier (x8) to stress the ranges.
  std::vector<double> vec(size_t n, DType dt, double sd = 1.0) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = round_to(dt, normal(sd) * (i % 17 == 5 ? 8.0 : 1.0));
    return v;
  }
};

/// Compares got with ref elementwise: |got - ref| <= tol(i). Reports the first few failures
/// and the totals; NaN never passes.
struct CloseReport {
  int64_t bad = 0;
  double max_err = 0.0;
  std::string first;
};
inline CloseReport compare(const std::vector<double>& got, const std::vector<double>& ref,
                    const std::function<double(size_t)>& tol) {
  CloseReport r;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(got[i] - ref[i]);
    if (!(err <= tol(i))) {
      if (r.bad < 5) {
        char buf[200];
        std::snprintf(buf, sizeof buf, "  [%zu] got %.8g ref %.8g err %.3g tol %.3g\n", i, got[i], ref[i], err, tol(i));
        r.first += buf;
      }
      ++r.bad;
    }
    if (!(err <= r.max_err)) r.max_err = std::isnan(err) ? INFINITY : err;
  }
  return r;
}

inline double act_ref(double x, Activation a) {
  switch (a) {
    case Activation::none: return x;
    case Activation::gelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::gelu_tanh: return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case Activation::tanh: return std::tanh(x);
    case Activation::relu: return x > 0 ? x : 0.0;
  }
  return x;
}

inline const char* act_name(Activation a) {  // (ops::activation_name lives in src/ops, absent from the GPU-only build)
  switch (a) {
    case Activation::none: return "none";
    case Activation::gelu: return "gelu";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::tanh: return "tanh";
    case Activation::relu: return "relu";
  }
  return "?";
}

inline const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f16};

inline Context& cuda_ctx() {
  static Context ctx(ContextOptions{.num_threads = 1, .device = Device::cuda});
  return ctx;
}


}  // namespace unmask::ops_test

/// Skips a test without a CUDA device (g_has_cuda, set by main()).
#define REQUIRE_CUDA() \
  if (!::unmask::ops_test::g_has_cuda) GTEST_SKIP() << "no CUDA device"
