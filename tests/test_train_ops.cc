// tests/test_train_ops.cc: the training ops (backward passes, cross-entropy, dropout, Philox)
// under every CPU ISA against the float64 references (src/ref/ref_ops.h, train_ref.h), the new
// references against central finite differences, and the determinism the ops promise
// (bitwise-equal results for 1 and 2 threads where ops.h says so).
//
// Tolerances as in tests/test_ops.cc: elementwise atol 1e-6 / rtol 1e-5; reductions over C
// reduction_tol(C). Seeds are printed on failure; UNMASK_TEST_SEED overrides them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "cpu/kernels.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ref/ref_ops.h"
#include "ref/train_ref.h"
#include "unmask/context.h"
#include "error_test_util.h"

using namespace unmask;
using namespace unmask::test;
using ops::Activation;

namespace {

const Activation kActs[] = {Activation::none, Activation::gelu, Activation::gelu_tanh,
                            Activation::tanh, Activation::relu};
const int64_t kWidths[] = {1, 7, 16, 33, 768, 1000};

struct IsaScope {
  explicit IsaScope(std::string_view isa) { cpu::kernels_override_for_testing(isa); }
  ~IsaScope() { cpu::kernels_override_for_testing(""); }
};

using unmask::test::error_of;

std::vector<double> vec_f64(const Tensor& t) {  // any contiguous f32 tensor, flat
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}

Tensor vector_tensor(TestRng& rng, int64_t C, Fill f) {
  Tensor t = Tensor::empty({C}, DType::f32);
  rng.fill(t.data<float>(), C, f);
  return t;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t n = 0; n < a.size(0); ++n)
    if (std::memcmp(a.data<float>() + n * a.stride(0), b.data<float>() + n * b.stride(0),
                    size_t(a.size(1)) * sizeof(float)) != 0)
      return false;
  return true;
}

// Central differences of loss() in every x[i], compared with grad.
template <typename Loss>
::testing::AssertionResult check_grad(std::vector<double>& x, const std::vector<double>& grad,
                                      Loss&& loss) {
  std::vector<double> num(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5 * std::max(1.0, std::fabs(x[i])), keep = x[i];
    x[i] = keep + h;
    const double lp = loss();
    x[i] = keep - h;
    const double lm = loss();
    x[i] = keep;
    num[i] = (lp - lm) / (2 * h);
  }
  return all_close(grad, num, {1e-7, 1e-6});
}

}  // namespace

// ---- Philox -------------------------------------------------------------------------------------

// Random123's published known-answer vectors for Philox4x32-10 (its tests/kat_vectors).
TEST(TrainPhilox, KnownAnswerVectors) {
  struct Kat {
    Philox4x32 ctr;
    uint32_t k0, k1;
    Philox4x32 out;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    const Philox4x32 r = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.w[i], k.out.w[i]) << "word " << i;
  }
}

