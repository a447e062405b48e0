// models/videomae/videomae.cc: VideoMAE configs, parameters (VideoMAE state-dict names), init, the fixed
// sinusoid tables, the tubelet unfold and the normalised-pixel target.
#include "models/videomae/videomae.h"

#include <cmath>
#include <cstring>

#include "data/rng.h"
#include "unmask/error.h"

namespace unmask {

// ---- configs ------------------------------------------------------------------------------------

void VideoMAEConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    if (v <= 0) throw Error("VideoMAEConfig: ", name, " must be positive, got ", v);
  };
  positive("img_size", img_size); positive("num_frames", num_frames); positive("tubelet", tubelet);
  positive("patch", patch); positive("dim", dim); positive("depth", depth); positive("heads", heads);
  positive("decoder_dim", decoder_dim); positive("decoder_depth", decoder_depth);
  positive("decoder_heads", decoder_heads);
  if (channels != 3) throw Error("VideoMAEConfig: channels must be 3 (RGB), got ", channels);
  if (img_size % patch) throw Error("VideoMAEConfig: img_size ", img_size, " is not a multiple of patch ", patch);
  if (num_frames % tubelet)
    throw Error("VideoMAEConfig: num_frames ", num_frames, " is not a multiple of tubelet ", tubelet);
  if (dim % heads) throw Error("VideoMAEConfig: dim ", dim, " is not a multiple of heads ", heads);
  if (decoder_dim % decoder_heads)
    throw Error("VideoMAEConfig: decoder_dim ", decoder_dim, " is not a multiple of decoder_heads ", decoder_heads);
  if (!(mlp_ratio > 0)) throw Error("VideoMAEConfig: mlp_ratio must be positive, got ", mlp_ratio);
}

namespace {
VideoMAEConfig make(int64_t d, int64_t depth, int64_t h, int64_t dd, int64_t ddepth, int64_t dh) {
  VideoMAEConfig c;
  c.dim = d; c.depth = depth; c.heads = h;
  c.decoder_dim = dd; c.decoder_depth = ddepth; c.decoder_heads = dh;
  return c;
}
}  // namespace

VideoMAEConfig VideoMAEConfig::tiny() {
  VideoMAEConfig c = make(64, 2, 2, 32, 1, 2);
  c.img_size = 32;
  c.num_frames = 4;
  return c;
}
VideoMAEConfig VideoMAEConfig::small() { return make(384, 12, 6, 192, 4, 3); }
VideoMAEConfig VideoMAEConfig::base() { return make(768, 12, 12, 384, 4, 6); }
VideoMAEConfig VideoMAEConfig::large() { return make(1024, 24, 16, 512, 12, 8); }
VideoMAEConfig VideoMAEConfig::huge() { return make(1280, 32, 16, 640, 12, 8); }
VideoMAEConfig VideoMAEConfig::giant() {
  VideoMAEConfig c = make(1408, 40, 16, 512, 4, 8);
  c.mlp_ratio = 48.0 / 11.0;
  c.patch = 14;
  return c;
}

VideoMAEConfig VideoMAEConfig::preset(const std::string& name) {
  if (name == "tiny") return tiny();
  if (name == "small" || name == "s") return small();
  if (name == "base" || name == "b") return base();
  if (name == "large" || name == "l") return large();
  if (name == "huge" || name == "h") return huge();
  if (name == "giant" || name == "g") return giant();
  throw Error("unknown VideoMAE preset '", name, "'", Hint("use tiny, small, base, large, huge or giant"));
}

// ---- fixed tables, unfold, target -----------------------------------------------------------

