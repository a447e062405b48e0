// ops/video_ops.cc: the video-token ops of VideoMAE pretraining (ops.h): the tubelet gather of
// the visible tokens, the normalised-pixel target of the decoded ones and the squared-error
// loss with its gradient. CPU here (on the context's threads); CUDA in cuda/video.cu.
//
// The CPU target is computed in double and rounded once, and the loss is summed per row in
// double and then over the rows in row order: the results do not depend on the thread count.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/op_common.h"
#include "ops/ops.h"
#include "ops/tubelet_geometry.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

// The checked geometry of a video batch, and the number R of token ids.
struct Geometry : TubeletGeometry {
  int64_t R = 0;
};

Geometry check_geometry(const char* op, const Tensor& videos, const Tensor& ids, Tubelet t, const Tensor& out,
                        const char* out_name) {
  detail::check_f32(op, "videos", videos);
  detail::check_f32(op, out_name, out);
  UNMASK_CHECK(videos.ndim() == 5 && videos.is_contiguous(), op, ": videos must be a contiguous [B, C, T, H, W], got ",
               videos.describe());
  const Device dev = videos.device();
  detail::check_device(op, "ids", ids, dev);
  detail::check_device(op, out_name, out, dev);
  UNMASK_CHECK(ids.dtype() == DType::i32 && ids.ndim() == 1 && ids.is_contiguous(), op,
               ": ids must be a contiguous i32 [R], got ", ids.describe());
  const int64_t T = videos.size(2), H = videos.size(3), W = videos.size(4), tt = t.tubelet, p = t.patch;
  UNMASK_CHECK(tt >= 1 && p >= 1 && T % tt == 0 && H % p == 0 && W % p == 0, op, ": tubelet ", tt, " x ", p, " x ", p,
               " does not tile the clips ", videos.describe(),
               Hint("T must be a multiple of the tubelet and H, W of the patch size"));
  Geometry g;
  static_cast<TubeletGeometry&>(g) = TubeletGeometry::of(videos.size(0), videos.size(1), T, H, W, tt, p);
  g.R = ids.size(0);
  UNMASK_CHECK(out.ndim() == 2 && out.size(0) == g.R && out.size(1) == g.K && out.is_contiguous(), op, ": ", out_name,
               " must be a contiguous f32 [", g.R, ", ", g.K, "], got ", out.describe());
  UNMASK_CHECK(g.B * g.Np < (int64_t(1) << 31), op, ": ", g.B * g.Np, " tokens do not fit the i32 ids");
  if (dev == Device::cpu) {
    const int32_t* id = ids.data<int32_t>();
    for (int64_t r = 0; r < g.R; ++r)
      UNMASK_CHECK(id[r] >= 0 && int64_t(id[r]) < g.B * g.Np, op, ": ids[", r, "] = ", id[r], " is outside [0, ",
                   g.B * g.Np, ") (", g.B, " clips x ", g.Np, " tokens)");
  }
  return g;
}

}  // namespace

void tubelet_gather(Context& ctx, const Tensor& videos, const Tensor& ids, Tubelet t, Tensor& cols) {
  detail::OpScope op_scope(ctx, "tubelet_gather");
  constexpr const char* op = "tubelet_gather";
  const Geometry g = check_geometry(op, videos, ids, t, cols, "cols");
  if (g.R == 0) return;
  if (videos.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::tubelet_gather(ctx, videos.data<float>(), g, ids.data<int32_t>(), g.R, cols.data<float>());
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* v = videos.data<float>();
  const int32_t* id = ids.data<int32_t>();
  float* out = cols.data<float>();
  ctx.parallel_for(
      g.R,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          float* row = out + r * g.K;
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t dt = 0; dt < g.tt; ++dt)
              for (int64_t dy = 0; dy < g.p; ++dy)
                std::memcpy(row + ((c * g.tt + dt) * g.p + dy) * g.p, v + g.pixel(id[r], c, dt, dy, 0),
                            size_t(g.p) * sizeof(float));
        }
      },
      16);
}

