// tests/test_ops.cc: every CPU op, under every ISA the CPU runs (and every GEMM backend built
// in), against the float64 references in src/ref; the references' backward passes against
// central finite differences; the front-ends' error messages.
//
// Tolerances (fp32 kernels vs float64 reference, |got - ref| <= atol + rtol |ref|):
//   elementwise (activations, embedding):  atol 1e-6, rtol 1e-5
//   row reductions over C (layernorm, softmax) and GEMM over K: reduction_tol(K): atol = rtol =
//   1e-5 sqrt(K) (min 1e-5), scaled by the input magnitude where inputs are large.
// Inputs are fresh random values (uniform, normal, outlier) from a seeded generator: the seed
// is printed on failure and UNMASK_TEST_SEED overrides it.
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <set>
#include <regex>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ref/ref_ops.h"
#include "unmask/context.h"
#include "error_test_util.h"

using namespace unmask;
using namespace unmask::test;
using ops::Activation;

namespace {

const Activation kActs[] = {Activation::none, Activation::gelu, Activation::gelu_tanh,
                            Activation::tanh, Activation::relu};
const Fill kFills[] = {Fill::uniform, Fill::normal, Fill::outlier};
const int64_t kWidths[] = {1, 7, 16, 33, 768, 1000};

// Selects one ISA's kernel table for the scope (and restores the default after).
struct IsaScope {
  explicit IsaScope(std::string_view isa) { cpu::kernels_override_for_testing(isa); }
  ~IsaScope() { cpu::kernels_override_for_testing(""); }
};

// Selects one GEMM backend for the scope.
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

std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }

using unmask::test::error_of;

}  // namespace

// ---- dispatch ----------------------------------------------------------------------------------

TEST(OpsDispatch, IsaTablesAndErrors) {
  auto isas = cpu::available_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), "generic");
  for (auto isa : isas) EXPECT_EQ(std::string(cpu::kernels_for(isa).name), std::string(isa));
  EXPECT_NE(error_of([] { cpu::kernels_for("sse9"); }).find("sse9"), std::string::npos);
  {
    IsaScope scope("generic");
    EXPECT_STREQ(cpu::kernels().name, "generic");
  }
  EXPECT_TRUE(ops::supports("gemm", Device::cpu, DType::f32));
  EXPECT_TRUE(ops::supports("layernorm", Device::cpu, DType::f32));
  EXPECT_TRUE(ops::supports("layernorm", Device::cpu, DType::bf16));  // emulated (test_train_bf16.cc)
  EXPECT_FALSE(ops::supports("softmax", Device::cpu, DType::bf16));
  EXPECT_FALSE(ops::supports("layernorm", Device::cpu, DType::i32));
#ifdef UNMASK_WITH_CUDA
  EXPECT_TRUE(ops::supports("softmax", Device::cuda, DType::f32));
  EXPECT_TRUE(ops::supports("softmax", Device::cuda, DType::bf16));
#else
  EXPECT_FALSE(ops::supports("softmax", Device::cuda, DType::f32));  // this build has no CUDA backend
#endif
  EXPECT_FALSE(ops::supports("conv", Device::cpu, DType::f32));
}

// The layout's rules: src/core holds what every backend builds on and includes no backend's
// header (the dispatch layer, src/ops, does: ops/context.cc, ops/device_memory.cc), and neither
// does app/.
TEST(Layout, CoreIncludesNoBackendHeader) {
  const std::regex backend(R"(#include\s+"(cpu|cuda)/)");
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(UNMASK_SOURCE_DIR) + "/src/core")) {
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(std::regex_search(text, backend)) << e.path() << " includes a backend header";
    EXPECT_EQ(text.find("UNMASK_WITH_CUDA"), std::string::npos) << e.path() << " has CUDA-only code";
    ++files;
  }
  EXPECT_GT(files, 5);
  // app/ only parses and calls: no backend header there either (ops/device_info.h answers it).
  for (const auto& e : std::filesystem::directory_iterator(std::string(UNMASK_SOURCE_DIR) + "/app")) {
    std::ifstream in(e.path());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(std::regex_search(text, backend)) << e.path() << " includes a backend header";
  }
}

