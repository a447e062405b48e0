// unmask/videomae.h: VideoMAE pretraining (masked video autoencoding) on the op front-ends, on the
// CPU or a CUDA context (fine-tuning and evaluation: the CPU).
//
// The model is the VideoMAE v1/v2 ViT (/work/shared/reference/video.md section 1): Conv3d tubelet
// embedding (tubelet x patch x patch, as a GEMM on unfolded tubelets), a fixed 1-D sinusoid
// position table over the flattened (t, h, w) tokens, pre-LN blocks (LayerNorm eps 1e-6, fused
// qkv without bias plus q_bias and v_bias, no key bias, exact GELU MLP), an encoder over the
// visible tokens only, encoder_to_decoder (no bias), a mask token, a decoder with its own
// position table, and decoder.norm + head on the masked tokens predicting the per-patch
// normalised pixels (loss: MSE averaged over masked tokens x pixels).
//
// Usage:
//   unmask::Context ctx({.num_threads = 2});
//   auto model = unmask::VideoMAEPretrainModel::random(unmask::VideoMAEConfig::base(), 0);
//   unmask::Optimizer opt(oc, model.params());
//   model.zero_grad();
//   auto s = model.pretrain_step(ctx, videos /* f32 [B,3,T,H,W] */, mask /* u8 [B, Np] */, {});
//   opt.step(ctx, lr);
#pragma once
#include <array>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "unmask/context.h"
#include "unmask/tensor.h"
#include "unmask/train.h"

namespace unmask {

struct VideoMAEConfig {
  int64_t img_size = 224, num_frames = 16, tubelet = 2, patch = 16, channels = 3;
  int64_t dim = 768, depth = 12, heads = 12;                   // encoder
  int64_t decoder_dim = 384, decoder_depth = 4, decoder_heads = 6;
  double mlp_ratio = 4.0;                                      // hidden = int(dim * mlp_ratio)
  float norm_eps = 1e-6f;

  int64_t grid_t() const { return num_frames / tubelet; }
  int64_t grid_hw() const { return img_size / patch; }
  int64_t num_patches() const { return grid_t() * grid_hw() * grid_hw(); }
  int64_t patch_dim() const { return channels * tubelet * patch * patch; }  // also the head output
  int64_t mlp_hidden(int64_t d) const { return int64_t(double(d) * mlp_ratio); }
  /// Throws naming the first inconsistent field (sizes not divisible, heads not dividing dims).
  void validate() const;

  /// Test size: 32x32 pixels, 4 frames (8 tokens), dim 64 / depth 2 / 2 heads, decoder 32 / 1 / 2.
  static VideoMAEConfig tiny();
  static VideoMAEConfig small();  // S/16: 384/12/6, decoder 192/4/3
  static VideoMAEConfig base();   // B/16: 768/12/12, decoder 384/4/6
  static VideoMAEConfig large();  // L/16: 1024/24/16, decoder 512/12/8 (v1 K400 scripts)
  static VideoMAEConfig huge();   // H/16: 1280/32/16, decoder 640/12/8 (v1)
  static VideoMAEConfig giant();  // g/14 (v2): 1408/40/16, mlp 48/11, patch 14, decoder 512/4/8
  /// By name: tiny, small|s, base|b, large|l, huge|h, giant|g.
  static VideoMAEConfig preset(const std::string& name);
};

struct VideoMAEStepOptions {
  float loss_scale = 1.0f;  // gradients are of loss_scale * loss
  bool backward = true;     // false: forward and loss only
  /// The clip normalisation of the input (the target is built from videos * std + mean).
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  /// Keep the predicted pixels [B * Nd, patch_dim] and targets (same shape) of the step.
  bool keep_outputs = false;
  /// VideoMAE v2 dual masking: u8 [B, num_patches], 1 = NOT decoded (a running-cell mask,
  /// video/masking.h). The decoder then sees the visible tokens plus mask tokens at every kept
  /// position (Nd per clip, the same in every row; kept positions may be encoder-visible), and the
  /// loss is the MSE over the kept positions that the encoder masked. Undefined: decode exactly the
  /// encoder-masked tokens (VideoMAE v1; the same as passing 1 - mask).
  Tensor decoder_mask;
  /// Data parallel: called during the backward with each index range [first, end) of params()
  /// whose gradients are final (decoder norm + head, each decoder block from the last, the mask
  /// token, encoder_to_decoder, the encoder norm, each encoder block from the last, the patch
  /// embedding), so their all-reduce can start while the backward goes on (dist::GradientSync).
  std::function<void(int64_t first, int64_t end)> grads_ready;
  /// Recompute each block's GELU output in the backward instead of keeping it (saves 4 of the 14
  /// [tokens, dim]-sized activations a block keeps; one extra GELU pass). Unset: on a GPU only,
  /// where memory bounds the batch (ViT-B at 256 clips). The results are the same bits either way.
  std::optional<bool> recompute_gelu;
  /// The encoder and decoder blocks' activations: f32, or bf16 (saved activations, gradients and
  /// block GEMMs in bf16 with fp32 accumulation, bf16 copies of the block weights rounded from the
  /// fp32 masters at every step; patch embedding, norms, head and loss stay f32). On CUDA the
  /// head sizes must be 64, 80, 88 or 128 (ViT-B: 64); on the CPU it is emulated (for checking).
  DType activations = DType::f32;
};

struct VideoMAEStepStats {
  double loss = 0;             // mean squared error over the loss tokens x patch_dim
  int64_t clips = 0, masked_tokens = 0, visible_tokens = 0;
  int64_t decoded_tokens = 0;  // mask-token positions the decoder reconstructed (B * Nd)
  int64_t loss_tokens = 0;     // of those, the encoder-masked ones the loss averages over
  Tensor pred, target;         // f32 [B * Nd, patch_dim] (keep_outputs only), clip-major, token order
};

/// A VideoMAE pretraining model with owned f32 parameters and gradients, on the CPU or (after
/// to(cuda_ctx)) on a GPU.
class VideoMAEPretrainModel {
 public:
  /// VideoMAE's init: xavier_uniform on every Linear (fused qkv as one [3D, D] matrix), zero
  /// biases (q_bias, v_bias too), LayerNorm (1, 0), Conv3d PyTorch default (kaiming_uniform
  /// a=sqrt(5): U(+-1/sqrt(fan_in)) for weight and bias), mask_token N(0, 0.02) truncated at
  /// +-0.02. Deterministic in `seed`.
  static VideoMAEPretrainModel random(const VideoMAEConfig& config, uint64_t seed);