// The documented uniform stream: counter i -> block i >> 2 (counter words lo, hi, 0, 0; key
// words seed lo, hi), lane i & 3, top 24 bits times 2^-24.
TEST(TrainPhilox, UniformStreamFollowsItsDefinition) {
  const uint64_t seed = 0x0123456789abcdefull;
  double sum = 0;
  const int64_t n = 40000;
  for (uint64_t i = 0; i < uint64_t(n); ++i) {
    const uint64_t c = i + (uint64_t(7) << 32);  // exercise the high counter word
    const Philox4x32 r = philox4x32_10({{uint32_t(c >> 2), uint32_t(c >> 34), 0, 0}}, 0x89abcdefu,
                                       0x01234567u);
    const float u = philox_uniform(seed, c);
    ASSERT_EQ(u, float(r.w[c & 3] >> 8) / 16777216.0f) << "counter " << c;
    ASSERT_TRUE(u >= 0.0f && u < 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / double(n), 0.5, 5 * std::sqrt(1.0 / 12.0 / double(n)));  // 5 sigma
  EXPECT_NE(philox_uniform(1, 0), philox_uniform(2, 0));                     // the seed matters
}

// The pair form used by the attention kernels: the same two numbers as two philox_uniform calls,
// for every position in a block of four (the last one straddles into the next block), across
// the block counter's 32-bit carry, and where the counter wraps at 2^64.
TEST(TrainPhilox, PairEqualsTwoSingles) {
  const uint64_t seed = 0x5eed0000c0ffeeull;
  std::vector<uint64_t> counters;
  for (uint64_t c = 0; c < 64; ++c) counters.push_back(c);
  for (uint64_t c = (uint64_t(1) << 34) - 9; c < (uint64_t(1) << 34) + 9; ++c) counters.push_back(c);
  for (uint64_t k = 1; k <= 9; ++k) counters.push_back(~uint64_t(0) - k + 1);  // 2^64 - k: k = 1 wraps
  for (uint64_t i = 0; i < 1000; ++i) counters.push_back(i * 0x9E3779B97F4A7C15ull);
  for (const uint64_t c : counters) {
    float u0 = -1, u1 = -1;
    philox_uniform_pair(seed, c, u0, u1);
    ASSERT_EQ(u0, philox_uniform(seed, c)) << "counter " << c;
    ASSERT_EQ(u1, philox_uniform(seed, c + 1)) << "counter " << c << " + 1";
  }
}

// ---- layernorm (training) ----------------------------------------------------------------------

TEST(TrainLayerNorm, StatisticsMatchReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : kWidths)
      for (int variant = 0; variant < 4; ++variant) {  // bit 0: residual; bit 1: row strides
        const bool with_res = variant & 1, strided = variant & 2;
        const int64_t N = C == 1000 ? 1 : 13;
        SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " variant=" + std::to_string(variant));
        Tensor x = make_rows(N, C, strided ? C + 3 : 0), r = make_rows(N, C, strided ? C + 5 : 0);
        fill_rows(rng, x, Fill::outlier);
        fill_rows(rng, r, Fill::normal);
        Tensor g = vector_tensor(rng, C, Fill::normal), b = vector_tensor(rng, C, Fill::normal);
        Tensor y = make_rows(N, C, strided ? C + 1 : 0);
        Tensor mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
        const float eps = 1e-5f;
        ops::layernorm(ctx, x, with_res ? &r : nullptr, g, b, eps, y, &mean, &rstd);
        std::vector<double> xd = to_f64(x), rd = to_f64(r), ref(xd.size()), mref(N), sref(N);
        for (int64_t n = 0; n < N; ++n) {
          double m = 0, v = 0;
          for (int64_t c = 0; c < C; ++c) m += xd[n * C + c] + (with_res ? rd[n * C + c] : 0.0);
          m /= double(C);
          for (int64_t c = 0; c < C; ++c) {
            const double d = xd[n * C + c] + (with_res ? rd[n * C + c] : 0.0) - m;
            v += d * d;
          }
          mref[n] = m;
          sref[n] = 1.0 / std::sqrt(v / double(C) + eps);
        }
        ref::layernorm_forward<double>(xd.data(), with_res ? rd.data() : nullptr, vec_f64(g).data(),
                                       vec_f64(b).data(), eps, ref.data(), N, C);
        ASSERT_TRUE(all_close(to_f64(y), ref, reduction_tol(C)));
        ASSERT_TRUE(all_close(vec_f64(mean), mref, reduction_tol(C)));
        ASSERT_TRUE(all_close(vec_f64(rstd), sref, reduction_tol(C)));
      }
  }
}

TEST(TrainLayerNorm, BackwardMatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : kWidths)
      for (int variant = 0; variant < 16; ++variant) {  // residual, row strides, dx aliasing dy, dx +=
        const bool with_res = variant & 1, strided = variant & 2, alias = variant & 4, accumulate = variant & 8;
        if (alias && accumulate) continue;  // refused (TrainOps.ErrorsNameActualAndExpected)
        const int64_t N = C == 1000 ? 1 : C == 768 ? 70 : 19;  // 70: several row chunks
        SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " variant=" + std::to_string(variant));
        Tensor x = make_rows(N, C, strided ? C + 3 : 0), r = make_rows(N, C, strided ? C + 5 : 0);
        Tensor dy = make_rows(N, C, strided ? C + 2 : 0);
        fill_rows(rng, x, Fill::normal);
        fill_rows(rng, r, Fill::normal);
        fill_rows(rng, dy, Fill::normal);
        Tensor g = vector_tensor(rng, C, Fill::normal), b = vector_tensor(rng, C, Fill::normal);
        Tensor dg = vector_tensor(rng, C, Fill::normal), db = vector_tensor(rng, C, Fill::normal);
        const std::vector<double> dg0 = vec_f64(dg), db0 = vec_f64(db);
        Tensor y = make_rows(N, C), mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
        const float eps = 1e-5f;
        const Tensor* rp = with_res ? &r : nullptr;
        ops::layernorm(ctx, x, rp, g, b, eps, y, &mean, &rstd);
        std::vector<double> xd = to_f64(x), rd = to_f64(r), dyd = to_f64(dy);
        std::vector<double> dx_ref(xd.size()), dg_ref(C), db_ref(C);
        ref::layernorm_backward<double>(xd.data(), with_res ? rd.data() : nullptr, vec_f64(g).data(),
                                        eps, dyd.data(), dx_ref.data(), dg_ref.data(), db_ref.data(), N, C);
        for (int64_t c = 0; c < C; ++c) dg_ref[c] += dg0[c], db_ref[c] += db0[c];  // accumulated
        Tensor dx = alias ? dy : make_rows(N, C, strided ? C + 4 : 0);
        if (accumulate) {  // dx += the gradient: the reference adds the old values
          fill_rows(rng, dx, Fill::normal);
          const std::vector<double> dx0 = to_f64(dx);
          for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] += dx0[i];
        }
        ops::layernorm_backward(ctx, x, rp, g, mean, rstd, dy, dx, dg, db, accumulate);
        // dx is rstd times a difference of O(|dy gamma|) terms: its rounding error scales with
        // rstd (316 for C = 1, where var = 0 and dx is 0 up to that rounding).
        double max_rstd = 1.0;
        for (int64_t n = 0; n < N; ++n) max_rstd = std::max(max_rstd, double(rstd.data<float>()[n]));
        const Tol tol = reduction_tol(C);
        ASSERT_TRUE(all_close(to_f64(dx), dx_ref, {tol.atol * max_rstd, tol.rtol}));
        ASSERT_TRUE(all_close(vec_f64(dg), dg_ref, reduction_tol(N)));
        ASSERT_TRUE(all_close(vec_f64(db), db_ref, reduction_tol(N)));
      }
  }
}

