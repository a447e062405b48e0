// tests/test_attention.cc: fused attention (ops::attention, cpu::attention_forward) against
// the float64 reference (ref::attention_forward), the reference backward against central
// finite differences, packed == padded, strided views, every ISA, long sequences with
// bounded scratch, and the front-end's error messages.
//
// Random inputs come from a 64-bit seed printed by every test (SCOPED_TRACE) and overridden
// by UNMASK_TEST_SEED.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cpu/attention_cpu.h"
#include "ops/ops.h"
#include "ref/attention_ref.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

using namespace unmask;

namespace {

uint64_t test_seed() {
  const char* env = std::getenv("UNMASK_TEST_SEED");
  return env && *env ? std::strtoull(env, nullptr, 0) : 0x5eed2026ULL;
}

std::string seed_note(uint64_t seed) {
  return "seed " + std::to_string(seed) + " (set UNMASK_TEST_SEED to reproduce)";
}

/// Fills a 2-D f32 view (any strides) with uniform [-amp, amp).
void fill_uniform(Tensor& t, std::mt19937_64& rng, float amp = 1.0f) {
  std::uniform_real_distribution<float> dist(-amp, amp);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) p[i * t.stride(0) + j * t.stride(1)] = dist(rng);
}

/// A contiguous float64 copy of a 2-D f32 view.
std::vector<double> to_double(const Tensor& t) {
  std::vector<double> out(size_t(t.numel()));
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j)
      out[size_t(i * t.size(1) + j)] = p[i * t.stride(0) + j * t.stride(1)];
  return out;
}

/// q, k, v as column slices of one fused [N, 3C] buffer (row stride 3C), as BERT makes them.
struct Qkv {
  Tensor fused, q, k, v;
  Qkv(int64_t N, int64_t C, std::mt19937_64& rng, float q_amp = 1.0f) {
    fused = Tensor::empty({N, 3 * C}, DType::f32);
    q = fused.slice(1, 0, C);
    k = fused.slice(1, C, 2 * C);
    v = fused.slice(1, 2 * C, 3 * C);
    fill_uniform(q, rng, q_amp);
    fill_uniform(k, rng);
    fill_uniform(v, rng);
  }
};

struct Compare {
  double max_err = 0, max_ratio = 0, nmse = 0;  // ratio = err / (atol + rtol |ref|)
};

/// |x - ref| <= atol + rtol |ref| over rows `rows` (all if empty) of out [N, C] (any row
/// stride) against ref [N, C] contiguous.
Compare compare(const Tensor& out, const std::vector<double>& ref, double atol, double rtol,
                const std::vector<int64_t>& rows = {}) {
  Compare c;
  const int64_t C = out.size(1);
  double se = 0, sr = 0;
  std::vector<int64_t> rs = rows;
  if (rs.empty())
    for (int64_t i = 0; i < out.size(0); ++i) rs.push_back(i);
  const float* p = out.data<float>();
  for (int64_t i : rs)
    for (int64_t j = 0; j < C; ++j) {
      const double x = p[i * out.stride(0) + j], r = ref[size_t(i * C + j)];
      const double e = std::fabs(x - r);
      c.max_err = std::max(c.max_err, e);
      c.max_ratio = std::max(c.max_ratio, e / (atol + rtol * std::fabs(r)));
      if (std::isnan(x)) c.max_ratio = INFINITY;
      se += e * e;
      sr += r * r;
    }
  c.nmse = sr > 0 ? se / sr : se;
  return c;
}

/// fp32 tolerance for a reduction over HS products and a softmax over T keys.
double fp32_tol(int64_t HS, int64_t T) { return 1e-5 * std::sqrt(double(std::max(HS, T)) / 16.0 + 1.0); }

std::vector<cpu::AttentionIsa> supported_isas() {
  std::vector<cpu::AttentionIsa> out;
  for (auto isa : {cpu::AttentionIsa::generic, cpu::AttentionIsa::avx2, cpu::AttentionIsa::avx512})
    if (cpu::attention_isa_supported(isa)) out.push_back(isa);
  return out;
}