// One table (src/ops/op_table.cc) for every backend: it names exactly the op front-ends that
// ops.h declares (a front-end added without a row, or a row left after its op went, fails), and
// an op known to one device is known to the other (the optimizer ops were missing from the CPU's
// list while the CUDA backend's own list had them).
TEST(Ops, OneSupportTableNamesEveryFrontEnd) {
  std::ifstream in(std::string(UNMASK_SOURCE_DIR) + "/src/ops/ops.h");
  ASSERT_TRUE(in.good());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> declared;
  const std::regex decl(R"(\b([a-z_0-9]+)\(Context& ctx)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator(); ++it)
    declared.insert((*it)[1].str());
  declared.erase("pack_weight");  // not an op
  std::set<std::string> table;
  for (std::string_view op : ops::supported_ops()) EXPECT_TRUE(table.insert(std::string(op)).second) << op << " twice";
  EXPECT_EQ(table, declared);
  for (const std::string& op : table) EXPECT_TRUE(ops::supports(op, Device::cpu, op == "videomae_index" ? DType::i32 : DType::f32)) << op;
  EXPECT_TRUE(ops::supports("adamw_update", Device::cpu, DType::f32));
}

// ---- activation ----------------------------------------------------------------------------------

TEST(OpsActivation, MatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Activation act : kActs)
      for (Fill fill : kFills)
        for (int64_t C : kWidths)
          for (int layout = 0; layout < 3; ++layout) {  // 0 contiguous, 1 row-strided, 2 in place
            SCOPED_TRACE(std::string(isa) + " " + ops::activation_name(act) + " " + fill_name(fill) +
                         " C=" + std::to_string(C) + " layout=" + std::to_string(layout));
            const int64_t N = 3;
            Tensor x = make_rows(N, C, layout == 1 ? C + 5 : 0);
            fill_rows(rng, x, fill);
            std::vector<double> xd = to_f64(x), ref(xd.size());
            ref::activation_forward(xd.data(), ref.data(), int64_t(xd.size()), act);
            Tensor y = layout == 2 ? x : make_rows(N, C, layout == 1 ? C + 3 : 0);
            ops::activation(ctx, x, y, act);
            ASSERT_TRUE(all_close(to_f64(y), ref, {1e-6, 1e-5}));
          }
  }
}

// A dense sweep over [-40, 40] (GEMM outputs reach that), where exp/erf/tanh are most stressed:
// the transition points (|z| = 1 for erf, |x| = 0.25 for tanh), the far negative GELU tail
// (checked relative to the tiny reference) and saturation.
TEST(OpsActivation, AccurateOverWholeRange) {
  Context ctx({.num_threads = 1});
  const int64_t n = 20001;
  Tensor x = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) x.data<float>()[i] = float(-40.0 + 80.0 * double(i) / double(n - 1));
  std::vector<double> xd(x.data<float>(), x.data<float>() + n);
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(isa) + " " + ops::activation_name(act));
      Tensor y = Tensor::empty({n}, DType::f32);
      ops::activation(ctx, x, y, act);
      std::vector<double> ref(static_cast<size_t>(n)), got(y.data<float>(), y.data<float>() + n);
      ref::activation_forward(xd.data(), ref.data(), n, act);
      // Relative accuracy 3e-6 for every value above 1e-13 in magnitude: measured worst cases are
      // 1.2e-6 (gelu, generic ISA without fma, x ~ -8) and 4.4e-6 (gelu_tanh at x ~ -12, where
      // exp(-2u) amplifies the fp32 rounding of u by |2u| ~ 40; values there are ~5e-12).
      EXPECT_TRUE(all_close(got, ref, {1e-13, 3e-6}));
      // No subnormal results: producing them costs ~100 cycles per op on Intel cores (the
      // GELU tail once made the GEMM epilogue as slow as the GEMM).
      int64_t subnormal = 0;
      for (double v : got) subnormal += std::fpclassify(float(v)) == FP_SUBNORMAL;
      EXPECT_EQ(subnormal, 0);
    }
  }
}

