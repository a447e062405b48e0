// tests/cuda/test_cuda_ops.cc: every CUDA kernel against a float64 CPU reference.
//
// Without a CUDA device every test prints why and skips (the CPU-only CI machine). With one:
//   - inputs are fresh random values from a 64-bit seed, printed at start; UNMASK_TEST_SEED
//     overrides it to replay a failure;
//   - references run in double on the CPU from the inputs as rounded to the tested dtype;
//   - outputs are poisoned with NaN before each run, so an element a kernel forgets to write
//     fails the comparison (NaN compares false);
//   - tolerances: |got - ref| <= 2 u |ref| + small terms, u the unit roundoff of the output
//     dtype (2^-24 f32, 2^-8 bf16, 2^-11 f16); fp32 paths are held to ~1e-5 relative;
//   - invariances: fused GEMM epilogue == separate kernel.
// The attention kernels' tests are in test_cuda_attention.cc (the helpers: ops_test_util.h);
// main() is here and sets the device flag and the seed both files read.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/half.h"
#include "cuda/allocator.h"
#include "cuda/cuda_state.h"
#include "cuda/gemm_cublaslt.h"
#include "cuda/kernels.h"
#include "cuda/ops_cuda.h"
#include "cuda_test_common.h"
#include "ops_test_util.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;
using ops::Activation;
using ops::Trans;

using namespace unmask::ops_test;


// ---- core --------------------------------------------------------------------------------

TEST(CudaAllocator, SizeClassesBoundWaste) {
  for (size_t b : {size_t(1), size_t(511), size_t(512), size_t(4097), size_t(5000), size_t(1) << 20,
                   (size_t(1) << 20) + 1, size_t(3) << 29})
    EXPECT_TRUE(cuda::allocator_size_class(b) >= b && cuda::allocator_size_class(b) <= b + b / 4 + 512) << b;
}

TEST(CudaAllocator, ReusesFreedBlocksOnTheSameStream) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  void* s = ctx.cuda_stream();
  void* a = cuda::device_malloc(1000, s);
  const cuda::AllocatorStats before = cuda::allocator_stats();
  cuda::device_free(a);
  void* b = cuda::device_malloc(900, s);  // same class (1024)
  EXPECT_EQ(a, b);
  const cuda::AllocatorStats after = cuda::allocator_stats();
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 1);
  EXPECT_GE(after.peak_allocated_bytes, size_t(1024));
  cuda::device_free(b);
  // The peaks after a reset: 3000 bytes requested (rounded to a 3072-byte class) and nothing else
  // live on this thread's test: requested counts what was asked for, allocated the class.
  cuda::allocator_reset_peak();
  const cuda::AllocatorStats base = cuda::allocator_stats();
  void* c = cuda::device_malloc(3000, s);
  const cuda::AllocatorStats with_c = cuda::allocator_stats();
  EXPECT_EQ(with_c.peak_requested_bytes, base.requested_bytes + 3000);
  EXPECT_EQ(with_c.peak_allocated_bytes, base.allocated_bytes + cuda::allocator_size_class(3000));
  cuda::device_free(c);
  EXPECT_EQ(cuda::allocator_stats().requested_bytes, base.requested_bytes);
}

TEST(CudaTensor, HostDeviceRoundTripAndStridedCopy) {
  REQUIRE_CUDA();
  Rng rng("CudaTensor");
  std::vector<double> v = rng.vec(6 * 10, DType::f32);
  Tensor h = host_tensor(v, {6, 10}, DType::f32);
  Tensor d = h.to(Device::cuda);
  EXPECT_TRUE(d.device() == Device::cuda);
  EXPECT_EQ(to_host(d), v);
  Tensor cols = d.slice(1, 3, 8);  // [6, 5] with row stride 10, on the device
  std::vector<double> got = to_host(cols);
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 5; ++c) EXPECT_EQ(got[size_t(r * 5 + c)], v[size_t(r * 10 + 3 + c)]);
  Tensor z = Tensor::zeros({3, 7}, DType::bf16, Device::cuda);
  for (double x : to_host(z)) EXPECT_EQ(x, 0.0);
}

// ---- GEMM --------------------------------------------------------------------------------

