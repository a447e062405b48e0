// tests/test_gemm_packed.cc: ops::pack_weight + ops::gemm_packed (src/cpu/gemm_packed_cpu.cc)
// against the float64 reference (src/ref) and against ops::gemm on the same inputs, for odd
// shapes, every epilogue, alpha/beta accumulate and row-strided a/c, under every GEMM backend
// built in (oneDNN: packed primitive path; OpenBLAS: the reference-to-w fallback).
// Tolerances as in test_ops.cc: reduction_tol(K) scaled by the input magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/half.h"
#include "cpu/blas.h"
#include "error_test_util.h"
#include "op_test_util.h"
#include "ops/device_info.h"
#include "ops/ops.h"
#include "ref/ref_ops.h"
#include "unmask/context.h"

using namespace unmask;
using namespace unmask::test;
using ops::Activation;

namespace {

struct BackendScope {
  explicit BackendScope(cpu::GemmBackend b) { cpu::gemm_backend_override_for_testing(b); }
  ~BackendScope() { cpu::gemm_backend_override_for_testing(cpu::GemmBackend::openblas, true); }
};

std::vector<cpu::GemmBackend> gemm_backends() {
  std::vector<cpu::GemmBackend> out;
  for (auto b : {cpu::GemmBackend::openblas, cpu::GemmBackend::onednn})
    if (cpu::gemm_backend_available(b)) out.push_back(b);
  return out;
}

struct Case {
  int64_t M, N, K;
  bool bias;
  Activation act;
  float alpha, beta;
  int64_t pad;  // extra row stride on a and c
};

// Runs one case: c_packed vs float64 reference, and vs ops::gemm on the same inputs. compute
// bf16: the reference takes a and W rounded to bf16 (then only the fp32 accumulation differs),
// and the unrounded product must differ by more than that (the rounding really happened).
void run_case(Context& ctx, TestRng& rng, const Case& g, DType compute = DType::f32) {
  Tensor a_buf = Tensor::empty({g.M, g.K + g.pad}, DType::f32);
  Tensor w = Tensor::empty({g.N, g.K}, DType::f32);  // [N_out, K]
  Tensor c_buf = Tensor::empty({g.M, g.N + g.pad}, DType::f32);
  Tensor bias = Tensor::empty({g.N}, DType::f32);
  rng.fill(a_buf.data<float>(), a_buf.numel(), Fill::normal);
  rng.fill(w.data<float>(), w.numel(), Fill::normal);
  rng.fill(c_buf.data<float>(), c_buf.numel(), Fill::normal);
  rng.fill(bias.data<float>(), g.N, Fill::normal);
  Tensor c0_buf = Tensor::empty(c_buf.shape(), DType::f32);  // ops::gemm result, same start
  c0_buf.copy_from(c_buf);
  Tensor a = a_buf.slice(1, 0, g.K), c = c_buf.slice(1, 0, g.N), c0 = c0_buf.slice(1, 0, g.N);

  const bool bf16 = compute == DType::bf16;
  auto in = [&](float v) { return bf16 ? double(bf16_to_f32(f32_to_bf16(v))) : double(v); };
  std::vector<double> ad, wd, cd, ad32, wd32(w.data<float>(), w.data<float>() + w.numel());
  std::vector<double> biasd(bias.data<float>(), bias.data<float>() + g.N);
  for (int64_t i = 0; i < w.numel(); ++i) wd.push_back(in(w.data<float>()[i]));
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t k = 0; k < g.K; ++k) {
      ad.push_back(in(a_buf.data<float>()[m * (g.K + g.pad) + k]));
      ad32.push_back(a_buf.data<float>()[m * (g.K + g.pad) + k]);
    }
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) cd.push_back(c_buf.data<float>()[m * (g.N + g.pad) + n]);
  std::vector<double> cd32 = cd;
  ref::gemm_forward<double>(ad.data(), false, wd.data(), true, cd.data(), g.M, g.N, g.K, g.alpha, g.beta,
                            g.bias ? biasd.data() : nullptr, g.act);
  ref::gemm_forward<double>(ad32.data(), false, wd32.data(), true, cd32.data(), g.M, g.N, g.K, g.alpha, g.beta,
                            g.bias ? biasd.data() : nullptr, g.act);

  ops::GemmArgs args{.alpha = g.alpha, .beta = g.beta, .bias = g.bias ? &bias : nullptr, .act = g.act};
  ops::PackedWeight pw = ops::pack_weight(ctx, w, compute);
  ASSERT_TRUE(pw.defined());
  EXPECT_EQ(pw.compute(), compute);
  EXPECT_EQ(pw.n_out(), g.N);
  EXPECT_EQ(pw.k(), g.K);
  ops::gemm_packed(ctx, a, pw, c, args);
  ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, c0, args);

  std::vector<double> got, got0;
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      got.push_back(c_buf.data<float>()[m * (g.N + g.pad) + n]);
      got0.push_back(c0_buf.data<float>()[m * (g.N + g.pad) + n]);
    }
  Tol tol = reduction_tol(g.K + 1);
  tol.atol *= 16.0 * std::max(1.0f, std::fabs(g.alpha));  // normal inputs: |a|, |w| up to ~4
  EXPECT_TRUE(all_close(got, cd, tol)) << "packed vs float64";
  if (bf16 && g.K >= 64) EXPECT_FALSE(all_close(got, cd32, tol)) << "bf16: no rounding seen";
  if (!bf16) EXPECT_TRUE(all_close(got, got0, tol)) << "packed vs ops::gemm";
  // Padding columns of c are never written.
  for (int64_t m = 0; m < g.M && g.pad; ++m)
    for (int64_t n = g.N; n < g.N + g.pad; ++n)
      ASSERT_EQ(c_buf.data<float>()[m * (g.N + g.pad) + n], c0_buf.data<float>()[m * (g.N + g.pad) + n]);
}

}  // namespace