  VideoMAEPretrainModel(VideoMAEPretrainModel&&) noexcept;
  VideoMAEPretrainModel& operator=(VideoMAEPretrainModel&&) noexcept;
  ~VideoMAEPretrainModel();

  const VideoMAEConfig& config() const;
  /// Every parameter under its original VideoMAE state-dict name (encoder.patch_embed.proj.weight
  /// [D, 3, 2, 16, 16], encoder.blocks.0.attn.qkv.weight, ..., mask_token [1, 1, Dd]).
  std::vector<Param>& params();
  /// Zeroes every gradient. With a context, queued on its stream as a few multi-tensor launches
  /// (ops::zero_many); without one, a cudaMemset per tensor on the legacy default stream.
  void zero_grad();
  void zero_grad(Context& ctx);
  /// Where the parameters live.
  Device device() const;
  /// Moves the parameters, gradients and position tables to ctx.device(). The Params are
  /// rebuilt over the new storage: build the Optimizer after this call.
  void to(Context& ctx);

  /// Forward (+ backward, accumulating into the gradients) of the pretraining loss, on ctx's
  /// device (the model's; videos there too).
  ///   videos: f32 [B, 3, T, H, W], normalised by options.mean/std
  ///   mask:   u8 [B, num_patches], nonzero = masked; every row masks the same number (>= 1).
  ///           Read on the host (a device mask is copied back): it decides the step's index lists.
  VideoMAEStepStats pretrain_step(Context& ctx, const Tensor& videos, const Tensor& mask,
                                  const VideoMAEStepOptions& options);

  struct Impl;
 private:
  explicit VideoMAEPretrainModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Fine-tuning options of one VideoMAEClassifier step (VideoMAE run_class_finetuning.py).
struct VideoMAEClassifyOptions {
  bool backward = true;       // with targets: also the backward pass (gradients accumulate)
  bool train = true;          // false: evaluation (no drop path, no dropout)
  float loss_scale = 1.0f;
  /// Stochastic depth: block i drops its two residual branches per clip with probability
  /// drop_path_rate * i / (depth - 1) (timm's linear rule; kept branches scaled by 1 / keep).
  float drop_path_rate = 0.0f;
  float head_dropout = 0.0f;  // dropout on the pooled features before the head (fc_drop_rate)
  /// Counter-based RNG for drop path and dropout: the same (seed, step) draws the same masks.
  uint64_t seed = 0, step = 0;
  /// The index of this batch's first clip in the step's global batch (data parallel: rank r's
  /// slice starts at r x its batch): drop path and dropout draw, for these clips, the masks the
  /// whole batch would, so N ranks of b clips compute what one process of N b clips does.
  int64_t first_clip = 0;
};

struct VideoMAEClassifyStats {
  double loss = 0;   // soft-target cross-entropy, mean over clips (0 when no targets are given)
  Tensor logits;     // f32 [B, num_classes]
  Tensor drop_scales;  // f32 [depth, 2, B]: the drop-path scale of each block's attention and MLP
                       // branch per clip (0 or 1/keep; 1 without drop path), for tests and audits
};

/// VideoMAE's fine-tuning model (modeling_finetune.py with use_mean_pooling): tubelet embedding of
/// ALL tokens + the fixed sinusoid table, pre-LN encoder blocks with drop path, no final norm,
/// mean over tokens -> fc_norm (LayerNorm eps 1e-6) -> dropout -> head.
/// Parameters carry the original fine-tune names: patch_embed.proj.{weight,bias},
/// blocks.i.{norm1,attn.qkv.weight,attn.q_bias,attn.v_bias,attn.proj,norm2,mlp.fc1,mlp.fc2}.*,
/// fc_norm.{weight,bias}, head.{weight [K, D],bias [K]}. The decoder fields of the config are unused.
class VideoMAEClassifier {
 public:
  /// timm init: trunc_normal(std 0.02, cut at +-2) on every Linear, zero biases, LayerNorm (1, 0),
  /// Conv3d PyTorch default; head weight and bias then multiplied by init_scale (0.001).
  static VideoMAEClassifier random(const VideoMAEConfig& config, int64_t num_classes, uint64_t seed,
                                   float init_scale = 0.001f);

