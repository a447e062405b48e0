// tests/test_window_attention.cc: windowed attention with an additive bias and mask
// (ops::window_attention / window_attention_backward, the Swin / Video Swin / BEVT core) against
// the float64 oracle (ref/window_attention_ref.h) on Swin's shapes (7x7 windows with four
// shifted-window masks, Video Swin's 8x7x7 = 392 tokens, head size 32, rows as column slices of
// a fused qkv buffer), the oracle's backward against central finite differences, the same bits
// for 1 and 2 threads, Video Swin's own WindowAttention3D in PyTorch (autograd through the
// relative-position table and the -100 shift mask of a rolled volume), and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "nn/window_geometry.h"
#include "op_test_util.h"
#include "python_reference.h"
#include "ops/ops.h"
#include "ref/window_attention_ref.h"
#include "temp_dir.h"
#include "unmask/context.h"
#include "unmask/error.h"

using namespace unmask;
using namespace unmask::test;

namespace {

struct Case {
  const char* name;
  int64_t NH, HS, N, W, M;  // heads, head size, tokens a window, windows, masks (0: none)
  bool bias = true;
};

struct Inputs {
  Tensor qkv, q, k, v, bias, mask, dout;
};

Tensor square(int64_t a, int64_t N) { return Tensor::empty({a, N, N}, DType::f32); }

// Swin-like masks: each of the M windows splits its tokens into up to 4 regions (0 inside, -100 across).
Tensor region_masks(TestRng& rng, int64_t M, int64_t N) {
  Tensor m = square(M, N);
  for (int64_t w = 0; w < M; ++w) {
    std::vector<int64_t> label(static_cast<size_t>(N));
    for (auto& l : label) l = rng.integer(0, 3);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j) m.data<float>()[(w * N + i) * N + j] = label[size_t(i)] == label[size_t(j)] ? 0.0f : -100.0f;
  }
  return m;
}

Inputs make_inputs(TestRng& rng, const Case& c) {
  const int64_t R = c.W * c.N, C = c.NH * c.HS;
  Inputs in;
  in.qkv = Tensor::empty({R, 3 * C}, DType::f32);
  rng.fill(in.qkv.data<float>(), in.qkv.numel(), Fill::normal);
  in.q = in.qkv.slice(1, 0, C), in.k = in.qkv.slice(1, C, 2 * C), in.v = in.qkv.slice(1, 2 * C, 3 * C);
  if (c.bias) {
    in.bias = square(c.NH, c.N);
    rng.fill(in.bias.data<float>(), in.bias.numel(), Fill::normal);
  }
  if (c.M) in.mask = region_masks(rng, c.M, c.N);
  in.dout = Tensor::empty({R, C}, DType::f32);
  rng.fill(in.dout.data<float>(), in.dout.numel(), Fill::normal);
  return in;
}

ops::WindowAttentionArgs args_of(const Case& c, const Inputs& in) {
  ops::WindowAttentionArgs a;
  a.num_heads = int(c.NH);
  a.window = c.N;
  a.scale = float(1.0 / std::sqrt(double(c.HS)));
  a.bias = c.bias ? &in.bias : nullptr;
  a.mask = c.M ? &in.mask : nullptr;
  return a;
}

std::vector<double> dense(const Tensor& t) {
  if (t.ndim() == 2) return to_f64(t);
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.data<float>()[i];
  return v;
}

struct Outputs {
  Tensor out, lse, dqkv, dbias;
};

// The op's forward and backward, the gradients into a fused [R, 3C] buffer, dbias accumulated
// onto `dbias0` (a nonzero start catches an overwrite).
Outputs run_op(Context& ctx, const Case& c, const Inputs& in, const Tensor& dbias0) {
  const int64_t R = c.W * c.N, C = c.NH * c.HS;
  const ops::WindowAttentionArgs a = args_of(c, in);
  Outputs o;
  o.out = Tensor::empty({R, C}, DType::f32);
  o.lse = Tensor::empty({c.NH, R}, DType::f32);
  ops::window_attention(ctx, in.q, in.k, in.v, o.out, a, &o.lse);
  o.dqkv = Tensor::empty({R, 3 * C}, DType::f32);
  Tensor dq = o.dqkv.slice(1, 0, C), dk = o.dqkv.slice(1, C, 2 * C), dv = o.dqkv.slice(1, 2 * C, 3 * C);
  o.dbias = square(c.NH, c.N);
  std::copy(dbias0.data<float>(), dbias0.data<float>() + dbias0.numel(), o.dbias.data<float>());
  ops::window_attention_backward(ctx, in.q, in.k, in.v, o.out, o.lse, in.dout, dq, dk, dv, &o.dbias, a);
  return o;
}

