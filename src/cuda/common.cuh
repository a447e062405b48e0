// cuda/common.cuh: what every CUDA kernel file of the backend shares.
//
//   - CUDA_CHECK / CUBLAS_CHECK / CUDA_CHECK_LAUNCH (cuda/check.h): throw unmask::Error with the
//     statement text and file:line.
//   - ceil_div, is_aligned: grid and precondition helpers for launchers.
//   - Storage types (float, __nv_bfloat16, __half) with to_float / from_float conversions.
//   - Packed128<T>: 16 bytes of T, loaded and stored with one 128-bit instruction
//     (llm.c `x128`): 4 floats or 8 bf16/fp16; rows_vectorizable: whether rows allow it.
//   - warp_sum / warp_max (butterfly shuffles, every lane gets the result) and block_sum /
//     block_max (through 32 floats of shared memory).
//
// Kernels trust their inputs; launchers check the preconditions these helpers assume (16-byte
// alignment for Packed128, blockDim a multiple of 32 for the block reductions).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/philox.h"
#include "cuda/check.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

constexpr int kWarpSize = 32;

/// ceil(a / b) for positive b; the grid-size helper of every launcher.
template <typename A, typename B>
__host__ __device__ constexpr A ceil_div(A a, B b) {
  return (a + A(b) - 1) / A(b);
}

/// q = a / b, r = a - q b for a >= 0, b > 0. The elementwise kernels' grid-stride index -> (row,
/// column) step: with both below 2^32 (every realistic tensor) a 32-bit division, which costs
/// a fraction of the 64-bit one (a long software sequence on the GPU: it dominated the
/// instruction count of the 16-byte row kernels, ~9 instructions per bf16 element).
__device__ __forceinline__ void divmod_nonneg(int64_t a, int64_t b, int64_t& q, int64_t& r) {
  if (((a | b) >> 32) == 0) {
    const uint32_t q32 = uint32_t(a) / uint32_t(b);
    q = int64_t(q32);
    r = a - int64_t(q32) * b;
  } else {
    q = a / b;
    r = a - q * b;
  }
}

/// Row n and first column c of chunk i of kVec columns, rows of chunks_per_row chunks; flat
/// (every operand contiguous, ld = C): n = 0 and c = kVec i, the N C values as one row.
template <int kVec>
__device__ __forceinline__ void chunk_position(int64_t i, int64_t chunks_per_row, bool flat, int64_t& n, int64_t& c) {
  if (flat) {
    n = 0, c = i * kVec;
    return;
  }
  divmod_nonneg(i, chunks_per_row, n, c);
  c *= kVec;
}

/// True when p is aligned to `bytes` (a power of two).
inline bool is_aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0; }

/// A non-negative property of the current device, read(dev) once per device and Tag (devices
/// 0..63; others are read on every call). For launchers that choose a kernel or a grid by the
/// device's properties: no driver query on their every call.
template <typename Tag, typename Read>
int current_device_cached(Read&& read) {
  static std::atomic<int> cached[64];  // value + 1, 0 = not read yet
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int value = dev < 64 ? cached[dev].load(std::memory_order_relaxed) - 1 : -1;
  if (value < 0) {
    value = read(dev);
    if (dev < 64) cached[dev].store(value + 1, std::memory_order_relaxed);
  }
  return value;
}

/// Device attribute `Attr` of the current device, read once per device (current_device_cached).
template <cudaDeviceAttr Attr>
int current_device_attribute() {
  struct Tag;
  return current_device_cached<Tag>([](int dev) {
    int value = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&value, Attr, dev));
    return value;
  });
}

// ---- storage types -----------------------------------------------------------------------

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

/// The DType of a storage type (host side, for messages and dispatch).
template <typename T> struct storage_dtype;
template <> struct storage_dtype<float> { static constexpr DType value = DType::f32; };
template <> struct storage_dtype<__nv_bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct storage_dtype<__half> { static constexpr DType value = DType::f16; };

// ---- 128-bit packed loads and stores ---------------------------------------------------------

/// 16 bytes of T (4 floats or 8 halves), moved with a single 128-bit load or store.
template <typename T>
struct alignas(16) Packed128 {
  static constexpr int size = int(16 / sizeof(T));
  T v[size];

  __device__ __forceinline__ static Packed128 load(const T* p) {  // p: 16-byte aligned
    Packed128 r;
    *reinterpret_cast<int4*>(r.v) = *reinterpret_cast<const int4*>(p);
    return r;
  }
  /// Read-only, evict-first streaming load (ld.global.cs): for data read once.
  __device__ __forceinline__ static Packed128 load_cs(const T* p) {
    Packed128 r;
    *reinterpret_cast<int4*>(r.v) = __ldcs(reinterpret_cast<const int4*>(p));
    return r;
  }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(v); }
  __device__ __forceinline__ float f(int i) const { return to_float(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = from_float<T>(x); }
};

