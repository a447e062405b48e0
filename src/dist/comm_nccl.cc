// dist/comm_nccl.cc: NcclCommunicator (CUDA builds with NCCL only; see nccl_comm.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <thread>

#include "dist/nccl_comm.h"
#include "unmask/error.h"

namespace unmask::dist {

namespace {

using Clock = std::chrono::steady_clock;

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess)
    throw Error("dist: ", call, " failed: ", ncclGetErrorString(r),
                Hint("NCCL_DEBUG=INFO prints NCCL's own account of the failure"));
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
};

bool NcclCommunicator::available() {
  return true;
}

NcclCommunicator::NcclCommunicator(Communicator& boot) : boot_(boot), impl_(std::make_unique<Impl>()) {
  ncclUniqueId id{};
  if (boot.is_root()) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  boot.broadcast(&id, sizeof(id), 0, "NCCL unique id");
  check_nccl(ncclCommInitRank(&impl_->comm, boot.size(), id, boot.rank()), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_ && impl_->comm) ncclCommDestroy(impl_->comm);
}

void NcclCommunicator::allreduce_sum(float* device_data, int64_t n, void* stream, bool average) {
  if (n < 0 || (n > 0 && device_data == nullptr)) throw Error("dist: nccl allreduce_sum: bad buffer of ", n, " floats");
  if (n == 0) return;
  check_nccl(ncclAllReduce(device_data, device_data, size_t(n), ncclFloat32, average ? ncclAvg : ncclSum, impl_->comm,
                           static_cast<cudaStream_t>(stream)),
             "ncclAllReduce");
}

void NcclCommunicator::synchronize(void* stream, const char* what) {
  const auto t0 = Clock::now();
  int64_t sleep_us = 0;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(static_cast<cudaStream_t>(stream));
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady)
      throw Error("dist: CUDA error while waiting for NCCL (", what ? what : "", "): ", cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(impl_->comm, &async);
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (async != ncclSuccess || waited > boot_.timeout_s()) {
      ncclCommAbort(impl_->comm);
      impl_->comm = nullptr;
      boot_.abort(async != ncclSuccess ? 1 : 124,
                  std::string("NCCL ") + (what ? what : "operation") +
                      (async != ncclSuccess ? std::string(" failed: ") + ncclGetErrorString(async)
                                            : " timed out after " + std::to_string(int(boot_.timeout_s())) +
                                                  " s; a rank may have died or skipped it"));
    }
    sleep_us = std::min<int64_t>(sleep_us * 2 + 10, 200);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
}

}  // namespace unmask::dist
