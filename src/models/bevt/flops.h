// models/bevt/flops.h: analytic FLOP counts of BEVT pretraining (2 FLOPs a multiply-add), for
// throughput, MFU and the benchmark's TFLOP per iteration. Per stream and sample:
//   backbone: patch embedding 2 N C K; each block 24 N C^2 (qkv, proj, MLP 4C) + 4 N n C
//             (q k^T and p v over windows of n tokens, clipped as the stage clips them);
//             patch merging 16 (N / 4) C^2;
//   neck:     ConvTranspose (k = s) 2 R_in Cin Cout K; lm_down 2 R 12C 8C; (video) fpn_t 2 R 8C 16C;
//   head:     2 R_out 8C vocab;
//   tokenizer: each convolution 2 H W Cin Cout k^2 per frame (frozen: forward only).
// Training counts 3x the forward of everything trainable (the backward's two GEMMs per GEMM).
// The reference's figures (bevt.md 1.7, Swin-B 16 x 224^2 clips): video backbone 281.3 G, neck
// 14.8 G, head 52.6 G a clip; image 30.9 G + 1.0 G + 3.3 G; the dVAE 52.1 G a 112^2 frame.
#pragma once
#include <cstdint>

#include "models/bevt/backbone.h"
#include "models/bevt/dvae.h"

namespace unmask::bevt {

struct BevtStreamFlops {
  double backbone = 0, neck = 0, head = 0;  // forward, one sample, every position
  double tokenizer = 0;                     // forward, one frame
};

/// The forward FLOPs of one sample of a stream (video: [3, frames, side, side]; image: frames = 1).
BevtStreamFlops bevt_stream_flops(const SwinConfig& config, int64_t vocab, const DalleEncoderConfig& tokenizer,
                                  bool image, int64_t frames, int64_t side);

/// The FLOPs of one training iteration as BEVT defines it (the neck and head at every position,
/// the tokenizer on every frame): 3 x (clips backbone + neck + head, images likewise) + the
/// tokenizer on clips x frames + images frames.
double bevt_iteration_flops(const SwinConfig& config, int64_t vocab, const DalleEncoderConfig& tokenizer, int64_t clips,
                            int64_t frames, int64_t images, int64_t side);

/// The FLOPs a step actually ran: the neck after the concatenation, the norm and the head at the
/// masked fraction (masked_video_fraction of the video's output tokens, likewise images), and the
/// tokenizer on the frames it ran on.
double bevt_step_flops_run(const SwinConfig& config, int64_t vocab, const DalleEncoderConfig& tokenizer, int64_t clips,
                           int64_t frames, int64_t images, int64_t side, double masked_video_fraction,
                           double masked_image_fraction, int64_t tokenized_frames);

}  // namespace unmask::bevt
