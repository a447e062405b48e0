// cpu/dispatch.cc (placeholder until the kernel table lands)
#include "cpu/kernels.h"
#include "cpu/blas.h"
#include <cblas.h>
namespace unmask::cpu {
const CpuKernels& kernels() { static CpuKernels k{"generic"}; return k; }
void blas_set_num_threads(int n) { openblas_set_num_threads(n); }
}
