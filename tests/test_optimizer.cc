// tests/test_optimizer.cc: the optimizer ops against float64 formulas written out here, AdamW
// against torch.optim.AdamW (tests/python/optim_reference.py), LAMB against a float64
// implementation of apex FusedLAMB's algorithm, the learning-rate schedules at their boundary
// points, optimizer state save/load (bit-identical resumed steps) and the FLOP count against a
// hand count.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "unmask/train.h"
#include "error_test_util.h"
#include "temp_dir.h"

using namespace unmask;
using namespace unmask::test;
namespace fs = std::filesystem;

namespace {

// Sizes that cross the kernels' 256-element blocks, the 8192-element sum_squares chunks and
// the 32768-element parallel grain (so two threads really split the work).
constexpr int64_t kSizes[] = {1, 7, 256, 1000, 70001};

Tensor random_tensor(TestRng& rng, const Shape& shape, Fill fill, double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(scale * rng.value(fill));
  return t;
}

std::vector<double> values(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<double>(p, p + t.numel());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

using unmask::test::error_of;

// ---- ops against float64 formulas --------------------------------------------------------------

TEST(OptimOps, AdamwUpdateMatchesFloat64) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const double lr = 0.05;
  for (int64_t n : kSizes) {
    for (float wd : {0.0f, 0.1f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " wd=" + std::to_string(wd));
      ops::AdamArgs a{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = wd, .step = 3,
                      .grad_scale = 0.7f};
      Tensor p = random_tensor(rng, {n}, Fill::normal), g = random_tensor(rng, {n}, Fill::outlier);
      Tensor m = random_tensor(rng, {n}, Fill::normal, 0.1);
      Tensor v = random_tensor(rng, {n}, Fill::uniform, 0.01);
      for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
      // float64: g' = gs g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
      //          p = p - lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) - lr wd p
      std::vector<double> rp = values(p), rm = values(m), rv = values(v);
      const double b1 = a.beta1, b2 = a.beta2, t = double(a.step);
      for (int64_t i = 0; i < n; ++i) {
        const double gi = double(a.grad_scale) * g.data<float>()[i];
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        const double m_hat = rm[i] / (1 - std::pow(b1, t)), v_hat = rv[i] / (1 - std::pow(b2, t));
        rp[i] = rp[i] - lr * m_hat / (std::sqrt(v_hat) + double(a.eps)) - lr * double(wd) * rp[i];
      }
      ops::adamw_update(ctx, p, g, m, v, float(lr), a);
      EXPECT_TRUE(all_close(values(p), rp, {.atol = 1e-6, .rtol = 1e-5})) << "p";
      EXPECT_TRUE(all_close(values(m), rm, {.atol = 1e-6, .rtol = 1e-5})) << "m";
      EXPECT_TRUE(all_close(values(v), rv, {.atol = 1e-9, .rtol = 1e-5})) << "v";
    }
  }
}

TEST(OptimOps, LambMomentsMatchesFloat64) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    ops::AdamArgs a{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f, .step = 5,
                    .grad_scale = 0.25f};
    Tensor p = random_tensor(rng, {n}, Fill::normal), g = random_tensor(rng, {n}, Fill::normal);
    Tensor m = random_tensor(rng, {n}, Fill::normal, 0.1);
    Tensor v = random_tensor(rng, {n}, Fill::uniform, 0.01), u = Tensor::empty({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
    // float64: g' = gs g; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
    //          u = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p
    std::vector<double> rm = values(m), rv = values(v), ru(size_t(n), 0.0);
    const double b1 = a.beta1, b2 = a.beta2, t = double(a.step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = double(a.grad_scale) * g.data<float>()[i];
      rm[i] = b1 * rm[i] + (1 - b1) * gi;
      rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
      const double m_hat = rm[i] / (1 - std::pow(b1, t)), v_hat = rv[i] / (1 - std::pow(b2, t));
      ru[i] = m_hat / (std::sqrt(v_hat) + double(a.eps)) + double(a.weight_decay) * p.data<float>()[i];
    }
    const std::vector<double> p_before = values(p);
    ops::lamb_moments(ctx, p, g, m, v, u, a);
    EXPECT_EQ(values(p), p_before) << "lamb_moments must not write p";
    EXPECT_TRUE(all_close(values(m), rm, {.atol = 1e-6, .rtol = 1e-5})) << "m";
    EXPECT_TRUE(all_close(values(v), rv, {.atol = 1e-9, .rtol = 1e-5})) << "v";
    EXPECT_TRUE(all_close(values(u), ru, {.atol = 1e-5, .rtol = 1e-5})) << "u";
  }
}

TEST(OptimOps, AxpyAndScaleMatchFloat64) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor x = random_tensor(rng, {n}, Fill::outlier), y = random_tensor(rng, {n}, Fill::normal);
    std::vector<double> ry = values(y);
    for (int64_t i = 0; i < n; ++i) ry[i] += -0.375 * double(x.data<float>()[i]);  // y += alpha x
    ops::axpy(ctx, -0.375f, x, y);
    EXPECT_TRUE(all_close(values(y), ry, {.atol = 1e-6, .rtol = 1e-6})) << "axpy";
    std::vector<double> rx = values(x);
    for (double& xi : rx) xi *= 1.0 / 3.0;  // x *= s, s = f32(1/3)
    ops::scale_inplace(ctx, x, float(1.0 / 3.0));
    EXPECT_TRUE(all_close(values(x), rx, {.atol = 1e-7, .rtol = 1e-6})) << "scale_inplace";
  }
}

TEST(OptimOps, SumSquaresMatchesFloat64AndIgnoresThreadCount) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx1({.num_threads = 1}), ctx2({.num_threads = 2}), ctx3({.num_threads = 3});
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8193), int64_t(1000003)}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    Tensor x = random_tensor(rng, {n}, Fill::outlier);
    double ref = 0;  // float64: sum of x_i^2 in index order
    for (int64_t i = 0; i < n; ++i) ref += double(x.data<float>()[i]) * double(x.data<float>()[i]);
    const double s1 = ops::sum_squares(ctx1, x), s2 = ops::sum_squares(ctx2, x), s3 = ops::sum_squares(ctx3, x);
    EXPECT_NEAR(s1, ref, 1e-12 * ref);
    // Determinism: the same bits whatever the thread count.
    EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0) << s1 << " vs " << s2;
    EXPECT_EQ(std::memcmp(&s1, &s3, sizeof s1), 0) << s1 << " vs " << s3;
  }
  EXPECT_EQ(ops::sum_squares(ctx2, Tensor::empty({0}, DType::f32)), 0.0);
}

