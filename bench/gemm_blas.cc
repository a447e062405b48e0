// bench/gemm_blas.cc: oneDNN (dnnl_sgemm) against OpenBLAS (cblas_sgemm) on BERT-base shapes.
//
// Build: cmake -S . -B build-bench -G Ninja -DUNMASK_BENCH_KERNELS=ON && cmake --build build-bench
//        --target gemm_blas && ./build-bench/bench/gemm_blas [max_seconds_per_case]
//
// Shapes are the four BERT-base linear layers, C = a @ W^T with the weight W stored as
// PyTorch does, [N, K] (so B is transposed: "NT"), for M = 128, 1024, 4096 tokens:
//   (N, K) = (2304, 768) fused QKV, (768, 768) attention out, (3072, 768) FFN up, (768, 3072) FFN down.
// Each case is validated first (the two libraries against each other and against a float64
// dot product on sampled entries), then timed: median of repeated runs, reported in GFLOP/s and
// as a fraction of the machine's fp32 peak = cores x 32 FLOP/cycle (Zen4: two 256-bit FMA pipes,
// AVX-512 double-pumped) x the clock read from /proc/cpuinfo "cpu MHz".
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

double cpu_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 1));
  return 0.0;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum class Lib { openblas, onednn };

// c [M, N] = a [M, K] @ w [N, K]^T, row-major.
void sgemm_nt(Lib lib, int M, int N, int K, const float* a, const float* w, float* c) {
  if (lib == Lib::openblas) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, w, K, 0.0f, c, N);
  } else {
    dnnl_status_t st = dnnl_sgemm('N', 'T', M, N, K, 1.0f, a, K, w, K, 0.0f, c, N);
    if (st != dnnl_success) {
      std::fprintf(stderr, "dnnl_sgemm failed: %d\n", int(st));
      std::exit(1);
    }
  }
}

void set_threads(int n) {
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

}  // namespace

int main(int argc, char** argv) {
  const double max_s = argc > 1 ? std::atof(argv[1]) : 0.6;  // time budget per case
  const double mhz = cpu_mhz();
  std::printf("# clock %.0f MHz (from /proc/cpuinfo \"cpu MHz\"), %s\n", mhz, openblas_get_config());
  const int Ms[] = {128, 1024, 4096};
  const int NKs[][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);

  std::printf("| M | N | K | threads | OpenBLAS GFLOP/s | %% peak | oneDNN GFLOP/s | %% peak | oneDNN/OpenBLAS |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int threads : {1, 2}) {
    set_threads(threads);
    const double peak = threads * 32.0 * mhz * 1e-3;  // GFLOP/s
    for (int M : Ms)
      for (const auto& nk : NKs) {
        const int N = nk[0], K = nk[1];
        std::vector<float> a(size_t(M) * K), w(size_t(N) * K), c1(size_t(M) * N), c2(size_t(M) * N);
        for (float& v : a) v = dist(rng);
        for (float& v : w) v = dist(rng);
        // Validate before timing: both libraries against a float64 dot product on sampled
        // entries (tolerance scaled by sqrt(K)), and against each other everywhere.
        sgemm_nt(Lib::openblas, M, N, K, a.data(), w.data(), c1.data());
        sgemm_nt(Lib::onednn, M, N, K, a.data(), w.data(), c2.data());
        const double tol = 1e-5 * std::sqrt(double(K)) * 4.0;
        for (int s = 0; s < 64; ++s) {
          int i = int(rng() % M), j = int(rng() % N);
          double ref = 0;
          for (int k = 0; k < K; ++k) ref += double(a[size_t(i) * K + k]) * w[size_t(j) * K + k];
          for (const auto* c : {&c1, &c2}) {
            double got = (*c)[size_t(i) * N + j];
            if (std::fabs(got - ref) > tol * (1.0 + std::fabs(ref))) {
              std::fprintf(stderr, "MISMATCH M=%d N=%d K=%d at (%d,%d): %g vs ref %g\n", M, N, K, i, j, got, ref);
              return 1;
            }
          }
        }
        double worst = 0;
        for (size_t i = 0; i < c1.size(); ++i) worst = std::max(worst, double(std::fabs(c1[i] - c2[i])));
        if (worst > tol * 10) {
          std::fprintf(stderr, "libraries disagree by %g at M=%d N=%d K=%d\n", worst, M, N, K);
          return 1;
        }
        double gflop = 2.0 * M * N * K * 1e-9;
        double med[2];
        for (Lib lib : {Lib::openblas, Lib::onednn}) {
          std::vector<double> times;
          sgemm_nt(lib, M, N, K, a.data(), w.data(), c1.data());  // warm-up
          double start = now_s();
          while (times.size() < 5 || (now_s() - start < max_s && times.size() < 200)) {
            double t0 = now_s();
            sgemm_nt(lib, M, N, K, a.data(), w.data(), c1.data());
            times.push_back(now_s() - t0);
          }
          std::sort(times.begin(), times.end());
          med[int(lib)] = times[times.size() / 2];
        }
        double g0 = gflop / med[0], g1 = gflop / med[1];
        std::printf("| %d | %d | %d | %d | %.1f | %.0f%% | %.1f | %.0f%% | %.2f |\n", M, N, K, threads, g0,
                    100 * g0 / peak, g1, 100 * g1 / peak, g1 / g0);
        std::fflush(stdout);
      }
  }
  return 0;
}
