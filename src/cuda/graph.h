// cuda/graph.h: a CUDA graph of the work one function queues on a context's stream.
//
// Launching BERT-base's ~100 kernels one by one costs more than the kernels themselves at
// batch 1 (a few microseconds each on the host); a graph replays all of them with one launch.
// A graph replays into the addresses it saw at capture time, so:
//   - its inputs must be written into buffers allocated before the capture (the caller's
//     job: copy new inputs in, replay, copy the outputs out);
//   - every block allocated while `work` runs comes from a private pool of the caching
//     allocator (allocator.h) that nothing else can take until the graph is destroyed.
//
// capture() runs `work` twice inside the pool: once eagerly (the warm-up: GEMM plans, kernel
// attributes, and the pool's blocks, so the capture itself needs no cudaMalloc) and once under
// stream capture in thread-local mode, where any call that would synchronise (a host copy, a
// device-wide sync) fails loudly instead of being silently left out of the graph. The work
// must therefore queue the same kernels on every run for the same shapes and never wait on
// the device. Other threads must leave the device alone while a capture runs: the context's
// stream is a blocking stream, so their legacy-stream copies (Tensor::to, copy_from) would
// synchronise with it and invalidate the capture (the capture then fails with an Error; replays
// have no such restriction). No CUDA headers here.
//
//   std::unique_ptr<cuda::Graph> g = cuda::Graph::capture(ctx, [&] { out = encoder(ctx, in); });
//   in_dev.copy_from(new_input); g->replay(ctx); result.copy_from(out);
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "unmask/context.h"

namespace unmask::cuda {

class Graph {
 public:
  /// Warm-up run, capture and instantiation on ctx's stream (see above). Throws Error naming
  /// the CUDA call when `work` does something a capture cannot hold; the stream is usable
  /// afterwards either way.
  static std::unique_ptr<Graph> capture(Context& ctx, const std::function<void()>& work);
  ~Graph();  // synchronises the device, destroys the graph, releases the pool; never throws
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Queues one replay on ctx's stream (asynchronous, like the kernels it holds).
  void replay(Context& ctx) const;
  /// Kernel and memcpy nodes in the graph, and the bytes its private pool holds.
  size_t num_nodes() const { return num_nodes_; }
  size_t pool_bytes() const;

 private:
  Graph() = default;
  void* graph_ = nullptr;   // cudaGraph_t
  void* exec_ = nullptr;    // cudaGraphExec_t
  uint64_t pool_ = 0;       // allocator PoolId
  int device_ = 0;          // the context's device
  size_t num_nodes_ = 0;
};

}  // namespace unmask::cuda
