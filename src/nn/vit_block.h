// nn/vit_block.h: the pre-LN transformer block (ViT, VideoMAE, and the blocks the Video Swin
// of BEVT builds on) as an explicit forward/backward pair on the op front-ends.
//
// Pre-LN block (VideoMAE Block, no layer scale, no drop path), N rows = clips x tokens, C dim,
// I = int(C * mlp_ratio), NH heads; every tensor a 2-D row matrix:
//   ln1[N,C]  = LN1(x)                               saved with mean1/rstd1 [N]
//   qkv[N,3C] = ln1 Wqkv^T + cat(q_bias, 0, v_bias)  saved (the attention backward reads q, k, v)
//               (Swin: + qkv_b, a full [3C] bias)
//   ctx[N,C]  = attention(q, k, v), per clip         saved with lse [NH, N]
//               (Swin: window attention with the block's relative-position bias and the
//               shifted-window masks, the rows already in window order: BlockShape::window)
//   x1[N,C]   = x + ctx Wproj^T + bproj              saved (LN2 input)
//   ln2[N,C]  = LN2(x1)                              saved with mean2/rstd2
//   fp[N,I]   = ln2 W1^T + b1                        saved (GELU input)
//   f[N,I]    = gelu(fp)                             saved (fc2 weight gradient)
//   out[N,C]  = x1 + f W2^T + b2
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layers.h"
#include "ops/ops.h"
#include "unmask/train.h"

namespace unmask::nn {

using train::PV;

struct BlockParams {
  PV norm1_g, norm1_b;
  PV q_bias, v_bias;     // [C] each; the key bias is 0 (VideoMAE)
  PV qkv_b;              // [3C]: a full qkv bias (Swin); when defined, q_bias and v_bias are unused
  PV qkv_w;              // [3C, C]
  PV proj_w, proj_b;     // [C, C], [C]
  PV norm2_g, norm2_b;
  PV fc1_w, fc1_b;       // [I, C], [I]
  PV fc2_w, fc2_b;       // [C, I], [C]
};

struct BlockSaved {
  Tensor ln1, mean1, rstd1;
  Tensor qkv;            // [N, 3C]
  Tensor ctx, lse;       // [N, C], [NH, N]
  Tensor x1, ln2, mean2, rstd2;
  Tensor fp, f;          // [N, I] (f undefined with BlockShape::recompute_gelu)
  Tensor out;            // [N, C]
};

struct BlockShape {
  int64_t C = 0, I = 0, NH = 0;
  int64_t tokens = 0;    // tokens per clip (attention runs per clip: padded mode, no mask)
  float eps = 1e-6f;
  // Drop path (stochastic depth): per-clip scales [clips] of the attention and MLP branches,
  // 0 (dropped) or 1 / keep_prob; null = no drop path. x1 = x + s_attn[clip] * attn_branch, etc.
  const float* drop_attn = nullptr;
  const float* drop_mlp = nullptr;
  // Keep f = gelu(fp) out of BlockSaved and recompute it in the backward (one extra GELU pass):
  // saves N x I floats per block, 4/14 of a block's saved activations.
  bool recompute_gelu = false;
  // The block's activation dtype: f32, or bf16 (saved activations, gradients and GEMMs in bf16,
  // weights through PV::half refreshed by the caller with refresh_block_halves; statistics, lse
  // and parameter gradients f32). The block follows the dtype of x; bf16 needs no drop path.
  DType activations = DType::f32;
  // Shifted-window attention instead of attention over each clip's `tokens` rows: the rows come
  // in windows of `window` tokens (nn/window_geometry.h put them in that order; a clip's windows
  // stay together, so row / tokens is still the clip), with the block's relative-position bias
  // gathered to f32 [NH, N, N] and the masks [M, N, N] (null: none); the backward accumulates the
  // bias gradient into *window_dbias (null: not wanted). 0 = not windowed.
  int64_t window = 0;
  const Tensor* window_bias = nullptr;
  const Tensor* window_mask = nullptr;
  Tensor* window_dbias = nullptr;
};

/// Rounds the GEMM weights and biases of the blocks to `dtype` copies (PV::half) for bf16 blocks,
/// in one ops::copy_many.
void refresh_block_halves(Context& ctx, std::vector<BlockParams>& blocks, DType dtype);

/// The 13 tensors of a block under their original names (prefix + "norm1.weight", ...), in
/// state-dict order (a full qkv bias as "attn.qkv.bias" in place of the q and v biases); biases
/// and norms get weight_decay = false.
void add_block_params(std::vector<Param>& out, const std::string& prefix, BlockParams& b);
/// Pointers to the block's defined value/grad pairs (for zero_grad and the like).
std::vector<PV*> block_storages(BlockParams& b);

/// x [N, C] -> saved.out (allocated here, like every saved tensor).
void block_forward(Context& ctx, const BlockParams& p, const Tensor& x, const BlockShape& s,
                   BlockSaved& saved);
/// g: in: gradient of saved.out [N, C]; out: gradient of x. Parameter gradients accumulate.
void block_backward(Context& ctx, BlockParams& p, const Tensor& x, const BlockSaved& saved,
                    const BlockShape& s, Tensor& g);

}  // namespace unmask::nn
