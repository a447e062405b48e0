// tests/test_dist.cc: the data-parallel layer in one process: world() without a launcher, the
// launcher detection, GradientSync's buckets and launch order (through a fake two-rank backend),
// and the sharding helpers. The multi-process tests are tests/mpi/test_dist_mpi.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "data/rng.h"
#include "dist/backend.h"
#include "dist/grad_sync.h"
#include "dist/shard.h"
#include "op_test_util.h"
#include "scoped_env.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask {
namespace {

using test::TestRng;

using test::ScopedEnv;

bool under_launcher() {
  return Communicator::launcher_size() != 0;
}

// ---- world() and the single-process backend ---------------------------------------------------

TEST(DistWorld, SingleProcessWithoutLauncher) {
  if (under_launcher()) GTEST_SKIP() << "running under mpirun/srun";
  Communicator& comm = Communicator::world();
  EXPECT_TRUE(Communicator::world_initialized());
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.local_rank(), 0);
  EXPECT_EQ(comm.local_size(), 1);
  EXPECT_TRUE(comm.is_root());
  EXPECT_STREQ(comm.backend_name(), "local");
  EXPECT_FALSE(comm.host_of(0).empty());
}

TEST(DistWorld, OperationsAreIdentityOnOneRank) {
  if (under_launcher()) GTEST_SKIP() << "running under mpirun/srun";
  Communicator& comm = Communicator::world();
  TestRng rng;
  SCOPED_TRACE(rng.note());
  std::vector<float> f(1000);
  std::vector<double> d(777);
  for (float& x : f) x = float(rng.normal());
  for (double& x : d) x = rng.normal();
  const std::vector<float> f0 = f;
  const std::vector<double> d0 = d;
  comm.allreduce_sum(f.data(), int64_t(f.size()));
  comm.allreduce_sum(d.data(), int64_t(d.size()));
  EXPECT_EQ(f, f0);
  EXPECT_EQ(d, d0);
  Request r = comm.iallreduce_sum(f.data(), int64_t(f.size()), "test");
  EXPECT_TRUE(r.test());
  r.wait();
  EXPECT_EQ(f, f0);
  comm.broadcast(f.data(), f.size() * sizeof(float), 0);
  EXPECT_EQ(f, f0);
  comm.barrier();
  EXPECT_EQ(comm.allgather({1.5, -2.0}), (std::vector<double>{1.5, -2.0}));
  struct Pod {
    int32_t a;
    double b;
  };
  const std::vector<Pod> pods = comm.allgather_pod(Pod{7, 0.25});
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].a, 7);
  EXPECT_EQ(pods[0].b, 0.25);
}

TEST(DistWorld, ValidatesArguments) {
  Communicator comm(make_local_backend());
  float x = 1;
  EXPECT_THROW(comm.allreduce_sum(&x, -1), Error);
  EXPECT_THROW(comm.allreduce_sum(static_cast<float*>(nullptr), 4), Error);
  EXPECT_NO_THROW(comm.allreduce_sum(static_cast<float*>(nullptr), 0));
  EXPECT_THROW(comm.broadcast(&x, sizeof(x), 1), Error);  // root 1 of a 1-rank communicator
  EXPECT_THROW(comm.broadcast(&x, sizeof(x), -1), Error);
  EXPECT_THROW(comm.set_timeout_s(0), Error);
  EXPECT_THROW(comm.set_timeout_s(-3), Error);
  comm.set_timeout_s(2.5);
  EXPECT_EQ(comm.timeout_s(), 2.5);
}

TEST(DistWorld, TimeoutFromEnvironment) {
  {
    ScopedEnv env("UNMASK_DIST_TIMEOUT_S", nullptr);
    EXPECT_EQ(Communicator(make_local_backend()).timeout_s(), 60.0);
  }
  {
    ScopedEnv env("UNMASK_DIST_TIMEOUT_S", "3");
    EXPECT_EQ(Communicator(make_local_backend()).timeout_s(), 3.0);
  }
  for (const char* bad : {"0", "-1", "abc", "5s", "inf"}) {
    ScopedEnv env("UNMASK_DIST_TIMEOUT_S", bad);
    EXPECT_THROW((void)Communicator(make_local_backend()), Error) << bad;
  }
}

