// ops/op_common.h: validation helpers shared by the op front-ends (src/ops/*.cc).
//
// Every check throws unmask::Error with the op name, the tensor's role and its description
// (dtype, shape, strides, device), so a failure says what was passed and what was expected.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "ops/op_profile.h"
#include "unmask/context.h"
#include "unmask/error.h"
#include "unmask/tensor.h"

namespace unmask::ops::detail {

/// Times the op front-end call it opens (when the context's profiling is on: op_profile.h); a
/// nested op's time stays with the outer one. One line at the top of every front-end.
class OpScope {
 public:
  OpScope(Context& ctx, const char* op) : profiler_(ctx.op_profiler()) {
    if (profiler_) profiler_->begin(op);
  }
  /// With a detail for the profiler's detail mode (OpProfiler::begin(op, detail)).
  template <typename DetailFn>
  OpScope(Context& ctx, const char* op, DetailFn&& detail) : profiler_(ctx.op_profiler()) {
    if (profiler_) profiler_->begin(op, detail);
  }
  ~OpScope() {
    if (profiler_) profiler_->end();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpProfiler* profiler_;
};

/// A tensor seen as N rows of C contiguous elements, rows `ld` elements apart.
struct Rows {
  int64_t N = 0, C = 0, ld = 0;
};

/// Views t as rows over its last dim: innermost stride 1 and leading dims that collapse into
/// one row dimension with a single stride (e.g. [B, T, C] contiguous, or a column slice of a
/// wider [N, 3C] buffer). Throws naming `op`, `name` and t.describe() otherwise.
Rows as_rows(std::string_view op, std::string_view name, const Tensor& t);

/// Throws Unsupported (an Error) unless t is f32.
void check_f32(std::string_view op, std::string_view name, const Tensor& t);

/// The element type of an inference op's float tensor: f32 on any device, or bf16 / f16 on
/// CUDA (the CUDA backend computes in fp32 inside and rounds once on the store). Returns true
/// for bf16 / f16; throws Unsupported for anything else (bf16 on the CPU: the CPU kernels are
/// f32).
bool check_float(std::string_view op, std::string_view name, const Tensor& t);

/// The element type of a TRAINING op's activation tensor: f32, or bf16 / f16 on CUDA and on the
/// CPU. Returns true for bf16 / f16. The CPU runs them by emulation (widen_for_cpu, compute in
/// f32, narrow_into: the CUDA kernels' semantics of fp32 arithmetic and one rounding on the
/// store; correct, not fast: for tests and for checking the bf16 training path on any machine).
bool check_float_train(std::string_view op, std::string_view name, const Tensor& t);

/// Throws unless every tensor of `ts` has `dtype` (one storage type per op call).
void check_same_dtype(std::string_view op, DType dtype, std::initializer_list<std::pair<const char*, const Tensor*>> ts);

/// CPU emulation of low-precision storage: an f32 copy of a host tensor (t itself when f32).
Tensor widen_for_cpu(const Tensor& t);
/// dst (host, bf16 / f16 / f32) = src (host f32), rounded to nearest even.
void narrow_into(const Tensor& src, Tensor& dst);

/// A per-channel parameter vector of a low-precision op: f32 or `act` (the activations'
/// dtype), on `device`, contiguous [C].
void check_param(std::string_view op, std::string_view name, const Tensor& t, int64_t C, DType act,
                 Device device);

/// Throws unless t is on `device`.
void check_device(std::string_view op, std::string_view name, const Tensor& t, Device device);

/// A GEMM bias: f32, on `device`, contiguous [N].
void check_bias(std::string_view op, const Tensor& bias, int64_t N, Device device);

/// Throws unless a and b have the same shape.
void check_same_shape(std::string_view op, std::string_view a_name, const Tensor& a,
                      std::string_view b_name, const Tensor& b);

/// A per-channel vector: f32, on `device`, contiguous [C] (gamma, beta, dbias, ...).
void check_vector(std::string_view op, std::string_view name, const Tensor& t, int64_t C,
                  Device device);

/// Whether a and b may share memory: their byte spans (first to last element; non-negative
/// strides) intersect, except for 2-D row views with one common row stride whose column ranges
/// do not meet (column slices of one wide buffer). Used to reject outputs that would overwrite
/// inputs still needed.
bool overlaps(const Tensor& a, const Tensor& b);
/// [first byte, one past the last byte] of t's elements (non-negative strides).
std::pair<const char*, const char*> byte_span(const Tensor& t);

/// a and b are the same view (same first element, shape and strides): the "may alias" case.
bool same_view(const Tensor& a, const Tensor& b);

/// Throws unless out is the same view as in (when `may_alias`) or does not overlap it.
void check_no_overlap(std::string_view op, std::string_view out_name, const Tensor& out,
                      std::string_view in_name, const Tensor& in, bool may_alias);

/// Throws Unsupported for an (op, device, dtype) no backend implements.
[[noreturn]] void throw_unsupported(std::string_view op, Device device, DType dtype);

/// Calls fn(float{}) for f32 (the one floating type the kernels implement so far) and throws
/// Unsupported for any other dtype. New dtypes become new cases here, not new macros.
template <typename Fn> void dispatch_float(std::string_view op, Device device, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    default: throw_unsupported(op, device, dtype);
  }
}

}  // namespace unmask::ops::detail
