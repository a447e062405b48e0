// ops/softmax.cc: row-wise softmax over the last dim, and its backward (training); ops::copy,
// copy_many and zero_many.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {

void softmax(Context& ctx, const Tensor& x, Tensor& y) {
  detail::OpScope op_scope(ctx, "softmax");
  constexpr const char* op = "softmax";
  const bool half = detail::check_float(op, "x", x);
  UNMASK_CHECK(y.dtype() == x.dtype(), op, ": y must have x's dtype ", dtype_name(x.dtype()), ", got ", y.describe());
  detail::check_same_shape(op, "x", x, "y", y);
  detail::check_device(op, "y", y, x.device());
  if (x.numel() == 0) return;
  if (half) {  // bf16 / f16 on CUDA
#ifdef UNMASK_WITH_CUDA
    return cuda::softmax(ctx, x, y);
#else
    detail::throw_unsupported(op, x.device(), x.dtype());
#endif
  }
  const detail::Rows rx = detail::as_rows(op, "x", x), ry = detail::as_rows(op, "y", y);
  switch (x.device()) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, x.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* xp = x.data<float>();
        float* yp = y.data<float>();
        ctx.parallel_for(rx.N, [&](int64_t b, int64_t e) {
          k.softmax_rows(xp + b * rx.ld, rx.ld, yp + b * ry.ld, ry.ld, e - b, rx.C);
        }, 1 + 8192 / rx.C);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::softmax(ctx, x.data<float>(), rx.ld, y.data<float>(), ry.ld, rx.N, rx.C);
#else
      detail::throw_unsupported(op, Device::cuda, x.dtype());
#endif
  }
}

void copy(Context& ctx, const Tensor& src, Tensor& dst) {
  detail::OpScope op_scope(ctx, "copy");
  constexpr const char* op = "copy";
  detail::check_same_shape(op, "src", src, "dst", dst);
  if (src.dtype() != dst.dtype()) {
    auto is_float = [](DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; };
    UNMASK_CHECK(is_float(src.dtype()) && is_float(dst.dtype()) && src.device() == dst.device(), op,
                 ": dst must have src's dtype, or both must be float tensors (f32, bf16, f16) on one device, got src ",
                 src.describe(), " and dst ", dst.describe());
  }
  if (src.device() == dst.device()) detail::check_no_overlap(op, "dst", dst, "src", src, false);
  if (src.numel() == 0) return;
  if (src.device() == Device::cpu && dst.device() == Device::cpu) {
    (void)ctx;
    return dst.copy_from(src.dtype() == dst.dtype() ? src : src.cast(dst.dtype()));
  }
#ifdef UNMASK_WITH_CUDA
  UNMASK_CHECK(ctx.device() == Device::cuda, op, ": a side is on cuda but the context runs on ", device_name(ctx.device()));
  cuda::copy(ctx, src, dst);
#else
  detail::throw_unsupported(op, Device::cuda, src.dtype());
#endif
}