TEST(DistWorld, LauncherDetection) {
  ScopedEnv a("OMPI_COMM_WORLD_SIZE", nullptr), b("PMI_SIZE", nullptr), c("SLURM_STEP_NUM_TASKS", nullptr),
      d("PMIX_RANK", nullptr);
  EXPECT_EQ(Communicator::launcher_size(), 0);
  {
    ScopedEnv e("OMPI_COMM_WORLD_SIZE", "4");
    EXPECT_EQ(Communicator::launcher_size(), 4);
  }
  {
    ScopedEnv e("SLURM_STEP_NUM_TASKS", "16");
    EXPECT_EQ(Communicator::launcher_size(), 16);
  }
  {
    ScopedEnv e("PMI_SIZE", "2");
    EXPECT_EQ(Communicator::launcher_size(), 2);
  }
  {
    ScopedEnv e("PMIX_RANK", "0");
    EXPECT_EQ(Communicator::launcher_size(), -1);  // PMIx alone does not say how many
  }
  {
    ScopedEnv e("OMPI_COMM_WORLD_SIZE", "two");
    EXPECT_THROW(Communicator::launcher_size(), Error);
  }
}

// ---- GradientSync through a fake two-rank backend ---------------------------------------------

/// Rank 0 of a pretend two-rank job whose other rank contributes `other` to every element; it
/// records each started operation (label, count) and completes it at once.
class FakeTwoRanks final : public Communicator::Backend {
 public:
  explicit FakeTwoRanks(float other) : other_(other) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 2; }
  const char* name() const override { return "fake"; }
  std::string host_of(int) const override { return "here"; }
  Request start(DistOp op) override {
    started.push_back({op.label, op.count});
    if (op.kind == DistOpKind::allreduce_sum && op.elem == DistElem::f32) {
      float* x = static_cast<float*>(op.data);
      for (int64_t i = 0; i < op.count; ++i) x[i] = x[i] + other_;  // rank order: mine, then rank 1's
    } else if (op.kind == DistOpKind::allreduce_sum && op.elem == DistElem::f64) {
      double* x = static_cast<double*>(op.data);
      for (int64_t i = 0; i < op.count; ++i) x[i] = x[i] + double(other_);
    }
    return Request();
  }
  [[noreturn]] void abort(int code, const std::string&) override { std::_Exit(code); }
  std::vector<std::pair<std::string, int64_t>> started;

 private:
  float other_;
};

std::vector<Param> make_params(const std::vector<int64_t>& sizes, TestRng& rng) {
  std::vector<Param> params(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    params[i].name = "p" + std::to_string(i);
    params[i].value = Tensor::zeros({sizes[i]}, DType::f32);
    params[i].grad = Tensor::empty({sizes[i]}, DType::f32);
    float* g = params[i].grad.data<float>();
    for (int64_t j = 0; j < sizes[i]; ++j) g[j] = float(rng.normal());
  }
  return params;
}

double mb_of_elements(int64_t n) {
  return double(n) * 4 / (1024.0 * 1024.0);
}