namespace {

struct GemmCase {
  int64_t batch, M, N, K;
  Trans ta, tb;
  bool bias;
  Activation act;
  float alpha, beta;
  bool shared_b;
  bool bias_in_c_dtype;  // true: the cuBLASLt epilogue can take it; false: f32 bias
};

void run_gemm_case(const GemmCase& g, DType dt, Rng& rng) {
  Context& ctx = cuda_ctx();
  const int64_t Bt = g.batch;
  const bool batched = Bt > 1;
  const int64_t Bb = g.shared_b ? 1 : Bt;
  const int64_t ar = g.ta == Trans::yes ? g.K : g.M, ac = g.ta == Trans::yes ? g.M : g.K;
  const int64_t br = g.tb == Trans::yes ? g.N : g.K, bc = g.tb == Trans::yes ? g.K : g.N;
  auto shape3 = [&](int64_t b, int64_t r, int64_t c) { return batched ? Shape({b, r, c}) : Shape({r, c}); };
  const double in_sd = 1.0;
  std::vector<double> A = rng.vec(size_t(Bt * ar * ac), dt, in_sd), B = rng.vec(size_t(Bb * br * bc), dt, in_sd);
  const DType bias_dt = g.bias_in_c_dtype ? dt : DType::f32;
  std::vector<double> bias = g.bias ? rng.vec(size_t(g.N), bias_dt) : std::vector<double>();
  std::vector<double> C0 = g.beta != 0.0f ? rng.vec(size_t(Bt * g.M * g.N), dt) : std::vector<double>();
  Tensor a = device_tensor(A, shape3(Bt, ar, ac), dt), b = device_tensor(B, shape3(Bb, br, bc), dt);
  Tensor c = Tensor::empty(shape3(Bt, g.M, g.N), dt, Device::cuda);
  if (g.beta != 0.0f)
    c.copy_from(host_tensor(C0, c.shape(), dt));
  else
    poison(ctx, c);
  Tensor bias_t = g.bias ? device_tensor(bias, {g.N}, bias_dt) : Tensor();
  ops::GemmArgs args;
  args.alpha = g.alpha;
  args.beta = g.beta;
  args.bias = g.bias ? &bias_t : nullptr;
  args.act = g.act;
  cuda::gemm(ctx, a, g.ta, b, g.tb, c, args);
  const bool fused = cuda::gemm_lt_last_used_fused_epilogue(*ctx.cuda_state());
  std::vector<double> got = to_host(c);

  std::vector<double> ref(got.size()), pre(got.size()), S2(got.size()), product(got.size());
  for (int64_t bi = 0; bi < Bt; ++bi) {
    const double* Ab = A.data() + bi * ar * ac;
    const double* Bb_ = B.data() + (g.shared_b ? 0 : bi) * br * bc;
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) {
        double acc = 0.0, s2 = 0.0;
        for (int64_t k = 0; k < g.K; ++k) {
          const double x = g.ta == Trans::yes ? Ab[k * ac + i] : Ab[i * ac + k];
          const double y = g.tb == Trans::yes ? Bb_[j * bc + k] : Bb_[k * bc + j];
          acc += x * y;
          s2 += (x * y) * (x * y);
        }
        const size_t o = size_t((bi * g.M + i) * g.N + j);
        double p = double(g.alpha) * acc + (g.bias ? bias[size_t(j)] : 0.0) + (g.beta != 0.0f ? g.beta * C0[o] : 0.0);
        pre[o] = p;
        product[o] = double(g.alpha) * acc + (g.bias ? bias[size_t(j)] : 0.0);
        ref[o] = act_ref(p, g.act);
        S2[o] = std::sqrt(s2) * std::fabs(g.alpha);
      }
  }
  const double u = unit_roundoff(dt);
  // Output rounding (twice when the epilogue runs as a separate kernel on the rounded GEMM
  // result) + fp32 accumulation (~1e-5 relative to the terms' scale) + cuBLASLt's GELU epilogue
  // (tanh form; its internal tanh may be approximate: 2e-3 of the pre-activation).
  const double gelu_epi = fused && g.act == Activation::gelu_tanh ? 2e-3 : 0.0;
  auto strict_tol = [&](size_t i) {
    return 2 * u * (std::fabs(ref[i]) + std::fabs(pre[i])) + 1e-5 * (std::fabs(pre[i]) + S2[i] + 1.0) +
           gelu_epi * std::fabs(pre[i]);
  };
  // Accumulating into bf16/f16 (beta != 0): cuBLASLt may round alpha A B (+ bias) to c's type
  // before beta C is added (H200, 2026-11-26: 768x512x1024, ~1e-2 where A B and C cancel), the
  // same two roundings as a 16-bit GEMM followed by an add (PyTorch's linear + residual). One
  // more rounding of the product is allowed there; a GEMM that added A B twice, or into the
  // wrong c, is off by |A B| and still fails. How often the stricter rule misses is printed.
  const bool product_may_round = g.beta != 0.0f && dt != DType::f32;
  CloseReport r = compare(got, ref, [&](size_t i) {
    return strict_tol(i) + (product_may_round ? u * std::fabs(product[i]) : 0.0);
  });
  if (product_may_round)
    std::printf("  [ %s beta=%g M=%lld N=%lld K=%lld ] elements off by more than one rounding of the result: %lld of "
                "%zu (the product rounded to 16 bits before C was added)\n",
                std::string(dtype_name(dt)).c_str(), double(g.beta), (long long)g.M, (long long)g.N, (long long)g.K,
                (long long)compare(got, ref, strict_tol).bad, got.size());
  EXPECT_EQ(r.bad, 0) << dtype_name(dt) << " batch=" << g.batch << " M=" << g.M << " N=" << g.N << " K=" << g.K
                      << " ta=" << int(g.ta) << " tb=" << int(g.tb) << " bias=" << g.bias
                      << " act=" << act_name(g.act) << " alpha=" << g.alpha << " beta=" << g.beta
                      << " fused=" << fused << " max_err=" << r.max_err << "\n"
                      << r.first;
}

}  // namespace

