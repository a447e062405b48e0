// cuda/ops_cuda.cc: Tensor-level entry points of the CUDA backend (see ops_cuda.h). Each one
// turns tensors into raw pointers, sizes and strides and calls one launcher.
#include "cuda/ops_cuda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/flash/flash_api.h"
#include "cuda/gemm_cublaslt.h"
#include "cuda/kernels.h"

namespace unmask::cuda {

namespace {

/// A stream-ordered temporary device buffer from the caching allocator.
struct DeviceBuffer {
  void* ptr = nullptr;
  DeviceBuffer(size_t bytes, cudaStream_t stream) : ptr(device_malloc(bytes, stream)) {}
  ~DeviceBuffer() { device_free(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

bool is_float_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

void check_on_cuda(const char* op, const char* name, const Tensor& t) {
  UNMASK_CHECK(t.device() == Device::cuda, op, " (cuda): ", name, " must be on cuda, got ", t.describe());
}

/// A tensor seen as rows x cols (cols = last dim) with row stride ld: 2-D with innermost
/// stride 1, or any contiguous tensor.
struct Rows {
  int64_t rows = 0, cols = 0, ld = 0;
};
Rows as_rows(const char* op, const char* name, const Tensor& t) {
  UNMASK_CHECK(t.ndim() >= 1, op, " (cuda): ", name, " must have at least 1 dim, got ", t.describe());
  Rows r;
  r.cols = t.size(-1);
  r.rows = r.cols ? t.numel() / r.cols : 0;
  if (t.ndim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1)) {
    r.ld = t.size(0) > 1 ? t.stride(0) : std::max<int64_t>(r.cols, 1);
    return r;
  }
  UNMASK_CHECK(t.is_contiguous(), op, " (cuda): ", name, " must be 2-D with innermost stride 1 or contiguous, got ",
               t.describe());
  r.ld = std::max<int64_t>(r.cols, 1);
  return r;
}

/// Element type of a parameter vector: f32 or `dtype`.
DType param_dtype(const char* op, const char* name, const Tensor& t, DType dtype, int64_t C) {
  check_on_cuda(op, name, t);
  UNMASK_CHECK(t.dtype() == DType::f32 || t.dtype() == dtype, op, " (cuda): ", name, " must be f32 or ",
               dtype_name(dtype), ", got ", t.describe());
  UNMASK_CHECK(t.numel() == C && (t.ndim() == 1 ? t.stride(0) == 1 || C <= 1 : t.is_contiguous()), op, " (cuda): ",
               name, " must be a contiguous [", C, "], got ", t.describe());
  return t.dtype();
}

/// The row stride of a 2-D matrix (or of each matrix of a 3-D batch) for gemm_lt: its stride,
/// or, with a single row, its width (a leading dimension must be at least the row length).
int64_t matrix_row_stride(const Tensor& t) {
  return t.size(-2) > 1 ? t.stride(-2) : std::max<int64_t>(t.size(-1), 1);
}

}  // namespace

void gemm(Context& ctx, const Tensor& a, ops::Trans ta, const Tensor& b, ops::Trans tb, Tensor& c,
          const ops::GemmArgs& args) {
  CudaState& st = cuda_state(ctx);
  check_on_cuda("gemm", "a", a);
  check_on_cuda("gemm", "b", b);
  check_on_cuda("gemm", "c", c);
  UNMASK_CHECK(a.dtype() == b.dtype() && is_float_dtype(a.dtype()), "gemm (cuda): a and b must share a float dtype, got ",
               a.describe(), " and ", b.describe());
  UNMASK_CHECK(c.dtype() == a.dtype() || c.dtype() == DType::f32, "gemm (cuda): c must be ", dtype_name(a.dtype()),
               " or f32, got ", c.describe());
  const int nd = c.ndim();
  UNMASK_CHECK((nd == 2 || nd == 3) && a.ndim() == nd && b.ndim() == nd, "gemm (cuda): a, b, c must all be 2-D or 3-D, got ",
               a.describe(), ", ", b.describe(), ", ", c.describe());
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)})
    UNMASK_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, "gemm (cuda): innermost stride must be 1, got ", t->describe());
  GemmLtParams p;
  p.a = a.raw();
  p.b = b.raw();
  p.c = c.raw();
  p.ta = ta;
  p.tb = tb;
  p.M = c.size(-2);
  p.N = c.size(-1);
  p.K = ta == ops::Trans::yes ? a.size(-2) : a.size(-1);
  p.lda = matrix_row_stride(a);
  p.ldb = matrix_row_stride(b);
  p.ldc = matrix_row_stride(c);
  if (nd == 3) {
    p.batch = c.size(0);
    p.batch_stride_a = a.size(0) == 1 ? 0 : a.stride(0);
    p.batch_stride_b = b.size(0) == 1 ? 0 : b.stride(0);
    p.batch_stride_c = c.stride(0);
  }
  p.ab_dtype = a.dtype();
  p.c_dtype = c.dtype();
  p.alpha = args.alpha;
  p.beta = args.beta;
  p.act = args.act;
  if (const Tensor* add = args.addend; add && add->raw() != c.raw()) {  // ops::gemm checked it
    UNMASK_CHECK(add->device() == Device::cuda && add->dtype() == c.dtype() && add->shape() == c.shape() &&
                     add->strides() == c.strides(),
                 "gemm (cuda): the addend must match c ", c.describe(), ", got ", add->describe());
    if (nd == 2)
      p.c_in = add->raw();  // cuBLASLt's C operand (gemm_lt: batch 1 only)
    else if (args.beta != 0.0f)
      c.copy_from(*add);  // batched: accumulate in place
  }
  if (args.bias) {
    check_on_cuda("gemm", "bias", *args.bias);
    p.bias = args.bias->raw();
    p.bias_dtype = param_dtype("gemm", "bias", *args.bias, c.dtype(), p.N);
  }
  gemm_lt(st, p, st.stream);
}

