// ops/attention.cc: the attention front-ends (inference, and the training forward and
// backward): validate, derive sizes, dispatch on the device.
//
// CPU: cpu::attention_forward (src/cpu/attention_cpu.cc; ISA picked at run time); training:
// cpu::attention_train_forward / attention_train_backward (src/cpu/attention_train_cpu.cc).
// CUDA: cuda::attention (src/cuda/ops_cuda.h) when built with UNMASK_WITH_CUDA; training:
// cuda::attention_forward_train / attention_backward (src/cuda/attention_train.cu, f32; bf16 on
// tensor cores, attention_train_tc.cu). bf16 / f16 training tensors on the CPU are emulated
// (f32 copies, the f32 kernels, one rounding of each output).
// The float64 oracle is ref::attention_forward (src/ref/attention_ref.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_cpu.h"
#include "cpu/attention_train_cpu.h"
#include "ops/op_common.h"
#include "ops/ops.h"
#include "unmask/error.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

/// q, k, v, out: 2-D f32 with unit innermost stride and rows that do not overlap.
void check_rows(const char* op, const char* name, const Tensor& t) {
  UNMASK_CHECK(t.ndim() == 2, op, ": ", name, " must be 2-D [N, NH*HS], got ", t.describe());
  UNMASK_CHECK(t.size(1) <= 1 || t.stride(1) == 1, op, ": ", name,
               " must have innermost stride 1, got stride ", t.stride(1), " in ", t.describe());
  UNMASK_CHECK(t.size(0) <= 1 || t.stride(0) >= t.size(1), op, ": ", name,
               " row stride ", t.stride(0), " must be >= its row length ", t.size(1), " in ",
               t.describe());
}

bool overlaps(const Tensor& a, const Tensor& b) { return detail::overlaps(a, b); }

/// key_padding_mask [B, T] (u8, bool, i32 or i64; any strides) -> contiguous u8, 1 = real.
std::vector<uint8_t> mask_to_u8(const Tensor& m) {
  const int64_t B = m.size(0), T = m.size(1);
  std::vector<uint8_t> out(size_t(B * T));
  const size_t es = dtype_size(m.dtype());
  const char* base = static_cast<const char*>(m.raw());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const char* p = base + (b * m.stride(0) + t * m.stride(1)) * int64_t(es);
      bool real = false;
      switch (m.dtype()) {
        case DType::i32: { int32_t x; std::memcpy(&x, p, 4); real = x != 0; break; }
        case DType::i64: { int64_t x; std::memcpy(&x, p, 8); real = x != 0; break; }
        default: real = *reinterpret_cast<const uint8_t*>(p) != 0; break;  // u8, bool
      }
      out[size_t(b * T + t)] = real ? 1 : 0;
    }
  return out;
}

/// What the checks of one attention call derive.
struct Layout {
  int64_t N = 0, C = 0, NH = 0, HS = 0, B = 0;
  int64_t max_len = 0;             // T: the longest sequence (padded: padded_seq_len)
  const int32_t* cu = nullptr;     // packed
  std::vector<uint8_t> mask;       // padded with a key mask, CPU: [B, T] u8, 1 = real
};