TEST(TrainLayerNorm, ParameterGradientsDoNotDependOnThreads) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t N = 300, C = 50;
  Tensor x = make_rows(N, C), dy = make_rows(N, C), y = make_rows(N, C), dx = make_rows(N, C);
  fill_rows(rng, x, Fill::normal);
  fill_rows(rng, dy, Fill::normal);
  Tensor g = vector_tensor(rng, C, Fill::normal), b = vector_tensor(rng, C, Fill::normal);
  Tensor mean = Tensor::empty({N}, DType::f32), rstd = Tensor::empty({N}, DType::f32);
  Tensor dg[2], db[2];
  for (int t = 0; t < 2; ++t) {
    Context ctx({.num_threads = t + 1});
    ops::layernorm(ctx, x, nullptr, g, b, 1e-5f, y, &mean, &rstd);
    dg[t] = Tensor::zeros({1, C}, DType::f32);
    db[t] = Tensor::zeros({1, C}, DType::f32);
    Tensor dgv = dg[t].view({C}), dbv = db[t].view({C});
    ops::layernorm_backward(ctx, x, nullptr, g, mean, rstd, dy, dx, dgv, dbv);
  }
  EXPECT_TRUE(bitwise_equal(dg[0], dg[1]));
  EXPECT_TRUE(bitwise_equal(db[0], db[1]));
}

// ---- activation backward, bias gradient, softmax backward ------------------------------------

TEST(TrainActivation, BackwardMatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Activation act : kActs)
      for (int64_t C : kWidths)
        for (int layout = 0; layout < 3; ++layout) {  // contiguous, row-strided, dx aliasing dy
          SCOPED_TRACE(std::string(isa) + " " + ops::activation_name(act) + " C=" + std::to_string(C) +
                       " layout=" + std::to_string(layout));
          const int64_t N = 3;
          Tensor x = make_rows(N, C, layout == 1 ? C + 5 : 0), dy = make_rows(N, C, layout == 1 ? C + 1 : 0);
          fill_rows(rng, x, Fill::normal);
          for (int64_t c = 0; c < C; ++c) x.data<float>()[c] *= 6.0f;  // reach the tails
          fill_rows(rng, dy, Fill::normal);
          std::vector<double> xd = to_f64(x), dyd = to_f64(dy), ref(xd.size());
          ref::activation_backward<double>(xd.data(), dyd.data(), ref.data(), int64_t(xd.size()), act);
          Tensor dx = layout == 2 ? dy : make_rows(N, C, layout == 1 ? C + 3 : 0);
          ops::activation_backward(ctx, x, dy, dx, act);
          ASSERT_TRUE(all_close(to_f64(dx), ref, {1e-6, 1e-5}));
        }
  }
}

// A dense sweep over [-40, 40], as for the forward in test_ops.cc: transition points, tails,
// saturation. The derivative is compared relative to max(|ref|, 1e-3) near its zeros.
TEST(TrainActivation, BackwardAccurateOverWholeRange) {
  Context ctx({.num_threads = 1});
  const int64_t n = 20001;
  Tensor x = Tensor::empty({n}, DType::f32), dy = Tensor::empty({n}, DType::f32), dx = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    x.data<float>()[i] = float(-40.0 + 80.0 * double(i) / double(n - 1));
    dy.data<float>()[i] = 1.0f;
  }
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(isa) + " " + ops::activation_name(act));
      ops::activation_backward(ctx, x, dy, dx, act);
      std::vector<double> xd = vec_f64(x), ref(n), got = vec_f64(dx);
      for (int64_t i = 0; i < n; ++i) ref[i] = ref::activation_scalar_grad<double>(xd[i], act);
      ASSERT_TRUE(all_close(got, ref, {2e-6, 2e-5}));
    }
  }
}