void layernorm(Context& ctx, const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor& beta,
               float eps, Tensor& y) {
  CudaState& st = cuda_state(ctx);
  check_on_cuda("layernorm", "x", x);
  check_on_cuda("layernorm", "y", y);
  UNMASK_CHECK(is_float_dtype(x.dtype()) && y.dtype() == x.dtype(), "layernorm (cuda): x and y must share a float dtype, got ",
               x.describe(), " and ", y.describe());
  const Rows rx = as_rows("layernorm", "x", x), ry = as_rows("layernorm", "y", y);
  Rows rr;
  if (residual) {
    check_on_cuda("layernorm", "residual", *residual);
    UNMASK_CHECK(residual->dtype() == x.dtype(), "layernorm (cuda): residual must be ", dtype_name(x.dtype()), ", got ",
                 residual->describe());
    rr = as_rows("layernorm", "residual", *residual);
  }
  const DType pd = param_dtype("layernorm", "gamma", gamma, x.dtype(), rx.cols);
  UNMASK_CHECK(param_dtype("layernorm", "beta", beta, x.dtype(), rx.cols) == pd,
               "layernorm (cuda): gamma and beta must share a dtype, got ", gamma.describe(), " and ", beta.describe());
  layernorm_forward(y.raw(), ry.ld, x.raw(), rx.ld, residual ? residual->raw() : nullptr, rr.ld, gamma.raw(), beta.raw(),
                    pd, eps, rx.rows, rx.cols, x.dtype(), st.stream);
}