Tensor videomae_sinusoid_table(int64_t n, int64_t d) {
  Tensor t = Tensor::empty({n, d}, DType::f32);
  float* o = t.data<float>();
  for (int64_t pos = 0; pos < n; ++pos)
    for (int64_t j = 0; j < d; ++j) {
      const double angle = double(pos) / std::pow(10000.0, 2.0 * double(j / 2) / double(d));
      o[pos * d + j] = float(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  return t;
}

namespace {
struct VideoDims {
  int64_t B, C, T, H, W, gt, gh, gw;
};
VideoDims check_videos(const Tensor& v, int64_t tubelet, int64_t patch, const char* what) {
  UNMASK_CHECK(v.defined() && v.dtype() == DType::f32 && v.ndim() == 5 && v.is_contiguous() &&
                   v.device() == Device::cpu,
               what, ": videos must be a contiguous CPU f32 [B, C, T, H, W] tensor, got ",
               v.defined() ? v.describe() : std::string("undefined"));
  VideoDims d{v.size(0), v.size(1), v.size(2), v.size(3), v.size(4), 0, 0, 0};
  UNMASK_CHECK(d.T % tubelet == 0 && d.H % patch == 0 && d.W % patch == 0, what, ": videos ",
               v.shape().str(), " do not tile into ", tubelet, "x", patch, "x", patch, " tubelets");
  d.gt = d.T / tubelet;
  d.gh = d.H / patch;
  d.gw = d.W / patch;
  return d;
}
}  // namespace

Tensor videomae_unfold(const Tensor& videos, int64_t tt, int64_t p) {
  const VideoDims d = check_videos(videos, tt, p, "videomae_unfold");
  const int64_t Np = d.gt * d.gh * d.gw, K = d.C * tt * p * p;
  Tensor out = Tensor::empty({d.B * Np, K}, DType::f32);
  const float* v = videos.data<float>();
  float* o = out.data<float>();
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.gt; ++t)
      for (int64_t h = 0; h < d.gh; ++h)
        for (int64_t w = 0; w < d.gw; ++w) {
          float* row = o + ((b * d.gt + t) * d.gh * d.gw + h * d.gw + w) * K;
          for (int64_t c = 0; c < d.C; ++c)
            for (int64_t dt = 0; dt < tt; ++dt)
              for (int64_t dy = 0; dy < p; ++dy) {
                const float* src = v + ((((b * d.C + c) * d.T + t * tt + dt) * d.H + h * p + dy) * d.W + w * p);
                std::memcpy(row + ((c * tt + dt) * p + dy) * p, src, size_t(p) * sizeof(float));
              }
        }
  return out;
}

Tensor videomae_target(const Tensor& videos, int64_t tt, int64_t p, const std::array<float, 3>& mean,
                       const std::array<float, 3>& stdev) {
  const VideoDims d = check_videos(videos, tt, p, "videomae_target");
  UNMASK_CHECK(d.C == 3, "videomae_target: videos must have 3 channels, got ", videos.shape().str());
  const int64_t Np = d.gt * d.gh * d.gw, P = tt * p * p, K = d.C * P;
  // The unfold gives (c, dt, dy, dx) columns; normalise each channel's P pixels and write them
  // channel-fastest.
  Tensor cols = videomae_unfold(videos, tt, p);
  Tensor out = Tensor::empty({d.B * Np, K}, DType::f32);
  const float* in = cols.data<float>();
  float* o = out.data<float>();
  std::vector<double> x(static_cast<size_t>(P));
  for (int64_t r = 0; r < d.B * Np; ++r)
    for (int64_t c = 0; c < d.C; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < P; ++i) {
        x[size_t(i)] = double(in[r * K + c * P + i]) * double(stdev[size_t(c)]) + double(mean[size_t(c)]);
        sum += x[size_t(i)];
      }
      const double mu = sum / double(P);
      double ss = 0;
      for (int64_t i = 0; i < P; ++i) ss += (x[size_t(i)] - mu) * (x[size_t(i)] - mu);
      const double sd = std::sqrt(ss / double(P - 1));  // unbiased, as torch .var()
      for (int64_t i = 0; i < P; ++i) o[r * K + i * d.C + c] = float((x[size_t(i)] - mu) / (sd + 1e-6));
    }
  return out;
}

