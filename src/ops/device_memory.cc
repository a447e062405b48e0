// ops/device_memory.cc: the device memory core's Tensor uses (core/device_memory.h), on the
// backends: CUDA's caching allocator and copies, or an Unsupported error in a CPU-only build.
#include "core/device_memory.h"

#include "unmask/error.h"
#ifdef UNMASK_WITH_CUDA
#include "cuda/allocator.h"
#include "cuda/copy.h"
#endif

namespace unmask::detail {

namespace {
[[noreturn]] void no_backend(Device device, const char* what) {
  throw Unsupported(what, " on ", device_name(device), " needs the CUDA backend", Hint("rebuild with -DUNMASK_CUDA=ON"));
}
}  // namespace

void* device_alloc(Device device, size_t bytes) {
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::device_malloc(bytes, cuda::current_stream());
#endif
  (void)bytes;
  no_backend(device, "Tensor::empty");
}

void device_free(Device device, void* p) {
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::device_free(p);
#endif
  (void)device;
  (void)p;
}

void device_memset_zero(Device device, void* p, size_t bytes) {
#ifdef UNMASK_WITH_CUDA
  if (device == Device::cuda) return cuda::memset_zero(p, bytes);
#endif
  (void)p;
  (void)bytes;
  no_backend(device, "Tensor::zeros");
}

void device_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) {
#ifdef UNMASK_WITH_CUDA
  return cuda::copy_2d(dst, dpitch, src, spitch, width, rows);
#else
  (void)dst, (void)dpitch, (void)src, (void)spitch, (void)width, (void)rows;
  throw Unsupported("copy_from across devices needs the CUDA backend", Hint("rebuild with -DUNMASK_CUDA=ON"));
#endif
}

}  // namespace unmask::detail