void activation(Context& ctx, const Tensor& x, Tensor& y, ops::Activation act) {
  CudaState& st = cuda_state(ctx);
  check_on_cuda("activation", "x", x);
  check_on_cuda("activation", "y", y);
  UNMASK_CHECK(is_float_dtype(x.dtype()) && y.dtype() == x.dtype(), "activation (cuda): x and y must share a float dtype, got ",
               x.describe(), " and ", y.describe());
  const Rows rx = as_rows("activation", "x", x), ry = as_rows("activation", "y", y);
  bias_act_forward(y.raw(), ry.ld, x.raw(), rx.ld, nullptr, DType::f32, rx.rows, rx.cols, act, x.dtype(), st.stream);
}

void softmax(Context& ctx, const Tensor& x, Tensor& y) {
  CudaState& st = cuda_state(ctx);
  check_on_cuda("softmax", "x", x);
  check_on_cuda("softmax", "y", y);
  UNMASK_CHECK(is_float_dtype(x.dtype()) && y.dtype() == x.dtype(), "softmax (cuda): x and y must share a float dtype, got ",
               x.describe(), " and ", y.describe());
  const Rows rx = as_rows("softmax", "x", x), ry = as_rows("softmax", "y", y);
  if (rx.cols == 0) return;
  softmax_forward(y.raw(), ry.ld, x.raw(), rx.ld, rx.rows, rx.cols, x.dtype(), st.stream);
}

void copy(Context& ctx, const Tensor& src, Tensor& dst) {
  CudaState& st = cuda_state(ctx);
  UNMASK_CHECK(src.shape() == dst.shape(), "copy (cuda): dst ", dst.describe(), " must have src's shape, src ",
               src.describe());
  if (src.numel() == 0) return;
  const Rows rs = as_rows("copy", "src", src), rd = as_rows("copy", "dst", dst);
  if (src.dtype() != dst.dtype()) {  // a float conversion, both sides on the device
    UNMASK_CHECK(is_float_dtype(src.dtype()) && is_float_dtype(dst.dtype()) && src.device() == Device::cuda &&
                     dst.device() == Device::cuda,
                 "copy (cuda): a dtype conversion needs float tensors on cuda, got src ", src.describe(), " and dst ",
                 dst.describe());
    return cast_rows(dst.raw(), dst.dtype(), rd.ld, src.raw(), src.dtype(), rs.ld, rs.rows, rs.cols, st.stream);
  }
  const size_t es = dtype_size(src.dtype());
  CUDA_CHECK(cudaMemcpy2DAsync(dst.raw(), size_t(rd.ld) * es, src.raw(), size_t(rs.ld) * es, size_t(rs.cols) * es,
                               size_t(rs.rows), cudaMemcpyDefault, st.stream));
}

void embedding(Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out, bool accumulate) {
  CudaState& st = cuda_state(ctx);
  check_on_cuda("embedding", "table", table);
  check_on_cuda("embedding", "out", out);
  UNMASK_CHECK(is_float_dtype(table.dtype()) && out.dtype() == table.dtype(),
               "embedding (cuda): table and out must share a float dtype, got ", table.describe(), " and ", out.describe());
  UNMASK_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "embedding (cuda): ids must be i32 or i64, got ",
               ids.describe());
  UNMASK_CHECK(ids.is_contiguous(), "embedding (cuda): ids must be contiguous, got ", ids.describe());
  const Rows rt = as_rows("embedding", "table", table), ro = as_rows("embedding", "out", out);
  const int64_t N = ids.numel();
  UNMASK_CHECK(ro.rows == N && ro.cols == rt.cols, "embedding (cuda): out must be [", N, ", ", rt.cols, "], got ",
               out.describe());
  const void* dev_ids = ids.raw();
  std::unique_ptr<DeviceBuffer> upload;
  if (ids.device() == Device::cpu) {  // range-check on the host, then upload
    for (int64_t i = 0; i < N; ++i) {
      const int64_t id = ids.dtype() == DType::i64 ? ids.data<int64_t>()[i] : ids.data<int32_t>()[i];
      if (id < 0 || id >= rt.rows)
        throw Error("embedding: ids[", i, "] = ", id, " is outside the table's [0, ", rt.rows, ")");
    }
    upload = std::make_unique<DeviceBuffer>(ids.nbytes(), st.stream);
    CUDA_CHECK(cudaMemcpyAsync(upload->ptr, ids.raw(), ids.nbytes(), cudaMemcpyHostToDevice, st.stream));
    dev_ids = upload->ptr;
  }
  embedding_forward(out.raw(), ro.ld, table.raw(), rt.ld, dev_ids, ids.dtype(), N, rt.cols, accumulate, table.dtype(),
                    st.stream);
}

