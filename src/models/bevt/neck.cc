// models/bevt/neck.cc: see neck.h.
#include "models/bevt/neck.h"

#include <cmath>
#include <functional>
#include <random>

#include "nn/window_geometry.h"
#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

using train::PV;

namespace {

Tensor f32(const Shape& s, Device d) { return Tensor::empty(s, DType::f32, d); }

}  // namespace

NeckHeadParams NeckHeadParams::random(int64_t embed_dim, int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto trunc_normal = [&] { return normal(gen); };
  auto zero = [] { return 0.0f; };
  const int64_t W = 8 * embed_dim;
  // ConvTranspose's default init: kaiming_uniform(a = sqrt 5) over fan_in = weight.size(1) k = out k
  auto conv = [&](int64_t k) {
    const float bound = float(1.0 / std::sqrt(double(W * k)));
    return [&gen, bound] { return std::uniform_real_distribution<float>(-bound, bound)(gen); };
  };
  NeckHeadParams p;
  p.width = W, p.vocab = vocab;
  p.fpn_w = train::filled_pv({W, W * 4}, conv(4)), p.fpn_b = train::filled_pv({W}, conv(4));
  p.lm_down_w = train::filled_pv({W, W + W / 2}, trunc_normal), p.lm_down_b = train::filled_pv({W}, zero);
  p.fpn_s_w = train::filled_pv({W, W * 4}, conv(4)), p.fpn_s_b = train::filled_pv({W}, conv(4));
  p.lm_down_st_w = train::filled_pv({W, W + W / 2}, trunc_normal), p.lm_down_st_b = train::filled_pv({W}, zero);
  p.fpn_t_w = train::filled_pv({W, W * 2}, conv(2)), p.fpn_t_b = train::filled_pv({W}, conv(2));
  p.lm_head_w = train::filled_pv({vocab, W}, trunc_normal), p.lm_head_b = train::filled_pv({vocab}, zero);
  return p;
}

std::vector<Param> NeckHeadParams::params() {
  std::vector<Param> out;
  auto add = [&](const std::string& name, PV& pv, const Shape* view = nullptr) {
    out.push_back(Param{name, view ? pv.value.view(*view) : pv.value, view ? pv.grad.view(*view) : pv.grad, true});
  };
  const int64_t W = width;
  const Shape k2{W, W, 2, 2}, ks{W, W, 1, 2, 2}, kt{W, W, 2, 1, 1};
  add("backbone.fpn.0.weight", fpn_w, &k2), add("backbone.fpn.0.bias", fpn_b);
  add("backbone.lm_down.weight", lm_down_w), add("backbone.lm_down.bias", lm_down_b);
  add("backbone.fpn_s.0.weight", fpn_s_w, &ks), add("backbone.fpn_s.0.bias", fpn_s_b);
  add("backbone.lm_down_st.0.weight", lm_down_st_w), add("backbone.lm_down_st.0.bias", lm_down_st_b);
  add("backbone.fpn_t.0.weight", fpn_t_w, &kt), add("backbone.fpn_t.0.bias", fpn_t_b);
  add("cls_head.lm_head.weight", lm_head_w), add("cls_head.lm_head.bias", lm_head_b);
  return out;
}

void neck_head_forward(Context& ctx, const NeckHeadParams& p, const PV& norm_g, const PV& norm_b, float eps,
                       const Tensor& x3, const Tensor& x4, bool image, int64_t batch, std::array<int64_t, 3> size4,
                       NeckSaved& sv, const std::vector<int32_t>* rows) {
  const int64_t W = p.width, R3 = x3.size(0);
  const Device dev = x3.device();
  UNMASK_CHECK(x4.size(1) == W && x3.size(1) == W / 2 && R3 == 4 * x4.size(0), "BEVT neck: x3 ", x3.describe(),
               " and x4 ", x4.describe(), " do not fit a width of ", W);
  sv.image = image;
  Tensor up;
  train::conv_transpose_forward(ctx, image ? p.fpn_w : p.fpn_s_w, image ? p.fpn_b : p.fpn_s_b, x4, batch, size4,
                                {1, 2, 2}, up, sv.up);
  sv.cat = f32({R3, W + W / 2}, dev);  // cat(x3, up): x3's channels first
  Tensor left = sv.cat.slice(1, 0, W / 2), right = sv.cat.slice(1, W / 2, W + W / 2);
  ops::copy(ctx, x3, left);
  ops::copy(ctx, up, right);
  sv.selected = rows != nullptr;
  sv.cat_rows = Tensor(), sv.row_ids = Tensor();
  const Tensor* cat = &sv.cat;
  if (rows) {
    for (int32_t r : *rows) UNMASK_CHECK(r >= 0 && r < R3, "BEVT neck: row ", r, " is outside the ", R3, " tokens");
    sv.row_ids = train::row_ids(*rows, dev);
    sv.cat_rows = f32({int64_t(rows->size()), W + W / 2}, dev);
    ops::embedding(ctx, sv.cat, sv.row_ids, sv.cat_rows);
    cat = &sv.cat_rows;
  }
  const int64_t M = cat->size(0);
  sv.h = f32({M, W}, dev);
  train::linear_forward(ctx, *cat, image ? p.lm_down_w : p.lm_down_st_w, image ? p.lm_down_b : p.lm_down_st_b, sv.h);
  const Tensor* pre_norm = &sv.h;
  if (!image) {  // selected rows: each is a [1, 1, 1] volume of its own, two frames out
    const int64_t b = rows ? 1 : batch;
    const std::array<int64_t, 3> size = rows ? std::array<int64_t, 3>{M, 1, 1}
                                             : std::array<int64_t, 3>{size4[0], 2 * size4[1], 2 * size4[2]};
    train::conv_transpose_forward(ctx, p.fpn_t_w, p.fpn_t_b, sv.h, b, size, {2, 1, 1}, sv.ht, sv.up_t);
    pre_norm = &sv.ht;
  }
  const int64_t out_rows = pre_norm->size(0);
  sv.ln = f32({out_rows, W}, dev), sv.mean = f32({out_rows}, dev), sv.rstd = f32({out_rows}, dev);
  ops::layernorm(ctx, *pre_norm, nullptr, norm_g.value, norm_b.value, eps, sv.ln, &sv.mean, &sv.rstd);
  sv.logits = f32({out_rows, p.vocab}, dev);
  train::linear_forward(ctx, sv.ln, p.lm_head_w, p.lm_head_b, sv.logits);
}