TEST(CudaGemm, MatchesFloat64Reference) {
  REQUIRE_CUDA();
  Rng rng("CudaGemm");
  const GemmCase cases[] = {
      {1, 1, 1, 1, Trans::no, Trans::no, false, Activation::none, 1.0f, 0.0f, false, true},
      {1, 7, 13, 5, Trans::no, Trans::yes, true, Activation::none, 1.0f, 0.0f, false, true},
      {1, 64, 48, 32, Trans::yes, Trans::no, true, Activation::gelu_tanh, 1.0f, 0.0f, false, true},
      {1, 33, 96, 64, Trans::yes, Trans::yes, true, Activation::gelu, 0.5f, 0.0f, false, false},
      {1, 128, 768, 768, Trans::no, Trans::yes, true, Activation::none, 1.0f, 0.0f, false, true},   // BERT out-proj
      {1, 40, 3072, 768, Trans::no, Trans::yes, true, Activation::gelu, 1.0f, 0.0f, false, true},  // FFN in, exact GELU
      {1, 37, 768, 3072, Trans::no, Trans::yes, true, Activation::none, 1.0f, 0.0f, false, false}, // FFN out, f32 bias
      {1, 16, 24, 40, Trans::no, Trans::no, true, Activation::tanh, 1.0f, 0.0f, false, true},      // pooler
      {1, 20, 30, 50, Trans::no, Trans::yes, false, Activation::none, 1.0f, 0.75f, false, true},   // accumulate
      {1, 384, 256, 1024, Trans::yes, Trans::no, false, Activation::none, 1.0f, 1.0f, false, true}, // dx += dy W, residual
      {3, 17, 19, 23, Trans::no, Trans::no, false, Activation::none, 1.0f, 0.0f, false, true},     // batched
      {4, 32, 16, 64, Trans::no, Trans::yes, true, Activation::gelu_tanh, 1.0f, 0.0f, true, true}, // shared b
  };
  for (DType dt : kFloatTypes)
    for (const GemmCase& g : cases) run_gemm_case(g, dt, rng);
}

