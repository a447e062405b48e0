// bench/gemm_packed.cc: ops::gemm (dnnl_sgemm per tile, weights re-packed every call) against
// ops::gemm_packed (oneDNN matmul primitive on weights packed once, src/cpu/gemm_packed_cpu.cc)
// on BERT-base shapes: c [M, N] = act(a [M, K] @ W [N, K]^T + bias).
//
// Each configuration is validated against a float64 dot product on 64 sampled entries
// (tolerance 4e-5 sqrt(K)) before timing; reports the median (and best) ms and GFLOP/s over
// repeated calls within the time budget. Also prints which oneDNN implementation the matmul
// primitive picks for a fixed and a runtime M, and the primitive creation time.
// Usage: gemm_packed [threads=2] [seconds_per_case=0.5] [only_M]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/blas.h"
#include "ops/ops.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Which oneDNN matmul implementation serves [M, K] x [K, N] (any weight layout), and how long
// creating the primitive takes (first creation: JIT; oneDNN caches later ones).
void probe(int64_t M, int64_t K, int64_t N) {
  using dnnl::memory;
  omp_set_num_threads(1);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  memory::desc src({M, K}, memory::data_type::f32, memory::format_tag::ab);
  memory::desc w({K, N}, memory::data_type::f32, memory::format_tag::any);
  memory::desc dst({M, N}, memory::data_type::f32, memory::format_tag::ab);
  double t0 = now_s();
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, w, dst), eng);
  dnnl::matmul prim(pd);
  double t1 = now_s();
  std::printf("# probe M=%s K=%ld N=%ld: impl %s, create %.2f ms, weights %zu bytes\n",
              M == DNNL_RUNTIME_DIM_VAL ? "runtime" : std::to_string(M).c_str(), long(K), long(N),
              pd.impl_info_str(), (t1 - t0) * 1e3, pd.weights_desc().get_size());
}

struct Result {
  double med_ms, best_ms, max_err;
};

