// nn/window_geometry.cc: see window_geometry.h.
#include "nn/window_geometry.h"

#include <algorithm>

#include "ops/ops.h"
#include "unmask/error.h"

namespace unmask::train {

WindowGeometry clipped_window(std::array<int64_t, 3> size, std::array<int64_t, 3> window, std::array<int64_t, 3> shift) {
  WindowGeometry g;
  g.size = size;
  for (int i = 0; i < 3; ++i) {
    UNMASK_CHECK(size[i] >= 1 && window[i] >= 1 && shift[i] >= 0 && shift[i] < window[i],
                 "window geometry: size ", size[i], ", window ", window[i], ", shift ", shift[i], " in dimension ", i,
                 ": need size, window >= 1 and 0 <= shift < window");
    g.window[i] = size[i] <= window[i] ? size[i] : window[i];
    g.shift[i] = size[i] <= window[i] ? 0 : shift[i];
    UNMASK_CHECK(size[i] % g.window[i] == 0, "window geometry: a size of ", size[i], " tokens is not a multiple of the ",
                 g.window[i], "-token window in dimension ", i, Hint("pad the volume to whole windows"));
  }
  return g;
}

std::vector<int32_t> window_partition_rows(int64_t batch, const WindowGeometry& g) {
  const auto [D, H, W] = g.size;
  const auto [wd, wh, ww] = g.window;
  const int64_t per_sample = D * H * W;
  UNMASK_CHECK(batch >= 0 && batch * per_sample < (int64_t(1) << 31), "window partition: ", batch, " x ", per_sample,
               " tokens exceed i32 rows");
  std::vector<int32_t> rows;
  rows.reserve(size_t(batch * per_sample));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t bd = 0; bd < D / wd; ++bd)
      for (int64_t bh = 0; bh < H / wh; ++bh)
        for (int64_t bw = 0; bw < W / ww; ++bw)
          for (int64_t d = 0; d < wd; ++d)
            for (int64_t h = 0; h < wh; ++h)
              for (int64_t w = 0; w < ww; ++w) {
                // the rolled volume's (d', h', w') holds the original's (d' + s) mod size
                const int64_t sd = (bd * wd + d + g.shift[0]) % D, sh = (bh * wh + h + g.shift[1]) % H,
                              sw = (bw * ww + w + g.shift[2]) % W;
                rows.push_back(int32_t(b * per_sample + (sd * H + sh) * W + sw));
              }
  return rows;
}

std::vector<int32_t> inverse_rows(const std::vector<int32_t>& rows) {
  std::vector<int32_t> inv(rows.size(), -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    UNMASK_CHECK(rows[r] >= 0 && size_t(rows[r]) < rows.size() && inv[size_t(rows[r])] < 0,
                 "inverse_rows: the rows are not a permutation (row ", r, " holds ", rows[r], ")");
    inv[size_t(rows[r])] = int32_t(r);
  }
  return inv;
}

Tensor row_ids(const std::vector<int32_t>& rows, Device device) {
  Tensor t = Tensor::empty({int64_t(rows.size())}, DType::i32);
  std::copy(rows.begin(), rows.end(), t.data<int32_t>());
  return device == Device::cpu ? t : t.to(device);
}

std::vector<int32_t> relative_position_index(std::array<int64_t, 3> tw, int64_t n) {
  const int64_t N = tw[0] * tw[1] * tw[2];
  UNMASK_CHECK(n >= 1 && n <= N, "relative position index: ", n, " tokens of a ", N, "-token window");
  std::vector<int32_t> index(size_t(n * n));
  auto coord = [&](int64_t t, int i) {
    const int64_t d = t / (tw[1] * tw[2]), h = (t / tw[2]) % tw[1], w = t % tw[2];
    return i == 0 ? d : i == 1 ? h : w;
  };
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b) {
      const int64_t dd = coord(a, 0) - coord(b, 0) + tw[0] - 1, dh = coord(a, 1) - coord(b, 1) + tw[1] - 1,
                    dw = coord(a, 2) - coord(b, 2) + tw[2] - 1;
      index[size_t(a * n + b)] = int32_t((dd * (2 * tw[1] - 1) + dh) * (2 * tw[2] - 1) + dw);
    }
  return index;
}

