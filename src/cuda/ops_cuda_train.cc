// cuda/ops_cuda_train.cc: the training entry points of the CUDA backend (ops_cuda.h, section
// "training"): the context's stream and the per-step scalars, then one launcher each
// (train_kernels.h).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "cuda/train_kernels.h"

namespace unmask::cuda {

void layernorm_stats(Context& ctx, const void* x, int64_t ldx, const void* residual, int64_t ldr, const float* gamma,
                     const float* beta, float eps, void* y, int64_t ldy, float* mean, float* rstd, int64_t N, int64_t C,
                     DType dtype) {
  CudaState& st = cuda_state(ctx);
  layernorm_forward_stats(y, ldy, mean, rstd, x, ldx, residual, ldr, gamma, beta, eps, N, C, dtype, st.stream);
}

void layernorm_backward(Context& ctx, const void* x, int64_t ldx, const void* residual, int64_t ldr,
                        const float* gamma, const float* mean, const float* rstd, const void* dy, int64_t lddy,
                        void* dx, int64_t lddx, float* dgamma, float* dbeta, int64_t N, int64_t C, DType dtype,
                        bool accumulate_dx) {
  CudaState& st = cuda_state(ctx);
  layernorm_backward_rows(dx, lddx, dgamma, dbeta, x, ldx, residual, ldr, gamma, mean, rstd, dy, lddy, N, C, dtype,
                          st.stream, accumulate_dx);
}

void activation_backward(Context& ctx, const void* x, int64_t ldx, const void* dy, int64_t lddy, void* dx,
                         int64_t lddx, int64_t N, int64_t C, ops::Activation act, DType dtype, void* y, int64_t ldy,
                         float* dbias) {
  CudaState& st = cuda_state(ctx);
  activation_backward_rows(dx, lddx, x, ldx, dy, lddy, N, C, act, dtype, st.stream, y, ldy, dbias);
}

void bias_grad(Context& ctx, const void* dy, int64_t lddy, float* dbias, int64_t N, int64_t C, DType dtype) {
  CudaState& st = cuda_state(ctx);
  bias_grad_cols(dbias, dy, lddy, N, C, dtype, st.stream);
}

void softmax_backward(Context& ctx, const float* y, int64_t ldy, const float* dy, int64_t lddy, float* dx,
                      int64_t lddx, int64_t N, int64_t C) {
  CudaState& st = cuda_state(ctx);
  softmax_backward_rows(dx, lddx, y, ldy, dy, lddy, N, C, DType::f32, st.stream);
}

void dropout(Context& ctx, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t N, int64_t C, float p,
             uint64_t seed, uint64_t offset, DType dtype) {
  CudaState& st = cuda_state(ctx);
  dropout_rows(y, ldy, x, ldx, N, C, p, seed, offset, dtype, st.stream);
}

void embedding_backward(Context& ctx, const void* ids, DType id_dtype, const float* dout, int64_t ldo, float* dtable,
                        int64_t ldt, int64_t V, int64_t N, int64_t C) {
  CudaState& st = cuda_state(ctx);
  UNMASK_CHECK(id_dtype == DType::i32 || id_dtype == DType::i64, "embedding_backward (cuda): ids must be i32 or i64, got ",
               dtype_name(id_dtype));
  if (N == 0 || C == 0) return;
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, ids));
  const void* dev_ids = ids;
  std::unique_ptr<ScratchBuffer> upload;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {  // host ids: check, upload
    for (int64_t i = 0; i < N; ++i) {
      const int64_t id = id_dtype == DType::i64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
      if (id < 0 || id >= V)
        throw Error("embedding_backward: ids[", i, "] = ", id, " is outside [0, ", V, ") (table has ", V, " rows)");
    }
    const size_t bytes = size_t(N) * dtype_size(id_dtype);
    upload = std::make_unique<ScratchBuffer>(bytes, st.stream);
    CUDA_CHECK(cudaMemcpyAsync(upload->ptr, ids, bytes, cudaMemcpyHostToDevice, st.stream));
    CUDA_CHECK(cudaStreamSynchronize(st.stream));  // the host ids may be freed after we return
    dev_ids = upload->ptr;
  }
  embedding_backward_rows(dtable, ldt, V, dev_ids, id_dtype, dout, ldo, N, C, st.stream);
}