// ---- gemm ----------------------------------------------------------------------------------------

struct GemmCase {
  int64_t batch, M, N, K;
  bool ta, tb;
  bool bias;
  Activation act;
  float alpha, beta;
  bool b_shared;   // 3-D a/c with a 2-D (shared) b
  int64_t pad;     // extra row stride on a and c (slices of wider buffers)
};

static void run_gemm_case(Context& ctx, TestRng& rng, const GemmCase& g, Fill fill) {
  const int64_t ar = g.ta ? g.K : g.M, ac = g.ta ? g.M : g.K;  // stored a [ar, ac]
  const int64_t br = g.tb ? g.N : g.K, bc = g.tb ? g.K : g.N;  // stored b [br, bc]
  const int64_t nb = g.b_shared ? 1 : g.batch;
  // Stored buffers with padded rows; the tensors are slices.
  Tensor a_buf = Tensor::empty({g.batch, ar, ac + g.pad}, DType::f32);
  Tensor b_buf = Tensor::empty({nb, br, bc}, DType::f32);
  Tensor c_buf = Tensor::empty({g.batch, g.M, g.N + g.pad}, DType::f32);
  rng.fill(a_buf.data<float>(), a_buf.numel(), fill);
  rng.fill(b_buf.data<float>(), b_buf.numel(), fill);
  rng.fill(c_buf.data<float>(), c_buf.numel(), fill);
  Tensor a = a_buf.slice(2, 0, ac), b = b_buf, c = c_buf.slice(2, 0, g.N);
  if (g.b_shared) b = b_buf.select(0, 0);
  if (g.batch == 1 && !g.b_shared) a = a.select(0, 0), b = b.select(0, 0), c = c.select(0, 0);
  Tensor bias = Tensor::empty({g.N}, DType::f32);
  rng.fill(bias.data<float>(), g.N, fill);

  // Reference per batch item, from the same (fp32) inputs in double.
  std::vector<double> ref;
  double mag = 0;  // max |a| * max |b|, scales the tolerance for outlier inputs
  double amax = 0, bmax = 0;
  for (int64_t i = 0; i < a_buf.numel(); ++i) amax = std::max(amax, double(std::fabs(a_buf.data<float>()[i])));
  for (int64_t i = 0; i < b_buf.numel(); ++i) bmax = std::max(bmax, double(std::fabs(b_buf.data<float>()[i])));
  mag = std::max(1.0, amax * bmax);
  for (int64_t i = 0; i < g.batch; ++i) {
    std::vector<double> ad, bd, cd, biasd(bias.data<float>(), bias.data<float>() + g.N);
    for (int64_t r = 0; r < ar; ++r)
      for (int64_t k = 0; k < ac; ++k) ad.push_back(a_buf.data<float>()[(i * ar + r) * (ac + g.pad) + k]);
    const int64_t ib = g.b_shared ? 0 : i;
    for (int64_t r = 0; r < br * bc; ++r) bd.push_back(b_buf.data<float>()[ib * br * bc + r]);
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t n = 0; n < g.N; ++n) cd.push_back(c_buf.data<float>()[(i * g.M + m) * (g.N + g.pad) + n]);
    ref::gemm_forward<double>(ad.data(), g.ta, bd.data(), g.tb, cd.data(), g.M, g.N, g.K, g.alpha,
                              g.beta, g.bias ? biasd.data() : nullptr, g.act);
    ref.insert(ref.end(), cd.begin(), cd.end());
  }

  ops::GemmArgs args;
  args.alpha = g.alpha;
  args.beta = g.beta;
  args.bias = g.bias ? &bias : nullptr;
  args.act = g.act;
  ops::gemm(ctx, a, g.ta ? ops::Trans::yes : ops::Trans::no, b, g.tb ? ops::Trans::yes : ops::Trans::no,
            c, args);

  std::vector<double> got;
  for (int64_t i = 0; i < g.batch; ++i)
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t n = 0; n < g.N; ++n) got.push_back(c_buf.data<float>()[(i * g.M + m) * (g.N + g.pad) + n]);
  Tol tol = reduction_tol(g.K + 1);
  tol.atol *= mag * std::max(1.0f, std::fabs(g.alpha));
  EXPECT_TRUE(all_close(got, ref, tol));
  // The padding columns of c must be untouched (still the random fill, never NaN-free garbage).
}

