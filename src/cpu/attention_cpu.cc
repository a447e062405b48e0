// cpu/attention_cpu.cc: blocked online-softmax attention forward (fp32), three ISAs.
//
// Algorithm (one work item = sequence b, head h, a block of nq <= BQ queries):
//
//   qt[HS][BQ]  = (scale * log2 e) * Q_h^T            packed once per work item
//   m[BQ] = -inf, l[BQ] = 0, ot[HS][BQ] = 0 (set by the first block)
//   for each block of up to BK real keys of sequence b:
//     st[BK][BQ] = K_blk qt                           (S^T: keys x queries)
//     mnew = max(m, max_j st[j]); alpha = 2^(m - mnew); st = 2^(st - mnew)  (now P^T)
//     l = alpha l + sum_j st[j];  m = mnew
//     ot = alpha ot + V_blk^T st                      (O^T: HS x queries)
//   out[q][h*HS + d] = ot[d][q] / l[q]                (zeros when the sequence has no key)
//
// Everything is laid out with the queries innermost, so both products vectorise over
// queries: K and V elements are broadcast straight from their rows (any row stride, any
// HS, no repacking of K or V), the running max and sum are plain vertical vector ops, and
// the alpha rescale is one multiply per accumulator. Working in base 2 (log2 e folded into
// the packed queries) saves one multiply per exponential. Keys that the padding mask
// excludes are never visited: a cursor gathers the next BK real key rows into a table
// of row pointers, which also pads the block to a multiple of the register tile.
//
// Per-thread scratch is O(HS*BQ + BK*BQ) floats, independent of T; work items are
// handed out dynamically (atomic counter) from a list sorted by cost, longest first.
//
// The kernels are written once over GCC vector extensions (W floats per vector; W = 1 is
// plain scalar C++) and instantiated inside [[gnu::target, gnu::flatten]] entry points,
// one per ISA: flatten inlines the whole template tree into the entry point, so it is
// compiled for that entry point's ISA (zmm for avx512, ymm for avx2, scalar for generic),
// and a*b+c contracts to vfmadd where fma is enabled. The plain reference is
// ref::attention_forward (src/ref/attention_ref.cc), in float64.
//
// Tuning (AMD EPYC Zen5 "family 26", 1 thread, B=1..4, T=128..4096, NH=12, HS=64; see
// bench/attention_bench.cc). Register tiles are MR keys (or head dims) x NV vectors of
// queries, MR*NV accumulators:
//   avx512: MR 6 x NV 4 (24 of 32 zmm), BQ = 64 queries per work item, 128 keys per block
//   avx2:   MR 6 x NV 2 (12 of 16 ymm), BQ = 16
//   generic: MR 3 x NV 4 scalars,       BQ = 4
// Measured alternatives for avx512 (GFLOP/s at B=1 T=512): MR_qk 4: 165, 6: 163, 8: 150;
// MR_pv 4: 162, 8: 151; keys per block 64: 161, 256: 156 -- within noise except 8, so the
// smaller tiles stay. Q^T packing and the O^T write-back use W x W register transposes
// (scalar strided copies cost ~20% at T=128).
// Result, 2 threads, wall clock, quiet machine (measured zmm FMA peak ~442 GFLOP/s for 2
// cores): avx512 275 GFLOP/s at B=1 T=128, 288 at B=8 T=128, 326 at B=1 T=512, 301 at
// B=1 T=4096 (62-74% of peak); avx2 137-148; generic ~15 (1 thread).
#include "cpu/attention_cpu.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "unmask/error.h"

