// tests/cuda/test_cuda_attention.cc: the attention forward kernels (flash/, attention_naive.cu)
// against a float64 CPU reference, with test_cuda_ops.cc's rules (ops_test_util.h):
//   - attention in bf16/f16 uses the flash-attention rule: max error against the fp64
//     reference <= 2 x the max error of a naive implementation in the same precision (an
//     emulation on the CPU: fp32 scores and softmax, P rounded to the dtype, fp32 P V) + 1e-4;
//   - invariances: packed (cu_seqlens) == padded + key mask, flash == naive kernel within the
//     rule;
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_state.h"
#include "cuda/flash/flash_api.h"
#include "cuda/ops_cuda.h"
#include "cuda_test_common.h"
#include "ops_test_util.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;
using namespace unmask::ops_test;

// ---- attention -----------------------------------------------------------------------------

namespace {

/// Sequences of an attention test: packed lengths, or padded T with per-sequence real lengths
/// (keys at positions >= len are masked).
struct AttnLayout {
  std::vector<int> lens;  // real tokens per sequence
  int T = 0;              // padded mode when > 0
  int64_t rows() const {
    int64_t n = 0;
    for (int l : lens) n += T > 0 ? T : l;
    return n;
  }
  int64_t row0(size_t b) const {
    int64_t n = 0;
    for (size_t i = 0; i < b; ++i) n += T > 0 ? T : lens[i];
    return n;
  }
  int queries(size_t b) const { return T > 0 ? T : lens[b]; }
};

/// Reference attention over qkv [N, 3C] (q | k | v). emulate = false: float64. emulate = true:
/// the naive same-precision implementation (fp32 scores and softmax, P rounded to dt, fp32 P V,
/// output rounded to dt).
std::vector<double> attention_ref(const std::vector<double>& qkv, const AttnLayout& L, int NH, int HS, double scale,
                                  bool emulate, DType dt) {
  const int64_t C = int64_t(NH) * HS, N = L.rows();
  std::vector<double> out(size_t(N * C), 0.0);
  for (size_t b = 0; b < L.lens.size(); ++b) {
    const int64_t r0 = L.row0(b);
    const int keys = L.lens[b];
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < L.queries(b); ++i) {
        const double* q = &qkv[size_t((r0 + i) * 3 * C + h * HS)];
        std::vector<double> s(static_cast<size_t>(keys));
        double mx = -INFINITY;
        for (int j = 0; j < keys; ++j) {
          const double* k = &qkv[size_t((r0 + j) * 3 * C + C + h * HS)];
          double acc = 0;
          float accf = 0;
          for (int d = 0; d < HS; ++d) {
            acc += q[d] * k[d];
            accf += float(q[d]) * float(k[d]);
          }
          s[size_t(j)] = emulate ? double(accf * float(scale)) : acc * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double l = 0;
        float lf = 0;
        for (int j = 0; j < keys; ++j) {
          if (emulate) {
            const float p = std::exp(float(s[size_t(j)] - mx));
            lf += p;
            s[size_t(j)] = round_to(dt, p);
          } else {
            s[size_t(j)] = std::exp(s[size_t(j)] - mx);
            l += s[size_t(j)];
          }
        }
        for (int d = 0; d < HS; ++d) {
          double acc = 0;
          float accf = 0;
          for (int j = 0; j < keys; ++j) {
            const double v = qkv[size_t((r0 + j) * 3 * C + 2 * C + h * HS + d)];
            acc += s[size_t(j)] * v;
            accf += float(s[size_t(j)]) * float(v);
          }
          double o = 0;
          if (keys > 0) o = emulate ? round_to(dt, accf / lf) : acc / l;
          out[size_t((r0 + i) * C + h * HS + d)] = o;
        }
      }
  }
  return out;
}

/// Runs cuda::attention on qkv (device [N, 3C], q/k/v as column slices), returns out [N, C].
std::vector<double> run_attention(Context& ctx, const Tensor& qkv, const AttnLayout& L, int NH, int HS, float scale,
                                  bool mask_on_device, bool cu_on_device) {
  const int64_t C = int64_t(NH) * HS, N = L.rows();
  Tensor out = Tensor::empty({N, C}, qkv.dtype(), Device::cuda);
  poison(ctx, out);
  ops::AttentionArgs args;
  args.num_heads = NH;
  args.scale = scale;
  Tensor cu, mask;
  int64_t max_seqlen = 0;
  if (L.T > 0) {
    args.padded_seq_len = L.T;
    std::vector<double> m(L.lens.size() * size_t(L.T));
    for (size_t b = 0; b < L.lens.size(); ++b)
      for (int t = 0; t < L.T; ++t) m[b * size_t(L.T) + size_t(t)] = t < L.lens[b] ? 1 : 0;
    mask = mask_on_device ? device_tensor(m, {int64_t(L.lens.size()), L.T}, DType::i32)
                          : host_tensor(m, {int64_t(L.lens.size()), L.T}, DType::u8);
    args.key_padding_mask = &mask;
  } else {
    std::vector<double> c(L.lens.size() + 1, 0.0);
    for (size_t b = 0; b < L.lens.size(); ++b) {
      c[b + 1] = c[b] + L.lens[b];
      max_seqlen = std::max<int64_t>(max_seqlen, L.lens[b]);
    }
    cu = cu_on_device ? device_tensor(c, {int64_t(c.size())}, DType::i32) : host_tensor(c, {int64_t(c.size())}, DType::i32);
    args.cu_seqlens = &cu;
  }
  cuda::attention(ctx, qkv.slice(1, 0, C), qkv.slice(1, C, 2 * C), qkv.slice(1, 2 * C, 3 * C), out, args,
                  cu_on_device ? max_seqlen : 0);
  return to_host(out);
}

using cuda_test::max_abs_diff;

}  // namespace

