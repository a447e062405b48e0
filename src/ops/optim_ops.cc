// ops/optim_ops.cc: the elementwise optimizer updates (AdamW, LAMB stage 1), axpy, in-place
// scaling and a deterministic sum of squares (global gradient norm, LAMB trust ratios).
//
// Every op works on whole contiguous f32 tensors seen as flat arrays of n elements, split into
// contiguous ranges across ctx.parallel_for. Results do not depend on the split: the updates
// are elementwise, and sum_squares cuts the array into fixed chunks of kSumChunk elements whose
// double partial sums are added in chunk order, so 1, 2 or 16 threads give the same bits
// (exact resume and run-to-run reproducibility depend on it).
//
// The float64 references are written out in tests/test_optimizer.cc next to the tests.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "ops/op_common.h"
#include "ops/ops.h"
#include "ops/optim_scalars.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

// ---- per-step scalars (ops/optim_scalars.h; the CUDA backend uses the same) -----------------

AdamWScalars adamw_scalars(float lr, const AdamArgs& a) {
  const double t = double(a.step);
  AdamWScalars s;
  s.grad_scale = a.grad_scale;
  s.beta1 = a.beta1;
  s.one_minus_beta1 = float(1.0 - double(a.beta1));
  s.beta2 = a.beta2;
  s.one_minus_beta2 = float(1.0 - double(a.beta2));
  s.decay = float(1.0 - double(lr) * double(a.weight_decay));
  s.step_size = float(double(lr) / (1.0 - std::pow(double(a.beta1), t)));
  s.bias2_sqrt = float(std::sqrt(1.0 - std::pow(double(a.beta2), t)));
  s.eps = a.eps;
  return s;
}

LambScalars lamb_scalars(const AdamArgs& a) {
  const double t = double(a.step);
  LambScalars s;
  s.grad_scale = a.grad_scale;
  s.beta1 = a.beta1;
  s.beta3 = float(1.0 - double(a.beta1));
  s.beta2 = a.beta2;
  s.one_minus_beta2 = float(1.0 - double(a.beta2));
  s.bias1 = float(1.0 - std::pow(double(a.beta1), t));
  s.bias2 = float(1.0 - std::pow(double(a.beta2), t));
  s.eps = a.eps;
  s.weight_decay = a.weight_decay;
  return s;
}