/// The checks shared by the attention ops (named `op` in messages): q, k, v, out, the heads,
/// the scale and the sequences. The key mask is converted only for CPU tensors.
Layout check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const AttentionArgs& args) {
  // ---- tensors ----
  check_rows(op, "q", q);
  check_rows(op, "k", k);
  check_rows(op, "v", v);
  check_rows(op, "out", out);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"out", &out}}) {
    UNMASK_CHECK(t->shape() == q.shape(), op, ": ", name, " shape ", t->shape().str(),
                 " must equal q's shape ", q.shape().str());
    UNMASK_CHECK(t->device() == q.device(), op, ": ", name, " is on ",
                 device_name(t->device()), " but q is on ", device_name(q.device()));
    if (name != std::string_view("out"))
      UNMASK_CHECK(!overlaps(out, *t), op, ": out ", out.describe(), " overlaps ", name, " ",
                   t->describe(), "; attention cannot run in place");
  }
  UNMASK_CHECK(!overlaps(out, q), op, ": out ", out.describe(), " overlaps q ", q.describe(),
               "; attention cannot run in place");
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"out", &out}})
    UNMASK_CHECK(t->dtype() == q.dtype(), op, ": ", name, " is ", t->describe(), " but q is ",
                 q.describe(), "; q, k, v and out must share one dtype");
  // The training ops take bf16 / f16 on the CPU too (emulated: attention_forward_train).
  const bool training = op != std::string_view("attention");
  if (q.device() == Device::cpu && !training)
    UNMASK_CHECK(q.dtype() == DType::f32, op, ": q must be f32 on cpu, got ", q.describe());
  if (training) detail::check_float_train(op, "q", q);

  // ---- heads and scale ----
  Layout lay;
  lay.N = q.size(0);
  lay.C = q.size(1);
  lay.NH = args.num_heads;
  UNMASK_CHECK(lay.NH >= 1, op, ": num_heads must be >= 1, got ", lay.NH);
  UNMASK_CHECK(lay.C >= 1 && lay.C % lay.NH == 0, op, ": width C = ", lay.C,
               " must be a positive multiple of num_heads = ", lay.NH, " (HS = C / NH)");
  lay.HS = lay.C / lay.NH;
  UNMASK_CHECK(std::isfinite(args.scale) && args.scale > 0.0f,
               op, ": scale must be finite and > 0, got ", args.scale, " (usually 1/sqrt(HS) = ",
               1.0 / std::sqrt(double(lay.HS)), ")");

  // ---- sequences ----
  const int64_t N = lay.N;
  const bool packed = args.cu_seqlens != nullptr;
  UNMASK_CHECK(packed != (args.padded_seq_len > 0),
               op, ": give exactly one of cu_seqlens (packed) or padded_seq_len > 0 (padded); got ",
               packed ? "both" : "neither", " (padded_seq_len = ", args.padded_seq_len, ")");
  UNMASK_CHECK(!(packed && args.key_padding_mask), op, ": key_padding_mask is for the padded mode; "
               "with cu_seqlens the padding is already removed");
  if (packed) {
    const Tensor& c = *args.cu_seqlens;
    UNMASK_CHECK(c.dtype() == DType::i32 && c.ndim() == 1 && c.size(0) >= 1,
                 op, ": cu_seqlens must be i32 [B+1], got ", c.describe());
    UNMASK_CHECK(c.size(0) == 1 || c.stride(0) == 1, op, ": cu_seqlens must be contiguous, got ",
                 c.describe());
    lay.B = c.size(0) - 1;
    lay.cu = c.data<int32_t>();
    const int32_t* cu = lay.cu;
    const int64_t B = lay.B;
    UNMASK_CHECK(args.max_seqlen >= 0, op, ": max_seqlen must be >= 0, got ", args.max_seqlen);
    if (c.device() == Device::cpu) {  // on the device the kernel cannot check them cheaply
      UNMASK_CHECK(cu[0] == 0, op, ": cu_seqlens[0] must be 0, got ", cu[0]);
      for (int64_t b = 0; b < B; ++b) {
        UNMASK_CHECK(cu[b + 1] >= cu[b], op, ": cu_seqlens must be non-decreasing, got cu_seqlens[",
                     b, "] = ", cu[b], " > cu_seqlens[", b + 1, "] = ", cu[b + 1]);
        lay.max_len = std::max<int64_t>(lay.max_len, cu[b + 1] - cu[b]);
      }
      UNMASK_CHECK(cu[B] == N, op, ": cu_seqlens[B = ", B, "] = ", cu[B],
                   " must equal the number of rows N = ", N);
      UNMASK_CHECK(args.max_seqlen == 0 || args.max_seqlen >= lay.max_len, op, ": max_seqlen = ",
                   args.max_seqlen, " is shorter than the longest sequence (", lay.max_len, ")",
                   Hint("pass 0 to derive it"));
    }
  } else {
    const int64_t T = args.padded_seq_len;
    UNMASK_CHECK(N % T == 0, op, ": N = ", N, " rows is not a multiple of padded_seq_len T = ", T);
    lay.B = N / T;
    lay.max_len = T;
    if (const Tensor* m = args.key_padding_mask) {
      const DType dt = m->dtype();
      UNMASK_CHECK(dt == DType::u8 || dt == DType::boolean || dt == DType::i32 || dt == DType::i64,
                   op, ": key_padding_mask must be u8, bool, i32 or i64, got ", m->describe());
      UNMASK_CHECK(m->ndim() == 2 && m->size(0) == lay.B && m->size(1) == T,
                   op, ": key_padding_mask must be [B, T] = [", lay.B, ",", T, "], got ",
                   m->describe());
      UNMASK_CHECK(m->device() == q.device() || m->device() == Device::cpu,
                   op, ": key_padding_mask is on ", device_name(m->device()), " but q is on ",
                   device_name(q.device()));
      if (q.device() == Device::cpu && N > 0) lay.mask = mask_to_u8(*m);
    }
  }
  return lay;
}