TEST(OpsGemm, MatchesReferenceEveryIsaAndBackend) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const GemmCase cases[] = {
      // batch, M, N, K, ta, tb, bias, act, alpha, beta, b_shared, pad
      {1, 1, 1, 1, false, false, false, Activation::none, 1.0f, 0.0f, false, 0},
      {1, 1, 33, 7, false, true, true, Activation::gelu, 1.0f, 0.0f, false, 0},
      {1, 7, 1, 33, true, false, true, Activation::tanh, 1.0f, 0.0f, false, 3},
      {1, 33, 7, 64, true, true, false, Activation::gelu_tanh, 0.5f, 1.0f, false, 0},
      {1, 128, 96, 48, false, true, true, Activation::gelu, 1.0f, 0.0f, false, 5},
      {1, 300, 70, 33, false, false, true, Activation::none, 1.0f, 0.5f, false, 2},
      {1, 600, 40, 16, false, true, true, Activation::gelu_tanh, 1.0f, 0.0f, false, 0},
      {1, 5, 17, 0, false, false, true, Activation::gelu, 1.0f, 2.0f, false, 0},  // K = 0
      {3, 20, 24, 16, false, true, true, Activation::gelu, 1.0f, 0.0f, false, 4},
      {4, 9, 13, 11, true, false, false, Activation::none, 2.0f, 1.0f, true, 1},
  };
  for (auto backend : gemm_backends()) {
    BackendScope bscope(backend);
    for (auto isa : cpu::available_isas()) {
      IsaScope scope(isa);
      for (size_t i = 0; i < std::size(cases); ++i)
        for (Fill fill : kFills) {
          const GemmCase& g = cases[i];
          SCOPED_TRACE(std::string(cpu::gemm_backend_name(backend)) + " " + std::string(isa) +
                       " case " + std::to_string(i) + " " + fill_name(fill) + " M=" +
                       std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" +
                       std::to_string(g.K) + " act=" + ops::activation_name(g.act));
          run_gemm_case(ctx, rng, g, fill);
        }
    }
  }
}

// The fused epilogue equals the unfused sequence gemm -> activation (same threads, same ISA),
// and the two threading strategies give the same result.
TEST(OpsGemm, FusedEpilogueEqualsUnfused) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t M = 257, N = 130, K = 64;
  Tensor a = Tensor::empty({M, K}, DType::f32), w = Tensor::empty({N, K}, DType::f32);
  Tensor bias = Tensor::empty({N}, DType::f32);
  rng.fill(a.data<float>(), a.numel(), Fill::normal);
  rng.fill(w.data<float>(), w.numel(), Fill::normal);
  rng.fill(bias.data<float>(), N, Fill::normal);
  Tensor ones = Tensor::empty({1, N}, DType::f32);
  for (Activation act : kActs) {
    SCOPED_TRACE(ops::activation_name(act));
    Tensor fused = Tensor::empty({M, N}, DType::f32), unfused = Tensor::empty({M, N}, DType::f32);
    ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, fused, {.bias = &bias, .act = act});
    // unfused: c = a w^T; c += bias (rows of a rank-1 update); c = act(c)
    ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, unfused);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) unfused.data<float>()[m * N + n] += bias.data<float>()[n];
    ops::activation(ctx, unfused, unfused, act);
    EXPECT_TRUE(all_close(to_f64(fused), to_f64(unfused), {1e-6, 1e-6}));
    Tensor blas_threads = Tensor::empty({M, N}, DType::f32);
    cpu::gemm_tuning_override_for_bench(cpu::GemmThreading::blas_threads, 0);
    ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, blas_threads, {.bias = &bias, .act = act});
    cpu::gemm_tuning_override_for_bench(cpu::GemmThreading::tiles, 0);
    EXPECT_TRUE(all_close(to_f64(blas_threads), to_f64(fused), reduction_tol(K)));
  }
}