// GemmArgs::addend on CUDA: cuBLASLt reads the residual as its C operand and writes D = c (the
// ViT blocks' out = residual + x W^T + b). The same bits as copying the residual into c and
// accumulating in place (the same epilogue arithmetic), with a fused bf16 bias; the residual is
// left as it was; an f32 GEMM takes the copy path (ops::gemm) and agrees too.
// The residual as cuBLASLt's C operand (out of place) against the residual copied into the output
// and accumulated (in place): cuBLASLt may pick another algorithm for C != D, so the bits may
// differ (they did on an H200, 2026-11-28); both must be as close to float64 as each other.
TEST(CudaGemm, AddendIsTheCOperandAsAccurateAsCopyThenAccumulate) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaGemmAddend");
  struct Shape3 {
    int64_t M, N, K;
    DType dt;
  };
  for (const Shape3 sh : {Shape3{300, 768, 768, DType::bf16}, Shape3{37, 96, 40, DType::f16},
                          Shape3{33, 40, 24, DType::f32}}) {
    SCOPED_TRACE(std::string(dtype_name(sh.dt)) + " M=" + std::to_string(sh.M) + " N=" + std::to_string(sh.N) +
                 " K=" + std::to_string(sh.K));
    const std::vector<double> A = rng.vec(size_t(sh.M * sh.K), sh.dt), W = rng.vec(size_t(sh.N * sh.K), sh.dt);
    const std::vector<double> Bias = rng.vec(size_t(sh.N), sh.dt), R = rng.vec(size_t(sh.M * sh.N), sh.dt);
    const Tensor a = device_tensor(A, {sh.M, sh.K}, sh.dt), w = device_tensor(W, {sh.N, sh.K}, sh.dt);
    const Tensor bias = device_tensor(Bias, {sh.N}, sh.dt), residual = device_tensor(R, {sh.M, sh.N}, sh.dt);
    ops::GemmArgs args;
    args.beta = 1.0f;
    args.bias = &bias;
    Tensor want = device_tensor(R, {sh.M, sh.N}, sh.dt);
    ops::gemm(ctx, a, Trans::no, w, Trans::yes, want, args);  // the front-end both times (autocast alike)
    Tensor got = Tensor::empty({sh.M, sh.N}, sh.dt, Device::cuda);
    poison(ctx, got);
    args.addend = &residual;
    ops::gemm(ctx, a, Trans::no, w, Trans::yes, got, args);
    const std::vector<double> g = to_host(got), wv = to_host(want);
    double err_got = 0, err_want = 0, scale = 0;
    for (int64_t i = 0; i < sh.M; ++i)
      for (int64_t j = 0; j < sh.N; ++j) {
        double ref = R[size_t(i * sh.N + j)] + Bias[size_t(j)];
        for (int64_t k = 0; k < sh.K; ++k) ref += A[size_t(i * sh.K + k)] * W[size_t(j * sh.K + k)];
        err_got = std::max(err_got, std::fabs(g[size_t(i * sh.N + j)] - ref));
        err_want = std::max(err_want, std::fabs(wv[size_t(i * sh.N + j)] - ref));
        scale = std::max(scale, std::fabs(ref));
      }
    EXPECT_LE(err_got, 2 * err_want + 1e-6 * scale) << "the addend GEMM is less accurate than copy + accumulate";
    std::printf("[ addend %s M=%lld ] max error %.3g (copy + accumulate %.3g), bits %s\n", dtype_name(sh.dt).data(),
                static_cast<long long>(sh.M), err_got, err_want, g == wv ? "equal" : "differ");
    EXPECT_TRUE(to_host(residual) == R) << "the addend was written";
  }
}

TEST(CudaGemm, FusedEpilogueMatchesSeparateKernel) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaGemmFused");
  const DType dt = DType::bf16;
  const int64_t M = 64, N = 256, K = 128;
  std::vector<double> A = rng.vec(size_t(M * K), dt), B = rng.vec(size_t(N * K), dt), bias = rng.vec(size_t(N), dt);
  Tensor a = device_tensor(A, {M, K}, dt), b = device_tensor(B, {N, K}, dt);
  Tensor bias_c = device_tensor(bias, {N}, dt), bias_f32 = device_tensor(bias, {N}, DType::f32);
  Tensor c1 = Tensor::empty({M, N}, dt, Device::cuda), c2 = Tensor::empty({M, N}, dt, Device::cuda);
  ops::GemmArgs args;
  args.act = Activation::gelu_tanh;
  args.bias = &bias_c;
  cuda::gemm(ctx, a, Trans::no, b, Trans::yes, c1, args);
  const bool fused = cuda::gemm_lt_last_used_fused_epilogue(*ctx.cuda_state());
  args.bias = &bias_f32;  // not fusable: GEMM, then the bias+activation kernel
  cuda::gemm(ctx, a, Trans::no, b, Trans::yes, c2, args);
  EXPECT_FALSE(cuda::gemm_lt_last_used_fused_epilogue(*ctx.cuda_state()));
  std::printf("  bias+gelu_tanh bf16 epilogue fused by cuBLASLt: %s\n", fused ? "yes" : "no (fell back)");
  const std::vector<double> g1 = to_host(c1), g2 = to_host(c2);
  const double u = unit_roundoff(dt);
  CloseReport r = compare(g1, g2, [&](size_t i) { return 4 * u * std::fabs(g2[i]) + 2e-3 * (1 + std::fabs(g2[i])); });
  EXPECT_EQ(r.bad, 0) << r.first;
}

