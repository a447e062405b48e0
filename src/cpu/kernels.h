// cpu/kernels.h: the table of CPU row kernels, one instance per ISA, chosen once at startup.
//
// The same source (cpu/kernels_impl.inc) is compiled three times: kernels_generic.cc
// (baseline x86-64, portable scalar code), kernels_avx2.cc (-mavx2 -mfma) and kernels_avx512.cc
// (-mavx512f/bw/vl/dq). Each copy lives in its own namespace and fills one CpuKernels table.
// dispatch.cc picks the best table the CPU supports (CPUID via __builtin_cpu_supports) the
// first time kernels() is called; UNMASK_CPU_ISA=generic|avx2|avx512 forces one (an error if
// the CPU lacks it), so every variant can be tested on one machine.
//
//   const cpu::CpuKernels& k = cpu::kernels();
//   k.softmax_rows(x, C, y, C, N, C);        // x, y: [N, C]
//
// Kernels are the trusted inner layer (STYLE.md §2.1): raw pointers, explicit sizes and row
// strides (ld*, in elements; the innermost stride is always 1), no validation, no threads. The
// op front-ends in src/ops validate and split rows across Context::parallel_for. Every kernel
// has a float64 reference in src/ref/ref_ops.h that the tests compare it against.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "ops/ops.h"

namespace unmask::cpu {

struct CpuKernels {
  const char* name;  // "generic", "avx2", "avx512"

  /// y[n, :] = act(x[n, :] + bias) for n in [0, N). The GEMM epilogue and the activation op.
  ///   x: [N, C] row stride ldx; bias: [C] or null; y: [N, C] row stride ldy (may alias x).
  void (*bias_act_rows)(const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy,
                        int64_t N, int64_t C, ops::Activation act);

  /// s = x + residual; y = (s - mean(s)) * rsqrt(var(s) + eps) * gamma + beta, per row.
  ///   x: [N, C] (ldx); residual: [N, C] (ldr) or null; gamma, beta: [C]; y: [N, C] (ldy).
  ///   y may alias x or residual. Statistics in fp32, two-pass (mean, then centred variance).
  void (*layernorm_rows)(const float* x, int64_t ldx, const float* residual, int64_t ldr,
                         const float* gamma, const float* beta, float eps, float* y, int64_t ldy,
                         int64_t N, int64_t C);

  /// y[n, :] = softmax(x[n, :]) (max-subtracted).  x: [N, C] (ldx); y: [N, C] (ldy), may alias x.
  void (*softmax_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C);

  /// out[n, :] = table[ids[n], :] (+ out[n, :] if accumulate). ids are trusted to be in [0, V).
  ///   table: [V, C] (ldt); ids: [N]; out: [N, C] (ldo).
  void (*embedding_rows_i32)(const float* table, int64_t ldt, const int32_t* ids, float* out,
                             int64_t ldo, int64_t N, int64_t C, bool accumulate);
  void (*embedding_rows_i64)(const float* table, int64_t ldt, const int64_t* ids, float* out,
                             int64_t ldo, int64_t N, int64_t C, bool accumulate);
};

/// The kernel table in use: the test override if set, else the CPU's best (or UNMASK_CPU_ISA).
const CpuKernels& kernels();

/// The table for one ISA by name. Throws Error for an unknown name and Unsupported when this
/// CPU lacks the instructions.
const CpuKernels& kernels_for(std::string_view isa);

/// ISA names this CPU can run, in order generic, avx2, avx512 (the tests loop over these).
std::vector<std::string_view> available_isas();

/// Test hook: until called again with "", kernels() returns kernels_for(isa). Not thread-safe
/// against concurrent ops; tests call it between ops.
void kernels_override_for_testing(std::string_view isa);

}  // namespace unmask::cpu
