// cuda/embedding.cu: row gathers from embedding tables, and BERT's fused embedding block.
//
// embedding_forward: out[n, :] = table[ids[n], :] (+ out[n, :]); a grid-stride loop over
// 16-byte chunks (Packed128) when C and the strides allow, else over elements.
//
// embedding_layernorm_forward: one warp per token computes
//   LayerNorm(word[id] + pos[pos_id] + type[type_id]) * gamma + beta
// with the sum in fp32 (layernorm.cuh), replacing three gathers, two accumulating passes and
// a LayerNorm (5 reads + 3 writes of [N, C]) with three table reads and one write.
//
// Dumb reference: ref::embedding + ref::layernorm (src/ref) in float64.
#include "cuda/kernels.h"
#include "cuda/layernorm.cuh"

namespace unmask::cuda {

namespace {

/// table: [V, C] (ldt); ids: [N] of I; out: [N, C] (ldo).
template <typename T, typename I, int kVec>
__global__ void embedding_kernel(T* out, int64_t ldo, const T* table, int64_t ldt, const I* ids, int64_t N, int64_t C,
                                 bool accumulate) {
  const int64_t chunks_per_row = C / kVec;
  const int64_t total = N * chunks_per_row;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c;
    chunk_position<kVec>(i, chunks_per_row, false, n, c);
    const T* src = table + int64_t(ids[n]) * ldt + c;
    T* dst = out + n * ldo + c;
    if constexpr (kVec == 1) {
      *dst = accumulate ? from_float<T>(to_float(*dst) + to_float(*src)) : *src;
    } else {
      Packed128<T> t = Packed128<T>::load(src);
      if (accumulate) {
        const Packed128<T> o = Packed128<T>::load(dst);
#pragma unroll
        for (int j = 0; j < kVec; ++j) t.set(j, o.f(j) + t.f(j));
      }
      t.store(dst);
    }
  }
}

template <typename T, typename I>
void embedding_launch(void* out, int64_t ldo, const void* table, int64_t ldt, const void* ids, int64_t N, int64_t C,
                      bool accumulate, cudaStream_t stream) {
  constexpr int V = Packed128<T>::size;
  const bool vec = rows_vectorizable<T>(C, {{out, ldo}, {table, ldt}});
  const int threads = 256;
  const int blocks = int(std::min<int64_t>(ceil_div(N * (vec ? C / V : C), threads), int64_t(1) << 20));
  if (vec)
    embedding_kernel<T, I, V><<<blocks, threads, 0, stream>>>(static_cast<T*>(out), ldo, static_cast<const T*>(table),
                                                              ldt, static_cast<const I*>(ids), N, C, accumulate);
  else
    embedding_kernel<T, I, 1><<<blocks, threads, 0, stream>>>(static_cast<T*>(out), ldo, static_cast<const T*>(table),
                                                              ldt, static_cast<const I*>(ids), N, C, accumulate);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void embedding_dispatch_ids(DType id_dtype, void* out, int64_t ldo, const void* table, int64_t ldt, const void* ids,
                            int64_t N, int64_t C, bool accumulate, cudaStream_t stream) {
  if (id_dtype == DType::i32)
    embedding_launch<T, int32_t>(out, ldo, table, ldt, ids, N, C, accumulate, stream);
  else
    embedding_launch<T, int64_t>(out, ldo, table, ldt, ids, N, C, accumulate, stream);
}

constexpr int kEmbWarpsPerBlock = 8;

/// word: [V, C], pos: [P, C], type: [TT, C] (contiguous rows); out: [N, C] (ldo).
template <typename T, typename TP, int kVec>
__global__ void __launch_bounds__(kEmbWarpsPerBlock * kWarpSize)
    embedding_layernorm_kernel(T* out, int64_t ldo, const int32_t* ids, const int32_t* pos_ids,
                               const int32_t* type_ids, const T* word, const T* pos, const T* type, const TP* gamma,
                               const TP* beta, float eps, int64_t N, int C) {
  const int64_t row = int64_t(blockIdx.x) * kEmbWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (row >= N) return;
  const T* w = word + int64_t(ids[row]) * C;
  const T* p = pos + int64_t(pos_ids[row]) * C;
  const T* t = type + int64_t(type_ids ? type_ids[row] : 0) * C;
  auto load = [&](int c, float* v) {
    if constexpr (kVec == 1) {
      v[0] = to_float(w[c]) + to_float(p[c]) + to_float(t[c]);
    } else {
      const Packed128<T> a = Packed128<T>::load(w + c), b = Packed128<T>::load(p + c), d = Packed128<T>::load(t + c);
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = a.f(j) + b.f(j) + d.f(j);
    }
  };
  warp_layernorm_row<kVec, T, TP>(load, out + row * ldo, gamma, beta, eps, C, lane);
}

template <typename T, typename TP>
void embedding_layernorm_launch(void* out, int64_t ldo, const int32_t* ids, const int32_t* pos_ids,
                                const int32_t* type_ids, const void* word, const void* pos, const void* type,
                                const void* gamma, const void* beta, float eps, int64_t N, int64_t C,
                                cudaStream_t stream) {
  constexpr int V = Packed128<T>::size;
  // table rows of C; gamma and beta: the kVec path reads them 16 bytes at a time (load_floats)
  const bool vec = rows_vectorizable<T>(C, {{out, ldo}, {word, C}, {pos, C}, {type, C}, {gamma, 0}, {beta, 0}});
  const dim3 block(kEmbWarpsPerBlock * kWarpSize), grid(unsigned(ceil_div(N, kEmbWarpsPerBlock)));
  auto run = [&](auto kernel) {
    kernel<<<grid, block, 0, stream>>>(static_cast<T*>(out), ldo, ids, pos_ids, type_ids, static_cast<const T*>(word),
                                       static_cast<const T*>(pos), static_cast<const T*>(type),
                                       static_cast<const TP*>(gamma), static_cast<const TP*>(beta), eps, N, int(C));
  };
  if (vec)
    run(embedding_layernorm_kernel<T, TP, V>);
  else
    run(embedding_layernorm_kernel<T, TP, 1>);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void embedding_forward(void* out, int64_t ldo, const void* table, int64_t ldt, const void* ids, DType id_dtype,
                       int64_t N, int64_t C, bool accumulate, DType dtype, cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 0 && (N <= 1 || ldo >= C) && ldt >= C, "embedding (cuda): bad sizes N=", N, " C=", C,
               " ldo=", ldo, " ldt=", ldt);
  UNMASK_CHECK(id_dtype == DType::i32 || id_dtype == DType::i64, "embedding (cuda): ids must be i32 or i64, got ",
               dtype_name(id_dtype));
  if (N == 0 || C == 0) return;
  switch (dtype) {
    case DType::f32: return embedding_dispatch_ids<float>(id_dtype, out, ldo, table, ldt, ids, N, C, accumulate, stream);
    case DType::bf16:
      return embedding_dispatch_ids<__nv_bfloat16>(id_dtype, out, ldo, table, ldt, ids, N, C, accumulate, stream);
    case DType::f16: return embedding_dispatch_ids<__half>(id_dtype, out, ldo, table, ldt, ids, N, C, accumulate, stream);
    default: throw Unsupported("embedding (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

void embedding_layernorm_forward(void* out, int64_t ldo, const int32_t* ids, const int32_t* pos_ids,
                                 const int32_t* type_ids, const void* word, const void* pos, const void* type,
                                 const void* gamma, const void* beta, DType param_dtype, float eps, int64_t N,
                                 int64_t C, DType dtype, cudaStream_t stream) {
  UNMASK_CHECK(N >= 0 && C >= 1 && C < (int64_t(1) << 31) && (N <= 1 || ldo >= C),
               "embedding_layernorm (cuda): bad sizes N=", N, " C=", C, " ldo=", ldo);
  UNMASK_CHECK(ids && pos_ids && word && pos && type && gamma && beta,
               "embedding_layernorm (cuda): ids, pos_ids, tables, gamma and beta are required");
  UNMASK_CHECK(param_dtype == DType::f32 || param_dtype == dtype, "embedding_layernorm (cuda): gamma/beta dtype must be f32 or ",
               dtype_name(dtype), ", got ", dtype_name(param_dtype));
  if (N == 0) return;
  switch (dtype) {
    case DType::f32:
      return embedding_layernorm_launch<float, float>(out, ldo, ids, pos_ids, type_ids, word, pos, type, gamma, beta,
                                                      eps, N, C, stream);
    case DType::bf16:
      if (param_dtype == DType::f32)
        return embedding_layernorm_launch<__nv_bfloat16, float>(out, ldo, ids, pos_ids, type_ids, word, pos, type,
                                                                gamma, beta, eps, N, C, stream);
      return embedding_layernorm_launch<__nv_bfloat16, __nv_bfloat16>(out, ldo, ids, pos_ids, type_ids, word, pos,
                                                                      type, gamma, beta, eps, N, C, stream);
    case DType::f16:
      if (param_dtype == DType::f32)
        return embedding_layernorm_launch<__half, float>(out, ldo, ids, pos_ids, type_ids, word, pos, type, gamma,
                                                         beta, eps, N, C, stream);
      return embedding_layernorm_launch<__half, __half>(out, ldo, ids, pos_ids, type_ids, word, pos, type, gamma, beta,
                                                        eps, N, C, stream);
    default: throw Unsupported("embedding_layernorm (cuda): dtype ", dtype_name(dtype), " (f32, bf16, f16 only)");
  }
}

}  // namespace unmask::cuda
