// tests/test_videomae.cc: VideoMAE pretraining model: configs, parameter names and shapes, the
// sinusoid table, tubelet unfold and normalised-pixel target against direct float64 formulas, the
// loss against a float64 recomputation, gradients against central differences, determinism,
// accumulation and input validation. (Full PyTorch parity: tests/python/videomae_parity.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "error_test_util.h"
#include "grad_error_util.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "unmask/videomae.h"
#include "models/videomae/names.h"

namespace unmask {
namespace {

using test::TestRng;

Tensor random_videos(TestRng& rng, const VideoMAEConfig& c, int64_t B) {
  Tensor v = Tensor::empty({B, c.channels, c.num_frames, c.img_size, c.img_size}, DType::f32);
  for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = float(rng.uniform(-2.0, 2.0));
  return v;
}

// Tube mask: spatial positions (b + k * 3) mod HW for k < masked, at every time slot.
Tensor tube_mask(const VideoMAEConfig& c, int64_t B, int64_t masked) {
  const int64_t HW = c.grid_hw() * c.grid_hw(), Np = c.num_patches();
  Tensor m = Tensor::zeros({B, Np}, DType::u8);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < masked; ++k)
      for (int64_t t = 0; t < c.grid_t(); ++t) static_cast<uint8_t*>(m.raw())[b * Np + t * HW + (b + k * 3) % HW] = 1;
  return m;
}

// Biases, LayerNorm weights and the mask token moved off their init so every path carries signal.
void perturb(VideoMAEPretrainModel& model, TestRng& rng) {
  for (Param& p : model.params()) {
    if (p.value.ndim() == 2 || p.value.ndim() == 5) continue;
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] += float(rng.uniform(-0.1, 0.1));
  }
}

Param& find_param(VideoMAEPretrainModel& m, const std::string& name) {
  for (Param& p : m.params())
    if (p.name == name) return p;
  throw Error("no param ", name);
}

TEST(VideoMAE, ConfigPresets) {
  const VideoMAEConfig b = VideoMAEConfig::base();
  EXPECT_EQ(b.num_patches(), 1568);
  EXPECT_EQ(b.patch_dim(), 1536);
  EXPECT_EQ(b.mlp_hidden(b.dim), 3072);
  const VideoMAEConfig g = VideoMAEConfig::preset("g");
  EXPECT_EQ(g.num_patches(), 2048);
  EXPECT_EQ(g.patch_dim(), 1176);
  EXPECT_EQ(g.mlp_hidden(g.dim), 6144);
  EXPECT_EQ(VideoMAEConfig::preset("small").heads, 6);
  EXPECT_EQ(VideoMAEConfig::preset("large").decoder_depth, 12);
  EXPECT_EQ(VideoMAEConfig::preset("huge").decoder_dim, 640);
  EXPECT_THROW(VideoMAEConfig::preset("medium"), Error);
  VideoMAEConfig bad = VideoMAEConfig::tiny();
  bad.heads = 3;
  EXPECT_THROW(bad.validate(), Error);
}

// A u8 [B, Np] mask whose every row sets `count` random positions.
Tensor random_rows_mask(TestRng& rng, int64_t B, int64_t Np, int64_t count) {
  Tensor m = Tensor::zeros({B, Np}, DType::u8);
  std::vector<int64_t> pos(static_cast<size_t>(Np));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < Np; ++j) pos[size_t(j)] = j;
    for (int64_t k = 0; k < count; ++k) {  // a partial Fisher-Yates shuffle
      std::swap(pos[size_t(k)], pos[size_t(rng.integer(k, Np - 1))]);
      static_cast<uint8_t*>(m.raw())[b * Np + pos[size_t(k)]] = 1;
    }
  }
  return m;
}

