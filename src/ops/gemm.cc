// ops/gemm.cc: c = act(alpha * op(a) @ op(b) + bias + beta * c), 2-D or batched 3-D.
#include <cstdint>
#include <string>

#include "cpu/blas.h"
#include "ops/device_info.h"
#include "ops/op_common.h"
#include "ops/op_params.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

// The matrix dims of a 2-D or 3-D operand: rows, cols, row stride, batch, batch stride.
struct Mat {
  int64_t rows = 0, cols = 0, ld = 0, batch = 1, batch_stride = 0;
};

Mat as_mat(const char* name, const Tensor& t) {
  UNMASK_CHECK(t.ndim() == 2 || t.ndim() == 3, "gemm: ", name, " must be 2-D or 3-D, got ",
               t.describe());
  Mat m;
  m.rows = t.size(-2);
  m.cols = t.size(-1);
  UNMASK_CHECK(t.stride(-1) == 1 || m.cols <= 1, "gemm: ", name,
               " must have innermost stride 1, got ", t.describe());
  m.ld = m.rows <= 1 ? (m.cols > 1 ? m.cols : 1) : t.stride(-2);
  UNMASK_CHECK(m.ld >= m.cols || m.rows <= 1, "gemm: ", name, " rows overlap (row stride ", m.ld,
               " < ", m.cols, " columns), got ", t.describe());
  if (m.ld < 1) m.ld = 1;
  if (t.ndim() == 3) {
    m.batch = t.size(0);
    m.batch_stride = m.batch <= 1 ? 0 : t.stride(0);
  }
  return m;
}

}  // namespace

namespace {

/// The profiler's name of a GEMM call (profiling by shape): "MxNxK[xbatch] a->c N|T N|T
/// epilogue", M, N from c and K from a, whatever the shapes' validity (checked after).
std::string gemm_detail(const Tensor& a, Trans ta, Trans tb, const Tensor& c, const GemmArgs& args) {
  const auto dim = [](const Tensor& t, int from_end) { return t.ndim() >= from_end ? t.size(-from_end) : 0; };
  const int64_t M = dim(c, 2), N = dim(c, 1), K = ta == Trans::no ? dim(a, 1) : dim(a, 2);
  // (appends only: GCC 12 reports a false -Wstringop-overflow on "x" + std::to_string(...))
  std::string s = std::to_string(M);
  for (const int64_t d : {N, K, c.ndim() == 3 ? c.size(0) : int64_t(-1)}) {
    if (d < 0) break;
    s += 'x';
    s += std::to_string(d);
  }
  s += " ";
  s += dtype_name(a.dtype());
  s += "->";
  s += dtype_name(c.dtype());
  s += ta == Trans::no ? " N" : " T";
  s += tb == Trans::no ? "N" : "T";
  if (args.bias) s += " +bias";
  if (args.act != Activation::none) s += std::string(" ") + activation_name(args.act);
  if (args.beta != 0.0f) s += args.addend ? " +addend" : " +c";
  return s;
}

}  // namespace

