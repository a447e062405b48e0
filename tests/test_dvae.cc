// tests/test_dvae.cc: ops::conv2d against the float64 oracle (stride 1, 2 and 3, padding wider than
// the image's edge allows, 1 x 1 at stride 1 and 2, odd sizes)
// and PyTorch's F.conv2d; the DALL-E dVAE encoder (models/bevt/dvae.h) against openai/DALL-E's
// encoder written in PyTorch (tests/python/dalle_encoder_reference.py) on a small configuration
// with DALL-E's names: logits, and the token ids wherever the top two logits are apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "io/npy.h"
#include "models/bevt/dvae.h"
#include "op_test_util.h"
#include "python_reference.h"
#include "ops/ops.h"
#include "ref/conv_ref.h"
#include "temp_dir.h"
#include "unmask/context.h"
#include "unmask/error.h"

using namespace unmask;
using namespace unmask::test;

namespace {

Tensor random_tensor(std::mt19937_64& gen, const Shape& shape, float scale = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = n(gen);
  return t;
}

std::vector<double> flat(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.data<float>()[i];
  return v;
}

}  // namespace

TEST(Conv2d, MatchesTheFloat64Oracle) {
  std::mt19937_64 gen(test_seed());
  Context ctx({.num_threads = 2});
  struct Case {
    int64_t B, Cin, H, W, Cout, k, stride, pad;
  };
  for (const Case c : {Case{2, 3, 13, 11, 5, 7, 1, 3}, Case{1, 4, 9, 10, 6, 3, 2, 1}, Case{3, 8, 6, 6, 4, 1, 1, 0},
                       Case{1, 2, 3, 4, 3, 5, 3, 2}, Case{2, 3, 7, 5, 2, 1, 2, 0}, Case{1, 2, 2, 9, 2, 5, 1, 2}, Case{1, 2, 9, 2, 2, 5, 1, 2}}) {
    const Tensor x = random_tensor(gen, {c.B, c.Cin, c.H, c.W}), w = random_tensor(gen, {c.Cout, c.Cin, c.k, c.k}, 0.3f),
                 b = random_tensor(gen, {c.Cout});
    const int64_t OH = (c.H + 2 * c.pad - c.k) / c.stride + 1, OW = (c.W + 2 * c.pad - c.k) / c.stride + 1;
    Tensor y = Tensor::empty({c.B, c.Cout, OH, OW}, DType::f32);
    ops::Conv2dArgs a;
    a.stride = c.stride, a.padding = c.pad, a.bias = &b;
    ops::conv2d(ctx, x, w, y, a);
    std::vector<double> want(size_t(y.numel()));
    const std::vector<double> xd = flat(x), wd = flat(w), bd = flat(b);
    ref::conv2d(xd.data(), wd.data(), bd.data(), want.data(), c.B, c.Cin, c.H, c.W, c.Cout, c.k, c.stride, c.pad);
    EXPECT_TRUE(all_close(flat(y), want, reduction_tol(c.Cin * c.k * c.k))) << "k " << c.k << " stride " << c.stride;
  }
  // a wrong output shape is an error naming the expected one
  const Tensor x = random_tensor(gen, {1, 3, 8, 8}), w = random_tensor(gen, {4, 3, 3, 3});
  Tensor bad = Tensor::empty({1, 4, 7, 8}, DType::f32);
  ops::Conv2dArgs a;
  a.padding = 1;
  try {
    ops::conv2d(ctx, x, w, bad, a);
    ADD_FAILURE() << "a [1, 4, 7, 8] output for an 8 x 8 same-padded image was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 4, 8, 8]"), std::string::npos) << e.what();
  }
}

