// ops/window_attention.cc: the windowed-attention front-ends (semantics in ops.h): validate once,
// then the CPU kernel (cpu/window_attention_cpu.h) or the CUDA one (cuda/window_attention.cu).
#include <cmath>
#include <string>
#include <utility>

#include "cpu/window_attention_cpu.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif
#include "ops/op_common.h"
#include "ops/ops.h"

namespace unmask::ops {

namespace {

struct WindowShape {
  int64_t R = 0, C = 0, HS = 0, N = 0, W = 0, M = 0;
};

// A tensor of rows like q: f32 [R, C] on the CPU with unit inner stride.
detail::Rows rows_like(const char* op, const char* name, const Tensor& t, const WindowShape& s) {
  detail::check_f32(op, name, t);
  const detail::Rows r = detail::as_rows(op, name, t);
  UNMASK_CHECK(r.N == s.R && r.C == s.C, op, ": ", name, " must be [", s.R, ", ", s.C, "] like q, got ", t.describe());
  return r;
}

void check_square(const char* op, const char* name, const Tensor& t, int64_t first, int64_t N) {
  detail::check_f32(op, name, t);
  UNMASK_CHECK(t.ndim() == 3 && t.size(0) == first && t.size(1) == N && t.size(2) == N && t.is_contiguous(), op, ": ",
               name, " must be contiguous f32 [", first, ", ", N, ", ", N, "], got ", t.describe());
}

WindowShape check_window(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const WindowAttentionArgs& a) {
  detail::check_f32(op, "q", q);
  const detail::Rows qr = detail::as_rows(op, "q", q);
  WindowShape s;
  s.R = qr.N, s.C = qr.C, s.N = a.window;
  UNMASK_CHECK(a.num_heads >= 1 && s.C % a.num_heads == 0, op, ": num_heads = ", a.num_heads,
               " must be >= 1 and divide the ", s.C, " columns of q");
  s.HS = s.C / a.num_heads;
  UNMASK_CHECK(s.N >= 1 && s.R % s.N == 0, op, ": window = ", s.N, " tokens must be >= 1 and divide the ", s.R,
               " rows of q (the rows come in whole windows)");
  UNMASK_CHECK(std::isfinite(a.scale) && a.scale > 0.0f, op, ": scale must be finite and > 0, got ", a.scale);
  s.W = s.R / s.N;
  rows_like(op, "k", k, s);
  rows_like(op, "v", v, s);
  rows_like(op, "out", out, s);
  for (const Tensor* t : {&k, &v, &out}) detail::check_device(op, "q, k, v, out", *t, q.device());
  if (a.bias) {
    check_square(op, "bias", *a.bias, a.num_heads, s.N);
    detail::check_device(op, "bias", *a.bias, q.device());
  }
  if (a.mask) {
    UNMASK_CHECK(a.mask->ndim() == 3 && a.mask->size(0) >= 1, op, ": mask must be f32 [M, ", s.N, ", ", s.N,
                 "], got ", a.mask->describe());
    s.M = a.mask->size(0);
    check_square(op, "mask", *a.mask, s.M, s.N);
    detail::check_device(op, "mask", *a.mask, q.device());
    UNMASK_CHECK(s.W % s.M == 0, op, ": ", s.W, " windows are not a whole number of samples of ", s.M,
                 " windows (the mask's first dimension)");
  }
  return s;
}

void check_lse(const char* op, const Tensor& lse, const WindowShape& s, int num_heads, Device device) {
  detail::check_f32(op, "lse", lse);
  UNMASK_CHECK(lse.ndim() == 2 && lse.size(0) == num_heads && lse.size(1) == s.R && lse.is_contiguous(), op,
               ": lse must be contiguous f32 [", num_heads, ", ", s.R, "], got ", lse.describe());
  detail::check_device(op, "lse", lse, device);
}

WindowAttentionParams window_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                      const WindowAttentionArgs& a, const WindowShape& s) {
  WindowAttentionParams p;
  p.q = q.data<float>(), p.k = k.data<float>(), p.v = v.data<float>();
  p.out = const_cast<float*>(out.data<float>());
  p.ldq = q.stride(0), p.ldk = k.stride(0), p.ldv = v.stride(0), p.ldo = out.stride(0);
  p.num_heads = a.num_heads, p.head_size = s.HS, p.window = s.N, p.windows = s.W;
  p.scale = a.scale;
  p.bias = a.bias ? a.bias->data<float>() : nullptr;
  p.mask = a.mask ? a.mask->data<float>() : nullptr;
  p.masks = s.M;
  return p;
}


}  // namespace

void window_attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const WindowAttentionArgs& args, Tensor* lse) {
  detail::OpScope op_scope(ctx, "window_attention");
  constexpr const char* op = "window_attention";
  const WindowShape s = check_window(op, q, k, v, out, args);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}})
    detail::check_no_overlap(op, "out", out, name, *t, false);
  if (lse) {
    check_lse(op, *lse, s, args.num_heads, q.device());
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}})
      detail::check_no_overlap(op, "lse", *lse, name, *t, false);
  }
  if (s.R == 0) return;
  WindowAttentionParams p = window_params(q, k, v, out, args, s);
  p.lse = lse ? lse->data<float>() : nullptr;
  if (q.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::window_attention_forward(ctx, p);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  cpu::window_attention_forward(ctx, p);
}

void window_attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                               const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                               Tensor* dbias, const WindowAttentionArgs& args) {
  detail::OpScope op_scope(ctx, "window_attention_backward");
  constexpr const char* op = "window_attention_backward";
  const WindowShape s = check_window(op, q, k, v, out, args);
  check_lse(op, lse, s, args.num_heads, q.device());
  rows_like(op, "dout", dout, s);
  const std::pair<const char*, const Tensor*> inputs[] = {{"q", &q},     {"k", &k},       {"v", &v},
                                                          {"out", &out}, {"lse", &lse}, {"dout", &dout}};
  for (const auto& [name, t] : {std::pair<const char*, Tensor*>{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    rows_like(op, name, *t, s);
    detail::check_device(op, name, *t, q.device());
    for (const auto& [in_name, in] : inputs) detail::check_no_overlap(op, name, *t, in_name, *in, false);
  }
  detail::check_no_overlap(op, "dq", dq, "dk", dk, false);
  detail::check_no_overlap(op, "dq", dq, "dv", dv, false);
  detail::check_no_overlap(op, "dk", dk, "dv", dv, false);
  if (dbias) {
    check_square(op, "dbias", *dbias, args.num_heads, s.N);
    detail::check_device(op, "dbias", *dbias, q.device());
    for (const auto& [in_name, in] : inputs) detail::check_no_overlap(op, "dbias", *dbias, in_name, *in, false);
  }
  if (s.R == 0) return;
  WindowAttentionParams p = window_params(q, k, v, out, args, s);
  p.lse = const_cast<float*>(lse.data<float>());
  p.dout = dout.data<float>(), p.lddo = dout.stride(0);
  p.dq = dq.data<float>(), p.dk = dk.data<float>(), p.dv = dv.data<float>();
  p.lddq = dq.stride(0), p.lddk = dk.stride(0), p.lddv = dv.stride(0);
  p.dbias = dbias ? dbias->data<float>() : nullptr;
  if (q.device() == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    return cuda::window_attention_backward(ctx, p);
#else
    detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
  }
  cpu::window_attention_backward(ctx, p);
}

}  // namespace unmask::ops