/// Raw kernel parameters for 2-D views (the front-end's job, done here to force an ISA).
cpu::AttentionParams params(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                            int64_t NH, float scale) {
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
  p.head_size = q.size(1) / NH;
  p.scale = scale;
  return p;
}

/// A random key mask [B, T] with the first key ([CLS]) always real.
std::vector<uint8_t> random_mask(int64_t B, int64_t T, std::mt19937_64& rng) {
  std::vector<uint8_t> m(size_t(B * T));
  std::bernoulli_distribution real(0.7);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) m[size_t(b * T + t)] = t == 0 || real(rng);
  return m;
}

}  // namespace

// ---- the reference ---------------------------------------------------------------------

TEST(AttentionRef, BackwardMatchesCentralDifferences) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  const int64_t NH = 2, HS = 3, C = NH * HS;
  const double scale = 0.7;
  // Packed lengths {3, 1, 4} and padded T = 4 with a mask (one key excluded per sequence).
  const int32_t cu[] = {0, 3, 4, 8};
  const uint8_t mask[] = {1, 0, 1, 1, 1, 1, 0, 1};
  ref::AttentionLayout packed{.num_heads = NH, .head_size = HS, .batch = 3, .cu_seqlens = cu};
  ref::AttentionLayout padded{.num_heads = NH, .head_size = HS, .batch = 2, .seq_len = 4,
                              .key_mask = mask};
  for (const ref::AttentionLayout& lay : {packed, padded}) {
    const int64_t N = 8, n = N * C;
    std::vector<double> q(n), k(n), v(n), g(n), out(n), dq(n), dk(n), dv(n);
    for (auto* x : {&q, &k, &v, &g})
      for (double& e : *x) e = dist(rng);
    ref::attention_backward(q.data(), k.data(), v.data(), g.data(), dq.data(), dk.data(), dv.data(),
                            lay, scale);
    auto loss = [&] {
      ref::attention_forward(q.data(), k.data(), v.data(), out.data(), lay, scale);
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += out[i] * g[i];
      return s;
    };
    const double eps = 1e-6;
    for (auto [x, dx, name] : {std::tuple{&q, &dq, "dq"}, {&k, &dk, "dk"}, {&v, &dv, "dv"}}) {
      for (int64_t i = 0; i < n; ++i) {
        const double keep = (*x)[i];
        (*x)[i] = keep + eps;
        const double lp = loss();
        (*x)[i] = keep - eps;
        const double lm = loss();
        (*x)[i] = keep;
        const double fd = (lp - lm) / (2 * eps);
        EXPECT_NEAR((*dx)[i], fd, 1e-8 + 1e-6 * std::fabs(fd))
            << name << "[" << i << "] " << (lay.cu_seqlens ? "packed" : "padded");
      }
    }
  }
}

TEST(AttentionRef, SingleKeyCopiesValueAndNoKeyGivesZeros) {
  // One real key: softmax is 1 there, so out = v of that key; no real key: zeros.
  const int64_t NH = 1, HS = 2, C = 2;
  const double q[] = {1, 2, 3, 4, 5, 6, 7, 8}, k[] = {1, 1, 2, 2, 3, 3, 4, 4};
  const double v[] = {10, 11, 20, 21, 30, 31, 40, 41};
  const uint8_t mask[] = {0, 1, 0, 0};  // B = 2, T = 2
  double out[8];
  ref::AttentionLayout lay{.num_heads = NH, .head_size = HS, .batch = 2, .seq_len = 2, .key_mask = mask};
  ref::attention_forward(q, k, v, out, lay, 1.0);
  const double want[] = {20, 21, 20, 21, 0, 0, 0, 0};
  for (int i = 0; i < 4 * C; ++i) EXPECT_EQ(out[i], want[i]) << i;
}

// ---- every ISA against the reference ---------------------------------------------------

