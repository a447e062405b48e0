// cpu/kernels_generic.cc: the row kernels compiled for the generic instruction set.
// The code is cpu/kernels_impl.inc; the ISA comes from this file's compile flags (CMakeLists.txt).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"

namespace unmask::cpu::generic {
constexpr const char* kIsaName = "generic";
#include "cpu/kernels_impl.inc"
}  // namespace unmask::cpu::generic