TEST(OptimOps, RejectBadOperands) {
  Context ctx({.num_threads = 1});
  Tensor p = Tensor::zeros({4, 3}, DType::f32), g = Tensor::zeros({4, 3}, DType::f32);
  Tensor m = Tensor::zeros({4, 3}, DType::f32), v = Tensor::zeros({4, 3}, DType::f32);
  const ops::AdamArgs a;
  Tensor small = Tensor::zeros({4, 2}, DType::f32);
  EXPECT_NE(error_of([&] { ops::adamw_update(ctx, p, small, m, v, 0.1f, a); }).find("f32[4,2]"), std::string::npos);
  Tensor wide = Tensor::zeros({4, 6}, DType::f32), strided = wide.slice(1, 0, 3);
  EXPECT_NE(error_of([&] { ops::adamw_update(ctx, p, strided, m, v, 0.1f, a); }).find("contiguous"),
            std::string::npos);
  Tensor ints = Tensor::zeros({4, 3}, DType::i32);
  EXPECT_THROW(ops::axpy(ctx, 1.0f, ints, p), Unsupported);
  EXPECT_NE(error_of([&] { ops::adamw_update(ctx, p, g, m, m, 0.1f, a); }).find("overlaps"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::lamb_moments(ctx, p, g, m, v, g, a); }).find("overlaps"), std::string::npos);
  ops::AdamArgs step0 = a;
  step0.step = 0;
  EXPECT_NE(error_of([&] { ops::adamw_update(ctx, p, g, m, v, 0.1f, step0); }).find("step must be >= 1"),
            std::string::npos);
  // Tensors tagged as CUDA (never dereferenced) on this CPU context: a CPU-only build has no CUDA
  // kernel (Unsupported); a CUDA build refuses the context (an Error).
  float buf[12] = {};
  Tensor c = Tensor::from_blob(buf, {12}, DType::f32, Device::cuda);
  Tensor c2 = Tensor::from_blob(buf + 0, {12}, DType::f32, Device::cuda);
#ifdef UNMASK_WITH_CUDA
  EXPECT_THROW(ops::sum_squares(ctx, c), Error);
  EXPECT_THROW(ops::scale_inplace(ctx, c, 2.0f), Error);
#else
  EXPECT_THROW(ops::sum_squares(ctx, c), Unsupported);
  EXPECT_THROW(ops::scale_inplace(ctx, c, 2.0f), Unsupported);
  EXPECT_THROW(ops::axpy(ctx, 1.0f, c, c2), Unsupported);
#endif
}

// ---- AdamW against torch.optim.AdamW ---------------------------------------------------------------

using unmask::test::TempDir;


struct AdamwCase {
  std::vector<float> lrs;  // per step
  float weight_decay, max_grad_norm, grad_scale;
};

// A small model: the shapes cover a matrix big enough for two threads, odd sizes and a
// no-decay vector (DLE's bias / LayerNorm group).
std::vector<Param> make_params(TestRng& rng) {
  const std::vector<std::pair<Shape, bool>> specs = {
      {{16, 33}, true}, {{33}, false}, {{5, 7}, true}, {{300, 301}, true}, {{301}, false}};
  std::vector<Param> params;
  for (size_t i = 0; i < specs.size(); ++i) {
    Param p;
    p.name = "layer" + std::to_string(i) + (specs[i].second ? ".weight" : ".bias");
    p.value = random_tensor(rng, specs[i].first, Fill::normal);
    p.grad = Tensor::zeros(specs[i].first, DType::f32);
    p.weight_decay = specs[i].second;
    params.push_back(std::move(p));
  }
  return params;
}

