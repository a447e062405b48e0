// ops/op_profile.cc: see op_profile.h.
#include "ops/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "unmask/error.h"
#ifdef UNMASK_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/check.h"
#endif

namespace unmask {

namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

OpProfiler::OpProfiler(void* cuda_stream, bool by_shape) : stream_(cuda_stream), details_(by_shape) {}

const char* OpProfiler::intern(const std::string& name) { return names_.insert(name).first->c_str(); }

OpProfiler::~OpProfiler() {
#ifdef UNMASK_WITH_CUDA
  if (stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  for (const Pending& p : pending_) {
    cudaEventDestroy(static_cast<cudaEvent_t>(p.start));
    cudaEventDestroy(static_cast<cudaEvent_t>(p.stop));
  }
  for (void* e : spare_events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

void* OpProfiler::event() {
#ifdef UNMASK_WITH_CUDA
  if (!spare_events_.empty()) {
    void* e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));
  return e;
#else
  return nullptr;
#endif
}

void OpProfiler::begin(const char* op) {
  if (depth_ > 0) {  // nested in a timed op: part of its time
    ++depth_;
    return;
  }
  // The depth counts this op only once its timing has started: an event that cannot be made
  // throws from here (OpScope's constructor) and leaves the profiler as it was.
  timing_ = false;
#ifdef UNMASK_WITH_CUDA
  if (stream_) {
    // Work captured into a CUDA graph is not timed: events recorded during a capture become
    // graph nodes, not timestamps of this call.
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(stream_), &capturing) != cudaSuccess ||
        capturing != cudaStreamCaptureStatusNone) {
      (void)cudaGetLastError();
      ++depth_;
      return;
    }
    Pending p{op, nullptr, nullptr, 0.0};
    try {
      p.start = event();
      p.stop = event();
      CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(p.start), static_cast<cudaStream_t>(stream_)));
    } catch (...) {
      for (void* e : {p.start, p.stop})
        if (e) spare_events_.push_back(e);
      throw;
    }
    pending_.push_back(p);
    op_ = op;
    t0_ = now_ms();
    timing_ = true;
    ++depth_;
    return;
  }
#endif
  op_ = op;
  t0_ = now_ms();
  if (last_end_ >= 0) {
    OpTime& t = totals_[op_];
    t.op = op_;
    t.gap_before_ms += t0_ - last_end_;
  }
  timing_ = true;
  ++depth_;
}

void OpProfiler::end() {
  if (--depth_ > 0 || !timing_) return;
  timing_ = false;
#ifdef UNMASK_WITH_CUDA
  if (stream_) {
    pending_.back().host_ms = now_ms() - t0_;
    // Never throws (called from OpScope's destructor): a failed record leaves the pair unread.
    if (cudaEventRecord(static_cast<cudaEvent_t>(pending_.back().stop), static_cast<cudaStream_t>(stream_)) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      pending_.back().op = nullptr;
    }
    return;
  }
#endif
  last_end_ = now_ms();
  OpTime& t = totals_[op_];
  t.op = op_;
  ++t.calls;
  t.ms += last_end_ - t0_;
  t.host_ms += last_end_ - t0_;
}

std::vector<OpTime> OpProfiler::take() {
#ifdef UNMASK_WITH_CUDA
  if (stream_) {
    CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
    const Pending* previous = nullptr;  // the last call read, for the gap before the next
    std::map<std::pair<std::string, std::string>, double> pair_gaps;  // (previous op, op) -> ms
    for (const Pending& p : pending_) {
      float ms = 0, gap = 0;
      if (p.op && cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(p.start), static_cast<cudaEvent_t>(p.stop)) ==
                      cudaSuccess) {
        OpTime& t = totals_[p.op];
        t.op = p.op;
        ++t.calls;
        t.ms += ms;
        t.host_ms += p.host_ms;
        if (previous && cudaEventElapsedTime(&gap, static_cast<cudaEvent_t>(previous->stop),
                                             static_cast<cudaEvent_t>(p.start)) == cudaSuccess)
          t.gap_before_ms += gap, pair_gaps[{previous->op, p.op}] += gap;
        (void)cudaGetLastError();
        previous = &p;
      } else {
        (void)cudaGetLastError();
        previous = nullptr;  // no end event to measure from
      }
    }
    for (const Pending& p : pending_) {
      spare_events_.push_back(p.start);
      spare_events_.push_back(p.stop);
    }
    pending_.clear();
    for (const auto& [ops, ms] : pair_gaps) {
      OpTime& t = totals_[ops.second];
      if (ms > t.gap_mostly_after_ms) t.gap_mostly_after = ops.first, t.gap_mostly_after_ms = ms;
    }
  }
#endif
  std::vector<OpTime> out;
  for (auto& [name, t] : totals_)
    if (t.calls > 0) out.push_back(t);  // (a CPU op's gap is booked at begin(), its call at end())
  totals_.clear();
  last_end_ = -1;
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace unmask
