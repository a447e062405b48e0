// dist/comm_mpi.cc: the MPI backend of Communicator (compiled when CMake finds MPI).
//
// One communication thread makes every MPI call of the process: MPI_Init_thread, the operations
// (queued by any thread, run one at a time in queue order), MPI_Abort and MPI_Finalize. So the
// thread level needed is MPI_THREAD_FUNNELED (MULTIPLE is requested for other MPI users).
// Operations are built from non-blocking point-to-point messages on a private duplicate of
// MPI_COMM_WORLD and completed by an MPI_Testsome loop with backoff, which
//   - moves data while the caller computes (Open MPI progresses only inside MPI calls),
//   - knows which peers' messages are missing, so a timeout names the ranks that may be lost,
//   - fixes the reduction order (rank order, see unmask/dist.h) for bitwise reproducible sums.
// The C API only: mpi.h would otherwise pull in the deprecated C++ bindings (libmpi_cxx).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <set>
#include <thread>
#include <vector>

#include "dist/backend.h"
#include "dist/shard.h"
#include "unmask/error.h"

namespace unmask {

namespace {

using Clock = std::chrono::steady_clock;
using dist::Range;
using dist::shard_range;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Exit code of a job ended by a timeout (like coreutils' timeout).
constexpr int kTimeoutExitCode = 124;
constexpr const char* kMismatch =
    "the ranks called different operations or sizes (every rank must issue the same collectives in the same order)";

/// out[i] = ((src[0][i] + src[1][i]) + src[2][i]) + ... in T, in blocks that stay in L1. `out` may
/// be one of the sources (each block is read whole before it is written).
template <typename T>
void sum_in_rank_order(T* out, const T* const* src, int nsrc, int64_t n) {
  constexpr int64_t kBlock = 2048;
  T acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    std::memcpy(acc, src[0] + b, size_t(m) * sizeof(T));
    for (int q = 1; q < nsrc; ++q) {
      const T* s = src[q] + b;
      for (int64_t i = 0; i < m; ++i) acc[i] += s[i];
    }
    std::memcpy(out + b, acc, size_t(m) * sizeof(T));
  }
}

/// The requests of one phase of an operation, with the peer of each and, for receives, the
/// number of bytes that must arrive (-1 for sends).
struct Pending {
  std::vector<MPI_Request> reqs;
  std::vector<int> peer;
  std::vector<int64_t> recv_bytes;
  void add(MPI_Request r, int p, int64_t bytes) {
    reqs.push_back(r);
    peer.push_back(p);
    recv_bytes.push_back(bytes);
  }
};

class MpiBackend final : public Communicator::Backend {
 public:
  MpiBackend() {
    thread_ = std::thread([this] { thread_main(); });
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return init_done_; });
    if (!init_error_.empty()) {
      lock.unlock();
      thread_.join();
      throw Error("dist: ", init_error_);
    }
  }

  ~MpiBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  const char* name() const override { return "mpi"; }
  std::string host_of(int r) const override { return r >= 0 && r < int(hosts_.size()) ? hosts_[size_t(r)] : ""; }