/// p[c .. c + kVec) as floats (a LayerNorm's gamma or beta chunk): whole 16-byte loads where kVec
/// values of TP fill 16-byte words (then p must be 16-byte aligned, c a multiple of kVec: the
/// launchers put gamma and beta in rows_vectorizable's list), else one load per value. A warp's
/// lanes read chunks kVec apart, so one scalar load a value touched 4-8 cache lines per warp
/// instruction: the L1 wavefronts of 16 strided gamma/beta loads per chunk, not DRAM, bounded
/// the LayerNorm rows (H200: 53 us per 32768 x 768 bf16 launch, ~2.9 TB/s).
template <int kVec, typename TP>
__device__ __forceinline__ void load_floats(const TP* p, int c, float* out) {
  constexpr int kPer = Packed128<TP>::size;
  if constexpr (kVec >= kPer && kVec % kPer == 0) {
#pragma unroll
    for (int l = 0; l < kVec / kPer; ++l) {
      const Packed128<TP> w = Packed128<TP>::load(p + c + l * kPer);
#pragma unroll
      for (int j = 0; j < kPer; ++j) out[l * kPer + j] = w.f(j);
    }
  } else {
#pragma unroll
    for (int j = 0; j < kVec; ++j) out[j] = to_float(p[c + j]);
  }
}

/// True when rows of C elements of T can move as Packed128: C and every (pointer, row stride)
/// pair a multiple of 16 bytes. A null pointer (an absent residual) does not count.
template <typename T>
bool rows_vectorizable(int64_t C, std::initializer_list<std::pair<const void*, int64_t>> rows) {
  constexpr int V = Packed128<T>::size;
  if (C % V != 0) return false;
  for (const auto& [ptr, ld] : rows)
    if (ptr && (ld % V != 0 || !is_aligned(ptr, 16))) return false;
  return true;
}

// ---- attention sequences and key masks (the flash, naive and training attention kernels) -------

/// Sequence b's first row and length: packed (device cu_seqlens [B+1]) or padded (rows b T ..
/// b T + T - 1, T = max_seqlen).
__device__ __forceinline__ void sequence_bounds(const int32_t* cu_seqlens, int max_seqlen, int b, int64_t& start,
                                                int& len) {
  if (cu_seqlens) {
    start = cu_seqlens[b];
    len = cu_seqlens[b + 1] - cu_seqlens[b];
  } else {
    start = int64_t(b) * max_seqlen;
    len = max_seqlen;
  }
}

/// Whether element `off` of a key mask with `elem_bytes`-wide elements (1: u8/bool, 4: i32,
/// 8: i64) is nonzero, i.e. a real key.
__device__ __forceinline__ bool mask_is_set(const void* mask, int elem_bytes, int64_t off) {
  if (elem_bytes == 1) return static_cast<const uint8_t*>(mask)[off] != 0;
  if (elem_bytes == 4) return static_cast<const int32_t*>(mask)[off] != 0;
  return static_cast<const int64_t*>(mask)[off] != 0;
}

/// The dropout factor of an element whose uniform number is u (ops.h: kept iff u >= p): the
/// factor the probability is multiplied by, 1 / (1 - p) or 0.
__device__ __forceinline__ float dropout_factor_of(float p, float u) { return u >= p ? 1.0f / (1.0f - p) : 0.0f; }

/// Attention dropout of element `counter` (u = philox_uniform(seed, counter)).
__device__ __forceinline__ float dropout_factor(float p, uint64_t seed, uint64_t counter) {
  return dropout_factor_of(p, philox_uniform(seed, counter));
}

/// The factors of the adjacent elements `counter` and `counter + 1` (philox_uniform_pair: one
/// Philox evaluation for both unless they straddle a block of four).
__device__ __forceinline__ void dropout_factor_pair(float p, uint64_t seed, uint64_t counter, float& f0, float& f1) {
  float u0, u1;
  philox_uniform_pair(seed, counter, u0, u1);
  f0 = dropout_factor_of(p, u0);
  f1 = dropout_factor_of(p, u1);
}

/// Whether the attention kernels may take their dropout factors a Philox block per four
/// elements (dropout_factors_s_tile / _st_tile): every (row, 4-aligned key) counter base is a
/// multiple of 4 when the offset and max_seqlen are (the layers' site offsets are multiples of
/// 2^32; BERT's sequence lengths are multiples of 8).
__device__ __forceinline__ bool dropout_quads_aligned(uint64_t offset, int max_seqlen) {
  return offset % 4 == 0 && max_seqlen % 4 == 0;
}

/// dropout_factor_of the uniform number a raw Philox word gives.
__device__ __forceinline__ float dropout_keep_factor(float p, uint32_t bits) {
  return dropout_factor_of(p, philox_uniform_from_bits(bits));
}