// ---- parameters -------------------------------------------------------------------------------

namespace {

using video::BlockParams;
using video::PV;

PV zeros_pv(const Shape& s) { return PV{Tensor::zeros(s, DType::f32), Tensor::zeros(s, DType::f32), Tensor()}; }
PV fill_pv(const Shape& s, float v) {
  PV p = zeros_pv(s);
  float* d = p.value.data<float>();
  for (int64_t i = 0; i < p.value.numel(); ++i) d[i] = v;
  return p;
}
PV uniform_pv(const Shape& s, double bound, data::Rng& rng) {
  PV p = zeros_pv(s);
  float* d = p.value.data<float>();
  for (int64_t i = 0; i < p.value.numel(); ++i) d[i] = float((2.0 * rng.uniform() - 1.0) * bound);
  return p;
}
// nn.init.xavier_uniform_ on a Linear weight [out, in].
PV xavier_pv(int64_t out, int64_t in, data::Rng& rng) {
  return uniform_pv({out, in}, std::sqrt(6.0 / double(in + out)), rng);
}

BlockParams make_block(int64_t C, int64_t I, data::Rng& rng) {
  BlockParams b;
  b.norm1_g = fill_pv({C}, 1.0f); b.norm1_b = zeros_pv({C});
  b.q_bias = zeros_pv({C}); b.v_bias = zeros_pv({C});
  b.qkv_w = xavier_pv(3 * C, C, rng);
  b.proj_w = xavier_pv(C, C, rng); b.proj_b = zeros_pv({C});
  b.norm2_g = fill_pv({C}, 1.0f); b.norm2_b = zeros_pv({C});
  b.fc1_w = xavier_pv(I, C, rng); b.fc1_b = zeros_pv({I});
  b.fc2_w = xavier_pv(C, I, rng); b.fc2_b = zeros_pv({C});
  return b;
}

}  // namespace

void VideoMAEPretrainModel::Impl::build_params() {
  const VideoMAEConfig& c = config;
  params.clear();
  const Shape conv{c.dim, c.channels, c.tubelet, c.patch, c.patch};
  auto range_from = [&](int64_t first) { return ParamRange{first, int64_t(params.size())}; };
  params.push_back(Param{"encoder.patch_embed.proj.weight", patch_w.value.view(conv), patch_w.grad.view(conv), true});
  params.push_back(Param{"encoder.patch_embed.proj.bias", patch_b.value, patch_b.grad, false});
  patch_range = range_from(0);
  enc_block_ranges.clear();
  for (size_t i = 0; i < enc_blocks.size(); ++i) {
    const int64_t first = int64_t(params.size());
    video::add_block_params(params, "encoder.blocks." + std::to_string(i) + ".", enc_blocks[i]);
    enc_block_ranges.push_back(range_from(first));
  }
  int64_t first = int64_t(params.size());
  params.push_back(Param{"encoder.norm.weight", enc_norm_g.value, enc_norm_g.grad, false});
  params.push_back(Param{"encoder.norm.bias", enc_norm_b.value, enc_norm_b.grad, false});
  enc_norm_range = range_from(first);
  dec_block_ranges.clear();
  for (size_t i = 0; i < dec_blocks.size(); ++i) {
    first = int64_t(params.size());
    video::add_block_params(params, "decoder.blocks." + std::to_string(i) + ".", dec_blocks[i]);
    dec_block_ranges.push_back(range_from(first));
  }
  first = int64_t(params.size());
  params.push_back(Param{"decoder.norm.weight", dec_norm_g.value, dec_norm_g.grad, false});
  params.push_back(Param{"decoder.norm.bias", dec_norm_b.value, dec_norm_b.grad, false});
  params.push_back(Param{"decoder.head.weight", head_w.value, head_w.grad, true});
  params.push_back(Param{"decoder.head.bias", head_b.value, head_b.grad, false});
  dec_norm_head_range = range_from(first);
  first = int64_t(params.size());
  params.push_back(Param{"encoder_to_decoder.weight", e2d_w.value, e2d_w.grad, true});
  e2d_range = range_from(first);
  const Shape mt{1, 1, c.decoder_dim};
  first = int64_t(params.size());
  params.push_back(Param{"mask_token", mask_token.value.view(mt), mask_token.grad.view(mt), false});
  mask_token_range = range_from(first);
}

