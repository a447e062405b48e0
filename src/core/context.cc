// core/context.cc
#include "unmask/context.h"
#include "unmask/error.h"

#include <algorithm>
#include <thread>

#include "core/thread_pool.h"
#include "cpu/blas.h"
#include "cpu/kernels.h"

namespace unmask {

Context::Context(const ContextOptions& options) : options_(options) {
  num_threads_ = options.num_threads > 0 ? options.num_threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(num_threads_);
  cpu::blas_set_num_threads(num_threads_);
  if (options.device == Device::cuda) {
#ifndef UNMASK_WITH_CUDA
    throw Unsupported("device cuda requested but this build has no CUDA backend",
                      Hint("rebuild with -DUNMASK_CUDA=ON on a machine with the CUDA toolkit"));
#endif
  }
}

Context::~Context() = default;

void Context::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n);
    return;
  }
  pool_->run(int(chunks), [&](int i) {
    int64_t begin = n * i / chunks, end = n * (i + 1) / chunks;
    if (begin < end) fn(begin, end);
  });
}

const char* Context::cpu_isa() const { return cpu::kernels().name; }

}  // namespace unmask