// The vector helpers below pass 32/64-byte vectors by value. They are always inlined into
// the target-attributed entry points, so no call ever crosses the ABI GCC warns about.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace unmask::cpu {
namespace {

// ---- vectors of W floats -------------------------------------------------------------

template <int W> struct SimdTypes {
  typedef float V __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
};
template <> struct SimdTypes<1> {
  using V = float;
  using I = int32_t;
};
template <int W> using Vec = typename SimdTypes<W>::V;

template <int W> [[gnu::always_inline]] inline Vec<W> vload(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W> [[gnu::always_inline]] inline void vstore(float* p, const Vec<W>& v) {
  std::memcpy(p, &v, sizeof v);
}
template <int W> [[gnu::always_inline]] inline Vec<W> vbcast(float x) {
  if constexpr (W == 1) {
    return x;
  } else {
    // `V{} + x` compiles to vaddss + vbroadcastss (the add keeps -0.0 exact). The forms
    // that should give one broadcast (`x - V{}`, a lane-wise init, a splat shuffle) make
    // GCC 12 emit merge-masked or stack-assembled broadcasts that run 1.2-5x slower.
    return Vec<W>{} + x;
  }
}
template <int W> [[gnu::always_inline]] inline Vec<W> vmax(const Vec<W>& a, const Vec<W>& b) {
  return a > b ? a : b;
}
template <int W> [[gnu::always_inline]] inline Vec<W> vmin(const Vec<W>& a, const Vec<W>& b) {
  return a < b ? a : b;
}

/// 2^x for x in [-127, 127] (clamped; 2^-127 and below give 0). Round to the nearest
/// integer n, then 2^f for f = x - n in [-1/2, 1/2] by the degree-7 Taylor polynomial of
/// e^(f ln 2) (truncation 5e-9 relative), then scale by 2^n through the exponent bits.
/// About 2 ulp against the correctly rounded result.
template <int W> [[gnu::always_inline]] inline Vec<W> vexp2(const Vec<W>& x_in) {
  using V = Vec<W>;
  using I = typename SimdTypes<W>::I;
  // Bounds first: `a > b ? a : b` returns x_in when it is NaN, so NaN scores propagate.
  const V x = vmin<W>(vbcast<W>(127.0f), vmax<W>(vbcast<W>(-127.0f), x_in));
  const V magic = vbcast<W>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  V n = (x + magic) - magic;
  V f = x - n;
  V p = vbcast<W>(1.525273380405984e-05f);
  p = p * f + 1.5403530393381608e-04f;
  p = p * f + 1.3333558146428443e-03f;
  p = p * f + 9.618129107628477e-03f;
  p = p * f + 5.550410866482158e-02f;
  p = p * f + 2.402265069591007e-01f;
  p = p * f + 6.931471805599453e-01f;
  p = p * f + 1.0f;
  I e;
  if constexpr (W == 1) {
    e = (static_cast<int32_t>(n) + 127) << 23;
    return p * std::bit_cast<float>(e);
  } else {
    e = (__builtin_convertvector(n, I) + 127) << 23;
    return p * (V)e;
  }
}

/// One butterfly stage of a W x W transpose: for each row pair (i, i + B), swap the
/// off-diagonal B-wide blocks. Stages B = W/2, W/4, ..., 1 transpose the whole block.
template <int W, int B, size_t... L>
[[gnu::always_inline]] inline Vec<W> shuffle_lo(const Vec<W>& a, const Vec<W>& b,
                                                std::index_sequence<L...>) {
  return __builtin_shufflevector(a, b, ((L & B) ? int(W + L - B) : int(L))...);
}
template <int W, int B, size_t... L>
[[gnu::always_inline]] inline Vec<W> shuffle_hi(const Vec<W>& a, const Vec<W>& b,
                                                std::index_sequence<L...>) {
  return __builtin_shufflevector(a, b, ((L & B) ? int(W + L) : int(L + B))...);
}
/// r[i][j] <- r[j][i] for a block of W vectors of W floats (W = 1: nothing to do).
template <int W, int B = W / 2> [[gnu::always_inline]] inline void transpose(Vec<W>* r) {
  if constexpr (B >= 1) {
    for (int i = 0; i < W; ++i) {
      if (i & B) continue;
      const Vec<W> a = r[i], b = r[i + B];
      r[i] = shuffle_lo<W, B>(a, b, std::make_index_sequence<W>{});
      r[i + B] = shuffle_hi<W, B>(a, b, std::make_index_sequence<W>{});
    }
    transpose<W, B / 2>(r);
  }
}

// ---- ISA configurations --------------------------------------------------------------

/// W floats per vector; register tiles of MRQ keys (S = K Q^T) or MRV head dims
/// (O^T += V^T P^T) by NV vectors of queries; BK keys per online-softmax step.
template <int W_, int NV_, int MRQ_, int MRV_, int BK_> struct Config {
  static constexpr int W = W_, NV = NV_, MRQ = MRQ_, MRV = MRV_;
  static constexpr int BQ = W * NV;                             // queries per work item
  static constexpr int64_t BK = BK_;                            // keys per block
  static constexpr int64_t BKP = (BK + MRQ - 1) / MRQ * MRQ;    // ... padded to MRQ
  static_assert(W >= 1 && NV >= 1 && MRQ >= 1 && MRV >= 1 && BK >= 1, "empty tile");
};
using ConfigGeneric = Config<1, 4, 3, 3, 128>;
using ConfigAvx2 = Config<8, 2, 6, 6, 128>;
using ConfigAvx512 = Config<16, 4, 6, 6, 128>;

// ---- work description ----------------------------------------------------------------

struct Job {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t ldq, ldk, ldv, ldo;
  int64_t hs;        // HS
  float qscale;      // scale * log2(e)
};

/// One (sequence, head, query block).
struct Item {
  int64_t q_row0;          // first query row of the block (absolute)
  int64_t k_row0;          // first key row of the sequence (absolute)
  int64_t k_len;           // key positions of the sequence
  const uint8_t* k_mask;   // [k_len], 1 = real, or null (all real)
  int64_t cost;            // nq * real keys, for ordering
  int32_t nq;              // queries in this block, 1..BQ
  int32_t head;            // h
};

/// Per-thread buffers, sized by scratch_layout.
struct Scratch {
  float* f = nullptr;            // see run_item for the carve-up
  const float** krow = nullptr;  // [BKP] row pointers into k (offset to the head)
  const float** vrow = nullptr;  // [BKP] row pointers into v
};

struct ScratchLayout {
  size_t floats, pointers;
};
template <class Cfg> ScratchLayout scratch_layout(int64_t hs) {
  // qt [HS][BQ], ot [HS][BQ], st [BKP][BQ], m, l, alpha [BQ] each
  return {size_t(2 * hs * Cfg::BQ + Cfg::BKP * Cfg::BQ + 3 * Cfg::BQ), size_t(2 * Cfg::BKP)};
}

// ---- micro-kernels -------------------------------------------------------------------

/// st[r][q] = sum_d krow[r][d] * qt[d][q], for r < MR keys and q < NV*W queries.
/// qt: [HS][ldq]; st: [MR][ldst].
template <int W, int MR, int NV>
[[gnu::always_inline]] inline void qk_tile(const float* const* krow, int64_t hs, const float* qt,
                                           int64_t ldq, float* st, int64_t ldst) {
  using V = Vec<W>;
  V acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NV; ++n) acc[r][n] = V{};
  const float* kr[MR];
  for (int r = 0; r < MR; ++r) kr[r] = krow[r];
  for (int64_t d = 0; d < hs; ++d) {
    V qv[NV];
    for (int n = 0; n < NV; ++n) qv[n] = vload<W>(qt + d * ldq + n * W);
    for (int r = 0; r < MR; ++r) {
      V kb = vbcast<W>(kr[r][d]);
      for (int n = 0; n < NV; ++n) acc[r][n] = kb * qv[n] + acc[r][n];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NV; ++n) vstore<W>(st + r * ldst + n * W, acc[r][n]);
}

/// ot[r][q] = alpha[q] * ot[r][q] (0 on the first block) + sum_j vrow[j][d0 + r] * pt[j][q], for r < MR head dims,
/// q < NV*W queries, j < nk keys. pt: [nk][ldp]; ot: [MR][ldo].
template <int W, int MR, int NV>
[[gnu::always_inline]] inline void pv_tile(bool first, const float* const* vrow, int64_t nk,
                                           int64_t d0, const float* pt, int64_t ldp,
                                           const float* alpha, float* ot, int64_t ldo) {
  using V = Vec<W>;
  V acc[MR][NV];
  for (int n = 0; n < NV; ++n) {
    V a = vload<W>(alpha + n * W);
    for (int r = 0; r < MR; ++r) acc[r][n] = first ? V{} : vload<W>(ot + r * ldo + n * W) * a;
  }
  for (int64_t j = 0; j < nk; ++j) {
    V p[NV];
    for (int n = 0; n < NV; ++n) p[n] = vload<W>(pt + j * ldp + n * W);
    const float* vr = vrow[j] + d0;
    for (int r = 0; r < MR; ++r) {
      V vb = vbcast<W>(vr[r]);
      for (int n = 0; n < NV; ++n) acc[r][n] = vb * p[n] + acc[r][n];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NV; ++n) vstore<W>(ot + r * ldo + n * W, acc[r][n]);
}

/// pv_tile for a tail of mr < MR head dims (compile-time MR picked by recursion).
template <int W, int MR, int NV>
[[gnu::always_inline]] inline void pv_tile_tail(int mr, bool first, const float* const* vrow,
                                                int64_t nk, int64_t d0, const float* pt,
                                                int64_t ldp, const float* alpha, float* ot,
                                                int64_t ldo) {
  if constexpr (MR >= 1) {
    if (mr == MR)
      pv_tile<W, MR, NV>(first, vrow, nk, d0, pt, ldp, alpha, ot, ldo);
    else
      pv_tile_tail<W, MR - 1, NV>(mr, first, vrow, nk, d0, pt, ldp, alpha, ot, ldo);
  }
}

/// One online-softmax step over the block's scores, in place: st[j] becomes
/// p[j] = 2^(st[j] - mnew) for j < nk and 0 for nk <= j < nkp (padding rows).
/// m, l, alpha: [NV*W], vectors over queries.
template <int W, int NV>
[[gnu::always_inline]] inline void softmax_step(float* st, int64_t nk, int64_t nkp, int64_t ldst,
                                                float* m, float* l, float* alpha) {
  using V = Vec<W>;
  for (int n = 0; n < NV; ++n) {
    float* s = st + n * W;
    V mx = vload<W>(s);
    for (int64_t j = 1; j < nk; ++j) mx = vmax<W>(mx, vload<W>(s + j * ldst));
    V mold = vload<W>(m + n * W);
    V mnew = vmax<W>(mold, mx);
    V a = vexp2<W>(mold - mnew);  // mold = -inf on the first block: a = 0
    V sum0 = V{}, sum1 = V{};
    int64_t j = 0;
    for (; j + 1 < nk; j += 2) {
      V p0 = vexp2<W>(vload<W>(s + j * ldst) - mnew);
      V p1 = vexp2<W>(vload<W>(s + (j + 1) * ldst) - mnew);
      vstore<W>(s + j * ldst, p0);
      vstore<W>(s + (j + 1) * ldst, p1);
      sum0 += p0;
      sum1 += p1;
    }
    if (j < nk) {
      V p0 = vexp2<W>(vload<W>(s + j * ldst) - mnew);
      vstore<W>(s + j * ldst, p0);
      sum0 += p0;
    }
    for (j = nk; j < nkp; ++j) vstore<W>(s + j * ldst, V{});
    vstore<W>(l + n * W, vload<W>(l + n * W) * a + (sum0 + sum1));
    vstore<W>(m + n * W, mnew);
    vstore<W>(alpha + n * W, a);
  }
}

// ---- one work item -------------------------------------------------------------------

/// Runs one work item with NV vectors of queries (NV*W >= it.nq).
template <class Cfg, int NV>
[[gnu::always_inline]] inline void run_item_nv(const Job& job, const Item& it, Scratch& s) {
  constexpr int W = Cfg::W, MRQ = Cfg::MRQ, MRV = Cfg::MRV, BQ = Cfg::BQ;
  constexpr int64_t BK = Cfg::BK, BKP = Cfg::BKP;
  const int64_t hs = job.hs;
  float* qt = s.f;               // [HS][BQ]  scaled Q^T
  float* ot = qt + hs * BQ;      // [HS][BQ]  unnormalised O^T
  float* st = ot + hs * BQ;      // [BKP][BQ] S^T, then P^T
  float* m = st + BKP * BQ;      // [BQ] running max (base-2 units)
  float* l = m + BQ;             // [BQ] running sum
  float* alpha = l + BQ;         // [BQ] rescale of this step
  const int64_t col = int64_t(it.head) * hs;

  // Pack Q^T in W x W blocks (rows beyond nq are zeros: harmless lanes never written out).
  const int64_t hs_full = hs / W * W;
  for (int g = 0; g < NV; ++g) {
    const float* qr[W];
    for (int i = 0; i < W; ++i)
      qr[i] = g * W + i < it.nq ? job.q + (it.q_row0 + g * W + i) * job.ldq + col : nullptr;
    for (int64_t c = 0; c < hs_full; c += W) {
      Vec<W> r[W];
      for (int i = 0; i < W; ++i)
        r[i] = qr[i] ? vload<W>(qr[i] + c) * job.qscale : Vec<W>{};
      transpose<W>(r);
      for (int i = 0; i < W; ++i) vstore<W>(qt + (c + i) * BQ + g * W, r[i]);
    }
    for (int64_t d = hs_full; d < hs; ++d)
      for (int i = 0; i < W; ++i) qt[d * BQ + g * W + i] = qr[i] ? qr[i][d] * job.qscale : 0.0f;
  }
  for (int q = 0; q < BQ; ++q) {
    m[q] = -INFINITY;
    l[q] = 0.0f;
  }

  int64_t t = 0;         // key cursor (position within the sequence)
  bool t_first = true;   // no key block seen yet (ot is uninitialised until the first)
  for (;;) {
    // Gather the next block of real keys.
    int64_t nk = 0;
    for (; t < it.k_len && nk < BK; ++t) {
      if (it.k_mask && !it.k_mask[t]) continue;
      s.krow[nk] = job.k + (it.k_row0 + t) * job.ldk + col;
      s.vrow[nk] = job.v + (it.k_row0 + t) * job.ldv + col;
      ++nk;
    }
    if (nk == 0) break;
    const bool first = t_first;
    t_first = false;
    const int64_t nkp = (nk + MRQ - 1) / MRQ * MRQ;
    for (int64_t j = nk; j < nkp; ++j) {  // padding rows: any valid row; p = 0 there
      s.krow[j] = s.krow[0];
      s.vrow[j] = s.vrow[0];
    }

    for (int64_t j0 = 0; j0 < nkp; j0 += MRQ)
      qk_tile<W, MRQ, NV>(s.krow + j0, hs, qt, BQ, st + j0 * BQ, BQ);
    softmax_step<W, NV>(st, nk, nkp, BQ, m, l, alpha);
    int64_t d0 = 0;
    for (; d0 + MRV <= hs; d0 += MRV)
      pv_tile<W, MRV, NV>(first, s.vrow, nkp, d0, st, BQ, alpha, ot + d0 * BQ, BQ);
    if (d0 < hs)
      pv_tile_tail<W, MRV - 1, NV>(int(hs - d0), first, s.vrow, nkp, d0, st, BQ, alpha,
                                   ot + d0 * BQ, BQ);
  }

  // out = O / l, transposed back in W x W blocks. A sequence without a real key gets
  // zeros (ot was never written).
  if (t_first) {
    for (int q = 0; q < it.nq; ++q)
      std::memset(job.out + (it.q_row0 + q) * job.ldo + col, 0, sizeof(float) * size_t(hs));
    return;
  }
  for (int g = 0; g < NV; ++g) {
    float* orow[W];
    float inv[W];
    for (int i = 0; i < W; ++i) {
      const int q = g * W + i;
      orow[i] = q < it.nq ? job.out + (it.q_row0 + q) * job.ldo + col : nullptr;
      inv[i] = 1.0f / l[q];  // l >= 1: the running max contributes 2^0
    }
    for (int64_t c = 0; c < hs_full; c += W) {
      Vec<W> r[W];
      for (int i = 0; i < W; ++i) r[i] = vload<W>(ot + (c + i) * BQ + g * W);
      transpose<W>(r);
      for (int i = 0; i < W; ++i)
        if (orow[i]) vstore<W>(orow[i] + c, r[i] * inv[i]);
    }
    for (int64_t d = hs_full; d < hs; ++d)
      for (int i = 0; i < W; ++i)
        if (orow[i]) orow[i][d] = ot[d * BQ + g * W + i] * inv[i];
  }
}

/// Picks NV = ceil(nq / W) so short blocks (T = 7) do not pay for BQ queries.
template <class Cfg, int NV = Cfg::NV>
[[gnu::always_inline]] inline void run_item(const Job& job, const Item& it, Scratch& s) {
  if constexpr (NV > 1) {
    if (it.nq <= (NV - 1) * Cfg::W) return run_item<Cfg, NV - 1>(job, it, s);
  }
  run_item_nv<Cfg, NV>(job, it, s);
}

// The per-ISA entry points: everything above is inlined into each and compiled for its ISA.
[[gnu::flatten]] void item_generic(const Job& job, const Item& it, Scratch& s) {
  run_item<ConfigGeneric>(job, it, s);
}
[[gnu::target("avx2,fma"), gnu::flatten]] void item_avx2(const Job& job, const Item& it,
                                                         Scratch& s) {
  run_item<ConfigAvx2>(job, it, s);
}
[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"), gnu::flatten]] void item_avx512(
    const Job& job, const Item& it, Scratch& s) {
  run_item<ConfigAvx512>(job, it, s);
}

struct IsaEntry {
  void (*item)(const Job&, const Item&, Scratch&);
  int bq;
  ScratchLayout (*layout)(int64_t hs);
};
IsaEntry isa_entry(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::avx512: return {item_avx512, ConfigAvx512::BQ, scratch_layout<ConfigAvx512>};
    case AttentionIsa::avx2: return {item_avx2, ConfigAvx2::BQ, scratch_layout<ConfigAvx2>};
    case AttentionIsa::generic: break;
  }
  return {item_generic, ConfigGeneric::BQ, scratch_layout<ConfigGeneric>};
}

size_t scratch_bytes(const ScratchLayout& lay) {
  // 64 bytes of alignment slack for each of the three arrays
  return lay.floats * sizeof(float) + lay.pointers * sizeof(float*) + 3 * 64;
}

AttentionIsa isa_from_env() {
  const char* env = std::getenv("UNMASK_CPU_ISA");
  AttentionIsa want = AttentionIsa::avx512;
  if (env && *env) {
    std::string_view e(env);
    if (e == "generic") want = AttentionIsa::generic;
    else if (e == "avx2") want = AttentionIsa::avx2;
    else if (e == "avx512") want = AttentionIsa::avx512;
    else
      throw Error("UNMASK_CPU_ISA=", e, ": expected generic, avx2 or avx512");
  }
  if (want == AttentionIsa::avx512 && !attention_isa_supported(AttentionIsa::avx512))
    want = AttentionIsa::avx2;
  if (want == AttentionIsa::avx2 && !attention_isa_supported(AttentionIsa::avx2))
    want = AttentionIsa::generic;
  return want;
}

}  // namespace

const char* attention_isa_name(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::generic: return "generic";
    case AttentionIsa::avx2: return "avx2";
    case AttentionIsa::avx512: return "avx512";
  }
  return "?";
}