// ops::videomae_index against its documented layout, rebuilt from per-clip position lists;
// with a decoder mask (v2: some decoded tokens visible, loss_weight 0 there) and without (v1);
// rows with other counts are refused.
TEST(VideoMAE, IndexListsFollowTheDocumentedLayout) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t B = 5, Np = 37, Nm = 23, Nv = Np - Nm;
  const Tensor mask = random_rows_mask(rng, B, Np, Nm);
  for (const bool v2 : {false, true}) {
    SCOPED_TRACE(v2 ? "with a decoder mask" : "without a decoder mask");
    const Tensor dmask = v2 ? random_rows_mask(rng, B, Np, Np - 11) : Tensor();  // 11 decoded per clip
    const int64_t Nd = v2 ? 11 : Nm, Nt = Nv + Nd, nv = B * Nv, nd = B * Nd, nt = B * Nt;
    Tensor lists = Tensor::empty({3 * nv + 2 * nd + 3 * nt}, DType::i32);
    Tensor weight = Tensor::empty({nd}, DType::u8);
    ops::videomae_index(ctx, mask, v2 ? &dmask : nullptr, Nv, Nd, lists, &weight);
    std::vector<int32_t> want(static_cast<size_t>(lists.numel()), -1);
    std::vector<uint8_t> want_weight(static_cast<size_t>(nd));
    const size_t o_vis_pos = size_t(nv), o_dec_src = o_vis_pos + size_t(nv), o_dec_tok = o_dec_src + size_t(nt),
                 o_dec_rows = o_dec_tok + size_t(nt), o_dec_id = o_dec_rows + size_t(nd),
                 o_grad_src = o_dec_id + size_t(nd), o_vis_rows = o_grad_src + size_t(nt);
    const uint8_t* mk = static_cast<const uint8_t*>(mask.raw());
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> vis, dec;
      for (int64_t j = 0; j < Np; ++j) {
        if (!mk[b * Np + j]) vis.push_back(j);
        const bool decoded = v2 ? !static_cast<const uint8_t*>(dmask.raw())[b * Np + j] : mk[b * Np + j] != 0;
        if (decoded) dec.push_back(j);
      }
      ASSERT_EQ(int64_t(vis.size()), Nv);
      ASSERT_EQ(int64_t(dec.size()), Nd);
      for (int64_t i = 0; i < Nt; ++i) {
        const size_t t = size_t(b * Nt + i);
        want[o_dec_src + t] = int32_t(i < Nv ? b * Nv + i : nv);
        want[o_dec_tok + t] = int32_t(i < Nv ? vis[size_t(i)] : dec[size_t(i - Nv)]);
        want[o_grad_src + t] = int32_t(i < Nv ? nd : b * Nd + i - Nv);
      }
      for (int64_t i = 0; i < Nv; ++i) {
        const size_t r = size_t(b * Nv + i);
        want[r] = int32_t(b * Np + vis[size_t(i)]);
        want[o_vis_pos + r] = int32_t(vis[size_t(i)]);
        want[o_vis_rows + r] = int32_t(b * Nt + i);
      }
      for (int64_t i = 0; i < Nd; ++i) {
        const size_t r = size_t(b * Nd + i);
        want[o_dec_rows + r] = int32_t(b * Nt + Nv + i);
        want[o_dec_id + r] = int32_t(b * Np + dec[size_t(i)]);
        want_weight[r] = mk[b * Np + dec[size_t(i)]] != 0;
      }
    }
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(lists.data<int32_t>()[i], want[i]) << "entry " << i;
    int64_t out_of_loss = 0;
    for (size_t r = 0; r < want_weight.size(); ++r) {
      ASSERT_EQ(static_cast<const uint8_t*>(weight.raw())[r], want_weight[r]) << "loss weight " << r;
      out_of_loss += want_weight[r] == 0;
    }
    EXPECT_EQ(out_of_loss > 0, v2) << "v2 decodes some visible tokens, v1 only masked ones";
  }
  // A clip with another count; lists of the wrong size.
  Tensor bad = Tensor::empty(mask.shape(), DType::u8);
  bad.copy_from(mask);
  static_cast<uint8_t*>(bad.raw())[3 * Np] ^= 1;  // clip 3 masks one token more or fewer
  Tensor lists = Tensor::empty({3 * B * Nv + 2 * B * Nm + 3 * B * Np}, DType::i32);
  std::string msg = test::error_of([&] { ops::videomae_index(ctx, bad, nullptr, Nv, Nm, lists, nullptr); });
  EXPECT_NE(msg.find("of clip 3's 37 tokens visible"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Nv = 14"), std::string::npos) << msg;
  // A decoder mask whose clip 2 keeps one token more or fewer than clip 0.
  Tensor bad_dmask = random_rows_mask(rng, B, Np, Np - 11);
  static_cast<uint8_t*>(bad_dmask.raw())[2 * Np] ^= 1;
  Tensor v2_lists = Tensor::empty({3 * B * Nv + 2 * B * 11 + 3 * B * (Nv + 11)}, DType::i32);
  msg = test::error_of([&] { ops::videomae_index(ctx, mask, &bad_dmask, Nv, 11, v2_lists, nullptr); });
  EXPECT_NE(msg.find("clip 2 has"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kept by the decoder mask"), std::string::npos) << msg;
  Tensor short_lists = Tensor::empty({lists.numel() - 1}, DType::i32);
  msg = test::error_of([&] { ops::videomae_index(ctx, mask, nullptr, Nv, Nm, short_lists, nullptr); });
  EXPECT_NE(msg.find("lists must be"), std::string::npos) << msg;
}

TEST(VideoMAE, ParamNamesAndShapes) {
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(VideoMAEConfig::tiny(), 1);
  std::map<std::string, std::string> shapes;
  for (const Param& p : m.params()) shapes[p.name] = p.value.shape().str();
  EXPECT_EQ(m.params().size(), size_t(2 + 2 * 13 + 2 + 13 + 2 + 2 + 1 + 1));  // 49
  EXPECT_EQ(shapes["encoder.patch_embed.proj.weight"], "[64,3,2,16,16]");
  EXPECT_EQ(shapes["encoder.patch_embed.proj.bias"], "[64]");
  EXPECT_EQ(shapes["encoder.blocks.1.attn.qkv.weight"], "[192,64]");
  EXPECT_EQ(shapes["encoder.blocks.1.attn.q_bias"], "[64]");
  EXPECT_EQ(shapes["encoder.blocks.0.mlp.fc1.weight"], "[256,64]");
  EXPECT_EQ(shapes["encoder_to_decoder.weight"], "[32,64]");
  EXPECT_EQ(shapes["mask_token"], "[1,1,32]");
  EXPECT_EQ(shapes["decoder.blocks.0.attn.v_bias"], "[32]");
  EXPECT_EQ(shapes["decoder.head.weight"], "[1536,32]");
  EXPECT_EQ(shapes.count("encoder.blocks.0.attn.k_bias"), 0u);
  // init: xavier bound, LN ones, zero q/v bias, mask token within +-0.02
  const Param& qkv = find_param(m, "encoder.blocks.0.attn.qkv.weight");
  const double bound = std::sqrt(6.0 / (64 + 192));
  double maxabs = 0;
  for (int64_t i = 0; i < qkv.value.numel(); ++i) maxabs = std::max(maxabs, double(std::fabs(qkv.value.data<float>()[i])));
  EXPECT_LE(maxabs, bound);
  EXPECT_GT(maxabs, 0.9 * bound);
  EXPECT_EQ(find_param(m, "decoder.norm.weight").value.data<float>()[5], 1.0f);
  EXPECT_EQ(find_param(m, "encoder.blocks.0.attn.v_bias").value.data<float>()[3], 0.0f);
  const Param& mt = find_param(m, "mask_token");
  for (int64_t i = 0; i < mt.value.numel(); ++i) EXPECT_LE(std::fabs(mt.value.data<float>()[i]), 0.02f);
}

// The model's names are the original state-dict names: the checkpoint converter (videomae_names)
// accepts them all and round-trips them through the HF naming.
TEST(VideoMAE, ParamNamesConvertToHfAndBack) {
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(VideoMAEConfig::tiny(), 2);
  video::NamedTensors original;
  for (const Param& p : m.params()) original.emplace_back(p.name, p.value);
  EXPECT_EQ(video::detect_videomae_naming(original), video::VideoMAENaming::original);
  const video::NamedTensors hf = video::videomae_original_to_hf(original);
  bool has_query = false;
  for (const auto& [name, t] : hf) has_query |= name == "videomae.encoder.layer.1.attention.attention.query.weight";
  EXPECT_TRUE(has_query);
  const video::NamedTensors back = video::videomae_hf_to_original(hf);
  std::map<std::string, std::string> a, b;
  for (const auto& [name, t] : original) a[name] = t.shape().str();
  for (const auto& [name, t] : back) b[name] = t.shape().str();
  EXPECT_EQ(a, b);
}

TEST(VideoMAE, SinusoidTable) {
  const Tensor t = videomae_sinusoid_table(10, 6);
  for (int64_t pos : {0, 3, 9})
    for (int64_t j = 0; j < 6; ++j) {
      const double freq = std::pow(10000.0, -double(2 * (j / 2)) / 6.0);
      const double want = j % 2 ? std::cos(pos * freq) : std::sin(pos * freq);
      EXPECT_NEAR(t.data<float>()[pos * 6 + j], want, 1e-6) << pos << "," << j;
    }
}

TEST(VideoMAE, UnfoldAndTargetMatchDirectIndexing) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();  // 4 frames, 32x32: tokens (t 2) x (h 2) x (w 2)
  const int64_t B = 2, T = 4, H = 32, W = 32, p = 16, tt = 2;
  const Tensor v = random_videos(rng, c, B);
  auto at = [&](int64_t b, int64_t ch, int64_t t, int64_t y, int64_t x) {
    return double(v.data<float>()[(((b * 3 + ch) * T + t) * H + y) * W + x]);
  };
  const Tensor cols = videomae_unfold(v, tt, p);
  ASSERT_EQ(cols.shape().str(), "[16,1536]");
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, sd{0.229f, 0.224f, 0.225f};
  const Tensor tgt = videomae_target(v, tt, p, mean, sd);
  ASSERT_EQ(tgt.shape().str(), "[16,1536]");
  for (int trial = 0; trial < 6; ++trial) {
    const int64_t b = rng.integer(0, 1), gt = rng.integer(0, 1), gy = rng.integer(0, 1), gx = rng.integer(0, 1);
    const int64_t row = ((b * 2 + gt) * 2 + gy) * 2 + gx;
    for (int64_t ch = 0; ch < 3; ++ch) {
      // unfold column (c, dt, dy, dx)
      for (int k = 0; k < 5; ++k) {
        const int64_t dt = rng.integer(0, 1), dy = rng.integer(0, 15), dx = rng.integer(0, 15);
        EXPECT_EQ(cols.data<float>()[row * 1536 + ((ch * 2 + dt) * 16 + dy) * 16 + dx],
                  float(at(b, ch, gt * 2 + dt, gy * 16 + dy, gx * 16 + dx)));
      }
      // target: channel-normalised un-normalised pixels, (dt, dy, dx, c) columns
      double s = 0, ss = 0;
      for (int64_t dt = 0; dt < 2; ++dt)
        for (int64_t dy = 0; dy < 16; ++dy)
          for (int64_t dx = 0; dx < 16; ++dx) {
            const double x = at(b, ch, gt * 2 + dt, gy * 16 + dy, gx * 16 + dx) * sd[size_t(ch)] + mean[size_t(ch)];
            s += x;
            ss += x * x;
          }
      const double mu = s / 512, var = (ss - 512 * mu * mu) / 511;
      for (int k = 0; k < 5; ++k) {
        const int64_t dt = rng.integer(0, 1), dy = rng.integer(0, 15), dx = rng.integer(0, 15);
        const double x = at(b, ch, gt * 2 + dt, gy * 16 + dy, gx * 16 + dx) * sd[size_t(ch)] + mean[size_t(ch)];
        EXPECT_NEAR(tgt.data<float>()[row * 1536 + ((dt * 16 + dy) * 16 + dx) * 3 + ch], (x - mu) / (std::sqrt(var) + 1e-6),
                    1e-5);
      }
    }
  }
}

// The step's video-token ops against the whole-batch functions: tubelet_gather and tubelet_target
// are the rows of videomae_unfold / videomae_target that the ids select (bit for bit: the same
// copies and the same double arithmetic), in any order and with repeats; mse_rows is the float64
// sum over the weighted rows with the gradient 2/count (pred - target) there and 0 elsewhere;
// bad ids, shapes and weights are Errors.
TEST(VideoMAE, VideoOpsAreRowsOfUnfoldAndTarget) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();  // 8 tokens per clip
  Context ctx({.num_threads = 2});
  const Tensor v = random_videos(rng, c, 3);
  const Tensor cols_all = videomae_unfold(v, 2, 16);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, sd{0.229f, 0.224f, 0.225f};
  const Tensor tgt_all = videomae_target(v, 2, 16, mean, sd);
  const int64_t R = 11, K = 1536;
  Tensor ids = Tensor::empty({R}, DType::i32);
  for (int64_t r = 0; r < R; ++r) ids.data<int32_t>()[r] = int32_t(rng.integer(0, 23));
  ids.data<int32_t>()[3] = ids.data<int32_t>()[7];  // a repeat
  Tensor cols = Tensor::empty({R, K}, DType::f32), tgt = Tensor::empty({R, K}, DType::f32);
  ops::tubelet_gather(ctx, v, ids, {2, 16}, cols);
  ops::tubelet_target(ctx, v, ids, {2, 16}, {mean.begin(), mean.end()}, {sd.begin(), sd.end()}, tgt);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t id = ids.data<int32_t>()[r];
    EXPECT_EQ(0, std::memcmp(cols.data<float>() + r * K, cols_all.data<float>() + id * K, K * sizeof(float))) << r;
    EXPECT_EQ(0, std::memcmp(tgt.data<float>() + r * K, tgt_all.data<float>() + id * K, K * sizeof(float))) << r;
  }
  // mse_rows with row weights: rows 1 and 4 left out.
  Tensor weight = Tensor::empty({R}, DType::u8);
  for (int64_t r = 0; r < R; ++r) static_cast<uint8_t*>(weight.raw())[r] = uint8_t(r != 1 && r != 4);
  Tensor dpred = Tensor::empty({R, K}, DType::f32);
  const double gscale = 2.0 / double(9 * K);
  const double sq = ops::mse_rows(ctx, cols, tgt, &weight, gscale, dpred);
  double want = 0;
  for (int64_t r = 0; r < R; ++r) {
    const bool in = r != 1 && r != 4;
    for (int64_t k = 0; k < K; ++k) {
      const double d = double(cols.data<float>()[r * K + k]) - double(tgt.data<float>()[r * K + k]);
      if (in) want += d * d;
      ASSERT_EQ(dpred.data<float>()[r * K + k], in ? float(gscale * d) : 0.0f) << r << " " << k;
    }
  }
  EXPECT_NEAR(sq, want, 1e-12 * want);
  EXPECT_GT(want, 1.0);
  // Errors: an id past B Np, a wrong output shape, a weight of the wrong length.
  Tensor bad = ids.contiguous();
  bad.data<int32_t>()[2] = 24;
  EXPECT_THROW(ops::tubelet_gather(ctx, v, bad, {2, 16}, cols), Error);
  Tensor narrow = Tensor::empty({R, K - 1}, DType::f32);
  EXPECT_THROW(ops::tubelet_gather(ctx, v, ids, {2, 16}, narrow), Error);
  EXPECT_THROW(ops::tubelet_target(ctx, v, ids, {2, 16}, {0.5f}, {0.5f}, tgt), Error);  // one value for 3 channels
  EXPECT_THROW(ops::tubelet_gather(ctx, v, ids, {3, 16}, cols), Error);                 // 3 does not tile 4 frames
  Tensor short_weight = Tensor::zeros({R - 1}, DType::u8);
  EXPECT_THROW(ops::mse_rows(ctx, cols, tgt, &short_weight, gscale, dpred), Error);
}

