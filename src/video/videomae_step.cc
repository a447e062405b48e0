// video/videomae_step.cc: VideoMAE's pretraining step (the ViT block is in video/vit_block.cc): tubelet
// embedding of the visible tokens, encoder, encoder_to_decoder, decoder over [visible + pos,
// mask_token + pos] per clip, norm + head on the masked tokens, normalised-pixel MSE, and the
// backward through all of it. CPU.
//
// Speed (bench/compare_videomae_cpu.sh, BENCHMARKS.md): only the visible tubelets are unfolded
// and only the masked tokens' targets are built, straight from the clip (no [B * Np, 1536] unfold
// or target of every token); the gathers, the target and the loss run on the context's threads;
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

#include "unmask/error.h"
#include "video/videomae.h"

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

// The tubelet grid position of token j (t, h, w row-major) -> the clip offset of its first pixel.
struct TokenGeometry {
  int64_t C, T, H, W, tt, p, gh, gw;
  const float* clip(const float* videos, int64_t b) const { return videos + b * C * T * H * W; }
  // Offset of pixel (c, dt, dy, 0) of token j within its clip.
  int64_t offset(int64_t j, int64_t c, int64_t dt, int64_t dy) const {
    const int64_t t = j / (gh * gw), h = (j / gw) % gh, w = j % gw;
    return ((c * T + t * tt + dt) * H + h * p + dy) * W + w * p;
  }
};

// cols[r] = the unfolded tubelet of token ids[r] (flat b * Np + j), columns (c, dt, dy, dx) as the
// Conv3d weight: the rows of videomae_unfold that `ids` selects.
void unfold_rows(Context& ctx, const float* videos, const TokenGeometry& g, int64_t Np, const std::vector<int32_t>& ids,
                 float* cols) {
  const int64_t K = g.C * g.tt * g.p * g.p;
  ctx.parallel_for(
      int64_t(ids.size()),
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t b = ids[size_t(r)] / Np, j = ids[size_t(r)] % Np;
          const float* clip = g.clip(videos, b);
          float* row = cols + r * K;
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t dt = 0; dt < g.tt; ++dt)
              for (int64_t dy = 0; dy < g.p; ++dy)
                std::memcpy(row + ((c * g.tt + dt) * g.p + dy) * g.p, clip + g.offset(j, c, dt, dy),
                            size_t(g.p) * sizeof(float));
        }
      },
      16);
}

// The normalised-pixel target of token ids[r] (the rows of videomae_target that `ids` selects,
// bit for bit: the same double arithmetic), compared with pred[r]: writes
// dpred[r] = gscale * (pred - target), target[r] when `target` is non-null, and the row's sum of
// squared differences into row_sq[r] (summed by the caller in row order: the loss does not
// depend on the thread count).
void target_and_loss_rows(Context& ctx, const float* videos, const TokenGeometry& g, int64_t Np,
                          const std::vector<int32_t>& ids, const std::array<float, 3>& mean,
                          const std::array<float, 3>& stdev, const float* pred, double gscale, float* dpred,
                          float* target, std::vector<double>& row_sq) {
  const int64_t P = g.tt * g.p * g.p, K = g.C * P;
  ctx.parallel_for(
      int64_t(ids.size()),
      [&](int64_t begin, int64_t end) {
        std::vector<double> x(static_cast<size_t>(P)), tgt(static_cast<size_t>(K));
        for (int64_t r = begin; r < end; ++r) {
          const int64_t b = ids[size_t(r)] / Np, j = ids[size_t(r)] % Np;
          const float* clip = g.clip(videos, b);
          for (int64_t c = 0; c < g.C; ++c) {
            double sum = 0;
            for (int64_t dt = 0; dt < g.tt; ++dt)
              for (int64_t dy = 0; dy < g.p; ++dy) {
                const float* src = clip + g.offset(j, c, dt, dy);
                double* xs = x.data() + (dt * g.p + dy) * g.p;
                for (int64_t dx = 0; dx < g.p; ++dx) {
                  xs[dx] = double(src[dx]) * double(stdev[size_t(c)]) + double(mean[size_t(c)]);
                  sum += xs[dx];
                }
              }
            const double mu = sum / double(P);
            double ss = 0;
            for (int64_t i = 0; i < P; ++i) ss += (x[size_t(i)] - mu) * (x[size_t(i)] - mu);
            const double sd = std::sqrt(ss / double(P - 1));  // unbiased, as torch .var()
            for (int64_t i = 0; i < P; ++i) tgt[size_t(i * g.C + c)] = double(float((x[size_t(i)] - mu) / (sd + 1e-6)));
          }
          const float* pr = pred + r * K;
          float* dp = dpred + r * K;
          double sq = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double d = double(pr[k]) - tgt[size_t(k)];
            sq += d * d;
            dp[k] = float(gscale * d);
          }
          row_sq[size_t(r)] = sq;
          if (target)
            for (int64_t k = 0; k < K; ++k) target[r * K + k] = float(tgt[size_t(k)]);
        }
      },
      8);
}

}  // namespace