namespace {

// ---- kernels: raw pointers, n elements, no validation ----------------------------------------

// Elements per inner block: the loops of one block stay in L1 (a few 1 KiB arrays).
constexpr int64_t kBlock = 256;
// Elements per sum_squares chunk (fixed, whatever the thread count: the determinism guarantee).
constexpr int64_t kSumChunk = 8192;
// Elements per parallel_for range of the elementwise ops (amortises the pool wake-up).
constexpr int64_t kGrain = 32768;

// y[i] = sqrt(x[i]) for i < n (x >= 0). GCC does not vectorise std::sqrt without
// -fno-math-errno (the errno path is a call), so the SSE2 square root is spelled out; it is
// IEEE correctly rounded, bit-identical to std::sqrt.
inline void sqrt_block(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::sqrt(x[i]);
}

// torch.optim.AdamW (single-tensor path), element by element:
//   g' = gs g;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g' g'
//   p = p (1 - lr wd) - step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// p, g, m, v: [n], distinct memory.
void adamw_kernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                  float* __restrict v, int64_t n, const AdamWScalars& s) {
  float denom[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = n - b < kBlock ? n - b : kBlock;
    float* pb = p + b;
    const float* gb = g + b;
    float* mb = m + b;
    float* vb = v + b;
    for (int64_t i = 0; i < len; ++i) {
      const float gi = s.grad_scale * gb[i];
      mb[i] = mb[i] * s.beta1 + s.one_minus_beta1 * gi;
      vb[i] = vb[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
    }
    sqrt_block(vb, denom, len);
    for (int64_t i = 0; i < len; ++i) {
      const float d = denom[i] / s.bias2_sqrt + s.eps;
      pb[i] = pb[i] * s.decay - s.step_size * (mb[i] / d);
    }
  }
}

// apex LAMB stage 1 with adam_w_mode (decoupled decay), element by element:
//   g' = gs g;  m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g' g'
//   u = (m / bias1) / (sqrt(v / bias2) + eps) + wd p
// p, g, m, v, u: [n], distinct memory.
void lamb_moments_kernel(const float* __restrict p, const float* __restrict g,
                         float* __restrict m, float* __restrict v, float* __restrict u,
                         int64_t n, const LambScalars& s) {
  float v_hat[kBlock], denom[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = n - b < kBlock ? n - b : kBlock;
    const float* pb = p + b;
    const float* gb = g + b;
    float* mb = m + b;
    float* vb = v + b;
    float* ub = u + b;
    for (int64_t i = 0; i < len; ++i) {
      const float gi = s.grad_scale * gb[i];
      mb[i] = mb[i] * s.beta1 + s.beta3 * gi;
      vb[i] = vb[i] * s.beta2 + s.one_minus_beta2 * gi * gi;
      v_hat[i] = vb[i] / s.bias2;
    }
    sqrt_block(v_hat, denom, len);
    for (int64_t i = 0; i < len; ++i)
      ub[i] = (mb[i] / s.bias1) / (denom[i] + s.eps) + s.weight_decay * pb[i];
  }
}

// y += alpha x.  x, y: [n].
void axpy_kernel(float alpha, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// x *= s.  x: [n].
void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

// sum x[i]^2 over one chunk (n <= kSumChunk) in double, with four interleaved accumulators
// (element i goes to accumulator i % 4) added in a fixed order: the same bits for the same
// chunk, whichever thread runs it. Squares of f32 values are exact in double.
double sum_squares_chunk(const float* x, int64_t n) {
  double acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const double x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
    acc0 += x0 * x0;
    acc1 += x1 * x1;
    acc2 += x2 * x2;
    acc3 += x3 * x3;
  }
  for (; i < n; ++i) acc0 += double(x[i]) * double(x[i]);
  return (acc0 + acc1) + (acc2 + acc3);
}

// Device::cuda without the CUDA backend compiled in: throws Unsupported naming the op.
void require_cuda_backend([[maybe_unused]] const char* op) {
#ifndef UNMASK_WITH_CUDA
  detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
}

// ---- validation -------------------------------------------------------------------------------

// t: f32, contiguous, with the shape and device of `ref` (the first operand, named ref_name).
void check_operand(const char* op, const char* name, const Tensor& t, const char* ref_name,
                   const Tensor& ref) {
  detail::check_f32(op, name, t);
  if (&t != &ref) {
    detail::check_same_shape(op, ref_name, ref, name, t);
    detail::check_device(op, name, t, ref.device());
  }
  UNMASK_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe(),
               Hint("optimizer tensors are whole parameters; pass .contiguous() copies"));
}

// The kernels take __restrict pointers: `written` must not overlap `other` (both contiguous).
void check_no_overlap(const char* op, const char* written_name, const Tensor& written,
                      const char* other_name, const Tensor& other) {
  const auto* w = static_cast<const char*>(written.raw());
  const auto* o = static_cast<const char*>(other.raw());
  const bool overlap = w < o + other.nbytes() && o < w + written.nbytes();
  UNMASK_CHECK(!overlap, op, ": ", written_name, " (written) overlaps ", other_name, " in memory, got ",
               written_name, " ", written.describe(), " at ", written.raw(), " and ", other_name, " ",
               other.describe(), " at ", other.raw(), Hint("give every operand its own buffer"));
}

