// tests/test_inference_dtypes.cc: the CPU side of bf16 / f16 inference and CUDA-graph forwards:
// Tensor::cast's rounding, the fused embedding block against float64, ops::copy, the errors
// low-precision tensors give on the CPU, and the BERT forward's dtype rules. (The CUDA side is
// tests/cuda/test_cuda_bert_infer.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/half.h"
#include "error_test_util.h"
#include "op_test_util.h"
#include "ops/device_info.h"
#include "ops/ops.h"
#include "ref/ref_ops.h"
#include "unmask/bert.h"

using namespace unmask;
using namespace unmask::test;

namespace {

float f32_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t bits16(const Tensor& t, int64_t i) { return static_cast<const uint16_t*>(t.raw())[i]; }

Tensor vec(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::f32);
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

}  // namespace

// Round to nearest, ties to even, in both 16-bit formats; NaN stays NaN; fp16 overflows to inf.
TEST(TensorCast, RoundsToNearestEven) {
  // bf16 keeps 7 mantissa bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (ties to even: 1),
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6 (ties to even: 1 + 2^-6).
  const Tensor x = vec({1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f,
                        std::numeric_limits<float>::quiet_NaN(), 70000.0f, 0x1p-20f});
  const Tensor b = x.cast(DType::bf16);
  ASSERT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(bits16(b, 0), 0x3f80);
  EXPECT_EQ(bits16(b, 1), 0x3f80);  // tie -> even
  EXPECT_EQ(bits16(b, 2), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bits16(b, 3), 0x3f81);  // just above the tie -> up
  EXPECT_EQ(bits16(b, 4), 0xc020);
  EXPECT_TRUE(std::isnan(bf16_to_f32(bits16(b, 5))));
  EXPECT_EQ(bf16_to_f32(bits16(b, 6)), 70144.0f);  // 70000 -> nearest bf16
  const Tensor h = x.cast(DType::f16);
  EXPECT_EQ(bits16(h, 0), 0x3c00);
  EXPECT_EQ(bits16(h, 1), 0x3c04);  // fp16 keeps 10 mantissa bits: 1 + 2^-8 is exact
  EXPECT_EQ(bits16(h, 2), 0x3c0c);
  EXPECT_EQ(bits16(h, 4), 0xc100);
  EXPECT_TRUE(std::isnan(f16_to_f32(bits16(h, 5))));
  EXPECT_EQ(bits16(h, 6), 0x7c00);  // overflow -> +inf
  EXPECT_EQ(f16_to_f32(bits16(h, 7)), 0x1p-20f);  // a subnormal in fp16, exact
  // Back to f32: exact.
  const Tensor back = b.cast(DType::f32);
  EXPECT_EQ(back.data<float>()[2], 1.0f + 0x1p-6f);
  EXPECT_EQ(back.data<float>()[4], -2.5f);
}

TEST(TensorCast, StridedInputsAndErrors) {
  Tensor wide = Tensor::empty({3, 4}, DType::f32);
  for (int i = 0; i < 12; ++i) wide.data<float>()[i] = float(i) + 0.5f;
  const Tensor col = wide.slice(1, 1, 3);  // [3, 2], row stride 4
  const Tensor c = col.cast(DType::bf16);
  ASSERT_TRUE(c.is_contiguous());
  ASSERT_EQ(c.shape(), Shape({3, 2}));
  for (int r = 0; r < 3; ++r)
    for (int k = 0; k < 2; ++k) EXPECT_EQ(bf16_to_f32(bits16(c, r * 2 + k)), float(r * 4 + 1 + k) + 0.5f);
  // Same dtype: an owned copy, not a view.
  const Tensor same = wide.cast(DType::f32);
  EXPECT_NE(same.raw(), wide.raw());
  EXPECT_EQ(same.data<float>()[7], 7.5f);
  try {
    Tensor::empty({2}, DType::i32).cast(DType::f32);
    FAIL() << "cast of i32 must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("f32, bf16 and f16"), std::string::npos) << e.what();
  }
}

