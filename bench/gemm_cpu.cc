// bench/gemm_cpu.cc: the engine's CPU GEMM (ops::gemm: BLAS + fused bias/activation epilogue)
// on BERT-base shapes, comparing the threading strategies and GEMM backends of src/cpu/gemm_cpu.cc:
//   blas_threads : one BLAS call on the library's own threads, then a parallel epilogue pass
//   tiles/R      : Context-pool tiles (row blocks of R rows, or column halves when M is small),
//                  one single-threaded BLAS call + epilogue per tile
// Validates each configuration against the first (max abs difference) before timing; reports
// the best and median GFLOP/s as "best/median" (the best is the steadier figure on a shared
// machine). Usage: gemm_cpu [threads=2] [seconds_per_case=0.3] [only_M]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/blas.h"
#include "ops/ops.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
struct Config {
  const char* name;
  cpu::GemmBackend backend;
  cpu::GemmThreading threading;
  int64_t row_block;
};
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const double max_s = argc > 2 ? std::atof(argv[2]) : 0.3;
  const int only_m = argc > 3 ? std::atoi(argv[3]) : 0;
  Context ctx({.num_threads = threads});
  std::vector<Config> configs;
  for (auto backend : {cpu::GemmBackend::onednn, cpu::GemmBackend::openblas}) {
    if (!cpu::gemm_backend_available(backend)) continue;
    bool dn = backend == cpu::GemmBackend::onednn;
    configs.push_back({dn ? "onednn blas_threads" : "openblas blas_threads", backend, cpu::GemmThreading::blas_threads, 0});
    configs.push_back({dn ? "onednn tiles/64" : "openblas tiles/64", backend, cpu::GemmThreading::tiles, 64});
    configs.push_back({dn ? "onednn tiles/128" : "openblas tiles/128", backend, cpu::GemmThreading::tiles, 128});
    configs.push_back({dn ? "onednn tiles/256" : "openblas tiles/256", backend, cpu::GemmThreading::tiles, 256});
  }
  std::printf("# %d threads, kernels %s; c = act(a [M,K] @ w[N,K]^T + bias); GFLOP/s best/median\n"
              "| M | N | K | epilogue |", threads, ctx.cpu_isa());
  for (auto& c : configs) std::printf(" %s |", c.name);
  std::printf("\n|---|---|---|---|");
  for (size_t i = 0; i < configs.size(); ++i) std::printf("---|");
  std::printf("\n");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  const int NKs[][3] = {{2304, 768, 0}, {768, 768, 0}, {3072, 768, 0}, {3072, 768, 1}, {768, 3072, 0}};
  for (int M : {128, 1024, 4096})
    for (const auto& nk : NKs) {
      if (only_m && M != only_m) continue;
      const int N = nk[0], K = nk[1];
      const auto act = nk[2] ? ops::Activation::gelu : ops::Activation::none;
      Tensor a = Tensor::empty({M, K}, DType::f32), w = Tensor::empty({N, K}, DType::f32);
      Tensor bias = Tensor::empty({N}, DType::f32), c = Tensor::empty({M, N}, DType::f32);
      Tensor c0 = Tensor::empty({M, N}, DType::f32);
      for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = dist(rng);
      for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = dist(rng);
      for (int64_t i = 0; i < N; ++i) bias.data<float>()[i] = dist(rng);
      ops::GemmArgs args{.bias = &bias, .act = act};
      std::printf("| %d | %d | %d | bias%s |", M, N, K, nk[2] ? "+gelu" : "");
      for (size_t ci = 0; ci < configs.size(); ++ci) {
        const Config& cf = configs[ci];
        cpu::gemm_backend_override_for_testing(cf.backend);
        cpu::gemm_tuning_override_for_bench(cf.threading, cf.row_block);
        Tensor& out = ci == 0 ? c0 : c;
        ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, out, args);
        if (ci > 0) {  // validate against the first configuration
          double worst = 0;
          for (int64_t i = 0; i < c.numel(); ++i)
            worst = std::max(worst, double(std::fabs(c.data<float>()[i] - c0.data<float>()[i])));
          if (worst > 1e-3) {
            std::fprintf(stderr, "\n%s differs from %s by %g\n", cf.name, configs[0].name, worst);
            return 1;
          }
        }
        std::vector<double> times;
        double start = now_s();
        while (times.size() < 5 || (now_s() - start < max_s && times.size() < 400)) {
          double t0 = now_s();
          ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, out, args);
          times.push_back(now_s() - t0);
        }
        std::sort(times.begin(), times.end());
        const double gflop = 2.0 * M * N * K * 1e-9;
        std::printf(" %.0f/%.0f |", gflop / times.front(), gflop / times[times.size() / 2]);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
  return 0;
}