void check_adam_args(const char* op, const AdamArgs& a) {
  UNMASK_CHECK(a.step >= 1, op, ": step must be >= 1 (1-based, for the bias correction), got ", a.step);
  UNMASK_CHECK(a.beta1 >= 0.0f && a.beta1 < 1.0f && a.beta2 >= 0.0f && a.beta2 < 1.0f, op,
               ": betas must lie in [0, 1), got beta1 = ", a.beta1, ", beta2 = ", a.beta2);
  UNMASK_CHECK(std::isfinite(a.eps) && a.eps >= 0.0f, op, ": eps must be finite and >= 0, got ", a.eps);
  UNMASK_CHECK(std::isfinite(a.weight_decay), op, ": weight_decay must be finite, got ", a.weight_decay);
  UNMASK_CHECK(std::isfinite(a.grad_scale), op, ": grad_scale must be finite, got ", a.grad_scale);
}

}  // namespace

namespace {

// adamw_update's operands (also each item of adamw_update_many).
void check_adamw(const char* op, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, float lr,
                 const AdamArgs& args) {
  check_operand(op, "p", p, "p", p);
  check_operand(op, "g", g, "p", p);
  check_operand(op, "m", m, "p", p);
  check_operand(op, "v", v, "p", p);
  check_adam_args(op, args);
  UNMASK_CHECK(std::isfinite(lr), op, ": lr must be finite, got ", lr);
  if (p.device() == Device::cuda) require_cuda_backend(op);
  if (p.numel() == 0) return;
  check_no_overlap(op, "p", p, "g", g);
  check_no_overlap(op, "p", p, "m", m);
  check_no_overlap(op, "p", p, "v", v);
  check_no_overlap(op, "m", m, "g", g);
  check_no_overlap(op, "m", m, "v", v);
  check_no_overlap(op, "v", v, "g", g);
}

// lamb_moments' operands (also each item of lamb_moments_many).
void check_lamb_moments(const char* op, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                        const Tensor& update, const AdamArgs& args) {
  check_operand(op, "p", p, "p", p);
  check_operand(op, "g", g, "p", p);
  check_operand(op, "m", m, "p", p);
  check_operand(op, "v", v, "p", p);
  check_operand(op, "update", update, "p", p);
  check_adam_args(op, args);
  if (p.device() == Device::cuda) require_cuda_backend(op);
  if (p.numel() == 0) return;
  check_no_overlap(op, "m", m, "p", p);
  check_no_overlap(op, "m", m, "g", g);
  check_no_overlap(op, "m", m, "v", v);
  check_no_overlap(op, "v", v, "p", p);
  check_no_overlap(op, "v", v, "g", g);
  check_no_overlap(op, "update", update, "p", p);
  check_no_overlap(op, "update", update, "g", g);
  check_no_overlap(op, "update", update, "m", m);
  check_no_overlap(op, "update", update, "v", v);
}

}  // namespace

namespace {

// The updates on checked, non-empty operands: one tensor on either device (the one-tensor ops),
// or each item of a many-op on the CPU.
void run_adamw(Context& ctx, Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, const AdamArgs& args) {
#ifdef UNMASK_WITH_CUDA
  if (p.device() == Device::cuda)
    return cuda::adamw_update(ctx, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(),
                              p.numel(), lr, args);
#endif
  const AdamWScalars s = adamw_scalars(lr, args);
  float* pp = p.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  ctx.parallel_for(p.numel(), [&](int64_t b, int64_t e) {
    adamw_kernel(pp + b, gp + b, mp + b, vp + b, e - b, s);
  }, kGrain);
}

void run_lamb_moments(Context& ctx, const Tensor& p, const Tensor& g, Tensor& m, Tensor& v, Tensor& update,
                      const AdamArgs& args) {
#ifdef UNMASK_WITH_CUDA
  if (p.device() == Device::cuda)
    return cuda::lamb_moments(ctx, p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(),
                              update.data<float>(), p.numel(), args);
#endif
  const LambScalars s = lamb_scalars(args);
  const float* pp = p.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  float* up = update.data<float>();
  ctx.parallel_for(p.numel(), [&](int64_t b, int64_t e) {
    lamb_moments_kernel(pp + b, gp + b, mp + b, vp + b, up + b, e - b, s);
  }, kGrain);
}

}  // namespace

