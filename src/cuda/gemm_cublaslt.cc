// cuda/gemm_cublaslt.cc: see gemm_cublaslt.h for the contract and the row/column-major mapping.
#include "cuda/gemm_cublaslt.h"
#include "cuda/allocator.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>

#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/kernels.h"

namespace unmask::cuda {

namespace {

/// Descriptors and the chosen algorithm for one GEMM configuration. The bias pointer is set
/// on `op` at every call (the only per-call attribute).
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;  // A' = b, B' = a, C = D = c
  cublasLtMatmulAlgo_t algo{};
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool fused = false;  // bias/activation in the epilogue (else the caller runs bias_act_forward)

  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// Everything a plan depends on except the pointers: transposes, sizes, strides, dtypes,
// activation, bias presence/dtype, pointer alignments, TF32 mode.
using PlanKey = std::array<int64_t, 22>;

cudaDataType_t to_cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: throw Unsupported("gemm (cuda): dtype ", dtype_name(t), " is not supported (f32, bf16, f16)");
  }
}

/// Largest power of two (<= 256) dividing the address and every byte stride of an operand:
/// cuBLASLt kernels may vectorise up to that.
int64_t alignment_of(const void* p, std::initializer_list<int64_t> byte_strides) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | 256u;
  for (int64_t s : byte_strides) v |= uint64_t(s);
  return int64_t(v & (~v + 1));  // lowest set bit
}

void set_layout_batch(cublasLtMatrixLayout_t l, int64_t batch, int64_t stride) {
  if (batch <= 1) return;
  int32_t count = int32_t(batch);
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

/// Builds descriptors and asks the heuristic for one algorithm. Returns null when the
/// heuristic finds none for this epilogue (the caller retries without it).
std::unique_ptr<GemmPlan> make_plan(CudaState& st, const GemmLtParams& p, cublasLtEpilogue_t epi, bool fused,
                                    const int64_t align[4]) {
  auto plan = std::make_unique<GemmPlan>();
  plan->epilogue = epi;
  plan->fused = fused;
  const cudaDataType_t ab = to_cuda_type(p.ab_dtype), ct = to_cuda_type(p.c_dtype);
  const cublasComputeType_t compute = p.ab_dtype == DType::f32 && st.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                                 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, compute, CUDA_R_32F));
  // A' = b: op(b)^T is [N, K] column-major.
  const cublasOperation_t opa = p.tb == ops::Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  // B' = a: op(a)^T is [K, M] column-major.
  const cublasOperation_t opb = p.ta == ops::Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (fused && p.bias) {
    const cudaDataType_t bt = to_cuda_type(p.bias_dtype);
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  }
  // Stored shapes in column-major terms (rows, cols, ld).
  const uint64_t a_rows = uint64_t(opa == CUBLAS_OP_N ? p.N : p.K), a_cols = uint64_t(opa == CUBLAS_OP_N ? p.K : p.N);
  const uint64_t b_rows = uint64_t(opb == CUBLAS_OP_N ? p.K : p.M), b_cols = uint64_t(opb == CUBLAS_OP_N ? p.M : p.K);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->la, ab, a_rows, a_cols, p.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lb, ab, b_rows, b_cols, p.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lc, ct, uint64_t(p.N), uint64_t(p.M), p.ldc));
  set_layout_batch(plan->la, p.batch, p.batch_stride_b);
  set_layout_batch(plan->lb, p.batch, p.batch_stride_a);
  set_layout_batch(plan->lc, p.batch, p.batch_stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  int returned = 0;
  cublasLtMatmulHeuristicResult_t result = {};  // the heuristic's first algorithm
  try {
    const uint64_t ws = st.workspace_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al_a = uint32_t(align[1]), al_b = uint32_t(align[0]), al_c = uint32_t(align[2]);
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
    // Split-K partial sums stay in f32 (the compute type): the INPLACE and OUTPUT_TYPE schemes
    // add the K slices in c's dtype, i.e. round each slice's sum to bf16/f16. (H200,
    // 2026-11-26: no step-time change on ViT-B or BERT-large with this mask, 1,107 clips/s and
    // 1,299 seq/s against 1,100 and 1,291 in the call before.)
    const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                      &reduction_mask, sizeof(reduction_mask)));
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(st.lt, plan->op, plan->la, plan->lb, plan->lc, plan->lc, pref,
                                                      1, &result, &returned);
    if (s != CUBLAS_STATUS_SUCCESS && s != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(s);
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (returned == 0) return nullptr;
  plan->algo = result.algo;
  return plan;
}

}  // namespace

