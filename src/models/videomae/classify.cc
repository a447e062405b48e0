// models/videomae/classify.cc: VideoMAE's fine-tuning model (modeling_finetune.py, mean pooling):
// tubelet embedding of all Np tokens + the fixed sinusoid table, pre-LN blocks with drop path,
// mean over tokens, fc_norm, dropout, head; the soft-target cross-entropy and the backward through
// all of it; layer-wise lr decay. CPU. Shapes (B clips, Np tokens per clip, D dim, K classes):
//   cols [B*Np, 3*tt*p*p] -> x0 [B*Np, D] -> blocks -> pooled [B, D] -> fc_norm -> h [B, D]
//   -> dropout -> logits [B, K]
#include <cmath>
#include <cstring>

#include "data/rng.h"
#include "nn/patch_embed.h"
#include "ops/ops.h"
#include "unmask/error.h"
#include "models/videomae/videomae.h"

namespace unmask {

using video::BlockParams;
using video::BlockSaved;
using video::BlockShape;
using video::PV;

struct VideoMAEClassifier::Impl {
  VideoMAEConfig config;
  int64_t num_classes = 0;
  PV patch_w, patch_b;               // [D, patch_dim] (Param view [D, 3, tt, p, p]), [D]
  std::vector<BlockParams> blocks;
  PV fc_norm_g, fc_norm_b;           // [D]
  PV head_w, head_b;                 // [K, D], [K]
  Tensor pos;                        // fixed sinusoid table [Np, D]
  std::vector<Param> params;         // original fine-tune names, state-dict order

