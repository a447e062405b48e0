#!/usr/bin/env python3
"""CPU check of the tensor-core attention backward (src/cuda/flash/bwd_kernel.cuh) and of the
training forward's log-sum-exp (fwd_kernel.cuh's epilogue), without a GPU.

Emulates ldmatrix(.trans).x4 and mma.m16n8k16 per lane exactly as the PTX ISA defines their
fragments (the same model as check_fragment_layout.py, vectorised with numpy), then runs the
two backward kernels' per-warp code paths with the kernels' own index expressions (fragment
loads, the element loops with their query/key indices, the masks, lse2 = +inf for rows without
a key, the final scale) for every CTA of a small problem, in float64 (no bf16 rounding: this
checks the index math and the algebra, not the precision). The result must equal PyTorch
autograd of softmax(scale Q K^T + mask) V in float64:
  * one sequence of 150 rows (3 tiles, the last partial: rows and keys past the end), head sizes
    64, 80, 88 (padded to 96 inside the kernel) and 128,
  * a padded key mask with masked keys inside the sequence,
  * a query tile whose keys are all masked is not needed: the lse = -inf path is checked on
    its own (P = 0 for such a row),
  * and again with attention dropout 0.1: the kernels' Philox counters (ops.h: offset +
    (h N + row) T + key; Philox-4x32-10 here in numpy, checked against Random123's known answer)
    must drop the same elements as the reference's mask.
  python3 tests/cuda/check_flash_bwd.py
"""
import math

import numpy as np
import torch

LOG2E = 1.4426950408889634
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """core/philox.h on numpy uint64 arrays holding 32-bit words."""
    m0, m1, w0, w1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57), np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + w0) & MASK32, (k1 + w1) & MASK32
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & MASK32
    return c0, c1, c2, c3


def philox_uniform(seed, counter):
    """ops.h's uniform stream: block counter >> 2 (words lo, hi, 0, 0), key (seed lo, hi), lane
    counter & 3, top 24 bits x 2^-24."""
    counter = np.asarray(counter, dtype=np.uint64)
    block, lane = counter >> np.uint64(2), (counter & np.uint64(3)).astype(np.int64)
    z = np.zeros_like(block)
    words = philox4x32_10(block & MASK32, block >> np.uint64(32), z, z, np.uint64(seed) & MASK32,
                          np.uint64(seed) >> np.uint64(32))
    r = np.choose(lane, words)
    return (r >> np.uint64(8)).astype(np.float64) * 2.0 ** -24


def dropout_factor(drop, seed, counter):  # common.cuh dropout_factor
    if drop == 0.0:
        return np.ones(np.shape(counter))
    return np.where(philox_uniform(seed, counter) >= drop, 1.0 / (1.0 - drop), 0.0)


def philox_words(seed, counter):
    """The four words of the Philox block of each counter (counter >> 2): [n, 4] uint64."""
    block = np.asarray(counter, dtype=np.uint64) >> np.uint64(2)
    z = np.zeros_like(block)
    w = philox4x32_10(block & MASK32, block >> np.uint64(32), z, z, np.uint64(seed) & MASK32,
                      np.uint64(seed) >> np.uint64(32))
    return np.stack(w, axis=-1)


def u64(x):
    """x as uint64 (sums of these wrap modulo 2^64, as the kernels' uint64_t arithmetic)."""
    return np.asarray(x).astype(np.uint64)


def keep_factor(drop, bits):  # common.cuh dropout_keep_factor
    return np.where((bits >> np.uint64(8)).astype(np.float64) * 2.0 ** -24 >= drop, 1.0 / (1.0 - drop), 0.0)


def quads_aligned(offset, T):  # common.cuh dropout_quads_aligned
    return offset % 4 == 0 and T % 4 == 0


def dropout_factors_s_tile(drop, seed, row_counter, row8, key0):
    """common.cuh dropout_factors_s_tile for the 32 lanes: row_counter [32] (offset + row(g) T);
    f [32, 4]. Lane l evaluates the block of row g + 8 (l & 1), then lanes l and l ^ 1 swap."""
    lanes = np.arange(32)
    b = lanes & 1
    counter = u64(row_counter) + u64(np.where(b == 1, int(row8), 0)) + u64(key0 + 4 * ((lanes & 3) >> 1))
    w = philox_words(seed, counter)
    own0, own1 = np.where(b == 1, w[:, 2], w[:, 0]), np.where(b == 1, w[:, 3], w[:, 1])
    send0, send1 = np.where(b == 1, w[:, 0], w[:, 2]), np.where(b == 1, w[:, 1], w[:, 3])
    got0, got1 = send0[lanes ^ 1], send1[lanes ^ 1]  # __shfl_xor_sync(.., 1)
    words = [np.where(b == 1, got0, own0), np.where(b == 1, got1, own1), np.where(b == 1, own0, got0),
             np.where(b == 1, own1, got1)]
    return np.stack([keep_factor(drop, x) for x in words], axis=-1)