void gemm(Context& ctx, const Tensor& a, Trans ta, const Tensor& b, Trans tb, Tensor& c,
          const GemmArgs& args_in) {
  detail::OpScope op_scope(ctx, "gemm", [&] { return gemm_detail(a, ta, tb, c, args_in); });
  constexpr const char* op = "gemm";
  GemmArgs args = args_in;  // addend: dropped below where it is copied into c instead
  // f32 anywhere; bf16 / f16 a and b (c: the same, or f32) on CUDA, emulated on the CPU.
  const bool half = detail::check_float_train(op, "a", a) | detail::check_float_train(op, "b", b) |
                    detail::check_float_train(op, "c", c);
  if (half) {
    UNMASK_CHECK(a.dtype() == b.dtype(), op, ": a and b must share a dtype, got ", a.describe(), " and ",
                 b.describe());
    UNMASK_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::f32, op, ": c must be ", dtype_name(a.dtype()),
                 " or f32, got ", c.describe());
  }
  const Device dev = c.device();
  detail::check_device(op, "a", a, dev);
  detail::check_device(op, "b", b, dev);
  const Mat ma = as_mat("a", a), mb = as_mat("b", b), mc = as_mat("c", c);
  UNMASK_CHECK(a.ndim() == c.ndim(), "gemm: a and c must both be 2-D or both 3-D, got a ",
               a.describe(), " and c ", c.describe());
  UNMASK_CHECK(b.ndim() <= a.ndim(), "gemm: b is 3-D but a is 2-D, got b ", b.describe());
  const int64_t M = ta == Trans::yes ? ma.cols : ma.rows;
  const int64_t K = ta == Trans::yes ? ma.rows : ma.cols;
  const int64_t Kb = tb == Trans::yes ? mb.cols : mb.rows;
  const int64_t N = tb == Trans::yes ? mb.rows : mb.cols;
  UNMASK_CHECK(K == Kb, "gemm: inner dims differ: op(a) is [", M, ", ", K, "] but op(b) is [", Kb,
               ", ", N, "] (a ", a.describe(), ", b ", b.describe(), ")");
  UNMASK_CHECK(mc.rows == M && mc.cols == N, "gemm: c must be [", M, ", ", N, "], got ",
               c.describe());
  UNMASK_CHECK(ma.batch == mc.batch, "gemm: a has batch ", ma.batch, " but c has batch ", mc.batch);
  UNMASK_CHECK(mb.batch == ma.batch || mb.batch == 1, "gemm: b must have batch ", ma.batch,
               " or 1 (shared), got ", b.describe());
  if (const Tensor* add = args.addend) {
    UNMASK_CHECK(add->defined() && add->device() == dev && add->dtype() == c.dtype() && add->shape() == c.shape() &&
                     add->strides() == c.strides(),
                 "gemm: the addend must have c's device, dtype, shape and strides (c ", c.describe(), "), got ",
                 add->defined() ? add->describe() : std::string("undefined"));
    // The same bytes, or none in common: a view shifted inside c would be read while written.
    const auto* a0 = static_cast<const char*>(add->raw());
    const auto* c0 = static_cast<const char*>(c.raw());
    const size_t span = size_t((mc.batch - 1) * mc.batch_stride + (mc.rows - 1) * mc.ld + mc.cols) *
                        dtype_size(c.dtype());
    UNMASK_CHECK(a0 == c0 || a0 + span <= c0 || c0 + span <= a0 || c.numel() == 0,
                 "gemm: the addend partly overlaps c (", add->describe(), " at ", add->raw(), ", c ", c.describe(),
                 " at ", c.raw(), ")", Hint("pass c itself as the addend, or a separate tensor"));
    // cuBLASLt takes it as its C operand (2-D 16-bit GEMMs on CUDA, the residual branches);
    // anywhere else c first becomes a copy of it (same values, same roundings after).
    const bool as_operand = dev == Device::cuda && half && c.ndim() == 2;
    if (add->raw() == c.raw()) {
      args.addend = nullptr;  // c itself: the plain accumulate
    } else if (!as_operand) {
      if (args.beta != 0.0f) c.copy_from(*add);
      args.addend = nullptr;
    }
  }
  if (half) {
    if (args.bias) detail::check_param(op, "bias", *args.bias, N, c.dtype(), dev);
    if (dev == Device::cpu) {
      // Emulation: f32 copies (exact), the f32 GEMM (fp32 accumulation, as the tensor cores),
      // one rounding of c. An f32 c is written in place. An activation the CUDA epilogue cannot
      // fuse (exact GELU, tanh) on a half c with beta 0 and a bias the epilogue takes (none, or
      // of c's dtype and 16-byte aligned) is applied after that rounding and rounded again, as
      // CUDA does by default (gemm_cublaslt.cc, and PyTorch eager): both backends give the same
      // roundings.
      const bool act_after_rounding =
          c.dtype() != DType::f32 && args.beta == 0.0f && (args.act == Activation::gelu || args.act == Activation::tanh) &&
          (!args.bias || (args.bias->dtype() == c.dtype() && reinterpret_cast<uintptr_t>(args.bias->raw()) % 16 == 0));
      const Tensor af = detail::widen_for_cpu(a), bf = detail::widen_for_cpu(b);
      const Tensor biasf = args.bias ? detail::widen_for_cpu(*args.bias) : Tensor();
      Tensor cf = c.dtype() == DType::f32 ? c
                  : args.beta == 0.0f     ? Tensor::zeros(c.shape(), DType::f32)
                                          : detail::widen_for_cpu(c);
      GemmArgs f32_args = args;
      f32_args.bias = args.bias ? &biasf : nullptr;
      if (act_after_rounding) f32_args.act = Activation::none;
      gemm(ctx, af, ta, bf, tb, cf, f32_args);
      detail::narrow_into(cf, c);
      if (act_after_rounding) activation(ctx, c, c, args.act);  // f32 arithmetic, a second rounding
      return;
    }
#ifdef UNMASK_WITH_CUDA
    return cuda::gemm(ctx, a, ta, b, tb, c, args);  // cuBLASLt, fp32 accumulation
#else
    detail::throw_unsupported(op, dev, a.dtype());
#endif
  }
  if (args.bias) detail::check_bias(op, *args.bias, N, dev);

  GemmParams p;
  p.a = a.data<float>();
  p.lda = ma.ld;
  p.batch_stride_a = ma.batch_stride;
  p.ta = ta;
  p.b = b.data<float>();
  p.ldb = mb.ld;
  p.batch_stride_b = mb.batch == 1 ? 0 : mb.batch_stride;
  p.tb = tb;
  p.c = c.data<float>();
  p.ldc = mc.ld;
  p.batch_stride_c = mc.batch_stride;
  p.batch = mc.batch;
  p.M = M;
  p.N = N;
  p.K = K;
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.bias = args.bias ? args.bias->data<float>() : nullptr;
  p.act = args.act;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, c.dtype(), [&](auto) { cpu::gemm(ctx, p); });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::gemm(ctx, p);
