// data/video/masking.h: the token masks of VideoMAE-style pretraining (tube, random, running cell).
//
// Tokens are numbered in VideoMAE's patch order: (t, h, w) row-major over the token grid
// [frames / tubelet, height / patch, width / patch], e.g. 8 x 14 x 14 = 1568 for 16 x 224^2
// with 2 x 16 x 16 tubelets. A mask holds one byte per token, 1 = masked (VideoMAE's
// bool_masked_pos convention), 0 = visible.
//
//   TokenGrid grid{8, 14, 14};
//   auto enc = tube_mask(grid, 0.9, seed, sample);          // 176 of 196 masked in every slice
//   auto dec = running_cell_mask(grid, 0.5, seed, sample);  // VideoMAE v2 decoder mask
//   auto loss = loss_positions(enc, dec);                   // decoder-kept AND encoder-masked
//   Tensor batch = tube_mask_batch(grid, 0.9, seed, first_sample, B);   // u8 [B, 1568]
//
// Every mask is a pure function of (seed, sample index): the random numbers come from a
// SplitMix64 stream keyed by data::derive_key(seed, {kVideoMaskStream, kind, sample}), so the
// same sample gets the same mask whatever the thread, worker count or order of generation.
//
// Counts (what the originals do; `int()` in Python truncates a double product):
//   tube (VideoMAE v1/v2, TubeMaskingGenerator): masked per slice = int(ratio * H * W)
//     -> 0.9 * 196 = 176.4 -> 176 masked, 160 visible of 1568.
//   tube (V-SWIFT, random_masking on GPU): kept per slice = int((1 - ratio) * H * W)
//     -> int(19.6) = 19 kept, 177 masked per slice, 152 visible of 1568.
//   random (MAE-ST, "agnostic"): kept = int(N * (1 - ratio)) over all N tokens.
//   running cell (VideoMAE v2 RunningCellMaskingGenerator, decoder side): a 2 x 2 cell
//     holding int(4 * ratio) masked slots; see running_cell_pattern().
#pragma once
#include <cstdint>
#include <vector>

#include "unmask/tensor.h"

namespace unmask::video {

/// The token grid of one clip: temporal slices (frames / tubelet) x patch rows x patch columns.
struct TokenGrid {
  int64_t frames = 8;   // T' = frames / tubelet
  int64_t height = 14;  // H' = img_size / patch
  int64_t width = 14;   // W' = img_size / patch
  int64_t per_frame() const { return height * width; }
  int64_t tokens() const { return frames * height * width; }
};

/// Which original's rounding decides how many tokens a tube mask hides per slice.
enum class TubeCount : uint8_t {
  videomae,  // masked = int(ratio * H'W')           (VideoMAE v1/v2)
  vswift,    // masked = H'W' - int((1 - ratio) H'W') (V-SWIFT)
};

/// Masked tokens per temporal slice of a tube mask. Throws unless 0 <= ratio < 1.
int64_t tube_masked_per_frame(const TokenGrid& grid, double ratio, TubeCount count = TubeCount::videomae);

/// Tube mask of sample `sample`: one random spatial mask with exactly tube_masked_per_frame()
/// masked positions (a uniform random subset: Fisher-Yates), repeated over all T' slices.
/// Returns u8 [tokens], 1 = masked.
std::vector<uint8_t> tube_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample,
                               TubeCount count = TubeCount::videomae);

/// MAE-ST random masking: a uniform random subset of all T'H'W' tokens, keeping exactly
/// int(tokens * (1 - ratio)). Returns u8 [tokens], 1 = masked.
std::vector<uint8_t> random_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample);

/// Masked slots per 2 x 2 running cell: int(4 * ratio); throws unless it lies in 1..3
/// (VideoMAE v2 asserts 0 < num_masks_per_cell < 4).
int64_t running_cell_masked_per_cell(double ratio);

/// VideoMAE v2's running-cell pattern `pattern` in [0, 4) (the generator's ptr_pos):
/// the cell queue is q = [1]*m + [0]*(4-m) (m = masked per cell); at temporal slice t the
/// cell's pointer is p = pattern + t + 1 (the generator advances it before reading), cell slot
/// s = 2 r + c (r, c in {0, 1}) holds q[(s + p) mod 4], and token (t, h, w) takes the slot
/// (h mod 2, w mod 2) (np.tile of the 2 x 2 cell over the grid). H' and W' must be even.
/// Returns u8 [tokens], 1 = not decoded.
std::vector<uint8_t> running_cell_pattern(const TokenGrid& grid, double ratio, int64_t pattern);

/// VideoMAE v2's decoder mask of sample `sample`: one of the four patterns, chosen uniformly.
std::vector<uint8_t> running_cell_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample);

/// The decoder mask VideoMAE v1 implies (and v2 uses without decoder masking): decode exactly
/// the encoder-masked tokens, i.e. 1 - encoder_mask.
std::vector<uint8_t> complement_mask(const std::vector<uint8_t>& encoder_mask);

/// Where the loss is taken, u8 [tokens]: decoder-kept (decoder_mask == 0) AND encoder-masked
/// (encoder_mask == 1) (VideoMAE v2 engine: cal_loss_mask = bool_masked_pos[~decode_masked_pos]).
std::vector<uint8_t> loss_positions(const std::vector<uint8_t>& encoder_mask, const std::vector<uint8_t>& decoder_mask);

/// Batched forms: u8 [batch, tokens], row b is the mask of sample first_sample + b.
Tensor tube_mask_batch(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t first_sample, int64_t batch,
                       TubeCount count = TubeCount::videomae);
Tensor running_cell_mask_batch(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t first_sample,
                               int64_t batch);

}  // namespace unmask::video
