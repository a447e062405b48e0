// tests/test_videomae_classify.cc: VideoMAE's fine-tuning model and its training pieces: parameter
// names, init, gradients against central differences with drop path and head dropout on (the masks
// are a function of (seed, step), so the loss is a deterministic function of the weights), drop
// path rates per block, mixup / cutmix / label smoothing against direct formulas, layer-wise lr
// decay and the optimizer's per-param lr scale. (PyTorch parity: tests/python/videomae_parity.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "op_test_util.h"
#include "unmask/videomae.h"

namespace unmask {
namespace {

using test::TestRng;

Tensor random_videos(TestRng& rng, const VideoMAEConfig& c, int64_t B) {
  Tensor v = Tensor::empty({B, c.channels, c.num_frames, c.img_size, c.img_size}, DType::f32);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = float(rng.uniform(-2.0, 2.0));
  return v;
}

Param& find(VideoMAEClassifier& m, const std::string& name) {
  for (Param& p : m.params())
    if (p.name == name) return p;
  throw std::runtime_error("no param " + name);
}

Tensor one_hot_targets(const std::vector<int64_t>& labels, int64_t K) {
  Tensor t = Tensor::zeros({int64_t(labels.size()), K}, DType::f32);
  for (size_t b = 0; b < labels.size(); ++b) t.data<float>()[int64_t(b) * K + labels[b]] = 1.0f;
  return t;
}

TEST(VideoMAEClassify, ParamNamesShapesAndInit) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier m = VideoMAEClassifier::random(c, 7, 5);
  std::vector<std::string> names;
  for (const Param& p : m.params()) names.push_back(p.name);
  ASSERT_EQ(names.size(), 2u + 13u * size_t(c.depth) + 4u);
  EXPECT_EQ(names[0], "patch_embed.proj.weight");
  EXPECT_EQ(names[2], "blocks.0.norm1.weight");
  EXPECT_EQ(names[4], "blocks.0.attn.q_bias");
  EXPECT_EQ(names[names.size() - 2], "head.weight");
  EXPECT_EQ(find(m, "patch_embed.proj.weight").value.shape(), (Shape{c.dim, 3, 2, 16, 16}));
  EXPECT_EQ(find(m, "head.weight").value.shape(), (Shape{7, c.dim}));
  EXPECT_EQ(find(m, "fc_norm.weight").value.shape(), (Shape{c.dim}));
  // trunc_normal(0.02) on block Linears (sample std near 0.02), head scaled by init_scale 0.001
  const Tensor& fc1 = find(m, "blocks.0.mlp.fc1.weight").value;
  double sq = 0;
  for (int64_t i = 0; i < fc1.numel(); ++i) sq += double(fc1.data<float>()[i]) * fc1.data<float>()[i];
  EXPECT_NEAR(std::sqrt(sq / double(fc1.numel())), 0.02, 0.001);
  const Tensor& head = find(m, "head.weight").value;
  double head_max = 0;
  for (int64_t i = 0; i < head.numel(); ++i) head_max = std::max(head_max, std::fabs(double(head.data<float>()[i])));
  EXPECT_GT(head_max, 0.0);
  EXPECT_LT(head_max, 0.02 * 0.001 * 6);
  EXPECT_EQ(find(m, "fc_norm.weight").value.data<float>()[0], 1.0f);
  EXPECT_EQ(find(m, "blocks.1.attn.v_bias").value.data<float>()[3], 0.0f);
}

TEST(VideoMAEClassify, GradientsMatchCentralDifferencesWithDropPathAndDropout) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier m = VideoMAEClassifier::random(c, 4, rng.seed(), /*init_scale=*/1.0f);
  for (Param& p : m.params())
    if (p.value.ndim() == 1)
      for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] += float(rng.uniform(-0.1, 0.1));
  Context ctx({.num_threads = 2});
  const int64_t B = 4;
  const Tensor v = random_videos(rng, c, B);
  Tensor targets = Tensor::empty({B, 4}, DType::f32);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < 4; ++k) targets.data<float>()[b * 4 + k] = k == b % 4 ? 0.7f : 0.1f;
  VideoMAEClassifyOptions o;
  o.drop_path_rate = 0.5f;
  o.head_dropout = 0.3f;
  o.seed = 11;
  o.step = 2;
  m.zero_grad();
  const VideoMAEClassifyStats st = m.step(ctx, v, targets, o);
  // block 0 never drops (rate 0 * 0.5); block 1 (rate 0.5) dropped something in this draw
  int dropped = 0;
  for (int64_t i = 0; i < st.drop_scales.numel(); ++i) {
    const float s = st.drop_scales.data<float>()[i];
    EXPECT_TRUE(s == 0.0f || s == 1.0f || s == 2.0f) << s;
    if (i < 2 * B) EXPECT_EQ(s, 1.0f) << "block 0 has rate 0";
    dropped += s == 0.0f;
  }
  EXPECT_GT(dropped, 0) << "pick another seed/step: nothing dropped";
  VideoMAEClassifyOptions fwd = o;
  fwd.backward = false;
  for (const char* name : {"patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "blocks.0.attn.q_bias",
                           "blocks.1.attn.v_bias", "blocks.1.mlp.fc2.weight", "blocks.1.norm1.bias",
                           "fc_norm.weight", "head.weight", "head.bias"}) {
    Param& p = find(m, name);
    const test::FiniteDifference fd = test::central_difference_at_largest_grad(
        p.value, p.grad, [&] { return m.step(ctx, v, targets, fwd).loss; });
    const double numeric = fd.numeric;
    const int64_t best = fd.index;
    EXPECT_NEAR(p.grad.data<float>()[best], numeric, 0.02 * std::fabs(numeric) + 2e-5) << name << "[" << best << "]";
  }
  // evaluation mode ignores drop path and dropout; the same (seed, step) repeats the same masks
  VideoMAEClassifyOptions eval = fwd;
  eval.train = false;
  const Tensor l1 = m.step(ctx, v, targets, eval).logits, l2 = m.logits(ctx, v);
  EXPECT_EQ(std::memcmp(l1.data<float>(), l2.data<float>(), size_t(l1.numel()) * 4), 0);
  const VideoMAEClassifyStats again = m.step(ctx, v, targets, fwd);
  EXPECT_EQ(std::memcmp(again.drop_scales.data<float>(), st.drop_scales.data<float>(), size_t(st.drop_scales.numel()) * 4), 0);
  fwd.step = 3;
  const VideoMAEClassifyStats other = m.step(ctx, v, targets, fwd);
  EXPECT_NE(std::memcmp(other.drop_scales.data<float>(), st.drop_scales.data<float>(), size_t(st.drop_scales.numel()) * 4), 0);
}