TEST(VideoMAE, LossEqualsFloat64Recomputation) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, rng.seed());
  Context ctx({.num_threads = 2});
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 2);
  VideoMAEStepOptions o;
  o.keep_outputs = true;
  o.backward = false;
  const VideoMAEStepStats st = m.pretrain_step(ctx, v, mask, o);
  EXPECT_EQ(st.masked_tokens, 8);
  EXPECT_EQ(st.visible_tokens, 8);
  ASSERT_EQ(st.pred.shape().str(), "[8,1536]");
  // The target rows are the masked tokens in order: recompute them from the full target.
  const Tensor full = videomae_target(v, 2, 16, o.mean, o.std);
  double sq = 0;
  int64_t r = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t j = 0; j < 8; ++j) {
      if (!static_cast<const uint8_t*>(mask.raw())[b * 8 + j]) continue;
      for (int64_t k = 0; k < 1536; ++k) {
        const double d = double(st.pred.data<float>()[r * 1536 + k]) - double(full.data<float>()[(b * 8 + j) * 1536 + k]);
        sq += d * d;
      }
      ++r;
    }
  ASSERT_EQ(r, 8);
  EXPECT_NEAR(st.loss, sq / (8.0 * 1536.0), 1e-9 * (1 + st.loss));
  EXPECT_GT(st.loss, 0.1);  // a random model is far from the target
}