void tubelet_target(Context& ctx, const Tensor& videos, const Tensor& ids, Tubelet t, const std::vector<float>& mean,
                    const std::vector<float>& stdev, Tensor& target) {
  detail::OpScope op_scope(ctx, "tubelet_target");
  constexpr const char* op = "tubelet_target";
  const Geometry g = check_geometry(op, videos, ids, t, target, "target");
  UNMASK_CHECK(int64_t(mean.size()) == g.C && int64_t(stdev.size()) == g.C, op, ": mean and stdev need ", g.C,
               " values (one per channel), got ", mean.size(), " and ", stdev.size());
  const int64_t P = g.tt * g.p * g.p;
  UNMASK_CHECK(P >= 2, op, ": a token of ", P, " pixel has no unbiased variance");
  if (g.R == 0) return;
  if (videos.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::tubelet_target(ctx, videos.data<float>(), g, ids.data<int32_t>(), g.R, mean, stdev,
                                target.data<float>());
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* v = videos.data<float>();
  const int32_t* id = ids.data<int32_t>();
  float* out = target.data<float>();
  ctx.parallel_for(
      g.R,
      [&](int64_t begin, int64_t end) {
        std::vector<double> x(static_cast<size_t>(P));
        for (int64_t r = begin; r < end; ++r) {
          float* row = out + r * g.K;
          for (int64_t c = 0; c < g.C; ++c) {
            double sum = 0;
            for (int64_t dt = 0; dt < g.tt; ++dt)
              for (int64_t dy = 0; dy < g.p; ++dy) {
                const float* src = v + g.pixel(id[r], c, dt, dy, 0);
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
            for (int64_t i = 0; i < P; ++i) row[i * g.C + c] = float((x[size_t(i)] - mu) / (sd + 1e-6));
          }
        }
      },
      8);
}

double mse_rows(Context& ctx, const Tensor& pred, const Tensor& target, const Tensor* row_weight, double grad_scale,
                Tensor& dpred) {
  detail::OpScope op_scope(ctx, "mse_rows");
  constexpr const char* op = "mse_rows";
  detail::check_f32(op, "pred", pred);
  detail::check_f32(op, "target", target);
  detail::check_f32(op, "dpred", dpred);
  const Device dev = pred.device();
  detail::check_device(op, "target", target, dev);
  detail::check_device(op, "dpred", dpred, dev);
  UNMASK_CHECK(pred.ndim() == 2 && pred.is_contiguous(), op, ": pred must be a contiguous [R, K], got ", pred.describe());
  detail::check_same_shape(op, "pred", pred, "target", target);
  detail::check_same_shape(op, "pred", pred, "dpred", dpred);
  UNMASK_CHECK(target.is_contiguous() && dpred.is_contiguous(), op, ": target and dpred must be contiguous, got ",
               target.describe(), " and ", dpred.describe());
  detail::check_no_overlap(op, "dpred", dpred, "pred", pred, true);
  detail::check_no_overlap(op, "dpred", dpred, "target", target, false);
  const int64_t R = pred.size(0), K = pred.size(1);
  const uint8_t* w = nullptr;
  if (row_weight) {
    UNMASK_CHECK((row_weight->dtype() == DType::u8 || row_weight->dtype() == DType::boolean) &&
                     row_weight->ndim() == 1 && row_weight->size(0) == R && row_weight->is_contiguous(),
                 op, ": row_weight must be a contiguous u8 [", R, "], got ", row_weight->describe());
    detail::check_device(op, "row_weight", *row_weight, dev);
    w = static_cast<const uint8_t*>(row_weight->raw());
  }
  if (R == 0 || K == 0) return 0.0;
  if (dev == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::mse_rows(ctx, pred.data<float>(), target.data<float>(), w, grad_scale, dpred.data<float>(), R, K);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  const float* pr = pred.data<float>();
  const float* tg = target.data<float>();
  float* dp = dpred.data<float>();
  std::vector<double> row_sq(static_cast<size_t>(R), 0.0);
  ctx.parallel_for(
      R,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          float* d = dp + r * K;
          if (w && !w[r]) {
            std::memset(d, 0, size_t(K) * sizeof(float));
            continue;
          }
          const float* a = pr + r * K;
          const float* b = tg + r * K;
          double sq = 0;
          for (int64_t k = 0; k < K; ++k) {
            const double diff = double(a[k]) - double(b[k]);
            sq += diff * diff;
            d[k] = float(grad_scale * diff);
          }
          row_sq[size_t(r)] = sq;
        }
      },
      8);
  double total = 0;
  for (double s : row_sq) total += s;
  return total;
}

namespace {

// A host u8 / bool mask [B, Np] of videomae_index, checked.
const uint8_t* index_mask(const char* op, const char* name, const Tensor& m, int64_t B, int64_t Np) {
  UNMASK_CHECK(m.defined() && (m.dtype() == DType::u8 || m.dtype() == DType::boolean) && m.ndim() == 2 &&
                   m.is_contiguous() && m.device() == Device::cpu && (B < 0 || (m.size(0) == B && m.size(1) == Np)),
               op, ": ", name, " must be a contiguous u8 [", B < 0 ? std::string("B") : std::to_string(B), ", ",
               B < 0 ? std::string("Np") : std::to_string(Np), "] on the host, got ",
               m.defined() ? m.describe() : std::string("undefined"),
               Hint("the step reads its masks on the host: pass CPU tensors"));
  return static_cast<const uint8_t*>(m.raw());
}

}  // namespace

void videomae_index(Context& ctx, const Tensor& mask, const Tensor* decoder_mask, int64_t Nv, int64_t Nd,
                    Tensor& lists, Tensor* loss_weight) {
  detail::OpScope op_scope(ctx, "videomae_index");
  constexpr const char* op = "videomae_index";
  const uint8_t* mk = index_mask(op, "mask", mask, -1, -1);
  const int64_t B = mask.size(0), Np = mask.size(1);
  const uint8_t* dk = decoder_mask ? index_mask(op, "decoder_mask", *decoder_mask, B, Np) : nullptr;
  UNMASK_CHECK(Nv >= 1 && Nv <= Np && Nd >= 1 && Nd <= Np, op, ": Nv = ", Nv, " and Nd = ", Nd,
               " must lie in [1, Np = ", Np, "]");
  for (int64_t b = 0; b < B; ++b) {  // every row's counts, before anything is written
    int64_t visible = 0, decoded = 0;
    for (int64_t j = 0; j < Np; ++j) {
      visible += mk[b * Np + j] == 0;
      decoded += dk ? dk[b * Np + j] == 0 : mk[b * Np + j] != 0;
    }
    UNMASK_CHECK(visible == Nv, op, ": the mask leaves ", visible, " of clip ", b, "'s ", Np,
                 " tokens visible; every clip must leave the same number, Nv = ", Nv);
    UNMASK_CHECK(decoded == Nd, op, ": clip ", b, " has ", decoded, " decoded tokens (",
                 dk ? "kept by the decoder mask" : "masked by the mask", "); every clip must have the same number, Nd = ",
                 Nd);
  }
  const int64_t Nt = Nv + Nd, nv = B * Nv, nd = B * Nd, nt = B * Nt;
  const Device dev = ctx.device();
  UNMASK_CHECK(lists.dtype() == DType::i32 && lists.ndim() == 1 && lists.is_contiguous() &&
                   lists.numel() == 3 * nv + 2 * nd + 3 * nt,
               op, ": lists must be a contiguous i32 [3 B Nv + 2 B Nd + 3 B Nt = ", 3 * nv + 2 * nd + 3 * nt, "], got ",
               lists.describe());
  detail::check_device(op, "lists", lists, dev);
  if (loss_weight) {
    UNMASK_CHECK((loss_weight->dtype() == DType::u8 || loss_weight->dtype() == DType::boolean) &&
                     loss_weight->ndim() == 1 && loss_weight->numel() == nd && loss_weight->is_contiguous(),
                 op, ": loss_weight must be a contiguous u8 [B Nd = ", nd, "], got ", loss_weight->describe());
    detail::check_device(op, "loss_weight", *loss_weight, dev);
  }
  if (B == 0) return;
  uint8_t* lw = loss_weight ? static_cast<uint8_t*>(loss_weight->raw()) : nullptr;
  if (dev == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    ctx.make_current();  // the uploads' blocks are tagged with (and freed on) ctx's stream
    Tensor enc = Tensor::empty({B, Np}, mask.dtype(), Device::cuda), dec;  // B Np bytes each
    ops::copy(ctx, mask, enc);
    if (dk) {
      dec = Tensor::empty({B, Np}, decoder_mask->dtype(), Device::cuda);
      ops::copy(ctx, *decoder_mask, dec);
    }
    cuda::videomae_index(ctx, static_cast<const uint8_t*>(enc.raw()),
                         dk ? static_cast<const uint8_t*>(dec.raw()) : nullptr, B, Np, Nv, Nd, lists.data<int32_t>(), lw);
    return;
#else
    detail::throw_unsupported(op, Device::cuda, DType::i32);
#endif
  }
  int32_t* vis_id = lists.data<int32_t>();
  int32_t* vis_pos = vis_id + nv;
  int32_t* dec_src = vis_pos + nv;
  int32_t* dec_tok = dec_src + nt;
  int32_t* dec_rows = dec_tok + nt;
  int32_t* dec_id = dec_rows + nd;
  int32_t* grad_src = dec_id + nd;
  int32_t* vis_rows = grad_src + nt;
  ctx.parallel_for(
      B,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          int64_t i = 0, k = 0;  // the clip's visible / decoded tokens so far
          for (int64_t j = 0; j < Np; ++j) {
            const bool masked = mk[b * Np + j] != 0;
            if (!masked) {  // visible token i: row b Nv + i; decoder input row b Nt + i
              const int64_t r = b * Nv + i, t = b * Nt + i;
              vis_id[r] = int32_t(b * Np + j), vis_pos[r] = int32_t(j), vis_rows[r] = int32_t(t);
              dec_src[t] = int32_t(r), dec_tok[t] = int32_t(j), grad_src[t] = int32_t(nd);
              ++i;
            }
            if (dk ? dk[b * Np + j] == 0 : masked) {  // decoded token k: row b Nd + k; input row b Nt + Nv + k
              const int64_t r = b * Nd + k, t = b * Nt + Nv + k;
              dec_rows[r] = int32_t(t), dec_id[r] = int32_t(b * Np + j);
              dec_src[t] = int32_t(nv), dec_tok[t] = int32_t(j), grad_src[t] = int32_t(r);
              if (lw) lw[r] = masked ? 1 : 0;
              ++k;
            }
          }
        }
      },
      1);
}

}  // namespace unmask::ops
