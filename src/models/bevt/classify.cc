// models/bevt/classify.cc: see classify.h.
#include "models/bevt/classify.h"

#include <cmath>
#include <random>

#include "data/rng.h"
#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

Tensor f32(const Shape& s) { return Tensor::empty(s, DType::f32); }

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

void SwinClassifier::zero_grad() {
  for (Param& p : params()) std::fill_n(p.grad.data<float>(), p.grad.numel(), 0.0f);
}

void SwinClassifier::set_layer_decay(float decay) {
  UNMASK_CHECK(decay > 0.0f && decay <= 1.0f, "layer decay must be in (0, 1], got ", decay);
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
  BackboneSaved bs;
  backbone_forward(ctx, backbone_, videos.contiguous(), false, nullptr, bs, drop);
  VideoMAEClassifyStats st;
  st.drop_scales = drop_path_scales(c, drop, B);
  const Tensor& x4 = bs.x4();
  const int64_t R = x4.size(0), N = R / B;  // tokens per clip
  Tensor y = f32({R, W}), mean = f32({R}), rstd = f32({R});
  ops::layernorm(ctx, x4, nullptr, backbone_.norm_g.value, backbone_.norm_b.value, c.eps, y, &mean, &rstd);
  Tensor pooled = f32({B, W});
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> acc(static_cast<size_t>(W), 0.0);
    const float* x = y.data<float>() + b * N * W;
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < W; ++k) acc[size_t(k)] += x[j * W + k];
    for (int64_t k = 0; k < W; ++k) pooled.data<float>()[b * W + k] = float(acc[size_t(k)] / double(N));
  }
  const uint64_t dropout_offset = (o.step << 32) + uint64_t(o.first_clip * W);
  Tensor hd = pooled;
  if (head_p > 0.0f) {
    hd = f32({B, W});
    ops::dropout(ctx, pooled, hd, head_p, o.seed, dropout_offset);
  }
  st.logits = f32({B, K});
  train::linear_forward(ctx, hd, fc_w_, fc_b_, st.logits);
  if (!have_targets) return st;
  Tensor dlogits;
  st.loss = train::soft_target_cross_entropy(st.logits, targets, o.loss_scale, dlogits);
  if (!o.backward) return st;

  Tensor dh = f32({B, W});
  train::linear_backward(ctx, hd, fc_w_, fc_b_, dlogits, &dh);
  if (head_p > 0.0f) ops::dropout_backward(ctx, dh, dh, head_p, o.seed, dropout_offset);
  Tensor dy = f32({R, W});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t k = 0; k < W; ++k) dy.data<float>()[r * W + k] = dh.data<float>()[(r / N) * W + k] / float(N);
  Tensor g4 = f32({R, W});
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