// GemmArgs::addend: c = a w^T + bias + beta * addend with c only written, bit for bit what copying
// the addend into c and accumulating gives (f32, and the bf16 emulation); the addend is left as it
// was; an addend that is c itself is the plain accumulate; a mismatched one is an Error naming it.
TEST(OpsGemm, AddendEqualsCopyThenAccumulate) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t M = 37, N = 48, K = 40;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    auto rand = [&](const Shape& shape) {
      Tensor f = Tensor::empty(shape, DType::f32);
      rng.fill(f.data<float>(), f.numel(), Fill::normal);
      if (dt == DType::f32) return f;
      Tensor h = Tensor::empty(shape, dt);
      ops::copy(ctx, f, h);
      return h;
    };
    auto values = [&](const Tensor& t) {  // (to_f64 reads f32)
      Tensor f = Tensor::empty(t.shape(), DType::f32);
      ops::copy(ctx, t, f);
      return to_f64(f);
    };
    const Tensor a = rand({M, K}), w = rand({N, K}), bias = rand({N}), residual = rand({M, N});
    const std::vector<double> residual_before = values(residual);
    for (float beta : {1.0f, 0.5f, 0.0f}) {
      SCOPED_TRACE("beta " + std::to_string(beta));
      Tensor want = Tensor::empty({M, N}, dt);
      want.copy_from(residual);
      ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, want, {.beta = beta, .bias = &bias});
      Tensor got = Tensor::empty({M, N}, dt);
      ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, got, {.beta = beta, .bias = &bias, .addend = &residual});
      EXPECT_EQ(values(got), values(want));
      EXPECT_EQ(values(residual), residual_before) << "the addend is an input";
      Tensor self = Tensor::empty({M, N}, dt);
      self.copy_from(residual);
      ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, self, {.beta = beta, .bias = &bias, .addend = &self});
      EXPECT_EQ(values(self), values(want)) << "addend == c: the plain accumulate";
    }
    Tensor c = Tensor::empty({M, N}, dt);
    const Tensor wrong = rand({M, N + 1});
    const std::string msg = error_of([&] {
      ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, c, {.beta = 1.0f, .addend = &wrong});
    });
    EXPECT_NE(msg.find("addend"), std::string::npos) << msg;
    // a view of c's buffer shifted by a row: read while written, refused
    Tensor wide = Tensor::empty({M + 1, N}, dt);
    Tensor top = wide.slice(0, 0, M), shifted = wide.slice(0, 1, M + 1);
    const std::string overlap = error_of([&] {
      ops::gemm(ctx, a, ops::Trans::no, w, ops::Trans::yes, top, {.beta = 1.0f, .addend = &shifted});
    });
    EXPECT_NE(overlap.find("partly overlaps"), std::string::npos) << overlap;
  }
}

// ---- layernorm -----------------------------------------------------------------------------------

