// cuda/flash/fwd_persistent_kernel.cuh: the flash forward with persistent CTAs (opt-in,
// UNMASK_FLASH_PERSISTENT=1, head size 64; not yet measured).
//
// Why: at short sequences the one-CTA-per-tile kernel (fwd_kernel.cuh) is latency-bound. BERT-base
// at batch 256 x seq 128 on an H200 (Nsight Compute, 2026-11-27): 98.5 us a layer against a
// ~45 us memory floor, 40% of DRAM bandwidth, 48% SM throughput, two 256-thread CTAs an SM
// (128 registers). Each CTA loads its Q, K and V (48 KB), waits, computes two key blocks, stores,
// exits; the next CTA on the SM starts its loads only then, so an SM has at most ~96 KB in
// flight at a CTA's start and nothing while it computes and stores. Here gridDim.x CTAs (the
// number that fit the GPU at once) walk the tiles, and while a CTA computes the last key block
// of one tile it already loads the next tile's Q and first K/V block: the loads of tile i+1 run
// under the compute and the stores of tile i.
//
// Tiles: (query block m, head h, sequence b), numbered t = (b NH + h) m_blocks + m; CTA c takes
// t = c, c + gridDim.x, c + 2 gridDim.x, ... and skips tiles past their sequence's end (packed
// batches). Every tile is computed by the same per-warp code as in flash_fwd_kernel
// (fwd_key_block, fwd_store_rows) in the same order of key blocks: the output, the lse and the
// dropout mask are the same bits as flash_fwd_kernel's with the same traits.
//
// Steps: one per (tile, key block), K/V buffers alternating step by step across tiles; Q double-
// buffered across tiles (a tile of a single key block prefetches the next tile's Q in the same
// step as it reads its own Q fragments). Step s:
//   prefetch (cp.async, one commit group): K/V block j+1 of this tile into buffer (s+1) % 2, or,
//     at the tile's last block, the next tile's Q into the other Q buffer and its K/V block 0;
//     the key bias of what was prefetched (plain stores into the other bias buffer)
//   wait until only that group may be in flight; barrier
//   (first block of a tile) Q fragments from this tile's Q buffer
//   S, softmax, P V on buffer s % 2
//   barrier (buffer s % 2 is refilled by the prefetch of step s + 1)
// and after a tile's last step its rows are normalised and stored from registers (no shared
// memory), the state reset.
#pragma once
#include "cuda/flash/fwd_kernel.cuh"

namespace unmask::cuda::flash {

/// The first tile t' >= t in steps of `stride` with query rows inside its sequence; returns it
/// (and fills `tile`), or n_tiles when there is none.
template <int BM>
__device__ __forceinline__ int next_fwd_tile(const FlashFwdParams& p, int m_blocks, int n_tiles, int t, int stride,
                                             FwdTile& tile) {
  for (; t < n_tiles; t += stride) {
    tile = fwd_tile<BM>(p, t % m_blocks, (t / m_blocks) % p.num_heads, t / (m_blocks * p.num_heads));
    if (tile.q0 < tile.seqlen) return t;
  }
  return n_tiles;
}

/// Issues the loads of key block j of `tile` (K and V tiles into sKb, sVb: one cp.async group
/// with the Q tile when sQ is non-null) and writes its key bias.
template <typename Kt>
__device__ __forceinline__ void fwd_issue_block(const FlashFwdParams& p, const FwdTile& tile, int j,
                                                typename Kt::Element* sQ, typename Kt::Element* sKb,
                                                typename Kt::Element* sVb, float* bias, int tid) {
  using T = typename Kt::Element;
  constexpr int BM = Kt::kBlockM, BN = Kt::kBlockN, D = Kt::kHeadDim;
  if (sQ)
    load_tile<Kt, BM>(sQ, fwd_head_row<T, D>(p.q, tile.seq_start + tile.q0, p.q_row_stride, tile.head),
                      p.q_row_stride, min(BM, tile.seqlen - tile.q0), tid);
  const int kv0 = j * BN;
  const T* gK = fwd_head_row<T, D>(p.k, tile.seq_start + kv0, p.k_row_stride, tile.head);
  const T* gV = fwd_head_row<T, D>(p.v, tile.seq_start + kv0, p.v_row_stride, tile.head);
  load_tile<Kt, BN>(sKb, gK, p.k_row_stride, min(BN, tile.seqlen - kv0), tid);
  load_tile<Kt, BN>(sVb, gV, p.v_row_stride, min(BN, tile.seqlen - kv0), tid);
  cp_async_commit();
  load_key_bias<Kt>(bias, p, tile.b, kv0, tile.seqlen, tid);
}

/// CTAs an SM must hold: two of 256 threads (128 registers, as ptxas gives the one-tile kernel's
/// 128-row instance), three of 128 (170 registers). Without the bound ptxas takes 167 registers
/// for the 128-row form: one CTA an SM, which would undo the point of the kernel.
template <typename Kt>
constexpr int kFwdPersistentMinCtas = Kt::kThreads >= 256 ? 2 : 3;

/// Grid: (number of CTAs, 1, 1), at most what fits the GPU at once (the launcher's choice);
/// m_blocks = ceil(max_seqlen / kBlockM).
template <typename Kt>
__global__ void __launch_bounds__(Kt::kThreads, kFwdPersistentMinCtas<Kt>) flash_fwd_persistent_kernel(const __grid_constant__ FlashFwdParams p,
                                                                            int m_blocks) {
  using T = typename Kt::Element;
  constexpr int BM = Kt::kBlockM, BN = Kt::kBlockN, LDS = Kt::kSmemStride;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);                      // [2][BM][LDS]
  T* sK = sQ + 2 * BM * LDS;                                   // [2][BN][LDS]
  T* sV = sK + 2 * BN * LDS;                                   // [2][BN][LDS]
  float* sBias = reinterpret_cast<float*>(sV + 2 * BN * LDS);  // [2][BN]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_tiles = m_blocks * p.num_heads * p.batch;
  const int stride = int(gridDim.x);

