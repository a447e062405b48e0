// cuda/optim.cu: the elementwise optimizer updates (AdamW, LAMB stage 1), axpy, in-place
// scaling and a deterministic sum of squares, on contiguous f32 arrays of n elements.
//
// The updates follow ops/optim_ops.cc operation by operation, with the per-step scalars
// computed on the host the same way; products and sums are spelled with __fmul_rn/__fadd_rn
// so nvcc does not contract them into FMAs (the CPU build does not either), and sqrtf and
// '/' are IEEE-rounded (no fast-math), so the results match the CPU op bit for bit up to the
// compilers' choices (the tests allow 1e-6 relative).
//
// sum_squares: block k sums chunk k (kSumSquaresChunk elements: thread i takes elements i,
// i + 256, ... in order, in double; squares of floats are exact in double) and reduces its 256
// partials in a fixed tree; one block then adds the chunk partials (fixed stride, fixed tree).
// The chunking depends on n only, so the bits do not depend on the device or on scheduling.
// sum_squares_many runs the same per-chunk and per-tensor reductions (the same __device__
// functions, block sizes and orders) over many tensors in two launches per 96 tensors, into
// device memory: bitwise the one-tensor results, with no host sync (the optimizer's norms).
// The multi-tensor updates (adamw_update_many_n, lamb_moments_many_n, lamb_apply_many_n) run
// the one-tensor kernels' element functions over chunk tables of up to 32 tensors a launch.
#include <algorithm>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/train_kernels.h"

namespace unmask::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;

int grid_for(int64_t n) { return int(std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, kThreads), int64_t(1) << 16))); }

#define UNMASK_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

/// torch.optim.AdamW's update (optim_ops.cc adamw_kernel) of one element, in place on its
/// values: p, m and v updated from the raw gradient g.
__device__ __forceinline__ void adamw_value(float& p, float g, float& m, float& v, const ops::AdamWScalars& s) {
  const float gi = __fmul_rn(s.grad_scale, g);
  m = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(s.one_minus_beta1, gi));
  v = __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
  const float d = __fadd_rn(sqrtf(v) / s.bias2_sqrt, s.eps);
  p = __fsub_rn(__fmul_rn(p, s.decay), __fmul_rn(s.step_size, m / d));
}

/// adamw_value of element i.
__device__ __forceinline__ void adamw_element(float* __restrict__ p, const float* __restrict__ g,
                                              float* __restrict__ m, float* __restrict__ v, int64_t i,
                                              const ops::AdamWScalars& s) {
  float pi = p[i], mi = m[i], vi = v[i];
  adamw_value(pi, g[i], mi, vi, s);
  m[i] = mi;
  v[i] = vi;
  p[i] = pi;
}

/// LAMB's update direction u of one element from its new moments and p (IEEE operations only,
/// no contraction: the fused step computes it twice and must get the same bits).
__device__ __forceinline__ float lamb_direction(float mi, float vi, float pi, const ops::LambScalars& s) {
  const float denom = sqrtf(vi / s.bias2);
  return __fadd_rn((mi / s.bias1) / __fadd_rn(denom, s.eps), __fmul_rn(s.weight_decay, pi));
}