bool attention_isa_supported(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::generic: return true;
    case AttentionIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AttentionIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return false;
}

AttentionIsa attention_isa_default() {
  static const AttentionIsa isa = isa_from_env();
  return isa;
}

size_t attention_scratch_bytes(int64_t head_size, AttentionIsa isa) {
  return scratch_bytes(isa_entry(isa).layout(head_size));
}

AttentionStats attention_forward(Context& ctx, const AttentionParams& p) {
  return attention_forward(ctx, p, attention_isa_default());
}

AttentionStats attention_forward(Context& ctx, const AttentionParams& p, AttentionIsa isa) {
  if (!attention_isa_supported(isa)) isa = AttentionIsa::generic;
  const IsaEntry entry = isa_entry(isa);
  const int64_t hs = p.head_size, nh = p.num_heads, bq = entry.bq;
  const Job job{p.q, p.k, p.v, p.out, p.ldq, p.ldk, p.ldv, p.ldo, hs,
                float(double(p.scale) * 1.4426950408889634)};

  // Work items: every (sequence, head, block of bq queries).
  std::vector<Item> items;
  for (int64_t b = 0; b < p.batch; ++b) {
    int64_t row0, len;
    const uint8_t* mask = nullptr;
    if (p.cu_seqlens) {
      row0 = p.cu_seqlens[b];
      len = p.cu_seqlens[b + 1] - row0;
    } else {
      row0 = b * p.seq_len;
      len = p.seq_len;
      if (p.key_mask) mask = p.key_mask + b * p.seq_len;
    }
    int64_t real = len;
    if (mask) real = std::count_if(mask, mask + len, [](uint8_t x) { return x != 0; });
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t q0 = 0; q0 < len; q0 += bq) {
        const int32_t nq = int32_t(std::min(bq, len - q0));
        items.push_back({row0 + q0, row0, len, mask, nq * std::max<int64_t>(real, 1), nq,
                         int32_t(h)});
      }
  }
  // Longest first, so the dynamic schedule ends with the small items.
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.cost > b.cost; });

  AttentionStats stats;
  stats.isa = isa;
  stats.work_items = int64_t(items.size());
  stats.scratch_bytes_per_thread = scratch_bytes(entry.layout(hs));
  stats.threads = int(std::min<int64_t>(ctx.num_threads(), stats.work_items));
  if (items.empty()) return stats;

  std::atomic<int64_t> next{0};
  const ScratchLayout lay = entry.layout(hs);
  ctx.parallel_for(stats.threads, [&](int64_t, int64_t) {
    // One scratch allocation per thread per call: O(HS*BQ + BK*BQ), never O(T).
    std::unique_ptr<float[]> fbuf(new float[lay.floats + 16]);
    std::unique_ptr<const float*[]> pbuf(new const float*[lay.pointers]);
    Scratch s;
    void* aligned = fbuf.get();
    size_t space = (lay.floats + 16) * sizeof(float);
    s.f = static_cast<float*>(std::align(64, lay.floats * sizeof(float), aligned, space));
    s.krow = pbuf.get();
    s.vrow = pbuf.get() + lay.pointers / 2;
    for (;;) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= int64_t(items.size())) break;
      entry.item(job, items[size_t(i)], s);
    }
  });
  return stats;
}

}  // namespace unmask::cpu
