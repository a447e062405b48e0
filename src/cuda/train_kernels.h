// cuda/train_kernels.h: the launchers of the CUDA backend's training kernels (train_ops.cu,
// train_loss.cu, optim.cu): backward passes, cross-entropy, dropout, optimizer updates.
//
// Same layer rules as cuda/kernels.h: raw device pointers, explicit sizes and row strides
// (ld*, in elements; innermost stride 1), an explicit stream, preconditions checked here,
// shape validation in the op front-ends (src/ops) and ops_cuda_train.cc.
//
// Storage dtypes: the row kernels take f32, bf16 or f16 activations (`dtype`) with fp32
// arithmetic; statistics (mean, rstd), parameter gradients (dgamma, dbeta, dbias, dtable),
// gamma, losses and the optimizer tensors are f32.
//
// Determinism: no floating-point atomics anywhere. Column reductions (dgamma, dbeta, dbias)
// sum fixed chunks of rows (the chunking depends on N only) into partial rows, then add the
// partials in chunk order; embedding_backward sorts the ids stably and adds each id's rows in
// row order (bitwise the CPU's order); the cross-entropy and sum-of-squares totals are double
// sums over fixed per-thread strides and fixed reduction trees. Run twice: the same bits.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/allocator.h"
#include "ops/ops.h"
#include "ops/optim_scalars.h"
#include "unmask/dtype.h"

namespace unmask::cuda {

/// A stream-ordered scratch buffer from the caching allocator (partial sums, sort buffers).
struct ScratchBuffer {
  void* ptr = nullptr;
  ScratchBuffer(size_t bytes, cudaStream_t stream) : ptr(device_malloc(bytes, stream)) {}
  ~ScratchBuffer() { device_free(ptr); }
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(ptr); }
};

// ---- train_ops.cu ---------------------------------------------------------------------------

/// y = LayerNorm(x + residual) * gamma + beta and the row statistics mean[n], rstd[n]
/// (= 1 / sqrt(var + eps)) of s = x + residual, one warp per row, two-pass fp32.
///   x, residual (or null), y: [N, C] of dtype (ld*); gamma, beta: f32 [C]; mean, rstd: f32 [N].
///   y must not alias x or residual.
void layernorm_forward_stats(void* y, int64_t ldy, float* mean, float* rstd, const void* x, int64_t ldx,
                             const void* residual, int64_t ldr, const float* gamma, const float* beta, float eps,
                             int64_t N, int64_t C, DType dtype, cudaStream_t stream);

/// Backward of layernorm_forward_stats: dx (overwritten, may alias dy) and dgamma, dbeta
/// (f32 [C], accumulated +=, deterministic two-stage column sums).
///   xhat = (x + residual - mean) rstd, g = dy gamma
///   dx = rstd (g - mean_c(g) - xhat mean_c(g xhat)); dgamma += sum_n dy xhat; dbeta += sum_n dy
/// accumulate_dx: dx += that instead (fp32 sum of the old dx and the gradient, one rounding); dx
/// must then not alias dy.
void layernorm_backward_rows(void* dx, int64_t lddx, float* dgamma, float* dbeta, const void* x, int64_t ldx,
                        const void* residual, int64_t ldr, const float* gamma, const float* mean, const float* rstd,
                        const void* dy, int64_t lddy, int64_t N, int64_t C, DType dtype, cudaStream_t stream,
                        bool accumulate_dx = false);

/// dx = dy * act'(x) elementwise (x the pre-activation); dx may alias dy or x. With y (not null;
/// overlapping none of them) also y = act(x), the bits of bias_act_forward's. With dbias (f32
/// [C], accumulated) also dbias += the column sums of dx, the bits of bias_grad_cols over dx
/// (the same chunks, lanes and order), from the same pass.
void activation_backward_rows(void* dx, int64_t lddx, const void* x, int64_t ldx, const void* dy, int64_t lddy, int64_t N,
                              int64_t C, ops::Activation act, DType dtype, cudaStream_t stream, void* y = nullptr,
                              int64_t ldy = 0, float* dbias = nullptr);