#else
      detail::throw_unsupported(op, Device::cuda, c.dtype());
#endif
  }
}

void linear_param_grads(Context& ctx, const Tensor& dy, const Tensor& x, Tensor& dw, Tensor* db) {
  if (db) bias_grad(ctx, dy, *db);
  GemmArgs acc;
  acc.beta = 1.0f;
  gemm(ctx, dy, Trans::yes, x, Trans::no, dw, acc);  // [N_out, N] @ [N, K]
}

PackedWeight pack_weight(Context& ctx, const Tensor& w, DType compute) {
  detail::OpScope op_scope(ctx, "pack_weight");
  constexpr const char* op = "pack_weight";
  detail::check_f32(op, "w", w);
  UNMASK_CHECK(w.ndim() == 2 && w.is_contiguous(), "pack_weight: w must be a contiguous [N_out, K] matrix, got ",
               w.describe());
  UNMASK_CHECK(compute == DType::f32 || compute == DType::bf16, "pack_weight: compute must be f32 or bf16, got ",
               dtype_name(compute));
  if (compute == DType::bf16) {
    if (w.device() != Device::cpu)
      throw Unsupported("pack_weight: bf16 products are a CPU path; w is on ", device_name(w.device()),
                        Hint("use fp32 here"));
    require_cpu_bf16_unit("pack_weight: bf16 products");
  }
  switch (w.device()) {
    case Device::cpu: return cpu::pack_weight(ctx, w, compute);
    case Device::cuda: break;
  }
  throw Unsupported("pack_weight: no packed GEMM for device ", device_name(w.device()),
                    Hint("use ops::gemm with the unpacked weight on this device"));
}

void gemm_packed(Context& ctx, const Tensor& a, const PackedWeight& w, Tensor& c, const GemmArgs& args) {
  detail::OpScope op_scope(ctx, "gemm_packed");
  constexpr const char* op = "gemm_packed";
  UNMASK_CHECK(w.defined(), "gemm_packed: the packed weight is empty (pack it with ops::pack_weight)");
  detail::check_f32(op, "a", a);
  detail::check_f32(op, "c", c);
  const Device dev = c.device();
  detail::check_device(op, "a", a, dev);
  UNMASK_CHECK(w.device() == dev, "gemm_packed: weight packed for ", device_name(w.device()), " but c is on ",
               device_name(dev));
  UNMASK_CHECK(a.ndim() == 2 && c.ndim() == 2, "gemm_packed: a and c must be 2-D, got a ", a.describe(), " and c ",
               c.describe());
  const Mat ma = as_mat("a", a), mc = as_mat("c", c);
  const int64_t M = ma.rows, K = ma.cols, N = w.n_out();
  UNMASK_CHECK(K == w.k(), "gemm_packed: a is [", M, ", ", K, "] but the packed weight is [", N, ", ", w.k(),
               "] (W [N_out, K]), a ", a.describe());
  UNMASK_CHECK(mc.rows == M && mc.cols == N, "gemm_packed: c must be [", M, ", ", N, "], got ", c.describe());
  if (args.bias) detail::check_bias(op, *args.bias, N, dev);
  GemmParams p;
  p.a = a.data<float>();
  p.lda = ma.ld;
  p.c = c.data<float>();
  p.ldc = mc.ld;
  p.M = M;
  p.N = N;
  p.K = K;
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.bias = args.bias ? args.bias->data<float>() : nullptr;
  p.act = args.act;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, c.dtype(), [&](auto) { cpu::gemm_packed(ctx, p, w); });
      return;
    case Device::cuda:
      detail::throw_unsupported(op, Device::cuda, c.dtype());
  }
}

}  // namespace unmask::ops