void adamw_update(Context& ctx, Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr,
                  const AdamArgs& args) {
  detail::OpScope op_scope(ctx, "adamw_update");
  check_adamw("adamw_update", p, g, m, v, lr, args);
  if (p.numel() > 0) run_adamw(ctx, p, g, m, v, lr, args);
}

void lamb_moments(Context& ctx, const Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                  Tensor& update, const AdamArgs& args) {
  detail::OpScope op_scope(ctx, "lamb_moments");
  check_lamb_moments("lamb_moments", p, g, m, v, update, args);
  if (p.numel() > 0) run_lamb_moments(ctx, p, g, m, v, update, args);
}

void axpy(Context& ctx, float alpha, const Tensor& x, Tensor& y) {
  detail::OpScope op_scope(ctx, "axpy");
  constexpr const char* op = "axpy";
  if (x.dtype() == DType::bf16 || x.dtype() == DType::f16) {
    // Activation residuals (bf16 training): x and y contiguous of one half dtype; CUDA kernel,
    // or on the CPU the emulation (f32 arithmetic, one rounding of y).
    UNMASK_CHECK(y.dtype() == x.dtype() && x.shape() == y.shape() && x.device() == y.device() && x.is_contiguous() &&
                     y.is_contiguous(),
                 op, ": x and y must be contiguous tensors of one dtype, shape and device, got ", x.describe(), " and ",
                 y.describe());
    UNMASK_CHECK(std::isfinite(alpha), op, ": alpha must be finite, got ", alpha);
    if (x.numel() == 0) return;
    check_no_overlap(op, "y", y, "x", x);
    if (x.device() == Device::cpu) {
      Tensor yf = detail::widen_for_cpu(y);
      axpy(ctx, alpha, detail::widen_for_cpu(x), yf);
      return detail::narrow_into(yf, y);
    }
    require_cuda_backend(op);
#ifdef UNMASK_WITH_CUDA
    return cuda::axpy_half(ctx, alpha, x.raw(), y.raw(), x.numel(), x.dtype());
#endif
  }
  check_operand(op, "x", x, "x", x);
  check_operand(op, "y", y, "x", x);
  UNMASK_CHECK(std::isfinite(alpha), op, ": alpha must be finite, got ", alpha);
  if (x.device() == Device::cuda) require_cuda_backend(op);
  if (x.numel() == 0) return;
  check_no_overlap(op, "y", y, "x", x);
#ifdef UNMASK_WITH_CUDA
  if (x.device() == Device::cuda) return cuda::axpy(ctx, alpha, x.data<float>(), y.data<float>(), x.numel());
#endif
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  ctx.parallel_for(x.numel(), [&](int64_t b, int64_t e) { axpy_kernel(alpha, xp + b, yp + b, e - b); },
                   kGrain);
}

double sum_squares(Context& ctx, const Tensor& x) {
  detail::OpScope op_scope(ctx, "sum_squares");
  constexpr const char* op = "sum_squares";
  check_operand(op, "x", x, "x", x);
  if (x.device() == Device::cuda) require_cuda_backend(op);
  const int64_t n = x.numel();
  if (n == 0) return 0.0;
#ifdef UNMASK_WITH_CUDA
  if (x.device() == Device::cuda) return cuda::sum_squares(ctx, x.data<float>(), n);
#endif
  const float* xp = x.data<float>();
  const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  std::vector<double> partial(size_t(chunks), 0.0);  // [chunks], one per fixed chunk
  ctx.parallel_for(chunks, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t begin = c * kSumChunk, end = begin + kSumChunk < n ? begin + kSumChunk : n;
      partial[size_t(c)] = sum_squares_chunk(xp + begin, end - begin);
    }
  }, kGrain / kSumChunk);
  double total = 0.0;
  for (double s : partial) total += s;  // chunk order: independent of the thread split
  return total;
}