TEST(AttentionCpu, EveryIsaMatchesReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Context ctx({.num_threads = 2});
  const int64_t NH = 2, B = 2;
  for (int64_t HS : {32, 64, 80, 128, 59})
    for (int64_t T : {1, 7, 128, 200}) {
      const int64_t N = B * T, C = NH * HS;
      Qkv x(N, C, rng, HS == 59 ? 6.0f : 2.0f);  // larger q: peakier softmax
      std::vector<uint8_t> mask = random_mask(B, T, rng);
      const float scale = float(1.0 / std::sqrt(double(HS)));
      std::vector<double> want(size_t(N * C));
      ref::AttentionLayout lay{.num_heads = NH, .head_size = HS, .batch = B, .seq_len = T,
                               .key_mask = mask.data()};
      ref::attention_forward(to_double(x.q).data(), to_double(x.k).data(), to_double(x.v).data(),
                             want.data(), lay, scale);
      for (auto isa : supported_isas()) {
        SCOPED_TRACE(std::string("isa ") + cpu::attention_isa_name(isa) + " HS " +
                     std::to_string(HS) + " T " + std::to_string(T));
        Tensor out = Tensor::empty({N, C}, DType::f32);
        cpu::AttentionParams p = params(x.q, x.k, x.v, out, NH, scale);
        p.batch = B;
        p.seq_len = T;
        p.key_mask = mask.data();
        cpu::AttentionStats st = cpu::attention_forward(ctx, p, isa);
        EXPECT_EQ(st.isa, isa);
        const double tol = fp32_tol(HS, T);
        Compare c = compare(out, want, tol, tol);
        EXPECT_LE(c.max_ratio, 1.0) << "max abs err " << c.max_err << " tol " << tol;
        EXPECT_LE(c.nmse, 1e-10);
      }
    }
}

// ---- invariances through the front-end -------------------------------------------------

TEST(Attention, PackedEqualsPaddedWithMask) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Context ctx({.num_threads = 2});
  const int64_t NH = 3, HS = 64, C = NH * HS, T = 130;
  const std::vector<int32_t> lens = {5, 130, 1, 77, 64, 65};
  const int64_t B = int64_t(lens.size());
  std::vector<int32_t> cu = {0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  const int64_t Np = cu.back();
  Qkv packed(Np, C, rng, 3.0f);
  Qkv padded(B * T, C, rng);  // padding rows keep their random values: they must not matter
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < lens[b]; ++t)
      std::memcpy(padded.fused.data<float>() + (b * T + t) * 3 * C,
                  packed.fused.data<float>() + (cu[b] + t) * 3 * C, sizeof(float) * 3 * C);
  const float scale = 0.125f;

  Tensor cu_t = Tensor::from_blob(cu.data(), {B + 1}, DType::i32);
  Tensor out_packed = Tensor::empty({Np, C}, DType::f32);
  ops::attention(ctx, packed.q, packed.k, packed.v, out_packed,
                 {.num_heads = int(NH), .scale = scale, .cu_seqlens = &cu_t});

  // The packed result against the reference.
  std::vector<double> want(size_t(Np * C));
  ref::AttentionLayout lay{.num_heads = NH, .head_size = HS, .batch = B, .cu_seqlens = cu.data()};
  ref::attention_forward(to_double(packed.q).data(), to_double(packed.k).data(),
                         to_double(packed.v).data(), want.data(), lay, scale);
  const double tol = fp32_tol(HS, T);
  EXPECT_LE(compare(out_packed, want, tol, tol).max_ratio, 1.0);

  // Padded with each accepted mask dtype: the real rows equal the packed rows bit for bit
  // (the same keys in the same blocks, and queries never interact).
  for (DType dt : {DType::u8, DType::boolean, DType::i32, DType::i64}) {
    SCOPED_TRACE(std::string("mask dtype ") + std::string(dtype_name(dt)));
    Tensor mask = Tensor::zeros({B, T}, dt);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lens[b]; ++t) {
        char* p = static_cast<char*>(mask.raw()) + (b * T + t) * dtype_size(dt);
        if (dt == DType::i32) *reinterpret_cast<int32_t*>(p) = 7;
        else if (dt == DType::i64) *reinterpret_cast<int64_t*>(p) = -1;
        else *reinterpret_cast<uint8_t*>(p) = 1;
      }
    Tensor out_padded = Tensor::empty({B * T, C}, DType::f32);
    ops::attention(ctx, padded.q, padded.k, padded.v, out_padded,
                   {.num_heads = int(NH), .scale = scale, .padded_seq_len = T, .key_padding_mask = &mask});
    int64_t mismatches = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < lens[b]; ++t)
        mismatches += std::memcmp(out_padded.data<float>() + (b * T + t) * C,
                                  out_packed.data<float>() + (cu[b] + t) * C, sizeof(float) * C) != 0;
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(Attention, StridedViewsEqualContiguousCopies) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Context ctx({.num_threads = 2});
  const int64_t NH = 4, HS = 80, C = NH * HS, T = 100, B = 2;
  Qkv x(B * T, C, rng);
  Tensor wide = Tensor::zeros({B * T, C + 24}, DType::f32);
  Tensor out_strided = wide.slice(1, 8, 8 + C);  // row stride C + 24
  Tensor out_contig = Tensor::empty({B * T, C}, DType::f32);
  const ops::AttentionArgs args{.num_heads = int(NH), .scale = 0.11f, .padded_seq_len = T};
  ops::attention(ctx, x.q, x.k, x.v, out_strided, args);
  ops::attention(ctx, x.q.contiguous(), x.k.contiguous(), x.v.contiguous(), out_contig, args);
  Tensor packed_back = out_strided.contiguous();
  EXPECT_EQ(std::memcmp(packed_back.data<float>(), out_contig.data<float>(), out_contig.nbytes()), 0);
  // The columns around the view are untouched.
  for (int64_t i = 0; i < B * T; ++i) {
    const float* row = wide.data<float>() + i * (C + 24);
    for (int64_t j : {0, 7, int(C + 8), int(C + 23)}) ASSERT_EQ(row[j], 0.0f) << i << "," << j;
  }
}