/// apex LAMB stage 1's moments of one element (optim_ops.cc lamb_moments_kernel): m and v are
/// updated in place from the raw gradient g; returns u.
__device__ __forceinline__ float lamb_moments_value(float p, float g, float& m, float& v, const ops::LambScalars& s) {
  const float gi = __fmul_rn(s.grad_scale, g);
  m = __fadd_rn(__fmul_rn(m, s.beta1), __fmul_rn(s.beta3, gi));
  v = __fadd_rn(__fmul_rn(v, s.beta2), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
  return lamb_direction(m, v, p, s);
}

/// lamb_moments_value of element i, its moments stored; returns u.
__device__ __forceinline__ float lamb_moments_of(const float* __restrict__ p, const float* __restrict__ g,
                                                 float* __restrict__ m, float* __restrict__ v, int64_t i,
                                                 const ops::LambScalars& s) {
  float mi = m[i], vi = v[i];
  const float u = lamb_moments_value(p[i], g[i], mi, vi, s);
  m[i] = mi;
  v[i] = vi;
  return u;
}

/// apex LAMB stage 1 element update (optim_ops.cc lamb_moments_kernel) of element i.
__device__ __forceinline__ void lamb_moments_element(const float* __restrict__ p, const float* __restrict__ g,
                                                     float* __restrict__ m, float* __restrict__ v,
                                                     float* __restrict__ u, int64_t i, const ops::LambScalars& s) {
  u[i] = lamb_moments_of(p, g, m, v, i, s);
}

/// LAMB stage 2's step size: float(-double(lr) * ratio), ratio = ||p|| / ||u|| when both norms
/// are > 0, else 1 (double, IEEE; the CPU's bits).
__device__ __forceinline__ float lamb_alpha(float lr, const double* param_sq, const double* update_sq) {
  const double param_norm = __dsqrt_rn(*param_sq), update_norm = __dsqrt_rn(*update_sq);
  const double ratio = param_norm > 0.0 && update_norm > 0.0 ? __ddiv_rn(param_norm, update_norm) : 1.0;
  return __double2float_rn(__dmul_rn(-double(lr), ratio));
}

__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, ops::AdamWScalars s) {
  UNMASK_GRID_STRIDE(i, n) adamw_element(p, g, m, v, i, s);
}

__global__ void lamb_moments_kernel(const float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, float* __restrict__ u, int64_t n, ops::LambScalars s) {
  UNMASK_GRID_STRIDE(i, n) lamb_moments_element(p, g, m, v, u, i, s);
}

// ---- multi-tensor apply ----------------------------------------------------------------------

/// Up to kApplyBatch tensors of one launch, by value (the largest, LambMomentsTensor, makes
/// 32 * 88 + 33 * 8 + 4 bytes, under the 4 KiB kernel-parameter limit of older toolkits).
template <typename T>
struct ApplyBatch {
  T t[kApplyBatch];
  int64_t chunk_begin[kApplyBatch + 1];  // tensor i's chunks: [chunk_begin[i], chunk_begin[i+1])
  int count;
};
static_assert(sizeof(ApplyBatch<LambMomentsTensor>) <= 4096 && sizeof(ApplyBatch<LambFusedTensor>) <= 4096,
              "kernel parameter over 4 KiB");

/// Block b's tensor and element range [begin, end) (chunk_begin[i] <= b < chunk_begin[i+1]).
template <typename T>
__device__ __forceinline__ int apply_chunk(const ApplyBatch<T>& b, int64_t& begin, int64_t& end) {
  const int64_t k = blockIdx.x;
  int lo = 0, hi = b.count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (b.chunk_begin[mid] <= k) lo = mid;
    else hi = mid;
  }
  begin = (k - b.chunk_begin[lo]) * kApplyChunk;
  end = min(b.t[lo].n, begin + kApplyChunk);
  return lo;
}

/// The multi-tensor updates' loads in flight per thread: a thread loads the operands of elements
/// i, i + kThreads, ..., i + (kApplyIlp - 1) kThreads before it computes the first, then computes
/// and stores them in that order: the elements, their arithmetic and (for the fused LAMB) the
/// order of the sums of a plain loop over i += kThreads, so its bits. On an H200 (2026-11-26)
/// the plain loops ran at 2.7-2.9 TB/s, ~60% of the HBM's bandwidth, with one 4-byte load per
/// operand in flight per thread.
constexpr int kApplyIlp = 4;
static_assert(kApplyChunk % (kApplyIlp * kThreads) == 0, "a chunk is whole groups of kApplyIlp loads a thread");

/// This thread's elements i = begin + threadIdx.x + j kThreads of [begin, end), kApplyIlp at a
/// time: load(k, i) for each element k of a group, then step(k, i) for each in order. The
/// callers keep per-k operands in arrays of kApplyIlp (registers: k is a constant after unrolling).
template <typename Load, typename Step>
__device__ __forceinline__ void for_each_in_groups(int64_t begin, int64_t end, Load&& load, Step&& step) {
  for (int64_t i0 = begin + threadIdx.x; i0 < end; i0 += kApplyIlp * kThreads) {
#pragma unroll
    for (int k = 0; k < kApplyIlp; ++k)
      if (const int64_t i = i0 + k * kThreads; i < end) load(k, i);
#pragma unroll
    for (int k = 0; k < kApplyIlp; ++k) {
      const int64_t i = i0 + k * kThreads;
      if (i >= end) break;
      step(k, i);
    }
  }
}

