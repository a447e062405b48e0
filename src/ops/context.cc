// ops/context.cc: Context, the threads and backend state the op front-ends dispatch with
#include "unmask/context.h"
#include "unmask/error.h"

#include <algorithm>
#include <thread>

#include "ops/op_profile.h"
#include "core/thread_pool.h"
#include "cpu/blas.h"
#include "cpu/kernels.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"
#else
namespace unmask::cuda {
class CudaState {};  // never created without the CUDA backend
}  // namespace unmask::cuda
#endif

namespace unmask {

Context::Context(const ContextOptions& options) : options_(options) {
  num_threads_ = options.num_threads > 0 ? options.num_threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  pool_ = std::make_unique<ThreadPool>(num_threads_);
  cpu::blas_set_num_threads(num_threads_);
  if (options.device == Device::cuda) {
#ifdef UNMASK_WITH_CUDA
    cuda_ = std::make_unique<cuda::CudaState>(options_);
#else
    throw Unsupported("device cuda requested but this build has no CUDA backend",
                      Hint("rebuild with -DUNMASK_CUDA=ON on a machine with the CUDA toolkit"));
#endif
  }
}

Context::~Context() = default;

void Context::set_op_profiling(bool on, bool by_shape) {
  if (on && (!profiler_ || profiler_->details() != by_shape)) profiler_ = std::make_unique<OpProfiler>(cuda_stream(), by_shape);
  if (!on) profiler_.reset();
}

std::vector<OpTime> Context::take_op_profile() { return profiler_ ? profiler_->take() : std::vector<OpTime>{}; }

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

void* Context::cuda_stream() const {
#ifdef UNMASK_WITH_CUDA
  return cuda_ ? static_cast<void*>(cuda_->stream) : nullptr;
#else
  return nullptr;
#endif
}

void Context::synchronize() const {
#ifdef UNMASK_WITH_CUDA
  if (cuda_) CUDA_CHECK(cudaStreamSynchronize(cuda_->stream));
#endif
}

void Context::make_current() const {
#ifdef UNMASK_WITH_CUDA
  if (cuda_) cuda::set_current_stream(cuda_->stream);
#endif
}

BuildInfo build_info() {
  BuildInfo b;
  b.cpu_isa = cpu::kernels().name;
  b.cpu_bf16_unit = cpu::bf16_unit();
#ifdef UNMASK_WITH_CUDA
  b.cuda = true;
  b.cuda_devices = cuda::device_count();
#ifdef UNMASK_CUDA_ARCH_LIST
  b.cuda_archs = UNMASK_CUDA_ARCH_LIST;
#endif
#endif
#ifdef UNMASK_HAVE_MPI
  b.mpi = true;
#endif
#ifdef UNMASK_HAVE_NCCL
  b.nccl = true;
#endif
#ifdef UNMASK_WITH_DNNL
  b.dnnl = true;
#endif
  return b;
}

}  // namespace unmask
