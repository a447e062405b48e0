// models/videomae/flops.cc: analytic VideoMAE FLOPs (formulas in videomae_flops.h).
#include "models/videomae/flops.h"

#include <algorithm>

namespace unmask::video {
namespace {

void check_config(const VideoMAEFlopConfig& c) {
  UNMASK_CHECK(c.img_size >= 1 && c.frames >= 1 && c.tubelet >= 1 && c.patch >= 1 && c.in_chans >= 1,
               "videomae flops: input sizes must be positive, got img_size ", c.img_size, ", frames ", c.frames,
               ", tubelet ", c.tubelet, ", patch ", c.patch, ", in_chans ", c.in_chans);
  UNMASK_CHECK(c.img_size % c.patch == 0 && c.frames % c.tubelet == 0, "videomae flops: img_size ", c.img_size,
               " must be a multiple of patch ", c.patch, " and frames ", c.frames, " of tubelet ", c.tubelet);
  UNMASK_CHECK(
      c.enc_dim >= 1 && c.enc_depth >= 1 && c.enc_heads >= 1 && c.enc_mlp_hidden >= 1 && c.enc_dim % c.enc_heads == 0,
      "videomae flops: encoder dim ", c.enc_dim, " / depth ", c.enc_depth, " / heads ", c.enc_heads, " / mlp ",
      c.enc_mlp_hidden, " must be positive with dim divisible by heads");
  UNMASK_CHECK(
      c.dec_dim >= 1 && c.dec_depth >= 0 && c.dec_heads >= 1 && c.dec_mlp_hidden >= 1 && c.dec_dim % c.dec_heads == 0,
      "videomae flops: decoder dim ", c.dec_dim, " / depth ", c.dec_depth, " / heads ", c.dec_heads, " / mlp ",
      c.dec_mlp_hidden, " must be positive (depth >= 0) with dim divisible by heads");
  UNMASK_CHECK(c.batch >= 1 && c.num_classes >= 1, "videomae flops: batch ", c.batch, " and num_classes ",
               c.num_classes, " must be >= 1");
}

}  // namespace

TokenGrid VideoMAEFlopConfig::grid() const {
  check_config(*this);
  return TokenGrid{frames / tubelet, img_size / patch, img_size / patch};
}

int64_t VideoMAEFlopConfig::visible_tokens() const {
  const TokenGrid g = grid();
  return g.frames * (g.per_frame() - tube_masked_per_frame(g, mask_ratio, tube_count));
}

int64_t VideoMAEFlopConfig::reconstructed_tokens() const {
  const TokenGrid g = grid();
  if (decoder_mask_ratio == 0.0) return g.tokens() - visible_tokens();
  // Running cell: each 2x2 cell keeps 4 - m slots in every slice.
  const int64_t m = running_cell_masked_per_cell(decoder_mask_ratio);
  UNMASK_CHECK(g.height % 2 == 0 && g.width % 2 == 0, "videomae flops: running-cell decoder masking needs an even ",
               "token grid, got ", g.height, " x ", g.width);
  return g.tokens() / 4 * (4 - m);
}

VideoMAEFlopConfig videomae_flop_preset(const std::string& size) {
  VideoMAEFlopConfig c;  // vit-b
  if (size == "vit-b") return c;
  if (size == "vit-s") {
    c.enc_dim = 384, c.enc_heads = 6, c.enc_mlp_hidden = 1536;
    c.dec_dim = 192, c.dec_heads = 3, c.dec_mlp_hidden = 768;
  } else if (size == "vit-l") {
    c.enc_dim = 1024, c.enc_depth = 24, c.enc_heads = 16, c.enc_mlp_hidden = 4096;
    c.dec_dim = 512, c.dec_heads = 8, c.dec_mlp_hidden = 2048;
  } else if (size == "vit-h") {
    c.enc_dim = 1280, c.enc_depth = 32, c.enc_heads = 16, c.enc_mlp_hidden = 5120;
    c.dec_dim = 640, c.dec_heads = 8, c.dec_mlp_hidden = 2560;
  } else if (size == "vit-g") {
    c.patch = 14;
    c.enc_dim = 1408, c.enc_depth = 40, c.enc_heads = 16, c.enc_mlp_hidden = 6144;  // mlp_ratio 48/11
    c.dec_dim = 512, c.dec_heads = 8, c.dec_mlp_hidden = 2048;
  } else {
    throw Error("videomae flops: unknown model size '", size, "'",
                Hint("use one of vit-s, vit-b, vit-l, vit-h, vit-g"));
  }
  return c;
}

int64_t videomae_pretrain_parameters(const VideoMAEFlopConfig& c) {
  c.grid();  // validates the sizes
  // A pre-LN block: norm1, norm2 (2 d each), q and v biases (2 d), qkv (3 d^2, no bias), proj
  // (d^2 + d), fc1 (d i + i), fc2 (i d + d).
  auto block = [](int64_t d, int64_t i) { return 4 * d + 2 * d + 3 * d * d + d * d + d + 2 * d * i + i + d; };
  const int64_t P = c.in_chans * c.tubelet * c.patch * c.patch, D = c.enc_dim, Dd = c.dec_dim;
  return P * D + D                                              // patch embed (Conv3d with bias)
         + c.enc_depth * block(D, c.enc_mlp_hidden) + 2 * D     // encoder blocks, norm
         + D * Dd + Dd                                          // encoder_to_decoder (no bias), mask token
         + c.dec_depth * block(Dd, c.dec_mlp_hidden) + 2 * Dd   // decoder blocks, norm
         + Dd * P + P;                                          // head
}

double vit_layer_flops(double n, double d, double i) {
  return 2.0 * n * (4.0 * d * d + 2.0 * d * i) + 4.0 * n * n * d;
}

double videomae_pretrain_forward_flops(const VideoMAEFlopConfig& c) {
  const TokenGrid g = c.grid();
  const double N = double(g.tokens()), V = double(c.visible_tokens()), R = double(c.reconstructed_tokens());
  const double P = double(c.in_chans * c.tubelet * c.patch * c.patch);
  const double D = double(c.enc_dim), Dd = double(c.dec_dim);
  const double per_clip = 2.0 * N * P * D                                                          // patch embed
                          + double(c.enc_depth) * vit_layer_flops(V, D, double(c.enc_mlp_hidden))  // encoder
                          + 2.0 * V * D * Dd                                                       // encoder_to_decoder
                          + double(c.dec_depth) * vit_layer_flops(V + R, Dd, double(c.dec_mlp_hidden)) +
                          2.0 * R * Dd * P;  // head
  return double(c.batch) * per_clip;
}

double videomae_pretrain_step_flops(const VideoMAEFlopConfig& c) {
  return 3.0 * videomae_pretrain_forward_flops(c);
}

VideoMAEStepBytes videomae_pretrain_step_bytes(const VideoMAEFlopConfig& c, bool recompute_gelu, DType activations) {
  const double B = double(c.batch), V = double(c.visible_tokens()), R = double(c.reconstructed_tokens());
  const double P = double(c.in_chans * c.tubelet * c.patch * c.patch);
  const double D = double(c.enc_dim), Dd = double(c.dec_dim), I = double(c.enc_mlp_hidden), Id = double(c.dec_mlp_hidden);
  const bool half = activations != DType::f32;
  const double a = half ? 2 : 4;  // bytes of a block activation
  // The GEMM weights and biases of a block (its bf16 copies: PV::half, refresh_block_halves).
  auto block_gemm_params = [](double d, double i) { return 3 * d * d + d * d + d + 2 * d * i + i + d; };
  const double params = double(videomae_pretrain_parameters(c));
  // A block keeps 8 d (ln1, qkv 3 d, ctx, x1, ln2, out) + i (+ i without recompute) activations
  // and 4 + heads f32 statistics (mean, rstd twice; lse) per row.
  auto block_saved = [&](double n, double d, double i, double heads) {
    return n * (a * (8 * d + (recompute_gelu ? 1 : 2) * i) + 4 * (4 + heads));
  };
  const double ne = B * V, nd = B * (V + R);
  const double saved = double(c.enc_depth) * block_saved(ne, D, I, double(c.enc_heads)) +
                       double(c.dec_depth) * block_saved(nd, Dd, Id, double(c.dec_heads)) +  // blocks
                       4 * (ne * P + ne * D + ne * (D + 2) + (ne + 1) * Dd + nd * Dd +      // embed .. decoder input
                            B * R * (2 * Dd + 2) + B * R * P) +                              // head rows, pred
                       // bf16: the stack inputs in bf16 instead of f32 (the f32 ones are freed), and
                       // the f32 copy of the encoder output for the encoder norm
                       (half ? (a - 4) * (ne * D + nd * Dd) + 4 * ne * D : 0);
  const double backward = a * (nd * Id + 2 * nd * Dd + 3 * nd * Dd + nd * Dd) + 4 * (B * R + 1) * Dd;
  VideoMAEStepBytes out;
  out.state = 4 * 4 * params +
              (half ? a * (double(c.enc_depth) * block_gemm_params(D, I) + double(c.dec_depth) * block_gemm_params(Dd, Id))
                    : 0);
  out.saved = saved;
  out.transient = std::max(4 * B * R * P, backward);
  out.peak = out.state + out.saved + out.transient;
  return out;
}

double videomae_finetune_forward_flops(const VideoMAEFlopConfig& c) {
  const TokenGrid g = c.grid();
  const double N = double(g.tokens()), P = double(c.in_chans * c.tubelet * c.patch * c.patch);
  const double D = double(c.enc_dim);
  const double per_clip = 2.0 * N * P * D + double(c.enc_depth) * vit_layer_flops(N, D, double(c.enc_mlp_hidden)) +
                          2.0 * D * double(c.num_classes);
  return double(c.batch) * per_clip;
}

double videomae_finetune_step_flops(const VideoMAEFlopConfig& c) {
  return 3.0 * videomae_finetune_forward_flops(c);
}

}  // namespace unmask::video