__global__ void __launch_bounds__(kThreads) adamw_many_kernel(const ApplyBatch<AdamWTensor> b) {
  int64_t begin, end;
  const AdamWTensor& x = b.t[apply_chunk(b, begin, end)];
  float p[kApplyIlp], g[kApplyIlp], m[kApplyIlp], v[kApplyIlp];
  for_each_in_groups(
      begin, end, [&](int k, int64_t i) { p[k] = x.p[i], g[k] = x.g[i], m[k] = x.m[i], v[k] = x.v[i]; },
      [&](int k, int64_t i) {
        adamw_value(p[k], g[k], m[k], v[k], x.s);
        x.m[i] = m[k];
        x.v[i] = v[k];
        x.p[i] = p[k];
      });
}

__global__ void __launch_bounds__(kThreads) lamb_moments_many_kernel(const ApplyBatch<LambMomentsTensor> b) {
  int64_t begin, end;
  const LambMomentsTensor& x = b.t[apply_chunk(b, begin, end)];
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) lamb_moments_element(x.p, x.g, x.m, x.v, x.u, i, x.s);
}

__global__ void __launch_bounds__(kThreads) lamb_apply_many_kernel(const ApplyBatch<LambApplyTensor> b) {
  int64_t begin, end;
  const LambApplyTensor& x = b.t[apply_chunk(b, begin, end)];
  const float alpha = x.ratio_one ? __double2float_rn(-double(x.lr)) : lamb_alpha(x.lr, x.param_sq, x.update_sq);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) x.p[i] = __fadd_rn(x.p[i], __fmul_rn(alpha, x.u[i]));
}

// sum_squares's reductions (defined below), which the fused LAMB norms reuse to keep its bits.
__device__ double block_tree_sum(double v, double* s);
__device__ double partials_sum(const double* partial, int64_t chunks, double* s);


/// Fused LAMB pass 1 (lamb_update_many_n): block b updates the moments of its chunk and writes
/// the chunk's sums of p^2 and u^2 (decayed tensors; 0 otherwise) to partial_p[b], partial_u[b].
__global__ void __launch_bounds__(kThreads) lamb_moments_norms_kernel(const ApplyBatch<LambFusedTensor> b,
                                                                      double* partial_p, double* partial_u) {
  __shared__ double sp[kThreads], su[kThreads];
  int64_t begin, end;
  const LambFusedTensor& x = b.t[apply_chunk(b, begin, end)];
  double acc_p = 0.0, acc_u = 0.0;
  float p[kApplyIlp], g[kApplyIlp], m[kApplyIlp], v[kApplyIlp];
  for_each_in_groups(
      begin, end, [&](int k, int64_t i) { p[k] = x.p[i], g[k] = x.g[i], m[k] = x.m[i], v[k] = x.v[i]; },
      [&](int k, int64_t i) {
        const float u = lamb_moments_value(p[k], g[k], m[k], v[k], x.s);
        x.m[i] = m[k];
        x.v[i] = v[k];
        acc_p += double(p[k]) * double(p[k]);  // squares of floats: exact in double
        acc_u += double(u) * double(u);
      });
  if (!x.decayed) return;  // uniform per block: the whole chunk is one tensor's
  const double tp = block_tree_sum(acc_p, sp), tu = block_tree_sum(acc_u, su);
  if (threadIdx.x == 0) partial_p[blockIdx.x] = tp, partial_u[blockIdx.x] = tu;
}

/// Fused LAMB, per tensor t of the batch (one block of kFinalThreads): norms[2t] = ||p||^2 and
/// norms[2t + 1] = ||u||^2, the sums of its chunks' partials as sum_squares_many adds them.
__global__ void __launch_bounds__(kFinalThreads) lamb_norms_kernel(const ApplyBatch<LambFusedTensor> b,
                                                                   const double* partial_p, const double* partial_u,
                                                                   double* norms) {
  __shared__ double sp[kFinalThreads], su[kFinalThreads];
  const int t = blockIdx.x;
  if (!b.t[t].decayed) return;
  const int64_t first = b.chunk_begin[t], chunks = b.chunk_begin[t + 1] - first;
  const double tp = partials_sum(partial_p + first, chunks, sp), tu = partials_sum(partial_u + first, chunks, su);
  if (threadIdx.x == 0) norms[2 * t] = tp, norms[2 * t + 1] = tu;
}

