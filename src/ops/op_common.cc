// ops/op_common.cc: validation helpers for the op front-ends (the supports() table: op_table.cc).
#include "ops/op_common.h"

#include <string>
#include <utility>

#include "ops/ops.h"

namespace unmask::ops {
namespace detail {

Rows as_rows(std::string_view op, std::string_view name, const Tensor& t) {
  UNMASK_CHECK(t.ndim() >= 1, op, ": ", name, " must have at least 1 dim, got ", t.describe());
  const int nd = t.ndim();
  Rows r;
  r.C = t.size(-1);
  UNMASK_CHECK(t.stride(-1) == 1 || r.C <= 1, op, ": ", name,
               " must have innermost stride 1, got ", t.describe());
  r.N = 1;
  for (int i = 0; i + 1 < nd; ++i) r.N *= t.size(i);
  r.ld = r.C;
  // The row stride is the stride of the innermost leading dim with size > 1; every outer dim
  // with size > 1 must step by exactly (its inner size) rows, so the rows form one sequence.
  int64_t expect = -1;
  for (int i = nd - 2; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (expect < 0) {
      r.ld = t.stride(i);
    } else {
      UNMASK_CHECK(t.stride(i) == expect, op, ": ", name,
                   " leading dims cannot be merged into rows (stride ", t.stride(i), " of dim ", i,
                   ", expected ", expect, "), got ", t.describe());
    }
    expect = t.stride(i) * t.size(i);
  }
  UNMASK_CHECK(r.N <= 1 || r.ld >= r.C, op, ": ", name, " rows overlap (row stride ", r.ld,
               " < ", r.C, " columns), got ", t.describe());
  return r;
}

void check_f32(std::string_view op, std::string_view name, const Tensor& t) {
  if (t.dtype() != DType::f32)
    throw Unsupported(op, ": ", name, " must be f32 (the one dtype the kernels implement), got ",
                      t.describe());
}

bool check_float(std::string_view op, std::string_view name, const Tensor& t) {
  if (t.dtype() == DType::f32) return false;
  if ((t.dtype() == DType::bf16 || t.dtype() == DType::f16) && t.device() == Device::cuda) return true;
  throw Unsupported(op, ": ", name, " must be f32 (or bf16 / f16 on cuda), got ", t.describe(),
                    t.device() == Device::cpu ? Hint("the CPU kernels are f32: convert the tensor, or run on cuda")
                                              : Hint("use f32, bf16 or f16"));
}

bool check_float_train(std::string_view op, std::string_view name, const Tensor& t) {
  if (t.dtype() == DType::f32) return false;
  if (t.dtype() == DType::bf16 || t.dtype() == DType::f16) return true;
  throw Unsupported(op, ": ", name, " must be f32, bf16 or f16, got ", t.describe());
}

void check_same_dtype(std::string_view op, DType dtype,
                      std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  for (const auto& [name, t] : ts)
    UNMASK_CHECK(t->dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype),
                 " like the op's other activations, got ", t->describe());
}

Tensor widen_for_cpu(const Tensor& t) {
  UNMASK_CHECK(t.device() == Device::cpu, "widen_for_cpu: ", t.describe(), " is not on the CPU");
  return t.dtype() == DType::f32 ? t : t.cast(DType::f32);
}

void narrow_into(const Tensor& src, Tensor& dst) {
  UNMASK_CHECK(src.device() == Device::cpu && dst.device() == Device::cpu && src.dtype() == DType::f32 &&
                   src.shape() == dst.shape(),
               "narrow_into: needs a host f32 source of dst's shape, got ", src.describe(), " -> ", dst.describe());
  if (src.raw() == dst.raw()) return;  // dst was f32: widen_for_cpu handed out dst itself
  dst.copy_from(dst.dtype() == DType::f32 ? src : src.cast(dst.dtype()));
}

void check_param(std::string_view op, std::string_view name, const Tensor& t, int64_t C, DType act,
                 Device device) {
  UNMASK_CHECK(t.dtype() == DType::f32 || t.dtype() == act, op, ": ", name, " must be f32 or ",
               dtype_name(act), " (the activations' dtype), got ", t.describe());
  check_device(op, name, t, device);
  UNMASK_CHECK(t.ndim() == 1 && t.size(0) == C && (t.stride(0) == 1 || C <= 1), op, ": ", name,
               " must be contiguous [", C, "], got ", t.describe());
}

void check_device(std::string_view op, std::string_view name, const Tensor& t, Device device) {
  UNMASK_CHECK(t.device() == device, op, ": ", name, " is on ", device_name(t.device()),
               " but the op runs on ", device_name(device), ", got ", t.describe());
}

void check_bias(std::string_view op, const Tensor& bias, int64_t N, Device device) {
  check_vector(op, "bias", bias, N, device);
}

void check_same_shape(std::string_view op, std::string_view a_name, const Tensor& a,
                      std::string_view b_name, const Tensor& b) {
  UNMASK_CHECK(a.shape() == b.shape(), op, ": ", b_name, " must have the shape of ", a_name, " ",
               a.shape().str(), ", got ", b.describe());
}

void check_vector(std::string_view op, std::string_view name, const Tensor& t, int64_t C,
                  Device device) {
  check_f32(op, name, t);  // Unsupported for another dtype; then the device and shape checks
  check_param(op, name, t, C, DType::f32, device);
}

std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const char* b = static_cast<const char*>(t.raw());
  if (t.numel() == 0) return {b, b};
  int64_t last = 0;
  for (int i = 0; i < t.ndim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  return {b, b + (last + 1) * int64_t(dtype_size(t.dtype()))};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  auto [a0, a1] = byte_span(a);
  auto [b0, b1] = byte_span(b);
  if (!(a0 < b1 && b0 < a1)) return false;
  // Column slices of one wide buffer (e.g. q, k, v of a fused [N, 3C] buffer) interleave
  // without sharing an element: with one common row stride ld, b's columns start at shift =
  // (b - a) mod ld relative to a's rows, and the two column ranges must meet for an overlap.
  const int64_t es = int64_t(dtype_size(a.dtype()));
  if (a.ndim() == 2 && b.ndim() == 2 && a.dtype() == b.dtype() && a.stride(1) == 1 &&
      b.stride(1) == 1 && a.stride(0) == b.stride(0) && a.size(1) <= a.stride(0) &&
      b.size(1) <= b.stride(0) && (b0 - a0) % es == 0) {
    const int64_t ld = a.stride(0);
    int64_t shift = ((b0 - a0) / es) % ld;
    if (shift < 0) shift += ld;
    return shift < a.size(1) || shift + b.size(1) > ld;
  }
  return true;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.raw() == b.raw() && a.shape() == b.shape() && a.strides() == b.strides();
}

void check_no_overlap(std::string_view op, std::string_view out_name, const Tensor& out,
                      std::string_view in_name, const Tensor& in, bool may_alias) {
  if (may_alias && same_view(out, in)) return;
  UNMASK_CHECK(!overlaps(out, in), op, ": ", out_name, " ", out.describe(), " overlaps ", in_name,
               " ", in.describe(),
               may_alias ? " (it may only be exactly the same view)" : " (it must not alias it)");
}

void throw_unsupported(std::string_view op, Device device, DType dtype) {
  throw Unsupported(op, ": no kernel for device ", device_name(device), " and dtype ",
                    dtype_name(dtype),
                    device == Device::cuda ? Hint("this build has no CUDA backend for it")
                                           : Hint("the CPU kernels implement f32"));
}

}  // namespace detail

}  // namespace unmask::ops
