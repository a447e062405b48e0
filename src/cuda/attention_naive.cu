// cuda/attention_naive.cu: the dumb attention kernel beside the flash one (STYLE.md rule 3).
//
// One warp per (query row, head): lane l holds head dims l, l+32, ... (up to 8 per lane, so
// HS <= 256) of q and of the output accumulator; the keys are visited one at a time with a
// warp-wide dot product and an fp32 online softmax. No tiling, no tensor cores, no shared
// memory, and no T x T buffer either. It is the f32 path, the fallback for head sizes and
// strides the flash kernel does not take, and a second opinion in the tests.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/flash/flash_api.h"

namespace unmask::cuda {

namespace {

constexpr int kNaiveWarps = 4;
constexpr int kNaiveMaxPerLane = 8;  // HS <= 256

__device__ __forceinline__ bool key_is_real(const FlashFwdParams& p, int b, int key) {
  return !p.key_mask || mask_is_set(p.key_mask, p.mask_elem_bytes, int64_t(b) * p.mask_batch_stride + key);
}

/// Grid (ceil(max_seqlen / kNaiveWarps), NH, B); warp w of block x owns query x*kNaiveWarps+w.
template <typename T>
__global__ void __launch_bounds__(kNaiveWarps * kWarpSize) attention_naive_kernel(const __grid_constant__ FlashFwdParams p) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int head = blockIdx.y, b = blockIdx.z;
  const int qi = blockIdx.x * kNaiveWarps + warp;
  int64_t seq_start;
  int seqlen;
  sequence_bounds(p.cu_seqlens, p.max_seqlen, b, seq_start, seqlen);
  if (qi >= seqlen) return;
  const int D = p.head_dim;
  const T* qr = static_cast<const T*>(p.q) + (seq_start + qi) * p.q_row_stride + int64_t(head) * D;
  const T* kb = static_cast<const T*>(p.k) + seq_start * p.k_row_stride + int64_t(head) * D;
  const T* vb = static_cast<const T*>(p.v) + seq_start * p.v_row_stride + int64_t(head) * D;
  float q[kNaiveMaxPerLane], o[kNaiveMaxPerLane];
#pragma unroll
  for (int i = 0; i < kNaiveMaxPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    q[i] = d < D ? to_float(qr[d]) * p.scale : 0.0f;
    o[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int key = 0; key < seqlen; ++key) {
    if (!key_is_real(p, b, key)) continue;  // uniform across the warp
    const T* kr = kb + int64_t(key) * p.k_row_stride;
    const T* vr = vb + int64_t(key) * p.v_row_stride;
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kNaiveMaxPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) s += q[i] * to_float(kr[d]);
    }
    s = warp_sum(s);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);  // m = -inf on the first real key: 0
    const float pe = expf(s - m_new);
    l = l * corr + pe;
#pragma unroll
    for (int i = 0; i < kNaiveMaxPerLane; ++i) {
      const int d = lane + i * kWarpSize;
      if (d < D) o[i] = o[i] * corr + pe * to_float(vr[d]);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* orow = static_cast<T*>(p.o) + (seq_start + qi) * p.o_row_stride + int64_t(head) * D;
#pragma unroll
  for (int i = 0; i < kNaiveMaxPerLane; ++i) {
    const int d = lane + i * kWarpSize;
    if (d < D) orow[d] = from_float<T>(o[i] * inv);
  }
}

}  // namespace

void attention_naive_forward(const FlashFwdParams& p, cudaStream_t stream) {
  UNMASK_CHECK(p.head_dim >= 1 && p.head_dim <= kNaiveMaxPerLane * kWarpSize,
               "attention (cuda, naive): head size must be in [1, 256], got ", p.head_dim);
  const dim3 grid(unsigned(ceil_div(p.max_seqlen, kNaiveWarps)), unsigned(p.num_heads), unsigned(p.batch));
  const dim3 block(kNaiveWarps * kWarpSize);
  switch (p.dtype) {
    case DType::f32: attention_naive_kernel<float><<<grid, block, 0, stream>>>(p); break;
    case DType::bf16: attention_naive_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p); break;
    case DType::f16: attention_naive_kernel<__half><<<grid, block, 0, stream>>>(p); break;
    default: throw Unsupported("attention (cuda): dtype ", dtype_name(p.dtype), " (f32, bf16, f16 only)");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace unmask::cuda
