// data/text/parallel.h: dynamic work sharing for the data pipeline's coarse tasks.
//
//   parallel_chunks(n, /*chunk=*/256, threads, [&](int64_t begin, int64_t end) { ... });
//
// Chunks of `chunk` items are handed out in order from an atomic counter to num_threads
// threads (the caller's included), so uneven items (long and short documents) balance. Each
// chunk index maps to a fixed item range, so results stored per chunk are independent of the
// thread count. The first exception stops the hand-out and is rethrown after every thread
// has joined.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace unmask::data {

inline void parallel_chunks(int64_t n, int64_t chunk, int num_threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  const int threads = int(std::max<int64_t>(1, std::min<int64_t>(num_threads, num_chunks)));
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (;;) {
      const int64_t c = next.fetch_add(1);
      if (c >= num_chunks) return;
      try {
        fn(c * chunk, std::min(n, (c + 1) * chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = num_chunks;  // stop handing out work
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (...) {  // a thread that cannot start: stop handing out work, join those that did
    next = num_chunks;
    for (auto& t : pool) t.join();
    throw;
  }
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace unmask::data
