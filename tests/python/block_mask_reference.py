"""BEiT's block-wise MaskingGenerator in Python, the reference distribution of
tests/test_block_masks.cc (BlockMasks.MatchBeitsGeneratorInDistribution).

Usage: /usr/bin/python3 block_mask_reference.py OUT_DIR DRAWS

Written from BEiT's masking_generator.py algorithm as BEVT configures it (14 x 14 grid, 98
cells, min_num_patches 16, max_num_patches None -> 98, min_aspect 0.3), seeded Python random.
Writes counts.npy (int64 [DRAWS]: masked cells per mask) and freq.npy (float64 [14, 14]: how
often each cell is masked).
"""
import math
import os
import random
import sys

import numpy as np


def generate(height=14, width=14, count=98, min_patches=16, min_aspect=0.3):
    log_aspect = (math.log(min_aspect), math.log(1 / min_aspect))
    mask = np.zeros((height, width), dtype=np.int64)

    def one_round(max_mask):
        delta = 0
        for _ in range(10):
            target_area = random.uniform(min_patches, max_mask)
            aspect_ratio = math.exp(random.uniform(*log_aspect))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < width and h < height:
                top = random.randint(0, height - h)
                left = random.randint(0, width - w)
                num_masked = mask[top: top + h, left: left + w].sum()
                if 0 < h * w - num_masked <= max_mask:
                    for i in range(top, top + h):
                        for j in range(left, left + w):
                            if mask[i, j] == 0:
                                mask[i, j] = 1
                                delta += 1
                if delta > 0:
                    break
        return delta

    masked = 0
    while masked < count:
        delta = one_round(min(count - masked, count))
        if delta == 0:
            break
        masked += delta
    return mask


def main(out_dir, draws):
    random.seed(20261128)
    counts, freq = [], np.zeros((14, 14))
    for _ in range(draws):
        m = generate()
        counts.append(int(m.sum()))
        freq += m
    np.save(os.path.join(out_dir, "counts.npy"), np.array(counts, dtype=np.int64))
    np.save(os.path.join(out_dir, "freq.npy"), freq / draws)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
