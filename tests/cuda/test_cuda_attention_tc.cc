// tests/cuda/test_cuda_attention_tc.cc: the tensor-core training attention (attention_train_tc.cu,
// flash/bwd_kernel.cuh; CudaState::attention_bf16) against float64 and against a naive
// implementation in the same precision, per the rule for low-precision kernels.
//
// For each case (padded with a key mask and a row whose keys are all masked, with 64- and 128-row
// forward blocks; packed with unequal lengths, with and without attention dropout; VideoMAE's
// encoder shape without a mask) on fresh random inputs:
//   exact  = float64 attention forward and backward of the f32 inputs (below, on the CPU);
//   naive  = the same float64 code with every matmul operand rounded to bf16 (q, k, v, dout, the
//            probabilities before P V and P^T dO, dS before dS K and dS^T Q);
//   kernel = the CUDA op with attention_bf16 on.
// Pass: max |kernel - exact| <= 2 max |naive - exact| + 1e-6 for out, lse, dq, dk, dv, and the
// f32 kernels (attention_bf16 off) stay within 1e-4 of exact (so `exact` is right).
// The index math of the kernels is also checked without a GPU: tests/cuda/check_flash_bwd.py.
// Both dQ schemes of the backward (FlashBwdDq: recompute, the default, and atomic) are run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/philox.h"
#include "cuda/allocator.h"
#include "cuda/cuda_state.h"
#include "cuda/flash/flash_api.h"
#include "cuda_test_common.h"
#include "ops/ops.h"
#include "test_harness.h"
#include "unmask/context.h"
#include "unmask/error.h"
#include "unmask/tensor.h"

using namespace unmask;

using cuda_test::base_seed;
using cuda_test::gpu;

namespace {

// Sets the shared context's tensor-core attention choices (CudaState::attention) for a scope and
// puts the previous ones back (also when an assertion throws).
class TuningScope {
 public:
  explicit TuningScope(const std::function<void(cuda::AttentionTuning&)>& set)
      : saved_(cuda::cuda_state(gpu()).attention) {
    set(cuda::cuda_state(gpu()).attention);
  }
  ~TuningScope() { cuda::cuda_state(gpu()).attention = saved_; }
  TuningScope(const TuningScope&) = delete;
  TuningScope& operator=(const TuningScope&) = delete;

