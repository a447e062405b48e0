#!/usr/bin/env python3
"""CPU check of the wgmma attention backward's index math (src/cuda/flash/bwd_wgmma_kernel.cuh).

Emulates the dK/dV and dQ kernels CTA by CTA in float64 with the hardware model of
check_wgmma_fwd.py (cp.async into core-matrix tiles, ldmatrix A fragments of padded tiles,
wgmma with A from registers and B through no-swizzle descriptors, the D accumulator layout),
and compares dQ, dK, dV with the float64 gradients of softmax attention:
  P = softmax(Q K^T s) (masked keys excluded), dV = P^T dO, dP = dO V^T,
  dS = P (dP - rowsum(dO O)), dQ = s dS K, dK = s dS^T Q.
Cases: several query and key tiles with the last cut short, masked keys, a sequence shorter
than a tile, and a sequence with no real key (zero gradients). Pure Python + numpy:
  python3 tests/cuda/check_wgmma_bwd.py
"""
import math
import sys

import numpy as np

from check_wgmma_fwd import D, a_matrix, ldmatrix_q, load_padded_tile, load_tile_core, read_b, scatter_d

KEY_GROUP_BYTES = 128 * (D // 8)


def tile(X, r0, valid, rows=64, fill=5.0):
    """Rows r0 .. r0 + rows - 1 of X, rows past `valid` replaced by garbage (the loads zero-fill them)."""
    out = np.full((rows, X.shape[1]), fill)
    out[:valid] = X[r0:r0 + valid]
    return out


def frags(padded, ks, wg):
    """The A fragments of warpgroup wg (warps 4 wg .. 4 wg + 3: rows 64 wg .. of the padded tile)."""
    return [ldmatrix_q(padded, 4 * wg + w, ks) for w in range(4)]


def pack(acc):
    """pack_acc_frags: per warp and lane, k-step kt -> 4 pairs (n8 tiles 2 kt, 2 kt + 1)."""
    return [[[[(acc[w, l, 8 * kt + 0], acc[w, l, 8 * kt + 1]), (acc[w, l, 8 * kt + 2], acc[w, l, 8 * kt + 3]),
               (acc[w, l, 8 * kt + 4], acc[w, l, 8 * kt + 5]), (acc[w, l, 8 * kt + 6], acc[w, l, 8 * kt + 7])]
              for l in range(32)] for kt in range(4)] for w in range(4)]


def rows_nt(a_padded, sB, wg):
    """wgmma_rows_nt: 64 x 64 = A (4 k-steps of warpgroup wg's fragments) times the K-major core tile sB."""
    C = np.zeros((64, 64))
    for ks in range(4):
        C += a_matrix(frags(a_padded, ks, wg)) @ read_b(sB, ks * 2 * 64, 128, KEY_GROUP_BYTES, 64, mn_major=False)
    return scatter_d(C)


def frags_nn(packed, sB):
    """wgmma_frags_nn: 64 x 64 = A (packed fragments, 4 k-steps) times the MN-major core tile sB."""
    C = np.zeros((64, 64))
    for kt in range(4):
        A = a_matrix([packed[w][kt] for w in range(4)])
        C += A @ read_b(sB, kt * 2 * 8 * D, KEY_GROUP_BYTES, 128, 64, mn_major=True)
    return scatter_d(C)


def gather(acc, r0, valid, out, mul):
    """store_rows_wgmma: rows 16 w + g (+ 8) < valid of a D-layout accumulator into out[r0 + row]."""
    for w in range(4):
        for l in range(32):
            for i in range(8):
                c = i * 8 + (l % 4) * 2
                for r in range(2):
                    row = w * 16 + l // 4 + 8 * r
                    if row < valid:
                        out[r0 + row, c] = acc[w, l, 4 * i + 2 * r] * mul
                        out[r0 + row, c + 1] = acc[w, l, 4 * i + 2 * r + 1] * mul


def lse2_of(x):
    return math.inf if x == -math.inf else x * math.log2(math.e)


def dkdv_kernel(Q, K, V, dO, lse, delta, real, T, scale, dK, dV, WG):
    lane = np.arange(32)
    R = 64 * WG  # the CTA's keys
    for k0 in range(0, T, R):
        kv = min(R, T - k0)
        sK, sV = load_padded_tile(tile(K, k0, kv, R), kv, R), load_padded_tile(tile(V, k0, kv, R), kv, R)
        for wg in range(WG):
            kw = k0 + 64 * wg  # this warpgroup's first key
            key_ok = np.array([[[kw + w * 16 + l // 4 + 8 * h < T and real[kw + w * 16 + l // 4 + 8 * h]
                                 for h in range(2)] for l in range(32)] for w in range(4)])
            acc_dk, acc_dv = np.zeros((4, 32, 32)), np.zeros((4, 32, 32))
            for q0 in range(0, T, 64):
                qv = min(64, T - q0)
                sQ, sdO = load_tile_core(tile(Q, q0, qv), qv, 64), load_tile_core(tile(dO, q0, qv), qv, 64)
                lse_j = np.array([lse[q0 + i] if i < qv else -math.inf for i in range(64)])
                delta_j = np.array([delta[q0 + i] if i < qv else 0.0 for i in range(64)])
                s, dp = rows_nt(sK, sQ, wg), rows_nt(sV, sdO, wg)
                for t in range(8):
                    for c in range(2):
                        q = t * 8 + (lane % 4) * 2 + c
                        l2 = np.array([lse2_of(x) for x in lse_j[q]])
                        for e in (c, c + 2):
                            pv = np.where(key_ok[:, :, e >> 1],
                                          np.exp2(s[:, :, 4 * t + e] * scale * math.log2(math.e) - l2), 0.0)
                            s[:, :, 4 * t + e] = pv
                            dp[:, :, 4 * t + e] = pv * (dp[:, :, 4 * t + e] - delta_j[q])
                acc_dv += frags_nn(pack(s), sdO)
                acc_dk += frags_nn(pack(dp), sQ)
            gather(acc_dk, kw, kv - 64 * wg, dK, scale)
            gather(acc_dv, kw, kv - 64 * wg, dV, 1.0)


def dq_kernel(Q, K, V, dO, lse, delta, real, T, scale, dQ, WG):
    lane = np.arange(32)
    R = 64 * WG  # the CTA's queries
    for q0 in range(0, T, R):
        qv = min(R, T - q0)
        sQ, sdO = load_padded_tile(tile(Q, q0, qv, R), qv, R), load_padded_tile(tile(dO, q0, qv, R), qv, R)
        for wg in range(WG):
            qw = q0 + 64 * wg
            rows = np.array([[[qw + w * 16 + l // 4 + 8 * r for r in range(2)] for l in range(32)] for w in range(4)])
            l2 = np.vectorize(lambda row: lse2_of(lse[row]) if row < T else math.inf)(rows)
            dl = np.vectorize(lambda row: delta[row] if row < T else 0.0)(rows)
            acc_dq = np.zeros((4, 32, 32))
            for k0 in range(0, T, 64):
                kv = min(64, T - k0)
                sK, sV = load_tile_core(tile(K, k0, kv), kv, 64), load_tile_core(tile(V, k0, kv), kv, 64)
                bias = np.array([0.0 if k0 + i < T and real[k0 + i] else -math.inf for i in range(64)])
                s, dp = rows_nt(sQ, sK, wg), rows_nt(sdO, sV, wg)
                for t in range(8):
                    for e in range(4):
                        key = t * 8 + (lane % 4) * 2 + (e & 1)
                        pv = np.exp2(s[:, :, 4 * t + e] * scale * math.log2(math.e) + bias[key] - l2[:, :, e >> 1])
                        dp[:, :, 4 * t + e] = pv * (dp[:, :, 4 * t + e] - dl[:, :, e >> 1])
                acc_dq += frags_nn(pack(dp), sK)
            gather(acc_dq, qw, qv - 64 * wg, dQ, scale)


def check(T, real, seed, WG):
    rng = np.random.default_rng(seed)
    Q, K, V, dO = (rng.uniform(-1.5, 1.5, (T, D)) for _ in range(4))
    scale = 1.0 / math.sqrt(D)
    mask = np.array(real[:T])
    S = (Q @ K.T) * scale
    S[:, ~mask] = -np.inf
    if mask.any():
        m = S.max(axis=1, keepdims=True)
        E = np.exp(S - m)
        lsum = E.sum(axis=1, keepdims=True)
        P = E / lsum
        lse = (m + np.log(lsum))[:, 0]
    else:
        P = np.zeros((T, T))
        lse = np.full(T, -np.inf)
    O = P @ V
    delta = (dO * O).sum(axis=1)
    dP = dO @ V.T
    dS = P * (dP - delta[:, None])
    ref = {"dq": scale * dS @ K, "dk": scale * dS.T @ Q, "dv": P.T @ dO}
    got = {name: np.full((T, D), np.nan) for name in ref}
    dkdv_kernel(Q, K, V, dO, lse, delta, real, T, scale, got["dk"], got["dv"], WG)
    dq_kernel(Q, K, V, dO, lse, delta, real, T, scale, got["dq"], WG)
    ok = True
    for name in ("dq", "dk", "dv"):
        err = np.inf if np.isnan(got[name]).any() else np.max(np.abs(got[name] - ref[name]))
        good = err < 1e-9
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} m{64 * WG} T={T} masked={int((~mask).sum())} {name}: "
              f"max |kernel - float64| {err:.3g}")
    return ok


def main():
    ok = True
    real = [True] * 150
    for j in (0, 5, 63, 64, 100, 149):
        real[j] = False
    for WG in (1, 2):  # the shapes m64 and m128 (UNMASK_FLASH_BWD_WGMMA_SHAPE)
        ok &= check(150, real, 11, WG)  # several tiles each way, the last cut short; masked keys
        ok &= check(40, [True] * 40, 12, WG)  # shorter than a tile
        ok &= check(70, [False] * 70, 13, WG)  # no real key: zero gradients
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
