// dist/comm.cc: Communicator front-end (validation, labels, the world() choice) and the
// single-process backend. The MPI backend lives in comm_mpi.cc.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dist/backend.h"
#include "unmask/error.h"

namespace unmask {

// ---- Request ---------------------------------------------------------------------------------

void Request::wait() {
  if (!state_) return;
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
}

bool Request::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

namespace {

std::string this_host() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// ---- the single-process backend: every operation is complete at once -------------------------

class LocalBackend final : public Communicator::Backend {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  const char* name() const override { return "local"; }
  std::string host_of(int rank) const override { return rank == 0 ? this_host() : ""; }
  Request start(DistOp op) override {
    // A sum, broadcast or barrier over one rank leaves the data as it is.
    if (op.kind == DistOpKind::allgather && op.count > 0) std::memcpy(op.recv, op.send, size_t(op.count));
    return completed_request();
  }
  [[noreturn]] void abort(int code, const std::string& message) override {
    std::fprintf(stderr, "rank 0: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
};

// ---- launcher detection -----------------------------------------------------------------------

// The number of ranks the environment announces: 0 = no launcher, -1 = a launcher that does not
// say (PMIx alone), else the count. `source` names the variable.
int detect_launcher(const char** source) {
  static const char* kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
  for (const char* var : kSizeVars) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > (1L << 24))
      throw Error("dist: ", var, "='", v, "' is not a rank count",
                  Hint("the launcher's environment is corrupt; launch with mpirun -np N or srun -n N"));
    *source = var;
    return int(n);
  }
  if (const char* v = std::getenv("PMIX_RANK"); v && *v) {
    *source = "PMIX_RANK";
    return -1;
  }
  *source = "";
  return 0;
}

double timeout_from_env() {
  const char* v = std::getenv("UNMASK_DIST_TIMEOUT_S");
  if (!v || !*v) return 60.0;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (*end != '\0' || !std::isfinite(t) || t <= 0)
    throw Error("dist: UNMASK_DIST_TIMEOUT_S='", v, "' is not a positive number of seconds",
                Hint("e.g. UNMASK_DIST_TIMEOUT_S=120"));
  return t;
}

std::atomic<bool> g_world_ready{false};

std::unique_ptr<Communicator::Backend> make_world_backend() {
  const char* source = "";
  const int n = detect_launcher(&source);
  // mpirun -np 1 / srun -n 1 need no MPI either; PMIx alone may mean several ranks.
  if (n == 0 || n == 1) return make_local_backend();
  // srun --mpi=none (a common site default) announces the tasks but gives them no process-management
  // interface, so MPI_Init cannot wire them up (Open MPI aborts with a message about its build).
  if (std::strcmp(source, "SLURM_STEP_NUM_TASKS") == 0 && !std::getenv("PMIX_RANK") && !std::getenv("PMI_RANK")) {
    const char* type = std::getenv("SLURM_MPI_TYPE");
    throw Error("dist: srun started ", n, " tasks without a PMI/PMIx interface (SLURM_MPI_TYPE=",
                type && *type ? type : "unset", "), so the ranks cannot meet",
                Hint("launch with srun --mpi=pmix (srun --mpi=list shows the plugins), or salloc -n N mpirun ..."));
  }
  if (!Communicator::built_with_mpi()) {
    throw Error("dist: launched as one of ", n < 0 ? std::string("several") : std::to_string(n), " ranks (", source,
                " is set) but this unmask was built without MPI, so the ranks cannot meet",
                Hint("install Open MPI (apt-get install openmpi-bin libopenmpi-dev) and rebuild with "
                     "-DUNMASK_MPI=ON, or run a single process without mpirun/srun"));
  }
  return make_mpi_backend();
}

std::string label(const char* op, int64_t count, const char* unit, const char* what) {
  std::string s = std::string(op) + " of " + std::to_string(count) + " " + unit;
  if (what && *what) s += std::string(" (") + what + ")";
  return s;
}

}  // namespace

std::unique_ptr<Communicator::Backend> make_local_backend() {
  return std::make_unique<LocalBackend>();
}

#ifndef UNMASK_HAVE_MPI
std::unique_ptr<Communicator::Backend> make_mpi_backend() {
  throw Error("dist: this unmask was built without MPI", Hint("rebuild with -DUNMASK_MPI=ON"));
}
#endif

// ---- Communicator -----------------------------------------------------------------------------

Communicator& Communicator::world() {
  // A function-local static: created once (thread-safe), destroyed at exit, which finalizes MPI
  // after the communication thread has run every queued operation.
  static Communicator world(make_world_backend());
  g_world_ready.store(true);
  return world;
}

bool Communicator::world_initialized() {
  return g_world_ready.load();
}

bool Communicator::built_with_mpi() {
#ifdef UNMASK_HAVE_MPI
  return true;
#else
  return false;
#endif
}

int Communicator::launcher_size() {
  const char* source = "";
  return detect_launcher(&source);
}

Communicator::Communicator(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {
  UNMASK_CHECK(backend_ != nullptr, "dist: a communicator needs a backend");
  timeout_s_ = timeout_from_env();
}

Communicator::~Communicator() = default;

int Communicator::rank() const {
  return backend_->rank();
}
int Communicator::size() const {
  return backend_->size();
}
int Communicator::local_rank() const {
  return backend_->local_rank();
}
int Communicator::local_size() const {
  return backend_->local_size();
}
const char* Communicator::backend_name() const {
  return backend_->name();
}
std::string Communicator::host_of(int r) const {
  return backend_->host_of(r);
}

void Communicator::set_timeout_s(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds))
    throw Error("dist: timeout must be a positive number of seconds, got ", seconds);
  timeout_s_ = seconds;
}

