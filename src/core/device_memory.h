// core/device_memory.h: what a Tensor asks of the device backends (memory on a device and copies
// to, from and within it). Declared here, defined by the dispatch layer (ops/device_memory.cc),
// which holds the backend's headers: core itself includes none.
#pragma once
#include <cstddef>

#include "unmask/device.h"

namespace unmask::detail {

/// `bytes` of memory on `device` (not the CPU), e.g. from CUDA's caching allocator on the
/// calling thread's current stream; throws Unsupported in a build without that backend.
void* device_alloc(Device device, size_t bytes);
/// Returns what device_alloc gave.
void device_free(Device device, void* p);
/// Zeroes `bytes` at p on `device`.
void device_memset_zero(Device device, void* p, size_t bytes);
/// A 2-D copy of `rows` rows of `width` bytes (pitches in bytes) where either side may be device
/// memory; throws Unsupported without a device backend.
void device_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows);

}  // namespace unmask::detail