// Exact GELU on a bf16 output (cuBLASLt has only the tanh form): the bias fused, the product +
// bias rounded to bf16, GELU in place: bit for bit the GEMM with the bias epilogue followed by
// the activation op (PyTorch eager's order).
TEST(CudaGemm, UnfusableActivationIsTheBiasGemmThenTheActivation) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaGemmRounding");
  const DType dt = DType::bf16;
  const int64_t M = 40, N = 3072, K = 768;  // BERT-base's FFN in
  const std::vector<double> A = rng.vec(size_t(M * K), dt), B = rng.vec(size_t(N * K), dt), bias = rng.vec(size_t(N), dt);
  const Tensor a = device_tensor(A, {M, K}, dt), b = device_tensor(B, {N, K}, dt), bias_t = device_tensor(bias, {N}, dt);
  Tensor c_default = Tensor::empty({M, N}, dt, Device::cuda), c_manual = Tensor::empty({M, N}, dt, Device::cuda);
  ops::GemmArgs args;
  args.bias = &bias_t;
  args.act = Activation::gelu;
  cuda::gemm(ctx, a, Trans::no, b, Trans::yes, c_default, args);
  ops::GemmArgs bias_only;
  bias_only.bias = &bias_t;
  cuda::gemm(ctx, a, Trans::no, b, Trans::yes, c_manual, bias_only);
  cuda::activation(ctx, c_manual, c_manual, Activation::gelu);
  const std::vector<double> got = to_host(c_default), manual = to_host(c_manual);
  EXPECT_EQ(std::memcmp(got.data(), manual.data(), got.size() * sizeof(double)), 0)
      << "the default is not the bias-epilogue GEMM followed by the activation op";
}

// ---- row kernels ---------------------------------------------------------------------------

TEST(CudaLayerNorm, MatchesFloat64Reference) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaLayerNorm");
  for (DType dt : kFloatTypes)
    for (int64_t C : {1, 7, 64, 768, 1000, 1032})
      for (int variant = 0; variant < 4; ++variant) {
        // variant 0: no residual; 1: residual, y separate; 2: y aliases residual, f32 params in
        // dt; 3: x is a column slice of a wider buffer (row stride), params in dt.
        const int64_t N = 37, W = variant == 3 ? C + 24 : C;
        const DType pdt = variant >= 2 ? dt : DType::f32;
        std::vector<double> X = rng.vec(size_t(N * W), dt, 2.0), R = rng.vec(size_t(N * C), dt);
        std::vector<double> G = rng.vec(size_t(C), pdt), Bv = rng.vec(size_t(C), pdt);
        for (double& x : X) x = round_to(dt, x + 0.5);  // a mean to subtract
        Tensor xw = device_tensor(X, {N, W}, dt);
        Tensor x = variant == 3 ? xw.slice(1, 8, 8 + C) : xw;
        Tensor r = device_tensor(R, {N, C}, dt), g = device_tensor(G, {C}, pdt), b = device_tensor(Bv, {C}, pdt);
        Tensor y = variant == 2 ? r : Tensor::empty({N, C}, dt, Device::cuda);
        if (variant != 2) poison(ctx, y);
        const bool use_res = variant == 1 || variant == 2;
        cuda::layernorm(ctx, x, use_res ? &r : nullptr, g, b, 1e-5f, y);
        std::vector<double> got = to_host(y), ref(got.size());
        for (int64_t n = 0; n < N; ++n) {
          std::vector<double> v(static_cast<size_t>(C));
          double mean = 0, var = 0;
          for (int64_t c = 0; c < C; ++c) {
            const int64_t xc = variant == 3 ? c + 8 : c;
            v[size_t(c)] = X[size_t(n * W + xc)] + (use_res ? R[size_t(n * C + c)] : 0.0);
            mean += v[size_t(c)];
          }
          mean /= double(C);
          for (double s : v) var += (s - mean) * (s - mean);
          var /= double(C);
          for (int64_t c = 0; c < C; ++c)
            ref[size_t(n * C + c)] = (v[size_t(c)] - mean) / std::sqrt(var + 1e-5) * G[size_t(c)] + Bv[size_t(c)];
        }
        const double u = unit_roundoff(dt);
        CloseReport rep = compare(got, ref, [&](size_t i) { return 2 * u * std::fabs(ref[i]) + 1e-5 * (1 + std::fabs(ref[i])); });
        EXPECT_EQ(rep.bad, 0) << dtype_name(dt) << " C=" << C << " variant=" << variant << " max_err=" << rep.max_err << "\n"
                              << rep.first;
      }
}