std::vector<video::PV*> VideoMAEPretrainModel::Impl::storages() {
  std::vector<video::PV*> s = {&patch_w, &patch_b, &enc_norm_g, &enc_norm_b, &e2d_w, &mask_token,
                               &dec_norm_g, &dec_norm_b, &head_w, &head_b};
  for (auto* blocks : {&enc_blocks, &dec_blocks})
    for (BlockParams& b : *blocks)
      for (PV* p : video::block_storages(b)) s.push_back(p);
  return s;
}

VideoMAEPretrainModel VideoMAEPretrainModel::random(const VideoMAEConfig& config, uint64_t seed) {
  config.validate();
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  const VideoMAEConfig& c = config;
  data::Rng rng(seed);
  const int64_t K = c.patch_dim();
  // Conv3d default init: kaiming_uniform(a = sqrt 5) = U(+-1/sqrt(fan_in)); bias the same bound.
  const double conv_bound = 1.0 / std::sqrt(double(K));
  impl->patch_w = uniform_pv({c.dim, K}, conv_bound, rng);
  impl->patch_b = uniform_pv({c.dim}, conv_bound, rng);
  for (int64_t i = 0; i < c.depth; ++i) impl->enc_blocks.push_back(make_block(c.dim, c.mlp_hidden(c.dim), rng));
  impl->enc_norm_g = fill_pv({c.dim}, 1.0f);
  impl->enc_norm_b = zeros_pv({c.dim});
  impl->e2d_w = xavier_pv(c.decoder_dim, c.dim, rng);
  // mask_token: trunc_normal(std 0.02) truncated at +-1 std (VideoMAE's wrapper passes a=-std, b=std).
  impl->mask_token = zeros_pv({c.decoder_dim});
  for (int64_t i = 0; i < c.decoder_dim; ++i) {
    double z;
    do {
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    } while (z < -1.0 || z > 1.0);
    impl->mask_token.value.data<float>()[i] = float(0.02 * z);
  }
  for (int64_t i = 0; i < c.decoder_depth; ++i)
    impl->dec_blocks.push_back(make_block(c.decoder_dim, c.mlp_hidden(c.decoder_dim), rng));
  impl->dec_norm_g = fill_pv({c.decoder_dim}, 1.0f);
  impl->dec_norm_b = zeros_pv({c.decoder_dim});
  impl->head_w = xavier_pv(K, c.decoder_dim, rng);
  impl->head_b = zeros_pv({K});
  impl->enc_pos = videomae_sinusoid_table(c.num_patches(), c.dim);
  impl->dec_pos = videomae_sinusoid_table(c.num_patches(), c.decoder_dim);
  impl->build_params();
  return VideoMAEPretrainModel(std::move(impl));
}

VideoMAEPretrainModel::VideoMAEPretrainModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoMAEPretrainModel::VideoMAEPretrainModel(VideoMAEPretrainModel&&) noexcept = default;
VideoMAEPretrainModel& VideoMAEPretrainModel::operator=(VideoMAEPretrainModel&&) noexcept = default;
VideoMAEPretrainModel::~VideoMAEPretrainModel() = default;

const VideoMAEConfig& VideoMAEPretrainModel::config() const { return impl_->config; }
std::vector<Param>& VideoMAEPretrainModel::params() { return impl_->params; }
void VideoMAEPretrainModel::zero_grad() {
  for (video::PV* p : impl_->storages()) train::zero_tensor(p->grad);
}

void VideoMAEPretrainModel::zero_grad(Context& ctx) { train::zero_grads(ctx, impl_->storages()); }

}  // namespace unmask