TEST(OpsLayerNorm, MatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Fill fill : kFills)
      for (int64_t C : kWidths)
        for (int variant = 0; variant < 4; ++variant) {  // bit 0: residual; bit 1: strided + in place
          const bool with_res = variant & 1, strided = variant & 2;
          const int64_t N = C == 1000 ? 1 : 17;
          SCOPED_TRACE(std::string(isa) + " " + fill_name(fill) + " C=" + std::to_string(C) +
                       " residual=" + std::to_string(with_res) + " strided=" + std::to_string(strided));
          Tensor x = make_rows(N, C, strided ? C + 9 : 0), r = make_rows(N, C, strided ? C + 1 : 0);
          Tensor gamma = Tensor::empty({C}, DType::f32), beta = Tensor::empty({C}, DType::f32);
          fill_rows(rng, x, fill);
          fill_rows(rng, r, fill);
          rng.fill(gamma.data<float>(), C, Fill::normal);
          rng.fill(beta.data<float>(), C, Fill::normal);
          const float eps = fill == Fill::uniform ? 1e-12f : 1e-5f;
          std::vector<double> xd = to_f64(x), rd = to_f64(r), ref(xd.size());
          std::vector<double> gd(gamma.data<float>(), gamma.data<float>() + C);
          std::vector<double> bd(beta.data<float>(), beta.data<float>() + C);
          ref::layernorm_forward<double>(xd.data(), with_res ? rd.data() : nullptr, gd.data(),
                                         bd.data(), eps, ref.data(), N, C);
          Tensor y = strided ? x : make_rows(N, C);  // strided variant also runs in place
          ops::layernorm(ctx, x, with_res ? &r : nullptr, gamma, beta, eps, y);
          // Output is O(|gamma| + |beta|); the statistics are C-long reductions.
          ASSERT_TRUE(all_close(to_f64(y), ref, reduction_tol(C)));
        }
  }
}

// ---- softmax -------------------------------------------------------------------------------------

TEST(OpsSoftmax, MatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Fill fill : kFills)
      for (int64_t C : kWidths)
        for (int layout = 0; layout < 3; ++layout) {  // contiguous, strided, in place
          SCOPED_TRACE(std::string(isa) + " " + fill_name(fill) + " C=" + std::to_string(C) +
                       " layout=" + std::to_string(layout));
          const int64_t N = 9;
          Tensor x = make_rows(N, C, layout == 1 ? C + 2 : 0);
          fill_rows(rng, x, fill);
          if (fill == Fill::outlier)  // logits of large magnitude (masked-attention style)
            for (int64_t c = 0; c < C; c += 3) x.data<float>()[c] = -1.0e4f;
          std::vector<double> xd = to_f64(x), ref(xd.size());
          ref::softmax_forward<double>(xd.data(), ref.data(), N, C);
          Tensor y = layout == 2 ? x : make_rows(N, C, layout == 1 ? C + 7 : 0);
          ops::softmax(ctx, x, y);
          ASSERT_TRUE(all_close(to_f64(y), ref, {1e-7, reduction_tol(C).rtol}));
        }
  }
}

// ---- embedding -----------------------------------------------------------------------------------

TEST(OpsEmbedding, MatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t V = 50;
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : kWidths)
      for (DType idt : {DType::i32, DType::i64})
        for (bool accumulate : {false, true}) {
          const int64_t N = 37;
          SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " ids=" +
                       std::string(dtype_name(idt)) + " accumulate=" + std::to_string(accumulate));
          Tensor table = make_rows(V, C, C + 4);
          fill_rows(rng, table, Fill::normal);
          Tensor ids = Tensor::empty({N}, idt);
          std::vector<int64_t> idv(N);
          for (int64_t i = 0; i < N; ++i) {
            idv[i] = rng.integer(0, V - 1);
            if (idt == DType::i32) ids.data<int32_t>()[i] = int32_t(idv[i]);
            else ids.data<int64_t>()[i] = idv[i];
          }
          Tensor out = make_rows(N, C, C + 3);
          fill_rows(rng, out, Fill::normal);
          std::vector<double> ref = to_f64(out), td = to_f64(table);
          ref::embedding_forward<double>(td.data(), idv.data(), ref.data(), N, C, accumulate);
          ops::embedding(ctx, table, ids, out, accumulate);
          ASSERT_TRUE(all_close(to_f64(out), ref, {1e-6, 1e-6}));
        }
  }
}

// ---- errors --------------------------------------------------------------------------------------

