// tests/cuda/test_cuda_optim.cc: the CUDA optimizer ops (AdamW, LAMB, sum of squares; one tensor
// and multi-tensor, and the fused LAMB step), split from test_cuda_train_ops.cc, against
// the CPU ops, through the same front-ends (src/ops), on random data with odd sizes.
// (test_cuda_train_ops.cc's header below says how.)
//
// The CPU ops are themselves tested against the float64 references (tests/test_train_ops.cc,
// tests/test_optimizer.cc), so agreement here within fp32 tolerances ties the CUDA kernels to
// the references. Where the CUDA kernel promises the CPU's exact arithmetic the test demands
// equal bits: the dropout mask and values, the embedding scatter (same order of additions).
// Determinism: the reductions (dgamma, dbeta, dbias, cross-entropy totals, sum of squares)
// run twice and must give the same bits. Outputs are poisoned with NaN first, so an element a
// kernel forgets fails. Without a CUDA device every test skips.
//
// Seed: UNMASK_TEST_SEED (decimal or 0x hex), else a fixed default; each test mixes in its name.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_state.h"
#include "cuda/gemm_cublaslt.h"
#include "cuda/ops_cuda.h"
#include "cuda/train_kernels.h"  // kApplyChunk
#include "ops/ops.h"
#include "cuda_test_common.h"
#include "test_harness.h"
#include "train_ops_test_util.h"
#include "unmask/context.h"
#include "unmask/tensor.h"
#include "unmask/train.h"

using namespace unmask;
using ops::Activation;

using cuda_test::base_seed;
using cuda_test::cpu;
using cuda_test::gpu;
using namespace train_ops_test;


TEST(CudaTrainOptim, UpdatesMatchCpuAndSumSquaresIsDeterministic) {
  REQUIRE_CUDA_DEVICE();
  Rng rng("CudaTrainOptim");
  for (int64_t n : {1, 1000, 100003}) {
    SCOPED_TRACE(rng.note());
    const std::string what = "n=" + std::to_string(n);
    Tensor p = rng.tensor({n}), g = rng.tensor({n}, 0.1f), m = rng.tensor({n}, 0.01f), v = rng.tensor({n}, 0.001f);
    for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
    ops::AdamArgs args{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f, .step = 7, .grad_scale = 0.5f};
    auto copy = [](const Tensor& t) {
      Tensor c = Tensor::empty(t.shape(), t.dtype());
      c.copy_from(t);
      return c;
    };
    {  // AdamW
      Tensor pc = copy(p), mc = copy(m), vc = copy(v);
      ops::adamw_update(cpu(), pc, g, mc, vc, 1e-3f, args);
      Tensor pd = p.to(Device::cuda), md = m.to(Device::cuda), vd = v.to(Device::cuda);
      ops::adamw_update(gpu(), pd, g.to(Device::cuda), md, vd, 1e-3f, args);
      expect_close(values(pd), values(pc), 1e-7, 1e-6, what + " adamw p");
      expect_close(values(md), values(mc), 1e-9, 1e-6, what + " adamw m");
      expect_close(values(vd), values(vc), 1e-12, 1e-6, what + " adamw v");
    }
    {  // LAMB stage 1
      Tensor mc = copy(m), vc = copy(v), uc = Tensor::empty({n}, DType::f32);
      ops::lamb_moments(cpu(), p, g, mc, vc, uc, args);
      Tensor md = m.to(Device::cuda), vd = v.to(Device::cuda), ud = nan_device({n});
      ops::lamb_moments(gpu(), p.to(Device::cuda), g.to(Device::cuda), md, vd, ud, args);
      expect_close(values(ud), values(uc), 1e-7, 1e-6, what + " lamb update");
      expect_close(values(md), values(mc), 1e-9, 1e-6, what + " lamb m");
      expect_close(values(vd), values(vc), 1e-12, 1e-6, what + " lamb v");
    }
    {  // axpy, scale_inplace
      Tensor yc = copy(m);
      ops::axpy(cpu(), -0.37f, g, yc);
      ops::scale_inplace(cpu(), yc, 1.7f);
      Tensor yd = m.to(Device::cuda);
      ops::axpy(gpu(), -0.37f, g.to(Device::cuda), yd);
      ops::scale_inplace(gpu(), yd, 1.7f);
      expect_close(values(yd), values(yc), 1e-9, 1e-6, what + " axpy+scale");
    }
  }
  for (int64_t n : {1, 8191, 8192, 8193, 1000003}) {
    Tensor x = rng.tensor({n});
    const double want = ops::sum_squares(cpu(), x);
    Tensor xd = x.to(Device::cuda);
    const double got1 = ops::sum_squares(gpu(), xd), got2 = ops::sum_squares(gpu(), xd);
    EXPECT_NEAR(got1, want, 1e-12 * want) << "sum_squares n=" << n;
    EXPECT_EQ(std::memcmp(&got1, &got2, sizeof(double)), 0) << "sum_squares n=" << n << " differs between runs";
  }
}

