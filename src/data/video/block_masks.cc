// data/video/block_masks.cc: see block_masks.h.
#include "data/video/block_masks.h"

#include <algorithm>
#include <cmath>

#include "data/rng.h"
#include "unmask/error.h"

namespace unmask::video {

namespace {

constexpr uint64_t kBlockMaskStream = 0x626d61736bull;  // "bmask"
enum BlockMaskKind : uint64_t { kBlock = 1, kTubeRun = 2 };

// Python's random.uniform(a, b): a + (b - a) * random(), whichever bound is larger.
double uniform(data::Rng& rng, double a, double b) { return a + (b - a) * rng.uniform(); }
// random.randint(lo, hi): inclusive.
int64_t randint(data::Rng& rng, int64_t lo, int64_t hi) { return lo + int64_t(rng.below(uint64_t(hi - lo + 1))); }

void check(const BlockMaskOptions& o) {
  UNMASK_CHECK(o.height >= 2 && o.width >= 2 && o.count >= 1 && o.count <= o.height * o.width && o.min_cells >= 1 &&
                   o.min_aspect > 0 && o.min_aspect <= 1,
               "block mask: a ", o.height, " x ", o.width, " grid with ", o.count, " cells, blocks of >= ", o.min_cells,
               " and aspect >= ", o.min_aspect, Hint("need a grid of at least 2 x 2, 1 <= count <= cells, min_cells "
                                                     ">= 1, 0 < min_aspect <= 1"));
}

// One round of up to 10 attempts; returns the cells it masked.
int64_t one_round(std::vector<uint8_t>& mask, const BlockMaskOptions& o, int64_t left, data::Rng& rng) {
  const double log_lo = std::log(o.min_aspect), log_hi = -std::log(o.min_aspect);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double area = uniform(rng, double(o.min_cells), double(left));
    const double aspect = std::exp(uniform(rng, log_lo, log_hi));
    const int64_t h = int64_t(std::nearbyint(std::sqrt(area * aspect)));
    const int64_t w = int64_t(std::nearbyint(std::sqrt(area / aspect)));
    if (!(w < o.width && h < o.height)) continue;
    const int64_t top = randint(rng, 0, o.height - h), left_col = randint(rng, 0, o.width - w);
    int64_t already = 0;
    for (int64_t i = top; i < top + h; ++i)
      for (int64_t j = left_col; j < left_col + w; ++j) already += mask[size_t(i * o.width + j)];
    const int64_t fresh = h * w - already;
    if (fresh > 0 && fresh <= left) {
      for (int64_t i = top; i < top + h; ++i)
        for (int64_t j = left_col; j < left_col + w; ++j) mask[size_t(i * o.width + j)] = 1;
      return fresh;
    }
  }
  return 0;
}

std::vector<uint8_t> block_mask_from(const BlockMaskOptions& o, data::Rng& rng) {
  check(o);
  std::vector<uint8_t> mask(size_t(o.height * o.width), 0);
  int64_t masked = 0;
  while (masked < o.count) {
    const int64_t added = one_round(mask, o, o.count - masked, rng);
    if (added == 0) break;
    masked += added;
  }
  return mask;
}

}  // namespace

std::vector<uint8_t> block_mask(const BlockMaskOptions& o, uint64_t seed, uint64_t sample) {
  data::Rng rng(data::derive_key(seed, {kBlockMaskStream, kBlock, sample}));
  return block_mask_from(o, rng);
}

std::vector<uint8_t> bevt_tube_mask(const BlockMaskOptions& o, int64_t slices, uint64_t seed, uint64_t sample) {
  UNMASK_CHECK(slices >= 1, "BEVT tube mask: ", slices, " temporal slices");
  data::Rng rng(data::derive_key(seed, {kBlockMaskStream, kTubeRun, sample}));
  const std::vector<uint8_t> cells = block_mask_from(o, rng);
  const int64_t start = randint(rng, 0, slices - 1);
  const int64_t length = randint(rng, int64_t(0.5 * double(slices)), slices);
  const int64_t per = o.height * o.width;
  std::vector<uint8_t> mask(size_t(slices * per), 0);
  for (int64_t k = 0; k < length; ++k) {
    const int64_t t = (start + k) % slices;
    std::copy(cells.begin(), cells.end(), mask.begin() + t * per);
  }
  return mask;
}

}  // namespace unmask::video