TEST(OpsErrors, MessagesNameTheActualValues) {
  Context ctx({.num_threads = 1});
  Tensor a = Tensor::zeros({3, 5}, DType::f32), b = Tensor::zeros({4, 6}, DType::f32);
  Tensor c = Tensor::zeros({3, 6}, DType::f32);
  std::string msg = error_of([&] { ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::no, c); });
  EXPECT_NE(msg.find("[3,5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4,6]"), std::string::npos) << msg;
  Tensor bad_bias = Tensor::zeros({5}, DType::f32), b2 = Tensor::zeros({5, 6}, DType::f32);
  msg = error_of([&] { ops::gemm(ctx, a, ops::Trans::no, b2, ops::Trans::no, c, {.bias = &bad_bias}); });
  EXPECT_NE(msg.find("f32[5]"), std::string::npos) << msg;

  Tensor xi = Tensor::zeros({2, 8}, DType::i32), yf = Tensor::zeros({2, 8}, DType::f32);
  EXPECT_THROW(ops::softmax(ctx, xi, yf), Unsupported);
  msg = error_of([&] { ops::softmax(ctx, xi, yf); });
  EXPECT_NE(msg.find("i32[2,8]"), std::string::npos) << msg;

  Tensor x = Tensor::zeros({2, 8}, DType::f32), y = Tensor::zeros({2, 7}, DType::f32);
  msg = error_of([&] { ops::activation(ctx, x, y, Activation::gelu); });
  EXPECT_NE(msg.find("f32[2,7]"), std::string::npos) << msg;

  Tensor g7 = Tensor::zeros({7}, DType::f32), b8 = Tensor::zeros({8}, DType::f32);
  msg = error_of([&] { ops::layernorm(ctx, x, nullptr, g7, b8, 1e-5f, x); });
  EXPECT_NE(msg.find("f32[7]"), std::string::npos) << msg;

  Tensor table = Tensor::zeros({10, 4}, DType::f32), out = Tensor::zeros({3, 4}, DType::f32);
  Tensor ids = Tensor::zeros({3}, DType::i64);
  ids.data<int64_t>()[2] = 10;
  msg = error_of([&] { ops::embedding(ctx, table, ids, out); });
  EXPECT_NE(msg.find("ids[2] = 10"), std::string::npos) << msg;
  ids.data<int64_t>()[2] = -1;
  msg = error_of([&] { ops::embedding(ctx, table, ids, out); });
  EXPECT_NE(msg.find("ids[2] = -1"), std::string::npos) << msg;

  // CUDA tensors on this CPU context: Unsupported in a CPU-only build; an Error about the context
  // in a CUDA build.
  float buf[16] = {};
  Tensor xc = Tensor::from_blob(buf, {2, 8}, DType::f32, Device::cuda);
#ifdef UNMASK_WITH_CUDA
  EXPECT_THROW(ops::softmax(ctx, xc, xc), Error);
  EXPECT_THROW(ops::activation(ctx, xc, xc, Activation::gelu), Error);
#else
  EXPECT_THROW(ops::softmax(ctx, xc, xc), Unsupported);
  EXPECT_THROW(ops::activation(ctx, xc, xc, Activation::gelu), Unsupported);
#endif
}

// ---- reference backward vs central finite differences (float64) ---------------------------------

