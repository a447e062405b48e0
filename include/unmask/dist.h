// unmask/dist.h: the communicator of data-parallel training (issue 5).
//
// Usage (one process per rank, launched by `mpirun -np N build/unmask ...` or Slurm's `srun`):
//   unmask::Communicator& comm = unmask::Communicator::world();   // size 1 without a launcher
//   comm.broadcast(weights, nbytes, 0);                           // every rank starts from rank 0's
//   unmask::Request r = comm.iallreduce_sum(grads, n, "bucket 0");  // starts now, runs beside compute
//   ...                                                           // backward of the next layers
//   r.wait();                                                     // grads = sum over ranks
//   double sums[2] = {loss_sum, count};
//   comm.allreduce_sum(sums, 2);
//
// Backends. world() looks at the environment once: under mpirun (OMPI_COMM_WORLD_SIZE), an
// MPICH/Hydra or PMI launcher (PMI_SIZE), PMIx (PMIX_RANK) or srun (SLURM_STEP_NUM_TASKS) it
// initialises MPI and uses MPI_COMM_WORLD; otherwise it is a single-process communicator that
// makes no MPI call at all, so `build/unmask ...` runs exactly as without this layer and a build
// without MPI works. Several ranks launched on a build without MPI is an Error.
//
// Threads. All MPI calls (init, every operation, abort, finalize) are made by one communication
// thread that the MPI backend owns, so MPI_THREAD_FUNNELED is all it needs; it asks for
// MPI_THREAD_MULTIPLE so that other code (an NCCL bootstrap) may call MPI too, and accepts
// FUNNELED. Operations are queued to that thread in call order and run one at a time, which is
// what lets an iallreduce progress while the caller computes (Open MPI's shared-memory and TCP
// transports move data only inside MPI calls). Every rank must issue the same operations in the
// same order with the same sizes (MPI's rule for collectives).
//
// Timeouts. Every operation that has not completed `timeout_s()` seconds after it started (default
// 60, env UNMASK_DIST_TIMEOUT_S) prints "rank R: <operation> timed out after S s waiting for rank(s)
// ..." naming the peers whose messages are missing, and calls MPI_Abort: a rank that died or
// skipped a collective never leaves the others hanging. Set it above the longest stretch one rank
// may compute alone (rank 0 writing a checkpoint) while the others already wait.
//
// Deterministic sums. allreduce_sum does not call MPI_Allreduce, whose reduction order is the
// implementation's choice (Open MPI's tuned component switches algorithms with message size and
// rank count, and ring/rabenseifner orders start at different ranks per segment). It is a
// reduce-scatter + allgather over point-to-point messages: element i belongs to the rank owning
// its contiguous chunk (shard_range of the count), which adds the P contributions in rank order
// ((x0 + x1) + x2) + ... in the element type, then sends the result to every rank. So every rank
// gets the same bits, equal to a sequential rank-order sum, for any bucketing and any run with the
// same rank count. Traffic per rank is 2 (P-1)/P n elements, the same as a ring.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace unmask {

namespace detail {
struct RequestState;
}

/// A started operation. Default-constructed and moved-from requests are complete.
class Request {
 public:
  Request() = default;
  explicit Request(std::shared_ptr<detail::RequestState> state) : state_(std::move(state)) {}
  /// Blocks until the operation completed. (The communication thread enforces the timeout: a lost
  /// peer aborts the job rather than returning here.)
  void wait();
  /// True when the operation completed; never blocks.
  bool test() const;

 private:
  std::shared_ptr<detail::RequestState> state_;
};

class Communicator {
 public:
  struct Backend;  // src/dist/backend.h: local (one process) or MPI

  /// The communicator of all ranks of this job, created on first use (see the file comment).
  static Communicator& world();
  /// True when world() has been created (so an error handler can ask without initialising MPI).
  static bool world_initialized();
  /// True when this binary was built with the MPI backend (UNMASK_HAVE_MPI).
  static bool built_with_mpi();
  /// The number of ranks a launcher's environment announces: 0 when none is detected, -1 for a
  /// launcher that does not say (PMIx alone).
  static int launcher_size();

  explicit Communicator(std::unique_ptr<Backend> backend);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;  // rank among the ranks on this host (selects the GPU)
  int local_size() const;
  bool is_root() const { return rank() == 0; }
  const char* backend_name() const;     // "local" or "mpi"
  std::string host_of(int rank) const;  // host name of a rank ("" when unknown)

  double timeout_s() const { return timeout_s_; }
  void set_timeout_s(double seconds);  // > 0

  /// In place: data[i] = sum over ranks of data[i] (in rank order, see above). `what` names the
  /// operation in timeout messages. The buffer must stay untouched until the request completes.
  void allreduce_sum(float* data, int64_t n, const char* what = nullptr);
  void allreduce_sum(double* data, int64_t n, const char* what = nullptr);
  Request iallreduce_sum(float* data, int64_t n, const char* what = nullptr);
  Request iallreduce_sum(double* data, int64_t n, const char* what = nullptr);
  /// `bytes` bytes of `data` on `root` are copied to every other rank.
  void broadcast(void* data, size_t bytes, int root = 0, const char* what = nullptr);
  void barrier(const char* what = nullptr);
  /// Every rank contributes `bytes` bytes; recv (size() * bytes) gets them in rank order.
  void allgather_bytes(const void* send, size_t bytes, void* recv, const char* what = nullptr);
  /// Every rank contributes `mine` (same length on every rank): the values of rank 0, then 1, ...
  std::vector<double> allgather(const std::vector<double>& mine, const char* what = nullptr);
  /// A trivially copyable value from every rank, in rank order.
  template <typename T>
  std::vector<T> allgather_pod(const T& mine, const char* what = nullptr) {
    static_assert(std::is_trivially_copyable_v<T>, "allgather_pod needs a trivially copyable type");
    std::vector<T> all(static_cast<size_t>(size()));
    allgather_bytes(&mine, sizeof(T), all.data(), what);
    return all;
  }
  /// Prints "rank R: message" on stderr and ends every rank of the job with `code` (MPI_Abort; a
  /// single process exits). Never returns.
  [[noreturn]] void abort(int code, const std::string& message);

 private:
  std::unique_ptr<Backend> backend_;
  double timeout_s_ = 60.0;
};

}  // namespace unmask