TEST(AdamW, MatchesTorchAdamW) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 not found (the torch reference)";
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  constexpr int kSteps = 10;
  std::vector<AdamwCase> cases(2);
  for (int s = 0; s < kSteps; ++s) cases[0].lrs.push_back(1e-3f * float(s + 1) / 4.0f);  // warmup-like
  cases[0].weight_decay = 0.01f, cases[0].max_grad_norm = 0.0f, cases[0].grad_scale = 1.0f;
  cases[1].lrs.assign(kSteps, 2e-3f);  // grads of norm ~80 clipped to 0.5 every step
  cases[1].weight_decay = 0.1f, cases[1].max_grad_norm = 0.5f, cases[1].grad_scale = 0.25f;

  TempDir tmp;
  std::vector<std::vector<Param>> results;  // per case; reserved: each optimizer points at one
  results.reserve(cases.size());
  std::vector<std::vector<double>> norms(cases.size());
  std::vector<std::string> dirs;
  std::vector<Optimizer> opts;
  for (size_t c = 0; c < cases.size(); ++c) {
    const AdamwCase& k = cases[c];
    const std::string dir = (tmp.path / ("case" + std::to_string(c))).string();
    fs::create_directories(dir);
    dirs.push_back(dir);
    std::vector<Param>& params = results.emplace_back(make_params(rng));
    std::ostringstream cfg;
    cfg << std::setprecision(17) << "{\"steps\": " << kSteps << ", \"lrs\": [";
    for (int s = 0; s < kSteps; ++s) cfg << (s ? ", " : "") << double(k.lrs[size_t(s)]);
    cfg << "], \"beta1\": " << double(0.9f) << ", \"beta2\": " << double(0.999f) << ", \"eps\": "
        << double(1e-6f) << ", \"weight_decay\": " << double(k.weight_decay)
        << ", \"max_grad_norm\": " << double(k.max_grad_norm) << ", \"grad_scale\": " << double(k.grad_scale)
        << ", \"decay\": [";
    for (size_t i = 0; i < params.size(); ++i) {
      cfg << (i ? ", " : "") << (params[i].weight_decay ? "true" : "false");
      io::write_npy(dir + "/p" + std::to_string(i) + ".npy", params[i].value);
    }
    cfg << "]}";
    std::ofstream(dir + "/config.json") << cfg.str();

    OptimizerConfig oc;
    oc.kind = OptimizerKind::adamw;
    oc.beta1 = 0.9f, oc.beta2 = 0.999f, oc.eps = 1e-6f;
    oc.weight_decay = k.weight_decay, oc.max_grad_norm = k.max_grad_norm;
    Optimizer opt(oc, params);
    for (int s = 0; s < kSteps; ++s) {
      for (size_t i = 0; i < params.size(); ++i) {
        rng.fill(params[i].grad.data<float>(), params[i].grad.numel(), Fill::normal);
        io::write_npy(dir + "/g" + std::to_string(s) + "_" + std::to_string(i) + ".npy", params[i].grad);
      }
      const OptimizerStepStats st = opt.step(ctx, k.lrs[size_t(s)], k.grad_scale);
      norms[c].push_back(st.grad_norm);
      if (k.max_grad_norm > 0) EXPECT_LT(st.clip_factor, 0.05) << "case " << c << " step " << s;
      else EXPECT_EQ(st.clip_factor, 1.0);
    }
    EXPECT_EQ(opt.step_count(), kSteps);
    opts.push_back(std::move(opt));
  }

  std::string cmd = "/usr/bin/python3 " UNMASK_SOURCE_DIR "/tests/python/optim_reference.py";
  for (const std::string& d : dirs) cmd += " " + d;
  const std::string log = (tmp.path / "python.log").string();
  const int rc = std::system((cmd + " > " + log + " 2>&1").c_str());
  std::ifstream lf(log);
  const std::string log_text((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy: " << log_text;
  ASSERT_EQ(rc, 0) << cmd << "\n" << log_text;

  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    // Reported: the largest |got - torch| / max(|torch|, update scale) over the elements.
    double worst = 0;
    const OptimizerState state = opts[c].state();
    for (size_t i = 0; i < results[c].size(); ++i) {
      SCOPED_TRACE(results[c][i].name);
      const std::string base = dirs[c] + "/out_";
      const std::vector<double> start = values(io::read_npy(dirs[c] + "/p" + std::to_string(i) + ".npy"));
      const std::vector<double> ref_p = values(io::read_npy(base + "p" + std::to_string(i) + ".npy"));
      const std::vector<double> ref_m = values(io::read_npy(base + "exp_avg" + std::to_string(i) + ".npy"));
      const std::vector<double> ref_v = values(io::read_npy(base + "exp_avg_sq" + std::to_string(i) + ".npy"));
      const std::vector<double> got_p = values(results[c][i].value);
      double move = 0;  // the update scale: how far this tensor's elements moved in the 10 steps
      for (size_t e = 0; e < got_p.size(); ++e) move = std::max(move, std::fabs(ref_p[e] - start[e]));
      // 1e-6 relative elementwise, plus an atol of 1e-5 of the update scale for elements that
      // pass near zero (there the f32 rounding of ten updates, ~1e-7 of their size, dominates).
      // A wrong decay, bias correction or clip moves elements by ~1e-4 of the update or more.
      EXPECT_TRUE(all_close(got_p, ref_p, {.atol = 1e-5 * move, .rtol = 1e-6})) << "param";
      const std::vector<double> got_m = values(state.tensors[2 * i].second);
      const std::vector<double> got_v = values(state.tensors[2 * i + 1].second);
      EXPECT_TRUE(all_close(got_m, ref_m, {.atol = 1e-6 * max_abs(ref_m), .rtol = 1e-6})) << "exp_avg";
      EXPECT_TRUE(all_close(got_v, ref_v, {.atol = 1e-6 * max_abs(ref_v), .rtol = 1e-6})) << "exp_avg_sq";
      for (size_t e = 0; e < got_p.size(); ++e)
        worst = std::max(worst, std::fabs(got_p[e] - ref_p[e]) / std::max(std::fabs(ref_p[e]), move));
    }
    // torch sums the norm in f32: 1e-5 relative.
    const Tensor ref_norms = io::read_npy(dirs[c] + "/out_grad_norms.npy");
    ASSERT_EQ(ref_norms.numel(), kSteps);
    for (int s = 0; s < kSteps; ++s)
      EXPECT_NEAR(norms[c][size_t(s)], ref_norms.data<double>()[s], 1e-5 * ref_norms.data<double>()[s]) << "step " << s;
    std::cout << "[ AdamW vs torch ] case " << c << ": largest |got - torch| / max(|torch|, update scale) = "
              << worst << "\n";
  }
}

// ---- LAMB against a float64 implementation of apex FusedLAMB -----------------------------------

// apex FusedLAMB as DLE runs it (bias_correction, adam_w_mode, grad_averaging, max_grad_norm,
// use_nvlamb=False), in float64:
//   norm = ||gs g|| over all params; clip = norm > max ? max / norm : 1; g' = gs clip g
//   m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2
//   u = (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + wd p
//   ratio = wd != 0 and ||p|| > 0 and ||u|| > 0 ? ||p|| / ||u|| : 1;  p -= lr ratio u
struct LambReference {
  double beta1, beta2, eps, weight_decay, max_grad_norm;
  std::vector<bool> decay;
  std::vector<std::vector<double>> p, m, v;
  int64_t step = 0;

  // Returns {grad_norm, clip}.
  std::pair<double, double> update(const std::vector<std::vector<double>>& grads, double lr, double gs) {
    ++step;
    double sum_sq = 0;
    for (const auto& g : grads)
      for (double x : g) sum_sq += (gs * x) * (gs * x);
    const double norm = std::sqrt(sum_sq);
    const double clip = max_grad_norm > 0 && norm > max_grad_norm ? max_grad_norm / norm : 1.0;
    const double t = double(step);
    for (size_t i = 0; i < p.size(); ++i) {
      const double wd = decay[i] ? weight_decay : 0.0;
      std::vector<double> u(p[i].size());
      double p_sq = 0, u_sq = 0;
      for (size_t e = 0; e < p[i].size(); ++e) {
        const double g = gs * clip * grads[i][e];
        m[i][e] = beta1 * m[i][e] + (1 - beta1) * g;
        v[i][e] = beta2 * v[i][e] + (1 - beta2) * g * g;
        const double m_hat = m[i][e] / (1 - std::pow(beta1, t)), v_hat = v[i][e] / (1 - std::pow(beta2, t));
        u[e] = m_hat / (std::sqrt(v_hat) + eps) + wd * p[i][e];
        p_sq += p[i][e] * p[i][e];
        u_sq += u[e] * u[e];
      }
      const double ratio = wd != 0 && p_sq > 0 && u_sq > 0 ? std::sqrt(p_sq) / std::sqrt(u_sq) : 1.0;
      for (size_t e = 0; e < p[i].size(); ++e) p[i][e] -= lr * ratio * u[e];
    }
    return {norm, clip};
  }
};

// BERT-like params for LAMB: decayed matrices, no-decay bias and LayerNorm vectors, a decayed
// param that is all zeros (||p|| = 0: ratio 1) and one large enough for two threads.
std::vector<Param> make_lamb_params(TestRng& rng) {
  struct Spec { const char* name; Shape shape; bool decay; double scale; };
  const Spec specs[] = {{"encoder.dense.weight", {40, 37}, true, 0.05},
                        {"encoder.dense.bias", {37}, false, 0.01},
                        {"zero.weight", {6, 5}, true, 0.0},
                        {"encoder.LayerNorm.weight", {37}, false, -1.0},  // ones
                        {"big.weight", {257, 300}, true, 0.02}};
  std::vector<Param> params;
  for (const Spec& sp : specs) {
    Param p;
    p.name = sp.name;
    p.value = random_tensor(rng, sp.shape, Fill::normal, sp.scale);
    if (sp.scale < 0)
      for (int64_t e = 0; e < p.value.numel(); ++e) p.value.data<float>()[e] = 1.0f;
    p.grad = Tensor::zeros(sp.shape, DType::f32);
    p.weight_decay = sp.decay;
    params.push_back(std::move(p));
  }
  return params;
}

