// bench/gpu/cpu_stubs.cc: stand-ins for the two CPU-backend symbols src/ops/context.cc uses,
// so that the GPU-only build (bench/gpu/CMakeLists.txt) needs neither OpenBLAS nor the CPU
// kernels. Never linked into the main library.
#include "cpu/blas.h"
#include "cpu/kernels.h"

namespace unmask::cpu {

void blas_set_num_threads(int) {}

const CpuKernels& kernels() {
  static const CpuKernels k = [] {
    CpuKernels t{};
    t.name = "none (GPU-only build)";
    return t;
  }();
  return k;
}

}  // namespace unmask::cpu
