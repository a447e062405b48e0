// cuda/cuda_state.cc: creation and teardown of a Context's CUDA state.
#include "cuda/cuda_state.h"

#include <atomic>

#include <cstdio>
#include <cstdlib>

#include "cuda/allocator.h"
#include "cuda/check.h"
#include "unmask/error.h"

namespace unmask::cuda {

namespace {
std::atomic<uint64_t> g_next_state_id{1};
}  // namespace

CudaState::CudaState(const ContextOptions& options)
    : id(g_next_state_id++), device(options.device_index) {
  // Environment switches of kernels that were measured and either deleted (they lost) or made
  // the only kernel (they won), H200 2026-11-28, and of choices that moved to ContextOptions and
  // the command line. Set, they would be silently ignored, so a run that sets one is refused.
  static constexpr const char* kGone[][2] = {
      {"UNMASK_FLASH_WGMMA", "its kernel lost and was deleted"},
      {"UNMASK_FLASH_BWD_WGMMA", "its kernel lost and was deleted"},
      {"UNMASK_FLASH_WGMMA_SHAPE", "its kernel lost and was deleted"},
      {"UNMASK_FLASH_BWD_WGMMA_SHAPE", "its kernel lost and was deleted"},
      {"UNMASK_FLASH_WGMMA_EXCHANGE", "its kernel lost and was deleted"},
      {"UNMASK_FLASH_PERSISTENT", "its kernel lost and was deleted"},
      {"UNMASK_CUDA_LN_BWD_FUSED", "its kernel lost and was deleted"},
      {"UNMASK_CUDA_LN_DROPOUT", "the dropout inside the LayerNorm kernels lost and was deleted"},
      {"UNMASK_CUDA_RESIDUAL_GEMM", "the residual as the GEMM's C operand lost and was deleted"},
      {"UNMASK_CUDA_EPILOGUE_ROUND_ONCE", "the fp32-workspace epilogue lost and was deleted"},
      {"UNMASK_CUDA_ACT_BIAS_GRAD", "the bias gradient in the activation backward won and is the only kernel"},
      {"UNMASK_CUDA_TUBELET_WARP", "the warp-per-token tubelet kernel won and runs wherever it applies"},
      {"UNMASK_FLASH_BWD_SHORT", "the one-kernel short backward won and runs wherever it applies"},
      {"UNMASK_FLASH_BWD_CTAS_PER_SM", "three dK/dV CTAs a SM won and run wherever they fit"},
      {"UNMASK_FLASH_BLOCK_M", "the forward's CTA height is chosen from the grid"},
      {"UNMASK_CUDA_ATTN_BWD", "use ContextOptions::kernels.deterministic (--deterministic) for the recompute dQ"},
      {"UNMASK_CUDA_ATTN_BF16", "the tensor-core attention comes with --precision bf16"},
      {"UNMASK_CUDA_TF32", "use --precision tf32"},
      {"UNMASK_CUDA_BF16", "use --precision bf16"},
      {"UNMASK_CUDA_FP16", "use --precision fp16"},
      {"UNMASK_CUDA_GEMM_AUTOTUNE", "timing cuBLASLt's candidates tied with its heuristic and was deleted"},
      {"UNMASK_CUDA_BGRAD_EPILOGUE", "the bias gradient in the BGRADB epilogue lost and was deleted"},
      {"UNMASK_FLASH_WARP_ROWS", "32 rows a warp lost and was deleted"},
  };
  for (const auto& [name, why] : kGone)
    if (std::getenv(name))
      throw Error(name, " is set, but unmask no longer reads it: ", why, " (BENCHMARKS.md, README \"Settings\")",
                  Hint(std::string("unset ") + name));
  attention.deterministic = options.kernels.deterministic;
  void* external_stream = options.cuda_stream;
  const size_t ws_bytes = options.cuda_workspace_bytes;
  const int dev = device;
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
  attention_bf16 = gemm_autocast == DType::bf16;
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
