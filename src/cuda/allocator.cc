// cuda/allocator.cc: the caching device allocator (see allocator.h for the contract).
#include "cuda/allocator.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/check.h"

namespace unmask::cuda {

namespace {

/// A cudaMalloc'ed block. `event` is created lazily and recorded on `stream` at free time.
struct Block {
  void* ptr = nullptr;
  size_t size = 0;           // class size (what cudaMalloc got)
  size_t requested = 0;      // what the live owner asked for
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  PoolId pool = 0;           // the private pool it belongs to (0 = shared)
};

/// A private pool: its free blocks (by class size) and what it got from cudaMalloc.
struct PrivatePool {
  std::unordered_map<size_t, std::vector<Block>> free_lists;
  size_t reserved_bytes = 0;
};

/// One device's cache. Free lists are keyed by class size.
struct DeviceCache {
  std::unordered_map<size_t, std::vector<Block>> free_lists;
  std::unordered_map<void*, Block> live;
  std::unordered_map<PoolId, PrivatePool> pools;
  AllocatorStats stats;
};

std::mutex g_mutex;
std::map<int, DeviceCache> g_caches;  // by device ordinal
PoolId g_next_pool = 1;
thread_local cudaStream_t t_current_stream = nullptr;
thread_local PoolId t_active_pool = 0;

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

/// Records b's last use on its stream in b.event, for reuse on another stream once it completes.
/// On any failure (event creation, or a record on a dead or foreign stream) the block keeps no
/// event, so it is reused on its own stream only: an event that was never recorded would read
/// as complete (cudaEventQuery gives cudaSuccess) while the block may still be in use. The
/// error is cleared so that no later CUDA_CHECK_LAUNCH reports it as its own.
void record_last_use(Block& b) noexcept {
  if (!b.event && cudaEventCreateWithFlags(&b.event, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    b.event = nullptr;
    return;
  }
  if (cudaEventRecord(b.event, b.stream) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaEventDestroy(b.event);
    b.event = nullptr;
  }
}

/// cudaFree's every free block of `cache` (the caller synchronised the device).
void release_free_blocks(DeviceCache& cache) {
  for (auto& [cls, list] : cache.free_lists) {
    for (Block& b : list) {
      if (b.event) cudaEventDestroy(b.event);
      cudaFree(b.ptr);
      cache.stats.reserved_bytes -= b.size;
      ++cache.stats.num_cuda_frees;
    }
    list.clear();
  }
}

}  // namespace

size_t allocator_size_class(size_t bytes) {
  if (bytes == 0) return 512;
  if (bytes <= 4096) return (bytes + 511) / 512 * 512;
  // Four classes per octave: 2^k * {1, 1.25, 1.5, 1.75}.
  int k = 63 - __builtin_clzll(uint64_t(bytes));  // 2^k <= bytes < 2^(k+1)
  const size_t base = size_t(1) << k, step = base / 4;
  return base + (bytes - base + step - 1) / step * step;
}

void* device_malloc(size_t bytes, void* stream_ptr) {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const size_t cls = allocator_size_class(bytes);
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceCache& cache = g_caches[dev];
  ++cache.stats.num_allocs;

  Block block;
  bool found = false;
  PrivatePool* pool = nullptr;
  if (t_active_pool != 0) {
    auto pit = cache.pools.find(t_active_pool);
    if (pit == cache.pools.end())
      throw Error("device_malloc: private pool ", t_active_pool, " is not on device ", dev,
                  Hint("activate a pool only on the device it was created on"));
    pool = &pit->second;
    auto it = pool->free_lists.find(cls);
    if (it != pool->free_lists.end() && !it->second.empty()) {  // the captured stream, in order
      block = it->second.back();
      it->second.pop_back();
      found = true;
    }
  }
  auto it = pool ? cache.free_lists.end() : cache.free_lists.find(cls);
  if (it != cache.free_lists.end()) {
    std::vector<Block>& list = it->second;
    // First choice: a block last used on the same stream (stream order makes it safe).
    for (size_t i = list.size(); i-- > 0;) {
      if (list[i].stream == stream) {
        block = list[i];
        list.erase(list.begin() + ptrdiff_t(i));
        found = true;
        break;
      }
    }
    // Else: a block whose last use on its own stream has finished.
    if (!found) {
      for (size_t i = list.size(); i-- > 0;) {
        if (list[i].event && cudaEventQuery(list[i].event) == cudaSuccess) {
          block = list[i];
          list.erase(list.begin() + ptrdiff_t(i));
          found = true;
          break;
        }
      }
      (void)cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not sticky; clear it
    }
  }
  if (found) {
    ++cache.stats.num_cache_hits;
  } else {
    // A pool's first use of a size may fall inside a stream capture (graph.h), where cudaMalloc
    // is a "potentially unsafe" call that would invalidate a thread-local capture: relax the
    // thread's capture mode around it (the allocation is not part of the graph; the pool keeps
    // it for the graph's lifetime). On failure, outside a capture: synchronise, hand the shared
    // cache's free blocks back and retry once (a capture cannot synchronise).
    void* p = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (pool) cudaThreadExchangeStreamCaptureMode(&mode);
    cudaError_t e = cudaMalloc(&p, cls);
    if (pool) cudaThreadExchangeStreamCaptureMode(&mode);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (e != cudaSuccess && (!pool || (cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
                                       capturing == cudaStreamCaptureStatusNone))) {
      (void)cudaGetLastError();
      CUDA_CHECK(cudaDeviceSynchronize());
      release_free_blocks(cache);
      e = cudaMalloc(&p, cls);
    }
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      throw Error("CUDA out of memory: cudaMalloc of ", cls, " bytes (request ", bytes, ")",
                  pool ? " for a CUDA graph's pool" : "", " on device ", dev, " failed with ", cudaGetErrorName(e),
                  "; device has ", free_b, " of ", total_b, " bytes free, this allocator holds ",
                  cache.stats.reserved_bytes,
                  Hint(pool ? "use a smaller batch, or run without CUDA graphs" : "use a smaller batch or sequence length"));
    }
    block.ptr = p;
    block.size = cls;
    block.pool = t_active_pool;
    if (pool) pool->reserved_bytes += cls;
    ++cache.stats.num_cuda_mallocs;
    cache.stats.reserved_bytes += cls;
    if (cache.stats.reserved_bytes > cache.stats.peak_reserved_bytes)
      cache.stats.peak_reserved_bytes = cache.stats.reserved_bytes;
  }
  block.stream = stream;
  block.requested = bytes;
  cache.stats.allocated_bytes += block.size;
  cache.stats.requested_bytes += bytes;
  if (cache.stats.allocated_bytes > cache.stats.peak_allocated_bytes)
    cache.stats.peak_allocated_bytes = cache.stats.allocated_bytes;
  if (cache.stats.requested_bytes > cache.stats.peak_requested_bytes)
    cache.stats.peak_requested_bytes = cache.stats.requested_bytes;
  cache.live.emplace(block.ptr, block);
  return block.ptr;
}

void device_free(void* p) noexcept {
  if (!p) return;
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [dev, cache] : g_caches) {
      auto it = cache.live.find(p);
      if (it == cache.live.end()) continue;
      Block b = it->second;
      cache.live.erase(it);
      cache.stats.allocated_bytes -= b.size;
      cache.stats.requested_bytes -= b.requested;
      if (b.pool != 0) {
        auto pit = cache.pools.find(b.pool);
        if (pit != cache.pools.end()) {  // back to its pool: no event (possibly mid-capture)
          pit->second.free_lists[b.size].push_back(b);
          return;
        }
        b.pool = 0;  // the pool was released: an ordinary block from now on
      }
      // Record where the stream is now, so that another stream can tell when it is safe.
      int prev = 0;
      cudaGetDevice(&prev);
      if (prev != dev) cudaSetDevice(dev);
      record_last_use(b);
      if (prev != dev) cudaSetDevice(prev);
      cache.free_lists[b.size].push_back(b);
      return;
    }
    std::fprintf(stderr, "unmask: device_free of unknown pointer %p ignored\n", p);
  } catch (...) {
    std::fprintf(stderr, "unmask: device_free(%p) failed; block leaked\n", p);
  }
}