// The optimizer's batched norms (no per-param host syncs): sum_squares_many gives the bits of
// the one-tensor CUDA sum_squares for every tensor (across the 96-tensor launch batches, empty
// tensors included) and the CPU's sums within 1e-12; lamb_apply's device trust ratio gives the
// bits of axpy with the host-computed step; Optimizer steps on CUDA stay with the CPU's.
TEST(CudaTrainOptim, SumSquaresManyLambApplyAndOptimizerStepsMatch) {
  REQUIRE_CUDA_DEVICE();
  Rng rng("CudaTrainOptimMany");
  SCOPED_TRACE(rng.note());
  std::vector<Tensor> host, dev;
  for (int64_t n : {int64_t(1), int64_t(0), int64_t(8191), int64_t(8192), int64_t(8193), int64_t(1000003)})
    host.push_back(rng.tensor({n}));
  while (host.size() < 230) host.push_back(rng.tensor({rng.integer(0, 3) == 0 ? 0 : rng.integer(1, 20000)}));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& h : host) dev.push_back(h.to(Device::cuda));
  for (const Tensor& d : dev) ptrs.push_back(&d);
  const std::vector<double> got = ops::sum_squares_many(gpu(), ptrs), again = ops::sum_squares_many(gpu(), ptrs);
  Tensor out_dev = Tensor::empty({int64_t(dev.size())}, DType::f64, Device::cuda);
  ops::sum_squares_many(gpu(), ptrs, out_dev);
  const Tensor out = out_dev.to(Device::cpu);
  ASSERT_EQ(got.size(), host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    const std::string what = "tensor " + std::to_string(i) + " n=" + std::to_string(host[i].numel());
    const double one = ops::sum_squares(gpu(), dev[i]), want = ops::sum_squares(cpu(), host[i]);
    EXPECT_EQ(std::memcmp(&got[i], &one, sizeof one), 0) << what << ": many " << got[i] << " one " << one;
    EXPECT_EQ(std::memcmp(&out.data<double>()[i], &one, sizeof one), 0) << what << ": device out";
    EXPECT_EQ(std::memcmp(&again[i], &got[i], sizeof one), 0) << what << " differs between runs";
    EXPECT_NEAR(got[i], want, 1e-12 * want) << what;
  }

  // lamb_apply: device ratio == the host's double arithmetic, so the bits of axpy with it.
  for (int64_t n : {1, 8193, 100003}) {
    const std::string what = "lamb_apply n=" + std::to_string(n);
    const Tensor p = rng.tensor({n}), u = rng.tensor({n}, 0.1f);
    const Tensor pd = p.to(Device::cuda), ud = u.to(Device::cuda);
    Tensor sq = Tensor::empty({2}, DType::f64, Device::cuda);
    const std::vector<const Tensor*> both = {&pd, &ud};
    ops::sum_squares_many(gpu(), both, sq);
    const Tensor sq_host = sq.to(Device::cpu);
    const double ratio = std::sqrt(sq_host.data<double>()[0]) / std::sqrt(sq_host.data<double>()[1]);
    Tensor applied = p.to(Device::cuda), axpyd = p.to(Device::cuda);
    ops::lamb_apply(gpu(), 0.013f, sq.slice(0, 0, 1), sq.slice(0, 1, 2), ud, applied);
    ops::axpy(gpu(), float(-double(0.013f) * ratio), ud, axpyd);
    expect_bits(values(applied), values(axpyd), what + " vs cuda axpy");
    Tensor pc = p.contiguous(), sqc = sq_host.contiguous();
    ops::lamb_apply(cpu(), 0.013f, sqc.slice(0, 0, 1), sqc.slice(0, 1, 2), u, pc);
    expect_close(values(applied), values(pc), 1e-7, 1e-6, what + " vs cpu");
  }

  // Optimizer steps (AdamW and LAMB with clipping, decayed and undecayed params, an all-zero
  // param, more params than one launch batch) on CUDA against the same steps on the CPU.
  for (const OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::lamb}) {
    const std::string what = kind == OptimizerKind::adamw ? "adamw" : "lamb";
    std::vector<Param> pc, pg;
    for (int i = 0; i < 110; ++i) {
      const Shape shape = i % 3 == 0 ? Shape{rng.integer(1, 40), rng.integer(1, 300)} : Shape{rng.integer(1, 2000)};
      Param p;
      p.name = "p" + std::to_string(i);
      p.value = i == 5 ? Tensor::zeros(shape, DType::f32) : rng.tensor(shape, 0.05f);
      p.grad = Tensor::zeros(shape, DType::f32);
      p.weight_decay = i % 3 == 0;
      pc.push_back(p);
      Param g = p;
      g.value = p.value.to(Device::cuda);
      g.grad = p.grad.to(Device::cuda);
      pg.push_back(g);
    }
    const OptimizerConfig oc{.kind = kind, .lr = 1e-2f, .weight_decay = 0.01f, .max_grad_norm = 1.0f};
    Optimizer oc_cpu(oc, pc), oc_gpu(oc, pg);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < pc.size(); ++i) {
        const Tensor g = rng.tensor(pc[i].grad.shape(), 0.01f);
        pc[i].grad.copy_from(g);
        pg[i].grad.copy_from(g);
      }
      const OptimizerStepStats sc = oc_cpu.step(cpu(), oc.lr, 0.5f), sg = oc_gpu.step(gpu(), oc.lr, 0.5f);
      EXPECT_NEAR(sg.grad_norm, sc.grad_norm, 1e-12 * sc.grad_norm) << what << " step " << step;
      EXPECT_NEAR(sg.clip_factor, sc.clip_factor, 1e-12 * sc.clip_factor) << what << " step " << step;
    }
    for (size_t i = 0; i < pc.size(); ++i)
      expect_close(values(pg[i].value), values(pc[i].value), 1e-6, 1e-5, what + " " + pc[i].name);
  }
}

