// tests/mpi/test_dist_mpi.cc: the MPI backend with several processes. Run by run_mpi_tests.sh:
//   mpirun --oversubscribe -np 2 build/unmask_mpi_tests      (and -np 3)
// Every rank runs every test; a rank can compute every other rank's contribution (the values are
// functions of (rank, index)), so each checks its result against a local float64/rank-order
// reference. The DistMpiFault tests run only when UNMASK_DIST_FAULT names them (each ends the
// job; run_mpi_tests.sh runs them as separate mpirun invocations and checks the exit and message).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "data/rng.h"
#include "dist/grad_sync.h"
#include "unmask/dist.h"

namespace unmask {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Communicator& comm() {
  return Communicator::world();
}

/// Rank r's value at index i of stream `stream`: magnitudes over 2^-10..2^10, so that the order
/// of f32 additions changes the result (a sum in another order would be caught).
float value_of(int r, uint64_t stream, int64_t i) {
  data::Rng rng(data::derive_key(0xd157, {uint64_t(r), stream, uint64_t(i)}));
  const double u = rng.uniform() - 0.5;
  return float(std::ldexp(u, int(rng.below(21)) - 10));
}

/// ((v_0 + v_1) + v_2) + ... in T: the reference of allreduce_sum.
template <typename T>
T rank_order_sum(int size, uint64_t stream, int64_t i) {
  T s = T(value_of(0, stream, i));
  for (int r = 1; r < size; ++r) s += T(value_of(r, stream, i));
  return s;
}

TEST(DistMpi, WorldMatchesLauncher) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ASSERT_NE(size, nullptr) << "run under Open MPI's mpirun";
  EXPECT_EQ(comm().size(), std::atoi(size));
  EXPECT_EQ(comm().rank(), std::atoi(rank));
  if (local) EXPECT_EQ(comm().local_rank(), std::atoi(local));
  EXPECT_EQ(comm().local_size(), comm().size());  // one host
  EXPECT_STREQ(comm().backend_name(), "mpi");
  EXPECT_GE(comm().size(), 2);
  for (int r = 0; r < comm().size(); ++r) EXPECT_FALSE(comm().host_of(r).empty());
}

TEST(DistMpi, AllreduceEqualsClosedForm) {
  const int P = comm().size(), me = comm().rank();
  for (int64_t n : {int64_t(1), int64_t(2), int64_t(P - 1), int64_t(P + 1), int64_t(1000), int64_t(1 << 20) + 3}) {
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<double> d(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      f[size_t(i)] = float(me + 1) * float(i % 7 + 1);
      d[size_t(i)] = double(me + 1) * 0.5 * double(i % 11);
    }
    comm().allreduce_sum(f.data(), n, "closed form f32");
    comm().allreduce_sum(d.data(), n, "closed form f64");
    const double tri = double(P) * (P + 1) / 2;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      bad += double(f[size_t(i)]) != tri * double(i % 7 + 1);
      bad += d[size_t(i)] != tri * 0.5 * double(i % 11);
    }
    EXPECT_EQ(bad, 0) << "n=" << n;
  }
}

TEST(DistMpi, AllreduceIsBitwiseTheRankOrderSum) {
  const int P = comm().size(), me = comm().rank();
  for (int64_t n : {int64_t(5), int64_t(4097), int64_t(300001)}) {
    std::vector<float> f(static_cast<size_t>(n));
    std::vector<double> d(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) f[size_t(i)] = value_of(me, 1, i), d[size_t(i)] = double(value_of(me, 1, i)) / 3;
    comm().allreduce_sum(f.data(), n);
    comm().allreduce_sum(d.data(), n);
    int64_t bad_f = 0, bad_d = 0, differs_from_reverse = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float ref = rank_order_sum<float>(P, 1, i);
      bad_f += std::memcmp(&f[size_t(i)], &ref, sizeof(float)) != 0;
      double ref_d = double(value_of(0, 1, i)) / 3;
      for (int r = 1; r < P; ++r) ref_d += double(value_of(r, 1, i)) / 3;
      bad_d += d[size_t(i)] != ref_d;
      float rev = value_of(P - 1, 1, i);
      for (int r = P - 2; r >= 0; --r) rev += value_of(r, 1, i);
      differs_from_reverse += rev != ref;
    }
    EXPECT_EQ(bad_f, 0) << "n=" << n;
    EXPECT_EQ(bad_d, 0) << "n=" << n;
    // With 3+ ranks the order matters for some elements, so the check above can tell orders apart.
    if (P >= 3 && n > 1000) EXPECT_GT(differs_from_reverse, 0);
  }
}

