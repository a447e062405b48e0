// tests/test_train_attention.cc: attention for training (ops::attention_forward_train with lse
// and probability dropout, ops::attention_backward) under every CPU ISA against the float64
// reference (ref::attention_forward / attention_backward with AttentionDropout), the reference's
// dropout backward against central finite differences, the exact dropout pattern, queries
// without keys, determinism across thread counts and the front-end's errors.
// (Split from tests/test_train_ops.cc to keep files under the line budget.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ref/attention_ref.h"
#include "ref/train_ref.h"
#include "unmask/context.h"
#include "error_test_util.h"

using namespace unmask;
using namespace unmask::test;

namespace {

struct IsaScope {
  explicit IsaScope(std::string_view isa) { cpu::kernels_override_for_testing(isa); }
  ~IsaScope() { cpu::kernels_override_for_testing(""); }
};

struct BackendScope {
  explicit BackendScope(cpu::GemmBackend b) { cpu::gemm_backend_override_for_testing(b); }
  ~BackendScope() { cpu::gemm_backend_override_for_testing(cpu::GemmBackend::openblas, true); }
};

using unmask::test::error_of;

/// One test configuration: the sequences (packed lengths, or padded T with a key mask).
struct Case {
  std::string name;
  int64_t NH, HS;
  std::vector<int32_t> lens;  // packed when non-empty
  int64_t B = 0, T = 0;       // padded
  bool masked = false;
  float p = 0.0f;
};

/// q, k, v (and dq, dk, dv) as column slices of fused [N, 3C] buffers, as BERT makes them.
struct Fused {
  Tensor buf, q, k, v;
  Fused(int64_t N, int64_t C) {
    buf = Tensor::zeros({N, 3 * C}, DType::f32);
    q = buf.slice(1, 0, C);
    k = buf.slice(1, C, 2 * C);
    v = buf.slice(1, 2 * C, 3 * C);
  }
};

/// Everything one case needs: layout for the ops and the reference, inputs, the forward run.
struct AttnSetup {
  int64_t N = 0, C = 0;
  std::vector<int32_t> cu;
  Tensor cu_t, mask_t;
  std::vector<uint8_t> mask;
  ops::AttentionArgs args;
  ops::AttentionTrainArgs train;
  ref::AttentionLayout lay;
  ref::AttentionDropout drop;

  AttnSetup(const Case& c, double scale) {
    C = c.NH * c.HS;
    args.num_heads = int(c.NH);
    args.scale = float(scale);
    lay.num_heads = c.NH;
    lay.head_size = c.HS;
    if (!c.lens.empty()) {
      cu.push_back(0);
      for (int32_t l : c.lens) cu.push_back(cu.back() + l);
      N = cu.back();
      cu_t = Tensor::from_blob(cu.data(), {int64_t(cu.size())}, DType::i32);
      args.cu_seqlens = &cu_t;
      lay.batch = int64_t(c.lens.size());
      lay.cu_seqlens = cu.data();
    } else {
      N = c.B * c.T;
      args.padded_seq_len = c.T;
      lay.batch = c.B;
      lay.seq_len = c.T;
      if (c.masked) {
        mask.assign(size_t(c.B * c.T), 1);
        for (int64_t b = 0; b < c.B; ++b)  // sequence b has T - 3b real keys (at least 1)
          for (int64_t t = std::max<int64_t>(1, c.T - 3 * b); t < c.T; ++t) mask[size_t(b * c.T + t)] = 0;
        mask_t = Tensor::from_blob(mask.data(), {c.B, c.T}, DType::u8);
        args.key_padding_mask = &mask_t;
        lay.key_mask = mask.data();
      }
    }
    train = {.dropout_p = c.p, .dropout_seed = 1234, .dropout_offset = 77};
    drop = {c.p, 1234, 77};
  }
};

const Case kCases[] = {
    {"padded T=1", 2, 8, {}, 3, 1},
    {"padded T=5 masked", 2, 8, {}, 2, 5, true, 0.3f},
    {"packed unequal", 3, 4, {5, 0, 17, 1}, 0, 0, false, 0.25f},
    {"padded T=129 masked", 2, 24, {}, 2, 129, true, 0.1f},
    {"packed T=129", 1, 64, {129, 40}, 0, 0, false, 0.0f},
};

std::vector<double> flat(const Tensor& t) { return to_f64(t); }

}  // namespace