// Recomputing each block's GELU in the backward (the GPU default) changes no bit of the loss or
// of any gradient; both the v1 and the v2 (decoder mask) steps.
TEST(VideoMAE, RecomputedGeluGivesTheSameBits) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, rng.seed());
  perturb(m, rng);
  Context ctx({.num_threads = 2});
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 2);
  auto run = [&](bool recompute) {
    VideoMAEStepOptions o;
    o.recompute_gelu = recompute;
    if (recompute) m.zero_grad(ctx);  // the context's variant (ops::zero_many) on the second call
    else m.zero_grad();
    const double loss = m.pretrain_step(ctx, v, mask, o).loss;
    return std::make_pair(loss, test::grads_of(m.params()));
  };
  const auto kept = run(false), recomputed = run(true);
  EXPECT_EQ(kept.first, recomputed.first);
  ASSERT_EQ(kept.second.size(), recomputed.second.size());
  double norm = 0;
  for (size_t i = 0; i < kept.second.size(); ++i) {
    EXPECT_EQ(kept.second[i], recomputed.second[i]) << m.params()[i].name;
    for (float g : kept.second[i]) norm += double(g) * g;
  }
  EXPECT_GT(norm, 0.0);  // the gradients are not all zero
}

// bf16 block activations (VideoMAEStepOptions::activations), emulated on the CPU: the step is
// within bf16 rounding of the f32 step, deterministic, and not the f32 step itself.
// tests/cuda/test_cuda_videomae.cc's GPU twin compares the CUDA bf16 step against this.
TEST(VideoMAE, Bf16ActivationsCloseToF32) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, rng.seed());
  perturb(m, rng);
  Context ctx({.num_threads = 2});
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 2);
  auto run = [&](DType activations) {
    VideoMAEStepOptions o;
    o.activations = activations;
    m.zero_grad();
    const double loss = m.pretrain_step(ctx, v, mask, o).loss;
    return std::make_pair(loss, test::grads_of(m.params()));
  };
  const auto f = run(DType::f32), h = run(DType::bf16), h2 = run(DType::bf16);
  EXPECT_EQ(h.first, h2.first);
  EXPECT_EQ(h.second, h2.second);
  EXPECT_NEAR(h.first, f.first, 1e-2 * f.first);
  bool any_differs = false;
  double worst = 0;
  // Against the larger of the gradient's own norm and 1e-2 of the global norm (gradients that
  // are exactly 0, such as the key part of a shift, leave only rounding noise).
  const std::vector<double> errors = test::grad_errors(h.second, f.second, 1e-2);
  for (size_t i = 0; i < f.second.size(); ++i) {
    any_differs = any_differs || h.second[i] != f.second[i];
    worst = std::max(worst, errors[i]);
    EXPECT_LT(errors[i], 5e-2) << m.params()[i].name;
  }
  EXPECT_TRUE(any_differs) << "the bf16 step equals the f32 step: the blocks did not run in bf16";
  std::printf("[videomae bf16] loss f32 %.6f bf16 %.6f, worst gradient error %.4f\n", f.first, h.first, worst);
  VideoMAEStepOptions bad;
  bad.activations = DType::f16;
  EXPECT_THROW(m.pretrain_step(ctx, v, mask, bad), Error);
}