namespace {

// sum_squares_many's operands: xs non-null, f32, contiguous, all on `device`. Returns their
// device data pointers (null for empty tensors) and sizes for the CUDA entry points.
struct ManyOperands {
  std::vector<const float*> ptrs;
  std::vector<int64_t> sizes;
};
ManyOperands check_many(const char* op, const std::vector<const Tensor*>& xs, Device device) {
  ManyOperands m;
  for (size_t i = 0; i < xs.size(); ++i) {
    const std::string name = "xs[" + std::to_string(i) + "]";
    UNMASK_CHECK(xs[i] != nullptr, op, ": ", name, " is null");
    const Tensor& x = *xs[i];
    check_operand(op, name.c_str(), x, name.c_str(), x);
    detail::check_device(op, name, x, device);
    m.sizes.push_back(x.numel());
    m.ptrs.push_back(x.numel() > 0 ? x.data<float>() : nullptr);
  }
  if (device == Device::cuda) require_cuda_backend(op);
  return m;
}

}  // namespace

void sum_squares_many(Context& ctx, const std::vector<const Tensor*>& xs, Tensor& out) {
  detail::OpScope op_scope(ctx, "sum_squares_many");
  constexpr const char* op = "sum_squares_many";
  const int64_t count = int64_t(xs.size());
  UNMASK_CHECK(out.dtype() == DType::f64 && out.ndim() == 1 && out.numel() == count && out.is_contiguous(), op,
               ": out must be a contiguous f64 [", count, "] (one sum per tensor), got ", out.describe());
  [[maybe_unused]] const ManyOperands m = check_many(op, xs, out.device());
  if (count == 0) return;
#ifdef UNMASK_WITH_CUDA
  if (out.device() == Device::cuda)
    return cuda::sum_squares_many(ctx, m.ptrs.data(), m.sizes.data(), count, out.data<double>());
#endif
  double* sums = out.data<double>();
  for (int64_t i = 0; i < count; ++i) sums[i] = sum_squares(ctx, *xs[size_t(i)]);
}

std::vector<double> sum_squares_many(Context& ctx, const std::vector<const Tensor*>& xs) {
  detail::OpScope op_scope(ctx, "sum_squares_many");
  constexpr const char* op = "sum_squares_many";
  if (xs.empty()) return {};
  UNMASK_CHECK(xs[0] != nullptr, op, ": xs[0] is null");
  [[maybe_unused]] const ManyOperands m = check_many(op, xs, xs[0]->device());
#ifdef UNMASK_WITH_CUDA
  if (xs[0]->device() == Device::cuda)  // one D2H copy and sync for all
    return cuda::sum_squares_many(ctx, m.ptrs.data(), m.sizes.data(), int64_t(xs.size()));
#endif
  std::vector<double> sums(xs.size(), 0.0);
  for (size_t i = 0; i < xs.size(); ++i) sums[i] = sum_squares(ctx, *xs[i]);
  return sums;
}

namespace {

// lamb_apply's operands (also each item of lamb_apply_many; param_sq null there: ratio 1).
void check_lamb_apply(const char* op, float lr, const Tensor* param_sq, const Tensor* update_sq, const Tensor& update,
                      const Tensor& p) {
  check_operand(op, "update", update, "update", update);
  check_operand(op, "p", p, "update", update);
  UNMASK_CHECK(std::isfinite(lr), op, ": lr must be finite, got ", lr);
  if (param_sq || update_sq) {
    UNMASK_CHECK(param_sq && update_sq, op, ": param_sq and update_sq go together (both, or neither for ratio 1)");
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"param_sq", param_sq},
                                  std::pair<const char*, const Tensor*>{"update_sq", update_sq}}) {
      UNMASK_CHECK(t->dtype() == DType::f64 && t->numel() == 1, op, ": ", name,
                   " must be an f64 [1] (a sum of squares), got ", t->describe());
      detail::check_device(op, name, *t, p.device());
    }
  }
  if (p.device() == Device::cuda) require_cuda_backend(op);
  if (p.numel() == 0) return;
  check_no_overlap(op, "p", p, "update", update);
}