TEST(CudaActivation, MatchesFloat64Reference) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaActivation");
  for (DType dt : kFloatTypes)
    for (Activation act : {Activation::none, Activation::gelu, Activation::gelu_tanh, Activation::tanh, Activation::relu})
      for (int64_t C : {1, 5, 64, 3072}) {
        const int64_t N = 9;
        std::vector<double> X = rng.vec(size_t(N * C), dt, 2.0);
        Tensor x = device_tensor(X, {N, C}, dt), y = Tensor::empty({N, C}, dt, Device::cuda);
        poison(ctx, y);
        cuda::activation(ctx, x, y, act);
        std::vector<double> got = to_host(y), ref(X.size());
        for (size_t i = 0; i < X.size(); ++i) ref[i] = act_ref(X[i], act);
        const double u = unit_roundoff(dt);
        CloseReport r = compare(got, ref, [&](size_t i) { return 2 * u * std::fabs(ref[i]) + 1e-6 * (1 + std::fabs(X[i])); });
        EXPECT_EQ(r.bad, 0) << dtype_name(dt) << " " << act_name(act) << " C=" << C << "\n" << r.first;
      }
}

TEST(CudaSoftmax, MatchesFloat64Reference) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaSoftmax");
  for (DType dt : kFloatTypes)
    for (int64_t C : {1, 3, 32, 100, 4096}) {
      const int64_t N = 11;
      std::vector<double> X = rng.vec(size_t(N * C), dt, 3.0);
      Tensor x = device_tensor(X, {N, C}, dt), y = Tensor::empty({N, C}, dt, Device::cuda);
      poison(ctx, y);
      cuda::softmax(ctx, x, y);
      std::vector<double> got = to_host(y), ref(X.size());
      for (int64_t n = 0; n < N; ++n) {
        double mx = -INFINITY, sum = 0;
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, X[size_t(n * C + c)]);
        for (int64_t c = 0; c < C; ++c) sum += std::exp(X[size_t(n * C + c)] - mx);
        for (int64_t c = 0; c < C; ++c) ref[size_t(n * C + c)] = std::exp(X[size_t(n * C + c)] - mx) / sum;
      }
      const double u = unit_roundoff(dt);
      CloseReport r = compare(got, ref, [&](size_t i) { return 2 * u * std::fabs(ref[i]) + 1e-5 * std::fabs(ref[i]) + 1e-7; });
      EXPECT_EQ(r.bad, 0) << dtype_name(dt) << " C=" << C << "\n" << r.first;
    }
}