TEST(TrainAttentionRef, DropoutBackwardMatchesCentralDifferences) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  for (const Case& c : {Case{"padded masked", 2, 3, {}, 2, 4, true, 0.4f},
                        Case{"packed", 2, 3, {3, 1, 4}, 0, 0, false, 0.3f}}) {
    SCOPED_TRACE(c.name);
    AttnSetup s(c, 0.6);
    const size_t n = size_t(s.N * s.C);
    std::vector<double> q(n), k(n), v(n), w(n), out(n), dq(n), dk(n), dv(n);
    for (auto* x : {&q, &k, &v, &w})
      for (double& e : *x) e = rng.normal();
    ref::attention_backward<double>(q.data(), k.data(), v.data(), w.data(), dq.data(), dk.data(),
                                    dv.data(), s.lay, 0.6, s.drop);
    auto loss = [&] {
      ref::attention_forward<double>(q.data(), k.data(), v.data(), out.data(), s.lay, 0.6, s.drop);
      double sum = 0;
      for (size_t i = 0; i < n; ++i) sum += w[i] * out[i];
      return sum;
    };
    for (auto [x, g] : {std::pair{&q, &dq}, {&k, &dk}, {&v, &dv}}) {
      std::vector<double> num(n);
      for (size_t i = 0; i < n; ++i) {
        const double keep = (*x)[i], h = 1e-5;
        (*x)[i] = keep + h;
        const double lp = loss();
        (*x)[i] = keep - h;
        const double lm = loss();
        (*x)[i] = keep;
        num[i] = (lp - lm) / (2 * h);
      }
      EXPECT_TRUE(all_close(*g, num, {1e-7, 1e-6}));
    }
  }
}

TEST(TrainAttention, ForwardAndBackwardMatchReferenceEveryIsaAndBackend) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  // Every row-kernel ISA with the default GEMM backend, and every other backend with the best ISA.
  std::vector<std::pair<std::string_view, cpu::GemmBackend>> runs;
  for (auto isa : cpu::available_isas()) runs.push_back({isa, cpu::gemm_backend()});
  for (auto b : {cpu::GemmBackend::openblas, cpu::GemmBackend::onednn})
    if (b != cpu::gemm_backend() && cpu::gemm_backend_available(b))
      runs.push_back({cpu::available_isas().back(), b});
  for (const auto& [isa, backend] : runs) {
    IsaScope scope(isa);
    BackendScope backend_scope(backend);
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(isa) + " " + cpu::gemm_backend_name(backend) + " " + c.name);
      const double scale = 1.0 / std::sqrt(double(c.HS));
      AttnSetup s(c, scale);
      Fused in(s.N, s.C), grads(s.N, s.C);
      for (Tensor* t : {&in.q, &in.k, &in.v}) fill_rows(rng, *t, Fill::normal);
      Tensor out = make_rows(s.N, s.C, s.C + 3), dout = make_rows(s.N, s.C, s.C + 5);
      fill_rows(rng, dout, Fill::normal);
      Tensor lse = Tensor::empty({c.NH, s.N}, DType::f32);
      ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse, s.args, s.train);
      ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, dout, grads.q, grads.k, grads.v,
                              s.args, s.train);

      const std::vector<double> q = flat(in.q), k = flat(in.k), v = flat(in.v), dod = flat(dout);
      std::vector<double> out_ref(q.size()), lse_ref(size_t(c.NH * s.N));
      std::vector<double> dq(q.size()), dk(q.size()), dv(q.size());
      ref::attention_forward<double>(q.data(), k.data(), v.data(), out_ref.data(), s.lay, scale,
                                     s.drop, lse_ref.data());
      ref::attention_backward<double>(q.data(), k.data(), v.data(), dod.data(), dq.data(), dk.data(),
                                      dv.data(), s.lay, scale, s.drop);
      const int64_t L = c.lens.empty() ? c.T : 129;
      const Tol tol = reduction_tol(std::max<int64_t>(L, c.HS));
      EXPECT_TRUE(all_close(flat(out), out_ref, tol));
      EXPECT_TRUE(all_close(std::vector<double>(lse.data<float>(), lse.data<float>() + lse.numel()),
                            lse_ref, tol));
      EXPECT_TRUE(all_close(flat(grads.q), dq, {2 * tol.atol, tol.rtol})) << "dq";
      EXPECT_TRUE(all_close(flat(grads.k), dk, {2 * tol.atol, tol.rtol})) << "dk";
      EXPECT_TRUE(all_close(flat(grads.v), dv, {2 * tol.atol, tol.rtol})) << "dv";
    }
  }
}

