// cuda/cuda_state.cc: creation and teardown of a Context's CUDA state.
#include "cuda/cuda_state.h"

#include <atomic>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "core/env.h"
#include "cuda/allocator.h"
#include "cuda/check.h"
#include "unmask/error.h"

namespace unmask::cuda {

namespace {
std::atomic<uint64_t> g_next_state_id{1};
}  // namespace

CudaState::CudaState(int dev, void* external_stream, size_t ws_bytes) : id(g_next_state_id++), device(dev) {
  // Switches of kernels that lost their measurement and were deleted (H200, 2026-11-28): set,
  // they would be silently ignored, so a run that asks for one is refused.
  for (const char* gone : {"UNMASK_FLASH_WGMMA", "UNMASK_FLASH_BWD_WGMMA", "UNMASK_FLASH_WGMMA_SHAPE",
                           "UNMASK_FLASH_BWD_WGMMA_SHAPE", "UNMASK_FLASH_WGMMA_EXCHANGE", "UNMASK_FLASH_PERSISTENT",
                           "UNMASK_CUDA_LN_BWD_FUSED"})
    if (std::getenv(gone))
      throw Error(gone, " is set, but its kernel was deleted after it measured slower than the default (H200, "
                  "2026-11-28; BENCHMARKS.md)", Hint(std::string("unset ") + gone));
  // The 0/1 switches, strict (core/env.h), read before anything is allocated: a bad value fails
  // the construction with nothing to release.
  residual_in_gemm = env_switch("UNMASK_CUDA_RESIDUAL_GEMM", residual_in_gemm);
  layernorm_dropout_fused = env_switch("UNMASK_CUDA_LN_DROPOUT", layernorm_dropout_fused);
  activation_bias_grad_fused = env_switch("UNMASK_CUDA_ACT_BIAS_GRAD", activation_bias_grad_fused);
  tubelet_target_warp = env_switch("UNMASK_CUDA_TUBELET_WARP", tubelet_target_warp);
  allow_tf32 = env_switch("UNMASK_CUDA_TF32", false);
  const bool bf16 = env_switch("UNMASK_CUDA_BF16", false), fp16 = env_switch("UNMASK_CUDA_FP16", false);
  autocast = bf16 ? DType::bf16 : fp16 ? DType::f16 : DType::f32;
  const std::optional<bool> attn = env_switch_opt("UNMASK_CUDA_ATTN_BF16");
  attention_bf16_env = attn ? int(*attn) : -1;
  attention_bf16 = attention_bf16_env == 1;
  epilogue_round_once = env_switch("UNMASK_CUDA_EPILOGUE_ROUND_ONCE", false);
  bias_grad_epilogue = env_switch("UNMASK_CUDA_BGRAD_EPILOGUE", false);
  gemm_autotune = env_switch("UNMASK_CUDA_GEMM_AUTOTUNE", false);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw Error("no CUDA device available (cudaGetDeviceCount: ", cudaGetErrorString(e), ", ", count,
                " devices)", Hint("run on a machine with an NVIDIA GPU and driver, or use device cpu"));
  }
  UNMASK_CHECK(dev >= 0 && dev < count, "CUDA device index ", dev, " out of range: this machine has ", count,
               " devices");
  CUDA_CHECK(cudaSetDevice(dev));
  CUDA_CHECK(cudaGetDeviceProperties(&props, dev));
  if (external_stream) {
    stream = static_cast<cudaStream_t>(external_stream);
    // Host <-> device copies (copy.cc, Tensor::to) use the legacy default stream and rely on it
    // to order them with this stream's kernels; a non-blocking stream opts out of that ordering
    // (a gradient copied to the host before the backward that writes it has finished).
    unsigned int flags = 0;
    CUDA_CHECK(cudaStreamGetFlags(stream, &flags));
    UNMASK_CHECK((flags & cudaStreamNonBlocking) == 0,
                 "ContextOptions::cuda_stream is a non-blocking stream (cudaStreamNonBlocking)",
                 Hint("create it with cudaStreamCreate (or cudaStreamDefault flags): unmask orders its host "
                      "copies on the legacy default stream"));
  } else {
    CUDA_CHECK(cudaStreamCreate(&stream));
    owns_stream = true;
  }
  try {
    CUBLAS_CHECK(cublasLtCreate(&lt));
    workspace_bytes = ws_bytes;
    if (workspace_bytes) CUDA_CHECK(cudaMalloc(&workspace, workspace_bytes));
  } catch (...) {
    if (lt) cublasLtDestroy(lt);
    if (owns_stream) cudaStreamDestroy(stream);
    throw;
  }
  set_current_stream(stream);
}

void CudaState::set_training_precision(bool tf32, DType gemm_autocast) {
  allow_tf32 = tf32;
  autocast = gemm_autocast;
  attention_bf16 = attention_bf16_env >= 0 ? attention_bf16_env == 1 : gemm_autocast == DType::bf16;
}

CudaState::~CudaState() {
  cudaSetDevice(device);
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaErrorCudartUnloading) return;  // a static Context outliving the runtime: nothing to free
  if (e != cudaSuccess) std::fprintf(stderr, "unmask: CUDA error at context teardown: %s\n", cudaGetErrorString(e));
  gemm_plans.reset();
  device_free(cu_seqlens_device_);
  if (workspace) cudaFree(workspace);
  if (lt) cublasLtDestroy(lt);
  if (current_stream() == stream) set_current_stream(nullptr);
  if (owns_stream) {
    allocator_forget_stream(stream);  // tensors may outlive the context
    cudaStreamDestroy(stream);
  }
}

const int32_t* CudaState::training_cu_seqlens(const std::vector<int32_t>& host) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  UNMASK_CHECK(capture == cudaStreamCaptureStatusNone,
               "training attention: host cu_seqlens inside a CUDA graph capture (a replay would read whatever a later "
               "call leaves in the context's device copy)", Hint("run training steps eagerly: graphs capture inference"));
  if (cu_seqlens_device_ == nullptr || host != cu_seqlens_host_) {
    const size_t bytes = host.size() * sizeof(int32_t);
    cu_seqlens_host_.clear();  // says nothing until the new values are on their way
    if (bytes > cu_seqlens_capacity_) {
      void* fresh = device_malloc(bytes, stream);
      device_free(cu_seqlens_device_);  // stream-ordered: reused only by later work on this stream
      cu_seqlens_device_ = fresh;
      cu_seqlens_capacity_ = bytes;
    }
    // A pageable source: the driver stages it before returning, so `host` may change after.
    CUDA_CHECK(cudaMemcpyAsync(cu_seqlens_device_, host.data(), bytes, cudaMemcpyHostToDevice, stream));
    cu_seqlens_host_ = host;
    ++cu_seqlens_uploads;
  }
  return static_cast<const int32_t*>(cu_seqlens_device_);
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

CudaState& cuda_state(Context& ctx) {
  CudaState* s = ctx.cuda_state();
  UNMASK_CHECK(s != nullptr, "this op runs on CUDA but the context was created for device ",
               device_name(ctx.device()), Hint("create the Context with .device = Device::cuda"));
  return *s;
}

}  // namespace unmask::cuda
