#!/usr/bin/env python3
"""CPU check of the wgmma flash forward's index math (src/cuda/flash/fwd_wgmma_kernel.cuh).

Emulates one CTA after another of the kernel in float64, the way the hardware sees it:
  - cp.async of Q into padded rows and of K/V into the no-swizzle core-matrix layout, with the
    kernel's thread-to-chunk mapping and zero-fill (fwd_kernel.cuh load_tile, load_tile_core);
  - ldmatrix.x4 of the Q fragments (the PTX per-lane layout, as check_fragment_layout.py);
  - wgmma.mma_async m64nNk16 with A from registers (each warp's 16 rows in the mma.sync A layout)
    and B read through a shared-memory matrix descriptor: start address, LBO, SBO, K-major or
    MN-major ("trans-b"), decoded with the canonical no-swizzle layouts of the PTX ISA / CUTLASS:
      K-major  element (n, k) at start + (n % 8) 16 + (n / 8) SBO + (k % 8) 2 + (k / 8) LBO bytes
      MN-major element (k, n) at start + (n % 8) 2 + (n / 8) SBO + (k % 8) 16 + (k / 8) LBO bytes
    and the accumulator layout d[4j + e] = (row g + 8 (e / 2), column 8j + 2t + e % 2);
  - the kernel's online softmax per lane (quad shuffles), P packed from S as the next A operand,
    the epilogue's stores and log-sum-exp;
and compares output and lse with plain softmax attention, for every tile shape the launcher has
(m64n128, m64n64, m128n128), with masked keys, a key block cut short, rows past the sequence end
and a query block with no real key. Pure Python + numpy:  python3 tests/cuda/check_wgmma_fwd.py
"""
import math
import sys

import numpy as np

D = 64          # head size (the kernel's only one)
CPR = D // 8    # 16-byte chunks per head row
QSTRIDE = D + 8