const Case kCases[] = {
    {"swin 7x7, 4 shift masks", 2, 32, 49, 8, 4},
    {"small, no mask", 3, 16, 24, 2, 0},
    {"no bias, 1 mask", 2, 8, 10, 3, 1, false},
    {"video swin 8x7x7", 1, 32, 392, 2, 2},
};

}  // namespace

TEST(WindowAttention, MatchesTheFloat64Oracle) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Inputs in = make_inputs(rng, c);
    Tensor dbias0 = square(c.NH, c.N);
    rng.fill(dbias0.data<float>(), dbias0.numel(), Fill::uniform);
    const Outputs o = run_op(ctx, c, in, dbias0);
    const int64_t R = c.W * c.N, C = c.NH * c.HS;
    const std::vector<double> q = to_f64(in.q), k = to_f64(in.k), v = to_f64(in.v), dout = to_f64(in.dout);
    std::vector<double> bias = c.bias ? dense(in.bias) : std::vector<double>(size_t(c.NH * c.N * c.N), 0.0);
    const std::vector<double> mask = c.M ? dense(in.mask) : std::vector<double>();
    ref::WindowLayout lay{c.NH, c.HS, c.N, c.W, c.M};
    const double scale = 1.0 / std::sqrt(double(c.HS));
    std::vector<double> out(size_t(R * C)), lse(size_t(c.NH * R));
    ref::window_attention_forward(q.data(), k.data(), v.data(), bias.data(), c.M ? mask.data() : nullptr, out.data(),
                                  lse.data(), lay, scale);
    EXPECT_TRUE(all_close(to_f64(o.out), out, reduction_tol(c.N))) << "out";
    EXPECT_TRUE(all_close(dense(o.lse), lse, reduction_tol(c.HS))) << "lse";
    std::vector<double> dq(size_t(R * C)), dk(size_t(R * C)), dv(size_t(R * C)), db(size_t(c.NH * c.N * c.N));
    ref::window_attention_backward(q.data(), k.data(), v.data(), bias.data(), c.M ? mask.data() : nullptr, dout.data(),
                                   dq.data(), dk.data(), dv.data(), db.data(), lay, scale);
    const Tol tol = reduction_tol(c.N * c.HS);
    EXPECT_TRUE(all_close(to_f64(o.dqkv.slice(1, 0, C)), dq, tol)) << "dq";
    EXPECT_TRUE(all_close(to_f64(o.dqkv.slice(1, C, 2 * C)), dk, tol)) << "dk";
    EXPECT_TRUE(all_close(to_f64(o.dqkv.slice(1, 2 * C, 3 * C)), dv, tol)) << "dv";
    const std::vector<double> d0 = dense(dbias0);
    for (size_t i = 0; i < db.size(); ++i) db[i] += d0[i];  // accumulated, not overwritten
    EXPECT_TRUE(all_close(dense(o.dbias), db, reduction_tol(c.W * c.HS))) << "dbias";
  }
}

// The oracle's backward against central differences of its forward (q, k, v, the bias) on a
// small case with two masks: the reference the kernels are held to is right.
TEST(WindowAttention, OracleBackwardMatchesFiniteDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const Case c{"fd", 2, 3, 5, 4, 2};
  const int64_t R = c.W * c.N, C = c.NH * c.HS;
  const Inputs in = make_inputs(rng, c);
  std::vector<double> q = to_f64(in.q), k = to_f64(in.k), v = to_f64(in.v), dout = to_f64(in.dout);
  std::vector<double> bias = dense(in.bias), mask = dense(in.mask);
  // soften the mask so that it does not flatten the probabilities' dependence on the scores
  for (double& m : mask) m *= 0.01;
  const ref::WindowLayout lay{c.NH, c.HS, c.N, c.W, c.M};
  const double scale = 0.7;
  auto loss = [&] {
    std::vector<double> out(size_t(R * C));
    ref::window_attention_forward(q.data(), k.data(), v.data(), bias.data(), mask.data(), out.data(), nullptr, lay, scale);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s;
  };
  std::vector<double> dq(size_t(R * C)), dk(size_t(R * C)), dv(size_t(R * C)), db(bias.size());
  ref::window_attention_backward(q.data(), k.data(), v.data(), bias.data(), mask.data(), dout.data(), dq.data(),
                                 dk.data(), dv.data(), db.data(), lay, scale);
  for (auto [x, g, name] : {std::tuple{&q, &dq, "q"}, std::tuple{&k, &dk, "k"}, std::tuple{&v, &dv, "v"},
                            std::tuple{&bias, &db, "bias"}}) {
    for (size_t i = 0; i < x->size(); ++i) {
      const double h = 1e-6, keep = (*x)[i];
      (*x)[i] = keep + h;
      const double up = loss();
      (*x)[i] = keep - h;
      const double down = loss();
      (*x)[i] = keep;
      EXPECT_NEAR((up - down) / (2 * h), (*g)[i], 1e-7 * (1 + std::fabs((*g)[i]))) << name << "[" << i << "]";
    }
  }
}