// lamb_apply on checked, non-empty operands on the CPU (param_sq null: ratio 1, axpy's step).
void run_lamb_apply_cpu(const char* op, Context& ctx, float lr, const Tensor* param_sq, const Tensor* update_sq,
                        const Tensor& update, Tensor& p) {
  // The trust ratio exactly as the optimizer computed it before (double norms, one rounding to
  // f32 of the step), then axpy's kernel.
  float alpha = float(-double(lr));
  if (param_sq) {
    const double param_norm = std::sqrt(*param_sq->data<double>());
    const double update_norm = std::sqrt(*update_sq->data<double>());
    const double ratio = param_norm > 0.0 && update_norm > 0.0 ? param_norm / update_norm : 1.0;
    alpha = float(-double(lr) * ratio);
    UNMASK_CHECK(std::isfinite(alpha), op, ": the step -lr * ||p|| / ||u|| = ", alpha, " is not finite (lr ", lr,
                 ", ||p||^2 ", *param_sq->data<double>(), ", ||u||^2 ", *update_sq->data<double>(), ")");
  }
  const float* up = update.data<float>();
  float* pp = p.data<float>();
  ctx.parallel_for(p.numel(), [&](int64_t b, int64_t e) { axpy_kernel(alpha, up + b, pp + b, e - b); }, kGrain);
}

}  // namespace

void lamb_apply(Context& ctx, float lr, const Tensor& param_sq, const Tensor& update_sq, const Tensor& update,
                Tensor& p) {
  detail::OpScope op_scope(ctx, "lamb_apply");
  constexpr const char* op = "lamb_apply";
  check_lamb_apply(op, lr, &param_sq, &update_sq, update, p);
  if (p.numel() == 0) return;
#ifdef UNMASK_WITH_CUDA
  if (p.device() == Device::cuda)
    return cuda::lamb_apply(ctx, lr, param_sq.data<double>(), update_sq.data<double>(), update.data<float>(),
                            p.data<float>(), p.numel());
#endif
  run_lamb_apply_cpu(op, ctx, lr, &param_sq, &update_sq, update, p);
}

void scale_inplace(Context& ctx, Tensor& x, float s) {
  detail::OpScope op_scope(ctx, "scale_inplace");
  constexpr const char* op = "scale_inplace";
  check_operand(op, "x", x, "x", x);
  UNMASK_CHECK(std::isfinite(s), op, ": s must be finite, got ", s);
  if (x.device() == Device::cuda) require_cuda_backend(op);
  if (x.numel() == 0) return;
#ifdef UNMASK_WITH_CUDA
  if (x.device() == Device::cuda) return cuda::scale_inplace(ctx, x.data<float>(), x.numel(), s);
#endif
  float* xp = x.data<float>();
  ctx.parallel_for(x.numel(), [&](int64_t b, int64_t e) { scale_kernel(xp + b, e - b, s); }, kGrain);
}

// ---- multi-tensor forms ------------------------------------------------------------------------

namespace {

// Every item's tensors present and on one device (the first item's); returns that device.
// tensors_of returns a std::array: no allocation per item (a step passes hundreds).
template <typename Item, typename Tensors>
Device items_device(const char* op, const std::vector<Item>& items, Tensors tensors_of) {
  Device device = Device::cpu;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto ts = tensors_of(items[i]);
    for (const Tensor* t : ts) UNMASK_CHECK(t != nullptr, op, ": item ", i, " has a null tensor");
    if (i == 0) device = ts.front()->device();
    detail::check_device(op, "item " + std::to_string(i), *ts.front(), device);
  }
  return device;
}