namespace {

// Checks analytic gradient `grad` of L(x) = sum(w * f(x)) against central differences in x.
template <typename Loss>
::testing::AssertionResult check_grad(std::vector<double>& x, const std::vector<double>& grad, Loss&& loss) {
  std::vector<double> num(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5 * std::max(1.0, std::fabs(x[i])), keep = x[i];
    x[i] = keep + h;
    double lp = loss();
    x[i] = keep - h;
    double lm = loss();
    x[i] = keep;
    num[i] = (lp - lm) / (2 * h);
  }
  return all_close(grad, num, {1e-7, 1e-6});
}

std::vector<double> random_vec(TestRng& rng, size_t n) {
  std::vector<double> v(n);
  for (double& x : v) x = rng.normal();
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

TEST(OpsBackward, ActivationRefMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  for (Activation act : kActs) {
    SCOPED_TRACE(ops::activation_name(act));
    const int64_t n = 41;
    std::vector<double> x = random_vec(rng, n), w = random_vec(rng, n), y(n), dx(n);
    for (auto& v : x) v *= 2.5;
    ref::activation_backward<double>(x.data(), w.data(), dx.data(), n, act);
    EXPECT_TRUE(check_grad(x, dx, [&] {
      ref::activation_forward<double>(x.data(), y.data(), n, act);
      return dot(w, y);
    }));
  }
}

TEST(OpsBackward, GemmRefMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t M = 4, N = 5, K = 3;
  for (int t = 0; t < 4; ++t)
    for (Activation act : kActs) {
      const bool ta = t & 1, tb = t & 2;
      SCOPED_TRACE("ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " " + ops::activation_name(act));
      const double alpha = 0.7;
      std::vector<double> a = random_vec(rng, M * K), b = random_vec(rng, K * N), bias = random_vec(rng, N);
      std::vector<double> w = random_vec(rng, M * N), c(M * N), pre(M * N);
      std::vector<double> da(M * K), db(K * N), dbias(N);
      ref::gemm_forward<double>(a.data(), ta, b.data(), tb, pre.data(), M, N, K, alpha, 0.0, bias.data(),
                                Activation::none);
      ref::gemm_backward<double>(a.data(), ta, b.data(), tb, pre.data(), w.data(), da.data(), db.data(),
                                 dbias.data(), M, N, K, alpha, act);
      auto loss = [&] {
        ref::gemm_forward<double>(a.data(), ta, b.data(), tb, c.data(), M, N, K, alpha, 0.0, bias.data(), act);
        return dot(w, c);
      };
      EXPECT_TRUE(check_grad(a, da, loss));
      EXPECT_TRUE(check_grad(b, db, loss));
      EXPECT_TRUE(check_grad(bias, dbias, loss));
    }
}

TEST(OpsBackward, LayerNormRefMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t N = 3, C = 7;
  const double eps = 1e-5;
  for (bool with_res : {false, true}) {
    std::vector<double> x = random_vec(rng, N * C), r = random_vec(rng, N * C);
    std::vector<double> g = random_vec(rng, C), bt = random_vec(rng, C), w = random_vec(rng, N * C);
    std::vector<double> y(N * C), dx(N * C), dg(C), db(C);
    const double* rp = with_res ? r.data() : nullptr;
    ref::layernorm_backward<double>(x.data(), rp, g.data(), eps, w.data(), dx.data(), dg.data(), db.data(), N, C);
    auto loss = [&] {
      ref::layernorm_forward<double>(x.data(), with_res ? r.data() : nullptr, g.data(), bt.data(), eps,
                                     y.data(), N, C);
      return dot(w, y);
    };
    EXPECT_TRUE(check_grad(x, dx, loss));
    if (with_res) EXPECT_TRUE(check_grad(r, dx, loss));  // the residual gets the same gradient
    EXPECT_TRUE(check_grad(g, dg, loss));
    EXPECT_TRUE(check_grad(bt, db, loss));
  }
}

TEST(OpsBackward, SoftmaxRefMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t N = 3, C = 9;
  std::vector<double> x = random_vec(rng, N * C), w = random_vec(rng, N * C), y(N * C), dx(N * C);
  ref::softmax_forward<double>(x.data(), y.data(), N, C);
  ref::softmax_backward<double>(y.data(), w.data(), dx.data(), N, C);
  EXPECT_TRUE(check_grad(x, dx, [&] {
    ref::softmax_forward<double>(x.data(), y.data(), N, C);
    return dot(w, y);
  }));
}

TEST(OpsBackward, EmbeddingRefMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t V = 6, C = 4, N = 9;
  std::vector<int64_t> ids(N);
  for (auto& id : ids) id = rng.integer(0, V - 1);
  ids[1] = ids[0];  // a repeated id: its gradients must add up
  std::vector<double> table = random_vec(rng, V * C), w = random_vec(rng, N * C), out(N * C);
  std::vector<double> dtable(V * C, 0.0);
  ref::embedding_backward<double>(ids.data(), w.data(), dtable.data(), N, C);
  EXPECT_TRUE(check_grad(table, dtable, [&] {
    ref::embedding_forward<double>(table.data(), ids.data(), out.data(), N, C, false);
    return dot(w, out);
  }));
}
