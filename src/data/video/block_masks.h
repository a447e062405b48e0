// data/video/block_masks.h: BEiT's block-wise masks, as BEVT draws them for its image stream
// (one 14 x 14 mask per image) and its video stream (the same kind of mask as a tube over a
// random run of temporal slices). 1 = masked, one byte per cell, cells row-major.
//
//   BlockMaskOptions o;                                    // 98 of 14 x 14, blocks >= 16, aspect 0.3..3.3
//   std::vector<uint8_t> m = block_mask(o, seed, sample);  // usually exactly 98 cells
//   std::vector<uint8_t> v = bevt_tube_mask(o, 8, seed, sample);   // [8, 14, 14]
//
// The generator (BEiT's MaskingGenerator): while fewer than `count` cells are masked, one round
// of up to 10 attempts: area ~ U(min_cells, left) (U(left, min_cells) once fewer than min_cells
// are left, as Python's random.uniform swaps its bounds), aspect = exp(U(log a, -log a)),
// h = round(sqrt(area aspect)), w = round(sqrt(area / aspect)) (round half to even), needing
// h < H and w < W; top ~ U{0..H-h}, left ~ U{0..W-w}; the block is taken when it adds between
// 1 and `left` new cells, which ends the round; a round that adds nothing ends the mask, so a
// mask can hold fewer than `count` cells. Every mask is a pure function of (seed, sample), as in
// data/video/masking.h.
#pragma once
#include <cstdint>
#include <vector>

namespace unmask::video {

struct BlockMaskOptions {
  int64_t height = 14, width = 14;  // the mask grid (BEVT: 224 / 16)
  int64_t count = 98;               // cells to mask (BEVT: 50%)
  int64_t min_cells = 16;           // smallest block area drawn
  double min_aspect = 0.3;          // aspect ratios in [min_aspect, 1 / min_aspect]
};

/// One block-wise mask of sample `sample`: u8 [height * width].
std::vector<uint8_t> block_mask(const BlockMaskOptions& o, uint64_t seed, uint64_t sample);

/// BEVT's video mask (MaskedPositionGenerate): a block mask repeated over `slices` temporal
/// slices from a start ~ U{0..slices-1} for a length ~ U{int(0.5 slices)..slices}, wrapping past
/// the last slice to the first; the other slices unmasked. u8 [slices * height * width].
std::vector<uint8_t> bevt_tube_mask(const BlockMaskOptions& o, int64_t slices, uint64_t seed, uint64_t sample);

}  // namespace unmask::video
