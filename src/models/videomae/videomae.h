// models/videomae/videomae.h: the state behind VideoMAEPretrainModel (videomae.cc builds it,
// pretrain_step.cc runs the forward and backward passes); its blocks are nn/vit_block.h's.

#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "nn/layers.h"
#include "nn/vit_block.h"
#include "unmask/videomae.h"

namespace unmask::video {

using train::PV;
// The pre-LN ViT block (nn/vit_block.h), under the names this model's files use.
using nn::add_block_params;
using nn::block_backward;
using nn::block_forward;
using nn::block_storages;
using nn::BlockParams;
using nn::BlockSaved;
using nn::BlockShape;
using nn::refresh_block_halves;

/// Once per process (glibc): keep freed memory in the heap (no mmap'd blocks, no trimming), so
/// the next training step reuses its activations instead of faulting them in again. Called by
/// both models' steps (videomae_step.cc explains the measurement).
void retain_freed_memory();

}  // namespace unmask::video

namespace unmask {

struct VideoMAEPretrainModel::Impl {
  VideoMAEConfig config;
  video::PV patch_w, patch_b;                 // [D, patch_dim] (Param view: [D, 3, tt, p, p]), [D]
  std::vector<video::BlockParams> enc_blocks;
  video::PV enc_norm_g, enc_norm_b;
  video::PV e2d_w;                            // [Dd, D], no bias
  video::PV mask_token;                       // [Dd] (Param view: [1, 1, Dd])
  std::vector<video::BlockParams> dec_blocks;
  video::PV dec_norm_g, dec_norm_b;
  video::PV head_w, head_b;                   // [patch_dim, Dd], [patch_dim]
  Tensor enc_pos, dec_pos;                    // fixed sinusoid tables [Np, D], [Np, Dd]
  std::vector<Param> params;                  // VideoMAE-named views, state-dict order
  // Index ranges [first, end) into params, in the order the backward pass finishes them
  // (VideoMAEStepOptions::grads_ready): decoder norm + head, decoder blocks from the last,
  // mask token, encoder_to_decoder, encoder norm, encoder blocks from the last, patch embedding.
  struct ParamRange {
    int64_t first = 0, end = 0;
  };
  ParamRange patch_range, enc_norm_range, dec_norm_head_range, e2d_range, mask_token_range;
  std::vector<ParamRange> enc_block_ranges, dec_block_ranges;

  std::vector<video::PV*> storages();
  void build_params();
};

}  // namespace unmask
