// core/thread_pool.cc
#include "core/thread_pool.h"

#include <chrono>

namespace unmask {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  try {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (...) {  // a thread that cannot start (a container's process limit): stop those that did
    stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(int num_tasks, const std::function<void(int)>& task) {
  // One region at a time: a region started from inside a task, or from a second thread while
  // one runs, would overwrite the running region's task and counter (its workers would skip it
  // and it would never end). Such a region runs its tasks on the calling thread instead.
  const bool serial = num_tasks <= 1 || num_threads_ == 1 || busy_.exchange(true, std::memory_order_acquire);
  if (serial) {
    for (int i = 0; i < num_tasks; ++i) task(i);
    return;
  }
  struct ClearBusy {
    std::atomic<bool>& busy;
    ~ClearBusy() { busy.store(false, std::memory_order_release); }
  } clear_busy{busy_};
  if (num_tasks > num_threads_) num_tasks = num_threads_;
  error_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    num_tasks_ = num_tasks;
    remaining_.store(num_tasks - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  try {
    task(0);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
  while (remaining_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = nullptr;
    num_tasks_ = 0;
  }
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly for the next region before sleeping.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (generation_.load(std::memory_order_acquire) == seen && !stop_ &&
           std::chrono::steady_clock::now() < spin_until) {
    }
    // The region's task and size are read under the lock, with its generation. Read after the
    // lock, a worker left out of a small region could see the next, larger region's size and
    // task: it then ran that region's index twice (its counter went below zero: a hang) or a
    // task that had gone (tests/test_thread_pool.cc).
    const std::function<void(int)>* task = nullptr;
    int num_tasks = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load() != seen || stop_; });
      if (stop_) return;
      seen = generation_.load();
      task = task_;
      num_tasks = num_tasks_;
    }
    if (task != nullptr && index < num_tasks) {
      try {
        (*task)(index);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      remaining_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

}  // namespace unmask
