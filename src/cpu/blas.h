// cpu/blas.h: the BLAS the CPU backend calls (Debian's OpenBLAS, pthread build).
#pragma once
#include <cstdint>

namespace unmask::cpu {

/// Sets the BLAS library's own thread count (called by Context).
void blas_set_num_threads(int n);

}  // namespace unmask::cpu
