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

#include "cuda/attention_train.h"
#include "unmask/context.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

struct GemmPlanCache;  // gemm_cublaslt.cc
struct GemmPlanCacheDeleter {
  void operator()(GemmPlanCache* c) const noexcept;
};

class CudaState {
 public:
  /// Selects options.device_index, creates (or adopts, when options.cuda_stream is not null) the
  /// stream, the cuBLASLt handle and a workspace of options.cuda_workspace_bytes, and takes the
  /// kernel choices of options.kernels (checked by the Context). Throws Error on any CUDA failure.
  explicit CudaState(const ContextOptions& options);
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
  /// fp32 GEMMs use TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) when true (precision =
  /// "tf32"); off by default so that fp32 matches the CPU to ~1e-6.
  bool allow_tf32 = false;
  /// Autocast of the f32 GEMMs of ops::gemm (training; precision = "bf16" / "fp16"): bf16 or f16
  /// (f32 = off). a and b are rounded to that type (round to nearest even; fp16 overflows to inf,
  /// which the dynamic loss scaler catches) into stream-ordered temporaries and multiplied on
  /// tensor cores with fp32 accumulation into the f32 c. Parameters, activations and every other
  /// op stay f32 (fp32 master weights). Tensor-level gemm calls with bf16/f16 tensors are unaffected.
  DType autocast = DType::f32;
  /// Training attention on tensor cores (attention_train_tc.cu: bf16 q/k/v/dout operands, fp32
  /// accumulators, f32 in and out, dropout as the f32 kernels) where it applies (head sizes 64, 80,
  /// 88, 128); the f32 kernels otherwise. set_training_precision turns it on with bf16 autocast
  /// (H200, 2026-11-26: ViT-B batch 32 ran 2.2x faster with it than with the f32 kernels).
  bool attention_bf16 = false;
  /// A training precision, before the first GEMM (plans are cached per precision): tf32 GEMMs,
  /// the GEMM autocast (f32 = off, bf16, f16), and the tensor-core attention with bf16 autocast.
  void set_training_precision(bool tf32, DType gemm_autocast);
  /// The tensor-core attention's kernel choices (ContextOptions::kernels.deterministic; the rest
  /// are test hooks with the measured winners as defaults).
  AttentionTuning attention;
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