TEST(VideoMAE, GradientsMatchCentralDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, rng.seed());
  perturb(m, rng);
  Context ctx({.num_threads = 2});
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 2);
  m.zero_grad();
  m.pretrain_step(ctx, v, mask, {});
  VideoMAEStepOptions fwd;
  fwd.backward = false;
  for (const char* name : {"encoder.patch_embed.proj.weight", "encoder.blocks.0.attn.qkv.weight",
                           "encoder.blocks.0.attn.q_bias", "encoder.blocks.1.attn.v_bias", "encoder.blocks.1.norm2.weight",
                           "encoder.norm.bias", "encoder_to_decoder.weight", "mask_token",
                           "decoder.blocks.0.mlp.fc1.bias", "decoder.norm.weight", "decoder.head.bias"}) {
    Param& p = find_param(m, name);
    const test::FiniteDifference fd = test::central_difference_at_largest_grad(
        p.value, p.grad, [&] { return m.pretrain_step(ctx, v, mask, fwd).loss; });
    const double analytic = fd.analytic, numeric = fd.numeric;
    const int64_t best = fd.index;
    EXPECT_NEAR(analytic, numeric, 0.02 * std::fabs(numeric) + 2e-5) << name << "[" << best << "]";
  }
}

TEST(VideoMAE, DeterministicAndAccumulating) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 3);
  Context ctx({.num_threads = 2});
  VideoMAEPretrainModel a = VideoMAEPretrainModel::random(c, 7), b = VideoMAEPretrainModel::random(c, 7);
  const double la = a.pretrain_step(ctx, v, mask, {}).loss;
  const double lb = b.pretrain_step(ctx, v, mask, {}).loss;
  EXPECT_EQ(la, lb);
  b.pretrain_step(ctx, v, mask, {});  // b now holds twice the gradient
  for (size_t i = 0; i < a.params().size(); ++i) {
    const Param& pa = a.params()[i];
    const Param& pb = b.params()[i];
    ASSERT_EQ(pa.name, pb.name);
    EXPECT_EQ(0, std::memcmp(pa.value.raw(), pb.value.raw(), pa.value.nbytes())) << pa.name;
    for (int64_t k = 0; k < pa.grad.numel(); k += 97)
      EXPECT_NEAR(2.0 * pa.grad.data<float>()[k], pb.grad.data<float>()[k], 1e-6 * (1 + std::fabs(pb.grad.data<float>()[k])))
          << pa.name;
  }
  b.zero_grad();
  EXPECT_EQ(b.params()[0].grad.data<float>()[0], 0.0f);
  VideoMAEPretrainModel d = VideoMAEPretrainModel::random(c, 8);
  EXPECT_NE(0, std::memcmp(a.params()[0].value.raw(), d.params()[0].value.raw(), a.params()[0].value.nbytes()));
}