// activation_backward with y: act(x) beside dx, the bits of the two ops (f32 and the bf16
// emulation), for dx aliasing dy as the ViT block's recompute uses it; y may share memory with
// none of x, dy, dx.
TEST(TrainActivation, BackwardWithOutputIsTheTwoOps) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (DType dt : {DType::f32, DType::bf16})
    for (Activation act : kActs) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + ops::activation_name(act));
      const int64_t N = 5, C = 37;
      Tensor x = make_rows(N, C, 0), dy = make_rows(N, C, 0);
      fill_rows(rng, x, Fill::normal);
      fill_rows(rng, dy, Fill::normal);
      for (int64_t c = 0; c < C; ++c) x.data<float>()[c] *= 6.0f;  // reach the tails
      const Tensor xt = x.cast(dt), dyt = dy.cast(dt);
      Tensor y_two = Tensor::empty({N, C}, dt), dx_two = dyt.cast(dt);
      ops::activation(ctx, xt, y_two, act);
      ops::activation_backward(ctx, xt, dx_two, dx_two, act);
      Tensor y_one = Tensor::empty({N, C}, dt), dx_one = dyt.cast(dt);
      ops::activation_backward(ctx, xt, dx_one, dx_one, act, &y_one);
      EXPECT_EQ(vec_f64(y_one.cast(DType::f32)), vec_f64(y_two.cast(DType::f32)));
      EXPECT_EQ(vec_f64(dx_one.cast(DType::f32)), vec_f64(dx_two.cast(DType::f32)));
      double sq = 0;
      for (double v : vec_f64(y_one.cast(DType::f32))) sq += v * v;
      EXPECT_GT(sq, 1.0);  // not a zero tensor compared with another
    }
  Tensor x = Tensor::zeros({4, 8}, DType::f32), dy = Tensor::zeros({4, 8}, DType::f32), dx = dy;
  EXPECT_NE(error_of([&] { ops::activation_backward(ctx, x, dy, dx, Activation::gelu, &dx); }).find("overlaps"),
            std::string::npos);
  Tensor y_small = Tensor::zeros({4, 7}, DType::f32);
  EXPECT_NE(error_of([&] { ops::activation_backward(ctx, x, dy, dx, Activation::gelu, &y_small); }).find("shape"),
            std::string::npos);
}

// activation_backward with dbias: dx (and y) and dbias += the column sums of dx, the bits of
// activation_backward followed by bias_grad(dx), in f32 and emulated bf16, dx in place over dy.
TEST(TrainActivation, BackwardWithBiasGradIsTheTwoOps) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (const DType dt : {DType::f32, DType::bf16})
    for (bool with_y : {false, true}) {
      const int64_t N = 37, C = 70;
      SCOPED_TRACE(std::string(dtype_name(dt)) + (with_y ? " with y" : ""));
      Tensor xf = make_rows(N, C), dyf = make_rows(N, C);
      fill_rows(rng, xf, Fill::normal);
      fill_rows(rng, dyf, Fill::normal);
      const Tensor x = dt == DType::f32 ? xf : xf.cast(dt), dy = dt == DType::f32 ? dyf : dyf.cast(dt);
      const Tensor db0 = vector_tensor(rng, C, Fill::normal);
      Tensor dx1 = Tensor::empty({N, C}, dt), y1 = Tensor::empty({N, C}, dt), db1 = Tensor::empty({C}, DType::f32);
      dx1.copy_from(dy);
      db1.copy_from(db0);
      ops::activation_backward(ctx, x, dx1, dx1, Activation::gelu, with_y ? &y1 : nullptr, &db1);
      Tensor dx2 = Tensor::empty({N, C}, dt), y2 = Tensor::empty({N, C}, dt), db2 = Tensor::empty({C}, DType::f32);
      dx2.copy_from(dy);
      db2.copy_from(db0);
      ops::activation_backward(ctx, x, dx2, dx2, Activation::gelu, with_y ? &y2 : nullptr);
      ops::bias_grad(ctx, dx2, db2);
      EXPECT_TRUE(bitwise_equal(dx1.cast(DType::f32), dx2.cast(DType::f32)));
      if (with_y) EXPECT_TRUE(bitwise_equal(y1.cast(DType::f32), y2.cast(DType::f32)));
      EXPECT_TRUE(bitwise_equal(db1.view({1, C}), db2.view({1, C})));
      EXPECT_FALSE(bitwise_equal(db1.view({1, C}), db0.view({1, C}))) << "dbias unchanged";
    }
  Tensor x = Tensor::zeros({4, 8}, DType::f32), bad = Tensor::zeros({7}, DType::f32);
  EXPECT_NE(error_of([&] { ops::activation_backward(ctx, x, x, x, Activation::gelu, nullptr, &bad); }).find("dbias"),
            std::string::npos);
}

