// models/bevt/pretrain.cc: see pretrain.h.
#include "models/bevt/pretrain.h"

#include <algorithm>
#include <cstring>

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::bevt {

namespace {

// Frames the tokenizer reads at once. CPU: 4, bounding its im2col buffers (a 112 x 112 frame's
// 3 x 3 convs at 256 channels take 115 MB each) while keeping its GEMMs large. CUDA: 64 (cuDNN
// needs no im2col; a 256-channel activation of 64 frames is 205 MB).
int64_t tokenizer_chunk(Device d) { return d == Device::cpu ? 4 : 64; }

// The tokenizer's ids of frames[i] for every i with need[i] (-1 elsewhere): host [n, cells].
// The frames stay on their device; the chunks are row gathers of them.
std::vector<int32_t> tokenize(Context& ctx, const DalleEncoder& tok, const Tensor& frames, const std::vector<bool>& need,
                              int64_t cells, int64_t& ran) {
  const int64_t n = frames.size(0), C = frames.size(1), H = frames.size(2), W = frames.size(3), per = C * H * W;
  std::vector<int32_t> ids(static_cast<size_t>(n * cells), -1);
  std::vector<int32_t> todo;
  for (int64_t i = 0; i < n; ++i)
    if (need[size_t(i)]) todo.push_back(int32_t(i));
  const int64_t chunk = tokenizer_chunk(frames.device());
  for (size_t first = 0; first < todo.size(); first += size_t(chunk)) {
    const int64_t m = std::min<int64_t>(chunk, int64_t(todo.size() - first));
    const std::vector<int32_t> pick(todo.begin() + std::ptrdiff_t(first), todo.begin() + std::ptrdiff_t(first + m));
    Tensor chunk = Tensor::empty({m, C, H, W}, DType::f32, frames.device());
    Tensor chunk_rows = chunk.view({m, per});
    ops::embedding(ctx, frames.view({n, per}), train::row_ids(pick, frames.device()), chunk_rows);
    const Tensor got = tok.tokens(ctx, chunk).to(Device::cpu);
    UNMASK_CHECK(got.numel() == m * cells, "BEVT: the tokenizer gives ", got.numel() / m,
                 " ids a frame for a mask of ", cells, " cells",
                 Hint("the tokenizer's input is half the clip's size (112 for 224) and its grid is 1/8 of that"));
    for (int64_t k = 0; k < m; ++k)
      std::copy_n(got.data<int32_t>() + k * cells, cells, ids.data() + int64_t(pick[size_t(k)]) * cells);
    ran += m;
  }
  return ids;
}

// The patch-grid token mask of the H/16-grid cell mask: each cell covers 4 x 4 tokens.
std::vector<uint8_t> token_mask(const std::vector<uint8_t>& cells, int64_t planes, int64_t h16, int64_t w16) {
  const int64_t h4 = 4 * h16, w4 = 4 * w16;
  std::vector<uint8_t> m(static_cast<size_t>(planes * h4 * w4));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < h4; ++y)
      for (int64_t x = 0; x < w4; ++x)
        m[size_t((p * h4 + y) * w4 + x)] = cells[size_t((p * h16 + y / 4) * w16 + x / 4)];
  return m;
}

struct StreamInput {
  bool image = false;
  Tensor input;                       // [B, 3, T, H, W] (image T = 1)
  const std::vector<uint8_t>* cells;  // [B, planes, h16, w16]
  const std::vector<int32_t>* ids;    // [B frames, cells] (frames = 2 planes for the video, 1 for images)
};

// Masked tokens equal to their sample's commonest visible id. cells [B, planes, plane] (1 =
// masked); ids [B planes frames, plane], -1 for frames the tokenizer skipped.
int64_t context_hits(const std::vector<uint8_t>& cells, const std::vector<int32_t>& ids, int64_t B, int64_t planes,
                     int64_t frames, int64_t plane, int64_t vocab) {
  int64_t hits = 0;
  std::vector<int64_t> counts(size_t(vocab), 0);
  for (int64_t b = 0; b < B; ++b) {
    std::fill(counts.begin(), counts.end(), 0);
    auto each = [&](bool masked, auto&& f) {
      for (int64_t p = 0; p < planes; ++p)
        for (int64_t cell = 0; cell < plane; ++cell)
          if ((cells[size_t((b * planes + p) * plane + cell)] != 0) == masked)
            for (int64_t k = 0; k < frames; ++k)
              if (const int32_t id = ids[size_t(((b * planes + p) * frames + k) * plane + cell)]; id >= 0 && id < vocab)
                f(id);
    };
    each(false, [&](int32_t id) { ++counts[size_t(id)]; });
    const int32_t mode = int32_t(std::max_element(counts.begin(), counts.end()) - counts.begin());
    if (counts[size_t(mode)] > 0) each(true, [&](int32_t id) { hits += id == mode; });
  }
  return hits;
}

BevtStreamStats run_stream(Context& ctx, BevtPretrainModel& model, const StreamInput& in, const BevtStepOptions& o) {
  const SwinConfig& c = model.backbone.config;
  const int64_t B = in.input.size(0), T = in.input.size(2), H = in.input.size(3), W = in.input.size(4);
  const int64_t planes = in.image ? 1 : T / 2, h16 = H / 16, w16 = W / 16, plane = h16 * w16;
  const int64_t frames = in.image ? 1 : 2;  // output frames per mask plane
  // The masked cells, in (b, plane, y, x) order: the neck's rows and their targets.
  std::vector<int32_t> rows, targets;
  for (int64_t r = 0; r < B * planes * plane; ++r) {
    const bool masked = (*in.cells)[size_t(r)] != 0;
    if (!masked && !o.all_positions) continue;
    const int64_t b = r / (planes * plane), p = r / plane % planes, cell = r % plane;
    rows.push_back(int32_t(r));
    for (int64_t f = 0; f < frames; ++f) {
      const int64_t frame = b * planes * frames + p * frames + f;
      targets.push_back(masked ? (*in.ids)[size_t(frame * plane + cell)] : -1);
    }
  }
  BevtStreamStats st;
  if (o.all_positions ? std::none_of(in.cells->begin(), in.cells->end(), [](uint8_t v) { return v != 0; })
                      : rows.empty())
    return st;  // no masked token: no loss, no gradient
  for (int32_t t : targets)
    UNMASK_CHECK(t < model.neck.vocab, "BEVT: a target id ", t, " is outside the head's ", model.neck.vocab, " codes",
                 Hint("the tokenizer's vocabulary and the model's (--vocab) must agree"));

  const std::vector<uint8_t> tmask = token_mask(*in.cells, B * planes, h16, w16);
  BackboneSaved bs;
  DropPathDraw drop;
  drop.rate = o.drop_path_rate, drop.seed = o.seed, drop.stream = in.image ? 1 : 0;
  drop.first_sample = in.image ? o.first_image : o.first_clip;
  backbone_forward(ctx, model.backbone, in.input, in.image, &tmask, bs, drop);
  const std::array<int64_t, 3> size4 = bs.shapes[3].size;
  NeckSaved ns;
  neck_head_forward(ctx, model.neck, model.backbone.norm_g, model.backbone.norm_b, c.eps, bs.x3(), bs.x4(), in.image,
                    B, size4, ns, &rows);
  Tensor dlogits;
  const MaskedLoss ml = masked_token_loss(ctx, ns, targets, o.loss_scale, dlogits);
  st.loss = ml.loss, st.masked = ml.count, st.correct = ml.correct;
  std::vector<int64_t> counts(static_cast<size_t>(model.neck.vocab), 0);
  for (int32_t t : targets)
    if (t >= 0) st.majority = std::max(st.majority, ++counts[size_t(t)]);
  st.context = context_hits(*in.cells, *in.ids, B, planes, frames, plane, model.neck.vocab);
  Tensor g3, g4;
  neck_head_backward(ctx, model.neck, model.backbone.norm_g, model.backbone.norm_b, ns, dlogits, g3, g4);
  backbone_backward(ctx, model.backbone, bs, g3, g4);
  return st;
}

}  // namespace