/// dbias[c] += sum_n dy[n, c] (f32 dbias, deterministic). dy: [N, C] of dtype (lddy).
void bias_grad_cols(float* dbias, const void* dy, int64_t lddy, int64_t N, int64_t C, DType dtype, cudaStream_t stream);

/// dx = y * (dy - rowsum(dy * y)), one warp per row; dx may alias dy (not y).
void softmax_backward_rows(void* dx, int64_t lddx, const void* y, int64_t ldy, const void* dy, int64_t lddy, int64_t N,
                      int64_t C, DType dtype, cudaStream_t stream);

/// y[n, c] = philox_uniform(seed, offset + n*C + c) >= p ? x[n, c] / (1 - p) : 0 (the CPU's
/// mask bit for bit: one Philox block per thread, four consecutive counters). y may alias x.
/// The backward is the same call on dy.
void dropout_rows(void* y, int64_t ldy, const void* x, int64_t ldx, int64_t N, int64_t C, float p, uint64_t seed,
             uint64_t offset, DType dtype, cudaStream_t stream);

// ---- train_loss.cu --------------------------------------------------------------------------

/// dtable[ids[n], :] += dout[n, :] (f32), repeated ids summed in row order: the ids are sorted
/// stably on the device (cub radix sort) and one thread per (id, column) adds its rows in
/// order, so the result is bitwise the CPU's. ids: i32 or i64 [N] on the device; an id
/// outside [0, V) is skipped (trusted, as the forward trusts device ids).
void embedding_backward_rows(float* dtable, int64_t ldt, int64_t V, const void* ids, DType id_dtype, const float* dout,
                        int64_t ldo, int64_t N, int64_t C, cudaStream_t stream);

/// The totals of cross_entropy, produced on the device.
struct CrossEntropyTotals {
  double loss_sum = 0;
  int64_t count = 0, correct = 0;
  int64_t first_bad_row = -1;  // first row whose target is >= V (treated as ignored), or -1
};

/// Softmax cross-entropy per row of logits [M, V] (ld), one block per row (ops::cross_entropy
/// semantics): losses[m] (f32 [M], required: a scratch buffer when the caller wants none),
/// dlogits = grad_scale (softmax - onehot) when dl is not null (may alias logits). The totals
/// are reduced on the device and copied back: this call synchronises the stream.
CrossEntropyTotals cross_entropy_rows(const float* logits, int64_t ld, const int32_t* targets, float* losses, float* dl,
                                 int64_t lddl, float grad_scale, int64_t M, int64_t V, cudaStream_t stream);

// ---- optim.cu (f32, contiguous [n]) -----------------------------------------------------------

void adamw_update_n(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWScalars& s,
                  cudaStream_t stream);
void lamb_moments_n(const float* p, const float* g, float* m, float* v, float* update, int64_t n,
                  const ops::LambScalars& s, cudaStream_t stream);