 private:
  cuda::AttentionTuning saved_;
};

double bf16_round(double x) {
  const float f = float(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // inf / nan
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

struct Case {
  std::string name;
  int64_t NH = 2, HS = 64;
  std::vector<int64_t> lens;  // sequence lengths (packed) or B copies of T (padded)
  bool packed = false;
  std::vector<std::vector<uint8_t>> key_real;  // padded: per sequence, 1 = real key (empty: all)
  float dropout = 0.0f;                        // attention dropout (ops.h counters), seed 99
  uint64_t dropout_offset = 5;  // 5: a Philox block per element or pair; a multiple of 4 (with a
                                // longest sequence a multiple of 4): a block per lane and tile
};

struct Grads {
  std::vector<double> out, lse, dq, dk, dv;
};

// Float64 attention forward + backward over the sequences of a case; `round` rounds every
// matmul operand to bf16. Rows [N, NH*HS], head h at columns h*HS; lse [NH, N].
Grads reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                const std::vector<double>& dout, bool round) {
  const int64_t C = c.NH * c.HS;
  int64_t N = 0;
  for (int64_t L : c.lens) N += L;
  auto R = [&](double x) { return round ? bf16_round(x) : x; };
  Grads g;
  g.out.assign(size_t(N * C), 0), g.lse.assign(size_t(c.NH * N), 0);
  g.dq.assign(size_t(N * C), 0), g.dk.assign(size_t(N * C), 0), g.dv.assign(size_t(N * C), 0);
  const double scale = 1.0 / std::sqrt(double(c.HS));
  const int64_t T = *std::max_element(c.lens.begin(), c.lens.end());  // the counters' row length
  // Dropout factor of (head h, batch row n, key j): ops.h's mask, 1/(1-p) or 0.
  auto factor = [&](int64_t h, int64_t n, int64_t j) {
    if (c.dropout == 0.0f) return 1.0;
    const uint64_t counter = c.dropout_offset + uint64_t((h * N + n) * T + j);
    return philox_uniform(99, counter) >= c.dropout ? 1.0 / (1.0 - double(c.dropout)) : 0.0;
  };
  int64_t start = 0;
  for (size_t s = 0; s < c.lens.size(); ++s) {
    const int64_t L = c.lens[s];
    auto real = [&](int64_t j) { return c.key_real.empty() || c.key_real[s][size_t(j)] != 0; };
    for (int64_t h = 0; h < c.NH; ++h) {
      auto at = [&](const std::vector<double>& x, int64_t row, int64_t d) { return x[size_t((start + row) * C + h * c.HS + d)]; };
      std::vector<double> P(size_t(L * L), 0.0);
      for (int64_t i = 0; i < L; ++i) {
        double m = -INFINITY;
        std::vector<double> sc(size_t(L), -INFINITY);
        for (int64_t j = 0; j < L; ++j) {
          if (!real(j)) continue;
          double d = 0;
          for (int64_t e = 0; e < c.HS; ++e) d += R(at(q, i, e)) * R(at(k, j, e));
          sc[size_t(j)] = d * scale;
          m = std::max(m, sc[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = 0; j < L; ++j) l += real(j) ? std::exp(sc[size_t(j)] - m) : 0.0;
        g.lse[size_t(h * N + start + i)] = l > 0 ? m + std::log(l) : -INFINITY;
        for (int64_t j = 0; j < L; ++j) P[size_t(i * L + j)] = l > 0 && real(j) ? std::exp(sc[size_t(j)] - m) / l : 0.0;
        for (int64_t e = 0; e < c.HS; ++e) {
          double o = 0;
          for (int64_t j = 0; j < L; ++j) o += R(P[size_t(i * L + j)] * factor(h, start + i, j)) * R(at(v, j, e));
          g.out[size_t((start + i) * C + h * c.HS + e)] = o;
        }
      }
      for (int64_t i = 0; i < L; ++i) {
        double delta = 0;
        for (int64_t e = 0; e < c.HS; ++e) delta += at(dout, i, e) * g.out[size_t((start + i) * C + h * c.HS + e)];
        for (int64_t j = 0; j < L; ++j) {
          const double p = P[size_t(i * L + j)], f = factor(h, start + i, j);
          double dp = 0;
          for (int64_t e = 0; e < c.HS; ++e) dp += R(at(dout, i, e)) * R(at(v, j, e));
          const double ds = p * (dp * f - delta);
          for (int64_t e = 0; e < c.HS; ++e) {
            g.dv[size_t((start + j) * C + h * c.HS + e)] += R(p * f) * R(at(dout, i, e));
            g.dq[size_t((start + i) * C + h * c.HS + e)] += scale * R(ds) * R(at(k, j, e));
            g.dk[size_t((start + j) * C + h * c.HS + e)] += scale * R(ds) * R(at(q, i, e));
          }
        }
      }
    }
    start += L;
  }
  return g;
}

std::vector<double> host(const Tensor& t) {
  const Tensor h = t.to(Device::cpu);
  return std::vector<double>(h.data<float>(), h.data<float>() + h.numel());
}

double max_err(const std::vector<double>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) && got[i] == want[i]) continue;  // lse of a row without keys
    const double d = std::fabs(got[i] - want[i]);
    if (!(d <= e)) e = std::isnan(d) ? INFINITY : d;  // a NaN is the worst error (std::max would drop it)
  }
  return e;
}

/// cu_on_host: a packed case's cu_seqlens stay on the host (as the BERT trainer passes them:
/// CudaState::training_cu_seqlens uploads them), else they go to the device first.
Grads run_cuda(const Case& c, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
               const std::vector<double>& dout, bool tensor_cores, bool cu_on_host = false) {
  Context& ctx = gpu();
  cuda::CudaState& st = cuda::cuda_state(ctx);
  const bool saved = st.attention_bf16;
  st.attention_bf16 = tensor_cores;
  const int64_t C = c.NH * c.HS;
  const int64_t N = int64_t(q.size()) / C;
  auto up = [&](const std::vector<double>& x, int64_t cols) {
    Tensor h = Tensor::empty({int64_t(x.size()) / cols, cols}, DType::f32);
    for (size_t i = 0; i < x.size(); ++i) h.data<float>()[i] = float(x[i]);
    return h.to(Device::cuda);
  };
  // q, k, v as column slices of one [N, 3C] buffer, as the models pass them.
  std::vector<double> qkv(size_t(N * 3 * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t e = 0; e < C; ++e) {
      qkv[size_t(n * 3 * C + e)] = q[size_t(n * C + e)];
      qkv[size_t(n * 3 * C + C + e)] = k[size_t(n * C + e)];
      qkv[size_t(n * 3 * C + 2 * C + e)] = v[size_t(n * C + e)];
    }
  Tensor tqkv = up(qkv, 3 * C), tdout = up(dout, C);
  Tensor out = Tensor::empty({N, C}, DType::f32, Device::cuda), lse = Tensor::empty({c.NH, N}, DType::f32, Device::cuda);
  Tensor dqkv = Tensor::empty({N, 3 * C}, DType::f32, Device::cuda);
  ops::AttentionArgs a;
  a.num_heads = int(c.NH);
  a.scale = float(1.0 / std::sqrt(double(c.HS)));
  Tensor cu, mask;
  if (c.packed) {
    cu = Tensor::empty({int64_t(c.lens.size()) + 1}, DType::i32);
    cu.data<int32_t>()[0] = 0;
    for (size_t s = 0; s < c.lens.size(); ++s) cu.data<int32_t>()[s + 1] = cu.data<int32_t>()[s] + int32_t(c.lens[s]);
    if (!cu_on_host) cu = cu.to(Device::cuda);
    a.cu_seqlens = &cu;
  } else {
    a.padded_seq_len = c.lens[0];
    if (!c.key_real.empty()) {
      mask = Tensor::empty({int64_t(c.lens.size()), c.lens[0]}, DType::u8);
      for (size_t s = 0; s < c.lens.size(); ++s)
        std::memcpy(static_cast<uint8_t*>(mask.raw()) + s * size_t(c.lens[0]), c.key_real[s].data(), size_t(c.lens[0]));
      mask = mask.to(Device::cuda);
      a.key_padding_mask = &mask;
    }
  }
  const Tensor tq = tqkv.slice(1, 0, C), tk = tqkv.slice(1, C, 2 * C), tv = tqkv.slice(1, 2 * C, 3 * C);
  ops::AttentionTrainArgs train;
  train.dropout_p = c.dropout, train.dropout_seed = 99, train.dropout_offset = c.dropout_offset;
  ops::attention_forward_train(ctx, tq, tk, tv, out, lse, a, train);
  Tensor dq = dqkv.slice(1, 0, C), dk = dqkv.slice(1, C, 2 * C), dv = dqkv.slice(1, 2 * C, 3 * C);
  ops::attention_backward(ctx, tq, tk, tv, out, lse, tdout, dq, dk, dv, a, train);
  ctx.synchronize();
  st.attention_bf16 = saved;
  Grads g;
  g.out = host(out), g.lse = host(lse), g.dq = host(dq), g.dk = host(dk), g.dv = host(dv);
  return g;
}

/// Fresh random q, k, v, dout of a case (f32 values in [-1.5, 1.5]), [N, NH HS] each.
struct Inputs {
  std::vector<double> q, k, v, dout;
};
Inputs random_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  int64_t N = 0;
  for (int64_t L : c.lens) N += L;
  Inputs in;
  in.q.resize(size_t(N * c.NH * c.HS)), in.k.resize(in.q.size()), in.v.resize(in.q.size()), in.dout.resize(in.q.size());
  for (auto* x : {&in.q, &in.k, &in.v, &in.dout})
    for (double& e : *x) e = double(float(u(gen)));
  return in;
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

void check_case(const Case& c, uint64_t seed) {
  const Inputs in = random_inputs(c, seed);
  const std::vector<double>&q = in.q, &k = in.k, &v = in.v, &dout = in.dout;
  const Grads exact = reference(c, q, k, v, dout, false);
  const Grads naive = reference(c, q, k, v, dout, true);
  const Grads f32 = run_cuda(c, q, k, v, dout, false);
  const Grads tc = run_cuda(c, q, k, v, dout, true);
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  const std::vector<double>* e[] = {&exact.out, &exact.lse, &exact.dq, &exact.dk, &exact.dv};
  const std::vector<double>* n[] = {&naive.out, &naive.lse, &naive.dq, &naive.dk, &naive.dv};
  const std::vector<double>* f[] = {&f32.out, &f32.lse, &f32.dq, &f32.dk, &f32.dv};
  const std::vector<double>* t[] = {&tc.out, &tc.lse, &tc.dq, &tc.dk, &tc.dv};
  for (int i = 0; i < 5; ++i) {
    const double en = max_err(*n[i], *e[i]), et = max_err(*t[i], *e[i]), ef = max_err(*f[i], *e[i]);
    EXPECT_LE(ef, 1e-4) << c.name << " " << names[i] << ": the f32 kernels disagree with float64";
    EXPECT_LE(et, 2 * en + 1e-6) << c.name << " " << names[i] << ": tensor cores " << et << ", naive bf16 " << en
                                 << "; seed " << base_seed();
    // The ops fall back to the f32 kernels when the tensor-core path does not apply, and that
    // fallback would pass the bound above. bf16 operands put the output's error near 1e-3, the f32
    // kernels' near 1e-7: an error as small as the f32 one means the tensor cores did not run.
    if (i == 0)
      EXPECT_GT(et, 10 * ef) << c.name << ": the tensor-core output is as exact as the f32 kernels': did it run?";
    std::printf("[ %s %s ] max error: tensor cores %.3g, naive bf16 %.3g, f32 %.3g\n", c.name.c_str(), names[i], et, en,
                ef);
  }
}

/// A padded case of B sequences of T rows whose keys are all real except `holes` in sequence 0,
/// the keys from `pad_from` on in sequence 1 (right padding), and, with `empty_last`, every key
/// of the last sequence (no real key: a zero output, lse -inf).
Case padded_case(const char* name, int64_t B, int64_t T, std::initializer_list<int> holes, int pad_from,
                 bool empty_last) {
  Case c;
  c.name = name;
  c.lens.assign(size_t(B), T);
  c.key_real.assign(size_t(B), std::vector<uint8_t>(size_t(T), 1));
  for (int j : holes) c.key_real[0][size_t(j)] = 0;
  for (int64_t j = pad_from; j < T; ++j) c.key_real[1][size_t(j)] = 0;
  if (empty_last) std::fill(c.key_real.back().begin(), c.key_real.back().end(), 0);
  return c;
}

/// A packed case (cu_seqlens) of sequences of `lens` rows, with attention dropout p at `offset`.
Case packed_case(const char* name, std::initializer_list<int64_t> lens, float p = 0.0f, uint64_t offset = 5) {
  Case c;
  c.name = name;
  c.packed = true;
  c.lens = lens;
  c.dropout = p;
  c.dropout_offset = offset;
  return c;
}

TEST(CudaAttentionTc, PaddedWithKeyMaskMatchesNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  check_case(padded_case("padded", 3, 150, {3, 64, 65, 100, 149}, 120, true), base_seed() ^ 0x11);
}

// The forward's 128-row CTAs (chosen for large grids, e.g. VideoMAE at batch 256) write the
// output and the log-sum-exp too.
TEST(CudaAttentionTc, PaddedWith128RowBlocksMatchesNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  const TuningScope block_m([](cuda::AttentionTuning& t) { t.forward_block_m = 128; });
  check_case(padded_case("padded m128", 2, 200, {}, 150, false), base_seed() ^ 0x44);
}

TEST(CudaAttentionTc, PackedUnequalLengthsMatchesNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  check_case(packed_case("packed", {150, 37, 64, 1}), base_seed() ^ 0x22);
}

// BERT's attention dropout: the tensor-core kernels must drop the elements the f32 kernels and the
// float64 reference (ops.h's Philox counters) drop.
TEST(CudaAttentionTc, PackedWithDropoutMatchesNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  check_case(packed_case("packed dropout 0.1", {128, 77, 20}, 0.1f), base_seed() ^ 0x55);
}

// The layers' counters (a site offset, a multiple of 2^32, and a longest sequence of 128): the
// kernels share each Philox block between lanes (common.cuh dropout_factors_s_tile / _st_tile);
// the mask must stay the reference's, bit for bit.
TEST(CudaAttentionTc, DropoutAlignedCountersMatchNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  Case c = packed_case("packed dropout 0.1, aligned counters", {128, 76, 20, 4}, 0.1f, uint64_t(7) << 32);
  Case padded = padded_case("padded dropout 0.1, aligned counters", 2, 132, {}, 100, false);
  padded.dropout = 0.1f;
  padded.dropout_offset = ~uint64_t(0) - 1023;  // a multiple of 4 whose counters wrap past 2^64
  check_case(c, base_seed() ^ 0x56);
  check_case(padded, base_seed() ^ 0x58);
}

TEST(CudaAttentionTc, VideoMAEEncoderShapeMatchesNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  Case c;
  c.name = "vit";
  c.NH = 3;
  c.lens = {157, 157};
  check_case(c, base_seed() ^ 0x33);
}

}  // namespace

// The other tensor-core instances (flash_bwd.cu, the forward's set): 80, 88 (padded to 96 inside
// the kernels) and 128 (over 48 KB of shared memory: the launcher opts in), padded with masked
// keys and packed with unequal lengths.
TEST(CudaAttentionTc, HeadSizes80_88_128MatchNaiveBf16) {
  REQUIRE_CUDA_DEVICE();
  for (int64_t hs : {80, 88, 128}) {
    Case padded;
    padded.name = "padded hs " + std::to_string(hs);
    padded.HS = hs;
    padded.lens = {130, 130};
    padded.key_real.assign(2, std::vector<uint8_t>(130, 1));
    for (int j : {5, 64, 129}) padded.key_real[0][size_t(j)] = 0;
    for (int j = 100; j < 130; ++j) padded.key_real[1][size_t(j)] = 0;
    check_case(padded, base_seed() ^ uint64_t(0x600 + hs));
    Case packed;
    packed.name = "packed hs " + std::to_string(hs);
    packed.HS = hs;
    packed.packed = true;
    packed.lens = {97, 1, 64};
    packed.dropout = hs == 88 ? 0.1f : 0.0f;
    check_case(packed, base_seed() ^ uint64_t(0x700 + hs));
  }
}

// The atomic dQ (FlashBwdDq::atomic, the default): the dK/dV kernel also adds dQ = dS K from its
// dS^T tiles into an f32 accumulator with atomics. The same bound as the recompute kernels, on
// masks, a sequence with no real key, packed lengths, dropout and every head size; dK and dV equal
// the recompute variant's (the same code: only f32 noise allowed), dQ within rounding noise of it; and the variant really ran: it allocates its accumulator, one device_malloc more.
TEST(CudaAttentionTc, AtomicDqMatchesNaiveBf16AndTheRecomputeKernels) {
  REQUIRE_CUDA_DEVICE();
  const TuningScope pair_kernels([](cuda::AttentionTuning& t) { t.backward_short = false; });  // the dK/dV kernel pair
  std::vector<Case> cases;
  Case padded;
  padded.name = "atomic dq padded";
  padded.lens = {150, 150, 150};
  padded.key_real.assign(3, std::vector<uint8_t>(150, 1));
  for (int j : {3, 64, 65, 100, 149}) padded.key_real[0][size_t(j)] = 0;
  for (int j = 120; j < 150; ++j) padded.key_real[1][size_t(j)] = 0;
  std::fill(padded.key_real[2].begin(), padded.key_real[2].end(), 0);
  cases.push_back(padded);
  Case dropout;
  dropout.name = "atomic dq packed dropout 0.1";
  dropout.packed = true;
  dropout.lens = {128, 77, 20, 1};
  dropout.dropout = 0.1f;
  cases.push_back(dropout);
  for (int64_t hs : {80, 88, 128}) {
    Case c;
    c.name = "atomic dq packed hs " + std::to_string(hs);
    c.HS = hs;
    c.packed = true;
    c.lens = {97, 1, 64};
    cases.push_back(c);
  }
  uint64_t salt = 0x900;
  for (const Case& c : cases) {
    const TuningScope restore([](cuda::AttentionTuning& t) { t.deterministic = false; });  // atomic dQ
    check_case(c, base_seed() ^ ++salt);
    // Atomic against recompute on the same inputs
    const Inputs in = random_inputs(c, base_seed() ^ salt);
    const std::vector<double>&q = in.q, &k = in.k, &v = in.v, &dout = in.dout;
    const uint64_t allocs0 = cuda::allocator_stats().num_allocs;
    const Grads atomic = run_cuda(c, q, k, v, dout, true);
    const uint64_t allocs_atomic = cuda::allocator_stats().num_allocs - allocs0;
    cuda::cuda_state(gpu()).attention.deterministic = true;  // the recompute kernel
    const uint64_t allocs1 = cuda::allocator_stats().num_allocs;
    const Grads recompute = run_cuda(c, q, k, v, dout, true);
    const uint64_t allocs_recompute = cuda::allocator_stats().num_allocs - allocs1;
    EXPECT_EQ(allocs_atomic, allocs_recompute + 1) << c.name << ": the atomic variant did not run";
    EXPECT_LE(max_err(atomic.dk, recompute.dk), 1e-6 * (1 + max_abs(recompute.dk))) << c.name;
    EXPECT_LE(max_err(atomic.dv, recompute.dv), 1e-6 * (1 + max_abs(recompute.dv))) << c.name;
    // dQ: the f32 sum order of the atomics (~1e-7), and dS rounded to bf16 from fp32 values that
    // may differ in the last bit between the two kernels (FMA contraction): with dropout's 1/(1-p)
    // factor, 2.2e-5 of a 1.9 maximum was seen on an H200. A wrong or missing tile is O(1).
    EXPECT_LE(max_err(atomic.dq, recompute.dq), 1e-4 * (1 + max_abs(recompute.dq))) << c.name;
    EXPECT_EQ(max_err(atomic.out, recompute.out), 0.0) << c.name << ": the forward does not depend on the variant";
    std::printf("[ %s ] atomic vs recompute: dq %.3g, dk %.3g, dv %.3g\n", c.name.c_str(),
                max_err(atomic.dq, recompute.dq), max_err(atomic.dk, recompute.dk), max_err(atomic.dv, recompute.dv));
  }
}

// The default dQ scheme (AttentionTuning::deterministic false): atomic at every length. Up to 128 keys each
// dQ element gets at most two adds (one per 64-key CTA) and 0 + a + b = 0 + b + a exactly, so it
// is as reproducible as the recompute kernel; past that only within rounding. Per case: which
// scheme ran (the atomic one allocates its accumulator), two default runs equal bit for bit (up to
// 128 keys), and equal to the forced scheme's bits. BERT's shapes (128 keys, dropout, padding
// masks and packed lengths) and one of 129 keys.
TEST(CudaAttentionTc, DqDefaultsToAtomicUpToTwoKeyBlocksAndStaysReproducible) {
  REQUIRE_CUDA_DEVICE();
  const TuningScope pair_kernels([](cuda::AttentionTuning& t) { t.backward_short = false; });  // the dK/dV kernel pair
  struct Want {
    Case c;
    bool atomic;
  };
  std::vector<Want> cases;
  Case padded;
  padded.name = "default dq padded 128";
  padded.NH = 3;
  padded.lens = {128, 128, 128};
  padded.key_real.assign(3, std::vector<uint8_t>(128, 1));
  for (int j : {0, 63, 64, 127}) padded.key_real[0][size_t(j)] = 0;
  for (int j = 90; j < 128; ++j) padded.key_real[1][size_t(j)] = 0;
  padded.dropout = 0.1f;
  padded.dropout_offset = 8;  // four-aligned: BERT's shared Philox blocks
  cases.push_back({padded, true});
  Case packed;
  packed.name = "default dq packed <= 128";
  packed.packed = true;
  packed.lens = {128, 77, 20, 1, 65};
  packed.dropout = 0.1f;
  cases.push_back({packed, true});
  Case longer;
  longer.name = "default dq packed 129";  // three key blocks: atomic, reproducible within rounding only
  longer.packed = true;
  longer.lens = {129, 40};
  cases.push_back({longer, true});
  uint64_t salt = 0xb00;
  for (const Want& w : cases) {
    const Case& c = w.c;
    const Inputs in = random_inputs(c, base_seed() ^ ++salt);
    auto run = [&](const char* mode, uint64_t& allocs) {
      // nullptr: the default; "atomic" as the default explicitly; "recompute": deterministic
      const TuningScope scheme([&](cuda::AttentionTuning& t) { t.deterministic = mode && std::string(mode) == "recompute"; });
      const uint64_t before = cuda::allocator_stats().num_allocs;
      Grads g = run_cuda(c, in.q, in.k, in.v, in.dout, true);
      allocs = cuda::allocator_stats().num_allocs - before;
      return g;
    };
    uint64_t a_default = 0, a_again = 0, a_atomic = 0, a_recompute = 0;
    const Grads first = run(nullptr, a_default), again = run(nullptr, a_again);
    const Grads atomic = run("atomic", a_atomic), recompute = run("recompute", a_recompute);
    EXPECT_EQ(a_atomic, a_recompute + 1) << c.name << ": the forced atomic scheme did not allocate its accumulator";
    EXPECT_EQ(a_default, w.atomic ? a_atomic : a_recompute)
        << c.name << ": the default should be " << (w.atomic ? "atomic" : "recompute");
    EXPECT_EQ(a_again, a_default) << c.name;
    const Grads& forced = w.atomic ? atomic : recompute;
    const bool two_key_blocks = *std::max_element(c.lens.begin(), c.lens.end()) <= 128;
    for (auto [name, got, rerun, want] :
         {std::tuple{"dq", &first.dq, &again.dq, &forced.dq}, std::tuple{"dk", &first.dk, &again.dk, &forced.dk},
          std::tuple{"dv", &first.dv, &again.dv, &forced.dv}}) {
      if (two_key_blocks || std::string(name) != "dq") {
        EXPECT_TRUE(*got == *rerun) << c.name << ": " << name << " differs between two default runs";
        EXPECT_TRUE(*got == *want) << c.name << ": " << name << " differs from the forced scheme's";
      } else {
        EXPECT_LE(max_err(*got, *rerun), 1e-5 * (1 + max_abs(*rerun))) << c.name << ": " << name;
      }
    }
    // and the two schemes agree within rounding (AtomicDqMatchesNaiveBf16AndTheRecomputeKernels)
    EXPECT_LE(max_err(first.dq, recompute.dq), 1e-4 * (1 + max_abs(recompute.dq))) << c.name;
    std::printf("[ %s ] default dq scheme: %s; vs recompute: dq %.3g\n", c.name.c_str(),
                a_default == a_atomic ? "atomic" : "recompute", max_err(first.dq, recompute.dq));
  }
}

// The dK/dV kernel compiled for three CTAs per SM (backward_ctas_per_sm = 3, the default: K and V
// fragments re-read from shared memory, 168 registers; head size 64 without dropout), with both
// dQ schemes: the float64 bound, dK and dV equal to the two-CTA kernel's (the same arithmetic:
// only f32 noise allowed), dQ the recompute kernel's bit for bit (the same kernel) or within the
// atomics' rounding noise; the launch counters say which instances ran. A dropout case and head
// size 80 must fall back to the default instances, and pass.
TEST(CudaAttentionTc, ThreeCtaDkDvKernelMatchesNaiveBf16AndTheDefault) {
  REQUIRE_CUDA_DEVICE();
  const TuningScope pair_kernels([](cuda::AttentionTuning& t) { t.backward_short = false; });  // the dK/dV kernel pair
  std::vector<Case> cases;
  cases.push_back(padded_case("3 ctas padded", 3, 150, {3, 64, 65, 100, 149}, 120, true));
  cases.push_back(packed_case("3 ctas packed", {300, 77, 1, 64}));
  Case vit;
  vit.name = "3 ctas vit";
  vit.NH = 3;
  vit.lens = {157, 157};
  cases.push_back(vit);
  uint64_t salt = 0xa00;
  for (const char* dq_mode : {"recompute", "atomic"}) {
    const TuningScope dq([&](cuda::AttentionTuning& t) { t.deterministic = std::string(dq_mode) == "recompute"; });
    for (Case c : cases) {
      c.name += std::string(", ") + dq_mode + " dQ";
      const Inputs in = random_inputs(c, base_seed() ^ ++salt);
      Grads three, two;
      {
        const TuningScope ctas([](cuda::AttentionTuning& t) { t.backward_ctas_per_sm = 3; });
        const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
        check_case(c, base_seed() ^ salt);  // the float64 bound, with the same inputs
        three = run_cuda(c, in.q, in.k, in.v, in.dout, true);
        const cuda::FlashBwdLaunchStats after = cuda::flash_bwd_launch_stats();
        // sm_90 fits three CTAs' shared memory; an sm_80 device runs the default kernel instead
        const uint64_t want = cuda::flash_bwd_three_ctas_available(std::string(dq_mode) == "atomic") ? 2u : 0u;
        EXPECT_EQ(after.kv_in_smem - before.kv_in_smem, want) << c.name << ": the three-CTA kernel did not run";
        EXPECT_EQ(after.without_dropout - before.without_dropout, 2u)
            << c.name << ": the instances without the dropout code did not run";
      }
      {
        const TuningScope ctas([](cuda::AttentionTuning& t) { t.backward_ctas_per_sm = 2; });
        const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
        two = run_cuda(c, in.q, in.k, in.v, in.dout, true);
        EXPECT_EQ(cuda::flash_bwd_launch_stats().kv_in_smem, before.kv_in_smem) << c.name;
      }
      EXPECT_LE(max_err(three.dk, two.dk), 1e-6 * (1 + max_abs(two.dk))) << c.name;
      EXPECT_LE(max_err(three.dv, two.dv), 1e-6 * (1 + max_abs(two.dv))) << c.name;
      if (std::string(dq_mode) == "recompute")
        EXPECT_EQ(max_err(three.dq, two.dq), 0.0) << c.name << ": the dQ kernel does not depend on the variant";
      else  // the atomics' sum order, and dS rounded from fp32 values that may differ in the last bit
        EXPECT_LE(max_err(three.dq, two.dq), 1e-4 * (1 + max_abs(two.dq))) << c.name;
      std::printf("[ %s ] 3 vs 2 CTAs per SM: dq %.3g, dk %.3g, dv %.3g\n", c.name.c_str(), max_err(three.dq, two.dq),
                  max_err(three.dk, two.dk), max_err(three.dv, two.dv));
    }
  }
  // Where there is no three-CTA instance: dropout (the default instances with the dropout code)
  // and head size 80 (the default instances); both still pass the bound.
  const TuningScope ctas([](cuda::AttentionTuning& t) { t.backward_ctas_per_sm = 3; });
  Case dropout = packed_case("3 ctas requested, dropout 0.1", {128, 77, 20}, 0.1f);
  Case hs80 = packed_case("3 ctas requested, hs 80", {97, 1, 64});
  hs80.HS = 80;
  for (const Case& c : {dropout, hs80}) {
    const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
    check_case(c, base_seed() ^ ++salt);
    const cuda::FlashBwdLaunchStats after = cuda::flash_bwd_launch_stats();
    EXPECT_EQ(after.kv_in_smem, before.kv_in_smem) << c.name << ": ran an instance it has none of";
    EXPECT_EQ(after.without_dropout, before.without_dropout) << c.name;
  }
}

// The short-sequence backward (backward_short, the default): sequences of at most 128 keys (head size 64) in one kernel per
// (sequence, head), dQ summed inside the CTA (bwd_short_kernel.cuh). BERT's shapes (128 keys,
// dropout with shared Philox blocks, padding masks, a sequence with no real key, packed lengths
// of one and two query tiles): the float64 bound; dK and dV equal the default kernels' (the same
// per-key code: only f32 noise allowed); dQ within the rounding noise of the recompute kernel;
// the launch counter says it ran, and that 129 keys or head size 80 fall back to the default.
TEST(CudaAttentionTc, ShortSequenceKernelMatchesNaiveBf16AndTheDefault) {
  REQUIRE_CUDA_DEVICE();
  std::vector<Case> cases;
  Case padded = padded_case("short padded 128, dropout", 3, 128, {0, 63, 64, 127}, 90, true);
  padded.dropout = 0.1f;
  padded.dropout_offset = 8;  // four-aligned: the shared Philox blocks
  cases.push_back(padded);
  cases.push_back(packed_case("short packed", {128, 77, 20, 1, 65}, 0.1f));
  cases.push_back(packed_case("short packed, no dropout", {128, 64, 63, 100}));
  Case one_tile = padded_case("short padded 50", 2, 50, {7}, 30, false);
  cases.push_back(one_tile);
  uint64_t salt = 0xc00;
  for (const Case& c : cases) {
    const Inputs in = random_inputs(c, base_seed() ^ ++salt);
    Grads one, pair, recompute;
    {
      const TuningScope one_kernel([](cuda::AttentionTuning& t) { t.backward_short = true; });
      const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
      check_case(c, base_seed() ^ salt);  // the float64 bound, with the same inputs
      one = run_cuda(c, in.q, in.k, in.v, in.dout, true);
      EXPECT_EQ(cuda::flash_bwd_launch_stats().short_seq - before.short_seq, 2u)
          << c.name << ": the short-sequence kernel did not run";
    }
    {
      const TuningScope pair_kernels([](cuda::AttentionTuning& t) { t.backward_short = false; });
      const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
      pair = run_cuda(c, in.q, in.k, in.v, in.dout, true);
      const TuningScope dq([](cuda::AttentionTuning& t) { t.deterministic = true; });
      recompute = run_cuda(c, in.q, in.k, in.v, in.dout, true);
      EXPECT_EQ(cuda::flash_bwd_launch_stats().short_seq, before.short_seq) << c.name;
    }
    EXPECT_LE(max_err(one.dk, pair.dk), 1e-6 * (1 + max_abs(pair.dk))) << c.name;
    EXPECT_LE(max_err(one.dv, pair.dv), 1e-6 * (1 + max_abs(pair.dv))) << c.name;
    // dQ: one f32 sum over the 128 keys against two partial sums (atomic) or the recompute
    // kernel's own dS (fp32 values that may differ in the last bit before the bf16 rounding).
    EXPECT_LE(max_err(one.dq, recompute.dq), 1e-4 * (1 + max_abs(recompute.dq))) << c.name;
    EXPECT_LE(max_err(one.dq, pair.dq), 1e-4 * (1 + max_abs(pair.dq))) << c.name;
    EXPECT_EQ(max_err(one.out, pair.out), 0.0) << c.name << ": the forward does not depend on the variant";
    std::printf("[ %s ] one kernel vs the default pair: dq %.3g, dk %.3g, dv %.3g\n", c.name.c_str(),
                max_err(one.dq, pair.dq), max_err(one.dk, pair.dk), max_err(one.dv, pair.dv));
  }
  // Where it does not apply: 129 keys, head size 80. Both fall back (and pass the bound).
  const TuningScope one_kernel([](cuda::AttentionTuning& t) { t.backward_short = true; });
  Case longer = packed_case("short requested, 129 keys", {129, 40});
  Case hs80 = packed_case("short requested, hs 80", {97, 1, 64});
  hs80.HS = 80;
  for (const Case& c : {longer, hs80}) {
    const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
    check_case(c, base_seed() ^ ++salt);
    EXPECT_EQ(cuda::flash_bwd_launch_stats().short_seq, before.short_seq) << c.name << ": ran where it does not apply";
  }
}

// The short-sequence kernel with bf16 rows and bf16 gradients (BERT's bf16 activations: the
// kernel's own bf16 stores of dQ, dK and dV), through the op front-ends: a padded batch of 128
// with a key padding mask and dropout, q/k/v and the gradients column slices of fused [N, 3C]
// buffers. Against the default kernel pair on the same forward: dK and dV from the same fp32
// values, dQ from another fp32 sum order, each rounded once to bf16: at most a bf16 ulp apart
// (a wrong or missing tile is O(1)).
TEST(CudaAttentionTc, ShortSequenceKernelBf16GradientsMatchTheDefault) {
  REQUIRE_CUDA_DEVICE();
  const int64_t B = 3, T = 128, NH = 2, HS = 64, C = NH * HS, N = B * T;
  std::mt19937_64 gen(base_seed() ^ 0xc77);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  auto random_bf16 = [&](int64_t rows, int64_t cols) {
    Tensor h = Tensor::empty({rows, cols}, DType::f32);
    for (int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = u(gen);
    Tensor d = Tensor::empty({rows, cols}, DType::bf16, Device::cuda);
    ops::copy(gpu(), h.to(Device::cuda), d);  // rounded once to bf16 on the device
    return d;
  };
  const Tensor qkv = random_bf16(N, 3 * C), dout = random_bf16(N, C);
  const Tensor q = qkv.slice(1, 0, C), k = qkv.slice(1, C, 2 * C), v = qkv.slice(1, 2 * C, 3 * C);
  Tensor mask_h = Tensor::empty({B, T}, DType::u8);
  for (int64_t i = 0; i < B * T; ++i) static_cast<uint8_t*>(mask_h.raw())[i] = !(i / T == 1 && i % T >= 90) && i != 5;
  const Tensor mask = mask_h.to(Device::cuda);
  ops::AttentionArgs aa;
  aa.num_heads = int(NH);
  aa.scale = 0.125f;
  aa.padded_seq_len = T;
  aa.key_padding_mask = &mask;
  const ops::AttentionTrainArgs ta{0.1f, 1234, 8};
  Tensor out = Tensor::empty({N, C}, DType::bf16, Device::cuda), lse = Tensor::empty({NH, N}, DType::f32, Device::cuda);
  ops::attention_forward_train(gpu(), q, k, v, out, lse, aa, ta);
  auto backward = [&](const char* short_kernel) {
    const TuningScope scope([&](cuda::AttentionTuning& t) { t.backward_short = std::string(short_kernel) == "1"; });
    Tensor dqkv = Tensor::empty({N, 3 * C}, DType::bf16, Device::cuda);
    Tensor dq = dqkv.slice(1, 0, C), dk = dqkv.slice(1, C, 2 * C), dv = dqkv.slice(1, 2 * C, 3 * C);
    ops::attention_backward(gpu(), q, k, v, out, lse, dout, dq, dk, dv, aa, ta);
    return dqkv.to(Device::cpu).cast(DType::f32);
  };
  const cuda::FlashBwdLaunchStats before = cuda::flash_bwd_launch_stats();
  const Tensor one = backward("1");
  EXPECT_EQ(cuda::flash_bwd_launch_stats().short_seq - before.short_seq, 1u) << "the short-sequence kernel did not run";
  const Tensor pair = backward("0");
  const char* names[] = {"dq", "dk", "dv"};
  for (int part = 0; part < 3; ++part) {
    double diff = 0, scale = 0;
    int64_t nonfinite = 0;
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = part * C; c < (part + 1) * C; ++c) {
        const float a = one.data<float>()[r * 3 * C + c], b = pair.data<float>()[r * 3 * C + c];
        nonfinite += !std::isfinite(a);
        diff = std::max(diff, std::fabs(double(a) - double(b)));
        scale = std::max(scale, std::fabs(double(b)));
      }
    EXPECT_EQ(nonfinite, 0) << names[part];
    EXPECT_GT(scale, 0.01) << names[part] << ": the default's gradient is ~0, the comparison says nothing";
    EXPECT_LE(diff, std::ldexp(scale, -7)) << names[part] << ": more than a bf16 ulp of its largest value apart";
    std::printf("[ bf16 rows ] %s: max |short - default| %.3g of max %.3g\n", names[part], diff, scale);
  }
}

// A CTA count the dK/dV kernel has no instance for is an error that names the setting.
TEST(CudaAttentionTc, UnknownCtasPerSmIsAnError) {
  REQUIRE_CUDA_DEVICE();
  Case c = packed_case("bad ctas", {64});
  const Inputs in = random_inputs(c, 1);
  cuda::CudaState& st = cuda::cuda_state(gpu());
  const bool saved = st.attention_bf16;  // run_cuda restores it only when it returns
  const TuningScope ctas([](cuda::AttentionTuning& t) { t.backward_ctas_per_sm = 4; });
  bool threw = false;
  try {
    run_cuda(c, in.q, in.k, in.v, in.dout, true);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("ctas_per_sm"), std::string::npos) << e.what();
  }
  st.attention_bf16 = saved;
  gpu().synchronize();
  EXPECT_TRUE(threw) << "4 CTAs a SM was accepted";
}

