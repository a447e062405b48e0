// models/bevt/backbone.cc: see backbone.h.
#include "models/bevt/backbone.h"

#include <cmath>
#include <functional>
#include <random>

#include "data/rng.h"
#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

using train::PV;

namespace {

using train::filled_pv;

PV constant(const Shape& shape, float v) {
  return filled_pv(shape, [v] { return v; });
}

// Stage `stage`'s per-block, per-sample branch scales (see backbone.h).
void draw_stage_drop_path(const SwinConfig& c, int stage, const DropPathDraw& d, int64_t batch, SwinStageShape& s) {
  UNMASK_CHECK(d.rate >= 0 && d.rate < 1, "drop path rate must be in [0, 1), got ", d.rate);
  const int64_t total = c.depths[0] + c.depths[1] + c.depths[2] + c.depths[3];
  int64_t first = 0;
  for (int i = 0; i < stage; ++i) first += c.depths[size_t(i)];
  for (int64_t j = 0; j < c.depths[size_t(stage)]; ++j) {
    const int64_t k = first + j;
    const double rate = total > 1 ? d.rate * double(k) / double(total - 1) : 0.0;
    std::vector<float> attn(static_cast<size_t>(batch), 1.0f), mlp(static_cast<size_t>(batch), 1.0f);
    for (int64_t b = 0; b < batch && rate > 0; ++b) {
      data::Rng rng(data::derive_key(d.seed, {data::kStreamDropPath, d.stream, d.first_sample + uint64_t(b), uint64_t(k)}));
      const float keep = float(1.0 / (1.0 - rate));
      attn[size_t(b)] = rng.uniform() < rate ? 0.0f : keep;
      mlp[size_t(b)] = rng.uniform() < rate ? 0.0f : keep;
    }
    s.drop_attn.push_back(std::move(attn));
    s.drop_mlp.push_back(std::move(mlp));
  }
}

}  // namespace

Tensor drop_path_scales(const SwinConfig& c, const DropPathDraw& d, int64_t batch) {
  const int64_t blocks = c.depths[0] + c.depths[1] + c.depths[2] + c.depths[3];
  Tensor t = Tensor::empty({blocks, 2, batch}, DType::f32);
  std::fill_n(t.data<float>(), t.numel(), 1.0f);  // no drop path: every branch kept as is
  if (d.rate <= 0) return t;
  int64_t k = 0;
  for (int i = 0; i < 4; ++i) {
    SwinStageShape s;
    draw_stage_drop_path(c, i, d, batch, s);
    for (int64_t j = 0; j < c.depths[size_t(i)]; ++j, ++k) {
      std::copy_n(s.drop_attn[size_t(j)].data(), batch, t.data<float>() + (k * 2 + 0) * batch);
      std::copy_n(s.drop_mlp[size_t(j)].data(), batch, t.data<float>() + (k * 2 + 1) * batch);
    }
  }
  return t;
}

SwinConfig SwinConfig::preset(const std::string& name) {
  SwinConfig c;
  if (name == "base") return c;
  if (name == "small" || name == "tiny") {
    c.embed_dim = 96;
    c.heads = {3, 6, 12, 24};
    if (name == "tiny") c.depths = {2, 2, 6, 2};
    return c;
  }
  throw Error("unknown Video Swin size '", name, "'", Hint("the sizes are tiny, small and base (BEVT's default)"));
}

SwinBackbone SwinBackbone::random(const SwinConfig& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);  // trunc_normal(0.02) truncates at +-2: never in practice
  auto trunc_normal = [&] { return normal(gen); };
  auto conv_uniform = [&](int64_t fan_in) {  // PyTorch's default Conv init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    const float bound = float(1.0 / std::sqrt(double(fan_in)));
    return [&gen, bound] { return std::uniform_real_distribution<float>(-bound, bound)(gen); };
  };
  SwinBackbone b;
  b.config = c;
  const int64_t C = c.embed_dim, k3 = 3 * c.patch[0] * c.patch[1] * c.patch[2], k2 = 3 * c.patch[1] * c.patch[2];
  b.patch3_w = filled_pv({C, k3}, conv_uniform(k3));
  b.patch3_b = filled_pv({C}, conv_uniform(k3));
  b.patch3_norm_g = constant({C}, 1.0f), b.patch3_norm_b = constant({C}, 0.0f);
  b.patch2_w = filled_pv({C, k2}, conv_uniform(k2));
  b.patch2_b = filled_pv({C}, conv_uniform(k2));
  b.patch2_norm_g = constant({C}, 1.0f), b.patch2_norm_b = constant({C}, 0.0f);
  b.mask_token = filled_pv({C}, trunc_normal);
  for (int i = 0; i < 4; ++i) {
    const int64_t D = c.dim(i), I = D * c.mlp_ratio;
    SwinStageParams& s = b.stages[size_t(i)];
    for (int64_t j = 0; j < c.depths[size_t(i)]; ++j) {
      nn::BlockParams p;
      p.norm1_g = constant({D}, 1.0f), p.norm1_b = constant({D}, 0.0f);
      p.qkv_w = filled_pv({3 * D, D}, trunc_normal), p.qkv_b = constant({3 * D}, 0.0f);
      p.proj_w = filled_pv({D, D}, trunc_normal), p.proj_b = constant({D}, 0.0f);
      p.norm2_g = constant({D}, 1.0f), p.norm2_b = constant({D}, 0.0f);
      p.fc1_w = filled_pv({I, D}, trunc_normal), p.fc1_b = constant({I}, 0.0f);
      p.fc2_w = filled_pv({D, I}, trunc_normal), p.fc2_b = constant({D}, 0.0f);
      s.blocks.push_back(std::move(p));
      s.tables.push_back(filled_pv({c.table_rows(), c.heads[size_t(i)]}, trunc_normal));
    }
    s.merge = i < 3;
    if (s.merge) {
      s.merging.norm_g = constant({4 * D}, 1.0f), s.merging.norm_b = constant({4 * D}, 0.0f);
      s.merging.reduction_w = filled_pv({2 * D, 4 * D}, trunc_normal);
    }
  }
  b.norm_g = constant({c.dim(3)}, 1.0f), b.norm_b = constant({c.dim(3)}, 0.0f);
  return b;
}