/// y += alpha x.
void axpy_n(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
/// y += alpha x over n contiguous bf16 or f16 elements (fp32 arithmetic, one rounding).
void axpy_half_n(float alpha, const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream);
/// x *= s.
void scale_n(float* x, int64_t n, float s, cudaStream_t stream);
/// sum x^2 in double: fixed chunks of kSumSquaresChunk elements per block (fixed tree inside),
/// then one block adds the chunk partials in a fixed tree. Synchronises the stream.
constexpr int64_t kSumSquaresChunk = 8192;
double sum_squares_n(const float* x, int64_t n, cudaStream_t stream);
/// out[i] = sum_squares_n(xs[i], ns[i]) bit for bit (the same chunks, trees and order), for
/// `count` arrays in a few launches (batches of tensors passed as kernel parameters), written
/// to device memory `out` [count]; no sync. xs, ns: host arrays; xs[i] may be null when ns[i] = 0.
void sum_squares_many_n(const float* const* xs, const int64_t* ns, int64_t count, double* out, cudaStream_t stream);
/// p += float(-double(lr) * ratio) * u, ratio = sqrt(*param_sq) / sqrt(*update_sq) when both
/// are > 0, else 1 (double, IEEE; the CPU's bits). param_sq, update_sq: device doubles.
void lamb_apply_n(float lr, const double* param_sq, const double* update_sq, const float* u, float* p, int64_t n,
                  cudaStream_t stream);

// Multi-tensor forms (the optimizer's step in a few launches, as apex's multi_tensor_apply):
// tensor i of `ts` gets exactly the one-tensor kernel's element update (the same __device__
// function), so the bits equal count calls of the one-tensor form. Launches of up to
// kApplyBatch tensors, the tensors passed by value as a kernel parameter (no table to upload),
// each block one chunk of kApplyChunk elements of one tensor. ts: a host array.
constexpr int kApplyBatch = 32;
constexpr int64_t kApplyChunk = 8192;
struct AdamWTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  ops::AdamWScalars s;
};
struct LambMomentsTensor {
  const float* p;
  const float* g;
  float* m;
  float* v;
  float* u;
  int64_t n;
  ops::LambScalars s;
};
/// ratio_one: p += float(-double(lr)) u (axpy's bits; a param without weight decay), else
/// lamb_apply_n's trust ratio from the device norms.
struct LambApplyTensor {
  const double* param_sq;
  const double* update_sq;
  const float* u;
  float* p;
  int64_t n;
  float lr;
  int ratio_one;
};
/// dst = dst_dtype(src) of n contiguous elements (bf16 or f16, round to nearest even: cast.cu's bits).
struct CastTensor {
  const float* src;
  void* dst;
  int64_t n;
};
/// n 32-bit words at p set to 0 (ops::zero_many).
struct ZeroTensor {
  uint32_t* p;
  int64_t n;
};
void adamw_update_many_n(const AdamWTensor* ts, int64_t count, cudaStream_t stream);
void zero_many_n(const ZeroTensor* ts, int64_t count, cudaStream_t stream);
void cast_many_n(const CastTensor* ts, int64_t count, DType dst_dtype, cudaStream_t stream);
void lamb_moments_many_n(const LambMomentsTensor* ts, int64_t count, cudaStream_t stream);
void lamb_apply_many_n(const LambApplyTensor* ts, int64_t count, cudaStream_t stream);

/// One tensor of the fused LAMB step (lamb_update_many_n). decayed: the trust ratio
/// ||p|| / ||u|| (the item has weight decay), else ratio 1 (axpy's step of -lr).
struct LambFusedTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t n;
  ops::LambScalars s;
  float lr;
  int decayed;
};
/// The whole LAMB step of many tensors without storing u, in two passes over the parameters
/// (a batch of kApplyBatch tensors at a time):
///   1. m, v updated (lamb_moments_n's element arithmetic), u computed in registers; per chunk
///      of kApplyChunk elements the double sums of p^2 (before the step) and u^2 (decayed
///      tensors), a fixed tree per block;
///   2. per tensor the sums of its chunks' partials (a fixed order), then the trust ratio
///      (lamb_apply_n's double arithmetic) and p += alpha u with u recomputed from the stored m,
///      v and the unchanged p: the same IEEE operations as in pass 1, so the same u bits.
/// 24 + 16 bytes of traffic an element (read p, g, m, v, write m, v; read m, v, p, write p)
/// against 28 + 8 + 12 through lamb_moments_many_n, sum_squares_many_n of p and of u, and
/// lamb_apply_many_n. The norms are summed as sum_squares_many_n sums them (chunks of
/// kApplyChunk = kSumSquaresChunk elements, the same thread order and trees), so the step is the
/// bits of those three. ts: a host array.
void lamb_update_many_n(const LambFusedTensor* ts, int64_t count, cudaStream_t stream);
static_assert(kApplyChunk == kSumSquaresChunk,
              "lamb_update_many_n sums its norms per apply chunk: the same chunks as sum_squares keep its bits");

}  // namespace unmask::cuda
