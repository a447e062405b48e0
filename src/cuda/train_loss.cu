// cuda/train_loss.cu: softmax cross-entropy (fused log-softmax + NLL + gradient) and the
// embedding backward (a deterministic scatter-add), both without floating-point atomics.
//
// embedding_backward: the ids are made into u32 sort keys (an id outside [0, V) becomes V and
// sorts last, then is skipped), sorted stably with their row numbers (cub radix sort, only
// the bits V needs), and block (sorted position i, column tile) adds, when i starts a run of
// equal ids, the run's dout rows in row order onto dtable[id]: the CPU's order of additions,
// so the bits equal the CPU's. Rows of a frequent id (token types) are split across column
// tiles only; their loads are issued 8 at a time (the adds stay in order).
//
// cross_entropy: one block per row (three passes: max + first argmax, exp-sum (e written to
// dl), scale), then one block reduces losses and correct flags in double over a fixed stride
// and a fixed tree; the totals and the first out-of-range target come back in one copy.
//
// Float64 references: ref::cross_entropy_forward / backward (src/ref/train_ref.h); the CPU
// kernels in cpu/kernels_train_impl.inc.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/train_kernels.h"

namespace unmask::cuda {

namespace {

// ---- embedding backward ---------------------------------------------------------------------

constexpr int kEmbColTile = 128;

/// keys[n] = ids[n] if in [0, V) else V; rows[n] = n.
template <typename Id>
__global__ void embedding_keys_kernel(uint32_t* keys, uint32_t* rows, const Id* ids, int64_t N, int64_t V) {
  const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int64_t id = int64_t(ids[n]);
  keys[n] = id >= 0 && id < V ? uint32_t(id) : uint32_t(V);
  rows[n] = uint32_t(n);
}

/// Block (i, tile): if sorted position i starts a run of equal keys (a valid id), thread c of
/// the tile adds dout[row, c] for the run's rows (ascending: the sort is stable) to dtable[id, c].
__global__ void __launch_bounds__(kEmbColTile)
    embedding_scatter_kernel(float* dtable, int64_t ldt, const uint32_t* keys, const uint32_t* rows,
                             const float* dout, int64_t ldo, int64_t N, int64_t V, int64_t C) {
  const int64_t i = blockIdx.x;
  const uint32_t key = keys[i];
  if (int64_t(key) >= V || (i > 0 && keys[i - 1] == key)) return;
  const int64_t c = int64_t(blockIdx.y) * kEmbColTile + threadIdx.x;
  if (c >= C) return;
  float* dst = dtable + int64_t(key) * ldt + c;
  float acc = *dst;
  // A run is contiguous in sorted order, so keys[j + 7] == key means rows j..j+7 all belong to
  // it: their 8 loads are issued before the first add (a run of a token type is thousands of
  // rows long, and one load in flight at a time made it latency-bound), and the adds stay in
  // row order, one at a time: the CPU's bits.
  int64_t j = i;
  for (; j + 8 <= N && keys[j + 7] == key; j += 8) {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = dout[int64_t(rows[j + u]) * ldo + c];
#pragma unroll
    for (int u = 0; u < 8; ++u) acc += v[u];
  }
  for (; j < N && keys[j] == key; ++j) acc += dout[int64_t(rows[j]) * ldo + c];
  *dst = acc;
}

// ---- cross-entropy ----------------------------------------------------------------------------

constexpr int kCeThreads = 512;
constexpr int kTotalsThreads = 1024;

/// Row flags written by the row kernel and summed by the totals kernel.
enum : int8_t { kRowIgnored = 0, kRowCounted = 1, kRowCorrect = 2 };

/// The device-side totals (one copy back to the host).
struct DeviceTotals {
  double loss_sum;
  unsigned long long count, correct;
  unsigned long long first_bad_row;  // ULLONG_MAX: none
};

/// (max value, its first index) over the block; every thread gets the result. Ties and the
/// index order: the smaller index wins, so the result is the first maximum.
__device__ void block_argmax(float& v, int& idx) {
  __shared__ float s_v[32];
  __shared__ int s_i[32];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, nwarps = blockDim.x / kWarpSize;
  auto combine = [](float& a, int& ai, float b, int bi) {
    if (b > a || (b == a && bi < ai)) {
      a = b;
      ai = bi;
    }
  };
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) combine(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  __syncthreads();
  if (lane == 0) {
    s_v[warp] = v;
    s_i[warp] = idx;
  }
  __syncthreads();
  v = lane < nwarps ? s_v[lane] : -INFINITY;
  idx = lane < nwarps ? s_i[lane] : INT_MAX;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) combine(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
}

/// One block per row m of logits [M, V] (ld):
///   mx = max_j x_j (first argmax), e_j = exp(x_j - mx), sum = sum_j e_j,
///   loss = mx + log(sum) - x_t (in double), dl_j = e_j (grad_scale / sum) - [j == t] grad_scale.
/// A negative target: loss 0, dl row 0, not counted. A target >= V: the same, and the row is
/// reported through totals->first_bad_row. dl may alias logits (x_t and the max pass read the
/// row before the exp pass writes it; block_argmax synchronises in between).
__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_kernel(const float* logits, int64_t ld, const int32_t* targets, float* losses, int8_t* flags,
                         float* dl, int64_t lddl, float grad_scale, int V, DeviceTotals* totals) {
  const int64_t m = blockIdx.x;
  const float* x = logits + m * ld;
  float* d = dl ? dl + m * lddl : nullptr;
  const int32_t t = targets[m];
  if (t < 0 || t >= V) {
    if (t >= V && threadIdx.x == 0) atomicMin(&totals->first_bad_row, (unsigned long long)m);
    if (threadIdx.x == 0) {
      losses[m] = 0.0f;
      flags[m] = kRowIgnored;
    }
    if (d)
      for (int c = threadIdx.x; c < V; c += blockDim.x) d[c] = 0.0f;
    return;
  }
  const float xt = x[t];
  float mx = -INFINITY;
  int arg = INT_MAX;
  for (int c = threadIdx.x; c < V; c += blockDim.x) {
    const float v = x[c];
    if (v > mx) {  // strictly greater: the thread keeps its first maximum
      mx = v;
      arg = c;
    }
  }
  block_argmax(mx, arg);
  float s = 0.0f;
  for (int c = threadIdx.x; c < V; c += blockDim.x) {
    const float e = expf(x[c] - mx);
    if (d) d[c] = e;
    s += e;
  }
  const float sum = block_sum(s);
  if (threadIdx.x == 0) {
    losses[m] = float(double(mx) + log(double(sum)) - double(xt));
    flags[m] = arg == t ? kRowCorrect : kRowCounted;
  }
  if (d) {
    const float f = grad_scale / sum;
    for (int c = threadIdx.x; c < V; c += blockDim.x) {
      float v = d[c] * f;
      if (c == t) v -= grad_scale;
      d[c] = v;
    }
  }
}

/// One block: thread k sums rows k, k + 1024, ... in order (double), then a fixed tree.
__global__ void __launch_bounds__(kTotalsThreads)
    cross_entropy_totals_kernel(const float* losses, const int8_t* flags, int64_t M, DeviceTotals* totals) {
  __shared__ double s_loss[kTotalsThreads];
  __shared__ unsigned long long s_count[kTotalsThreads], s_correct[kTotalsThreads];
  double loss = 0.0;
  unsigned long long count = 0, correct = 0;
  for (int64_t m = threadIdx.x; m < M; m += kTotalsThreads) {
    const int8_t f = flags[m];
    if (f == kRowIgnored) continue;
    loss += double(losses[m]);
    ++count;
    correct += f == kRowCorrect;
  }
  s_loss[threadIdx.x] = loss;
  s_count[threadIdx.x] = count;
  s_correct[threadIdx.x] = correct;
  __syncthreads();
  for (int half = kTotalsThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      s_loss[threadIdx.x] += s_loss[threadIdx.x + half];
      s_count[threadIdx.x] += s_count[threadIdx.x + half];
      s_correct[threadIdx.x] += s_correct[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    totals->loss_sum = s_loss[0];
    totals->count = s_count[0];
    totals->correct = s_correct[0];
  }
}

}  // namespace

void embedding_backward_rows(float* dtable, int64_t ldt, int64_t V, const void* ids, DType id_dtype, const float* dout,
                             int64_t ldo, int64_t N, int64_t C, cudaStream_t stream) {
  UNMASK_CHECK(id_dtype == DType::i32 || id_dtype == DType::i64, "embedding_backward (cuda): ids must be i32 or i64, got ",
               dtype_name(id_dtype));
  UNMASK_CHECK(N >= 0 && N < (int64_t(1) << 31) && V >= 0 && V < (int64_t(1) << 32) - 1 && C >= 0,
               "embedding_backward (cuda): sizes out of range: N=", N, " (< 2^31), V=", V, " (< 2^32 - 1), C=", C);
  UNMASK_CHECK(ceil_div(C, kEmbColTile) < 65536, "embedding_backward (cuda): C=", C, " too wide (max ",
               int64_t(65535) * kEmbColTile, ")");
  if (N == 0 || C == 0) return;
  ScratchBuffer keys(size_t(N) * 4 * sizeof(uint32_t), stream);  // keys in | rows in | keys out | rows out
  uint32_t* keys_in = keys.as<uint32_t>();
  uint32_t* rows_in = keys_in + N;
  uint32_t* keys_out = rows_in + N;
  uint32_t* rows_out = keys_out + N;
  const unsigned blocks = unsigned(ceil_div(N, 256));
  if (id_dtype == DType::i32)
    embedding_keys_kernel<<<blocks, 256, 0, stream>>>(keys_in, rows_in, static_cast<const int32_t*>(ids), N, V);
  else
    embedding_keys_kernel<<<blocks, 256, 0, stream>>>(keys_in, rows_in, static_cast<const int64_t*>(ids), N, V);
  CUDA_CHECK_LAUNCH();
  int end_bit = 1;  // the keys lie in [0, V]
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(V)) ++end_bit;
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys_in, keys_out, rows_in, rows_out, int(N), 0,
                                             end_bit, stream));
  ScratchBuffer temp(temp_bytes, stream);
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.ptr, temp_bytes, keys_in, keys_out, rows_in, rows_out, int(N), 0,
                                             end_bit, stream));
  const dim3 grid(unsigned(N), unsigned(ceil_div(C, kEmbColTile)));
  embedding_scatter_kernel<<<grid, kEmbColTile, 0, stream>>>(dtable, ldt, keys_out, rows_out, dout, ldo, N, V, C);
  CUDA_CHECK_LAUNCH();
}

