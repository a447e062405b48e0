#!/usr/bin/env python3
"""CPU check of the persistent flash forward's schedule (src/cuda/flash/fwd_persistent_kernel.cuh).

Emulates each CTA's walk step by step, with the kernel's control flow (next_fwd_tile, the
prefetch of key block j + 1 or of the next tile's Q and block 0, cp.async groups, the wait, the
buffer flips), tracking what every shared-memory buffer holds. Asserts, for packed batches with
empty and short sequences, padded ones, both CTA heights and grids from one CTA to more than the
tiles:
  * every tile with query rows inside its sequence is computed exactly once, all its key blocks
    in order, and tiles past a sequence's end are never touched;
  * the K/V buffer a step reads holds that step's (tile, block), the Q buffer read at a tile's
    first block holds that tile's Q, and the cp.async group that filled them has completed by
    the step's wait (wait<1> after a prefetch, wait<0> otherwise);
  * a prefetch never writes the K/V buffer or the Q buffer the same step reads.
Pure Python:  python3 tests/cuda/check_fwd_persistent.py
"""
import random
import sys

BN = 64  # keys a step (the persistent instances: 16 rows a warp, 64 keys)


def seq_bounds(lens, padded_t, b):
    if padded_t:
        return b * padded_t, padded_t
    return sum(lens[:b]), lens[b]


def next_tile(lens, padded_t, nh, m_blocks, bm, t, stride):
    """next_fwd_tile: the first tile >= t in steps of stride with rows inside its sequence."""
    n_tiles = m_blocks * nh * len(lens)
    while t < n_tiles:
        m, h, b = t % m_blocks, (t // m_blocks) % nh, t // (m_blocks * nh)
        start, seqlen = seq_bounds(lens, padded_t, b)
        if m * bm < seqlen:
            return t, (m, h, b, seqlen)
        t += stride
    return n_tiles, None


def walk(lens, padded_t, nh, bm, grid, max_seqlen):
    m_blocks = (max_seqlen + bm - 1) // bm
    n_tiles = m_blocks * nh * len(lens)
    done = []  # (tile, [blocks in order])
    for cta in range(grid):
        kv = [None, None]  # what each K/V buffer holds: (tile, block, group)
        qs = [None, None]  # what each Q buffer holds: (tile, group)
        groups = []  # commit order; an entry is complete once the wait allows it
        complete = set()

        def issue(tile, j, qbuf, buf):
            g = len(groups)
            groups.append((tile, j))
            if qbuf is not None:
                qs[qbuf] = (tile, g)
            kv[buf] = (tile, j, g)

        def wait(n):  # cp.async.wait_group n: all but the newest n groups complete
            for g in range(len(groups) - n):
                complete.add(g)

        t, cur = next_tile(lens, padded_t, nh, m_blocks, bm, cta, grid)
        if t >= n_tiles:
            continue
        buf, qbuf = 0, 0
        issue(t, 0, 0, 0)
        while True:
            m, h, b, seqlen = cur
            n_blocks = (seqlen + BN - 1) // BN
            tn, nxt = n_tiles, None
            blocks = []
            for j in range(n_blocks):
                prefetched = True
                write_kv, write_q = None, None
                if j + 1 < n_blocks:
                    issue(t, j + 1, None, buf ^ 1)
                    write_kv = buf ^ 1
                else:
                    tn, nxt = next_tile(lens, padded_t, nh, m_blocks, bm, t + grid, grid)
                    if tn < n_tiles:
                        issue(tn, 0, qbuf ^ 1, buf ^ 1)
                        write_kv, write_q = buf ^ 1, qbuf ^ 1
                    else:
                        prefetched = False
                wait(1 if prefetched else 0)
                # __syncthreads; then the reads of this step
                assert write_kv != buf, "a prefetch writes the K/V buffer this step reads"
                if j == 0:
                    assert write_q != qbuf, "a prefetch writes the Q buffer this step reads"
                    qt, qg = qs[qbuf]
                    assert qt == t and qg in complete, f"Q buffer holds tile {qt} (group done: {qg in complete}), want {t}"
                kt, kj, kg = kv[buf]
                assert (kt, kj) == (t, j) and kg in complete, f"K/V buffer holds {(kt, kj)}, want {(t, j)}"
                blocks.append(j)
                buf ^= 1  # after the closing barrier
            done.append((t, blocks))
            if tn >= n_tiles:
                break
            t, cur, qbuf = tn, nxt, qbuf ^ 1
        assert len(groups) == len(complete), "a cp.async group was never waited for"

    want = []
    for t in range(n_tiles):
        nt, info = next_tile(lens, padded_t, nh, m_blocks, bm, t, n_tiles + 1)
        if nt == t:
            want.append((t, list(range((info[3] + BN - 1) // BN))))
    got = sorted(done)
    assert got == want, f"tiles computed {got[:6]}..., want {want[:6]}..."
    return len(done)


def main():
    rng = random.Random(7)
    cases = [
        ([1, 17, 64, 65, 127, 128, 129, 300, 0, 5], 0, 370),  # the GPU test's packed case
        ([200, 37, 0, 64], 200, 200),                         # padded (every tile inside T)
        ([64], 0, 64),                                        # one key block: Q prefetched beside its own
        ([128] * 9, 0, 128),                                  # BERT-like
    ]
    for _ in range(20):
        lens = [rng.choice([0, 1, 63, 64, 65, rng.randint(1, 700)]) for _ in range(rng.randint(1, 6))]
        cases.append((lens, 0, max(lens) + rng.randint(0, 130)))
    n = 0
    for lens, padded_t, max_seqlen in cases:
        for nh in (1, 3):
            for bm in (64, 128):
                m_blocks = (max_seqlen + bm - 1) // bm
                n_tiles = m_blocks * nh * len(lens)
                for grid in sorted({1, 2, 3, 7, max(1, n_tiles // 2), max(1, n_tiles)}):
                    walk(lens, padded_t, nh, bm, grid, max_seqlen)
                    n += 1
    print(f"check_fwd_persistent: {n} schedules (packed, padded, empty sequences, 1 CTA to one a tile): "
          "every tile once, buffers hold what each step reads, no prefetch into a buffer being read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
