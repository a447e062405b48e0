// models/bevt/classify.cc: see classify.h.
#include "models/bevt/classify.h"

#include <cmath>
#include <random>

#include "data/rng.h"
#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

Tensor f32(const Shape& s, Device d) { return Tensor::empty(s, DType::f32, d); }

Tensor on(const Tensor& t, Device d) { return t.device() == d ? t : t.to(d); }

// The mean over each clip's N tokens as a matrix: M [B, B N], M[b, r] = 1 / N where r / N == b.
// pooled = M y, and its gradient M^T dpooled: two GEMMs on any device.
Tensor mean_pool_matrix(int64_t B, int64_t N, Device d) {
  Tensor m = Tensor::zeros({B, B * N}, DType::f32);
  for (int64_t b = 0; b < B; ++b) std::fill_n(m.data<float>() + b * B * N + b * N, N, 1.0f / float(N));
  return on(m, d);
}

bool image_stream_only(const std::string& name) {
  return name.rfind("backbone.patch_embed_2d.", 0) == 0 || name == "backbone.mask_token";
}

}  // namespace

SwinClassifier SwinClassifier::random(const SwinConfig& config, int64_t num_classes, uint64_t seed) {
  UNMASK_CHECK(num_classes >= 1, "SwinClassifier: num_classes must be >= 1, got ", num_classes);
  SwinClassifier m;
  m.backbone_ = SwinBackbone::random(config, seed);
  m.num_classes_ = num_classes;
  std::mt19937_64 gen(seed + 17);
  std::normal_distribution<float> n(0.0f, 0.01f);
  m.fc_w_ = train::filled_pv({num_classes, config.dim(3)}, [&] { return n(gen); });
  m.fc_b_ = train::filled_pv({num_classes}, [] { return 0.0f; });
  return m;
}

std::vector<Param>& SwinClassifier::params() {
  if (params_.empty()) {
    for (Param& p : backbone_.params())
      if (!image_stream_only(p.name)) params_.push_back(p);
    params_.push_back(Param{"cls_head.fc_cls.weight", fc_w_.value, fc_w_.grad, true});
    params_.push_back(Param{"cls_head.fc_cls.bias", fc_b_.value, fc_b_.grad, true});
  }
  return params_;
}

void SwinClassifier::zero_grad(Context& ctx) {
  std::vector<Tensor*> grads;
  for (Param& p : params()) grads.push_back(&p.grad);
  ops::zero_many(ctx, grads);
}

void SwinClassifier::to(Context& ctx) {
  if (ctx.device() == device()) return;
  std::vector<train::PV*> all = backbone_.storages();
  all.insert(all.end(), {&fc_w_, &fc_b_});
  train::pvs_to(ctx, all);
  params_.clear();  // the Params were views of the host storages
  if (layer_decay_ > 0.0f) set_layer_decay(layer_decay_);
}

void SwinClassifier::set_layer_decay(float decay) {
  UNMASK_CHECK(decay > 0.0f && decay <= 1.0f, "layer decay must be in (0, 1], got ", decay);
  layer_decay_ = decay;
  const SwinConfig& c = config();
  const int64_t L = c.depths[0] + c.depths[1] + c.depths[2] + c.depths[3];
  for (Param& p : params()) {
    int64_t id = L + 1;  // norm, head
    if (p.name.rfind("backbone.patch_embed.", 0) == 0) {
      id = 0;
    } else if (p.name.rfind("backbone.layers.", 0) == 0) {
      const int stage = p.name[16] - '0';
      int64_t first = 0;
      for (int i = 0; i < stage; ++i) first += c.depths[size_t(i)];
      const size_t at = p.name.find(".blocks.");
      id = at == std::string::npos ? first + c.depths[size_t(stage)]  // downsample: the stage's last block
                                   : first + std::stoll(p.name.substr(at + 8)) + 1;
    }
    p.lr_scale = float(std::pow(double(decay), double(L + 1 - id)));
  }
}