def dropout_factors_st_tile(drop, seed, q_counter, T, key4):
    """common.cuh dropout_factors_st_tile for the 32 lanes: q_counter [32] (offset + row(query
    of element c = 0) T), key4 [32]; f [32, 4]. Lane index i = (l >> 2) & 3 evaluates the block
    of its element i, then a 4 x 4 transpose by xor shuffles over lane bits 2 and 3."""
    lanes = np.arange(32)
    i = (lanes >> 2) & 3
    counter = u64(q_counter) + u64(np.where(i & 1, int(T), 0)) + u64(key4 + 8 * (i >> 1))
    w = philox_words(seed, counter)
    got = np.zeros((32, 4), dtype=np.uint64)
    for s in range(4):
        k = i ^ s
        mine = w[lanes, k]
        v = mine if s == 0 else mine[lanes ^ (s << 2)]
        got[lanes, k] = v
    return keep_factor(drop, got)


def ldmatrix_x4(smem, addr_of_lane, trans=False):
    """regs [32, 4, 2]: lane l's register i holds two elements of 8x8 matrix i, whose rows start
    at the addresses lanes 8i..8i+7 give."""
    regs = np.zeros((32, 4, 2))
    lanes = np.arange(32)
    for i in range(4):
        mat = np.stack([smem[r, c:c + 8] for (r, c) in (addr_of_lane(8 * i + j) for j in range(8))])
        if not trans:
            regs[:, i, 0] = mat[lanes // 4, 2 * (lanes % 4)]
            regs[:, i, 1] = mat[lanes // 4, 2 * (lanes % 4) + 1]
        else:
            regs[:, i, 0] = mat[2 * (lanes % 4), lanes // 4]
            regs[:, i, 1] = mat[2 * (lanes % 4) + 1, lanes // 4]
    return regs


def mma(acc, a, b0, b1):
    """acc [32, 4] += A B for fragments a [32, 4, 2], b0, b1 [32, 2] (m16n8k16 layouts)."""
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for j in range(2):
        A[g, 2 * t + j] = a[:, 0, j]
        A[g + 8, 2 * t + j] = a[:, 1, j]
        A[g, 2 * t + 8 + j] = a[:, 2, j]
        A[g + 8, 2 * t + 8 + j] = a[:, 3, j]
        B[2 * t + j, g] = b0[:, j]
        B[2 * t + 8 + j, g] = b1[:, j]
    C = A @ B
    acc[:, 0] += C[g, 2 * t]
    acc[:, 1] += C[g, 2 * t + 1]
    acc[:, 2] += C[g + 8, 2 * t]
    acc[:, 3] += C[g + 8, 2 * t + 1]


def load_a_frags(s, warp, ksteps):  # bwd_kernel.cuh load_a_frags
    return [ldmatrix_x4(s, lambda l, ks=ks: (warp * 16 + (l % 8) + ((l // 8) % 2) * 8, ks * 16 + (l // 16) * 8))
            for ks in range(ksteps)]


def mma_rows_nt(acc, a, sB, ksteps):  # acc [NT][32, 4] += A B^T, B rows = n (sB: the part's first row on)
    for ks in range(ksteps):
        for np_ in range(len(acc) // 2):
            bf = ldmatrix_x4(sB, lambda l: (np_ * 16 + (l % 8) + (l // 16) * 8, ks * 16 + ((l // 8) % 2) * 8))
            mma(acc[2 * np_], a[ks], bf[:, 0], bf[:, 1])
            mma(acc[2 * np_ + 1], a[ks], bf[:, 2], bf[:, 3])


def mma_rows_nt_smem_a(acc, sA, warp, sB, ksteps):  # mma_rows_nt_smem_a: A's k-step fragments from smem
    for ks in range(ksteps):
        a = ldmatrix_x4(sA, lambda l: (warp * 16 + (l % 8) + ((l // 8) % 2) * 8, ks * 16 + (l // 16) * 8))
        for np_ in range(len(acc) // 2):
            bf = ldmatrix_x4(sB, lambda l: (np_ * 16 + (l % 8) + (l // 16) * 8, ks * 16 + ((l // 8) % 2) * 8))
            mma(acc[2 * np_], a, bf[:, 0], bf[:, 1])
            mma(acc[2 * np_ + 1], a, bf[:, 2], bf[:, 3])


def pack_acc_tile(frags, acc_t, t):  # pack_acc_tile: n8 tile t of a 16 x 64 accumulator -> A fragments
    frags[t // 2][:, (t % 2) * 2] = acc_t[:, 0:2]
    frags[t // 2][:, (t % 2) * 2 + 1] = acc_t[:, 2:4]


def new_frags():  # uint32_t [4][4] of bf16 pairs, NaN until pack_acc_tile writes them
    return [np.full((32, 4, 2), np.nan) for _ in range(4)]


def mma_frags_nn(out, frags, sB, ntiles_o):  # out [ntiles_o][32, 4] += A B, B rows = k
    for kt in range(4):
        for dp in range(ntiles_o // 2):
            bf = ldmatrix_x4(sB, lambda l: (kt * 16 + (l % 8) + ((l // 8) % 2) * 8, dp * 16 + (l // 16) * 8),
                             trans=True)
            mma(out[2 * dp], frags[kt], bf[:, 0], bf[:, 1])
            mma(out[2 * dp + 1], frags[kt], bf[:, 2], bf[:, 3])


def tile(X, r0, valid, D, LDS):
    """load_tile: rows [r0, r0 + valid) of X (columns < D) into a zero [64, LDS] tile."""
    s = np.zeros((64, LDS))
    s[:valid, :D] = X[r0:r0 + valid, :D]
    return s


def store_rows(G, acc, row_base, valid, mul, D, ntiles_o):  # store_rows (row_base = tile start + warp*16)
    lanes = np.arange(32)
    for i in range(ntiles_o):
        if i * 8 >= D:
            break
        for r in range(2):
            for l in range(32):
                row = lanes[l] // 4 + 8 * r
                if row_base[1] + row >= valid:
                    continue
                c = i * 8 + (l % 4) * 2
                G[row_base[0] + row_base[1] + row, c] = acc[i][l, 2 * r] * mul
                G[row_base[0] + row_base[1] + row, c + 1] = acc[i][l, 2 * r + 1] * mul


def mma_ds_k(out, sdsT, sK, warp, ntiles_o):  # mma_ds_k: out [ntiles_o][32, 4] += dS K, A = dS^T via .trans
    for kt in range(4):
        af = ldmatrix_x4(sdsT, lambda l: (kt * 16 + (l % 8) + (l // 16) * 8, warp * 16 + ((l // 8) % 2) * 8), trans=True)
        for dp in range(ntiles_o // 2):
            bf = ldmatrix_x4(sK, lambda l: (kt * 16 + (l % 8) + ((l // 8) % 2) * 8, dp * 16 + (l // 16) * 8),
                             trans=True)
            mma(out[2 * dp], af, bf[:, 0], bf[:, 1])
            mma(out[2 * dp + 1], af, bf[:, 2], bf[:, 3])


def atomic_add_rows(accum, acc, row_base, valid, D, ntiles_o):  # atomic_add_rows (row_base = tile start + warp*16)
    for i in range(ntiles_o):
        if i * 8 >= D:
            break
        for r in range(2):
            for l in range(32):
                row = l // 4 + 8 * r
                if row_base[1] + row >= valid:
                    continue
                c = i * 8 + (l % 4) * 2
                accum[row_base[0] + row_base[1] + row, c] += acc[i][l, 2 * r]
                accum[row_base[0] + row_base[1] + row, c + 1] += acc[i][l, 2 * r + 1]


def backward(Q, K, V, dO, lse, delta, key_real, scale, D, drop=0.0, seed=0, offset=0, head=0, N=None, start=0,
             atomic_dq=False, kv_in_smem=False, dq_parts=2):
    """N: rows of the whole batch (the counters' h N term); start: this sequence's first row.
    atomic_dq: dQ from the dK/dV kernel's dS^T tiles (kAtomicDq) instead of the dQ kernel.
    kv_in_smem: the three-CTA dK/dV kernel (K and V fragments read from smem every k-step, one
    part); else two parts of 32 queries with K and V fragments held. dq_parts: the dQ kernel's."""
    parts = 1 if kv_in_smem else 2
    T = Q.shape[0]
    N = T if N is None else N
    DP = (D + 15) // 16 * 16
    LDS, KS, NT = DP + 8, DP // 16, DP // 8
    s2 = scale * LOG2E
    dQ, dK, dV = np.full((T, D), np.nan), np.full((T, D), np.nan), np.full((T, D), np.nan)
    dq_accum = np.zeros((T, D))  # the atomic variant's f32 accumulator (sums in any order)
    lanes = np.arange(32)
    for k0 in range(0, T, 64):  # dK/dV kernel: one CTA per key block
        sK, sV = tile(K, k0, min(64, T - k0), D, LDS), tile(V, k0, min(64, T - k0), D, LDS)
        key_ok = [[np.array([k0 + warp * 16 + l // 4 + 8 * r < T and key_real[k0 + warp * 16 + l // 4 + 8 * r]
                             for l in lanes]) for r in range(2)] for warp in range(4)]
        kf = [load_a_frags(sK, warp, KS) for warp in range(4)]
        vf = [load_a_frags(sV, warp, KS) for warp in range(4)]
        acc_dk = [[np.zeros((32, 4)) for _ in range(NT)] for _ in range(4)]
        acc_dv = [[np.zeros((32, 4)) for _ in range(NT)] for _ in range(4)]
        for q0 in range(0, T, 64):
            valid = min(64, T - q0)
            sQ, sdO = tile(Q, q0, valid, D, LDS), tile(dO, q0, valid, D, LDS)
            # cp.async'd raw lse (-inf past the end) and delta; lse2 = bwd_lse2(lse) at use
            sLse = np.array([lse[q0 + i] if i < valid else -np.inf for i in range(64)])
            sD = np.array([delta[q0 + i] if i < valid else 0.0 for i in range(64)])
            sdsT = np.full((64, 64 + 8), np.nan)  # dS^T [key][query]; the pad columns are never read
            for warp in range(4):
              p_frag, ds_frag = new_frags(), new_frags()
              tiles = 8 // parts
              for part in range(parts):  # queries 8 tiles part .. : smem rows from there on
                acc_p = [np.zeros((32, 4)) for _ in range(tiles)]
                acc_dp = [np.zeros((32, 4)) for _ in range(tiles)]
                if kv_in_smem:
                    mma_rows_nt_smem_a(acc_p, sK, warp, sQ[8 * tiles * part:], KS)
                    mma_rows_nt_smem_a(acc_dp, sV, warp, sdO[8 * tiles * part:], KS)
                else:
                    mma_rows_nt(acc_p, kf[warp], sQ[8 * tiles * part:], KS)
                    mma_rows_nt(acc_dp, vf[warp], sdO[8 * tiles * part:], KS)
                for th in range(tiles):
                    t = tiles * part + th
                    q_row = head * N + start + q0 + t * 8 + (lanes % 4) * 2
                    if drop > 0 and quads_aligned(offset, T) and D <= 80:  # bwd_kernel.cuh: HS <= 80
                        f4 = dropout_factors_st_tile(drop, seed, offset + q_row * T, T, k0 + warp * 16 + 4 * (lanes >> 4))
                    else:
                        f4 = np.stack([dropout_factor(drop, seed, offset + (q_row + (e & 1)) * T + k0 + warp * 16 +
                                                      lanes // 4 + 8 * (e >> 1)) for e in range(4)], axis=-1)
                    for c in range(2):
                        q = t * 8 + (lanes % 4) * 2 + c
                        lse2 = np.where(sLse[q] == -np.inf, np.inf, sLse[q] * LOG2E)
                        for e in (c, c + 2):
                            pv = np.where(key_ok[warp][e >> 1], np.exp2(acc_p[th][:, e] * s2 - lse2), 0.0)
                            f = f4[:, e]
                            acc_p[th][:, e] = pv * f
                            acc_dp[th][:, e] = pv * (acc_dp[th][:, e] * f - sD[q])
                    pack_acc_tile(p_frag, acc_p[th], t)
                    pack_acc_tile(ds_frag, acc_dp[th], t)
              mma_frags_nn(acc_dv[warp], p_frag, sdO, NT)
              mma_frags_nn(acc_dk[warp], ds_frag, sQ, NT)
              for t in range(8):  # dS^T to smem from ds_frag: rows warp*16 + g (+8), columns t*8 + 2(lane%4) (+1)
                  row, col = warp * 16 + lanes // 4, t * 8 + (lanes % 4) * 2
                  for r in range(2):
                      pair = ds_frag[t // 2][:, (t % 2) * 2 + r]
                      sdsT[row + 8 * r, col] = pair[:, 0]
                      sdsT[row + 8 * r, col + 1] = pair[:, 1]
            if atomic_dq:  # after the barrier: every warp's dS^T is in smem
                for warp in range(4):
                    acc_dq = [np.zeros((32, 4)) for _ in range(NT)]
                    mma_ds_k(acc_dq, sdsT, sK, warp, NT)
                    atomic_add_rows(dq_accum, acc_dq, (q0, warp * 16), T - q0, D, NT)
        for warp in range(4):
            store_rows(dK, acc_dk[warp], (k0, warp * 16), T - k0, scale, D, NT)
            store_rows(dV, acc_dv[warp], (k0, warp * 16), T - k0, 1.0, D, NT)
    if atomic_dq:
        return dq_accum * scale, dK, dV  # dq_from_accum_kernel
    lse2 = np.where(lse == -np.inf, np.inf, lse * LOG2E)
    for q0 in range(0, T, 64):  # dQ kernel: one CTA per query block
        sQ, sdO = tile(Q, q0, min(64, T - q0), D, LDS), tile(dO, q0, min(64, T - q0), D, LDS)
        for warp in range(4):
            rows = [q0 + warp * 16 + lanes // 4 + 8 * r for r in range(2)]
            l2 = [np.array([lse2[x] if x < T else np.inf for x in rows[r]]) for r in range(2)]
            dl = [np.array([delta[x] if x < T else 0.0 for x in rows[r]]) for r in range(2)]
            qf, dof = load_a_frags(sQ, warp, KS), load_a_frags(sdO, warp, KS)
            acc_dq = [np.zeros((32, 4)) for _ in range(NT)]
            for k0 in range(0, T, 64):
                valid = min(64, T - k0)
                sK, sV = tile(K, k0, valid, D, LDS), tile(V, k0, valid, D, LDS)
                bias = np.array([0.0 if k0 + i < T and key_real[k0 + i] else -np.inf for i in range(64)])
                ds_frag = new_frags()
                tiles = 8 // dq_parts
                for part in range(dq_parts):
                  acc_p = [np.zeros((32, 4)) for _ in range(tiles)]
                  acc_dp = [np.zeros((32, 4)) for _ in range(tiles)]
                  mma_rows_nt(acc_p, qf, sK[8 * tiles * part:], KS)
                  mma_rows_nt(acc_dp, dof, sV[8 * tiles * part:], KS)
                  for th in range(tiles):
                    t = tiles * part + th
                    row_g = head * N + start + q0 + warp * 16 + lanes // 4
                    f4 = None
                    if drop > 0 and quads_aligned(offset, T):
                        f4 = dropout_factors_s_tile(drop, seed, offset + row_g * T, 8 * T, k0 + t * 8)
                    for e in range(4):
                        key = t * 8 + (lanes % 4) * 2 + (e & 1)
                        pv = np.exp2(acc_p[th][:, e] * s2 + bias[key] - l2[e >> 1])
                        f = f4[:, e] if f4 is not None else dropout_factor(
                            drop, seed, offset + (row_g + 8 * (e >> 1)) * T + k0 + key)
                        acc_dp[th][:, e] = pv * (acc_dp[th][:, e] * f - dl[e >> 1])
                    pack_acc_tile(ds_frag, acc_dp[th], t)
                mma_frags_nn(acc_dq, ds_frag, sK, NT)
            store_rows(dQ, acc_dq, (q0, warp * 16), T - q0, scale, D, NT)
    return dQ, dK, dV


def backward_short(Q, K, V, dO, lse, delta, key_real, scale, drop=0.0, seed=0, offset=0, head=0, N=None, start=0):
    """bwd_short_kernel.cuh: one CTA of 8 warps for a whole sequence of T <= 128 keys, head size 64;
    warp w owns keys 16 w..; per 64-query tile the dK/dV kernel's code, then dQ = dS K over the 128
    keys with warp w taking queries 16 (w % 4).. and columns 32 (w // 4).., stored once."""
    T, D = Q.shape
    assert T <= 128 and D == 64
    N = T if N is None else N
    LDS, LDT, KS, NT = D + 8, 64 + 8, D // 16, D // 8
    s2 = scale * LOG2E
    dQ, dK, dV = np.full((T, D), np.nan), np.full((T, D), np.nan), np.full((T, D), np.nan)
    lanes = np.arange(32)
    sK, sV = np.zeros((128, LDS)), np.zeros((128, LDS))  # load_tile<Kt, 128>: zero rows past T
    sK[:T, :D], sV[:T, :D] = K, V
    key_ok = [[np.array([warp * 16 + l // 4 + 8 * r < T and key_real[warp * 16 + l // 4 + 8 * r] for l in lanes])
               for r in range(2)] for warp in range(8)]
    kf = [load_a_frags(sK, warp, KS) for warp in range(8)]
    vf = [load_a_frags(sV, warp, KS) for warp in range(8)]
    acc_dk = [[np.zeros((32, 4)) for _ in range(NT)] for _ in range(8)]
    acc_dv = [[np.zeros((32, 4)) for _ in range(NT)] for _ in range(8)]
    for q0 in range(0, T, 64):
        valid = min(64, T - q0)
        sQ, sdO = tile(Q, q0, valid, D, LDS), tile(dO, q0, valid, D, LDS)
        sLse = np.array([lse[q0 + i] if i < valid else -np.inf for i in range(64)])
        sD = np.array([delta[q0 + i] if i < valid else 0.0 for i in range(64)])
        sdsT = np.full((128, LDT), np.nan)  # dS^T [key][query]; the pad columns are never read
        for warp in range(8):
            p_frag, ds_frag = new_frags(), new_frags()
            for part in range(2):
                acc_p = [np.zeros((32, 4)) for _ in range(4)]
                acc_dp = [np.zeros((32, 4)) for _ in range(4)]
                mma_rows_nt(acc_p, kf[warp], sQ[32 * part:], KS)
                mma_rows_nt(acc_dp, vf[warp], sdO[32 * part:], KS)
                for th in range(4):
                    t = 4 * part + th
                    q_row = head * N + start + q0 + t * 8 + (lanes % 4) * 2
                    if drop > 0 and quads_aligned(offset, T):
                        f4 = dropout_factors_st_tile(drop, seed, offset + q_row * T, T, warp * 16 + 4 * (lanes >> 4))
                    else:
                        f4 = np.stack([dropout_factor(drop, seed, offset + (q_row + (e & 1)) * T + warp * 16 +
                                                      lanes // 4 + 8 * (e >> 1)) for e in range(4)], axis=-1)
                    for c in range(2):
                        q = t * 8 + (lanes % 4) * 2 + c
                        lse2 = np.where(sLse[q] == -np.inf, np.inf, sLse[q] * LOG2E)
                        for e in (c, c + 2):
                            pv = np.where(key_ok[warp][e >> 1], np.exp2(acc_p[th][:, e] * s2 - lse2), 0.0)
                            acc_p[th][:, e] = pv * f4[:, e]
                            acc_dp[th][:, e] = pv * (acc_dp[th][:, e] * f4[:, e] - sD[q])
                    pack_acc_tile(p_frag, acc_p[th], t)
                    pack_acc_tile(ds_frag, acc_dp[th], t)
            mma_frags_nn(acc_dv[warp], p_frag, sdO, NT)
            mma_frags_nn(acc_dk[warp], ds_frag, sQ, NT)
            for t in range(8):
                row, col = warp * 16 + lanes // 4, t * 8 + (lanes % 4) * 2
                for r in range(2):
                    pair = ds_frag[t // 2][:, (t % 2) * 2 + r]
                    sdsT[row + 8 * r, col] = pair[:, 0]
                    sdsT[row + 8 * r, col + 1] = pair[:, 1]
        for warp in range(8):  # after the barrier: dQ of queries 16 qw.., columns c0..c0 + 31
            qw, c0 = warp % 4, (warp // 4) * 32
            acc_dq = [np.zeros((32, 4)) for _ in range(4)]
            for kt in range(8):
                af = ldmatrix_x4(sdsT, lambda l: (kt * 16 + (l % 8) + (l // 16) * 8, qw * 16 + ((l // 8) % 2) * 8),
                                 trans=True)
                for dp in range(2):
                    bf = ldmatrix_x4(sK, lambda l: (kt * 16 + (l % 8) + ((l // 8) % 2) * 8,
                                                    c0 + dp * 16 + (l // 16) * 8), trans=True)
                    mma(acc_dq[2 * dp], af, bf[:, 0], bf[:, 1])
                    mma(acc_dq[2 * dp + 1], af, bf[:, 2], bf[:, 3])
            for i in range(4):
                for r in range(2):
                    for l in range(32):
                        row = q0 + qw * 16 + l // 4 + 8 * r
                        if row >= T:
                            continue
                        c = c0 + i * 8 + (l % 4) * 2
                        dQ[row, c] = acc_dq[i][l, 2 * r] * scale
                        dQ[row, c + 1] = acc_dq[i][l, 2 * r + 1] * scale
    for warp in range(8):
        store_rows(dK, acc_dk[warp], (0, warp * 16), T, scale, D, NT)
        store_rows(dV, acc_dv[warp], (0, warp * 16), T, 1.0, D, NT)
    return dQ, dK, dV


def forward_lse(S2, key_real):
    """The forward epilogue's lse: running max m and sum l over 64-key blocks in the log2 domain
    (s = S scale log2e + 0 / -inf), lse = (m + log2 l) ln 2, or -inf when l = 0."""
    T = S2.shape[0]
    out = np.empty(T)
    for r in range(T):
        m, l = -np.inf, 0.0
        for k0 in range(0, T, 64):
            s = np.array([S2[r, k] if k < T and key_real[k] else -np.inf for k in range(k0, k0 + 64)])
            m_new = max(m, s.max())
            sub = 0.0 if m_new == -np.inf else m_new
            l = l * np.exp2(m - sub) + np.exp2(s - sub).sum()
            m = m_new
        out[r] = (m + math.log2(l)) * math.log(2) if l > 0 else -np.inf
    return out


def reference(Q, K, V, dO, key_real, scale, drop, seed, offset, head, N, start):
    """float64 autograd of dropout(softmax(scale Q K^T + mask)) V, dropout after the softmax
    (ops.h): dQ, dK, dV, out, the log-sum-exp of the scores and the dropout factors F [query, key]."""
    T = Q.shape[0]
    rows, keys = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    F = dropout_factor(drop, seed, offset + (head * N + start + rows) * T + keys)  # [query, key]
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (Q, K, V))
    Sref = scale * tq @ tk.T + torch.tensor(np.where(key_real, 0.0, -np.inf))
    out = (torch.softmax(Sref, dim=-1) * torch.tensor(F)) @ tv
    out.backward(torch.tensor(dO))
    lse = torch.logsumexp(Sref, dim=-1).detach().numpy()
    return tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy(), out.detach().numpy(), lse, F


def check_short(drop, T, offset):
    """bwd_short_kernel.cuh (the default up to 128 keys) against autograd: T <= 128 keys, head size 64."""
    rng = np.random.default_rng(31 + T)
    D, head, N, start, seed = 64, 1, 400, 40, 0x1234ABCD5678
    scale = 1.0 / math.sqrt(D)
    Q, K, V, dO = (rng.uniform(-1.5, 1.5, (T, D)) for _ in range(4))
    key_real = np.ones(T, dtype=bool)
    key_real[[k for k in (3, 64, 65, T - 1) if k < T]] = False
    dq, dk, dv, out, _, _ = reference(Q, K, V, dO, key_real, scale, drop, seed, offset, head, N, start)
    lse = forward_lse((Q @ K.T) * scale * LOG2E, key_real)
    delta = (dO * out).sum(axis=1)
    dQ, dK, dV = backward_short(Q, K, V, dO, lse, delta, key_real, scale, drop, seed, offset, head, N, start)
    for name, got, want in (("dQ", dQ, dq), ("dK", dK, dk), ("dV", dV, dv)):
        err = np.max(np.abs(got - want))
        assert not np.isnan(got).any(), (name, "short kernel", "rows left unwritten")
        assert err < 1e-10 * (1 + np.max(np.abs(want))), (name, "short kernel", T, drop, err)
    print(f"short-sequence kernel, T {T}, dropout {drop}: dQ, dK, dV match autograd"
          + (" (a Philox block per lane and tile)" if drop > 0 and quads_aligned(offset, T) else ""))


def check(drop, D=64, T=150, offset=977):
    """T = 150 and an odd offset: a Philox block per element (dK/dV) or pair (dQ); T = 152 with a
    four-aligned offset: the kernels' one block per lane and tile (dropout_factors_*_tile)."""
    rng = np.random.default_rng(7 + D + T)
    # The sequence is head 1 of 2, starting at row 40 of an N = 400-row batch (padded T):
    # the counters' h N + row term is exercised with nonzero values.
    head, N, start, seed = 1, 400, 40, 0x1234ABCD5678
    scale = 1.0 / math.sqrt(D)
    Q, K, V, dO = (rng.uniform(-1.5, 1.5, (T, D)) for _ in range(4))
    key_real = np.ones(T, dtype=bool)
    key_real[[3, 64, 65, 100, T - 1]] = False  # masked keys inside every tile
    dq, dk, dv, out, lse_ref, F = reference(Q, K, V, dO, key_real, scale, drop, seed, offset, head, N, start)
    lse = forward_lse((Q @ K.T) * scale * LOG2E, key_real)
    assert np.max(np.abs(lse - lse_ref)) < 1e-12, ("lse", np.max(np.abs(lse - lse_ref)))
    delta = (dO * out).sum(axis=1)
    # flash_bwd.cu's instances: recompute or atomic dQ; at head size 64 without dropout also the
    # three-CTA dK/dV kernel (K, V from smem, one part) and the dQ kernel of one part.
    dq_parts = 1 if D == 64 and drop == 0 else 2  # flash_bwd_dq_min_ctas: one part at three CTAs
    variants = [(False, False, dq_parts), (True, False, dq_parts)]
    if D == 64 and drop == 0:
        variants += [(False, True, dq_parts), (True, True, dq_parts)]
    for atomic_dq, kv_in_smem, dq_parts in variants:
        dQ, dK, dV = backward(Q, K, V, dO, lse, delta, key_real, scale, D, drop, seed, offset, head, N, start,
                              atomic_dq, kv_in_smem, dq_parts)
        how = ("atomic dQ" if atomic_dq else f"recompute dQ ({dq_parts} part{'s' if dq_parts > 1 else ''})") + (
            ", K and V in smem" if kv_in_smem else "")
        for name, got, want in (("dQ", dQ, dq), ("dK", dK, dk), ("dV", dV, dv)):
            err = np.max(np.abs(got - want))
            assert not np.isnan(got).any(), (name, how, "rows left unwritten")
            assert err < 1e-10 * (1 + np.max(np.abs(want))), (name, how, drop, err)
            print(f"head size {D}, dropout {drop}, {how}: {name}: max |emulated - autograd| {err:.2e} over {T} rows"
                  + (" (a Philox block per lane and tile)" if drop > 0 and quads_aligned(offset, T) else ""))
        assert np.abs(dK[key_real == False]).max() == 0 and np.abs(dV[key_real == False]).max() == 0  # noqa: E712
    if drop > 0:
        kept = (F > 0).mean()
        assert abs(kept - (1 - drop)) < 0.01, kept  # about 1 - p of the elements kept
        print(f"dropout {drop}: {100 * kept:.1f}% of {T * T} probabilities kept")


def check_shared_philox():
    """The shared-block helpers give every lane the factors dropout_factor gives each of its
    elements, for random aligned counter bases, wrap-around near 2^64 included."""
    rng = np.random.default_rng(11)
    lanes = np.arange(32)
    for trial in range(64):
        T = int(rng.integers(1, 64)) * 4
        offset = int(rng.integers(0, 2**62)) * 4 if trial % 2 else 2**64 - 4 * int(rng.integers(1, 4 * T * 40))
        seed, drop = int(rng.integers(0, 2**63)), float(rng.choice([0.1, 0.5, 0.9]))
        base_row, key0 = int(rng.integers(0, 1000)), int(rng.integers(0, 64)) * 8
        mod = 2**64
        # S tile: element 2h + c = row g + 8h, key key0 + 2 (lane % 4) + c
        row_g = [base_row + int(l) // 4 for l in lanes]  # Python ints: exact modulo 2^64
        f = dropout_factors_s_tile(drop, seed, np.array([(offset + r * T) % mod for r in row_g], dtype=np.uint64),
                                   np.uint64(8 * T), key0)
        for e in range(4):
            want = dropout_factor(drop, seed, np.array([(offset + (r + 8 * (e >> 1)) * T + key0 + 2 * (l % 4) + (e & 1))
                                                        % mod for r, l in zip(row_g, map(int, lanes))], dtype=np.uint64))
            assert np.array_equal(f[:, e], want), ("s tile", trial, e)
        # S^T tile: element c + 2h = query q0 + 2 (lane % 4) + c, key key4 + (lane >> 2) % 4 + 8h
        q_row = [base_row + 2 * (int(l) % 4) for l in lanes]
        key4 = np.array([key0 + 4 * (int(l) >> 4) for l in lanes])
        f = dropout_factors_st_tile(drop, seed, np.array([(offset + q * T) % mod for q in q_row], dtype=np.uint64),
                                    np.uint64(T), key4)
        for e in range(4):
            want = dropout_factor(drop, seed, np.array([(offset + (q + (e & 1)) * T + k + ((l >> 2) & 3) + 8 * (e >> 1))
                                                        % mod for q, k, l in zip(q_row, map(int, key4), map(int, lanes))],
                                                       dtype=np.uint64))
            assert np.array_equal(f[:, e], want), ("st tile", trial, e)
    print("shared Philox blocks: the S and S^T tile factors equal dropout_factor's, 64 random aligned bases")


def main():
    # Philox-4x32-10 against Random123's known answer (counter 0, key 0), as tests/test_train_ops.cc.
    z = np.zeros(1, dtype=np.uint64)
    assert [int(w[0]) for w in philox4x32_10(z, z, z, z, z[0], z[0])] == [0x6627e8d5, 0xe169c58d, 0xbc57ac4c,
                                                                        0x9b00dbd8]
    check(0.0)
    check(0.1)
    check(0.1, T=152, offset=4 << 32)  # four-aligned counters: dropout_factors_st_tile / _s_tile
    check_shared_philox()
    # The other instances (flash_bwd.cu): 80 (5 k-steps), 88 (padded to 96: zero columns 88..95
    # in the tiles, stores stop at 88) and 128.
    for D in (80, 88, 128):
        check(0.0, D)
    # The one-kernel backward of short sequences: one and two query tiles, a partial one,
    # dropout with per-element and shared Philox blocks.
    for T, drop, offset in ((128, 0.0, 977), (100, 0.1, 977), (128, 0.1, 8), (37, 0.1, 4 << 32)):
        check_short(drop, T, offset)
    # A row with no real key: lse = -inf -> lse2 = +inf -> P = 0, whatever the scores.
    assert forward_lse(np.zeros((3, 3)), np.zeros(3, dtype=bool))[0] == -np.inf
    assert np.exp2(5.0 * LOG2E - np.inf) == 0.0
    print("flash backward: dQ, dK, dV fragments, masks and dropout match autograd (T=150, D=64/80/88/128, 5 masked keys)")


if __name__ == "__main__":
    main()
