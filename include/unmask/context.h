// unmask/context.h: what every op needs to run, passed explicitly (no globals).
//
// A Context carries the device, the CPU thread pool and (with the CUDA backend) the stream,
// the cuBLASLt handle and a workspace. Create one per thread of control and pass it to every
// op, layer and model call.
//
//   Context ctx({.num_threads = 2});
//   ctx.parallel_for(rows, [&](int64_t begin, int64_t end) { ... });
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "unmask/device.h"
#include "unmask/dtype.h"

namespace unmask {

class ThreadPool;
class OpProfiler;                      // src/ops/op_profile.h
namespace cuda { class CudaState; }  // src/cuda/cuda_state.h (only in UNMASK_CUDA builds)

/// The time a context's ops took while profiling was on (Context::set_op_profiling): per op
/// front-end name, its calls and milliseconds (CPU: wall clock; CUDA: device time between events
/// on the context's stream).
struct OpTime {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
  /// Host wall clock inside the front-end calls (validation, planning, launches). On the CPU the
  /// same as ms; on CUDA, host_ms above ms where the device waited for the host.
  double host_ms = 0;
  /// Time outside any op just before this op's calls began, on the op's own timeline (CUDA: the
  /// device time from the previous timed op's end event to this op's start event, i.e. copies,
  /// memsets, kernels no front-end launched, and the device idle while the host caught up after a
  /// synchronisation; CPU: host time between the two front-end calls). Where the "not in an op"
  /// rest of a step sits.
  double gap_before_ms = 0;
  /// Of those gaps, the op they most followed and their sum after it (CUDA): "attention ->
  /// gemm" says the time sits between those two calls (a copy or host work between them).
  std::string gap_mostly_after;
  double gap_mostly_after_ms = 0;
};

/// Kernel choices that stay open (README "Settings"). Every other choice was measured on a GPU
/// and the winner is the only kernel (BENCHMARKS.md).
struct KernelOptions {
  /// CUDA training attention: dQ by the recompute kernel at every length, bitwise reproducible
  /// from run to run (torch.use_deterministic_algorithms' guarantee). Off: atomic adds, the
  /// faster default (H200, 2026-11-28: ViT-B +2.4%), whose last bit of dQ may differ between
  /// runs past 128 keys (up to 128 keys each element gets at most two adds: reproducible anyway).
  bool deterministic = false;
};

struct ContextOptions {
  /// CPU threads for ops and BLAS; 0 = all cores (std::thread::hardware_concurrency()).
  int num_threads = 0;
  Device device = Device::cpu;
  int device_index = 0;
  /// CUDA only: run on this cudaStream_t (not owned) instead of creating a stream. It must be a
  /// blocking stream (cudaStreamCreate): host copies are ordered through the legacy default stream.
  void* cuda_stream = nullptr;
  /// CUDA only: bytes of cuBLASLt workspace (32 MiB suits Hopper).
  size_t cuda_workspace_bytes = size_t(32) << 20;
  KernelOptions kernels = {};
};

class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return options_.device; }
  int num_threads() const { return num_threads_; }

  /// Runs fn(begin, end) over [0, n) split into contiguous chunks, one per thread, with at
  /// least `grain` items per chunk. Blocks until all chunks finish; rethrows the first error.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  /// Name of the CPU kernel set in use ("avx512", "avx2", "generic"), set from CPUID at
  /// startup and overridable with UNMASK_CPU_ISA=generic|avx2|avx512.
  const char* cpu_isa() const;

  /// The cudaStream_t every op of this context runs on; nullptr for a CPU context.
  void* cuda_stream() const;
  /// Blocks until the work queued on this context's stream is done (no-op for CPU).
  void synchronize() const;
  /// Makes this context's stream the one Tensor::empty(..., Device::cuda) tags new memory
  /// with on the calling thread (done once by the constructor for the constructing thread).
  void make_current() const;
  /// The CUDA backend state (stream, cuBLASLt handle, workspace); null for a CPU context.
  cuda::CudaState* cuda_state() const { return cuda_.get(); }

  const KernelOptions& kernels() const { return options_.kernels; }

  /// CPU: the element type ops::gemm rounds its operands to (f32: none; bf16: both operands
  /// rounded to bf16, fp32 accumulation, on the CPU's bf16 matrix unit; training's precision =
  /// "bf16", set through ops::set_training_precision). The packed inference GEMMs carry their own.
  DType cpu_gemm_dtype() const { return cpu_gemm_dtype_; }
  void set_cpu_gemm_dtype(DType d) { cpu_gemm_dtype_ = d; }

  /// Times every op front-end call from now on (on) or stops (off, dropping what was not taken).
  /// Profiling adds a few microseconds an op (CUDA event records): time throughput without it.
  /// by_shape: each GEMM's shape and epilogue gets its own row ("gemm 4096x768x3072 ..."),
  /// instead of one "gemm" row.
  void set_op_profiling(bool on, bool by_shape = false);
  /// The op times since profiling started or the last call, most time first (synchronises).
  std::vector<OpTime> take_op_profile();
  /// The profiler the op front-ends report to; null when profiling is off.
  OpProfiler* op_profiler() const { return profiler_.get(); }

 private:
  ContextOptions options_;
  int num_threads_ = 1;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<cuda::CudaState> cuda_;
  std::unique_ptr<OpProfiler> profiler_;
  DType cpu_gemm_dtype_ = DType::f32;
};

/// What this build holds and what the machine offers (`unmask version`).
struct BuildInfo {
  bool cuda = false, mpi = false, nccl = false, dnnl = false;  // compiled in
  int cuda_devices = 0;     // visible CUDA devices (CUDA builds; 0 without a driver or GPU)
  std::string cpu_isa;      // the CPU kernels this machine runs (avx512, avx2, generic)
  std::string cpu_bf16_unit;  // the bf16 matrix unit oneDNN uses: "amx", "avx512_bf16", "" (none)
  std::string cuda_archs;   // CUDA builds: the architectures compiled (CMake's UNMASK_CUDA_ARCHS)
};
BuildInfo build_info();

}  // namespace unmask