TEST(OpsGemmPacked, MatchesReferenceAndGemm) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const Activation acts[] = {Activation::none, Activation::gelu, Activation::gelu_tanh, Activation::tanh, Activation::relu};
  std::vector<Case> cases;
  // Odd shapes x every epilogue (bias on), plus accumulate and strided variants.
  for (int64_t M : {1, 7, 128, 129})
    for (auto [N, K] : {std::pair<int64_t, int64_t>{1, 1}, {33, 65}, {768, 768}, {33, 1}, {1, 65}}) {
      const Activation act = acts[(M + N + K) % 4];
      cases.push_back({M, N, K, true, act, 1.0f, 0.0f, 0});
    }
  for (auto act : acts) cases.push_back({129, 768, 65, true, act, 1.0f, 0.0f, 3});
  cases.push_back({7, 33, 65, false, Activation::none, 1.0f, 0.0f, 0});
  cases.push_back({129, 768, 65, true, Activation::gelu, 1.0f, 1.0f, 2});   // beta accumulate
  cases.push_back({128, 33, 768, false, Activation::none, 0.5f, 2.0f, 5});  // alpha and beta
  cases.push_back({300, 1100, 96, true, Activation::gelu_tanh, 1.0f, 0.0f, 1});  // several slices
  cases.push_back({5, 17, 0, true, Activation::gelu, 1.0f, 2.0f, 0});  // K = 0
  // Many row blocks of one slice: threads run the same primitive at once (BERT tiny, T = 512).
  cases.push_back({1024, 64, 64, true, Activation::none, 1.0f, 0.0f, 0});
  cases.push_back({1024, 192, 128, true, Activation::gelu, 1.0f, 0.0f, 0});
  for (int threads : {1, 2, 3}) {
    Context ctx({.num_threads = threads});
    for (auto backend : gemm_backends()) {
      BackendScope scope(backend);
      for (const Case& g : cases) {
        SCOPED_TRACE(std::string(cpu::gemm_backend_name(backend)) + " threads=" + std::to_string(threads) +
                     " M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K) +
                     " act=" + ops::activation_name(g.act) + " alpha=" + std::to_string(g.alpha) +
                     " beta=" + std::to_string(g.beta) + " pad=" + std::to_string(g.pad));
        run_case(ctx, rng, g);
      }
    }
  }
}

