// models/bevt/flops.cc: see flops.h.
#include "models/bevt/flops.h"

#include <algorithm>

namespace unmask::bevt {

namespace {

struct NeckSplit {
  double fpn = 0, after = 0;  // before the concatenation (every position) and after it (per position)
};

NeckSplit neck_flops(const SwinConfig& c, bool image, int64_t rows3) {
  const double W = double(c.dim(3)), R3 = double(rows3), R4 = R3 / 4;
  NeckSplit n;
  n.fpn = 2 * R4 * W * W * 4;              // fpn.0 / fpn_s.0: k = s = 2 x 2
  n.after = 2 * R3 * (W + W / 2) * W;      // lm_down
  if (!image) n.after += 2 * R3 * W * W * 2;  // fpn_t.0: k = s = 2 frames
  return n;
}

}  // namespace

BevtStreamFlops bevt_stream_flops(const SwinConfig& c, int64_t vocab, const DalleEncoderConfig& t, bool image,
                                  int64_t frames, int64_t side) {
  BevtStreamFlops f;
  const int64_t tube = image ? 1 : c.patch[0];
  std::array<int64_t, 3> size{frames / tube, side / c.patch[1], side / c.patch[2]};
  const double K = 3.0 * double(tube * c.patch[1] * c.patch[2]);
  f.backbone = 2.0 * double(size[0] * size[1] * size[2]) * double(c.embed_dim) * K;
  int64_t rows3 = 0;
  for (int i = 0; i < 4; ++i) {
    const double N = double(size[0] * size[1] * size[2]), C = double(c.dim(i));
    // the window as the stage runs it: the video clips it to the volume; images keep 7 x 7
    const int64_t n = image ? c.window[1] * c.window[2]
                            : std::min(size[0], c.window[0]) * std::min(size[1], c.window[1]) *
                                  std::min(size[2], c.window[2]);
    f.backbone += double(c.depths[size_t(i)]) * (24 * N * C * C + 4 * N * double(n) * C);
    if (i == 2) rows3 = size[0] * size[1] * size[2];
    if (i < 3) {
      f.backbone += 16 * (N / 4) * C * C;
      size = {size[0], size[1] / 2, size[2] / 2};
    }
  }
  const NeckSplit n = neck_flops(c, image, rows3);
  f.neck = n.fpn + n.after;
  const double out_rows = double(rows3) * (image ? 1 : 2);
  f.head = 2 * out_rows * double(c.dim(3)) * double(vocab);
  // The tokenizer on one frame of side / 2.
  int64_t hw = side / 2;
  auto conv = [&](int64_t cin, int64_t cout, int64_t k) { return 2.0 * double(hw * hw) * double(cin * cout * k * k); };
  f.tokenizer = conv(t.channels, t.hidden, 7);
  int64_t width = t.hidden;
  for (int64_t g = 0; g < t.groups; ++g) {
    const int64_t out = t.hidden << g;
    for (int64_t b = 0; b < t.blocks_per_group; ++b) {
      const int64_t in = b == 0 ? width : out, mid = out / 4;
      if (in != out) f.tokenizer += conv(in, out, 1);
      f.tokenizer += conv(in, mid, 3) + 2 * conv(mid, mid, 3) + conv(mid, out, 1);
    }
    width = out;
    if (g + 1 < t.groups) hw /= 2;
  }
  f.tokenizer += conv(width, t.vocab, 1);
  return f;
}

double bevt_iteration_flops(const SwinConfig& c, int64_t vocab, const DalleEncoderConfig& t, int64_t clips,
                            int64_t frames, int64_t images, int64_t side) {
  const BevtStreamFlops v = bevt_stream_flops(c, vocab, t, false, frames, side);
  const BevtStreamFlops i = bevt_stream_flops(c, vocab, t, true, 1, side);
  return 3 * (double(clips) * (v.backbone + v.neck + v.head) + double(images) * (i.backbone + i.neck + i.head)) +
         double(clips * frames + images) * v.tokenizer;
}

double bevt_step_flops_run(const SwinConfig& c, int64_t vocab, const DalleEncoderConfig& t, int64_t clips,
                           int64_t frames, int64_t images, int64_t side, double mv, double mi,
                           int64_t tokenized_frames) {
  const BevtStreamFlops v = bevt_stream_flops(c, vocab, t, false, frames, side);
  const BevtStreamFlops i = bevt_stream_flops(c, vocab, t, true, 1, side);
  const int64_t rows3v = (frames / c.patch[0]) * (side / 16) * (side / 16), rows3i = (side / 16) * (side / 16);
  const NeckSplit nv = neck_flops(c, false, rows3v), ni = neck_flops(c, true, rows3i);
  const double video = v.backbone + nv.fpn + mv * (nv.after + v.head);
  const double image = i.backbone + ni.fpn + mi * (ni.after + i.head);
  return 3 * (double(clips) * video + double(images) * image) + double(tokenized_frames) * v.tokenizer;
}

}  // namespace unmask::bevt
