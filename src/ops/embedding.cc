// ops/embedding.cc: out[i, :] = table[ids[i], :] (+ out[i, :]), a row gather, and its backward
// dtable[ids[i], :] += dout[i, :], a deterministic scatter-add (training).
#include <algorithm>
#include <cmath>
#include <utility>

#include "cpu/kernels.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

// Every id must index a table row; the first bad one is reported with its position.
template <typename Id> void check_ids(const Id* ids, int64_t N, int64_t V, const char* op = "embedding") {
  for (int64_t i = 0; i < N; ++i)
    if (ids[i] < 0 || int64_t(ids[i]) >= V)
      throw Error(op, ": ids[", i, "] = ", int64_t(ids[i]), " is outside [0, ", V,
                  ") (table has ", V, " rows)");
}

}  // namespace

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out, bool accumulate) {
  detail::OpScope op_scope(ctx, "embedding");
  constexpr const char* op = "embedding";
  // f32 anywhere; bf16 / f16 table and out on CUDA (a row copy: no arithmetic unless accumulate).
  const bool half = detail::check_float(op, "table", table);
  UNMASK_CHECK(out.dtype() == table.dtype(), op, ": out must have the table's dtype ", dtype_name(table.dtype()),
               ", got ", out.describe());
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
  if (half || dev == Device::cuda) {  // ids are on the device (checked above): trusted there
#ifdef UNMASK_WITH_CUDA
    return cuda::embedding(ctx, table, ids, out, accumulate);
#else
    detail::throw_unsupported(op, dev, table.dtype());
#endif
  }
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
      break;  // dispatched above
  }
}

void embedding_layernorm(Context& ctx, const Tensor& ids, const Tensor& pos_ids, const Tensor* type_ids,
                         const Tensor& word, const Tensor& pos, const Tensor& type, const Tensor& gamma,
                         const Tensor& beta, float eps, Tensor& out) {
  detail::OpScope op_scope(ctx, "embedding_layernorm");
  constexpr const char* op = "embedding_layernorm";
  const Device dev = out.device();
  const int64_t N = ids.numel();
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"ids", &ids}, {"pos_ids", &pos_ids},
                                {"type_ids", type_ids}}) {
    if (!t) continue;
    UNMASK_CHECK(t->dtype() == DType::i32 && t->ndim() == 1 && t->size(0) == N && t->is_contiguous(), op, ": ", name,
                 " must be contiguous i32 [", N, "], got ", t->describe());
    detail::check_device(op, name, *t, dev);
  }
  detail::check_float(op, "out", out);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"word", &word}, {"pos", &pos}, {"type", &type}}) {
    UNMASK_CHECK(t->dtype() == out.dtype() && t->ndim() == 2 && t->size(1) == out.size(-1), op, ": ", name,
                 " must be ", dtype_name(out.dtype()), " [*, ", out.size(-1), "] like out, got ", t->describe());
    detail::check_device(op, name, *t, dev);
  }
  UNMASK_CHECK(out.ndim() == 2 && out.size(0) == N, op, ": out must be [", N, ", C], got ", out.describe());
  if (dev == Device::cpu) {
    embedding(ctx, word, ids, out);
    embedding(ctx, pos, pos_ids, out, /*accumulate=*/true);
    if (type_ids) {
      embedding(ctx, type, *type_ids, out, /*accumulate=*/true);
    } else {
      const Tensor zeros = Tensor::zeros({N}, DType::i32);
      embedding(ctx, type, zeros, out, /*accumulate=*/true);
    }
    layernorm(ctx, out, nullptr, gamma, beta, eps, out);
    return;
  }
  detail::check_param(op, "gamma", gamma, out.size(1), out.dtype(), dev);
  detail::check_param(op, "beta", beta, out.size(1), out.dtype(), dev);
  UNMASK_CHECK(std::isfinite(eps) && eps >= 0.0f, op, ": eps must be finite and >= 0, got ", eps);
  if (N == 0) return;
#ifdef UNMASK_WITH_CUDA
  cuda::embedding_layernorm(ctx, ids, pos_ids, type_ids, word, pos, type, gamma, beta, eps, out);
#else
  detail::throw_unsupported(op, dev, out.dtype());
#endif
}

// No atomics and no per-thread copies of the table: the threads own disjoint column blocks and
// each walks all N rows in order, so every element of dtable receives its additions in row
// order whatever the thread count (bitwise deterministic).
void embedding_backward(Context& ctx, const Tensor& ids, const Tensor& dout, Tensor& dtable) {
  detail::OpScope op_scope(ctx, "embedding_backward");
  constexpr const char* op = "embedding_backward";
  detail::check_f32(op, "dout", dout);
  detail::check_f32(op, "dtable", dtable);
  UNMASK_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, op,
               ": ids must be i32 or i64, got ", ids.describe());
  const Device dev = dtable.device();
  detail::check_device(op, "ids", ids, dev);
  detail::check_device(op, "dout", dout, dev);
  UNMASK_CHECK(dtable.ndim() == 2, op, ": dtable must be [V, C], got ", dtable.describe());
  UNMASK_CHECK(ids.is_contiguous(), op, ": ids must be contiguous, got ", ids.describe());
  const detail::Rows rt = detail::as_rows(op, "dtable", dtable);
  const detail::Rows ro = detail::as_rows(op, "dout", dout);
  const int64_t N = ids.numel(), V = dtable.size(0), C = rt.C;
  UNMASK_CHECK(ro.C == C && ro.N == N, op, ": dout must be [", N, ", ", C, "] (ids ",
               ids.shape().str(), ", dtable ", dtable.shape().str(), "), got ", dout.describe());
  detail::check_no_overlap(op, "dtable", dtable, "dout", dout, false);
  if (N == 0 || C == 0) return;
  switch (dev) {
    case Device::cpu:
      detail::dispatch_float(op, Device::cpu, dtable.dtype(), [&](auto) {
        const cpu::CpuKernels& k = cpu::kernels();
        constexpr int64_t kBlock = 16;  // columns per block: one cache line
        const int64_t blocks = (C + kBlock - 1) / kBlock;
        const float* dp = dout.data<float>();
        float* tp = dtable.data<float>();
        const int64_t grain = 1 + 4096 / N;
        auto run = [&](auto* id) {
          check_ids(id, N, V, op);
          ctx.parallel_for(blocks, [&](int64_t b, int64_t e) {
            const int64_t c0 = b * kBlock, c1 = std::min(C, e * kBlock);
            if constexpr (sizeof(*id) == 4)
              k.embedding_backward_i32(id, dp + c0, ro.ld, tp + c0, rt.ld, N, c1 - c0);
            else
              k.embedding_backward_i64(id, dp + c0, ro.ld, tp + c0, rt.ld, N, c1 - c0);
          }, grain);
        };
        if (ids.dtype() == DType::i32) run(ids.data<int32_t>());
        else run(ids.data<int64_t>());
      });
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      return cuda::embedding_backward(ctx, ids.raw(), ids.dtype(), dout.data<float>(), ro.ld,
                                      dtable.data<float>(), rt.ld, V, N, C);
#else
      detail::throw_unsupported(op, Device::cuda, dtable.dtype());
#endif
  }
}

}  // namespace unmask::ops