void embedding_layernorm(Context& ctx, const Tensor& ids, const Tensor& pos_ids, const Tensor* type_ids,
                         const Tensor& word, const Tensor& pos, const Tensor& type, const Tensor& gamma,
                         const Tensor& beta, float eps, Tensor& out) {
  CudaState& st = cuda_state(ctx);
  const int64_t N = ids.numel();
  for (const Tensor* t : {&ids, &pos_ids, type_ids}) {
    if (!t) continue;
    check_on_cuda("embedding_layernorm", "ids", *t);
    UNMASK_CHECK(t->dtype() == DType::i32 && t->is_contiguous() && t->numel() == N,
                 "embedding_layernorm (cuda): ids, pos_ids and type_ids must be contiguous i32 [", N, "], got ",
                 t->describe());
  }
  const DType dt = out.dtype();
  for (const Tensor* t : {&word, &pos, &type}) {
    check_on_cuda("embedding_layernorm", "table", *t);
    UNMASK_CHECK(t->dtype() == dt && t->ndim() == 2 && t->is_contiguous() && t->size(1) == out.size(-1),
                 "embedding_layernorm (cuda): tables must be contiguous ", dtype_name(dt), " [*, ", out.size(-1),
                 "], got ", t->describe());
  }
  check_on_cuda("embedding_layernorm", "out", out);
  const Rows ro = as_rows("embedding_layernorm", "out", out);
  UNMASK_CHECK(ro.rows == N, "embedding_layernorm (cuda): out must have ", N, " rows, got ", out.describe());
  const DType pd = param_dtype("embedding_layernorm", "gamma", gamma, dt, ro.cols);
  UNMASK_CHECK(param_dtype("embedding_layernorm", "beta", beta, dt, ro.cols) == pd,
               "embedding_layernorm (cuda): gamma and beta must share a dtype");
  embedding_layernorm_forward(out.raw(), ro.ld, static_cast<const int32_t*>(ids.raw()),
                              static_cast<const int32_t*>(pos_ids.raw()),
                              type_ids ? static_cast<const int32_t*>(type_ids->raw()) : nullptr, word.raw(), pos.raw(),
                              type.raw(), gamma.raw(), beta.raw(), pd, eps, N, ro.cols, dt, st.stream);
}

