// tests/cuda/test_cuda_attention.cc: the attention forward kernels (flash/, attention_naive.cu)
// against a float64 CPU reference, with test_cuda_ops.cc's rules (ops_test_util.h):
//   - attention in bf16/f16 uses the flash-attention rule: max error against the fp64
//     reference <= 2 x the max error of a naive implementation in the same precision (an
//     emulation on the CPU: fp32 scores and softmax, P rounded to the dtype, fp32 P V) + 1e-4;
//   - invariances: packed (cu_seqlens) == padded + key mask, flash == naive kernel within the
//     rule;
//   - the wgmma kernels (sm_90a) in suites of their own (CudaWgmmaProbe, CudaWgmma).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "../scoped_env.h"
#include "cuda/flash/flash_api.h"
#include "cuda/ops_cuda.h"
#include "cuda_test_common.h"
#include "ops_test_util.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;
using namespace unmask::ops_test;
using unmask::test::ScopedEnv;

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
  // Every flash CTA shape (the heuristic picks 64 here): 64 and 128 rows with 16 rows per warp,
  // 128 with 32 (head size 64; the others run with 16).
  const std::pair<const char*, const char*> shapes[] = {{"64", "16"}, {"128", "16"}, {"128", "32"}};
  for (const auto& [block_m, warp_rows] : shapes) {
    setenv("UNMASK_FLASH_BLOCK_M", block_m, 1);
    setenv("UNMASK_FLASH_WARP_ROWS", warp_rows, 1);
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
        EXPECT_LE(err, 2 * err_naive + 1e-4) << dtype_name(dt) << " HS=" << HS << " B=" << L.lens.size() << " T=" << L.T
                                             << " block_m=" << block_m << " warp_rows=" << warp_rows
                                             << " (flash err " << err
                                             << ", naive same-precision err " << err_naive << ")";
      }
  }
  unsetenv("UNMASK_FLASH_BLOCK_M");
  unsetenv("UNMASK_FLASH_WARP_ROWS");
}

// One m64n64k16 wgmma (f16) on a one-hot A and a [64][64] tile whose elements name their own
// position (exact in f16), read through the attention kernels' descriptors (K-major: LBO 128,
// SBO 1024, k-step s at column chunk 2s; MN-major: LBO 1024, SBO 128, k-step s at row group 2s):
// D[m][n] must be B[m % 16][n] = 64 (m % 16) + n + 1 for every k-step. A failure here points at
// the descriptors or fragment layouts rather than at the attention's arithmetic.
TEST(CudaWgmmaProbe, DescriptorProbeReadsTheCoreMatrixTiles) {
  REQUIRE_CUDA();
  REQUIRE_WGMMA_DEVICE();
  for (bool trans_b : {false, true})
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> d = cuda::flash_wgmma_probe(trans_b, step);
      ASSERT_EQ(d.size(), size_t(64 * 64));
      int bad = 0;
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 64; ++n) {
          const float want = float(64 * (m % 16) + n + 1), got = d[size_t(m * 64 + n)];
          if (got == want) continue;
          if (++bad <= 4)
            ADD_FAILURE() << (trans_b ? "MN-major" : "K-major") << " k-step " << step << ": D[" << m << "][" << n
                          << "] = " << got << " (k " << int(got - 1) / 64 << ", n " << int(got - 1) % 64
                          << "), want " << want;
        }
      EXPECT_EQ(bad, 0) << (trans_b ? "MN-major" : "K-major") << " k-step " << step << ": " << bad << " of 4096 wrong";
      if (bad == 0) continue;
      // Diagnosis for the next edit: does the descriptor with LBO and SBO exchanged read right?
      const std::vector<float> swapped = cuda::flash_wgmma_probe(trans_b, step, true);
      int bad_swapped = 0;
      for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 64; ++n) bad_swapped += swapped[size_t(m * 64 + n)] != float(64 * (m % 16) + n + 1);
      // (bench/gpu/ab_check.sh reads these lines and sets UNMASK_FLASH_WGMMA_EXCHANGE from them.)
      std::printf("[ wgmma probe %s k-step %d ] with LBO and SBO exchanged: %d of 4096 wrong%s\n",
                  trans_b ? "MN-major" : "K-major", step, bad_swapped,
                  bad_swapped == 0 ? (trans_b ? " (the kernels run right with UNMASK_FLASH_WGMMA_EXCHANGE=mn; then "
                                                "exchange them in the kernels' descriptors)"
                                              : " (the kernels run right with UNMASK_FLASH_WGMMA_EXCHANGE=k; then "
                                                "exchange them in the kernels' descriptors)")
                                   : "");
    }
}

