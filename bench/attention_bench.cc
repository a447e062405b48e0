// bench/attention_bench.cc: cpu::attention_forward GFLOP/s on BERT shapes, every ISA.
//
// Not in the default build. Build and run from the repository root:
//   g++ -std=c++20 -O3 -Iinclude -Isrc bench/attention_bench.cc src/cpu/attention_cpu.cc
//       src/ref/attention_ref.cc src/ops/context.cc src/core/thread_pool.cc
//       src/core/tensor.cc src/ops/device_memory.cc <src/cpu/dispatch.cc + kernels, or a stub> -pthread
//       -o /tmp/attention_bench
//   /tmp/attention_bench            # or: /tmp/attention_bench <threads>
//
// Each case is validated against ref::attention_forward (float64) before it is timed.
// FLOPs counted: 4 * B * NH * T^2 * HS (S = Q K^T and O = P V; the softmax is not counted).
// Peak: the program measures it (12 independent FMA chains per thread, avx512 and avx2) and
// prints each result as a fraction of it. The dev machine reports "AMD EPYC" family 26 (Zen5:
// two 512-bit FMA pipes): ~227 GFLOP/s per core with zmm, ~113 with ymm.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <ctime>
#include <immintrin.h>
#include <vector>

#include "cpu/attention_cpu.h"
#include "ref/attention_ref.h"
#include "unmask/context.h"

using namespace unmask;

namespace {

struct Case {
  int64_t B, T, NH, HS;
};

/// Seconds per call: the minimum over 15 runs of >= 20 ms each. The dev machine's cores are
/// shared, so the minimum (the least disturbed run) is the estimate; with one thread the
/// time is the calling thread's CPU time, which a preempted run does not inflate.
double seconds_per_call(Context& ctx, const cpu::AttentionParams& p, cpu::AttentionIsa isa) {
  const bool cpu_time = ctx.num_threads() == 1;
  auto now = [cpu_time] {
    if (!cpu_time) return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  cpu::attention_forward(ctx, p, isa);  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 15; ++rep) {
    int calls = 0;
    const double t0 = now();
    double el = 0;
    do {
      cpu::attention_forward(ctx, p, isa);
      ++calls;
      el = now() - t0;
    } while (el < 0.02);
    best = std::min(best, el / calls);
  }
  return best;
}

/// FMA throughput of one thread (GFLOP/s of CPU time): 12 independent accumulator chains.
__attribute__((target("avx512f"), noinline)) double peak_avx512() {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(0.001f * float(i));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-6f);
  const long iters = 20000000;
  timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  for (long it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  volatile float sink = lanes[0];
  (void)sink;
  const double sec = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
  return double(iters) * 12 * 32 / sec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  Context ctx({.num_threads = threads});
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const Case cases[] = {{1, 128, 12, 64}, {8, 128, 12, 64}, {1, 512, 12, 64}, {4, 512, 12, 64},
                        {1, 4096, 12, 64}};
  const double peak = cpu::attention_isa_supported(cpu::AttentionIsa::avx512) ? peak_avx512() : 0.0;
  std::printf("threads %d; GFLOP/s = 4*B*NH*T^2*HS / time; measured avx512 FMA peak %.0f GFLOP/s "
              "per thread\n", threads, peak);
  for (const Case& c : cases) {
    const int64_t C = c.NH * c.HS, N = c.B * c.T;
    std::vector<float> qkv(size_t(N * 3 * C)), out(size_t(N * C));
    for (float& x : qkv) x = dist(rng);
    cpu::AttentionParams p;
    p.q = qkv.data();
    p.k = qkv.data() + C;
    p.v = qkv.data() + 2 * C;
    p.out = out.data();
    p.ldq = p.ldk = p.ldv = 3 * C;
    p.ldo = C;
    p.num_heads = c.NH;
    p.head_size = c.HS;
    p.scale = float(1.0 / std::sqrt(double(c.HS)));
    p.batch = c.B;
    p.seq_len = c.T;

    // Validate against float64 on the first sequence (the reference is O(T^2) memory).
    std::vector<double> q1(size_t(c.T * C)), k1(q1.size()), v1(q1.size()), o1(q1.size());
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < C; ++j) {
        q1[size_t(i * C + j)] = qkv[size_t(i * 3 * C + j)];
        k1[size_t(i * C + j)] = qkv[size_t(i * 3 * C + C + j)];
        v1[size_t(i * C + j)] = qkv[size_t(i * 3 * C + 2 * C + j)];
      }
    const bool check = c.T <= 1024;
    if (check) {
      ref::AttentionLayout lay{.num_heads = c.NH, .head_size = c.HS, .batch = 1, .seq_len = c.T};
      ref::attention_forward(q1.data(), k1.data(), v1.data(), o1.data(), lay, p.scale);
    }

    const double flop = 4.0 * double(c.B * c.NH) * double(c.T * c.T) * double(c.HS);
    std::printf("B=%lld T=%lld NH=%lld HS=%lld (%.1f MFLOP):", (long long)c.B, (long long)c.T,
                (long long)c.NH, (long long)c.HS, flop / 1e6);
    for (auto isa : {cpu::AttentionIsa::generic, cpu::AttentionIsa::avx2, cpu::AttentionIsa::avx512}) {
      if (!cpu::attention_isa_supported(isa)) continue;
      if (isa == cpu::AttentionIsa::generic && c.T > 512) continue;  // too slow to bother
      cpu::attention_forward(ctx, p, isa);
      double max_err = 0;
      if (check)
        for (int64_t i = 0; i < c.T * C; ++i)
          max_err = std::max(max_err, std::fabs(double(out[size_t(i)]) - o1[size_t(i)]));
      if (max_err > 1e-4) {
        std::printf("\n  %s: WRONG, max abs err %.3g\n", cpu::attention_isa_name(isa), max_err);
        return 1;
      }
      const double s = seconds_per_call(ctx, p, isa);
      const double gf = flop / s / 1e9;
      std::printf("  %s %.1f GFLOP/s (%.0f%% of %d-thread zmm peak, %.3f ms, err %.1e)",
                  cpu::attention_isa_name(isa), gf, peak > 0 ? 100 * gf / (peak * threads) : 0.0,
                  threads, s * 1e3, max_err);
    }
    std::printf("\n");
  }
  return 0;
}