// The fused embedding block: LayerNorm(word[ids] + pos[p] + type[t]) against float64.
TEST(Ops, EmbeddingLayerNormMatchesFloat64) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  Context ctx({.num_threads = 2});
  const int64_t V = 37, P = 11, TV = 2, C = 24, N = 19;
  Tensor word = make_rows(V, C), pos = make_rows(P, C), type = make_rows(TV, C);
  fill_rows(rng, word, Fill::normal);
  fill_rows(rng, pos, Fill::normal);
  fill_rows(rng, type, Fill::normal);
  Tensor gamma = make_rows(1, C), beta = make_rows(1, C);
  fill_rows(rng, gamma, Fill::uniform);
  fill_rows(rng, beta, Fill::uniform);
  gamma = gamma.view({C});
  beta = beta.view({C});
  Tensor ids = Tensor::empty({N}, DType::i32), pids = Tensor::empty({N}, DType::i32), tids = Tensor::empty({N}, DType::i32);
  for (int64_t i = 0; i < N; ++i) {
    ids.data<int32_t>()[i] = int32_t(rng.integer(0, V - 1));
    pids.data<int32_t>()[i] = int32_t(rng.integer(0, P - 1));
    tids.data<int32_t>()[i] = int32_t(rng.integer(0, TV - 1));
  }
  for (bool with_types : {true, false}) {
    SCOPED_TRACE(with_types ? "type ids given" : "type ids null (all 0)");
    Tensor out = make_rows(N, C);
    ops::embedding_layernorm(ctx, ids, pids, with_types ? &tids : nullptr, word, pos, type, gamma, beta, 1e-12f, out);
    std::vector<double> sum(size_t(N * C)), ref(size_t(N * C)), g(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) g[c] = gamma.data<float>()[c], b[c] = beta.data<float>()[c];
    for (int64_t i = 0; i < N; ++i) {
      const int64_t t = with_types ? tids.data<int32_t>()[i] : 0;
      for (int64_t c = 0; c < C; ++c)
        sum[size_t(i * C + c)] = double(word.data<float>()[ids.data<int32_t>()[i] * C + c]) +
                                 double(pos.data<float>()[pids.data<int32_t>()[i] * C + c]) +
                                 double(type.data<float>()[t * C + c]);
    }
    ref::layernorm_forward<double>(sum.data(), nullptr, g.data(), b.data(), 1e-12, ref.data(), N, C);
    EXPECT_TRUE(all_close(to_f64(out), ref, {.atol = 2e-6, .rtol = 1e-5}));
  }
  // Bad input: an id outside the table, a wrong-length position vector.
  Tensor out = make_rows(N, C);
  ids.data<int32_t>()[3] = int32_t(V);
  EXPECT_THROW(ops::embedding_layernorm(ctx, ids, pids, &tids, word, pos, type, gamma, beta, 1e-12f, out), Error);
  ids.data<int32_t>()[3] = 0;
  Tensor short_pids = pids.slice(0, 0, N - 1);
  EXPECT_THROW(ops::embedding_layernorm(ctx, ids, short_pids, &tids, word, pos, type, gamma, beta, 1e-12f, out), Error);
}

TEST(Ops, CopyHandlesStridesAndRejectsMismatches) {
  Context ctx({.num_threads = 1});
  Tensor wide = Tensor::empty({4, 6}, DType::f32);
  for (int i = 0; i < 24; ++i) wide.data<float>()[i] = float(i);
  const Tensor src = wide.slice(1, 2, 5);  // [4, 3], row stride 6
  Tensor dst = Tensor::empty({4, 3}, DType::f32);
  ops::copy(ctx, src, dst);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(dst.data<float>()[r * 3 + c], float(r * 6 + 2 + c));
  Tensor wrong_shape = Tensor::empty({3, 4}, DType::f32);
  EXPECT_THROW(ops::copy(ctx, src, wrong_shape), Error);
  Tensor wrong_dtype = Tensor::empty({4, 3}, DType::i32);
  EXPECT_THROW(ops::copy(ctx, src, wrong_dtype), Error);
  Tensor overlapping = wide.slice(1, 3, 6);
  EXPECT_THROW(ops::copy(ctx, src, overlapping), Error);
}