void copy_many(Context& ctx, const std::vector<CopyItem>& items) {
  detail::OpScope op_scope(ctx, "copy_many");
  constexpr const char* op = "copy_many";
  for (size_t i = 0; i < items.size(); ++i)
    UNMASK_CHECK(items[i].src && items[i].dst, op, ": item ", i, " has a null tensor");
  // A dst may not meet any other item's src or dst (then the items' order would matter). The
  // byte spans sorted by start: only spans that intersect get the exact test (a training step
  // passes ~200 disjoint items; the pairwise test would cost milliseconds).
  struct Span {
    uintptr_t begin, end;  // addresses of unrelated allocations: compared as integers
    size_t item;
    bool dst;
  };
  std::vector<Span> spans;
  spans.reserve(2 * items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (const bool dst : {false, true}) {
      const Tensor& t = dst ? *items[i].dst : *items[i].src;
      const auto [b, e] = detail::byte_span(t);
      if (b != e) spans.push_back({reinterpret_cast<uintptr_t>(b), reinterpret_cast<uintptr_t>(e), i, dst});
    }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t a = 0; a < spans.size(); ++a)
    for (size_t b = a + 1; b < spans.size() && spans[b].begin < spans[a].end; ++b) {
      const Span& x = spans[a];
      const Span& y = spans[b];
      if (x.item == y.item || !(x.dst || y.dst)) continue;  // an item's own pair: copy's check
      const Span& w = x.dst ? x : y;  // a written one
      const Span& o = x.dst ? y : x;
      const Tensor& written = *items[w.item].dst;
      const Tensor& other = o.dst ? *items[o.item].dst : *items[o.item].src;
      detail::check_no_overlap(op, "item " + std::to_string(w.item) + "'s dst", written,
                               "item " + std::to_string(o.item) + (o.dst ? "'s dst" : "'s src"), other, false);
    }
  for (const CopyItem& it : items)  // before any copy: a context on the wrong device copies nothing
    UNMASK_CHECK((it.src->device() == Device::cpu && it.dst->device() == Device::cpu) || ctx.device() == Device::cuda,
                 op, ": a side is on cuda but the context runs on ", device_name(ctx.device()));
  std::vector<CopyItem> batched;  // CUDA, contiguous f32 -> bf16 / f16: the multi-tensor kernel
  for (const CopyItem& it : items) {
    const Tensor& src = *it.src;
    const Tensor& dst = *it.dst;
    const bool batchable = src.device() == Device::cuda && dst.device() == Device::cuda && src.dtype() == DType::f32 &&
                           (dst.dtype() == DType::bf16 || dst.dtype() == DType::f16) && src.shape() == dst.shape() &&
                           src.is_contiguous() && dst.is_contiguous();
    if (batchable && src.numel() > 0) {
      detail::check_no_overlap(op, "dst", dst, "src", src, false);
      batched.push_back(it);
    } else {
      copy(ctx, src, *it.dst);  // every check and path of copy, and its bits
    }
  }
  if (batched.empty()) return;
#ifdef UNMASK_WITH_CUDA
  cuda::copy_many(ctx, batched);
#else
  detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
}

void softmax_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx) {
  detail::OpScope op_scope(ctx, "softmax_backward");
  constexpr const char* op = "softmax_backward";
  const Device dev = y.device();
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"y", &y}, {"dy", &dy}, {"dx", &dx}}) {
    detail::check_f32(op, name, *t);
    detail::check_device(op, name, *t, dev);
    detail::check_same_shape(op, "y", y, name, *t);
  }
  detail::check_no_overlap(op, "dx", dx, "dy", dy, true);
  detail::check_no_overlap(op, "dx", dx, "y", y, false);  // y is re-read after the row's dot
  if (y.numel() == 0) return;
  const detail::Rows ry = detail::as_rows(op, "y", y), rdy = detail::as_rows(op, "dy", dy),
                     rdx = detail::as_rows(op, "dx", dx);
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, y.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* yp = y.data<float>();
        const float* dyp = dy.data<float>();
        float* dxp = dx.data<float>();
        ctx.parallel_for(ry.N, [&](int64_t b, int64_t e) {
          k.softmax_backward_rows(yp + b * ry.ld, ry.ld, dyp + b * rdy.ld, rdy.ld, dxp + b * rdx.ld,
                                  rdx.ld, e - b, ry.C);
        }, 1 + 8192 / ry.C);
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::softmax_backward(ctx, y.data<float>(), ry.ld, dy.data<float>(), rdy.ld,
                                    dx.data<float>(), rdx.ld, ry.N, ry.C);
#else
      detail::throw_unsupported(op, Device::cuda, y.dtype());
#endif
  }
}

void zero_many(Context& ctx, const std::vector<Tensor*>& tensors) {
  detail::OpScope op_scope(ctx, "zero_many");
  constexpr const char* op = "zero_many";
  for (size_t i = 0; i < tensors.size(); ++i) {  // every check before any write
    const Tensor* t = tensors[i];
    UNMASK_CHECK(t && t->defined(), op, ": tensor ", i, " is ", t ? "undefined" : "null");
    UNMASK_CHECK(t->is_contiguous(), op, ": tensor ", i, " must be contiguous, got ", t->describe(),
                 Hint("zero a contiguous copy, or each contiguous part"));
    UNMASK_CHECK(t->device() == ctx.device(), op, ": tensor ", i, " is on ", device_name(t->device()),
                 " but the context runs on ", device_name(ctx.device()));
  }
  if (ctx.device() == Device::cpu) {
    for (Tensor* t : tensors)
      if (t->nbytes()) std::memset(t->raw(), 0, t->nbytes());
    return;
  }
#ifdef UNMASK_WITH_CUDA
  cuda::zero_many(ctx, tensors);
#else
  detail::throw_unsupported(op, Device::cuda, DType::f32);
#endif
}

}  // namespace unmask::ops