MaskedLoss masked_token_loss(Context& ctx, NeckSaved& sv, const std::vector<int32_t>& targets, float loss_scale,
                             Tensor& dlogits) {
  const int64_t rows = sv.logits.size(0);
  UNMASK_CHECK(int64_t(targets.size()) == rows, "BEVT loss: ", targets.size(), " targets for ", rows, " tokens");
  int64_t count = 0;
  for (int32_t t : targets) count += t >= 0;
  Tensor ti = Tensor::empty({rows}, DType::i32);
  std::copy(targets.begin(), targets.end(), ti.data<int32_t>());
  if (sv.logits.device() != Device::cpu) ti = ti.to(sv.logits.device());
  dlogits = f32({rows, sv.logits.size(1)}, sv.logits.device());
  ops::copy(ctx, sv.logits, dlogits);
  const ops::CrossEntropyStats ce = ops::cross_entropy(ctx, dlogits, ti, nullptr, &dlogits,
                                                       count > 0 ? loss_scale / float(count) : 0.0f);
  MaskedLoss m;
  m.count = ce.count, m.correct = ce.correct;
  m.loss = count > 0 ? ce.loss_sum / double(count) : 0.0;
  return m;
}

void neck_head_backward(Context& ctx, NeckHeadParams& p, PV& norm_g, PV& norm_b, const NeckSaved& sv,
                        const Tensor& dlogits, Tensor& g_x3, Tensor& g_x4) {
  const int64_t W = p.width, rows = sv.ln.size(0), R3 = sv.cat.size(0);
  const Device dev = dlogits.device();
  Tensor dln = f32({rows, W}, dev);
  train::linear_backward(ctx, sv.ln, p.lm_head_w, p.lm_head_b, dlogits, &dln);
  const Tensor& pre_norm = sv.image ? sv.h : sv.ht;
  Tensor dpre = f32({rows, W}, dev);
  ops::layernorm_backward(ctx, pre_norm, nullptr, norm_g.value, sv.mean, sv.rstd, dln, dpre, norm_g.grad, norm_b.grad);
  Tensor dh = dpre;
  const bool selected = sv.selected;
  const Tensor& cat = selected ? sv.cat_rows : sv.cat;
  const int64_t M = cat.size(0), K = W + W / 2;
  if (!sv.image) {
    dh = f32({M, W}, dev);
    train::conv_transpose_backward(ctx, p.fpn_t_w, p.fpn_t_b, sv.up_t, {2, 1, 1}, dpre, dh);
  }
  Tensor dcat_rows = f32({M, K}, dev);
  train::linear_backward(ctx, cat, sv.image ? p.lm_down_w : p.lm_down_st_w, sv.image ? p.lm_down_b : p.lm_down_st_b,
                         dh, &dcat_rows);
  Tensor dcat = dcat_rows;
  if (selected) {  // the unselected rows get no gradient
    dcat = f32({R3, K}, dev);
    ops::zero_many(ctx, {&dcat});
    ops::embedding_backward(ctx, sv.row_ids, dcat_rows, dcat);
  }
  g_x3 = f32({R3, W / 2}, dev);
  ops::copy(ctx, dcat.slice(1, 0, W / 2), g_x3);
  Tensor dup = f32({R3, W}, dev);
  ops::copy(ctx, dcat.slice(1, W / 2, W + W / 2), dup);
  g_x4 = f32({R3 / 4, W}, dev);
  train::conv_transpose_backward(ctx, sv.image ? p.fpn_w : p.fpn_s_w, sv.image ? p.fpn_b : p.fpn_s_b, sv.up, {1, 2, 2},
                                 dup, g_x4);
}

}  // namespace unmask::bevt