TEST(DalleEncoder, MatchesOpenAisEncoderInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  bevt::DalleEncoderConfig c;
  c.hidden = 8, c.vocab = 24;  // 4 groups of 2 blocks, widths 8 / 16 / 32 / 64
  bevt::DalleEncoder enc = bevt::DalleEncoder::random(c, 3);
  std::mt19937_64 gen(test_seed() ^ 0xd7e);
  TempDir tmp;
  const std::string dir = tmp.path.string();
  std::ofstream names(dir + "/names.txt");
  for (auto& [name, t] : enc.named()) {
    // non-zero biases inside, and an output layer whose weights outweigh its bias: with DALL-E's
    // init most cells map to one id (reference/bevt.md 8), which would hide a wrong order
    const bool out_layer = name.rfind("blocks.output", 0) == 0;
    if (name.size() > 2 && name.substr(name.size() - 2) == ".b") *t = random_tensor(gen, t->shape(), out_layer ? 0.01f : 0.05f);
    if (out_layer && name.substr(name.size() - 2) == ".w") *t = random_tensor(gen, t->shape(), 1.0f);
    io::write_npy(dir + "/" + name + ".npy", *t);
    names << name << "\n";
  }
  names.close();
  Tensor x = Tensor::empty({2, 3, 48, 64}, DType::f32);  // pixels in [0, 1] mapped by 0.8 x + 0.1
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.8f * pixel(gen) + 0.1f;
  io::write_npy(dir + "/x.npy", x);
  // one plain conv for F.conv2d itself: stride 2, padding 1
  const Tensor cx = random_tensor(gen, {2, 3, 9, 7}), cw = random_tensor(gen, {5, 3, 3, 3}, 0.3f), cb = random_tensor(gen, {5});
  Tensor args = Tensor::empty({2}, DType::i64);
  args.data<int64_t>()[0] = 2, args.data<int64_t>()[1] = 1;
  io::write_npy(dir + "/conv_x.npy", cx), io::write_npy(dir + "/conv_w.npy", cw), io::write_npy(dir + "/conv_b.npy", cb);
  io::write_npy(dir + "/conv_args.npy", args);
  ASSERT_EQ(run_python_reference("dalle_encoder_reference.py", dir + " 4 8 2 24", dir), "");

  Context ctx({.num_threads = 2});
  Tensor cy = Tensor::empty({2, 5, 5, 4}, DType::f32);
  ops::Conv2dArgs ca;
  ca.stride = 2, ca.padding = 1, ca.bias = &cb;
  ops::conv2d(ctx, cx, cw, cy, ca);
  EXPECT_TRUE(all_close(flat(cy), flat(io::read_npy(dir + "/ref_conv.npy")), {1e-5, 1e-5})) << "F.conv2d";

  const Tensor logits = enc.logits(ctx, x), want = io::read_npy(dir + "/ref_logits.npy");
  ASSERT_EQ(logits.shape(), want.shape());
  EXPECT_TRUE(all_close(flat(logits), flat(want), {1e-4, 1e-4})) << "logits";
  // ids: equal wherever PyTorch's top two logits are more than 1e-3 apart
  const Tensor id_tensor = enc.tokens(ctx, x);
  ASSERT_EQ(id_tensor.shape(), Shape({2, want.size(2) * want.size(3)}));
  const std::vector<int32_t> ids(id_tensor.data<int32_t>(), id_tensor.data<int32_t>() + id_tensor.numel());
  const int64_t V = want.size(1), P = want.size(2) * want.size(3);
  int64_t compared = 0, distinct = 0;
  std::vector<int> seen(size_t(V), 0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t q = 0; q < P; ++q) {
      std::vector<float> col(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) col[size_t(v)] = want.data<float>()[(b * V + v) * P + q];
      const int64_t best = std::max_element(col.begin(), col.end()) - col.begin();
      std::vector<float> sorted = col;
      std::sort(sorted.rbegin(), sorted.rend());
      if (!seen[size_t(best)]++) ++distinct;
      if (sorted[0] - sorted[1] < 1e-3f) continue;
      ++compared;
      EXPECT_EQ(ids[size_t(b * P + q)], best) << "cell " << b << ", " << q;
    }
  std::printf("[ dall-e encoder ] logits %s, %lld of %lld token ids compared, %lld distinct codes\n",
              logits.shape().str().c_str(), (long long)compared, (long long)(2 * P), (long long)distinct);
  EXPECT_GT(distinct, 3) << "the test's ids hardly vary: it would not see a wrong order";
}
