// train/matmul_peak.cc: the matrix-multiply rate a context's GEMM actually reaches, measured.
// Issue 6 asks for MFU "against the GPU's measured bf16 matrix peak"; the datasheet figure
// (989.4 TFLOP/s dense bf16 on an H100/H200 SXM) is not reached by any real GEMM (about 790 on
// random data with cuBLAS, ~890 on zeros, whose bits draw less power). So the benches measure
// it: C = A A^T on n x n operands of uniform values in [-1, 1) from a fixed generator, three
// products to warm up (clocks, cuBLASLt's heuristic and workspace), then the mean of `reps`.
#include <chrono>
#include <cstdint>

#include "ops/ops.h"
#include "train/metrics.h"
#include "unmask/error.h"

namespace unmask::train {

double measure_matmul_peak_gflops(Context& ctx, DType dtype, int64_t n, int reps) {
  UNMASK_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16, "measure_matmul_peak_gflops: ",
               dtype_name(dtype), " operands have no GEMM; use f32, bf16 or f16");
  UNMASK_CHECK(n >= 16 && n <= 65536 && reps >= 1, "measure_matmul_peak_gflops: n = ", n, " (16 .. 65536) and reps = ",
               reps, " (>= 1)");
  Tensor host = Tensor::empty({n, n}, DType::f32);
  float* v = host.data<float>();
  uint32_t state = 0x9E3779B9u;  // LCG (Numerical Recipes' constants): the top 24 bits -> [-1, 1)
  for (int64_t i = 0; i < n * n; ++i) {
    state = state * 1664525u + 1013904223u;
    v[i] = float(state >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  const Tensor a = (dtype == DType::f32 ? host : host.cast(dtype)).to(ctx.device());
  host = Tensor();
  Tensor c = Tensor::empty({n, n}, dtype, ctx.device());
  for (int i = 0; i < 3; ++i) ops::gemm(ctx, a, ops::Trans::no, a, ops::Trans::yes, c);
  ctx.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) ops::gemm(ctx, a, ops::Trans::no, a, ops::Trans::yes, c);
  ctx.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return seconds > 0 ? 2.0 * double(n) * double(n) * double(n) * reps / seconds / 1e9 : 0.0;
}

}  // namespace unmask::train