TEST(CudaEmbedding, GatherAccumulateAndFusedLayerNorm) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaEmbedding");
  for (DType dt : kFloatTypes)
    for (int64_t C : {6, 64, 768}) {
      const int64_t V = 50, P = 40, TT = 2, N = 33;
      std::vector<double> W = rng.vec(size_t(V * C), dt), Pt = rng.vec(size_t(P * C), dt), Ty = rng.vec(size_t(TT * C), dt);
      std::vector<double> G = rng.vec(size_t(C), DType::f32), Bv = rng.vec(size_t(C), DType::f32);
      std::vector<double> ids(static_cast<size_t>(N)), pos(static_cast<size_t>(N)), typ(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) ids[size_t(i)] = double(rng.integer(0, V - 1)), pos[size_t(i)] = double(i % P),
                                      typ[size_t(i)] = double(rng.integer(0, TT - 1));
      Tensor w = device_tensor(W, {V, C}, dt), p = device_tensor(Pt, {P, C}, dt), t = device_tensor(Ty, {TT, C}, dt);
      Tensor g = device_tensor(G, {C}, DType::f32), b = device_tensor(Bv, {C}, DType::f32);
      Tensor ids_d = device_tensor(ids, {N}, DType::i32), pos_d = device_tensor(pos, {N}, DType::i32);
      Tensor typ_d = device_tensor(typ, {N}, DType::i32);
      Tensor ids64_h = host_tensor(ids, {N}, DType::i64);

      // gather (host i64 ids, uploaded) then accumulate pos (device i32 ids)
      Tensor out = Tensor::empty({N, C}, dt, Device::cuda);
      poison(ctx, out);
      cuda::embedding(ctx, w, ids64_h, out, false);
      cuda::embedding(ctx, p, pos_d, out, true);
      std::vector<double> got = to_host(out), ref(got.size());
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c)
          ref[size_t(i * C + c)] = round_to(dt, W[size_t(ids[size_t(i)]) * size_t(C) + size_t(c)] +
                                                    Pt[size_t(pos[size_t(i)]) * size_t(C) + size_t(c)]);
      CloseReport r = compare(got, ref, [&](size_t) { return 0.0; });  // one rounding, same as ours
      EXPECT_EQ(r.bad, 0) << "gather+accumulate " << dtype_name(dt) << " C=" << C << "\n" << r.first;
      EXPECT_THROW(cuda::embedding(ctx, w, host_tensor({1.0, double(V)}, {2}, DType::i32), out, false), Error);

      // fused word + pos + type + LayerNorm
      Tensor out2 = Tensor::empty({N, C}, dt, Device::cuda);
      poison(ctx, out2);
      cuda::embedding_layernorm(ctx, ids_d, pos_d, &typ_d, w, p, t, g, b, 1e-12f, out2);
      got = to_host(out2);
      for (int64_t i = 0; i < N; ++i) {
        std::vector<double> v(static_cast<size_t>(C));
        double mean = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) {
          v[size_t(c)] = W[size_t(ids[size_t(i)] * double(C)) + size_t(c)] + Pt[size_t(pos[size_t(i)] * double(C)) + size_t(c)] +
                         Ty[size_t(typ[size_t(i)] * double(C)) + size_t(c)];
          mean += v[size_t(c)];
        }
        mean /= double(C);
        for (double s : v) var += (s - mean) * (s - mean);
        var /= double(C);
        for (int64_t c = 0; c < C; ++c)
          ref[size_t(i * C + c)] = (v[size_t(c)] - mean) / std::sqrt(var + 1e-12) * G[size_t(c)] + Bv[size_t(c)];
      }
      const double u = unit_roundoff(dt);
      r = compare(got, ref, [&](size_t i) { return 2 * u * std::fabs(ref[i]) + 1e-5 * (1 + std::fabs(ref[i])); });
      EXPECT_EQ(r.bad, 0) << "embedding_layernorm " << dtype_name(dt) << " C=" << C << "\n" << r.first;
    }
}

// ---- attention: test_cuda_attention.cc -------------------------------------------------------

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  g_seed = std::random_device{}();
  g_seed = (g_seed << 32) ^ std::random_device{}();
  if (const char* s = std::getenv("UNMASK_TEST_SEED")) g_seed = std::strtoull(s, nullptr, 0);
  std::printf("unmask_cuda_tests: seed %llu (replay with UNMASK_TEST_SEED=%llu)\n", (unsigned long long)g_seed,
              (unsigned long long)g_seed);
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  g_has_cuda = e == cudaSuccess && count > 0;
  if (!g_has_cuda) {
    (void)cudaGetLastError();
    std::printf("skipped: no CUDA device (%s)\n", e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
  } else {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  }
  const int rc = RUN_ALL_TESTS();
  // Hand the caching allocator's free blocks back, so that compute-sanitizer's leak check
  // (--leak-check full) reports only memory something still holds.
  if (g_has_cuda) unmask::cuda::allocator_release_cached();
  return rc;
}