TEST(DistMpi, IallreduceProgressesWhileTheCallerComputes) {
  const int P = comm().size(), me = comm().rank();
  const int64_t n = 25 * 1024 * 1024 / 4;  // a 25 MiB gradient bucket
  std::vector<float> buf(static_cast<size_t>(n), float(me + 1));
  comm().allreduce_sum(buf.data(), n, "warm-up");  // page faults of the buffers off the clock
  std::fill(buf.begin(), buf.end(), float(me + 1));
  comm().barrier();
  auto t0 = Clock::now();
  comm().allreduce_sum(buf.data(), n, "timing");
  const double alone = seconds_since(t0);

  std::fill(buf.begin(), buf.end(), float(me + 1));
  comm().barrier();
  t0 = Clock::now();
  Request r = comm().iallreduce_sum(buf.data(), n, "overlapped");
  // The caller "computes" (here: sleeps, leaving the cores to the communication thread) for
  // several times the reduction's own duration and never calls into the communicator.
  const double budget = 5 * alone + 0.5;
  bool done_early = false;
  while (seconds_since(t0) < budget && !(done_early = r.test()))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(done_early) << "the iallreduce did not complete in the background within " << budget << " s";
  r.wait();
  const float expect = float(P) * float(P + 1) / 2;
  int64_t bad = 0;
  for (float v : buf) bad += v != expect;
  EXPECT_EQ(bad, 0);
  std::printf("rank %d: 25 MiB allreduce %.1f ms alone, overlapped done after %.1f ms\n", me, alone * 1e3,
              seconds_since(t0) * 1e3);
}

TEST(DistMpi, GradientSyncRandomMarkOrderIsBitwiseTheRankOrderMean) {
  const int P = comm().size(), me = comm().rank();
  // Sizes from a tiny bias to a 1 MiB matrix; buckets of 256 KiB make several.
  const std::vector<int64_t> sizes = {768, 3, 262144, 1, 50000, 4096, 65536, 12, 100000, 768};
  std::vector<Param> params(sizes.size());
  for (size_t p = 0; p < sizes.size(); ++p) {
    params[p].name = "p" + std::to_string(p);
    params[p].value = Tensor::zeros({sizes[p]}, DType::f32);
    params[p].grad = Tensor::zeros({sizes[p]}, DType::f32);
  }
  dist::GradientSync sync(comm(), params, {.bucket_mb = 0.25});
  EXPECT_GE(sync.num_buckets(), 3);
  data::Rng order_rng(data::derive_key(77, {uint64_t(me)}));  // a different mark order per rank
  for (int step = 0; step < 4; ++step) {
    for (size_t p = 0; p < sizes.size(); ++p) {
      float* g = params[p].grad.data<float>();
      for (int64_t i = 0; i < sizes[p]; ++i) g[i] = value_of(me, 100 * uint64_t(step) + p, i);
    }
    if (step == 3) {
      sync.reduce_all();
    } else {
      std::vector<int64_t> order(sizes.size());
      for (size_t p = 0; p < order.size(); ++p) order[p] = int64_t(p);
      order_rng.shuffle(order.data(), int64_t(order.size()));
      const size_t marked = step == 2 ? order.size() / 2 : order.size();  // step 2: finish() does the rest
      for (size_t k = 0; k < marked; ++k) sync.mark_ready(order[k]);
      sync.finish();
    }
    int64_t bad = 0;
    for (size_t p = 0; p < sizes.size(); ++p) {
      const float* g = params[p].grad.data<float>();
      for (int64_t i = 0; i < sizes[p]; ++i) {
        const float ref = rank_order_sum<float>(P, 100 * uint64_t(step) + p, i) / float(P);
        bad += std::memcmp(&g[i], &ref, sizeof(float)) != 0;
      }
    }
    EXPECT_EQ(bad, 0) << "step " << step;
  }
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  EXPECT_EQ(sync.stats().steps, 4);
  EXPECT_EQ(sync.stats().reductions, 4 * sync.num_buckets());
  EXPECT_EQ(sync.stats().bytes_reduced, 4 * total * 4);
}