  std::vector<PV*> storages() {
    std::vector<PV*> s = {&patch_w, &patch_b, &fc_norm_g, &fc_norm_b, &head_w, &head_b};
    for (BlockParams& b : blocks)
      for (PV* p : video::block_storages(b)) s.push_back(p);
    return s;
  }
  void build_params() {
    const VideoMAEConfig& c = config;
    params.clear();
    const Shape conv{c.dim, c.channels, c.tubelet, c.patch, c.patch};
    params.push_back(Param{"patch_embed.proj.weight", patch_w.value.view(conv), patch_w.grad.view(conv), true});
    params.push_back(Param{"patch_embed.proj.bias", patch_b.value, patch_b.grad, false});
    for (size_t i = 0; i < blocks.size(); ++i)
      video::add_block_params(params, "blocks." + std::to_string(i) + ".", blocks[i]);
    params.push_back(Param{"fc_norm.weight", fc_norm_g.value, fc_norm_g.grad, false});
    params.push_back(Param{"fc_norm.bias", fc_norm_b.value, fc_norm_b.grad, false});
    params.push_back(Param{"head.weight", head_w.value, head_w.grad, true});
    params.push_back(Param{"head.bias", head_b.value, head_b.grad, false});
  }
};

namespace {

Tensor f32(const Shape& s) { return Tensor::empty(s, DType::f32); }

PV zeros_pv(const Shape& s) { return PV{Tensor::zeros(s, DType::f32), Tensor::zeros(s, DType::f32), Tensor()}; }
PV ones_pv(const Shape& s) {
  PV p = zeros_pv(s);
  for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = 1.0f;
  return p;
}
// timm trunc_normal_(std=0.02): N(0, 0.02^2) rejected outside the ABSOLUTE bounds [-2, 2] (timm's
// defaults a=-2, b=2 are values, not standard deviations, so at std 0.02 nothing is ever cut).
PV trunc_normal_pv(const Shape& s, double std, data::Rng& rng) {
  PV p = zeros_pv(s);
  float* d = p.value.data<float>();
  for (int64_t i = 0; i < p.value.numel(); ++i) {
    double z;
    do {
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      z = std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    } while (z < -2.0 || z > 2.0);
    d[i] = float(z);
  }
  return p;
}
PV uniform_pv(const Shape& s, double bound, data::Rng& rng) {
  PV p = zeros_pv(s);
  for (int64_t i = 0; i < p.value.numel(); ++i)
    p.value.data<float>()[i] = float((2.0 * rng.uniform() - 1.0) * bound);
  return p;
}

// Per-clip drop-path scales of one branch for clips [first, first + clips) of the step's global
// batch: 0 with probability rate, else 1 / (1 - rate). Each (seed, step, block, branch, clip)
// draws its own uniform (the stream's first_clip-th onwards), so a step is reproducible and a
// rank's slice gets the whole batch's draws for its clips.
std::vector<float> drop_path_scales(int64_t clips, float rate, uint64_t seed, uint64_t step, int64_t block,
                                    int branch, int64_t first) {
  std::vector<float> s(size_t(clips), 1.0f);
  data::Rng rng(data::derive_key(seed, {data::kStreamDropPath, step, uint64_t(block), uint64_t(branch)}));
  for (int64_t i = 0; i < first; ++i) (void)rng.uniform();
  for (auto& v : s) v = rng.uniform() < double(rate) ? 0.0f : float(1.0 / (1.0 - double(rate)));
  return s;
}

void check_videos(const VideoMAEConfig& c, const Tensor& videos, const char* what) {
  UNMASK_CHECK(videos.defined() && videos.dtype() == DType::f32 && videos.ndim() == 5 &&
                   videos.size(1) == c.channels && videos.size(2) == c.num_frames && videos.size(3) == c.img_size &&
                   videos.size(4) == c.img_size,
               what, ": videos must be f32 [B, ", c.channels, ", ", c.num_frames, ", ", c.img_size, ", ", c.img_size,
               "], got ", videos.defined() ? videos.describe() : std::string("undefined"),
               Hint("the clip length and crop must match the model's num_frames and img_size"));
}

}  // namespace

VideoMAEClassifier VideoMAEClassifier::random(const VideoMAEConfig& config, int64_t num_classes, uint64_t seed,
                                              float init_scale) {
  config.validate();
  UNMASK_CHECK(num_classes >= 1, "VideoMAEClassifier: num_classes must be >= 1, got ", num_classes);
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->num_classes = num_classes;
  const VideoMAEConfig& c = config;
  const int64_t D = c.dim, I = c.mlp_hidden(D);
  data::Rng rng(seed);
  const double conv_bound = 1.0 / std::sqrt(double(c.patch_dim()));  // Conv3d default init
  impl->patch_w = uniform_pv({D, c.patch_dim()}, conv_bound, rng);
  impl->patch_b = uniform_pv({D}, conv_bound, rng);
  for (int64_t i = 0; i < c.depth; ++i) {
    BlockParams b;
    b.norm1_g = ones_pv({D}); b.norm1_b = zeros_pv({D});
    b.q_bias = zeros_pv({D}); b.v_bias = zeros_pv({D});
    b.qkv_w = trunc_normal_pv({3 * D, D}, 0.02, rng);
    b.proj_w = trunc_normal_pv({D, D}, 0.02, rng); b.proj_b = zeros_pv({D});
    b.norm2_g = ones_pv({D}); b.norm2_b = zeros_pv({D});
    b.fc1_w = trunc_normal_pv({I, D}, 0.02, rng); b.fc1_b = zeros_pv({I});
    b.fc2_w = trunc_normal_pv({D, I}, 0.02, rng); b.fc2_b = zeros_pv({D});
    impl->blocks.push_back(std::move(b));
  }
  impl->fc_norm_g = ones_pv({D});
  impl->fc_norm_b = zeros_pv({D});
  impl->head_w = trunc_normal_pv({num_classes, D}, 0.02, rng);
  impl->head_b = zeros_pv({num_classes});
  for (PV* p : {&impl->head_w, &impl->head_b})  // head.weight/bias .mul_(init_scale)
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data<float>()[i] *= init_scale;
  impl->pos = videomae_sinusoid_table(c.num_patches(), D);
  impl->build_params();
  return VideoMAEClassifier(std::move(impl));
}

VideoMAEClassifier::VideoMAEClassifier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoMAEClassifier::VideoMAEClassifier(VideoMAEClassifier&&) noexcept = default;
VideoMAEClassifier& VideoMAEClassifier::operator=(VideoMAEClassifier&&) noexcept = default;
VideoMAEClassifier::~VideoMAEClassifier() = default;

const VideoMAEConfig& VideoMAEClassifier::config() const { return impl_->config; }
int64_t VideoMAEClassifier::num_classes() const { return impl_->num_classes; }
std::vector<Param>& VideoMAEClassifier::params() { return impl_->params; }
void VideoMAEClassifier::zero_grad() {
  for (PV* p : impl_->storages()) train::zero_tensor(p->grad);
}

void VideoMAEClassifier::zero_grad(Context& ctx) { train::zero_grads(ctx, impl_->storages()); }

void VideoMAEClassifier::set_layer_decay(float decay) {
  UNMASK_CHECK(std::isfinite(decay) && decay > 0.0f && decay <= 1.0f, "layer decay must be in (0, 1], got ", decay);
  const int64_t L = impl_->config.depth;
  for (Param& p : impl_->params) {
    int64_t id = L + 1;  // fc_norm, head
    if (p.name.rfind("patch_embed.", 0) == 0) {
      id = 0;
    } else if (p.name.rfind("blocks.", 0) == 0) {
      id = std::stoll(p.name.substr(7, p.name.find('.', 7) - 7)) + 1;
    }
    p.lr_scale = float(std::pow(double(decay), double(L + 1 - id)));
    if (p.value.ndim() == 1) p.weight_decay = false;  // VideoMAE: no decay on 1-D params
  }
}

Tensor VideoMAEClassifier::logits(Context& ctx, const Tensor& videos) {
  VideoMAEClassifyOptions o;
  o.backward = false;
  o.train = false;
  return step(ctx, videos, Tensor(), o).logits;
}

VideoMAEClassifyStats VideoMAEClassifier::step(Context& ctx, const Tensor& videos, const Tensor& targets,
                                               const VideoMAEClassifyOptions& options) {
  Impl& m = *impl_;
  const VideoMAEConfig& c = m.config;
  UNMASK_CHECK(ctx.device() == Device::cpu, "VideoMAEClassifier::step runs on the CPU, got a ",
               device_name(ctx.device()), " context");
  check_videos(c, videos, "VideoMAEClassifier::step");
  video::retain_freed_memory();
  const int64_t B = videos.size(0), Np = c.num_patches(), D = c.dim, K = m.num_classes;
  const bool have_targets = targets.defined();
  if (have_targets)
    UNMASK_CHECK(targets.dtype() == DType::f32 && targets.ndim() == 2 && targets.size(0) == B &&
                     targets.size(1) == K && targets.is_contiguous(),
                 "VideoMAEClassifier::step: targets must be f32 [", B, ", ", K, "], got ", targets.describe());
  UNMASK_CHECK(options.drop_path_rate >= 0.0f && options.drop_path_rate < 1.0f && options.head_dropout >= 0.0f &&
                   options.head_dropout < 1.0f,
               "VideoMAEClassifier::step: drop_path_rate and head_dropout must be in [0, 1), got ",
               options.drop_path_rate, " and ", options.head_dropout);
  UNMASK_CHECK(options.first_clip >= 0, "VideoMAEClassifier::step: first_clip must be >= 0, got ", options.first_clip);
  const float drop_path = options.train ? options.drop_path_rate : 0.0f;
  const float head_p = options.train ? options.head_dropout : 0.0f;

  // ---- forward ----
  train::PatchEmbedSaved patch_saved;  // every token's pixels [B*Np, patch_dim]
  Tensor x0 = f32({B * Np, D});
  train::patch_embed_forward(ctx, videos.contiguous(), train::all_token_ids(B * Np, videos.device()),
                             ops::Tubelet{c.tubelet, c.patch}, m.patch_w, m.patch_b, x0, patch_saved);
  {
    float* x = x0.data<float>();
    const float* pe = m.pos.data<float>();
    for (int64_t r = 0; r < B * Np; ++r)
      for (int64_t k = 0; k < D; ++k) x[r * D + k] += pe[(r % Np) * D + k];
  }
  // drop path: rate_i = drop_path * i / (depth - 1) (torch.linspace(0, rate, depth))
  const int64_t L = c.depth;
  std::vector<std::vector<float>> drop_scales(static_cast<size_t>(2 * L));
  std::vector<BlockShape> shapes(size_t(L), BlockShape{D, c.mlp_hidden(D), c.heads, Np, c.norm_eps});
  for (int64_t i = 0; i < L && drop_path > 0.0f; ++i) {
    const float rate = L > 1 ? drop_path * float(i) / float(L - 1) : drop_path;
    if (rate <= 0.0f) continue;
    for (int branch = 0; branch < 2; ++branch)
      drop_scales[size_t(2 * i + branch)] = drop_path_scales(B, rate, options.seed, options.step, i, branch, options.first_clip);
    shapes[size_t(i)].drop_attn = drop_scales[size_t(2 * i)].data();
    shapes[size_t(i)].drop_mlp = drop_scales[size_t(2 * i + 1)].data();
  }
  VideoMAEClassifyStats st;
  st.drop_scales = Tensor::empty({L, 2, B}, DType::f32);
  for (int64_t i = 0; i < L; ++i)
    for (int branch = 0; branch < 2; ++branch)
      for (int64_t b = 0; b < B; ++b) {
        const auto& v = drop_scales[size_t(2 * i + branch)];
        st.drop_scales.data<float>()[(i * 2 + branch) * B + b] = v.empty() ? 1.0f : v[size_t(b)];
      }
  std::vector<BlockSaved> saved(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i)
    video::block_forward(ctx, m.blocks[size_t(i)], i == 0 ? x0 : saved[size_t(i - 1)].out, shapes[size_t(i)],
                         saved[size_t(i)]);
  const Tensor& last = L > 0 ? saved.back().out : x0;
  // mean over the Np tokens of each clip, accumulated in double
  Tensor pooled = f32({B, D});
  for (int64_t b = 0; b < B; ++b) {
    std::vector<double> acc(size_t(D), 0.0);
    const float* x = last.data<float>() + b * Np * D;
    for (int64_t j = 0; j < Np; ++j)
      for (int64_t k = 0; k < D; ++k) acc[size_t(k)] += x[j * D + k];
    for (int64_t k = 0; k < D; ++k) pooled.data<float>()[b * D + k] = float(acc[size_t(k)] / double(Np));
  }
  Tensor h = f32({B, D}), h_mean = f32({B}), h_rstd = f32({B});
  ops::layernorm(ctx, pooled, nullptr, m.fc_norm_g.value, m.fc_norm_b.value, c.norm_eps, h, &h_mean, &h_rstd);
  // dropout offset: the step's counter stream, disjoint from anything else keyed on the seed; the
  // batch's rows are the global batch's rows first_clip.. (element counters r D + k)
  const uint64_t dropout_offset = (options.step << 32) + uint64_t(options.first_clip * D);
  Tensor hd = h;
  if (head_p > 0.0f) {
    hd = f32({B, D});
    ops::dropout(ctx, h, hd, head_p, options.seed, dropout_offset);
  }
  st.logits = f32({B, K});
  train::linear_forward(ctx, hd, m.head_w, m.head_b, st.logits);
  if (!have_targets) return st;

  // ---- soft-target cross-entropy: mean_b sum_k -t[b,k] log_softmax(z[b])[k] ----
  Tensor dlogits;
  st.loss = train::soft_target_cross_entropy(st.logits, targets, options.loss_scale, dlogits);
  if (!options.backward) return st;

  // ---- backward ----
  Tensor dh = f32({B, D});
  train::linear_backward(ctx, hd, m.head_w, m.head_b, dlogits, &dh);
  if (head_p > 0.0f) ops::dropout_backward(ctx, dh, dh, head_p, options.seed, dropout_offset);
  ops::layernorm_backward(ctx, pooled, nullptr, m.fc_norm_g.value, h_mean, h_rstd, dh, dh, m.fc_norm_g.grad,
                          m.fc_norm_b.grad);
  Tensor g = f32({B * Np, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Np; ++j)
      for (int64_t k = 0; k < D; ++k)
        g.data<float>()[(b * Np + j) * D + k] = dh.data<float>()[b * D + k] / float(Np);
  for (int64_t i = L; i-- > 0;)
    video::block_backward(ctx, m.blocks[size_t(i)], i == 0 ? x0 : saved[size_t(i - 1)].out, saved[size_t(i)],
                          shapes[size_t(i)], g);
  train::patch_embed_backward(ctx, patch_saved, m.patch_w, m.patch_b, g);
  return st;
}

}  // namespace unmask