struct GemmPlanCache {
  std::map<PlanKey, std::unique_ptr<GemmPlan>> plans;
  bool last_fused = false;
};

void GemmPlanCacheDeleter::operator()(GemmPlanCache* c) const noexcept { delete c; }

void gemm_lt(CudaState& st, const GemmLtParams& p, cudaStream_t stream) {
  // ---- preconditions (the front-end validated the tensors; these guard the raw API) ----
  UNMASK_CHECK(p.ab_dtype == DType::f32 || p.ab_dtype == DType::bf16 || p.ab_dtype == DType::f16,
               "gemm (cuda): a/b dtype must be f32, bf16 or f16, got ", dtype_name(p.ab_dtype));
  UNMASK_CHECK(p.c_dtype == p.ab_dtype || p.c_dtype == DType::f32, "gemm (cuda): c dtype must be ",
               dtype_name(p.ab_dtype), " or f32, got ", dtype_name(p.c_dtype));
  UNMASK_CHECK(p.M >= 0 && p.N >= 0 && p.K >= 0 && p.batch >= 1, "gemm (cuda): bad sizes batch=", p.batch, " M=", p.M,
               " N=", p.N, " K=", p.K);
  UNMASK_CHECK(!p.bias || p.bias_dtype == DType::f32 || p.bias_dtype == p.c_dtype,
               "gemm (cuda): bias dtype must be f32 or c's dtype ", dtype_name(p.c_dtype), ", got ",
               dtype_name(p.bias_dtype));
  const int64_t a_cols = p.ta == ops::Trans::yes ? p.M : p.K, b_cols = p.tb == ops::Trans::yes ? p.K : p.N;
  UNMASK_CHECK(p.lda >= std::max<int64_t>(1, a_cols) && p.ldb >= std::max<int64_t>(1, b_cols) &&
                   p.ldc >= std::max<int64_t>(1, p.N),
               "gemm (cuda): row strides lda=", p.lda, " ldb=", p.ldb, " ldc=", p.ldc, " too small for M=", p.M,
               " N=", p.N, " K=", p.K);
  if (p.c_in && (p.c_in == p.c || p.beta == 0.0f || p.K == 0 || p.batch > 1 || p.M == 0 || p.N == 0)) {
    // Only the single cuBLASLt call below reads C apart from D; every other path accumulates in
    // place: c becomes a copy of c_in first (unless beta ignores it).
    UNMASK_CHECK(p.batch == 1, "gemm (cuda): a separate C operand (c_in) needs batch 1, got ", p.batch);
    if (p.c_in != p.c && p.beta != 0.0f && p.M > 0 && p.N > 0)
      CUDA_CHECK(cudaMemcpy2DAsync(p.c, size_t(p.ldc) * dtype_size(p.c_dtype), p.c_in,
                                   size_t(p.ldc) * dtype_size(p.c_dtype), size_t(p.N) * dtype_size(p.c_dtype),
                                   size_t(p.M), cudaMemcpyDeviceToDevice, stream));
    GemmLtParams q = p;
    q.c_in = nullptr;
    return gemm_lt(st, q, stream);
  }
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) {
    // cuBLASLt rejects K = 0; c = act(bias + beta c) is what remains. Rare: use the kernel.
    // beta 0 clears c, beta 1 keeps it (a weight gradient accumulated over an empty batch).
    UNMASK_CHECK(p.beta == 0.0f || p.beta == 1.0f, "gemm (cuda): K = 0 with beta ", p.beta,
                 " is not supported (0 or 1)");
    UNMASK_CHECK(p.batch == 1, "gemm (cuda): K = 0 with batch > 1 is not supported");
    if (p.beta == 0.0f)
      CUDA_CHECK(cudaMemset2DAsync(p.c, size_t(p.ldc) * dtype_size(p.c_dtype), 0,
                                   size_t(p.N) * dtype_size(p.c_dtype), size_t(p.M), stream));
    if (p.bias || p.act != ops::Activation::none)
      bias_act_forward(p.c, p.ldc, p.c, p.ldc, p.bias, p.bias_dtype, p.M, p.N, p.act, p.c_dtype, stream);
    return;
  }

  // ---- epilogue choice ----
  // cuBLASLt's alignment preferences name A, B, C and D only, and a kernel it picks may assume a
  // 16-byte aligned bias (a misaligned-address fault, sticky for the context, has been reported):
  // a bias slice off that alignment (the QA head's end logits: the bias row + 1 element) takes
  // the unfused path, whose kernel reads the bias an element at a time.
  const bool bias_fusable =
      !p.bias || (p.bias_dtype == p.c_dtype && reinterpret_cast<uintptr_t>(p.bias) % 16 == 0);
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  bool fused = true;
  switch (p.act) {
    case ops::Activation::none: epi = p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT; break;
    case ops::Activation::gelu_tanh: epi = p.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU; break;
    case ops::Activation::gelu:  // exact erf: cuBLASLt has only the tanh form
    case ops::Activation::tanh:
    case ops::Activation::relu: fused = false; break;
  }
  if (!bias_fusable) fused = false;
  if (!fused) epi = CUBLASLT_EPILOGUE_DEFAULT;

  // An activation cuBLASLt cannot fuse (exact GELU, tanh) on a low-precision output, with a bias
  // it can (or none): the GEMM with the bias epilogue into c, then the activation in place on the
  // rounded pre-activation: PyTorch eager's roundings, c written once and read-modified-written
  // once. (An fp32 workspace and one rounding lost: BENCHMARKS.md.)
  if (!fused && p.act != ops::Activation::none && bias_fusable && p.c_dtype != DType::f32 && p.beta == 0.0f) {
    GemmLtParams q = p;
    q.act = ops::Activation::none;
    gemm_lt(st, q, stream);
    for (int64_t i = 0; i < p.batch; ++i) {
      void* ci = static_cast<char*>(p.c) + i * p.batch_stride_c * int64_t(dtype_size(p.c_dtype));
      bias_act_forward(ci, p.ldc, ci, p.ldc, nullptr, p.c_dtype, p.M, p.N, p.act, p.c_dtype, stream);
    }
    st.gemm_plans->last_fused = false;
    return;
  }
  // A bias cuBLASLt cannot take (f32, or off 16-byte alignment) on a low-precision output, with
  // or without an activation: the GEMM into an fp32 workspace, bias + activation applied while
  // converting (the pre-activation rounded once).
  if (!fused && (p.bias || p.act != ops::Activation::none) && p.c_dtype != DType::f32 && p.beta == 0.0f) {
    const size_t bytes = size_t(p.batch) * size_t(p.M) * size_t(p.N) * sizeof(float);
    float* tmp = static_cast<float*>(device_malloc(bytes, stream));
    try {
      GemmLtParams q = p;
      q.c = tmp;
      q.c_dtype = DType::f32;
      q.ldc = p.N;
      q.batch_stride_c = p.M * p.N;
      q.bias = nullptr;
      q.act = ops::Activation::none;
      gemm_lt(st, q, stream);
      for (int64_t i = 0; i < p.batch; ++i)
        bias_act_forward_from_f32(static_cast<char*>(p.c) + i * p.batch_stride_c * int64_t(dtype_size(p.c_dtype)), p.ldc,
                                  tmp + i * p.M * p.N, p.N, p.bias, p.bias_dtype, p.M, p.N, p.act, p.c_dtype, stream);
    } catch (...) {
      device_free(tmp);
      throw;
    }
    device_free(tmp);
    st.gemm_plans->last_fused = false;
    return;
  }

  const size_t es_ab = dtype_size(p.ab_dtype), es_c = dtype_size(p.c_dtype);
  const int64_t align[4] = {
      alignment_of(p.a, {p.lda * int64_t(es_ab), p.batch > 1 ? p.batch_stride_a * int64_t(es_ab) : 256}),
      alignment_of(p.b, {p.ldb * int64_t(es_ab), p.batch > 1 ? p.batch_stride_b * int64_t(es_ab) : 256}),
      // C and D: the smaller alignment of the two when C is a separate operand (c_in)
      std::min(alignment_of(p.c, {p.ldc * int64_t(es_c), p.batch > 1 ? p.batch_stride_c * int64_t(es_c) : 256}),
               p.c_in ? alignment_of(p.c_in, {p.ldc * int64_t(es_c)}) : int64_t(256)),
      p.bias ? alignment_of(p.bias, {}) : 256};

  if (!st.gemm_plans) st.gemm_plans.reset(new GemmPlanCache());
  GemmPlanCache& cache = *st.gemm_plans;
  PlanKey key = {int64_t(p.ta), int64_t(p.tb), p.M, p.N, p.K, p.lda, p.ldb, p.ldc, p.batch,
                 p.batch_stride_a, p.batch_stride_b, p.batch_stride_c, int64_t(p.ab_dtype), int64_t(p.c_dtype),
                 int64_t(p.act), p.bias ? 1 + int64_t(p.bias_dtype) : 0, align[0], align[1], align[2], align[3],
                 int64_t(st.allow_tf32), int64_t(fused)};
  auto it = cache.plans.find(key);
  if (it == cache.plans.end()) {
    std::unique_ptr<GemmPlan> plan = make_plan(st, p, epi, fused, align);
    if (!plan && fused && epi != CUBLASLT_EPILOGUE_DEFAULT) {
      fused = false;  // no algorithm with this epilogue: plain GEMM + kernel
      plan = make_plan(st, p, CUBLASLT_EPILOGUE_DEFAULT, false, align);
    }
    if (!plan && p.batch > 1) {
      // No batched algorithm (e.g. a zero batch stride it will not broadcast): one call per batch.
      for (int64_t i = 0; i < p.batch; ++i) {
        GemmLtParams q = p;
        q.batch = 1;
        q.a = static_cast<const char*>(p.a) + i * p.batch_stride_a * int64_t(es_ab);
        q.b = static_cast<const char*>(p.b) + i * p.batch_stride_b * int64_t(es_ab);
        q.c = static_cast<char*>(p.c) + i * p.batch_stride_c * int64_t(es_c);
        q.batch_stride_a = q.batch_stride_b = q.batch_stride_c = 0;
        gemm_lt(st, q, stream);
      }
      return;
    }
    UNMASK_CHECK(plan != nullptr, "gemm (cuda): cuBLASLt found no algorithm for batch=", p.batch, " M=", p.M,
                 " N=", p.N, " K=", p.K, " lda=", p.lda, " ldb=", p.ldb, " ldc=", p.ldc, " ", dtype_name(p.ab_dtype),
                 "->", dtype_name(p.c_dtype));
    it = cache.plans.emplace(key, std::move(plan)).first;
  }
  GemmPlan& plan = *it->second;
  if (plan.fused && p.bias)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
  const void* c_read = p.c_in ? p.c_in : p.c;  // beta's C: the addend (out of place), or c
  CUBLAS_CHECK(cublasLtMatmul(st.lt, plan.op, &p.alpha, p.b, plan.la, p.a, plan.lb, &p.beta, c_read, plan.lc, p.c,
                              plan.lc, &plan.algo, st.workspace, st.workspace_bytes, stream));
  cache.last_fused = plan.fused;
  if (!plan.fused && (p.bias || p.act != ops::Activation::none)) {
    // The epilogue cuBLASLt could not do: c = act(c + bias), in place, per batch.
    for (int64_t i = 0; i < p.batch; ++i) {
      void* ci = static_cast<char*>(p.c) + i * p.batch_stride_c * int64_t(es_c);
      bias_act_forward(ci, p.ldc, ci, p.ldc, p.bias, p.bias_dtype, p.M, p.N, p.act, p.c_dtype, stream);
    }
  }
}

bool gemm_lt_last_used_fused_epilogue(const CudaState& st) { return st.gemm_plans && st.gemm_plans->last_fused; }

}  // namespace unmask::cuda