TEST(Attention, SequenceWithNoRealKeyGivesZeros) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Context ctx({.num_threads = 2});
  const int64_t NH = 2, HS = 32, C = NH * HS, T = 9, B = 2;
  Qkv x(B * T, C, rng);
  std::vector<uint8_t> m(size_t(B * T), 1);
  for (int64_t t = 0; t < T; ++t) m[size_t(T + t)] = 0;  // sequence 1 fully masked
  Tensor mask = Tensor::from_blob(m.data(), {B, T}, DType::u8);
  for (auto isa : supported_isas()) {
    SCOPED_TRACE(cpu::attention_isa_name(isa));
    Tensor out = Tensor::empty({B * T, C}, DType::f32);
    cpu::AttentionParams p = params(x.q, x.k, x.v, out, NH, 0.2f);
    p.batch = B;
    p.seq_len = T;
    p.key_mask = m.data();
    cpu::attention_forward(ctx, p, isa);
    for (int64_t i = T; i < 2 * T; ++i)
      for (int64_t j = 0; j < C; ++j) ASSERT_EQ(out.data<float>()[i * C + j], 0.0f);
    std::vector<double> want(size_t(B * T * C));
    ref::AttentionLayout lay{.num_heads = NH, .head_size = HS, .batch = B, .seq_len = T, .key_mask = m.data()};
    ref::attention_forward(to_double(x.q).data(), to_double(x.k).data(), to_double(x.v).data(),
                           want.data(), lay, 0.2);
    EXPECT_LE(compare(out, want, 1e-5, 1e-5).max_ratio, 1.0);
  }
}

// ---- long sequences: bounded scratch ---------------------------------------------------