// The multi-tensor optimizer ops (ops::adamw_update_many, lamb_moments_many, lamb_apply_many):
// on CUDA one launch per 32 tensors, each block a chunk of one tensor; they must give the bits
// of the one-tensor ops, tensor by tensor. 70 tensors (three launches' worth) of sizes around
// the 8192-element chunk and the 256-thread block, one empty, each with its own lr, weight
// decay (some 0: LAMB's ratio-1 axpy) and norm slots.
// ops::copy_many's CUDA batches (the bf16 weight copies of training with bf16 activations):
// 70 f32 tensors to bf16 and f16 across several 32-tensor launches, sizes that end mid-chunk
// and an empty one: the bits of ops::copy item by item. Plus a strided item, which takes copy.
struct OptimTensors {
  std::vector<Tensor> p, g, m, v;
  std::vector<ops::AdamArgs> args;
  std::vector<float> lr;
};
OptimTensors optim_tensors(Rng& rng, int count) {
  OptimTensors o;
  for (int i = 0; i < count; ++i) {
    const int64_t n = i == 5 ? 0 : i % 7 == 0 ? 8192 * (1 + i % 3) + i : rng.integer(1, 3000);
    o.p.push_back(rng.tensor({n}));
    o.g.push_back(rng.tensor({n}, 0.1f));
    o.m.push_back(rng.tensor({n}, 0.01f));
    Tensor vv = rng.tensor({n}, 0.001f);
    for (int64_t k = 0; k < n; ++k) vv.data<float>()[k] = std::fabs(vv.data<float>()[k]);
    o.v.push_back(vv);
    o.args.push_back({.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = i % 4 == 1 ? 0.0f : 0.01f,
                      .step = 3 + i % 2, .grad_scale = 0.5f + 0.01f * float(i)});
    o.lr.push_back(1e-3f * float(1 + i % 5));
  }
  return o;
}