// With v_j = e_j (HS = T, one-hot value rows) the output row i is the dropped-out probability
// row, so the zeros of the output are exactly the dropped elements: they must be the
// reference's, element by element, and the mask must not depend on the thread count.
TEST(TrainAttention, DropoutDropsExactlyTheReferenceElements) {
  const int64_t NH = 2, T = 37, B = 3, N = B * T, HS = T, C = NH * HS;
  const float p = 0.35f;
  Tensor q = Tensor::zeros({N, C}, DType::f32), k = Tensor::zeros({N, C}, DType::f32);
  Tensor v = Tensor::zeros({N, C}, DType::f32);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t h = 0; h < NH; ++h) v.data<float>()[r * C + h * HS + r % T] = 1.0f;
  const ops::AttentionArgs args{.num_heads = int(NH), .scale = 0.125f, .padded_seq_len = T};
  const ops::AttentionTrainArgs train{.dropout_p = p, .dropout_seed = 99, .dropout_offset = 5};
  Tensor outs[2];
  for (int t = 0; t < 2; ++t) {
    Context ctx({.num_threads = t + 1});
    outs[t] = Tensor::empty({N, C}, DType::f32);
    Tensor lse = Tensor::empty({NH, N}, DType::f32);
    ops::attention_forward_train(ctx, q, k, v, outs[t], lse, args, train);
  }
  EXPECT_EQ(std::memcmp(outs[0].raw(), outs[1].raw(), outs[0].nbytes()), 0);
  int64_t dropped = 0;
  for (int64_t h = 0; h < NH; ++h)
    for (int64_t r = 0; r < N; ++r)
      for (int64_t j = 0; j < T; ++j) {
        const bool keep = ref::dropout_keep(p, 99, 5 + uint64_t((h * N + r) * T + j));
        const float got = outs[0].data<float>()[r * C + h * HS + j];
        ASSERT_EQ(got != 0.0f, keep) << "h " << h << " r " << r << " j " << j;
        if (keep) ASSERT_NEAR(got, 1.0 / T / (1.0 - p), 1e-6);  // q = 0: uniform probabilities
        dropped += !keep;
      }
  const double n = double(NH * N * T);
  EXPECT_NEAR(double(dropped), p * n, 5 * std::sqrt(n * p * (1 - p)));
}