BevtPretrainModel BevtPretrainModel::random(const SwinConfig& config, int64_t vocab, uint64_t seed) {
  BevtPretrainModel m;
  m.backbone = SwinBackbone::random(config, seed);
  m.neck = NeckHeadParams::random(config.embed_dim, vocab, seed + 1);
  return m;
}

std::vector<Param>& BevtPretrainModel::params() {
  if (params_.empty()) {
    params_ = backbone.params();
    for (Param& p : neck.params()) params_.push_back(p);
  }
  return params_;
}

void BevtPretrainModel::to(Context& ctx) {
  if (ctx.device() == device()) return;
  std::vector<train::PV*> all = backbone.storages();
  NeckHeadParams& n = neck;
  all.insert(all.end(), {&n.fpn_w, &n.fpn_b, &n.lm_down_w, &n.lm_down_b, &n.fpn_s_w, &n.fpn_s_b, &n.lm_down_st_w,
                         &n.lm_down_st_b, &n.fpn_t_w, &n.fpn_t_b, &n.lm_head_w, &n.lm_head_b});
  train::pvs_to(ctx, all);
  params_.clear();  // the Params were views of the host storages
}

void BevtPretrainModel::zero_grad(Context& ctx) {
  std::vector<Tensor*> grads;
  for (Param& p : params()) grads.push_back(&p.grad);
  ops::zero_many(ctx, grads);
}