TEST(CudaTrainOptim, MultiTensorOpsEqualTheOneTensorOps) {
  REQUIRE_CUDA_DEVICE();
  Rng rng("CudaTrainOptimMany");
  const int count = 70;
  const OptimTensors ot = optim_tensors(rng, count);
  const std::vector<Tensor>&p = ot.p, &g = ot.g, &m = ot.m, &v = ot.v;
  const std::vector<ops::AdamArgs>& args = ot.args;
  const std::vector<float>& lr = ot.lr;
  auto dev = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(t.to(Device::cuda));
    return out;
  };
  auto all_values = [](const std::vector<Tensor>& ts) {
    std::vector<float> out;
    for (const Tensor& t : ts) {
      const std::vector<float> x = values(t);
      out.insert(out.end(), x.begin(), x.end());
    }
    return out;
  };

  {  // AdamW
    std::vector<Tensor> p1 = dev(p), m1 = dev(m), v1 = dev(v), p2 = dev(p), m2 = dev(m), v2 = dev(v), gd = dev(g);
    std::vector<ops::AdamItem> items;
    for (int i = 0; i < count; ++i) {
      ops::adamw_update(gpu(), p1[size_t(i)], gd[size_t(i)], m1[size_t(i)], v1[size_t(i)], lr[size_t(i)], args[size_t(i)]);
      items.push_back({&p2[size_t(i)], &gd[size_t(i)], &m2[size_t(i)], &v2[size_t(i)], nullptr, lr[size_t(i)], args[size_t(i)]});
    }
    ops::adamw_update_many(gpu(), items);
    expect_bits(all_values(p2), all_values(p1), "adamw_update_many p");
    expect_bits(all_values(m2), all_values(m1), "adamw_update_many m");
    expect_bits(all_values(v2), all_values(v1), "adamw_update_many v");
  }
  {  // LAMB: moments and u, then stage 2 with the norms in device slots
    std::vector<Tensor> m1 = dev(m), v1 = dev(v), m2 = dev(m), v2 = dev(v), gd = dev(g), pd = dev(p);
    std::vector<Tensor> u1, u2;
    for (const Tensor& t : p) u1.push_back(nan_device(t.shape())), u2.push_back(nan_device(t.shape()));
    std::vector<ops::AdamItem> items;
    for (int i = 0; i < count; ++i) {
      const size_t k = size_t(i);
      ops::lamb_moments(gpu(), pd[k], gd[k], m1[k], v1[k], u1[k], args[k]);
      items.push_back({&pd[k], &gd[k], &m2[k], &v2[k], &u2[k], 0.0f, args[k]});
    }
    ops::lamb_moments_many(gpu(), items);
    expect_bits(all_values(u2), all_values(u1), "lamb_moments_many u");
    expect_bits(all_values(m2), all_values(m1), "lamb_moments_many m");
    expect_bits(all_values(v2), all_values(v1), "lamb_moments_many v");

    std::vector<const Tensor*> ps, us;
    for (int i = 0; i < count; ++i) ps.push_back(&pd[size_t(i)]), us.push_back(&u1[size_t(i)]);
    Tensor param_sq = Tensor::empty({count}, DType::f64, Device::cuda), update_sq = Tensor::empty({count}, DType::f64, Device::cuda);
    ops::sum_squares_many(gpu(), ps, param_sq);
    ops::sum_squares_many(gpu(), us, update_sq);
    std::vector<Tensor> p1 = dev(p), p2 = dev(p), slots;
    slots.reserve(2 * count);
    std::vector<ops::LambApplyItem> apply;
    for (int i = 0; i < count; ++i) {
      const size_t k = size_t(i);
      ops::LambApplyItem a;
      a.lr = lr[k], a.update = &u1[k], a.p = &p2[k];
      if (args[k].weight_decay != 0.0f) {
        slots.push_back(param_sq.slice(0, i, i + 1));
        slots.push_back(update_sq.slice(0, i, i + 1));
        ops::lamb_apply(gpu(), lr[k], slots[slots.size() - 2], slots.back(), u1[k], p1[k]);
        a.param_sq = &slots[slots.size() - 2], a.update_sq = &slots.back();
      } else {
        ops::axpy(gpu(), float(-double(lr[k])), u1[k], p1[k]);
      }
      apply.push_back(a);
    }
    ops::lamb_apply_many(gpu(), apply);
    expect_bits(all_values(p2), all_values(p1), "lamb_apply_many p");
  }
}

