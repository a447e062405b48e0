// ops/device_info.cc: device_info.h on the backends.
#include "ops/device_info.h"

#include "cpu/blas.h"
#include "unmask/error.h"

#ifdef UNMASK_WITH_CUDA
#include "cuda/allocator.h"
#include "cuda/cuda_state.h"
#endif

namespace unmask::ops {

void set_training_precision(Context& ctx, const std::string& precision) {
#ifdef UNMASK_WITH_CUDA
  if (ctx.device() == Device::cuda)
    cuda::cuda_state(ctx).set_training_precision(precision == "tf32", precision == "bf16"   ? DType::bf16
                                                                      : precision == "fp16" ? DType::f16
                                                                                            : DType::f32);
#endif
  if (ctx.device() == Device::cpu) {
    if (precision == "bf16") require_cpu_bf16_unit("precision bf16");
    ctx.set_cpu_gemm_dtype(precision == "bf16" ? DType::bf16 : DType::f32);
  }
}

const char* cpu_bf16_unit() { return cpu::bf16_unit(); }

void require_cpu_bf16_unit(const std::string& what) {
  if (!*cpu::bf16_unit())
    throw Unsupported(what,
                      " on the CPU needs a bf16 matrix unit (Intel AMX, or AVX-512 BF16 on Intel Cooper Lake and "
                      "later / AMD Zen 4 and later); this CPU has neither (`unmask version` names the unit)",
                      Hint("use fp32 here"));
}
std::string gpu_name(Context& ctx) {
#ifdef UNMASK_WITH_CUDA
  if (ctx.device() == Device::cuda) return cuda::cuda_state(ctx).props.name;
#endif
  (void)ctx;
  return "";
}

std::string device_description(Context& ctx) {
  if (ctx.device() == Device::cuda) return "1x " + gpu_name(ctx);
  return "CPU (" + std::to_string(ctx.num_threads()) + " threads)";
}

std::string training_attention(Context& ctx) {
#ifdef UNMASK_WITH_CUDA
  if (ctx.device() == Device::cuda) return cuda::cuda_state(ctx).attention_bf16 ? "bf16-tc" : "f32";
#endif
  (void)ctx;
  return "cpu";
}

int gpu_count() {
#ifdef UNMASK_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

DeviceMemoryPeaks device_memory_peaks(const Context& ctx) {
  DeviceMemoryPeaks m;
#ifdef UNMASK_WITH_CUDA
  if (ctx.device() == Device::cuda) {
    const cuda::AllocatorStats s = cuda::allocator_stats();
    constexpr double kMiB = 1024.0 * 1024.0;
    m.allocated_mb = double(s.peak_allocated_bytes) / kMiB;
    m.requested_mb = double(s.peak_requested_bytes) / kMiB;
    m.reserved_mb = double(s.peak_reserved_bytes) / kMiB;
  }
#endif
  (void)ctx;
  return m;
}

void reset_device_memory_peaks(const Context& ctx) {
#ifdef UNMASK_WITH_CUDA
  if (ctx.device() == Device::cuda) cuda::allocator_reset_peak();
#endif
  (void)ctx;
}

}  // namespace unmask::ops