BevtStepStats bevt_pretrain_step(Context& ctx, BevtPretrainModel& model, const DalleEncoder* tokenizer,
                                 const BevtBatch& batch, const BevtStepOptions& o) {
  const SwinConfig& c = model.backbone.config;
  UNMASK_CHECK(c.patch[0] == 2 && c.patch[1] == 4 && c.patch[2] == 4,
               "BEVT pretraining: the patch must be 2 x 4 x 4 (the masks are on the 16-pixel grid and the video "
               "neck doubles the frames), got ",
               c.patch[0], " x ", c.patch[1], " x ", c.patch[2]);
  BevtStepStats out;
  const Device dev = model.device();
  UNMASK_CHECK(ctx.device() == dev, "BEVT: the model is on ", device_name(dev), ", the context on ",
               device_name(ctx.device()), Hint("call model.to(ctx) first (then build the Optimizer)"));
  // Host batches (the loader's) are copied to the model's device; device batches are used as they are.
  auto on_device = [&](const Tensor& t) { return !t.defined() || t.device() == dev ? t : t.to(dev); };
  auto check_frames = [](const Tensor& f, int64_t n, int64_t H, int64_t W, const char* what) {
    UNMASK_CHECK(f.defined() && f.dtype() == DType::f32 && f.ndim() == 4 && f.size(0) == n && f.size(1) == 3 &&
                     f.size(2) * 2 == H && f.size(3) * 2 == W && f.is_contiguous(),
                 "BEVT: the ", what, " tokenizer copies must be f32 [", n, ", 3, ", H / 2, ", ", W / 2, "], got ",
                 f.defined() ? f.describe() : std::string("nothing"));
  };
  if (const int64_t Bv = batch.clips(); Bv > 0) {
    const Tensor& v = batch.videos;
    UNMASK_CHECK(v.dtype() == DType::f32 && v.ndim() == 5 && v.size(1) == 3 && v.size(2) % 2 == 0 &&
                     v.size(3) % 16 == 0 && v.size(4) % 16 == 0,
                 "BEVT: the clips must be f32 [B, 3, T, H, W] with T even and H, W multiples of 16, got ", v.describe());
    const int64_t T = v.size(2), H = v.size(3), W = v.size(4), cells = (H / 16) * (W / 16);
    UNMASK_CHECK(int64_t(batch.video_masks.size()) == Bv * (T / 2) * cells, "BEVT: the video masks hold ",
                 batch.video_masks.size(), " cells, not ", Bv, " x ", T / 2, " x ", H / 16, " x ", W / 16);
    std::vector<bool> need(static_cast<size_t>(Bv * T));
    for (int64_t f = 0; f < Bv * T; ++f) {
      const uint8_t* m = batch.video_masks.data() + (f / T * (T / 2) + f % T / 2) * cells;
      need[size_t(f)] = std::any_of(m, m + cells, [](uint8_t x) { return x != 0; });
    }
    if (o.video_ids) {
      UNMASK_CHECK(int64_t(o.video_ids->size()) == Bv * T * cells, "BEVT: ", o.video_ids->size(),
                   " video target ids given for ", Bv * T, " frames of ", cells, " cells");
      out.video_ids = *o.video_ids;
    } else {
      UNMASK_CHECK(tokenizer, "BEVT: no tokenizer and no video target ids");
      check_frames(batch.video_frames, Bv * T, H, W, "video");
      out.video_ids = tokenize(ctx, *tokenizer, on_device(batch.video_frames), need, cells, out.tokenized_frames);
    }
    out.video = run_stream(ctx, model, {false, on_device(v), &batch.video_masks, &out.video_ids}, o);
  }
  if (const int64_t Bi = batch.image_count(); Bi > 0) {
    const Tensor& im = batch.images;
    UNMASK_CHECK(im.dtype() == DType::f32 && im.ndim() == 4 && im.size(1) == 3 && im.size(2) % 16 == 0 &&
                     im.size(3) % 16 == 0 && im.is_contiguous(),
                 "BEVT: the images must be contiguous f32 [B, 3, H, W] with H, W multiples of 16, got ", im.describe());
    const int64_t H = im.size(2), W = im.size(3), cells = (H / 16) * (W / 16);
    UNMASK_CHECK(int64_t(batch.image_masks.size()) == Bi * cells, "BEVT: the image masks hold ",
                 batch.image_masks.size(), " cells, not ", Bi, " x ", H / 16, " x ", W / 16);
    std::vector<bool> need(static_cast<size_t>(Bi));
    for (int64_t i = 0; i < Bi; ++i) {
      const uint8_t* m = batch.image_masks.data() + i * cells;
      need[size_t(i)] = std::any_of(m, m + cells, [](uint8_t x) { return x != 0; });
    }
    if (o.image_ids) {
      UNMASK_CHECK(int64_t(o.image_ids->size()) == Bi * cells, "BEVT: ", o.image_ids->size(),
                   " image target ids given for ", Bi, " images of ", cells, " cells");
      out.image_ids = *o.image_ids;
    } else {
      UNMASK_CHECK(tokenizer, "BEVT: no tokenizer and no image target ids");
      check_frames(batch.image_frames, Bi, H, W, "image");
      out.image_ids = tokenize(ctx, *tokenizer, on_device(batch.image_frames), need, cells, out.tokenized_frames);
    }
    out.image = run_stream(ctx, model, {true, on_device(im).view({Bi, 3, 1, H, W}), &batch.image_masks, &out.image_ids},
                           o);
  }
  return out;
}

}  // namespace unmask::bevt