/// Fused LAMB pass 2: p += alpha u, u recomputed from the stored m, v and p (pass 1's bits),
/// alpha from the tensor's norms (lamb_apply's ratio) or -lr (not decayed).
__global__ void __launch_bounds__(kThreads) lamb_step_kernel(const ApplyBatch<LambFusedTensor> b, const double* norms) {
  int64_t begin, end;
  const int t = apply_chunk(b, begin, end);
  const LambFusedTensor& x = b.t[t];
  const float alpha = x.decayed ? lamb_alpha(x.lr, norms + 2 * t, norms + 2 * t + 1) : __double2float_rn(-double(x.lr));
  float p[kApplyIlp], m[kApplyIlp], v[kApplyIlp];
  for_each_in_groups(
      begin, end, [&](int k, int64_t i) { p[k] = x.p[i], m[k] = x.m[i], v[k] = x.v[i]; },
      [&](int k, int64_t i) { x.p[i] = __fadd_rn(p[k], __fmul_rn(alpha, lamb_direction(m[k], v[k], p[k], x.s))); });
}

/// The bf16 / f16 copies of many f32 tensors (ops::copy_many): from_float, cast.cu's rounding.
template <typename Tout>
__global__ void __launch_bounds__(kThreads) cast_many_kernel(const ApplyBatch<CastTensor> b) {
  int64_t begin, end;
  const CastTensor& x = b.t[apply_chunk(b, begin, end)];
  Tout* dst = static_cast<Tout*>(x.dst);
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) dst[i] = from_float<Tout>(x.src[i]);
}

/// Zeroes many tensors' words (ops::zero_many: the gradients before a step's backward).
__global__ void __launch_bounds__(kThreads) zero_many_kernel(const ApplyBatch<ZeroTensor> b) {
  int64_t begin, end;
  const ZeroTensor& x = b.t[apply_chunk(b, begin, end)];
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) x.p[i] = 0u;
}

/// Launches `kernel` over ts[0..count) in batches of kApplyBatch non-empty tensors.
template <typename T, typename Kernel>
void apply_many(const char* op, const T* ts, int64_t count, Kernel kernel, cudaStream_t stream) {
  UNMASK_CHECK(count >= 0, op, " (cuda): bad count ", count);
  ApplyBatch<T> batch{};
  auto flush = [&] {
    if (batch.count == 0) return;
    const int64_t chunks = batch.chunk_begin[batch.count];
    UNMASK_CHECK(chunks < (int64_t(1) << 31), op, " (cuda): too many elements in one launch (", chunks, " chunks)");
    kernel<<<unsigned(chunks), kThreads, 0, stream>>>(batch);
    CUDA_CHECK_LAUNCH();
    batch = ApplyBatch<T>{};
  };
  for (int64_t i = 0; i < count; ++i) {
    UNMASK_CHECK(ts[i].n >= 0, op, " (cuda): tensor ", i, " has a bad size n=", ts[i].n);
    if (ts[i].n == 0) continue;
    batch.t[batch.count] = ts[i];
    batch.chunk_begin[batch.count + 1] = batch.chunk_begin[batch.count] + ceil_div(ts[i].n, kApplyChunk);
    if (++batch.count == kApplyBatch) flush();
  }
  flush();
}

__global__ void axpy_kernel(float alpha, const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  UNMASK_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

// The same update on bf16 / f16 rows: fp32 arithmetic, y rounded once (bf16 activations' residual adds).
template <typename T>
__global__ void axpy_half_kernel(float alpha, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  UNMASK_GRID_STRIDE(i, n) y[i] = from_float<T>(__fadd_rn(to_float(y[i]), __fmul_rn(alpha, to_float(x[i]))));
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  UNMASK_GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], s);
}

/// Fixed-shape tree over blockDim.x (a power of two) doubles in shared memory; thread 0 gets it.
__device__ double block_tree_sum(double v, double* s) {
  s[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) s[threadIdx.x] += s[threadIdx.x + half];
    __syncthreads();
  }
  return s[0];
}