// bf16 products (weights packed as bf16, each call's a rounded to bf16, fp32 accumulation) on
// the CPU's bf16 unit; refused with a clear error on a CPU without one.
TEST(OpsGemmPacked, Bf16MatchesTheRoundedReference) {
  Context ctx({.num_threads = 2});
  Tensor w = Tensor::empty({33, 65}, DType::f32);
  std::fill_n(w.data<float>(), w.numel(), 0.5f);
  if (!*ops::cpu_bf16_unit()) {
    const std::string e = error_of([&] { ops::pack_weight(ctx, w, DType::bf16); });
    EXPECT_NE(e.find("bf16 matrix unit"), std::string::npos) << e;
    GTEST_SKIP() << "this CPU has no bf16 matrix unit (AMX or AVX-512 BF16): only the refusal was tested";
  }
  std::printf("[ bf16 unit ] %s\n", ops::cpu_bf16_unit());
  TestRng rng;
  SCOPED_TRACE(rng.note());
  for (const Case& g : {Case{128, 768, 768, true, Activation::gelu, 1.0f, 0.0f, 0},
                        Case{7, 33, 65, true, Activation::none, 1.0f, 0.0f, 3},
                        Case{129, 1100, 96, true, Activation::gelu_tanh, 1.0f, 0.0f, 1},
                        Case{128, 33, 768, false, Activation::none, 0.5f, 2.0f, 5}}) {
    SCOPED_TRACE("M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K));
    run_case(ctx, rng, g, DType::bf16);
  }
}

// A weight packed on one Context runs on a Context with another thread count, and the packed
// weight outlives the source tensor (it holds no reference to it on the oneDNN path).
TEST(OpsGemmPacked, OutlivesSourceAndOtherThreadCounts) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx2({.num_threads = 2}), ctx1({.num_threads = 1});
  const int64_t M = 37, N = 200, K = 96;
  Tensor a = Tensor::empty({M, K}, DType::f32), c1 = Tensor::empty({M, N}, DType::f32);
  Tensor c2 = Tensor::empty({M, N}, DType::f32), want = Tensor::empty({M, N}, DType::f32);
  rng.fill(a.data<float>(), a.numel(), Fill::normal);
  ops::PackedWeight pw;
  {
    Tensor w = Tensor::empty({N, K}, DType::f32);
    rng.fill(w.data<float>(), w.numel(), Fill::normal);
    ops::gemm(ctx2, a, ops::Trans::no, w, ops::Trans::yes, want);
    pw = ops::pack_weight(ctx2, w);
  }
  ops::gemm_packed(ctx1, a, pw, c1);
  ops::gemm_packed(ctx2, a, pw, c2);
  EXPECT_TRUE(all_close(to_f64(c1), to_f64(want), reduction_tol(K)));
  EXPECT_TRUE(all_close(to_f64(c2), to_f64(want), reduction_tol(K)));
}

TEST(OpsGemmPacked, ErrorsNameTheShapes) {
  Context ctx({.num_threads = 2});
  Tensor w = Tensor::zeros({8, 4}, DType::f32);
  ops::PackedWeight pw = ops::pack_weight(ctx, w);
  Tensor a = Tensor::zeros({3, 5}, DType::f32), c = Tensor::zeros({3, 8}, DType::f32);
  try {
    ops::gemm_packed(ctx, a, pw, c);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[8, 4]"), std::string::npos) << e.what();
  }
  Tensor a2 = Tensor::zeros({3, 4}, DType::f32), c_bad = Tensor::zeros({3, 7}, DType::f32);
  EXPECT_THROW(ops::gemm_packed(ctx, a2, pw, c_bad), Error);
  EXPECT_THROW(ops::gemm_packed(ctx, a2, ops::PackedWeight(), c), Error);
  Tensor wt = Tensor::zeros({8, 6}, DType::f32).slice(1, 0, 4);  // not contiguous
  EXPECT_THROW(ops::pack_weight(ctx, wt), Error);
}