std::vector<Param> SwinBackbone::params() {
  std::vector<Param> out;
  auto add = [&](const std::string& name, PV& p, bool decay, const Shape* view = nullptr) {
    out.push_back(Param{"backbone." + name, view ? p.value.view(*view) : p.value, view ? p.grad.view(*view) : p.grad,
                        decay});
  };
  const SwinConfig& c = config;
  const Shape conv3{c.embed_dim, 3, c.patch[0], c.patch[1], c.patch[2]}, conv2{c.embed_dim, 3, c.patch[1], c.patch[2]};
  add("patch_embed.proj.weight", patch3_w, true, &conv3);
  add("patch_embed.proj.bias", patch3_b, true);  // BEVT decays every name without "norm"
  add("patch_embed.norm.weight", patch3_norm_g, false);
  add("patch_embed.norm.bias", patch3_norm_b, false);
  add("patch_embed_2d.proj.weight", patch2_w, true, &conv2);
  add("patch_embed_2d.proj.bias", patch2_b, true);
  add("patch_embed_2d.norm.weight", patch2_norm_g, false);
  add("patch_embed_2d.norm.bias", patch2_norm_b, false);
  add("mask_token", mask_token, true);
  for (int i = 0; i < 4; ++i) {
    SwinStageParams& s = stages[size_t(i)];
    const std::string layer = "layers." + std::to_string(i) + ".";
    for (size_t j = 0; j < s.blocks.size(); ++j) {
      const std::string pre = layer + "blocks." + std::to_string(j) + ".";
      std::vector<Param> bp;
      nn::add_block_params(bp, "backbone." + pre, s.blocks[j]);
      for (Param& p : bp) {
        // BEVT: weight decay on every parameter whose name lacks "norm" (linear biases included)
        p.weight_decay = p.name.find("norm") == std::string::npos;
        out.push_back(p);
      }
      add(pre + "attn.relative_position_bias_table", s.tables[j], false);
    }
    if (s.merge) {
      add(layer + "downsample.reduction.weight", s.merging.reduction_w, true);
      add(layer + "downsample.norm.weight", s.merging.norm_g, false);
      add(layer + "downsample.norm.bias", s.merging.norm_b, false);
    }
  }
  add("norm.weight", norm_g, false);
  add("norm.bias", norm_b, false);
  return out;
}

std::vector<PV*> SwinBackbone::storages() {
  std::vector<PV*> out = {&patch3_w, &patch3_b, &patch3_norm_g, &patch3_norm_b, &patch2_w,
                          &patch2_b, &patch2_norm_g, &patch2_norm_b, &mask_token, &norm_g, &norm_b};
  for (SwinStageParams& s : stages) {
    for (nn::BlockParams& b : s.blocks)
      for (PV* p : nn::block_storages(b)) out.push_back(p);
    for (PV& t : s.tables) out.push_back(&t);
    if (s.merge) out.insert(out.end(), {&s.merging.norm_g, &s.merging.norm_b, &s.merging.reduction_w});
  }
  return out;
}