TEST(CudaAttention, FlashFollowsTheTwiceNaiveRule) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaAttention");
  const AttnLayout layouts[] = {
      {{1, 17, 64, 65, 130}, 0},  // packed, lengths around the 64-row blocks
      {{100, 37, 0}, 100},        // padded with key mask; the last sequence has no real key
      {{300}, 0},                 // one long sequence (several key blocks)
  };
  // Both flash CTA heights (the heuristic picks 64 here), through CudaState::attention's hook;
  // put back however the test ends (the context is shared).
  cuda::CudaState& st = *ctx.cuda_state();
  struct Restore {
    cuda::CudaState& st;
    int saved;
    ~Restore() { st.attention.forward_block_m = saved; }
  } restore{st, st.attention.forward_block_m};
  for (const int block_m : {64, 128}) {
    st.attention.forward_block_m = block_m;
    for (DType dt : {DType::bf16, DType::f16})
      for (int HS : {64, 80, 88, 128, 32})  // 32: no flash instance, the naive kernel runs
        for (const AttnLayout& L : layouts) {
          const int NH = 3;
          const int64_t C = int64_t(NH) * HS, N = L.rows();
          std::vector<double> QKV = rng.vec(size_t(N * 3 * C), dt, 1.0);
          Tensor qkv = device_tensor(QKV, {N, 3 * C}, dt);
          const float scale = float(1.0 / std::sqrt(double(HS)));
          const std::vector<double> got = run_attention(ctx, qkv, L, NH, HS, scale, false, false);
          const std::vector<double> ref = attention_ref(QKV, L, NH, HS, scale, false, dt);
          const std::vector<double> naive = attention_ref(QKV, L, NH, HS, scale, true, dt);
          const double err = max_abs_diff(got, ref), err_naive = max_abs_diff(naive, ref);
          EXPECT_LE(err, 2 * err_naive + 1e-4)
              << dtype_name(dt) << " HS=" << HS << " B=" << L.lens.size() << " T=" << L.T << " block_m=" << block_m
              << " (flash err " << err << ", naive same-precision err " << err_naive << ")";
        }
  }
}

TEST(CudaAttention, Float32NaiveKernelMatchesFloat64) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaAttentionF32");
  const AttnLayout layouts[] = {{{5, 33, 70}, 0}, {{20, 3}, 24}};
  for (int HS : {64, 88, 100})
    for (const AttnLayout& L : layouts) {
      const int NH = 2;
      const int64_t C = int64_t(NH) * HS, N = L.rows();
      std::vector<double> QKV = rng.vec(size_t(N * 3 * C), DType::f32);
      Tensor qkv = device_tensor(QKV, {N, 3 * C}, DType::f32);
      const float scale = float(1.0 / std::sqrt(double(HS)));
      const std::vector<double> got = run_attention(ctx, qkv, L, NH, HS, scale, true, true);
      const std::vector<double> ref = attention_ref(QKV, L, NH, HS, scale, false, DType::f32);
      CloseReport r = compare(got, ref, [&](size_t i) { return 1e-5 * (1 + std::fabs(ref[i])); });
      EXPECT_EQ(r.bad, 0) << "HS=" << HS << " T=" << L.T << "\n" << r.first;
    }
}