TEST(TrainBiasGrad, MatchesReferenceAndDoesNotDependOnThreads) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : {int64_t(1), int64_t(7), int64_t(70), int64_t(768), int64_t(1000)})
      for (int64_t N : {int64_t(1), int64_t(37)}) {
        SCOPED_TRACE(std::string(isa) + " N=" + std::to_string(N) + " C=" + std::to_string(C));
        Tensor dy = make_rows(N, C, C + 3);
        fill_rows(rng, dy, Fill::normal);
        Tensor init = make_rows(1, C);
        fill_rows(rng, init, Fill::normal);
        std::vector<double> ref = to_f64(init), dyd = to_f64(dy);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c) ref[c] += dyd[n * C + c];
        Tensor got[2];
        for (int t = 0; t < 2; ++t) {
          Context ctx({.num_threads = t + 1});
          got[t] = init.contiguous();
          Tensor v = got[t].view({C});
          ops::bias_grad(ctx, dy, v);
        }
        ASSERT_TRUE(all_close(to_f64(got[1]), ref, reduction_tol(N)));
        ASSERT_TRUE(bitwise_equal(got[0], got[1]));
      }
  }
}

// A linear layer's parameter gradients: dw += dy^T x and db += colsum(dy) against float64,
// added to nonzero gradients, with a strided dy; db may be absent.
TEST(TrainLinearParamGrads, MatchesReferenceWithAndWithoutBias) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (int64_t N : {int64_t(1), int64_t(37)})
    for (bool with_bias : {true, false}) {
      const int64_t N_out = 19, K = 70;
      SCOPED_TRACE("N=" + std::to_string(N) + (with_bias ? " with bias" : " no bias"));
      Tensor dy = make_rows(N, N_out, N_out + 5), x = make_rows(N, K);
      fill_rows(rng, dy, Fill::normal);
      fill_rows(rng, x, Fill::normal);
      Tensor dw = make_rows(N_out, K), db = make_rows(1, N_out);
      fill_rows(rng, dw, Fill::normal);
      fill_rows(rng, db, Fill::normal);
      std::vector<double> dw_ref = to_f64(dw), db_ref = to_f64(db);
      const std::vector<double> dyd = to_f64(dy), xd = to_f64(x);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < N_out; ++o) {
          if (with_bias) db_ref[size_t(o)] += dyd[size_t(n * N_out + o)];
          for (int64_t k = 0; k < K; ++k) dw_ref[size_t(o * K + k)] += dyd[size_t(n * N_out + o)] * xd[size_t(n * K + k)];
        }
      Tensor dbv = db.view({N_out});
      ops::linear_param_grads(ctx, dy, x, dw, with_bias ? &dbv : nullptr);
      ASSERT_TRUE(all_close(to_f64(dw), dw_ref, reduction_tol(N)));
      ASSERT_TRUE(all_close(to_f64(db), db_ref, reduction_tol(N)));  // untouched without a bias
    }
  // Bad shapes are the gemm's and bias_grad's errors.
  Tensor dy = Tensor::zeros({4, 8}, DType::f32), x = Tensor::zeros({4, 3}, DType::f32);
  Tensor dw = Tensor::zeros({8, 3}, DType::f32), db_bad = Tensor::zeros({7}, DType::f32);
  Tensor dw_bad = Tensor::zeros({8, 4}, DType::f32);
  EXPECT_NE(error_of([&] { ops::linear_param_grads(ctx, dy, x, dw, &db_bad); }).find("[8]"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::linear_param_grads(ctx, dy, x, dw_bad, nullptr); }).find("c must be [8, 3]"),
            std::string::npos);
}

TEST(TrainSoftmax, BackwardMatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : kWidths)
      for (int layout = 0; layout < 3; ++layout) {  // contiguous, strided, dx aliasing dy
        SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " layout=" + std::to_string(layout));
        const int64_t N = 9;
        Tensor x = make_rows(N, C), y = make_rows(N, C, layout == 1 ? C + 2 : 0);
        Tensor dy = make_rows(N, C, layout == 1 ? C + 6 : 0);
        fill_rows(rng, x, Fill::normal);
        fill_rows(rng, dy, Fill::normal);
        ops::softmax(ctx, x, y);
        std::vector<double> yd = to_f64(y), dyd = to_f64(dy), ref(yd.size());
        ref::softmax_backward<double>(yd.data(), dyd.data(), ref.data(), N, C);
        Tensor dx = layout == 2 ? dy : make_rows(N, C, layout == 1 ? C + 1 : 0);
        ops::softmax_backward(ctx, y, dy, dx);
        ASSERT_TRUE(all_close(to_f64(dx), ref, {1e-6, reduction_tol(C).rtol}));
      }
  }
}

