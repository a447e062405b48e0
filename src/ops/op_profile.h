// ops/op_profile.h: time per op front-end (`bench train|videomae|infer --profile`).
//
// A Context with profiling on (Context::set_op_profiling) times every call of an op front-end
// (src/ops: ops::OpScope at the top of each): on the CPU with the steady clock around the call,
// on CUDA with a pair of events recorded on the context's stream around the work it queues (read
// back, after a synchronisation, by take()). Only the outermost op of a nested call is timed, so
// the op times add up to at most the step; what is left (host work, allocation, copies through
// Tensor::copy_from) is the rest of the step. Event records cost a few microseconds an op: a
// profiled step is slower than a plain one, so benchmarks time their rows without it. Ops
// queued while the stream is being captured into a CUDA graph are not timed (a replay runs no
// op front-end either: profile eager runs).
//
// Beside each op's time, the host's time inside its front-end calls (host_ms) and the time
// outside any op just before it (gap_before_ms: on CUDA, from the previous timed op's end event
// to this one's start event), so the rest of a step is located: a gap before the op that follows
// a synchronisation (loss read-back, gradient norm, a pageable upload) is the device waiting for
// the host.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "unmask/context.h"

namespace unmask {

class OpProfiler {
 public:
  /// `cuda_stream`: the context's stream (events), or null for a CPU context (steady clock).
  /// by_shape: begin(op, detail) books each detail (a GEMM's shape) as its own row.
  OpProfiler(void* cuda_stream, bool by_shape);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  void begin(const char* op);
  /// begin(op) booked as "op detail" (e.g. a GEMM's shape) when detail mode is on
  /// (by_shape at construction), as plain op otherwise. `detail` is called only
  /// in detail mode and only for an outermost op (its string is the cost).
  template <typename DetailFn>
  void begin(const char* op, DetailFn&& detail) {
    if (!details_ || depth_ > 0) return begin(op);
    begin(intern(std::string(op) + " " + detail()));
  }
  bool details() const { return details_; }
  void end();
  /// The per-op totals since construction or the last take() (synchronises the stream), most
  /// time first; resets them.
  std::vector<OpTime> take();

 private:
  struct Pending {  // a CUDA call's events, read at take()
    const char* op;
    void* start;
    void* stop;
    double host_ms;
  };
  /// A stable const char* for name (the pending calls keep op pointers until take()).
  const char* intern(const std::string& name);
  void* stream_;
  bool details_ = false;
  std::set<std::string> names_;
  int depth_ = 0;
  bool timing_ = false;  // the outermost open op is being timed (not during a graph capture)
  const char* op_ = nullptr;
  double t0_ = 0;
  double last_end_ = -1;  // CPU: the host clock at the last timed op's end (< 0: none since take())
  std::map<std::string, OpTime> totals_;
  std::vector<Pending> pending_;
  std::vector<void*> spare_events_;
  void* event();
};

}  // namespace unmask
