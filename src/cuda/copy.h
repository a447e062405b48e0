// cuda/copy.h: host-callable memory helpers used by Tensor (src/core/tensor.cc) for
// Device::cuda tensors. No CUDA headers here.
//
// Both run on the legacy default stream and are synchronous with respect to the host for
// pageable host memory. Context streams are blocking streams (cuda_state.h), so these calls
// are ordered after work already queued on any Context and before work queued later.
#pragma once
#include <cstddef>

namespace unmask::cuda {

/// Zeroes `bytes` bytes of device memory at p.
void memset_zero(void* p, size_t bytes);

/// Copies `rows` rows of `width_bytes` bytes; row r starts at src + r*spitch and lands at
/// dst + r*dpitch. Either side may be host or device memory (the direction is inferred).
void copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width_bytes, size_t rows);

}  // namespace unmask::cuda
