// bench/train_ops_bench.cc: wall-clock time of the training ops at BERT-base pretraining sizes
// (N = 1024 tokens = 8 x 128, C = 768, I = 3072, NH = 12, HS = 64, V = 30522), beside one
// FFN GEMM of the same step for scale. Not a test and not in the default build:
//   cmake --build build --target unmask_core
//   g++ -std=c++20 -O3 -Iinclude -Isrc bench/train_ops_bench.cc build/libunmask_core.a \
//       -lopenblas -ldnnl -fopenmp -lhdf5_serial -pthread -o /tmp/train_ops_bench
//   /tmp/train_ops_bench [threads]     (default 2; 1 = per-thread CPU time, robust on a busy box)
// Each op: the minimum over 7 rounds of the mean of >= 30 ms of calls (the dev machine's
// cores are shared; the minimum is the least disturbed estimate).
//
// Measured (AMD EPYC Zen5, avx512 kernels, oneDNN GEMM backend, 1 thread, thread CPU time;
// the 2 shared cores were too loaded for wall-clock numbers to mean anything):
//   gemm [1024,768]x[768,3072] (for scale)         25.2 ms  (192 GFLOP/s)
//   layernorm fwd + stats (residual) [1024,768]     0.21 ms
//   layernorm_backward (residual) [1024,768]        0.45 ms
//   activation_backward gelu / gelu_tanh [1024,3072] 2.4 / 1.3 ms
//   bias_grad [1024,3072] / [1024,768]              0.25 / 0.05 ms
//   softmax_backward [12288,128]                    0.28 ms
//   embedding_backward [1024,768] -> [30522,768]    0.11 ms
//   cross_entropy + grad [160,30522] / [1024,30522] 1.9 / 12.9 ms
//   dropout / dropout_backward p=0.1 [1024,768]     0.41 / 0.41 ms  (scalar Philox: ~2.5x slower)
//   attention_forward_train p=0 / p=0.1             2.8 / 3.9 ms  (inference kernel: 3.2 ms)
//   attention_backward p=0 / p=0.1                  7.5 / 8.4 ms
// Per encoder layer (2 layernorms, 4 dropouts, gelu, 4 bias grads, attention, each fwd + bwd)
// that is ~18 ms against ~230 ms of GEMMs (43.5 GFLOP at ~190 GFLOP/s): ~8%.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "unmask/context.h"

using namespace unmask;