// ops::lamb_update_many on CUDA (two passes, u never stored) against the CPU's op sequence on
// the same 70 tensors (three 32-tensor batches; sizes around the 8192-element chunk, an empty
// one, a zero one with weight decay: ratio 1, some without weight decay) for two steps: m, v and
// p within the CPU ops' tolerance (1e-6 relative: compiler choices, and for p the rounding of the
// norms' sum order, which is not sum_squares's); two runs give the same bits
// (deterministic); and the step differs from one without the trust ratio (the norms are used).
TEST(CudaTrainOptim, FusedLambUpdateMatchesTheCpuSequence) {
  REQUIRE_CUDA_DEVICE();
  Rng rng("CudaFusedLamb");
  const int count = 70;
  OptimTensors ot = optim_tensors(rng, count);
  ot.p[10].copy_from(Tensor::zeros(ot.p[10].shape(), DType::f32));  // ||p|| = 0 with weight decay: ratio 1
  const std::vector<Tensor>&p = ot.p, &g = ot.g, &m = ot.m, &v = ot.v;
  const std::vector<ops::AdamArgs>& args = ot.args;
  const std::vector<float>& lr = ot.lr;
  auto on = [](const std::vector<Tensor>& ts, Device d) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(d == Device::cuda ? t.to(Device::cuda) : t.contiguous());
    return out;
  };
  auto items_of = [&](std::vector<Tensor>& pp, std::vector<Tensor>& gg, std::vector<Tensor>& mm, std::vector<Tensor>& vv) {
    std::vector<ops::AdamItem> items;
    for (int i = 0; i < count; ++i) {
      const size_t k = size_t(i);
      items.push_back({&pp[k], &gg[k], &mm[k], &vv[k], nullptr, lr[k], args[k]});
    }
    return items;
  };
  std::vector<Tensor> pc = on(p, Device::cpu), gc = on(g, Device::cpu), mc = on(m, Device::cpu), vc = on(v, Device::cpu);
  std::vector<Tensor> pg = on(p, Device::cuda), gg = on(g, Device::cuda), mg = on(m, Device::cuda), vg = on(v, Device::cuda);
  std::vector<Tensor> pg2 = on(p, Device::cuda), mg2 = on(m, Device::cuda), vg2 = on(v, Device::cuda);
  std::vector<ops::AdamItem> cpu_items = items_of(pc, gc, mc, vc), gpu_items = items_of(pg, gg, mg, vg),
                             gpu_items2 = items_of(pg2, gg, mg2, vg2);
  for (int step = 0; step < 2; ++step) {
    ops::lamb_update_many(cpu(), cpu_items);
    ops::lamb_update_many(gpu(), gpu_items);
    ops::lamb_update_many(gpu(), gpu_items2);
  }
  for (int i = 0; i < count; ++i) {
    const size_t k = size_t(i);
    const std::string what = "item " + std::to_string(i) + " n=" + std::to_string(p[k].numel());
    expect_close(values(mg[k]), values(mc[k]), 1e-7, 1e-6, what + " m");
    expect_close(values(vg[k]), values(vc[k]), 1e-7, 1e-6, what + " v");
    expect_close(values(pg[k]), values(pc[k]), 1e-7, 1e-6, what + " p");
    expect_bits(values(pg2[k]), values(pg[k]), what + ": two runs");
  }
  // The trust ratio mattered: one step with weight decay but every norm slot forced to ratio 1
  // (lamb_moments + axpy) lands elsewhere than the fused step on a decayed item.
  std::vector<Tensor> p3 = on(p, Device::cuda), m3 = on(m, Device::cuda), v3 = on(v, Device::cuda);
  std::vector<ops::AdamItem> one_step = items_of(p3, gg, m3, v3);
  ops::lamb_update_many(gpu(), one_step);
  const size_t decayed = 2;  // n in [1, 3000), weight decay 0.01, p random
  Tensor u = Tensor::empty(p[decayed].shape(), DType::f32, Device::cuda), m4 = m[decayed].to(Device::cuda),
         v4 = v[decayed].to(Device::cuda), p4 = p[decayed].to(Device::cuda);
  ops::lamb_moments(gpu(), p4, gg[decayed], m4, v4, u, args[decayed]);
  ops::axpy(gpu(), float(-double(lr[decayed])), u, p4);
  const std::vector<float> fused = values(p3[decayed]), ratio_one = values(p4);
  EXPECT_NE(std::memcmp(fused.data(), ratio_one.data(), fused.size() * sizeof(float)), 0)
      << "the fused step ignored ||p|| / ||u||";

  // The three GPU ops the fused step replaces, on the same operands: ||p||^2 (before the step)
  // and ||u||^2 by sum_squares_many, lamb_moments_many into stored u's, lamb_apply_many. The
  // fused norms are summed in sum_squares's chunks and order and u is recomputed with the same
  // IEEE operations, so p, m and v must come out bit for bit.
  std::vector<Tensor> p5 = on(p, Device::cuda), m5 = on(m, Device::cuda), v5 = on(v, Device::cuda), u5;
  std::vector<ops::AdamItem> moments = items_of(p5, gg, m5, v5);
  std::vector<const Tensor*> decayed_p, decayed_u;
  for (int i = 0; i < count; ++i) {
    const size_t k = size_t(i);
    u5.push_back(Tensor::empty(p[k].shape(), DType::f32, Device::cuda));
  }
  for (int i = 0; i < count; ++i) {
    const size_t k = size_t(i);
    moments[k].update = &u5[k];
    if (args[k].weight_decay != 0.0f && p[k].numel() > 0) decayed_p.push_back(&p5[k]), decayed_u.push_back(&u5[k]);
  }
  const int64_t nd = int64_t(decayed_p.size());
  Tensor sq = Tensor::empty({2 * nd}, DType::f64, Device::cuda);
  Tensor param_sq = sq.slice(0, 0, nd), update_sq = sq.slice(0, nd, 2 * nd);
  ops::sum_squares_many(gpu(), decayed_p, param_sq);
  ops::lamb_moments_many(gpu(), moments);
  ops::sum_squares_many(gpu(), decayed_u, update_sq);
  std::vector<Tensor> slots;
  slots.reserve(size_t(2 * nd));
  std::vector<ops::LambApplyItem> apply;
  int64_t slot = 0;
  for (int i = 0; i < count; ++i) {
    const size_t k = size_t(i);
    ops::LambApplyItem a;
    a.lr = lr[k], a.update = &u5[k], a.p = &p5[k];
    if (args[k].weight_decay != 0.0f && p[k].numel() > 0) {
      slots.push_back(sq.slice(0, slot, slot + 1));
      slots.push_back(sq.slice(0, nd + slot, nd + slot + 1));
      a.param_sq = &slots[slots.size() - 2], a.update_sq = &slots.back();
      ++slot;
    }
    apply.push_back(a);
  }
  ops::lamb_apply_many(gpu(), apply);
  for (int i = 0; i < count; ++i) {
    const size_t k = size_t(i);
    const std::string what = "item " + std::to_string(i) + " vs the three GPU ops";
    expect_bits(values(p3[k]), values(p5[k]), what + " p");
    expect_bits(values(m3[k]), values(m5[k]), what + " m");
    expect_bits(values(v3[k]), values(v5[k]), what + " v");
  }
}