// The bias gradient is reduced in window order, the rest per (window, head): the same bits on one
// thread and on two.
TEST(WindowAttention, SameBitsForOneAndTwoThreads) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const Case& c = kCases[0];
  const Inputs in = make_inputs(rng, c);
  const Tensor zero = Tensor::zeros({c.NH, c.N, c.N}, DType::f32);
  Context one({.num_threads = 1}), two({.num_threads = 2});
  const Outputs a = run_op(one, c, in, zero), b = run_op(two, c, in, zero);
  EXPECT_EQ(dense(a.out), dense(b.out));
  EXPECT_EQ(dense(a.lse), dense(b.lse));
  EXPECT_EQ(to_f64(a.dqkv), to_f64(b.dqkv));
  EXPECT_EQ(dense(a.dbias), dense(b.dbias));
}

TEST(WindowAttention, BadArgumentsAreErrorsThatSayWhat) {
  Context ctx({.num_threads = 1});
  const Case c{"err", 2, 4, 6, 4, 2};
  TestRng rng;
  const Inputs in = make_inputs(rng, c);
  Tensor out = Tensor::empty({24, 8}, DType::f32);
  auto message = [&](ops::WindowAttentionArgs a) -> std::string {
    try {
      ops::window_attention(ctx, in.q, in.k, in.v, out, a);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  ops::WindowAttentionArgs a = args_of(c, in);
  EXPECT_EQ(message(a), "");
  a.window = 5;
  EXPECT_NE(message(a).find("divide the 24 rows"), std::string::npos) << message(a);
  a = args_of(c, in);
  a.num_heads = 3;
  EXPECT_NE(message(a).find("num_heads = 3"), std::string::npos) << message(a);
  a = args_of(c, in);
  const Tensor small_bias = square(2, 5);
  a.bias = &small_bias;
  EXPECT_NE(message(a).find("bias must be contiguous f32 [2, 6, 6]"), std::string::npos) << message(a);
  a = args_of(c, in);
  const Tensor three_masks = region_masks(rng, 3, 6);
  a.mask = &three_masks;
  EXPECT_NE(message(a).find("not a whole number of samples of 3"), std::string::npos) << message(a);
}

// Video Swin's WindowAttention3D in PyTorch (tests/python/window_attention_reference.py): a
// 4 x 14 x 14 volume rolled by (1, 3, 3), partitioned into 2 x 7 x 7 windows, the -100 masks of
// compute_mask, the relative-position index of a 2 x 7 x 7 window into a 3 x 13 x 13 table;
// float64 autograd gives out and the gradients of q, k, v and the table. Here the op runs on
// the script's partitioned q, k, v with the gathered bias, and the table gradient is dbias
// scattered back through the same index.
TEST(WindowAttention, MatchesVideoSwinInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  TempDir tmp;
  const std::string dir = tmp.path.string();
  ASSERT_EQ(run_python_reference("window_attention_reference.py", dir, dir), "");
  auto load = [&](const char* name) { return io::read_npy(dir + "/" + name + ".npy"); };
  const Tensor q = load("q"), k = load("k"), v = load("v"), mask = load("mask"), bias = load("bias"),
               index = load("index"), dout = load("dout");
  const int64_t R = q.size(0), C = q.size(1), NH = bias.size(0), N = bias.size(1);
  ops::WindowAttentionArgs a;
  a.num_heads = int(NH);
  a.window = N;
  a.scale = float(1.0 / std::sqrt(double(C / NH)));
  a.bias = &bias;
  a.mask = &mask;
  Context ctx({.num_threads = 2});
  Tensor out = Tensor::empty({R, C}, DType::f32), lse = Tensor::empty({NH, R}, DType::f32);
  ops::window_attention(ctx, q, k, v, out, a, &lse);
  Tensor dq = Tensor::empty({R, C}, DType::f32), dk = Tensor::empty({R, C}, DType::f32), dv = Tensor::empty({R, C}, DType::f32);
  Tensor dbias = Tensor::zeros({NH, N, N}, DType::f32);
  ops::window_attention_backward(ctx, q, k, v, out, lse, dout, dq, dk, dv, &dbias, a);
  const Tensor want_dtable = load("dtable");
  std::vector<double> dtable(size_t(want_dtable.numel()), 0.0);  // [T, NH]: scatter dbias through the index
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t ij = 0; ij < N * N; ++ij)
      dtable[size_t(index.data<int64_t>()[ij] * NH + h)] += dbias.data<float>()[h * N * N + ij];
  // The index maps of nn/window_geometry.h give the script's partition, masks and index.
  const train::WindowGeometry g = train::clipped_window({4, 14, 14}, {2, 7, 7}, {1, 3, 3});
  const std::vector<int32_t> rows = train::window_partition_rows(2, g);
  const Tensor want_rows = load("partition");
  ASSERT_EQ(int64_t(rows.size()), want_rows.numel());
  for (size_t r = 0; r < rows.size(); ++r) ASSERT_EQ(rows[r], want_rows.data<int64_t>()[r]) << "partition row " << r;
  const std::vector<int32_t> idx = train::relative_position_index({2, 7, 7}, N);
  for (int64_t i = 0; i < N * N; ++i) ASSERT_EQ(idx[size_t(i)], index.data<int64_t>()[i]) << "index " << i;
  EXPECT_EQ(dense(train::shift_region_masks(g)), dense(mask));
  const Tol tol{1e-4, 1e-4};
  EXPECT_TRUE(all_close(to_f64(out), dense(load("out")), tol)) << "out";
  EXPECT_TRUE(all_close(to_f64(dq), dense(load("dq")), tol)) << "dq";
  EXPECT_TRUE(all_close(to_f64(dk), dense(load("dk")), tol)) << "dk";
  EXPECT_TRUE(all_close(to_f64(dv), dense(load("dv")), tol)) << "dv";
  EXPECT_TRUE(all_close(dtable, dense(want_dtable), tol)) << "relative_position_bias_table gradient";
  std::printf("[ video swin ] %lld windows of %lld tokens, %lld heads against PyTorch autograd\n",
              (long long)(R / N), (long long)N, (long long)NH);
}

// BEVT's geometry (reference/bevt.md 2.3-2.5): 16 x 224 clips give 8 x 56 x 56 tokens, the
// temporal window 8 equals the depth so the shift (4, 3, 3) clips to (0, 3, 3); stage 4 (8 x 7 x 7)
// has no shift at all; the image stream's bias rows are the d = 0 plane of the 8 x 7 x 7 table
// (1183 .. 1351); a volume that is not whole windows is an error.
TEST(WindowGeometry, BevtShapes) {
  const train::WindowGeometry s1 = train::clipped_window({8, 56, 56}, {8, 7, 7}, {4, 3, 3});
  EXPECT_EQ(s1.window, (std::array<int64_t, 3>{8, 7, 7}));
  EXPECT_EQ(s1.shift, (std::array<int64_t, 3>{0, 3, 3}));
  EXPECT_EQ(s1.windows(), 64);
  const train::WindowGeometry s4 = train::clipped_window({8, 7, 7}, {8, 7, 7}, {4, 3, 3});
  EXPECT_FALSE(s4.shifted());
  const std::vector<int32_t> image = train::relative_position_index({8, 7, 7}, 49);
  EXPECT_EQ(*std::min_element(image.begin(), image.end()), 1183);
  EXPECT_EQ(*std::max_element(image.begin(), image.end()), 1351);
  EXPECT_EQ(image[0], 7 * 169 + 6 * 13 + 6);  // a token with itself: the table's centre of the d = 0 plane
  // the image stream's stage-4 masks: one 7 x 7 window, shift 3: four regions of 16, 12, 12 and 9
  const Tensor m = train::shift_region_masks(train::WindowGeometry{{1, 7, 7}, {1, 7, 7}, {0, 3, 3}});
  ASSERT_EQ(m.size(0), 1);
  std::vector<int64_t> region_sizes;
  for (int64_t i = 0; i < 49; ++i) {
    int64_t same = 0;
    for (int64_t j = 0; j < 49; ++j) same += m.data<float>()[i * 49 + j] == 0.0f;
    region_sizes.push_back(same);
  }
  std::sort(region_sizes.begin(), region_sizes.end());
  EXPECT_EQ(region_sizes.front(), 9);
  EXPECT_EQ(region_sizes.back(), 16);
  EXPECT_THROW(train::clipped_window({8, 50, 56}, {8, 7, 7}, {4, 3, 3}), Error);
}