TEST(VideoMAEClassify, LabelSmoothingWithoutMixing) {
  TestRng rng;
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  Tensor v = random_videos(rng, c, 3);
  Tensor before = Tensor::empty(v.shape(), DType::f32);
  before.copy_from(v);
  MixupOptions o;
  o.mixup_alpha = o.cutmix_alpha = 0.0f;
  o.label_smoothing = 0.1f;
  const MixupResult r = mixup_cutmix(v, {2, 0, 4}, 5, o, 1);
  EXPECT_EQ(r.lam, 1.0);
  EXPECT_EQ(std::memcmp(v.data<float>(), before.data<float>(), size_t(v.numel()) * 4), 0);
  const int64_t labels[3] = {2, 0, 4};
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t k = 0; k < 5; ++k)
      EXPECT_NEAR(r.targets.data<float>()[b * 5 + k], k == labels[b] ? 0.92 : 0.02, 1e-7);
}

TEST(VideoMAEClassify, MixupAndCutmixMatchDirectFormulas) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  const int64_t B = 5, K = 6;
  const std::vector<int64_t> labels = {0, 3, 3, 5, 1};
  MixupOptions o;  // VideoMAE: mixup 0.8, cutmix 1.0, switch 0.5, smoothing 0.1
  bool saw_mixup = false, saw_cutmix = false;
  for (uint64_t seed = 0; seed < 40 && !(saw_mixup && saw_cutmix); ++seed) {
    const Tensor x = random_videos(rng, c, B);
    Tensor mixed = Tensor::empty(x.shape(), DType::f32);
    mixed.copy_from(x);
    const MixupResult r = mixup_cutmix(mixed, labels, K, o, seed);
    ASSERT_GT(r.lam, 0.0);
    ASSERT_LE(r.lam, 1.0);
    const int64_t clip = x.numel() / B, H = c.img_size, W = c.img_size, plane = H * W;
    if (!r.cutmix) {
      saw_mixup = true;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < clip; i += 7) {
          const double want = r.lam * x.data<float>()[b * clip + i] + (1 - r.lam) * x.data<float>()[(B - 1 - b) * clip + i];
          ASSERT_NEAR(mixed.data<float>()[b * clip + i], want, 1e-5);
        }
    } else {
      saw_cutmix = true;
      // every pixel is either the clip's own or its partner's, the same (y, x) in every frame and
      // channel, and the partner's pixels cover exactly (1 - lam) of the frame
      int64_t from_partner = 0;
      const int64_t b = 0, partner = B - 1;
      for (int64_t yx = 0; yx < plane; ++yx) {
        const bool own = mixed.data<float>()[b * clip + yx] == x.data<float>()[b * clip + yx];
        from_partner += !own;
        for (int64_t ct = 0; ct < clip / plane; ++ct) {
          const float got = mixed.data<float>()[b * clip + ct * plane + yx];
          ASSERT_EQ(got, own ? x.data<float>()[b * clip + ct * plane + yx] : x.data<float>()[partner * clip + ct * plane + yx]);
        }
      }
      EXPECT_NEAR(double(from_partner) / double(plane), 1.0 - r.lam, 1e-12);
      // the middle clip of an odd batch is its own partner
      EXPECT_EQ(std::memcmp(mixed.data<float>() + 2 * clip, x.data<float>() + 2 * clip, size_t(clip) * 4), 0);
    }
    for (int64_t bb = 0; bb < B; ++bb) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += r.targets.data<float>()[bb * K + k];
      EXPECT_NEAR(sum, 1.0, 1e-6);
      const double off = 0.1 / K, on = 0.9 + off;
      std::vector<double> want(size_t(K), off);
      want[size_t(labels[size_t(bb)])] += r.lam * (on - off);
      want[size_t(labels[size_t(B - 1 - bb)])] += (1 - r.lam) * (on - off);
      for (int64_t k = 0; k < K; ++k) EXPECT_NEAR(r.targets.data<float>()[bb * K + k], want[size_t(k)], 1e-6);
    }
  }
  EXPECT_TRUE(saw_mixup && saw_cutmix);
  Tensor v = random_videos(rng, c, 2);
  EXPECT_THROW(mixup_cutmix(v, {0, 9}, 4, o, 0), Error);
  EXPECT_THROW(mixup_cutmix(v, {0}, 4, o, 0), Error);
}