// A bf16 GEMM with exact GELU (or tanh) and a bf16 bias rounds the pre-activation, then the
// activation: CUDA's default roundings (gemm_cublaslt.cc) and PyTorch eager's. A single rounding
// of act(A B + bias) differs in some elements, so the test tells the two apart.
TEST(Ops, HalfGemmWithAnUnfusableActivationRoundsTwiceOnTheCpu) {
  Context ctx({.num_threads = 2});
  Tensor a = Tensor::empty({16, 48}, DType::f32), w = Tensor::empty({40, 48}, DType::f32),
         bias = Tensor::empty({40}, DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = float((i * 37) % 23) / 11.0f - 1.0f;
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = float((i * 53) % 29) / 70.0f - 0.2f;
  for (int64_t i = 0; i < bias.numel(); ++i) bias.data<float>()[i] = float(i % 7) / 9.0f - 0.3f;
  for (const ops::Activation act : {ops::Activation::gelu, ops::Activation::tanh}) {
    SCOPED_TRACE(act == ops::Activation::gelu ? "gelu" : "tanh");
    const Tensor ab = a.cast(DType::bf16), wb = w.cast(DType::bf16), bb = bias.cast(DType::bf16);
    Tensor fused = Tensor::empty({16, 40}, DType::bf16), twice = Tensor::empty({16, 40}, DType::bf16);
    ops::gemm(ctx, ab, ops::Trans::no, wb, ops::Trans::yes, fused, {.bias = &bb, .act = act});
    ops::gemm(ctx, ab, ops::Trans::no, wb, ops::Trans::yes, twice, {.bias = &bb});
    ops::activation(ctx, twice, twice, act);
    // one rounding: act(A B + bias) in f32 from the same bf16 operands, then bf16
    int64_t differ_from_once = 0;
    const Tensor bf = bb.cast(DType::f32);
    Tensor once = Tensor::zeros({16, 40}, DType::f32);
    ops::gemm(ctx, ab.cast(DType::f32), ops::Trans::no, wb.cast(DType::f32), ops::Trans::yes, once,
              {.bias = &bf, .act = act});
    const Tensor once16 = once.cast(DType::bf16);
    for (int64_t i = 0; i < fused.numel(); ++i) {
      ASSERT_EQ(bits16(fused, i), bits16(twice, i)) << "element " << i;
      differ_from_once += bits16(fused, i) != bits16(once16, i);
    }
    EXPECT_GT(differ_from_once, 0) << "no element tells one rounding from two: the test would not catch a regression";
  }
}

// copy_many: the bits of copy item by item (f32 -> bf16 / f16 roundings, a strided source, a
// same-dtype copy), and its own check that no item writes into another item's tensors.
TEST(Ops, CopyManyIsCopyItemByItemAndRefusesOverlappingItems) {
  Context ctx({.num_threads = 2});
  Tensor wide = Tensor::empty({5, 9}, DType::f32);
  for (int i = 0; i < 45; ++i) wide.data<float>()[i] = f32_of_bits(0x3f800000u + uint32_t(i) * 0x1357u) * (i % 3 - 1.0f);
  const Tensor a = wide.slice(0, 0, 2).contiguous(), b = wide.slice(1, 1, 8);  // contiguous [2, 9], strided [5, 7]
  Tensor a16 = Tensor::empty({2, 9}, DType::bf16), b16 = Tensor::empty({5, 7}, DType::f16),
         a32 = Tensor::empty({2, 9}, DType::f32);
  ops::copy_many(ctx, {{&a, &a16}, {&b, &b16}, {&a, &a32}});
  Tensor want_a16 = Tensor::empty({2, 9}, DType::bf16), want_b16 = Tensor::empty({5, 7}, DType::f16);
  ops::copy(ctx, a, want_a16);
  ops::copy(ctx, b, want_b16);
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(bits16(a16, i), bits16(want_a16, i)) << i;
  for (int64_t i = 0; i < 35; ++i) EXPECT_EQ(bits16(b16, i), bits16(want_b16, i)) << i;
  for (int64_t i = 0; i < 18; ++i) EXPECT_EQ(a32.data<float>()[i], a.data<float>()[i]) << i;
  ops::copy_many(ctx, {});  // nothing to do

  // Item 0 writes into item 1's source: in order the result would depend on the items' order.
  Tensor buf = Tensor::empty({2, 9}, DType::f32);
  Tensor into_src = buf;  // item 0's dst ...
  const Tensor src_of_1 = buf.slice(0, 1, 2);  // ... holds item 1's src
  Tensor out1 = Tensor::empty({1, 9}, DType::f32);
  std::string msg = error_of([&] { ops::copy_many(ctx, {{&a, &into_src}, {&src_of_1, &out1}}); });
  EXPECT_NE(msg.find("item 0's dst"), std::string::npos) << msg;
  EXPECT_NE(msg.find("item 1's src"), std::string::npos) << msg;
  // Two items writing one tensor; a null tensor.
  Tensor shared = Tensor::empty({2, 9}, DType::bf16);
  msg = error_of([&] { ops::copy_many(ctx, {{&a, &shared}, {&a, &shared}}); });
  EXPECT_NE(msg.find("overlaps"), std::string::npos) << msg;
  msg = error_of([&] { ops::copy_many(ctx, {{&a, nullptr}}); });
  EXPECT_NE(msg.find("null"), std::string::npos) << msg;
  // Column slices of one buffer that share no element are not an overlap.
  Tensor cols = Tensor::empty({4, 6}, DType::f32);
  Tensor left = cols.slice(1, 0, 3), right = cols.slice(1, 3, 6);
  const Tensor src4 = wide.slice(0, 0, 4).slice(1, 0, 3);
  ops::copy_many(ctx, {{&src4, &left}, {&src4, &right}});
  EXPECT_EQ(cols.data<float>()[3], wide.data<float>()[0]);
  EXPECT_EQ(cols.data<float>()[6 + 5], wide.data<float>()[9 + 2]);
}

// zero_many: every byte of each listed tensor and nothing else (slices of one filled buffer,
// any dtype, an odd byte count); bad tensors are refused before anything is written.
TEST(Ops, ZeroManyZeroesExactlyTheListedBytes) {
  Context ctx({.num_threads = 2});
  Tensor buf = Tensor::empty({64}, DType::u8);
  std::memset(buf.raw(), 0xab, 64);
  Tensor a = buf.slice(0, 3, 10), b = buf.slice(0, 20, 21), empty = buf.slice(0, 30, 30);
  Tensor f = Tensor::empty({3, 5}, DType::f32), h = Tensor::empty({7}, DType::bf16);
  for (int i = 0; i < 15; ++i) f.data<float>()[i] = 1.0f + float(i);
  std::memset(h.raw(), 0x7f, h.nbytes());
  ops::zero_many(ctx, {&a, &b, &empty, &f, &h});
  const uint8_t* u = buf.data<uint8_t>();
  for (int i = 0; i < 64; ++i) {
    const bool listed = (i >= 3 && i < 10) || i == 20;
    EXPECT_EQ(u[i], listed ? 0 : 0xab) << "byte " << i;
  }
  for (int i = 0; i < 15; ++i) EXPECT_EQ(f.data<float>()[i], 0.0f) << i;
  for (int i = 0; i < 14; ++i) EXPECT_EQ(static_cast<const uint8_t*>(h.raw())[i], 0) << i;
  ops::zero_many(ctx, {});  // nothing to do

  // A strided tensor or a null pointer: an error naming it, and nothing zeroed.
  for (int i = 0; i < 15; ++i) f.data<float>()[i] = 2.0f;
  Tensor column = f.slice(1, 1, 2);
  std::string msg = error_of([&] { ops::zero_many(ctx, {&f, &column}); });
  EXPECT_NE(msg.find("tensor 1 must be contiguous"), std::string::npos) << msg;
  EXPECT_EQ(f.data<float>()[0], 2.0f) << "the first tensor was zeroed before the second was checked";
  msg = error_of([&] { ops::zero_many(ctx, {&f, nullptr}); });
  EXPECT_NE(msg.find("tensor 1 is null"), std::string::npos) << msg;
  Tensor undefined;
  msg = error_of([&] { ops::zero_many(ctx, {&undefined}); });
  EXPECT_NE(msg.find("tensor 0 is undefined"), std::string::npos) << msg;
}

// bf16 / f16 tensors on the CPU: the ops of the bf16 training path emulate them (tests in
// test_train_bf16.cc); the others say the CPU kernels are f32.
TEST(Ops, LowPrecisionOnCpuIsUnsupported) {
  Context ctx({.num_threads = 1});
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = Tensor::zeros({4, 8}, dt), b = Tensor::zeros({8, 8}, dt), c = Tensor::zeros({4, 8}, dt);
    Tensor g = Tensor::zeros({8}, DType::f32), ids = Tensor::zeros({4}, DType::i32);
    auto expect_unsupported = [](auto&& fn, const char* what) {
      try {
        fn();
        ADD_FAILURE() << what << ": expected Unsupported";
      } catch (const Unsupported& e) {
        EXPECT_NE(std::string(e.what()).find("CPU kernels are f32"), std::string::npos) << what << ": " << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": expected Unsupported, got " << e.what();
      }
    };
    expect_unsupported([&] { ops::softmax(ctx, a, c); }, "softmax");
    expect_unsupported([&] { ops::embedding(ctx, b, ids, c); }, "embedding");
    EXPECT_FALSE(ops::supports("softmax", Device::cpu, dt));
    EXPECT_FALSE(ops::supports("embedding", Device::cpu, dt));
    EXPECT_TRUE(ops::supports("gemm", Device::cpu, dt));  // emulated
    ops::gemm(ctx, a, ops::Trans::no, b, ops::Trans::yes, c);
    ops::layernorm(ctx, a, nullptr, g, g, 1e-12f, c);
    EXPECT_EQ(c.cast(DType::f32).data<float>()[0], 0.0f);  // LayerNorm of a zero row is beta = 0
  }
}

