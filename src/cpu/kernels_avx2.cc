// cpu/kernels_avx2.cc: the row kernels compiled for the avx2 instruction set.
// The code is cpu/kernels_impl.inc; the ISA comes from this file's compile flags (CMakeLists.txt).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"

namespace unmask::cpu::avx2 {
constexpr const char* kIsaName = "avx2";
#include "cpu/kernels_impl.inc"
}  // namespace unmask::cpu::avx2