void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const ops::AttentionArgs& args, int64_t max_seqlen) {
  CudaState& st = cuda_state(ctx);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}}) {
    check_on_cuda("attention", name, *t);
    UNMASK_CHECK(t->dtype() == q.dtype() && is_float_dtype(t->dtype()), "attention (cuda): ", name,
                 " must share q's float dtype ", dtype_name(q.dtype()), ", got ", t->describe());
    UNMASK_CHECK(t->ndim() == 2 && t->shape() == q.shape() && (t->size(1) <= 1 || t->stride(1) == 1),
                 "attention (cuda): ", name, " must be [N, NH*HS] like q ", q.shape().str(),
                 " with innermost stride 1, got ", t->describe());
  }
  const int64_t N = q.size(0), C = q.size(1), NH = args.num_heads;
  UNMASK_CHECK(NH >= 1 && C % NH == 0, "attention (cuda): C = ", C, " must be a multiple of num_heads = ", NH);
  auto ld = [](const Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); };
  FlashFwdParams p;
  p.q = q.raw();
  p.k = k.raw();
  p.v = v.raw();
  p.o = out.raw();
  p.q_row_stride = ld(q);
  p.k_row_stride = ld(k);
  p.v_row_stride = ld(v);
  p.o_row_stride = ld(out);
  p.num_heads = int(NH);
  p.head_dim = int(C / NH);
  p.scale = args.scale;
  p.scale_log2 = float(double(args.scale) * 1.4426950408889634);
  p.dtype = q.dtype();
  if (N == 0) return;

  std::unique_ptr<DeviceBuffer> cu_dev, mask_dev;
  if (args.cu_seqlens) {
    const Tensor& cu = *args.cu_seqlens;
    UNMASK_CHECK(cu.dtype() == DType::i32 && cu.ndim() == 1 && cu.size(0) >= 1 && cu.is_contiguous(),
                 "attention (cuda): cu_seqlens must be contiguous i32 [B+1], got ", cu.describe());
    p.batch = int(cu.size(0) - 1);
    if (cu.device() == Device::cpu) {
      const int32_t* c = cu.data<int32_t>();
      int64_t longest = 0;
      for (int64_t b = 0; b < p.batch; ++b) longest = std::max<int64_t>(longest, c[b + 1] - c[b]);
      p.max_seqlen = int(longest);
      cu_dev = std::make_unique<DeviceBuffer>(cu.nbytes(), st.stream);
      CUDA_CHECK(cudaMemcpyAsync(cu_dev->ptr, c, cu.nbytes(), cudaMemcpyHostToDevice, st.stream));
      p.cu_seqlens = static_cast<const int32_t*>(cu_dev->ptr);
    } else {
      p.cu_seqlens = static_cast<const int32_t*>(cu.raw());
      if (max_seqlen > 0) {
        p.max_seqlen = int(max_seqlen);
      } else {  // read the lengths back: one small copy and a stream sync
        std::vector<int32_t> c(size_t(cu.size(0)));
        CUDA_CHECK(cudaMemcpyAsync(c.data(), cu.raw(), cu.nbytes(), cudaMemcpyDeviceToHost, st.stream));
        CUDA_CHECK(cudaStreamSynchronize(st.stream));
        int64_t longest = 0;
        for (int64_t b = 0; b < p.batch; ++b) longest = std::max<int64_t>(longest, c[size_t(b) + 1] - c[size_t(b)]);
        p.max_seqlen = int(longest);
      }
    }
  } else {
    const int64_t T = args.padded_seq_len;
    UNMASK_CHECK(T >= 1 && N % T == 0, "attention (cuda): N = ", N, " must be a multiple of padded_seq_len = ", T);
    p.batch = int(N / T);
    p.max_seqlen = int(T);
    if (const Tensor* m = args.key_padding_mask) {
      const DType md = m->dtype();
      UNMASK_CHECK(md == DType::u8 || md == DType::boolean || md == DType::i32 || md == DType::i64,
                   "attention (cuda): key_padding_mask must be u8, bool, i32 or i64, got ", m->describe());
      UNMASK_CHECK(m->ndim() == 2 && m->size(0) == p.batch && m->size(1) == T && (T <= 1 || m->stride(1) == 1),
                   "attention (cuda): key_padding_mask must be [", p.batch, ", ", T, "] with innermost stride 1, got ",
                   m->describe());
      p.mask_elem_bytes = int(dtype_size(md));
      p.mask_batch_stride = p.batch > 1 ? m->stride(0) : T;
      if (m->device() == Device::cpu) {
        Tensor mc = m->contiguous();
        mask_dev = std::make_unique<DeviceBuffer>(mc.nbytes(), st.stream);
        CUDA_CHECK(cudaMemcpyAsync(mask_dev->ptr, mc.raw(), mc.nbytes(), cudaMemcpyHostToDevice, st.stream));
        p.key_mask = mask_dev->ptr;
        p.mask_batch_stride = T;
      } else {
        p.key_mask = m->raw();
      }
    }
  }
  // The CTA height: st.attention.forward_block_m, a test hook (0: chosen from the grid).
  attention_forward(p, st.stream, attention_kernel_for(p), st.attention.forward_block_m);
}

