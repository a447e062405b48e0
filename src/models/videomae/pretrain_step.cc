// models/videomae/pretrain_step.cc: VideoMAE's pretraining step (the ViT block is in video/vit_block.cc): tubelet
// embedding of the visible tokens, encoder, encoder_to_decoder, decoder over [visible + pos,
// mask_token + pos] per clip, norm + head on the masked tokens, normalised-pixel MSE, and the
// backward through all of it, on the context's device (CPU or CUDA: every step of it is an op).
//
// Speed (bench/compare_videomae_cpu.sh, BENCHMARKS.md): only the visible tubelets are unfolded
// and only the masked tokens' targets are built, straight from the clip (no [B * Np, 1536] unfold
// or target of every token: ops::tubelet_gather / tubelet_target); the decoder's input assembly,
// the head's row selection and their backward are ops::embedding row gathers over index lists
// built once per step from the masks (StepIndex);
// each block's saved activations are freed as soon as its backward is done; and the process
// keeps freed memory for reuse (retain_freed_memory) instead of handing it back to the kernel and
// faulting it in again on the next step, which cost a third of the step on a VM.
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "nn/patch_embed.h"
#include "unmask/error.h"
#include "models/videomae/videomae.h"

namespace unmask::video {

// A step allocates and frees ~1 GB of activations (ViT-S, 4 clips). glibc hands blocks over
// 128 KB .. 32 MB back with munmap and trims the heap top above 2 x that, so every step faults
// all of it in again (page faults were 36% of a ViT-S step on the 2-core VM). Keep it instead:
// no mmap'd blocks (the heap serves every size) and no trimming. Process-wide and once; the
// peak RSS is unchanged (it is the forward's high-water mark either way).
void retain_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
  });
#endif
}

}  // namespace unmask::video

