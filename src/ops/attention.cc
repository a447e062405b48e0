// ops/attention.cc: the attention front-end: validate, derive sizes, dispatch on the device.
//
// CPU: cpu::attention_forward (src/cpu/attention_cpu.cc; ISA picked at run time).
// CUDA: cuda::attention (src/cuda/ops_cuda.h) when built with UNMASK_WITH_CUDA.
// The float64 oracle is ref::attention_forward (src/ref/attention_ref.cc).
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu/attention_cpu.h"
#include "ops/ops.h"
#include "unmask/error.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/ops_cuda.h"
#endif

namespace unmask::ops {
namespace {

/// q, k, v, out: 2-D f32 with unit innermost stride and rows that do not overlap.
void check_rows(const char* name, const Tensor& t) {
  UNMASK_CHECK(t.ndim() == 2, "attention: ", name, " must be 2-D [N, NH*HS], got ", t.describe());
  UNMASK_CHECK(t.size(1) <= 1 || t.stride(1) == 1, "attention: ", name,
               " must have innermost stride 1, got stride ", t.stride(1), " in ", t.describe());
  UNMASK_CHECK(t.size(0) <= 1 || t.stride(0) >= t.size(1), "attention: ", name,
               " row stride ", t.stride(0), " must be >= its row length ", t.size(1), " in ",
               t.describe());
}

/// Byte range [begin, end) spanned by a 2-D row view.
std::pair<const char*, const char*> span(const Tensor& t) {
  const char* b = static_cast<const char*>(t.raw());
  if (t.numel() == 0) return {b, b};
  return {b, b + ((t.size(0) - 1) * t.stride(0) + t.size(1)) * int64_t(sizeof(float))};
}

bool overlaps(const Tensor& a, const Tensor& b) {
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

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

}  // namespace

void attention(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionArgs& args) {
  // ---- tensors ----
  check_rows("q", q);
  check_rows("k", k);
  check_rows("v", v);
  check_rows("out", out);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"out", &out}}) {
    UNMASK_CHECK(t->shape() == q.shape(), "attention: ", name, " shape ", t->shape().str(),
                 " must equal q's shape ", q.shape().str());
    UNMASK_CHECK(t->device() == q.device(), "attention: ", name, " is on ",
                 device_name(t->device()), " but q is on ", device_name(q.device()));
    if (name != std::string_view("out"))
      UNMASK_CHECK(!overlaps(out, *t), "attention: out ", out.describe(), " overlaps ", name, " ",
                   t->describe(), "; attention cannot run in place");
  }
  UNMASK_CHECK(!overlaps(out, q), "attention: out ", out.describe(), " overlaps q ", q.describe(),
               "; attention cannot run in place");
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"k", &k}, {"v", &v}, {"out", &out}})
    UNMASK_CHECK(t->dtype() == q.dtype(), "attention: ", name, " is ", t->describe(), " but q is ",
                 q.describe(), "; q, k, v and out must share one dtype");
  if (q.device() == Device::cpu)
    UNMASK_CHECK(q.dtype() == DType::f32, "attention: q must be f32 on cpu, got ", q.describe());
#ifdef UNMASK_WITH_CUDA
  if (q.device() == Device::cuda && !cuda::supports("attention", q.dtype()))
    throw Unsupported("attention: device cuda, dtype ", dtype_name(q.dtype()), " is not implemented");