/// The dropout factors of the four elements a thread holds of one n8 tile of S = Q K^T (an mma
/// C fragment: element 2h + c is row g + 8h, key key0 + 2 (lane % 4) + c, g = lane / 4), equal
/// bit for bit to dropout_factor of each. The four keys key0 + 4m .. + 3 of rows g and g + 8
/// are one Philox block per row, held by lanes l and l ^ 1: each evaluates the block of one row
/// (lane bit 0 = h) and sends the other lane its two words: one evaluation per lane instead of
/// the two of dropout_factor_pair. row_counter: offset + row(g) max_seqlen; row8: 8 max_seqlen;
/// key0 a multiple of 8; dropout_quads_aligned. Every lane of the warp must call it (shuffles).
__device__ __forceinline__ void dropout_factors_s_tile(float (&f)[4], float p, uint64_t seed, uint64_t row_counter,
                                                       uint64_t row8, int key0, int lane) {
  const int b = lane & 1;
  const uint64_t counter = row_counter + (b ? row8 : 0) + uint64_t(key0 + 4 * ((lane & 3) >> 1));
  const Philox4x32 r = philox_block(seed, counter >> 2);
  // this lane's keys are words 2b, 2b + 1 of a block; the other row's block is the partner's
  const uint32_t own0 = b ? r.w[2] : r.w[0], own1 = b ? r.w[3] : r.w[1];
  const uint32_t got0 = __shfl_xor_sync(0xffffffffu, b ? r.w[0] : r.w[2], 1);
  const uint32_t got1 = __shfl_xor_sync(0xffffffffu, b ? r.w[1] : r.w[3], 1);
  f[0] = dropout_keep_factor(p, b ? got0 : own0);
  f[1] = dropout_keep_factor(p, b ? got1 : own1);
  f[2] = dropout_keep_factor(p, b ? own0 : got0);
  f[3] = dropout_keep_factor(p, b ? own1 : got1);
}

/// The factors of one n8 tile of S (dropout_factors_s_tile's layout and arguments) whatever the
/// counters: shared blocks when `quads` (dropout_quads_aligned), else a block per key pair
/// (dropout_factor_pair). The forward's and the dQ kernel's one dropout step.
__device__ __forceinline__ void dropout_factors_s(float (&f)[4], float p, uint64_t seed, uint64_t row_counter,
                                                  uint64_t max_seqlen, int key0, bool quads, int lane) {
  if (quads) return dropout_factors_s_tile(f, p, seed, row_counter, 8 * max_seqlen, key0, lane);
#pragma unroll
  for (int h = 0; h < 2; ++h)  // elements 2h and 2h + 1: row g + 8h, keys key0 + 2 (lane % 4) and the next
    dropout_factor_pair(p, seed, row_counter + 8 * uint64_t(h) * max_seqlen + uint64_t(key0 + (lane % 4) * 2),
                        f[2 * h], f[2 * h + 1]);
}

/// The same for one n8 tile of S^T = K Q^T (the dK/dV kernel's accumulators: element c + 2h is
/// key key4 + (lane / 4) % 4 + 8h, query q0 + 2 (lane % 4) + c). The four consecutive keys of a
/// block sit in the four lanes that differ in lane bits 2 and 3 (index i = (lane >> 2) & 3):
/// lane i evaluates the block of its element e = i (query c = i & 1, keys + 8 (i >> 1)), and a
/// 4 x 4 transpose by shuffles hands each lane word i of the four blocks: one evaluation per
/// lane instead of four. q_counter: offset + row(q0 + 2 (lane % 4)) max_seqlen; key4 = the
/// first key of the lane's group of four (a multiple of 4); dropout_quads_aligned. Every lane
/// of the warp must call it.
__device__ __forceinline__ void dropout_factors_st_tile(float (&f)[4], float p, uint64_t seed, uint64_t q_counter,
                                                        uint64_t max_seqlen, int key4, int lane) {
  const int i = (lane >> 2) & 3;
  const uint64_t counter = q_counter + ((i & 1) ? max_seqlen : 0) + uint64_t(key4 + 8 * (i >> 1));
  const Philox4x32 r = philox_block(seed, counter >> 2);
  uint32_t got[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    // Round s: lane i sends word i ^ s of its block (the word lane i ^ s needs) and receives
    // from lane i ^ s word i of element (i ^ s)'s block. Selects, not a dynamic index (which
    // would put r and got in local memory).
    const int k = i ^ s;
    const uint32_t mine = k == 0 ? r.w[0] : k == 1 ? r.w[1] : k == 2 ? r.w[2] : r.w[3];
    const uint32_t v = s == 0 ? mine : __shfl_xor_sync(0xffffffffu, mine, s << 2);
#pragma unroll
    for (int e = 0; e < 4; ++e) got[e] = k == e ? v : got[e];
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) f[e] = dropout_keep_factor(p, got[e]);
}

// ---- reductions ---------------------------------------------------------------------------

/// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// Max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
/// result. Uses 32 floats of shared memory; safe to call repeatedly (it syncs before reuse).
__device__ __forceinline__ float block_sum(float x) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int nwarps = blockDim.x / kWarpSize;
  x = warp_sum(x);
  __syncthreads();  // a previous call may still be reading `partial`
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < nwarps ? partial[lane] : 0.0f;
  return warp_sum(x);
}

/// Max over the whole block; same contract as block_sum.
__device__ __forceinline__ float block_max(float x) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int nwarps = blockDim.x / kWarpSize;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) partial[warp] = x;
  __syncthreads();
  x = lane < nwarps ? partial[lane] : -INFINITY;
  return warp_max(x);
}

}  // namespace unmask::cuda
