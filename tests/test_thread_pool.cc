// tests/test_thread_pool.cc: core/thread_pool.h runs each task index of a region exactly once,
// also when a region uses fewer tasks than the pool has threads and regions follow each other
// back to back. A worker that woke for a small region and read the *next* region's task count
// ran that region's task twice (its counter went negative: a hang) or called a task that had
// already gone (a segfault at address 0x10); seen on a 16-core machine on 2026-11-26 in CPU
// pretraining, never on 2 cores. The stress below mixes region sizes so a late worker meets a
// larger region, and is oversubscribed on purpose: descheduled workers are what open the race.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

using namespace unmask;

TEST(ThreadPool, EveryIndexRunsOnceInMixedSizeRegions) {
  constexpr int kThreads = 16;
  ThreadPool pool(kThreads);
  std::vector<std::atomic<int>> runs(kThreads);
  int bad_regions = 0;
  for (int region = 0; region < 3000 && bad_regions == 0; ++region) {
    // sizes 2, 16, 3, 16, 5, 16, ...: a small region then a full one
    const int tasks = region % 2 == 1 ? kThreads : 2 + (region / 2) % (kThreads - 2);
    for (auto& r : runs) r.store(0);
    pool.run(tasks, [&](int i) { runs[i].fetch_add(1); });
    for (int i = 0; i < kThreads; ++i)
      if (runs[i].load() != (i < tasks ? 1 : 0)) {
        ADD_FAILURE() << "region " << region << " (" << tasks << " tasks): index " << i << " ran "
                      << runs[i].load() << " times";
        ++bad_regions;
      }
  }
  // a task running after its region returned would add to the next region's counts (checked
  // above) or to these; nothing may run once run() has returned
  std::atomic<int> after{0};
  pool.run(2, [&](int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 2);
}

TEST(ThreadPool, MoreTasksThanThreadsRunAsManyAsThreads) {
  ThreadPool pool(4);
  std::atomic<int> count{0};
  pool.run(9, [&](int i) {
    EXPECT_LT(i, 4);
    count.fetch_add(1);
  });
  EXPECT_EQ(count.load(), 4);
}

TEST(ThreadPool, AWorkersExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(4);
  EXPECT_THROW(pool.run(4, [](int i) {
    if (i == 3) throw std::runtime_error("task 3 failed");
  }),
               std::runtime_error);
  std::atomic<int> count{0};
  pool.run(4, [&](int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 4);
}

// A region started from inside a task (or from a second thread while one runs) runs on the
// calling thread: sharing the pool's one region slot would make the outer region never end.
TEST(ThreadPool, ARegionStartedFromATaskRunsOnItsThread) {
  ThreadPool pool(4);
  std::atomic<int> inner{0}, outer{0};
  pool.run(4, [&](int) {
    outer.fetch_add(1);
    pool.run(3, [&](int) { inner.fetch_add(1); });
  });
  EXPECT_EQ(outer.load(), 4);
  EXPECT_EQ(inner.load(), 12);
}

TEST(ThreadPool, TwoCallingThreadsShareThePool) {
  ThreadPool pool(4);
  std::atomic<int> count{0};
  auto many = [&] {
    for (int i = 0; i < 500; ++i) pool.run(4, [&](int) { count.fetch_add(1); });
  };
  std::thread other(many);
  many();
  other.join();
  EXPECT_EQ(count.load(), 2 * 500 * 4);
}