#endif

  // ---- heads and scale ----
  const int64_t N = q.size(0), C = q.size(1), NH = args.num_heads;
  UNMASK_CHECK(NH >= 1, "attention: num_heads must be >= 1, got ", NH);
  UNMASK_CHECK(C >= 1 && C % NH == 0, "attention: width C = ", C,
               " must be a positive multiple of num_heads = ", NH, " (HS = C / NH)");
  const int64_t HS = C / NH;
  UNMASK_CHECK(std::isfinite(args.scale) && args.scale > 0.0f,
               "attention: scale must be finite and > 0, got ", args.scale, " (usually 1/sqrt(HS) = ",
               1.0 / std::sqrt(double(HS)), ")");

  // ---- sequences ----
  const bool packed = args.cu_seqlens != nullptr;
  UNMASK_CHECK(packed != (args.padded_seq_len > 0),
               "attention: give exactly one of cu_seqlens (packed) or padded_seq_len > 0 (padded); got ",
               packed ? "both" : "neither", " (padded_seq_len = ", args.padded_seq_len, ")");
  UNMASK_CHECK(!(packed && args.key_padding_mask), "attention: key_padding_mask is for the padded mode; "
               "with cu_seqlens the padding is already removed");
  int64_t B = 0;
  const int32_t* cu = nullptr;
  std::vector<uint8_t> mask;
  if (packed) {
    const Tensor& c = *args.cu_seqlens;
    UNMASK_CHECK(c.dtype() == DType::i32 && c.ndim() == 1 && c.size(0) >= 1,
                 "attention: cu_seqlens must be i32 [B+1], got ", c.describe());
    UNMASK_CHECK(c.size(0) == 1 || c.stride(0) == 1, "attention: cu_seqlens must be contiguous, got ",
                 c.describe());
    B = c.size(0) - 1;
    cu = c.data<int32_t>();
    if (c.device() == Device::cpu) {  // on the device the kernel cannot check them cheaply
      UNMASK_CHECK(cu[0] == 0, "attention: cu_seqlens[0] must be 0, got ", cu[0]);
      for (int64_t b = 0; b < B; ++b)
        UNMASK_CHECK(cu[b + 1] >= cu[b], "attention: cu_seqlens must be non-decreasing, got cu_seqlens[",
                     b, "] = ", cu[b], " > cu_seqlens[", b + 1, "] = ", cu[b + 1]);
      UNMASK_CHECK(cu[B] == N, "attention: cu_seqlens[B = ", B, "] = ", cu[B],
                   " must equal the number of rows N = ", N);
    }
  } else {
    const int64_t T = args.padded_seq_len;
    UNMASK_CHECK(N % T == 0, "attention: N = ", N, " rows is not a multiple of padded_seq_len T = ", T);
    B = N / T;
    if (const Tensor* m = args.key_padding_mask) {
      const DType dt = m->dtype();
      UNMASK_CHECK(dt == DType::u8 || dt == DType::boolean || dt == DType::i32 || dt == DType::i64,
                   "attention: key_padding_mask must be u8, bool, i32 or i64, got ", m->describe());
      UNMASK_CHECK(m->ndim() == 2 && m->size(0) == B && m->size(1) == T,
                   "attention: key_padding_mask must be [B, T] = [", B, ",", T, "], got ",
                   m->describe());
      UNMASK_CHECK(m->device() == q.device() || m->device() == Device::cpu,
                   "attention: key_padding_mask is on ", device_name(m->device()), " but q is on ",
                   device_name(q.device()));
    }
  }
  if (N == 0) return;

  // ---- dispatch ----
  switch (q.device()) {
    case Device::cpu: {
      if (args.key_padding_mask) mask = mask_to_u8(*args.key_padding_mask);
      cpu::AttentionParams p;
      p.q = q.data<float>();
      p.k = k.data<float>();
      p.v = v.data<float>();
      p.out = out.data<float>();
      p.ldq = q.stride(0);
      p.ldk = k.stride(0);
      p.ldv = v.stride(0);
      p.ldo = out.stride(0);
      p.num_heads = NH;
      p.head_size = HS;
      p.scale = args.scale;
      p.batch = B;
      p.cu_seqlens = cu;
      p.seq_len = args.padded_seq_len;
      p.key_mask = mask.empty() ? nullptr : mask.data();
      cpu::attention_forward(ctx, p);
      return;
    }
    case Device::cuda:
#ifdef UNMASK_WITH_CUDA
      UNMASK_CHECK(ctx.device() == Device::cuda, "attention: tensors are on cuda but the context runs on ",
                   device_name(ctx.device()));
      cuda::attention(ctx, q, k, v, out, args);
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
  throw Error("attention_forward_train: not implemented yet (being written)");
}

void attention_backward(Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq,
                        Tensor& dk, Tensor& dv, const AttentionArgs& args,
                        const AttentionTrainArgs& train) {
  throw Error("attention_backward: not implemented yet (being written)");
}

}  // namespace unmask::ops