// ---- embedding backward ------------------------------------------------------------------------

TEST(TrainEmbedding, BackwardMatchesReferenceAndIsDeterministic) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t V = 23;
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : kWidths)
      for (DType idt : {DType::i32, DType::i64}) {
        const int64_t N = 57;  // > V: many repeated ids
        SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " ids=" + std::string(dtype_name(idt)));
        Tensor dout = make_rows(N, C, C + 3);
        fill_rows(rng, dout, Fill::normal);
        Tensor ids = Tensor::empty({N}, idt);
        std::vector<int64_t> idv(N);
        for (int64_t i = 0; i < N; ++i) {
          idv[i] = rng.integer(0, V - 1);
          if (idt == DType::i32) ids.data<int32_t>()[i] = int32_t(idv[i]);
          else ids.data<int64_t>()[i] = idv[i];
        }
        Tensor init = make_rows(V, C, C + 2);
        fill_rows(rng, init, Fill::normal);
        std::vector<double> ref = to_f64(init), dd = to_f64(dout);
        ref::embedding_backward<double>(idv.data(), dd.data(), ref.data(), N, C);
        Tensor got[2];
        for (int t = 0; t < 2; ++t) {
          Context ctx({.num_threads = t + 1});
          got[t] = make_rows(V, C, C + 2);
          got[t].copy_from(init);
          ops::embedding_backward(ctx, ids, dout, got[t]);
        }
        ASSERT_TRUE(all_close(to_f64(got[1]), ref, {1e-5, 1e-5}));
        ASSERT_TRUE(bitwise_equal(got[0], got[1]));
      }
  }
}

// ---- cross-entropy -------------------------------------------------------------------------------

TEST(TrainCrossEntropy, RefBackwardMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t M = 4, V = 7;
  std::vector<double> x(M * V), loss(M), dl(M * V);
  std::vector<int64_t> am(M);
  for (double& v : x) v = 3.0 * rng.normal();
  const int32_t t[M] = {2, -1, 0, 6};
  const double scale = 0.37;
  ref::cross_entropy_backward<double>(x.data(), t, scale, dl.data(), M, V);
  EXPECT_TRUE(check_grad(x, dl, [&] {
    ref::cross_entropy_forward<double>(x.data(), t, loss.data(), am.data(), M, V);
    double s = 0;
    for (double l : loss) s += l;
    return scale * s;
  }));
}

TEST(TrainCrossEntropy, MatchesReferenceEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t V : {int64_t(1), int64_t(7), int64_t(33), int64_t(1000), int64_t(30522)})
      for (int layout = 0; layout < 3; ++layout) {  // separate dlogits, strided, dlogits = logits
        const int64_t M = V > 1000 ? 5 : 13;
        SCOPED_TRACE(std::string(isa) + " V=" + std::to_string(V) + " layout=" + std::to_string(layout));
        Tensor x = make_rows(M, V, layout == 1 ? V + 3 : 0);
        fill_rows(rng, x, Fill::normal);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < V; ++j) x.data<float>()[m * x.stride(0) + j] *= 4.0f;
        Tensor t = Tensor::empty({M}, DType::i32);
        for (int64_t m = 0; m < M; ++m) t.data<int32_t>()[m] = m % 4 == 1 ? -1 : int32_t(rng.integer(0, V - 1));
        if (V > 1) {  // a tie for the maximum: the first index wins, and it is the target
          float* row = x.data<float>() + 2 * x.stride(0);
          row[V - 1] = row[0] = 50.0f;
          t.data<int32_t>()[2] = 0;
        }
        std::vector<double> xd = to_f64(x), loss_ref(M), dl_ref(M * V);
        std::vector<int64_t> am_ref(M);
        const int32_t* tp = t.data<int32_t>();
        const float scale = 1.0f / 9.0f;
        ref::cross_entropy_forward<double>(xd.data(), tp, loss_ref.data(), am_ref.data(), M, V);
        ref::cross_entropy_backward<double>(xd.data(), tp, scale, dl_ref.data(), M, V);
        Tensor losses = Tensor::empty({M}, DType::f32);
        Tensor dl = layout == 2 ? x : make_rows(M, V, layout == 1 ? V + 1 : 0);
        const ops::CrossEntropyStats s = ops::cross_entropy(ctx, x, t, &losses, &dl, scale);
        ASSERT_TRUE(all_close(vec_f64(losses), loss_ref, {1e-5, 1e-5}));
        ASSERT_TRUE(all_close(to_f64(dl), dl_ref, {1e-7, reduction_tol(V).rtol}));
        double sum = 0;
        int64_t count = 0, correct = 0;
        for (int64_t m = 0; m < M; ++m)
          if (tp[m] >= 0) sum += loss_ref[m], ++count, correct += am_ref[m] == tp[m];
        EXPECT_EQ(s.count, count);
        EXPECT_EQ(s.correct, correct);
        EXPECT_NEAR(s.loss_sum, sum, 1e-5 * double(count) * (1 + std::fabs(sum)));
        if (V > 1) EXPECT_GE(s.correct, 1);  // row 2
      }
  }
}