// ops::zero_many on the context's stream: 100 byte slices of one device buffer (the ~67 of whole
// 4-byte words at aligned addresses take the multi-tensor kernel, in three 32-tensor launches,
// some of several chunks; odd sizes or addresses take cudaMemsetAsync), plus f32 and bf16 tensors. The
// buffer is first written by a device-to-device copy queued on the same stream without a sync:
// only the listed bytes may read 0 afterwards, every other byte the copy's pattern.
TEST(CudaTrainOptim, ZeroManyZeroesExactlyTheListedBytesAfterTheStreamsEarlierWork) {
  REQUIRE_CUDA_DEVICE();
  auto filled = [](const Shape& shape, float value) {
    Tensor t = Tensor::empty(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value;
    return t;
  };
  const int64_t total = int64_t(1) << 24;  // 16 MiB: the copy is still running when zero_many is queued
  Tensor pattern_host = Tensor::empty({total}, DType::u8);
  std::memset(pattern_host.raw(), 0xcd, size_t(total));
  const Tensor pattern = pattern_host.to(Device::cuda);
  Tensor buf = Tensor::empty({total}, DType::u8, Device::cuda);
  std::vector<Tensor> slices;
  std::vector<std::pair<int64_t, int64_t>> spans;  // [begin, end) of each slice
  int64_t at = 64;
  for (int i = 0; i < 100; ++i) {
    const int64_t len = i % 7 == 0 ? 4 * (2 * cuda::kApplyChunk + 5 + i) : i % 6 == 3 ? 1 + 13 * i : 4 * (1 + 97 * i);
    at = (at + 3) / 4 * 4;
    if (i % 6 == 1) at += 1;  // a misaligned start (the memset path)
    spans.emplace_back(at, at + len);
    slices.push_back(buf.slice(0, at, at + len));
    at += len + 4 + (i % 5);  // gaps the zeroing must not touch
  }
  ASSERT_LT(at, total);
  Tensor f = Tensor::empty({3, 1001}, DType::f32, Device::cuda), h = Tensor::empty({517}, DType::bf16, Device::cuda);
  ops::copy(gpu(), filled({3, 1001}, 1.5f), f);
  ops::copy(gpu(), filled({517}, 1.5f).cast(DType::bf16), h);
  ops::copy(gpu(), pattern, buf);  // queued; no sync before zero_many
  std::vector<Tensor*> list;
  for (Tensor& s : slices) list.push_back(&s);
  list.push_back(&f);
  list.push_back(&h);
  ops::zero_many(gpu(), list);
  const Tensor got = buf.to(Device::cpu);
  const uint8_t* g = got.data<uint8_t>();
  std::vector<uint8_t> want(size_t(total), 0xcd);
  for (const auto& [b, e] : spans) std::fill(want.begin() + b, want.begin() + e, uint8_t(0));
  int64_t wrong = 0, first = -1;
  for (int64_t i = 0; i < total; ++i)
    if (g[i] != want[size_t(i)] && wrong++ == 0) first = i;
  EXPECT_EQ(wrong, 0) << "first wrong byte " << first << ": got " << int(g[first < 0 ? 0 : first]) << ", want "
                      << int(want[size_t(first < 0 ? 0 : first)]);
  for (const Tensor& t : {f.to(Device::cpu), h.to(Device::cpu).cast(DType::f32)}) {
    int64_t nonzero = 0;
    for (int64_t i = 0; i < t.numel(); ++i) nonzero += t.data<float>()[i] != 0.0f;
    EXPECT_EQ(nonzero, 0) << t.describe();
  }
  // A tensor on the wrong device is refused before anything is written.
  Tensor host = filled({4}, 3.0f);
  std::vector<Tensor*> mixed = {&f, &host};
  ops::copy(gpu(), filled({3, 1001}, 1.5f), f);
  EXPECT_THROW(ops::zero_many(gpu(), mixed), Error);
  EXPECT_EQ(f.to(Device::cpu).data<float>()[0], 1.5f);
}
