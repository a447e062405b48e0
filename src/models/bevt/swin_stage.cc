// models/bevt/swin_stage.cc: see swin_stage.h.
#include "models/bevt/swin_stage.h"

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

Tensor gather_rows(Context& ctx, const Tensor& x, const std::vector<int32_t>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size()), x.size(1)}, x.dtype(), x.device());
  ops::embedding(ctx, x, train::row_ids(rows, x.device()), out);
  return out;
}

// What block j attends with: its bias gathered from its table, and its masks (undefined: none).
struct BlockAttention {
  train::WindowGeometry g;
  std::vector<int32_t> index;
  Tensor bias, mask;
};

// The masks are made on the host and copied to the table's device (a few MB at most: 8 video
// windows of 392 x 392, or 16 image windows of 49 x 49, per stage).
BlockAttention block_attention(Context& ctx, const SwinStageParams& p, const SwinStageShape& s, int64_t j) {
  BlockAttention a;
  a.g = stage_block_geometry(s, j);
  a.index = train::relative_position_index(s.window, a.g.tokens());
  const Tensor& table = p.tables[size_t(j)].value;
  a.bias = train::gather_relative_bias(ctx, table, a.index, a.g.tokens());
  if (s.image) {  // BEVT's image stream: the shift-3 masks in every block
    train::WindowGeometry shifted = a.g;
    shifted.shift = {0, s.window[1] / 2, s.window[2] / 2};
    a.mask = train::shift_region_masks(shifted);
  } else if (a.g.shifted()) {
    a.mask = train::shift_region_masks(a.g);
  }
  if (a.mask.defined() && table.device() != Device::cpu) a.mask = a.mask.to(table.device());
  return a;
}

nn::BlockShape block_shape(const SwinStageShape& s, int64_t j, const BlockAttention& a, Tensor* dbias) {
  nn::BlockShape b;
  b.C = s.dim, b.I = s.mlp_hidden, b.NH = s.heads, b.eps = s.eps;
  b.tokens = s.size[0] * s.size[1] * s.size[2];
  b.window = a.g.tokens();
  b.window_bias = &a.bias;
  b.window_mask = a.mask.defined() ? &a.mask : nullptr;
  b.window_dbias = dbias;
  if (!s.drop_attn.empty()) b.drop_attn = s.drop_attn[size_t(j)].data();
  if (!s.drop_mlp.empty()) b.drop_mlp = s.drop_mlp[size_t(j)].data();
  return b;
}

}  // namespace

train::WindowGeometry stage_block_geometry(const SwinStageShape& s, int64_t j) {
  const bool odd = j % 2 == 1;
  if (s.image) {
    UNMASK_CHECK(s.size[0] == 1, "Swin image stage: the volume must be one frame deep, got ", s.size[0]);
    const int64_t w = s.window[1], shift = odd ? w / 2 : 0;
    UNMASK_CHECK(s.size[1] % w == 0 && s.size[2] % w == 0, "Swin image stage: a ", s.size[1], " x ", s.size[2],
                 " token grid is not whole ", w, " x ", w, " windows (BEVT's images are multiples of 224 on a side)");
    return train::WindowGeometry{s.size, {1, w, w}, {0, shift, shift}};  // never clipped (BEVT)
  }
  const std::array<int64_t, 3> shift = odd ? std::array<int64_t, 3>{s.window[0] / 2, s.window[1] / 2, s.window[2] / 2}
                                           : std::array<int64_t, 3>{0, 0, 0};
  return train::clipped_window(s.size, s.window, shift);
}

void swin_stage_forward(Context& ctx, const SwinStageParams& p, const Tensor& x, const SwinStageShape& s,
                        SwinStageSaved& sv) {
  const int64_t depth = int64_t(p.blocks.size());
  UNMASK_CHECK(int64_t(p.tables.size()) == depth, "Swin stage: ", depth, " blocks but ", p.tables.size(), " tables");
  UNMASK_CHECK((s.drop_attn.empty() || int64_t(s.drop_attn.size()) == depth) &&
                   (s.drop_mlp.empty() || int64_t(s.drop_mlp.size()) == depth),
               "Swin stage: drop path scales for ", s.drop_attn.size(), " / ", s.drop_mlp.size(), " of ", depth, " blocks");
  sv.inputs.assign(size_t(depth), Tensor());
  sv.blocks.assign(size_t(depth), nn::BlockSaved());
  sv.rows.assign(size_t(depth), {});
  Tensor cur = x;
  for (int64_t j = 0; j < depth; ++j) {
    const BlockAttention a = block_attention(ctx, p, s, j);
    sv.rows[size_t(j)] = train::window_partition_rows(s.batch, a.g);
    sv.inputs[size_t(j)] = gather_rows(ctx, cur, sv.rows[size_t(j)]);
    nn::block_forward(ctx, p.blocks[size_t(j)], sv.inputs[size_t(j)], block_shape(s, j, a, nullptr), sv.blocks[size_t(j)]);
    cur = gather_rows(ctx, sv.blocks[size_t(j)].out, train::inverse_rows(sv.rows[size_t(j)]));
  }
  sv.out = cur;
  if (p.merge) train::patch_merging_forward(ctx, p.merging, sv.out, s.batch, s.size, s.eps, sv.merged, sv.merging);
}

Tensor swin_stage_backward(Context& ctx, SwinStageParams& p, const SwinStageSaved& sv, const SwinStageShape& s,
                           const Tensor& g_merged, const Tensor& g_out) {
  Tensor g;
  if (p.merge && g_merged.defined()) {
    g = Tensor::empty(sv.out.shape(), DType::f32, sv.out.device());
    train::patch_merging_backward(ctx, p.merging, sv.merging, s.batch, s.size, g_merged, g);
    if (g_out.defined()) ops::axpy(ctx, 1.0f, g_out, g);
  } else {
    UNMASK_CHECK(g_out.defined(), "Swin stage backward: no gradient reaches the stage");
    g = Tensor::empty(g_out.shape(), DType::f32, g_out.device());
    g.copy_from(g_out);
  }
  for (int64_t j = int64_t(p.blocks.size()) - 1; j >= 0; --j) {
    const BlockAttention a = block_attention(ctx, p, s, j);
    Tensor dbias = Tensor::empty({s.heads, a.g.tokens(), a.g.tokens()}, DType::f32, g.device());
    ops::zero_many(ctx, {&dbias});
    Tensor gw = gather_rows(ctx, g, sv.rows[size_t(j)]);
    nn::block_backward(ctx, p.blocks[size_t(j)], sv.inputs[size_t(j)], sv.blocks[size_t(j)], block_shape(s, j, a, &dbias),
                       gw);
    train::scatter_relative_bias_grad(ctx, dbias, a.index, p.tables[size_t(j)].grad);
    g = gather_rows(ctx, gw, train::inverse_rows(sv.rows[size_t(j)]));
  }
  return g;
}

}  // namespace unmask::bevt