TEST(TrainCrossEntropy, LossSumDoesNotDependOnThreadsAndGradientIsOptional) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t M = 301, V = 97;
  Tensor x = make_rows(M, V);
  fill_rows(rng, x, Fill::normal);
  Tensor t = Tensor::empty({M}, DType::i32);
  for (int64_t m = 0; m < M; ++m) t.data<int32_t>()[m] = m % 7 == 3 ? -5 : int32_t(rng.integer(0, V - 1));
  ops::CrossEntropyStats s[3];
  for (int i = 0; i < 3; ++i) {
    Context ctx({.num_threads = i == 0 ? 1 : 2});
    Tensor dl = make_rows(M, V);
    s[i] = ops::cross_entropy(ctx, x, t, nullptr, i == 2 ? nullptr : &dl, 1.0f);
  }
  EXPECT_EQ(std::memcmp(&s[0].loss_sum, &s[1].loss_sum, sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(&s[0].loss_sum, &s[2].loss_sum, sizeof(double)), 0);
  EXPECT_EQ(s[0].count, M - 43);
  EXPECT_EQ(s[0].correct, s[1].correct);
}

// ---- dropout --------------------------------------------------------------------------------------

TEST(TrainDropout, MatchesReferenceExactlyEveryIsa) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (auto isa : cpu::available_isas()) {
    IsaScope scope(isa);
    for (int64_t C : {int64_t(1), int64_t(3), int64_t(33), int64_t(768)})
      for (int layout = 0; layout < 3; ++layout) {  // contiguous, strided, in place
        const int64_t N = 11;
        const float p = 0.1f + 0.2f * float(layout);
        // Offsets near 2^34 and 2^64 make the Philox block counter carry into its high word,
        // and wrap, inside a vector group.
        const uint64_t offsets[3] = {uint64_t(rng.integer(0, 1 << 20)), (uint64_t(1) << 34) - 61,
                                     ~uint64_t(0) - 45};
        const uint64_t seed = 0xfeedull + uint64_t(C), offset = offsets[layout];
        SCOPED_TRACE(std::string(isa) + " C=" + std::to_string(C) + " layout=" + std::to_string(layout));
        Tensor x = make_rows(N, C, layout == 1 ? C + 2 : 0);
        fill_rows(rng, x, Fill::normal);
        std::vector<double> xd = to_f64(x), ref(xd.size());
        ref::dropout_forward<double>(xd.data(), ref.data(), int64_t(xd.size()), p, seed, offset);
        Tensor y = layout == 2 ? x : make_rows(N, C, layout == 1 ? C + 5 : 0);
        ops::dropout(ctx, x, y, p, seed, offset);
        const std::vector<double> got = to_f64(y);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i] == 0.0, ref[i] == 0.0) << "element " << i << ": mask differs";
        ASSERT_TRUE(all_close(got, ref, {0.0, 1e-6}));
        // The backward applies the same mask (recomputed from seed and offset).
        Tensor dy = make_rows(N, C, layout == 1 ? C + 1 : 0);
        fill_rows(rng, dy, Fill::normal);
        std::vector<double> dyd = to_f64(dy), dref(dyd.size());
        ref::dropout_forward<double>(dyd.data(), dref.data(), int64_t(dyd.size()), p, seed, offset);
        Tensor dx = layout == 2 ? dy : make_rows(N, C);
        ops::dropout_backward(ctx, dy, dx, p, seed, offset);
        ASSERT_TRUE(all_close(to_f64(dx), dref, {0.0, 1e-6}));
      }
  }
}

TEST(TrainDropout, MaskIndependentOfThreadsAndKeepRateIsRight) {
  const int64_t N = 257, C = 129;
  Tensor x = make_rows(N, C);
  for (int64_t i = 0; i < N * C; ++i) x.data<float>()[i] = 1.0f;
  for (float p : {0.1f, 0.5f}) {
    Tensor y[2];
    for (int t = 0; t < 2; ++t) {
      Context ctx({.num_threads = t + 1});
      y[t] = make_rows(N, C);
      ops::dropout(ctx, x, y[t], p, 42, 7);
    }
    EXPECT_TRUE(bitwise_equal(y[0], y[1]));
    int64_t kept = 0;
    for (int64_t i = 0; i < N * C; ++i) {
      const float v = y[0].data<float>()[i];
      if (v != 0.0f) {
        ++kept;
        ASSERT_FLOAT_EQ(v, 1.0f / (1.0f - p));
      }
    }
    const double n = double(N * C), expect = (1.0 - p) * n, sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(double(kept), expect, 5 * sigma) << "p = " << p;
  }
  // p = 0 copies; another seed or offset gives another mask.
  Context ctx({.num_threads = 2});
  Tensor a = make_rows(N, C), b = make_rows(N, C);
  ops::dropout(ctx, x, a, 0.0f, 1, 0);
  EXPECT_TRUE(bitwise_equal(a, x));
  ops::dropout(ctx, x, a, 0.5f, 1, 0);
  ops::dropout(ctx, x, b, 0.5f, 1, 1);
  EXPECT_FALSE(bitwise_equal(a, b));
}

