// tests/test_swin_block.cc: the shifted-window transformer block of Video Swin / BEVT, built from
// nn/vit_block.h (BlockShape::window, a full qkv bias) and nn/window_geometry.h (partition rows,
// relative-position index, region masks, the bias table's gather and scatter), against Video
// Swin's SwinTransformerBlock3D under PyTorch float64 autograd (tests/python/swin_block_reference.py):
// a 2 x 4 x 14 x 14 x 64 volume in 2 x 7 x 7 windows, with the (1, 3, 3) shift and without, its
// output and the gradients of the input and of all 13 parameters, the bias table's included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "io/npy.h"
#include "models/bevt/backbone.h"
#include "models/bevt/neck.h"
#include "models/bevt/swin_stage.h"
#include "nn/patch_merging.h"
#include "nn/vit_block.h"
#include "nn/window_geometry.h"
#include "op_test_util.h"
#include "python_reference.h"
#include "ops/ops.h"
#include "temp_dir.h"
#include "unmask/context.h"
#include "unmask/error.h"

using namespace unmask;
using namespace unmask::test;

namespace {

std::vector<double> flat(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  const Tensor c = t.contiguous();
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = c.data<float>()[i];
  return v;
}

Tensor gather_rows(Context& ctx, const Tensor& x, const std::vector<int32_t>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size()), x.size(1)}, DType::f32);
  ops::embedding(ctx, x, train::row_ids(rows, Device::cpu), out);
  return out;
}