  Request start(DistOp op) override {
    if (op.elem != DistElem::bytes || op.kind == DistOpKind::allreduce_sum) {
      // One message carries at most a chunk of the buffer; MPI counts are int.
      const int64_t chunk = shard_range(op.count, 0, size_).size();
      if (chunk > INT_MAX) throw Error("dist: ", op.label, ": chunks of ", chunk, " elements exceed MPI's int count");
    } else if (op.count > INT_MAX && op.kind == DistOpKind::allgather) {
      throw Error("dist: ", op.label, ": ", op.count, " bytes per rank exceed MPI's int count");
    }
    auto state = std::make_shared<detail::RequestState>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_ || finished_) throw Error("dist: ", op.label, " started after the communicator shut down");
      queue_.emplace_back(std::move(op), state);
    }
    cv_.notify_all();
    return Request(state);
  }

  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fprintf(stderr, "rank %d: %s\n", rank_, message.c_str());
    std::fflush(stderr);
    if (std::this_thread::get_id() == thread_.get_id()) abort_job(code);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (finished_) std::_Exit(code);  // MPI is finalized: end this process alone
      abort_code_ = code;
      abort_requested_.store(true);
    }
    cv_.notify_all();
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // MPI_Abort ends this process
  }

 private:
  // ---- the communication thread --------------------------------------------------------------

  void thread_main() {
    std::string error = init();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      init_error_ = error;
      init_done_ = true;
      if (!error.empty()) finished_ = true;
    }
    cv_.notify_all();
    if (!error.empty()) return;
    for (;;) {
      std::pair<DistOp, std::shared_ptr<detail::RequestState>> item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty() || abort_requested_.load(); });
        if (abort_requested_.load()) {
          lock.unlock();
          abort_job(abort_code_);
        }
        if (queue_.empty()) break;  // stop_ with nothing left to run
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      run(item.first);
      item.second->complete();
    }
    MPI_Comm_free(&comm_);
    MPI_Finalize();
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }

  std::string init() {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return "MPI_Init_thread failed";
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      return "the MPI library offers only MPI_THREAD_SINGLE; unmask needs MPI_THREAD_FUNNELED";
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    // Errors come back as codes so that they are reported with the operation's name.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    void* tag_ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
    tag_span_ = flag ? std::max(1, *static_cast<int*>(tag_ub) / 4) : 8191;
    // Host names, so that timeout messages say where a lost rank ran.
    char host[64] = {0};
    gethostname(host, sizeof(host) - 1);
    std::vector<char> all(static_cast<size_t>(size_) * sizeof(host));
    MPI_Allgather(host, int(sizeof(host)), MPI_CHAR, all.data(), int(sizeof(host)), MPI_CHAR, comm_);
    for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + size_t(r) * sizeof(host));
    return "";
  }

  [[noreturn]] void abort_job(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  [[noreturn]] void fail(const DistOp& op, const std::string& why, int code = 1) {
    std::fprintf(stderr, "rank %d: %s: %s; aborting the job\n", rank_, op.label.c_str(), why.c_str());
    std::fflush(stderr);
    abort_job(code);
  }

  void check(int rc, const DistOp& op, const std::string& call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail(op, call + " failed: " + text);
  }

  std::string describe_ranks(const std::set<int>& ranks) const {
    std::string s = ranks.size() == 1 ? "rank " : "ranks ";
    bool first = true;
    for (int r : ranks) {
      if (!first) s += ", ";
      first = false;
      s += std::to_string(r) + " (host " + host_of(r) + ")";
    }
    return s;
  }

  /// Completes every request of `p`, checking received sizes; aborts the job after the timeout.
  void wait_all(Pending& p, const DistOp& op, Clock::time_point t0) {
    const int n = int(p.reqs.size());
    std::vector<int> index(static_cast<size_t>(n));
    std::vector<MPI_Status> status(static_cast<size_t>(n));
    int left = n, idle_polls = 0;
    int64_t sleep_us = 0;
    Clock::time_point idle_since = t0;
    while (left > 0) {
      int done = 0;
      const int rc = MPI_Testsome(n, p.reqs.data(), &done, index.data(), status.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) check(rc, op, "MPI_Testsome");
      if (done == MPI_UNDEFINED) break;
      for (int k = 0; k < done; ++k) {
        const int i = index[size_t(k)];
        if (rc == MPI_ERR_IN_STATUS && status[size_t(k)].MPI_ERROR != MPI_SUCCESS) {
          int error_class = 0;
          MPI_Error_class(status[size_t(k)].MPI_ERROR, &error_class);
          const std::string peer = "rank " + std::to_string(p.peer[size_t(i)]);
          if (error_class == MPI_ERR_TRUNCATE) fail(op, peer + " sent more than this rank expected: " + kMismatch);
          check(status[size_t(k)].MPI_ERROR, op, "a message from or to " + peer);
        }
        if (p.recv_bytes[size_t(i)] >= 0) {
          int got = 0;
          MPI_Get_count(&status[size_t(k)], MPI_BYTE, &got);
          if (got != p.recv_bytes[size_t(i)])
            fail(op, "rank " + std::to_string(p.peer[size_t(i)]) + " sent " + std::to_string(got) +
                         " bytes where this rank expected " + std::to_string(p.recv_bytes[size_t(i)]) + ": " +
                         kMismatch);
        }
      }
      left -= done;
      if (left == 0) break;
      if (abort_requested_.load()) abort_job(abort_code_);
      if (done > 0) {
        idle_polls = 0;
        sleep_us = 0;
        continue;
      }
      if (seconds_since(t0) > op.timeout_s) {
        std::set<int> missing;
        for (int i = 0; i < n; ++i)
          if (p.reqs[size_t(i)] != MPI_REQUEST_NULL) missing.insert(p.peer[size_t(i)]);
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%.1f", op.timeout_s);
        const std::string who = missing.count(-1) ? std::string("the other ranks (") + "MPI_Ibcast cannot tell which)"
                                                  : describe_ranks(missing);
        fail(op,
             std::string("timed out after ") + secs + " s waiting for " + who +
                 "; it may have died, hung, or skipped this operation (raise UNMASK_DIST_TIMEOUT_S if a rank "
                 "legitimately works alone this long)",
             kTimeoutExitCode);
      }
      // Poll (yielding) for 0.3 ms since the last progress, which is what small messages need,
      // then sleep with backoff up to 0.2 ms so that a waiting rank leaves the cores to compute.
      if (idle_polls++ == 0) idle_since = Clock::now();
      if (seconds_since(idle_since) < 3e-4) {
        std::this_thread::yield();
      } else {
        sleep_us = std::min<int64_t>(sleep_us * 2 + 10, 200);
        std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      }
    }
  }

  int tag(int phase) const { return int(seq_ % uint64_t(tag_span_)) * 4 + phase; }

  void run(const DistOp& op) {
    const Clock::time_point t0 = Clock::now();
    switch (op.kind) {
      case DistOpKind::allreduce_sum:
        if (op.elem == DistElem::f32)
          allreduce<float>(op, MPI_FLOAT, t0);
        else
          allreduce<double>(op, MPI_DOUBLE, t0);
        break;
      case DistOpKind::allgather:
        allgather(op, op.send, op.recv, op.count, t0);
        break;
      case DistOpKind::barrier:
        allgather(op, nullptr, nullptr, 0, t0);
        break;
      case DistOpKind::broadcast:
        broadcast(op, t0);
        break;
    }
    ++seq_;
  }

  /// Reduce-scatter (rank q adds chunk q in rank order) + allgather of the summed chunks.
  template <typename T>
  void allreduce(const DistOp& op, MPI_Datatype type, Clock::time_point t0) {
    T* data = static_cast<T*>(op.data);
    const int64_t n = op.count;
    const Range mine = shard_range(n, rank_, size_);
    const int64_t m = mine.size();
    scratch_.resize(static_cast<size_t>(size_ - 1) * size_t(m) * sizeof(T) / sizeof(double) + 1);
    T* incoming = reinterpret_cast<T*>(scratch_.data());
    auto slot = [&](int q) { return incoming + size_t(q < rank_ ? q : q - 1) * size_t(m); };

    Pending scatter;
    for (int k = 1; k < size_; ++k) {  // receives first, peers in rotated order
      const int q = (rank_ + k) % size_;
      MPI_Request r;
      if (m > 0) {
        check(MPI_Irecv(slot(q), int(m), type, q, tag(1), comm_, &r), op, "MPI_Irecv");
        scatter.add(r, q, m * int64_t(sizeof(T)));
      }
    }
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      const Range theirs = shard_range(n, q, size_);
      MPI_Request r;
      if (theirs.size() > 0) {
        check(MPI_Isend(data + theirs.begin, int(theirs.size()), type, q, tag(1), comm_, &r), op, "MPI_Isend");
        scatter.add(r, q, -1);
      }
    }
    wait_all(scatter, op, t0);

    std::vector<const T*> src(static_cast<size_t>(size_));
    for (int q = 0; q < size_; ++q) src[size_t(q)] = q == rank_ ? data + mine.begin : slot(q);
    sum_in_rank_order(data + mine.begin, src.data(), size_, m);

    Pending gather;
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      const Range theirs = shard_range(n, q, size_);
      MPI_Request r;
      if (theirs.size() > 0) {
        check(MPI_Irecv(data + theirs.begin, int(theirs.size()), type, q, tag(2), comm_, &r), op, "MPI_Irecv");
        gather.add(r, q, theirs.size() * int64_t(sizeof(T)));
      }
    }
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      MPI_Request r;
      if (m > 0) {
        check(MPI_Isend(data + mine.begin, int(m), type, q, tag(2), comm_, &r), op, "MPI_Isend");
        gather.add(r, q, -1);
      }
    }
    wait_all(gather, op, t0);
  }

  /// Every rank sends its `bytes` to every other rank (a barrier when bytes == 0: zero-byte
  /// messages still have to arrive, so a missing rank is named).
  void allgather(const DistOp& op, const void* send, void* recv, int64_t bytes, Clock::time_point t0) {
    char* out = static_cast<char*>(recv);
    if (bytes > 0) std::memcpy(out + size_t(rank_) * size_t(bytes), send, size_t(bytes));
    char dummy_recv = 0, dummy_send = 0;
    Pending p;
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      MPI_Request r;
      void* dst = bytes > 0 ? static_cast<void*>(out + size_t(q) * size_t(bytes)) : &dummy_recv;
      check(MPI_Irecv(dst, int(bytes), MPI_BYTE, q, tag(3), comm_, &r), op, "MPI_Irecv");
      p.add(r, q, bytes);
    }
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      MPI_Request r;
      const void* src = bytes > 0 ? send : &dummy_send;
      check(MPI_Isend(src, int(bytes), MPI_BYTE, q, tag(3), comm_, &r), op, "MPI_Isend");
      p.add(r, q, -1);
    }
    wait_all(p, op, t0);
  }

  /// MPI_Ibcast (a tree, not root sending size-1 copies), in pieces of at most 1 GiB.
  void broadcast(const DistOp& op, Clock::time_point t0) {
    char* data = static_cast<char*>(op.data);
    constexpr int64_t kPiece = int64_t(1) << 30;
    for (int64_t off = 0; off < op.count; off += kPiece) {
      const int len = int(std::min(kPiece, op.count - off));
      Pending p;
      MPI_Request r;
      check(MPI_Ibcast(data + off, len, MPI_BYTE, op.root, comm_, &r), op, "MPI_Ibcast");
      p.add(r, -1, -1);
      wait_all(p, op, t0);
    }
  }

  // ---- state ----------------------------------------------------------------------------------

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<DistOp, std::shared_ptr<detail::RequestState>>> queue_;
  bool init_done_ = false, stop_ = false, finished_ = false;
  std::string init_error_;
  std::atomic<bool> abort_requested_{false};
  int abort_code_ = 1;

  // Written by the communication thread before init_done_, read-only afterwards.
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int tag_span_ = 8191;
  std::vector<std::string> hosts_;

  // Used by the communication thread only.
  uint64_t seq_ = 0;             // operations run so far (the same on every rank)
  std::vector<double> scratch_;  // incoming chunks of an allreduce, (size-1) x chunk
};

}  // namespace

std::unique_ptr<Communicator::Backend> make_mpi_backend() {
  return std::make_unique<MpiBackend>();
}

}  // namespace unmask
