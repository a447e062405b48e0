// core/philox.h: the counter-based random numbers behind dropout (host and CUDA device code).
//
// Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a bijection of a 128-bit counter under a 64-bit key, ten rounds of two 32x32->64
// multiplications with a Weyl-sequence key schedule. Tested against Random123's published
// known-answer vectors (tests/test_train_ops.cc). Being a pure function of (key, counter), it
// gives every element its own random number without state, so a mask is the same whatever the
// device, the thread count or the order of evaluation, and a backward pass recomputes the
// forward's mask instead of storing it.
//
// unmask's uniform stream (the contract of ops::dropout and ops::attention_forward_train):
//   philox_uniform(seed, i) for a 64-bit element counter i:
//     block = i >> 2, lane = i & 3
//     r     = philox4x32_10(counter = {lo32(block), hi32(block), 0, 0},
//                           key     = {lo32(seed),  hi32(seed)})
//     u     = (r[lane] >> 8) * 2^-24          (the top 24 bits: exact in a float, u in [0, 1))
// Four consecutive counters share one Philox evaluation, so vectorised and CUDA kernels
// evaluate one block per four elements (philox_block + philox_uniform_from_bits).
//
//   const float u = philox_uniform(seed, offset + i);   // element i kept iff u >= p
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define UNMASK_HD __host__ __device__
#else
#define UNMASK_HD
#endif

// Internal linkage on purpose: the CPU kernels include this header in translation units
// compiled with different ISA flags (src/cpu/kernels_*.cc); an inline function with external
// linkage could have its AVX-512 copy picked by the linker for the generic build (the ODR note
// in src/cpu/kernels_impl.inc). Each translation unit keeps its own copy instead.
#define UNMASK_PHILOX_FN static inline UNMASK_HD

namespace unmask {

/// Four 32-bit words: a Philox counter or output.
struct Philox4x32 {
  uint32_t w[4];
};

namespace philox_detail {
constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key increments (golden ratio, sqrt 3 - 1)

UNMASK_PHILOX_FN Philox4x32 round(Philox4x32 c, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(kM0) * c.w[0];
  const uint64_t p1 = uint64_t(kM1) * c.w[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  return Philox4x32{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
}
}  // namespace philox_detail

/// Philox-4x32-10 of `counter` under the key (k0, k1): ten rounds, the key bumped by
/// (kW0, kW1) between rounds.
UNMASK_PHILOX_FN Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += philox_detail::kW0;
      k1 += philox_detail::kW1;
    }
    counter = philox_detail::round(counter, k0, k1);
  }
  return counter;
}

/// The four raw outputs for element counters 4*block .. 4*block + 3 (see the header comment).
UNMASK_PHILOX_FN Philox4x32 philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10(Philox4x32{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}},
                       uint32_t(seed), uint32_t(seed >> 32));
}

/// One raw output word -> a float in [0, 1): its top 24 bits times 2^-24 (exact).
UNMASK_PHILOX_FN float philox_uniform_from_bits(uint32_t bits) {
  return float(bits >> 8) * (1.0f / 16777216.0f);
}

/// The uniform number of element counter `counter` under `seed`.
UNMASK_PHILOX_FN float philox_uniform(uint64_t seed, uint64_t counter) {
  const Philox4x32 r = philox_block(seed, counter >> 2);
  return philox_uniform_from_bits(r.w[counter & 3]);
}

/// The uniform numbers of the consecutive counters `counter` and `counter + 1`, equal to
/// philox_uniform(seed, counter) and philox_uniform(seed, counter + 1): one Philox evaluation
/// when both lie in one block of four (counter & 3 != 3), two when the pair straddles blocks.
/// For the attention kernels, whose threads hold pairs of adjacent keys (an mma accumulator
/// fragment's two columns): half the evaluations of two philox_uniform calls, or all of them
/// with an odd counter base. The word is chosen by selects, not by a dynamic index into r.w
/// (which would put r in local memory on the GPU).
UNMASK_PHILOX_FN void philox_uniform_pair(uint64_t seed, uint64_t counter, float& u0, float& u1) {
  const Philox4x32 r = philox_block(seed, counter >> 2);
  const uint32_t lane = uint32_t(counter & 3);
  const uint32_t first = lane == 0 ? r.w[0] : lane == 1 ? r.w[1] : lane == 2 ? r.w[2] : r.w[3];
  uint32_t second;
  if (lane == 3)
    second = philox_block(seed, (counter + 1) >> 2).w[0];  // counter + 1 wraps as philox_uniform's does
  else
    second = lane == 0 ? r.w[1] : lane == 1 ? r.w[2] : r.w[3];
  u0 = philox_uniform_from_bits(first);
  u1 = philox_uniform_from_bits(second);
}

}  // namespace unmask