// ---- errors ---------------------------------------------------------------------------------------

TEST(TrainOps, ErrorsNameActualAndExpected) {
  Context ctx({.num_threads = 1});
  Tensor x = Tensor::zeros({4, 8}, DType::f32), y = Tensor::zeros({4, 8}, DType::f32);
  Tensor g = Tensor::zeros({8}, DType::f32), bad = Tensor::zeros({7}, DType::f32);
  Tensor m4 = Tensor::zeros({4}, DType::f32), m3 = Tensor::zeros({3}, DType::f32);
  EXPECT_NE(error_of([&] { ops::layernorm(ctx, x, nullptr, g, g, 1e-5f, y, &m3, &m4); }).find("[4]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::layernorm(ctx, x, nullptr, g, g, 1e-5f, x, &m4, &m4); }).find("overlaps"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::layernorm(ctx, x, nullptr, g, g, 1e-5f, y, &m4, nullptr); }).find("both"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::layernorm_backward(ctx, x, nullptr, g, m4, m4, y, y, bad, g); }).find("dgamma"),
            std::string::npos);
  // dx += ... while dx is dy would read gradients it already changed: refused
  EXPECT_NE(error_of([&] { ops::layernorm_backward(ctx, x, nullptr, g, m4, m4, y, y, g, g, true); }).find("overlaps"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::bias_grad(ctx, x, bad); }).find("[8]"), std::string::npos);
  Tensor t = Tensor::zeros({4}, DType::i32);
  t.data<int32_t>()[3] = 8;
  EXPECT_NE(error_of([&] { ops::cross_entropy(ctx, x, t, nullptr, nullptr, 1.0f); }).find("targets[3] = 8"),
            std::string::npos);
  Tensor ids = Tensor::zeros({4}, DType::i64);
  ids.data<int64_t>()[1] = -2;
  Tensor table = Tensor::zeros({5, 8}, DType::f32);
  EXPECT_NE(error_of([&] { ops::embedding_backward(ctx, ids, x, table); }).find("ids[1] = -2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ops::dropout(ctx, x, y, 1.0f, 0, 0); }).find("[0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::dropout(ctx, x, bad, 0.1f, 0, 0); }).find("shape"), std::string::npos);
  // CUDA tensors on this CPU context: a CPU-only build has no CUDA kernels (Unsupported, naming
  // the op); a CUDA build has them and refuses the context mismatch (an Error).
  float buf[32] = {};
  Tensor xc = Tensor::from_blob(buf, {4, 8}, DType::f32, Device::cuda);
#ifdef UNMASK_WITH_CUDA
  EXPECT_THROW(ops::dropout(ctx, xc, xc, 0.1f, 0, 0), Error);
  EXPECT_THROW(ops::activation_backward(ctx, xc, xc, xc, Activation::gelu), Error);
  EXPECT_TRUE(ops::supports("dropout", Device::cuda, DType::f32));
#else
  EXPECT_THROW(ops::dropout(ctx, xc, xc, 0.1f, 0, 0), Unsupported);
  EXPECT_THROW(ops::activation_backward(ctx, xc, xc, xc, Activation::gelu), Unsupported);
  EXPECT_NE(error_of([&] { ops::softmax_backward(ctx, xc, xc, xc); }).find("softmax_backward"),
            std::string::npos);
  EXPECT_FALSE(ops::supports("dropout", Device::cuda, DType::f32));
#endif
  EXPECT_TRUE(ops::supports("cross_entropy", Device::cpu, DType::f32));
}

// Column slices of one wide buffer do not overlap; overlapping slices do.
TEST(TrainOps, OverlapCheckSeesColumnSlices) {
  Context ctx({.num_threads = 1});
  Tensor wide = Tensor::zeros({5, 24}, DType::f32);
  Tensor a = wide.slice(1, 0, 8), b = wide.slice(1, 8, 16), c = wide.slice(1, 4, 12);
  EXPECT_NO_THROW(ops::activation_backward(ctx, a, a, b, Activation::gelu));
  EXPECT_NE(error_of([&] { ops::softmax_backward(ctx, a, a, c); }).find("overlaps"), std::string::npos);
}