// One Swin block against a reference script's dump: Video Swin's block in float64 (volume 4 x 14 x
// 14, window 2 x 7 x 7), or torchvision's 2-D SwinTransformerBlock (volume 1 x 14 x 14, window
// 1 x 7 x 7: the 3-D table of a one-frame window is the 2-D table, 13 x 13 rows).
void run_block(const std::array<int64_t, 3> shift, bool torchvision = false) {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  const std::string shift_args =
      torchvision ? std::to_string(shift[1])
                  : std::to_string(shift[0]) + " " + std::to_string(shift[1]) + " " + std::to_string(shift[2]);
  ASSERT_EQ(run_python_reference(torchvision ? "torchvision_swin_block_reference.py" : "swin_block_reference.py",
                                 dir + " " + shift_args, dir),
            "");
  auto load = [&](const std::string& name) { return io::read_npy(dir + "/" + name + ".npy"); };

  const int64_t B = 2, C = 64, NH = 2, I = 256;
  const train::WindowGeometry g = torchvision ? train::clipped_window({1, 14, 14}, {1, 7, 7}, shift)
                                              : train::clipped_window({4, 14, 14}, {2, 7, 7}, shift);
  const int64_t N = g.tokens(), tokens = (torchvision ? 1 : 4) * 14 * 14;
  nn::BlockParams p;
  std::map<std::string, train::PV*> named = {
      {"norm1.weight", &p.norm1_g}, {"norm1.bias", &p.norm1_b},   {"attn.qkv.weight", &p.qkv_w},
      {"attn.qkv.bias", &p.qkv_b},  {"attn.proj.weight", &p.proj_w}, {"attn.proj.bias", &p.proj_b},
      {"norm2.weight", &p.norm2_g}, {"norm2.bias", &p.norm2_b},   {"mlp.fc1.weight", &p.fc1_w},
      {"mlp.fc1.bias", &p.fc1_b},   {"mlp.fc2.weight", &p.fc2_w}, {"mlp.fc2.bias", &p.fc2_b}};
  for (auto& [name, pv] : named) *pv = train::make_pv(load(name));
  train::PV table = train::make_pv(load("attn.relative_position_bias_table"));

  Context ctx({.num_threads = 2});
  const std::vector<int32_t> rows = train::window_partition_rows(B, g), back = train::inverse_rows(rows);
  const std::vector<int32_t> index = train::relative_position_index(g.window, N);
  const Tensor bias = train::gather_relative_bias(ctx, table.value, train::row_ids(index, Device::cpu), N);
  const Tensor mask = g.shifted() ? train::shift_region_masks(g) : Tensor();
  Tensor dbias = Tensor::zeros({NH, N, N}, DType::f32);
  nn::BlockShape s;
  s.C = C, s.I = I, s.NH = NH, s.tokens = tokens, s.eps = 1e-5f;
  s.window = N, s.window_bias = &bias, s.window_mask = g.shifted() ? &mask : nullptr, s.window_dbias = &dbias;

  const Tensor x = gather_rows(ctx, load("x"), rows);  // the volume's rows in window order
  nn::BlockSaved saved;
  nn::block_forward(ctx, p, x, s, saved);
  const Tensor out = gather_rows(ctx, saved.out, back);
  Tensor grad = gather_rows(ctx, load("dout"), rows);
  nn::block_backward(ctx, p, x, saved, s, grad);
  const Tensor dx = gather_rows(ctx, grad, back);
  train::scatter_relative_bias_grad(ctx, dbias, train::row_ids(index, Device::cpu), table.grad);

  // f32 engine against float64 on the same f32-exact inputs: a row's values sum up to 256
  // products; a parameter gradient sums over all 1,568 rows (the key bias's, 0 in exact
  // arithmetic, comes out at ~3e-4 from that cancellation), hence reduction_tol over the rows.
  // The parameter gradients by the measure too (max |ours - ref| / max |ref| per tensor,
  // 1e-4): one key-weight entry of a cancelling sum can sit at 1.4x reduction_tol while the
  // tensor as a whole is within 1e-12 NMSE.
  const Tol tol{2e-4, 2e-4}, param_tol = reduction_tol(B * tokens);
  EXPECT_TRUE(all_close(flat(out), flat(load("out")), tol)) << "out";
  EXPECT_TRUE(all_close(flat(dx), flat(load("dx")), tol)) << "dx";
  auto max_normalised = [](const Tensor& a, const Tensor& b) {
    double err = 0, scale = 1e-30;
    for (int64_t i = 0; i < a.numel(); ++i) {
      err = std::max(err, std::abs(double(a.data<float>()[i]) - double(b.data<float>()[i])));
      scale = std::max(scale, std::abs(double(b.data<float>()[i])));
    }
    return err / scale;
  };
  double worst = 0;
  for (auto& [name, pv] : named) {
    const Tensor ref = load("d_" + name);
    const double e = max_normalised(pv->grad, ref);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-4) << "d " << name;
    if (name != "attn.qkv.weight")  // (see above)
      EXPECT_TRUE(all_close(flat(pv->grad), flat(ref), param_tol)) << "d " << name;
  }
  EXPECT_TRUE(all_close(flat(table.grad), flat(load("d_attn.relative_position_bias_table")), param_tol))
      << "d relative_position_bias_table";
  std::printf("[ swin block ] parameter gradients: worst max-normalised error %.2e\n", worst);
  std::printf("[ swin block, shift %lld %lld %lld ] %lld windows of %lld tokens against PyTorch autograd\n",
              (long long)shift[0], (long long)shift[1], (long long)shift[2], (long long)(B * g.windows()), (long long)N);
}

}  // namespace

TEST(SwinBlock, MatchesVideoSwinInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  {
    SCOPED_TRACE("shifted (1, 3, 3)");
    run_block({1, 3, 3});
  }
  {
    SCOPED_TRACE("not shifted");
    run_block({0, 0, 0});
  }
}