TEST(CudaAttention, PackedEqualsPaddedWithMask) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaAttentionPacked");
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (int HS : {64, 88}) {
      const int NH = 2, T = 150;
      const std::vector<int> lens = {150, 1, 64, 97};
      const int64_t C = int64_t(NH) * HS;
      AttnLayout packed{lens, 0}, padded{lens, T};
      const int64_t Np = packed.rows(), Nd = padded.rows();
      std::vector<double> P = rng.vec(size_t(Np * 3 * C), dt);
      std::vector<double> D = rng.vec(size_t(Nd * 3 * C), dt);  // pads: random, must not matter
      for (size_t b = 0; b < lens.size(); ++b)
        for (int t = 0; t < lens[b]; ++t)
          std::copy_n(&P[size_t((packed.row0(b) + t) * 3 * C)], 3 * C, &D[size_t((padded.row0(b) + t) * 3 * C)]);
      const float scale = float(1.0 / std::sqrt(double(HS)));
      const std::vector<double> op = run_attention(ctx, device_tensor(P, {Np, 3 * C}, dt), packed, NH, HS, scale, false, true);
      const std::vector<double> od = run_attention(ctx, device_tensor(D, {Nd, 3 * C}, dt), padded, NH, HS, scale, true, false);
      // Same key blocks, masked keys contribute exact zeros: the real rows agree bit for bit.
      int64_t bad = 0;
      for (size_t b = 0; b < lens.size(); ++b)
        for (int t = 0; t < lens[b]; ++t)
          for (int64_t c = 0; c < C; ++c)
            if (!(op[size_t((packed.row0(b) + t) * C + c)] == od[size_t((padded.row0(b) + t) * C + c)])) ++bad;
      EXPECT_EQ(bad, 0) << dtype_name(dt) << " HS=" << HS;
      // Padded query rows got an output too (no NaN left from the poisoning).
      for (double x : od) ASSERT_FALSE(std::isnan(x)) << "a padded row was not written";
    }
}

namespace {

/// The forced-kernel comparison's case: bf16 q, k, v of B = 2 sequences of T = 200 (head size
/// 64, 4 heads) as column slices of one [N, 3C] buffer, the naive kernel's output, and the bound
/// two low-precision kernels must agree within.
struct ForcedKernelCase {
  static constexpr int NH = 4, HS = 64, T = 200, B = 2;
  static constexpr int64_t C = NH * HS, N = int64_t(B) * T;
  std::vector<double> qkv_values, naive;
  Tensor qkv, out;
  cuda::FlashFwdParams p;
  double vmax = 0, u = 0;

  explicit ForcedKernelCase(Context& ctx) {
    const DType dt = DType::bf16;
    Rng rng("CudaAttentionKernels");
    qkv_values = rng.vec(size_t(N * 3 * C), dt);
    qkv = device_tensor(qkv_values, {N, 3 * C}, dt);
    out = Tensor::empty({N, C}, dt, Device::cuda);
    p.q = qkv.raw();
    p.k = static_cast<const char*>(qkv.raw()) + C * 2;
    p.v = static_cast<const char*>(qkv.raw()) + 2 * C * 2;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * C;
    p.o_row_stride = C;
    p.num_heads = NH;
    p.head_dim = HS;
    p.batch = B;
    p.max_seqlen = T;
    p.scale = 0.125f;
    p.scale_log2 = 0.125f * 1.4426950408889634f;
    p.dtype = dt;
    naive = run(ctx, cuda::AttentionKernel::naive);
    u = unit_roundoff(dt);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) vmax = std::max(vmax, std::fabs(qkv_values[size_t(r * 3 * C + 2 * C + c)]));
  }
  /// The output of `kernel` (poisoned first), on the host.
  std::vector<double> run(Context& ctx, cuda::AttentionKernel kernel, int block_m = 0) {
    poison(ctx, out);
    p.o = out.raw();
    cuda::attention_forward(p, static_cast<cudaStream_t>(ctx.cuda_stream()), kernel, block_m);
    return to_host(out);
  }
  /// Two low-precision kernels differ by their roundings of P (bf16 before P V): up to about
  /// u * sum_j p_j |v_j| <= u * max|v| per output when one key dominates, on top of the output
  /// rounding. (The fp64 comparison with the 2x-naive rule is FlashFollowsTheTwiceNaiveRule.)
  CloseReport compare_with_naive(const std::vector<double>& got) const {
    return compare(got, naive, [&](size_t i) { return 4 * u * (std::fabs(naive[i]) + vmax) + 4e-3; });
  }
};

}  // namespace

TEST(CudaAttention, FlashAgreesWithNaiveKernel) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  ForcedKernelCase fc(ctx);
  ASSERT_TRUE(cuda::attention_kernel_for(fc.p) == cuda::AttentionKernel::flash);
  for (const int block_m : {64, 128}) {  // whatever the heuristic would pick
    const CloseReport r = fc.compare_with_naive(fc.run(ctx, cuda::AttentionKernel::flash, block_m));
    EXPECT_EQ(r.bad, 0) << "block_m=" << block_m << "\n" << r.first;
  }
  EXPECT_THROW(fc.run(ctx, cuda::AttentionKernel::flash, 96), Error);  // 64 or 128 only
}