/// Sum of x[i]^2 over chunk k = [k * chunk, min(n, (k+1) * chunk)) for a block of kThreads
/// threads (s: kThreads shared doubles); thread 0 gets it. Shared by the one-tensor and the
/// batched kernels, so both give the same bits.
__device__ double chunk_sum_squares(const float* x, int64_t n, int64_t k, double* s) {
  const int64_t begin = k * kSumSquaresChunk;
  const int64_t end = min(n, begin + kSumSquaresChunk);
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  return block_tree_sum(acc, s);
}

/// Sum of partial[0..chunks) for a block of kFinalThreads threads: thread k adds k, k + 1024,
/// ... then a fixed tree; thread 0 gets it.
__device__ double partials_sum(const double* partial, int64_t chunks, double* s) {
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < chunks; k += kFinalThreads) acc += partial[k];
  return block_tree_sum(acc, s);
}

/// partial[k] = sum of x[i]^2 over chunk k.
__global__ void __launch_bounds__(kThreads) sum_squares_chunks_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double s[kThreads];
  const double total = chunk_sum_squares(x, n, blockIdx.x, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

/// *out = sum of partial[0..chunks).
__global__ void __launch_bounds__(kFinalThreads) sum_partials_kernel(const double* partial, int64_t chunks, double* out) {
  __shared__ double s[kFinalThreads];
  const double total = partials_sum(partial, chunks, s);
  if (threadIdx.x == 0) *out = total;
}

/// Up to kManyBatch tensors of a sum_squares_many call, passed by value as a kernel parameter
/// (96 * 24 + 12 bytes, under the 4 KiB parameter limit): no pointer table to upload.
constexpr int kManyBatch = 96;
struct SumSquaresBatch {
  const float* x[kManyBatch];
  int64_t n[kManyBatch];
  int64_t chunk_begin[kManyBatch + 1];  // tensor t's chunks: [chunk_begin[t], chunk_begin[t+1]) of the batch
  int count;
};

/// One block per chunk of the batch: block b finds its tensor t (chunk_begin[t] <= b <
/// chunk_begin[t+1], a binary search; empty tensors own no chunk) and writes partial[b].
__global__ void __launch_bounds__(kThreads) sum_squares_many_chunks_kernel(const SumSquaresBatch batch, double* partial) {
  __shared__ double s[kThreads];
  const int64_t b = blockIdx.x;
  int lo = 0, hi = batch.count;  // chunk_begin[lo] <= b < chunk_begin[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (batch.chunk_begin[mid] <= b) lo = mid;
    else hi = mid;
  }
  const double total = chunk_sum_squares(batch.x[lo], batch.n[lo], b - batch.chunk_begin[lo], s);
  if (threadIdx.x == 0) partial[b] = total;
}

/// One block per tensor t of the batch: out[t] = sum of its chunk partials.
__global__ void __launch_bounds__(kFinalThreads) sum_squares_many_final_kernel(const SumSquaresBatch batch,
                                                                               const double* partial, double* out) {
  __shared__ double s[kFinalThreads];
  const int t = blockIdx.x;
  const int64_t begin = batch.chunk_begin[t];
  const double total = partials_sum(partial + begin, batch.chunk_begin[t + 1] - begin, s);
  if (threadIdx.x == 0) out[t] = total;
}

/// LAMB stage 2: the trust ratio from the device norms (every thread computes the same
/// double scalar; IEEE sqrt and divide in double, as the CPU), then axpy's element update.
__global__ void lamb_apply_kernel(float lr, const double* __restrict__ param_sq, const double* __restrict__ update_sq,
                                  const float* __restrict__ u, float* __restrict__ p, int64_t n) {
  const float alpha = lamb_alpha(lr, param_sq, update_sq);
  UNMASK_GRID_STRIDE(i, n) p[i] = __fadd_rn(p[i], __fmul_rn(alpha, u[i]));
}

void check_n(const char* op, int64_t n) { UNMASK_CHECK(n >= 0, op, " (cuda): bad size n=", n); }

}  // namespace

