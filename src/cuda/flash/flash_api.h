// cuda/flash/flash_api.h: the attention forward launchers (kernel layer; see params.h).
//
//   FlashFwdParams p;  ...pointers, strides, heads, sequences...
//   cuda::attention_forward(p, stream);        // flash kernel when it applies, else naive
//
// attention_forward picks the tensor-core flash kernel (fwd_kernel.cuh) for bf16/fp16 with
// head size 64, 80, 88 or 128 and 16-byte aligned rows, and the naive kernel otherwise
// (f32, other head sizes, odd strides). Both follow the semantics of params.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash/params.h"

namespace unmask::cuda {

/// flash: the tensor-core kernel (mma.sync, fwd_kernel.cuh); naive: the reference kernel.
enum class AttentionKernel : uint8_t { flash, naive };

/// Which kernel attention_forward would use for p.
AttentionKernel attention_kernel_for(const FlashFwdParams& p);

/// Checks p (throws Error naming the bad value) and runs the kernel attention_kernel_for(p)
/// names, or the one forced by `force` (naive is always possible; flash throws when p does
/// not fit it). block_m: the flash kernel's query rows per CTA, 64 or 128 (a test hook:
/// AttentionTuning::forward_block_m); 0 = chosen from the grid size and the device's SM count
/// (flash/switch.h). Always 16 query rows per warp.
void attention_forward(const FlashFwdParams& p, cudaStream_t stream);
void attention_forward(const FlashFwdParams& p, cudaStream_t stream, AttentionKernel force, int block_m = 0);

/// The dumb reference beside the flash kernel (attention_naive.cu): one warp per (query row,
/// head), fp32 online softmax over the keys one at a time, any dtype (f32/bf16/f16), any head
/// size up to 256, any row strides. Slow; for f32, unusual shapes and tests.
void attention_naive_forward(const FlashFwdParams& p, cudaStream_t stream);

struct FlashBwdParams;  // flash/bwd_kernel.cuh
/// Whether the tensor-core backward (flash/flash_bwd.cu) has an instance for this head size.
bool flash_bwd_head_dim_supported(int head_dim);
/// dq, dk, dv (f32, overwritten) of the attention whose forward wrote p.lse, from bf16 q, k, v,
/// dout and delta = rowsum(dout * out); checks p (throws Error naming the bad value).
void flash_attention_backward(const FlashBwdParams& p, cudaStream_t stream);

/// How many backward calls ran the specialised instances since the process started (for tests
/// and benchmarks that must know which code ran; a call launches one or two kernels): head size
/// 64 without attention dropout (kernels compiled without the dropout code), and the dK/dV
/// kernel with K and V in shared memory (three CTAs per SM on sm_90; FlashBwdParams::ctas_per_sm),
/// and the one-kernel backward of sequences of at most 128 keys (FlashBwdParams::short_kernel).
struct FlashBwdLaunchStats {
  uint64_t without_dropout = 0, kv_in_smem = 0, short_seq = 0;
};
FlashBwdLaunchStats flash_bwd_launch_stats();
/// Whether the three-CTA dK/dV kernel runs on the current device when asked for (head size 64,
/// no dropout): three of its CTAs must fit an SM's shared memory (sm_90 yes, sm_80 no).
bool flash_bwd_three_ctas_available(bool atomic_dq);

}  // namespace unmask::cuda
