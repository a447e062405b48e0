// models/videomae/flops.h: the analytic FLOP count of VideoMAE (the MFU numerator).
//
// Matmuls only (LayerNorm, softmax, GELU, the loss and the positional add are not counted, as
// in MFU conventions and in fvcore); a multiply-add is 2 FLOPs, so [M, K] x [K, N] costs 2 M N K.
// With D / Dd the encoder / decoder widths (= heads x head_dim in every VideoMAE size), I / Id
// their MLP widths, P = in_chans x tubelet x patch^2 the values per token (1536 for 2x16x16 RGB),
// N all tokens, V visible tokens (N minus the tube mask), R the decoder's reconstructed tokens
// (the encoder-masked ones; VideoMAE v2 running cell: the decoder-kept ones) and C classes:
//
//   a transformer layer on n tokens of width d, MLP i:   2 n (4 d^2 + 2 d i) + 2 (2 n^2 d)
//        (qkv 3 d^2 + proj d^2 + fc1/fc2 2 d i per token; Q K^T and P V: n^2 d each)
//   pretrain forward, per clip:
//     patch embed on ALL tokens (the Conv3d runs before masking)   2 N P D
//     encoder: depth layers on V tokens                            depth x layer(V, D, I)
//     encoder_to_decoder on V tokens (no bias)                     2 V D Dd
//     decoder: dec_depth layers on V + R tokens                    dec_depth x layer(V + R, Dd, Id)
//     head on the R reconstructed tokens only                      2 R Dd P
//   pretrain step = 3 x forward (the backward computes two products per forward product)
//   fine-tune / inference forward: 2 N P D + depth x layer(N, D, I) + 2 D C (mean pool, fc_norm,
//     head); a fine-tune step = 3 x that.
//
// video.md quotes GMACs (fvcore's unit); FLOPs here are twice those. V-SWIFT's README reports
// 2 x fvcore MACs of a model built with decoder_depth 8 (the class default) although it trains
// with 4: pass the depth you actually train with.
#pragma once
#include <cstdint>
#include <string>

#include "unmask/dtype.h"
#include "data/video/masking.h"

namespace unmask::video {

/// Everything the count depends on; defaults are VideoMAE ViT-B pretraining on 16 x 224^2.
struct VideoMAEFlopConfig {
  int64_t img_size = 224, frames = 16, tubelet = 2, patch = 16, in_chans = 3;
  int64_t enc_dim = 768, enc_depth = 12, enc_heads = 12, enc_mlp_hidden = 3072;
  int64_t dec_dim = 384, dec_depth = 4, dec_heads = 6, dec_mlp_hidden = 1536;
  double mask_ratio = 0.9;  // tube mask
  TubeCount tube_count = TubeCount::videomae;
  double decoder_mask_ratio = 0.0;  // VideoMAE v2 running cell; 0 = none (decode the masked)
  int64_t num_classes = 400;        // fine-tune head
  int64_t batch = 1;

  TokenGrid grid() const;                // throws if sizes do not divide
  int64_t visible_tokens() const;        // per clip
  int64_t reconstructed_tokens() const;  // per clip, R above
};

/// The preset of a named size: "vit-s", "vit-b", "vit-l", "vit-h", "vit-g" (VideoMAE v2 g/14,
/// MLP 6144, decoder 512/8, output 1176). Decoder depth 4 and width as in video.md §1.2 (H: the
/// v1 decoder 640/8; pass dec_dim 512 for v2's). Throws for an unknown name, listing the known.
VideoMAEFlopConfig videomae_flop_preset(const std::string& size);

/// Parameters of the pretraining model (nn.Parameters, as fvcore and V-SWIFT's table count them:
/// patch embed, blocks with q/v biases, norms, encoder_to_decoder, mask token, decoder, head;
/// the sinusoid position tables are buffers, not parameters).
int64_t videomae_pretrain_parameters(const VideoMAEFlopConfig& config);

/// FLOPs of one transformer layer on n tokens (width d, MLP width i): see the header comment.
double vit_layer_flops(double n, double d, double i);

/// Forward FLOPs of one pretraining step for the whole batch.
double videomae_pretrain_forward_flops(const VideoMAEFlopConfig& config);
/// 3 x the forward: one pretraining step (forward + backward) for the whole batch.
double videomae_pretrain_step_flops(const VideoMAEFlopConfig& config);
/// Forward FLOPs of fine-tuning / inference on all tokens for the whole batch.
double videomae_finetune_forward_flops(const VideoMAEFlopConfig& config);
/// 3 x the fine-tune forward.
double videomae_finetune_step_flops(const VideoMAEFlopConfig& config);

/// The memory of one pretraining step as unmask's step keeps it (video/videomae_step.cc), in
/// bytes, f32 unless `activations` says otherwise, counted from the shapes (the "count bytes first" of a benchmark):
///   state      parameters x 4 copies (value, gradient, AdamW m and v)
///   saved      every block's BlockSaved over its n tokens (n = B V encoder, B (V + R) decoder):
///              n (8 d + 2 i + 4 + heads) floats, n (8 d + i + 4 + heads) with recompute_gelu
///              (models/videomae/videomae.h lists them), plus the step's own: the visible tubelets
///              B V P, the patch embedding B V D, the encoder norm B V (D + 2), the decoder input
///              table and rows B V Dd + B (V + R) Dd, the head rows B R (2 Dd + 2) and pred B R P
///   transient  the larger of the target B R P (forward end) and the first decoder block's
///              backward (df n i, dln / dctx n d, dqkv 3 n d, the output gradient n d, the head
///              gradient B R Dd)
///   peak       state + saved + transient. Allocator rounding and library workspaces come on top.
struct VideoMAEStepBytes {
  double state = 0, saved = 0, transient = 0, peak = 0;
};
/// activations = bf16 (VideoMAEStepOptions::activations): the blocks' activations take 2 bytes
/// (statistics and lse stay f32), plus the bf16 weight copies of the blocks' GEMMs; the inputs
/// of both block stacks are kept in bf16 only, and the encoder output also in f32.
VideoMAEStepBytes videomae_pretrain_step_bytes(const VideoMAEFlopConfig& config, bool recompute_gelu,
                                              DType activations = DType::f32);

}  // namespace unmask::video