TEST(Lamb, MatchesFloat64ApexAlgorithm) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const float lr = 0.01f, grad_scale = 0.5f;
  // max_grad_norm: never reached (grad norms are ~70), then reached at every step.
  for (float max_norm : {1e6f, 1.0f}) {
    SCOPED_TRACE("max_grad_norm=" + std::to_string(max_norm));
    std::vector<Param> params = make_lamb_params(rng);
    OptimizerConfig oc;
    oc.kind = OptimizerKind::lamb;
    oc.beta1 = 0.9f, oc.beta2 = 0.999f, oc.eps = 1e-6f, oc.weight_decay = 0.01f, oc.max_grad_norm = max_norm;
    Optimizer opt(oc, params);
    LambReference ref{double(oc.beta1), double(oc.beta2), double(oc.eps), double(oc.weight_decay),
                      double(oc.max_grad_norm)};
    for (const Param& p : params) {
      ref.decay.push_back(p.weight_decay);
      ref.p.push_back(values(p.value));
      ref.m.emplace_back(size_t(p.value.numel()), 0.0);
      ref.v.emplace_back(size_t(p.value.numel()), 0.0);
    }
    for (int s = 0; s < 4; ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      std::vector<std::vector<double>> grads;
      std::vector<std::vector<double>> before;
      for (Param& p : params) {
        rng.fill(p.grad.data<float>(), p.grad.numel(), Fill::normal);
        grads.push_back(values(p.grad));
        before.push_back(values(p.value));
      }
      const auto [ref_norm, ref_clip] = ref.update(grads, lr, grad_scale);
      const OptimizerStepStats st = opt.step(ctx, lr, grad_scale);
      EXPECT_NEAR(st.grad_norm, ref_norm, 1e-9 * ref_norm);
      EXPECT_NEAR(st.clip_factor, ref_clip, 1e-9 * ref_clip);
      if (max_norm > 100) EXPECT_EQ(st.clip_factor, 1.0);
      else EXPECT_LT(st.clip_factor, 0.1);
      for (size_t i = 0; i < params.size(); ++i) {
        SCOPED_TRACE(params[i].name);
        const std::vector<double> got = values(params[i].value);
        EXPECT_TRUE(all_close(got, ref.p[i], {.atol = 1e-7, .rtol = 1e-5}));
        EXPECT_EQ(values(params[i].grad), grads[i]) << "the optimizer must not write the gradients";
        if (s != 0) continue;
        // Step 1 invariants, independent of the reference: a decayed param with ||p|| > 0 moves
        // by exactly lr ||p|| (the trust ratio); the others (no decay, or ||p|| = 0: ratio 1)
        // move by lr u, |u| = |g'| / (|g'| + eps) <= 1 at step 1.
        double dp_sq = 0, p_sq = 0, dp_max = 0;
        for (size_t e = 0; e < got.size(); ++e) {
          dp_sq += (got[e] - before[i][e]) * (got[e] - before[i][e]);
          p_sq += before[i][e] * before[i][e];
          dp_max = std::max(dp_max, std::fabs(got[e] - before[i][e]));
        }
        if (params[i].weight_decay && p_sq > 0) {
          EXPECT_NEAR(std::sqrt(dp_sq), lr * std::sqrt(p_sq), 1e-4 * lr * std::sqrt(p_sq));
        } else {
          EXPECT_LE(dp_max, lr * (1 + 1e-5));
          EXPECT_GT(dp_max, 0.5 * lr);
        }
      }
    }
  }
}

// ---- learning-rate schedules ---------------------------------------------------------------------

TEST(Schedule, PolyIsDlePolyWarmUp) {
  // DLE: p = last_epoch / total with last_epoch = updates done + 1; warmup 0.1 of 100 updates.
  ScheduleConfig s{.kind = ScheduleConfig::Kind::poly, .warmup = 0.1, .total_steps = 100, .degree = 0.5};
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 0), 0.1);            // p = 0.01: 0.01 / 0.1
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 8), 0.9);            // p = 0.09, last warmup update
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 9), std::sqrt(0.9)); // p = 0.1 = warmup: decay branch
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 49), std::sqrt(0.5));// p = 0.5
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 98), 0.1);           // p = 0.99: sqrt(0.01)
  EXPECT_EQ(lr_multiplier(s, 99), 0.0);                  // p = 1
  EXPECT_EQ(lr_multiplier(s, 150), 0.0);                 // past the end: 0, not NaN
  s.degree = 1.0;
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 49), 0.5);
  s.warmup = 0.0;
  EXPECT_DOUBLE_EQ(lr_multiplier(s, 0), 0.99);
}