template <typename Fn>
Result time_it(Fn&& fn, double max_s, const Tensor& a, const Tensor& w, const Tensor& bias,
               const Tensor& c, int64_t M, int64_t N, int64_t K) {
  fn();  // warm-up (primitive creation, first touch)
  // Validate 64 sampled entries against float64.
  std::mt19937 pick(11);
  double max_err = 0;
  const float* A = a.data<float>();
  const float* Wp = w.data<float>();
  for (int s = 0; s < 64; ++s) {
    int64_t m = pick() % M, n = pick() % N;
    double ref = bias.data<float>()[n];
    for (int64_t k = 0; k < K; ++k) ref += double(A[m * K + k]) * Wp[n * K + k];
    max_err = std::max(max_err, std::fabs(ref - c.data<float>()[m * N + n]));
  }
  if (max_err > 4e-5 * std::sqrt(double(K)) * 4) {
    std::fprintf(stderr, "validation failed: M=%ld N=%ld K=%ld max err %g\n", long(M), long(N), long(K), max_err);
    std::exit(1);
  }
  std::vector<double> ts;
  double start = now_s();
  while ((now_s() - start < max_s || ts.size() < 7) && ts.size() < 2000) {
    double t0 = now_s();
    fn();
    ts.push_back(now_s() - t0);
  }
  std::sort(ts.begin(), ts.end());
  return {ts[ts.size() / 2] * 1e3, ts[0] * 1e3, max_err};
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const double max_s = argc > 2 ? std::atof(argv[2]) : 0.5;
  const int only_m = argc > 3 ? std::atoi(argv[3]) : 0;
  Context ctx({.num_threads = threads});
  for (int64_t M : {int64_t(128), int64_t(DNNL_RUNTIME_DIM_VAL)}) probe(M, 768, 1536);
  probe(128, 768, 1152);
  probe(7, 768, 384);
  {  // one-time cost of packing a [3072, 768] weight
    Tensor w = Tensor::zeros({3072, 768}, DType::f32);
    for (int rep = 0; rep < 3; ++rep) {
      double t0 = now_s();
      ops::PackedWeight pw = ops::pack_weight(ctx, w);
      std::printf("# pack_weight [3072, 768]: %.2f ms (%ld bytes)\n", (now_s() - t0) * 1e3, long(pw.nbytes()));
    }
  }

  struct Config {
    const char* name;
    bool packed;
    int64_t row_block, max_slice;
    bool huge, fuse = false, row_major = false;
  };
  // The first sweep (GEMM_CHOICE.md) also had rb=all with slice = N/threads; rb=256/128 won.
  const Config configs[] = {
      {"gemm (dnnl_sgemm tiles)", false, 0, 0, false},
      {"packed rb=256 4K pages", true, 256, 1024, false},
      {"packed rb=128 4K pages", true, 128, 1024, false},
      {"packed rb=128 THP", true, 128, 1024, true},
      {"packed rb=128 THP post-ops", true, 128, 1024, true, true},
      {"packed rb=128 THP row-major", true, 128, 1024, true, false, true},
      {"packed rb=256 THP row-major", true, 256, 1024, true, false, true},
  };
  std::printf("# %d threads; c = a [M,K] @ w[N,K]^T + bias (FFN-up also +gelu); ms median (best), GFLOP/s of median\n",
              threads);
  std::printf("| M | N | K | epilogue |");
  for (auto& c : configs) std::printf(" %s |", c.name);
  std::printf("\n|---|---|---|---|");
  for (size_t i = 0; i < std::size(configs); ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int NKs[][3] = {{2304, 768, 0}, {768, 768, 0}, {3072, 768, 1}, {768, 3072, 0}};
  for (int64_t M : {128, 1024, 2218, 4096}) {
    if (only_m && M != only_m) continue;
    for (const auto& nk : NKs) {
      const int64_t N = nk[0], K = nk[1];
      const auto act = nk[2] ? ops::Activation::gelu : ops::Activation::none;
      Tensor a = Tensor::empty({M, K}, DType::f32), w = Tensor::empty({N, K}, DType::f32);
      Tensor bias = Tensor::empty({N}, DType::f32), c = Tensor::empty({M, N}, DType::f32);
      for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = dist(rng);
      for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = dist(rng) * 0.05f;
      for (int64_t i = 0; i < N; ++i) bias.data<float>()[i] = dist(rng);
      std::printf("| %ld | %ld | %ld | %s |", long(M), long(N), long(K), nk[2] ? "bias+gelu" : "bias");
      for (const auto& cfg : configs) {
        Result r;
        if (!cfg.packed) {
          // Validation uses the pre-activation product, so time gelu but validate without it.
          auto fn = [&] { ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, c, {.bias = &bias}); };
          r = time_it(fn, 0.0, a, w, bias, c, M, N, K);
          auto fn2 = [&] { ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, c, {.bias = &bias, .act = act}); };
          Result t = time_it([&] { fn2(); fn(); }, 0.0, a, w, bias, c, M, N, K);
          (void)t;
          std::vector<double> ts;
          double start = now_s();
          while ((now_s() - start < max_s || ts.size() < 7) && ts.size() < 2000) {
            double t0 = now_s();
            fn2();
            ts.push_back(now_s() - t0);
          }
          std::sort(ts.begin(), ts.end());
          r.med_ms = ts[ts.size() / 2] * 1e3;
          r.best_ms = ts[0] * 1e3;
        } else {
          cpu::packed_gemm_tuning_override_for_bench(cfg.row_block, cfg.max_slice, cfg.huge, cfg.fuse, cfg.row_major);
          ops::PackedWeight pw = ops::pack_weight(ctx, w);
          auto fn = [&] { ops::gemm_packed(ctx, a, pw, c, {.bias = &bias}); };
          r = time_it(fn, 0.0, a, w, bias, c, M, N, K);
          auto fn2 = [&] { ops::gemm_packed(ctx, a, pw, c, {.bias = &bias, .act = act}); };
          std::vector<double> ts;
          fn2();
          double start = now_s();
          while ((now_s() - start < max_s || ts.size() < 7) && ts.size() < 2000) {
            double t0 = now_s();
            fn2();
            ts.push_back(now_s() - t0);
          }
          std::sort(ts.begin(), ts.end());
          r.med_ms = ts[ts.size() / 2] * 1e3;
          r.best_ms = ts[0] * 1e3;
        }
        const double gf = 2.0 * M * N * K / (r.med_ms * 1e-3) * 1e-9;
        std::printf(" %.3f (%.3f) %.0f |", r.med_ms, r.best_ms, gf);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  }
  cpu::packed_gemm_tuning_override_for_bench(-1, 0);
  std::printf("# slow-path weight reorders: %ld\n", long(cpu::packed_gemm_slow_reorders()));
  return 0;
}