// Training's bf16 on the CPU (Context::cpu_gemm_dtype, set by ops::set_training_precision):
// ops::gemm rounds both operands to bf16 and accumulates in fp32, for every transpose,
// alpha/beta and epilogue, against float64 on the rounded operands.
TEST(OpsGemmBf16, TrainingGemmMatchesTheRoundedReference) {
  Context ctx({.num_threads = 2});
  if (!*ops::cpu_bf16_unit()) {
    EXPECT_NE(error_of([&] { ops::set_training_precision(ctx, "bf16"); }).find("bf16 matrix unit"), std::string::npos);
    GTEST_SKIP() << "this CPU has no bf16 matrix unit (AMX or AVX-512 BF16): only the refusal was tested";
  }
  ops::set_training_precision(ctx, "bf16");
  ASSERT_EQ(ctx.cpu_gemm_dtype(), DType::bf16);
  TestRng rng;
  SCOPED_TRACE(rng.note());
  auto r16 = [](float v) { return double(bf16_to_f32(f32_to_bf16(v))); };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Case& g : {Case{129, 70, 300, true, Activation::gelu, 1.0f, 0.0f, 0},
                            Case{7, 530, 65, false, Activation::none, 0.5f, 2.0f, 0}}) {
        SCOPED_TRACE(std::string("ta=") + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N") + " M=" + std::to_string(g.M));
        Tensor a = ta ? Tensor::empty({g.K, g.M}, DType::f32) : Tensor::empty({g.M, g.K}, DType::f32);
        Tensor b = tb ? Tensor::empty({g.N, g.K}, DType::f32) : Tensor::empty({g.K, g.N}, DType::f32);
        Tensor c = Tensor::empty({g.M, g.N}, DType::f32), bias = Tensor::empty({g.N}, DType::f32);
        for (Tensor* t : {&a, &b, &c, &bias}) rng.fill(t->data<float>(), t->numel(), Fill::normal);
        std::vector<double> ad, bd, cd(c.data<float>(), c.data<float>() + c.numel()), cd32 = cd, ad32, bd32;
        std::vector<double> biasd(bias.data<float>(), bias.data<float>() + g.N);
        for (int64_t i = 0; i < a.numel(); ++i) ad.push_back(r16(a.data<float>()[i])), ad32.push_back(a.data<float>()[i]);
        for (int64_t i = 0; i < b.numel(); ++i) bd.push_back(r16(b.data<float>()[i])), bd32.push_back(b.data<float>()[i]);
        ref::gemm_forward<double>(ad.data(), ta, bd.data(), tb, cd.data(), g.M, g.N, g.K, g.alpha, g.beta,
                                  g.bias ? biasd.data() : nullptr, g.act);
        ref::gemm_forward<double>(ad32.data(), ta, bd32.data(), tb, cd32.data(), g.M, g.N, g.K, g.alpha, g.beta,
                                  g.bias ? biasd.data() : nullptr, g.act);
        ops::gemm(ctx, a, ta ? ops::Trans::yes : ops::Trans::no, b, tb ? ops::Trans::yes : ops::Trans::no, c,
                  {.alpha = g.alpha, .beta = g.beta, .bias = g.bias ? &bias : nullptr, .act = g.act});
        const std::vector<double> got(c.data<float>(), c.data<float>() + c.numel());
        Tol tol = reduction_tol(g.K + 1);
        tol.atol *= 16.0 * std::max(1.0f, std::fabs(g.alpha));
        EXPECT_TRUE(all_close(got, cd, tol)) << "bf16 gemm vs float64 on rounded operands";
        EXPECT_FALSE(all_close(got, cd32, tol)) << "no rounding seen";
      }
  // K = 0 with beta = 0: c = 0 even where it held NaN (c is not read).
  Tensor a0 = Tensor::empty({7, 0}, DType::f32), b0 = Tensor::empty({0, 9}, DType::f32);
  Tensor c0 = Tensor::empty({7, 9}, DType::f32);
  std::fill_n(c0.data<float>(), c0.numel(), std::nanf(""));
  ops::gemm(ctx, a0, ops::Trans::no, b0, ops::Trans::no, c0);
  for (int64_t i = 0; i < c0.numel(); ++i) ASSERT_EQ(c0.data<float>()[i], 0.0f) << "K = 0, element " << i;
  ops::set_training_precision(ctx, "fp32");
  EXPECT_EQ(ctx.cpu_gemm_dtype(), DType::f32);
}