// Host cu_seqlens (the trainer's): the context uploads them when they change, not at every call.
// The same lengths twice: one upload for four attention calls, the same results; other lengths
// (same N, so a stale copy would run without complaint): a new upload and exactly the results of
// device cu_seqlens; the first lengths again: uploaded again.
TEST(CudaAttentionTc, HostCuSeqlensUploadedWhenTheyChange) {
  REQUIRE_CUDA_DEVICE();
  const TuningScope pair_kernels([](cuda::AttentionTuning& t) { t.backward_short = false; });  // the dK/dV kernel pair
  const Case a = packed_case("host cu a", {100, 28, 64}, 0.1f, 8);
  const Case b = packed_case("host cu b", {64, 64, 64}, 0.1f, 8);
  const Inputs in = random_inputs(a, base_seed() ^ 0xb00);  // N = 192 rows for both
  const TuningScope deterministic([](cuda::AttentionTuning& t) { t.deterministic = true; });  // bitwise comparisons below
  cuda::CudaState& st = cuda::cuda_state(gpu());
  auto run = [&](const Case& c, bool host) { return run_cuda(c, in.q, in.k, in.v, in.dout, true, host); };
  auto same = [](const Grads& x, const Grads& y) {
    return max_err(x.out, y.out) == 0 && max_err(x.lse, y.lse) == 0 && max_err(x.dq, y.dq) == 0 &&
           max_err(x.dk, y.dk) == 0 && max_err(x.dv, y.dv) == 0;
  };
  const Grads a_device = run(a, false), b_device = run(b, false);
  st.training_cu_seqlens({0, 192});  // whatever an earlier test (or repeat) left cached, not a's
  const uint64_t u0 = st.cu_seqlens_uploads;
  const Grads a1 = run(a, true);
  const Grads a2 = run(a, true);
  EXPECT_EQ(st.cu_seqlens_uploads - u0, 1u) << "the same lengths in four calls";
  EXPECT_TRUE(same(a1, a_device)) << "host cu_seqlens give other results than device ones";
  EXPECT_TRUE(same(a2, a_device));
  const Grads b1 = run(b, true);
  EXPECT_EQ(st.cu_seqlens_uploads - u0, 2u) << "new lengths were not uploaded";
  EXPECT_TRUE(same(b1, b_device)) << "the second lengths ran with the first ones' device copy";
  EXPECT_FALSE(same(b1, a1)) << "the two cases should differ (the test would prove nothing)";
  const Grads a3 = run(a, true);
  EXPECT_EQ(st.cu_seqlens_uploads - u0, 3u);
  EXPECT_TRUE(same(a3, a_device));
}

// The deterministic option of the Context (ContextOptions::kernels.deterministic) sets the
// recompute dQ scheme of its attention (what the tests above force on the shared context and
// check, kernel by kernel); the default context keeps the atomic one.
TEST(CudaAttentionTc, TheDeterministicOptionSetsTheRecomputeScheme) {
  REQUIRE_CUDA_DEVICE();
  Context det({.device = Device::cuda, .kernels = {.deterministic = true}});
  EXPECT_TRUE(cuda::cuda_state(det).attention.deterministic);
  EXPECT_FALSE(cuda::cuda_state(gpu()).attention.deterministic) << "the default is the atomic dQ";
}
