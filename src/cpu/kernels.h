// cpu/kernels.h: the table of CPU kernels, one instance per ISA, chosen once at startup.
#pragma once
#include <cstdint>

namespace unmask::cpu {

struct CpuKernels {
  const char* name;  // "generic", "avx2", "avx512"
};

/// The kernel table for this CPU (CPUID), or the one named by UNMASK_CPU_ISA.
const CpuKernels& kernels();

}  // namespace unmask::cpu
