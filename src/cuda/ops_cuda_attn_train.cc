// cuda/ops_cuda_attn_train.cc: cuda::attention_forward_train / attention_backward (ops_cuda.h):
// the tensors' device pointers and strides, the sequences brought to the device (cu_seqlens and
// the key mask may live on the host: uploaded), the longest sequence T (the dropout counter
// stride; read back when cu_seqlens is on the device), then the launchers of
// attention_train.cu (f32) or attention_train_tc.cu (f32 rows on tensor cores, or bf16 rows).
#include <algorithm>
#include <memory>
#include <vector>

#include "cuda/attention_train.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "cuda/train_kernels.h"
#include "unmask/error.h"

namespace unmask::cuda {
namespace {

int64_t row_stride(const Tensor& t) { return t.size(0) > 1 ? t.stride(0) : t.size(1); }

/// The [N, NH*HS] row tensor `name` on cuda with innermost stride 1, f32 or bf16 like q.
void check_rows(const char* op, const char* name, const Tensor& t, const Tensor& q) {
  UNMASK_CHECK(t.device() == Device::cuda, op, " (cuda): ", name, " must be on cuda, got ", t.describe());
  UNMASK_CHECK((t.dtype() == DType::f32 || t.dtype() == DType::bf16) && t.dtype() == q.dtype(), op, " (cuda): ", name,
               " must be f32 or bf16 like q ", q.describe(), ", got ", t.describe());
  UNMASK_CHECK(t.ndim() == 2 && t.shape() == q.shape() && (t.size(1) <= 1 || t.stride(1) == 1), op, " (cuda): ",
               name, " must be [N, NH*HS] like q ", q.shape().str(), " with innermost stride 1, got ", t.describe());
}

/// The sequences and shared fields of p; uploads keep the host copies alive until the launch.
struct Uploads {
  std::unique_ptr<ScratchBuffer> mask;
};

void fill_common(const char* op, CudaState& st, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const ops::AttentionArgs& args, const ops::AttentionTrainArgs& train,
                 AttnTrainParams& p, Uploads& up) {
  p.tuning = st.attention;
  check_rows(op, "q", q, q);
  check_rows(op, "k", k, q);
  check_rows(op, "v", v, q);
  check_rows(op, "out", out, q);
  const int64_t N = q.size(0), C = q.size(1), NH = args.num_heads;
  UNMASK_CHECK(NH >= 1 && C % NH == 0, op, " (cuda): C = ", C, " must be a multiple of num_heads = ", NH);
  UNMASK_CHECK(lse.device() == Device::cuda && lse.dtype() == DType::f32 && lse.is_contiguous() &&
                   lse.numel() == NH * N,
               op, " (cuda): lse must be contiguous f32 [", NH, ", ", N, "] on cuda, got ", lse.describe());
  if (q.dtype() == DType::f32) {  // bf16: the pointers go to AttnTrainBf16Rows (bf16_rows)
    p.q = q.data<float>();
    p.k = k.data<float>();
    p.v = v.data<float>();
    p.out = const_cast<float*>(out.data<float>());
  }
  p.ldq = row_stride(q);
  p.ldk = row_stride(k);
  p.ldv = row_stride(v);
  p.ldo = row_stride(out);
  p.lse = const_cast<float*>(lse.data<float>());
  p.rows = N;
  p.num_heads = int(NH);
  p.head_size = int(C / NH);
  p.scale = args.scale;
  p.dropout_p = train.dropout_p;
  p.dropout_seed = train.dropout_seed;
  p.dropout_offset = train.dropout_offset;
  if (N == 0) return;
  if (args.cu_seqlens) {
    const Tensor& cu = *args.cu_seqlens;
    UNMASK_CHECK(cu.dtype() == DType::i32 && cu.ndim() == 1 && cu.size(0) >= 1 && cu.is_contiguous(), op,
                 " (cuda): cu_seqlens must be contiguous i32 [B+1], got ", cu.describe());
    p.batch = int(cu.size(0) - 1);
    std::vector<int32_t> host(size_t(cu.size(0)));
    if (cu.device() == Device::cpu) {  // checked below, then the context's device copy of them
      std::copy_n(cu.data<int32_t>(), host.size(), host.begin());
    } else {  // T sets the dropout counters: read the lengths back (a small copy, a stream sync)
      CUDA_CHECK(cudaMemcpyAsync(host.data(), cu.raw(), cu.nbytes(), cudaMemcpyDeviceToHost, st.stream));
      CUDA_CHECK(cudaStreamSynchronize(st.stream));
      p.cu_seqlens = cu.data<int32_t>();
    }
    int64_t longest = 0;
    for (int64_t b = 0; b < p.batch; ++b) {
      UNMASK_CHECK(host[size_t(b) + 1] >= host[size_t(b)], op, " (cuda): cu_seqlens must be non-decreasing, got [",
                   b, "] = ", host[size_t(b)], " > [", b + 1, "] = ", host[size_t(b) + 1]);
      longest = std::max<int64_t>(longest, host[size_t(b) + 1] - host[size_t(b)]);
    }
    UNMASK_CHECK(host[0] == 0 && host[size_t(p.batch)] == N, op, " (cuda): cu_seqlens must run from 0 to N = ", N,
                 ", got ", host[0], " .. ", host[size_t(p.batch)]);
    if (cu.device() == Device::cpu) p.cu_seqlens = st.training_cu_seqlens(host);  // uploaded when they changed
    p.max_seqlen = int(longest);
  } else {
    const int64_t T = args.padded_seq_len;
    UNMASK_CHECK(T >= 1 && N % T == 0, op, " (cuda): N = ", N, " must be a multiple of padded_seq_len = ", T);
    p.batch = int(N / T);
    p.max_seqlen = int(T);
    if (const Tensor* m = args.key_padding_mask) {
      const DType md = m->dtype();
      UNMASK_CHECK(md == DType::u8 || md == DType::boolean || md == DType::i32 || md == DType::i64, op,
                   " (cuda): key_padding_mask must be u8, bool, i32 or i64, got ", m->describe());
      UNMASK_CHECK(m->ndim() == 2 && m->size(0) == p.batch && m->size(1) == T, op,
                   " (cuda): key_padding_mask must be [", p.batch, ", ", T, "], got ", m->describe());
      p.mask_elem_bytes = int(dtype_size(md));
      if (m->device() == Device::cpu) {
        // A contiguous mask is uploaded from the caller's memory; a strided one through a
        // temporary copy, which must outlive the copy (a stream sync).
        const bool contiguous = m->is_contiguous();
        const Tensor mc = contiguous ? Tensor() : m->contiguous();
        const Tensor& src = contiguous ? *m : mc;
        up.mask = std::make_unique<ScratchBuffer>(src.nbytes(), st.stream);
        CUDA_CHECK(cudaMemcpyAsync(up.mask->ptr, src.raw(), src.nbytes(), cudaMemcpyHostToDevice, st.stream));
        if (!contiguous) CUDA_CHECK(cudaStreamSynchronize(st.stream));
        p.key_mask = up.mask->ptr;
        p.mask_batch_stride = T;
      } else {
        UNMASK_CHECK(T <= 1 || m->stride(1) == 1, op, " (cuda): a device key_padding_mask needs innermost stride 1, got ",
                     m->describe());
        p.key_mask = m->raw();
        p.mask_batch_stride = p.batch > 1 ? m->stride(0) : T;
      }
    }
  }
}

AttnTrainBf16Rows bf16_rows(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out) {
  AttnTrainBf16Rows r;
  r.q = q.raw();
  r.k = k.raw();
  r.v = v.raw();
  r.out = const_cast<void*>(out.raw());
  return r;
}

}  // namespace

void attention_forward_train(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                             Tensor& lse, const ops::AttentionArgs& args, const ops::AttentionTrainArgs& train) {
  CudaState& st = cuda_state(ctx);
  AttnTrainParams p;
  Uploads up;
  fill_common("attention_forward_train", st, q, k, v, out, lse, args, train, p, up);
  if (q.dtype() == DType::bf16) return attention_train_bf16_forward(p, bf16_rows(q, k, v, out), st.stream);
  if (st.attention_bf16 && attention_train_tc_applies(p))
    attention_train_tc_forward(p, st.stream);
  else
    attention_train_forward(p, st.stream);
}

void attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
                        const ops::AttentionArgs& args, const ops::AttentionTrainArgs& train) {
  constexpr const char* op = "attention_backward";
  CudaState& st = cuda_state(ctx);
  AttnTrainParams p;
  Uploads up;
  fill_common(op, st, q, k, v, out, lse, args, train, p, up);
  check_rows(op, "dout", dout, q);
  check_rows(op, "dq", dq, q);
  check_rows(op, "dk", dk, q);
  check_rows(op, "dv", dv, q);
  const bool bf16 = q.dtype() == DType::bf16;
  if (!bf16) {
    p.dout = dout.data<float>();
    p.dq = dq.data<float>();
    p.dk = dk.data<float>();
    p.dv = dv.data<float>();
  }
  p.lddo = row_stride(dout);
  p.lddq = row_stride(dq);
  p.lddk = row_stride(dk);
  p.lddv = row_stride(dv);
  if (p.rows == 0) return;
  ScratchBuffer delta(size_t(p.num_heads) * size_t(p.rows) * sizeof(float), st.stream);
  p.delta = delta.as<float>();
  if (bf16) {
    AttnTrainBf16Rows rows = bf16_rows(q, k, v, out);
    rows.dout = dout.raw();
    rows.dq = dq.raw();
    rows.dk = dk.raw();
    rows.dv = dv.raw();
    return attention_train_bf16_backward(p, rows, st.stream);
  }
  if (st.attention_bf16 && attention_train_tc_applies(p))
    attention_train_tc_backward(p, st.stream);
  else
    attention_train_backward(p, st.stream);
}

}  // namespace unmask::cuda