TEST(Attention, LongSequenceRunsInBoundedScratch) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(seed_note(seed));
  std::mt19937_64 rng(seed);
  Context ctx({.num_threads = 2});
  const int64_t NH = 2, HS = 64, C = NH * HS, T = 4096;
  Qkv x(T, C, rng, 2.0f);
  Tensor out = Tensor::empty({T, C}, DType::f32);
  const float scale = 0.125f;
  cpu::AttentionParams p = params(x.q, x.k, x.v, out, NH, scale);
  p.batch = 1;
  p.seq_len = T;
  const cpu::AttentionStats st = cpu::attention_forward(ctx, p);
  // Scratch depends on HS and the ISA only, and is far below one T x T score matrix (64 MiB).
  EXPECT_EQ(st.scratch_bytes_per_thread, cpu::attention_scratch_bytes(HS, st.isa));
  EXPECT_LE(st.scratch_bytes_per_thread, size_t(256) << 10);
  cpu::AttentionParams small = p;
  small.seq_len = 128;
  Tensor out_small = Tensor::empty({128, C}, DType::f32);
  small.out = out_small.data<float>();
  small.ldo = C;
  EXPECT_EQ(cpu::attention_forward(ctx, small).scratch_bytes_per_thread, st.scratch_bytes_per_thread);

  // Spot-check rows (first, block edges, last) against a float64 softmax over all keys.
  std::vector<double> qd = to_double(x.q), kd = to_double(x.k), vd = to_double(x.v);
  const double tol = fp32_tol(HS, T);
  for (int64_t i : {int64_t(0), int64_t(63), int64_t(64), int64_t(2049), T - 1})
    for (int64_t h = 0; h < NH; ++h) {
      std::vector<double> s(static_cast<size_t>(T));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < HS; ++d) dot += qd[i * C + h * HS + d] * kd[j * C + h * HS + d];
        s[j] = scale * dot;
        mx = std::max(mx, s[j]);
      }
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t d = 0; d < HS; ++d) {
        double o = 0;
        for (int64_t j = 0; j < T; ++j) o += s[j] * vd[j * C + h * HS + d];
        o /= sum;
        ASSERT_NEAR(out.data<float>()[i * C + h * HS + d], o, tol * (1 + std::fabs(o)))
            << "row " << i << " head " << h << " dim " << d;
      }
    }
}

// ---- ISA selection -----------------------------------------------------------------------

TEST(AttentionCpu, DefaultIsaIsSupportedAndNamed) {
  const cpu::AttentionIsa isa = cpu::attention_isa_default();
  EXPECT_TRUE(cpu::attention_isa_supported(isa));
  EXPECT_TRUE(cpu::attention_isa_supported(cpu::AttentionIsa::generic));
  const std::string name = cpu::attention_isa_name(isa);
  EXPECT_TRUE(name == "generic" || name == "avx2" || name == "avx512") << name;
  const char* env = std::getenv("UNMASK_CPU_ISA");
  if (env && std::string(env) == "generic") {
    EXPECT_EQ(isa, cpu::AttentionIsa::generic);
  }
  std::cout << "[attention] default ISA " << name << "\n";
}

// ---- front-end errors --------------------------------------------------------------------

namespace {
/// Runs fn, expects an Error whose message contains every string in `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
  }
}
}  // namespace