void adamw_update_n(float* p, const float* g, float* m, float* v, int64_t n, const ops::AdamWScalars& s,
                    cudaStream_t stream) {
  check_n("adamw_update", n);
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, g, m, v, n, s);
  CUDA_CHECK_LAUNCH();
}

void lamb_moments_n(const float* p, const float* g, float* m, float* v, float* update, int64_t n,
                    const ops::LambScalars& s, cudaStream_t stream) {
  check_n("lamb_moments", n);
  if (n == 0) return;
  lamb_moments_kernel<<<grid_for(n), kThreads, 0, stream>>>(p, g, m, v, update, n, s);
  CUDA_CHECK_LAUNCH();
}

void axpy_n(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  check_n("axpy", n);
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
  CUDA_CHECK_LAUNCH();
}

void axpy_half_n(float alpha, const void* x, void* y, int64_t n, DType dtype, cudaStream_t stream) {
  check_n("axpy", n);
  if (n == 0) return;
  switch (dtype) {
    case DType::bf16:
      axpy_half_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, static_cast<const __nv_bfloat16*>(x),
                                                             static_cast<__nv_bfloat16*>(y), n);
      break;
    case DType::f16:
      axpy_half_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, static_cast<const __half*>(x),
                                                             static_cast<__half*>(y), n);
      break;
    default:
      throw Error("axpy (cuda): the half form takes bf16 or f16, got ", dtype_name(dtype));
  }
  CUDA_CHECK_LAUNCH();
}

void scale_n(float* x, int64_t n, float s, cudaStream_t stream) {
  check_n("scale_inplace", n);
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, s);
  CUDA_CHECK_LAUNCH();
}

double sum_squares_n(const float* x, int64_t n, cudaStream_t stream) {
  check_n("sum_squares", n);
  if (n == 0) return 0.0;
  const int64_t chunks = ceil_div(n, kSumSquaresChunk);
  UNMASK_CHECK(chunks < (int64_t(1) << 31), "sum_squares (cuda): too many elements n=", n);
  ScratchBuffer partial(size_t(chunks + 1) * sizeof(double), stream);  // [chunks] partials | total
  double* pp = partial.as<double>();
  sum_squares_chunks_kernel<<<unsigned(chunks), kThreads, 0, stream>>>(x, n, pp);
  CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kFinalThreads, 0, stream>>>(pp, chunks, pp + chunks);
  CUDA_CHECK_LAUNCH();
  double total = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&total, pp + chunks, sizeof total, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

void sum_squares_many_n(const float* const* xs, const int64_t* ns, int64_t count, double* out, cudaStream_t stream) {
  UNMASK_CHECK(count >= 0, "sum_squares_many (cuda): bad count ", count);
  if (count == 0) return;
  // One partial buffer for every chunk of every tensor; batch j uses the slice of its tensors.
  int64_t total_chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    check_n("sum_squares_many", ns[i]);
    UNMASK_CHECK(ns[i] == 0 || xs[i] != nullptr, "sum_squares_many (cuda): tensor ", i, " has n=", ns[i],
                 " but a null pointer");
    total_chunks += ceil_div(ns[i], kSumSquaresChunk);
  }
  ScratchBuffer partial(size_t(std::max<int64_t>(total_chunks, 1)) * sizeof(double), stream);
  int64_t chunk_offset = 0;
  for (int64_t first = 0; first < count; first += kManyBatch) {
    SumSquaresBatch batch{};
    batch.count = int(std::min<int64_t>(kManyBatch, count - first));
    batch.chunk_begin[0] = 0;
    for (int t = 0; t < batch.count; ++t) {
      batch.x[t] = xs[first + t];
      batch.n[t] = ns[first + t];
      batch.chunk_begin[t + 1] = batch.chunk_begin[t] + ceil_div(batch.n[t], kSumSquaresChunk);
    }
    const int64_t chunks = batch.chunk_begin[batch.count];
    UNMASK_CHECK(chunks < (int64_t(1) << 31), "sum_squares_many (cuda): too many elements in one batch (", chunks,
                 " chunks)");
    double* pp = partial.as<double>() + chunk_offset;
    if (chunks > 0) {
      sum_squares_many_chunks_kernel<<<unsigned(chunks), kThreads, 0, stream>>>(batch, pp);
      CUDA_CHECK_LAUNCH();
    }
    sum_squares_many_final_kernel<<<unsigned(batch.count), kFinalThreads, 0, stream>>>(batch, pp, out + first);
    CUDA_CHECK_LAUNCH();
    chunk_offset += chunks;
  }
}