TEST(TrainAttention, QueriesWithoutKeysGetZerosAndGradientsAreThreadIndependent) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  const int64_t NH = 2, HS = 5, T = 6, B = 3, N = B * T, C = NH * HS;
  std::vector<uint8_t> mask(size_t(B * T), 1);
  for (int64_t t = 0; t < T; ++t) mask[size_t(T + t)] = 0;  // sequence 1: no real key
  Tensor mask_t = Tensor::from_blob(mask.data(), {B, T}, DType::u8);
  const ops::AttentionArgs args{.num_heads = int(NH), .scale = 0.4f, .padded_seq_len = T,
                                .key_padding_mask = &mask_t};
  const ops::AttentionTrainArgs train{.dropout_p = 0.2f, .dropout_seed = 3, .dropout_offset = 0};
  Fused in(N, C);
  for (Tensor* t : {&in.q, &in.k, &in.v}) fill_rows(rng, *t, Fill::normal);
  Tensor dout = make_rows(N, C);
  fill_rows(rng, dout, Fill::normal);
  Tensor result[2];
  for (int t = 0; t < 2; ++t) {
    Context ctx({.num_threads = t + 1});
    result[t] = Tensor::empty({4, N, C}, DType::f32);  // out, dq, dk, dv
    Tensor out = result[t].select(0, 0), dq = result[t].select(0, 1), dk = result[t].select(0, 2),
           dv = result[t].select(0, 3);
    Tensor lse = Tensor::empty({NH, N}, DType::f32);
    ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse, args, train);
    ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, dout, dq, dk, dv, args, train);
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t r = T; r < 2 * T; ++r) EXPECT_EQ(lse.data<float>()[h * N + r], -INFINITY);
  }
  EXPECT_EQ(std::memcmp(result[0].raw(), result[1].raw(), result[0].nbytes()), 0);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t r = T; r < 2 * T; ++r)
      for (int64_t c = 0; c < C; ++c) ASSERT_EQ(result[0].data<float>()[(i * N + r) * C + c], 0.0f);
}

TEST(TrainAttention, ErrorsNameActualAndExpected) {
  Context ctx({.num_threads = 1});
  const int64_t N = 6, C = 12;
  Fused in(N, C), grads(N, C);
  Tensor out = Tensor::zeros({N, C}, DType::f32), dout = Tensor::zeros({N, C}, DType::f32);
  Tensor lse = Tensor::zeros({3, N}, DType::f32), lse_bad = Tensor::zeros({N, 3}, DType::f32);
  const ops::AttentionArgs args{.num_heads = 3, .scale = 0.5f, .padded_seq_len = 3};
  ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse, args, {});
  ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, dout, grads.q, grads.k, grads.v, args, {});
  EXPECT_NE(error_of([&] { ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse_bad, args, {}); })
                .find("[NH, N] = [3,6]"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse, args, {.dropout_p = 1.0f});
            }).find("dropout_p must be in [0, 1), got 1"),
            std::string::npos);
  Tensor overlap = grads.buf.slice(1, 2, 2 + C);  // straddles dq and dk
  EXPECT_NE(error_of([&] {
              ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, dout, overlap, grads.k, grads.v, args, {});
            }).find("dq"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::attention_backward(ctx, in.q, in.k, in.v, out, lse, dout, in.q, grads.k, grads.v, args, {});
            }).find("overlaps q"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ops::attention_forward_train(ctx, in.q, in.k, in.v, out, lse, {.num_heads = 5, .scale = 0.5f,
                                           .padded_seq_len = 3}, {});
            }).find("attention_forward_train: width C = 12"),
            std::string::npos);
  // CUDA tensors on this CPU context: Unsupported in a CPU-only build, an Error about the
  // context in a CUDA build (which has the kernels).
  float buf[3 * N] = {};
  Tensor lc = Tensor::from_blob(buf, {3, N}, DType::f32, Device::cuda);
  Tensor big = Tensor::zeros({4 * N, C}, DType::f32);
  Tensor qc = Tensor::from_blob(big.data<float>(), {N, C}, DType::f32, Device::cuda);
  Tensor kc = Tensor::from_blob(big.data<float>() + N * C, {N, C}, DType::f32, Device::cuda);
  Tensor vc = Tensor::from_blob(big.data<float>() + 2 * N * C, {N, C}, DType::f32, Device::cuda);
  Tensor outc = Tensor::from_blob(big.data<float>() + 3 * N * C, {N, C}, DType::f32, Device::cuda);
#ifdef UNMASK_WITH_CUDA
  EXPECT_THROW(ops::attention_forward_train(ctx, qc, kc, vc, outc, lc, args, {}), Error);
#else
  EXPECT_THROW(ops::attention_forward_train(ctx, qc, kc, vc, outc, lc, args, {}), Unsupported);
#endif
}