namespace {

bool g_cpu_time = false;  // 1 thread: the calling thread's CPU time (immune to preemption)

double now() {
  if (g_cpu_time) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ms_per_call(const std::function<void()>& fn) {
  fn();  // warm up (allocations, page faults)
  double best = 1e30;
  for (int round = 0; round < 7; ++round) {
    int calls = 0;
    const double t0 = now();
    double el = 0;
    do {
      fn();
      ++calls;
      el = now() - t0;
    } while (el < 0.03);
    best = std::min(best, el / calls);
  }
  return best * 1e3;
}

Tensor randn(std::mt19937& rng, const Shape& shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> d(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

void report(const char* name, double ms, double bytes = 0) {
  if (bytes > 0) std::printf("%-46s %8.3f ms  %6.1f GB/s\n", name, ms, bytes / (ms * 1e-3) / 1e9);
  else std::printf("%-46s %8.3f ms\n", name, ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  g_cpu_time = threads == 1;
  Context ctx({.num_threads = threads});
  std::printf("threads %d (%s), cpu isa %s\n", threads, g_cpu_time ? "thread CPU time" : "wall clock",
              ctx.cpu_isa());
  std::mt19937 rng(1);
  const int64_t B = 8, T = 128, N = B * T, C = 768, I = 3072, NH = 12, HS = 64, V = 30522;
  const double f = 4.0;  // bytes per float

  // ---- a GEMM of the same step, for scale: the FFN up-projection forward [N, C] x [C, I]
  {
    Tensor a = randn(rng, {N, C}), w = randn(rng, {I, C}), c = Tensor::empty({N, I}, DType::f32);
    const double ms = ms_per_call([&] { ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, c); });
    std::printf("%-46s %8.3f ms  %6.1f GFLOP/s\n", "gemm [1024,768]x[768,3072] (scale)", ms,
                2.0 * N * C * I / (ms * 1e-3) / 1e9);
  }
  // ---- layernorm
  {
    Tensor x = randn(rng, {N, C}), r = randn(rng, {N, C}), g = randn(rng, {C}), b = randn(rng, {C});
    Tensor y = Tensor::empty({N, C}, DType::f32), mean = Tensor::empty({N}, DType::f32);
    Tensor rstd = Tensor::empty({N}, DType::f32), dy = randn(rng, {N, C}), dx = Tensor::empty({N, C}, DType::f32);
    Tensor dg = Tensor::zeros({C}, DType::f32), db = Tensor::zeros({C}, DType::f32);
    report("layernorm fwd + stats (residual) [1024,768]",
           ms_per_call([&] { ops::layernorm(ctx, x, &r, g, b, 1e-12f, y, &mean, &rstd); }), 3 * N * C * f);
    report("layernorm_backward (residual) [1024,768]",
           ms_per_call([&] { ops::layernorm_backward(ctx, x, &r, g, mean, rstd, dy, dx, dg, db); }),
           4 * N * C * f);
  }
  // ---- activation backward, bias grads, softmax backward
  {
    Tensor x = randn(rng, {N, I}), dy = randn(rng, {N, I}), dx = Tensor::empty({N, I}, DType::f32);
    for (auto act : {ops::Activation::gelu, ops::Activation::gelu_tanh}) {
      char name[64];
      std::snprintf(name, sizeof name, "activation_backward %s [1024,3072]", ops::activation_name(act));
      report(name, ms_per_call([&] { ops::activation_backward(ctx, x, dy, dx, act); }), 3 * N * I * f);
    }
    Tensor dbi = Tensor::zeros({I}, DType::f32), dbc = Tensor::zeros({C}, DType::f32);
    report("bias_grad [1024,3072]", ms_per_call([&] { ops::bias_grad(ctx, dy, dbi); }), N * I * f);
    Tensor dyc = dy.view({N * 4, C});
    Tensor dyc1 = dyc.slice(0, 0, N);
    report("bias_grad [1024,768]", ms_per_call([&] { ops::bias_grad(ctx, dyc1, dbc); }), N * C * f);
    Tensor y = Tensor::empty({N * NH, T}, DType::f32), dys = randn(rng, {N * NH, T});
    Tensor dxs = Tensor::empty({N * NH, T}, DType::f32);
    ops::softmax(ctx, randn(rng, {N * NH, T}), y);
    report("softmax_backward [12288,128]", ms_per_call([&] { ops::softmax_backward(ctx, y, dys, dxs); }),
           3 * N * NH * T * f);
  }
  // ---- embedding backward (word embeddings)
  {
    Tensor ids = Tensor::empty({N}, DType::i32), dout = randn(rng, {N, C});
    std::uniform_int_distribution<int> d(0, int(V - 1));
    for (int64_t i = 0; i < N; ++i) ids.data<int32_t>()[i] = d(rng);
    Tensor dtable = Tensor::zeros({V, C}, DType::f32);
    report("embedding_backward [1024,768] -> [30522,768]",
           ms_per_call([&] { ops::embedding_backward(ctx, ids, dout, dtable); }), 3 * N * C * f);
  }
  // ---- cross-entropy (MLM: 160 masked rows of 8 x 128, or all 1024 rows)
  for (int64_t M : {int64_t(160), N}) {
    Tensor logits = randn(rng, {M, V}, 3.0f), t = Tensor::empty({M}, DType::i32);
    std::uniform_int_distribution<int> d(0, int(V - 1));
    for (int64_t i = 0; i < M; ++i) t.data<int32_t>()[i] = d(rng);
    Tensor dl = Tensor::empty({M, V}, DType::f32);
    char name[64];
    std::snprintf(name, sizeof name, "cross_entropy + grad [%lld,30522]", (long long)M);
    report(name, ms_per_call([&] { ops::cross_entropy(ctx, logits, t, nullptr, &dl, 1.0f); }), 3 * M * V * f);
  }
  // ---- dropout
  {
    Tensor x = randn(rng, {N, C}), y = Tensor::empty({N, C}, DType::f32);
    uint64_t off = 0;
    report("dropout p=0.1 [1024,768]", ms_per_call([&] { ops::dropout(ctx, x, y, 0.1f, 7, off += N * C); }),
           2 * N * C * f);
    report("dropout_backward p=0.1 [1024,768]",
           ms_per_call([&] { ops::dropout_backward(ctx, x, y, 0.1f, 7, off += N * C); }), 2 * N * C * f);
  }
  // ---- attention (q, k, v: slices of a fused [N, 3C] buffer; grads likewise)
  for (float p : {0.0f, 0.1f}) {
    Tensor qkv = randn(rng, {N, 3 * C}), dqkv = Tensor::empty({N, 3 * C}, DType::f32);
    Tensor q = qkv.slice(1, 0, C), k = qkv.slice(1, C, 2 * C), v = qkv.slice(1, 2 * C, 3 * C);
    Tensor dq = dqkv.slice(1, 0, C), dk = dqkv.slice(1, C, 2 * C), dv = dqkv.slice(1, 2 * C, 3 * C);
    Tensor out = Tensor::empty({N, C}, DType::f32), lse = Tensor::empty({NH, N}, DType::f32);
    Tensor dout = randn(rng, {N, C});
    const ops::AttentionArgs args{.num_heads = int(NH), .scale = 0.125f, .padded_seq_len = T};
    const ops::AttentionTrainArgs train{.dropout_p = p, .dropout_seed = 3, .dropout_offset = 0};
    const double flops_fwd = 4.0 * B * NH * T * T * HS;
    char name[80];
    std::snprintf(name, sizeof name, "attention_forward_train p=%.1f B=8 T=128", p);
    double ms = ms_per_call([&] { ops::attention_forward_train(ctx, q, k, v, out, lse, args, train); });
    std::printf("%-46s %8.3f ms  %6.1f GFLOP/s\n", name, ms, flops_fwd / (ms * 1e-3) / 1e9);
    std::snprintf(name, sizeof name, "attention_backward p=%.1f B=8 T=128", p);
    ms = ms_per_call([&] {
      ops::attention_backward(ctx, q, k, v, out, lse, dout, dq, dk, dv, args, train);
    });
    std::printf("%-46s %8.3f ms  %6.1f GFLOP/s\n", name, ms, 2.5 * flops_fwd / (ms * 1e-3) / 1e9);
  }
  {
    Tensor qkv = randn(rng, {N, 3 * C}), out = Tensor::empty({N, C}, DType::f32);
    Tensor q = qkv.slice(1, 0, C), k = qkv.slice(1, C, 2 * C), v = qkv.slice(1, 2 * C, 3 * C);
    const ops::AttentionArgs args{.num_heads = int(NH), .scale = 0.125f, .padded_seq_len = T};
    const double ms = ms_per_call([&] { ops::attention(ctx, q, k, v, out, args); });
    std::printf("%-46s %8.3f ms  %6.1f GFLOP/s\n", "attention (inference kernel, scale)", ms,
                4.0 * B * NH * T * T * HS / (ms * 1e-3) / 1e9);
  }
  return 0;
}