  FwdTile cur;
  int t = next_fwd_tile<BM>(p, m_blocks, n_tiles, int(blockIdx.x), stride, cur);
  if (t >= n_tiles) return;  // the whole CTA (t depends on blockIdx only): no barrier is left waiting

  int buf = 0, qbuf = 0;
  fwd_issue_block<Kt>(p, cur, 0, sQ, sK, sV, sBias, tid);

  FwdWarpState<Kt> st;
  fwd_reset(st);
  const bool quad_dropout = dropout_quads_aligned(p.dropout_offset, p.max_seqlen);
  while (true) {
    const int n_blocks = (cur.seqlen + BN - 1) / BN;
    FwdTile nxt;
    int tn = n_tiles;
    for (int j = 0; j < n_blocks; ++j) {
      bool prefetched = true;
      if (j + 1 < n_blocks) {
        fwd_issue_block<Kt>(p, cur, j + 1, nullptr, sK + (buf ^ 1) * BN * LDS, sV + (buf ^ 1) * BN * LDS,
                            sBias + (buf ^ 1) * BN, tid);
      } else {
        tn = next_fwd_tile<BM>(p, m_blocks, n_tiles, t + stride, stride, nxt);
        if (tn < n_tiles)
          fwd_issue_block<Kt>(p, nxt, 0, sQ + (qbuf ^ 1) * BM * LDS, sK + (buf ^ 1) * BN * LDS,
                              sV + (buf ^ 1) * BN * LDS, sBias + (buf ^ 1) * BN, tid);
        else
          prefetched = false;
      }
      if (prefetched)
        cp_async_wait<1>();  // this step's block (and its tile's Q) landed; the prefetch may be in flight
      else
        cp_async_wait<0>();
      __syncthreads();

      if (j == 0) fwd_load_q(st, sQ + qbuf * BM * LDS, warp, lane);
      fwd_key_block(st, sK + buf * BN * LDS, sV + buf * BN * LDS, sBias + buf * BN, p, j, cur.head, cur.seq_start,
                    cur.q0, quad_dropout, warp, lane);
      __syncthreads();  // buffer `buf` (and its bias) is refilled by the next step's prefetch
      buf ^= 1;
    }
    fwd_store_rows(st, p, fwd_out_rows<Kt>(p, cur.head, cur.seq_start, cur.q0), cur.head, cur.seq_start, cur.q0,
                   cur.seqlen, warp, lane);
    if (tn >= n_tiles) break;
    fwd_reset(st);
    cur = nxt;
    t = tn;
    qbuf ^= 1;
  }
}

}  // namespace unmask::cuda::flash