TEST(VideoMAEClassify, LayerDecayScalesAndOptimizerHonoursThem) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();  // depth 2
  VideoMAEClassifier m = VideoMAEClassifier::random(c, 3, 1);
  m.set_layer_decay(0.75f);
  EXPECT_FLOAT_EQ(find(m, "patch_embed.proj.weight").lr_scale, 0.75f * 0.75f * 0.75f);
  EXPECT_FLOAT_EQ(find(m, "blocks.0.attn.qkv.weight").lr_scale, 0.75f * 0.75f);
  EXPECT_FLOAT_EQ(find(m, "blocks.1.mlp.fc1.bias").lr_scale, 0.75f);
  EXPECT_FLOAT_EQ(find(m, "fc_norm.weight").lr_scale, 1.0f);
  EXPECT_FLOAT_EQ(find(m, "head.weight").lr_scale, 1.0f);
  EXPECT_FALSE(find(m, "blocks.0.attn.q_bias").weight_decay);
  EXPECT_FALSE(find(m, "head.bias").weight_decay);
  EXPECT_TRUE(find(m, "head.weight").weight_decay);
  EXPECT_THROW(m.set_layer_decay(0.0f), Error);

  // AdamW's first step moves every element by lr * lr_scale * sign(g) (m_hat / sqrt(v_hat) = sign)
  std::vector<Param> params(2);
  for (size_t i = 0; i < 2; ++i) {
    params[i].name = "p" + std::to_string(i);
    params[i].value = Tensor::zeros({4}, DType::f32);
    params[i].grad = Tensor::zeros({4}, DType::f32);
    for (int64_t k = 0; k < 4; ++k) params[i].grad.data<float>()[k] = float(k + 1);
    params[i].weight_decay = false;
  }
  params[0].lr_scale = 0.25f;
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.eps = 0.0f;
  Optimizer opt(oc, params);
  Context ctx;
  opt.step(ctx, 0.1f);
  for (int64_t k = 0; k < 4; ++k) {
    EXPECT_FLOAT_EQ(params[0].value.data<float>()[k], -0.025f);
    EXPECT_FLOAT_EQ(params[1].value.data<float>()[k], -0.1f);
  }
  params[1].lr_scale = std::nanf("");
  EXPECT_THROW(opt.step(ctx, 0.1f), Error);
}

