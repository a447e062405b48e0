// ops/embedding.cc: out[i, :] = table[ids[i], :] (+ out[i, :]), a row gather.
#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

// Every id must index a table row; the first bad one is reported with its position.
template <typename Id> void check_ids(const Id* ids, int64_t N, int64_t V) {
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] < 0 || int64_t(ids[i]) >= V)
      throw Error("embedding: ids[", i, "] = ", int64_t(ids[i]), " is outside [0, ", V,
                  ") (table has ", V, " rows)");
}

}  // namespace

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out, bool accumulate) {
  constexpr const char* op = "embedding";
  detail::check_f32(op, "table", table);
  detail::check_f32(op, "out", out);
  UNMASK_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op,
               ": ids must be i32 or i64, got ", ids.describe());
  const Device dev = table.device();
  detail::check_device(op, "ids", ids, dev);
  detail::check_device(op, "out", out, dev);
  UNMASK_CHECK(table.ndim() == 2, op, ": table must be [V, C], got ", table.describe());
  UNMASK_CHECK(ids.is_contiguous(), op, ": ids must be contiguous, got ", ids.describe());
  const detail::Rows rt = detail::as_rows(op, "table", table);
  const detail::Rows ro = detail::as_rows(op, "out", out);
  const int64_t N = ids.numel(), V = table.size(0);
  UNMASK_CHECK(ro.C == rt.C && ro.N == N, op, ": out must be [", N, ", ", rt.C, "] (ids ",
               ids.shape().str(), ", table ", table.shape().str(), "), got ", out.describe());
  if (N == 0 || rt.C == 0) return;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, table.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        const float* tp = table.data<float>();
        float* op_ = out.data<float>();
        const int64_t grain = 1 + 16384 / rt.C;
        if (ids.dtype() == DType::i32) {
          const int32_t* id = ids.data<int32_t>();
          check_ids(id, N, V);
          ctx.parallel_for(N, [&](int64_t b, int64_t e) {
            k.embedding_rows_i32(tp, rt.ld, id + b, op_ + b * ro.ld, ro.ld, e - b, rt.C, accumulate);
          }, grain);
        } else {
          const int64_t* id = ids.data<int64_t>();
          check_ids(id, N, V);
          ctx.parallel_for(N, [&](int64_t b, int64_t e) {
            k.embedding_rows_i64(tp, rt.ld, id + b, op_ + b * ro.ld, ro.ld, e - b, rt.C, accumulate);
          }, grain);
        }
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::embedding(ctx, table.data<float>(), rt.ld, V, ids.raw(), ids.dtype(),
                             out.data<float>(), ro.ld, N, rt.C, accumulate);
#else
      detail::throw_unsupported(op, Device::cuda, table.dtype());
#endif
  }
}

}  // namespace unmask::ops
