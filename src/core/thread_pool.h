// core/thread_pool.h: a persistent pool that runs one parallel region at a time.
//
// The caller's thread takes chunk 0 and the workers chunks 1..n-1 (ggml's ith/nth
// partitioning). Workers spin for a short while after a region (BERT runs many small ops back
// to back, and a futex wake costs tens of microseconds) and then sleep on a condition variable.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace unmask {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  int size() const { return num_threads_; }
  /// Runs task(i) for i in [0, num_tasks) with num_tasks <= size(); blocks until done. A call
  /// made while another region runs (from a task, or from a second thread) runs its tasks on the
  /// calling thread, one after another.
  void run(int num_tasks, const std::function<void(int)>& task);

 private:
  void worker_loop(int index);
  void stop_workers();  // wakes and joins the workers

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};  // a region is running
  const std::function<void(int)>* task_ = nullptr;
  int num_tasks_ = 0;
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace unmask
