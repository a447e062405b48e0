// dist/backend.h: what a Communicator backend implements (private to src/dist and the tests).
//
// A backend receives fully validated operations (DistOp) and returns a Request; the local backend
// completes them at once, the MPI backend queues them to its communication thread
// (comm_mpi.cc). Tests may implement a backend to watch what GradientSync launches.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "unmask/dist.h"

namespace unmask {

namespace detail {

/// Completion flag of one operation, set by the thread that ran it.
struct RequestState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;

  void complete() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace detail

enum class DistOpKind : uint8_t { allreduce_sum, broadcast, allgather, barrier };
enum class DistElem : uint8_t { f32, f64, bytes };

/// One operation as the backend sees it.
struct DistOp {
  DistOpKind kind = DistOpKind::barrier;
  DistElem elem = DistElem::bytes;
  void* data = nullptr;        // allreduce: in/out, `count` elements; broadcast: `count` bytes
  const void* send = nullptr;  // allgather: `count` bytes from this rank
  void* recv = nullptr;        // allgather: size * `count` bytes
  int64_t count = 0;
  int root = 0;  // broadcast
  double timeout_s = 60.0;
  std::string label;  // "allreduce_sum of 1048576 f32 (gradient bucket 2 of 7)"
};

struct Communicator::Backend {
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual const char* name() const = 0;
  virtual std::string host_of(int rank) const = 0;
  /// Starts `op` (validated by the Communicator: sizes, root, non-null buffers when count > 0).
  virtual Request start(DistOp op) = 0;
  [[noreturn]] virtual void abort(int code, const std::string& message) = 0;
};

/// A Request that is already complete.
inline Request completed_request() {
  return Request();
}

/// The MPI backend (comm_mpi.cc; only in builds with UNMASK_HAVE_MPI).
std::unique_ptr<Communicator::Backend> make_mpi_backend();
/// The single-process backend.
std::unique_ptr<Communicator::Backend> make_local_backend();

}  // namespace unmask
