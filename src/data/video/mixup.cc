// data/video/mixup.cc: timm's Mixup / CutMix in batch mode with label smoothing, for clips
// [B, C, T, H, W] (the contract is in include/unmask/videomae.h, mixup_cutmix).
#include <algorithm>
#include <cmath>

#include "data/rng.h"
#include "unmask/error.h"
#include "unmask/videomae.h"

namespace unmask {

namespace {

double standard_normal(data::Rng& rng) {
  const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Gamma(shape, 1) by Marsaglia and Tsang (2000); shape < 1 through Gamma(shape + 1) * U^(1/shape).
double sample_gamma(double shape, data::Rng& rng) {
  if (shape < 1.0) return sample_gamma(shape + 1.0, rng) * std::pow(1.0 - rng.uniform(), 1.0 / shape);
  const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = standard_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = 1.0 - rng.uniform();
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

double sample_beta(double alpha, data::Rng& rng) {
  const double x = sample_gamma(alpha, rng), y = sample_gamma(alpha, rng);
  return x / (x + y);
}

}  // namespace

MixupResult mixup_cutmix(Tensor& videos, const std::vector<int64_t>& labels, int64_t num_classes,
                         const MixupOptions& o, uint64_t seed) {
  UNMASK_CHECK(videos.defined() && videos.dtype() == DType::f32 && videos.ndim() == 5 && videos.is_contiguous(),
               "mixup_cutmix: videos must be contiguous f32 [B, C, T, H, W], got ",
               videos.defined() ? videos.describe() : std::string("undefined"));
  const int64_t B = videos.size(0), C = videos.size(1), T = videos.size(2), H = videos.size(3), W = videos.size(4);
  UNMASK_CHECK(int64_t(labels.size()) == B, "mixup_cutmix: ", labels.size(), " labels for ", B, " clips");
  UNMASK_CHECK(num_classes >= 1, "mixup_cutmix: num_classes must be >= 1, got ", num_classes);
  for (size_t b = 0; b < labels.size(); ++b)
    UNMASK_CHECK(labels[b] >= 0 && labels[b] < num_classes, "mixup_cutmix: label ", labels[b], " of clip ", b,
                 " is outside [0, ", num_classes, ")");
  UNMASK_CHECK(o.mixup_alpha >= 0.0f && o.cutmix_alpha >= 0.0f && o.label_smoothing >= 0.0f &&
                   o.label_smoothing < 1.0f && o.prob >= 0.0f && o.prob <= 1.0f,
               "mixup_cutmix: alphas must be >= 0, prob in [0, 1] and label smoothing in [0, 1)");

  // timm Mixup._params_per_batch
  data::Rng rng(data::derive_key(seed, {data::kStreamMixup}));
  MixupResult r;
  if ((o.mixup_alpha > 0.0f || o.cutmix_alpha > 0.0f) && rng.uniform() < double(o.prob)) {
    if (o.mixup_alpha > 0.0f && o.cutmix_alpha > 0.0f)
      r.cutmix = rng.uniform() < double(o.switch_prob);
    else
      r.cutmix = o.cutmix_alpha > 0.0f;
    r.lam = sample_beta(r.cutmix ? o.cutmix_alpha : o.mixup_alpha, rng);
  }

  float* x = videos.data<float>();
  const int64_t plane = H * W, clip = C * T * plane;
  if (r.lam < 1.0) {
    if (r.cutmix) {
      // timm rand_bbox (margin 0) + correct_lam: a box of about (1 - lam) of the area, clipped
      // at the borders, cut from the reversed batch into every frame and channel.
      const double ratio = std::sqrt(1.0 - r.lam);
      const int64_t cut_h = int64_t(double(H) * ratio), cut_w = int64_t(double(W) * ratio);
      const int64_t cy = int64_t(rng.below(uint64_t(H))), cx = int64_t(rng.below(uint64_t(W)));
      const int64_t y0 = std::clamp(cy - cut_h / 2, int64_t(0), H), y1 = std::clamp(cy + cut_h / 2, int64_t(0), H);
      const int64_t x0 = std::clamp(cx - cut_w / 2, int64_t(0), W), x1 = std::clamp(cx + cut_w / 2, int64_t(0), W);
      r.lam = 1.0 - double((y1 - y0) * (x1 - x0)) / double(H * W);
      // pairs (b, B-1-b) swap the box with each other; the middle clip of an odd batch keeps its own
      for (int64_t b = 0; b < B / 2; ++b) {
        float* p = x + b * clip;
        float* q = x + (B - 1 - b) * clip;
        for (int64_t ct = 0; ct < C * T; ++ct)
          for (int64_t yy = y0; yy < y1; ++yy)
            for (int64_t xx = x0; xx < x1; ++xx) std::swap(p[ct * plane + yy * W + xx], q[ct * plane + yy * W + xx]);
      }
    } else {
      // x = lam x + (1 - lam) x.flip(0), pairwise so no copy of the batch is needed
      const float lam = float(r.lam), rest = float(1.0 - r.lam);
      for (int64_t b = 0; b < B / 2; ++b) {
        float* p = x + b * clip;
        float* q = x + (B - 1 - b) * clip;
        for (int64_t i = 0; i < clip; ++i) {
          const float a = p[i], c = q[i];
          p[i] = lam * a + rest * c;
          q[i] = lam * c + rest * a;
        }
      }
    }
  }
  // timm mixup_target: one_hot(y, on = 1 - s + s/K, off = s/K) mixed with the reversed batch
  const double off = double(o.label_smoothing) / double(num_classes), on = 1.0 - double(o.label_smoothing) + off;
  r.targets = Tensor::empty({B, num_classes}, DType::f32);
  float* t = r.targets.data<float>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < num_classes; ++k) t[b * num_classes + k] = float(off);
    t[b * num_classes + labels[size_t(b)]] = float(r.lam * on + (1.0 - r.lam) * off);
    const int64_t other = labels[size_t(B - 1 - b)];
    t[b * num_classes + other] += float((1.0 - r.lam) * (on - off));
  }
  return r;
}

}  // namespace unmask