VideoMAEClassifyStats SwinClassifier::step(Context& ctx, const Tensor& videos, const Tensor& targets,
                                           const VideoMAEClassifyOptions& o) {
  const SwinConfig& c = config();
  const int64_t B = videos.size(0), K = num_classes_, W = c.dim(3);
  const bool have_targets = targets.defined();
  if (have_targets)
    UNMASK_CHECK(targets.dtype() == DType::f32 && targets.ndim() == 2 && targets.size(0) == B && targets.size(1) == K &&
                     targets.is_contiguous(),
                 "SwinClassifier: targets must be f32 [", B, ", ", K, "], got ", targets.describe());
  UNMASK_CHECK(o.drop_path_rate >= 0.0f && o.drop_path_rate < 1.0f && o.head_dropout >= 0.0f && o.head_dropout < 1.0f,
               "SwinClassifier: drop_path_rate and head_dropout must be in [0, 1), got ", o.drop_path_rate, " and ",
               o.head_dropout);
  const float head_p = o.train ? o.head_dropout : 0.0f;
  DropPathDraw drop;
  drop.rate = o.train ? o.drop_path_rate : 0.0;
  drop.seed = data::derive_key(o.seed, {o.step});  // fine-tuning revisits clips: key the draws by step too
  drop.stream = 2, drop.first_sample = uint64_t(o.first_clip);
  const Device dev = device();
  UNMASK_CHECK(ctx.device() == dev, "SwinClassifier: the model is on ", device_name(dev), ", the context on ",
               device_name(ctx.device()), Hint("call model.to(ctx) first (then build the Optimizer)"));
  BackboneSaved bs;
  backbone_forward(ctx, backbone_, on(videos, dev).contiguous(), false, nullptr, bs, drop);
  VideoMAEClassifyStats st;
  st.drop_scales = drop_path_scales(c, drop, B);
  const Tensor& x4 = bs.x4();
  const int64_t R = x4.size(0), N = R / B;  // tokens per clip
  Tensor y = f32({R, W}, dev), mean = f32({R}, dev), rstd = f32({R}, dev);
  ops::layernorm(ctx, x4, nullptr, backbone_.norm_g.value, backbone_.norm_b.value, c.eps, y, &mean, &rstd);
  const Tensor pool = mean_pool_matrix(B, N, dev);
  Tensor pooled = f32({B, W}, dev);
  ops::gemm(ctx, pool, ops::Trans::no, y, ops::Trans::no, pooled);
  const uint64_t dropout_offset = (o.step << 32) + uint64_t(o.first_clip * W);
  Tensor hd = pooled;
  if (head_p > 0.0f) {
    hd = f32({B, W}, dev);
    ops::dropout(ctx, pooled, hd, head_p, o.seed, dropout_offset);
  }
  st.logits = f32({B, K}, dev);
  train::linear_forward(ctx, hd, fc_w_, fc_b_, st.logits);
  if (!have_targets) return st;
  Tensor dlogits;  // the loss of B x K values on the host
  st.loss = train::soft_target_cross_entropy(on(st.logits, Device::cpu), on(targets, Device::cpu), o.loss_scale,
                                             dlogits);
  if (!o.backward) return st;
  dlogits = on(dlogits, dev);

  Tensor dh = f32({B, W}, dev);
  train::linear_backward(ctx, hd, fc_w_, fc_b_, dlogits, &dh);
  if (head_p > 0.0f) ops::dropout_backward(ctx, dh, dh, head_p, o.seed, dropout_offset);
  Tensor dy = f32({R, W}, dev);
  ops::gemm(ctx, pool, ops::Trans::yes, dh, ops::Trans::no, dy);
  Tensor g4 = f32({R, W}, dev);
  ops::layernorm_backward(ctx, x4, nullptr, backbone_.norm_g.value, mean, rstd, dy, g4, backbone_.norm_g.grad,
                          backbone_.norm_b.grad);
  backbone_backward(ctx, backbone_, bs, Tensor(), g4);
  return st;
}

Tensor SwinClassifier::logits(Context& ctx, const Tensor& videos) {
  VideoMAEClassifyOptions o;
  o.train = false, o.backward = false;
  return step(ctx, videos, Tensor(), o).logits;
}

}  // namespace unmask::bevt