VideoMAEStepStats VideoMAEPretrainModel::pretrain_step(Context& ctx, const Tensor& videos, const Tensor& mask,
                                                       const VideoMAEStepOptions& options) {
  Impl& m = *impl_;
  const VideoMAEConfig& c = m.config;
  UNMASK_CHECK(ctx.device() == Device::cpu, "VideoMAEPretrainModel::pretrain_step runs on the CPU, got a ",
               device_name(ctx.device()), " context");
  UNMASK_CHECK(videos.defined() && videos.dtype() == DType::f32 && videos.ndim() == 5 && videos.size(1) == c.channels &&
                   videos.size(2) == c.num_frames && videos.size(3) == c.img_size && videos.size(4) == c.img_size,
               "videomae pretrain_step: videos must be f32 [B, ", c.channels, ", ", c.num_frames, ", ", c.img_size,
               ", ", c.img_size, "], got ", videos.defined() ? videos.describe() : std::string("undefined"));
  const int64_t B = videos.size(0), Np = c.num_patches(), K = c.patch_dim(), D = c.dim, Dd = c.decoder_dim;
  UNMASK_CHECK(mask.defined() && (mask.dtype() == DType::u8 || mask.dtype() == DType::boolean) && mask.ndim() == 2 &&
                   mask.size(0) == B && mask.size(1) == Np && mask.is_contiguous(),
               "videomae pretrain_step: mask must be u8 [", B, ", ", Np, "] (1 = masked), got ",
               mask.defined() ? mask.describe() : std::string("undefined"));

  // Token indices per clip: visible ones, then masked ones, each ascending (boolean indexing order).
  const uint8_t* mk = static_cast<const uint8_t*>(mask.raw());
  int64_t Nm = 0;
  for (int64_t j = 0; j < Np; ++j) Nm += mk[j] != 0;
  const int64_t Nv = Np - Nm;
  std::vector<int32_t> vis_ids, mask_ids;  // flat token index b * Np + j
  for (int64_t b = 0; b < B; ++b) {
    int64_t count = 0;
    for (int64_t j = 0; j < Np; ++j) {
      const bool masked = mk[b * Np + j] != 0;
      count += masked;
      (masked ? mask_ids : vis_ids).push_back(int32_t(b * Np + j));
    }
    UNMASK_CHECK(count == Nm,
                 "videomae pretrain_step: every mask row must mask the same number of tokens: row 0 masks ", Nm,
                 ", row ", b, " masks ", count);
  }
  UNMASK_CHECK(Nm >= 1 && Nv >= 1,
               "videomae pretrain_step: the mask must leave at least one visible and one "
               "masked token per clip, got ",
               Nm, " masked of ", Np);

  // Decoded positions per clip (ascending): the encoder-masked ones (v1), or with a decoder
  // mask the kept ones (v2); loss_weight says which of them the loss counts (encoder-masked).
  std::vector<int32_t> dec_ids = mask_ids;
  int64_t Nd = Nm;
  const Tensor& dmask = options.decoder_mask;
  if (dmask.defined()) {
    UNMASK_CHECK((dmask.dtype() == DType::u8 || dmask.dtype() == DType::boolean) && dmask.ndim() == 2 &&
                     dmask.size(0) == B && dmask.size(1) == Np && dmask.is_contiguous(),
                 "videomae pretrain_step: decoder_mask must be u8 [", B, ", ", Np, "] (1 = not decoded), got ",
                 dmask.describe());
    const uint8_t* dk = static_cast<const uint8_t*>(dmask.raw());
    dec_ids.clear();
    Nd = 0;
    for (int64_t j = 0; j < Np; ++j) Nd += dk[j] == 0;
    for (int64_t b = 0; b < B; ++b) {
      int64_t kept = 0;
      for (int64_t j = 0; j < Np; ++j)
        if (dk[b * Np + j] == 0) {
          dec_ids.push_back(int32_t(b * Np + j));
          ++kept;
        }
      UNMASK_CHECK(kept == Nd, "videomae pretrain_step: every decoder_mask row must keep the same number of tokens: ",
                   "row 0 keeps ", Nd, ", row ", b, " keeps ", kept);
    }
    UNMASK_CHECK(Nd >= 1, "videomae pretrain_step: the decoder mask keeps no token");
  }
  std::vector<uint8_t> loss_weight(dec_ids.size(), 1);
  int64_t loss_rows = int64_t(dec_ids.size());
  if (dmask.defined()) {
    loss_rows = 0;
    for (size_t r = 0; r < dec_ids.size(); ++r) loss_rows += (loss_weight[r] = mk[dec_ids[r]] != 0);
    UNMASK_CHECK(loss_rows >= 1, "videomae pretrain_step: no decoded token is encoder-masked, so there is no loss");
  }
  const int64_t Nt = Nv + Nd;  // decoder tokens per clip

  video::retain_freed_memory();
  const Tensor clips = videos.contiguous();
  const TokenGeometry geo{c.channels, c.num_frames, c.img_size,  c.img_size,
                          c.tubelet,  c.patch,      c.grid_hw(), c.grid_hw()};

  // ---- forward ----
  // Patch embedding of the visible tubelets: x0 = cols_vis Wpatch^T + b + pos[token].
  Tensor cols_vis = Tensor::empty({B * Nv, K}, DType::f32);
  unfold_rows(ctx, clips.data<float>(), geo, Np, vis_ids, cols_vis.data<float>());
  Tensor vis_pos = Tensor::empty({B * Nv}, DType::i32);
  for (int64_t r = 0; r < B * Nv; ++r) vis_pos.data<int32_t>()[r] = int32_t(vis_ids[size_t(r)] % Np);
  Tensor x0 = Tensor::empty({B * Nv, D}, DType::f32);
  train::linear_forward(ctx, cols_vis, m.patch_w, m.patch_b, x0);
  ops::embedding(ctx, m.enc_pos, vis_pos, x0, /*accumulate=*/true);

  const BlockShape es{D, c.mlp_hidden(D), c.heads, Nv, c.norm_eps};
  std::vector<BlockSaved> enc(m.enc_blocks.size());
  for (size_t i = 0; i < enc.size(); ++i)
    video::block_forward(ctx, m.enc_blocks[i], i == 0 ? x0 : enc[i - 1].out, es, enc[i]);
  const Tensor& enc_last = enc.back().out;
  Tensor enc_ln = Tensor::empty({B * Nv, D}, DType::f32);
  Tensor enc_mean = Tensor::empty({B * Nv}, DType::f32), enc_rstd = Tensor::empty({B * Nv}, DType::f32);
  ops::layernorm(ctx, enc_last, nullptr, m.enc_norm_g.value, m.enc_norm_b.value, c.norm_eps, enc_ln, &enc_mean,
                 &enc_rstd);
  Tensor e2d = Tensor::empty({B * Nv, Dd}, DType::f32);
  PV no_bias;
  train::linear_forward(ctx, enc_ln, m.e2d_w, no_bias, e2d);

  // Decoder input per clip: [e2d_vis + pos_dec[vis], mask_token + pos_dec[decoded]] (Nt rows).
  Tensor dec_in = Tensor::empty({B * Nt, Dd}, DType::f32);
  {
    float* di = dec_in.data<float>();
    const float* pe = m.dec_pos.data<float>();
    const float* mt = m.mask_token.value.data<float>();
    const float* ev = e2d.data<float>();
    ctx.parallel_for(
        B * Nt,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t b = r / Nt, j = r % Nt;
            float* row = di + r * Dd;
            const bool vis = j < Nv;
            const int64_t tok = vis ? vis_ids[size_t(b * Nv + j)] % Np : dec_ids[size_t(b * Nd + j - Nv)] % Np;
            const float* src = vis ? ev + (b * Nv + j) * Dd : mt;
            for (int64_t k = 0; k < Dd; ++k) row[k] = src[k] + pe[tok * Dd + k];
          }
        },
        64);
  }
  const BlockShape ds{Dd, c.mlp_hidden(Dd), c.decoder_heads, Nt, c.norm_eps};
  std::vector<BlockSaved> dec(m.dec_blocks.size());
  for (size_t i = 0; i < dec.size(); ++i)
    video::block_forward(ctx, m.dec_blocks[i], i == 0 ? dec_in : dec[i - 1].out, ds, dec[i]);
  // decoder.norm + head on the last Nd rows of every clip
  Tensor dec_m = Tensor::empty({B * Nd, Dd}, DType::f32);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(dec_m.data<float>() + b * Nd * Dd, dec.back().out.data<float>() + (b * Nt + Nv) * Dd,
                size_t(Nd * Dd) * sizeof(float));
  Tensor dec_ln = Tensor::empty({B * Nd, Dd}, DType::f32);
  Tensor dec_mean = Tensor::empty({B * Nd}, DType::f32), dec_rstd = Tensor::empty({B * Nd}, DType::f32);
  ops::layernorm(ctx, dec_m, nullptr, m.dec_norm_g.value, m.dec_norm_b.value, c.norm_eps, dec_ln, &dec_mean, &dec_rstd);
  Tensor pred = Tensor::empty({B * Nd, K}, DType::f32);
  train::linear_forward(ctx, dec_ln, m.head_w, m.head_b, pred);

  // ---- loss: MSE against the normalised-pixel target of the loss tokens ----
  const int64_t count = loss_rows * K;
  Tensor target = options.keep_outputs ? Tensor::empty({B * Nd, K}, DType::f32) : Tensor();
  Tensor dpred = Tensor::empty({B * Nd, K}, DType::f32);
  const double gscale = 2.0 * double(options.loss_scale) / double(count);
  std::vector<double> row_sq(size_t(B * Nd));
  target_and_loss_rows(ctx, clips.data<float>(), geo, Np, dec_ids, options.mean, options.std, pred.data<float>(),
                       gscale, dpred.data<float>(), options.keep_outputs ? target.data<float>() : nullptr, row_sq);
  double sq = 0;
  for (size_t r = 0; r < row_sq.size(); ++r) {
    if (loss_weight[r]) {
      sq += row_sq[r];
    } else {  // decoded but encoder-visible (v2): reconstructed, not in the loss
      std::memset(dpred.data<float>() + int64_t(r) * K, 0, size_t(K) * sizeof(float));
    }
  }
  VideoMAEStepStats st;
  st.loss = sq / double(count);
  st.clips = B;
  st.masked_tokens = B * Nm;
  st.visible_tokens = B * Nv;
  st.decoded_tokens = B * Nd;
  st.loss_tokens = loss_rows;
  if (options.keep_outputs) {
    st.pred = pred;
    st.target = target;
  }
  if (!options.backward) return st;

  // ---- backward ----
  auto ready = [&](const Impl::ParamRange& r) {
    if (options.grads_ready) options.grads_ready(r.first, r.end);
  };
  Tensor dln = Tensor::empty({B * Nd, Dd}, DType::f32);
  train::linear_backward(ctx, dec_ln, m.head_w, m.head_b, dpred, &dln);
  ops::layernorm_backward(ctx, dec_m, nullptr, m.dec_norm_g.value, dec_mean, dec_rstd, dln, dln, m.dec_norm_g.grad,
                          m.dec_norm_b.grad);
  ready(m.dec_norm_head_range);
  Tensor g = Tensor::zeros({B * Nt, Dd}, DType::f32);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(g.data<float>() + (b * Nt + Nv) * Dd, dln.data<float>() + b * Nd * Dd, size_t(Nd * Dd) * sizeof(float));
  for (size_t i = dec.size(); i-- > 0;) {
    video::block_backward(ctx, m.dec_blocks[i], i == 0 ? dec_in : dec[i - 1].out, dec[i], ds, g);
    dec[i] = BlockSaved{};  // its memory serves the next block's backward
    ready(m.dec_block_ranges[i]);
  }
  // g = d dec_in: masked rows into mask_token, visible rows into encoder_to_decoder
  Tensor de2d = Tensor::empty({B * Nv, Dd}, DType::f32);
  {
    float* mtg = m.mask_token.grad.data<float>();
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(de2d.data<float>() + b * Nv * Dd, g.data<float>() + b * Nt * Dd, size_t(Nv * Dd) * sizeof(float));
      for (int64_t j = Nv; j < Nt; ++j) {
        const float* row = g.data<float>() + (b * Nt + j) * Dd;
        for (int64_t k = 0; k < Dd; ++k) mtg[k] += row[k];
      }
    }
  }
  ready(m.mask_token_range);
  Tensor genc = Tensor::empty({B * Nv, D}, DType::f32);
  train::linear_backward(ctx, enc_ln, m.e2d_w, no_bias, de2d, &genc);
  ready(m.e2d_range);
  ops::layernorm_backward(ctx, enc_last, nullptr, m.enc_norm_g.value, enc_mean, enc_rstd, genc, genc, m.enc_norm_g.grad,
                          m.enc_norm_b.grad);
  ready(m.enc_norm_range);
  for (size_t i = enc.size(); i-- > 0;) {
    video::block_backward(ctx, m.enc_blocks[i], i == 0 ? x0 : enc[i - 1].out, enc[i], es, genc);
    enc[i] = BlockSaved{};
    ready(m.enc_block_ranges[i]);
  }
  train::linear_backward(ctx, cols_vis, m.patch_w, m.patch_b, genc, nullptr);
  ready(m.patch_range);
  return st;
}

}  // namespace unmask