// grads_ready names every parameter exactly once, from the head back to the patch embedding, and
// only once its gradient is final: a snapshot taken in the hook equals the gradient after the step.
TEST(VideoMAE, GradsReadyReportsEachFinalGradientOnce) {
  VideoMAEConfig c = VideoMAEConfig::tiny();
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 3);
  Context ctx({.num_threads = 2});
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, 5);
  perturb(m, rng);
  const int64_t n = int64_t(m.params().size());
  std::vector<int> times(static_cast<size_t>(n), 0);
  std::vector<Tensor> snapshot(static_cast<size_t>(n));
  std::vector<int64_t> order;  // the first index of each range, in call order
  VideoMAEStepOptions o;
  o.grads_ready = [&](int64_t first, int64_t end) {
    ASSERT_TRUE(first >= 0 && first < end && end <= n) << first << " " << end;
    order.push_back(first);
    for (int64_t i = first; i < end; ++i) {
      ++times[size_t(i)];
      snapshot[size_t(i)] = m.params()[size_t(i)].grad.contiguous();
    }
  };
  m.pretrain_step(ctx, v, mask, o);
  for (int64_t i = 0; i < n; ++i) {
    const Param& p = m.params()[size_t(i)];
    ASSERT_EQ(times[size_t(i)], 1) << p.name;
    EXPECT_EQ(0, std::memcmp(snapshot[size_t(i)].raw(), p.grad.contiguous().raw(), p.grad.nbytes()))
        << p.name << " changed after it was reported final";
  }
  ASSERT_GE(order.size(), 3u);
  EXPECT_EQ(m.params()[size_t(order.front())].name, "decoder.norm.weight") << "the head's side finishes first";
  EXPECT_EQ(order.back(), 0) << "the patch embedding finishes last";
  const std::string first_block = m.params()[size_t(order[1])].name;
  EXPECT_EQ(first_block.rfind("decoder.blocks." + std::to_string(c.decoder_depth - 1) + ".", 0), 0u) << first_block;
}

