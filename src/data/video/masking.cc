// data/video/masking.cc: tube, random and running-cell token masks (see masking.h for the contract).
#include "data/video/masking.h"

#include <cmath>
#include <cstring>

#include "data/rng.h"

namespace unmask::video {
namespace {

// Stream names under one seed: keys are derive_key(seed, {kVideoMaskStream, kind, sample}), so
// they never coincide with the text pipeline's streams (data/rng.h uses small ids 1..5).
constexpr uint64_t kVideoMaskStream = 0x766d61736bull;  // "vmask"
enum MaskKind : uint64_t { kTube = 1, kRandom = 2, kRunningCell = 3 };

void check_grid(const TokenGrid& g, const char* who) {
  UNMASK_CHECK(g.frames >= 1 && g.height >= 1 && g.width >= 1, who, ": token grid must be positive, got ", g.frames,
               " x ", g.height, " x ", g.width);
}

void check_ratio(double ratio, const char* who) {
  UNMASK_CHECK(std::isfinite(ratio) && ratio >= 0.0 && ratio < 1.0, who, ": mask ratio must lie in [0, 1), got ",
               ratio);
}

// A uniform random subset of `masked` of `n` positions: [0]*(n-masked) + [1]*masked, shuffled
// (the same construction as VideoMAE's np.hstack + np.random.shuffle, with our own stream).
void random_subset(uint8_t* out, int64_t n, int64_t masked, uint64_t key) {
  std::memset(out, 0, size_t(n - masked));
  std::memset(out + (n - masked), 1, size_t(masked));
  data::Rng rng(key);
  rng.shuffle(out, n);
}

void check_same_size(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, const char* who) {
  UNMASK_CHECK(a.size() == b.size(), who, ": encoder mask has ", a.size(), " tokens but decoder mask has ", b.size());
}

}  // namespace

int64_t tube_masked_per_frame(const TokenGrid& grid, double ratio, TubeCount count) {
  check_grid(grid, "tube_mask");
  check_ratio(ratio, "tube_mask");
  const int64_t n = grid.per_frame();
  // Python's int() of the double product: truncation toward zero (the product is >= 0).
  const int64_t masked =
      count == TubeCount::vswift ? n - int64_t((1.0 - ratio) * double(n)) : int64_t(ratio * double(n));
  if (masked >= n)
    throw Error("tube_mask: ratio ", ratio, " masks all ", n, " patches of a ", grid.height, "x", grid.width,
                " slice, leaving the encoder no visible token", Hint("lower the mask ratio"));
  return masked;
}

std::vector<uint8_t> tube_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample, TubeCount count) {
  const int64_t masked = tube_masked_per_frame(grid, ratio, count);
  const int64_t n = grid.per_frame();
  std::vector<uint8_t> mask(size_t(grid.tokens()));
  random_subset(mask.data(), n, masked, data::derive_key(seed, {kVideoMaskStream, kTube, sample}));
  // Repeat the spatial mask over every temporal slice (a "tube" through time).
  for (int64_t t = 1; t < grid.frames; ++t) std::memcpy(mask.data() + t * n, mask.data(), size_t(n));
  return mask;
}

std::vector<uint8_t> random_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample) {
  check_grid(grid, "random_mask");
  check_ratio(ratio, "random_mask");
  const int64_t n = grid.tokens();
  const int64_t kept = int64_t(double(n) * (1.0 - ratio));  // MAE-ST: len_keep = int(L * (1 - ratio))
  if (kept < 1) throw Error("random_mask: ratio ", ratio, " keeps no token of ", n, Hint("lower the mask ratio"));
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  random_subset(mask.data(), n, n - kept, data::derive_key(seed, {kVideoMaskStream, kRandom, sample}));
  return mask;
}

