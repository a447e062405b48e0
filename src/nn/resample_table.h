// nn/resample_table.h: a learned table over a (t, h, w) token grid resampled to another grid,
// as PyTorch's F.interpolate does it when a checkpoint meets a model of another resolution or
// window (VideoMAE's positional table; a 2-D Swin's relative-position bias table).
#pragma once
#include <cstdint>

#include "unmask/tensor.h"

namespace unmask::train {

/// Resamples a learned table over a token grid (a positional table, a relative-position
/// table viewed as one image per head): [1, T*H*W, D] (token order (t, h, w)) from grid `from`
/// to grid `to`: bicubic over (h, w) as VideoMAE's fine-tune loader does (F.interpolate
/// mode='bicubic', align_corners=False, A = -0.75, border-clamped taps), then linear over t
/// (mode='linear', align_corners=False), computed in double; f32 [1, T'*H'*W', D]. Equal grids
/// give the table back unchanged. For the fixed sinusoid table regenerate it instead.
Tensor resample_table(const Tensor& table, int64_t from_frames, int64_t from_height, int64_t from_width,
                      int64_t to_frames, int64_t to_height, int64_t to_width);

}  // namespace unmask::train