TEST(Schedule, LinearCosineConstantAreHfSchedules) {
  using K = ScheduleConfig::Kind;
  // HF: warmup steps W = ceil(0.1 * 100) = 10; update k (0-based): k < W: k / W.
  for (K kind : {K::linear, K::cosine, K::constant}) {
    ScheduleConfig s{.kind = kind, .warmup = 0.1, .total_steps = 100};
    SCOPED_TRACE(int(kind));
    EXPECT_EQ(lr_multiplier(s, 0), 0.0);
    EXPECT_DOUBLE_EQ(lr_multiplier(s, 5), 0.5);
    EXPECT_DOUBLE_EQ(lr_multiplier(s, 9), 0.9);
    EXPECT_DOUBLE_EQ(lr_multiplier(s, 10), 1.0);  // end of warmup: the full lr
  }
  ScheduleConfig lin{.kind = K::linear, .warmup = 0.1, .total_steps = 100};
  EXPECT_DOUBLE_EQ(lr_multiplier(lin, 55), 0.5);         // (100 - 55) / 90
  EXPECT_DOUBLE_EQ(lr_multiplier(lin, 99), 1.0 / 90.0);
  EXPECT_EQ(lr_multiplier(lin, 100), 0.0);
  EXPECT_EQ(lr_multiplier(lin, 130), 0.0);
  ScheduleConfig cos{.kind = K::cosine, .warmup = 0.1, .total_steps = 100};
  EXPECT_NEAR(lr_multiplier(cos, 55), 0.5, 1e-15);       // progress (55 - 10) / 90 = 0.5
  EXPECT_DOUBLE_EQ(lr_multiplier(cos, 99), 0.5 * (1 + std::cos(std::numbers::pi * 89.0 / 90.0)));
  EXPECT_NEAR(lr_multiplier(cos, 100), 0.0, 1e-15);
  EXPECT_NEAR(lr_multiplier(cos, 170), 0.0, 1e-15);      // stays at 0 past the end
  // VideoMAE cosine_scheduler with min_lr = 0.01 lr: final + 0.5 (base - final)(1 + cos)
  ScheduleConfig vm{.kind = K::cosine, .warmup = 0.1, .total_steps = 100, .min_ratio = 0.01};
  EXPECT_NEAR(lr_multiplier(vm, 55), 0.01 + 0.99 * 0.5, 1e-15);
  EXPECT_NEAR(lr_multiplier(vm, 100), 0.01, 1e-15);
  EXPECT_DOUBLE_EQ(lr_multiplier(vm, 5), 0.5);  // warmup from 0 as before
  ScheduleConfig con{.kind = K::constant, .warmup = 0.1, .total_steps = 100};
  EXPECT_EQ(lr_multiplier(con, 55), 1.0);
  EXPECT_EQ(lr_multiplier(con, 1000), 1.0);
  // A fractional warmup rounds up like the HF Trainer: ceil(0.015 * 100) = 2.
  ScheduleConfig frac{.kind = K::linear, .warmup = 0.015, .total_steps = 100};
  EXPECT_DOUBLE_EQ(lr_multiplier(frac, 1), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(frac, 2), 1.0);
  ScheduleConfig none{.kind = K::linear, .warmup = 0.0, .total_steps = 100};
  EXPECT_EQ(lr_multiplier(none, 0), 1.0);
}

TEST(Schedule, RejectsBadConfigs) {
  ScheduleConfig s{.kind = ScheduleConfig::Kind::poly, .warmup = 0.1, .total_steps = 0};
  EXPECT_NE(error_of([&] { lr_multiplier(s, 0); }).find("total_steps"), std::string::npos);
  s.total_steps = 10;
  EXPECT_NE(error_of([&] { lr_multiplier(s, -1); }).find("step must be >= 0"), std::string::npos);
  s.warmup = 1.5;
  EXPECT_NE(error_of([&] { lr_multiplier(s, 0); }).find("warmup"), std::string::npos);
  s.warmup = 0.1;
  s.min_ratio = 2.0;
  EXPECT_NE(error_of([&] { lr_multiplier(s, 0); }).find("min_ratio"), std::string::npos);
}

// ---- state save / load, guards ------------------------------------------------------------------

std::vector<Param> copy_params(const std::vector<Param>& src) {
  std::vector<Param> out;
  for (const Param& p : src) {
    Param c = p;
    c.value = p.value.contiguous();
    c.grad = Tensor::zeros(p.grad.shape(), DType::f32);
    out.push_back(std::move(c));
  }
  return out;
}

TEST(OptimizerState, ResumedOptimizerTakesBitIdenticalSteps) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lamb}) {
    SCOPED_TRACE(kind == OptimizerKind::adamw ? "adamw" : "lamb");
    OptimizerConfig oc;
    oc.kind = kind;
    oc.max_grad_norm = 1.0f;
    std::vector<Param> a = make_params(rng);
    Optimizer opt_a(oc, a);
    auto fill_grads = [&](std::vector<std::vector<Param>*> models) {
      for (size_t i = 0; i < a.size(); ++i) {
        rng.fill(a[i].grad.data<float>(), a[i].grad.numel(), Fill::normal);
        for (std::vector<Param>* m : models) (*m)[i].grad.copy_from(a[i].grad);
      }
    };
    for (int s = 0; s < 3; ++s) {
      fill_grads({});
      opt_a.step(ctx, 0.01f, 0.5f);
    }
    const OptimizerState saved = opt_a.state();
    ASSERT_EQ(saved.step, 3);
    ASSERT_EQ(saved.tensors.size(), 2 * a.size());
    EXPECT_EQ(saved.tensors[0].first, a[0].name + ".exp_avg");
    EXPECT_EQ(saved.tensors[1].first, a[0].name + ".exp_avg_sq");
    const Tensor saved_m0 = saved.tensors[0].second.contiguous();

    std::vector<Param> b = copy_params(a), c = copy_params(a);  // as restored from a checkpoint
    Optimizer opt_b(oc, b), opt_c(oc, c);                     // c: fresh state (must diverge)
    opt_b.load_state(saved);
    EXPECT_EQ(opt_b.step_count(), 3);
    for (int s = 0; s < 2; ++s) {
      fill_grads({&b, &c});
      opt_a.step(ctx, 0.01f, 0.5f);
      opt_b.step(ctx, 0.01f, 0.5f);
      opt_c.step(ctx, 0.01f, 0.5f);
    }
    bool fresh_differs = false;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(same_bits(a[i].value, b[i].value)) << a[i].name;
      fresh_differs |= !same_bits(a[i].value, c[i].value);
    }
    EXPECT_TRUE(fresh_differs) << "an optimizer without the saved state should take other steps";
    const OptimizerState sa = opt_a.state(), sb = opt_b.state();
    for (size_t i = 0; i < sa.tensors.size(); ++i) EXPECT_TRUE(same_bits(sa.tensors[i].second, sb.tensors[i].second));
    EXPECT_TRUE(same_bits(saved.tensors[0].second, saved_m0)) << "state() must return copies";
    EXPECT_FALSE(same_bits(sa.tensors[0].second, saved_m0));
  }
}

TEST(OptimizerState, LoadStateNamesMissingAndMisShapedTensors) {
  TestRng rng;
  std::vector<Param> params = make_params(rng);
  Optimizer opt(OptimizerConfig{}, params);
  const OptimizerState good = opt.state();
  OptimizerState missing = good;
  missing.tensors.erase(missing.tensors.begin() + 1);
  missing.step = 7;
  std::string e = error_of([&] { opt.load_state(missing); });
  EXPECT_NE(e.find("missing tensor 'layer0.weight.exp_avg_sq'"), std::string::npos) << e;
  OptimizerState shaped = good;
  shaped.tensors[2].second = Tensor::zeros({34}, DType::f32);
  shaped.step = 7;
  e = error_of([&] { opt.load_state(shaped); });
  EXPECT_NE(e.find("'layer1.bias.exp_avg' is f32[34]"), std::string::npos) << e;
  EXPECT_NE(e.find("[33]"), std::string::npos) << e;
  OptimizerState extra = good;
  extra.tensors.emplace_back("ghost.exp_avg", Tensor::zeros({1}, DType::f32));
  e = error_of([&] { opt.load_state(extra); });
  EXPECT_NE(e.find("'ghost.exp_avg' matches no param"), std::string::npos) << e;
  EXPECT_EQ(opt.step_count(), 0) << "a failed load must leave the optimizer unchanged";
  OptimizerState later = good;
  later.step = 7;
  opt.load_state(later);
  EXPECT_EQ(opt.step_count(), 7);
}

