// ops/device_info.h: what the commands ask of the device a Context runs on (its name, the
// training precision of its GEMMs, the attention kernels it takes, its memory high-water marks),
// so that app/ needs no backend header. CPU contexts answer with the CPU's figures or nothing.
#pragma once
#include <string>

#include "unmask/context.h"

namespace unmask::ops {

/// Applies a training precision ("fp32", "tf32" or "bf16": the GEMM operands) to a CUDA context
/// before its first GEMM (plans are cached per precision); nothing on the CPU.
/// CUDA: TF32 or bf16/fp16 autocast GEMMs; CPU: "bf16" rounds every ops::gemm's operands to
/// bf16 (Context::cpu_gemm_dtype; refused without a bf16 matrix unit), else fp32.
void set_training_precision(Context& ctx, const std::string& precision);

/// The CPU's bf16 matrix unit oneDNN dispatches to: "amx" (AMX tiles), "avx512_bf16"
/// (AVX-512 BF16 dot products) or "" (neither, or a build without oneDNN).
const char* cpu_bf16_unit();
/// Throws Unsupported "<what> on the CPU needs a bf16 matrix unit (...)" when cpu_bf16_unit() is
/// empty: the one refusal every CPU bf16 entry point gives.
void require_cpu_bf16_unit(const std::string& what);
/// "1x <GPU name>" on CUDA, "CPU (<n> threads)" on the CPU.
std::string device_description(Context& ctx);
/// The GPU's name ("" on the CPU).
std::string gpu_name(Context& ctx);
/// Which training attention the context runs: "cpu", "f32" (CUDA cores) or "bf16-tc" (tensor cores).
std::string training_attention(Context& ctx);
/// Visible CUDA devices (0 in a CPU-only build).
int gpu_count();

/// The device allocator's high-water marks in MiB (0 on the CPU): blocks as allocated
/// (size-class rounded), bytes as requested (PyTorch's max_memory_allocated), bytes held from
/// the driver (max_memory_reserved).
struct DeviceMemoryPeaks {
  double allocated_mb = 0, requested_mb = 0, reserved_mb = 0;
};
DeviceMemoryPeaks device_memory_peaks(const Context& ctx);
/// Resets those marks to the memory allocated now.
void reset_device_memory_peaks(const Context& ctx);

}  // namespace unmask::ops