/// The CPU kernel parameters of a checked call.
cpu::AttentionParams cpu_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const AttentionArgs& args, const Layout& lay) {
  cpu::AttentionParams p;
  p.q = q.data<float>();
  p.k = k.data<float>();
  p.v = v.data<float>();
  p.out = out.data<float>();
  p.ldq = q.stride(0);
  p.ldk = k.stride(0);
  p.ldv = v.stride(0);
  p.ldo = out.stride(0);
  p.num_heads = lay.NH;
  p.head_size = lay.HS;
  p.scale = args.scale;
  p.batch = lay.B;
  p.cu_seqlens = lay.cu;
  p.seq_len = args.padded_seq_len;
  p.key_mask = lay.mask.empty() ? nullptr : lay.mask.data();
  return p;
}

/// lse: f32 [NH, N] contiguous on q's device.
void check_lse(const char* op, const Tensor& lse, const Tensor& q, const Layout& lay) {
  UNMASK_CHECK(lse.dtype() == DType::f32 && lse.ndim() == 2 && lse.size(0) == lay.NH &&
               lse.size(1) == lay.N && lse.is_contiguous(), op, ": lse must be contiguous f32 [NH, N] = [",
               lay.NH, ",", lay.N, "], got ", lse.describe());
  UNMASK_CHECK(lse.device() == q.device(), op, ": lse is on ", device_name(lse.device()),
               " but q is on ", device_name(q.device()));
}

void check_dropout(const char* op, const AttentionTrainArgs& train) {
  UNMASK_CHECK(train.dropout_p >= 0.0f && train.dropout_p < 1.0f, op,
               ": dropout_p must be in [0, 1), got ", train.dropout_p);
}

/// The CUDA branch of the training ops: Unsupported without a CUDA build or for a dtype the
/// backend lacks (ops::supports, op_table.cc), else run() (cuda::attention_forward_train / _backward).
template <typename Run>
void train_on_cuda(const char* op, Context& ctx, const Tensor& q, Run&& run) {
#ifdef UNMASK_WITH_CUDA
  if (!supports(op, Device::cuda, q.dtype())) detail::throw_unsupported(op, Device::cuda, q.dtype());
  UNMASK_CHECK(ctx.device() == Device::cuda, op, ": tensors are on cuda but the context runs on ",
               device_name(ctx.device()));
  run();
#else
  (void)ctx;
  (void)run;
  detail::throw_unsupported(op, Device::cuda, q.dtype());
#endif
}

}  // namespace

void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionArgs& args) {
  detail::OpScope op_scope(ctx, "attention");
  const Layout lay = check_attention("attention", q, k, v, out, args);
#ifdef UNMASK_WITH_CUDA
  if (q.device() == Device::cuda && !supports("attention", Device::cuda, q.dtype()))
    throw Unsupported("attention: device cuda, dtype ", dtype_name(q.dtype()), " is not implemented");
#endif
  if (lay.N == 0) return;
  switch (q.device()) {
    case Device::cpu:
      cpu::attention_forward(ctx, cpu_params(q, k, v, out, args, lay));
      return;
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      UNMASK_CHECK(ctx.device() == Device::cuda, "attention: tensors are on cuda but the context runs on ",
                   device_name(ctx.device()));
      cuda::attention(ctx, q, k, v, out, args, args.max_seqlen);
      return;
#else
      throw Unsupported("attention: device cuda, dtype ", dtype_name(q.dtype()),
                        ": this build has no CUDA backend",
                        Hint("rebuild with -DUNMASK_CUDA=ON on a machine with the CUDA toolkit"));
#endif
  }
  throw Unsupported("attention: unknown device ", int(q.device()));
}