TEST(Optimizer, NonFiniteGradientNormLeavesEverythingUnchanged) {
  TestRng rng;
  Context ctx({.num_threads = 1});
  for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lamb}) {
    std::vector<Param> params = make_params(rng);
    OptimizerConfig oc;
    oc.kind = kind;
    Optimizer opt(oc, params);
    params[1].grad.data<float>()[3] = std::nanf("");
    const std::vector<double> before = values(params[0].value);
    const std::string e = error_of([&] { opt.step(ctx, 0.01f); });
    EXPECT_NE(e.find("gradient norm is nan"), std::string::npos) << e;
    EXPECT_EQ(values(params[0].value), before);
    EXPECT_EQ(opt.step_count(), 0);
  }
}

TEST(Optimizer, RejectsMismatchedParams) {
  std::vector<Param> params(1);
  params[0].name = "x.weight";
  params[0].value = Tensor::zeros({3, 4}, DType::f32);
  params[0].grad = Tensor::zeros({4, 3}, DType::f32);
  const std::string e = error_of([&] { Optimizer opt(OptimizerConfig{}, params); });
  EXPECT_NE(e.find("'x.weight' grad f32[4,3]"), std::string::npos) << e;
  params[0].grad = Tensor::zeros({3, 4}, DType::f32);
  params.push_back(params[0]);
  EXPECT_NE(error_of([&] { Optimizer opt(OptimizerConfig{}, params); }).find("two params are named 'x.weight'"),
            std::string::npos);
}

// ---- FLOP count -------------------------------------------------------------------------------------

// 2 M N K for an [M, K] x [K, N] product, `count` times.
struct Gemm {
  double M, N, K, count = 1;
  double flops() const { return 2 * M * N * K * count; }
};

TEST(BertTrainFlops, MatchesHandCountForBertBase) {
  // BERT-base, batch 8 x seq 128 (1024 tokens), 20 masked per sequence (160 rows), listing every
  // matmul of the forward pass; training = 3 x forward.
  const double tokens = 8 * 128, heads = 12, seqs = 8;
  const std::vector<Gemm> layer = {
      {tokens, 768, 768}, {tokens, 768, 768}, {tokens, 768, 768},  // Q, K, V
      {tokens, 768, 768},                                          // attention output
      {tokens, 3072, 768},                                         // FFN up
      {tokens, 768, 3072},                                         // FFN down
      {128, 128, 64, heads * seqs},                                // scores Q K^T per head
      {128, 64, 128, heads * seqs},                                // context P V per head
  };
  const std::vector<Gemm> heads_gemms = {
      {8, 768, 768},       // pooler
      {8, 2, 768},         // NSP classifier
      {160, 768, 768},     // MLM transform
      {160, 30522, 768},   // MLM decoder
  };
  double forward = 0;
  for (int l = 0; l < 12; ++l)
    for (const Gemm& g : layer) forward += g.flops();
  for (const Gemm& g : heads_gemms) forward += g.flops();
  const double hand = 3 * forward;
  EXPECT_EQ(hand, 559431917568.0);  // the same count done separately in Python
  const std::vector<int64_t> lens(8, 128);
  EXPECT_EQ(bert_train_flops(BertConfig::base(), lens, 160), hand);
}

TEST(BertTrainFlops, VariableLengthsCountRealTokensOnly) {
  // A tiny config, sequences of 5 and 17 tokens, 3 masked rows.
  BertConfig c;
  c.hidden_size = 8, c.num_attention_heads = 2, c.intermediate_size = 32, c.num_hidden_layers = 2;
  c.vocab_size = 50;
  double forward = 0;
  for (double s : {5.0, 17.0}) {
    const std::vector<Gemm> per_seq = {{s, 24, 8}, {s, 8, 8}, {s, 32, 8}, {s, 8, 32},
                                       {s, s, 4, 2}, {s, 4, s, 2}};
    for (const Gemm& g : per_seq) forward += 2 * g.flops();  // 2 layers
  }
  forward += Gemm{2, 8, 8}.flops() + Gemm{2, 2, 8}.flops() + Gemm{3, 8, 8}.flops() + Gemm{3, 50, 8}.flops();
  EXPECT_DOUBLE_EQ(bert_train_flops(c, {5, 17}, 3), 3 * forward);
  EXPECT_NE(error_of([&] { bert_train_flops(c, {5, 0}, 3); }).find("seq_lens[1] = 0"), std::string::npos);
  EXPECT_NE(error_of([&] { bert_train_flops(c, {5}, 6); }).find("masked_positions 6"), std::string::npos);
}

// ---- batched norms and the device-side LAMB trust ratio (no per-param host syncs on CUDA) ----

TEST(OptimOps, SumSquaresManyEqualsPerTensorSumSquaresBitwise) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx1({.num_threads = 1}), ctx3({.num_threads = 3});
  const std::vector<Shape> shapes = {{1}, {7}, {0}, {8193}, {301, 233}, {256}, {3, 0}};
  std::vector<Tensor> xs;
  std::vector<const Tensor*> ptrs;
  for (const Shape& s : shapes) xs.push_back(random_tensor(rng, s, Fill::outlier));
  for (const Tensor& x : xs) ptrs.push_back(&x);
  for (Context* ctx : {&ctx1, &ctx3}) {
    const std::vector<double> host = ops::sum_squares_many(*ctx, ptrs);
    Tensor out = Tensor::empty({int64_t(xs.size())}, DType::f64);
    std::fill(out.data<double>(), out.data<double>() + out.numel(), -1.0);
    ops::sum_squares_many(*ctx, ptrs, out);
    ASSERT_EQ(host.size(), xs.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      SCOPED_TRACE("tensor " + std::to_string(i) + " " + xs[i].describe());
      const double want = ops::sum_squares(ctx1, xs[i]);
      EXPECT_EQ(std::memcmp(&host[i], &want, sizeof want), 0) << host[i] << " vs " << want;
      EXPECT_EQ(std::memcmp(&out.data<double>()[i], &want, sizeof want), 0) << out.data<double>()[i];
      double ref = 0;  // float64, index order
      for (double v : values(xs[i])) ref += v * v;
      EXPECT_NEAR(host[i], ref, 1e-12 * ref);
    }
  }
  EXPECT_TRUE(ops::sum_squares_many(ctx1, {}).empty());
  Tensor none = Tensor::empty({0}, DType::f64);
  ops::sum_squares_many(ctx1, {}, none);
  // Bad operands name what is wrong.
  Tensor f32_out = Tensor::empty({int64_t(xs.size())}, DType::f32);
  EXPECT_NE(error_of([&] { ops::sum_squares_many(ctx1, ptrs, f32_out); }).find("f64"), std::string::npos);
  Tensor short_out = Tensor::empty({2}, DType::f64);
  EXPECT_NE(error_of([&] { ops::sum_squares_many(ctx1, ptrs, short_out); }).find("f64[2]"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::sum_squares_many(ctx1, {&xs[0], nullptr}); }).find("xs[1] is null"),
            std::string::npos);
  Tensor wide = Tensor::zeros({4, 6}, DType::f32), strided = wide.slice(1, 0, 3);
  EXPECT_NE(error_of([&] { ops::sum_squares_many(ctx1, {&xs[0], &strided}); }).find("contiguous"),
            std::string::npos);
}

