// cuda/flash/flash_api.h: the attention forward launchers (kernel layer; see params.h).
//
//   FlashFwdParams p;  ...pointers, strides, heads, sequences...
//   cuda::attention_forward(p, stream);        // flash kernel when it applies, else naive
//
// attention_forward picks the tensor-core flash kernel (fwd_kernel.cuh) for bf16/fp16 with
// head size 64, 80, 88 or 128 and 16-byte aligned rows, and the naive kernel otherwise
// (f32, other head sizes, odd strides). Both follow the semantics of params.h. On sm_90 the
// forward can run on Hopper's wgmma instead (fwd_wgmma_kernel.cuh, head size 64; opt-in
// UNMASK_FLASH_WGMMA=1 until measured), and so can the backward (UNMASK_FLASH_BWD_WGMMA=1).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/flash/params.h"

namespace unmask::cuda {

/// flash: the tensor-core kernel (mma.sync, fwd_kernel.cuh; with UNMASK_FLASH_WGMMA=1 the wgmma
/// kernel where it applies, with UNMASK_FLASH_PERSISTENT=1 its persistent form); flash_wgmma:
/// the wgmma kernel (fwd_wgmma_kernel.cuh: sm_90, head size 64, bf16/f16), forced;
/// flash_persistent: the mma.sync kernel's persistent form (fwd_persistent_kernel.cuh: head size
/// 64, 16 rows a warp), forced; naive: the reference kernel.
enum class AttentionKernel : uint8_t { flash, naive, flash_wgmma, flash_persistent };

/// Which kernel attention_forward would use for p.
AttentionKernel attention_kernel_for(const FlashFwdParams& p);

/// Checks p (throws Error naming the bad value) and runs the kernel attention_kernel_for(p)
/// names, or the one forced by `force` (naive is always possible; flash throws when p does
/// not fit it). block_m: the flash kernel's query rows per CTA, 64 or 128; 0 = the environment's
/// UNMASK_FLASH_BLOCK_M if set (a tuning/test hook), else chosen from the grid size and the
/// device's SM count (flash/switch.h). warp_rows: query rows per warp, 16 or 32 (32 exists for
/// head size 64 in 128-row CTAs; elsewhere it runs as 16; with block_m = 0 and no
/// UNMASK_FLASH_BLOCK_M, 32 takes 128-row CTAs); 0 = UNMASK_FLASH_WARP_ROWS if set, else 16.
/// max_ctas: the persistent form's CTA count at most (0: as many as fit the device; tests take a
/// few, so that each CTA walks many tiles).
void attention_forward(const FlashFwdParams& p, cudaStream_t stream);
void attention_forward(const FlashFwdParams& p, cudaStream_t stream, AttentionKernel force, int block_m = 0,
                       int warp_rows = 0, int max_ctas = 0);

/// Whether p fits the persistent forward (fwd_persistent_kernel.cuh): the flash kernel's
/// conditions, head size 64, and at most 2^30 tiles of 64 query rows (heads x sequences x
/// ceil(max_seqlen / 64)).
bool flash_fwd_persistent_applies(const FlashFwdParams& p);
/// How many persistent forward launches the process made (tests and benchmarks: which kernel ran).
uint64_t flash_fwd_persistent_launches();

/// The dumb reference beside the flash kernel (attention_naive.cu): one warp per (query row,
/// head), fp32 online softmax over the keys one at a time, any dtype (f32/bf16/f16), any head
/// size up to 256, any row strides. Slow; for f32, unusual shapes and tests.
void attention_naive_forward(const FlashFwdParams& p, cudaStream_t stream);

/// Tile shapes of the wgmma forward (flash/flash_fwd_wgmma.cu): query rows per CTA x keys a step.
enum class WgmmaFwdShape : uint8_t { m64n128, m64n64, m128n128 };
/// UNMASK_FLASH_WGMMA_SHAPE (m64n128, m64n64, m128n128), default m64n128; throws on another value.
WgmmaFwdShape flash_fwd_wgmma_shape();
/// Whether the current device runs the wgmma kernels: compute capability 9.x, and a build with
/// sm_90a code (UNMASK_CUDA_HAS_SM90A, set by CMake when UNMASK_CUDA_ARCHS lists 90a).
bool flash_fwd_wgmma_device();
/// Whether p fits the wgmma forward: bf16/f16, head size 64, 16-byte aligned rows (the flash
/// kernel's conditions), on a device flash_fwd_wgmma_device() accepts.
bool flash_fwd_wgmma_applies(const FlashFwdParams& p);
/// Launches the wgmma forward (unchecked: attention_forward checks p first).
void flash_fwd_wgmma(const FlashFwdParams& p, WgmmaFwdShape shape, cudaStream_t stream);
/// Test hook: one m64n64k16 wgmma through the attention kernels' K-major (trans_b false) or
/// MN-major (true) descriptor at k-step `step` (0..3) of a position-coded [64][64] core-matrix
/// tile and a one-hot A; returns D [64][64] row-major, which must be 64 (m % 16) + n + 1
/// (flash_fwd_wgmma.cu). swap_strides: LBO and SBO exchanged (a diagnostic for a failing probe).
/// Synchronous; throws where flash_fwd_wgmma_device() is false.
std::vector<float> flash_wgmma_probe(bool trans_b, int step, bool swap_strides = false);
/// UNMASK_FLASH_WGMMA_EXCHANGE, read at each wgmma launch: which operand forms' descriptors the
/// wgmma kernels (forward and backward) build with LBO and SBO exchanged: unset / "none" 0, "k"
/// 1 (K-major: K in the forward's S = Q K^T, the streamed tiles of the backward's row products),
/// "mn" 2 (MN-major: V, and the backward's accumulating products), "k,mn" 3. For a GPU whose
/// probe (CudaWgmmaProbe) passes only with the fields exchanged: the kernels then run right
/// without a rebuild. Anything else is an Error naming the variable.
int flash_wgmma_exchange();
/// How many wgmma forward launches the process made (tests and benchmarks: which kernel ran), of
/// every shape, or of one.
uint64_t flash_fwd_wgmma_launches();
uint64_t flash_fwd_wgmma_launches(WgmmaFwdShape shape);

/// A 0/1 switch of the attention kernels from the environment (unset: false), read on every
/// call; another value throws an Error naming the variable, `op` and what `on` and `off` run.
bool flash_env_switch(const char* name, const char* op, const char* on, const char* off);

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
/// and the one-kernel backward of sequences of at most 128 keys (UNMASK_FLASH_BWD_SHORT=1).
/// wgmma: backward calls that ran the wgmma pair (UNMASK_FLASH_BWD_WGMMA=1, bwd_wgmma_kernel.cuh).
struct FlashBwdLaunchStats {
  uint64_t without_dropout = 0, kv_in_smem = 0, short_seq = 0, wgmma = 0;
};
FlashBwdLaunchStats flash_bwd_launch_stats();
/// The wgmma backward pair (flash/flash_bwd_wgmma.cu; head size 64, bf16, sm_90a): the recompute
/// scheme whatever FlashBwdParams::dq_mode and ctas_per_sm ask (UNMASK_FLASH_BWD_WGMMA=1 wins),
/// unchecked: flash_attention_backward checks p and decides. flash_bwd_wgmma_launches: its calls.
/// Rows per CTA (UNMASK_FLASH_BWD_WGMMA_SHAPE=m64, the default, or m128: two warpgroups sharing
/// each streamed tile); throws on another value.
void flash_bwd_wgmma(const FlashBwdParams& p, cudaStream_t stream);
int flash_bwd_wgmma_rows();
/// Calls of flash_bwd_wgmma with `rows` rows a CTA (64 or 128), or of both shapes (rows = 0).
uint64_t flash_bwd_wgmma_launches(int rows = 0);
/// Whether the three-CTA dK/dV kernel runs on the current device when asked for (head size 64,
/// no dropout): three of its CTAs must fit an SM's shared memory (sm_90 yes, sm_80 no).
bool flash_bwd_three_ctas_available(bool atomic_dq);

}  // namespace unmask::cuda