void attention_forward_train(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                             Tensor& out, Tensor& lse, const AttentionArgs& args,
                             const AttentionTrainArgs& train) {
  detail::OpScope op_scope(ctx, "attention_forward_train");
  constexpr const char* op = "attention_forward_train";
  const Layout lay = check_attention(op, q, k, v, out, args);
  check_lse(op, lse, q, lay);
  check_dropout(op, train);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}})
    detail::check_no_overlap(op, "lse", lse, name, *t, false);
  if (q.device() == Device::cuda) return train_on_cuda(op, ctx, q, [&] {
#ifdef UNMASK_WITH_CUDA
    cuda::attention_forward_train(ctx, q, k, v, out, lse, args, train);
#endif
  });
  if (q.device() != Device::cpu) detail::throw_unsupported(op, q.device(), q.dtype());
  if (lay.N == 0) return;
  if (q.dtype() != DType::f32) {  // emulation of bf16 / f16 storage: f32 copies, one rounding of out
    Tensor outf = Tensor::empty(out.shape(), DType::f32);
    attention_forward_train(ctx, detail::widen_for_cpu(q), detail::widen_for_cpu(k), detail::widen_for_cpu(v), outf,
                            lse, args, train);
    return detail::narrow_into(outf, out);
  }
  cpu::AttentionTrainParams p;
  p.attn = cpu_params(q, k, v, out, args, lay);
  p.lse = lse.data<float>();
  p.rows = lay.N;
  p.dropout_p = train.dropout_p;
  p.dropout_seed = train.dropout_seed;
  p.dropout_offset = train.dropout_offset;
  p.dropout_stride = lay.max_len;
  cpu::attention_train_forward(ctx, p);
}

void attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq,
                        Tensor& dk, Tensor& dv, const AttentionArgs& args,
                        const AttentionTrainArgs& train) {
  detail::OpScope op_scope(ctx, "attention_backward");
  constexpr const char* op = "attention_backward";
  const Layout lay = check_attention(op, q, k, v, out, args);
  check_lse(op, lse, q, lay);
  check_dropout(op, train);
  const std::pair<const char*, const Tensor*> inputs[] = {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out},
                                                          {"lse", &lse}, {"dout", &dout}};
  const std::pair<const char*, Tensor*> grads[] = {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}};
  check_rows(op, "dout", dout);
  UNMASK_CHECK(dout.shape() == q.shape() && dout.dtype() == q.dtype() && dout.device() == q.device(),
               op, ": dout must be like q ", q.describe(), ", got ", dout.describe());
  for (const auto& [name, t] : grads) {
    check_rows(op, name, *t);
    UNMASK_CHECK(t->shape() == q.shape() && t->dtype() == q.dtype() && t->device() == q.device(),
                 op, ": ", name, " must be like q ", q.describe(), ", got ", t->describe());
    for (const auto& [in_name, in] : inputs) detail::check_no_overlap(op, name, *t, in_name, *in, false);
  }
  detail::check_no_overlap(op, "dq", dq, "dk", dk, false);
  detail::check_no_overlap(op, "dq", dq, "dv", dv, false);
  detail::check_no_overlap(op, "dk", dk, "dv", dv, false);
  if (q.device() == Device::cuda) return train_on_cuda(op, ctx, q, [&] {
#ifdef UNMASK_WITH_CUDA
    cuda::attention_backward(ctx, q, k, v, out, lse, dout, dq, dk, dv, args, train);
#endif
  });
  if (q.device() != Device::cpu) detail::throw_unsupported(op, q.device(), q.dtype());
  if (lay.N == 0) return;
  if (q.dtype() != DType::f32) {  // emulation (see attention_forward_train)
    const DType f32 = DType::f32;
    Tensor dqf = Tensor::empty(dq.shape(), f32), dkf = Tensor::empty(dk.shape(), f32),
           dvf = Tensor::empty(dv.shape(), f32);
    attention_backward(ctx, detail::widen_for_cpu(q), detail::widen_for_cpu(k), detail::widen_for_cpu(v),
                       detail::widen_for_cpu(out), lse, detail::widen_for_cpu(dout), dqf, dkf, dvf, args, train);
    detail::narrow_into(dqf, dq);
    detail::narrow_into(dkf, dk);
    return detail::narrow_into(dvf, dv);
  }
  cpu::AttentionTrainParams p;
  p.attn = cpu_params(q, k, v, out, args, lay);
  p.lse = lse.data<float>();
  p.rows = lay.N;
  p.dropout_p = train.dropout_p;
  p.dropout_seed = train.dropout_seed;
  p.dropout_offset = train.dropout_offset;
  p.dropout_stride = lay.max_len;
  p.dout = dout.data<float>();
  p.lddo = dout.stride(0);
  p.dq = dq.data<float>();
  p.dk = dk.data<float>();
  p.dv = dv.data<float>();
  p.lddq = dq.stride(0);
  p.lddk = dk.stride(0);
  p.lddv = dv.stride(0);
  cpu::attention_train_backward(ctx, p);
}

}  // namespace unmask::ops