namespace {
void check_buffer(const void* p, int64_t n, const char* op) {
  if (n < 0) throw Error("dist: ", op, ": negative count ", n);
  if (n > 0 && p == nullptr) throw Error("dist: ", op, ": null buffer for ", n, " elements");
}
}  // namespace

Request Communicator::iallreduce_sum(float* data, int64_t n, const char* what) {
  check_buffer(data, n, "iallreduce_sum");
  if (size() == 1 || n == 0) return completed_request();
  DistOp op;
  op.kind = DistOpKind::allreduce_sum;
  op.elem = DistElem::f32;
  op.data = data;
  op.count = n;
  op.timeout_s = timeout_s_;
  op.label = label("allreduce_sum", n, "f32", what);
  return backend_->start(std::move(op));
}

Request Communicator::iallreduce_sum(double* data, int64_t n, const char* what) {
  check_buffer(data, n, "iallreduce_sum");
  if (size() == 1 || n == 0) return completed_request();
  DistOp op;
  op.kind = DistOpKind::allreduce_sum;
  op.elem = DistElem::f64;
  op.data = data;
  op.count = n;
  op.timeout_s = timeout_s_;
  op.label = label("allreduce_sum", n, "f64", what);
  return backend_->start(std::move(op));
}

void Communicator::allreduce_sum(float* data, int64_t n, const char* what) {
  iallreduce_sum(data, n, what).wait();
}
void Communicator::allreduce_sum(double* data, int64_t n, const char* what) {
  iallreduce_sum(data, n, what).wait();
}

void Communicator::broadcast(void* data, size_t bytes, int root, const char* what) {
  check_buffer(data, int64_t(bytes), "broadcast");
  if (root < 0 || root >= size()) throw Error("dist: broadcast root ", root, " is not a rank of ", size());
  if (size() == 1 || bytes == 0) return;
  DistOp op;
  op.kind = DistOpKind::broadcast;
  op.data = data;
  op.count = int64_t(bytes);
  op.root = root;
  op.timeout_s = timeout_s_;
  op.label = label("broadcast", int64_t(bytes), "bytes", what) + " from rank " + std::to_string(root);
  backend_->start(std::move(op)).wait();
}

void Communicator::barrier(const char* what) {
  if (size() == 1) return;
  DistOp op;
  op.kind = DistOpKind::barrier;
  op.timeout_s = timeout_s_;
  op.label = (what && *what) ? std::string("barrier (") + what + ")" : std::string("barrier");
  backend_->start(std::move(op)).wait();
}

void Communicator::allgather_bytes(const void* send, size_t bytes, void* recv, const char* what) {
  check_buffer(send, int64_t(bytes), "allgather");
  check_buffer(recv, int64_t(bytes), "allgather");
  if (size() == 1) {
    if (bytes > 0) std::memcpy(recv, send, bytes);
    return;
  }
  DistOp op;
  op.kind = DistOpKind::allgather;
  op.send = send;
  op.recv = recv;
  op.count = int64_t(bytes);
  op.timeout_s = timeout_s_;
  op.label = label("allgather", int64_t(bytes), "bytes", what);
  backend_->start(std::move(op)).wait();
}

std::vector<double> Communicator::allgather(const std::vector<double>& mine, const char* what) {
  std::vector<double> all(mine.size() * size_t(size()));
  allgather_bytes(mine.data(), mine.size() * sizeof(double), all.data(), what);
  return all;
}

void Communicator::abort(int code, const std::string& message) {
  backend_->abort(code, message);
  std::_Exit(code);  // not reached: backends do not return
}

}  // namespace unmask
