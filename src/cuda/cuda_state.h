// cuda/cuda_state.h: the CUDA part of a Context (owned by Context, opaque in the public API).
//
// One CudaState per CUDA Context: the device, the stream every op of the context runs on, the
// cuBLASLt handle, its workspace, and the cache of GEMM plans (descriptors + chosen algorithm,
// keyed by shape, see gemm_cublaslt.cc). Nothing here is global; ops reach it through
// `cuda_state(ctx)`.
//
// The stream is created with cudaStreamCreate's default (blocking) flag, so plain cudaMemcpy on
// the legacy default stream (Tensor::copy_from) waits for the context's queued work and the
// context's later work waits for the copy: host <-> device copies need no extra sync.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "unmask/context.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

struct GemmPlanCache;  // gemm_cublaslt.cc
struct GemmPlanCacheDeleter {
  void operator()(GemmPlanCache* c) const noexcept;
};

class CudaState {
 public:
  /// Selects `device`, creates (or adopts, when `external_stream` is not null) the stream, the
  /// cuBLASLt handle and a workspace of `workspace_bytes`. Throws Error on any CUDA failure.
  CudaState(int device, void* external_stream, size_t workspace_bytes);
  ~CudaState();  // synchronises the stream; never throws
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;

  uint64_t id = 0;  // unique per CudaState of the process (never reused: caches key on it, not on addresses)
  int device = 0;
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace (cudaMalloc'ed)
  size_t workspace_bytes = 0;
  cudaDeviceProp props{};
  /// fp32 GEMMs use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) when true. Default from
  /// UNMASK_CUDA_TF32=1; off otherwise so that fp32 matches the CPU to ~1e-6.
  bool allow_tf32 = false;
  /// Autocast of the f32 GEMMs of ops::gemm (training; precision = "bf16" / "fp16"): bf16 or f16
  /// (f32 = off). a and b are rounded to that type (round to nearest even; fp16 overflows to inf,
  /// which the dynamic loss scaler catches) into stream-ordered temporaries and multiplied on
  /// tensor cores with fp32 accumulation into the f32 c. Parameters, activations and every other
  /// op stay f32 (fp32 master weights). Default from UNMASK_CUDA_BF16=1 or UNMASK_CUDA_FP16=1.
  /// Tensor-level gemm calls with bf16/f16 tensors are unaffected.
  DType autocast = DType::f32;
  /// Training attention on tensor cores (attention_train_tc.cu: bf16 q/k/v/dout operands, fp32
  /// accumulators, f32 in and out, dropout as the f32 kernels) where it applies (head sizes 64, 80,
  /// 88, 128); the f32 kernels otherwise. set_training_precision turns it on with bf16 autocast
  /// (its tests passed on an H200 on 2026-11-26; ViT-B batch 32 ran 2.2x faster with it);
  /// UNMASK_CUDA_ATTN_BF16=1 / =0 forces it on / off whatever the precision.
  bool attention_bf16 = false;
  /// UNMASK_CUDA_ATTN_BF16 as read at construction: -1 unset, 0 or 1.
  int attention_bf16_env = -1;
  /// A training precision, before the first GEMM (plans are cached per precision): tf32 GEMMs,
  /// the GEMM autocast (f32 = off, bf16, f16), and the tensor-core attention with bf16 autocast
  /// unless UNMASK_CUDA_ATTN_BF16 says otherwise.
  void set_training_precision(bool tf32, DType gemm_autocast);
  /// A GEMM whose activation cuBLASLt cannot fuse (exact-erf GELU, tanh) on a bf16/f16 output:
  /// false (default): the bias in cuBLASLt's epilogue, the product + bias rounded to the output
  /// type, then the activation in place (PyTorch eager's roundings, the tests' "naive
  /// same-precision" model; c written once and read-modified-written once). true
  /// (UNMASK_CUDA_EPILOGUE_ROUND_ONCE=1): the GEMM into an fp32 workspace, bias + activation
  /// applied while converting, one rounding (4 + 4 + 2 bytes an element against 2 + 2 + 2: on an
  /// H100, BERT-base batch 256 seq 128 took 17.7 ms against 13.85, BENCHMARKS.md).
  bool epilogue_round_once = false;
  /// ops::linear_param_grads: the bias gradient in the weight GEMM's BGRADB epilogue
  /// (UNMASK_CUDA_BGRAD_EPILOGUE=1) instead of the bias_grad kernel's pass over dy. Off until
  /// measured against it on a GPU.
  bool bias_grad_epilogue = false;
  /// BERT inference in bf16 / f16: the residual of each post-LN block as the projection GEMM's C
  /// operand (h = x + attn Wo^T + bo rounded once), so that its LayerNorm reads one tensor, not
  /// two (models/bert/bert.cc). Off by default: on an H200 (2026-11-28, batch 256 x seq 128 bf16)
  /// it took 12.89 ms against 12.75 ms with the residual added in the LayerNorm;
  /// UNMASK_CUDA_RESIDUAL_GEMM=1 turns it on for A/B runs.
  bool residual_in_gemm = false;
  /// ops::layernorm / layernorm_backward with an input dropout (BERT's post-LN blocks): the
  /// dropout inside the LayerNorm kernels (train_kernels.h, layernorm_forward_stats), the same bits
  /// as the dropout op before the LayerNorm. Off by default: on an H200 (2026-11-28, BERT-large
  /// phase 1) the separate dropout kernels ran 1,436 seq/s against 1,406 with it;
  /// UNMASK_CUDA_LN_DROPOUT=1 turns it on for A/B runs and tests.
  bool layernorm_dropout_fused = false;
  /// ops::activation_backward with dbias (the MLPs' first linear layer, BERT and ViT): the bias
  /// gradient's column sums in the activation backward's pass (activation_backward_columns_kernel),
  /// the bits of bias_grad after it without its read of dx. On by default (H200, 2026-11-28: ViT-B
  /// 1,246 clips/s against 1,239 without, BERT-large a tie); UNMASK_CUDA_ACT_BIAS_GRAD=0 runs
  /// bias_grad after the activation backward.
  /// Either way that bias no longer goes through linear_param_grads, so bias_grad_epilogue below
  /// (BGRADB) covers the other linear layers only.
  bool activation_bias_grad_fused = true;
  /// ops::tubelet_target with one warp per token and its values in registers
  /// (tubelet_target_warp_kernel, video.cu) instead of a 256-thread block per token with six
  /// block reductions. On by default (H200, 2026-11-28: ViT-B 1,268 clips/s against 1,247);
  /// UNMASK_CUDA_TUBELET_WARP=0 runs the block kernel. The sums run in another order: within the
  /// tests' 1e-6 of the CPU, not the block kernel's bits.
  bool tubelet_target_warp = true;
  /// GEMM plans choose their algorithm by timing up to 8 of cuBLASLt's heuristic candidates on
  /// first use (UNMASK_CUDA_GEMM_AUTOTUNE=1; gemm_cublaslt.h) instead of taking its first. Off
  /// until measured against the heuristic on a GPU. The winner depends on timings, so two
  /// processes may pick different algorithms and round differently: a resumed run is then not
  /// bit-identical to an uninterrupted one (with the heuristic's choice it is).
  bool gemm_autotune = false;
  std::unique_ptr<GemmPlanCache, GemmPlanCacheDeleter> gemm_plans;

  /// A device copy of the host cu_seqlens `host` ([B + 1] offsets) for the training attention
  /// ops, uploaded only when it differs from the previous call's: a training step's attention
  /// calls (2 per layer) all bring the same batch, so a step uploads it once instead of 48 times
  /// (BERT-large), each upload a small pageable copy that the driver may serialise with the
  /// stream. The copy is overwritten in stream order, after the work that read the old values.
  /// Not for CUDA graph captures (a later call may change what a replay would read).
  const int32_t* training_cu_seqlens(const std::vector<int32_t>& host);
  uint64_t cu_seqlens_uploads = 0;  // how many times training_cu_seqlens copied (tests)

 private:
  std::vector<int32_t> cu_seqlens_host_;
  void* cu_seqlens_device_ = nullptr;  // device_malloc'ed, cu_seqlens_capacity_ bytes
  size_t cu_seqlens_capacity_ = 0;
};

/// The context's CUDA state; throws Error if the context does not run on CUDA.
CudaState& cuda_state(Context& ctx);

/// Visible CUDA devices (0 when there is no driver or device).
int device_count();

}  // namespace unmask::cuda