// ---- f32 raw-pointer forms ---------------------------------------------------------------

void gemm(Context& ctx, const ops::GemmParams& p) {
  CudaState& st = cuda_state(ctx);
  GemmLtParams g;
  g.a = p.a;
  g.lda = p.lda;
  g.batch_stride_a = p.batch_stride_a;
  g.ta = p.ta;
  g.b = p.b;
  g.ldb = p.ldb;
  g.batch_stride_b = p.batch_stride_b;
  g.tb = p.tb;
  g.c = p.c;
  g.ldc = p.ldc;
  g.batch_stride_c = p.batch_stride_c;
  g.batch = p.batch;
  g.M = p.M;
  g.N = p.N;
  g.K = p.K;
  g.ab_dtype = g.c_dtype = DType::f32;
  g.alpha = p.alpha;
  g.beta = p.beta;
  g.bias = p.bias;
  g.bias_dtype = DType::f32;
  g.act = p.act;
  Tensor a16, b16;  // autocast: packed bf16/f16 copies of a and b, alive until gemm_lt has queued
  const DType half = st.autocast;
  if ((half == DType::bf16 || half == DType::f16) && p.M > 0 && p.N > 0 && p.K > 0) {
    // Stored a: [M, K] (ta no) or [K, M]; stored b: [K, N] (tb no) or [N, K]; a shared operand
    // (batch stride 0) is cast once.
    auto cast = [&](const float* src, int64_t ld, int64_t bstride, int64_t rows, int64_t cols, Tensor& out,
                    const void** dst, int64_t* dst_ld, int64_t* dst_bstride) {
      const int64_t batches = bstride == 0 ? 1 : p.batch;
      out = Tensor::empty({batches, rows, cols}, half, Device::cuda);
      cast_f32_2d(out.raw(), half, src, ld, bstride, rows, cols, batches, st.stream);
      *dst = out.raw();
      *dst_ld = cols;
      *dst_bstride = bstride == 0 ? 0 : rows * cols;
    };
    const bool ta = p.ta == ops::Trans::yes, tb = p.tb == ops::Trans::yes;
    cast(p.a, p.lda, p.batch_stride_a, ta ? p.K : p.M, ta ? p.M : p.K, a16, &g.a, &g.lda, &g.batch_stride_a);
    cast(p.b, p.ldb, p.batch_stride_b, tb ? p.N : p.K, tb ? p.K : p.N, b16, &g.b, &g.ldb, &g.batch_stride_b);
    g.ab_dtype = half;  // fp32 accumulation into the f32 c (gemm_lt's CUBLAS_COMPUTE_32F)
  }
  gemm_lt(st, g, st.stream);
}

void bias_act(Context& ctx, const float* x, int64_t ldx, const float* bias, float* y, int64_t ldy, int64_t N,
              int64_t C, ops::Activation act) {
  CudaState& st = cuda_state(ctx);
  bias_act_forward(y, ldy, x, ldx, bias, DType::f32, N, C, act, DType::f32, st.stream);
}

void layernorm(Context& ctx, const float* x, int64_t ldx, const float* residual, int64_t ldr, const float* gamma,
               const float* beta, float eps, float* y, int64_t ldy, int64_t N, int64_t C) {
  CudaState& st = cuda_state(ctx);
  layernorm_forward(y, ldy, x, ldx, residual, ldr, gamma, beta, DType::f32, eps, N, C, DType::f32, st.stream);
}

void softmax(Context& ctx, const float* x, int64_t ldx, float* y, int64_t ldy, int64_t N, int64_t C) {
  CudaState& st = cuda_state(ctx);
  if (C == 0) return;
  softmax_forward(y, ldy, x, ldx, N, C, DType::f32, st.stream);
}

}  // namespace unmask::cuda
