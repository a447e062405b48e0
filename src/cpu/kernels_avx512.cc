// cpu/kernels_avx512.cc: the row kernels compiled for the avx512 instruction set.
// The code is cpu/kernels_impl.inc; the ISA comes from this file's compile flags (CMakeLists.txt).
// GCC 12 reports a false -Wmaybe-uninitialized inside its own AVX-512 intrinsics (the
// self-initialised _mm512_undefined_ps() placeholders), once per inlined call.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.h"

namespace unmask::cpu::avx512 {
constexpr const char* kIsaName = "avx512";
#include "cpu/kernels_impl.inc"
}  // namespace unmask::cpu::avx512