ops::CrossEntropyStats cross_entropy(Context& ctx, const float* logits, int64_t ld, const int32_t* targets,
                                     float* losses, float* dlogits, int64_t lddl, float grad_scale, int64_t M,
                                     int64_t V) {
  CudaState& st = cuda_state(ctx);
  ops::CrossEntropyStats stats;
  if (M == 0) return stats;
  std::unique_ptr<ScratchBuffer> own_losses;
  if (!losses) {
    own_losses = std::make_unique<ScratchBuffer>(size_t(M) * sizeof(float), st.stream);
    losses = own_losses->as<float>();
  }
  const CrossEntropyTotals t = cross_entropy_rows(logits, ld, targets, losses, dlogits, lddl, grad_scale, M, V, st.stream);
  if (t.first_bad_row >= 0) {
    int32_t bad = 0;
    CUDA_CHECK(cudaMemcpy(&bad, targets + t.first_bad_row, sizeof bad, cudaMemcpyDeviceToHost));
    throw Error("cross_entropy: targets[", t.first_bad_row, "] = ", bad, " is not a class of logits with V = ", V,
                " columns", Hint("targets must be in [0, V), or negative to ignore the row"));
  }
  stats.loss_sum = t.loss_sum;
  stats.count = t.count;
  stats.correct = t.correct;
  return stats;
}

// The per-step scalars come from ops/optim_scalars.h, as on the CPU.
void adamw_update(Context& ctx, float* p, const float* g, float* m, float* v, int64_t n, float lr,
                  const ops::AdamArgs& a) {
  CudaState& st = cuda_state(ctx);
  const ops::AdamWScalars s = ops::adamw_scalars(lr, a);
  adamw_update_n(p, g, m, v, n, s, st.stream);
}

void adamw_update_many(Context& ctx, const std::vector<ops::AdamItem>& items) {
  std::vector<AdamWTensor> ts;
  ts.reserve(items.size());
  for (const ops::AdamItem& it : items)
    ts.push_back({it.p->data<float>(), it.g->data<float>(), it.m->data<float>(), it.v->data<float>(), it.p->numel(),
                  ops::adamw_scalars(it.lr, it.args)});
  adamw_update_many_n(ts.data(), int64_t(ts.size()), cuda_state(ctx).stream);
}

void copy_many(Context& ctx, const std::vector<ops::CopyItem>& items) {
  for (const DType to : {DType::bf16, DType::f16}) {
    std::vector<CastTensor> ts;
    for (const ops::CopyItem& it : items)
      if (it.dst->dtype() == to) ts.push_back({it.src->data<float>(), it.dst->raw(), it.src->numel()});
    if (!ts.empty()) cast_many_n(ts.data(), int64_t(ts.size()), to, cuda_state(ctx).stream);
  }
}

void zero_many(Context& ctx, const std::vector<Tensor*>& tensors) {
  const cudaStream_t stream = cuda_state(ctx).stream;
  std::vector<ZeroTensor> words;
  words.reserve(tensors.size());
  for (Tensor* t : tensors) {
    const size_t bytes = t->nbytes();
    if (bytes == 0) continue;
    if (reinterpret_cast<uintptr_t>(t->raw()) % 4 == 0 && bytes % 4 == 0)
      words.push_back({static_cast<uint32_t*>(t->raw()), int64_t(bytes / 4)});
    else
      CUDA_CHECK(cudaMemsetAsync(t->raw(), 0, bytes, stream));
  }
  if (!words.empty()) zero_many_n(words.data(), int64_t(words.size()), stream);
}