// The same block against torchvision's own 2-D Swin (swin_t's SwinTransformerBlock, Debian's
// python3-torchvision): an implementation no one here wrote of the window partition, the cyclic
// shift and its -100 masks, the 13 x 13 relative-position table and its gradient.
TEST(SwinBlock, MatchesTorchvisionSwinT) {
  if (!python_has("torch, torchvision, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch, torchvision (python3-torchvision) or numpy";
  {
    SCOPED_TRACE("torchvision, shift 3");
    run_block({0, 3, 3}, true);
  }
  {
    SCOPED_TRACE("torchvision, not shifted");
    run_block({0, 0, 0}, true);
  }
}

// Patch merging (nn/patch_merging.h) against Video Swin's PatchMerging under PyTorch autograd
// (tests/python/patch_merging_reference.py): a 2 x 3 x 6 x 4 x 16 volume; the output, the input
// gradient and the LayerNorm and reduction gradients.
TEST(SwinBlock, PatchMergingMatchesVideoSwin) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  TempDir tmp;
  const std::string dir = tmp.path.string();
  ASSERT_EQ(run_python_reference("patch_merging_reference.py", dir, dir), "");
  auto load = [&](const std::string& name) { return io::read_npy(dir + "/" + name + ".npy"); };
  train::PatchMergingParams p;
  p.norm_g = train::make_pv(load("norm.weight"));
  p.norm_b = train::make_pv(load("norm.bias"));
  p.reduction_w = train::make_pv(load("reduction.weight"));
  Context ctx({.num_threads = 2});
  const Tensor x = load("x");
  Tensor out;
  train::PatchMergingSaved saved;
  train::patch_merging_forward(ctx, p, x, 2, {3, 6, 4}, 1e-5f, out, saved);
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  train::patch_merging_backward(ctx, p, saved, 2, {3, 6, 4}, load("dout"), dx);
  const Tol tol{1e-5, 1e-5}, param_tol = reduction_tol(36);
  EXPECT_TRUE(all_close(flat(out), flat(load("out")), tol)) << "out";
  EXPECT_TRUE(all_close(flat(dx), flat(load("dx")), tol)) << "dx";
  EXPECT_TRUE(all_close(flat(p.norm_g.grad), flat(load("d_norm.weight")), param_tol)) << "d norm.weight";
  EXPECT_TRUE(all_close(flat(p.norm_b.grad), flat(load("d_norm.bias")), param_tol)) << "d norm.bias";
  EXPECT_TRUE(all_close(flat(p.reduction_w.grad), flat(load("d_reduction.weight")), param_tol)) << "d reduction.weight";
  // an odd grid (the same 144 rows as 3 x 3 x 8) is refused, not merged across rows
  EXPECT_THROW(train::patch_merging_forward(ctx, p, x, 2, {3, 3, 8}, 1e-5f, out, saved), Error);
}

namespace {

void run_stage(const std::string& stream) {
  TempDir tmp;
  const std::string dir = tmp.path.string();
  ASSERT_EQ(run_python_reference("swin_stage_reference.py", dir + " " + stream, dir), "");
  auto load = [&](const std::string& name) { return io::read_npy(dir + "/" + name + ".npy"); };
  bevt::SwinStageParams p;
  p.blocks.resize(2);
  std::map<std::string, train::PV*> named;
  for (int j = 0; j < 2; ++j) {
    nn::BlockParams& b = p.blocks[size_t(j)];
    const std::string pre = "blocks." + std::to_string(j) + ".";
    for (auto [n, pv] : {std::pair<const char*, train::PV*>{"norm1.weight", &b.norm1_g}, {"norm1.bias", &b.norm1_b},
                         {"attn.qkv.weight", &b.qkv_w}, {"attn.qkv.bias", &b.qkv_b}, {"attn.proj.weight", &b.proj_w},
                         {"attn.proj.bias", &b.proj_b}, {"norm2.weight", &b.norm2_g}, {"norm2.bias", &b.norm2_b},
                         {"mlp.fc1.weight", &b.fc1_w}, {"mlp.fc1.bias", &b.fc1_b}, {"mlp.fc2.weight", &b.fc2_w},
                         {"mlp.fc2.bias", &b.fc2_b}})
      named[pre + n] = pv;
  }
  p.tables.resize(2);
  named["blocks.0.attn.relative_position_bias_table"] = &p.tables[0];
  named["blocks.1.attn.relative_position_bias_table"] = &p.tables[1];
  p.merge = true;
  named["downsample.norm.weight"] = &p.merging.norm_g;
  named["downsample.norm.bias"] = &p.merging.norm_b;
  named["downsample.reduction.weight"] = &p.merging.reduction_w;
  for (auto& [name, pv] : named) *pv = train::make_pv(load(name));

  bevt::SwinStageShape s;
  s.batch = 2;
  s.size = {stream == "video" ? 4 : 1, 14, 14};
  s.dim = 32, s.heads = 2, s.mlp_hidden = 128;
  s.image = stream == "image";
  Context ctx({.num_threads = 2});
  bevt::SwinStageSaved saved;
  bevt::swin_stage_forward(ctx, p, load("x"), s, saved);
  const Tensor dx = bevt::swin_stage_backward(ctx, p, saved, s, load("dmerged"), load("dout"));
  const Tol tol{2e-4, 2e-4}, param_tol = reduction_tol(2 * s.size[0] * 196);
  EXPECT_TRUE(all_close(flat(saved.out), flat(load("out")), tol)) << "out";
  EXPECT_TRUE(all_close(flat(saved.merged), flat(load("merged")), tol)) << "merged";
  EXPECT_TRUE(all_close(flat(dx), flat(load("dx")), tol)) << "dx";
  for (auto& [name, pv] : named)
    EXPECT_TRUE(all_close(flat(pv->grad), flat(load("d_" + name)), param_tol)) << "d " << name;
  const train::WindowGeometry g1 = bevt::stage_block_geometry(s, 1);
  std::printf("[ bevt stage, %s ] block 1: window %lld x %lld x %lld, shift %lld %lld %lld; %zu tensors against PyTorch\n",
              stream.c_str(), (long long)g1.window[0], (long long)g1.window[1], (long long)g1.window[2],
              (long long)g1.shift[0], (long long)g1.shift[1], (long long)g1.shift[2], named.size());
}

}  // namespace

// Two blocks (the second shifted) and patch merging, against BEVT's BasicLayer in PyTorch
// (tests/python/swin_stage_reference.py): the video stream with a 4-frame volume (the window
// and shift clipped to 4 x 7 x 7 and (0, 3, 3), masks only in the shifted block) and the image
// stream (masks in both blocks, the d = 0 plane of the 3-D tables); out, merged, dx and all 29
// parameter gradients.
TEST(SwinBlock, StageMatchesBevtInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  for (const char* stream : {"video", "image"}) {
    SCOPED_TRACE(stream);
    run_stage(stream);
  }
}

namespace {

void run_backbone(const std::string& stream) {
  bevt::SwinConfig c;
  c.embed_dim = 32, c.depths = {2, 2, 2, 2}, c.heads = {1, 2, 4, 8}, c.patch = {2, 4, 4}, c.window = {2, 4, 4};
  bevt::SwinBackbone bb = bevt::SwinBackbone::random(c, 7);
  std::vector<Param> params = bb.params();
  // Non-zero biases and LayerNorm parameters (BEVT's init zeroes the biases: a test with it could
  // not see an engine that ignores them).
  std::mt19937_64 gen(stream == "video" ? 11 : 12);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (Param& p : params) {
    const bool norm_weight = p.name.find("norm") != std::string::npos && p.name.find(".weight") != std::string::npos;
    const float scale = p.name.find("table") != std::string::npos ? 0.5f : p.value.ndim() >= 2 ? 0.1f : 0.2f;
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = (norm_weight ? 1.0f : 0.0f) + scale * n(gen);
  }
  TempDir tmp;
  const std::string dir = tmp.path.string();
  std::ofstream names(dir + "/names.txt");
  for (const Param& p : params) {
    io::write_npy(dir + "/" + p.name + ".npy", p.value);
    names << p.name << "\n";
  }
  names.close();
  const bool image = stream == "image";
  const Tensor input = image ? Tensor::empty({2, 3, 1, 128, 128}, DType::f32) : Tensor::empty({1, 3, 4, 64, 64}, DType::f32);
  for (int64_t i = 0; i < input.numel(); ++i) input.data<float>()[i] = n(gen);
  const int64_t R = image ? 2 * 32 * 32 : 2 * 16 * 16;
  std::vector<uint8_t> mask(static_cast<size_t>(R), 0);
  Tensor mask_t = Tensor::empty({R}, DType::u8);
  for (int64_t r = 0; r < R; ++r) mask_t.data<uint8_t>()[r] = mask[size_t(r)] = uint8_t(gen() % 3 == 0);
  io::write_npy(dir + "/input.npy", input);
  io::write_npy(dir + "/token_mask.npy", mask_t);

  Context ctx({.num_threads = 2});
  bevt::BackboneSaved saved;
  bevt::backbone_forward(ctx, bb, input, image, &mask, saved);
  Tensor g3 = Tensor::empty(saved.x3().shape(), DType::f32), g4 = Tensor::empty(saved.x4().shape(), DType::f32);
  for (Tensor* t : {&g3, &g4})
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = n(gen);
  io::write_npy(dir + "/g_x3.npy", g3);
  io::write_npy(dir + "/g_x4.npy", g4);
  bevt::backbone_backward(ctx, bb, saved, g3, g4);

  ASSERT_EQ(run_python_reference("bevt_backbone_reference.py", dir + " " + dir + " " + stream, dir), "");
  auto load = [&](const std::string& name) { return io::read_npy(dir + "/" + name + ".npy"); };
  // 14 stacked blocks of f32 against float64: a looser bound than one block's
  const Tol tol{1e-3, 1e-3}, param_tol{3e-3, 3e-3};
  EXPECT_TRUE(all_close(flat(saved.x3()), flat(load("x3")), tol)) << "x3";
  EXPECT_TRUE(all_close(flat(saved.x4()), flat(load("x4")), tol)) << "x4";
  int64_t compared = 0;
  for (const Param& p : params) {
    if (p.name.find(image ? "patch_embed." : "patch_embed_2d.") != std::string::npos) continue;  // the other stream's
    if (p.name.rfind("backbone.norm.", 0) == 0) continue;  // the necks' LayerNorm
    EXPECT_TRUE(all_close(flat(p.grad), flat(load("d_" + p.name)), param_tol)) << "d " << p.name;
    ++compared;
  }
  std::printf("[ bevt backbone, %s ] x3 %s, x4 %s, %lld parameter gradients against PyTorch\n", stream.c_str(),
              saved.x3().shape().str().c_str(), saved.x4().shape().str().c_str(), (long long)compared);
}

}  // namespace

// The whole backbone, both streams, against BEVT's SwinTransformerBEVT in PyTorch
// (tests/python/bevt_backbone_reference.py): patch embedding, LayerNorm, the mask token on a
// third of the tokens, four stages with merging; x3, x4 and every parameter's gradient. The video
// clip's stage-4 grid (2 x 2) clips the window; the images' stage 4 is one window that still rolls.
TEST(SwinBlock, BackboneMatchesBevtInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  for (const char* stream : {"video", "image"}) {
    SCOPED_TRACE(stream);
    run_backbone(stream);
  }
}

namespace {

void run_neck(const std::string& stream) {
  const bool image = stream == "image";
  const int64_t embed = 16, vocab = 40, B = 2, D = image ? 1 : 2, H4 = 3, W4 = 2;
  bevt::NeckHeadParams p = bevt::NeckHeadParams::random(embed, vocab, 5);
  train::PV norm_g = train::make_pv(Tensor::empty({8 * embed}, DType::f32)),
            norm_b = train::make_pv(Tensor::empty({8 * embed}, DType::f32));
  std::vector<Param> params = p.params();
  params.push_back(Param{"backbone.norm.weight", norm_g.value, norm_g.grad, false});
  params.push_back(Param{"backbone.norm.bias", norm_b.value, norm_b.grad, false});
  std::mt19937_64 gen(stream == "image" ? 21 : 22);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (Param& q : params) {
    const bool norm_weight = q.name == "backbone.norm.weight";
    for (int64_t i = 0; i < q.value.numel(); ++i)
      q.value.data<float>()[i] = (norm_weight ? 1.0f : 0.0f) + (q.value.ndim() >= 2 ? 0.1f : 0.3f) * n(gen);
  }
  TempDir tmp;
  const std::string dir = tmp.path.string();
  std::ofstream names(dir + "/names.txt");
  for (const Param& q : params) {
    io::write_npy(dir + "/" + q.name + ".npy", q.value);
    names << q.name << "\n";
  }
  names.close();
  Tensor x3 = Tensor::empty({B * D * 4 * H4 * W4, 4 * embed}, DType::f32), x4 = Tensor::empty({B * D * H4 * W4, 8 * embed}, DType::f32);
  for (Tensor* t : {&x3, &x4})
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = n(gen);
  const int64_t rows = B * D * (image ? 1 : 2) * 4 * H4 * W4;
  std::vector<int32_t> targets(static_cast<size_t>(rows), -1);
  for (int32_t& t : targets)
    if (gen() % 2) t = int32_t(gen() % uint64_t(vocab));
  Tensor tt = Tensor::empty({rows}, DType::i32), size4 = Tensor::empty({4}, DType::i64);
  std::copy(targets.begin(), targets.end(), tt.data<int32_t>());
  for (int i = 0; i < 4; ++i) size4.data<int64_t>()[i] = std::array<int64_t, 4>{B, D, H4, W4}[size_t(i)];
  io::write_npy(dir + "/x3.npy", x3), io::write_npy(dir + "/x4.npy", x4);
  io::write_npy(dir + "/targets.npy", tt), io::write_npy(dir + "/size4.npy", size4);

  Context ctx({.num_threads = 2});
  bevt::NeckSaved saved;
  bevt::neck_head_forward(ctx, p, norm_g, norm_b, 1e-5f, x3, x4, image, B, {D, H4, W4}, saved);
  const Tensor logits = saved.logits.contiguous();
  Tensor dlogits;
  const bevt::MaskedLoss loss = bevt::masked_token_loss(ctx, saved, targets, 1.0f, dlogits);
  Tensor g3, g4;
  bevt::neck_head_backward(ctx, p, norm_g, norm_b, saved, dlogits, g3, g4);

  ASSERT_EQ(run_python_reference("bevt_neck_reference.py", dir + " " + stream, dir), "");
  auto load = [&](const std::string& name) { return io::read_npy(dir + "/" + name + ".npy"); };
  const Tol tol{1e-4, 1e-4};
  EXPECT_NEAR(loss.loss, load("ref_loss").data<double>()[0], 1e-5);
  EXPECT_TRUE(all_close(flat(logits), flat(load("ref_logits")), tol)) << "logits";
  EXPECT_TRUE(all_close(flat(g3), flat(load("d_x3")), tol)) << "d x3";
  EXPECT_TRUE(all_close(flat(g4), flat(load("d_x4")), tol)) << "d x4";
  int64_t compared = 0;
  for (const Param& q : params) {
    const bool other = image ? (q.name.find("_s") != std::string::npos || q.name.find("fpn_t") != std::string::npos)
                             : (q.name.find("fpn.0") != std::string::npos || q.name.find("lm_down.") != std::string::npos);
    if (other) continue;  // the other stream's neck
    EXPECT_TRUE(all_close(flat(q.grad), flat(load("d_" + q.name)), tol)) << "d " << q.name;
    ++compared;
  }
  std::printf("[ bevt neck + head, %s ] loss %.6f over %lld masked tokens, %lld gradients against PyTorch\n",
              stream.c_str(), loss.loss, (long long)loss.count, (long long)compared);

  // The same at the masked rows only: every H3 row with a masked output token (video: either of
  // its two frames), in a shuffled order; the logits come out [rows] / [rows, 2].
  const int64_t H3 = 2 * H4, W3 = 2 * W4, plane = H3 * W3, R3 = B * D * plane;
  auto out_row = [&](int64_t r, int64_t slot) {  // H3 row r (b, tau, h, w) -> the output row of its frame
    if (image) return r;
    const int64_t b = r / (D * plane), tau = r / plane % D, hw = r % plane;
    return (b * 2 * D + 2 * tau + slot) * plane + hw;
  };
  std::vector<int32_t> sel;
  for (int64_t r = 0; r < R3; ++r)
    if (targets[size_t(out_row(r, 0))] >= 0 || (!image && targets[size_t(out_row(r, 1))] >= 0)) sel.push_back(int32_t(r));
  ASSERT_LT(int64_t(sel.size()), R3);
  std::shuffle(sel.begin(), sel.end(), gen);
  std::vector<int32_t> sel_targets;
  for (int32_t r : sel)
    for (int64_t slot = 0; slot < (image ? 1 : 2); ++slot) sel_targets.push_back(targets[size_t(out_row(r, slot))]);
  for (Param& q : params) std::fill_n(q.grad.data<float>(), q.grad.numel(), 0.0f);
  bevt::NeckSaved saved_sel;
  bevt::neck_head_forward(ctx, p, norm_g, norm_b, 1e-5f, x3, x4, image, B, {D, H4, W4}, saved_sel, &sel);
  ASSERT_EQ(saved_sel.logits.size(0), int64_t(sel_targets.size()));
  const bevt::MaskedLoss loss_sel = bevt::masked_token_loss(ctx, saved_sel, sel_targets, 1.0f, dlogits);
  Tensor g3s, g4s;
  bevt::neck_head_backward(ctx, p, norm_g, norm_b, saved_sel, dlogits, g3s, g4s);
  EXPECT_NEAR(loss_sel.loss, loss.loss, 1e-5);
  EXPECT_EQ(loss_sel.count, loss.count);
  EXPECT_TRUE(all_close(flat(g3s), flat(g3), tol)) << "selected rows: d x3";
  EXPECT_TRUE(all_close(flat(g4s), flat(g4), tol)) << "selected rows: d x4";
  for (const Param& q : params) {
    const bool other = image ? (q.name.find("_s") != std::string::npos || q.name.find("fpn_t") != std::string::npos)
                             : (q.name.find("fpn.0") != std::string::npos || q.name.find("lm_down.") != std::string::npos);
    if (!other) EXPECT_TRUE(all_close(flat(q.grad), flat(load("d_" + q.name)), tol)) << "selected rows: d " << q.name;
  }
  std::printf("[ bevt neck + head, %s ] %zu of %lld rows evaluated: the same loss and gradients\n", stream.c_str(),
              sel.size(), (long long)R3);
}

}  // namespace

// The necks, the shared LayerNorm and lm_head, and the masked-token cross-entropy against BEVT's
// in PyTorch (tests/python/bevt_neck_reference.py), both streams: ConvTranspose2d / 3d with
// kernel = stride as GEMM + pixel shuffle (the video's (2, 1, 1) doubling the frames), the
// channel-last concatenation, the loss and every gradient (x3, x4 and the parameters).
TEST(SwinBlock, NeckAndHeadMatchBevtInPyTorch) {
  if (!python_has("torch, numpy"))
    GTEST_SKIP() << "/usr/bin/python3 has no torch or numpy";
  for (const char* stream : {"video", "image"}) {
    SCOPED_TRACE(stream);
    run_neck(stream);
  }
}