namespace unmask {

using video::BlockSaved;
using video::BlockShape;
using video::PV;

namespace {

// The host-side bookkeeping of one step: which token goes where. Built from the (host) masks,
// uploaded to the context's device in one copy; every gather and scatter of the step is an
// ops::embedding row gather over one of these index lists (no per-clip loops, no atomics).
struct StepIndex {
  int64_t Nv = 0, Nm = 0, Nd = 0, Nt = 0;  // per clip: visible, masked, decoded, decoder tokens
  int64_t loss_rows = 0;                   // decoded tokens the loss counts (the encoder-masked ones)
  // Device copies (i32 row lists), slices of one upload:
  Tensor vis_ids_t;   // [B Nv]  tubelet_gather of the visible tokens
  Tensor vis_pos;     // [B Nv]  their positions j (encoder pos table)
  Tensor dec_src;     // [B Nt]  decoder input row -> row of [e2d (B Nv rows); mask_token]
  Tensor dec_tok;     // [B Nt]  decoder input row -> position j (decoder pos table)
  Tensor dec_rows;    // [B Nd]  decoded rows b Nt + Nv + i of the decoder output
  Tensor dec_ids_t;   // [B Nd]  their flat token ids (targets)
  Tensor grad_src;    // [B Nt]  decoder output gradient row -> row of [dln (B Nd rows); 0]
  Tensor vis_rows;    // [B Nv]  visible rows b Nt + j of the decoder input gradient
  Tensor loss_weight_t;  // u8 [B Nd], 1 = in the loss; undefined when every decoded token is (v1)
};

// The positions of clip 0's row of `mask` (u8 [B, Np], nonzero = selected) that are selected.
// Every other clip must have as many: ops::videomae_index checks each row.
int64_t first_row_count(const uint8_t* mask, int64_t Np, bool selected) {
  int64_t count = 0;
  for (int64_t j = 0; j < Np; ++j) count += (mask[j] != 0) == selected;
  return count;
}

StepIndex build_index(Context& ctx, const Tensor& mask_host, const Tensor& dmask_host, int64_t B, int64_t Np) {
  StepIndex x;
  const uint8_t* mk = static_cast<const uint8_t*>(mask_host.raw());
  x.Nm = first_row_count(mk, Np, true);
  x.Nv = Np - x.Nm;
  UNMASK_CHECK(x.Nm >= 1 && x.Nv >= 1,
               "videomae pretrain_step: the mask must leave at least one visible and one masked token per clip, got ",
               x.Nm, " masked of ", Np);
  // Decoded positions per clip (ascending): the encoder-masked ones (v1), or with a decoder mask
  // the kept ones (v2); loss_weight says which of them the loss counts (encoder-masked).
  if (dmask_host.defined()) {
    const uint8_t* dk = static_cast<const uint8_t*>(dmask_host.raw());
    x.Nd = first_row_count(dk, Np, false);
    UNMASK_CHECK(x.Nd >= 1, "videomae pretrain_step: the decoder mask keeps no token");
    for (int64_t t = 0; t < B * Np; ++t) x.loss_rows += !dk[t] && mk[t];
  } else {
    x.Nd = x.Nm;
    x.loss_rows = B * x.Nm;
  }
  UNMASK_CHECK(x.loss_rows >= 1, "videomae pretrain_step: no decoded token is encoder-masked, so there is no loss");
  x.Nt = x.Nv + x.Nd;

  // The lists themselves: ops::videomae_index (on a GPU from the uploaded masks, B Np bytes
  // each, instead of ~16 host-written bytes per token: ViT-B batch 128 spent 1.3-2.4 ms of host
  // time a step on them while the device waited).
  const int64_t nv = B * x.Nv, nd = B * x.Nd, nt = B * x.Nt;
  Tensor all = Tensor::empty({3 * nv + 2 * nd + 3 * nt}, DType::i32, ctx.device());
  if (x.loss_rows != nd)  // v2: some decoded tokens are encoder-visible, out of the loss
    x.loss_weight_t = Tensor::empty({nd}, DType::u8, ctx.device());
  ops::videomae_index(ctx, mask_host, dmask_host.defined() ? &dmask_host : nullptr, x.Nv, x.Nd, all,
                      x.loss_weight_t.defined() ? &x.loss_weight_t : nullptr);
  int64_t at = 0;
  auto take = [&](int64_t n) {
    Tensor t = all.slice(0, at, at + n);
    at += n;
    return t;
  };
  x.vis_ids_t = take(nv), x.vis_pos = take(nv), x.dec_src = take(nt), x.dec_tok = take(nt);
  x.dec_rows = take(nd), x.dec_ids_t = take(nd), x.grad_src = take(nt), x.vis_rows = take(nv);
  return x;
}

// A u8 mask [B, Np] on the host (the step reads it to build its index lists).
Tensor host_mask(const Tensor& m, const char* name, int64_t B, int64_t Np, const char* meaning) {
  UNMASK_CHECK(m.defined() && (m.dtype() == DType::u8 || m.dtype() == DType::boolean) && m.ndim() == 2 &&
                   m.size(0) == B && m.size(1) == Np,
               "videomae pretrain_step: ", name, " must be u8 [", B, ", ", Np, "] (", meaning, "), got ",
               m.defined() ? m.describe() : std::string("undefined"));
  return m.device() == Device::cpu ? m.contiguous() : m.to(Device::cpu);
}

}  // namespace

Device VideoMAEPretrainModel::device() const { return impl_->patch_w.value.device(); }

void VideoMAEPretrainModel::to(Context& ctx) {
  Impl& m = *impl_;
  const Device device = ctx.device();
  if (device == this->device()) return;
  train::pvs_to(ctx, m.storages());
  m.enc_pos = m.enc_pos.to(device);
  m.dec_pos = m.dec_pos.to(device);
  m.build_params();  // the Params are views of the storages: rebuild them over the new copies
}

VideoMAEStepStats VideoMAEPretrainModel::pretrain_step(Context& ctx, const Tensor& videos, const Tensor& mask,
                                                       const VideoMAEStepOptions& options) {
  Impl& m = *impl_;
  const VideoMAEConfig& c = m.config;
  const Device dev = ctx.device();
  UNMASK_CHECK(dev == device(), "VideoMAEPretrainModel::pretrain_step: the model is on ", device_name(device()),
               ", the context on ", device_name(dev), Hint("call model.to(ctx) first (then build the Optimizer)"));
  UNMASK_CHECK(videos.defined() && videos.dtype() == DType::f32 && videos.ndim() == 5 && videos.size(1) == c.channels &&
                   videos.size(2) == c.num_frames && videos.size(3) == c.img_size && videos.size(4) == c.img_size,
               "videomae pretrain_step: videos must be f32 [B, ", c.channels, ", ", c.num_frames, ", ", c.img_size,
               ", ", c.img_size, "], got ", videos.defined() ? videos.describe() : std::string("undefined"));
  UNMASK_CHECK(videos.device() == dev, "videomae pretrain_step: videos must be on the context's device (",
               device_name(dev), "), got ", videos.describe());
  const int64_t B = videos.size(0), Np = c.num_patches(), K = c.patch_dim(), D = c.dim, Dd = c.decoder_dim;
  UNMASK_CHECK(B >= 1, "videomae pretrain_step: the batch is empty (videos ", videos.describe(), ")");
  const Tensor mk = host_mask(mask, "mask", B, Np, "1 = masked");
  const Tensor dk = options.decoder_mask.defined()
                        ? host_mask(options.decoder_mask, "decoder_mask", B, Np, "1 = not decoded")
                        : Tensor();
  // (also on a GPU, where the host's share of a step, the masks and their counts, is small)
  video::retain_freed_memory();
  ctx.make_current();
  const StepIndex ix = build_index(ctx, mk, dk, B, Np);
  const int64_t Nv = ix.Nv, Nd = ix.Nd, Nt = ix.Nt;
  const Tensor clips = videos.is_contiguous() ? videos : videos.contiguous();  // no copy of a ready batch
  const ops::Tubelet tube{c.tubelet, c.patch};
  const std::vector<float> mean(options.mean.begin(), options.mean.begin() + c.channels);
  const std::vector<float> stdev(options.std.begin(), options.std.begin() + c.channels);
  auto f32 = [&](const Shape& s) { return Tensor::empty(s, DType::f32, dev); };
  const DType adt = options.activations;  // the blocks' activations (f32 or bf16)
  UNMASK_CHECK(adt == DType::f32 || adt == DType::bf16, "videomae pretrain_step: activations must be f32 or bf16, got ",
               dtype_name(adt));
  // A copy of t in dtype (t itself when it has it): the boundaries of bf16 block stacks.
  auto as_dtype = [&](const Tensor& t, DType dtype) {
    if (t.dtype() == dtype) return t;
    Tensor out = Tensor::empty(t.shape(), dtype, dev);
    ops::copy(ctx, t, out);
    return out;
  };
  if (adt != DType::f32) {  // this step's bf16 block weights, from the fp32 masters
    video::refresh_block_halves(ctx, m.enc_blocks, adt);
    video::refresh_block_halves(ctx, m.dec_blocks, adt);
  }

  // ---- forward ----
  // Patch embedding of the visible tubelets: x0 = cols_vis Wpatch^T + b + pos[token].
  train::PatchEmbedSaved patch_saved;
  Tensor x0 = f32({B * Nv, D});
  train::patch_embed_forward(ctx, clips, ix.vis_ids_t, tube, m.patch_w, m.patch_b, x0, patch_saved);
  ops::embedding(ctx, m.enc_pos, ix.vis_pos, x0, /*accumulate=*/true);

  BlockShape es{D, c.mlp_hidden(D), c.heads, Nv, c.norm_eps};
  es.recompute_gelu = options.recompute_gelu.value_or(dev == Device::cuda);
  es.activations = adt;
  const Tensor x0_blocks = as_dtype(x0, adt);
  if (adt != DType::f32) x0 = Tensor();  // the blocks read their bf16 copy from here on
  std::vector<BlockSaved> enc(m.enc_blocks.size());
  for (size_t i = 0; i < enc.size(); ++i)
    video::block_forward(ctx, m.enc_blocks[i], i == 0 ? x0_blocks : enc[i - 1].out, es, enc[i]);
  Tensor enc_last = as_dtype(enc.back().out, DType::f32);  // released after its LayerNorm backward
  Tensor enc_ln = f32({B * Nv, D}), enc_mean = f32({B * Nv}), enc_rstd = f32({B * Nv});
  ops::layernorm(ctx, enc_last, nullptr, m.enc_norm_g.value, m.enc_norm_b.value, c.norm_eps, enc_ln, &enc_mean,
                 &enc_rstd);
  // e2d_table = [e2d (B Nv rows); mask_token]: the decoder input is a row gather from it.
  Tensor e2d_table = f32({B * Nv + 1, Dd});
  Tensor e2d = e2d_table.slice(0, 0, B * Nv);
  PV no_bias;
  train::linear_forward(ctx, enc_ln, m.e2d_w, no_bias, e2d);
  Tensor mask_token_row = e2d_table.slice(0, B * Nv, B * Nv + 1);
  ops::copy(ctx, m.mask_token.value.view({1, Dd}), mask_token_row);  // on ctx's stream (not the legacy one)

  // Decoder input per clip: [e2d_vis + pos_dec[vis], mask_token + pos_dec[decoded]] (Nt rows).
  Tensor dec_in = f32({B * Nt, Dd});
  ops::embedding(ctx, e2d_table, ix.dec_src, dec_in);
  ops::embedding(ctx, m.dec_pos, ix.dec_tok, dec_in, /*accumulate=*/true);
  BlockShape ds{Dd, c.mlp_hidden(Dd), c.decoder_heads, Nt, c.norm_eps};
  ds.recompute_gelu = es.recompute_gelu;
  ds.activations = adt;
  const Tensor dec_in_blocks = as_dtype(dec_in, adt);
  if (adt != DType::f32) dec_in = Tensor();
  std::vector<BlockSaved> dec(m.dec_blocks.size());
  for (size_t i = 0; i < dec.size(); ++i)
    video::block_forward(ctx, m.dec_blocks[i], i == 0 ? dec_in_blocks : dec[i - 1].out, ds, dec[i]);
  // decoder.norm + head on the last Nd rows of every clip
  Tensor dec_m = f32({B * Nd, Dd});
  ops::embedding(ctx, as_dtype(dec.back().out, DType::f32), ix.dec_rows, dec_m);
  Tensor dec_ln = f32({B * Nd, Dd}), dec_mean = f32({B * Nd}), dec_rstd = f32({B * Nd});
  ops::layernorm(ctx, dec_m, nullptr, m.dec_norm_g.value, m.dec_norm_b.value, c.norm_eps, dec_ln, &dec_mean, &dec_rstd);
  Tensor pred = f32({B * Nd, K});
  train::linear_forward(ctx, dec_ln, m.head_w, m.head_b, pred);

  // ---- loss: MSE against the normalised-pixel target of the loss tokens ----
  const int64_t count = ix.loss_rows * K;
  const double gscale = 2.0 * double(options.loss_scale) / double(count);
  Tensor target = f32({B * Nd, K});
  ops::tubelet_target(ctx, clips, ix.dec_ids_t, tube, mean, stdev, target);
  // Without keep_outputs the gradient overwrites pred (no longer needed).
  Tensor dpred = options.keep_outputs ? f32({B * Nd, K}) : pred;
  const double sq = ops::mse_rows(ctx, pred, target, ix.loss_weight_t.defined() ? &ix.loss_weight_t : nullptr, gscale, dpred);
  VideoMAEStepStats st;
  st.loss = sq / double(count);
  st.clips = B;
  st.masked_tokens = B * ix.Nm;
  st.visible_tokens = B * Nv;
  st.decoded_tokens = B * Nd;
  st.loss_tokens = ix.loss_rows;
  if (options.keep_outputs) {
    st.pred = pred;
    st.target = target;
  }
  target = Tensor();
  if (!options.backward) return st;

  // ---- backward ----
  auto ready = [&](const Impl::ParamRange& r) {
    if (options.grads_ready) options.grads_ready(r.first, r.end);
  };
  // dln_ext = [d dec_m (B Nd rows); 0]: the decoder output gradient is a row gather from it.
  Tensor dln_ext = f32({B * Nd + 1, Dd});
  Tensor dln = dln_ext.slice(0, 0, B * Nd);
  Tensor zero_row = dln_ext.slice(0, B * Nd, B * Nd + 1);
  ops::zero_many(ctx, {&zero_row});
  train::linear_backward(ctx, dec_ln, m.head_w, m.head_b, dpred, &dln);
  ops::layernorm_backward(ctx, dec_m, nullptr, m.dec_norm_g.value, dec_mean, dec_rstd, dln, dln, m.dec_norm_g.grad,
                          m.dec_norm_b.grad);
  ready(m.dec_norm_head_range);
  Tensor g = f32({B * Nt, Dd});
  ops::embedding(ctx, dln_ext, ix.grad_src, g);
  Tensor g_blocks = as_dtype(g, adt);
  if (adt != DType::f32) g = Tensor();  // allocated again after the decoder blocks
  for (size_t i = dec.size(); i-- > 0;) {
    video::block_backward(ctx, m.dec_blocks[i], i == 0 ? dec_in_blocks : dec[i - 1].out, dec[i], ds, g_blocks);
    dec[i] = BlockSaved{};  // its memory serves the next block's backward
    ready(m.dec_block_ranges[i]);
  }
  if (adt != DType::f32) {
    g = f32({B * Nt, Dd});
    ops::copy(ctx, g_blocks, g);
  }
  // g = d dec_in: the decoded rows sum into mask_token (gathered into dln's storage, which is
  // free now), the visible rows go back through encoder_to_decoder.
  ops::embedding(ctx, g, ix.dec_rows, dln);
  ops::bias_grad(ctx, dln, m.mask_token.grad);
  ready(m.mask_token_range);
  Tensor de2d = f32({B * Nv, Dd});
  ops::embedding(ctx, g, ix.vis_rows, de2d);
  Tensor genc = f32({B * Nv, D});
  train::linear_backward(ctx, enc_ln, m.e2d_w, no_bias, de2d, &genc);
  ready(m.e2d_range);
  ops::layernorm_backward(ctx, enc_last, nullptr, m.enc_norm_g.value, enc_mean, enc_rstd, genc, genc, m.enc_norm_g.grad,
                          m.enc_norm_b.grad);
  enc_last = Tensor();
  ready(m.enc_norm_range);
  Tensor genc_blocks = as_dtype(genc, adt);
  for (size_t i = enc.size(); i-- > 0;) {
    video::block_backward(ctx, m.enc_blocks[i], i == 0 ? x0_blocks : enc[i - 1].out, enc[i], es, genc_blocks);
    enc[i] = BlockSaved{};
    ready(m.enc_block_ranges[i]);
  }
  if (adt != DType::f32) ops::copy(ctx, genc_blocks, genc);
  train::patch_embed_backward(ctx, patch_saved, m.patch_w, m.patch_b, genc);
  ready(m.patch_range);
  return st;
}

}  // namespace unmask