TEST(Attention, MaxSeqlenShorterThanTheLongestSequenceIsAnError) {
  Context ctx({.num_threads = 1});
  const int64_t N = 7, C = 8;
  Tensor q = Tensor::zeros({N, C}, DType::f32), out = Tensor::zeros({N, C}, DType::f32);
  Tensor cu = Tensor::empty({3}, DType::i32);
  cu.data<int32_t>()[0] = 0, cu.data<int32_t>()[1] = 5, cu.data<int32_t>()[2] = 7;
  ops::AttentionArgs aa;
  aa.num_heads = 2;
  aa.scale = 0.5f;
  aa.cu_seqlens = &cu;
  aa.max_seqlen = 4;  // the first sequence has 5 tokens
  try {
    ops::attention(ctx, q, q, q, out, aa);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seqlen = 4"), std::string::npos) << e.what();
  }
  aa.max_seqlen = 5;
  EXPECT_NO_THROW(ops::attention(ctx, q, q, q, out, aa));
}

// The model's dtype rules: f32 on the CPU; f16 only on CUDA; bf16 on the CPU only with a bf16
// matrix unit (its GEMMs: the model's dtype stays f32); cuda_graph is a CUDA option.
TEST(BertDtype, LowPrecisionNeedsCudaAndGraphsAreIgnoredOnTheCpu) {
  BertConfig cfg;
  cfg.vocab_size = 30, cfg.hidden_size = 16, cfg.num_hidden_layers = 1, cfg.num_attention_heads = 2;
  cfg.intermediate_size = 32, cfg.max_position_embeddings = 16;
  BertModel model = BertModel::random(cfg, BertHeads{.pooler = true, .qa = true}, 5);
  Context ctx({.num_threads = 1});
  EXPECT_EQ(model.dtype(), DType::f32);
  EXPECT_THROW(model.to(ctx, DType::f16), Unsupported);
  EXPECT_THROW(model.to(ctx, DType::i32), Error);
  {
    BertModel m16 = BertModel::random(cfg, BertHeads{.pooler = true}, 5);
    if (*ops::cpu_bf16_unit()) {
      m16.to(ctx, DType::bf16);
      EXPECT_EQ(m16.dtype(), DType::f32);  // the outputs; the packed GEMMs are bf16
    } else {
      EXPECT_THROW(m16.to(ctx, DType::bf16), Unsupported);
    }
  }
  EXPECT_EQ(model.dtype(), DType::f32);
  BertInput in;
  in.input_ids = Tensor::empty({2, 5}, DType::i32);
  for (int i = 0; i < 10; ++i) in.input_ids.data<int32_t>()[i] = 1 + i;
  ForwardOptions eager, graphed;
  graphed.cuda_graph = true;
  const BertOutputs a = model.forward(ctx, in, eager), b = model.forward(ctx, in, graphed);
  EXPECT_EQ(model.num_cuda_graphs(), 0u);
  ASSERT_TRUE(a.qa_start_logits.defined() && b.qa_end_logits.defined());
  if (*ops::cpu_bf16_unit())  // packed as f32 by the forward: too late for bf16
    EXPECT_NE(error_of([&] { model.to(ctx, DType::bf16); }).find("already packed the weights as f32"), std::string::npos);
  EXPECT_EQ(a.qa_start_logits.shape(), Shape({2, 5}));
  for (int64_t i = 0; i < a.last_hidden_state.numel(); ++i)
    ASSERT_EQ(a.last_hidden_state.data<float>()[i], b.last_hidden_state.data<float>()[i]);
  // Ids outside the tables are caught on the host (the CUDA kernels trust them).
  auto expect_error = [&](const BertInput& bad, const std::string& needle) {
    try {
      model.forward(ctx, bad, eager);
      ADD_FAILURE() << "expected an Error with " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  BertInput bad = in;
  bad.input_ids = in.input_ids.contiguous();
  bad.input_ids.data<int32_t>()[7] = 30;
  expect_error(bad, "input_ids[7] = 30 is outside the vocabulary [0, 30)");
  bad.input_ids.data<int32_t>()[7] = -1;
  expect_error(bad, "input_ids[7] = -1 is outside the vocabulary [0, 30)");
  bad = in;
  bad.token_type_ids = Tensor::zeros({2, 5}, DType::i64);
  bad.token_type_ids.data<int64_t>()[4] = 2;
  expect_error(bad, "token_type_ids[4] = 2 is outside [0, 2)");
  // hidden_in must have the model's dtype.
  Tensor hidden = Tensor::zeros({10, 16}, DType::bf16);
  ForwardOptions skip;
  skip.embeddings = false;
  skip.hidden_in = &hidden;
  EXPECT_THROW(model.forward(ctx, in, skip), Error);
}