TEST(OptimOps, LambApplyIsTheTrustRatioAxpyBitwise) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const float lr = 0.013f;
  auto f64_scalar = [](double x) {  // f64 [1]
    Tensor t = Tensor::empty({1}, DType::f64);
    t.data<double>()[0] = x;
    return t;
  };
  for (int64_t n : kSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Tensor p0 = random_tensor(rng, {n}, Fill::normal), u = random_tensor(rng, {n}, Fill::normal, 0.1);
    Tensor param_sq = f64_scalar(ops::sum_squares(ctx, p0));
    Tensor update_sq = f64_scalar(ops::sum_squares(ctx, u));
    Tensor p = p0.contiguous();
    ops::lamb_apply(ctx, lr, param_sq, update_sq, u, p);
    // The per-param sequence the optimizer used before: double norms, ratio, one f32 rounding, axpy.
    Tensor want = p0.contiguous();
    const double ratio = std::sqrt(ops::sum_squares(ctx, p0)) / std::sqrt(ops::sum_squares(ctx, u));
    ops::axpy(ctx, float(-double(lr) * ratio), u, want);
    EXPECT_TRUE(same_bits(p, want));
    // Independent of the ops: the step has length lr ||p0|| (float64).
    double dp_sq = 0, p_sq = 0;
    const std::vector<double> got = values(p), before = values(p0);
    for (size_t i = 0; i < got.size(); ++i) dp_sq += (got[i] - before[i]) * (got[i] - before[i]), p_sq += before[i] * before[i];
    EXPECT_NEAR(std::sqrt(dp_sq), lr * std::sqrt(p_sq), 1e-4 * lr * std::sqrt(p_sq));
    // ||p|| = 0: ratio 1, i.e. axpy with -lr.
    Tensor zero_sq = f64_scalar(0.0);
    Tensor q = p0.contiguous(), q_want = p0.contiguous();
    ops::lamb_apply(ctx, lr, zero_sq, update_sq, u, q);
    ops::axpy(ctx, -lr, u, q_want);
    EXPECT_TRUE(same_bits(q, q_want));
  }
  Tensor p = Tensor::zeros({5}, DType::f32), u = Tensor::zeros({5}, DType::f32);
  Tensor sq = f64_scalar(1.0), bad = Tensor::zeros({2}, DType::f64);
  EXPECT_NE(error_of([&] { ops::lamb_apply(ctx, lr, bad, sq, u, p); }).find("param_sq"), std::string::npos);
  EXPECT_NE(error_of([&] { ops::lamb_apply(ctx, lr, sq, sq, p, p); }).find("overlaps"), std::string::npos);
}

// The LAMB step, on the batched norms and lamb_apply, takes the bits of the per-param sequence
// it replaced (sum_squares per grad; per param lamb_moments, sum_squares of p and u, axpy).
TEST(Lamb, StepIsBitwiseThePerParamSequence) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  std::vector<Param> params = make_params(rng);
  params[2].value.copy_from(Tensor::zeros(params[2].value.shape(), DType::f32));  // ||p|| = 0: ratio 1
  std::vector<Param> mirror = copy_params(params);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::lamb;
  oc.weight_decay = 0.01f, oc.max_grad_norm = 1.0f;
  Optimizer opt(oc, params);
  std::vector<Tensor> m, v;
  for (const Param& p : mirror) {
    m.push_back(Tensor::zeros(p.value.shape(), DType::f32));
    v.push_back(Tensor::zeros(p.value.shape(), DType::f32));
  }
  const float lr = 0.02f, grad_scale = 0.5f;
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (size_t i = 0; i < params.size(); ++i) {
      rng.fill(params[i].grad.data<float>(), params[i].grad.numel(), Fill::normal);
      mirror[i].grad.copy_from(params[i].grad);
    }
    const OptimizerStepStats st = opt.step(ctx, lr, grad_scale);
    double sum_sq = 0;
    for (const Param& p : mirror) sum_sq += ops::sum_squares(ctx, p.grad);
    const double norm = std::sqrt(sum_sq) * double(grad_scale);
    const double clip = norm > oc.max_grad_norm ? oc.max_grad_norm / norm : 1.0;
    EXPECT_EQ(st.grad_norm, norm);
    EXPECT_EQ(st.clip_factor, clip);
    for (size_t i = 0; i < mirror.size(); ++i) {
      Param& p = mirror[i];
      ops::AdamArgs args;
      args.beta1 = oc.beta1, args.beta2 = oc.beta2, args.eps = oc.eps, args.step = step;
      args.weight_decay = p.weight_decay ? oc.weight_decay : 0.0f;
      args.grad_scale = float(double(grad_scale) * clip);
      Tensor u = Tensor::empty(p.value.shape(), DType::f32);
      ops::lamb_moments(ctx, p.value, p.grad, m[i], v[i], u, args);
      double ratio = 1.0;
      if (args.weight_decay != 0.0f) {
        const double pn = std::sqrt(ops::sum_squares(ctx, p.value)), un = std::sqrt(ops::sum_squares(ctx, u));
        if (pn > 0.0 && un > 0.0) ratio = pn / un;
      }
      ops::axpy(ctx, float(-double(lr) * ratio), u, p.value);
      EXPECT_TRUE(same_bits(params[i].value, p.value)) << p.name;
    }
  }
}

}  // namespace