// UNMASK_FLASH_WGMMA_EXCHANGE (flash_wgmma_exchange: the descriptors' LBO and SBO exchanged
// per operand form, for a GPU whose probe passes only that way): its four spellings, and an
// Error naming the variable for anything else. Host parsing only: no device needed.
TEST(CudaWgmmaProbe, ExchangeSwitchIsStrict) {
  const std::pair<const char*, int> good[] = {{nullptr, 0}, {"", 0}, {"none", 0}, {"k", 1},
                                              {"mn", 2},    {"k,mn", 3}, {"mn,k", 3}};
  for (const auto& [value, want] : good) {
    ScopedEnv env("UNMASK_FLASH_WGMMA_EXCHANGE", value);
    EXPECT_EQ(cuda::flash_wgmma_exchange(), want) << (value ? value : "(unset)");
  }
  for (const char* bad : {"K", "both", "1", "k mn"}) {
    ScopedEnv env("UNMASK_FLASH_WGMMA_EXCHANGE", bad);
    try {
      cuda::flash_wgmma_exchange();
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("UNMASK_FLASH_WGMMA_EXCHANGE"), std::string::npos) << e.what();
    }
  }
}

// The wgmma forward (fwd_wgmma_kernel.cuh; UNMASK_FLASH_WGMMA=1 where it applies: head size 64
// on a compute capability 9.x GPU), in each tile shape, by the same rule as the mma.sync kernel:
// packed lengths around the 64-row and 128-key blocks, padded with masked keys and a sequence
// without a real key, and one sequence of several key blocks with the last one cut short.
TEST(CudaWgmma, FlashFollowsTheTwiceNaiveRule) {
  REQUIRE_CUDA();
  REQUIRE_WGMMA_DEVICE();
  Context& ctx = cuda_ctx();
  Rng rng("CudaAttentionWgmma");
  const AttnLayout layouts[] = {
      {{1, 17, 64, 65, 127, 128, 129, 200}, 0},
      {{100, 37, 0}, 100},
      {{600}, 0},
  };
  const ScopedEnv on("UNMASK_FLASH_WGMMA", "1"), block_m("UNMASK_FLASH_BLOCK_M", nullptr),
      warp_rows("UNMASK_FLASH_WARP_ROWS", nullptr);
  const std::pair<const char*, cuda::WgmmaFwdShape> shapes[] = {{"m64n128", cuda::WgmmaFwdShape::m64n128},
                                                                  {"m64n64", cuda::WgmmaFwdShape::m64n64},
                                                                  {"m128n128", cuda::WgmmaFwdShape::m128n128}};
  for (const auto& [shape, shape_id] : shapes) {
    const ScopedEnv tiles("UNMASK_FLASH_WGMMA_SHAPE", shape);
    for (DType dt : {DType::bf16, DType::f16})
      for (const AttnLayout& L : layouts) {
        const int NH = 3, HS = 64;
        const int64_t C = int64_t(NH) * HS, N = L.rows();
        std::vector<double> QKV = rng.vec(size_t(N * 3 * C), dt, 1.0);
        Tensor qkv = device_tensor(QKV, {N, 3 * C}, dt);
        const float scale = 0.125f;
        const uint64_t launches = cuda::flash_fwd_wgmma_launches(shape_id);
        const std::vector<double> got = run_attention(ctx, qkv, L, NH, HS, scale, false, false);
        EXPECT_GT(cuda::flash_fwd_wgmma_launches(shape_id), launches) << "the wgmma kernel of " << shape << " did not run";
        const std::vector<double> ref = attention_ref(QKV, L, NH, HS, scale, false, dt);
        const std::vector<double> naive = attention_ref(QKV, L, NH, HS, scale, true, dt);
        const double err = max_abs_diff(got, ref), err_naive = max_abs_diff(naive, ref);
        EXPECT_LE(err, 2 * err_naive + 1e-4) << dtype_name(dt) << " B=" << L.lens.size() << " T=" << L.T
                                             << " shape=" << shape << " (wgmma err " << err
                                             << ", naive same-precision err " << err_naive << ")";
        std::printf("[ wgmma %s %s B=%zu T=%d ] max error %.3g, naive %.3g\n", shape, dtype_name(dt), L.lens.size(),
                    L.T, err, err_naive);
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
  std::vector<double> run(Context& ctx, cuda::AttentionKernel kernel, int block_m = 0, int warp_rows = 0) {
    poison(ctx, out);
    p.o = out.raw();
    cuda::attention_forward(p, static_cast<cudaStream_t>(ctx.cuda_stream()), kernel, block_m, warp_rows);
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
  const std::pair<int, int> shapes[] = {{64, 16}, {128, 16}, {128, 32}};  // whatever the heuristic would pick
  for (const auto& [block_m, warp_rows] : shapes) {
    const CloseReport r = fc.compare_with_naive(fc.run(ctx, cuda::AttentionKernel::flash, block_m, warp_rows));
    EXPECT_EQ(r.bad, 0) << "block_m=" << block_m << " warp_rows=" << warp_rows << "\n" << r.first;
  }
  EXPECT_THROW(fc.run(ctx, cuda::AttentionKernel::flash, 128, 24), Error);  // 16 or 32 only
  {  // the switch of the wgmma forward takes 0 or 1, and nothing else, on any device
    const ScopedEnv bad("UNMASK_FLASH_WGMMA", "yes");
    EXPECT_THROW(fc.run(ctx, cuda::AttentionKernel::flash), Error);
  }
  // Forced, the wgmma kernel is refused (an Error, not a launch) where it cannot run; where it
  // can, CudaWgmma.ForcedKernelAgreesWithTheNaiveKernel runs it (its own suite: a process of its own).
  if (!cuda::flash_fwd_wgmma_device()) EXPECT_THROW(fc.run(ctx, cuda::AttentionKernel::flash_wgmma), Error);
}

// The wgmma tests have suites of their own (CudaWgmmaProbe, CudaWgmma, CudaWgmmaTc,
// CudaWgmmaBert): bench/gpu/run_test_suites.sh runs a suite a process, so a kernel that faults
// on its first run (built without a GPU) cannot take the proven kernels' suites down with it.
TEST(CudaWgmma, ForcedKernelAgreesWithTheNaiveKernel) {
  REQUIRE_CUDA();
  REQUIRE_WGMMA_DEVICE();
  Context& ctx = cuda_ctx();
  ForcedKernelCase fc(ctx);
  const CloseReport r = fc.compare_with_naive(fc.run(ctx, cuda::AttentionKernel::flash_wgmma));
  EXPECT_EQ(r.bad, 0) << "wgmma\n" << r.first;
}

namespace {

/// The persistent form's comparison case: q, k, v of NH = 3 heads of `head_dim` (64: the one the
/// persistent form has) as column slices of one [N, 3C] buffer, in the packed layout (cu_seqlens on the device, max_seqlen past every length:
/// tiles past a sequence's end to skip) or the padded one (an i32 key mask; one sequence with no
/// real key; without one when every sequence is full). training: an f32 output, the lse and
/// dropout at `offset`.
struct PersistentCase {
  static constexpr int NH = 3;
  int HS;
  int64_t C;
  AttnLayout L;
  DType dt;
  Tensor qkv, out, lse, cu, mask;
  cuda::FlashFwdParams p;

  PersistentCase(Rng& rng, AttnLayout layout, DType dtype, bool training, uint64_t offset, int head_dim = 64)
      : HS(head_dim), C(int64_t(NH) * head_dim), L(std::move(layout)), dt(dtype) {
    const int64_t N = L.rows();
    qkv = device_tensor(rng.vec(size_t(N * 3 * C), dt, 1.0), {N, 3 * C}, dt);
    out = Tensor::empty({N, C}, training ? DType::f32 : dt, Device::cuda);
    const size_t es = dtype_size(dt);
    p.q = qkv.raw();
    p.k = static_cast<const char*>(qkv.raw()) + C * es;
    p.v = static_cast<const char*>(qkv.raw()) + 2 * C * es;
    p.q_row_stride = p.k_row_stride = p.v_row_stride = 3 * C;
    p.o_row_stride = C;
    p.num_heads = NH;
    p.head_dim = HS;
    p.batch = int(L.lens.size());
    p.scale = 0.125f;
    p.scale_log2 = 0.125f * 1.4426950408889634f;
    p.dtype = dt;
    const bool all_full = std::all_of(L.lens.begin(), L.lens.end(), [&](int l) { return l == L.T; });
    if (L.T > 0 && all_full) {
      p.max_seqlen = L.T;  // padded without a key mask
    } else if (L.T > 0) {
      p.max_seqlen = L.T;
      std::vector<double> m(L.lens.size() * size_t(L.T));
      for (size_t b = 0; b < L.lens.size(); ++b)
        for (int t = 0; t < L.T; ++t) m[b * size_t(L.T) + size_t(t)] = t < L.lens[b] ? 1 : 0;
      mask = device_tensor(m, {int64_t(L.lens.size()), L.T}, DType::i32);
      p.key_mask = mask.raw();
      p.mask_elem_bytes = 4;
      p.mask_batch_stride = L.T;
    } else {
      std::vector<double> c(L.lens.size() + 1, 0.0);
      int longest = 0;
      for (size_t b = 0; b < L.lens.size(); ++b) {
        c[b + 1] = c[b] + L.lens[b];
        longest = std::max(longest, L.lens[b]);
      }
      cu = device_tensor(c, {int64_t(c.size())}, DType::i32);
      p.cu_seqlens = static_cast<const int32_t*>(cu.raw());
      p.max_seqlen = longest + 72;  // an upper bound, as callers may pass: whole tiles past every end
                                    // (a multiple of 4: offset 0 takes the four-aligned dropout path)
    }
    if (training) {
      lse = Tensor::empty({NH, N}, DType::f32, Device::cuda);
      p.o_f32 = true;
      p.lse = lse.data<float>();
      p.lse_head_stride = N;
      p.dropout_p = 0.125f;
      p.dropout_seed = 0x5eed;
      p.dropout_offset = offset;
    }
  }
  /// The output (and lse) bytes of one run, outputs NaN-poisoned first.
  std::vector<double> run(Context& ctx, cuda::AttentionKernel kernel, int block_m, int max_ctas = 0) {
    poison(ctx, out);
    p.o = out.raw();
    if (p.lse) poison(ctx, lse);
    cuda::attention_forward(p, static_cast<cudaStream_t>(ctx.cuda_stream()), kernel, block_m, 16, max_ctas);
    std::vector<double> got = to_host(out);
    if (p.lse)
      for (double x : to_host(lse)) got.push_back(x);
    return got;
  }
};

/// Bitwise equality with NaN == NaN (an output the kernels leave unwritten stays the poison in
/// both, and a row with no real key has lse -inf in both): the index of the first difference, or -1.
int64_t first_bit_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return int64_t(i);
  return -1;
}

}  // namespace

// The persistent forward (fwd_persistent_kernel.cuh, opt-in UNMASK_FLASH_PERSISTENT=1) runs the
// same per-warp code over the same key blocks as the CTA-per-tile kernel: the same bits for every
// layout, both CTA heights and dtypes, inference and training (f32 output, lse, dropout with
// counters that start a Philox block and ones that do not), with few CTAs walking many tiles and
// with as many as fit.
TEST(CudaAttention, PersistentFormIsTheSameBitsAsACtaPerTile) {
  REQUIRE_CUDA();
  Context& ctx = cuda_ctx();
  Rng rng("CudaAttentionPersistent");
  const ScopedEnv env_off("UNMASK_FLASH_PERSISTENT", nullptr), wgmma_off("UNMASK_FLASH_WGMMA", nullptr);
  const AttnLayout layouts[] = {
      {{1, 17, 64, 65, 127, 128, 129, 300, 0, 5}, 0},  // packed; one empty sequence; tiles to skip
      {{200, 37, 0, 64}, 200},                          // padded with a key mask; one with no real key
      {{64}, 0},                                        // one key block: Q prefetched beside its own
      {{96, 96}, 96},                                   // padded, no key mask
  };
  for (DType dt : {DType::bf16, DType::f16})
    for (const AttnLayout& L : layouts)
      for (int training = 0; training < 2; ++training)
        for (uint64_t offset : training ? std::vector<uint64_t>{0, 6} : std::vector<uint64_t>{0}) {
          PersistentCase pc(rng, L, dt, training == 1, offset);
          for (int block_m : {64, 128}) {
            const std::vector<double> want = pc.run(ctx, cuda::AttentionKernel::flash, block_m);
            for (int max_ctas : {0, 1, 3, 7}) {
              const uint64_t launches = cuda::flash_fwd_persistent_launches();
              const std::vector<double> got = pc.run(ctx, cuda::AttentionKernel::flash_persistent, block_m, max_ctas);
              EXPECT_EQ(cuda::flash_fwd_persistent_launches(), launches + 1);
              const int64_t at = first_bit_difference(got, want);
              EXPECT_EQ(at, -1) << dtype_name(dt) << " B=" << L.lens.size() << " T=" << L.T << " training=" << training
                                << " offset=" << offset << " block_m=" << block_m << " max_ctas=" << max_ctas
                                << ": element " << at << " is " << (at >= 0 ? got[size_t(at)] : 0.0) << ", the "
                                << "CTA-per-tile kernel wrote " << (at >= 0 ? want[size_t(at)] : 0.0);
            }
          }
        }
  // The opt-in through the environment, on the default path of the ops (attention_kernel_for's
  // flash): the persistent form runs and writes the same bits.
  {
    PersistentCase pc(rng, layouts[0], DType::bf16, false, 0);
    const std::vector<double> want = pc.run(ctx, cuda::AttentionKernel::flash, 0);
    const ScopedEnv on("UNMASK_FLASH_PERSISTENT", "1");
    const uint64_t launches = cuda::flash_fwd_persistent_launches();
    EXPECT_EQ(first_bit_difference(pc.run(ctx, cuda::AttentionKernel::flash, 0), want), -1);
    EXPECT_EQ(cuda::flash_fwd_persistent_launches(), launches + 1) << "UNMASK_FLASH_PERSISTENT=1 did not run it";
  }
  {  // a bad switch value is an Error, and so is the form forced where it has no instance
    PersistentCase pc(rng, layouts[2], DType::bf16, false, 0);
    {
      const ScopedEnv bad("UNMASK_FLASH_PERSISTENT", "on");
      EXPECT_THROW(pc.run(ctx, cuda::AttentionKernel::flash, 0), Error);
    }
    const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream());
    pc.p.o = pc.out.raw();
    // 32 rows a warp: the persistent form has 16 only
    EXPECT_THROW(cuda::attention_forward(pc.p, stream, cuda::AttentionKernel::flash_persistent, 128, 32), Error);
    PersistentCase hs96(rng, layouts[2], DType::bf16, false, 0, 96);  // no flash instance at all
    EXPECT_THROW(hs96.run(ctx, cuda::AttentionKernel::flash_persistent, 64), Error);
  }
  {  // head size 128: the flash kernel applies, its persistent form does not exist
    PersistentCase hs128(rng, layouts[2], DType::bf16, false, 0, 128);
    ASSERT_TRUE(cuda::attention_kernel_for(hs128.p) == cuda::AttentionKernel::flash);
    EXPECT_FALSE(cuda::flash_fwd_persistent_applies(hs128.p));
    EXPECT_THROW(hs128.run(ctx, cuda::AttentionKernel::flash_persistent, 64), Error);
    const ScopedEnv on("UNMASK_FLASH_PERSISTENT", "1");  // the opt-in leaves it on the one-tile kernel
    const uint64_t launches = cuda::flash_fwd_persistent_launches();
    hs128.run(ctx, cuda::AttentionKernel::flash, 0);
    EXPECT_EQ(cuda::flash_fwd_persistent_launches(), launches);
  }
}