// The items of an op that reads p, g, m, v and lr (adamw_update_many, lamb_update_many), each
// checked as adamw_update checks its operands; returns their device.
Device check_adam_items(const char* op, const std::vector<AdamItem>& items) {
  const Device device = items_device(op, items, [](const AdamItem& it) {
    return std::array<const Tensor*, 4>{it.p, it.g, it.m, it.v};
  });
  for (const AdamItem& it : items) check_adamw(op, *it.p, *it.g, *it.m, *it.v, it.lr, it.args);
  return device;
}

}  // namespace

void adamw_update_many(Context& ctx, const std::vector<AdamItem>& items) {
  detail::OpScope op_scope(ctx, "adamw_update_many");
  const Device device = check_adam_items("adamw_update_many", items);
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::adamw_update_many(ctx, items);
#endif
  (void)device;
  for (const AdamItem& it : items)
    if (it.p->numel() > 0) run_adamw(ctx, *it.p, *it.g, *it.m, *it.v, it.lr, it.args);
}

void lamb_moments_many(Context& ctx, const std::vector<AdamItem>& items) {
  detail::OpScope op_scope(ctx, "lamb_moments_many");
  constexpr const char* op = "lamb_moments_many";
  const Device device = items_device(op, items, [](const AdamItem& it) {
    return std::array<const Tensor*, 5>{it.p, it.g, it.m, it.v, it.update};
  });
  for (const AdamItem& it : items) check_lamb_moments(op, *it.p, *it.g, *it.m, *it.v, *it.update, it.args);
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::lamb_moments_many(ctx, items);
#endif
  (void)device;
  for (const AdamItem& it : items)
    if (it.p->numel() > 0) run_lamb_moments(ctx, *it.p, *it.g, *it.m, *it.v, *it.update, it.args);
}

void lamb_apply_many(Context& ctx, const std::vector<LambApplyItem>& items) {
  detail::OpScope op_scope(ctx, "lamb_apply_many");
  constexpr const char* op = "lamb_apply_many";
  const Device device = items_device(op, items, [](const LambApplyItem& it) {
    return std::array<const Tensor*, 2>{it.p, it.update};
  });
  for (const LambApplyItem& it : items) check_lamb_apply(op, it.lr, it.param_sq, it.update_sq, *it.update, *it.p);
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::lamb_apply_many(ctx, items);
#endif
  (void)device;
  for (const LambApplyItem& it : items)
    if (it.p->numel() > 0) run_lamb_apply_cpu(op, ctx, it.lr, it.param_sq, it.update_sq, *it.update, *it.p);
}

void lamb_update_many(Context& ctx, const std::vector<AdamItem>& items) {
  detail::OpScope op_scope(ctx, "lamb_update_many");
  constexpr const char* op = "lamb_update_many";
  const Device device = check_adam_items(op, items);
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::lamb_update_many(ctx, items);
#endif
  (void)device;
  // The CPU: per item the sequence of one-tensor ops, u in one scratch the size of the largest.
  int64_t largest = 0;
  for (const AdamItem& it : items) largest = std::max(largest, it.p->numel());
  if (largest == 0) return;
  Tensor u_all = Tensor::empty({largest}, DType::f32);
  Tensor sq = Tensor::empty({2}, DType::f64);
  const Tensor param_sq = sq.slice(0, 0, 1), update_sq = sq.slice(0, 1, 2);
  for (const AdamItem& it : items) {
    if (it.p->numel() == 0) continue;
    Tensor u = u_all.slice(0, 0, it.p->numel()).view(it.p->shape());
    const bool decayed = it.args.weight_decay != 0.0f;
    if (decayed) sq.data<double>()[0] = sum_squares(ctx, *it.p);
    run_lamb_moments(ctx, *it.p, *it.g, *it.m, *it.v, u, it.args);
    if (decayed) sq.data<double>()[1] = sum_squares(ctx, u);
    run_lamb_apply_cpu(op, ctx, it.lr, decayed ? &param_sq : nullptr, decayed ? &update_sq : nullptr, u, *it.p);
  }
}

}  // namespace unmask::ops