void backbone_forward(Context& ctx, const SwinBackbone& bb, const Tensor& input, bool image,
                      const std::vector<uint8_t>* token_mask, BackboneSaved& sv, const DropPathDraw& drop) {
  const SwinConfig& c = bb.config;
  const Device dev = bb.mask_token.value.device();
  UNMASK_CHECK(input.dtype() == DType::f32 && input.ndim() == 5 && input.size(1) == 3 && input.device() == dev,
               "BEVT backbone: the input must be f32 [B, 3, T, H, W] on the model's device (", device_name(dev),
               "), got ", input.describe());
  UNMASK_CHECK(c.patch[1] == c.patch[2], "BEVT backbone: square patches only, got ", c.patch[1], " x ", c.patch[2]);
  const ops::Tubelet tube{image ? 1 : c.patch[0], c.patch[1]};
  const int64_t B = input.size(0), T = input.size(2), H = input.size(3), W = input.size(4);
  UNMASK_CHECK(!image || T == 1, "BEVT backbone: images are one frame, got T = ", T);
  UNMASK_CHECK(T % tube.tubelet == 0 && H % tube.patch == 0 && W % tube.patch == 0, "BEVT backbone: a ", T, " x ", H,
               " x ", W, " input is not whole ", tube.tubelet, " x ", tube.patch, " x ", tube.patch, " patches");
  const std::array<int64_t, 3> size{T / tube.tubelet, H / tube.patch, W / tube.patch};
  const int64_t C = c.embed_dim, R = B * size[0] * size[1] * size[2];
  sv.image = image, sv.batch = B;
  sv.embedded = Tensor::empty({R, C}, DType::f32, dev);
  train::patch_embed_forward(ctx, input, train::all_token_ids(R, dev), tube, image ? bb.patch2_w : bb.patch3_w,
                             image ? bb.patch2_b : bb.patch3_b, sv.embedded, sv.embed);
  sv.ln = Tensor::empty({R + 1, C}, DType::f32, dev);
  sv.mean = Tensor::empty({R}, DType::f32, dev), sv.rstd = Tensor::empty({R}, DType::f32, dev);
  Tensor ln = sv.ln.slice(0, 0, R), token_row = sv.ln.slice(0, R, R + 1);
  ops::layernorm(ctx, sv.embedded, nullptr, (image ? bb.patch2_norm_g : bb.patch3_norm_g).value,
                 (image ? bb.patch2_norm_b : bb.patch3_norm_b).value, c.eps, ln, &sv.mean, &sv.rstd);
  Tensor x = ln;
  sv.mix_ids = Tensor();
  if (token_mask) {
    UNMASK_CHECK(int64_t(token_mask->size()) == R, "BEVT backbone: the token mask has ", token_mask->size(),
                 " entries for ", R, " tokens");
    std::vector<int32_t> ids(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) ids[size_t(r)] = (*token_mask)[size_t(r)] ? int32_t(R) : int32_t(r);
    sv.mix_ids = train::row_ids(ids, dev);
    ops::copy(ctx, bb.mask_token.value.view({1, C}), token_row);
    x = Tensor::empty({R, C}, DType::f32, dev);
    ops::embedding(ctx, sv.ln, sv.mix_ids, x);
  }
  std::array<int64_t, 3> stage_size = size;
  for (int i = 0; i < 4; ++i) {
    SwinStageShape& s = sv.shapes[size_t(i)];
    s.batch = B, s.size = stage_size, s.window = c.window;
    s.dim = c.dim(i), s.heads = c.heads[size_t(i)], s.mlp_hidden = c.dim(i) * c.mlp_ratio, s.eps = c.eps;
    s.image = image;
    s.drop_attn.clear(), s.drop_mlp.clear();
    if (drop.rate > 0) draw_stage_drop_path(c, i, drop, B, s);
    swin_stage_forward(ctx, bb.stages[size_t(i)], x, s, sv.stages[size_t(i)]);
    if (i < 3) {
      x = sv.stages[size_t(i)].merged;
      stage_size = {stage_size[0], stage_size[1] / 2, stage_size[2] / 2};
    }
  }
}

void backbone_backward(Context& ctx, SwinBackbone& bb, BackboneSaved& sv, const Tensor& g_x3, const Tensor& g_x4) {
  Tensor g;  // the gradient of the next stage's input (= this stage's merged output)
  for (int i = 3; i >= 0; --i) {
    const Tensor g_out = i == 3 ? g_x4 : i == 2 ? g_x3 : Tensor();
    if (!g.defined() && !g_out.defined()) continue;  // nothing reaches this stage yet
    g = swin_stage_backward(ctx, bb.stages[size_t(i)], sv.stages[size_t(i)], sv.shapes[size_t(i)], g, g_out);
  }
  UNMASK_CHECK(g.defined(), "BEVT backbone backward: no gradient given");
  const int64_t C = bb.config.embed_dim, R = g.size(0);
  if (sv.mix_ids.defined()) {  // the mask token took the masked rows: their gradient is its
    Tensor dsrc = Tensor::empty({R + 1, C}, DType::f32, g.device());
    ops::zero_many(ctx, {&dsrc});
    ops::embedding_backward(ctx, sv.mix_ids, g, dsrc);
    ops::axpy(ctx, 1.0f, dsrc.slice(0, R, R + 1).view({C}), bb.mask_token.grad);
    g = dsrc.slice(0, 0, R);
  }
  PV& ng = sv.image ? bb.patch2_norm_g : bb.patch3_norm_g;
  PV& nb = sv.image ? bb.patch2_norm_b : bb.patch3_norm_b;
  Tensor dembedded = Tensor::empty({R, C}, DType::f32, g.device());
  ops::layernorm_backward(ctx, sv.embedded, nullptr, ng.value, sv.mean, sv.rstd, g, dembedded, ng.grad, nb.grad);
  train::patch_embed_backward(ctx, sv.embed, sv.image ? bb.patch2_w : bb.patch3_w, sv.image ? bb.patch2_b : bb.patch3_b,
                              dembedded);
}

}  // namespace unmask::bevt