TEST(Attention, ErrorsNameActualAndExpected) {
  Context ctx({.num_threads = 1});
  const int64_t N = 6, C = 12;
  Tensor q = Tensor::zeros({N, C}, DType::f32), k = Tensor::zeros({N, C}, DType::f32);
  Tensor v = Tensor::zeros({N, C}, DType::f32), out = Tensor::zeros({N, C}, DType::f32);
  const ops::AttentionArgs ok{.num_heads = 3, .scale = 0.5f, .padded_seq_len = 3};
  ops::attention(ctx, q, k, v, out, ok);  // valid: no throw

  Tensor qi = Tensor::zeros({N, C}, DType::i32), ki = Tensor::zeros({N, C}, DType::i32);
  Tensor vi = Tensor::zeros({N, C}, DType::i32), oi = Tensor::zeros({N, C}, DType::i32);
  expect_error([&] { ops::attention(ctx, qi, ki, vi, oi, ok); }, {"q must be f32 on cpu", "i32[6,12]"});
  expect_error([&] { ops::attention(ctx, q, k, vi, out, ok); }, {"v is i32[6,12]", "q is f32[6,12]"});
  Tensor k3 = Tensor::zeros({N, 1, C}, DType::f32);
  expect_error([&] { ops::attention(ctx, q, k3, v, out, ok); }, {"k must be 2-D", "[6,1,12]"});
  Tensor vshort = Tensor::zeros({N - 1, C}, DType::f32);
  expect_error([&] { ops::attention(ctx, q, k, vshort, out, ok); }, {"v shape [5,12]", "q's shape [6,12]"});
  Tensor wide = Tensor::zeros({N, 2 * C}, DType::f32);
  Tensor every_other = wide.view({N, C, 2}).select(2, 0);  // innermost stride 2
  expect_error([&] { ops::attention(ctx, every_other, k, v, out, ok); }, {"innermost stride 1", "stride 2"});
  expect_error([&] { ops::attention(ctx, q, k, v, q, ok); }, {"overlaps q", "in place"});

  auto with = [&](auto change) {
    ops::AttentionArgs a = ok;
    change(a);
    return a;
  };
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.num_heads = 5; })); },
               {"C = 12", "num_heads = 5"});
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.num_heads = 0; })); },
               {"num_heads must be >= 1, got 0"});
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.scale = 0.0f; })); },
               {"scale must be finite and > 0, got 0"});
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.scale = -1.0f; })); },
               {"got -1"});
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.padded_seq_len = 4; })); },
               {"N = 6", "padded_seq_len T = 4"});
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([](auto& a) { a.padded_seq_len = 0; })); },
               {"exactly one of", "neither"});

  // key_padding_mask: shape and dtype.
  Tensor m_bad = Tensor::zeros({2, 4}, DType::u8);
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([&](auto& a) { a.key_padding_mask = &m_bad; })); },
               {"[B, T] = [2,3]", "u8[2,4]"});
  Tensor m_f32 = Tensor::zeros({2, 3}, DType::f32);
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([&](auto& a) { a.key_padding_mask = &m_f32; })); },
               {"u8, bool, i32 or i64", "f32[2,3]"});

  // cu_seqlens: dtype, start, monotonicity, total.
  auto packed = [&](std::vector<int32_t> cu, DType dt = DType::i32) {
    Tensor t = dt == DType::i32 ? Tensor::from_blob(cu.data(), {int64_t(cu.size())}, dt)
                                : Tensor::zeros({int64_t(cu.size())}, dt);
    ops::attention(ctx, q, k, v, out, {.num_heads = 3, .scale = 0.5f, .cu_seqlens = &t});
  };
  packed({0, 2, 6});  // valid
  expect_error([&] { packed({0, 2, 6}, DType::i64); }, {"cu_seqlens must be i32 [B+1]", "i64[3]"});
  expect_error([&] { packed({1, 2, 6}); }, {"cu_seqlens[0] must be 0, got 1"});
  expect_error([&] { packed({0, 4, 3, 6}); }, {"cu_seqlens[1] = 4 > cu_seqlens[2] = 3"});
  expect_error([&] { packed({0, 2, 5}); }, {"cu_seqlens[B = 2] = 5", "N = 6"});
  Tensor cu_ok = Tensor::zeros({2}, DType::i32);
  expect_error([&] { ops::attention(ctx, q, k, v, out, with([&](auto& a) { a.cu_seqlens = &cu_ok; })); },
               {"exactly one of", "both"});

  // A device without a backend in this build.
#ifndef UNMASK_WITH_CUDA
  Tensor qc = Tensor::from_blob(q.raw(), {N, C}, DType::f32, Device::cuda);
  Tensor kc = Tensor::from_blob(k.raw(), {N, C}, DType::f32, Device::cuda);
  Tensor vc = Tensor::from_blob(v.raw(), {N, C}, DType::f32, Device::cuda);
  Tensor oc = Tensor::from_blob(out.raw(), {N, C}, DType::f32, Device::cuda);
  EXPECT_THROW(ops::attention(ctx, qc, kc, vc, oc, ok), Unsupported);
  expect_error([&] { ops::attention(ctx, qc, kc, vc, oc, ok); }, {"attention: device cuda"});
  expect_error([&] { ops::attention(ctx, qc, k, vc, oc, ok); }, {"k is on cpu but q is on cuda"});
#endif
}
