// tests/test_thread_pool.cc: core/thread_pool.h runs each task index of a region exactly once,
// also when a region uses fewer tasks than the pool has threads and regions follow each other
// back to back. A worker that woke for a small region and read the *next* region's task count
// ran that region's task twice (its counter went negative: a hang) or called a task that had
// already gone (a segfault at address 0x10); seen on a 16-core machine on 2026-11-26 in CPU
// pretraining, never on 2 cores. The stress below mixes region sizes so a late worker meets a
// larger region, and is oversubscribed on purpose: descheduled workers are what open the race.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/signals.h"
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

// core/signals.h: after start_signal_thread(), the calling thread and every thread it starts
// (the pool's workers) block the asynchronous signals, and a process-directed signal runs its
// handler on none of them (on a compute thread, Debian oneDNN's sgemm kernels get a signal frame
// written into the heap). The handler records the thread it ran on.
namespace {
std::atomic<pthread_t> g_handler_thread{};
std::atomic<int> g_handled{0};
void record_thread(int) {
  g_handler_thread.store(pthread_self());
  g_handled.fetch_add(1);
}
}  // namespace

TEST(SignalThread, ComputeThreadsNeverRunAHandler) {
  start_signal_thread();
  EXPECT_TRUE(async_signals_blocked()) << "the thread that started the signal thread must block SIGINT/SIGTERM";
  ThreadPool pool(3);
  std::vector<pthread_t> compute(3);
  std::vector<int> blocked(3, 0);
  pool.run(3, [&](int i) {
    compute[size_t(i)] = pthread_self();
    blocked[size_t(i)] = async_signals_blocked();
  });
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(blocked[size_t(i)]) << "pool thread " << i << " takes signals";

  struct sigaction sa {}, old {};
  sa.sa_handler = record_thread;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  // Signals sent while the compute threads are busy (they spin in a region).
  for (int k = 0; k < 20; ++k) {
    const int before = g_handled.load();
    std::atomic<bool> stop{false};
    std::thread sender([&] {
      ::kill(::getpid(), SIGUSR1);
      for (int w = 0; w < 2000 && g_handled.load() == before; ++w) std::this_thread::sleep_for(std::chrono::microseconds(100));
      stop.store(true);
    });
    pool.run(3, [&](int) {
      while (!stop.load()) {
      }
    });
    sender.join();
    ASSERT_GT(g_handled.load(), before) << "signal " << k << " was never handled";
    for (pthread_t t : compute) EXPECT_FALSE(pthread_equal(t, g_handler_thread.load())) << "a compute thread ran the handler";
  }
  sigaction(SIGUSR1, &old, nullptr);
}
