// nn/patch_merging.cc: see patch_merging.h.
#include "nn/patch_merging.h"

#include <vector>

#include "nn/window_geometry.h"
#include "unmask/error.h"

namespace unmask::train {

namespace {

// The source rows of quarter q (0: (h0, w0), 1: (h1, w0), 2: (h0, w1), 3: (h1, w1)) of every
// merged token, in the merged volume's order.
Tensor quarter_ids(int64_t batch, std::array<int64_t, 3> size, int q, Device device) {
  const auto [D, H, W] = size;
  UNMASK_CHECK(H % 2 == 0 && W % 2 == 0, "patch merging: a ", H, " x ", W, " token grid is not even on both sides",
               Hint("Swin pads odd grids; BEVT's are even"));
  const int64_t dh = q % 2, dw = q / 2;
  std::vector<int32_t> rows;
  rows.reserve(size_t(batch * D * (H / 2) * (W / 2)));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t h = 0; h < H / 2; ++h)
        for (int64_t w = 0; w < W / 2; ++w)
          rows.push_back(int32_t(((b * D + d) * H + 2 * h + dh) * W + 2 * w + dw));
  return row_ids(rows, device);
}

}  // namespace

void patch_merging_forward(Context& ctx, const PatchMergingParams& p, const Tensor& x, int64_t batch,
                           std::array<int64_t, 3> size, float eps, Tensor& out, PatchMergingSaved& sv) {
  const int64_t C = x.size(1), R = batch * size[0] * size[1] * size[2];
  UNMASK_CHECK(x.ndim() == 2 && x.size(0) == R, "patch merging: x must be [", R, ", C] for ", batch, " samples of ",
               size[0], " x ", size[1], " x ", size[2], " tokens, got ", x.describe());
  const int64_t M = R / 4;
  sv.merged = Tensor::empty({M, 4 * C}, DType::f32, x.device());
  for (int q = 0; q < 4; ++q) {
    Tensor part = sv.merged.slice(1, q * C, (q + 1) * C);
    ops::embedding(ctx, x, quarter_ids(batch, size, q, x.device()), part);
  }
  sv.ln = Tensor::empty({M, 4 * C}, DType::f32, x.device());
  sv.mean = Tensor::empty({M}, DType::f32, x.device());
  sv.rstd = Tensor::empty({M}, DType::f32, x.device());
  ops::layernorm(ctx, sv.merged, nullptr, p.norm_g.value, p.norm_b.value, eps, sv.ln, &sv.mean, &sv.rstd);
  out = Tensor::empty({M, 2 * C}, DType::f32, x.device());
  PV no_bias;
  linear_forward(ctx, sv.ln, p.reduction_w, no_bias, out);
}

void patch_merging_backward(Context& ctx, PatchMergingParams& p, const PatchMergingSaved& sv, int64_t batch,
                            std::array<int64_t, 3> size, const Tensor& dout, Tensor& dx) {
  const int64_t M = sv.merged.size(0), C4 = sv.merged.size(1), C = C4 / 4;
  Tensor dln = Tensor::empty({M, C4}, DType::f32, dout.device());
  PV no_bias;
  linear_backward(ctx, sv.ln, p.reduction_w, no_bias, dout, &dln);
  ops::layernorm_backward(ctx, sv.merged, nullptr, p.norm_g.value, sv.mean, sv.rstd, dln, dln, p.norm_g.grad,
                          p.norm_b.grad);
  UNMASK_CHECK(dx.ndim() == 2 && dx.size(0) == 4 * M && dx.size(1) == C, "patch merging backward: dx must be [",
               4 * M, ", ", C, "], got ", dx.describe());
  ops::zero_many(ctx, {&dx});
  for (int q = 0; q < 4; ++q)  // each source row is in exactly one quarter: the scatter writes it once
    ops::embedding_backward(ctx, quarter_ids(batch, size, q, dout.device()), dln.slice(1, q * C, (q + 1) * C), dx);
}

}  // namespace unmask::train