void lamb_apply_n(float lr, const double* param_sq, const double* update_sq, const float* u, float* p, int64_t n,
                  cudaStream_t stream) {
  check_n("lamb_apply", n);
  if (n == 0) return;
  lamb_apply_kernel<<<grid_for(n), kThreads, 0, stream>>>(lr, param_sq, update_sq, u, p, n);
  CUDA_CHECK_LAUNCH();
}

void adamw_update_many_n(const AdamWTensor* ts, int64_t count, cudaStream_t stream) {
  apply_many("adamw_update_many", ts, count, adamw_many_kernel, stream);
}

void zero_many_n(const ZeroTensor* ts, int64_t count, cudaStream_t stream) {
  apply_many("zero_many", ts, count, zero_many_kernel, stream);
}

void cast_many_n(const CastTensor* ts, int64_t count, DType dst_dtype, cudaStream_t stream) {
  switch (dst_dtype) {
    case DType::bf16: return apply_many("copy_many", ts, count, cast_many_kernel<__nv_bfloat16>, stream);
    case DType::f16: return apply_many("copy_many", ts, count, cast_many_kernel<__half>, stream);
    default: throw Unsupported("copy_many (cuda): f32 to ", dtype_name(dst_dtype), " (bf16 or f16 only)");
  }
}

void lamb_moments_many_n(const LambMomentsTensor* ts, int64_t count, cudaStream_t stream) {
  apply_many("lamb_moments_many", ts, count, lamb_moments_many_kernel, stream);
}

void lamb_apply_many_n(const LambApplyTensor* ts, int64_t count, cudaStream_t stream) {
  apply_many("lamb_apply_many", ts, count, lamb_apply_many_kernel, stream);
}

void lamb_update_many_n(const LambFusedTensor* ts, int64_t count, cudaStream_t stream) {
  constexpr const char* op = "lamb_update_many";
  UNMASK_CHECK(count >= 0, op, " (cuda): bad count ", count);
  // The batches run one after the other on the stream, so they share one scratch: the largest
  // batch's chunk partials (p^2 and u^2) and 2 kApplyBatch norms.
  std::vector<ApplyBatch<LambFusedTensor>> batches(1);
  int64_t most_chunks = 0;
  for (int64_t i = 0; i < count; ++i) {
    UNMASK_CHECK(ts[i].n >= 0, op, " (cuda): tensor ", i, " has a bad size n=", ts[i].n);
    if (ts[i].n == 0) continue;
    if (batches.back().count == kApplyBatch) batches.emplace_back();
    ApplyBatch<LambFusedTensor>& b = batches.back();
    b.t[b.count] = ts[i];
    b.chunk_begin[b.count + 1] = b.chunk_begin[b.count] + ceil_div(ts[i].n, kApplyChunk);
    ++b.count;
    most_chunks = std::max(most_chunks, b.chunk_begin[b.count]);
  }
  if (most_chunks == 0) return;
  UNMASK_CHECK(most_chunks < (int64_t(1) << 31), op, " (cuda): too many elements in one launch (", most_chunks,
               " chunks)");
  ScratchBuffer scratch(size_t(2 * most_chunks + 2 * kApplyBatch) * sizeof(double), stream);
  double* partial_p = scratch.as<double>();
  double* partial_u = partial_p + most_chunks;
  double* norms = partial_u + most_chunks;
  for (const ApplyBatch<LambFusedTensor>& b : batches) {
    const unsigned chunks = unsigned(b.chunk_begin[b.count]);
    lamb_moments_norms_kernel<<<chunks, kThreads, 0, stream>>>(b, partial_p, partial_u);
    CUDA_CHECK_LAUNCH();
    lamb_norms_kernel<<<unsigned(b.count), kFinalThreads, 0, stream>>>(b, partial_p, partial_u, norms);
    CUDA_CHECK_LAUNCH();
    lamb_step_kernel<<<chunks, kThreads, 0, stream>>>(b, norms);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace unmask::cuda
