// nn/window_geometry.h: the index maps of shifted-window attention (Swin, Video Swin, BEVT):
// which volume token each window row holds after the cyclic shift, the relative-position index
// into a block's bias table, and the -100 masks of the shifted regions. Host-side integers,
// computed once per stage shape; the rows then move with ops::embedding (a gather) and the
// attention is ops::window_attention.
//
// A volume is [B, D, H, W] tokens numbered b D H W + (d H + h) W + w (a video's T/2 x H/4 x W/4
// patches; an image is D = 1). Windows of wd x wh x ww tokens, ordered (b, wd-block, wh-block,
// ww-block), tokens inside ordered (d, h, w) row-major; a shift (sd, sh, sw) rolls the volume by
// minus the shift first (torch.roll(x, -shift)), as Video Swin does.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::train {

struct WindowGeometry {
  std::array<int64_t, 3> size{};    // D, H, W of the token volume
  std::array<int64_t, 3> window{};  // wd, wh, ww
  std::array<int64_t, 3> shift{};   // sd, sh, sw (0 = no shift in that dimension)
  int64_t tokens() const { return window[0] * window[1] * window[2]; }  // N
  int64_t windows() const {  // windows of one sample
    return (size[0] / window[0]) * (size[1] / window[1]) * (size[2] / window[2]);
  }
  bool shifted() const { return shift[0] || shift[1] || shift[2]; }
};

/// Video Swin's get_window_size: in each dimension whose size is at most the window, the
/// window becomes the size and the shift 0. Throws unless every size is a multiple of its window
/// (the callers pad first; BEVT's sizes never need it).
WindowGeometry clipped_window(std::array<int64_t, 3> size, std::array<int64_t, 3> window, std::array<int64_t, 3> shift);

/// Row r of the windowed layout (B samples) holds volume token rows[r].
std::vector<int32_t> window_partition_rows(int64_t batch, const WindowGeometry& g);
/// The inverse permutation: inverse[rows[r]] = r (back from windows to the volume).
std::vector<int32_t> inverse_rows(const std::vector<int32_t>& rows);
/// rows as an i32 tensor on `device`, the ids of ops::embedding (a row gather).
Tensor row_ids(const std::vector<int32_t>& rows, Device device);

/// The relative-position index of a `table_window` (wd x wh x ww) window's tokens into its bias
/// table of (2 wd - 1)(2 wh - 1)(2 ww - 1) rows, truncated to the first n tokens of each
/// dimension ([n, n] prefix, n <= the window's tokens): Video Swin's index[:N, :N]. BEVT's image
/// stream takes n = 49 of the 8 x 7 x 7 window, i.e. the d = 0 plane.
std::vector<int32_t> relative_position_index(std::array<int64_t, 3> table_window, int64_t n);

/// The shifted-window masks of one sample's windows: f32 [windows, N, N], 0 between tokens of
/// the same region of the rolled volume (the 27 regions cut at -window and -shift in each
/// dimension), -100 across. Made for any shift, as BEVT's image stream applies it in every block.
Tensor shift_region_masks(const WindowGeometry& g);

/// A block's relative-position bias: bias[h, i, j] = table[index[i n + j], h], table f32 [T, NH]
/// -> f32 [NH, n, n] on the table's device (a row gather and a transpose). index: i32 [n n] on
/// that device (row_ids of relative_position_index).
Tensor gather_relative_bias(Context& ctx, const Tensor& table, const Tensor& index, int64_t n);
/// Its backward: table_grad[index[i n + j], h] += dbias[h, i, j] (f32 [NH, n, n] -> [T, NH]),
/// deterministic (ops::embedding_backward).
void scatter_relative_bias_grad(Context& ctx, const Tensor& dbias, const Tensor& index, Tensor& table_grad);

}  // namespace unmask::train