  VideoMAEClassifier(VideoMAEClassifier&&) noexcept;
  VideoMAEClassifier& operator=(VideoMAEClassifier&&) noexcept;
  ~VideoMAEClassifier();

  const VideoMAEConfig& config() const;
  int64_t num_classes() const;
  std::vector<Param>& params();
  /// Zeroes every gradient. With a context, queued on its stream as a few multi-tensor launches
  /// (ops::zero_many); without one, a cudaMemset per tensor on the legacy default stream.
  void zero_grad();
  void zero_grad(Context& ctx);

  /// Forward (+ backward of the soft-target cross-entropy when `targets` is defined and
  /// options.backward).
  ///   videos:  f32 [B, 3, T, H, W], normalised
  ///   targets: f32 [B, num_classes], rows summing to 1 (one-hot, smoothed, mixed), or undefined
  VideoMAEClassifyStats step(Context& ctx, const Tensor& videos, const Tensor& targets,
                             const VideoMAEClassifyOptions& options);
  /// Inference logits f32 [B, num_classes] (no drop path, no dropout).
  Tensor logits(Context& ctx, const Tensor& videos);

  /// Layer-wise lr decay (BEiT/VideoMAE): layer id 0 for patch_embed, i + 1 for blocks.i, depth + 1
  /// for fc_norm and head; lr_scale = decay^(depth + 1 - id). Also sets weight_decay = false for
  /// every 1-D parameter (biases, norms, q_bias, v_bias), VideoMAE's no-decay rule.
  void set_layer_decay(float decay);

  struct Impl;
 private:
  explicit VideoMAEClassifier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// timm Mixup/CutMix in batch mode with label smoothing (VideoMAE fine-tuning: mixup 0.8,
/// cutmix 1.0, switch prob 0.5, prob 1, smoothing 0.1). Mixes `videos` in place with the
/// batch reversed (clip b with B-1-b) and returns the soft targets f32 [B, num_classes]:
///   lam ~ Beta(alpha, alpha) of the chosen method; CutMix cuts one box of area (1 - lam) in H x W
///   (the same box in every frame) and corrects lam to the box actually cut;
///   target = lam * smooth(y_b) + (1 - lam) * smooth(y_{B-1-b}), smooth(y) = off + (1 - s) * onehot,
///   off = s / num_classes.
/// mixup_alpha = cutmix_alpha = 0 gives the smoothed one-hot targets and leaves videos unchanged.
struct MixupOptions {
  float mixup_alpha = 0.8f, cutmix_alpha = 1.0f, switch_prob = 0.5f, prob = 1.0f;
  float label_smoothing = 0.1f;
};
struct MixupResult {
  Tensor targets;      // f32 [B, num_classes]
  double lam = 1.0;    // the mixing weight used (1 = unmixed)
  bool cutmix = false;
};
MixupResult mixup_cutmix(Tensor& videos, const std::vector<int64_t>& labels, int64_t num_classes,
                         const MixupOptions& options, uint64_t seed);

/// The fixed sinusoid table [n, d] (transformer formula, base 10000: even dims sin, odd cos, of
/// pos / 10000^(2 floor(j/2) / d)), computed in double.
Tensor videomae_sinusoid_table(int64_t n, int64_t d);

/// Unfolds tubelets: videos f32 [B, C, T, H, W] -> [B * Np, C * tt * p * p], token order
/// (t, h, w), columns in Conv3d weight order (c, dt, dy, dx).
Tensor videomae_unfold(const Tensor& videos, int64_t tubelet, int64_t patch);

/// The normalised-pixel target of every token: [B * Np, tt * p * p * C] with columns
/// (dt, dy, dx, c) (channel fastest); each channel of each patch is normalised by its mean and
/// unbiased std over tt * p * p pixels: (x - mean) / (std + 1e-6). `videos` are un-normalised
/// first: x * std[c] + mean[c].
Tensor videomae_target(const Tensor& videos, int64_t tubelet, int64_t patch,
                       const std::array<float, 3>& mean, const std::array<float, 3>& std);

}  // namespace unmask