// The params plug into the shared Optimizer: a few AdamW steps on one batch lower the loss.
TEST(VideoMAE, AdamWStepsLowerTheLoss) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  TestRng rng;
  SCOPED_TRACE(rng.note());
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, rng.seed());
  const Tensor v = random_videos(rng, c, 2);
  const Tensor mask = tube_mask(c, 2, 2);
  Context ctx({.num_threads = 2});
  OptimizerConfig oc;
  oc.kind = OptimizerKind::adamw;
  oc.lr = 1e-3f;
  oc.beta2 = 0.95f;
  oc.weight_decay = 0.05f;
  oc.max_grad_norm = 0.0f;
  Optimizer opt(oc, m.params());
  double first = 0, last = 0;
  for (int step = 0; step < 5; ++step) {
    m.zero_grad();
    last = m.pretrain_step(ctx, v, mask, {}).loss;
    if (step == 0) first = last;
    opt.step(ctx, oc.lr);
  }
  EXPECT_LT(last, 0.95 * first) << first << " -> " << last;
}

TEST(VideoMAE, RejectsBadInputs) {
  const VideoMAEConfig c = VideoMAEConfig::tiny();
  VideoMAEPretrainModel m = VideoMAEPretrainModel::random(c, 1);
  Context ctx({.num_threads = 1});
  TestRng rng;
  const Tensor v = random_videos(rng, c, 2);
  Tensor uneven = tube_mask(c, 2, 2);
  static_cast<uint8_t*>(uneven.raw())[0] ^= 1;  // row 0 now masks a different count
  EXPECT_THROW(m.pretrain_step(ctx, v, uneven, {}), Error);
  EXPECT_THROW(m.pretrain_step(ctx, v, Tensor::zeros({2, 8}, DType::u8), {}), Error);  // nothing masked
  EXPECT_THROW(m.pretrain_step(ctx, v, Tensor::zeros({2, 7}, DType::u8), {}), Error);  // wrong shape
  EXPECT_THROW(m.pretrain_step(ctx, Tensor::zeros({2, 3, 4, 32, 48}, DType::f32), tube_mask(c, 2, 2), {}), Error);
}

}  // namespace
}  // namespace unmask
