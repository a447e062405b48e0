// cuda/allocator.h: the caching device allocator behind Tensor::empty(..., Device::cuda).
//
// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, so device
// memory is kept in per-device free lists after its first allocation (PyTorch's caching
// allocator, much reduced). Never managed memory.
//
// Size classes: a request is rounded up to a class (512 B multiples up to 4 KiB, then four
// classes per power of two: 1, 1.25, 1.5, 1.75 x 2^k, so at most 25% is wasted), and each class
// has its own free list.
//
// Stream-ordered reuse: every block is tagged with the stream it was allocated for. A freed
// block goes back to its class's list at once; the next request *on the same stream* may take
// it immediately (later work on that stream runs after the work that used the block). A request
// on another stream takes it only after an event recorded at free time has completed. Memory
// used on a second stream must be kept alive by the caller until that stream is done (as with
// PyTorch's record_stream). When cudaMalloc fails, the allocator synchronises the device,
// returns every cached block with cudaFree and tries once more.
//
// Thread-safe (one mutex). No CUDA headers here: streams are passed as void* (cudaStream_t).
//
//   void* p = cuda::device_malloc(bytes, stream);
//   ...kernels on `stream` use p...
//   cuda::device_free(p);                    // never throws
//   cuda::AllocatorStats s = cuda::allocator_stats();  // s.peak_allocated_bytes ...
#pragma once
#include <cstddef>
#include <cstdint>

namespace unmask::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live blocks handed out (class-rounded sizes)
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  size_t requested_bytes = 0;       // in live blocks, as requested
  size_t peak_requested_bytes = 0;  // high-water mark of requested_bytes (PyTorch's
                                    // max_memory_allocated counts about this: 512-byte rounding)
  size_t reserved_bytes = 0;        // obtained from cudaMalloc (live + cached)
  size_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;          // device_malloc calls
  uint64_t num_cache_hits = 0;      // served from a free list
  uint64_t num_cuda_mallocs = 0;
  uint64_t num_cuda_frees = 0;
};

/// Size class a request of `bytes` is rounded up to (exposed for tests).
size_t allocator_size_class(size_t bytes);

/// Device memory of at least `bytes` (256-byte aligned) on the current device, for use on
/// `stream` (a cudaStream_t; nullptr = the legacy default stream). bytes == 0 gives a valid
/// unique pointer. Throws Error when the device is out of memory even after emptying the cache.
void* device_malloc(size_t bytes, void* stream);

/// Returns p (from device_malloc; null is ignored) to the cache. Never throws: an unknown
/// pointer or a CUDA error here is reported on stderr and ignored (destructors call this).
void device_free(void* p) noexcept;

/// Synchronises the device and cudaFree's every cached (free) block.
void allocator_release_cached();

/// Called when `stream` is about to be destroyed (after it was synchronised): blocks tagged
/// with it are re-tagged with the legacy default stream, so that freeing them later never
/// touches the dead stream. Never throws.
void allocator_forget_stream(void* stream) noexcept;

// ---- private pools (CUDA graph capture) ---------------------------------------------------
//
// A captured graph replays into the addresses its kernels saw at capture time, so the blocks
// it used must not be handed to anyone else while the graph lives (PyTorch's graph pools,
// much reduced). While a pool is active on a thread (set_active_pool), device_malloc on that
// thread serves requests from the pool only (its own free list, else cudaMalloc) and
// device_free returns the pool's blocks to the pool (no events: a pool's blocks are used on
// the one stream being captured, in order). Blocks of a pool never enter the shared free
// lists until release_private_pool, which hands back the free ones and lets the live ones go
// to the shared lists when they are freed.
//
//   PoolId pool = create_private_pool();
//   set_active_pool(pool);  ...warm-up and capture...  set_active_pool(0);
//   ...replays...
//   release_private_pool(pool);   // after the graph is destroyed and its stream synchronised

using PoolId = uint64_t;  // 0 = the shared cache

/// A new, empty pool on the current device.
PoolId create_private_pool();
/// Makes `pool` (0 = none) the pool of this thread's device_malloc calls. Never throws.
void set_active_pool(PoolId pool) noexcept;
PoolId active_pool() noexcept;
/// Bytes obtained from cudaMalloc for `pool` (live + free).
size_t private_pool_bytes(PoolId pool);
/// Ends `pool` (see above). Never throws; an unknown id is ignored.
void release_private_pool(PoolId pool) noexcept;

/// Stats for the current device.
AllocatorStats allocator_stats();
/// Resets the peaks of the current device to the current values.
void allocator_reset_peak();

/// The stream Tensor::empty/zeros on Device::cuda tag their memory with, per thread. Set by
/// a CUDA Context when it is created (and by Context::make_current()); nullptr (legacy default
/// stream) until then.
void* current_stream() noexcept;
void set_current_stream(void* stream) noexcept;

}  // namespace unmask::cuda