Tensor shift_region_masks(const WindowGeometry& g) {
  const auto [D, H, W] = g.size;
  // Region label of each token of the rolled volume: per dimension, [0, size - window) -> 0,
  // [size - window, size - shift) -> 1, [size - shift, size) -> 2 (Video Swin's three slices,
  // later ones overwriting earlier ones where they meet, as its loop does).
  auto part = [](int64_t x, int64_t size, int64_t window, int64_t shift) {
    int64_t label = 0;
    if (x >= size - window) label = 1;
    if (x >= size - shift && shift > 0) label = 2;
    if (shift == 0 && x >= 0) label = 2;  // slice(-0, None) covers the whole dimension
    return label;
  };
  const int64_t N = g.tokens(), nW = g.windows();
  const std::vector<int32_t> rows = window_partition_rows(1, WindowGeometry{g.size, g.window, {0, 0, 0}});
  std::vector<int64_t> label(size_t(nW * N));
  for (size_t r = 0; r < rows.size(); ++r) {  // rows of the unrolled partition: the rolled volume's positions
    const int64_t t = rows[r], d = t / (H * W), h = (t / W) % H, w = t % W;
    label[r] = (part(d, D, g.window[0], g.shift[0]) * 3 + part(h, H, g.window[1], g.shift[1])) * 3 +
               part(w, W, g.window[2], g.shift[2]);
  }
  Tensor m = Tensor::empty({nW, N, N}, DType::f32);
  float* p = m.data<float>();
  for (int64_t w = 0; w < nW; ++w)
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < N; ++j)
        p[(w * N + i) * N + j] = label[size_t(w * N + i)] == label[size_t(w * N + j)] ? 0.0f : -100.0f;
  return m;
}

Tensor gather_relative_bias(Context& ctx, const Tensor& table, const Tensor& index, int64_t n) {
  UNMASK_CHECK(table.dtype() == DType::f32 && table.ndim() == 2 && table.is_contiguous(),
               "relative position bias: the table must be a contiguous f32 [T, NH] tensor, got ", table.describe());
  UNMASK_CHECK(index.ndim() == 1 && index.numel() == n * n, "relative position bias: ", index.describe(),
               " indices for ", n, " x ", n);
  const int64_t NH = table.size(1);
  // [n n, NH] rows gathered by the index (an id outside the table throws, naming it), then [NH, n n].
  Tensor rows = Tensor::empty({n * n, NH}, DType::f32, table.device());
  ops::embedding(ctx, table, index, rows);
  Tensor bias = Tensor::empty({NH, n * n}, DType::f32, table.device());
  ops::transpose(ctx, rows, bias);
  return bias.view({NH, n, n});
}

void scatter_relative_bias_grad(Context& ctx, const Tensor& dbias, const Tensor& index, Tensor& table_grad) {
  UNMASK_CHECK(table_grad.dtype() == DType::f32 && table_grad.ndim() == 2 && table_grad.is_contiguous(),
               "relative position bias gradient: the table gradient must be a contiguous f32 [T, NH] tensor, got ",
               table_grad.describe());
  const int64_t NH = table_grad.size(1), nn2 = index.numel();
  UNMASK_CHECK(dbias.dtype() == DType::f32 && dbias.is_contiguous() && dbias.numel() == NH * nn2,
               "relative position bias gradient: dbias must be contiguous f32 [", NH, ", n, n] for ", nn2,
               " indices, got ", dbias.describe());
  Tensor rows = Tensor::empty({nn2, NH}, DType::f32, dbias.device());
  ops::transpose(ctx, dbias.view({NH, nn2}), rows);
  // embedding_backward adds the rows of one table entry in index order: the same sums on every run
  ops::embedding_backward(ctx, index, rows, table_grad);
}

}  // namespace unmask::train