void allocator_release_cached() {
  const int dev = current_device();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(g_mutex);
  release_free_blocks(g_caches[dev]);
}

void allocator_forget_stream(void* stream_ptr) noexcept {
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  if (!stream) return;
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [dev, cache] : g_caches) {
      for (auto& [ptr, b] : cache.live)
        if (b.stream == stream) b.stream = nullptr;
      for (auto& [cls, list] : cache.free_lists)
        for (Block& b : list)
          if (b.stream == stream) b.stream = nullptr;
      for (auto& [id, pool] : cache.pools)
        for (auto& [cls, list] : pool.free_lists)
          for (Block& b : list)
            if (b.stream == stream) b.stream = nullptr;
    }
  } catch (...) {
  }
}

PoolId create_private_pool() {
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  const PoolId id = g_next_pool++;
  g_caches[dev].pools.emplace(id, PrivatePool{});
  return id;
}

void set_active_pool(PoolId pool) noexcept { t_active_pool = pool; }
PoolId active_pool() noexcept { return t_active_pool; }

size_t private_pool_bytes(PoolId pool) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [dev, cache] : g_caches) {
    auto it = cache.pools.find(pool);
    if (it != cache.pools.end()) return it->second.reserved_bytes;
  }
  return 0;
}

void release_private_pool(PoolId pool) noexcept {
  if (pool == 0) return;
  try {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (auto& [dev, cache] : g_caches) {
      auto it = cache.pools.find(pool);
      if (it == cache.pools.end()) continue;
      // Free blocks join the shared lists with an event recorded now on their stream (the
      // graph that used them is gone; its last replay is ordered before this event).
      int prev = 0;
      cudaGetDevice(&prev);
      if (prev != dev) cudaSetDevice(dev);
      for (auto& [cls, list] : it->second.free_lists)
        for (Block b : list) {
          b.pool = 0;
          record_last_use(b);
          cache.free_lists[cls].push_back(b);
        }
      if (prev != dev) cudaSetDevice(prev);
      for (auto& [ptr, b] : cache.live)
        if (b.pool == pool) b.pool = 0;
      cache.pools.erase(it);
      return;
    }
  } catch (...) {
  }
}

AllocatorStats allocator_stats() {
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_caches[dev].stats;
}

void allocator_reset_peak() {
  const int dev = current_device();
  std::lock_guard<std::mutex> lock(g_mutex);
  AllocatorStats& s = g_caches[dev].stats;
  s.peak_allocated_bytes = s.allocated_bytes;
  s.peak_requested_bytes = s.requested_bytes;
  s.peak_reserved_bytes = s.reserved_bytes;
}

void* current_stream() noexcept { return t_current_stream; }
void set_current_stream(void* stream) noexcept { t_current_stream = static_cast<cudaStream_t>(stream); }

}  // namespace unmask::cuda