namespace {

/// Operands of the multi-tensor optimizer tests, one of each per size: p, g, m, v from N(0, 1)
/// scaled by 1, 0.1, 0.01 and 0.001 (v by its absolute value), drawn in that order from `seed`.
struct AdamOperands {
  std::vector<Tensor> p, g, m, v;
};
AdamOperands random_adam_operands(uint64_t seed, const std::vector<int64_t>& sizes) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](int64_t n, float scale, bool positive = false) {
    Tensor t = Tensor::empty({n}, DType::f32);
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = positive ? std::fabs(scale * nd(gen)) : scale * nd(gen);
    return t;
  };
  AdamOperands o;
  for (int64_t n : sizes) {
    o.p.push_back(rnd(n, 1)), o.g.push_back(rnd(n, 0.1f)), o.m.push_back(rnd(n, 0.01f));
    o.v.push_back(rnd(n, 0.001f, true));
  }
  return o;
}

/// Copies of ts with storage of their own.
std::vector<Tensor> copies_of(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.contiguous());
  return out;
}

}  // namespace

// The multi-tensor optimizer ops on the CPU (what the optimizer's step calls; CUDA runs them as
// one launch per 32 tensors, tests/cuda): item by item the one-tensor ops' bits, LAMB's stage 2
// with a null param_sq as the ratio-1 axpy, and a bad item named with its index.
TEST(Optimizer, MultiTensorOpsAreTheOneTensorOps) {
  Context ctx({.num_threads = 2});
  const std::vector<int64_t> sizes = {3, 0, 5000, 17};
  const AdamOperands ops_in = random_adam_operands(7, sizes);
  const std::vector<Tensor>&p = ops_in.p, &g = ops_in.g, &m = ops_in.m, &v = ops_in.v;
  const auto& copies = copies_of;
  auto same = [](const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].numel() && std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
    return true;
  };
  ops::AdamArgs args{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f, .step = 2, .grad_scale = 0.7f};
  std::vector<Tensor> p1 = copies(p), m1 = copies(m), v1 = copies(v), p2 = copies(p), m2 = copies(m), v2 = copies(v);
  std::vector<ops::AdamItem> items;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ops::adamw_update(ctx, p1[i], g[i], m1[i], v1[i], 1e-3f * float(i + 1), args);
    items.push_back({&p2[i], &g[i], &m2[i], &v2[i], nullptr, 1e-3f * float(i + 1), args});
  }
  ops::adamw_update_many(ctx, items);
  EXPECT_TRUE(same(p1, p2) && same(m1, m2) && same(v1, v2));

  std::vector<Tensor> u = copies(p), p3 = copies(p), p4 = copies(p);
  std::vector<ops::LambApplyItem> apply;
  Tensor sq = Tensor::empty({2}, DType::f64);
  sq.data<double>()[0] = 4.0, sq.data<double>()[1] = 1.0;  // ratio 2
  const Tensor param_sq = sq.slice(0, 0, 1), update_sq = sq.slice(0, 1, 2);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ops::LambApplyItem a;
    a.lr = 0.01f, a.update = &u[i], a.p = &p4[i];
    if (i % 2 == 0) {
      a.param_sq = &param_sq, a.update_sq = &update_sq;
      ops::lamb_apply(ctx, 0.01f, param_sq, update_sq, u[i], p3[i]);
    } else {
      ops::axpy(ctx, float(-double(0.01f)), u[i], p3[i]);
    }
    apply.push_back(a);
  }
  ops::lamb_apply_many(ctx, apply);
  EXPECT_TRUE(same(p3, p4));
  EXPECT_FALSE(same(p3, p)) << "the updates changed nothing";

  std::vector<ops::AdamItem> bad = items;
  bad[2].m = &m2[0];  // m of another shape
  const std::string e = unmask::test::error_of([&] { ops::adamw_update_many(ctx, bad); });
  EXPECT_NE(e.find("adamw_update_many"), std::string::npos) << e;
}

// ops::lamb_update_many on the CPU (CUDA fuses it into two passes, tests/cuda): item by item the
// sequence it stands for, bit for bit: ||p||^2, lamb_moments into u, ||u||^2, lamb_apply (with
// weight decay; a zero p gives ratio 1), or lamb_moments and the ratio-1 axpy (without); an
// empty item; and a bad item named by the op.
TEST(Optimizer, LambUpdateManyIsTheOpSequence) {
  Context ctx({.num_threads = 2});
  const std::vector<int64_t> sizes = {3, 0, 5000, 17, 9000};
  AdamOperands ops_in = random_adam_operands(11, sizes);
  std::vector<Tensor>&p = ops_in.p, &g = ops_in.g, &m = ops_in.m, &v = ops_in.v;
  std::fill(p[3].data<float>(), p[3].data<float>() + p[3].numel(), 0.0f);  // ||p|| = 0 with weight decay: ratio 1
  const auto& copies = copies_of;
  std::vector<Tensor> p1 = copies(p), m1 = copies(m), v1 = copies(v), p2 = copies(p), m2 = copies(m), v2 = copies(v);
  std::vector<ops::AdamItem> items;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ops::AdamArgs args{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = i == 2 ? 0.0f : 0.01f,
                       .step = 3, .grad_scale = 0.7f};
    const float lr = 1e-3f * float(i + 1);
    items.push_back({&p2[i], &g[i], &m2[i], &v2[i], nullptr, lr, args});
    if (sizes[i] == 0) continue;
    Tensor u = Tensor::empty({sizes[i]}, DType::f32), sq = Tensor::empty({2}, DType::f64);
    sq.data<double>()[0] = ops::sum_squares(ctx, p1[i]);
    ops::lamb_moments(ctx, p1[i], g[i], m1[i], v1[i], u, args);
    sq.data<double>()[1] = ops::sum_squares(ctx, u);
    if (args.weight_decay != 0.0f)
      ops::lamb_apply(ctx, lr, sq.slice(0, 0, 1), sq.slice(0, 1, 2), u, p1[i]);
    else
      ops::axpy(ctx, float(-double(lr)), u, p1[i]);
  }
  ops::lamb_update_many(ctx, items);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) continue;
    EXPECT_EQ(std::memcmp(p1[i].raw(), p2[i].raw(), p1[i].nbytes()), 0) << "p of item " << i;
    EXPECT_EQ(std::memcmp(m1[i].raw(), m2[i].raw(), m1[i].nbytes()), 0) << "m of item " << i;
    EXPECT_EQ(std::memcmp(v1[i].raw(), v2[i].raw(), v1[i].nbytes()), 0) << "v of item " << i;
    EXPECT_NE(std::memcmp(p2[i].raw(), p[i].raw(), p[i].nbytes()), 0) << "item " << i << " did not move";
  }
  std::vector<ops::AdamItem> bad = items;
  bad[4].m = &p2[4];  // m is p
  const std::string e = unmask::test::error_of([&] { ops::lamb_update_many(ctx, bad); });
  EXPECT_NE(e.find("lamb_update_many"), std::string::npos) << e;
}