def load_tile_core(G, rows_valid, BN):
    """load_tile_core: chunk i of the tile -> smem elements 8i .. 8i+7."""
    s = np.full(BN * D, np.nan)
    for i in range(BN * CPR):
        r = (i // (8 * CPR)) * 8 + i % 8
        c = ((i // 8) % CPR) * 8
        s[8 * i:8 * i + 8] = G[r, c:c + 8] if r < rows_valid else 0.0
    return s


def load_padded_tile(G, rows_valid, BM):
    s = np.full((BM, QSTRIDE), np.nan)
    for i in range(BM * CPR):
        r, c = i // CPR, (i % CPR) * 8
        s[r, c:c + 8] = G[r, c:c + 8] if r < rows_valid else 0.0
    return s


def read_b(smem, start, lbo, sbo, n_cols, mn_major):
    """The 16 x N B operand a wgmma reads through a no-swizzle descriptor (element offsets)."""
    B = np.empty((16, n_cols))
    for k in range(16):
        for n in range(n_cols):
            if mn_major:
                byte = (n % 8) * 2 + (n // 8) * sbo + (k % 8) * 16 + (k // 8) * lbo
            else:
                byte = (n % 8) * 16 + (n // 8) * sbo + (k % 8) * 2 + (k // 8) * lbo
            assert byte % 2 == 0
            B[k, n] = smem[start + byte // 2]
    return B


def a_matrix(frags):
    """64 x 16 A of a warpgroup from frags[w][lane] = 4 pairs (mma.sync m16n8k16 A layout)."""
    A = np.full((64, 16), np.nan)
    for w in range(4):
        for l in range(32):
            g, t = l // 4, l % 4
            for j in range(2):
                A[16 * w + g, 2 * t + j] = frags[w][l][0][j]
                A[16 * w + g + 8, 2 * t + j] = frags[w][l][1][j]
                A[16 * w + g, 2 * t + 8 + j] = frags[w][l][2][j]
                A[16 * w + g + 8, 2 * t + 8 + j] = frags[w][l][3][j]
    return A


def scatter_d(C):
    """64 x N accumulator -> d[w][lane][N / 2] in the wgmma D layout."""
    n = C.shape[1]
    d = np.empty((4, 32, n // 2))
    for w in range(4):
        for l in range(32):
            g, t = l // 4, l % 4
            for j in range(n // 8):
                for e in range(4):
                    d[w, l, 4 * j + e] = C[16 * w + g + 8 * (e // 2), 8 * j + 2 * t + e % 2]
    return d


def ldmatrix_q(sQ, warp, ks):
    """ldmatrix_x4 of the kernel's Q fragment addresses: per lane 4 pairs."""
    rows = []
    for l in range(32):
        r = warp * 16 + (l % 8) + ((l // 8) % 2) * 8
        c = ks * 16 + (l // 16) * 8
        rows.append((r, c))
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        mat = [[sQ[rows[8 * i + r][0], rows[8 * i + r][1] + c] for c in range(8)] for r in range(8)]
        for l in range(32):
            regs[l][i] = (mat[l // 4][2 * (l % 4)], mat[l // 4][2 * (l % 4) + 1])
    return regs


def quad_max(x):  # x [32]: butterfly over lanes l ^ 1, l ^ 2
    y = np.maximum(x, x[np.arange(32) ^ 1])
    return np.maximum(y, y[np.arange(32) ^ 2])


def quad_sum(x):
    y = x + x[np.arange(32) ^ 1]
    return y + y[np.arange(32) ^ 2]


def run_cta(Q, K, V, real, q0, seqlen, WG, BN, scale_log2):
    """One CTA (query rows q0 .. q0 + 64 WG - 1); returns (out rows, lse rows) of its valid rows."""
    BM = 64 * WG
    n_blocks = (seqlen + BN - 1) // BN
    sQ = load_padded_tile(Q[q0:q0 + BM] if q0 + BM <= len(Q) else np.vstack([Q[q0:], np.zeros((BM - (len(Q) - q0), D))]),
                     min(BM, seqlen - q0), BM)
    key_group_bytes = 128 * CPR
    outs, lses = [], []
    for wg in range(WG):
        warps = range(4 * wg, 4 * wg + 4)
        q_frag = [[ldmatrix_q(sQ, w, ks) for ks in range(D // 16)] for w in warps]
        acc_o = np.zeros((4, 32, D // 2))
        row_max = np.full((4, 32, 2), -np.inf)
        row_sum = np.zeros((4, 32, 2))
        for j in range(n_blocks):
            kv0 = j * BN
            rows_valid = min(BN, seqlen - kv0)
            pad = lambda X: np.vstack([X[kv0:kv0 + rows_valid], np.full((BN - rows_valid, D), 7.0)])
            sK, sV = load_tile_core(pad(K), rows_valid, BN), load_tile_core(pad(V), rows_valid, BN)
            bias = np.array([0.0 if kv0 + i < seqlen and real[kv0 + i] else -np.inf for i in range(BN)])
            # S = Q K^T: k-step ks, B = K-major descriptor at column chunk 2 ks
            S = np.zeros((64, BN))
            for ks in range(D // 16):
                A = a_matrix([q_frag[w][ks] for w in range(4)])
                B = read_b(sK, ks * 2 * 64, 128, key_group_bytes, BN, mn_major=False)
                S += A @ B
            s = scatter_d(S)
            lane = np.arange(32)
            p_frags = [[None] * 4 for _ in range(4)]
            for w in range(4):
                x = s[w].copy()
                for t in range(BN // 8):
                    for e in range(4):
                        x[:, 4 * t + e] = x[:, 4 * t + e] * scale_log2 + bias[t * 8 + (lane % 4) * 2 + (e & 1)]
                corr = np.empty((32, 2))
                sub = np.empty((32, 2))
                for r in range(2):
                    cols = [4 * t + e for t in range(BN // 8) for e in (2 * r, 2 * r + 1)]
                    bm = quad_max(x[:, cols].max(axis=1))
                    m_new = np.maximum(row_max[w, :, r], bm)
                    sub[:, r] = np.where(m_new == -np.inf, 0.0, m_new)
                    corr[:, r] = np.exp2(row_max[w, :, r] - sub[:, r])
                    row_max[w, :, r] = m_new
                    row_sum[w, :, r] *= corr[:, r]
                for t in range(BN // 8):
                    for e in range(4):
                        pe = np.exp2(x[:, 4 * t + e] - sub[:, e >> 1])
                        x[:, 4 * t + e] = pe
                        row_sum[w, :, e >> 1] += pe
                for i in range(D // 8):
                    acc_o[w, :, 4 * i + 0] *= corr[:, 0]
                    acc_o[w, :, 4 * i + 1] *= corr[:, 0]
                    acc_o[w, :, 4 * i + 2] *= corr[:, 1]
                    acc_o[w, :, 4 * i + 3] *= corr[:, 1]
                p_frags[w] = [[[(x[l, 8 * kt + 0], x[l, 8 * kt + 1]), (x[l, 8 * kt + 2], x[l, 8 * kt + 3]),
                                (x[l, 8 * kt + 4], x[l, 8 * kt + 5]), (x[l, 8 * kt + 6], x[l, 8 * kt + 7])]
                               for l in range(32)] for kt in range(BN // 16)]
            # O += P V: k-step kt, B = MN-major descriptor at key group 2 kt
            O = np.zeros((64, D))
            for kt in range(BN // 16):
                A = a_matrix([p_frags[w][kt] for w in range(4)])
                B = read_b(sV, kt * 2 * 8 * D, key_group_bytes, 128, D, mn_major=True)
                O += A @ B
            acc_o += scatter_d(O)
        # epilogue
        for wi, w in enumerate(warps):
            for l in range(32):
                for r in range(2):
                    row = w * 16 + l // 4 + 8 * r
                    if q0 + row >= seqlen:
                        continue
                    lsum = quad_sum(row_sum[wi, :, r])[l]
                    inv = 1.0 / lsum if lsum > 0 else 0.0
                    lse = (row_max[wi, l, r] + math.log2(lsum)) * math.log(2) if lsum > 0 else -np.inf
                    vals = []
                    for i in range(D // 8):
                        c = i * 8 + (l % 4) * 2
                        vals.append((c, acc_o[wi, l, 4 * i + 2 * r] * inv, acc_o[wi, l, 4 * i + 2 * r + 1] * inv))
                    outs.append((q0 + row, vals))
                    if l % 4 == 0:
                        lses.append((q0 + row, lse))
    return outs, lses


def check(seqlen, WG, BN, real, seed):
    rng = np.random.default_rng(seed)
    Q, K, V = (rng.uniform(-1.5, 1.5, (seqlen, D)) for _ in range(3))
    scale = 1.0 / math.sqrt(D)
    out = np.full((seqlen, D), np.nan)
    lse = np.full(seqlen, np.nan)
    BM = 64 * WG
    for q0 in range(0, seqlen, BM):
        outs, lses = run_cta(Q, K, V, real, q0, seqlen, WG, BN, scale * math.log2(math.e))
        for row, vals in outs:
            for c, a, b in vals:
                out[row, c], out[row, c + 1] = a, b
        for row, x in lses:
            lse[row] = x
    # reference
    sc = (Q @ K.T) * scale
    sc[:, ~np.array(real[:seqlen])] = -np.inf
    ref_out = np.zeros((seqlen, D))
    ref_lse = np.full(seqlen, -np.inf)
    if any(real[:seqlen]):
        m = sc.max(axis=1, keepdims=True)
        e = np.exp(sc - m)
        l = e.sum(axis=1, keepdims=True)
        ref_out = (e / l) @ V
        ref_lse = (m + np.log(l))[:, 0]
    err_o = np.nanmax(np.abs(out - ref_out)) if not np.isnan(out).any() else np.inf
    same_inf = np.isinf(ref_lse) & (lse == ref_lse)
    with np.errstate(invalid="ignore"):  # -inf - -inf where both rows have no key (same_inf)
        err_l = np.max(np.where(same_inf, 0.0, np.abs(lse - ref_lse)))
    name = f"T={seqlen} m{BM}n{BN} masked={sum(not r for r in real[:seqlen])}"
    ok = err_o < 1e-9 and err_l < 1e-9
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max |out - ref| {err_o:.3g}, max |lse - ref| {err_l:.3g}")
    return ok


def probe_check():
    """The GPU test CudaAttention.WgmmaDescriptorProbeReadsTheCoreMatrixTiles, emulated: its
    position-coded tile (flash_fwd_wgmma.cu wgmma_probe_kernel), read through the kernels'
    descriptors at each k-step, must give B[k][n] = 64 k + n + 1, hence D = 64 (m % 16) + n + 1."""
    ok = True
    for trans in (False, True):
        for step in range(4):
            tile = np.zeros(64 * 64)
            for i in range(64 * 64):
                r, c = i // 64, i % 64
                kc, nc = (r, c) if trans else (c, r)
                v = 64 * (kc % 16) + nc + 1 if kc // 16 == step else 0
                tile[((r // 8) * 8 + c // 8) * 64 + (r % 8) * 8 + c % 8] = v
            if trans:
                B = read_b(tile, step * 2 * 8 * 64, 1024, 128, 64, mn_major=True)
            else:
                B = read_b(tile, step * 2 * 64, 128, 1024, 64, mn_major=False)
            want = np.array([[64 * k + n + 1 for n in range(64)] for k in range(16)])
            good = np.array_equal(B, want)
            ok &= good
            print(f"{'ok  ' if good else 'FAIL'} probe {'MN' if trans else 'K'}-major k-step {step}")
    return ok


def main():
    ok = probe_check()
    for WG, BN in [(1, 128), (1, 64), (2, 128)]:
        T = 200  # two or four key blocks, the last one cut short; a second query block cut short too
        real = [True] * T
        for j in (0, 7, 63, 64, 127, 128, 199):
            real[j] = False
        ok &= check(T, WG, BN, real, 1 + WG + BN)
        ok &= check(40, WG, BN, [True] * 40, 2)  # one short key block, rows past the end
        ok &= check(70, WG, BN, [False] * 70, 3)  # no real key: zero output, lse -inf
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