TEST(VideoMAEClassify, TrainingFitsASeparableTask) {
  // class = which half of the frame is brighter; a few AdamW steps must fit 8 clips
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier m = VideoMAEClassifier::random(c, 2, 3);
  TestRng rng;
  const int64_t B = 8;
  Tensor v = Tensor::empty({B, 3, c.num_frames, c.img_size, c.img_size}, DType::f32);
  std::vector<int64_t> labels(B);
  for (int64_t b = 0; b < B; ++b) {
    labels[size_t(b)] = b % 2;
    for (int64_t i = 0; i < v.numel() / B; ++i) {
      const int64_t x = i % c.img_size;
      const bool bright = (x < c.img_size / 2) == (b % 2 == 0);
      v.data<float>()[b * (v.numel() / B) + i] = float(rng.uniform(-0.5, 0.5) + (bright ? 1.0 : -1.0));
    }
  }
  const Tensor targets = one_hot_targets(labels, 2);
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.weight_decay = 0.05f;
  Optimizer opt(oc, m.params());
  Context ctx({.num_threads = 2});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    m.zero_grad();
    VideoMAEClassifyOptions o;
    o.step = uint64_t(step);
    const double loss = m.step(ctx, v, targets, o).loss;
    if (step == 0) first = loss;
    last = loss;
    opt.step(ctx, 1e-3f);
  }
  EXPECT_NEAR(first, std::log(2.0), 0.01);  // the near-zero head starts at uniform predictions
  EXPECT_LT(last, 0.1 * first);
  const Tensor logits = m.logits(ctx, v);
  for (int64_t b = 0; b < B; ++b)
    EXPECT_EQ(logits.data<float>()[b * 2 + labels[size_t(b)]] > logits.data<float>()[b * 2 + 1 - labels[size_t(b)]], true);
}

TEST(VideoMAEClassify, RejectsBadInputs) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEClassifier m = VideoMAEClassifier::random(c, 3, 1);
  Context ctx;
  TestRng rng;
  const Tensor v = random_videos(rng, c, 2);
  EXPECT_THROW(m.step(ctx, v, Tensor::zeros({2, 4}, DType::f32), {}), Error);  // wrong class count
  EXPECT_THROW(m.logits(ctx, Tensor::zeros({2, 3, 2, 32, 32}, DType::f32)), Error);  // wrong frames
  VideoMAEClassifyOptions o;
  o.drop_path_rate = 1.0f;
  EXPECT_THROW(m.step(ctx, v, Tensor::zeros({2, 3}, DType::f32), o), Error);
  EXPECT_THROW(VideoMAEClassifier::random(c, 0, 1), Error);
}

}  // namespace
}  // namespace unmask