void lamb_moments_many(Context& ctx, const std::vector<ops::AdamItem>& items) {
  std::vector<LambMomentsTensor> ts;
  ts.reserve(items.size());
  for (const ops::AdamItem& it : items)
    ts.push_back({it.p->data<float>(), it.g->data<float>(), it.m->data<float>(), it.v->data<float>(),
                  it.update->data<float>(), it.p->numel(), ops::lamb_scalars(it.args)});
  lamb_moments_many_n(ts.data(), int64_t(ts.size()), cuda_state(ctx).stream);
}

void lamb_update_many(Context& ctx, const std::vector<ops::AdamItem>& items) {
  std::vector<LambFusedTensor> ts;
  ts.reserve(items.size());
  for (const ops::AdamItem& it : items)
    ts.push_back({it.p->data<float>(), it.g->data<float>(), it.m->data<float>(), it.v->data<float>(), it.p->numel(),
                  ops::lamb_scalars(it.args), it.lr, it.args.weight_decay != 0.0f ? 1 : 0});
  lamb_update_many_n(ts.data(), int64_t(ts.size()), cuda_state(ctx).stream);
}

void lamb_apply_many(Context& ctx, const std::vector<ops::LambApplyItem>& items) {
  std::vector<LambApplyTensor> ts;
  ts.reserve(items.size());
  for (const ops::LambApplyItem& it : items)
    ts.push_back({it.param_sq ? it.param_sq->data<double>() : nullptr, it.update_sq ? it.update_sq->data<double>() : nullptr,
                  it.update->data<float>(), it.p->data<float>(), it.p->numel(), it.lr, it.param_sq ? 0 : 1});
  lamb_apply_many_n(ts.data(), int64_t(ts.size()), cuda_state(ctx).stream);
}

void lamb_moments(Context& ctx, const float* p, const float* g, float* m, float* v, float* update, int64_t n,
                  const ops::AdamArgs& a) {
  CudaState& st = cuda_state(ctx);
  const ops::LambScalars s = ops::lamb_scalars(a);
  lamb_moments_n(p, g, m, v, update, n, s, st.stream);
}

void axpy(Context& ctx, float alpha, const float* x, float* y, int64_t n) {
  CudaState& st = cuda_state(ctx);
  axpy_n(alpha, x, y, n, st.stream);
}

void axpy_half(Context& ctx, float alpha, const void* x, void* y, int64_t n, DType dtype) {
  CudaState& st = cuda_state(ctx);
  axpy_half_n(alpha, x, y, n, dtype, st.stream);
}

double sum_squares(Context& ctx, const float* x, int64_t n) {
  CudaState& st = cuda_state(ctx);
  return sum_squares_n(x, n, st.stream);
}

void sum_squares_many(Context& ctx, const float* const* xs, const int64_t* ns, int64_t count, double* out) {
  CudaState& st = cuda_state(ctx);
  sum_squares_many_n(xs, ns, count, out, st.stream);
}

std::vector<double> sum_squares_many(Context& ctx, const float* const* xs, const int64_t* ns, int64_t count) {
  CudaState& st = cuda_state(ctx);
  std::vector<double> sums(size_t(std::max<int64_t>(count, 0)), 0.0);
  if (count <= 0) return sums;
  ScratchBuffer out(size_t(count) * sizeof(double), st.stream);
  sum_squares_many_n(xs, ns, count, out.as<double>(), st.stream);
  CUDA_CHECK(cudaMemcpyAsync(sums.data(), out.ptr, size_t(count) * sizeof(double), cudaMemcpyDeviceToHost, st.stream));
  CUDA_CHECK(cudaStreamSynchronize(st.stream));
  return sums;
}

void lamb_apply(Context& ctx, float lr, const double* param_sq, const double* update_sq, const float* update,
                float* p, int64_t n) {
  CudaState& st = cuda_state(ctx);
  lamb_apply_n(lr, param_sq, update_sq, update, p, n, st.stream);
}

void scale_inplace(Context& ctx, float* x, int64_t n, float s) {
  CudaState& st = cuda_state(ctx);
  scale_n(x, n, s, st.stream);
}

}  // namespace unmask::cuda
