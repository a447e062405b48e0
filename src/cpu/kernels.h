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

#include "core/philox.h"
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

  // ---- training (cpu/kernels_train_impl.inc) ----

  /// layernorm_rows that also writes the row statistics mean[n] and rstd[n] = 1/sqrt(var+eps)
  /// ([N] each); y must not alias x or residual.
  void (*layernorm_stats_rows)(const float* x, int64_t ldx, const float* residual, int64_t ldr,
                               const float* gamma, const float* beta, float eps, float* y,
                               int64_t ldy, float* mean, float* rstd, int64_t N, int64_t C);

  /// Layernorm backward: dx[n, :] (overwritten, or added to when accumulate; may alias dy when
  /// not accumulating) and the parameter partials dgamma_acc += sum_n dy * xhat,
  /// dbeta_acc += sum_n dy (rows summed in order).
  ///   x, residual (or null), dy, dx: [N, C] with their row strides; gamma: [C];
  ///   mean, rstd: [N] from layernorm_stats_rows; dgamma_acc, dbeta_acc: [C].
  void (*layernorm_backward_rows)(const float* x, int64_t ldx, const float* residual, int64_t ldr,
                                  const float* gamma, const float* mean, const float* rstd,
                                  const float* dy, int64_t lddy, float* dx, int64_t lddx,
                                  float* dgamma_acc, float* dbeta_acc, int64_t N, int64_t C,
                                  bool accumulate);

  /// dx = dy * act'(x), x the activation input. [N, C] each with its row stride; dx may alias dy.
  void (*act_backward_rows)(const float* x, int64_t ldx, const float* dy, int64_t lddy, float* dx,
                            int64_t lddx, int64_t N, int64_t C, ops::Activation act);

  /// dx = y * (dy - rowsum(dy * y)). [N, C] each with its row stride; dx may alias dy.
  void (*softmax_backward_rows)(const float* y, int64_t ldy, const float* dy, int64_t lddy,
                                float* dx, int64_t lddx, int64_t N, int64_t C);

  /// dbias[c] += sum over n = 0..N-1 (in order) of dy[n, c]. dy: [N, C] (lddy); dbias: [C].
  void (*bias_grad_cols)(const float* dy, int64_t lddy, float* dbias, int64_t N, int64_t C);

  /// dtable[ids[n], :] += dout[n, :] for n = 0..N-1 in order. ids trusted in [0, V).
  ///   dout: [N, C] (ldo); dtable: [V, C] (ldt).
  void (*embedding_backward_i32)(const int32_t* ids, const float* dout, int64_t ldo, float* dtable,
                                 int64_t ldt, int64_t N, int64_t C);
  void (*embedding_backward_i64)(const int64_t* ids, const float* dout, int64_t ldo, float* dtable,
                                 int64_t ldt, int64_t N, int64_t C);

  /// Softmax cross-entropy per row of logits [N, V] (ld) with targets [N] (< V; negative =
  /// ignored): loss[n] = logsumexp - x[target] (0 if ignored), argmax[n] = first index of the
  /// row maximum (-1 if ignored), and when dl is non-null dl = grad_scale (softmax - onehot)
  /// (zeros for an ignored row). dl: [N, V] (lddl), may alias logits.
  void (*cross_entropy_rows)(const float* logits, int64_t ld, const int32_t* targets, float* dl,
                             int64_t lddl, float grad_scale, float* loss, int32_t* argmax,
                             int64_t N, int64_t V);

  /// y[n, c] = x[n, c] * scale if philox_uniform(seed, counter0 + n*C + c) >= p else 0
  /// (core/philox.h; scale = 1/(1-p)). x (ldx), y (ldy): [N, C]; y may alias x.
  void (*dropout_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C,
                       float p, float scale, uint64_t seed, uint64_t counter0);

  /// y = softmax(x) per row and lse[n] = log(sum exp(x[n, :])); -inf entries allowed (each row
  /// needs a finite one). x (ldx), y (ldy): [N, C], y may alias x; lse: [N].
  void (*softmax_lse_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N,
                           int64_t C, float* lse);

  /// y = exp(x - sub[n]) per row. x (ldx), y (ldy): [N, C], y may alias x; sub: [N] finite.
  void (*exp_sub_rows)(const float* x, int64_t ldx, const float* sub, float* y, int64_t ldy,
                       int64_t N, int64_t C);

  /// Attention score gradient in place: dpd = p * (dP - delta[n]), dP = dpd * keep_scale where
  /// pd > 0 else 0 (pd null: dP = dpd). p, pd, dpd: [N, C] (row stride ld); delta: [N].
  void (*attn_dscores_rows)(const float* p, const float* pd, float* dpd, int64_t ld,
                            const float* delta, float keep_scale, int64_t N, int64_t C);
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