TEST(DistMpi, BroadcastFromAnyRoot) {
  const int P = comm().size(), me = comm().rank();
  for (int root : {0, P - 1}) {
    for (size_t bytes : {size_t(1), size_t(1000003)}) {
      std::vector<unsigned char> buf(bytes);
      for (size_t i = 0; i < bytes; ++i) buf[i] = me == root ? (unsigned char)(i * 31 + root) : 0;
      comm().broadcast(buf.data(), bytes, root, "test pattern");
      size_t bad = 0;
      for (size_t i = 0; i < bytes; ++i) bad += buf[i] != (unsigned char)(i * 31 + root);
      EXPECT_EQ(bad, 0u) << "root " << root << " bytes " << bytes;
    }
  }
}

TEST(DistMpi, AllgatherAndBarrier) {
  const int P = comm().size(), me = comm().rank();
  const std::vector<double> all = comm().allgather({double(me), me * 0.5 + 1});
  ASSERT_EQ(all.size(), size_t(2 * P));
  for (int r = 0; r < P; ++r) {
    EXPECT_EQ(all[size_t(2 * r)], double(r));
    EXPECT_EQ(all[size_t(2 * r + 1)], r * 0.5 + 1);
  }
  struct Info {
    int32_t rank;
    int64_t count;
  };
  const std::vector<Info> infos = comm().allgather_pod(Info{me, 1000 + me});
  for (int r = 0; r < P; ++r) EXPECT_EQ(infos[size_t(r)].count, 1000 + r);
  for (int i = 0; i < 20; ++i) comm().barrier("loop");
  double loss = 0.25 * (me + 1);
  int64_t count = me + 10;
  dist::allreduce_scalars(comm(), {&loss}, {&count});
  EXPECT_EQ(loss, 0.25 * P * (P + 1) / 2);
  EXPECT_EQ(count, int64_t(P) * (P - 1) / 2 + 10 * P);
}

// ---- faults: each ends the job; run_mpi_tests.sh checks how ---------------------------------

bool fault_is(const char* name) {
  const char* f = std::getenv("UNMASK_DIST_FAULT");
  return f && std::strcmp(f, name) == 0;
}

TEST(DistMpiFault, SkippedCollectiveTimesOut) {
  if (!fault_is("skip")) GTEST_SKIP() << "set UNMASK_DIST_FAULT=skip";
  std::vector<float> buf(1000, 1.0f);
  comm().allreduce_sum(buf.data(), 1000, "warm-up");
  if (comm().rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(25));  // skips the next collective
    return;
  }
  comm().allreduce_sum(buf.data(), 1000, "the collective rank 1 skips");
  ADD_FAILURE() << "rank " << comm().rank() << " returned from a collective rank 1 never joined";
}

TEST(DistMpiFault, KilledRank) {
  if (!fault_is("kill")) GTEST_SKIP() << "set UNMASK_DIST_FAULT=kill";
  std::vector<float> buf(1 << 18, 1.0f);
  for (int step = 0; step < 1000000; ++step) {
    if (step == 20 && comm().rank() == 1) {
      std::fprintf(stderr, "rank 1: raising SIGKILL at step %d\n", step);
      raise(SIGKILL);
    }
    comm().allreduce_sum(buf.data(), int64_t(buf.size()), "training step");
    std::fill(buf.begin(), buf.end(), 1.0f);
  }
  ADD_FAILURE() << "the loop finished although rank 1 died";
}

TEST(DistMpiFault, MismatchedSizes) {
  if (!fault_is("mismatch")) GTEST_SKIP() << "set UNMASK_DIST_FAULT=mismatch";
  const int64_t n = 1000 + 7 * comm().rank();  // the ranks disagree on the size
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  comm().allreduce_sum(buf.data(), n, "mismatched");
  ADD_FAILURE() << "an allreduce of mismatched sizes returned";
}

/// Non-root ranks print only failures, prefixed by their rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace unmask

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  unmask::Communicator& comm = unmask::Communicator::world();
  if (const char* t = std::getenv("UNMASK_DIST_TIMEOUT_S"); !t) comm.set_timeout_s(30);  // fail fast in CI
  if (!comm.is_root()) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new unmask::RankFailurePrinter(comm.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  // Every rank exits with the same verdict.
  double failed = rc != 0 ? 1 : 0;
  comm.allreduce_sum(&failed, 1, "test verdict");
  if (comm.is_root()) std::printf("unmask_mpi_tests: %d ranks, %s\n", comm.size(), failed > 0 ? "FAILED" : "passed");
  return failed > 0 ? 1 : 0;
}