TEST(DistGradientSync, BucketsInReverseOrderWithinCapacity) {
  TestRng rng;
  // Reverse order 10, 1000, 50, 300, 200, 100 with a cap of 400 elements: 10 | 1000 (alone:
  // larger than the cap) | 50 + 300 | 200 + 100.
  std::vector<Param> params = make_params({100, 200, 300, 50, 1000, 10}, rng);
  Communicator comm(make_local_backend());
  dist::GradientSync sync(comm, params, {.bucket_mb = mb_of_elements(400)});
  ASSERT_EQ(sync.num_buckets(), 4);
  EXPECT_EQ(sync.bucket_params(0), (std::vector<int64_t>{5}));
  EXPECT_EQ(sync.bucket_params(1), (std::vector<int64_t>{4}));
  EXPECT_EQ(sync.bucket_params(2), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(sync.bucket_params(3), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(sync.bucket_elements(2), 350);
  EXPECT_EQ(sync.bucket_of(0), 3);
  EXPECT_THROW(sync.bucket_params(4), Error);
}

TEST(DistGradientSync, EveryParamInExactlyOneBucket) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  std::vector<int64_t> sizes(60);
  for (int64_t& s : sizes) s = rng.integer(1, 5000);
  std::vector<Param> params = make_params(sizes, rng);
  Communicator comm(make_local_backend());
  const int64_t cap = 8000;
  dist::GradientSync sync(comm, params, {.bucket_mb = mb_of_elements(cap)});
  std::vector<int> seen(sizes.size(), 0);
  int64_t previous = int64_t(sizes.size());
  for (int64_t b = 0; b < sync.num_buckets(); ++b) {
    const std::vector<int64_t>& ps = sync.bucket_params(b);
    ASSERT_FALSE(ps.empty()) << "bucket " << b;
    int64_t elems = 0;
    for (int64_t i : ps) {
      EXPECT_EQ(i, previous - 1) << "buckets must hold the params in reverse order";
      previous = i;
      ++seen[size_t(i)];
      EXPECT_EQ(sync.bucket_of(i), b);
      elems += sizes[size_t(i)];
    }
    EXPECT_EQ(sync.bucket_elements(b), elems);
    EXPECT_TRUE(elems <= cap || ps.size() == 1) << "bucket " << b << " holds " << elems;
    // Greedy: the next bucket's first param would not have fitted in this one.
    if (b + 1 < sync.num_buckets()) EXPECT_GT(elems + sizes[size_t(sync.bucket_params(b + 1)[0])], cap);
  }
  for (size_t i = 0; i < sizes.size(); ++i) EXPECT_EQ(seen[i], 1) << "param " << i;
  EXPECT_EQ(sync.stats().buckets, sync.num_buckets());
}

TEST(DistGradientSync, StartsBucketsInOrderAsTheyComplete) {
  TestRng rng;
  SCOPED_TRACE(rng.note());
  std::vector<Param> params = make_params({100, 200, 300, 50, 1000, 10}, rng);
  std::vector<std::vector<float>> original;
  for (Param& p : params) original.emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
  auto backend = std::make_unique<FakeTwoRanks>(0.375f);
  FakeTwoRanks* fake = backend.get();
  Communicator comm(std::move(backend));
  dist::GradientSync sync(comm, params, {.bucket_mb = mb_of_elements(400)});  // {5} {4} {3,2} {1,0}
  sync.mark_ready(2);
  sync.mark_ready(0);
  EXPECT_TRUE(fake->started.empty());
  sync.mark_ready(1);  // bucket 3 complete, but buckets 0-2 have not started
  EXPECT_TRUE(fake->started.empty());
  sync.mark_ready(5);  // bucket 0 complete -> starts at once
  ASSERT_EQ(fake->started.size(), 1u);
  EXPECT_EQ(fake->started[0].second, 10);
  sync.mark_ready(4);  // bucket 1 starts; bucket 2 still lacks param 3
  ASSERT_EQ(fake->started.size(), 2u);
  EXPECT_EQ(fake->started[1].second, 1000);
  sync.mark_ready(3);  // buckets 2 and 3 start, in order
  ASSERT_EQ(fake->started.size(), 4u);
  EXPECT_EQ(fake->started[2].second, 350);
  EXPECT_EQ(fake->started[3].second, 300);
  EXPECT_NE(fake->started[3].first.find("gradient bucket 3 of 4"), std::string::npos) << fake->started[3].first;
  EXPECT_THROW(sync.mark_ready(3), Error);  // twice in one step
  EXPECT_THROW(sync.mark_ready(6), Error);
  sync.finish();
  for (size_t i = 0; i < params.size(); ++i) {
    const float* g = params[i].grad.data<float>();
    for (size_t j = 0; j < original[i].size(); ++j)
      ASSERT_EQ(g[j], (original[i][j] + 0.375f) / 2.0f) << "param " << i << " element " << j;
  }
  EXPECT_EQ(sync.stats().reductions, 4);
  EXPECT_EQ(sync.stats().bytes_reduced, (10 + 1000 + 350 + 300) * 4);
  EXPECT_EQ(sync.stats().steps, 1);

  // Next step: marks reset; params never marked are reduced by finish(), still in bucket order.
  fake->started.clear();
  sync.mark_ready(5);
  sync.finish();
  ASSERT_EQ(fake->started.size(), 4u);
  EXPECT_EQ(fake->started[0].second, 10);
  EXPECT_EQ(fake->started[3].second, 300);
  fake->started.clear();
  sync.reduce_all();
  EXPECT_EQ(fake->started.size(), 4u);
  EXPECT_EQ(sync.stats().steps, 3);
}

TEST(DistGradientSync, SumWithoutAveraging) {
  TestRng rng;
  std::vector<Param> params = make_params({33, 7}, rng);
  const float before = params[1].grad.data<float>()[3];
  Communicator comm(std::make_unique<FakeTwoRanks>(1.0f));
  dist::GradientSync sync(comm, params, {.average = false});
  EXPECT_EQ(sync.num_buckets(), 1);
  sync.reduce_all();
  EXPECT_EQ(params[1].grad.data<float>()[3], before + 1.0f);
}

TEST(DistGradientSync, NoOpOnOneRank) {
  TestRng rng;
  std::vector<Param> params = make_params({64, 128, 5}, rng);
  const std::vector<float> g0(params[1].grad.data<float>(), params[1].grad.data<float>() + 128);
  Communicator comm(make_local_backend());
  dist::GradientSync sync(comm, params);
  sync.mark_ready(2);
  EXPECT_THROW(sync.mark_ready(2), Error);
  sync.finish();
  sync.reduce_all();
  EXPECT_EQ(std::vector<float>(params[1].grad.data<float>(), params[1].grad.data<float>() + 128), g0);
  EXPECT_EQ(sync.stats().reductions, 0);
  EXPECT_EQ(sync.stats().bytes_reduced, 0);
}

TEST(DistGradientSync, RejectsBadGradients) {
  TestRng rng;
  Communicator comm(make_local_backend());
  std::vector<Param> params = make_params({8}, rng);
  params[0].grad = Tensor::zeros({8}, DType::f64);
  EXPECT_THROW((void)dist::GradientSync(comm, params), Error);
  params[0].grad = Tensor::zeros({9}, DType::f32);
  EXPECT_THROW((void)dist::GradientSync(comm, params), Error);
  params[0].grad = Tensor::zeros({8}, DType::f32);
  EXPECT_THROW((void)dist::GradientSync(comm, params, {.bucket_mb = 0}), Error);
}

TEST(DistGradientSync, ScalarStatistics) {
  double loss = 2.5, other = -1.0;
  int64_t count = 41;
  Communicator one(make_local_backend());
  dist::allreduce_scalars(one, {&loss, &other}, {&count});
  EXPECT_EQ(loss, 2.5);
  EXPECT_EQ(count, 41);
  Communicator two(std::make_unique<FakeTwoRanks>(3.0f));
  dist::allreduce_scalars(two, {&loss, &other}, {&count});
  EXPECT_EQ(loss, 5.5);
  EXPECT_EQ(other, 2.0);
  EXPECT_EQ(count, 44);
}

// ---- sharding -------------------------------------------------------------------------------

TEST(DistShard, RangesCoverAndAreDisjoint) {
  for (int64_t n : {0, 1, 2, 7, 100, 101, 1000003}) {
    for (int size : {1, 2, 3, 8, 13}) {
      int64_t next = 0, smallest = n, largest = 0;
      for (int r = 0; r < size; ++r) {
        const dist::Range rg = dist::shard_range(n, r, size);
        EXPECT_EQ(rg.begin, next) << "n=" << n << " size=" << size << " rank=" << r;
        EXPECT_GE(rg.size(), 0);
        next = rg.end;
        smallest = std::min(smallest, rg.size());
        largest = std::max(largest, rg.size());
        const dist::Range eq = dist::equal_shard_range(n, r, size);
        EXPECT_EQ(eq.size(), n / size);
        EXPECT_EQ(eq.begin, r * (n / size));
      }
      EXPECT_EQ(next, n) << "n=" << n << " size=" << size;
      EXPECT_LE(largest - smallest, 1);
    }
  }
  EXPECT_EQ(dist::shard_range(10, 0, 3), (dist::Range{0, 4}));
  EXPECT_EQ(dist::shard_range(10, 2, 3), (dist::Range{7, 10}));
  EXPECT_THROW(dist::shard_range(10, 3, 3), Error);
  EXPECT_THROW(dist::shard_range(-1, 0, 3), Error);
}

TEST(DistShard, FilesRoundRobin) {
  const std::vector<std::string> files = {"a", "b", "c", "d", "e"};
  EXPECT_EQ(dist::shard_files(files, 0, 2), (std::vector<std::string>{"a", "c", "e"}));
  EXPECT_EQ(dist::shard_files(files, 1, 2), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(dist::shard_files(files, 4, 5), (std::vector<std::string>{"e"}));
  EXPECT_THROW(dist::shard_files(files, 0, 6), Error);
  EXPECT_THROW(dist::shard_files(files, 2, 2), Error);
}

TEST(DistShard, ResampleToEqualCounts) {
  const std::vector<int64_t> counts = {10, 3, 7, 10};
  for (int r = 0; r < 4; ++r) {
    const std::vector<int64_t> order = dist::resample_to_equal(counts, r, 99, 0);
    ASSERT_EQ(order.size(), 10u) << "rank " << r;
    std::map<int64_t, int> uses;
    for (int64_t i : order) {
      ASSERT_GE(i, 0);
      ASSERT_LT(i, counts[size_t(r)]);
      ++uses[i];
    }
    EXPECT_EQ(int64_t(uses.size()), counts[size_t(r)]) << "every local sample is used";
    const int lo = int(10 / counts[size_t(r)]);
    for (auto [i, k] : uses) EXPECT_TRUE(k == lo || k == lo + 1) << "rank " << r << " sample " << i << " x" << k;
    EXPECT_EQ(order, dist::resample_to_equal(counts, r, 99, 0)) << "deterministic";
  }
  EXPECT_NE(dist::resample_to_equal(counts, 0, 99, 0), dist::resample_to_equal(counts, 0, 99, 1)) << "epochs differ";
  EXPECT_NE(dist::resample_to_equal(counts, 0, 99, 0), dist::resample_to_equal(counts, 0, 98, 0)) << "seeds differ";
  EXPECT_NE(dist::resample_to_equal(counts, 0, 99, 0), dist::resample_to_equal(counts, 3, 99, 0)) << "ranks differ";
  EXPECT_THROW(dist::resample_to_equal({5, 0}, 1, 1), Error);
  EXPECT_THROW(dist::resample_to_equal({5, 3}, 2, 1), Error);
  EXPECT_TRUE(dist::resample_to_equal({0, 0}, 0, 1).empty());
}

TEST(DistShard, RankSeeds) {
  std::set<uint64_t> seeds;
  for (int r = 0; r < 64; ++r) seeds.insert(dist::rank_seed(1234, r));
  EXPECT_EQ(seeds.size(), 64u);
  EXPECT_EQ(dist::rank_seed(1234, 5), dist::rank_seed(1234, 5));
  EXPECT_NE(dist::rank_seed(1234, 5), dist::rank_seed(1235, 5));
  EXPECT_EQ(dist::rank_seed(1234, 5), data::derive_key(1234, {data::kStreamRank, 5}));
  EXPECT_THROW(dist::rank_seed(1, -1), Error);
}

}  // namespace
}  // namespace unmask