CrossEntropyTotals cross_entropy_rows(const float* logits, int64_t ld, const int32_t* targets, float* losses, float* dl,
                                      int64_t lddl, float grad_scale, int64_t M, int64_t V, cudaStream_t stream) {
  UNMASK_CHECK(M >= 0 && M < (int64_t(1) << 31) && V >= 1 && V < (int64_t(1) << 31),
               "cross_entropy (cuda): bad sizes M=", M, " V=", V);
  UNMASK_CHECK(losses, "cross_entropy (cuda): losses is required (a scratch [M] buffer)");
  CrossEntropyTotals out;
  if (M == 0) return out;
  ScratchBuffer flags(size_t(M), stream);
  ScratchBuffer totals(sizeof(DeviceTotals), stream);
  CUDA_CHECK(cudaMemsetAsync(totals.ptr, 0xff, sizeof(DeviceTotals), stream));  // first_bad_row = none
  cross_entropy_kernel<<<unsigned(M), kCeThreads, 0, stream>>>(logits, ld, targets, losses, flags.as<int8_t>(), dl, lddl,
                                                               grad_scale, int(V), totals.as<DeviceTotals>());
  CUDA_CHECK_LAUNCH();
  cross_entropy_totals_kernel<<<1, kTotalsThreads, 0, stream>>>(losses, flags.as<int8_t>(), M,
                                                                totals.as<DeviceTotals>());
  CUDA_CHECK_LAUNCH();
  DeviceTotals host{};
  CUDA_CHECK(cudaMemcpyAsync(&host, totals.ptr, sizeof host, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  out.loss_sum = host.loss_sum;
  out.count = int64_t(host.count);
  out.correct = int64_t(host.correct);
  out.first_bad_row = host.first_bad_row == ULLONG_MAX ? -1 : int64_t(host.first_bad_row);
  return out;
}

}  // namespace unmask::cuda
