// models/bevt/swin_stage.cc: see swin_stage.h.
#include "models/bevt/swin_stage.h"

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

Tensor gather_rows(Context& ctx, const Tensor& x, const Tensor& ids) {
  Tensor out = Tensor::empty({ids.size(0), x.size(1)}, x.dtype(), x.device());
  ops::embedding(ctx, x, ids, out);
  return out;
}

// What block j attends with: its geometry's tables and its bias gathered from its table.
struct BlockAttention {
  const BlockTables* t = nullptr;
  Tensor bias;
};

BlockAttention block_attention(Context& ctx, const SwinStageParams& p, const SwinStageShape& s, int64_t j) {
  BlockAttention a;
  const Tensor& table = p.tables[size_t(j)].value;
  a.t = &p.geometry->get(s, j, table.device());
  a.bias = train::gather_relative_bias(ctx, table, a.t->index_ids, a.t->g.tokens());
  return a;
}

nn::BlockShape block_shape(const SwinStageShape& s, int64_t j, const BlockAttention& a, Tensor* dbias) {
  nn::BlockShape b;
  b.C = s.dim, b.I = s.mlp_hidden, b.NH = s.heads, b.eps = s.eps;
  b.tokens = s.size[0] * s.size[1] * s.size[2];
  b.window = a.t->g.tokens();
  b.window_bias = &a.bias;
  b.window_mask = a.t->mask.defined() ? &a.t->mask : nullptr;
  b.window_dbias = dbias;
  if (!s.drop_attn.empty()) b.drop_attn = s.drop_attn[size_t(j)].data();
  if (!s.drop_mlp.empty()) b.drop_mlp = s.drop_mlp[size_t(j)].data();
  return b;
}

}  // namespace

const BlockTables& StageGeometryCache::get(const SwinStageShape& s, int64_t j, Device device) {
  const std::vector<int64_t> key = {s.batch, s.size[0], s.size[1], s.size[2], s.window[0], s.window[1], s.window[2],
                                    int64_t(s.image), j % 2, int64_t(device)};
  auto it = tables_.find(key);
  if (it != tables_.end()) return it->second;
  BlockTables t;
  t.g = stage_block_geometry(s, j);
  t.index_ids = train::row_ids(train::relative_position_index(s.window, t.g.tokens()), device);
  if (s.image) {  // BEVT's image stream: the shift-3 masks in every block
    train::WindowGeometry shifted = t.g;
    shifted.shift = {0, s.window[1] / 2, s.window[2] / 2};
    t.mask = train::shift_region_masks(shifted);
  } else if (t.g.shifted()) {
    t.mask = train::shift_region_masks(t.g);
  }
  if (t.mask.defined() && device != Device::cpu) t.mask = t.mask.to(device);
  const std::vector<int32_t> rows = train::window_partition_rows(s.batch, t.g);
  t.rows = train::row_ids(rows, device);
  t.back = train::row_ids(train::inverse_rows(rows), device);
  return tables_.emplace(key, std::move(t)).first->second;
}

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
  Tensor cur = x;
  for (int64_t j = 0; j < depth; ++j) {
    const BlockAttention a = block_attention(ctx, p, s, j);
    sv.inputs[size_t(j)] = gather_rows(ctx, cur, a.t->rows);
    nn::block_forward(ctx, p.blocks[size_t(j)], sv.inputs[size_t(j)], block_shape(s, j, a, nullptr), sv.blocks[size_t(j)]);
    cur = gather_rows(ctx, sv.blocks[size_t(j)].out, a.t->back);
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
    const int64_t N = a.t->g.tokens();
    Tensor dbias = Tensor::empty({s.heads, N, N}, DType::f32, g.device());
    ops::zero_many(ctx, {&dbias});
    Tensor gw = gather_rows(ctx, g, a.t->rows);
    nn::block_backward(ctx, p.blocks[size_t(j)], sv.inputs[size_t(j)], sv.blocks[size_t(j)], block_shape(s, j, a, &dbias),
                       gw);
    train::scatter_relative_bias_grad(ctx, dbias, a.t->index_ids, p.tables[size_t(j)].grad);
    g = gather_rows(ctx, gw, a.t->back);
  }
  return g;
}

}  // namespace unmask::bevt
