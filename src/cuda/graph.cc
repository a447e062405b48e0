// cuda/graph.cc: capture and replay of a CUDA graph (see graph.h).
#include "cuda/graph.h"

#include <cstdio>

#include "cuda/allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"

namespace unmask::cuda {

namespace {

/// Activates a private pool for this thread for the lifetime of the guard.
struct ActivePool {
  PoolId previous;
  explicit ActivePool(PoolId p) : previous(active_pool()) { set_active_pool(p); }
  ~ActivePool() { set_active_pool(previous); }
};

}  // namespace

std::unique_ptr<Graph> Graph::capture(Context& ctx, const std::function<void()>& work) {
  CudaState& st = cuda_state(ctx);
  UNMASK_CHECK(active_pool() == 0, "cuda graph: a capture is already running on this thread",
               Hint("graphs cannot be captured inside another capture"));
  CUDA_CHECK(cudaSetDevice(st.device));  // the pool and the teardown belong to the context's device
  std::unique_ptr<Graph> g(new Graph());
  g->device_ = st.device;
  g->pool_ = create_private_pool();
  ctx.make_current();  // Tensor::empty tags its blocks with this stream
  {
    ActivePool guard(g->pool_);
    work();  // warm-up: eager, inside the pool
    CUDA_CHECK(cudaStreamSynchronize(st.stream));  // its errors surface here, not in the capture

    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      // End the capture so the stream is usable again; the partial graph is discarded.
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(st.stream, &partial);
      if (partial) cudaGraphDestroy(partial);
      (void)cudaGetLastError();
      throw;
    }
    const cudaError_t e = cudaStreamEndCapture(st.stream, &graph);
    if (e != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      throw Error("cuda graph: the capture failed with ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                  "): the work did something a graph cannot hold (a host copy, a synchronisation, or work "
                  "on another stream)",
                  Hint("run without CUDA graphs (--cuda-graph off / ForwardOptions::cuda_graph = false)"));
    }
    g->graph_ = graph;
  }
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(g->graph_), nullptr, &nodes));
  g->num_nodes_ = nodes;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, static_cast<cudaGraph_t>(g->graph_), 0));
  g->exec_ = exec;
  return g;
}

void Graph::replay(Context& ctx) const {
  CudaState& st = cuda_state(ctx);
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), st.stream));
}

size_t Graph::pool_bytes() const { return private_pool_bytes(pool_); }

Graph::~Graph() {
  // The last replay may still be running; the pool's blocks go back only after it. (The
  // device, not the stream: the context that owned the stream may already be gone.)
  int previous = 0;
  cudaGetDevice(&previous);
  if (previous != device_) cudaSetDevice(device_);
  if (cudaDeviceSynchronize() != cudaSuccess)
    std::fprintf(stderr, "unmask: cuda graph teardown: device sync failed (%s)\n", cudaGetErrorString(cudaGetLastError()));
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  release_private_pool(pool_);
  if (previous != device_) cudaSetDevice(previous);
}

}  // namespace unmask::cuda