int64_t running_cell_masked_per_cell(double ratio) {
  UNMASK_CHECK(std::isfinite(ratio), "running_cell_mask: ratio must be finite, got ", ratio);
  const int64_t m = int64_t(4.0 * ratio);
  if (m < 1 || m > 3)
    throw Error("running_cell_mask: decoder mask ratio ", ratio, " gives ", m,
                " masked slots per 2x2 cell; VideoMAE v2 needs 1..3",
                Hint("use a ratio in [0.25, 1) such as 0.5, or no decoder masking"));
  return m;
}

std::vector<uint8_t> running_cell_pattern(const TokenGrid& grid, double ratio, int64_t pattern) {
  check_grid(grid, "running_cell_mask");
  const int64_t m = running_cell_masked_per_cell(ratio);
  UNMASK_CHECK(pattern >= 0 && pattern < 4, "running_cell_mask: pattern must lie in [0, 4), got ", pattern);
  if (grid.height % 2 != 0 || grid.width % 2 != 0)
    throw Error("running_cell_mask: the token grid ", grid.height, " x ", grid.width,
                " must have even sides (the 2x2 cell is tiled over it)",
                Hint("choose img_size / patch even, e.g. 224 / 16 = 14"));
  std::vector<uint8_t> mask(size_t(grid.tokens()));
  for (int64_t t = 0; t < grid.frames; ++t) {
    const int64_t ptr = pattern + t + 1;
    uint8_t cell[4];
    for (int64_t s = 0; s < 4; ++s) cell[s] = ((s + ptr) % 4) < m ? 1 : 0;  // queue = [1]*m + [0]*(4-m)
    uint8_t* slice = mask.data() + t * grid.per_frame();
    for (int64_t h = 0; h < grid.height; ++h)
      for (int64_t w = 0; w < grid.width; ++w) slice[h * grid.width + w] = cell[(h % 2) * 2 + (w % 2)];
  }
  return mask;
}

std::vector<uint8_t> running_cell_mask(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t sample) {
  data::Rng rng(data::derive_key(seed, {kVideoMaskStream, kRunningCell, sample}));
  return running_cell_pattern(grid, ratio, int64_t(rng.below(4)));
}

std::vector<uint8_t> complement_mask(const std::vector<uint8_t>& encoder_mask) {
  std::vector<uint8_t> out(encoder_mask.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = encoder_mask[i] ? 0 : 1;
  return out;
}

std::vector<uint8_t> loss_positions(const std::vector<uint8_t>& encoder_mask,
                                    const std::vector<uint8_t>& decoder_mask) {
  check_same_size(encoder_mask, decoder_mask, "loss_positions");
  std::vector<uint8_t> out(encoder_mask.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = (encoder_mask[i] && !decoder_mask[i]) ? 1 : 0;
  return out;
}

namespace {
template <typename MakeRow>
Tensor stack_rows(const TokenGrid& grid, int64_t batch, const char* who, MakeRow make_row) {
  check_grid(grid, who);
  UNMASK_CHECK(batch >= 1, who, ": batch must be >= 1, got ", batch);
  const int64_t n = grid.tokens();
  Tensor out = Tensor::empty({batch, n}, DType::u8);
  uint8_t* p = out.data<uint8_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<uint8_t> row = make_row(b);
    std::memcpy(p + b * n, row.data(), size_t(n));
  }
  return out;
}
}  // namespace

Tensor tube_mask_batch(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t first_sample, int64_t batch,
                       TubeCount count) {
  return stack_rows(grid, batch, "tube_mask_batch",
                    [&](int64_t b) { return tube_mask(grid, ratio, seed, first_sample + uint64_t(b), count); });
}

Tensor running_cell_mask_batch(const TokenGrid& grid, double ratio, uint64_t seed, uint64_t first_sample,
                               int64_t batch) {
  return stack_rows(grid, batch, "running_cell_mask_batch",
                    [&](int64_t b) { return running_cell_mask(grid, ratio, seed, first_sample + uint64_t(b)); });
}

}  // namespace unmask::video
