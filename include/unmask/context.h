// unmask/context.h: what every op needs to run, passed explicitly (no globals).
//
// A Context carries the device, the CPU thread pool and (with the CUDA backend) the stream,
// the cuBLASLt handle and a workspace. Create one per thread of control and pass it to every
// op, layer and model call.
//
//   Context ctx({.num_threads = 2});
//   ctx.parallel_for(rows, [&](int64_t begin, int64_t end) { ... });
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "unmask/device.h"

namespace unmask {

class ThreadPool;

struct ContextOptions {
  /// CPU threads for ops and BLAS; 0 = all cores (std::thread::hardware_concurrency()).
  int num_threads = 0;
  Device device = Device::cpu;
  int device_index = 0;
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

 private:
  ContextOptions options_;
  int num_threads_ = 1;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace unmask
